/*
 * Causal grouped-query attention on the GPU, forward and backward: cuBLAS batched GEMMs for the
 * six matrix products and fused fp32 kernels for the softmax (scale + causal mask) and its
 * backward. This is the plain version of issue 6; a fused flash kernel replaces it later.
 *
 * Layout (the same as the CPU reference attention_forward/attention_backward in src/cpu/ops.c):
 *   q, out, dout, dq    bf16 (B*T, Hq*D)   row n = b*T + t, query head h at columns [h*D, (h+1)*D)
 *   k, v, dk, dv        bf16 (B*T, Hkv*D)  kv head j at columns [j*D, (j+1)*D)
 *   att                 bf16 (B, Hq, T, T) softmax probabilities, exact zeros above the diagonal
 * Query head h reads kv head h / (Hq/Hkv); scale 1/sqrt(D); causal (t attends to u <= t); q and k
 * already carry RoPE. Numerics: bf16 into every GEMM with fp32 accumulation; scores, the softmax
 * and its backward in fp32; dK and dV are summed over a group's query heads in fp32 in a fixed
 * order. No atomics: for a fixed GPU, toolkit and shape, results are bitwise reproducible.
 *
 * Use: create one workspace per shape (it holds the fp32 scores scratch and the GEMM pointer
 * tables), then call forward and backward as often as needed with any buffers of that shape:
 *
 *   AttentionWorkspace *ws = attention_workspace_create(B, T, Hq, Hkv, D);
 *   attention_forward_gpu(cublas, ws, out, att, q, k, v, stream);                  // saves att
 *   attention_backward_gpu(cublas, ws, dq, dk, dv, dout, att, q, k, v, stream);    // overwrites dq, dk, dv
 *   attention_workspace_free(ws);
 *
 * The implementation is split by the project's rule that kernels include no host headers:
 * kernels/attention.cu holds the kernels and their launchers (second part of this header),
 * src/gpu/attention.c the workspace and the GEMM sequence (first part).
 */
#ifndef MOKC_KERNELS_ATTENTION_H
#define MOKC_KERNELS_ATTENTION_H

#include <cublas_v2.h>
#include <stddef.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------
 * Public API (src/gpu/attention.c). */

typedef struct AttentionWorkspace AttentionWorkspace;

/* Device bytes a workspace of this shape needs (for the memory plan); three parts, each rounded up
 * to 256 bytes:
 *   scores  B*Hq*T*T*4           fp32 scores, then dP, then dS (bf16, in place)
 * + heads   B*Hq*T*D*4           fp32 per-query-head dK/dV before the group sum (0 when Hq == Hkv)
 * + tables  12*nb*B*Hq*8         GEMM pointer arrays, nb = causal row blocks (at most 16)
 * The caller's att buffer (B*Hq*T*T*2 bytes, saved per layer) is NOT included. Dies on a bad shape
 * (any dimension < 1, Hq not a multiple of Hkv, B*Hq*T >= 2^31 score rows). */
size_t attention_workspace_bytes(int B, int T, int Hq, int Hkv, int D);

/* Creates the workspace for one shape with its own cudaMalloc (synchronous: call it at setup, never
 * inside a captured or timed region). Prints nothing. Dies with a clear message on a bad shape or
 * out of memory. */
AttentionWorkspace *attention_workspace_create(int B, int T, int Hq, int Hkv, int D);
/* The same inside a device block the caller owns (e.g. from the memory plan): mem must be 256-byte
 * aligned and hold attention_workspace_bytes(B, T, Hq, Hkv, D) bytes; it is not freed by
 * attention_workspace_free. */
AttentionWorkspace *attention_workspace_create_at(void *mem, size_t bytes, int B, int T, int Hq, int Hkv, int D);
/* Frees the workspace (and its memory when it allocated it; cudaFree is synchronous, so no call
 * using ws may still be running). NULL is fine. */
void attention_workspace_free(AttentionWorkspace *ws);

