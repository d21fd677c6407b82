# s22 r2 (1×H200): the LM head's backward once a micro-batch (all rows' bf16 dlogits kept, one dgrad and one
# weight-gradient GEMM) against once a 1664-row chunk (e55634d). Tests: gpu_model (GPU vs CPU reference, the head
# in one chunk and in 7-row chunks), gpu_train. A/B: configs/mokc-small-1gpu.json (2 x 4), 40 steps, new/old/new/old;
# the head is in the "dense" part. Predicted: dense 131 -> ~118-122 ms a step (4 fewer chunks' fp32 gradient
# passes, 2.5 GB each, and the K = 1664 GEMMs' inefficiency: r7 measured ~0.9 ms a chunk).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
mkdir -p /tmp/old; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/old && tar xf -)
(cd /tmp/old && patch -s -R -p1 < $R/.deps/head1.diff && make -j8 GIT_REVISION=$(cat $R/.deps/rev) mokc > /tmp/b-old.log 2>&1 || echo "build old failed") &
make -j8 GIT_REVISION=$(cat .deps/rev)-head1 mokc build/mokc_tests > /tmp/b-new.log 2>&1 || { echo "build new failed"; tail -5 /tmp/b-new.log; exit 1; }
wait; echo "built $(el)"
MOKC_BIN=./mokc build/mokc_tests gpu_model > $OUT/tests-gpu_model.log 2>&1; tail -12 $OUT/tests-gpu_model.log
MOKC_BIN=./mokc build/mokc_tests gpu_train > $OUT/tests-gpu_train.log 2>&1; tail -3 $OUT/tests-gpu_train.log
echo "tests $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 || exit 1
run() { n=$1; d=$2
  timeout 120 $d/mokc train $R/configs/mokc-small-1gpu.json --set train.steps=40 --set train.warmup_steps=5 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-$n.jsonl \
    > $OUT/train-$n.log 2>&1
  echo "$n: $(grep -E '^steps ' $OUT/train-$n.log) $(el)"; grep '^  GPU' $OUT/train-$n.log
  grep -E '^GPU memory plan' $OUT/train-$n.log | head -1; }
run new1 $R; run old1 /tmp/old; run new2 $R; run old2 /tmp/old
echo "total $(el)"
