# s13 call 9 (nvidia-h200-x2): the full scripts/gpu-check.sh on the working tree (the RS router GEMM, float2 result
# pairs in rounds of 16), then one A/B pair per shape against HEAD (base = tree minus .deps/r.diff).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; OUT_FILES=$OUT; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j6 mokc > /tmp/build-base.log 2>&1 || echo "build base failed") &
(export OUT=/tmp/gc; timeout 470 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -40
grep -E 'passed, .* failed' /tmp/gc.log | tail -3; cp /tmp/gc.log $OUT_FILES/gpu-check.log
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done; echo "check $(el)"
wait; [ -x /tmp/base/build/mokc ] || exit 1
for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do tag=new; [ $v = . ] || tag=base
  timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", |" >> $OUT_FILES/bench-ab.jsonl
  echo "$sh $tag: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done
echo "total $(el)"
