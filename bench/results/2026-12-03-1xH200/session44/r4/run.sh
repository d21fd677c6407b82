# s44 r4, one H200 (r3's warm machine and build): what fusing the forward's projections could give, timed alone with
# `mokc bench gemm` (our 128 x 256 tile and cuBLAS), M = 16384 tokens (a micro-batch), K = 2048:
# the dense FFN's gate and up apart (N = 6144 each) against side by side (N = 12288); q (4096), k and v (512 each)
# apart against k,v side by side (1024) and q,k,v side by side (5120).
# Predicted: side by side gate/up within 2 % of the pair's time (both already fill 15+ waves); k,v 5-15 % under the
# pair (256 tiles on 132 SMs: two partial waves each); q,k,v ≈ 5 % under the three.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
for n in 6144 12288 4096 512 1024 5120; do
  for rep in 1 2; do ./mokc bench gemm --m 16384 --n $n --k 2048 --iters 100 --warmup 20 2>&1 | grep -E '^\{' ; done
done > $OUT/bench-gemm.jsonl
python3 - $OUT/bench-gemm.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    t[(r['impl'], r['n'])].append(r)
for (impl, n), rs in sorted(t.items()):
    print(impl, n, ' '.join('%.4f ms %.0f TF' % (r['ms'], r['tflops']) for r in rs))
PY
