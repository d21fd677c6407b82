# Prepared in s26 for a session with the 2-GPU kind (2×H200), after s24's and s25's prepared calls: mokc-small at
# EP2 with bf16 AdamW moments (train.optimizer_state, s26 r9), 100 steps, against s24's bench.sh fp32 run of the
# same config: the step (predicted −12 ms: the optimizer 49 → ≈ 37 ms a step), the memory plan (≈ −22 GB a rank),
# and the loss curve (whether mokc-small.json may take bf16 moments: within ≈ 1e-3 of fp32's at every step).
# Copy to .deps/, set .deps/rev to the commit, and run with carry [".deps"] on nvidia-h200-x2 (≈ 5 minutes).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
make data > /dev/null 2>&1 && ./mokc prepare --text data/devils-dictionary.txt --vocab 151936 --out data/devil-v151936.h5 \
  > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for st in bf16 fp32; do
  timeout 280 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.optimizer_state=$st --set data.val= \
    --set log.metrics_path=$OUT/train-$st.jsonl > $OUT/train-$st.log 2>&1
  echo "$st rc $? $(el): $(grep -E '^steps ' $OUT/train-$st.log)"; grep -E "GPU memory plan" $OUT/train-$st.log | head -1
done
python3 - "$OUT" <<'PY'
import json, sys
rec = lambda t: [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], t)) if '"step"' in l]
a, b = rec('fp32'), rec('bf16')
worst = max(abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(a, b))
mean = lambda r, k: sum(x[k] for x in r if 20 <= x['step'] <= 100) / len([x for x in r if 20 <= x['step'] <= 100])
print('steps 20-100: fp32 %.1f ms (MFU %.3f), bf16 %.1f ms (MFU %.3f); worst relative loss difference %.2e'
      % (mean(a, 'ms'), mean(a, 'mfu'), mean(b, 'ms'), mean(b, 'mfu'), worst))
PY
echo "total $(el)"
