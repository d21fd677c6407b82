/*
 * The verdicts of `mokc check` (src/model_check.c), on the CPU: check_grads against gradients with faults put in
 * (one tensor off by more than the tolerance, a NaN, an element of the second pass not doubled, a tensor the second
 * pass left at the first's values), each found in its tensor and nowhere else; check_weights' values (bf16
 * values but for the routers, scaled, norms left); and check_verdict, each fault failing with its own flag.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_check.h"
#include "optim.h"
#include "rng.h"
#include "test.h"

static ModelDims check_dims(void) {
    ModelDims d = {.V = 40, .C = 16, .L = 2, .Hq = 2, .Hkv = 1, .D = 8, .I = 24, .first_dense = 1, .E = 4, .k = 2,
                   .Im = 8, .S = 1, .ep = 1, .ep_rank = 0, .E_local = 4, .tie = 0, .rope_theta = 10000.0,
                   .eps = 1e-6, .norm_topk = 1, .scaling = 1.0, .aux_coef = 0.01};
    return d;
}

/* n random values in [-1, 1) (never zero), from seed. */
static float *random_values(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(2.0 * mokc_uniform(&seed) - 1.0);
        if (x[i] == 0.0f) x[i] = 0.5f;
    }
    return x;
}

static void test_check_grads_finds_each_fault(void) {
    ModelDims d = check_dims();
    ParamTable t;
    param_table_build(&t, &d);
    float *want = random_values(t.total, 11), *got = malloc(t.total * sizeof(float));
    float *twice = malloc(t.total * sizeof(float));
    uint64_t noise = 12;
    for (size_t i = 0; i < t.total; i++) { /* 1e-3 relative noise: within the tolerance */
        got[i] = want[i] * (float)(1.0 + 2e-3 * (mokc_uniform(&noise) - 0.5));
        twice[i] = 2.0f * got[i];
    }
    GradCheck *c = malloc(sizeof(GradCheck) * (size_t)t.count);
    check_grads(&t, got, twice, want, c);
    for (int i = 0; i < t.count; i++)
        CHECK_MSG(grad_check_ok(&c[i]) && c[i].rel_error > 0 && c[i].rel_error < 2e-3, "%s: error %.3g, %lld NaN, %lld "
                  "not doubled without a fault", t.items[i].name, c[i].rel_error, (long long)c[i].nan,
                  (long long)c[i].unscaled);

    const int off = param_table_find(&t, "layers.0.attn.wq"), nan_at = param_table_find(&t, "lm_head");
    const int odd = param_table_find(&t, "layers.1.moe.experts.w_down");
    const int stale = param_table_find(&t, "layers.1.moe.router");
    CHECK(off >= 0 && nan_at >= 0 && odd >= 0 && stale >= 0);
    const ParamInfo *p = &t.items[off];
    for (size_t j = 0; j < p->numel; j++) got[p->offset + j] *= 1.03f, twice[p->offset + j] *= 1.03f; /* 3 % off */
    got[t.items[nan_at].offset + 5] = NAN;
    twice[t.items[nan_at].offset + 5] = NAN;
    twice[t.items[odd].offset + t.items[odd].numel - 1] = nextafterf(twice[t.items[odd].offset +
                                                                             t.items[odd].numel - 1], 10.0f);
    memcpy(twice + t.items[stale].offset, got + t.items[stale].offset, t.items[stale].numel * sizeof(float));
    check_grads(&t, got, twice, want, c);
    for (int i = 0; i < t.count; i++) {
        const int faulty = i == off || i == nan_at || i == odd || i == stale;
        CHECK_MSG(grad_check_ok(&c[i]) == !faulty, "%s: %s (error %.3g, %lld NaN, %lld not doubled)", t.items[i].name,
                  faulty ? "its fault passed" : "failed without a fault", c[i].rel_error, (long long)c[i].nan,
                  (long long)c[i].unscaled);
    }
    CHECK(c[off].rel_error > CHECK_GRAD_TOL && c[off].nan == 0 && c[off].unscaled == 0);
    CHECK(isnan(c[nan_at].rel_error) && c[nan_at].nan == 1);
    CHECK(c[odd].rel_error < CHECK_GRAD_TOL && c[odd].unscaled == 1);
    CHECK_EQ_INT(c[stale].unscaled, (int64_t)t.items[stale].numel);
    check_grads(&t, got, NULL, want, c); /* without a second pass nothing counts as not doubled */
    CHECK(c[odd].unscaled == 0 && grad_check_ok(&c[odd]) && grad_check_ok(&c[stale]));
    free(want), free(got), free(twice), free(c);
    param_table_free(&t);
}

