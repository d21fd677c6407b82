# s22 r6 (1×H200): the residual stream without copies: x_mid = x + atty @ wo and the dense layer's
# x_next = x_mid + h @ w_down as out-of-place GEMMs (C and D apart, gemm_rm_out), the MoE layer's x_next = x_mid +
# its output in one add (gpu_add_f32_out), against d2f66ba (two 67 MB fp32 copies a layer and micro-batch).
# Tests: gpu_gemm (gemm_rm_out against gemm_rm bit for bit, into a poisoned D, C untouched), gpu_cast, gpu_model,
# gpu_train. A/B: mokc-small-1gpu 30 steps (steps 16-30), new/old/new/old.
# Predicted: ≈ 0.063 ms a layer and micro-batch: −2 ms a step (attention part −1, dense/MoE −1).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
mkdir -p /tmp/old; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/old && tar xf -)
(cd /tmp/old && patch -s -R -p1 < $R/.deps/resid.diff && make -j8 GIT_REVISION=$(cat $R/.deps/rev) mokc > /tmp/b-old.log 2>&1 || echo "build old failed") &
make -j8 GIT_REVISION=$(cat .deps/rev)-resid mokc build/mokc_tests > /tmp/b-new.log 2>&1 || { echo "build new failed"; tail -5 /tmp/b-new.log; exit 1; }
wait; echo "built $(el)"
for t in gpu_gemm gpu_cast gpu_model gpu_train; do
  MOKC_BIN=./mokc build/mokc_tests $t > $OUT/tests-$t.log 2>&1; echo "$t: $(tail -1 $OUT/tests-$t.log)"; grep -E '^FAIL|FAIL ' $OUT/tests-$t.log | head -5
done
echo "tests $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 || exit 1
run() { n=$1; d=$2
  timeout 60 $d/mokc train $R/configs/mokc-small-1gpu.json --set train.steps=30 --set train.warmup_steps=5 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-$n.jsonl \
    > $OUT/train-$n.log 2>&1
  echo "$n: $(grep -E '^steps ' $OUT/train-$n.log) $(el)"; grep '^  GPU' $OUT/train-$n.log; }
run new1 $R; run old1 /tmp/old; run new2 $R; run old2 /tmp/old
echo "total $(el)"