/* Forward: out = softmax(mask(q k^T / sqrt(D))) v per (batch, query head); att receives the
 * probabilities (bf16, zeros above the diagonal) for the backward. Every element of out and att is
 * written. Inputs are not modified.
 *
 * Backward: given dout, overwrites dq, dk and dv (NOT accumulated: add into a gradient yourself if
 * you need to). att must be the forward's att for these q, k, v. dk/dv sum the group's query heads.
 *
 * Both run asynchronously on `stream`: cuBLAS and the kernels all go there. The handle must be
 * bound to `stream` (cublasSetStream); if it is not, these calls bind it, and cublasSetStream
 * resets a workspace that was set with cublasSetWorkspace, so bind it yourself once at setup.
 * One workspace serves any number of layers and buffers, but its calls must be stream-ordered
 * (one stream, or explicit events between streams): the scores scratch and the pointer tables are
 * rewritten by every call. The pointer tables are rebuilt on the device by one small kernel per
 * call (the buffers' addresses differ from layer to layer); nothing is allocated, copied from the
 * host or synchronized inside these calls.
 * Buffers: device pointers, 16-byte aligned (cudaMalloc gives 256), none overlapping an output. */
void attention_forward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *out, bf16_t *att, const bf16_t *q,
                           const bf16_t *k, const bf16_t *v, cudaStream_t stream);
void attention_backward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *dq, bf16_t *dk, bf16_t *dv,
                            const bf16_t *dout, const bf16_t *att, const bf16_t *q, const bf16_t *k, const bf16_t *v,
                            cudaStream_t stream);

/* Shape of a workspace (for callers that check their buffers against it). */
void attention_workspace_shape(const AttentionWorkspace *ws, int *B, int *T, int *Hq, int *Hkv, int *D);

/* ------------------------------------------------------------------------------------------------
 * Kernel launchers (kernels/attention.cu), used by the sequence above. */

/* One operand's pointer array for a batched GEMM over (block i, batch b, head h): entry
 * base + b*stride_b + h*stride_h + (h/group)*stride_kvh + i*stride_blk, all in BYTES. */
typedef struct {
    unsigned long long base;
    long long stride_b, stride_h, stride_kvh, stride_blk;
} AttnPtrRule;
#define ATTN_MAX_RULES 12

/* table[((r*n_blocks + i)*B + b)*H + h] = rule r evaluated at (i, b, h), for r < n_rules
 * (n_rules <= ATTN_MAX_RULES). So rule r, block i is the B*H-entry array at
 * table + (r*n_blocks + i)*B*H, batch index b*H + h. */
void attention_fill_pointers(void **table, const AttnPtrRule *rules, int n_rules, int n_blocks, int B, int H,
                             int group, cudaStream_t stream);

/* Softmax forward over `rows` rows of T scores (row r is query position t = r % T): reads
 * scores[r*T + u] for u <= t only, writes att[r*T + u] = exp(s*scale - max) / sum for u <= t and
 * exact 0 for u > t (all T columns). fp32 math, fixed-order reductions. */
void attention_softmax_forward(bf16_t *att, const float *scores, long rows, int T, float scale, cudaStream_t stream);

/* Softmax backward, in place: buf holds dP (fp32, row r at buf + r*T, read for u <= t only) and
 * receives dS = P * (dP - sum_u P dP) * scale as bf16 in the first half of the same row, i.e. the
 * bf16 matrix at (bf16_t *)buf with leading dimension 2*T. Written for the columns u < min(T, end
 * of t's causal block of `block` rows), exact 0 for u > t; the columns beyond are left as they
 * are (the GEMMs never read them). block >= 1 (T for "all columns"). */
void attention_softmax_backward(float *buf, const bf16_t *att, long rows, int T, int block, float scale,
                                cudaStream_t stream);

/* dst (B*T, Hkv*D) bf16 = sum over the Hq/Hkv query heads of each kv group, in head order, of
 * heads (B, Hq, T, D) fp32 (fp32 sums, one rounding). Overwrites dst. */
void attention_group_sum(bf16_t *dst, const float *heads, int B, int T, int Hq, int Hkv, int D, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
