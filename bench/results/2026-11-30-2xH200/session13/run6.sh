# s13 call 6 (nvidia-h200-x2, one GPU): why the RS kernel's dx variant <0,1,1,1> is 3-5x slower: ncu stall detail and the
# SASS lines with the most stall samples (Qwen-like shape, the 4th f32x3 launch of an unfused fwd+bwd iteration).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { echo "build failed"; exit 1; }; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none -k regex:gemm_f32x3_sm90 --launch-skip 3 -c 1 --section WarpStateStats \
  --section SourceCounters --section MemoryWorkloadAnalysis -o /tmp/dx ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json \
  --impl unfused --ep 1 --tokens 8192 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-dx.log 2>&1; echo "ncu rc=$? $(el)"
ncu -i /tmp/dx.ncu-rep --print-details all > $OUT/ncu-dx-details.txt 2>&1
grep -E 'gemm_f32x3|Duration|Stall [A-Z]|Warp Cycles Per Issued|L2 Hit|Mem Busy|DRAM Through' $OUT/ncu-dx-details.txt | head -40
ncu -i /tmp/dx.ncu-rep --page source --print-source sass --csv > /tmp/src.csv 2>&1; echo "source rc=$? $(wc -l < /tmp/src.csv) lines"
python3 - /tmp/src.csv <<'PY' | tee $OUT/dx-hot-sass.txt
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if any('Source' == c for c in r))
h = rows[hi]; data = rows[hi + 1:]
src = h.index('Source'); col = next(i for i, c in enumerate(h) if c.startswith('Warp Stall Sampling (All'))
tot = sum(float(r[col] or 0) for r in data if len(r) > col)
print('columns:', [c for c in h if 'Stall' in c][:6], 'total samples', tot)
for r in sorted(data, key=lambda r: -float(r[col] or 0))[:30]:
    print(f"{float(r[col] or 0):8.0f} {100*float(r[col] or 0)/tot:5.1f}%  {r[0]:>6} {r[src][:110]}")
PY
echo "total $(el)"
