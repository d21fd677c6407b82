# s14 r4: where the forward's router phase goes (Kimi-like 0.39 ms against ~0.23 ms of kernels in isolation):
# events around the x copy into the window, the router's split, and GEMM + partial sums (.deps/dbg.diff, a
# diagnostic never committed; the event sync inside it perturbs the other phases), and cudaMemcpyAsync D2D against
# a copy kernel at the layer's x sizes (.deps/copy.cu).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a .deps/copy.cu -o /tmp/copy && CUDA_VISIBLE_DEVICES=0 /tmp/copy | tee $OUT/copy.txt
patch -s -p1 < .deps/dbg.diff && make -j16 mokc > $OUT/build.log 2>&1 || { echo "build failed"; tail $OUT/build.log; exit 1; }
echo "built $(el)"
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  MOKC_DBG_ROUTER=1 timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh failed"; tail -5 /tmp/b.log; }
  echo "== $sh"; grep "router phase" /tmp/b.log | tail -2; grep -o '"fwd_router_gemm_ms[^,]*' /tmp/b.log
  cp /tmp/b.log $OUT/bench-dbg-$sh.log
done
echo "total $(el)"
