# s35 r1: where the SMs' time goes in the three largest kernels of a training step, none of them changed:
# ncu --set full plus per-SASS-instruction stall sampling (SourceCounters) of the flash backward at training's
# shape (B4 T4096 Hq32 Hkv4 D128), the mok backward and forward kernels at EP1 with training's 16384 tokens
# (Qwen-like layer, adding into the gradients as later micro-batches do). Predicted: a probe, nothing kept.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
prof() { # name kernel-regex skip command...
  n=$1; k=$2; s=$3; shift 3
  timeout 240 ncu --clock-control none -k regex:"$k" -s $s -c 1 --set full --import-source no -o /tmp/ncu-$n "$@" > $OUT/ncu-$n.log 2>&1
  echo "ncu $n rc $? $(el)"; tail -2 $OUT/ncu-$n.log
  ncu -i /tmp/ncu-$n.ncu-rep --page details > $OUT/ncu-$n-details.txt 2>&1
  ncu -i /tmp/ncu-$n.ncu-rep --page source --print-source sass --csv > /tmp/src-$n.csv 2> $OUT/ncu-$n-source.err
  gzip -c /tmp/src-$n.csv > $OUT/ncu-$n-source-sass.csv.gz
  python3 .deps/ncu_source_stalls.py $OUT/ncu-$n-source-sass.csv.gz 45 > $OUT/ncu-$n-stalls.txt 2>&1
  head -16 $OUT/ncu-$n-stalls.txt
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Shared Memory|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Achieved Occ|Executed Ipc A" $OUT/ncu-$n-details.txt | head -14
}
prof flashbwd flash_bwd_sm90 2 ./mokc bench attn --impl flash --iters 2 --warmup 1 --batch 4 --heads 32 --kv-heads 4
prof mokbwd mok_backward_sm90 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens 16384 --iters 2 --warmup 1 --accumulate
prof mokfwd mok_forward_sm90 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens 16384 --iters 2 --warmup 1 --accumulate
echo "total $(el)"
