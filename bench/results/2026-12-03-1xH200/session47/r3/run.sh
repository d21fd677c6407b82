# s47 r3, one H200: the run records on a full disk (run_record_flush): cli.bench_record_on_a_full_disk (bench moe's
# record capped at 1 KiB: exit 1, named, the file left empty), train.test_run_record_on_a_full_disk on the GPU
# backend, then a plain `bench moe --record` and a 30-step GPU train of configs/tiny.json (the corpus carried in) whose records must parse line by line.
# Predicted: all pass; both records whole.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for s in cli train ckpt; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "FAIL|^skip" $OUT/test-$s.log | head -5
done
build/mokc bench moe --config configs/tiny.json --record $OUT/bench-tiny.jsonl > $OUT/bench-tiny.log 2>&1; echo "bench rc $?"
build/mokc train configs/tiny.json --set train.steps=30 --set log.metrics_path=$OUT/train-tiny.jsonl > $OUT/train-tiny.log 2>&1
echo "train rc $?: $(tail -1 $OUT/train-tiny.log)"
for r in $OUT/bench-tiny.jsonl $OUT/train-tiny.jsonl; do python3 -c "
import json,sys; n=sum(1 for l in open(sys.argv[1]) if json.loads(l) is not None); print(sys.argv[1].split('/')[-1], n, 'lines, all parse')" $r; done
echo "total $(el)"
