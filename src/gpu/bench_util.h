/*
 * What the GPU benchmarks (bench_moe.c, bench_attn.c, bench_gemm.c) share: the median of timings,
 * a timed call, and the relative error of two bf16 device tensors.
 */
#ifndef MOKC_GPU_BENCH_UTIL_H
#define MOKC_GPU_BENCH_UTIL_H

#include "../../kernels/common.h"

/* The median of t[0..n) (n >= 1); sorts t. */
double bench_median(double *t, int n);

/* Median milliseconds of fn(ctx, s) over `iters` runs after `warmup`, each between two events. */
typedef void (*BenchFn)(void *ctx, cudaStream_t s);
double bench_time_ms(BenchFn fn, void *ctx, int iters, int warmup, cudaStream_t s);

/* ||a - b|| / ||b|| of two bf16 device arrays of n elements, read in chunks after the device has
 * finished all its work (NaN when a has a NaN); *nan (unless NULL) counts a's NaN elements. */
double bench_rel_err_bf16(const bf16_t *a, const bf16_t *b, long n, long *nan);

#endif
