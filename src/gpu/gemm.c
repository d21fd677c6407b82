/* Row-major GEMM wrappers over cuBLAS (see gemm.h). Row-major C = A B is column-major
 * C^T = B^T A^T, so every call passes B first and swaps the roles of M and N.
 * Single GEMMs go through cuBLASLt: each distinct problem gets its descriptors and the
 * heuristic's first algorithm once (a small cache), so repeated calls cost one cublasLtMatmul.
 * Problems whose M or K changes from call to call (an expert's rows) share a plan per step of a
 * geometric grid: asking the heuristic for every new shape cost about 50 us of host time a call
 * (s29 r1), more than the GEMM itself.
 * No workspace: the algorithms then need no split-K reduction buffer, there is no per-stream state
 * to manage, and each output element is summed in one place. */
#include "gpu/gemm.h"

#include <cublasLt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"

static cudaDataType_t dtype(GemmType t) { return t == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* An open-addressed table; when it holds MAX_PLANS it is emptied and refilled as calls come: the
 * heuristic gives the same algorithm for the same problem every time, so rebuilt plans compute the
 * same bits. */
#define PLAN_SLOTS 2048 /* a power of two */
#define MAX_PLANS (PLAN_SLOTS / 2)

typedef struct {
    int trans_a, trans_b, M, N, K, accumulate;
    int dynamic; /* 1: M and K rounded (dynamic_dims); 2: the exact shape, the step's algorithm having failed */
    GemmType ta, tb, tc;
    int device;
    uint32_t align_a, align_b, align_c; /* bytes the pointers are aligned to, <= 256 */
    int64_t ld[3];                      /* A's, B's, C's leading dimension; 0: packed (the stored row's width) */
} PlanKey;

typedef struct {
    PlanKey key;
    int used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} Plan;

static cublasLtHandle_t lt_handle;
static Plan plans[PLAN_SLOTS];
static int n_plans;

/* The grid of a dynamic dimension: 16 x 2^j and 24 x 2^j, steps 1.5 x or 4/3 x apart, so from 16
 * on an algorithm serves problems at least 2/3 the size it was chosen for. */
static int dynamic_step(int n) {
    for (int lo = 16; lo <= INT_MAX / 4; lo *= 2) {
        if (n <= lo) return lo;
        if (n <= lo + lo / 2) return lo + lo / 2;
    }
    return n;
}

/* A dynamic plan's M and K: each rounded to its step where it is no operand's leading dimension
 * (M: A's when trans_a; K: A's unless trans_a, B's when trans_b), so the heuristic sees the exact
 * leading dimensions and their alignment. The rows of an expert's segment are M in the products
 * by the weights and K in the weight gradients': rounded; the model's widths beside them: exact. */
static void dynamic_dims(PlanKey *key, int M, int K) {
    key->M = key->trans_a ? M : dynamic_step(M);
    key->K = key->trans_a && !key->trans_b ? dynamic_step(K) : K;
}

static uint32_t key_hash(const PlanKey *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof *key; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static void plans_clear(void) {
    for (int i = 0; i < PLAN_SLOTS; i++) {
        Plan *p = &plans[i];
        if (!p->used) continue;
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->lc);
        p->used = 0;
    }
    n_plans = 0;
}

/* The stored shapes of a problem as cuBLASLt's column-major layouts (rows, cols, leading dimension: a row-major
 * row is a column-major column, so the key's leading dimension is the layout's, packed the rows). */
static void layout_shapes(const PlanKey *key, int M, int K, uint64_t shape[3][3]) {
    shape[0][0] = (uint64_t)(key->trans_a ? M : K), shape[0][1] = (uint64_t)(key->trans_a ? K : M); /* A */
    shape[1][0] = (uint64_t)(key->trans_b ? K : key->N), shape[1][1] = (uint64_t)(key->trans_b ? key->N : K); /* B */
    shape[2][0] = (uint64_t)key->N, shape[2][1] = (uint64_t)M; /* C */
    for (int i = 0; i < 3; i++) shape[i][2] = key->ld[i] ? (uint64_t)key->ld[i] : shape[i][0];
}

static Plan *plan_of(const PlanKey *key) {
    uint32_t i = key_hash(key) & (PLAN_SLOTS - 1);
    for (; plans[i].used; i = (i + 1) & (PLAN_SLOTS - 1))
        if (memcmp(&plans[i].key, key, sizeof *key) == 0) return &plans[i];
    if (n_plans >= MAX_PLANS) {
        plans_clear();
        i = key_hash(key) & (PLAN_SLOTS - 1);
    }
    if (!lt_handle) cublasCheck(cublasLtCreate(&lt_handle));
    Plan *p = &plans[i];
    p->key = *key;
    /* Column-major view: C^T (N x M) = op(B)^T (N x K) op(A)^T (K x M). */
    cublasOperation_t op_b = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    uint64_t s[3][3];
    layout_shapes(key, key->M, key->K, s);
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, dtype(key->ta), s[0][0], s[0][1], (int64_t)s[0][2]));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, dtype(key->tb), s[1][0], s[1][1], (int64_t)s[1][2]));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, dtype(key->tc), s[2][0], s[2][1], (int64_t)s[2][2]));
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
                 "cuBLASLt has no algorithm for a %dx%dx%d GEMM (trans %d/%d%s)", key->M, key->N, key->K,
                 key->trans_a, key->trans_b, key->dynamic == 1 ? ", M and K rounded up to their grid steps" : "");
    p->algo = result.algo;
    p->used = 1;
    n_plans++;
    return p;
}

