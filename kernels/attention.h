/*
 * Causal grouped-query attention on the GPU, forward and backward, in two implementations behind
 * one interface (src/gpu/attention.c):
 *   ATTN_FLASH   the fused kernels of kernels/flash_attention.h (issue 10): no T x T matrix; the
 *                forward saves one fp32 log-sum-exp per (batch, query head, position). Head dims
 *                16, 32, 64, 128. The default (attention_default_impl).
 *   ATTN_CUBLAS  cuBLAS batched GEMMs for the six matrix products around fused fp32 kernels for the
 *                softmax (scale + causal mask) and its backward (issue 6); the forward saves the
 *                bf16 probabilities (B, Hq, T, T). Any head dim. The reference the flash path is
 *                benchmarked against (`mokc bench attn`).
 *
 * Layout (the CPU reference attention_forward/attention_backward in src/cpu/ops.c takes dq, dk, dv apart):
 *   q, out, dout        bf16 (B*T, Hq*D)   row n = b*T + t, query head h at columns [h*D, (h+1)*D)
 *   k, v                bf16 (B*T, Hkv*D)  kv head j at columns [j*D, (j+1)*D)
 *   dqkv                bf16 (B*T, (Hq + 2 Hkv)*D): row n holds dq's row, then dk's, then dv's, so the input
 *                       gradient of the q, k, v projections is one product over K = (Hq + 2 Hkv)*D
 * Query head h reads kv head h / (Hq/Hkv); scale 1/sqrt(D); causal (t attends to u <= t); q and k
 * already carry RoPE. Numerics: bf16 into every GEMM with fp32 accumulation; scores, the softmax
 * and its backward in fp32; dK and dV are summed over a group's query heads in fp32 in a fixed
 * order. No atomics: for a fixed GPU, toolkit and shape, results are bitwise reproducible.
 *
 * Use: create one workspace per implementation and shape, then call forward and backward as often
 * as needed with any buffers of that shape; `saved` (attention_saved_bytes) carries the forward's
 * state to the backward:
 *
 *   AttentionWorkspace *ws = attention_workspace_create(ATTN_FLASH, B, T, Hq, Hkv, D);
 *   attention_forward_gpu(cublas, ws, out, saved, q, k, v, stream);
 *   attention_backward_gpu(cublas, ws, dqkv, dout, out, saved, q, k, v, stream);  // overwrites dqkv
 *   attention_workspace_free(ws);
 *
 * The implementation is split by the project's rule that kernels include no host headers:
 * kernels/attention.cu and kernels/flash_attention.cu hold the kernels and their launchers (second
 * part of this header, and flash_attention.h), src/gpu/attention.c the workspace and the sequences.
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

typedef enum { ATTN_FLASH, ATTN_CUBLAS } AttnImpl;

typedef struct AttentionWorkspace AttentionWorkspace;

/* ATTN_FLASH where its kernels are built for head dim D, else ATTN_CUBLAS. */
AttnImpl attention_default_impl(int D);
/* "flash" or "cublas". */
const char *attention_impl_name(AttnImpl impl);

/* Device bytes of the state a forward saves for its backward (per layer, the caller's):
 *   flash   B*Hq*T*4      fp32 log-sum-exp of the scaled scores, (B, Hq, T), natural log
 *   cublas  B*Hq*T*T*2    bf16 probabilities (B, Hq, T, T), zeros above the diagonal */
size_t attention_saved_bytes(AttnImpl impl, int B, int T, int Hq);

/* Device bytes a workspace of this implementation and shape needs (for the memory plan):
 *   flash   B*Hq*T*4 rounded up to 256: the backward's fp32 rowsum(dout * out)
 *   cublas  three parts, each rounded up to 256 bytes:
 *             scores  B*Hq*T*T*4      fp32 scores, then dP, then dS (bf16, in place)
 *           + heads   B*Hq*T*D*4      fp32 per-query-head dK/dV before the group sum (0 when Hq == Hkv)
 *           + tables  12*nb*B*Hq*8    GEMM pointer arrays, nb = causal row blocks (at most 16)
 * The saved state is NOT included. Dies on a bad shape (any dimension < 1, Hq not a multiple of
 * Hkv, B*Hq*T >= 2^31 score rows; flash: a head dim its kernels are not built for, T beyond
 * FLASH_ATTENTION_MAX_T). */
