# Prepared in s17 for the next session's first call (nvidia-h200-x2; not run). The branch wip/wgrad-tma-add adds
# the weight gradients by TMA (r8: Kimi-like backward kernel 70 -> 30 ms when adding) and stores floats in the
# register path (r8's mok suite stopped on unaligned gradients: float pairs need 8-byte alignment); that fix has not
# run on a GPU. Before the call: `git checkout wip/wgrad-tma-add && git diff main > .deps/r.diff`, copy this file to
# .deps/run1.sh. new = the branch, base = main (its diff reversed).
# Expected: mok suite all pass (its new unaligned case included), kernel_report, gpu_train pass, EP2 check PASS;
# writing: both trees alike; adding: Kimi-like backward kernel ~30 (new) against ~70 ms (base), Qwen-like ~2.8
# against ~4.0.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
for s in mok kernel_report gpu_train; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for fl in "" --accumulate; do
  order="/tmp/base ."; [ $rep = 2 ] && order=". /tmp/base"
  for v in $order; do tag=new; [ $v = . ] || tag=base
  timeout 120 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok $fl > /tmp/b.log 2>&1 || { echo "bench $sh $tag $fl failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep $fl: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done; done
TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 rc=$? $(tail -1 $OUT/ep2-check.log) $(el)"
echo "total $(el)"
