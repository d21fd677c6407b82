# s22 r1 (1×H200; the 2-GPU kind is not lent today): mokc-small's layers on one GPU (configs/mokc-small-1gpu.json,
# 8 layers, EP1) at 2 sequences x 4 micro-batches, 100 steps, four ways of balancing the router:
# base (aux 0.001, as mokc-small), bias 1e-3 / 1e-2 (expert_bias_update_rate), aux 1e-2.
# Predicted: base collapses (load max/mean -> 16 on the worst layer) as at EP2; the MoE part shrinks by up to
# ~20 % where the load spreads. Also: which profilers the machine has.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
which nsys ncu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 || exit 1
run() { n=$1; shift
  timeout 170 ./mokc train configs/mokc-small-1gpu.json --set train.micro_batch=2 --set train.grad_accum=4 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-$n.jsonl \
    "$@" > $OUT/train-$n.log 2>&1
  echo "$n: $(grep -E '^steps ' $OUT/train-$n.log) $(el)"; grep '^  GPU' $OUT/train-$n.log
  grep -E '^GPU memory plan' $OUT/train-$n.log | head -1; }
run base
run bias1e2 --set moe.expert_bias_update_rate=0.01
run bias1e3 --set moe.expert_bias_update_rate=0.001
run aux1e2 --set moe.router_aux_loss_coef=0.01
echo "total $(el)"
