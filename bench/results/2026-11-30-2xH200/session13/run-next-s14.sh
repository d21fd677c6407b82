# Prepared in s13 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh and
# session13/router-rs.diff to .deps/rs.diff. HEAD has the router's RS GEMM (29b6913) and, since r9's full check,
# one more test case (one-K-block tiles on more tiles than SMs, 205c4b8: never run on a GPU). The call runs the
# gpu_gemm suite, then three interleaved A/B pairs a shape against HEAD minus the RS diff (the old kernel), because
# s13 measured the layer with the new kernel in one pair only, on a slow machine.
# Expected: router phases Kimi-like fwd 0.46 -> 0.39 ms, bwd 0.86 -> 0.81; Qwen-like 0.12 -> 0.105, 0.21 -> 0.205;
# Kimi-like layer fwd about -0.07 ms, fwd+bwd about -0.12 ms; Qwen-like fwd about -0.015 ms.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/rs.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-head.log 2>&1 || { echo "build head failed"; exit 1; }
wait; [ -x /tmp/base/build/mokc ] || exit 1; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 120 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1
echo "tests gpu_gemm rc=$?: $(tail -1 $OUT/test-gpu_gemm.log) $(el)"; grep -m5 -i fail $OUT/test-gpu_gemm.log
for rep in 1 2 3; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do tag=head; [ $v = . ] || tag=base
  timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
