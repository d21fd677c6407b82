# s34 r6 (second call: the logits kernel again, train.warmup_steps=0 for a 1-step run; the first call's training
# stopped at the config check): where the LM head's logits kernel loses to the plain tile: ncu on one gemm_sm90_logits launch in training
# (mokc-small-1gpu, its first step) and on the plain 128 x 256 tile at the same shape (bench gemm, 2048 x 151936 x
# 2048), both at ncu's locked base clock and unlocked. Predicted: nothing written (a probe). If at the locked clock
# the two take the same time, the gap in training (665 against 761 TFLOP/s) is the power the epilogue's MUFU and ALU
# work draws; if not, it is the epilogue's time.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
W="gpu__time_duration gpc__cycles_elapsed sm__inst_executed_pipe_tensor_op_gmma sm__inst_executed_pipe_xu sm__inst_executed_pipe_fma sm__inst_executed_pipe_alu sm__inst_executed_pipe_lsu dram__bytes_read dram__bytes_write lts__t_sector_hit_rate sm__throughput smsp__inst_executed"
ncu --query-metrics > /tmp/q.txt 2>&1
M=""; for m in $W; do
  if grep -q "^$m " /tmp/q.txt; then
    case $m in gpu__time_duration|dram__bytes_*|smsp__inst_executed) x=$m.sum;; gpc__cycles_elapsed) x=$m.avg.per_second;;
      lts__t_sector_hit_rate) x=$m.pct;; sm__throughput) x=$m.avg.pct_of_peak_sustained_elapsed;;
      *) x=$m.avg.pct_of_peak_sustained_active;; esac
    M="$M${M:+,}$x"
  else echo "no metric $m"; fi
done
echo "metrics: $M"
LOGITS=regex:_Z16gemm_sm90_kernelILb0ELb1E; PLAIN=regex:_Z16gemm_sm90_kernelILb0ELb0E
for cc in base none; do
  timeout 150 ncu --clock-control $cc --kernel-name-base mangled -k $LOGITS -s 4 -c 1 --metrics $M \
    ./mokc train configs/mokc-small-1gpu.json --set train.steps=1 --set train.warmup_steps=0 --set data.val= --set data.train=/tmp/repo.h5 \
    --set log.metrics_path=/tmp/t.jsonl > /tmp/ncu-logits-$cc.log 2>&1; echo "logits $cc rc $? $(el)"
  cp /tmp/ncu-logits-$cc.log $OUT/
done
for f in /tmp/ncu-*.log; do echo "== $f"; grep -E "^ +[a-z_]+__" $f | sed 's/  */ /g' | cut -c1-110; done
echo "total $(el)"
