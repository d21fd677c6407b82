# s22 r8 (1×H200): the head's backward in passes of at most 3 GiB of bf16 dlogits (one pass a micro-batch at
# mokc-small's sizes). gpu_model (the backward in 21-row passes too), then mokc-small-1gpu 30 steps as r6's new runs:
# the loss curve must equal r6's bit for bit (the same code path at these sizes).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
make -j16 GIT_REVISION=$(cat .deps/rev)-passes mokc build/mokc_tests > /tmp/b.log 2>&1 || { tail -5 /tmp/b.log; exit 1; }
MOKC_BIN=./mokc build/mokc_tests gpu_model > $OUT/tests-gpu_model.log 2>&1; tail -8 $OUT/tests-gpu_model.log
scripts/repo-tokens.sh /tmp/repo.h5 || exit 1
timeout 60 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set train.warmup_steps=5 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train.jsonl > $OUT/train.log 2>&1
grep -E '^steps |^  GPU|^GPU memory plan' $OUT/train.log
g() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1"; }
[ "$(g $OUT/train.jsonl)" = "$(g bench/results/2026-12-01-1xH200/session22/r6/train-new1.jsonl)" ] && echo "losses: bitwise equal to r6" || echo "losses: DIFFER from r6"
