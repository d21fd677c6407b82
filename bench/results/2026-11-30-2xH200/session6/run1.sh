# For the next session's first device call (nvidia-h200-x2), not run: the weight-gradient epilogues by
# TMA stores (the script copies the tree as committed to /tmp/base, then patches this one).
# The mok suite checks the written gradients against the unfused layer's (overwrite and add); then
# both shapes with and without the change in one call (machines differ by up to 4 %).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
mkdir -p /tmp/base; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
patch -s -p1 < bench/results/2026-11-30-2xH200/session5/wgrad-tma-store-unrun.diff || exit 1
(cd /tmp/base && make -j14 mokc > build.log 2>&1 || echo "base build failed") &
make -j18 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait
for s in mok gpu_train; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"
for rep in 1 2; do for d in . /tmp/base; do n=$(basename $d); [ $d = . ] && n=tma
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh-$n-$rep.log 2>&1
echo "$sh $n rep $rep: $(grep '"bench": "moe"' $OUT/moe-$sh-$n-$rep.log | grep -o '"fwdbwd_ms[^,]*') $(grep -o '"bwd_kernel_ms[^,]*' $OUT/moe-$sh-$n-$rep.log)"
done; done; done
echo "total $(( $(date +%s) - t0 )) s"
