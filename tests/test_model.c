/*
 * The parameter table, initialisation and the whole CPU model: a finite-difference gradient
 * check of every tensor of a 2-layer MoE model in double precision, float/double agreement,
 * and bitwise determinism across thread counts.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/model_cpu.h"
#include "model.h"
#include "test.h"

/* A 2-layer model: one dense layer, one MoE layer with a shared expert and GQA. */
static ModelDims small_dims(int tie, int sigmoid) {
    ModelDims d = {.V = 11, .C = 8, .L = 2, .Hq = 2, .Hkv = 1, .D = 4, .I = 12, .first_dense = 1,
                   .E = 4, .k = 2, .Im = 6, .S = 1, .ep = 1, .ep_rank = 0, .E_local = 4, .tie = tie,
                   .rope_theta = 10000.0, .eps = 1e-6, .sigmoid = sigmoid, .norm_topk = 1,
                   .scaling = 1.5, .aux_coef = 0.05};
    return d;
}

static void random_tokens(int *x, int n, int V, uint64_t *st) {
    for (int i = 0; i < n; i++) x[i] = (int)(mokc_splitmix64(st) % (uint64_t)V);
}

/* Parameters at a random point: normal init, norms perturbed away from 1, larger router. */
static void random_params_f64(double *p, const ParamTable *t, const ModelDims *d, uint64_t seed) {
    float *f = malloc(t->total * sizeof(float));
    model_init_params(f, t, d, seed);
    uint64_t st = seed ^ 0x1234567ull;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *info = &t->items[i];
        double scale = info->ndim == 1 ? 0.3 : (strstr(info->name, "router") ? 40.0 : 5.0);
        for (size_t j = 0; j < info->numel; j++) {
            double base = f[info->offset + j];
            p[info->offset + j] = info->ndim == 1 ? 1.0 + scale * (mokc_uniform(&st) - 0.5) : base * scale;
        }
    }
    free(f);
}

static void test_param_table(void) {
    ModelDims d = small_dims(0, 0);
    ParamTable t;
    param_table_build(&t, &d);
    size_t expect = 0;
    for (int i = 0; i < t.count; i++) {
        CHECK_EQ_INT(t.items[i].offset, expect);
        expect += t.items[i].numel;
        for (int j = 0; j < i; j++) CHECK_MSG(strcmp(t.items[i].name, t.items[j].name) != 0, "duplicate %s", t.items[i].name);
    }
    CHECK_EQ_INT(t.total, expect);
    CHECK_EQ_INT((long long)t.total, model_param_count(&d));
    CHECK(param_table_find(&t, "lm_head") >= 0);
    CHECK(param_table_find(&t, "layers.1.moe.experts.w_up") >= 0);
    CHECK(param_table_find(&t, "layers.0.moe.router") < 0); /* layer 0 is dense */
    int idx = param_table_find(&t, "layers.1.attn_norm");
    CHECK(idx >= 0 && !t.items[idx].decay);
    param_table_free(&t);
    ModelDims tied = small_dims(1, 0);
    param_table_build(&t, &tied);
    CHECK(param_table_find(&t, "lm_head") < 0);
    CHECK_EQ_INT(t.lm_head, t.tok_emb);
    param_table_free(&t);
}

