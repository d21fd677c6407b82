# s24 r2 (1×H200): ping-pong 128 x 128 tiles (gemm_sm90_grouped_pp) against the 128 x 256 cooperative tile and
# cuBLAS: the gpu_gemm_sm90 suite (every element, repeatable, the same bits as gemm_sm90_grouped), the SASS
# (HGMMA, no local memory), then bench gemm on the acceptance shapes and the Qwen-like down product, 20 and 300
# iterations (the 700 W limit's sustained rate).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev)-pp mokc build/mokc_tests > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
grep -A3 "gemm_sm90_pp_kernel" build/kernels/mok/gemm_sm90.cu.o.ptxas | grep -E "Used|spill"
cuobjdump -sass build/kernels/mok/gemm_sm90.cu.o > /tmp/g.sass 2>&1
awk '/Function : /{f=($0 ~ /pp_kernel/)} f' /tmp/g.sass > $OUT/pp.sass
echo "pp SASS: $(grep -c HGMMA $OUT/pp.sass) HGMMA, $(grep -cE 'LDL|STL' $OUT/pp.sass) LDL/STL"
grep HGMMA $OUT/pp.sass | head -2
MOKC_BIN=build/mokc build/mokc_tests gpu_gemm_sm90 > $OUT/test-gpu_gemm_sm90.log 2>&1
echo "gpu_gemm_sm90 rc $?: $(tail -1 $OUT/test-gpu_gemm_sm90.log) $(el)"; grep FAIL $OUT/test-gpu_gemm_sm90.log | head -5
for it in 20 300; do
  ./mokc bench gemm --iters $it > $OUT/bench-acc-$it.log 2>&1; echo "acceptance iters $it rc $? $(el)"
  ./mokc bench gemm --m 1024 --n 2048 --k 768 --groups 64 --iters $it > $OUT/bench-down-$it.log 2>&1
  echo "down iters $it rc $? $(el)"
done
grep -h '"bench": "gemm"' $OUT/bench-*.log > $OUT/bench.jsonl
grep -h "vs cublas" $OUT/bench-acc-20.log $OUT/bench-down-20.log | grep -v "rel err [0-9.e-]*, .*: ok" | head
python3 -c "
import json
rows=[json.loads(l) for l in open('$OUT/bench.jsonl')]
print('%-20s %-22s %6s %9s %8s' % ('impl','shape','iters','ms','TFLOP/s'))
for r in rows: print('%-20s %-22s %6d %9.4f %8.1f' % (r['impl'], '%dx%dx%dx%d' % (r['groups'],r['m'],r['n'],r['k']), r['iters'], r['ms'], r['tflops']))
"
