# s9 call 10 (nvidia-h200-x2, warm): r9's Kimi-like fwd+bwd (31.49 ms) against r6's (29.37-29.43 at 291b2a6): the
# machine or the code since? HEAD (0e8f9a6) against 291b2a6 (the kernels and host code of .deps/v.diff undone), mok only,
# interleaved twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j14 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j16 mokc > /tmp/head.log 2>&1 || echo "head build failed"; wait; echo "built $(el)"
for rep in 1 2; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok > /tmp/b.log 2>&1
echo "$v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done
