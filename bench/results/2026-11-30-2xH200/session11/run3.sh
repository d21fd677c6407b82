# s11 call 3 (nvidia-h200-x2): (a) where the backward's consumers stall between tasks: ncu PC sampling
# (WarpStateStats + SourceCounters, per SASS instruction) of 4812a4a's backward kernel at EP1 with the EP2 per-GPU
# work, both shapes; (b) the row pulls with 8 loads in flight (then 4, then 1; the untraced kernels spill as
# 4812a4a's) against 4812a4a, both shapes, twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j14 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j16 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
for sh in qwen3-30b-a3b-like:64 kimi-k2-like:192; do n=${sh%%:*}; e=${sh##*:}
(cd /tmp/base && CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none -k regex:mok_backward_sm90 --launch-skip 2 -c 1 --section WarpStateStats --section SourceCounters -o /tmp/ncu-$n ./mokc bench moe --config configs/bench/$n.json --impl mok --iters 2 --warmup 1 --set moe.num_experts=$e > $OUT/ncu-$n.log 2>&1)
echo "ncu $n rc=$? $(el)"; tail -3 $OUT/ncu-$n.log
ncu -i /tmp/ncu-$n.ncu-rep --page details > $OUT/ncu-$n-details.txt 2>&1
ncu -i /tmp/ncu-$n.ncu-rep --page source --print-source sass --csv > /tmp/src-$n.csv 2> $OUT/ncu-$n-source.err; gzip -c /tmp/src-$n.csv > $OUT/ncu-$n-source-sass.csv.gz
echo "source csv: $(wc -l < /tmp/src-$n.csv) lines, $(head -c 600 /tmp/src-$n.csv | head -2 | cut -c1-400)"
grep -E "Stall|Warp Cycles|Issued|Duration" $OUT/ncu-$n-details.txt | head -30; done
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo pull84 || echo 4812a4a)\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "$sh $([ $v = . ] && echo new || echo base) r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*\|"dispatch_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
echo "total $(el)"
