/*
 * `mokc bench gemm` (issue 9): the megakernel's Hopper GEMM tile alone (kernels/mok/gemm_sm90.h, a
 * persistent grouped GEMM without the MoK protocol) against cuBLAS, on one GPU.
 *
 *   ./mokc bench gemm [--m M] [--n N] [--k K] [--groups G] [--iters 20] [--warmup 5] [--seed S]
 *
 * Without --m/--n/--k/--groups it runs the two acceptance cases: a dense 8192 x 8192 x 8192
 * product (one group) and 64 groups of 1024 x 1536 x 2048. With any of them, one case; the others
 * default to 8192 (M, N, K) and 1 (groups). Each group is C[g] = A[g] @ B[g] with A (M, K) and B
 * (K, N) row-major bf16 (the experts' weight layout), C bf16; fresh random inputs per case, drawn
 * on the device. cuBLAS runs the groups as one strided-batched GEMM.
 * Timing: CUDA events between back-to-back launches, median of --iters (>= 20) after --warmup.
 * TFLOP/s = 2 * groups * M * N * K / time. Prints one JSON line per implementation and case (bench,
 * impl: "mok_sm90" or "cublas", m, n, k, groups, iters, ms, tflops, rel_err: the mok output's
 * ||mok - cublas|| / ||cublas|| over every element, null for cuBLAS itself). The mok output starts
 * as NaN, so an element it never writes fails the check; a relative error >= 1e-2 (or NaN) fails
 * the run (exit 1). Needs an SM 9.0 GPU and a build for sm_90a.
 */
#ifndef MOKC_GPU_BENCH_GEMM_H
#define MOKC_GPU_BENCH_GEMM_H

/* argv[0] = "bench", argv[1] = "gemm", then its options. Returns the exit code. */
int cmd_bench_gemm(int argc, char **argv);

#endif
