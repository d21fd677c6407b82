# s21 r8: mokc-small's MoE part under balanced routing: the same 30-step run (2 x 4 sequences a GPU a step) on
# uniformly random token ids instead of the repository's bytes (whose few ids collapse the router: load max/mean 16).
# Predicted (perf-notes "After s21"): MoE 351 -> ~280 ms a step (15 layers x 4 micro-batches x 4.65 ms), MFU ~41 %.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
python3 -c "
import random, struct
random.seed(1)
open('/tmp/rand.u32','wb').write(struct.pack('<%dI' % 4000000, *[random.randrange(151936) for _ in range(4000000)]))"
./mokc prepare --raw-u32 /tmp/rand.u32 --vocab 151936 --out /tmp/rand.h5 --val-fraction 0 > /dev/null || exit 1
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.steps=30 --set train.warmup_steps=5 \
  --set data.train=/tmp/rand.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-random-ids.jsonl > $OUT/train-random-ids.log 2>&1
echo "train rc=$? $(el)"; grep -E '^step +(10|30)/|^steps |^  GPU' $OUT/train-random-ids.log | cut -c1-220
echo "total $(el)"
