for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1; echo "gpu_gemm rc $? $(grep -c '^ok' $OUT/test-gpu_gemm.log) ok"; grep -A3 FAIL $OUT/test-gpu_gemm.log | head
timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy -k regex:gemm_f32x3 --launch-count 3 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 1 --warmup 0 > $OUT/ncu-detail.txt 2>&1; echo "ncu rc $?"
grep -E "gemm_f32x3|Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Registers Per|stall|Stall|cycles being stalled" $OUT/ncu-detail.txt | cut -c1-230 | head -60
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > $OUT/moe-q.log 2>&1; echo "moe rc $?"
grep moe_phases $OUT/moe-q.log | grep -o '"fwd_router_gemm_ms[^,]*\|"fwd_route_ms[^,]*\|"bwd_router_gemms_ms[^}]*'| tr '\n' ' '; grep '"bench": "moe"' $OUT/moe-q.log | grep -o '"fwdbwd_ms[^,]*'
echo "total $(( $(date +%s) - t0 )) s"
