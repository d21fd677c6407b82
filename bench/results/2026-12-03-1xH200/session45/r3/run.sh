# s45 r3, one H200, at 1908ef5: `mokc check` at the spec's own weights, the CPU following the GPU's expert choices
# (near-ties only). mokc-small-1gpu's shapes at the default cut (2 layers) and at 4 layers (3 MoE), tiny with each
# MoE layer, then the suites it touches (gpu_check, gpu_model, moe, model_check, cli, gpu_train).
# Predicted: every check passes; the MoE layer's tensors fall from r2's 7 % to the others' 1-2 %; a few choices
# (r2's aux loss 2e-3 apart: ~5 of 2048) not the CPU's own, short of its k-th by < 1e-2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
run() { local name=$1; shift; timeout 150 ./mokc check "$@" > $OUT/check-$name.txt 2>&1
  echo "$name rc $? $(el): $(grep -E '^expert choices' $OUT/check-$name.txt | cut -c1-110)"; tail -1 $OUT/check-$name.txt | cut -c1-170; }
run mokc-small-1gpu configs/mokc-small-1gpu.json
run mokc-small-1gpu-4layers configs/mokc-small-1gpu.json --layers 4
run tiny-mok configs/tiny.json --set moe_impl=mok
run tiny-unfused configs/tiny.json --set moe_impl=unfused
for s in gpu_check gpu_model moe model_check cli gpu_train; do
  MOKC_BIN=build/mokc timeout 300 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "^FAIL|FAIL " $OUT/test-$s.log | head -5
done
for f in $OUT/check-mokc-small-1gpu*.txt; do echo "== $f"; sed -n '3,40p' $f | grep -v '^loss\|^aux\|^expert\|^second\|^check' | sort -k3 -g -r | head -6; done
