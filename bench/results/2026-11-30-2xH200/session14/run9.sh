# s14 r9: gpu_model's tied/sigmoid case failed at c64000a on the 1-GPU machine (r8); it passed at ba08c66 in r6's
# full check on a 2-GPU machine. Both trees here: base = c64000a minus .deps/h.diff (= ba08c66's code).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/h.diff && make -j8 build/mokc_tests > /tmp/build-base.log 2>&1 || echo "build base failed") &
make -j8 build/mokc_tests > /tmp/build-new.log 2>&1 || { echo "build new failed"; exit 1; }
wait; echo "built $(el)"
for rep in 1 2; do for v in /tmp/base .; do
  (cd $v && timeout 60 build/mokc_tests gpu_model > /tmp/t.log 2>&1; echo "$v r$rep rc=$?: $(grep -E 'tie=1 sigmoid=1: loss|passed' /tmp/t.log | tr '\n' ' ')")
done; done
echo "total $(el)"
