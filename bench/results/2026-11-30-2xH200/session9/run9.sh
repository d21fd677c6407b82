# s9 call 9 (nvidia-h200-x2, 0e8f9a6: the kernels of d1483aa): the 2-GPU tests (gpu_train), the EP2 check with the
# watchdog, and the MoE layer benchmark (both shapes, mok and unfused) at EP2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1; echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu_train.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-gpu_train.log | head
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json > /tmp/b.log 2>&1; echo "bench $sh rc=$? $(el)"
grep '^{' /tmp/b.log > $OUT/bench-$sh.jsonl; grep '"bench": "moe"' /tmp/b.log | grep -o '"impl": "[a-z]*"\|"fw[^,]*ms[^,]*\|"dispatch_gbs[^,]*\|"mok_mib[^,}]*' | tr '\n' ' '; echo; done
TIMING=0 timeout 100 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS, $(grep -c FAIL $OUT/ep2-check.log) FAIL; $(grep '^watchdog:' $OUT/ep2-check.log) $(el)"
echo "total $(el)"
