# s19 r4: r3's A/B again with the trees' paths right (r3 ran head and e as ./head/mokc): head (81efd11), e, ce (the
# working tree, whose full check passed in r3). Predicted as r3: e -0.3..-0.6 ms, ce -0.5..-1.5 ms on the Kimi-like
# backward kernel adding (r3's machine: ce 27.5 ms).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
for t in head e; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/head && patch -s -R -p1 < $R/.deps/ce.diff && make -j10 mokc > $OUT/build-head.log 2>&1 || echo "build head failed") &
(cd /tmp/e && sed -i 's/decltype(first_wide), true>/decltype(first_wide), false>/' kernels/mok/mok_backward_sm90.cu &&
  make -j10 mokc > $OUT/build-e.log 2>&1 || echo "build e failed") &
make -j12 all build/mokc_tests > $OUT/build-ce.log 2>&1 || { echo "build ce failed"; tail -20 $OUT/build-ce.log; exit 1; }
wait; [ -x /tmp/head/mokc ] && [ -x /tmp/e/mokc ] || exit 1; echo "built $(el)"
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
run() { # tree shape flags rep
  d=/tmp/$1; [ $1 = ce ] && d=.
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head e ce; do run $t kimi-k2-like --accumulate 1; done
for t in ce e head; do run $t kimi-k2-like --accumulate 2; done
for t in e head ce; do run $t kimi-k2-like --accumulate 3; done
for t in head ce; do run $t kimi-k2-like "" 1; run $t qwen3-30b-a3b-like --accumulate 1; done
for t in ce head; do run $t qwen3-30b-a3b-like --accumulate 2; done
(cd $OUT && tar czf logs.tgz test-*.log build-*.log && rm -f test-*.log build-*.log)
echo "total $(el)"
