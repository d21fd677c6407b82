# s28 r5: issue 11's number at EP2 at HEAD (b978c76's gradient norm, 68032dd's RMSNorm finish), mokc-small as
# configured, 100 steps on the repository's text; then the Qwen-like layer at EP2 collapsed (as training drives it,
# the hot experts spread E/k apart: 4 a rank) and scored, writing and adding. Predicted: ≈ 727 ms a step (732 - 3 - 2).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
timeout 150 mpirun -np 2 ./mokc train configs/mokc-small.json --set data.train=/tmp/repo.h5 --set data.val= \
  --set log.every=10 --set log.profile_step=15 --set log.metrics_path=$OUT/train-mokc-small-mok.jsonl > $OUT/train-mokc-small-mok.log 2>&1
echo "train rc $? $(el)"; grep -E '^steps [0-9]+-|^  GPU time' $OUT/train-mokc-small-mok.log
Q=configs/bench/qwen3-30b-a3b-like.json
for opt in "" "--accumulate" "--collapse" "--collapse --accumulate"; do
  tag=$(echo "q $opt" | tr -d '-' | tr ' ' '_')
  timeout 60 mpirun -np 2 ./mokc bench moe --config $Q --impl mok --iters 20 $opt > $OUT/bench-$tag-ep2.log 2>&1
  echo "== $opt rc $? $(el)"; grep -E '^mok ' $OUT/bench-$tag-ep2.log | head -2
done
sed -n '/op by op/,/^  embedding /p' $OUT/train-mokc-small-mok.log | head -30
echo "total $(el)"
