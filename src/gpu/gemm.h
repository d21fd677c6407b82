/*
 * Row-major GEMMs on cuBLAS: bf16 or fp32 operands, fp32 accumulation, in the layout the rest of
 * mokc uses (activations (tokens, width), weights (in, out)). cuBLAS is column-major; these
 * wrappers swap the operands so callers never think about it. Single GEMMs (gemm_rm) run on
 * cuBLASLt, the batched ones on cuBLAS (the router's fp32 GEMMs are kernels/gemm_f32x3.h's).
 * Deterministic for a fixed GPU, toolkit and shape (the same algorithm every time; the cuBLASLt
 * ones without a workspace, cuBLAS's with one per handle; no atomics). Not thread-safe: call from
 * one host thread.
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
/* The same with operands inside wider rows: lda, ldb, ldc elements between consecutive rows of A, B and C as
 * stored (at least the stored row's width: K or M for A, N or K for B, N for C). */
void gemm_rm_ld(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                long lda, const void *B, GemmType tb, long ldb, void *C, GemmType tc, long ldc, float alpha,
                float beta);
/* The same into another buffer: D[M,N] = alpha * op(A) @ op(B) + beta * C, C and D fp32 of shape (M,N), apart or
 * the same (a residual stream's add without copying it first): the same bits as gemm_rm on a copy of C aligned
 * as D (the alignment picks the algorithm). fp32 only: with a bf16 C, cuBLASLt's out-of-place results differed
 * from its in-place ones (s22 r6). */
void gemm_rm_out(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                 const void *B, GemmType tb, const float *C, float *D, float alpha, float beta);

/* The same for problems whose M or K changes from call to call (the rows of an expert's segment):
 * the plan (and algorithm) is the one of M and K rounded up to a grid of steps 1.5 x or 4/3 x apart
 * where they are no operand's leading dimension, so a layer's experts share a few plans instead of
 * asking cuBLAS's heuristic for each new shape. Bits are fixed for a fixed shape, alignment and
 * GPU, as gemm_rm's. Every GEMM here needs K >= 1. */
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

#endif
