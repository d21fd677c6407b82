# s25 r2 (1xH200): where the push epilogue's 3.7 us of "copies issued" go. A = HEAD (64 bulk copies a consumer from
# warp 0's lanes); C = timing only, one 33 KB bulk copy of the whole staging to a scratch place (wrong results);
# D = the same 64 per-row copies issued by lanes 0-15 of all four warps. Trace (Qwen-like EP1) of each, bench A C D A C D.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
for v in A C D; do
  src=push; [ $v != A ] && src=$v
  rm -rf /tmp/$v; mkdir -p /tmp/$v && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/$v -xf -
  cp .deps/ab-$src/kernels/mok/sm90_pipeline.cuh /tmp/$v/kernels/mok/
  (cd /tmp/$v && make -j5 GIT_REVISION=$rev-$v mokc build/mokc_tests > /tmp/b$v.log 2>&1) &
done
wait; for v in A C D; do [ -x /tmp/$v/mokc ] || { echo "$v build failed"; tail -5 /tmp/b$v.log; exit 1; }; done
echo "built $(el)"
(cd /tmp/D && MOKC_BIN=./mokc timeout 300 build/mokc_tests mok > /tmp/test-D.log 2>&1; echo "tests mok D rc=$?: $(tail -1 /tmp/test-D.log)")
Q=configs/bench/qwen3-30b-a3b-like.json
for v in A C D; do
  MOKC_MOK_TRACE=1 timeout 120 /tmp/$v/mokc bench moe --config $Q --impl mok --iters 20 > /tmp/trace-$v.log 2>&1
  echo "trace $v rc $? $(el)"; grep -E "epilogue|^  down |^  dx " /tmp/trace-$v.log | head -14
done
for i in 1 2; do for v in A C D; do
  timeout 200 /tmp/$v/mokc bench moe --config $Q --impl mok --iters 20 > /tmp/bench-Q-$v$i.log 2>&1
  echo "Q $v$i rc $? $(el): $(grep -h '"fwd_ms"' /tmp/bench-Q-$v$i.log | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("fwd %.3f fwdbwd %.3f" % (r["fwd_ms"], r["fwdbwd_ms"]))') $(grep -h 'moe_phases' /tmp/bench-Q-$v$i.log | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("kernels %.3f %.3f" % (r["fwd_kernel_ms"], r["bwd_kernel_ms"]))')"
done; done
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls trace-*.log bench-*.log test-*.log)
echo "total $(el)"