size_t attention_workspace_bytes(AttnImpl impl, int B, int T, int Hq, int Hkv, int D);

/* Creates the workspace for one implementation and shape with its own cudaMalloc (synchronous:
 * call it at setup, never inside a captured or timed region). Prints nothing. Dies with a clear
 * message on a bad shape or out of memory. */
AttentionWorkspace *attention_workspace_create(AttnImpl impl, int B, int T, int Hq, int Hkv, int D);
/* The same inside a device block the caller owns (e.g. from the memory plan): mem must be 256-byte
 * aligned and hold attention_workspace_bytes(impl, B, T, Hq, Hkv, D) bytes; it is not freed by
 * attention_workspace_free. */
AttentionWorkspace *attention_workspace_create_at(AttnImpl impl, void *mem, size_t bytes, int B, int T, int Hq,
                                                  int Hkv, int D);
/* Frees the workspace (and its memory when it allocated it; cudaFree is synchronous, so no call
 * using ws may still be running). NULL is fine. */
void attention_workspace_free(AttentionWorkspace *ws);

/* Forward: out = softmax(mask(q k^T / sqrt(D))) v per (batch, query head); saved receives the
 * state for the backward (attention_saved_bytes). Every element of out and saved is written.
 * Inputs are not modified.
 *
 * Backward: given dout, overwrites dq, dk and dv (NOT accumulated: add into a gradient yourself if
 * you need to). out and saved must be the forward's for these q, k, v (the cuBLAS path does not
 * read out). dk/dv sum the group's query heads.
 *
 * Both run asynchronously on `stream`. The flash path launches kernels only (cublas may be NULL).
 * The cuBLAS path sends cuBLAS and its kernels there: the handle must be bound to `stream`
 * (cublasSetStream); if it is not, these calls bind it, and cublasSetStream resets a workspace
 * that was set with cublasSetWorkspace, so bind it yourself once at setup.
 * One workspace serves any number of layers and buffers, but its calls must be stream-ordered
 * (one stream, or explicit events between streams): the scratch (and the cuBLAS path's pointer
 * tables, rebuilt on the device by one small kernel per call) is rewritten by every call; nothing
 * is allocated, copied from the host or synchronized inside these calls.
 * Buffers: device pointers, 16-byte aligned (cudaMalloc gives 256), none overlapping an output. */
void attention_forward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *out, void *saved, const bf16_t *q,
                           const bf16_t *k, const bf16_t *v, cudaStream_t stream);
void attention_backward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *dqkv, const bf16_t *dout,
                            const bf16_t *out, const void *saved, const bf16_t *q, const bf16_t *k, const bf16_t *v,
                            cudaStream_t stream);

/* Where part `part` (0: dq, 1: dk, 2: dv) of a token's row of dqkv lies: its first column and its width (elements);
 * the row is (Hq + 2 Hkv) * D wide. The layers' wq, wk, wv side by side follow the same columns. */
static inline void attention_grad_part(int Hq, int Hkv, int D, int part, long *col, long *width) {
    *col = part == 0 ? 0 : (long)(Hq + (part - 1) * Hkv) * D;
    *width = (long)(part == 0 ? Hq : Hkv) * D;
}

/* ------------------------------------------------------------------------------------------------
 * Kernel launchers of the cuBLAS path (kernels/attention.cu), used by its sequence. */

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

/* dst (B*T rows of Hkv*D bf16, ld elements apart) = sum over the Hq/Hkv query heads of each kv group, in head
 * order, of heads (B, Hq, T, D) fp32 (fp32 sums, one rounding). Overwrites dst's Hkv*D columns. */
void attention_group_sum(bf16_t *dst, long long ld, const float *heads, int B, int T, int Hq, int Hkv, int D,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
