# s8 call 7 (nvidia-h200-x2): the forward's tickets in bands of B M tiles inside a group, the band's tiles fastest
# (an expert's M tiles that share a weight slice side by side, as the standalone GEMM orders them), B from
# MOKC_MOK_BAND (an experiment's switch on 293c29f). mok tests and EP2 checks with B = 3 and 2, then both shapes at
# B = 1 (today's order), 2, 4, 16 interleaved twice, and ncu of the EP1 forward (E = 192) at B = 2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
MOKC_MOK_BAND=3 MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok (band 3) rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail $(el)"; grep -A3 FAIL $OUT/test-mok.log | head
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_BAND=2 timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check (band 2) $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for b in 1 2 4 16; do
MOKC_MOK_BAND=$b timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe.log 2>&1
echo "$sh band $b r$rep: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*' $OUT/moe.log) $(el)"
done; done; done
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum
MOKC_MOK_BAND=2 timeout 200 ncu --clock-control none -k regex:mok_forward_sm90 --launch-skip 3 -c 1 --metrics $M ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 20 --set moe.num_experts=192 > $OUT/ncu-mok-b2.txt 2>&1
echo "== mok forward EP1, band 2"; grep -E "^ +[a-z]" $OUT/ncu-mok-b2.txt | awk '{print $1, $(NF-1), $NF}' | head -10
echo "total $(el)"
