# s15 r5 (diagnostic, nothing here is to be kept as is): what in r4's forward row boxes cost 11 %, and whether fewer,
# larger TMA boxes for B help. Trees, all the forward only, against base = 81d8e6c (HEAD, the working tree):
#   fl = A rows rounded up to 8 in boxes of 128/64/32/16/8 rows (r4's fl without the backward change), 5 A maps;
#   f8 = the same rows in boxes of 128/64 then 8 rows (at most 7 eight-row boxes; 3 A maps in use);
#   pm = A as HEAD, B's 64-column panels loaded 2 (gate/up) or 4 (down) to a TMA box through 4D maps: 2 or 1 B
#        loads a K block instead of 4.
# Predicted: if the box count costs, f8 slower than fl; if the maps' count, f8 faster than fl. pm: 0 to -3 % on the
# forward kernel if per-box overhead binds. The mok suite runs on every tree (same tolerances; pm and fl change
# which bytes land where).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; for t in fl f8 pm; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -)
  (cd /tmp/$t && patch -s -p1 < $R/.deps/$t.diff && make -j8 mokc build/mokc_tests > $OUT/build-$t.log 2>&1 || echo "build $t failed") &
done
make -j8 all build/mokc_tests > $OUT/build-base.log 2>&1 || { echo "build base failed"; exit 1; }
wait; for t in fl f8 pm; do [ -x /tmp/$t/mokc ] || exit 1; done; echo "built $(el)"
for v in . /tmp/fl /tmp/f8 /tmp/pm; do (cd $v && CUDA_VISIBLE_DEVICES=0 timeout 100 build/mokc_tests mok > /tmp/t.log 2>&1); echo "tests mok $v rc=$?: $(tail -1 /tmp/t.log)"; grep FAIL /tmp/t.log | head -3; done; echo "$(el)"
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order=". /tmp/fl /tmp/f8 /tmp/pm"; [ $rep = 2 ] && order="/tmp/pm /tmp/f8 /tmp/fl ."
  for v in $order; do tag=$(basename $v); [ $v = . ] && tag=base
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
