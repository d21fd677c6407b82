for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for s in gpu_gemm; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"impl": "[a-z]*"\|"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; echo
grep moe_phases $OUT/moe-$sh.log | grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_dy_slots_ms[^,]*\|"bwd_router_gemms_ms[^}]*'| tr '\n' ' '; echo
done
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 1 --warmup 0 > $OUT/ncu-qwen-ep1.csv 2>&1; echo "ncu rc $?"
python3 - <<'PY'
import csv,os,collections
rows=[r for r in csv.reader(open(os.environ['OUT']+'/ncu-qwen-ep1.csv')) if len(r)>10]
hdr=rows[0]; ki=hdr.index('Kernel Name'); vi=hdr.index('Metric Value'); ii=hdr.index('ID')
ks=[(int(r[ii]),r[ki][:60],float(r[vi].replace(',',''))) for r in rows[1:]]
print(len(ks),'kernels; the last 45:')
for i,n,v in ks[-45:]: print(f"{i:5d} {v/1000:9.1f} us  {n}")
PY
echo "total $(( $(date +%s) - t0 )) s"
