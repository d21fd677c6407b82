/*
 * GPU tests of the MoK megakernel forward (src/gpu/moe_mok.c, kernels/mok/) on one GPU, ep = 1, on
 * random inputs, against both the CPU reference (src/cpu/moe.c, float; inputs from moe_ref.h, so
 * routing has a clear margin) and the unfused layer (src/gpu/moe_unfused.c): identical top-k ids,
 * the unfused layer's counts and aux loss (the same routing kernels), y within 1e-2 relative of
 * each (bf16 GEMM operands and hidden rows; other accumulation orders), no NaN left in the
 * poisoned output. Each shape runs in several variants (GEMM tile, number of communication
 * blocks), each twice: every run of one tile gives the same bits (the two mma.sync tiles share
 * them), whatever the number of communication blocks.
 * Shapes (test_mok_forward): EP1 throughout; k = 1 plain and with every token on one expert
 * (200 rows in one segment), skewed k = 2, E = 384 k = 8 sigmoid, k = E with 333 rows per expert,
 * N = 1 and N = 1000, skewed k = 2 with 400 rows on one expert and ≈ 27 on the others (short and long
 * weight-gradient tasks in one backward), token and row counts that are not multiples of 64 or 128, shared experts on
 * and off. test_mok_narrow_widths: C and I multiples of 8
 * but not of 64, for the tiles that take them; skipped (visibly) while moe_mok_supported says no.
 * The backward (check_backward, in both) against the unfused one, written and added, and the gradient norm's
 * squares it leaves on a step's last micro-batch (check_squares).
 * test_mok_schedule: the M-tile schedule kernel against a serial loop; test_mok_histogram: this
 * rank's expert counts against a count on the host. test_mok_graph: forward and
 * backward captured as one CUDA graph (global capture mode), replayed twice, bitwise equal to the
 * eager run, host copies of the counts and aux loss included.
 * The watchdog: a child process (this test binary re-executed with a filter and an environment
 * switch, since a trap kills the CUDA context) runs a forward whose dispatch blocks skip their
 * work with a 1 s budget; the parent checks that the child exits non-zero within the time limit
 * and printed the record (role, task, counter, expected, seen).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "../../kernels/moe_plan.h"
#include "cpu/moe.h"
#include "gpu/moe_mok.h"
#include "gpu/moe_unfused.h"
#include "gpu_test.h"
#include "moe_ref.h"
#include "optim.h"

#define BF16_TOL 1e-2

typedef struct {
    const char *label;
    int N, C, E, k, I, S, sigmoid;
    int skew;      /* expert_bias puts every token's first pick on expert E/2 (k = 1: all tokens there) */
    uint64_t seed;
} Shape;

static MoeDims shape_dims(const Shape *s) {
    MoeDims d = {.C = s->C, .E = s->E, .k = s->k, .I = s->I, .n_shared = s->S, .sigmoid = s->sigmoid,
                 .norm_topk = 1, .scaling = s->sigmoid ? 2.5 : 1.0, .ep = 1, .ep_rank = 0, .comm = NULL};
    return d;
}

/* One shape's inputs on the device and the CPU reference's answer. */
typedef struct {
    MoeGpuDims d;
    void *dw[W_COUNT];
    MoeGpuWeights w;
    float *bias;
    bf16_t *x;
    float *y_cpu;  /* (N, C) */
    int *topk_cpu; /* (N, k) */
} Problem;

/* Returns 0 if no inputs with a routing margin were found (the rest is still set up). */
static int problem_create(Problem *P, const Shape *s) {
    memset(P, 0, sizeof *P);
    gpu_rng_seed(s->seed);
    const long N = s->N, C = s->C, E = s->E;
    const MoeDims cd = shape_dims(s);
    P->d = moe_ref_gpu_dims(&cd);
    MoeRefWeights hw;
    moe_ref_weights_draw(&hw, &cd);
    float *x = gpu_rand_array(N * C, 1.0f, 1), *bias = NULL;
    if (s->skew) {
        bias = callocCheck((size_t)E, sizeof(float));
        bias[E / 2] = 100.0f;
    }
    MoeActs a;
    moe_acts_alloc(&a, &cd, s->N);
    P->y_cpu = callocCheck((size_t)(N * C), sizeof(float));
    const MoeWeights cw = moe_ref_cpu_weights(hw.w);
    const int ok = moe_ref_forward_with_margin(P->y_cpu, &a, x, &cw, bias, &cd, s->N);
    P->topk_cpu = mallocCheck((size_t)N * s->k * sizeof(int));
    memcpy(P->topk_cpu, a.topk, (size_t)N * s->k * sizeof(int));
    moe_acts_free(&a);

    moe_ref_upload(P->dw, &hw);
    P->w = moe_ref_gpu_weights(P->dw, s->S);
    P->x = gpu_upload_bf16(x, N * C);
    if (bias) P->bias = gpu_upload(bias, (size_t)E * sizeof(float));
    moe_ref_weights_free(&hw);
    free(x);
    free(bias);
    return ok;
}

static void problem_destroy(Problem *P) {
    moe_ref_dev_free(P->dw);
    free(P->y_cpu);
    free(P->topk_cpu);
    cudaCheck(cudaFree(P->x));
    if (P->bias) cudaCheck(cudaFree(P->bias));
}

/* Top-k ids equal to the reference's; a failure names the first differing (token, pick). */
static void check_topk(const Shape *s, const char *what, const int *tk, const int *ref) {
    const long n = (long)s->N * s->k;
    long bad = 0, first = -1;
    for (long i = 0; i < n; i++)
        if (tk[i] != ref[i]) bad++, first = first < 0 ? i : first;
    CHECK_MSG(bad == 0, "[%s] %ld of %ld top-k ids differ from %s (first: token %ld pick %ld: mok %d, %s %d)",
              s->label, bad, n, what, first / s->k, first % s->k, first >= 0 ? tk[first] : 0, what,
              first >= 0 ? ref[first] : 0);
}

/* y within BF16_TOL of the reference; a failure names the worst element and both values. */
static double check_y(const Shape *s, const char *variant, const char *what, const float *y, const float *ref) {
    const long n = (long)s->N * s->C;
    const double err = rel_error_f(y, ref, n);
    const long w = worst_index(y, ref, n);
    CHECK_MSG(err < BF16_TOL,
              "[%s, %s] y: rel err vs %s %.3e >= %g (worst y[token %ld, channel %ld]: mok %.6g, %s %.6g)", s->label,
              variant, what, err, BF16_TOL, w / s->C, w % s->C, y[w], what, ref[w]);
    return err;
}

/* y_res, a forward's output given a residual r, against y, the same forward's without it: r + y bit for bit in
 * every element (what a separate add would give), so the combine's residual add changes nothing else. */
