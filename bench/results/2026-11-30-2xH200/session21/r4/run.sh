# s21 r4: what batch a step takes mokc-small (EP2, seq 4096) toward issue 11's 45 % MFU: at one sequence a GPU a
# step (r3: 163.6 ms, 22.6 %) the optimizer is 30 % of the step. Predicted: micro_batch 2 x grad_accum 4 (32768
# tokens a GPU a step) ~ 35 %; micro_batch 1 x grad_accum 8 ~ 32 %; memory at micro_batch 2 ~ 122 GiB a rank.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
find src kernels tests docs scripts -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
     -o -name '*.md' -o -name '*.sh' \) -print0 | sort -z | xargs -0 cat > /tmp/repo-text.txt
./mokc prepare --text /tmp/repo-text.txt --vocab 151936 --out /tmp/repo.h5 --val-fraction 0 > /dev/null || exit 1
run() { # name micro_batch grad_accum steps
  ( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0; sleep 1; done ) > /tmp/mem-$1.txt &
  m=$!
  timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.micro_batch=$2 --set train.grad_accum=$3 \
    --set train.steps=$4 --set train.warmup_steps=5 --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 \
    --set log.metrics_path=$OUT/train-$1.jsonl > $OUT/train-$1.log 2>&1 || { echo "$1 failed"; tail -5 $OUT/train-$1.log; }
  kill $m
  echo "$1 (mb $2 x ga $3): $(grep -E '^steps [0-9]+-' $OUT/train-$1.log) peak $(sort -n /tmp/mem-$1.txt | tail -1) MiB $(el)"
  grep '^  GPU time' $OUT/train-$1.log; grep '^GPU memory plan' $OUT/train-$1.log | head -1
}
run mb2-ga4 2 4 40
run mb1-ga8 1 8 40
run mb2-ga1 2 1 60
echo "total $(el)"
