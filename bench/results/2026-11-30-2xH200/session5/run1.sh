for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for s in gpu_gemm gpu_model mok gpu_moe_unfused gpu_train; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail  t=$(( $(date +%s) - t0 ))"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-q.log 2>&1
grep -A7 "trace, ep_rank 0" $OUT/trace-q.log
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
for c in "kimi-k2-like moe.num_experts=192" "qwen3-30b-a3b-like moe.num_experts=64"; do set -- $c
timeout 120 ncu --clock-control none -k regex:mok_forward_sm90 -c 1 --metrics $M ./mokc bench moe --config configs/bench/$1.json --set $2 --impl mok --iters 1 --warmup 0 > $OUT/ncu-fwd-$1.txt 2>&1; echo "ncu $1 rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\s+(gpu__|dram__|lts__|sm__)" $OUT/ncu-fwd-$1.txt
done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $? t=$(( $(date +%s) - t0 ))"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; echo
done
echo "total $(( $(date +%s) - t0 )) s"