static void check_residual(const Shape *s, const char *variant, const float *y_res, const float *y, const float *r) {
    const long n = (long)s->N * s->C;
    long bad = 0, first = -1;
    for (long i = 0; i < n; i++) {
        const float want = r[i] + y[i];
        if (memcmp(&want, &y_res[i], sizeof want)) bad++, first = first < 0 ? i : first;
    }
    CHECK_MSG(bad == 0, "[%s, %s] with a residual: %ld of %ld outputs are not residual + y (first: %.9g, want %.9g)",
              s->label, variant, bad, n, first >= 0 ? y_res[first] : 0.0, first >= 0 ? r[first] + y[first] : 0.0);
}

/* The backward (wgmma tile only) against the unfused backward on the same forward and dy: dx and
 * every weight gradient within BF16_TOL, all written, and a second run bitwise identical. */
enum { G_ROUTER, G_GATE, G_UP, G_DOWN, G_SGATE, G_SUP, G_SDOWN, G_COUNT };
static const char *const grad_names[G_COUNT] = {"router", "w_gate", "w_up", "w_down",
                                                "shared_gate", "shared_up", "shared_down"};

typedef struct {
    float *dx, *g[G_COUNT];
    long n[G_COUNT];
} Grads;

static void grads_create(Grads *G, const Shape *s) {
    const long C = s->C, E = s->E, I = s->I, SI = (long)s->S * s->I;
    const long n[G_COUNT] = {C * E, E * C * I, E * C * I, E * I * C, C * SI, C * SI, SI * C};
    memcpy(G->n, n, sizeof n);
    cudaCheck(cudaMalloc((void **)&G->dx, ((size_t)s->N * C + 1) * sizeof(float)));
    cudaCheck(cudaMemset(G->dx, 0xff, ((size_t)s->N * C + 1) * sizeof(float))); /* NaN: the backward writes dx */
    for (int t = 0; t < G_COUNT; t++) {
        cudaCheck(cudaMalloc((void **)&G->g[t], (size_t)(n[t] + 1) * sizeof(float)));
        cudaCheck(cudaMemset(G->g[t], 0, (size_t)(n[t] + 1) * sizeof(float)));
    }
}

static MoeGpuGrads grads_view(const Grads *G, int shared) {
    MoeGpuGrads g = {G->g[G_ROUTER], G->g[G_GATE], G->g[G_UP], G->g[G_DOWN], shared ? G->g[G_SGATE] : NULL,
                     shared ? G->g[G_SUP] : NULL, shared ? G->g[G_SDOWN] : NULL, 0, NULL, 0};
    return g;
}

static void grads_destroy(Grads *G) {
    cudaCheck(cudaFree(G->dx));
    for (int t = 0; t < G_COUNT; t++) cudaCheck(cudaFree(G->g[t]));
}

/* Every one of n host floats a has the bits of b's (what: the values, against: b). */
static void check_same_bits(const Shape *s, const char *what, const char *against, const float *a, const float *b,
                            long n) {
    long bad = 0, first = -1;
    for (long i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "[%s] %s: %ld of %ld values differ in their bits from %s (first [%ld]: %.9g vs %.9g)", s->label,
              what, bad, n, against, first, first >= 0 ? a[first] : 0.0f, first >= 0 ? b[first] : 0.0f);
}

/* Compares one device tensor with the reference's; bitwise when `bits`. */
static void check_grad(const Shape *s, const char *what, const float *dev, const float *ref_dev, long n, int bits) {
    if (n == 0) return;
    float *a = mallocCheck((size_t)n * sizeof(float)), *b = mallocCheck((size_t)n * sizeof(float));
    gpu_download(a, dev, (size_t)n * sizeof(float));
    gpu_download(b, ref_dev, (size_t)n * sizeof(float));
    const long nan = count_nan(a, n), w = worst_index(a, b, n);
    CHECK_MSG(nan == 0, "[%s] backward %s: %ld of %ld values NaN", s->label, what, nan, n);
    if (bits) {
        char name[64];
        snprintf(name, sizeof name, "backward %s, second run", what);
        check_same_bits(s, name, "the first run", a, b, n);
    } else {
        const double err = rel_error_f(a, b, n);
        CHECK_MSG(err < BF16_TOL, "[%s] backward %s: rel err vs unfused %.3e >= %g (worst [%ld]: mok %.6g, unfused %.6g)",
                  s->label, what, err, BF16_TOL, w, a[w], b[w]);
        if (getenv("MOKC_TEST_VERBOSE")) printf("    [%s] backward %s rel err vs unfused %.2e\n", s->label, what, err);
    }
    free(a);
    free(b);
}

/* dev == scale * ref at every element of the routed experts' gradients (values, so -0 == 0). */
static void check_scaled(const Shape *s, const char *who, const Grads *dev, const Grads *ref, float scale) {
    for (int t = G_GATE; t <= G_DOWN; t++) {
        const long n = dev->n[t];
        float *a = mallocCheck((size_t)n * sizeof(float)), *b = mallocCheck((size_t)n * sizeof(float));
        gpu_download(a, dev->g[t], (size_t)n * sizeof(float));
        gpu_download(b, ref->g[t], (size_t)n * sizeof(float));
        long bad = 0, first = -1;
        for (long i = 0; i < n; i++)
            if (!(a[i] == scale * b[i]) && bad++ == 0) first = i;
        CHECK_MSG(bad == 0, "[%s] %s %s: %ld of %ld values differ from %g x the added gradient (first [%ld]: %.9g vs %.9g)",
                  s->label, who, grad_names[t], bad, n, scale, first, first >= 0 ? a[first] : 0.0f,
                  first >= 0 ? b[first] : 0.0f);
        free(a);
        free(b);
    }
}

/* overwrite_experts: gradients that start as NaN are written (every element, zeros for an expert
 * without rows) equal to those added into zeros; a second backward that adds doubles them exactly.
 * With the routed experts' gradients 16-byte aligned, and where `unaligned`, also one float past
 * that (the megakernel's TMA epilogue, then its register stores; not cuBLAS, whose kernels, and so
 * its last bits, may change with the alignment). backward(g) runs the layer's forward and backward
 * into g. */
