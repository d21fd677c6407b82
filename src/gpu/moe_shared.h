/*
 * The MoE layer's shared experts on the GPU, one dense SwiGLU MLP of width SI = n_shared * I over
 * every token, as the CPU reference computes it: bf16 into cuBLAS GEMMs with fp32 accumulation,
 * bf16 gate/up outputs, fp32 output and gradients. The unfused and the megakernel layers both call
 * these, so their shared experts give the same bits.
 */
#ifndef MOKC_GPU_MOE_SHARED_H
#define MOKC_GPU_MOE_SHARED_H

#include <cublas_v2.h>

#include "gpu/buf_list.h"
#include "gpu/moe_unfused.h"

/* y (N, C) fp32 = swiglu(x @ shared_gate, x @ shared_up) @ shared_down, overwritten; the gate and up
 * outputs (N, SI) bf16 into s_gate, s_up for the backward. x_bf16: (N, C). On blas's stream. */
void moe_shared_forward(cublasHandle_t blas, float *y, bf16_t *s_gate, bf16_t *s_up, const bf16_t *x_bf16,
                        const MoeGpuWeights *wt, const MoeSharedScratch *s, int N, int C, int SI, cudaStream_t stream);

/* Writes dx (N, C) and adds the three shared-expert gradients in g, from dy_bf16 (N, C), x_bf16 and the
 * forward's s_gate, s_up. On blas's stream. Returns whether it wrote dx (not without shared experts or tokens). */
int moe_shared_backward(cublasHandle_t blas, float *dx, const MoeGpuGrads *g, const bf16_t *dy_bf16,
                        const bf16_t *x_bf16, const MoeGpuWeights *wt, const bf16_t *s_gate, const bf16_t *s_up,
                        const MoeSharedScratch *s, int N, int C, int SI, cudaStream_t stream);

/* Adds s's buffers, for T tokens and width SI, to a layer's buffer list (both layers hold them). */
void moe_shared_scratch_add(GpuBufList *l, MoeSharedScratch *s, size_t T, size_t SI);

#endif
