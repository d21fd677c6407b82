/*
 * Fused causal grouped-query attention, flash style (issue 10): forward and backward without the
 * T x T score matrix. Same layouts and semantics as kernels/attention.h (the cuBLAS path):
 *   q, out, dout, dq    bf16 (B*T, Hq*D)   row n = b*T + t, query head h at columns [h*D, (h+1)*D)
 *   k, v, dk, dv        bf16 (B*T, Hkv*D)  kv head j at columns [j*D, (j+1)*D)
 *   lse, delta          fp32 (B, Hq, T)    entry (b*Hq + h)*T + t
 * Query head h reads kv head h / (Hq/Hkv) (no copy of K/V); scale 1/sqrt(D); causal (t attends
 * to u <= t); q and k already carry RoPE (the separate kernel of rope.h, as before: fusing it
 * into this kernel or the QKV GEMM's epilogue is a measurement still to make).
 *
 * Forward: out = softmax(q k^T * scale) v, online softmax over key blocks in fp32 (exp2 with the
 * scale folded into log2 e), fully masked key blocks never visited; lse[t] = log(sum_u exp(s_tu *
 * scale)) (natural log) saved for the backward. Two kernels (flash_attention_forward_kernel):
 * mma.sync (flash_attention.cu) and, for D = 128 on Hopper, wgmma + TMA (flash_attention_sm90.cu).
 * Backward: delta[t] = rowsum(dout * out) (fp32, from the bf16 out); then two kernels
 * (flash_attention_backward_kernel): mma.sync (flash_attention.cu: one kernel per kv block computes
 * dK and dV, the probabilities recomputed from lse, summed over the group's query heads and the
 * query blocks in a fixed order, written once; one per query block computes dQ) and, for D = 64
 * and 128 on Hopper, wgmma + TMA (flash_attention_bwd_sm90.cu: one pass per kv block; each kv
 * block's fp32 dQ partial is added into a workspace sum in kv block order, ordered by integer
 * counters). bf16 into every mma, fp32 accumulation, no floating-point atomics: bitwise
 * reproducible for a fixed GPU, toolkit, kernel choice and shape.
 *
 * Supported head dims: 16, 32, 64, 128 (flash_attention_supported); any T >= 1 (tails masked).
 * Pointers: device, 16-byte aligned (cudaMalloc gives 256), outputs not overlapping inputs.
 * Everything runs asynchronously on `stream`; nothing is allocated or synchronized.
 */
#ifndef MOKC_KERNELS_FLASH_ATTENTION_H
#define MOKC_KERNELS_FLASH_ATTENTION_H

#include <stddef.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest sequence: the grids have at most 65535 blocks of 64 query rows. */
#define FLASH_ATTENTION_MAX_T (65535 * 64)

/* 1 when the kernels are built for head dim D, else 0. */
int flash_attention_supported(int D);

/* The forward's kernel for head dim D: "wgmma" (flash_attention_sm90.cu: TMA + wgmma,
 * warp-specialised; D = 128 in an sm_90a build on a compute capability 9.0 GPU) where it runs,
 * else "mma" (mma.sync, every supported D). The environment variable MOKC_FLASH_FWD=mma|wgmma
 * overrides; wgmma where it does not run stops the run with an error. */
const char *flash_attention_forward_kernel(int D);

/* Overwrites out and lse (every element of both) with the kernel flash_attention_forward_kernel
 * names. Stops the run with an error for an unsupported D or T > FLASH_ATTENTION_MAX_T. */
void flash_attention_forward(bf16_t *out, float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v, int B, int T,
                             int Hq, int Hkv, int D, cudaStream_t stream);

/* The backward's kernel for head dim D: "wgmma" (flash_attention_bwd_sm90.cu: TMA + wgmma,
 * warp-specialised, dQ summed in a fixed order; D = 64 or 128 where the wgmma forward runs) or
 * "mma" (mma.sync, every supported D). MOKC_FLASH_BWD=mma|wgmma overrides; wgmma where it does
 * not run stops the run with an error. */
const char *flash_attention_backward_kernel(int D);

/* Device bytes of the backward's scratch for this shape: delta ((B, Hq, T) fp32, rounded up to
 * 256) and, for D = 64 and 128, the wgmma kernel's counters and fp32 dQ partial sums
 * (4 * (1 + B*Hq*NQ) rounded up to 256, + B*Hq*NQ*64*D*4, NQ = ceil(T / 64)). Depends on the shape
 * only (not on the GPU or MOKC_FLASH_BWD), so one size serves either kernel. */
size_t flash_attention_backward_workspace_bytes(int B, int T, int Hq, int D);

/* Overwrites dqkv (NOT accumulated; attention.h's layout: a token's dq, dk, dv in one row of (Hq + 2 Hkv) * D)
 * with the kernel flash_attention_backward_kernel names, and the scratch `work` (256-byte aligned,
 * flash_attention_backward_workspace_bytes; its contents need no initialisation and are not kept). out and lse
 * are the forward's for these q, k, v. */
void flash_attention_backward(bf16_t *dqkv, void *work, const bf16_t *dout, const bf16_t *out, const float *lse,
                              const bf16_t *q, const bf16_t *k, const bf16_t *v, int B, int T, int Hq, int Hkv, int D,
                              cudaStream_t stream);

/* The wgmma forward (flash_attention_sm90.cu), for flash_attention_forward: whether it runs on the
 * current device (cached per device), and the launch (D = 128, else as flash_attention_forward). */
int flash_attention_sm90_available(void);
void flash_attention_forward_sm90(bf16_t *out, float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v, int B,
                                  int T, int Hq, int Hkv, cudaStream_t stream);

/* The wgmma backward (flash_attention_bwd_sm90.cu), for flash_attention_backward (D = 64, 128;
 * runs where flash_attention_sm90_available): the bytes of its part of the scratch (0 for other
 * D), and the launch, given delta (already computed) and that part (`work`). */
size_t flash_attention_backward_sm90_bytes(int B, int T, int Hq, int D);
void flash_attention_backward_sm90(bf16_t *dqkv, void *work, const float *delta, const bf16_t *dout,
                                   const float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v, int B, int T,
                                   int Hq, int Hkv, int D, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
