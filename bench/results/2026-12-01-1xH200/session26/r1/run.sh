# s26 r1: per-kernel durations (ncu, no clock control) of the Qwen-like layer collapsed and adding at EP1
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
Q=configs/bench/qwen3-30b-a3b-like.json
timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  ./mokc bench moe --config $Q --impl mok --iters 2 --warmup 1 --collapse --accumulate > $OUT/ncu-q-collapse-acc.csv 2> $OUT/ncu.err
echo "ncu rc $? $(el)"; tail -3 $OUT/ncu.err
python3 ncu_sum.py $OUT/ncu-q-collapse-acc.csv
timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  ./mokc bench moe --config $Q --impl mok --iters 2 --warmup 1 > $OUT/ncu-q-scored.csv 2>> $OUT/ncu.err
echo "ncu rc $? $(el)"
python3 ncu_sum.py $OUT/ncu-q-scored.csv
