# s25 r1 (1xH200): the push epilogues (forward down, backward dx) copy the rows whose slot is on this rank with the
# consumer's warps (16 bytes a lane, a warp a row) instead of one bulk copy a row from warp 0 (remote rows keep the bulk
# copies). A = 7615adc (the push sections in the trace), B = working tree. Tests on B: mok, gpu_moe_unfused.
# Trace of both (Qwen-like EP1), then bench moe A B A B (Qwen-like, Kimi-like; plain and --accumulate for Qwen).
# Predicted: push epilogue 4.1 -> ~1.5 us a task if the copy engine's one-by-one small copies are the cost.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/A -xf -
(cd .deps/ab-push && find . -type f) | while read -r f; do cp ".deps/ab-push/$f" "/tmp/A/$f"; done
(cd /tmp/A && make -j12 GIT_REVISION=$rev mokc > /tmp/bA.log 2>&1) &
make -j12 GIT_REVISION=$rev-push mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
cmp -s /tmp/A/kernels/mok/sm90_pipeline.cuh kernels/mok/sm90_pipeline.cuh && echo 'A == B?!'
echo "built $(el)"
for s in mok gpu_moe_unfused; do
  MOKC_BIN=./mokc timeout 300 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 /tmp/test-$s.log) $(el)"
  grep -E "FAIL" /tmp/test-$s.log | head -6
done
cat /tmp/test-*.log > $OUT/tests.log
Q=configs/bench/qwen3-30b-a3b-like.json; K=configs/bench/kimi-k2-like.json
for v in A B; do
  bin=./mokc; [ $v = A ] && bin=/tmp/A/mokc
  MOKC_MOK_TRACE=1 timeout 120 $bin bench moe --config $Q --impl mok --iters 20 > /tmp/trace-$v.log 2>&1
  echo "trace $v rc $? $(el)"; grep -E "epilogue|down |dx |gate/up |dgrad " /tmp/trace-$v.log | head -14
done
for i in 1 2; do for v in A B; do
  bin=./mokc; [ $v = A ] && bin=/tmp/A/mokc
  for sh in Q K; do cfg=${!sh}
    timeout 200 $bin bench moe --config $cfg --impl mok --iters 20 > /tmp/bench-$sh-$v$i.log 2>&1
    echo "$sh $v$i rc $? $(el): $(grep -h '"fwd_ms"' /tmp/bench-$sh-$v$i.log | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("fwd %.3f fwdbwd %.3f" % (r["fwd_ms"], r["fwdbwd_ms"]))')"
  done
  timeout 200 $bin bench moe --config $Q --impl mok --iters 20 --accumulate > /tmp/bench-Qacc-$v$i.log 2>&1
  echo "Qacc $v$i rc $? $(el): $(grep -h '"fwd_ms"' /tmp/bench-Qacc-$v$i.log | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("fwd %.3f fwdbwd %.3f" % (r["fwd_ms"], r["fwdbwd_ms"]))')"
done; done
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls trace-*.log bench-*.log)
echo "total $(el)"
