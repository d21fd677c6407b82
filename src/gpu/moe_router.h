/*
 * The MoE router's fp32 GEMMs, in one place for both layers (unfused and mok) so that their
 * logits, top-k picks and router gradients agree bit for bit:
 *   forward   logits (N, E) = x (N, C) @ router (C, E)
 *   backward  g_router (C, E) += x^T @ dlogits;  dx (N, C) += dlogits @ router^T
 * The logits and the weight gradient have few output tiles over a long K (C, then the tokens):
 * they run split-K (gemm.h gemm_rm_splitk: partials in the caller's scratch, summed in a fixed
 * order); dx has K = E and usually a large output, and takes the same call, whose rule then
 * leaves it unsplit (with few tokens and a large E it may split it too). The
 * module owns nothing: the layer allocates moe_router_scratch_bytes for its largest micro-batch
 * and passes it in. Calls run on the cuBLAS handle's stream.
 */
#ifndef MOKC_GPU_MOE_ROUTER_H
#define MOKC_GPU_MOE_ROUTER_H

#include <cublas_v2.h>
#include <stddef.h>

/* Scratch bytes for any N <= N_max tokens on any GPU (<= 32 MiB; 0 if nothing splits): never less
 * than the rule asks for, so the split, and the bits, do not depend on N_max. */
size_t moe_router_scratch_bytes(int N_max, int C, int E);

/* logits (N, E) = x (N, C) @ router (C, E), overwritten; fp32, device. */
void moe_router_forward(cublasHandle_t h, float *logits, const float *x, const float *router, int N, int C, int E,
                        float *scratch, size_t scratch_bytes);

/* g_router (C, E) += x^T @ dlogits and dx (N, C) += dlogits @ router^T; dlogits (N, E); fp32, device. */
void moe_router_backward(cublasHandle_t h, float *g_router, float *dx, const float *dlogits, const float *x,
                         const float *router, int N, int C, int E, float *scratch, size_t scratch_bytes);

#endif
