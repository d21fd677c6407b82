for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
grep -E "warning|spill" $OUT/build.log | grep -v "^/usr" | head
echo "build $(( $(date +%s) - t0 )) s"; which nsys ncu
for s in gpu_attention gpu_model gpu_train; do
  t=$(date +%s); MOKC_BIN=build/mokc timeout 400 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$? $(( $(date +%s) - t )) s: $(tail -1 $OUT/test-$s.log)"
  grep -E "FAIL" $OUT/test-$s.log | head -8
done
timeout 200 ./mokc bench attn > $OUT/bench-attn.log 2>&1; echo "bench attn rc=$?"; sed -n '/^impl /,$p' $OUT/bench-attn.log | head -12
if which nsys > /dev/null; then
  timeout 200 mpirun -np 2 nsys profile -o /tmp/q.%q{OMPI_COMM_WORLD_RANK} --force-overwrite true -t cuda ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 20 --warmup 3 > /tmp/nsys.log 2>&1; echo "nsys rc=$?"; tail -3 /tmp/nsys.log
  nsys stats --report cuda_gpu_kern_sum --format csv /tmp/q.0.nsys-rep 2>/dev/null > $OUT/qwen-kern.csv
  head -25 $OUT/qwen-kern.csv | cut -d, -f1-4,9 | cut -c1-150
fi
echo "total $(( $(date +%s) - t0 )) s"
