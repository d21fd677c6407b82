/*
 * GPU tests of the unfused MoE layer (src/gpu/moe_unfused.c and kernels/moe_{route,plan,rows,
 * combine}.cu) against the CPU reference moe_forward / moe_backward (float) on one GPU, ep = 1.
 * Inputs are fresh random numbers from a seeded RNG; the CPU gets the same bf16-rounded x and
 * expert weights (the fp32 router is shared as is); tokens route with a clear margin (moe_ref.h).
 * Checked per shape: top-k ids, counts, the dispatch order (slot_row, row_slot) exactly; scores,
 * gates and the aux loss against fp32 tolerance; y, dx and every weight gradient (the amount the
 * backward ADDED to random initial values; y and dx are written over NaN) within 1e-2 relative; no NaN
 * left from the poisoned outputs; a second forward + backward bitwise identical.
 * Shapes: small, k = 1, skewed routing (all tokens to fixed experts through a large expert_bias;
 * most experts get no rows), sigmoid scores with and without renormalisation, odd widths with and
 * without a shared expert (scalar paths), E = 384 with k = 8, E = 200 and 520, k = E, k = 12 and 10, and
 * enough tokens to span several plan and aux chunks.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/moe.h"
#include "gpu/moe_unfused.h"
#include "gpu_test.h"
#include "moe_ref.h"

#define BF16_TOL 1e-2
#define F32_TOL 1e-5


static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        abort();
    }
    return p;
}

/* ---------- one shape ---------- */
enum { BIAS_NONE, BIAS_RANDOM, BIAS_SKEW2, BIAS_SKEW1 };

typedef struct {
    const char *label;
    int N, N_max, C, E, k, I, S, sigmoid, norm_topk;
    double scaling;
    int bias_mode;
    double daux;
    uint64_t seed;
} Shape;

/* Host tensors of one case; expert and shared weights and x hold bf16-representable values. */
static const char *wnames[W_COUNT] = {"router", "w_gate", "w_up", "w_down", "shared_gate", "shared_up", "shared_down"};

typedef struct {
    Shape s;
    MoeDims d;
    MoeRefWeights w;
    float *x, *dy, *bias;
    float *gw_init[W_COUNT];
} Case;

/* Draws the case; redraws the x rows of tokens without a clear routing margin. Returns 0 if some
 * token still has none after many tries. */
static int case_init(Case *t, const Shape *s) {
    memset(t, 0, sizeof *t);
    t->s = *s;
    gpu_rng_seed(s->seed);
    const int N = s->N, C = s->C, E = s->E;
    t->d = (MoeDims){.C = C, .E = E, .k = s->k, .I = s->I, .n_shared = s->S, .sigmoid = s->sigmoid,
                     .norm_topk = s->norm_topk, .scaling = s->scaling, .ep = 1, .ep_rank = 0, .comm = NULL};
    moe_ref_weights_draw(&t->w, &t->d);
    t->x = gpu_rand_array((long)N * C, 1.0f, 1);
    t->dy = gpu_rand_array((long)N * C, 1.0f, 1); /* bf16-exact: the layer rounds dy for its bf16 GEMMs */
    if (s->bias_mode != BIAS_NONE) {
        t->bias = xcalloc((size_t)E, sizeof(float));
        if (s->bias_mode == BIAS_RANDOM)
            for (int e = 0; e < E; e++) t->bias[e] = gpu_rsym(0.05f);
        if (s->bias_mode == BIAS_SKEW2) {
            t->bias[3 % E] = 100.0f;
            t->bias[5 % E] = 50.0f;
        }
        if (s->bias_mode == BIAS_SKEW1) t->bias[E - 1] = 100.0f;
    }
    for (int i = 0; i < W_COUNT; i++) t->gw_init[i] = gpu_rand_array(t->w.n[i], 1e-4f, 0);

    MoeActs a;
    moe_acts_alloc(&a, &t->d, N);
    float *y = xcalloc((size_t)N * C, sizeof(float));
    MoeWeights w = moe_ref_cpu_weights(t->w.w);
    const int ok = moe_ref_forward_with_margin(y, &a, t->x, &w, t->bias, &t->d, N);
    moe_acts_free(&a);
    free(y);
    return ok;
}

static void case_free(Case *t) {
    moe_ref_weights_free(&t->w);
    for (int i = 0; i < W_COUNT; i++) free(t->gw_init[i]);
    free(t->x);
    free(t->dy);
    free(t->bias);
}

/* What one GPU forward + backward produced, on the host. */
typedef struct {
    float *y, *scores, *gates, *dx, *gw[W_COUNT];
    int *topk, *counts, *slot_row, *row_slot;
    double aux;
    int h_counts_match;
} GpuOut;