static void check_overwrite(const Shape *s, const char *who, const Grads *added,
                            void (*backward)(MoeGpuGrads *g, void *ctx), void *ctx, int unaligned) {
    Grads G;
    grads_create(&G, s);
    for (int shift = 0; shift <= unaligned; shift++) {
        Grads V = G; /* the view backward writes: grads_create's spare float holds the shift */
        for (int t = G_GATE; t <= G_DOWN; t++) {
            V.g[t] = G.g[t] + shift;
            cudaCheck(cudaMemset(V.g[t], 0xff, (size_t)G.n[t] * sizeof(float)));
        }
        char name[96];
        snprintf(name, sizeof name, "%s%s", who, shift ? " (gradients not 16-byte aligned)" : "");
        MoeGpuGrads g = grads_view(&V, s->S > 0);
        g.overwrite_experts = 1;
        backward(&g, ctx);
        check_scaled(s, name, &V, added, 1.0f);
        g.overwrite_experts = 0;
        backward(&g, ctx);
        check_scaled(s, name, &V, added, 2.0f);
    }
    grads_destroy(&G);
}

typedef struct {
    const Problem *P;
    MoeUnfusedActs *a;
    MoeUnfusedWork *w;
    MoeMok *m;
    MoeMokSaved *sv;
    const float *dy;
    float *dx, *y;
    double daux;
    int N;
} BackwardCtx;

static void unfused_backward(MoeGpuGrads *g, void *ctx) {
    BackwardCtx *c = ctx;
    const Problem *P = c->P;
    moe_unfused_forward(c->y, NULL, c->a, c->w, P->x, &P->w, P->bias, c->N, 0);
    moe_unfused_backward(c->dx, g, c->dy, c->daux, c->a, c->w, P->x, &P->w, c->N, 0);
    cudaCheck(cudaDeviceSynchronize());
}

static void mok_backward(MoeGpuGrads *g, void *ctx) {
    BackwardCtx *c = ctx;
    const Problem *P = c->P;
    moe_mok_forward(c->y, NULL, c->m, c->sv, P->x, &P->w, P->bias, c->N, 0);
    moe_mok_backward(c->dx, g, c->dy, c->daux, c->sv, c->m, P->x, &P->w, c->N, 0);
    moe_mok_sync(c->m, 0);
}

/* Sum of squares (double) of n floats on the device. */
static double device_sumsq(const float *dev, long n) {
    float *h = mallocCheck((size_t)n * sizeof(float));
    gpu_download(h, dev, (size_t)n * sizeof(float));
    const double t = sum_of_squares(h, (size_t)n);
    free(h);
    return t;
}

/* The steps check_squares and check_idle take, {first micro-batch's tokens (0: none), last's}: one micro-batch; two
 * whose first has all tokens and the last all, 1 or 3 (most experts without rows there); two of 3 and of 1 token
 * each; two whose first has 1 or 3 tokens and the last all (experts whose first rows of the step come in the last). */
enum { MOK_STEPS = 8 };
static void mok_steps(const Shape *s, int steps[MOK_STEPS][2]) {
    const int few = s->N < 3 ? s->N : 3;
    const int all[MOK_STEPS][2] = {{0, s->N}, {s->N, s->N}, {s->N, 1}, {s->N, few}, {few, few}, {1, 1}, {1, s->N},
                                   {few, s->N}};
    memcpy(steps, all, sizeof all);
}

/* One step of the megakernel's backward into g: a first micro-batch of n1 tokens (none: 0), writing, then a last of
 * n2, adding (writing without a first), its squares to sq (n_sq floats, NaNs before the last, so that a slot left
 * unwritten shows). */
static void mok_step(BackwardCtx *c, MoeGpuGrads g, int n1, int n2, float *sq, long n_sq) {
    if (n1 > 0) {
        c->N = n1;
        g.overwrite_experts = 1;
        mok_backward(&g, c);
    }
    cudaCheck(cudaMemset(sq, 0xff, (size_t)n_sq * sizeof(float)));
    c->N = n2;
    g.overwrite_experts = n1 == 0;
    g.sq = sq;
    mok_backward(&g, c);
}

/* MoeGpuGrads.sq: what the megakernel's last backward of a step leaves sums to the routed experts' squared gradient
 * norm (fp32 sums: within 1e-5), every float of it written, whichever way each slot comes: the epilogues (rows in
 * the last micro-batch), zeros (no rows all step), or a read of the gradients (rows in an earlier micro-batch only;
 * tasks at the gradients' edges, as in the narrow shapes; every expert where the gradients are not 16-byte aligned).
 * Over mok_steps. */
static void check_squares(const Shape *s, BackwardCtx *c) {
    const long n_sq = mok_expert_sq_floats(s->E, s->C, s->I);
    float *sq;
    cudaCheck(cudaMalloc((void **)&sq, (size_t)n_sq * sizeof(float)));
    float *h_sq = mallocCheck((size_t)n_sq * sizeof(float));
    Grads G;
    grads_create(&G, s);
    int steps[MOK_STEPS][2];
    mok_steps(s, steps);
    for (int shift = 0; shift <= 1; shift++)
        for (int i = 0; i < MOK_STEPS; i++) {
            Grads V = G;
            for (int t = G_GATE; t <= G_DOWN; t++) V.g[t] = G.g[t] + shift;
            mok_step(c, grads_view(&V, s->S > 0), steps[i][0], steps[i][1], sq, n_sq);
            gpu_download(h_sq, sq, (size_t)n_sq * sizeof(float));
            double got = 0;
            long unwritten = 0;
            for (long j = 0; j < n_sq; j++) {
                if (isnan(h_sq[j])) unwritten++;
                got += h_sq[j];
            }
            double want = 0;
            for (int t = G_GATE; t <= G_DOWN; t++) want += device_sumsq(V.g[t], V.n[t]);
            CHECK_MSG(unwritten == 0, "[%s] squares, micro-batches of %d then %d tokens%s: %ld of %ld floats unwritten",
                      s->label, steps[i][0], steps[i][1], shift ? ", unaligned" : "", unwritten, n_sq);
            CHECK_MSG(fabs(got - want) <= 1e-5 * want && (want > 0 || got == 0),
                      "[%s] squares, micro-batches of %d then %d tokens%s: %.9g, the gradients' %.9g", s->label,
                      steps[i][0], steps[i][1], shift ? ", unaligned" : "", got, want);
        }
    c->N = s->N;
    grads_destroy(&G);
    free(h_sq);
    cudaCheck(cudaFree(sq));
}

/* MoeGpuGrads.idle_unwritten over mok_steps, from gradients that hold NaNs: an expert without rows all step keeps
 * them (not written) and the saved rows_step says 0 for it; every other expert's gradient has the bits of
 * the same step run without it (which writes zeros for experts without rows, and adds into them); the last
 * micro-batch's squares sum to that run's. Gradients 16-byte aligned (TMA epilogues) and not (register stores). */
