# s29 r1: the first form of r2/cublas_launch_probe.c (cublasGemmEx loops with the same and with new M each
# iteration, and cublasGemmGroupedBatchedEx, which returned status 15: not supported for bf16 in and out),
# built with gcc against cuBLAS and run as `probe El mean` for 64 x 1024, 128 x 512 and 64 x 256.
cd .deps/probe && gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o /tmp/probe cublas_launch_probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcublas -lcudart || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
/tmp/probe 64 1024 2>&1 | tee $OUT/probe-64x1024.txt
/tmp/probe 128 512 2>&1 | tee $OUT/probe-128x512.txt
/tmp/probe 64 256 2>&1 | tee $OUT/probe-64x256.txt
