# s21 r5: the full scripts/gpu-check.sh at HEAD (the 64-byte-swizzle panels in the shared producer code, the
# step timer's marks in training, run records, mokc-small at 2 x 4 sequences a step, gpu-train-small at one).
# Expected: all pass; Qwen-like ~1.55 / 4.6 ms, Kimi-like ~8.0 / 28.5 (kernels unchanged since s20).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 GIT_REVISION=$(cat .deps/rev)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
(export OUT=/tmp/gc; timeout 540 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -24
grep -E "^FAIL|^skip" /tmp/gc/tests.log | head -8
gzip -c /tmp/gc.log > $OUT/gpu-check.log.gz; gzip -c /tmp/gc/tests.log > $OUT/tests.log.gz
for f in /tmp/gc/bench-qwen3-30b-a3b-like.jsonl /tmp/gc/bench-kimi-k2-like.jsonl /tmp/gc/bench-gemm.jsonl /tmp/gc/train-small-8192.jsonl; do [ -f $f ] && cp $f $OUT/; done
echo "total $(el)"
