for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
grep -E "warning|spill" $OUT/build.log | head
echo "build $(( $(date +%s) - t0 )) s"
# where the backward kernel spills (SASS with line info)
obj=$PWD/build/kernels/mok/mok_backward_sm90.cu.o; mkdir -p /tmp/sass && (cd /tmp/sass && cuobjdump -xelf all $obj > /dev/null)
cub=$(ls /tmp/sass/*.cubin | head -1)
nvdisasm -g -c "$cub" > $OUT/bwd.sass 2>/dev/null
awk '/\/\/## File/ {loc=$0} /STL|LDL/ {print loc}' $OUT/bwd.sass | sed 's/.*File "//; s/", line / /; s/, col.*//' | sort | uniq -c | sort -rn | head -15
for s in mok gpu_gemm_sm90 gpu_moe_unfused; do
  t=$(date +%s); MOKC_BIN=build/mokc timeout 300 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$? $(( $(date +%s) - t )) s: $(tail -1 $OUT/test-$s.log)"
  grep -E "FAIL" $OUT/test-$s.log | head -8
done
timeout 120 ./mokc bench gemm > $OUT/bench-gemm.log 2>&1; echo "bench gemm rc=$?"; grep '^{' $OUT/bench-gemm.log; tail -3 $OUT/bench-gemm.log
chk() { timeout 300 mpirun -np 2 ./mokc bench moe --check "$@" > /tmp/chk.log 2>&1; rc=$?; echo "check rc=$rc: $*"; [ $rc -eq 0 ] || tail -15 /tmp/chk.log; cat /tmp/chk.log >> $OUT/ep2-check.log; }
chk --config configs/tiny.json --tokens 300 --skew --set moe.num_experts_per_tok=1
chk --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256
chk --config configs/bench/kimi-k2-like.json --tokens 200 --set model.hidden_size=256 --set moe.moe_intermediate_size=128
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 300 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl all > $OUT/bench-moe-$sh.log 2>&1; echo "bench $sh rc=$?"
  grep '^{' $OUT/bench-moe-$sh.log > $OUT/bench-moe-$sh.jsonl; tail -6 $OUT/bench-moe-$sh.log
done
echo "total $(( $(date +%s) - t0 )) s"
