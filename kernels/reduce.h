/*
 * Deterministic reductions on the GPU, results in double on the device: the global gradient norm
 * (sum of squares) and plain sums (the mean loss). No atomics: a fixed grid writes per-block
 * partial sums, then one block sums the partials in a fixed order, so a result is bitwise the same
 * run to run for the same inputs and the same calls. All accumulation is in double, except the
 * element-wise fp32 sum of split-K partials (gpu_sum_partials_f32, last below).
 *
 * Gradient norm over several ranges (tensors, or the dense and expert parts of the flat buffer):
 *   double *partials;  // device, K * REDUCE_PARTIALS doubles
 *   for k < K: gpu_sumsq_partials(partials + k * REDUCE_PARTIALS, grads_k, n_k, stream);
 *   gpu_sum_f64(d_norm2, partials, K * REDUCE_PARTIALS, 0, stream);  // one double on the device
 * then one cudaMemcpy of d_norm2 per step; norm = sqrt(*d_norm2). gpu_sumsq does K = 1 in one call.
 *
 * Alignment: none required; 16-byte aligned x takes float4 loads (the slice boundaries are
 * multiples of 4 elements), otherwise scalar loads: a different, equally fixed summation order.
 */
#ifndef MOKC_KERNELS_REDUCE_H
#define MOKC_KERNELS_REDUCE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Doubles written by one gpu_sumsq_partials call (its fixed grid). */
#define REDUCE_PARTIALS 256

/* partials[b] = sum of x[i]^2 (in double) over the b-th of REDUCE_PARTIALS contiguous slices of
 * x[0..n), for every b < REDUCE_PARTIALS (slices past the end give 0.0). Overwrites exactly
 * REDUCE_PARTIALS doubles; x fp32 (n), device. n == 0 (x may be NULL) writes zeros. */
void gpu_sumsq_partials(double *partials, const float *x, long n, cudaStream_t stream);

/* The squares of some rows of a (V, C) table, the rest being zero (the embedding table's gradient): partials[b] = the
 * sum of table[rows[r], c]^2 over c < C and the b-th of REDUCE_PARTIALS contiguous slices of r < n, each row's
 * squares in a fixed order. Overwrites exactly REDUCE_PARTIALS doubles; rows int32 (n), device. n == 0 writes zeros. */
void gpu_sumsq_rows_partials(double *partials, const float *table, const int *rows, int n, int C, cudaStream_t stream);

/* The same with x[i] for x[i]^2: REDUCE_PARTIALS slices' sums of x (the gradient norm's squares that the MoE
 * layers leave, mok_expert_sq_floats: a million floats at mokc-small's sizes, 0.4 ms by gpu_sum_f32's one block). */
void gpu_sum_f32_partials(double *partials, const float *x, long n, cudaStream_t stream);

/* *out = (accumulate ? *out : 0) + sum_{i<n} x[i], x double (n), one block in a fixed order.
 * out: one device double, written (also when n == 0). */
void gpu_sum_f64(double *out, const double *x, long n, int accumulate, cudaStream_t stream);

/* *out = (accumulate ? *out : 0) + sum_{i<n} (double)x[i], x fp32 (n), one block in a fixed order
 * (for the per-row losses of gpu_cross_entropy; fine up to a few million elements). */
void gpu_sum_f32(double *out, const float *x, long n, int accumulate, cudaStream_t stream);

/* *out = (accumulate ? *out : 0) + sum_{i<n} (double)x[i]^2: gpu_sumsq_partials into `partials`
 * (REDUCE_PARTIALS device doubles of scratch, overwritten) then gpu_sum_f64. */
void gpu_sumsq(double *out, double *partials, const float *x, long n, int accumulate, cudaStream_t stream);

/* out[i] = p_0[i] + p_1[i] + ... + p_{S-1}[i] added in that order, then fmaf(beta, out[i], sum)
 * when beta != 0 (out is not read when beta == 0), for i < n, with p_s = parts + s * stride
 * (stride >= n, S >= 1). fp32, device; the split-K reduction of gemm_f32x3.h. The same
 * operations for every element whatever the alignment (float4 accesses when out, parts and stride
 * allow): bitwise reproducible. */
void gpu_sum_partials_f32(float *out, const float *parts, long n, long stride, int S, float beta,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