static void check_idle(const Shape *s, BackwardCtx *c) {
    const long n_sq = mok_expert_sq_floats(s->E, s->C, s->I);
    float *sq[2];
    for (int r = 0; r < 2; r++) cudaCheck(cudaMalloc((void **)&sq[r], (size_t)n_sq * sizeof(float)));
    float *h_sq = mallocCheck((size_t)n_sq * sizeof(float));
    int *rows = mallocCheck((size_t)s->E * sizeof(int));
    Grads G[2];
    grads_create(&G[0], s);
    grads_create(&G[1], s);
    int steps[MOK_STEPS][2];
    mok_steps(s, steps);
    for (int shift = 0; shift <= 1; shift++)
        for (int i = 0; i < MOK_STEPS; i++) {
            double sums[2] = {0, 0};
            Grads V[2] = {G[0], G[1]}; /* V[0] idle experts unwritten, V[1] written */
            for (int r = 1; r >= 0; r--) {
                for (int t = G_GATE; t <= G_DOWN; t++) {
                    V[r].g[t] = G[r].g[t] + shift;
                    cudaCheck(cudaMemset(V[r].g[t], 0xff, (size_t)G[r].n[t] * sizeof(float)));
                }
                MoeGpuGrads g = grads_view(&V[r], s->S > 0);
                g.idle_unwritten = r == 0;
                mok_step(c, g, steps[i][0], steps[i][1], sq[r], n_sq);
                gpu_download(h_sq, sq[r], (size_t)n_sq * sizeof(float));
                for (long j = 0; j < n_sq; j++) sums[r] += h_sq[j];
            }
            gpu_download(rows, c->sv->rows_step, (size_t)s->E * sizeof(int));
            long idle = 0, touched = 0, differ = 0, rows_all = 0;
            for (int el = 0; el < s->E; el++) idle += rows[el] == 0, rows_all += rows[el];
            for (int t = G_GATE; t <= G_DOWN; t++) {
                const long n = V[0].n[t], per = n / s->E;
                float *a = mallocCheck((size_t)n * sizeof(float)), *b = mallocCheck((size_t)n * sizeof(float));
                gpu_download(a, V[0].g[t], (size_t)n * sizeof(float));
                gpu_download(b, V[1].g[t], (size_t)n * sizeof(float));
                for (long j = 0; j < n; j++) {
                    if (rows[j / per] == 0) touched += !isnan(a[j]) || b[j] != 0.0f;
                    else differ += memcmp(&a[j], &b[j], sizeof(float)) != 0;
                }
                free(a);
                free(b);
            }
            const char *how = shift ? ", unaligned" : "";
            CHECK_MSG(rows_all == (long)(steps[i][0] + steps[i][1]) * s->k,
                      "[%s] idle experts, micro-batches of %d then %d tokens%s: rows_step sums to %ld, not %ld",
                      s->label, steps[i][0], steps[i][1], how, rows_all, (long)(steps[i][0] + steps[i][1]) * s->k);
            CHECK_MSG(touched == 0 && differ == 0,
                      "[%s] idle experts, micro-batches of %d then %d tokens%s: %ld values of the %ld idle experts "
                      "written (or not zeros written), %ld of the others differ from the run that writes them all",
                      s->label, steps[i][0], steps[i][1], how, touched, idle, differ);
            CHECK_MSG(fabs(sums[0] - sums[1]) <= 1e-6 * sums[1] && !isnan(sums[0]),
                      "[%s] idle experts, micro-batches of %d then %d tokens%s: squares %.9g, written whole %.9g",
                      s->label, steps[i][0], steps[i][1], how, sums[0], sums[1]);
        }
    c->N = s->N;
    grads_destroy(&G[0]);
    grads_destroy(&G[1]);
    free(h_sq), free(rows);
    for (int r = 0; r < 2; r++) cudaCheck(cudaFree(sq[r]));
}

static void check_backward(const Shape *s, const Problem *P, MoeUnfusedActs *a, MoeUnfusedWork *w) {
    const int N = s->N, shared = s->S > 0;
    const double daux = 0.01;
    float *dy_h = gpu_rand_array((long)N * s->C, 1.0f, 0);
    float *dy = gpu_upload(dy_h, (size_t)N * s->C * sizeof(float));
    free(dy_h);
    Grads ref, run[2];
    grads_create(&ref, s);
    MoeGpuGrads g = grads_view(&ref, shared);
    moe_unfused_backward(ref.dx, &g, dy, daux, a, w, P->x, &P->w, N, 0);
    MoeMok m;
    moe_mok_create(&m, &P->d, N, NULL, 0, 1);
    MoeMokSaved sv;
    moe_mok_saved_create(&sv, &P->d, N, 0);
    float *y = gpu_poisoned((size_t)N * s->C * sizeof(float));
    for (int r = 0; r < 2; r++) {
        grads_create(&run[r], s);
        g = grads_view(&run[r], shared);
        moe_mok_forward(y, NULL, &m, &sv, P->x, &P->w, P->bias, N, 0);
        moe_mok_backward(run[r].dx, &g, dy, daux, &sv, &m, P->x, &P->w, N, 0);
        moe_mok_sync(&m, 0);
    }
    check_grad(s, "dx", run[0].dx, ref.dx, (long)N * s->C, 0);
    check_grad(s, "dx", run[1].dx, run[0].dx, (long)N * s->C, 1);
    for (int t = 0; t < G_COUNT; t++) {
        check_grad(s, grad_names[t], run[0].g[t], ref.g[t], run[0].n[t], 0);
        check_grad(s, grad_names[t], run[1].g[t], run[0].g[t], run[0].n[t], 1);
    }
    BackwardCtx ctx = {P, a, w, &m, &sv, dy, run[1].dx, y, daux, N};
    check_overwrite(s, "unfused overwrite", &ref, unfused_backward, &ctx, 0);
    check_overwrite(s, "mok overwrite", &run[0], mok_backward, &ctx, 1);
    check_squares(s, &ctx);
    check_idle(s, &ctx);
    cudaCheck(cudaFree(y));
    cudaCheck(cudaFree(dy));
    grads_destroy(&ref);
    grads_destroy(&run[0]);
    grads_destroy(&run[1]);
    moe_mok_saved_destroy(&sv);
    moe_mok_destroy(&m);
}

/* Forward variants: a GEMM tile (-1: the layer's default), a number of communication blocks
 * (0: the default) and M tiles a group of the wgmma forward's ticket order (0: the default). */
typedef struct {
    int tile, n_comm, group_mt;
} Variant;

