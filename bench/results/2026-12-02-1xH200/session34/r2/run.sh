# s34 r2: why the flash backward runs at 426-433 TFLOP/s at B=4 Hq=32 Hkv=4 (training's shape on one GPU, and
# EP2's at micro_batch 4) but 475-482 at B=8 Hq=16, B=2 Hq=32 and B=4 Hq=16 (r1). Shapes of B=4 Hq=32's work with
# other groups (G = Hq/Hkv) and item counts (T/128 * B * Hkv), the SM clock and power sampled while each runs; then
# ncu's DRAM, L2 and SM figures of one backward kernel at three shapes. Predicted: nothing written (a probe).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
bench() {
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 > /tmp/smi.log 2>&1 & sp=$!
  ./mokc bench attn --impl flash --iters 40 $1 > /tmp/a.log 2>&1; rc=$?
  kill $sp; echo "bench attn $1 rc $rc" >> $OUT/bench-attn.log; cat /tmp/a.log >> $OUT/bench-attn.log
  python3 - "$1" <<'PY'
import json, sys
r = [json.loads(l) for l in open('/tmp/a.log') if l.startswith('{') and '"flash"' in l][0]
s = [[float(x) for x in l.split(',')] for l in open('/tmp/smi.log') if l.count(',') == 1]
hot = [x for x in s if x[1] > 300]
G = r['Hq'] // r['Hkv']; items = (r['T'] // 128) * r['B'] * r['Hkv']
print('%-40s G %2d items %4d | fwd %.4f ms %5.1f | bwd %.4f ms %5.1f TFLOP/s | clock %4.0f MHz power %3.0f W (%d samples > 300 W)'
      % (sys.argv[1], G, items, r['fwd_ms'], r['fwd_tflops'], r['bwd_ms'], r['bwd_tflops'],
         sum(x[0] for x in hot) / max(len(hot), 1), sum(x[1] for x in hot) / max(len(hot), 1), len(hot)))
PY
}
for shape in "--batch 4 --heads 32 --kv-heads 4" "--batch 8 --heads 16 --kv-heads 4" "--batch 4 --heads 32 --kv-heads 8" \
             "--batch 8 --heads 16 --kv-heads 2" "--batch 2 --heads 64 --kv-heads 8" "--batch 4 --heads 32 --kv-heads 2" \
             "--batch 16 --heads 8 --kv-heads 1" "--batch 2 --heads 32 --kv-heads 4" "--batch 4 --heads 32 --kv-heads 4"; do
  bench "$shape"
done
echo "sweep done $(el)"
for shape in "--batch 4 --heads 32 --kv-heads 4" "--batch 8 --heads 16 --kv-heads 4" "--batch 4 --heads 32 --kv-heads 8"; do
  timeout 120 ncu --clock-control none -k regex:"flash_bwd_sm90" -s 2 -c 1 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,sm__cycles_active.avg \
    ./mokc bench attn --impl flash --iters 2 --warmup 1 $shape > /tmp/n.log 2>&1; echo "ncu $shape rc $? $(el)"
  cat /tmp/n.log >> $OUT/ncu.log
  grep -E "gpu__time|dram__bytes|lts__t|sm__" /tmp/n.log | sed 's/  */ /g' | cut -c1-110
done
echo "total $(el)"
