for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
TESTS=0 timeout 240 scripts/flash-fwd-variants.sh --iters 30 > $OUT/flash-fwd-variants.txt 2>&1; echo "variants rc=$?"; tail -12 $OUT/flash-fwd-variants.txt
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_attention > $OUT/test-attn.log 2>&1; echo "tests attn (default variant) rc=$?: $(tail -1 $OUT/test-attn.log)"; grep FAIL $OUT/test-attn.log | head -5
( while true; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >> /tmp/mem.txt; sleep 1; done ) &
mon=$!
for T in 8192 4096; do
  n=$([ $T = 8192 ] && echo 6 || echo 25)
  timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=$n --set train.seq_len=$T --set log.metrics_path=$OUT/small-$T.jsonl > $OUT/small-$T.log 2>&1; echo "train seq $T rc=$?"
  grep -iE "GiB|memory" $OUT/small-$T.log | head -8; tail -3 $OUT/small-$T.log
  sort -t, -k2 -n /tmp/mem.txt | tail -1 | sed 's/^/peak MiB (gpu, used): /'; : > /tmp/mem.txt
done
kill $mon