static void run_shape(const Shape *s, const Variant *vars, int n_vars) {
    Problem P;
    if (!problem_create(&P, s)) {
        test_fail(__FILE__, __LINE__, "[%s] could not draw inputs with a routing margin of %g", s->label,
                  MOE_REF_MARGIN);
        problem_destroy(&P);
        return;
    }
    const int N = s->N, k = s->k, E = s->E;
    const long ny = (long)N * s->C;
    /* the unfused layer */
    MoeUnfusedActs a;
    MoeUnfusedWork w;
    moe_unfused_acts_create(&a, &P.d, N);
    moe_unfused_work_create(&w, &P.d, N, NULL);
    float *y_d = gpu_poisoned((size_t)ny * sizeof(float));
    moe_unfused_forward(y_d, NULL, &a, &w, P.x, &P.w, P.bias, N, 0);
    float *y_unf = mallocCheck((size_t)ny * sizeof(float)), *y = mallocCheck((size_t)ny * sizeof(float));
    gpu_download(y_unf, y_d, (size_t)ny * sizeof(float));
    cudaCheck(cudaFree(y_d));
    int *tk_unf = mallocCheck((size_t)N * k * sizeof(int)), *tk = mallocCheck((size_t)N * k * sizeof(int));
    int *cnt_unf = mallocCheck((size_t)E * sizeof(int)), *cnt = mallocCheck((size_t)E * sizeof(int));
    gpu_download(tk_unf, a.topk, (size_t)N * k * sizeof(int));
    gpu_download(cnt_unf, a.counts, (size_t)E * sizeof(int));
    const double err_unf_cpu = rel_error_f(y_unf, P.y_cpu, ny);
    /* the residual stream's add in the combine: the unfused layer's, then each tile's below */
    float *res_h = gpu_rand_array(ny + 1, 4.0f, 0), *res = gpu_upload(res_h, (size_t)(ny + 1) * sizeof(float));
    float *y_res = mallocCheck((size_t)ny * sizeof(float));
    for (int off = 0; off < 2; off++) { /* off 1: the residual off 16-byte alignment, the combine's element-wise form */
        y_d = gpu_poisoned((size_t)ny * sizeof(float));
        moe_unfused_forward(y_d, res + off, &a, &w, P.x, &P.w, P.bias, N, 0);
        gpu_download(y_res, y_d, (size_t)ny * sizeof(float));
        cudaCheck(cudaFree(y_d));
        check_residual(s, off ? "unfused, residual off alignment" : "unfused", y_res, y_unf, res_h + off);
    }

    /* The first run of each tile; the two mma.sync tiles share bits, so they share a slot. */
    enum { MAX_TILES = 8 };
    float *first[MAX_TILES] = {0};
    char first_of[MAX_TILES][128];
    double err_cpu_max = 0;
    for (int v = 0; v < n_vars; v++) {
        MoeMok m;
        moe_mok_create(&m, &P.d, N, NULL, vars[v].n_comm, 0);
        moe_mok_set_debug(&m, 5.0, 0);
        if (vars[v].tile >= 0) moe_mok_set_tile(&m, vars[v].tile);
        moe_mok_set_group_mt(&m, vars[v].group_mt);
        char variant[128];
        snprintf(variant, sizeof variant, "%stile %d (%s), %d comm blocks, groups of %d M tiles",
                 vars[v].tile < 0 ? "default " : "", m.tile,
                 m.tile == MOK_TILE_SIMPLE ? "simple" : m.tile == MOK_TILE_PIPE ? "pipelined" : "not mma.sync",
                 m.n_comm, vars[v].group_mt);
        const int slot = m.tile == MOK_TILE_SIMPLE ? MOK_TILE_PIPE : m.tile;
        if (slot < 0 || slot >= MAX_TILES) {
            test_fail(__FILE__, __LINE__, "[%s] tile id %d: this test keeps ids below %d", s->label, m.tile, MAX_TILES);
            moe_mok_destroy(&m);
            continue;
        }
        for (int rep = 0; rep < 2; rep++) {
            y_d = gpu_poisoned((size_t)ny * sizeof(float));
            moe_mok_forward(y_d, NULL, &m, NULL, P.x, &P.w, P.bias, N, 0);
            const double aux = moe_mok_aux_loss(&m, 0);
            gpu_download(y, y_d, (size_t)ny * sizeof(float));
            cudaCheck(cudaFree(y_d));
            const long nan = count_nan(y, ny);
            CHECK_MSG(nan == 0, "[%s, %s] %ld of %ld outputs not written (NaN)", s->label, variant, nan, ny);
            if (rep == 0) {
                gpu_download(tk, m.st.topk, (size_t)N * k * sizeof(int));
                gpu_download(cnt, m.st.counts, (size_t)E * sizeof(int));
                check_topk(s, "the CPU", tk, P.topk_cpu);
                check_topk(s, "unfused", tk, tk_unf);
                CHECK_MSG(!memcmp(cnt, cnt_unf, (size_t)E * sizeof(int)), "[%s] expert counts differ from unfused",
                          s->label);
                CHECK_MSG(aux == a.aux_loss, "[%s] aux loss %.17g vs unfused %.17g", s->label, aux, a.aux_loss);
                const double e = check_y(s, variant, "the CPU", y, P.y_cpu);
                err_cpu_max = e > err_cpu_max ? e : err_cpu_max;
                check_y(s, variant, "unfused", y, y_unf);
            }
            if (!first[slot]) {
                first[slot] = mallocCheck((size_t)ny * sizeof(float));
                memcpy(first[slot], y, (size_t)ny * sizeof(float));
                snprintf(first_of[slot], sizeof first_of[slot], "%s", variant);
            } else {
                const long i = worst_index(y, first[slot], ny);
                CHECK_MSG(!memcmp(y, first[slot], (size_t)ny * sizeof(float)),
                          "[%s, %s] run %d is not bitwise identical to the first run with the same tile bits (%s; "
                          "worst y[token %ld, channel %ld]: %.9g vs %.9g)",
                          s->label, variant, rep + 1, first_of[slot], i / s->C, i % s->C, y[i], first[slot][i]);
            }
        }
        y_d = gpu_poisoned((size_t)ny * sizeof(float));
        moe_mok_forward(y_d, res, &m, NULL, P.x, &P.w, P.bias, N, 0);
        moe_mok_sync(&m, 0);
        gpu_download(y_res, y_d, (size_t)ny * sizeof(float));
        cudaCheck(cudaFree(y_d));
        check_residual(s, variant, y_res, y, res_h);
        moe_mok_destroy(&m);
    }
    cudaCheck(cudaFree(res));
    free(res_h);
    free(y_res);
    if (getenv("MOKC_TEST_VERBOSE"))
        printf("    [%s] rel err of y vs the CPU: mok %.2e (worst variant), unfused %.2e\n", s->label, err_cpu_max,
               err_unf_cpu);
    const char *why = NULL;
    if (mok_tile_supported(MOK_TILE_WGMMA, s->C, s->I, &why)) check_backward(s, &P, &a, &w);
    for (int i = 0; i < MAX_TILES; i++) free(first[i]);
    free(y_unf);
    free(y);
    free(tk_unf);
    free(tk);
    free(cnt_unf);
    free(cnt);
    moe_unfused_acts_destroy(&a);
    moe_unfused_work_destroy(&w);
    problem_destroy(&P);
}

