# s20 r1: L2 eviction priorities on TMA traffic. Trees: head (3001f95), h (weights: an expert's last M tile
# evict_first, its first of several evict_last; weight-gradient stores and old-value loads evict_first), n (as h,
# the first tile's loads evict_normal). Predicted: Kimi-like forward DRAM reads 24 -> ~19 GB, forward kernel -2..-5 %;
# backward kernel -1..-3 %; Qwen-like within noise.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
for t in head n; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/head && patch -s -R -p1 < $R/.deps/h.diff && make -j10 mokc > $OUT/build-head.log 2>&1 || echo "build head failed") &
(cd /tmp/n && sed -i 's/#define SM90_LEADER_HINT MOK_L2_LAST/#define SM90_LEADER_HINT MOK_L2_NORMAL/' kernels/mok/sm90_pipeline.cuh &&
  grep -q "LEADER_HINT MOK_L2_NORMAL" kernels/mok/sm90_pipeline.cuh && make -j10 mokc > $OUT/build-n.log 2>&1 || echo "build n failed") &
make -j12 all build/mokc_tests > $OUT/build-h.log 2>&1 || { echo "build h failed"; tail -20 $OUT/build-h.log; exit 1; }
wait; [ -x /tmp/head/mokc ] && [ -x /tmp/n/mokc ] || exit 1; echo "built $(el)"
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
run() { # tree shape flags rep
  d=/tmp/$1; [ $1 = h ] && d=$R
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"f[a-z]*_ms[^,]*' | head -2 | tr '\n' ' ') $(grep -o '"[fb]wd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head h n; do run $t kimi-k2-like "" 1; done
for t in n h head; do run $t kimi-k2-like "" 2; done
for t in h head n; do run $t kimi-k2-like --accumulate 1; done
for t in head n h; do run $t kimi-k2-like --accumulate 2; done
for t in h n head; do run $t kimi-k2-like "" 3; done
for t in head h n; do run $t qwen3-30b-a3b-like "" 1; done
for t in n h head; do run $t qwen3-30b-a3b-like "" 2; done
for t in head h; do d=/tmp/$t; [ $t = h ] && d=$R
  (cd $d && CUDA_VISIBLE_DEVICES=0 timeout 150 ncu --clock-control none -k regex:"mok_(forward|backward)_sm90" -c 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
    ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 2 --warmup 1 --set moe.num_experts=192 \
    > $OUT/ncu-$t.log 2>&1); echo "ncu $t rc=$? $(el)"
  grep -E "mok_(forward|backward)|gpu__time|dram__bytes|lts__t_bytes" $OUT/ncu-$t.log | sed 's/  */ /g' | cut -c1-110; done
(cd $OUT && tar czf logs.tgz test-*.log build-*.log ncu-*.log && rm -f test-*.log build-*.log ncu-*.log)
echo "total $(el)"
