/*
 * What the GPU benchmarks (bench_moe.c, bench_attn.c, bench_gemm.c) share: the median of timings,
 * a timed call, the relative error of two bf16 device tensors, and their run record.
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

/* The run record of this `mokc bench` run (run_record.h) of benchmark `what` ("moe", "attn", "gemm"):
 * `path` ("" = none), tried here by the launcher's rank 0 (other ranks write none), its header written
 * at the first bench_emit. main.c sets it from --record. */
void bench_record_set(const char *path, const char *what, int argc, char **argv);
/* One result as a JSON line (printf format, no newline) on stdout and in the run record. */
void bench_emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