static void gpu_out_free(GpuOut *o) {
    free(o->y);
    free(o->scores);
    free(o->gates);
    free(o->dx);
    for (int i = 0; i < W_COUNT; i++) free(o->gw[i]);
    free(o->topk);
    free(o->counts);
    free(o->slot_row);
    free(o->row_slot);
}

/* Device copies of the case's inputs (weights, x, bias) shared by the runs. */
typedef struct {
    void *w[W_COUNT];
    float *dy, *bias;
    bf16_t *x;
} Dev;

static void dev_init(Dev *g, const Case *t) {
    const long nx = (long)t->s.N * t->s.C;
    moe_ref_upload(g->w, &t->w);
    g->x = gpu_upload_bf16(t->x, nx);
    g->dy = gpu_upload(t->dy, (size_t)nx * sizeof(float));
    g->bias = t->bias ? gpu_upload(t->bias, (size_t)t->s.E * sizeof(float)) : NULL;
}

static void dev_free(Dev *g) {
    moe_ref_dev_free(g->w);
    cudaCheck(cudaFree(g->x));
    cudaCheck(cudaFree(g->dy));
    if (g->bias) cudaCheck(cudaFree(g->bias));
}

static void *download(const void *dev, size_t bytes) {
    void *h = xcalloc(bytes, 1);
    gpu_download(h, dev, bytes);
    return h;
}

/* One forward + backward on the GPU with fresh outputs (y and dx poisoned; the gradients set to the case's
 * initial values). */
static void gpu_run(GpuOut *o, const Case *t, const Dev *g, MoeUnfusedActs *a, MoeUnfusedWork *w) {
    const int N = t->s.N, C = t->s.C, E = t->s.E, k = t->s.k;
    const long nx = (long)N * C;
    float *y = gpu_poisoned((size_t)nx * sizeof(float));
    float *dx = gpu_poisoned((size_t)nx * sizeof(float));
    float *gw[W_COUNT];
    for (int i = 0; i < W_COUNT; i++) gw[i] = gpu_upload(t->gw_init[i], (size_t)t->w.n[i] * sizeof(float));
    /* poison what the forward must write */
    cudaCheck(cudaMemset(a->scores, 0xff, (size_t)N * E * sizeof(float)));
    cudaCheck(cudaMemset(a->gates, 0xff, (size_t)N * k * sizeof(float)));
    cudaCheck(cudaMemset(a->topk, 0xff, (size_t)N * k * sizeof(int)));
    cudaCheck(cudaMemset(a->slot_row, 0xff, (size_t)N * k * sizeof(int)));
    cudaCheck(cudaMemset(a->row_slot, 0xff, (size_t)N * k * sizeof(int)));
    cudaCheck(cudaMemset(a->counts, 0xff, (size_t)E * sizeof(int)));

    MoeGpuWeights wt = moe_ref_gpu_weights(g->w, t->s.S);
    MoeGpuGrads gr = {gw[W_ROUTER], gw[W_GATE], gw[W_UP], gw[W_DOWN], gw[W_SGATE], gw[W_SUP], gw[W_SDOWN], 0, NULL, 0};
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    moe_unfused_forward(y, NULL, a, w, g->x, &wt, g->bias, N, stream);
    moe_unfused_backward(dx, &gr, g->dy, t->s.daux, a, w, g->x, &wt, N, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaStreamDestroy(stream));

    o->y = download(y, (size_t)nx * sizeof(float));
    o->dx = download(dx, (size_t)nx * sizeof(float));
    for (int i = 0; i < W_COUNT; i++) o->gw[i] = download(gw[i], (size_t)t->w.n[i] * sizeof(float));
    o->scores = download(a->scores, (size_t)N * E * sizeof(float));
    o->gates = download(a->gates, (size_t)N * k * sizeof(float));
    o->topk = download(a->topk, (size_t)N * k * sizeof(int));
    o->slot_row = download(a->slot_row, (size_t)N * k * sizeof(int));
    o->row_slot = download(a->row_slot, (size_t)N * k * sizeof(int));
    o->counts = download(a->counts, (size_t)E * sizeof(int));
    o->aux = a->aux_loss;
    o->h_counts_match = memcmp(o->counts, a->h_counts, (size_t)E * sizeof(int)) == 0;
    cudaCheck(cudaFree(y));
    cudaCheck(cudaFree(dx));
    for (int i = 0; i < W_COUNT; i++) cudaCheck(cudaFree(gw[i]));
}

