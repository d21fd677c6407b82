# s8 call 1 (nvidia-h200-x2): the three diffs prepared in s7, in one tree (full) against 996835b (base).
# Forward: the dispatch dedup (per-row flags); backward: the weight-gradient epilogue as one call (the dedup
# leaves the backward's SASS unchanged, tok192 the megakernels'); GPU 1 alone: the 192-row token-side GEMM.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
S=bench/results/2026-11-30-2xH200/session7
mkdir -p /tmp/base; tar --exclude=./build --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
for d in dispatch-dedup-row-flags-unrun gemm-tok192-unrun wgrad-epilogue-one-call-unrun; do patch -s -p1 < $S/$d.diff || exit 1; done
(cd /tmp/base && make -j12 mokc > build.log 2>&1 || echo "base build failed") &
make -j20 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
wait; echo "built $(el)"
(CUDA_VISIBLE_DEVICES=1 MOKC_BIN=build/mokc timeout 90 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gemm.log 2>&1; echo "tests gemm_sm90 rc=$?: $(grep -c '^ok' $OUT/test-gemm.log) ok, $(grep -c '^FAIL' $OUT/test-gemm.log) fail"; grep -A3 FAIL $OUT/test-gemm.log | head -8
 for c in "192 170 4096 7168" "192 185 4096 7168" "192 170 7168 2048" "192 185 7168 2048"; do set -- $c
 CUDA_VISIBLE_DEVICES=1 timeout 60 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/gemm-$2-$3.log 2>&1
 echo "gemm $c: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*' $OUT/gemm-$2-$3.log | tr '\n' ' ')"; done) > $OUT/gpu1.txt 2>&1 &
CUDA_VISIBLE_DEVICES=0 MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail $(el)"; grep -A3 FAIL $OUT/test-mok.log | head
wait; cat $OUT/gpu1.txt; el
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 60 mpirun -np 2 ./mokc bench moe --check --config configs/bench/$sh.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk-$sh.log 2>&1; echo "ep2 check $sh rc=$?: $(grep -i "check: [PF]" $OUT/chk-$sh.log | tr '\n' ' ')"; done; el
for rep in 1 2; do for d in . /tmp/base; do n=full; [ $d = . ] || n=base
for sh in qwen3-30b-a3b-like kimi-k2-like; do
[ $rep = 2 ] && [ $sh = kimi-k2-like ] && [ $(( $(date +%s) - t0 )) -gt 470 ] && continue
timeout 100 mpirun -np 2 $d/mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh-$n-$rep.log 2>&1
echo "$sh $n r$rep: $(grep '"bench": "moe"' $OUT/moe-$sh-$n-$rep.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_[a-z_]*": [0-9.]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/moe-$sh-$n-$rep.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
