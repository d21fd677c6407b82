# s19 r3: wide adds, three trees: head (81efd11: wide tasks where adding), e (parts 2-3's old values at the
# epilogue's start, g_old[w][0] twice a task), ce (e + the first loads after the last K block's products: the
# working tree). Predicted (r2 trace: wide adding main loop 4.35 us/task, epilogue 5.9): e -0.3..-0.6 ms, ce
# -0.5..-1.5 ms more on the Kimi-like backward kernel adding (28.25 at head). Then the full gpu-check on the best.
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
  d=$1; [ $1 = ce ] && d=.
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head e ce; do run $t kimi-k2-like --accumulate 1; done
for t in ce e head; do run $t kimi-k2-like --accumulate 2; done
for t in head ce; do run $t kimi-k2-like "" 1; run $t qwen3-30b-a3b-like --accumulate 1; done
MOKC_MOK_TRACE=1 timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --accumulate > $OUT/trace-kimi-acc-ce.log 2>&1
echo "traced ce --accumulate:"; grep -E "^  (wdown|wgu) " $OUT/trace-kimi-acc-ce.log | head -2
best=$(python3 -c "
import json,collections
d=collections.defaultdict(list)
for l in open('$OUT/bench-ab.jsonl'):
    j=json.loads(l)
    if j.get('bench')=='moe_phases' and j['shape']=='kimi-k2-like' and 'rep' in j: d[j['tree']].append(j['bwd_kernel_ms'])
print(min(('ce','e','head'), key=lambda t: sorted(d[t])[len(d[t])//2] if d[t] else 1e9))")
echo "best: $best (median of the adding bwd kernels; the writing runs count too where a tree has them) $(el)"
dir=.; [ $best = ce ] || dir=/tmp/$best
(cd $dir && export OUT=/tmp/gc && timeout 430 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check ($best) rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -24
cp /tmp/gc.log $OUT/gpu-check.log; for f in /tmp/gc/*.jsonl; do cp $f $OUT/; done; echo "total $(el)"
