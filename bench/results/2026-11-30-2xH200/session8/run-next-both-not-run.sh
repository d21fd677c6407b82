# Prepared for the next session (nvidia-h200-x2), not run: both prepared experiments in one build and one call (one
# machine start): run-next-r192-not-run.sh's steps (the 192-row forward: tests, EP2 checks, both shapes against the
# 128-row tile twice), then run-next-dyn-not-run.sh's on GPU 0 alone (the standalone tile with tickets). The two
# diffs touch different files and apply together (checked on 550a530; the tree builds and its CPU tests pass).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
S=bench/results/2026-11-30-2xH200/session8
patch -s -p1 < $S/forward-r192-tiles-unrun.diff && patch -s -p1 < $S/gemm-dynamic-tickets-unrun.diff || exit 1
make -j30 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
for s in mok gpu_gemm_sm90; do MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail $(el)"; grep -A4 FAIL $OUT/test-$s.log | head -20; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TILE=wgmma192 timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check (r192) $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for tile in wgmma192 wgmma; do
MOKC_MOK_TILE=$tile timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe.log 2>&1
echo "$sh $tile r$rep: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*' $OUT/moe.log) $(el)"
done; done; done
for c in "192 170 4096 7168" "192 170 7168 2048" "1 8192 8192 8192"; do set -- $c
CUDA_VISIBLE_DEVICES=0 timeout 90 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/gemm-$2-$3.log 2>&1
echo "gemm $c: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*' $OUT/gemm-$2-$3.log | sed 's/"impl": //; s/"ms": //' | tr '\n' ' ')"; done; el
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
for v in "static 10" "dyn 36"; do set -- $v
CUDA_VISIBLE_DEVICES=0 timeout 150 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip $2 -c 1 --metrics $M ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 5 > $OUT/ncu-$1.txt 2>&1
echo "ncu $1: $(grep -E "^ +[a-z]" $OUT/ncu-$1.txt | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ')"; done
echo "total $(el)"
