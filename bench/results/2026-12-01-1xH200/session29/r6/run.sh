# s29 r6: the Qwen-like layer at EP1 with 8192 and 16384 tokens (mokc-small's micro-batch of 2 and of 4 sequences),
# scored and collapsed, adding into the gradients as training's later micro-batches do: where does r4's -7.5 % a
# token come from (the kernels' fuller tiles, or the per-call passes)? Predicted: the passes scale with the tokens,
# the kernels gain ≈ 5 % a token, the fixed per-call costs (launches, barriers, schedule) ≈ 0.05 ms.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
for t in 8192 16384; do for m in "" "--collapse"; do
  n=$t${m:+-collapse}
  timeout 100 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens $t --accumulate $m \
    --record $OUT/bench-$n.jsonl > $OUT/bench-$n.log 2>&1; echo "$n rc $?"
done; done
python3 - "$OUT" <<'PY'
import json, sys, glob
keys = ['fwd_router_gemm_ms', 'fwd_route_ms', 'fwd_schedule_ms', 'fwd_kernel_ms', 'fwd_combine_ms', 'bwd_dy_rows_ms',
        'bwd_kernel_ms', 'bwd_scatter_ms', 'bwd_route_ms', 'bwd_router_gemms_ms']
print('%-16s %8s %8s ' % ('tokens', 'fwd', 'fwd+bwd') + ' '.join('%9s' % k.replace('_ms', '')[:9] for k in keys))
for t in ('8192', '8192-collapse', '16384', '16384-collapse'):
    r = [json.loads(l) for l in open('%s/bench-%s.jsonl' % (sys.argv[1], t))]
    m = next(x for x in r if x.get('impl') == 'mok' and 'fwd_ms' in x)
    p = next(x for x in r if x.get('bench') == 'moe_phases' or 'fwd_kernel_ms' in x)
    print('%-16s %8.3f %8.3f ' % (t, m['fwd_ms'], m['fwdbwd_ms']) + ' '.join('%9.4f' % p.get(k, 0) for k in keys))
PY
