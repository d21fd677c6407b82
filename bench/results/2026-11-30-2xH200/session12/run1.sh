# Prepared in s11 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh, and
# session11/tma-stores-dgrad-storer-unrun.diff to .deps/v.diff.
# 1. The full scripts/gpu-check.sh at HEAD: daa1b38 (the gate/up epilogue's TMA stores) ran the mok suite and the EP2
#    check only (s11 r7); the gpu_train suite has not run on it.
# 2. The diff (compiled, not run), against HEAD: (a) the dgrad epilogue stores dpg and dpu by TMA (64 x 64 boxes,
#    where the consumer has all 64 rows; its half tiles in the box layout); (b) both TMA epilogues issue their
#    stores from thread 32 of the consumer (SM90_TMA_STORER), not thread 0: thread 0 also issues pushes' bulk
#    copies, so its wait for the h stores' completion waited for earlier NVLink pushes too (a reviewer's finding
#    on daa1b38, which may be why that commit gained half its prediction); (c) the forward's unused maps zeroed.
#    mok suite, then both shapes interleaved, twice, then a Qwen-like trace of the new tree. Prediction: dgrad
#    "stores" 4.2-5.4 -> ~1 us a task, Qwen-like backward kernel -0.03 ms, Kimi-like -0.06; forward kernel
#    -0.01 more. Risk: the backward's ptxas spills 68 / 80 -> 104 / 112 B. (d) sm90_stage<true> fences its box
#    staging for TMA itself, so the gate/up epilogue's extra fence and barrier before the pre_gate stores go.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
OUT_FILES=$OUT
(export OUT=/tmp/gc; timeout 450 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -22)
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done; echo "check $(el)"
mkdir -p /tmp/new; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/new && tar xf -)
(cd /tmp/new && patch -s -p1 < /tmp/v.diff && make -j28 all build/mokc_tests > $OUT_FILES/build-new.log 2>&1) || { tail -20 $OUT_FILES/build-new.log; exit 1; }; echo "built new $(el)"
(cd /tmp/new && MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT_FILES/test-mok-new.log 2>&1); echo "tests mok (new) rc=$?: $(tail -1 $OUT_FILES/test-mok-new.log) $(el)"
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/new .; do
timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo head || echo tma-storer)\", \"rep\": $rep, |" >> $OUT_FILES/bench-ab.jsonl
echo "$sh $([ $v = . ] && echo head || echo new) r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
MOKC_MOK_TRACE=1 timeout 40 mpirun -np 2 /tmp/new/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT_FILES/trace-qwen-new.log 2>&1
grep -A8 "backward trace, ep_rank 0" $OUT_FILES/trace-qwen-new.log | grep -E "dgrad" | cut -c1-200
echo "total $(el)"
