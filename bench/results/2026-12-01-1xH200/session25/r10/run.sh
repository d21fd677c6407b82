# s25 r10 (1xH200): `bench moe --check --collapse` where the CPU reference runs (configs/tiny.json, and the Qwen-like
# shape at 256 tokens), and the Kimi-like layer collapsed and adding (r7 had it writing only).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
for cfg in "configs/tiny.json" "configs/bench/qwen3-30b-a3b-like.json --tokens 256"; do
  timeout 200 ./mokc bench moe --check --collapse --config $cfg > /tmp/c.log 2>&1
  echo "== check --collapse $cfg rc $?"; grep -E "cpu|top-k|PASS|FAIL" /tmp/c.log | head -8
done
timeout 200 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 20 --collapse --accumulate \
  > /tmp/k.log 2>&1
echo "== kimi --collapse --accumulate rc $?"; grep -hE '"impl": "mok"' /tmp/k.log | head -2
