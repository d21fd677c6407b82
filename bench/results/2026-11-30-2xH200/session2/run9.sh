for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 MOKC_FLASH_FWD_VARIANT=ov-pp-pers
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
( while true; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >> /tmp/mem.txt; sleep 1; done ) &
mon=$!
for T in 8192 4096; do
  n=$([ $T = 8192 ] && echo 8 || echo 30)
  timeout 220 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=$n --set train.warmup_steps=2 --set train.seq_len=$T --set data.val= --set data.train=data/devil-v151936.h5 --set log.metrics_path=$OUT/small-$T.jsonl > $OUT/small-$T.log 2>&1; echo "train seq $T rc=$?"
  grep -iE "GiB|memory|mfu|tok/s" $OUT/small-$T.log | head -6; tail -4 $OUT/small-$T.log
  sort -t, -k2 -n /tmp/mem.txt | tail -1 | sed 's/^/peak MiB (gpu, used): /'; : > /tmp/mem.txt
done
kill $mon
