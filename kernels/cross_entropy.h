/*
 * Cross-entropy over a chunk of rows of fp32 logits, forward and backward in one pass, as
 * src/cpu/ops.c cross_entropy (which works on all rows at once and returns the mean).
 *
 * One block per row: an online (max, sum of exp) pass over the row in fp32 (or over the row's tile statistics:
 * gpu_cross_entropy_coded), combined across the block in a fixed tree, lse = max + log(sum); then, if asked,
 * a second pass writing the gradient.
 * Works for any V (loops over the row; V = 151936 is one block of 1024 threads). Deterministic:
 * each row's result depends only on that row, through a fixed reduction order.
 *
 * The mean loss: the caller collects the per-row losses of all chunks in one fp32 array and sums
 * it in a fixed order on the device with gpu_sum_f32 (kernels/reduce.h), then divides on the host.
 */
#ifndef MOKC_KERNELS_CROSS_ENTROPY_H
#define MOKC_KERNELS_CROSS_ENTROPY_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each row r < rows (logits fp32 (rows, V) row-major, targets int32 (rows) on the device,
 * each in [0, V): not checked):
 *   losses[r] = logsumexp(logits[r, :]) - logits[r, targets[r]]            (fp32, overwritten)
 *   dlogits[r, j] = bf16((softmax(logits[r, :])_j - (j == targets[r])) * dloss_scale)
 *                                                        (bf16 (rows, V), overwritten)
 * dlogits may be NULL (forward only: evaluation). dloss_scale is the loss gradient per row, e.g.
 * 1 / (tokens in the batch over all micro-steps) for a mean loss (the CPU reference's dloss / N).
 * Outputs must not overlap logits or each other. rows == 0 launches nothing.
 * Alignment: none required; with V % 4 == 0, logits 16-byte and dlogits 8-byte aligned the kernel
 * moves 4 elements per access, otherwise 1 (same results up to the order of the fp32 sums;
 * bitwise deterministic for a given call either way). */
void gpu_cross_entropy(float *losses, bf16_t *dlogits, const float *logits, const int *targets, int rows, int V,
                       float dloss_scale, cudaStream_t stream);

/* The logits' code (gemm_sm90_logits): a logit's distance below its 256-column tile's maximum, in units of
 * 2^-MOKC_LOGIT_CODE_BITS, in a uint16 (at most 65535 units: 32). */
#define MOKC_LOGIT_CODE_BITS 11

/* The same losses and gradient from what gemm_sm90_logits (kernels/mok/gemm_sm90.h) writes instead of the fp32
 * logits: each row's `stats` pairs (the maximum M_t of each of its (V + 255) / 256 column tiles and the sum of
 * exp(logit - M_t) over the tile), the logits' codes (uint16 (rows, V)) and each row's target logit:
 *   losses[r] = lse_r - target_logit[r], lse_r = the pairs combined (in a fixed order);
 *   dlogits[r, j] = bf16((exp(M_t - lse_r - codes[r, j] 2^-11) - (j == targets[r])) * dloss_scale), t = j / 256.
 * The codes are read once. A probability is within 0.025 % of the fp32 logits' (the codes' rounding), an eighth of
 * dlogits' own bf16 rounding; the losses are fp32 throughout. dlogits may be NULL (the losses only). stats 8-byte
 * aligned. Deterministic. */
void gpu_cross_entropy_coded(float *losses, bf16_t *dlogits, const uint16_t *codes, const float *stats,
                             const float *target_logit, const int *targets, int rows, int V, float dloss_scale,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