static void test_check_weights(void) {
    ModelDims d = check_dims();
    ParamTable t;
    param_table_build(&t, &d);
    float *w = malloc(t.total * sizeof(float)), *orig = malloc(t.total * sizeof(float));
    model_init_params(orig, &t, &d, 3);
    static const float scales[] = {1.0f, 5.0f}; /* `mokc check`'s, tests/gpu/test_model_gpu.c's */
    for (int s = 0; s < 2; s++) {
        const float scale = scales[s];
        memcpy(w, orig, t.total * sizeof(float));
        check_weights(w, &t, scale);
        for (int i = 0; i < t.count; i++) {
            const ParamInfo *p = &t.items[i];
            const int router = strstr(p->name, "router") != NULL;
            long wrong = 0, moved = 0;
            for (size_t j = 0; j < p->numel; j++) {
                const float x = orig[p->offset + j], y = w[p->offset + j];
                const float want = p->ndim == 1 ? x : router ? x * scale : bf16_round(x * scale);
                wrong += memcmp(&want, &y, sizeof(float)) != 0;
                moved += y != x * scale; /* bf16's rounding shows in most values */
                if (p->ndim > 1 && !router) { /* a bf16 value within half its last place, by its bits */
                    uint32_t bits;
                    memcpy(&bits, &y, sizeof bits);
                    wrong += (bits & 0xffffu) != 0 || fabsf(y - x * scale) > fabsf(x * scale) * 0x1p-8f;
                }
            }
            CHECK_MSG(wrong == 0, "scale %g, %s: %ld of %zu values not as check_weights should make them", scale,
                      p->name, wrong, p->numel);
            if (p->ndim > 1 && !router)
                CHECK_MSG(moved * 2 > (long)p->numel, "scale %g, %s: only %ld of %zu values rounded", scale, p->name,
                          moved, p->numel);
        }
    }
    free(w), free(orig);
    param_table_free(&t);
}

/* check_verdict: clean findings pass; each fault (a tensor out of tolerance, with NaN or not doubled; the loss or the
 * aux loss apart, or NaN; the second pass's loss changed; a choice far from a tie) fails with its flag alone. */
static void test_check_verdict(void) {
    GradCheck grads[3] = {{1e-2, 0, 0}, {2.9e-2, 0, 0}, {0, 0, 0}};
    const CheckFindings clean = {grads, 3, 3e-5, 1e-4, 1, 4.9e-2};
    CHECK_EQ_INT(check_verdict(&clean), 0);
    CheckFindings f = clean;
    const GradCheck faults[4] = {{3.1e-2, 0, 0}, {NAN, 0, 0}, {0, 1, 0}, {0, 0, 1}};
    for (int i = 0; i < 4; i++) {
        grads[1] = faults[i];
        CHECK_EQ_INT(check_verdict(&clean), CHECK_BAD_GRADS);
    }
    grads[1] = (GradCheck){2.9e-2, 0, 0};
    f.loss_error = 1.1e-3;
    CHECK_EQ_INT(check_verdict(&f), CHECK_BAD_LOSS);
    f.loss_error = NAN;
    CHECK_EQ_INT(check_verdict(&f), CHECK_BAD_LOSS);
    f = clean, f.aux_error = 2e-3;
    CHECK_EQ_INT(check_verdict(&f), CHECK_BAD_AUX);
    f = clean, f.repeated = 0;
    CHECK_EQ_INT(check_verdict(&f), CHECK_NOT_REPEATED);
    f = clean, f.routing_gap = 5.1e-2;
    CHECK_EQ_INT(check_verdict(&f), CHECK_BAD_ROUTING);
    f.routing_gap = INFINITY, f.repeated = 0;
    CHECK_EQ_INT(check_verdict(&f), CHECK_BAD_ROUTING | CHECK_NOT_REPEATED);
}

TEST_SUITE(model_check, TEST_CASE(test_check_grads_finds_each_fault), TEST_CASE(test_check_weights), TEST_CASE(test_check_verdict));
