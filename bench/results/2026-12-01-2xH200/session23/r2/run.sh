# s23 r2 (2×H200): where mokc-small's step goes op by op at EP2: 9147800 + optimes.diff (diagnostic, not
# committed: stream events between the ops of one micro-batch, step 6's first, rank 0), 8 steps.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
git apply .deps/optimes.diff || exit 1
make -j30 GIT_REVISION=$(cat .deps/rev)-optimes mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=8 --set train.warmup_steps=2 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.metrics_path=$OUT/train.jsonl > $OUT/train.log 2>&1
echo "train rc $? $(el)"
grep -E '^OPTIMES' $OUT/train.log; grep -E '^OPT ' $OUT/train.log | sort -t= -k2 -g -r | head -60
grep -E '^steps |GPU time' $OUT/train.log
