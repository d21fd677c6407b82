/*
 * The fixed-order combine of the MoE layer and its backward, as combine_forward /
 * combine_backward / scatter_backward in src/cpu/moe.c, with expert-output rows in bf16 and every
 * sum in fp32 in j order (no atomics: one block per token, or one warp per slot with a fixed
 * butterfly over its lanes for the dot products).
 * Slot s = n * k + j; its row in the expert-ordered buffers is slot_row[s].
 *
 * Alignment: none required. With C % 8 == 0 and every row pointer 16-byte aligned the kernels move
 * 8 elements per access; otherwise 1 (same results).
 */
#ifndef MOKC_KERNELS_MOE_COMBINE_H
#define MOKC_KERNELS_MOE_COMBINE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[n, c] = sum_{j in order} gates[n, j] * ye[slot_row[n*k+j], c]  (+ y[n, c] when add, the shared
 * experts' output already there), then + residual[n, c] where residual is not NULL (the residual stream's add:
 * the bits of adding it to the layer's output in a separate pass). y fp32 (N, C); ye bf16 (N*k, C); gates fp32
 * (N, k); residual fp32 (N, C), not y. */
void gpu_moe_combine(float *y, const bf16_t *ye, const float *gates, const int *slot_row, int N, int k, int C,
                     int add, const float *residual, cudaStream_t stream);

/* For every slot: dgates[s] = sum_c dy[n, c] * ye[slot_row[s], c] (fp32 (N, k), overwrite) and,
 * where dye, dye[slot_row[s], c] = bf16(gates[s] * bf16(dy[n, c])) (overwrite, bf16 (N*k, C): dy is
 * rounded to bf16 first, as the megakernel's dispatch scales the bf16 rows it pulls); where dyb,
 * dyb[n, c] = bf16(dy[n, c]) (bf16 (N, C)). dy fp32 (N, C). */
void gpu_moe_combine_backward(bf16_t *dye, bf16_t *dyb, float *dgates, const float *dy, const bf16_t *ye,
                              const float *gates, const int *slot_row, int N, int k, int C, cudaStream_t stream);

/* dx[n, c] = s, or with add dx[n, c] += s (one add), where s = sum_{j in order} dxe[slot_row[n*k+j], c] in fp32.
 * dx fp32 (N, C); dxe bf16 (N*k, C). */
void gpu_moe_scatter_rows(float *dx, const bf16_t *dxe, const int *slot_row, int N, int k, int C, int add,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
