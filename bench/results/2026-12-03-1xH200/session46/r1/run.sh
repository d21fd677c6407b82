# s46 r1, one H200: the tail of s45 on a GPU. 4ef810e (bench moe takes its GPU through gpu_take_device) and 017b26a
# (help text) have not run on a GPU. Every test; bench moe on one GPU (Qwen-like, mok); two ranks on the one GPU for
# bench moe and check, which must each stop with gpu_take_device's message (exit 2), not NCCL's duplicate-GPU error;
# then mokc check on mokc-small-1gpu under mpirun -np 1 (Open MPI binds a lone rank to one core) against a plain run,
# to size what the binding costs the CPU reference. Predicted: all pass; bench moe Qwen-like mok ~1.45 / ~4.9 ms;
# both two-rank runs rc 2 with "would share one GPU"; the check's CPU part ~6.6 s plain and several times that bound.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
timeout 120 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 20 \
  --record $OUT/bench-qwen-ep1.jsonl > $OUT/bench-qwen-ep1.log 2>&1
echo "bench moe rc $? $(el)"; grep -E '^mok ' $OUT/bench-qwen-ep1.log | head -2
for cmd in "bench moe --config configs/tiny.json" "check configs/tiny.json --set parallel.ep=2"; do
  timeout 60 mpirun -np 2 ./mokc $cmd > $OUT/two-ranks.log 2>&1
  echo "mpirun -np 2 mokc $cmd: rc $?"; grep -E "error|HINT" $OUT/two-ranks.log | sort -u | head -3
done
timeout 150 ./mokc check configs/mokc-small-1gpu.json > $OUT/check-plain.txt 2>&1
echo "check plain rc $? $(el)"; grep -E "took|check passed|check failed" $OUT/check-plain.txt | cut -c1-160
timeout 300 mpirun -np 1 --report-bindings ./mokc check configs/mokc-small-1gpu.json > $OUT/check-mpirun1.txt 2>&1
echo "check mpirun -np 1 rc $? $(el)"; grep -E "bound|took|check passed|check failed" $OUT/check-mpirun1.txt | cut -c1-160
MOKC_BIN=build/mokc timeout 420 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12
echo "total $(el)"
