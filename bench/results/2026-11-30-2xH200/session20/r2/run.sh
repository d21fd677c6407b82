# s20 r2: (a) what TMA reduce-adds (cp.reduce.async.bulk.tensor .add) would give the adding backward: tree r stages
# each weight-gradient part as the written case does and adds it in the L2 (no old-value loads, no wide tasks), against
# head (3001f95). A design question (DESIGN.md forbids floating-point atomics), measured for the owner, not for landing.
# Predicted: Kimi-like backward kernel adding 28.0 -> ~20-21 ms (writing: 19.4); Qwen-like 2.84 -> ~2.6.
# (b) cuBLAS sustained: the dense 8192^3 and the Kimi-like per-GPU expert GEMMs (192 groups of 170 rows) over
# 20 and 200-400 iterations, with the SM clock and power sampled, for the Kimi-like targets' question.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
mkdir -p /tmp/head; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/head && tar xf -)
(cd /tmp/head && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-head.log 2>&1 || echo "build head failed") &
make -j16 all build/mokc_tests > $OUT/build-r.log 2>&1 || { echo "build r failed"; tail -20 $OUT/build-r.log; exit 1; }
wait; [ -x /tmp/head/mokc ] || exit 1; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "FAIL|error" $OUT/test-mok.log | head -6
run() { # tree shape flags rep
  d=/tmp/$1; [ $1 = r ] && d=$R
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"f[a-z]*_ms[^,]*' | head -2 | tr '\n' ' ') $(grep -o '"[fb]wd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head r; do run $t kimi-k2-like --accumulate 1; done
for t in r head; do run $t kimi-k2-like --accumulate 2; done
for t in head r; do run $t kimi-k2-like --accumulate 3; done
for t in r head; do run $t qwen3-30b-a3b-like --accumulate 1; done
for t in head r; do run $t qwen3-30b-a3b-like --accumulate 2; done
run r kimi-k2-like "" 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 -i 0 > $OUT/smi.csv &
S=$!
g() { echo "$(date +%s.%N) start $*" >> $OUT/smi-marks.txt
  CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc bench gemm "$@" > /tmp/g.log 2>&1 || { echo "gemm $* failed"; tail -3 /tmp/g.log; }
  echo "$(date +%s.%N) end $*" >> $OUT/smi-marks.txt
  grep '^{' /tmp/g.log | sed "s|^{|{\"args\": \"$*\", |" >> $OUT/bench-gemm.jsonl
  echo "gemm $*: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*\|"tflops": [0-9.]*' /tmp/g.log | tr '\n' ' ') $(el)"; }
sleep 2
g --m 8192 --n 8192 --k 8192 --iters 20 --warmup 5
g --m 8192 --n 8192 --k 8192 --iters 400 --warmup 20
g --m 170 --n 4096 --k 7168 --groups 192 --iters 20 --warmup 5
g --m 170 --n 4096 --k 7168 --groups 192 --iters 200 --warmup 20
g --m 170 --n 7168 --k 2048 --groups 192 --iters 200 --warmup 20
kill $S
(cd $OUT && tar czf logs.tgz test-*.log build-*.log && rm -f test-*.log build-*.log)
echo "total $(el)"
