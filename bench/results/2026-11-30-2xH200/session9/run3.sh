# s9 call 3 (nvidia-h200, a39a7c9 + forward-r192-tiles-unrun.diff): SM clock and power (nvidia-smi, 100 ms samples)
# under the sustained EP1 Kimi-like forward with the 128-row and the 192-row tiles, 300 iterations each, twice,
# interleaved (the first 20 samples above 250 W: the forward pass), is the 192-row tile (7 % faster under ncu's isolated replay at 1.62 GHz) held back by the power cap?
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
patch -s -p1 < bench/results/2026-11-30-2xH200/session8/forward-r192-tiles-unrun.diff || exit 1
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
smi() { nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader,nounits -lms 100 > /tmp/smi-$1.csv &
  local pid=$!; shift; "$@"; kill $pid; wait $pid 2>/dev/null; }
summ() { awk -F', ' -v n=$1 '$3 > 250 && k < 20 {c += $2; p += $3; t = $4; k++; if ($5 != "0x0000000000000004") o++}
  END {printf "%s: %d samples >250 W, SM %.0f MHz, %.0f W, %s C, %d not 0x4\n", n, k, c/k, p/k, t, o}' /tmp/smi-$1.csv; }
for rep in 1 2; do for tile in wgmma192 wgmma; do
smi $tile-$rep env MOKC_MOK_TILE=$tile mpirun -np 1 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 300 --set moe.num_experts=192 > $OUT/ep1-$tile.log 2>&1
echo "EP1 $tile r$rep: $(grep '"bench": "moe"' $OUT/ep1-$tile.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*' $OUT/ep1-$tile.log)"; summ $tile-$rep; el
done; done
echo "total $(el)"
