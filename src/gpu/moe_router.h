/*
 * The MoE router's GEMMs, in one place for both layers (unfused and mok) so that their logits,
 * top-k picks and router gradients agree bit for bit:
 *   forward   logits (N, E) = x (N, C) @ router (C, E)
 *   backward  g_router (C, E) += x^T @ dlogits;  dx (N, C) += dlogits @ router^T
 * x is the layer's bf16 input, as every GEMM's activations (DESIGN.md); the router, dlogits and
 * the results are fp32. The logits (fp32 by DESIGN.md) are an fp32 GEMM's of x widened: the
 * router split in three bf16 terms (kernels/gemm_f32x3.h), three products on the tensor cores.
 * The backward's two GEMMs take the router and dlogits rounded to bf16 (to nearest even), as
 * every other weight and activation gradient's GEMM takes its operands, with fp32 accumulation:
 * one product each, where fp32 accuracy took three and six (s37 r2, r3: 0.183 -> 0.123 ms a call
 * at 8192 tokens; the dx product, which adds into dx, takes twice dx's read and write at the HBM
 * rate). The logits and the weight gradient have few output tiles over a long K (C, then the
 * tokens) and run split-K when their tiles leave multiprocessors idle, the partials summed in a
 * fixed order. The router's planes (or its bf16 values) and dlogits' bf16 values, which many
 * blocks read, are made once a call (in the scratch). The module owns nothing: the layer
 * allocates moe_router_scratch_bytes once and passes it in. Calls run on the given stream.
 */
#ifndef MOKC_GPU_MOE_ROUTER_H
#define MOKC_GPU_MOE_ROUTER_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "../../kernels/common.h"

/* Scratch bytes for up to N_max tokens on any GPU (no GPU is asked): the split-K partials
 * (64 MiB), the router's bf16 planes (6 C E) and dlogits' bf16 values (2 N_max E). */
size_t moe_router_scratch_bytes(int N_max, int C, int E);

/* logits (N, E) = x (N, C) @ router (C, E), overwritten; device. */
void moe_router_forward(float *logits, const bf16_t *x, const float *router, int N, int C, int E, void *scratch,
                        cudaStream_t stream);

/* g_router (C, E) += x^T @ dlogits and dx (N, C) += dlogits @ router^T; dlogits (N, E); device. */
void moe_router_backward(float *g_router, float *dx, const float *dlogits, const bf16_t *x, const float *router, int N,
                         int C, int E, void *scratch, cudaStream_t stream);

#endif
