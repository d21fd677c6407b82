# s8 call 2 (nvidia-h200-x2): the dispatch dedup v3 (a tile's pulls before its copies, one fence a warp and tile,
# relaxed flag stores; .deps/v.diff) on c243b05 (dd) against c243b05 (base): mok tests, EP2 checks, both shapes
# interleaved twice, and the Qwen-like shape with dd and 2 grouped rounds.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && make -j12 mokc > build.log 2>&1 || echo "base build failed") &
make -j20 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el); base has mok_first_rows: $(grep -c mok_first_rows /tmp/base/src/gpu/moe_mok.c)"
MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail $(el)"; grep -A3 FAIL $OUT/test-mok.log | head
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
bm() { # tree name shape rep [env]
timeout 100 env $5 mpirun -np 2 $1/mokc bench moe --config configs/bench/$3.json --impl mok > $OUT/moe-$3-$2-$4.log 2>&1
echo "$3 $2 r$4: $(grep '"bench": "moe"' $OUT/moe-$3-$2-$4.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_[a-z_]*": [0-9.]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/moe-$3-$2-$4.log | tr '\n' ' ') $(el)"; }
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do bm . dd $sh $rep; bm /tmp/base base $sh $rep; done
bm . dd-g2 qwen3-30b-a3b-like $rep "MOKC_MOK_GROUP_ROUNDS=2"; done
echo "total $(el)"
