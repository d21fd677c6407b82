/*
 * fp32 GEMMs on bf16 tensor cores, for the MoE router (src/gpu/moe_router.h): cuBLAS's fp32
 * GEMMs ran on the CUDA cores at about 30 TFLOP/s; six bf16 products on the tensor cores are
 * faster (2026-11-30 (s4) in docs/perf-notes.md).
 *
 * Each fp32 operand element x is split in three bf16 terms, x = h + m + l: h = bf16(x) and
 * m = bf16(x - h), rounded to nearest (ties away from zero), and l = x - h - m, which has at
 * most 8 significant bits left (8 + 8 + 8 cover fp32's 24): exact for 2^-110 <= |x| < 3.39e38;
 * below, l loses what falls under bf16's smallest step (an error under 2^-133); above, and for
 * infinities, h is infinite and the results NaN (the router stops on non-finite scores). Then
 *   a b = a_l b_h + a_m b_m + a_m b_h + a_h b_l + a_h b_m + a_h b_h
 * (each dropped term at most 2^-24 of a b); each bf16 product is exact, and the tensor cores add
 * them into fp32 accumulators in that order, per 16-wide k step. The tensor cores' fp32 additions
 * truncate, so every 256 of K the accumulators are added into a second set in IEEE arithmetic:
 * errors stay about those of an fp32 GEMM.
 *
 * C (M, N) = alpha op(A) op(B) + beta C, row-major as gemm.h's gemm_rm: op(A) is (M, K), A stored
 * (M, K), or (K, M) when trans_a; op(B) is (K, N), B stored (K, N), or (N, K) when trans_b. No
 * alignment or size requirement. K runs in S chunks (split-K, for outputs with few tiles): chunk
 * z writes its partial to scratch + z * M * N, and kernels/reduce.h's gpu_sum_partials_f32 adds
 * them in order. No atomics: bitwise reproducible for a fixed shape, S and GPU.
 */
#ifndef MOKC_KERNELS_GEMM_F32X3_H
#define MOKC_KERNELS_GEMM_F32X3_H

#include <stddef.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An operand: its fp32 values, and optionally their three bf16 planes from gpu_split_f32x3 (h,
 * m, l at planes + {0, 1, 2} plane_stride, each laid out as the fp32 matrix). The planes hold the
 * split the kernels would make, so the results are the same bits with or without them; the
 * Hopper kernel reads them instead of splitting (worth it for an operand that many blocks read:
 * the router weights in the forward); the mma.sync kernel reads no planes.
 * Either operand may instead be bf16 values: f32 NULL, planes the values (plane_stride unused).
 * Their split has m = l = 0, so the results are those of the values widened to fp32, bit for bit;
 * the Hopper kernel runs only the products of their h (three of the six, one when both operands
 * are bf16 values): the router's activations, and both operands of its backward's GEMMs (bf16 as
 * every GEMM's, DESIGN.md). */
typedef struct {
    const float *f32;
    const bf16_t *planes;
    long plane_stride;
} GemmF32x3Operand;

/* planes (3 n bf16) <- the split of x (n fp32): h, then m, then l (plane_stride n). */
void gpu_split_f32x3(bf16_t *planes, const float *x, long n, cudaStream_t stream);

/* The chunk count for a GPU of `sms` multiprocessors: the S (at most 16, K / S >= 256, S M N
 * partial floats within the scratch below) whose S x tiles items (128 x 128 tiles) take the
 * fewest waves of whole-K time, ceil(S tiles / sms) / S; more chunks only for 5 % less. So a
 * grid that fills the GPU in whole waves is not split, and one that leaves SMs idle, in its only
 * or its last wave, is. */
int gpu_gemm_f32x3_chunks(int M, int N, int K, int sms);

/* Scratch bytes that any shape's partials need on a GPU of `sms` multiprocessors under the rule
 * above: four waves of 128 x 128 tiles (S M N <= 4 sms 128 128 floats). */
size_t gpu_gemm_f32x3_scratch_bytes(int sms);

/* The GEMM in S chunks (S >= 1; scratch holds S * M * N floats when S > 1, else unused), on the
 * Hopper kernel where the GPU and the binary have it, else the mma.sync one. C must not overlap
 * A, B or scratch; it is not read when beta == 0. */
void gpu_gemm_f32x3(int trans_a, int trans_b, int M, int N, int K, GemmF32x3Operand A, GemmF32x3Operand B, float *C,
                    float alpha, float beta, int S, float *scratch, cudaStream_t stream);

/* The same on a chosen kernel (tests): GEMM_F32X3_WGMMA needs mok_sm90_available(). The two
 * kernels' bits may differ (their tensor-core instructions add in their own ways). */
enum { GEMM_F32X3_AUTO = 0, GEMM_F32X3_WGMMA = 1, GEMM_F32X3_MMA = 2 };
void gpu_gemm_f32x3_with(int impl, int trans_a, int trans_b, int M, int N, int K, GemmF32x3Operand A,
                         GemmF32x3Operand B, float *C, float alpha, float beta, int S, float *scratch,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
