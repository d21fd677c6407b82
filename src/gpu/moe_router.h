/*
 * The MoE router's GEMMs, in one place for both layers (unfused and mok) so that their logits,
 * top-k picks and router gradients agree bit for bit:
 *   forward   logits (N, E) = x (N, C) @ router (C, E)
 *   backward  g_router (C, E) += x^T @ dlogits;  dx (N, C) += dlogits @ router^T
 * x is the layer's bf16 input, as every GEMM's activations (DESIGN.md); the router, dlogits and
 * the results are fp32. All three run on the tensor cores with fp32 accuracy, each fp32 operand
 * split in three bf16 terms (kernels/gemm_f32x3.h; x is its own one term, so the logits are an
 * fp32 GEMM's of x widened, from three products, not six); the logits and the weight gradient
 * have few output tiles over a long K (C, then the tokens) and run split-K when their tiles
 * leave multiprocessors idle, the partials summed in a fixed order. The router and dlogits, which
 * many blocks read, are split into their bf16 planes once a call (in the scratch). The module
 * owns nothing: the layer allocates moe_router_scratch_bytes once and passes it in. Calls run on
 * the given stream.
 */
#ifndef MOKC_GPU_MOE_ROUTER_H
#define MOKC_GPU_MOE_ROUTER_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "../../kernels/common.h"

/* Scratch bytes for up to N_max tokens on any GPU (no GPU is asked): the split-K partials
 * (64 MiB) and the bf16 planes of the router and of dlogits (6 C E + 6 N_max E). */
size_t moe_router_scratch_bytes(int N_max, int C, int E);

/* logits (N, E) = x (N, C) @ router (C, E), overwritten; device. */
void moe_router_forward(float *logits, const bf16_t *x, const float *router, int N, int C, int E, void *scratch,
                        cudaStream_t stream);

/* g_router (C, E) += x^T @ dlogits and dx (N, C) += dlogits @ router^T; dlogits (N, E); device. */
void moe_router_backward(float *g_router, float *dx, const float *dlogits, const bf16_t *x, const float *router, int N,
                         int C, int E, void *scratch, cudaStream_t stream);

#endif
