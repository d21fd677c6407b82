/*
 * Elementwise dtype casts of the CUDA backend.
 *
 * Every launcher is asynchronous on `stream`, writes every element of its output (exact coverage
 * of any n, including n not a multiple of the vector width), and is bitwise deterministic: each
 * output element depends only on the same-index input elements. n == 0 launches nothing.
 *
 * Alignment: none required. When every pointer of a call is 16-byte aligned the kernels move
 * 16 bytes per load/store (8 bf16 or 4 fp32 elements) and finish the tail element by element;
 * otherwise they run element by element (same results, slower). cudaMalloc'd buffers, and
 * sub-buffers at element offsets that are multiples of 8, take the fast path.
 * fp32 -> bf16 rounds to nearest even (NaN stays NaN); bf16 -> fp32 is exact.
 */
#ifndef MOKC_KERNELS_CAST_H
#define MOKC_KERNELS_CAST_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = bf16(in[i]) for i < n. out: bf16 (n), in: fp32 (n); overwrite; must not overlap. */
void gpu_cast_f32_to_bf16(bf16_t *out, const float *in, long n, cudaStream_t stream);

/* out[i] = float(in[i]) for i < n. out: fp32 (n), in: bf16 (n); overwrite; must not overlap. */
void gpu_cast_bf16_to_f32(float *out, const bf16_t *in, long n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
