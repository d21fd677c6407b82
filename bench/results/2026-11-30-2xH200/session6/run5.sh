# s6 r5 (2c28d60): what the L2 bytes of the Kimi-like kernels are made of (ncu's per-source and
# per-operation L2 sector counts), for the mok forward and backward at EP1 with the EP2 per-GPU
# work (E = 192), and the standalone grouped GEMM of the gate/up shape as the control.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
ncu --query-metrics --chip gh100 > $OUT/metrics.txt 2>&1
grep -oE "^lts__t_(sectors|requests)_(srcunit|srcnode|op)_[a-z_]+" $OUT/metrics.txt | sort -u | tr '\n' ' '; echo
L=$(grep -oE "^lts__t_sectors_(srcunit|srcnode)_[a-z]+ " $OUT/metrics.txt | sort -u | sed 's/ $/.sum/' | tr '\n' ',')
O=$(grep -oE "^lts__t_sectors_op_(read|write|atom|red) " $OUT/metrics.txt | sort -u | sed 's/ $/.sum/' | tr '\n' ',')
M=${L}${O}gpu__time_duration.sum,lts__t_bytes.sum,lts__t_sectors.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
echo "metrics: $M"
timeout 150 ncu --clock-control none -k regex:mok_forward_sm90 -c 1 --metrics $M ./mokc bench moe --config configs/bench/kimi-k2-like.json --set moe.num_experts=192 --impl mok --iters 1 --warmup 0 > $OUT/ncu-fwd.txt 2>&1; echo "fwd rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\s+(gpu__|dram__|lts__)" $OUT/ncu-fwd.txt
timeout 200 ncu --clock-control none -k regex:mok_backward_sm90 -c 1 --metrics $M ./mokc bench moe --config configs/bench/kimi-k2-like.json --set moe.num_experts=192 --impl mok --iters 1 --warmup 0 > $OUT/ncu-bwd.txt 2>&1; echo "bwd rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\s+(gpu__|dram__|lts__)" $OUT/ncu-bwd.txt
timeout 150 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip 1 -c 1 --metrics $M ./mokc bench gemm --groups 192 --m 256 --n 4096 --k 7168 --iters 2 --warmup 0 > $OUT/ncu-gemm.txt 2>&1; echo "gemm rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\s+(gpu__|dram__|lts__)" $OUT/ncu-gemm.txt
echo "total $(( $(date +%s) - t0 )) s"
