# s9 call 6 (nvidia-h200-x2): the wgmma kernels' dispatch hands out M tiles in 4 parts of 32 rows (arrive counts
# parts) so the first tiles' rows land first (.deps/v.diff on a39a7c9: p4), the same with 8 parts of 16 rows (p8),
# against a39a7c9 (base). Tests (mok, gpu_train), EP2 checks, both shapes interleaved twice, traces, then
# scripts/gpu-moe-ep2-check.sh (watchdog included) on p4.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
cp .deps/v.diff /tmp/v.diff
for v in base p8; do mkdir -p /tmp/$v; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/$v && tar xf -); done
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && make -j10 mokc > build.log 2>&1 || echo "base build failed") &
(cd /tmp/p8 && sed -i 's/#define SM90_DISPATCH_PARTS 4/#define SM90_DISPATCH_PARTS 8/' kernels/mok/sm90_pipeline.cuh && make -j10 mokc > build.log 2>&1 || echo "p8 build failed") &
make -j12 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el); parts: base $(grep -c DISPATCH_PARTS /tmp/base/kernels/mok/sm90_pipeline.cuh), p8 $(grep 'define SM90_DISPATCH_PARTS' /tmp/p8/kernels/mok/sm90_pipeline.cuh)"
for s in mok gpu_train; do MOKC_BIN=build/mokc timeout 240 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail $(el)"; grep -A3 FAIL $OUT/test-$s.log | head; done
for v in . /tmp/p8; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 $v/mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check $v $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk.log | tr '\n' ' ')"; done; done; el
bm() { # tree name shape rep
timeout 100 mpirun -np 2 $1/mokc bench moe --config configs/bench/$3.json --impl mok > $OUT/moe.log 2>&1
echo "$3 $2 r$4: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_ms[^,]*' | sed 's/"//g' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/moe.log | sed 's/"//g' | tr '\n' ' ') $(el)"; }
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do bm . p4 $sh $rep; bm /tmp/p8 p8 $sh $rep; bm /tmp/base base $sh $rep; done; done
for v in . /tmp/base; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace.log 2>&1
echo "== trace $v $sh (rank 0)"; grep -A4 "forward trace, ep_rank 0" $OUT/trace.log | grep "waiting\|gate/up\|down " | cut -c1-150; grep -A4 "backward trace, ep_rank 0" $OUT/trace.log | grep "waiting\|dgrad  \|wdown" | cut -c1-150; done; done; el
TIMING=0 timeout 240 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "gpu-moe-ep2-check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS lines, $(grep -c FAIL $OUT/ep2-check.log) FAIL lines; $(grep 'watchdog:' $OUT/ep2-check.log)"
echo "total $(el)"
