# s12 r2: A/B of base (HEAD 52d533d), h1 (HEAD + the dgrad fetch loop not unrolled: spills 68/80 -> 32/44 B),
# u1 (r1's TMA-store diff + that: 104/112 -> 44/72 B), u1e (u1 + part 0's saved values fetched mid main loop).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
for v in base h1 u1; do mkdir -p /tmp/$v; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$v && tar xf -)
  (cd /tmp/$v && patch -s -R -p1 < $R/.deps/u1e.diff); done
(cd /tmp/h1 && patch -s -p1 < $R/.deps/h1.diff); (cd /tmp/u1 && patch -s -p1 < $R/.deps/u1.diff)
for v in base h1 u1; do (cd /tmp/$v && make -j8 mokc $([ $v = h1 ] && echo build/mokc_tests) > build.log 2>&1 || { echo "build $v failed"; tail -20 build.log; }) & done
make -j8 all build/mokc_tests > $OUT/build-u1e.log 2>&1 || { echo "build u1e failed"; tail -30 $OUT/build-u1e.log; exit 1; }
wait; echo "built $(el)"; grep -h "spill" /tmp/*/build.log $OUT/build-u1e.log | sed 's/.*function//' | head
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base /tmp/h1 /tmp/u1 .; do
  tag=$(basename $v); [ $v = . ] && tag=u1e
  timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
MOKC_MOK_TRACE=1 timeout 40 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-qwen-u1e.log 2>&1
grep -A8 "backward trace, ep_rank 0" $OUT/trace-qwen-u1e.log | grep -E "dgrad" | cut -c1-200
MOKC_BIN=build/mokc timeout 260 build/mokc_tests > $OUT/tests-u1e.log 2>&1; echo "tests u1e rc=$?: $(tail -1 $OUT/tests-u1e.log) $(el)"; grep -E "^FAIL|FAIL " $OUT/tests-u1e.log | head
(cd /tmp/h1 && MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok-h1.log 2>&1; echo "tests mok h1 rc=$?: $(tail -1 $OUT/test-mok-h1.log) $(el)")
TIMING=0 timeout 120 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check-u1e.log 2>&1; echo "ep2 u1e rc=$?: $(tail -1 $OUT/ep2-check-u1e.log) $(el)"
