# s27 r11 (1xH200): mokc-small-1gpu as configured (bf16 moments), 100 steps at a161a0f, the number s26 r10 measured
# at 9036a19 (steps 20-100: 411.7 ms, MFU 43.5 %). Predicted: ≈ −2.5 ms a step (the logits as codes), ≈ 43.8 %.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
timeout 200 ./mokc train configs/mokc-small-1gpu.json --set train.steps=100 --set data.train=/tmp/repo.h5 \
  --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train.jsonl > $OUT/train.log 2>&1
echo "train rc $? $(el)"
python3 - "$OUT" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1] + '/train.jsonl') if '"step"' in l]
w = [x for x in r if 20 <= x['step'] <= 100]
print('steps 20-100: %.1f ms a step, MFU %.2f %%; steps 91-100 mean loss %.4f' % (sum(x['ms'] for x in w) / len(w),
      100 * sum(x['mfu'] for x in w) / len(w), sum(x['loss'] for x in r if x['step'] > 90) / 10))
PY
