# s23 r3 (2×H200): 9147800. Why the flash backward takes 1.76 ms a layer in mokc-small's training (r2) against the
# bench's 1.43: its shape (B=2 Hq=32 Hkv=4: 8 query heads a KV head, not 4) or the clock under training's load.
# bench attn at both shapes (20 and 200 iterations), ncu of one backward kernel at each (no clock lock, no cache
# flush), and the SM clock and power sampled during 12 steps of mokc-small at EP2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
for it in 20 200; do
  for shp in "--batch 4 --heads 16" "--batch 2 --heads 32" "--batch 4 --heads 32"; do
    ./mokc bench attn --impl flash --kv-heads 4 $shp --iters $it > /tmp/a.log 2>&1 || { tail -5 /tmp/a.log; }
    echo "iters $it $shp: $(grep '^flash' /tmp/a.log | head -1)"; grep '^{' /tmp/a.log | head -1 >> $OUT/bench-attn.jsonl
  done
done
echo "benches $(el)"
for shp in "--batch 4 --heads 16" "--batch 2 --heads 32"; do
  timeout 120 ncu --clock-control none --cache-control none -k regex:flash_bwd_sm90 --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    ./mokc bench attn --impl flash --kv-heads 4 $shp --iters 1 --warmup 5 > "$OUT/ncu-bwd-${shp// /}.txt" 2>&1
  echo "== ncu $shp rc $? $(el)"
  grep -E 'Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache|L2 Cache Throughput|DRAM Through|Stall|Issued Warp|Warp Cycles Per Issued' "$OUT/ncu-bwd-${shp// /}.txt" | head -24
done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader,nounits -lms 250 > $OUT/smi.csv &
smi=$!
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=12 --set train.warmup_steps=2 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 > $OUT/train.log 2>&1
echo "train rc $? $(el)"; kill $smi
grep -E '^steps |GPU time' $OUT/train.log
# the samples of the last 60 % of the run (training steps, past start-up)
n=$(wc -l < $OUT/smi.csv); tail -n $(( n * 6 / 10 )) $OUT/smi.csv | awk -F', ' '{c[$1]+=$2; p[$1]+=$3; k[$1]++} END {for (g in c) printf "GPU %s: SM clock %.0f MHz, power %.0f W over %d samples\n", g, c[g]/k[g], p[g]/k[g], k[g]}'
echo "total $(el)"
