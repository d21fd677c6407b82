# s42 r5, one H200: the final read's refactor (adamw.cu's state_vec shared by gpu_adamw and gpu_adamw_catch_up;
# create_deferred's slots from the layer's offsets). Predicted: gpu_adamw and gpu_model pass as at r3.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev)-r5 build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for t in gpu_adamw gpu_model; do
  timeout 60 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -8
done