/* Expert e's initial weights must not depend on how the experts are sharded. */
static void test_init_independent_of_sharding(void) {
    ModelDims full = small_dims(0, 0), half = small_dims(0, 0);
    half.ep = 2, half.ep_rank = 1, half.E_local = 2;
    ParamTable tf, th;
    param_table_build(&tf, &full);
    param_table_build(&th, &half);
    float *pf = malloc(tf.total * sizeof(float)), *ph = malloc(th.total * sizeof(float));
    model_init_params(pf, &tf, &full, 7);
    model_init_params(ph, &th, &half, 7);
    const ParamInfo *a = &tf.items[param_table_find(&tf, "layers.1.moe.experts.w_down")];
    const ParamInfo *b = &th.items[param_table_find(&th, "layers.1.moe.experts.w_down")];
    size_t per = a->numel / (size_t)full.E;
    CHECK_EQ_INT(b->numel, 2 * per);
    CHECK(memcmp(pf + a->offset + 2 * per, ph + b->offset, 2 * per * sizeof(float)) == 0);
    const ParamInfo *q = &tf.items[param_table_find(&tf, "layers.0.attn.wq")];
    CHECK(memcmp(pf + q->offset, ph + th.items[param_table_find(&th, "layers.0.attn.wq")].offset,
                 q->numel * sizeof(float)) == 0);
    /* A different seed gives different weights; the scale is about 0.02. */
    float *p2 = malloc(tf.total * sizeof(float));
    model_init_params(p2, &tf, &full, 8);
    CHECK(memcmp(pf + q->offset, p2 + q->offset, q->numel * sizeof(float)) != 0);
    double ss = 0;
    for (size_t j = 0; j < q->numel; j++) ss += (double)pf[q->offset + j] * pf[q->offset + j];
    CHECK_NEAR(sqrt(ss / q->numel), 0.02, 0.006);
    free(pf), free(ph), free(p2);
    param_table_free(&tf);
    param_table_free(&th);
}

static double total_loss_f64(CpuModel_f64 *m, const double *p, const int *in, const int *tg) {
    double ce = cpu_model_forward_f64(m, p, NULL, in, tg);
    return ce + m->d.aux_coef * m->aux_loss;
}

/* The routing decisions of every MoE layer, to skip finite differences that flip a top-k. */
static void snapshot_topk(const CpuModel_f64 *m, int *out) {
    int n = m->N * m->d.k, off = 0;
    for (int l = m->d.first_dense; l < m->d.L; l++, off += n) memcpy(out + off, m->moe[l].topk, sizeof(int) * (size_t)n);
}

static void whole_model_gradcheck(int tie, int sigmoid) {
    ModelDims d = small_dims(tie, sigmoid);
    ParamTable t;
    param_table_build(&t, &d);
    const int B = 2, T = 5, N = B * T;
    CpuModel_f64 m;
    cpu_model_init_f64(&m, &d, &t, B, T, NULL);
    double *p = malloc(t.total * sizeof(double)), *g = calloc(t.total, sizeof(double));
    random_params_f64(p, &t, &d, 99 + (uint64_t)tie * 2 + (uint64_t)sigmoid);
    uint64_t st = 5;
    int in[10], tg[10];
    random_tokens(in, N, d.V, &st);
    random_tokens(tg, N, d.V, &st);
    total_loss_f64(&m, p, in, tg);
    int moe_slots = (d.L - d.first_dense) * N * d.k;
    int *topk0 = malloc(sizeof(int) * (size_t)moe_slots), *topk1 = malloc(sizeof(int) * (size_t)moe_slots);
    snapshot_topk(&m, topk0);
    cpu_model_backward_f64(&m, p, g, 1.0);

    const double h = 1e-5;
    int checked_tensors = 0, skipped = 0;
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *info = &t.items[i];
        int samples = info->numel < 12 ? (int)info->numel : 12;
        double num[12], ana[12];
        int n = 0;
        for (int s = 0; s < samples; s++) {
            size_t j = info->offset + (size_t)(mokc_splitmix64(&st) % info->numel);
            double keep = p[j];
            p[j] = keep + h;
            double lp = total_loss_f64(&m, p, in, tg);
            snapshot_topk(&m, topk1);
            int flip = memcmp(topk0, topk1, sizeof(int) * (size_t)moe_slots) != 0;
            p[j] = keep - h;
            double lm = total_loss_f64(&m, p, in, tg);
            snapshot_topk(&m, topk1);
            flip |= memcmp(topk0, topk1, sizeof(int) * (size_t)moe_slots) != 0;
            p[j] = keep;
            if (flip) {
                skipped++;
                continue;
            }
            num[n] = (lp - lm) / (2 * h);
            ana[n] = g[j];
            n++;
        }
        double err = rel_error(ana, num, n);
        double mag = 0;
        for (int s = 0; s < n; s++) mag += fabs(num[s]);
        CHECK_MSG(n > 0, "%s: every sample flipped the routing", info->name);
        CHECK_MSG(mag > 1e-9, "%s: gradient is zero at every sample, the check would be empty", info->name);
        CHECK_MSG(err < 1e-6, "%s (tie=%d sigmoid=%d): relative error %.3g", info->name, tie, sigmoid, err);
        checked_tensors++;
    }
    CHECK_EQ_INT(checked_tensors, t.count);
    CHECK_MSG(skipped < 10, "%d finite-difference samples flipped the routing", skipped);
    free(topk0), free(topk1), free(p), free(g);
    cpu_model_free_f64(&m);
    param_table_free(&t);
}

