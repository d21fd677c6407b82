# s8 call 5 (nvidia-h200-x2, 293c29f): why the Kimi-like forward's gate/up main loops run 46 % slower than the same
# 128-row tile standalone. SM clock and power sampled (nvidia-smi, 100 ms) under the standalone GEMM, the EP2 mok
# bench, and EP1 with the EP2 run's per-GPU work (E = 192, no NVLink); traces at EP1 with and without grouped tickets.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
K=configs/bench/kimi-k2-like.json
smi() { # name, then the command: samples while it runs; mean SM clock / power over samples above 250 W, per GPU
  nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader,nounits -lms 100 > /tmp/smi-$1.csv &
  local pid=$!; shift; "$@"; kill $pid; wait $pid 2>/dev/null
}
summ() { awk -F', ' -v n=$1 '$3 > 250 {c[$1] += $2; p[$1] += $3; t[$1] = $4; k[$1]++; r[$1 " " $5]++}
  END {for (g in k) {s = ""; for (x in r) {split(x, a, " "); if (a[1] == g) s = s a[2] ":" r[x] " "}
  printf "%s gpu%s: %d samples >250 W, SM %.0f MHz, %.0f W, %s C, throttle %s\n", n, g, k[g], c[g]/k[g], p[g]/k[g], t[g], s}}' /tmp/smi-$1.csv; }
smi gemm env CUDA_VISIBLE_DEVICES=0 ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 200 > $OUT/gemm.log 2>&1
echo "gemm: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*' $OUT/gemm.log | sed 's/"impl": //; s/"ms": //' | tr '\n' ' ')"; summ gemm
smi ep2 mpirun -np 2 ./mokc bench moe --config $K --impl mok --iters 100 > $OUT/ep2.log 2>&1
echo "ep2: $(grep '"bench": "moe"' $OUT/ep2.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/ep2.log | tr '\n' ' ')"; summ ep2
smi ep1 mpirun -np 1 ./mokc bench moe --config $K --impl mok --iters 100 --set moe.num_experts=192 > $OUT/ep1.log 2>&1
echo "ep1: $(grep '"bench": "moe"' $OUT/ep1.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/ep1.log | tr '\n' ' ')"; tail -2 $OUT/ep1.log | cut -c1-300; summ ep1
el
for g in 2 0; do
MOKC_MOK_GROUP_ROUNDS=$g MOKC_MOK_TRACE=1 timeout 100 mpirun -np 1 ./mokc bench moe --config $K --impl mok --iters 10 --set moe.num_experts=192 > $OUT/trace-ep1-g$g.log 2>&1
echo "== EP1 trace, group rounds $g"; grep -A6 "forward trace, ep_rank 0" $OUT/trace-ep1-g$g.log | head -7
done
echo "total $(el)"
