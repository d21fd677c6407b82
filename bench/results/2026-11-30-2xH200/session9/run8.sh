# s9 call 8 (nvidia-h200; the 2-GPU kind still not lent), d1483aa: forward-only calls store no gate/up
# pre-activations and the layer does not allocate them. The mok, gpu_train and gpu_moe_unfused suites on one GPU,
# then the EP1 bench (E halved: the EP2 per-GPU work) of both shapes for the layer's memory and the forward.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
for t in mok gpu_train gpu_moe_unfused; do MOKC_BIN=build/mokc build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "tests $t rc=$?: $(tail -1 $OUT/test-$t.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-$t.log | head; done
for c in "qwen3-30b-a3b-like 64" "kimi-k2-like 192"; do set -- $c
timeout 120 mpirun -np 1 ./mokc bench moe --config configs/bench/$1.json --impl mok --set moe.num_experts=$2 > $OUT/ep1-$1.log 2>&1
echo "EP1 $1 rc=$?: $(grep '^memory per GPU' $OUT/ep1-$1.log | grep -o 'mok layer[^,]*') $(grep '"bench": "moe"' $OUT/ep1-$1.log | grep -o '"fw[^,]*ms[^,]*\|"mok_mib[^,}]*' | tr '\n' ' ')"; done
echo "total $(el)"
