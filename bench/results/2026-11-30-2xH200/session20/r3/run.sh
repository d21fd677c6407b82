# s20 r3: cuBLAS sustained on the rest of the targets' work (no megakernel change): the Qwen-like per-GPU expert GEMMs
# (64 groups of 1024 rows: gate/up 1024 x 1536 x 2048, down 1024 x 2048 x 768) and the Kimi-like weight-gradient
# products (192 groups of 7168 x 2048 over K = 176 rows, bf16 out: a lower bound of the fp32 ones), over 20 and
# 200-400 iterations, with the SM clock and power sampled. Also the dense 8192^3 again (r2: 799 -> 679 TFLOP/s).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 mokc > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 -i 0 > $OUT/smi.csv &
S=$!
g() { echo "$(date +%s.%N) start $*" >> $OUT/smi-marks.txt
  CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc bench gemm "$@" > /tmp/g.log 2>&1 || { echo "gemm $* failed"; tail -3 /tmp/g.log; }
  echo "$(date +%s.%N) end $*" >> $OUT/smi-marks.txt
  grep '^{' /tmp/g.log | sed "s|^{|{\"args\": \"$*\", |" >> $OUT/bench-gemm.jsonl
  echo "gemm $*: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*\|"tflops": [0-9.]*' /tmp/g.log | tr '\n' ' ') $(el)"; }
sleep 2
g --m 1024 --n 1536 --k 2048 --groups 64 --iters 20 --warmup 5
g --m 1024 --n 1536 --k 2048 --groups 64 --iters 400 --warmup 50
g --m 1024 --n 2048 --k 768 --groups 64 --iters 400 --warmup 50
g --m 7168 --n 2048 --k 176 --groups 192 --iters 20 --warmup 5
g --m 7168 --n 2048 --k 176 --groups 192 --iters 200 --warmup 20
g --m 8192 --n 8192 --k 8192 --iters 400 --warmup 20
kill $S
echo "total $(el)"
