for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
for v in db; do mkdir -p /tmp/$v; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/$v && tar xf -); (cd /tmp/$v && patch -s -p1 < $OLDPWD/.deps/$v.diff && make -j14 mokc build/mokc_tests > build.log 2>&1 || echo "variant $v build failed") & done
make -j18 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait
echo "build $(( $(date +%s) - t0 )) s"
for d in . /tmp/db; do n=$(basename $d); [ $d = . ] && n=cp1
(cd $d && MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok-$n.log 2>&1); echo "tests mok $n rc=$?: $(grep -c '^ok' $OUT/test-mok-$n.log) ok, $(grep -c '^FAIL' $OUT/test-mok-$n.log) fail"; grep -A3 FAIL $OUT/test-mok-$n.log | head -8
timeout 50 mpirun -np 2 $d/mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$n.log 2>&1; echo "ep2 check $n rc=$?"
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 $d/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-q-$n.log 2>&1
echo "== $n"; grep -A7 "trace, ep_rank 0" $OUT/trace-q-$n.log | grep "dgrad\|waiting"
done
for rep in 1 2 3; do for d in . /tmp/db; do n=$(basename $d); [ $d = . ] && n=cp1
timeout 60 mpirun -np 2 $d/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > $OUT/moe-q-$n-$rep.log 2>&1
echo "qwen $n rep $rep: $(grep '"bench": "moe"' $OUT/moe-q-$n-$rep.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*\|"fwd_kernel_ms[^,]*' $OUT/moe-q-$n-$rep.log | tr '\n' ' ')"
done; done
for d in . /tmp/db; do n=$(basename $d); [ $d = . ] && n=cp1
timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok > $OUT/moe-kimi-$n.log 2>&1; echo "kimi $n rc $?: $(grep '"bench": "moe"' $OUT/moe-kimi-$n.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - t0 )) s"
