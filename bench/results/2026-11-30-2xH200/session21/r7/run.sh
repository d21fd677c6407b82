# s21 r7: the LM head's row chunks in training: head (256 MiB of fp32 logits a chunk: 441 rows at V = 151936, 19
# chunks of an 8192-row micro-batch), a (512 MiB, rounded down to 128-row tiles: 768 rows), r (1 GiB: 1664 rows).
# mokc-small at 2 x 4 sequences, 30 steps each. Predicted: the dense part 182 -> ~170 ms a step (r), MFU +0.5-1.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
for t in head a; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/head && patch -s -R -p1 < $R/.deps/head.diff && make -j10 GIT_REVISION=$(cat $R/.deps/rev) mokc > /tmp/b-head.log 2>&1 || echo "build head failed") &
(cd /tmp/a && sed -i 's/(1024ull << 20)/(512ull << 20)/' src/gpu/model_gpu.c && make -j10 GIT_REVISION=$(cat $R/.deps/rev)-512 mokc > /tmp/b-a.log 2>&1 || echo "build a failed") &
make -j10 GIT_REVISION=$(cat .deps/rev)-1024 mokc > /tmp/b-r.log 2>&1 || { echo "build r failed"; tail -5 /tmp/b-r.log; exit 1; }
wait; echo "built $(el)"
find src kernels tests docs scripts -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
     -o -name '*.md' -o -name '*.sh' \) -print0 | sort -z | xargs -0 cat > /tmp/repo-text.txt
./mokc prepare --text /tmp/repo-text.txt --vocab 151936 --out /tmp/repo.h5 --val-fraction 0 > /dev/null || exit 1
run() { d=/tmp/$1; [ $1 = r ] && d=$R
  timeout 150 mpirun -np 2 $d/mokc train $R/configs/mokc-small.json --set train.steps=30 --set train.warmup_steps=5 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-$1.jsonl > $OUT/train-$1.log 2>&1
  echo "$1: $(grep -E '^steps ' $OUT/train-$1.log) $(el)"; grep '^  GPU' $OUT/train-$1.log; grep '^GPU memory plan' $OUT/train-$1.log | head -1; }
run head; run r; run a
echo "total $(el)"
