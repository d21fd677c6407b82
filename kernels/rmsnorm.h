/*
 * RMSNorm on the GPU, forward and backward: out = x * rstd * weight with
 * rstd = 1 / sqrt(mean(x^2) + eps) per row, as src/cpu/ops.c rmsnorm_forward/backward.
 *
 * Shapes: x, dout, dx fp32 (N, C) row-major; weight, dweight fp32 (C); rstd fp32 (N).
 * Statistics in fp32 with a fixed-order block reduction (rstd itself from the fp32 sum in double);
 * every launcher is bitwise deterministic for a given (N, C). N == 0 launches nothing.
 *
 * Alignment: none required. With C % 4 == 0 and every pointer 16-byte aligned (the bf16 outputs
 * 8-byte aligned) the kernels move 4 elements per load/store; otherwise 1, a thread then owning other
 * channels, so the sums run in another order (the same results up to rounding, not the same bits).
 */
#ifndef MOKC_KERNELS_RMSNORM_H
#define MOKC_KERNELS_RMSNORM_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row blocks of the backward's dweight reduction: the scratch holds one fp32 partial row per block. */
#define RMSNORM_BWD_MAX_BLOCKS 512

/* Forward, one block per row. Writes (overwrite) out bf16 (N, C) = bf16(x * rstd * weight) and
 * rstd fp32 (N) (the backward needs it). eps as in the config. */
void gpu_rmsnorm_forward(bf16_t *out, float *rstd, const float *x, const float *weight, int N, int C, float eps,
                         cudaStream_t stream);

/* Floats of scratch gpu_rmsnorm_backward needs for (N, C): nblocks * C with
 * nblocks = ceil(N / ceil(N / RMSNORM_BWD_MAX_BLOCKS)) <= min(N, RMSNORM_BWD_MAX_BLOCKS).
 * RMSNORM_BWD_MAX_BLOCKS * C floats is always enough. */
long gpu_rmsnorm_backward_scratch_floats(int N, int C);

/* Backward. ACCUMULATES (+=) into dweight, and into dx if dx_add (else writes dx, the bits of adding to zeros):
 *   dx[n, c]   += r w_c g_c - x_c r^3 / C * sum_j g_j w_j x_j   (r = rstd[n], g = dout[n, :])
 *   dweight[c] += sum_n g[n, c] x[n, c] r[n]
 * dx fp32 (N, C), dweight fp32 (C); dout, x fp32 (N, C); weight fp32 (C); rstd fp32 (N) from the
 * forward. scratch: device fp32 of gpu_rmsnorm_backward_scratch_floats(N, C) floats, overwritten (its
 * contents are meaningless afterwards; may be reused by the next call on the same stream).
 * dweight is deterministic without atomics: kernel 1 gives each block a contiguous range of rows
 * and writes the block's per-channel partial sums (rows in order) to scratch; kernel 2 sums the
 * partials over the blocks in a fixed tree (runs of consecutive blocks, then the runs in order) into
 * dweight. dx must not alias dout or x. dx_bf16 (N, C), when not NULL, is overwritten with bf16(dx)
 * after the add, the bits gpu_cast_f32_to_bf16 of dx would give (the attention backward's input,
 * without a pass over dx).
 * Limit: C <= ~58000 (C floats of shared memory per block); beyond it the call stops with an error. */
void gpu_rmsnorm_backward(float *dx, int dx_add, bf16_t *dx_bf16, float *dweight, float *scratch, const float *dout,
                          const float *x, const float *weight, const float *rstd, int N, int C, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
