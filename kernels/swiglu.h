/*
 * SwiGLU on the GPU: h = silu(gate) * up with silu(g) = g * sigmoid(g), elementwise, as
 * src/cpu/ops.c swiglu_forward/backward. Inputs bf16, math in fp32 (device_util.cuh's
 * silu_mul_f32 and swiglu_backward_f32, shared with the megakernel), outputs rounded to bf16.
 * Deterministic (elementwise). n == 0 launches nothing.
 *
 * Alignment: none required. When every pointer is 16-byte aligned the kernels move 8 elements per
 * access (16 bytes of bf16, 32 of fp32) and finish the tail one by one; otherwise one by one.
 */
#ifndef MOKC_KERNELS_SWIGLU_H
#define MOKC_KERNELS_SWIGLU_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* h[i] = bf16(silu(gate[i]) * up[i]) for i < n. h, gate, up bf16 (n); h overwritten (h may be
 * the same buffer as gate or up, not a partial overlap). A (rows, I) activation is n = rows * I. */
void gpu_swiglu_forward(bf16_t *h, const bf16_t *gate, const bf16_t *up, long n, cudaStream_t stream);

/* With s = sigmoid(g), g = gate[i], u = up[i], d = dh[i]:
 *   dgate[i] = bf16(d * u * (s + g * s * (1 - s))),  dup[i] = bf16(d * g * s).
 * dh fp32 (n) (a GEMM's output); gate, up bf16 (n); dgate, dup bf16 (n) OVERWRITTEN (unlike the
 * CPU reference, which adds). dgate may be the same buffer as gate and dup the same as up (each
 * element is read before it is written); no other overlap. */
void gpu_swiglu_backward(bf16_t *dgate, bf16_t *dup, const float *dh, const bf16_t *gate, const bf16_t *up, long n,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
