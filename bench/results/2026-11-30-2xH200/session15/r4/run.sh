# s15 r4: which part of r3 slowed the forward kernel. Trees: base = 767cbc1 (HEAD); bwd = the working tree (r3's row
# loads and once-a-task zeroing in the backward only, the forward as HEAD); fl = bwd + the forward's A rows loaded
# rounded up to 8 in boxes of 128..8 rows, NOT zeroed; fz = fl + the forward's zeroing (r3's code).
# Predicted: bwd: bwd kernel -0.3..-0.4 ms (Kimi-like), forward as base. fl vs fz separates the small boxes' cost from
# the zeros'. The mok suite runs on bwd (the candidate).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; for t in base fl fz; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j8 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
(cd /tmp/fl && patch -s -p1 < $R/.deps/fl.diff && make -j8 mokc > $OUT/build-fl.log 2>&1 || echo "build fl failed") &
(cd /tmp/fz && patch -s -p1 < $R/.deps/fl.diff && sed -i 's/KB, 64, 64, t/KB, 64, nrows, t/' kernels/mok/mok_forward_sm90.cu && make -j8 mokc > $OUT/build-fz.log 2>&1 || echo "build fz failed") &
make -j8 all build/mokc_tests > $OUT/build-bwd.log 2>&1 || { echo "build bwd failed"; tail -20 $OUT/build-bwd.log; exit 1; }
wait; for t in base fl fz; do [ -x /tmp/$t/mokc ] || exit 1; done; echo "built $(el)"
grep -c "nrows, t" /tmp/fz/kernels/mok/mok_forward_sm90.cu /tmp/fl/kernels/mok/mok_forward_sm90.cu kernels/mok/mok_forward_sm90.cu
CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok (bwd) rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "FAIL" $OUT/test-mok.log | head -8
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="/tmp/base . /tmp/fl /tmp/fz"; [ $rep = 2 ] && order="/tmp/fz /tmp/fl . /tmp/base"
  for v in $order; do tag=$(basename $v); [ $v = . ] && tag=bwd
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
