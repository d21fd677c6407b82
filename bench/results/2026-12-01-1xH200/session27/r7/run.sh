# s27 r7 (1xH200): r6 again with the epilogue's arithmetic made cheap: the tiles' sums of exp by ex2.approx (one
# MUFU op) and the codes rounded by adding 1.5 * 2^23 (no conversion instruction). A = HEAD (b182aed), B = the tree,
# C = B with the epilogue's statistics and codes replaced by constants (a diagnostic, diagnostic-C.diff against r7's B: its
# losses mean nothing): what the logits GEMM costs without them.
# r6: head logits 1.92 -> 2.31 ms a chunk (predicted ~1.65), cross-entropy 0.766 -> 0.375 (predicted ~0.35).
# Predicted: B's head logits ~2.0 ms a chunk; C's ~1.9 if the mainloop with a K-major B runs as the N-major one.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
for v in A C; do
  rm -rf /tmp/$v; mkdir -p /tmp/$v && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/$v -xf -
  cp -r .deps/ab-$v/* /tmp/$v/
  (cd /tmp/$v && make -j5 GIT_REVISION=$rev-$v mokc > /tmp/b$v.log 2>&1) &
done
make -j6 GIT_REVISION=$rev-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; for v in A C; do [ -x /tmp/$v/mokc ] || { echo "$v build failed"; tail -5 /tmp/b$v.log; exit 1; }; done
rm -rf /tmp/B; ln -s $PWD /tmp/B
echo "built $(el)"
for s in gpu_gemm_sm90 gpu_cross gpu_model; do
  MOKC_BIN=./mokc timeout 300 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 /tmp/test-$s.log) $(el)"
  grep -E "FAIL" /tmp/test-$s.log | head -8
done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for i in 1 2; do for v in A B C; do
  timeout 100 /tmp/$v/mokc train configs/mokc-small-1gpu.json --set train.steps=12 --set train.warmup_steps=2 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=8 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1
  echo "$v$i rc $? $(el): $(grep -E '^steps ' /tmp/train-$v$i.log)"
done; done
python3 - <<'PY'
import json
def rec(f): return [json.loads(l) for l in open(f) if '"step"' in l]
R = {t: rec('/tmp/train-%s.jsonl' % t) for t in ('A1', 'B1', 'C1', 'A2', 'B2', 'C2')}
sel = lambda r: [x for x in r if x['step'] >= 4 and x['step'] != 8]
ms = lambda r: sum(x['ms'] for x in sel(r)) / max(1, len(sel(r)))
L = lambda r: [x['loss'] for x in r]
print('bitwise: A1=A2 %s, B1=B2 %s' % (L(R['A1']) == L(R['A2']), L(R['B1']) == L(R['B2'])))
print('largest |loss B - A| / A over the steps: %.3g' % max(abs(b - a) / a for a, b in zip(L(R['A1']), L(R['B1']))))
for t in R: print(t, 'steps 4-12 but 8: %.1f ms' % ms(R[t]))
ops = lambda r: next((x['op_ms'] for x in r if 'op_ms' in x), {})
o = {t: ops(R[t]) for t in R}
print('%-22s' % 'op' + ''.join('%8s' % t for t in R) + '  (ms a step, step 8)')
for k in o['A1']:
    if o['A1'][k]['ms'] > 0.5: print('%-22s' % k + ''.join('%8.2f' % o[t].get(k, {'ms': 0})['ms'] for t in R))
PY
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls train-*.log train-*.jsonl test-*.log)
echo "total $(el)"