/* ||(a - init) - (b - init)|| / ||b - init|| : the part the backward added. */
static double rel_error_added(const float *a, const float *b, const float *init, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        const double da = (double)a[i] - init[i], db = (double)b[i] - init[i];
        num += (da - db) * (da - db);
        den += db * db;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void run_shape(const Shape *s) {
    Case t;
    if (!case_init(&t, s)) {
        test_fail(__FILE__, __LINE__, "[%s] could not draw inputs with a routing margin of %g", s->label,
                  MOE_REF_MARGIN);
        case_free(&t);
        return;
    }
    const int N = s->N, C = s->C, E = s->E, k = s->k;
    const long nx = (long)N * C, nslot = (long)N * k;

    /* CPU reference */
    MoeActs ca;
    moe_acts_alloc(&ca, &t.d, N);
    float *cy = xcalloc((size_t)nx, sizeof(float)), *cdx = xcalloc((size_t)nx, sizeof(float));
    float *cgw[W_COUNT];
    for (int i = 0; i < W_COUNT; i++) {
        cgw[i] = xcalloc((size_t)t.w.n[i] + 1, sizeof(float));
        memcpy(cgw[i], t.gw_init[i], (size_t)t.w.n[i] * sizeof(float));
    }
    MoeWeights cw = moe_ref_cpu_weights(t.w.w), cdw = moe_ref_cpu_weights(cgw);
    moe_forward(cy, &ca, t.x, &cw, t.bias, &t.d, N);
    moe_backward(cdx, &cdw, t.dy, s->daux, &ca, t.x, &cw, &t.d, N);

    /* GPU, twice */
    MoeGpuDims gd = moe_ref_gpu_dims(&t.d);
    MoeUnfusedActs a;
    MoeUnfusedWork w;
    const int N_max = s->N_max > N ? s->N_max : N;
    moe_unfused_acts_create(&a, &gd, N_max);
    moe_unfused_work_create(&w, &gd, N_max, NULL);
    Dev g;
    dev_init(&g, &t);
    GpuOut o1, o2;
    gpu_run(&o1, &t, &g, &a, &w);
    gpu_run(&o2, &t, &g, &a, &w);

    /* routing: exact */
    long bad_topk = 0, bad_rows = 0;
    for (long i = 0; i < nslot; i++) {
        bad_topk += o1.topk[i] != ca.topk[i];
        bad_rows += o1.slot_row[i] != ca.slot_row[i] || o1.row_slot[i] != ca.row_slot[i];
    }
    CHECK_MSG(bad_topk == 0, "[%s] %ld of %ld top-k picks differ from the CPU (first token: gpu %d cpu %d)", s->label,
              bad_topk, nslot, o1.topk[0], ca.topk[0]);
    CHECK_MSG(bad_rows == 0, "[%s] %ld of %ld slots have a different dispatch row than the CPU", s->label, bad_rows,
              nslot);
    long bad_counts = 0;
    for (int e = 0; e < E; e++) bad_counts += o1.counts[e] != ca.counts[e];
    CHECK_MSG(bad_counts == 0, "[%s] %ld of %d expert counts differ from the CPU (expert 0: gpu %d cpu %d)", s->label,
              bad_counts, E, o1.counts[0], ca.counts[0]);
    CHECK_MSG(o1.h_counts_match, "[%s] the host copy of the counts differs from the device counts", s->label);

    /* fp32 routing values */
    double e_scores = rel_error_f(o1.scores, ca.scores, (long)N * E);
    double e_gates = rel_error_f(o1.gates, ca.gates, nslot);
    CHECK_MSG(e_scores < F32_TOL, "[%s] scores: rel err %.3g >= %g", s->label, e_scores, F32_TOL);
    CHECK_MSG(e_gates < F32_TOL, "[%s] gates: rel err %.3g >= %g", s->label, e_gates, F32_TOL);
    CHECK_MSG(count_nan(o1.scores, (long)N * E) == 0 && count_nan(o1.gates, nslot) == 0,
              "[%s] NaN left in scores (%ld) or gates (%ld)", s->label, count_nan(o1.scores, (long)N * E),
              count_nan(o1.gates, nslot));
    CHECK_MSG(fabs(o1.aux - ca.aux_loss) <= F32_TOL * fabs(ca.aux_loss) + 1e-12,
              "[%s] aux loss: gpu %.9g cpu %.9g", s->label, o1.aux, ca.aux_loss);

    /* y, dx, gradients: bf16 paths */
    long ny = count_nan(o1.y, nx);
    CHECK_MSG(ny == 0, "[%s] %ld of %ld elements of y not written (NaN)", s->label, ny, nx);
    double e_y = rel_error_f(o1.y, cy, nx);
    CHECK_MSG(e_y < BF16_TOL, "[%s] y: rel err %.3g >= %g", s->label, e_y, BF16_TOL);
    const long ndx = count_nan(o1.dx, nx);
    CHECK_MSG(ndx == 0, "[%s] %ld of %ld elements of dx not written (NaN)", s->label, ndx, nx);
    double e_dx = rel_error_f(o1.dx, cdx, nx);
    CHECK_MSG(e_dx < BF16_TOL, "[%s] dx: rel err %.3g >= %g", s->label, e_dx, BF16_TOL);
    for (int i = 0; i < W_COUNT; i++) {
        if (t.w.n[i] == 0) continue;
        double e = rel_error_added(o1.gw[i], cgw[i], t.gw_init[i], t.w.n[i]);
        CHECK_MSG(count_nan(o1.gw[i], t.w.n[i]) == 0, "[%s] NaN in d%s", s->label, wnames[i]);
        CHECK_MSG(e < BF16_TOL, "[%s] d%s: rel err %.3g >= %g", s->label, wnames[i], e, BF16_TOL);
    }

    /* bitwise run to run */
    int same = memcmp(o1.y, o2.y, (size_t)nx * sizeof(float)) == 0 && memcmp(o1.dx, o2.dx, (size_t)nx * sizeof(float)) == 0;
    for (int i = 0; i < W_COUNT; i++) same = same && memcmp(o1.gw[i], o2.gw[i], (size_t)t.w.n[i] * sizeof(float)) == 0;
    same = same && memcmp(&o1.aux, &o2.aux, sizeof(double)) == 0;
    CHECK_MSG(same, "[%s] a second forward + backward is not bitwise identical", s->label);
    if (getenv("MOKC_TEST_VERBOSE"))
        printf("    [%s] rel err: y %.2e dx %.2e scores %.2e gates %.2e\n", s->label, e_y, e_dx, e_scores, e_gates);

    gpu_out_free(&o1);
    gpu_out_free(&o2);
    dev_free(&g);
    moe_unfused_acts_destroy(&a);
    moe_unfused_work_destroy(&w);
    moe_acts_free(&ca);
    free(cy);
    free(cdx);
    for (int i = 0; i < W_COUNT; i++) free(cgw[i]);
    case_free(&t);
}

/* ---------- the cases ---------- */

static void test_moe_gpu_small(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"small", 37, 0, 64, 8, 2, 48, 1, 0, 1, 1.0, BIAS_RANDOM, 0.1, 11};
    run_shape(&s);
    Shape s2 = {"small, N < N_max", 37, 50, 64, 8, 2, 48, 1, 0, 1, 1.0, BIAS_NONE, 0.1, 12};
    run_shape(&s2);
}

