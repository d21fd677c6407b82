# s34 r1: the full check at c65ab03 (every test: gpu_attention's grad_part and gpu_model ran on no GPU yet); then
# the flash attention alone at training's shape: mokc-small-1gpu's attention backward takes 55.7 ms a step over 16
# calls (3.48 ms a call at B=4 T=4096 Hq=32 Hkv=4, 395 TFLOP/s; forward 1.01 ms, 544) while bench attn's default
# (Hq=16) gives 1.41 ms (486) and 0.444 (620). Is it Hq=32 (a GQA group of 8: twice the steps a block, the same
# 512 blocks) or the training step's power? Predicted: tests pass (186); bench at Hq=32 ≈ 2.85 / 0.89 ms if the
# group is not the cause.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 300 build/mokc_tests > $OUT/tests.log 2>&1; echo "tests rc $? $(el): $(tail -1 $OUT/tests.log)"
grep -h "^FAIL\|fail " $OUT/tests.log | head -20
for shape in "--batch 4 --heads 16" "--batch 4 --heads 32" "--batch 2 --heads 32" "--batch 4 --heads 32" "--batch 8 --heads 16"; do
  ./mokc bench attn --impl flash --iters 30 $shape > /tmp/a.log 2>&1; echo "bench attn $shape rc $?" >> $OUT/bench-attn.log
  cat /tmp/a.log >> $OUT/bench-attn.log
  python3 -c "
import json,sys
for l in open('/tmp/a.log'):
    if l.startswith('{'):
        r=json.loads(l); print('$shape', {k:r[k] for k in r if k in ('impl','fwd_ms','bwd_ms','fwd_tflops','bwd_tflops')})"
done
echo "total $(el)"
