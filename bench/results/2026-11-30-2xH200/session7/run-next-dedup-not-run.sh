# Prepared for the next session (nvidia-h200-x2), not run: the forward dispatch pulling each (source, token) row once
# over NVLink (dispatch-dedup-row-flags-unrun.diff: copies wait on per-row flags, not on tile arrivals as in r9), against its base (dd vs base). EP2 checks, then both shapes.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
patch -s -p1 < bench/results/2026-11-30-2xH200/session7/dispatch-dedup-row-flags-unrun.diff || exit 1
mkdir -p /tmp/base; cp bench/results/2026-11-30-2xH200/session7/dispatch-dedup-row-flags-unrun.diff /tmp/base/.deps-v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < .deps-v.diff; make -j14 mokc > build.log 2>&1 || echo "base build failed") &
make -j18 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait
grep -c "mok_first_rows" /tmp/base/src/gpu/moe_mok.c src/gpu/moe_mok.c
MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail"; grep -A3 FAIL $OUT/test-mok.log | head
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check $sh rc=$?: $(grep -i "ep check: [PF]" $OUT/chk-$sh.log)"; done
for d in . /tmp/base; do n=$(basename $d); [ $d = . ] && n=dd
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh-$n.log 2>&1
echo "$sh $n: $(grep '"bench": "moe"' $OUT/moe-$sh-$n.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_[a-z_]*": [0-9.]*' | tr '\n' ' ') $(grep -o "\"fwd_kernel_ms[^,]*" $OUT/moe-$sh-$n.log)"
done; done
echo "total $(( $(date +%s) - t0 )) s"
