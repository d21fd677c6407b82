# s25 r7 (1xH200): the MoE layer with a collapsed router (`bench moe --collapse`: every token's k picks the same k
# experts, as mokc-small's router in its early steps), against the scored routing, writing and adding; the traces
# now give each kernel's span (consumer busy per block, and the last block). Check: --check --collapse (mok against
# unfused, the backward's bits run to run) at 2048 tokens.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev)-collapse mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
Q=configs/bench/qwen3-30b-a3b-like.json; K=configs/bench/kimi-k2-like.json
timeout 200 ./mokc bench moe --check --collapse --config $Q --tokens 2048 > $OUT/check-collapse.log 2>&1
echo "check --collapse rc $? $(el)"; tail -14 $OUT/check-collapse.log
js() { grep -h '"fwd_ms"' $1 | grep '"mok"' | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("fwd %.3f fwdbwd %.3f pad %.3f" % (r["fwd_ms"], r["fwdbwd_ms"], r["pad_share"]), end=" ")'; grep -h 'moe_phases' $1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("kernels %.3f %.3f" % (r["fwd_kernel_ms"], r["bwd_kernel_ms"]))'; }
for opt in "" "--accumulate" "--collapse" "--collapse --accumulate"; do
  tag=$(echo "q $opt" | tr -d '-' | tr ' ' '_')
  timeout 200 ./mokc bench moe --config $Q --impl mok --iters 20 $opt > $OUT/bench-$tag.log 2>&1
  echo "Q $opt rc $? $(el): $(js $OUT/bench-$tag.log)"
  MOKC_MOK_TRACE=1 timeout 200 ./mokc bench moe --config $Q --impl mok --iters 20 $opt > $OUT/trace-$tag.log 2>&1
  grep -E "consumers busy|^  (gate/up|down|dgrad|wdown|dx|wgu) " $OUT/trace-$tag.log | head -8
done
for opt in "" "--collapse"; do
  tag=$(echo "k $opt" | tr -d '-' | tr ' ' '_')
  timeout 200 ./mokc bench moe --config $K --impl mok --iters 20 $opt > $OUT/bench-$tag.log 2>&1
  echo "K $opt rc $? $(el): $(js $OUT/bench-$tag.log)"
done
echo "total $(el)"
