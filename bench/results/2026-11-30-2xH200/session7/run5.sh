# s7 r5: the gate/up epilogue computes h from the staged bf16 pre_gate, pre_up with the approximate logistic (sg)
# against 3928a00 (h from the accumulators, IEEE reciprocal: base). Tests of sg, then both shapes interleaved, traced once each.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
mkdir -p /tmp/base; cp .deps/v.diff /tmp/base/.deps-v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < .deps-v.diff; make -j14 mokc > build.log 2>&1 || echo "base build failed") &
make -j18 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait
grep -c "swiglu_sigmoid(" /tmp/base/kernels/device_util.cuh kernels/device_util.cuh
for s in mok gpu_train gpu_swiglu gpu_moe_unfused; do MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12; done
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"; grep -i "pass\|fail" $OUT/chk.log | head -5
for rep in 1 2; do for d in . /tmp/base; do n=$(basename $d); [ $d = . ] && n=sg
for sh in kimi-k2-like qwen3-30b-a3b-like; do
timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh-$n-$rep.log 2>&1
echo "$sh $n rep $rep: $(grep '"bench": "moe"' $OUT/moe-$sh-$n-$rep.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o "\"fwd_kernel_ms[^,]*\|\"bwd_kernel_ms[^,]*" $OUT/moe-$sh-$n-$rep.log | tr "\n" " ")"
done; done; done
for d in . /tmp/base; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 $d/mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace.log 2>&1
echo "trace $sh $d"; grep -A5 "forward trace, ep_rank 0" $OUT/trace.log | head -6
done; done
echo "total $(( $(date +%s) - t0 )) s"
