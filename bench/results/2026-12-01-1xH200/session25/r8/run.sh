# s25 r8 (1xH200): r7's traces again, printing each kernel's span (r7's output kept only the first lines).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j16 GIT_REVISION=$(cat .deps/rev)-collapse mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
Q=configs/bench/qwen3-30b-a3b-like.json
for opt in "--accumulate" "--collapse" "--collapse --accumulate"; do
  tag=$(echo "q $opt" | tr -d '-' | tr ' ' '_')
  MOKC_MOK_TRACE=1 timeout 200 ./mokc bench moe --config $Q --impl mok --iters 20 $opt > $OUT/trace-$tag.log 2>&1
  echo "== $opt rc $?"; grep -E "trace,|consumers busy|waiting for tasks|^  wgu " $OUT/trace-$tag.log | head -12
done