/* label, N, C, E, k, I, S, sigmoid, skew, seed */
static const Shape shapes[] = {
    {"small N=37 C=64 E=8 k=2 I=64 shared", 37, 64, 8, 2, 64, 1, 0, 0, 1},
    {"k=1 N=77 C=128 E=16 I=128", 77, 128, 16, 1, 128, 0, 0, 0, 2},
    {"k=1 all tokens on one expert N=200", 200, 128, 8, 1, 128, 0, 0, 1, 3},
    {"skewed k=2 first pick fixed N=130 shared", 130, 64, 16, 2, 192, 1, 0, 1, 4},
    {"E=384 k=8 sigmoid N=45", 45, 64, 384, 8, 64, 0, 1, 0, 5},
    {"k=E=4 N=333 2 shared", 333, 192, 4, 4, 128, 2, 0, 0, 6},
    {"N=1", 1, 64, 8, 2, 64, 1, 0, 0, 7},
    {"N=1000 E=32 k=4 C=256 I=192", 1000, 256, 32, 4, 192, 0, 0, 0, 8},
    /* ≈ 27 rows an expert and 400 on one: the backward's short (wide) and long weight-gradient tasks in one
     * launch, the stage ring lent to the staging and given back several times a block */
    {"skewed k=2 N=400 E=16 I=192", 400, 128, 16, 2, 192, 0, 0, 1, 9},
};

/* C and I multiples of 8, not of 64: only tiles that take them. */
static const Shape narrow_shapes[] = {
    {"C=200 I=72 N=150 E=8 k=2 shared", 150, 200, 8, 2, 72, 1, 0, 0, 11},
    {"C=136 I=264 N=260 E=16 k=1 all tokens on one expert", 260, 136, 16, 1, 264, 0, 0, 1, 12},
};

static void test_mok_forward(void) {
    if (!gpu_test_begin()) return;
    /* groups of 1 and 3 M tiles: the interleaved ticket order (the default shapes here make one group) */
    static const Variant vars[] = {{-1, 0, 0}, {-1, 7, 0}, {-1, 0, 1}, {-1, 7, 3}, {MOK_TILE_SIMPLE, 0, 0},
                                   {MOK_TILE_SIMPLE, 1, 0}, {MOK_TILE_PIPE, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const MoeDims cd = shape_dims(&shapes[i]);
        const MoeGpuDims d = moe_ref_gpu_dims(&cd);
        CHECK_MSG(moe_mok_supported(&d), "[%s] moe_mok_supported says no to C=%d I=%d", shapes[i].label, d.C, d.I);
        if (moe_mok_supported(&d)) run_shape(&shapes[i], vars, (int)(sizeof vars / sizeof vars[0]));
    }
}

static void test_mok_narrow_widths(void) {
    if (!gpu_test_begin()) return;
    /* The default tile only: the mma.sync tiles need multiples of 64. */
    static const Variant vars[] = {{-1, 0, 0}, {-1, 1, 2}};
    static char skipped[512]; /* test_skip keeps the pointer */
    snprintf(skipped, sizeof skipped, "moe_mok_supported says no to");
    const size_t intro = strlen(skipped);
    for (size_t i = 0; i < sizeof narrow_shapes / sizeof narrow_shapes[0]; i++) {
        const Shape *s = &narrow_shapes[i];
        const MoeDims cd = shape_dims(s);
        const MoeGpuDims d = moe_ref_gpu_dims(&cd);
        if (moe_mok_supported(&d)) {
            run_shape(s, vars, (int)(sizeof vars / sizeof vars[0]));
        } else {
            const size_t len = strlen(skipped);
            snprintf(skipped + len, sizeof skipped - len, "%s [%s]", len > intro ? "," : "", s->label);
        }
    }
    if (strlen(skipped) > intro) test_skip(skipped);
}

/* ---------- CUDA graphs ---------- */

typedef struct {
    const Problem *P;
    MoeMok *m;
    MoeMokSaved *sv;
    const float *dy;
    float *y;
    Grads *G;
    int N, backward;
    cudaStream_t stream;
} Step;

/* y and dx poisoned (written), the gradients zeroed (added into), outside any graph. */
static void step_reset(const Step *t, const Shape *s) {
    cudaCheck(cudaMemsetAsync(t->y, 0xff, (size_t)t->N * s->C * sizeof(float), t->stream));
    cudaCheck(cudaMemsetAsync(t->G->dx, 0xff, (size_t)t->N * s->C * sizeof(float), t->stream));
    for (int g = 0; g < G_COUNT; g++) cudaCheck(cudaMemsetAsync(t->G->g[g], 0, t->G->n[g] * sizeof(float), t->stream));
}

static void step_run(const Step *t, const Shape *s) {
    const Problem *P = t->P;
    const MoeGpuGrads g = grads_view(t->G, s->S > 0);
    moe_mok_forward(t->y, NULL, t->m, t->sv, P->x, &P->w, P->bias, t->N, t->stream);
    if (t->backward) moe_mok_backward(t->G->dx, &g, t->dy, 0.01, t->sv, t->m, P->x, &P->w, t->N, t->stream);
}

/* The layer's forward (and backward, wgmma tile) captured as one CUDA graph on a stream of its own,
 * in global capture mode (a synchronising or otherwise uncapturable call anywhere fails it; the
 * stream is a blocking one, so work that escaped to the legacy stream would fail it too), then
 * replayed twice: y, dx, every gradient and the host copies of the counts and aux loss bitwise equal
 * to those of the same calls run eagerly on that stream. */
static void run_graph(const Shape *s) {
    Problem P;
    problem_create(&P, s); /* equality with the eager run needs no routing margin */
    const int N = s->N;
    const long ny = (long)N * s->C;
    Step t = {&P, NULL, NULL, NULL, NULL, NULL, N, 0, 0};
    cudaCheck(cudaStreamCreate(&t.stream));
    MoeMok m;
    moe_mok_create(&m, &P.d, N, NULL, 0, 1);
    t.backward = m.tile == MOK_TILE_WGMMA; /* the backward exists for the wgmma tile */
    MoeMokSaved sv;
    moe_mok_saved_create(&sv, &P.d, N, 0);
    t.m = &m, t.sv = &sv;
    float *dy_h = gpu_rand_array(ny, 1.0f, 0);
    t.dy = gpu_upload(dy_h, (size_t)ny * sizeof(float));
    free(dy_h);
    t.y = gpu_poisoned((size_t)ny * sizeof(float));
    Grads G;
    grads_create(&G, s);
    t.G = &G;

    /* eagerly: the reference, and the warm-up (kernel attributes, cuBLAS's workspace) */
    step_reset(&t, s);
    step_run(&t, s);
    moe_mok_sync(&m, t.stream);
    float *want[G_COUNT + 2], *got[G_COUNT + 2];
    const long n_want[G_COUNT + 2] = {ny, ny, G.n[0], G.n[1], G.n[2], G.n[3], G.n[4], G.n[5], G.n[6]};
    const float *dev[G_COUNT + 2] = {t.y, G.dx, G.g[0], G.g[1], G.g[2], G.g[3], G.g[4], G.g[5], G.g[6]};
    static const char *const names[G_COUNT + 2] = {"y", "dx", "g router", "g w_gate", "g w_up", "g w_down",
                                                   "g shared_gate", "g shared_up", "g shared_down"};
    const int n_out = t.backward ? G_COUNT + 2 : 1;
    for (int i = 0; i < n_out; i++) {
        want[i] = mallocCheck((size_t)(n_want[i] ? n_want[i] : 1) * sizeof(float));
        got[i] = mallocCheck((size_t)(n_want[i] ? n_want[i] : 1) * sizeof(float));
        gpu_download(want[i], dev[i], (size_t)n_want[i] * sizeof(float));
    }
    int *counts = mallocCheck((size_t)s->E * sizeof(int));
    memcpy(counts, sv.h_counts, (size_t)s->E * sizeof(int));
    const double aux = sv.h_aux[0];

    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaCheck(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeGlobal));
    step_run(&t, s);
    const cudaError_t captured = cudaStreamEndCapture(t.stream, &graph);
    CHECK_MSG(captured == cudaSuccess, "[%s] capturing the layer failed: %s", s->label, cudaGetErrorString(captured));
    if (captured == cudaSuccess) cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 1; exec && replay <= 2; replay++) {
        memset(sv.h_counts, 0xff, (size_t)s->E * sizeof(int));
        sv.h_aux[0] = -1.0;
        step_reset(&t, s);
        cudaCheck(cudaGraphLaunch(exec, t.stream));
        moe_mok_sync(&m, t.stream);
        for (int i = 0; i < n_out; i++) {
            char what[64];
            snprintf(what, sizeof what, "graph replay %d: %s", replay, names[i]);
            gpu_download(got[i], dev[i], (size_t)n_want[i] * sizeof(float));
            check_same_bits(s, what, "the eager run", got[i], want[i], n_want[i]);
        }
        CHECK_MSG(!memcmp(sv.h_counts, counts, (size_t)s->E * sizeof(int)),
                  "[%s] graph replay %d: the host copy of the expert counts differs from the eager run's", s->label,
                  replay);
        CHECK_MSG(sv.h_aux[0] == aux, "[%s] graph replay %d: aux loss %.17g, eager %.17g", s->label, replay,
                  sv.h_aux[0], aux);
    }
    if (exec) cudaCheck(cudaGraphExecDestroy(exec));
    if (graph) cudaCheck(cudaGraphDestroy(graph));
    for (int i = 0; i < n_out; i++) free(want[i]), free(got[i]);
    free(counts);
    grads_destroy(&G);
    cudaCheck(cudaFree(t.y));
    cudaCheck(cudaFree((void *)t.dy));
    moe_mok_saved_destroy(&sv);
    moe_mok_destroy(&m);
    cudaCheck(cudaStreamDestroy(t.stream));
    problem_destroy(&P);
}