static void test_moe_gpu_k1(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"k=1", 41, 0, 64, 8, 1, 32, 1, 0, 1, 1.0, BIAS_RANDOM, 0.1, 21};
    run_shape(&s);
    Shape s2 = {"k=1 without renormalisation", 41, 0, 64, 8, 1, 32, 1, 0, 0, 1.5, BIAS_NONE, 0.1, 22};
    run_shape(&s2);
}

static void test_moe_gpu_skewed(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"skewed: every token to experts 3 and 5", 37, 0, 64, 8, 2, 48, 1, 0, 1, 1.0, BIAS_SKEW2, 0.1, 31};
    run_shape(&s);
    Shape s2 = {"skewed: every token to the last expert", 37, 0, 64, 8, 1, 48, 1, 0, 1, 1.0, BIAS_SKEW1, 0.1, 32};
    run_shape(&s2);
}

static void test_moe_gpu_sigmoid(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"sigmoid, renormalised, scaled", 33, 0, 48, 16, 3, 40, 1, 1, 1, 2.5, BIAS_RANDOM, 0.1, 41};
    run_shape(&s);
    Shape s2 = {"sigmoid, not renormalised", 33, 0, 48, 16, 2, 40, 1, 1, 0, 1.0, BIAS_NONE, 0.05, 42};
    run_shape(&s2);
}

/* C = 36: the scatter's element-by-element path, writing dx alone and adding to the shared experts' dx */
static void test_moe_gpu_odd_widths(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"no shared experts, C=36 I=20", 19, 0, 36, 8, 2, 20, 0, 0, 1, 1.0, BIAS_RANDOM, 0.1, 51};
    run_shape(&s);
    Shape s2 = {"no shared experts, C=64 I=48", 37, 0, 64, 8, 2, 48, 0, 0, 1, 1.0, BIAS_NONE, 0.0, 52};
    run_shape(&s2);
    Shape s3 = {"one shared expert, C=36 I=20", 19, 0, 36, 8, 2, 20, 1, 0, 1, 1.0, BIAS_RANDOM, 0.1, 53};
    run_shape(&s3);
}

