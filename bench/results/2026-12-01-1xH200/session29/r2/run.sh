# s29 r2: gemm_rm_dynamic on a plan per grid step of M and K (B, working tree) against HEAD (A: cublasGemmEx, the
# heuristic asked for every new shape). Predicted: the unfused layer's host time with new M each call falls from
# ~34.7 ms (r1, 640 calls at 64 x 1024 rows) to under its GPU time (~5.8 ms); mokc-small-1gpu unfused stops slowing
# as the router's load spreads (steps 61-100 near steps 11-40).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./.deps -cf - . | tar -C /tmp/A -xf - && cp -r .deps/ab-A/. /tmp/A/
(cd /tmp/A && make -j8 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1) &
make -j10 GIT_REVISION=$rev mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for s in gpu_gemm gpu_moe_unfused; do
  MOKC_BIN=./mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"
  grep -E "FAIL" $OUT/test-$s.log | head -12
done
gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -DWITH_MOKC -Isrc -Ikernels -o /tmp/probe .deps/probe/cublas_launch_probe.c \
  build/src/gpu/gemm.o build/src/gpu/check.o build/src/common.o -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
  -lcublasLt -lcublas -lcudart $(pkg-config --libs ompi-c) -lnccl || echo "probe build failed"
for s in "64 1024" "128 512"; do /tmp/probe $s; done 2>&1 | tee $OUT/probe.txt; echo "probe $(el)"
for v in B A; do
  timeout 200 /tmp/$v/mokc train configs/mokc-small-1gpu.json --set moe_impl=unfused --set train.steps=100 \
    --set data.val= --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=95 \
    --set log.metrics_path=$OUT/train-$v.jsonl > $OUT/train-$v.log 2>&1
  echo "$v rc $? $(el): $(grep -E '^steps ' $OUT/train-$v.log)"
done
python3 - "$OUT" <<'PY'
import json, sys
for v in 'AB':
    try: r = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
    except Exception as e: print(v, e); continue
    for a in range(1, 101, 20):
        w = [x for x in r if a + (a == 1) * 4 <= x['step'] < a + 20 and x['step'] != 95]
        if w: print(v, 'steps %d-%d: %.1f ms, moe %.1f ms, load %.1f' % (w[0]['step'], w[-1]['step'],
              sum(x['ms'] for x in w) / len(w), sum(x['gpu_ms'].get('moe', 0) for x in w) / len(w),
              sum(x['load_max_over_mean'] for x in w) / len(w)))
PY
sed -n '/op by op/,/^  embedding /p' $OUT/train-B.log | head -30
echo "total $(el)"
