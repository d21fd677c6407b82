# s29 r8: will mokc-small fit at EP2 split 4 x 2? A one-GPU proxy of an EP2 rank (mokc-small with ep = 1 and 64
# experts: the rank's parameters, gradients and moments, its dense activations) at micro_batch 4 for 3 steps, its
# plan and nvidia-smi's peak; the MoE buffers that depend on ep (E = 128 at ep = 2 against E = 64 at ep = 1) from
# the layer's own size functions (probe/planbytes.c), checked against s28 r5's EP2 plan at 8192 tokens.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
gcc -O1 -std=c11 -Isrc -Ikernels -I/usr/local/cuda/include $(pkg-config --cflags ompi-c) -c .deps/probe/planbytes.c (committed as r8/planbytes.c) -o /tmp/pb.o &&
g++ -o /tmp/planbytes /tmp/pb.o $(ls build/src/gpu/*.o build/src/*.o build/src/cpu/*.o | grep -v '/main.o') \
  $(find build/kernels -name '*.o') -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -lcuda $(pkg-config --libs ompi-c) \
  -lnccl $(pkg-config --libs libcjson hdf5-serial) -fopenmp -lm 2>&1 | grep -v warning | head -5
/tmp/planbytes | tee $OUT/planbytes.txt
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader -lms 200 > $OUT/mem.csv &
smi=$!
timeout 150 ./mokc train configs/mokc-small.json --set parallel.ep=1 --set moe.num_experts=64 --set train.micro_batch=4 \
  --set train.grad_accum=2 --set train.steps=3 --set train.warmup_steps=1 --set data.train=/tmp/repo.h5 --set data.val= \
  > $OUT/train-proxy.log 2>&1
echo "proxy rc $?"; kill $smi
grep -E -A4 'GPU memory plan' $OUT/train-proxy.log; grep -E '^step|error' $OUT/train-proxy.log | head -5
echo "peak used: $(sort -n $OUT/mem.csv | tail -1)"
