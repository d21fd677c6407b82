# s9 call 5 (nvidia-h200-x2): the router's score backward and weight GEMM on a side stream beside the backward's
# barrier and sum over j, and x into the window beside the forward's router GEMM (.deps/v.diff on a39a7c9: side)
# against a39a7c9 (base). Tests (mok, gpu_train, gpu_moe_unfused), EP2 checks, both shapes interleaved twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi -q -d POWER | grep -i -E "limit|draw" | head -8
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && make -j12 mokc > build.log 2>&1 || echo "base build failed") &
make -j20 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el); base has side stream: $(grep -c side_begin /tmp/base/src/gpu/moe_mok.c)"
for s in mok gpu_moe_unfused gpu_train; do MOKC_BIN=build/mokc timeout 240 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail $(el)"; grep -A3 FAIL $OUT/test-$s.log | head; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
bm() { # tree name shape rep
timeout 100 mpirun -np 2 $1/mokc bench moe --config configs/bench/$3.json --impl mok > $OUT/moe-$3-$2-$4.log 2>&1
echo "$3 $2 r$4: $(grep '"bench": "moe"' $OUT/moe-$3-$2-$4.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(el)"
grep '"bench": "moe_phases"' $OUT/moe-$3-$2-$4.log | grep -o '"[fb]w[d_][a-z_]*_ms": [0-9.]*' | sed 's/_ms"//; s/"//' | tr '\n' ' '; echo; }
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do bm . side $sh $rep; bm /tmp/base base $sh $rep; done; done
echo "total $(el)"
