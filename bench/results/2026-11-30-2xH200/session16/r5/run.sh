# s16 r5: on r4's warm machine (its build of 5641f6e's tree), a traced Kimi-like run: where the backward's time goes
# after the decoded-task handoff.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig; export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0; ls -la mokc build/mokc | head -2; git log --oneline -1; MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT/trace-kimi.log 2>&1; echo rc=$?; grep -i -A14 "trace" $OUT/trace-kimi.log | grep -v '^{' | head -40
