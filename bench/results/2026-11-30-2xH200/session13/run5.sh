# s13 call 5 (nvidia-h200-x2): the RS router GEMM with branch-free fast loads (working tree = new; base = new minus .deps/r.diff).
# Tests on new (gemm, unfused MoE, mok suites), ncu durations and instruction counts of the f32x3 kernels on both,
# A/B of the layer phases on both shapes x2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j16 all > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; grep -B2 -A8 error $OUT/build-new.log | head -30; exit 1; }
wait; [ -x /tmp/base/build/mokc ] || exit 1; echo "built $(el)"
for s in gpu_gemm gpu_moe_unfused mok; do
  CUDA_VISIBLE_DEVICES=0 MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -m5 -i 'fail' $OUT/test-$s.log
done
for c in "kimi-k2-like 4096" "qwen3-30b-a3b-like 8192"; do set -- $c; for v in . /tmp/base; do tag=new; [ $v = . ] || tag=base
  CUDA_VISIBLE_DEVICES=0 timeout 100 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 8 --metrics gpu__time_duration.sum,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
    $v/mokc bench moe --config configs/bench/$1.json --impl unfused --ep 1 --tokens $2 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-$1-$tag.txt 2>&1
  echo "$1 $tag: $(grep -E 'gemm_f32x3_sm90_kernel<|duration|hmma|inst_executed' $OUT/ncu-$1-$tag.txt | sed -E 's/.*kernel<([0-9, ]*)>.*/<\1>/; s/gpu__time_duration.sum//; s/sm__inst_executed.sum/inst/; s/sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/; s/ +/ /g' | tr '\n' ' ' | cut -c1-900)"
done; done; echo "ncu done $(el)"
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do tag=new; [ $v = . ] || tag=base
  timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^,]*\|"fwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
