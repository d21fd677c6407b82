# s21 r1: B in 32-column panels (64-byte swizzle, two boxes of 96 columns a stage) on the standalone 192 x 192
# tile, against the same tile with 64-column panels (128-byte swizzle): the gate/up pairing the megakernel's
# 192-row port needs. Predicted: within 3 % of r192 (the same bytes; 7 TMA boxes a stage become 3).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gemm.log 2>&1
echo "tests gpu_gemm_sm90 rc=$?: $(tail -1 $OUT/test-gemm.log) $(el)"; grep -E "FAIL|error" $OUT/test-gemm.log | head -6
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 -i 0 > $OUT/smi.csv &
S=$!
g() { echo "$(date +%s.%N) start $*" >> $OUT/smi-marks.txt
  CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc bench gemm "$@" > /tmp/g.log 2>&1 || { echo "gemm $* failed"; tail -3 /tmp/g.log; }
  echo "$(date +%s.%N) end $*" >> $OUT/smi-marks.txt
  grep '^{' /tmp/g.log | sed "s|^{|{\"args\": \"$*\", |" >> $OUT/bench-gemm.jsonl
  echo "gemm $*: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*\|"tflops": [0-9.]*' /tmp/g.log | tr '\n' ' ') $(el)"; }
sleep 2
for rep in 1 2; do
  g --m 170 --n 4096 --k 7168 --groups 192 --iters 200 --warmup 20
  g --m 170 --n 7168 --k 2048 --groups 192 --iters 200 --warmup 20
done
g --m 1024 --n 1536 --k 2048 --groups 64 --iters 200 --warmup 20
g --m 8192 --n 8192 --k 8192 --iters 100 --warmup 10
kill $S
echo "total $(el)"
