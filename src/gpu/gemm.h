/*
 * Row-major GEMMs on cuBLAS: bf16 or fp32 operands, fp32 accumulation, in the layout the rest of
 * mokc uses (activations (tokens, width), weights (in, out)). cuBLAS is column-major; these
 * wrappers swap the operands so callers never think about it. Single GEMMs and gemm_rm_ld run on
 * cuBLASLt, the other batched ones on cuBLAS; fp32 split-K for small outputs (gemm_rm_splitk) is
 * ours. Deterministic for a fixed GPU, toolkit and shape (the same algorithm every time, one
 * workspace per handle, no atomics). Not thread-safe: call from one host thread.
 */
#ifndef MOKC_GPU_GEMM_H
#define MOKC_GPU_GEMM_H

#include <cublas_v2.h>
#include <stddef.h>

typedef enum { GEMM_BF16, GEMM_F32 } GemmType;

/* C[M,N] = alpha * op(A) @ op(B) + beta * C. op(A) is (M,K): A is stored (M,K), or (K,M) when
 * trans_a. op(B) is (K,N): B is stored (K,N), or (N,K) when trans_b. */
void gemm_rm(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
             const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta);

/* The same on cuBLAS without a cached plan, for shapes that change from call to call (the rows of
 * an expert's segment): the plan cache stays bounded, and every shape takes the same path. */
void gemm_rm_dynamic(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                     const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta);

/* The same for `batch` problems at fixed element strides between consecutive A, B and C. */
void gemm_rm_strided(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                     long long stride_a, const void *B, GemmType tb, long long stride_b, void *C, GemmType tc,
                     long long stride_c, int batch, float alpha, float beta);

/* The same for `batch` problems given by device arrays of pointers, with explicit leading
 * dimensions (row-major: elements between consecutive rows). */
void gemm_rm_batched(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *const *A,
                     GemmType ta, int lda, const void *const *B, GemmType tb, int ldb, void *const *C, GemmType tc,
                     int ldc, int batch, float alpha, float beta);

/* gemm_rm with explicit leading dimensions (row-major: elements between consecutive rows of the
 * stored A, B, C) and `batch` problems at fixed element strides (unused when batch == 1), on
 * cuBLASLt with a cached plan: the whole batch is one launch. */
void gemm_rm_ld(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta, int lda,
                long long stride_a, const void *B, GemmType tb, int ldb, long long stride_b, void *C, GemmType tc,
                int ldc, long long stride_c, int batch, float alpha, float beta);

/* Split-K for fp32 GEMMs whose output has too few tiles to fill the GPU (the MoE router: N x E
 * logits over K = C, a C x E gradient over K = tokens). K is cut into S chunks of Kc columns (Kc =
 * floor(K / S) rounded down to a multiple of 4, so chunk starts keep 16-byte alignment); one
 * batched gemm_rm_ld writes the S partials alpha * op(A)_s op(B)_s into `scratch`, the last
 * K - S*Kc columns (fewer than 4S) are added into the last partial by a second GEMM, and
 * kernels/reduce.h gpu_sum_partials_f32 writes C = P_0 + ... + P_{S-1} (that order) + beta * C.
 * No atomics: bitwise reproducible for a fixed shape, S, GPU and library; the bits differ from
 * gemm_rm's (another summation order). C and scratch must not overlap; C is not read if beta == 0.
 *
 * The rule for S (gemm_splitk_chunks), with tiles = ceil(M/128) * ceil(N/128) nominal output tiles
 * and waves(t) = ceil(t / sms): S ranges over 1 .. min(16, K / 256, 512 / tiles) (chunks of at
 * least 256, at most 512 tiles of partials: <= 32 MiB of scratch), and S minimises a cost in
 * "tile steps" (one k of a 128x128 fp32 tile on one SM, ~65 ns on an H200; in that time HBM moves
 * ~32768 partial elements written and read back):
 *   cost(1) = waves(tiles) * K
 *   cost(S) = waves(S * tiles) * Kc + S*M*N / 32768 + 48 (the reduction's launch)
 *             [+ 48 + waves(tiles) * (K - S*Kc) + M*N / 32768 when there is a remainder]
 * ties to the smaller S; S > 1 only if it saves at least 1/8 of cost(1) (the model is rough).
 * On an H200 (132 SMs): 8192x128x2048 -> 2, 2048x128x8192 -> 8, 4096x384x7168 -> 4,
 * 7168x384x4096 -> 3, and 1 for outputs of more than 256 tiles or K < 512. */
int gemm_splitk_chunks(int M, int N, int K, int sms);

/* Scratch bytes gemm_rm_splitk may use for an M x N x K problem on any GPU (0: it never splits). */
size_t gemm_splitk_scratch_bytes(int M, int N, int K);

/* C[M,N] = alpha * op(A) @ op(B) + beta * C in fp32 (A, B, C as gemm_rm), split-K with S from
 * gemm_splitk_chunks on this GPU, limited to what scratch_bytes holds; S == 1 is gemm_rm. Runs on
 * h's stream. */
void gemm_rm_splitk(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const float *A, const float *B,
                    float *C, float alpha, float beta, float *scratch, size_t scratch_bytes);

/* The same with S given (tests, benchmarks): 1 <= S, floor(K / S) >= 4 when S > 1, and scratch
 * holding gemm_splitk_partial_floats(M, N) * S floats (256-byte aligned for the fast path). */
void gemm_rm_splitk_n(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const float *A, const float *B,
                      float *C, float alpha, float beta, int S, float *scratch);

/* Floats between consecutive partials in the scratch: M*N rounded up to a multiple of 64. */
long gemm_splitk_partial_floats(int M, int N);

#endif
