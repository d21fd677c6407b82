# Prepared for the next session (nvidia-h200-x2), not run: the megakernel forward on 192-row tiles
# (forward-r192-tiles-unrun.diff: MOKC_MOK_TILE=wgmma192, kernels/mok/mok_forward_sm90_r192.cu; three consumers of
# m64n192, gate/up weights as 64-byte-swizzled 32-column half panels paired gate/up in one thread, no backward).
# Compiles at 128 registers (8 bytes spilled: one value reloaded once a task); warpgroup 0 uses R0-R53 under setmaxnreg 56 (cuobjdump); the other
# kernels' SASS is unchanged. Tests: test_mok runs it on every forward shape (and groups of 1 tile), narrow widths too.
# Prediction (docs/perf-notes.md, "The 192-row tile in the megakernel's own orientation"): Kimi-like forward kernel
# 7.44 -> 6.0-6.5 ms (an expert's L2 reads a K block 88 -> 64 KB, less the 64-byte swizzle's 5-10 % on gate/up);
# Qwen-like (1024 rows an expert: 6 tiles of 192 against 8 of 128, 8 gate/up tasks a tile against 6) no better.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
patch -s -p1 < bench/results/2026-11-30-2xH200/session8/forward-r192-tiles-unrun.diff || exit 1
make -j30 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail $(el)"; grep -A4 FAIL $OUT/test-mok.log | head -20
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TILE=wgmma192 timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check (r192) $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for tile in wgmma192 wgmma; do
MOKC_MOK_TILE=$tile timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe.log 2>&1
echo "$sh $tile r$rep: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*' $OUT/moe.log) $(el)"
done; done; done
echo "total $(el)"
