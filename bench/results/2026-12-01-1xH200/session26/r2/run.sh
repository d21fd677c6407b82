# s26 r2 (1xH200): A = HEAD; B = the routing passes (route kernel's values in registers, histogram by id groups,
# aux sums' loads batched) and the router's dx written by its GEMM then added in the scatter pass. B should be
# bitwise neutral: tests, then bench A B A B, ncu of B's small kernels, mokc-small-1gpu A B A B (losses equal).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/A -xf -
cp -r .deps/ab-A/* /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1) &
make -j10 GIT_REVISION=$rev-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
rm -rf /tmp/B; ln -s $PWD /tmp/B
echo "built $(el)"
for s in gpu_moe_unfused mok gpu_model; do
  MOKC_BIN=./mokc timeout 300 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 /tmp/test-$s.log) $(el)"
  grep -E "FAIL" /tmp/test-$s.log | head -6
done
Q=configs/bench/qwen3-30b-a3b-like.json; K=configs/bench/kimi-k2-like.json
timeout 120 ./mokc bench moe --check --collapse --config $Q --tokens 2048 > /tmp/check-q.log 2>&1
echo "check Q collapse rc $? $(el)"; grep -iE "pass|fail|bitwise" /tmp/check-q.log | head -5
timeout 120 ./mokc bench moe --check --config configs/tiny.json > /tmp/check-tiny.log 2>&1
echo "check tiny rc $? $(el)"; grep -iE "pass|fail|cpu" /tmp/check-tiny.log | head -5
js() { grep -h '"fwd_ms"' $1 | grep '"mok"' | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("fwd %.3f fwdbwd %.3f" % (r["fwd_ms"], r["fwdbwd_ms"]), end=" ")'; grep -h 'moe_phases' $1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print(" ".join("%s %.3f" % (k[:-3], r[k]) for k in ("fwd_router_gemm_ms","fwd_route_ms","fwd_schedule_ms","bwd_route_ms","bwd_router_gemms_ms","bwd_scatter_ms")))'; }
for i in 1 2; do for v in A B; do
  timeout 100 /tmp/$v/mokc bench moe --config $Q --impl mok --iters 20 --collapse --accumulate > /tmp/bench-Qca-$v$i.log 2>&1
  echo "Qca $v$i rc $? $(el): $(js /tmp/bench-Qca-$v$i.log)"
  timeout 100 /tmp/$v/mokc bench moe --config $Q --impl mok --iters 20 > /tmp/bench-Q-$v$i.log 2>&1
  echo "Q   $v$i rc $? $(el): $(js /tmp/bench-Q-$v$i.log)"
done; done
for v in A B; do
  timeout 100 /tmp/$v/mokc bench moe --config $K --impl mok --iters 20 > /tmp/bench-K-$v.log 2>&1
  echo "K   $v rc $? $(el): $(js /tmp/bench-K-$v.log)"
done
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base -k 'regex:^(?!mok_).*' \
  ./mokc bench moe --config $Q --impl mok --iters 2 --warmup 1 --collapse --accumulate > /tmp/ncu-B.csv 2> /tmp/ncu.err
echo "ncu rc $? $(el)"; python3 .deps/ncu_sum.py /tmp/ncu-B.csv | head -24
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for i in 1 2; do for v in A B; do
  timeout 100 /tmp/$v/mokc train configs/mokc-small-1gpu.json --set train.steps=10 --set train.warmup_steps=2 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.metrics_path=/tmp/train-$v$i.jsonl \
    > /tmp/train-$v$i.log 2>&1
  echo "$v$i rc $? $(el): $(grep -E '^steps ' /tmp/train-$v$i.log)"
done; done
python3 - <<'PY'
import json
def rec(f): return [json.loads(l) for l in open(f) if '"step"' in l]
ms = lambda r: sum(x['ms'] for x in r if 6 <= x['step'] <= 10) / 5
moe = lambda r: sum(x['gpu_ms']['moe'] for x in r if 6 <= x['step'] <= 10) / 5
for i in (1, 2):
    a, b = rec('/tmp/train-A%d.jsonl' % i), rec('/tmp/train-B%d.jsonl' % i)
    print('pair %d: losses bitwise equal: %s, aux equal: %s; steps 6-10 ms A %.1f B %.1f; moe A %.1f B %.1f'
          % (i, [x['loss'] for x in a] == [y['loss'] for y in b], [x['aux_loss'] for x in a] == [y['aux_loss'] for y in b],
             ms(a), ms(b), moe(a), moe(b)))
PY
cp /tmp/ncu-B.csv $OUT/
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls bench-*.log train-*.log train-*.jsonl test-*.log check-*.log)
echo "total $(el)"
