for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j32 all > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 300 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/bench-moe-$sh.log 2>&1; echo "bench $sh rc=$?"
  grep '^{' $OUT/bench-moe-$sh.log | tee $OUT/bench-moe-$sh.jsonl | grep -o '"fwd_ms.*' | cut -c1-400
done
