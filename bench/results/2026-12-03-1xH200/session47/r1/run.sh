# s47 r1, one H200: `make run` on a GPU (the README's "4 ms a step on one H200" for configs/tiny.json, now ending
# with "run record: PATH"), and the train suite on the CUDA backend (its run record header must say "gpus": 1 and
# the GPU's name; on the CPU it says 0 and "none"). The corpus travels in (no network there). Predicted: make run
# on the GPU, a few ms a step, val loss near 1.9; train suite passes.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
make run GIT_REVISION=$(cat .deps/rev) > $OUT/make-run.log 2>&1; echo "make run rc $? $(el)"
grep -E "^backend|^steps |^final|^run record|== done" $OUT/make-run.log
cp runs/tiny-metrics.jsonl $OUT/ 2>/dev/null; head -c 600 runs/tiny-metrics.jsonl | tr ',' '\n' | grep -E '"gpu|"backend'
MOKC_BIN=build/mokc timeout 200 build/mokc_tests train > $OUT/test-train.log 2>&1
echo "train rc $? $(el): $(tail -1 $OUT/test-train.log)"; grep -E "FAIL" $OUT/test-train.log | head -5
