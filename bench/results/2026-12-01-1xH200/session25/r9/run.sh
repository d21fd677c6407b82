# s25 r9 (1xH200): is there a tail when a hot expert is the last in the backward's ticket order? The collapse's k
# experts moved to the last of each E/k (15, 31, ..., 127; timing-only build), traced, collapsed writing and adding.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -rf /tmp/L; mkdir -p /tmp/L && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/L -xf -
cp -r .deps/ab-last/* /tmp/L/
(cd /tmp/L && make -j16 mokc > /tmp/bL.log 2>&1) || { echo "build failed"; tail -5 /tmp/bL.log; exit 1; }
Q=configs/bench/qwen3-30b-a3b-like.json
for opt in "--collapse" "--collapse --accumulate"; do
  for i in 1 2; do
    MOKC_MOK_TRACE=1 timeout 200 /tmp/L/mokc bench moe --config $Q --impl mok --iters 20 $opt > /tmp/t.log 2>&1
    echo "== last-hot $opt rc $?"; grep -E "trace,|consumers busy" /tmp/t.log | head -4
    timeout 200 /tmp/L/mokc bench moe --config $Q --impl mok --iters 20 $opt > /tmp/b.log 2>&1
    grep -h moe_phases /tmp/b.log | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("kernels %.3f %.3f" % (r["fwd_kernel_ms"], r["bwd_kernel_ms"]))'
  done
done
