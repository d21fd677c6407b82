# s10 call 4 (nvidia-h200-x2, warm): r3's Qwen-like backward kernel rose 0.11 ms (phases pass) while the timed fwd+bwd
# fell 0.02: traces of both trees (the dgrad producers' wait shows the dispatch's pace) and two more timed pairs.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j14 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j16 mokc > /tmp/head.log 2>&1 || echo "head build failed"; wait; echo "built $(el)"
for v in . /tmp/base; do
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > /tmp/t.log 2>&1
cp /tmp/t.log $OUT/trace-qwen-$([ $v = . ] && echo head || echo base).log
echo "== $v"; grep -A7 "backward trace, ep_rank 0" /tmp/t.log | head -8; done
for rep in 3 4; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo head || echo 15d3e4a)\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "qwen $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_dy_[a-z]*_ms[^,]*\|"bwd_kernel_ms[^,]*\|"bwd_barrier_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done
echo "total $(el)"
