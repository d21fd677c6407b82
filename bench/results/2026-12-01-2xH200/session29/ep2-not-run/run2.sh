# Prepared in s32 (one H200 lent) for a session with the 2-GPU kind, after run1.sh (≈ 3 minutes). Copy to .deps/, set
# .deps/rev to the commit, run with carry [".deps"] on nvidia-h200-x2.
# Issue 9's EP2 lines at HEAD: the Qwen-like and Kimi-like layers, mok scored (the acceptance's shapes and tokens),
# then Qwen-like adding and collapsed as training drives it. Predicted against s28 r5 (Qwen-like scored 1.543 / 4.534
# ms): the router on bf16 x (s32 r1, r3: its forward GEMM −0.02 ms, backward −0.02 at 8192 tokens) and the combine
# backward (s32 r7: −0.016): ≈ 1.52 / 4.48 ms; Kimi-like, whose router GEMMs are larger (C 7168, E 384: 0.33 + 0.75
# ms at EP1, s25 r10), ≈ −0.2 to −0.4 ms. Issue 9 asks 1.03 / 3.57 ms (Qwen-like): not expected.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
[ -x ./mokc ] || make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
for c in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$c.json --impl all --iters 20 \
    --record $OUT/bench-$c-ep2.jsonl > $OUT/bench-$c-ep2.log 2>&1
  echo "== $c rc $? $(el)"; grep -E '^(mok|unfused) ' $OUT/bench-$c-ep2.log | head -3
done
for opt in "--accumulate" "--collapse --accumulate"; do
  tag=$(echo "q $opt" | tr -d '-' | tr ' ' '_')
  timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 20 $opt \
    > $OUT/bench-$tag-ep2.log 2>&1
  echo "== $opt rc $? $(el)"; grep -E '^mok ' $OUT/bench-$tag-ep2.log | head -2
done
echo "total $(el)"
