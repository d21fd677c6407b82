/*
 * The CPU reference side of the GPU MoE layer tests (test_moe_gpu.c: the unfused layer; test_mok.c:
 * the megakernel), ep = 1: one layer's random weights on the host (the fp32 router as is; expert
 * and shared weights bf16-representable, so the CPU and the GPU's bf16 copies hold the same
 * numbers), their device copies, and inputs that route the same way on the CPU and the GPU.
 * Routing must agree exactly, but the GPU's fp32 router GEMM sums in another order and moves the
 * logits by ~1e-7, so a near-tie would flip a pick: every token's top min(k+1, E) values of
 * score + bias are kept MOE_REF_MARGIN apart (a token closer than that gets a new x row).
 * Random numbers come from the including test's gpu_rng stream (gpu_test.h), in a fixed order.
 */
#ifndef MOKC_TESTS_GPU_MOE_REF_H
#define MOKC_TESTS_GPU_MOE_REF_H

#include <math.h>
#include <stdlib.h>

#include "cpu/moe.h"
#include "gpu/moe_unfused.h"
#include "gpu_test.h"

#define MOE_REF_MARGIN 1e-5

enum { W_ROUTER, W_GATE, W_UP, W_DOWN, W_SGATE, W_SUP, W_SDOWN, W_COUNT };

/* Host weights of one layer, all E experts. */
typedef struct {
    long n[W_COUNT];   /* elements per tensor (the shared ones 0 without shared experts) */
    float *w[W_COUNT];
} MoeRefWeights;

static inline MoeGpuDims moe_ref_gpu_dims(const MoeDims *d) {
    MoeGpuDims g = {.C = d->C, .E = d->E, .k = d->k, .I = d->I, .n_shared = d->n_shared, .sigmoid = d->sigmoid,
                    .norm_topk = d->norm_topk, .scaling = d->scaling, .ep = d->ep, .ep_rank = d->ep_rank};
    return g;
}

/* Draws every tensor uniform in +-1/sqrt(fan-in) (the router in +-2/sqrt(C), so the scores spread). */
static inline void moe_ref_weights_draw(MoeRefWeights *r, const MoeDims *d) {
    const long C = d->C, E = d->E, I = d->I, SI = (long)d->n_shared * d->I;
    r->n[W_ROUTER] = C * E;
    r->n[W_GATE] = r->n[W_UP] = E * C * I;
    r->n[W_DOWN] = E * I * C;
    r->n[W_SGATE] = r->n[W_SUP] = C * SI;
    r->n[W_SDOWN] = SI * C;
    const float ws[W_COUNT] = {2.0f / sqrtf((float)C), 1.0f / sqrtf((float)C), 1.0f / sqrtf((float)C),
                               1.0f / sqrtf((float)I), 1.0f / sqrtf((float)C), 1.0f / sqrtf((float)C),
                               1.0f / sqrtf((float)(SI > 0 ? SI : 1))};
    for (int i = 0; i < W_COUNT; i++) r->w[i] = gpu_rand_array(r->n[i], ws[i], i != W_ROUTER);
}

static inline void moe_ref_weights_free(MoeRefWeights *r) {
    for (int i = 0; i < W_COUNT; i++) free(r->w[i]);
}

/* The CPU view of W_COUNT tensors in MoeRefWeights order (weights, or gradients of that layout). */
static inline MoeWeights moe_ref_cpu_weights(float *const *w) {
    MoeWeights m = {w[W_ROUTER], w[W_GATE], w[W_UP], w[W_DOWN], w[W_SGATE], w[W_SUP], w[W_SDOWN]};
    return m;
}

/* Device copies: the router fp32, the rest bf16 (exact). */
static inline void moe_ref_upload(void *dev[W_COUNT], const MoeRefWeights *r) {
    dev[W_ROUTER] = gpu_upload(r->w[W_ROUTER], (size_t)r->n[W_ROUTER] * sizeof(float));
    for (int i = W_GATE; i < W_COUNT; i++) dev[i] = gpu_upload_bf16(r->w[i], r->n[i]);
}

static inline void moe_ref_dev_free(void *dev[W_COUNT]) {
    for (int i = 0; i < W_COUNT; i++) cudaCheck(cudaFree(dev[i]));
}

static inline MoeGpuWeights moe_ref_gpu_weights(void *const *dev, int n_shared) {
    const int S = n_shared > 0;
    MoeGpuWeights w = {.router = dev[W_ROUTER], .w_gate = dev[W_GATE], .w_up = dev[W_UP], .w_down = dev[W_DOWN],
                       .shared_gate = S ? dev[W_SGATE] : NULL, .shared_up = S ? dev[W_SUP] : NULL,
                       .shared_down = S ? dev[W_SDOWN] : NULL};
    return w;
}

static inline int moe_ref_cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* v = score + bias (E values, scratch); 1 if its top min(k+1, E) values sorted descending are
 * MOE_REF_MARGIN apart. */
static inline int moe_ref_token_has_margin(const float *s, const float *bias, int E, int k, double *v) {
    for (int e = 0; e < E; e++) v[e] = (double)s[e] + (bias ? (double)bias[e] : 0.0);
    qsort(v, (size_t)E, sizeof(double), moe_ref_cmp_desc);
    const int m = k + 1 < E ? k + 1 : E;
    for (int i = 0; i + 1 < m; i++)
        if (!(v[i] - v[i + 1] >= MOE_REF_MARGIN)) return 0;
    return 1;
}

/* The CPU forward y (N, C) = MoE(x) with a sized for N, redrawing the x rows (uniform in [-1, 1),
 * bf16-exact) of tokens without the routing margin until every token has it. Returns 1 then
 * (y and a hold the forward of the final x), 0 if some token still has none after 200 forwards. */
static inline int moe_ref_forward_with_margin(float *y, MoeActs *a, float *x, const MoeWeights *w,
                                              const float *bias, const MoeDims *d, int N) {
    const int C = d->C, E = d->E;
    double *v = callocCheck((size_t)E, sizeof(double));
    int ok = 0;
    for (int attempt = 0; attempt < 200 && !ok; attempt++) {
        moe_forward(y, a, x, w, bias, d, N);
        ok = 1;
        for (int n = 0; n < N; n++) {
            if (moe_ref_token_has_margin(a->scores + (long)n * E, bias, E, d->k, v)) continue;
            ok = 0;
            for (int c = 0; c < C; c++) x[(long)n * C + c] = host_bf16_round(gpu_rsym(1.0f));
        }
    }
    free(v);
    return ok;
}

#endif
