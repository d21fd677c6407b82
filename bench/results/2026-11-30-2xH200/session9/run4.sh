# s9 call 4 (nvidia-h200-x2 held, one GPU used; a39a7c9): every kernel of the mok layer's fwd+bwd at EP1 with the
# EP2 per-GPU work (E halved) under ncu (duration only, one pass): where the time outside the two megakernels goes.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
for c in "qwen3-30b-a3b-like 64" "kimi-k2-like 192"; do set -- $c
CUDA_VISIBLE_DEVICES=0 timeout 240 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum ./mokc bench moe --config configs/bench/$1.json --impl mok --iters 2 --warmup 0 --set moe.num_experts=$2 > $OUT/ncu-$1.csv 2> $OUT/ncu-$1.err
echo "== $1 rc=$? $(el)"
python3 - $OUT/ncu-$1.csv <<'PY'
import csv, sys, statistics as st
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; nm = h.index('Kernel Name'); du = h.index('gpu__time_duration.sum')
d = {}
for r in rows[2:]:
    try: d.setdefault(r[nm][:100], []).append(float(r[du]))
    except ValueError: pass
unit = rows[1][du]
for k, v in sorted(d.items(), key=lambda kv: -st.median(kv[1])):
    print(f"{st.median(v):10.1f} {unit} x{len(v):4d}  {k}")
PY
done
echo "total $(el)"
