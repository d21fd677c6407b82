# s13 call 7 (nvidia-h200-x2, one GPU): RS router GEMM, results added to C in groups of 32 reads with C's lines
# prefetched to L2 a block early (new = working tree), the same in groups of 16 (g16), base = HEAD's kernel.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; for t in base g16; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j10 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
(cd /tmp/g16 && sed -i 's/constexpr int G = V < 32 ? V : 32;/constexpr int G = V < 16 ? V : 16;/' kernels/gemm_f32x3.cu && grep -c 'V < 16 ? V : 16' kernels/gemm_f32x3.cu && make -j10 mokc > $OUT/build-g16.log 2>&1 || echo "build g16 failed") &
make -j10 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; exit 1; }
wait; [ -x /tmp/base/build/mokc ] && [ -x /tmp/g16/build/mokc ] || exit 1; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 100 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1; echo "tests gpu_gemm rc=$?: $(tail -1 $OUT/test-gpu_gemm.log) $(el)"
for c in "kimi-k2-like 4096" "qwen3-30b-a3b-like 8192"; do set -- $c; for v in . /tmp/g16 /tmp/base; do tag=$(basename $v); [ $v = . ] && tag=new
  CUDA_VISIBLE_DEVICES=0 timeout 100 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 4 --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
    $v/mokc bench moe --config configs/bench/$1.json --impl unfused --ep 1 --tokens $2 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-$1-$tag.txt 2>&1
  echo "$1 $tag: $(grep -E 'gemm_f32x3_sm90_kernel<|duration|hmma' $OUT/ncu-$1-$tag.txt | sed -E 's/.*kernel<([0-9, ]*)>.*/<\1>/; s/gpu__time_duration.sum//; s/sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/; s/ +/ /g' | tr '\n' ' ' | cut -c1-900)"
done; done
echo "total $(el)"
