# s14 r3: bench moe with the graph replays interleaved with the eager calls (r2 ran them after the eager passes and
# found the forward graph 0.04 (Qwen-like) / 0.45 ms (Kimi-like) slower: ordering under the power limit, or the
# graph itself?). SM clocks and power sampled every 20 ms alongside.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu --format=csv -lms 20 > $OUT/smi.csv 2>&1 &
smi=$!
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
  echo "$(date +%T.%N) start $sh r$rep" >> $OUT/marks.txt
  timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh failed"; tail -5 /tmp/b.log; }
  echo "$(date +%T.%N) end $sh r$rep" >> $OUT/marks.txt
  grep '^{' /tmp/b.log | sed "s|^{|{\"rep\": $rep, |" >> $OUT/bench.jsonl
  echo "$sh r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*_ms[^,]*' | tr '\n' ' ') $(el)"
done; done
kill $smi
echo "total $(el)"
