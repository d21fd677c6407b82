# s19 r7: at ab3c740: the EP2 check with its timing section (TIMING=1: the repaired tile loop), the gpu_train
# and kernel_report suites, the mapping and fallback checks. Expected: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
for s in kernel_report gpu_train; do timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
timeout 200 bash scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 rc=$? $(tail -1 $OUT/ep2-check.log) $(el)"
grep -E "FAIL|^== mok timing|^mok " $OUT/ep2-check.log | head -12
for c in gpu-mapping-check gpu-lsa-fallback-check; do timeout 60 bash scripts/$c.sh > $OUT/$c.log 2>&1; echo "$c rc=$? $(tail -1 $OUT/$c.log) $(el)"; done
(cd $OUT && tar czf logs.tgz *.log && rm -f *.log)
echo "total $(el)"