static void test_moe_gpu_e384_k8(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"E=384 k=8", 29, 0, 64, 384, 8, 32, 2, 0, 1, 1.0, BIAS_RANDOM, 0.1, 61};
    run_shape(&s);
}

/* More experts than the shapes above: E = 200 (not a multiple of a warp's 32 lanes) and E = 520 (17 of a
 * token's scores a lane), with sigmoid scores. */
static void test_moe_gpu_many_experts(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"E=200 k=6", 29, 0, 64, 200, 6, 32, 0, 0, 1, 1.0, BIAS_RANDOM, 0.1, 91};
    run_shape(&s);
    Shape s2 = {"E=520 k=4, sigmoid", 23, 0, 64, 520, 4, 32, 0, 1, 1, 1.0, BIAS_NONE, 0.1, 92};
    run_shape(&s2);
}

/* k above 8, the largest k of the shapes above (and of the models in configs/): vector and scalar paths. */
static void test_moe_gpu_k_above_8(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"E=64 k=12", 31, 0, 64, 64, 12, 32, 1, 0, 1, 1.0, BIAS_RANDOM, 0.1, 93};
    run_shape(&s);
    Shape s2 = {"E=16 k=10 C=36 I=20", 17, 0, 36, 16, 10, 20, 0, 0, 1, 1.0, BIAS_NONE, 0.1, 94};
    run_shape(&s2);
}

static void test_moe_gpu_k_equals_e(void) {
    if (!gpu_test_begin()) return;
    Shape s = {"k = E = 4", 23, 0, 32, 4, 4, 24, 1, 0, 1, 1.0, BIAS_NONE, 0.1, 71};
    run_shape(&s);
}

static void test_moe_gpu_many_tokens(void) {
    if (!gpu_test_begin()) return;
    /* 2803 slots: three plan chunks of 1024; 701 tokens: eleven aux chunks of 64 */
    Shape s = {"701 tokens, several plan and aux chunks", 701, 0, 32, 16, 4, 16, 0, 0, 1, 1.0, BIAS_RANDOM, 0.1,
               81};
    run_shape(&s);
}

/* The byte counts are what create allocates, and grow with ep as the worst case says. */
static void test_moe_gpu_workspace_bytes(void) {
    MoeGpuDims d = {.C = 2048, .E = 128, .k = 8, .I = 768, .n_shared = 0, .sigmoid = 0, .norm_topk = 1,
                    .scaling = 1.0, .ep = 1, .ep_rank = 0};
    size_t a1 = moe_unfused_acts_bytes(&d, 8192), w1 = moe_unfused_work_bytes(&d, 8192);
    d.ep = 2;
    size_t a2 = moe_unfused_acts_bytes(&d, 8192), w2 = moe_unfused_work_bytes(&d, 8192);
    /* R_max doubles with ep = 2 (k = 8 <= 64 local experts): xr alone adds 8192*8*2048*2 bytes */
    CHECK_MSG(a2 >= a1 + (size_t)8192 * 8 * 2048 * 2, "acts: ep=1 %zu, ep=2 %zu bytes", a1, a2);
    CHECK_MSG(w2 > w1, "work: ep=1 %zu, ep=2 %zu bytes", w1, w2);
    if (getenv("MOKC_TEST_VERBOSE"))
        printf("    qwen3-like, 8192 tokens: acts %.1f / %.1f MiB, work %.1f / %.1f MiB (ep 1 / 2)\n", a1 / 1048576.0,
               a2 / 1048576.0, w1 / 1048576.0, w2 / 1048576.0);
}

TEST_SUITE(gpu_moe_unfused, TEST_CASE(test_moe_gpu_workspace_bytes), TEST_CASE(test_moe_gpu_small),
           TEST_CASE(test_moe_gpu_k1), TEST_CASE(test_moe_gpu_skewed), TEST_CASE(test_moe_gpu_sigmoid),
           TEST_CASE(test_moe_gpu_odd_widths), TEST_CASE(test_moe_gpu_e384_k8),
           TEST_CASE(test_moe_gpu_many_experts), TEST_CASE(test_moe_gpu_k_above_8), TEST_CASE(test_moe_gpu_k_equals_e),
           TEST_CASE(test_moe_gpu_many_tokens));