static void test_mok_graph(void) {
    if (!gpu_test_begin()) return;
    run_graph(&shapes[0]); /* shared experts, 37 tokens */
    run_graph(&shapes[1]); /* k = 1 */
    run_graph(&shapes[7]); /* 1000 tokens, E = 32, k = 4 */
}

/* ---------- the schedule ---------- */

/* mok_schedule against a serial loop, on random segment sizes (empty ones included) for expert
 * counts around one block's threads and past them, at an offset e0 into the EP group's experts. */
static void test_mok_schedule(void) {
    if (!gpu_test_begin()) return;
    static const int els[] = {1, 7, 64, 255, 256, 257, 600, 1000};
    gpu_rng_seed(21);
    for (size_t c = 0; c < sizeof els / sizeof els[0]; c++) {
        const int El = els[c], e0 = (int)(gpu_rng_next() % 5) * El, E = e0 + 2 * El, tile_m = c % 2 ? 64 : 128;
        int *eo = mallocCheck((size_t)(E + 1) * sizeof(int)), *want = mallocCheck((size_t)(El + 1) * sizeof(int));
        int *got = mallocCheck((size_t)(El + 2) * sizeof(int));
        eo[0] = 0;
        for (int e = 0; e < E; e++) eo[e + 1] = eo[e] + (gpu_rng_next() % 4 ? (int)(gpu_rng_next() % 600) : 0);
        int mt = 0;
        for (int el = 0; el < El; el++) {
            want[el] = mt;
            mt += (eo[e0 + el + 1] - eo[e0 + el] + tile_m - 1) / tile_m;
        }
        want[El] = mt;
        int *eo_d = gpu_upload(eo, (size_t)(E + 1) * sizeof(int));
        int *out_d = gpu_poisoned((size_t)(El + 2) * sizeof(int)); /* mt_start, then total_mt */
        mok_schedule(out_d, out_d + El + 1, eo_d, e0, El, tile_m, 0);
        gpu_download(got, out_d, (size_t)(El + 2) * sizeof(int));
        long bad = 0, first = -1;
        for (int el = 0; el <= El; el++)
            if (got[el] != want[el] && bad++ == 0) first = el;
        CHECK_MSG(bad == 0, "El=%d e0=%d tile_m=%d: %ld of %d tile starts differ (first [%ld]: %d, want %d)", El, e0,
                  tile_m, bad, El + 1, first, first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
        CHECK_MSG(got[El + 1] == mt, "El=%d: total_mt %d, want %d", El, got[El + 1], mt);
        cudaCheck(cudaFree(eo_d));
        cudaCheck(cudaFree(out_d));
        free(eo);
        free(want);
        free(got);
    }
}

/* gpu_moe_plan_histogram (this rank's counts) against a count on the host, on random ids: empty and
 * single slots, expert counts with the bins in shared memory (up to 12288) and past it (the outputs
 * as bins), slot counts that are not multiples of a block's 8192, many blocks adding into one expert. */
static void test_mok_histogram(void) {
    if (!gpu_test_begin()) return;
    static const struct {
        int E;
        long nslots;
    } cases[] = {{1, 0},         {1, 5},          {8, 1},          {128, 65536},     {384, 32771},
                 {12288, 50000}, {12289, 20000}, {100000, 300001}, {128, 1048583}, {2, 262144}};
    gpu_rng_seed(22);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int E = cases[c].E;
        const long n = cases[c].nslots;
        int *ids = mallocCheck((size_t)(n ? n : 1) * sizeof(int)), *want = callocCheck((size_t)E, sizeof(int));
        for (long i = 0; i < n; i++) { /* skewed: half the ids on a few experts */
            const uint64_t range = gpu_rng_next() % 2 ? (uint64_t)E : (uint64_t)(E < 4 ? E : 4);
            ids[i] = (int)(gpu_rng_next() % range);
            want[ids[i]]++;
        }
        int *ids_d = gpu_upload(ids, (size_t)n * sizeof(int));
        int *counts_d = gpu_poisoned((size_t)E * sizeof(int));
        long long *stat_d = gpu_poisoned((size_t)E * sizeof(long long));
        gpu_moe_plan_histogram(counts_d, stat_d, ids_d, n, E, 0);
        int *counts = mallocCheck((size_t)E * sizeof(int));
        long long *stat = mallocCheck((size_t)E * sizeof(long long));
        gpu_download(counts, counts_d, (size_t)E * sizeof(int));
        gpu_download(stat, stat_d, (size_t)E * sizeof(long long));
        long bad = 0, first = -1;
        for (int e = 0; e < E; e++)
            if ((counts[e] != want[e] || stat[e] != want[e]) && bad++ == 0) first = e;
        CHECK_MSG(bad == 0, "E=%d, %ld slots: %ld of %d experts' counts differ (first %ld: %d and %lld, want %d)", E, n,
                  bad, E, first, first >= 0 ? counts[first] : 0, first >= 0 ? stat[first] : 0LL,
                  first >= 0 ? want[first] : 0);
        cudaCheck(cudaFree(ids_d));
        cudaCheck(cudaFree(counts_d));
        cudaCheck(cudaFree(stat_d));
        free(ids);
        free(want);
        free(counts);
        free(stat);
    }
}