static uint32_t alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

/* The exact shape into a dynamic plan's layouts (a plan's layouts start at its key's shape). */
static void set_shape(Plan *p, int M, int K) {
    uint64_t s[3][3];
    layout_shapes(&p->key, M, K, s);
    cublasLtMatrixLayout_t l[3] = {p->la, p->lb, p->lc};
    for (int i = 0; i < 3; i++) {
        const int64_t ld = (int64_t)s[i][2];
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_ROWS, &s[i][0], sizeof s[i][0]));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_COLS, &s[i][1], sizeof s[i][1]));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld));
    }
}

/* D = alpha op(A) op(B) + beta C through the problem's cached plan; C == D is gemm_rm. A dynamic
 * problem runs on the plan of its grid step, at its own shape; should cuBLASLt refuse that
 * algorithm for the shape, on a plan of its own (which shapes fall back depends on the shape alone,
 * so the bits stay fixed). */
static void lt_matmul(int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta, const void *B,
                      GemmType tb, const void *C, void *D, GemmType tc, float alpha, float beta, int dynamic,
                      const int64_t ld[3], cudaStream_t stream) {
    if (M == 0 || N == 0) return;
    if (K <= 0 || M < 0 || N < 0)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gemm: a %dx%dx%d product (internal: K must be positive)", M, N, K);
    PlanKey key;
    memset(&key, 0, sizeof key); /* the key is hashed and compared as bytes: no stray padding */
    key.trans_a = trans_a, key.trans_b = trans_b, key.M = M, key.N = N, key.K = K, key.accumulate = beta != 0;
    if (ld) {
        uint64_t s[3][3];
        layout_shapes(&key, M, K, s); /* key.ld still 0: the packed widths */
        for (int i = 0; i < 3; i++) {
            if (ld[i] < (int64_t)s[i][0])
                mokc_die(MOKC_EXIT_RUNTIME, NULL,
                         "gemm: a %dx%dx%d product (trans %d/%d) with operand %c's rows %lld elements apart, fewer "
                         "than the %llu of a row (internal)", M, N, K, trans_a, trans_b, "ABC"[i], (long long)ld[i],
                         (unsigned long long)s[i][0]);
            key.ld[i] = ld[i] == (int64_t)s[i][0] ? 0 : ld[i]; /* packed shares the packed plan */
        }
    }
    key.dynamic = dynamic;
    if (dynamic) dynamic_dims(&key, M, K);
    key.ta = ta, key.tb = tb, key.tc = tc;
    const uint32_t align_c = alignment(C), align_d = alignment(D);
    key.align_a = alignment(A), key.align_b = alignment(B), key.align_c = align_c < align_d ? align_c : align_d;
    cudaCheck(cudaGetDevice(&key.device));
    Plan *p = plan_of(&key);
    if (dynamic) set_shape(p, M, K);
    cublasStatus_t st = cublasLtMatmul(lt_handle, p->desc, &alpha, B, p->lb, A, p->la, &beta, C, p->lc, D, p->lc,
                                       &p->algo, NULL, 0, stream);
    if (dynamic && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
        key.dynamic = 2, key.M = M, key.K = K;
        p = plan_of(&key);
        st = cublasLtMatmul(lt_handle, p->desc, &alpha, B, p->lb, A, p->la, &beta, C, p->lc, D, p->lc, &p->algo,
                            NULL, 0, stream);
    }
    cublasCheck(st);
}

void gemm_rm(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
             const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, C, tc, alpha, beta, 0, NULL, stream);
}

void gemm_rm_ld(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                long lda, const void *B, GemmType tb, long ldb, void *C, GemmType tc, long ldc, float alpha,
                float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    const int64_t ld[3] = {lda, ldb, ldc};
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, C, tc, alpha, beta, 0, ld, stream);
}

void gemm_rm_out(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                 const void *B, GemmType tb, const float *C, float *D, float alpha, float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, D, GEMM_F32, alpha, beta, 0, NULL, stream);
}

void gemm_rm_dynamic(cublasHandle_t h, int trans_a, int trans_b, int M, int N, int K, const void *A, GemmType ta,
                     const void *B, GemmType tb, void *C, GemmType tc, float alpha, float beta) {
    cudaStream_t stream;
    cublasCheck(cublasGetStream(h, &stream));
    lt_matmul(trans_a, trans_b, M, N, K, A, ta, B, tb, C, C, tc, alpha, beta, 1, NULL, stream);
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

