# s8 call 8 (nvidia-h200-x2): M tiles of at most 64 rows (an expert's last tile, Kimi-like: 42 of 170 rows on
# average) load a 64-row box of A and only consumer 0 multiplies, in the forward (gate/up, down) and the backward
# (dgrad, dx); .deps/v.diff on 293c29f (half) against 293c29f (base). mok and train tests, EP2 checks, both shapes
# interleaved twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && make -j12 mokc > build.log 2>&1 || echo "base build failed") &
make -j20 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el); base has skip_stages: $(grep -c sm90_skip_stages /tmp/base/kernels/mok/mok_forward_sm90.cu)"
for s in mok gpu_train; do MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(grep -c "^ok" $OUT/test-$s.log) ok, $(grep -c "^FAIL" $OUT/test-$s.log) fail $(el)"; grep -A3 FAIL $OUT/test-$s.log | head; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
bm() { # tree name shape rep
timeout 100 mpirun -np 2 $1/mokc bench moe --config configs/bench/$3.json --impl mok > $OUT/moe-$3-$2-$4.log 2>&1
echo "$3 $2 r$4: $(grep '"bench": "moe"' $OUT/moe-$3-$2-$4.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/moe-$3-$2-$4.log | tr '\n' ' ') $(el)"; }
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do bm . half $sh $rep; bm /tmp/base base $sh $rep; done; done
echo "total $(el)"
