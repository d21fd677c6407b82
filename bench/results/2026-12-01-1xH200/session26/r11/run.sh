# s26 r11 (1xH200): after review fixes (CPU rounds resumed moments under bf16; the GPU resume test checks the
# checkpoint's moments are bf16 numbers; a NaN rounds to bf16's canonical one): gpu_train, gpu_adamw.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev)-review mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
for s in gpu_adamw gpu_train; do
  MOKC_BIN=./mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"
  grep -E "FAIL|bf16" $OUT/test-$s.log | head -8
done
