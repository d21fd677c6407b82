# s13 call 8 (nvidia-h200-x2, one GPU): the RS router GEMM's result stores as float2 pairs, reads of C in rounds of 32
# (new = working tree) or 16 values (p16), against call 7's scalar rounds of 32 (s32, from .deps/s32.cu) and HEAD (base).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; for t in base p16 s32; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j8 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
(cd /tmp/p16 && cp $R/.deps/g16p.cu kernels/gemm_f32x3.cu && make -j8 mokc > $OUT/build-p16.log 2>&1 || echo "build p16 failed") &
(cd /tmp/s32 && cp $R/.deps/s32.cu kernels/gemm_f32x3.cu && make -j8 mokc > $OUT/build-s32.log 2>&1 || echo "build s32 failed") &
make -j8 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; exit 1; }
wait; for t in base p16 s32; do [ -x /tmp/$t/build/mokc ] || exit 1; done; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 100 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1; echo "tests gpu_gemm rc=$?: $(tail -1 $OUT/test-gpu_gemm.log) $(el)"
for c in "kimi-k2-like 4096" "qwen3-30b-a3b-like 8192"; do set -- $c; for v in . /tmp/p16 /tmp/s32 /tmp/base; do tag=$(basename $v); [ $v = . ] && tag=new
  CUDA_VISIBLE_DEVICES=0 timeout 100 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 4 --metrics gpu__time_duration.sum \
    $v/mokc bench moe --config configs/bench/$1.json --impl unfused --ep 1 --tokens $2 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > /tmp/ncu.txt 2>&1
  echo "$1 $tag: $(grep -E 'gemm_f32x3_sm90_kernel<|duration' /tmp/ncu.txt | sed -E 's/.*kernel<([0-9, ]*)>.*/<\1>/; s/gpu__time_duration.sum//; s/ +/ /g' | tr '\n' ' ' | cut -c1-900)" | tee -a $OUT/ncu-summary.txt
done; done
echo "total $(el)"
