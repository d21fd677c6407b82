for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for cb in 132 66 33 16; do
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 --comm-blocks $cb > $OUT/trace-q-cb$cb.log 2>&1
echo "== comm blocks $cb"; grep -A7 "trace, ep_rank 0" $OUT/trace-q-cb$cb.log | grep "dgrad\|waiting"
done
MOKC_MOK_TRACE=1 timeout 60 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --set moe.num_experts=64 --impl mok --iters 10 > $OUT/trace-q-ep1.log 2>&1
echo "== EP1 E=64"; grep -A7 "trace, ep_rank 0" $OUT/trace-q-ep1.log | grep "dgrad\|waiting"
echo "total $(( $(date +%s) - t0 )) s"
