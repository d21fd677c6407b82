# s8 call 3 (nvidia-h200-x2): the f32x3 chunk rule by waves (.deps/v.diff: Kimi-like logits in 4 chunks, router
# gradient in 3) on c243b05 (rule) against c243b05 (base): gpu_gemm and mok tests, both shapes interleaved twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && make -j12 mokc > build.log 2>&1 || echo "base build failed") &
make -j20 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el)"
for s in gpu_gemm mok gpu_moe_unfused; do MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail $(el)"; grep -A3 FAIL $OUT/test-$s.log | head; done
bm() { # tree name shape rep
timeout 100 mpirun -np 2 $1/mokc bench moe --config configs/bench/$3.json --impl mok > $OUT/moe-$3-$2-$4.log 2>&1
echo "$3 $2 r$4: $(grep '"bench": "moe"' $OUT/moe-$3-$2-$4.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^,]*\|"bwd_barrier_ms[^,]*' $OUT/moe-$3-$2-$4.log | tr '\n' ' ') $(el)"; }
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do bm . rule $sh $rep; bm /tmp/base base $sh $rep; done; done
echo "total $(el)"
