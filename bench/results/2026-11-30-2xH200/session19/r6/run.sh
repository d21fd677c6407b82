# s19 r6: tree e's exact form (the wide tasks' main loop its own sm90_mma call; cubin the size of r4's e) (new)
# against 81efd11 (head). r4: e -0.4 ms adding (27.14-27.24 vs 27.60-27.65); r5: the one-call form, no gain.
# Predicted: -0.4 ms on the Kimi-like backward kernel adding if r4 holds; else r4 was noise.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/head; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/head && tar xf -)
(cd /tmp/head && patch -s -R -p1 < $R/.deps/new.diff && make -j12 mokc > $OUT/build-head.log 2>&1 || echo "build head failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/head/mokc ] || exit 1; echo "built $(el)"
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
run() { # tree shape flags rep
  d=/tmp/$1; [ $1 = new ] && d=.
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head new; do run $t kimi-k2-like --accumulate 1; done
for t in new head; do run $t kimi-k2-like --accumulate 2; done
for t in head new; do run $t kimi-k2-like --accumulate 3; done
for t in new head; do run $t kimi-k2-like --accumulate 4; done
for t in head new; do run $t kimi-k2-like "" 1; run $t qwen3-30b-a3b-like --accumulate 1; done
(cd $OUT && tar czf logs.tgz test-*.log build-*.log && rm -f test-*.log build-*.log)
echo "total $(el)"
