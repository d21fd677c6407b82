# s45 r2, one H200: r1's `mokc check` failed every gradient (0.33-0.41 relative on mokc-small-1gpu's shapes, 0.03-0.08 on
# tiny) while the losses agreed to 2e-4: the weights times 5 (the GPU model test's protocol) make the logits large and
# the softmaxes peaky, so bf16's rounding of the logits moves the probabilities, hence every gradient. A scratch build
# (not committed) reads the weights' scale from MOKC_CHECK_SCALE: scales 1, 2 and 5 on both specs, the full tables.
# Predicted: at scale 1 (the spec's own initialisation) every tensor under 2e-2, the worst in the first layers.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for spec in tiny mokc-small-1gpu; do for scale in 1 2 5; do
  MOKC_CHECK_SCALE=$scale timeout 120 ./mokc check configs/$spec.json > $OUT/check-$spec-x$scale.txt 2>&1
  echo "$spec x$scale rc $? $(el): $(tail -1 $OUT/check-$spec-x$scale.txt | cut -c1-150)"
done; done
MOKC_CHECK_SCALE=1 timeout 120 ./mokc check configs/tiny.json --set moe_impl=unfused > $OUT/check-tiny-unfused-x1.txt 2>&1
echo "tiny unfused x1 rc $? $(el): $(tail -1 $OUT/check-tiny-unfused-x1.txt | cut -c1-150)"
for f in $OUT/check-*-x1.txt; do echo "== $f"; sed -n '3,40p' $f | sort -k3 -g -r | head -4; done