/* ---------- the watchdog ---------- */

#define WATCHDOG_ENV "MOKC_TEST_MOK_WATCHDOG_CHILD"

/* Runs only as the child of test_mok_watchdog: with WATCHDOG_ENV=forward, a forward whose dispatch
 * warps skip their rows; =backward, a complete forward, then a backward whose dispatch skips the dy
 * rows (the wgmma tile). moe_mok_sync must print the record and exit non-zero; returning is a
 * failure. */
static void test_mok_watchdog_child(void) {
    const char *which = getenv(WATCHDOG_ENV);
    if (!which) {
        test_skip("runs only as the child of test_mok_watchdog");
        return;
    }
    if (!gpu_test_begin()) return;
    const Shape s = {"watchdog", 100, 64, 8, 2, 64, 0, 0, 0, 9};
    const int backward = !strcmp(which, "backward");
    Problem P;
    problem_create(&P, &s); /* the routing margin does not matter here */
    MoeMok m;
    moe_mok_create(&m, &P.d, s.N, NULL, 2, 1);
    MoeMokSaved sv;
    moe_mok_saved_create(&sv, &P.d, s.N, 0);
    moe_mok_set_debug(&m, 1.0, !backward);
    float *y, *dx, *dy;
    cudaCheck(cudaMalloc((void **)&y, (size_t)s.N * s.C * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&dx, (size_t)s.N * s.C * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&dy, (size_t)s.N * s.C * sizeof(float)));
    cudaCheck(cudaMemset(dy, 0, (size_t)s.N * s.C * sizeof(float)));
    moe_mok_forward(y, NULL, &m, &sv, P.x, &P.w, NULL, s.N, 0);
    if (backward) {
        Grads G;
        grads_create(&G, &s);
        const MoeGpuGrads g = grads_view(&G, 0);
        moe_mok_sync(&m, 0);
        moe_mok_set_debug(&m, 1.0, 1);
        moe_mok_backward(dx, &g, dy, 0.01, &sv, &m, P.x, &P.w, s.N, 0);
    }
    moe_mok_sync(&m, 0); /* must not return */
    fprintf(stderr, "watchdog child: the %s returned although no row was dispatched\n", which);
    fflush(stderr);
    _exit(0); /* the parent expects a non-zero exit */
}

/* Runs the child for `which` and checks its exit code, time and record: one of the roles listed. */
static void check_watchdog(const char *which, const char *role_a, const char *role_b) {
    char exe[1024], cmd[1400];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    if (n <= 0) return;
    exe[n] = 0;
    snprintf(cmd, sizeof cmd, "%s=%s timeout -s KILL 60 '%s' mok.test_mok_watchdog_child", WATCHDOG_ENV, which, exe);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    static char log[16384];
    const int code = test_run(cmd, log, sizeof log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const int ok_code = code == MOKC_EXIT_RUNTIME;
    const int ok_record = strstr(log, "mok watchdog:") && (strstr(log, role_a) || strstr(log, role_b)) &&
                          strstr(log, " seen 0 ");
    CHECK_MSG(ok_code, "the %s watchdog child should exit %d, got %d after %.1f s (137: killed, it hung)", which,
              MOKC_EXIT_RUNTIME, code, secs);
    CHECK_MSG(ok_record, "the %s watchdog child did not print the expected record (%s or %s)", which, role_a, role_b);
    CHECK_MSG(secs < 30.0, "the %s watchdog child took %.1f s (budget 1 s)", which, secs);
    if (!ok_code || !ok_record || secs >= 30.0) fprintf(stderr, "---- watchdog child output ----\n%s\n----\n", log);
}

static void test_mok_watchdog(void) {
    if (!gpu_test_begin()) return;
    /* With no rows dispatched, whichever waiting task's budget expires first reports: forward, a
     * gate/up task waiting for its rows (role 1) or a down task waiting for its gate/up tasks
     * (role 2); backward, a task waiting for its dy rows (role 4) or for the SwiGLU backward of
     * its rows (role 5). */
    check_watchdog("forward", "role 1", "role 2");
    const char *why = NULL;
    if (mok_tile_supported(MOK_TILE_WGMMA, 64, 64, &why)) check_watchdog("backward", "role 4", "role 5");
}

TEST_SUITE(mok, TEST_CASE(test_mok_schedule), TEST_CASE(test_mok_histogram), TEST_CASE(test_mok_forward),
           TEST_CASE(test_mok_narrow_widths), TEST_CASE(test_mok_graph), TEST_CASE(test_mok_watchdog),
           TEST_CASE(test_mok_watchdog_child));
