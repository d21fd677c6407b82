# s21 r6: the review fixes on the GPU (host code only: the step timer's first and last marks, bench records
# opened by the launcher's rank 0 early): the gpu_train suite, bench moe (Qwen-like EP2) into a record, and
# mokc-small at its configured 2 x 4 sequences for 30 steps (summary of steps 16-30; parts should still sum to the step).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 GIT_REVISION=$(cat .deps/rev)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests gpu_train > $OUT/test-gpu-train.log 2>&1
echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu-train.log) $(el)"; grep -E "FAIL" $OUT/test-gpu-train.log | head -6
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --record $OUT/bench-moe-qwen-ep2.jsonl > $OUT/bench.log 2>&1; echo "bench rc=$? lines $(wc -l < $OUT/bench-moe-qwen-ep2.jsonl) $(el)"
find src kernels tests docs scripts -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
     -o -name '*.md' -o -name '*.sh' \) -print0 | sort -z | xargs -0 cat > /tmp/repo-text.txt
./mokc prepare --text /tmp/repo-text.txt --vocab 151936 --out /tmp/repo.h5 --val-fraction 0 > /dev/null || exit 1
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=30 --set train.warmup_steps=5 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-mokc-small.jsonl > $OUT/train.log 2>&1
echo "train rc=$? $(el)"; grep -E '^step +(10|30)/|^steps |^  GPU' $OUT/train.log | cut -c1-220
python3 - $OUT/train-mokc-small.jsonl <<'PY'
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
for r in rows[-3:]: print(r['step'], r['ms'], round(sum(r['gpu_ms'].values()),1), r['gpu_ms'])
PY
echo "total $(el)"
