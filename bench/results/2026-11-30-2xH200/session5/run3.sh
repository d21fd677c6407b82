for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
for v in nopf; do mkdir -p /tmp/$v; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/$v && tar xf -); (cd /tmp/$v && patch -s -p1 < $OLDPWD/.deps/$v.diff && make -j12 mokc > build.log 2>&1 || echo "variant $v build failed") & done
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait
echo "build $(( $(date +%s) - t0 )) s"
for s in mok gpu_model; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail  t=$(( $(date +%s) - t0 ))"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"
for b in ./mokc /tmp/nopf/mokc; do n=$(basename $(dirname $b)); [ $b = ./mokc ] && n=pf
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 $b bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-q-$n.log 2>&1
echo "== $n"; grep -A7 "trace, ep_rank 0" $OUT/trace-q-$n.log | grep "dgrad\|waiting"
done
for rep in 1 2 3; do for b in ./mokc /tmp/nopf/mokc; do n=$(basename $(dirname $b)); [ $b = ./mokc ] && n=pf
timeout 60 mpirun -np 2 $b bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > $OUT/moe-q-$n-$rep.log 2>&1
echo "qwen $n rep $rep: $(grep '"bench": "moe"' $OUT/moe-q-$n-$rep.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*\|"fwd_kernel_ms[^,]*' $OUT/moe-q-$n-$rep.log | tr '\n' ' ')"
done; done
for b in ./mokc /tmp/nopf/mokc; do n=$(basename $(dirname $b)); [ $b = ./mokc ] && n=pf
timeout 120 mpirun -np 2 $b bench moe --config configs/bench/kimi-k2-like.json --impl mok > $OUT/moe-kimi-$n.log 2>&1; echo "kimi $n rc $?: $(grep '"bench": "moe"' $OUT/moe-kimi-$n.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - t0 )) s"
