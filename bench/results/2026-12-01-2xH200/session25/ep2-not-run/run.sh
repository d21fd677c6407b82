# Prepared in s25 for a session with the 2-GPU kind (2×H200), after s24's prepared call
# (`../../session24/ep2-not-run/run.sh`, the issue-11 run): the Qwen-like layer at EP2 as mokc-small's training
# drives it, its router collapsed (`bench moe --collapse`, writing and adding into the gradients), against the
# scored routing, with the megakernels' traces (each kernel's span now included). What it tells: how much of
# training's 5.6 ms a layer and micro-batch at EP2 (s23 r2: 1.95 forward + 3.68 backward, against 4.27 at EP1) the
# collapsed layer explains where the ranks hold equal shares of the hot experts (--collapse spreads them E/k apart:
# 4 a rank), so that the rest is the ranks' imbalance. At EP1 (s25 r7): collapsed 1.344 / 4.365 ms, adding 4.071.
# Copy to .deps/, set .deps/rev to the commit, and run with carry [".deps"] on nvidia-h200-x2 (≈ 2 minutes).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
Q=configs/bench/qwen3-30b-a3b-like.json
timeout 200 mpirun -np 2 ./mokc bench moe --check --collapse --config $Q --tokens 2048 > $OUT/check-collapse-ep2.log 2>&1
echo "check --collapse EP2 rc $? $(el)"; tail -3 $OUT/check-collapse-ep2.log
for opt in "" "--accumulate" "--collapse" "--collapse --accumulate"; do
  tag=$(echo "q $opt" | tr -d '-' | tr ' ' '_')
  timeout 200 mpirun -np 2 ./mokc bench moe --config $Q --impl mok --iters 20 $opt > $OUT/bench-$tag-ep2.log 2>&1
  echo "== $opt rc $? $(el)"; grep -E '"impl": "mok"' $OUT/bench-$tag-ep2.log | head -2
  MOKC_MOK_TRACE=1 timeout 200 mpirun -np 2 ./mokc bench moe --config $Q --impl mok --iters 20 $opt \
    > $OUT/trace-$tag-ep2.log 2>&1
  grep -E "trace,|consumers busy|dispatch warps" $OUT/trace-$tag-ep2.log | head -8
done
echo "total $(el)"
