/* Row-major GEMM wrappers over cuBLAS (see gemm.h). Row-major C = A B is column-major
 * C^T = B^T A^T, so every call passes B first and swaps the roles of M and N. */
#include "gpu/gemm.h"

#include "gpu/check.h"

static cudaDataType_t dtype(GemmType t) { return t == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

void gemm_rm(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
             const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta) {
    gemm_rm_strided(h, trans_a, trans_b, M, N, K, A, ta, 0, B, tb, 0, C, tc, 0, 1, alpha, beta);
}

void gemm_rm_strided(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                     long long stride_a, const void *B, GemmType tb, long long stride_b, void *C, GemmType tc,
                     long long stride_c, int batch, float alpha, float beta) {
    if (M == 0 || N == 0 || batch == 0) return;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ldb = trans_b ? K : N, lda = trans_a ? M : K;
    cublasCheck(cublasGemmStridedBatchedEx(h, op_b, op_a, N, M, K, &alpha, B, dtype(tb), ldb, stride_b, A, dtype(ta),
                                           lda, stride_a, &beta, C, dtype(tc), N, stride_c, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_rm_batched(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *const *A,
                     GemmType ta, int lda, const void *const *B, GemmType tb, int ldb, void *const *C, GemmType tc,
                     int ldc, int batch, float alpha, float beta) {
    if (M == 0 || N == 0 || batch == 0) return;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasGemmBatchedEx(h, op_b, op_a, N, M, K, &alpha, (const void *const *)B, dtype(tb), ldb,
                                    (const void *const *)A, dtype(ta), lda, &beta, (void *const *)C, dtype(tc), ldc,
                                    batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
