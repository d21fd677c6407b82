/* Row-major GEMM wrappers over cuBLAS (see gemm.h). Row-major C = A B is column-major
 * C^T = B^T A^T, so every call passes B first and swaps the roles of M and N.
 * Single GEMMs go through cuBLASLt: each distinct problem gets its descriptors and the
 * heuristic's first algorithm once (a small cache), so repeated calls cost one cublasLtMatmul.
 * No workspace: the algorithms then need no split-K reduction buffer, there is no per-stream state
 * to manage, and each output element is summed in one place. */
#include "gpu/gemm.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"

static cudaDataType_t dtype(GemmType t) { return t == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

#define MAX_PLANS 512

typedef struct {
    int trans_a, trans_b, M, N, K, accumulate;
    GemmType ta, tb, tc;
    int device;
    uint32_t align_a, align_b, align_c; /* bytes the pointers are aligned to, <= 256 */
} PlanKey;

typedef struct {
    PlanKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} Plan;

static cublasLtHandle_t lt_handle;
static Plan plans[MAX_PLANS];
static int n_plans;

static const Plan *plan_of(const PlanKey *key) {
    for (int i = 0; i < n_plans && i < MAX_PLANS; i++)
        if (memcmp(&plans[i].key, key, sizeof *key) == 0) return &plans[i];
    if (!lt_handle) cublasCheck(cublasLtCreate(&lt_handle));
    /* A full cache recycles its oldest plan: the heuristic gives the same algorithm for the same
     * problem every time, so a rebuilt plan computes the same bits. */
    Plan *p = &plans[n_plans % MAX_PLANS];
    if (n_plans >= MAX_PLANS) {
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->lc);
    }
    p->key = *key;
    /* Column-major view: C^T (N x M) = op(B)^T (N x K) op(A)^T (K x M). */
    cublasOperation_t op_b = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    /* Stored shapes (column-major rows x cols; the row-major leading dimension is the column-major one). */
    int b_rows = key->trans_b ? key->K : key->N, b_cols = key->trans_b ? key->N : key->K;
    int a_rows = key->trans_a ? key->M : key->K, a_cols = key->trans_a ? key->K : key->M;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, dtype(key->tb), (uint64_t)b_rows, (uint64_t)b_cols, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, dtype(key->ta), (uint64_t)a_rows, (uint64_t)a_cols, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, dtype(key->tc), (uint64_t)key->N, (uint64_t)key->M, key->N));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws_bytes = 0;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                     sizeof ws_bytes));
    /* The heuristic otherwise assumes 256-byte aligned buffers; row offsets into a buffer (expert
     * segments, LM-head chunks) can be less aligned. In cuBLASLt's terms B is our A and vice versa. */
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_b,
                                                     sizeof key->align_b));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_a,
                                                     sizeof key->align_a));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_c,
                                                     sizeof key->align_c));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_c,
                                                     sizeof key->align_c));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->lb, p->la, p->lc, p->lc, pref, 1, &result,
                                               &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0)
        mokc_die(MOKC_EXIT_RUNTIME, "report the shape; the model dimensions may need to be multiples of 8",
                 "cuBLASLt has no algorithm for a %dx%dx%d GEMM (trans %d/%d)", key->M, key->N, key->K, key->trans_a,
                 key->trans_b);
    p->algo = result.algo;
    n_plans++;
    return p;
}

static uint32_t alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

/* D = alpha op(A) op(B) + beta C through the problem's cached plan; C == D is gemm_rm. */
static void lt_matmul(int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta, const void *B,
                      GemmType tb, const void *C, void *D, GemmType tc, float alpha, float beta, cudaStream_t stream) {
    if (M == 0 || N == 0) return;
    PlanKey key;
    memset(&key, 0, sizeof key); /* the key is compared as bytes: no stray padding */
    key.trans_a = trans_a, key.trans_b = trans_b, key.M = M, key.N = N, key.K = K, key.accumulate = beta != 0;
    key.ta = ta, key.tb = tb, key.tc = tc;
    const uint32_t align_c = alignment(C), align_d = alignment(D);
    key.align_a = alignment(A), key.align_b = alignment(B), key.align_c = align_c < align_d ? align_c : align_d;
    cudaCheck(cudaGetDevice(&key.device));
    const Plan *p = plan_of(&key);
    cublasCheck(cublasLtMatmul(lt_handle, p->desc, &alpha, B, p->lb, A, p->la, &beta, C, p->lc, D, p->lc, &p->algo,
                               NULL, 0, stream));
}

void gemm_rm(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
             const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, C, tc, alpha, beta, stream);
}

void gemm_rm_out(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                 const void *B, GemmType tb, const float *C, float *D, float alpha, float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, D, GEMM_F32, alpha, beta, stream);
}

void gemm_rm_dynamic(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
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

