# s11 call 4 (nvidia-h200-x2): the weight-gradient epilogue when the gradients are written: TMA stores for its
# first two 64-column parts and register stores for the last two (.deps/v.diff over 7f8fca7; no wait on its own
# staging inside a task), against 7f8fca7 (four TMA parts) and against 7f8fca7 with register stores only (g_tma
# forced off). mok suite on the new tree, then the three interleaved, both shapes, twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base /tmp/reg; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; tar cf - . | (cd /tmp/reg && tar xf -); make -j10 mokc > /tmp/base.log 2>&1 || echo "base build failed"; cd /tmp/reg && sed -i 's/tm.g_tma = p.overwrite \&\&/tm.g_tma = 0 \&\& p.overwrite \&\&/' kernels/mok/mok_backward_sm90.cu && grep -c "tm.g_tma = 0 &&" kernels/mok/mok_backward_sm90.cu && make -j10 mokc > /tmp/reg.log 2>&1 || echo "reg build failed") &
make -j12 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-mok.log | head
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for v in . /tmp/base /tmp/reg; do
tag=$(case $v in .) echo hyb;; /tmp/base) echo 7f8fca7;; *) echo reg;; esac)
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT/trace-kimi-hyb.log 2>&1
grep -A8 "backward trace, ep_rank 0" $OUT/trace-kimi-hyb.log | cut -c1-220
echo "total $(el)"
