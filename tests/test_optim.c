/*
 * src/optim.c against the textbook: AdamW's update (bias corrections, decoupled weight decay on the
 * decayed tensors only, the gradient scale) computed in double, and the learning-rate schedules at
 * the steps their definitions name. The GPU's AdamW is held to adamw_step bit for bit
 * (tests/gpu/test_dense_kernels.c), so this is what ties both to AdamW itself.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "rng.h"
#include "test.h"

/* ‖a − b‖ / ‖b‖ over n doubles */
static double rel_norm_diff(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Three steps of adamw_step (fp32 moments) against AdamW in double from the same starting values: the moments to
 * fp32's rounding, each step's change of the weights to 1e-3 of itself (fp32 weights near 1 round a change near
 * 1e-3 to ≈ 1e-4 of it). A decayed and an undecayed tensor, so weight decay shows where it applies and only there. */
static void test_adamw_is_the_textbook_update(void) {
    enum { N0 = 3000, N1 = 517, N = N0 + N1, STEPS = 3 };
    ParamInfo items[2];
    memset(items, 0, sizeof items);
    items[0].offset = 0, items[0].numel = N0, items[0].decay = true;
    items[1].offset = N0, items[1].numel = N1, items[1].decay = false;
    ParamTable pt;
    memset(&pt, 0, sizeof pt);
    pt.items = items, pt.count = 2, pt.total = N;
    TrainConfig tc;
    memset(&tc, 0, sizeof tc);
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.weight_decay = 0.1;
    tc.optimizer_state = OPT_STATE_FP32;
    const double lrs[STEPS] = {1e-3, 3e-3, 2e-3}, scales[STEPS] = {1.0, 0.5, 0.25};
    float *w = malloc(sizeof(float) * N), *m = calloc(N, sizeof(float)), *v = calloc(N, sizeof(float));
    float *g = malloc(sizeof(float) * N);
    double *wd = malloc(sizeof(double) * N), *md = calloc(N, sizeof(double)), *vd = calloc(N, sizeof(double));
    double *dw = malloc(sizeof(double) * N), *dwd = malloc(sizeof(double) * N), *mf = malloc(sizeof(double) * N);
    double *vf = malloc(sizeof(double) * N);
    uint64_t st = 4242;
    for (int i = 0; i < N; i++) w[i] = (float)(2 * mokc_uniform(&st) - 1), wd[i] = w[i];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++) g[i] = (float)(2 * mokc_uniform(&st) - 1);
        const double c1 = 1 - pow(tc.beta1, s + 1), c2 = 1 - pow(tc.beta2, s + 1);
        for (int i = 0; i < N; i++) {
            const double gi = (double)g[i] * scales[s], decay = i < N0 ? tc.weight_decay : 0.0;
            md[i] = tc.beta1 * md[i] + (1 - tc.beta1) * gi;
            vd[i] = tc.beta2 * vd[i] + (1 - tc.beta2) * gi * gi;
            dwd[i] = -lrs[s] * ((md[i] / c1) / (sqrt(vd[i] / c2) + tc.eps) + decay * (double)w[i]);
            dw[i] = w[i]; /* the change is taken from the same fp32 weights */
        }
        adamw_step(w, g, m, v, &pt, &tc, lrs[s], scales[s], s + 1);
        for (int i = 0; i < N; i++) dw[i] = (double)w[i] - dw[i], wd[i] = (double)w[i];
        for (int i = 0; i < N; i++) mf[i] = m[i], vf[i] = v[i];
        const double em = rel_norm_diff(mf, md, N), ev = rel_norm_diff(vf, vd, N), ew = rel_norm_diff(dw, dwd, N);
        CHECK_MSG(em < 1e-6 && ev < 1e-6, "step %d: moments off the double update (m %.3g, v %.3g)", s + 1, em, ev);
        CHECK_MSG(ew < 1e-3, "step %d: the weights' change is %.3g off the double update", s + 1, ew);
        for (int i = 0; i < N; i++) md[i] = m[i], vd[i] = v[i]; /* the next step from the same moments */
    }
    /* weight decay only where decayed: with zero gradients (and moments) a decayed weight shrinks by lr * wd * w,
     * an undecayed one stays */
    memset(g, 0, sizeof(float) * N), memset(m, 0, sizeof(float) * N), memset(v, 0, sizeof(float) * N);
    for (int i = 0; i < N; i++) dw[i] = w[i];
    adamw_step(w, g, m, v, &pt, &tc, 1e-2, 1.0, 4);
    long kept = 0, shrunk = 0;
    for (int i = 0; i < N; i++) {
        const double want = i < N0 ? dw[i] * (1 - 1e-2 * tc.weight_decay) : dw[i];
        if (i < N0) shrunk += fabs(w[i] - want) <= 1e-6 * fabs(want) + 1e-30;
        else kept += w[i] == (float)dw[i];
    }
    CHECK_MSG(shrunk == N0 && kept == N1, "weight decay: %ld of %d decayed weights shrank by lr * wd, %ld of %d "
              "undecayed ones kept", shrunk, (int)N0, kept, (int)N1);
    free(w), free(m), free(v), free(g), free(wd), free(md), free(vd), free(dw), free(dwd), free(mf), free(vf);
}

/* The schedules at the steps their definitions name: warmup's first and last steps, the decay's ends and middle. */
static void test_lr_schedules(void) {
    TrainConfig tc;
    memset(&tc, 0, sizeof tc);
    tc.lr = 1e-3, tc.min_lr = 1e-4, tc.warmup_steps = 10, tc.steps = 111; /* decay over steps 10..110 */
    const double span = tc.lr - tc.min_lr;
    struct {
        enum lr_schedule s;
        int step;
        double want;
    } cases[] = {
        {LR_COSINE, 0, 1e-4},          {LR_COSINE, 9, 1e-3},          {LR_COSINE, 10, 1e-3},
        {LR_COSINE, 60, 1e-4 + span / 2}, {LR_COSINE, 110, 1e-4},     {LR_COSINE, 500, 1e-4},
        {LR_COSINE, 35, 1e-4 + span * 0.5 * (1 + cos(M_PI * 0.25))},
        {LR_LINEAR, 5, 6e-4},          {LR_LINEAR, 10, 1e-3},         {LR_LINEAR, 35, 1e-4 + span * 0.75},
        {LR_LINEAR, 110, 1e-4},        {LR_CONSTANT, 4, 5e-4},        {LR_CONSTANT, 110, 1e-3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tc.lr_schedule = cases[i].s;
        const double got = lr_at_step(&tc, cases[i].step);
        CHECK_MSG(fabs(got - cases[i].want) <= 1e-12, "schedule %d at step %d: lr %.10g, want %.10g", (int)cases[i].s,
                  cases[i].step, got, cases[i].want);
    }
}

TEST_SUITE(optim, TEST_CASE(test_adamw_is_the_textbook_update), TEST_CASE(test_lr_schedules));
