/* The MoE router's GEMMs (moe_router.h). */
#include "gpu/moe_router.h"

#include "gpu/gemm.h"

/* The most any row count up to M_max needs. Not simply M_max's: fewer row tiles allow more chunks.
 * Within one count of row tiles the bytes grow with the rows, so the last row of each will do. */
static size_t rows_bound(int M_max, int N, int K) {
    size_t b = 0;
    for (long m = 128;; m += 128) {
        const int rows = m < M_max ? (int)m : M_max;
        const size_t s = gemm_splitk_scratch_bytes(rows, N, K);
        if (s > b) b = s;
        if (rows == M_max) return b;
    }
}

size_t moe_router_scratch_bytes(int N_max, int C, int E) {
    /* the gradient's bound grows with K = tokens */
    size_t s = rows_bound(N_max, E, C), g = gemm_splitk_scratch_bytes(C, E, N_max), d = rows_bound(N_max, C, E);
    if (g > s) s = g;
    return d > s ? d : s;
}

void moe_router_forward(cublasHandle_t h, float *logits, const float *x, const float *router, int N, int C, int E,
                        float *scratch, size_t scratch_bytes) {
    gemm_rm_splitk(h, 0, 0, N, E, C, x, router, logits, 1.0f, 0.0f, scratch, scratch_bytes);
}

void moe_router_backward(cublasHandle_t h, float *g_router, float *dx, const float *dlogits, const float *x,
                         const float *router, int N, int C, int E, float *scratch, size_t scratch_bytes) {
    if (N == 0) return;
    gemm_rm_splitk(h, 1, 0, C, E, N, x, dlogits, g_router, 1.0f, 1.0f, scratch, scratch_bytes);
    gemm_rm_splitk(h, 0, 1, N, C, E, dlogits, router, dx, 1.0f, 1.0f, scratch, scratch_bytes);
}