static void test_gradcheck_untied_softmax(void) { whole_model_gradcheck(0, 0); }
static void test_gradcheck_tied_sigmoid(void) { whole_model_gradcheck(1, 1); }

static void test_float_matches_double_and_initial_loss(void) {
    ModelDims d = small_dims(0, 0);
    d.V = 64, d.C = 16, d.D = 8;
    ParamTable t;
    param_table_build(&t, &d);
    const int B = 3, T = 7, N = B * T;
    float *pf = malloc(t.total * sizeof(float));
    double *pd = malloc(t.total * sizeof(double));
    model_init_params(pf, &t, &d, 3);
    for (size_t i = 0; i < t.total; i++) pd[i] = pf[i];
    int in[21], tg[21];
    uint64_t st = 11;
    random_tokens(in, N, d.V, &st);
    random_tokens(tg, N, d.V, &st);
    CpuModel mf;
    CpuModel_f64 md;
    cpu_model_init(&mf, &d, &t, B, T, NULL);
    cpu_model_init_f64(&md, &d, &t, B, T, NULL);
    double lf = cpu_model_forward(&mf, pf, NULL, in, tg), ld = cpu_model_forward_f64(&md, pd, NULL, in, tg);
    CHECK_NEAR(lf, ld, 1e-5 * ld);
    CHECK_NEAR(ld, log(64.0), 0.05); /* small init: nearly uniform predictions */
    float *gf = calloc(t.total, sizeof(float));
    double *gd = calloc(t.total, sizeof(double)), *gf_d = malloc(t.total * sizeof(double));
    cpu_model_backward(&mf, pf, gf, 1.0);
    cpu_model_backward_f64(&md, pd, gd, 1.0);
    for (size_t i = 0; i < t.total; i++) gf_d[i] = gf[i];
    double err = rel_error(gf_d, gd, (long)t.total);
    CHECK_MSG(err < 1e-4, "float vs double gradients: relative error %.3g", err);
    free(pf), free(pd), free(gf), free(gd), free(gf_d);
    cpu_model_free(&mf);
    cpu_model_free_f64(&md);
    param_table_free(&t);
}

static void test_bitwise_across_thread_counts(void) {
    ModelDims d = small_dims(0, 0);
    d.V = 32, d.C = 16, d.D = 8, d.E = 8, d.E_local = 8, d.k = 3;
    ParamTable t;
    param_table_build(&t, &d);
    const int B = 2, T = 16, N = B * T;
    float *p = malloc(t.total * sizeof(float));
    model_init_params(p, &t, &d, 5);
    int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    uint64_t st = 17;
    random_tokens(in, N, d.V, &st);
    random_tokens(tg, N, d.V, &st);
    float *g[2];
    double loss[2];
    int saved = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 3);
        CpuModel m;
        cpu_model_init(&m, &d, &t, B, T, NULL);
        g[run] = calloc(t.total, sizeof(float));
        loss[run] = cpu_model_forward(&m, p, NULL, in, tg);
        cpu_model_backward(&m, p, g[run], 1.0);
        cpu_model_free(&m);
    }
    omp_set_num_threads(saved);
    CHECK(memcmp(&loss[0], &loss[1], sizeof(double)) == 0);
    CHECK(memcmp(g[0], g[1], t.total * sizeof(float)) == 0);
    free(g[0]), free(g[1]), free(p), free(in), free(tg);
    param_table_free(&t);
}

TEST_SUITE(model, TEST_CASE(test_param_table), TEST_CASE(test_init_independent_of_sharding),
           TEST_CASE(test_gradcheck_untied_softmax), TEST_CASE(test_gradcheck_tied_sigmoid),
           TEST_CASE(test_float_matches_double_and_initial_loss), TEST_CASE(test_bitwise_across_thread_counts));
