/*
 * Tests of the CPU MoE block (src/cpu/moe.c): finite-difference gradient checks in double of the
 * whole block and of the router/gate path and the aux loss alone; a naive token-by-token reference
 * of the forward; routing edge cases (all tokens to one expert, k = num_experts, ties, the expert
 * bias steering selection but not gates); the dispatch order; float against double; every output
 * written; bitwise determinism across OpenMP thread counts; ep > 1 without an EP communicator refused.
 * Inputs come from a seeded RNG here, so every run sees the same numbers.
 */
#include <fcntl.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "cpu/moe.h"
#include "cpu/ops.h"

/* ---------- RNG (splitmix64) ---------- */
typedef struct {
    uint64_t s;
} Rng;

static uint64_t rng_next(Rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [-a, a) */
static double rng_sym(Rng *r, double a) { return a * (2.0 * ((double)(rng_next(r) >> 11) * 0x1.0p-53) - 1.0); }

/* ---------- a test case: dims, flat double parameters, inputs ---------- */
enum { T_ROUTER, T_GATE, T_UP, T_DOWN, T_SGATE, T_SUP, T_SDOWN, T_X, T_COUNT };
static const char *tensor_names[T_COUNT] = {"router", "w_gate", "w_up", "w_down",
                                            "shared_gate", "shared_up", "shared_down", "x"};
#define ALL_TENSORS ((1u << T_COUNT) - 1)
#define EXPERT_TENSORS ((1u << T_GATE) | (1u << T_UP) | (1u << T_DOWN) | (1u << T_SGATE) | (1u << T_SUP) | (1u << T_SDOWN))

typedef struct {
    MoeDims d;
    int N;
    long off[T_X + 1]; /* parameter layout: router, w_gate, w_up, w_down, shared_gate, shared_up, shared_down */
    double *p;         /* parameters (off[T_X] of them) */
    double *x;         /* (N, C) */
    double *R;         /* (N, C) random projection of y in the loss */
    float *bias;       /* (E) or NULL */
    double *y;
    MoeActs_f64 a;
} Case;

static MoeDims dims(int C, int E, int k, int I, int S, int sigmoid, int norm, double scaling) {
    MoeDims d = {.C = C, .E = E, .k = k, .I = I, .n_shared = S, .sigmoid = sigmoid, .norm_topk = norm,
                 .scaling = scaling, .ep = 1, .ep_rank = 0};
    return d;
}

static void layout(long off[T_X + 1], const MoeDims *d) {
    long C = d->C, E = d->E, I = d->I, SI = (long)d->n_shared * d->I;
    long sz[T_X] = {C * E, E * C * I, E * C * I, E * I * C, C * SI, C * SI, SI * C};
    off[0] = 0;
    for (int t = 0; t < T_X; t++) off[t + 1] = off[t] + sz[t];
}

static long tensor_size(const Case *t, int i) { return i == T_X ? (long)t->N * t->d.C : t->off[i + 1] - t->off[i]; }
static double *tensor_ptr(Case *t, double *params, double *x, int i) { return i == T_X ? x : params + t->off[i]; }

static MoeWeights_f64 view_f64(double *buf, const Case *t) {
    int sh = t->d.n_shared > 0;
    MoeWeights_f64 w = {buf + t->off[T_ROUTER], buf + t->off[T_GATE], buf + t->off[T_UP], buf + t->off[T_DOWN],
                        sh ? buf + t->off[T_SGATE] : NULL, sh ? buf + t->off[T_SUP] : NULL,
                        sh ? buf + t->off[T_SDOWN] : NULL};
    return w;
}

static MoeWeights view_f32(float *buf, const Case *t) {
    int sh = t->d.n_shared > 0;
    MoeWeights w = {buf + t->off[T_ROUTER], buf + t->off[T_GATE], buf + t->off[T_UP], buf + t->off[T_DOWN],
                    sh ? buf + t->off[T_SGATE] : NULL, sh ? buf + t->off[T_SUP] : NULL,
                    sh ? buf + t->off[T_SDOWN] : NULL};
    return w;
}

/* Random parameters and inputs; a random expert bias when with_bias. Scales keep logits O(1) so
 * that routing margins are not tiny. */
static void case_init(Case *t, MoeDims d, int N, uint64_t seed, int with_bias) {
    Rng r = {seed};
    memset(t, 0, sizeof *t);
    t->d = d;
    t->N = N;
    layout(t->off, &d);
    t->p = malloc((size_t)t->off[T_X] * sizeof(double));
    t->x = malloc((size_t)N * d.C * sizeof(double));
    t->R = malloc((size_t)N * d.C * sizeof(double));
    t->y = malloc((size_t)N * d.C * sizeof(double));
    for (long i = 0; i < t->off[T_GATE]; i++) t->p[i] = rng_sym(&r, 1.0);
    for (long i = t->off[T_GATE]; i < t->off[T_X]; i++) t->p[i] = rng_sym(&r, 0.6);
    for (long i = 0; i < (long)N * d.C; i++) t->x[i] = rng_sym(&r, 1.0);
    for (long i = 0; i < (long)N * d.C; i++) t->R[i] = rng_sym(&r, 1.0);
    if (with_bias) {
        t->bias = malloc((size_t)d.E * sizeof(float));
        for (int e = 0; e < d.E; e++) t->bias[e] = (float)rng_sym(&r, 0.3);
    }
    moe_acts_alloc_f64(&t->a, &t->d, N);
}

static void case_free(Case *t) {
    moe_acts_free_f64(&t->a);
    free(t->p);
    free(t->x);
    free(t->R);
    free(t->y);
    free(t->bias);
}

static void forward(Case *t) {
    MoeWeights_f64 w = view_f64(t->p, t);
    moe_forward_f64(t->y, &t->a, t->x, &w, t->bias, &t->d, t->N);
}

/* loss = wy * sum(y * R) + daux * aux_loss, summed in a fixed order. */
static double loss(Case *t, double wy, double daux) {
    forward(t);
    double s = 0;
    for (long i = 0; i < (long)t->N * t->d.C; i++) s += t->y[i] * t->R[i];
    return wy * s + daux * t->a.aux_loss;
}

/* ---------- naive reference: token by token, expert by expert ---------- */
static double silu(double v) { return v / (1.0 + exp(-v)); }

/* One SwiGLU of width W on one token: out[c] = sum_i silu(x.g_i) * (x.u_i) * down[i][c]. */
static void swiglu_token(double *out, const double *x, const double *g, const double *u, const double *down, int C,
                         int W) {
    for (int c = 0; c < C; c++) out[c] = 0;
    for (int i = 0; i < W; i++) {
        double a = 0, b = 0;
        for (int c = 0; c < C; c++) {
            a += x[c] * g[(long)c * W + i];
            b += x[c] * u[(long)c * W + i];
        }
        double h = silu(a) * b;
        for (int c = 0; c < C; c++) out[c] += h * down[(long)i * C + c];
    }
}

static void reference_forward(double *y, int *topk, double *gates, int *counts, double *aux, const Case *t) {
    const MoeDims *d = &t->d;
    const int C = d->C, E = d->E, k = d->k, I = d->I, SI = d->n_shared * d->I, N = t->N;
    const double *p = t->p;
    double *s = malloc((size_t)N * E * sizeof(double));
    double *out = malloc((size_t)C * sizeof(double));
    int *order = malloc((size_t)E * sizeof(int));
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int n = 0; n < N; n++) {
        const double *xn = t->x + (long)n * C;
        double *sn = s + (long)n * E, z = 0;
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int c = 0; c < C; c++) l += xn[c] * p[t->off[T_ROUTER] + (long)c * E + e];
            sn[e] = d->sigmoid ? 1.0 / (1.0 + exp(-l)) : exp(l);
            z += sn[e];
        }
        if (!d->sigmoid)
            for (int e = 0; e < E; e++) sn[e] /= z;
        /* insertion sort of ids by (score + bias) descending, id ascending */
        for (int e = 0; e < E; e++) {
            double v = sn[e] + (t->bias ? (double)t->bias[e] : 0.0);
            int pos = e;
            while (pos > 0) {
                int o = order[pos - 1];
                double vo = sn[o] + (t->bias ? (double)t->bias[o] : 0.0);
                if (vo > v || (vo == v && o < e)) break;
                order[pos] = o;
                pos--;
            }
            order[pos] = e;
        }
        double sel = 0;
        for (int j = 0; j < k; j++) sel += sn[order[j]];
        for (int c = 0; c < C; c++) y[(long)n * C + c] = 0;
        for (int j = 0; j < k; j++) {
            int e = order[j];
            double g = sn[e] * (d->norm_topk ? d->scaling / sel : d->scaling);
            topk[n * k + j] = e;
            gates[n * k + j] = g;
            counts[e]++;
            swiglu_token(out, xn, p + t->off[T_GATE] + (long)e * C * I, p + t->off[T_UP] + (long)e * C * I,
                         p + t->off[T_DOWN] + (long)e * I * C, C, I);
            for (int c = 0; c < C; c++) y[(long)n * C + c] += g * out[c];
        }
        if (SI > 0) {
            swiglu_token(out, xn, p + t->off[T_SGATE], p + t->off[T_SUP], p + t->off[T_SDOWN], C, SI);
            for (int c = 0; c < C; c++) y[(long)n * C + c] += out[c];
        }
    }
    /* Switch aux: E * sum_e f_e * P_e */
    double a = 0;
    for (int e = 0; e < E; e++) {
        double P = 0;
        for (int n = 0; n < N; n++) {
            double z = 0;
            for (int q = 0; q < E; q++) z += s[(long)n * E + q];
            P += s[(long)n * E + e] / z;
        }
        a += (double)counts[e] / ((double)N * k) * (P / N);
    }
    *aux = E * a;
    free(s);
    free(out);
    free(order);
}

/* Forward against the reference: y, topk, gates, counts, aux. */
static void check_against_reference(Case *t, const char *label) {
    const int N = t->N, k = t->d.k, E = t->d.E;
    double *yr = malloc((size_t)N * t->d.C * sizeof(double));
    double *gr = malloc((size_t)N * k * sizeof(double));
    int *tr = malloc((size_t)N * k * sizeof(int));
    int *cr = malloc((size_t)E * sizeof(int));
    double aux;
    reference_forward(yr, tr, gr, cr, &aux, t);
    forward(t);
    double err = rel_error(t->y, yr, (long)N * t->d.C);
    CHECK_MSG(err < 1e-12, "%s: y rel error %.3g vs the naive reference", label, err);
    for (int i = 0; i < N * k; i++) {
        CHECK_MSG(t->a.topk[i] == tr[i], "%s: topk[%d] = %d, reference %d", label, i, t->a.topk[i], tr[i]);
        CHECK_MSG(fabs(t->a.gates[i] - gr[i]) <= 1e-14 * (1 + fabs(gr[i])), "%s: gate[%d] = %.17g, reference %.17g",
                  label, i, t->a.gates[i], gr[i]);
    }
    for (int e = 0; e < E; e++) CHECK_MSG(t->a.counts[e] == cr[e], "%s: counts[%d] = %d, reference %d", label, e, t->a.counts[e], cr[e]);
    CHECK_MSG(fabs(t->a.aux_loss - aux) <= 1e-13 * fabs(aux), "%s: aux %.17g, reference %.17g", label, t->a.aux_loss, aux);
    free(yr);
    free(gr);
    free(tr);
    free(cr);
}

/* ---------- finite-difference gradient check ---------- */

/* Checks the gradients of the tensors in `check` against central differences of
 * loss = wy * sum(y*R) + daux * aux. Tensors in `zero` must have an exactly zero gradient.
 * A coordinate whose perturbation changes the top-k selection is skipped (the loss is not
 * differentiable across a flip); only a few may be. */
static void gradcheck(Case *t, double wy, double daux, unsigned check, unsigned zero, const char *label) {
    const int N = t->N, C = t->d.C, nk = N * t->d.k;
    const long np = t->off[T_X], nx = (long)N * C;
    const double h = 1e-6;
    /* Thousands of tiny forwards: one thread avoids OpenMP fork/join overhead on a busy machine
     * (thread counts are covered by test_deterministic_across_threads). */
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double *gp = calloc((size_t)np + 1, sizeof(double)), *gx = calloc((size_t)nx, sizeof(double));
    double *dy = malloc((size_t)nx * sizeof(double));
    int *topk0 = malloc((size_t)nk * sizeof(int));
    double L0 = loss(t, wy, daux);
    (void)L0;
    memcpy(topk0, t->a.topk, (size_t)nk * sizeof(int));
    for (long i = 0; i < nx; i++) dy[i] = wy * t->R[i];
    MoeWeights_f64 w = view_f64(t->p, t), dw = view_f64(gp, t);
    moe_backward_f64(gx, &dw, dy, daux, &t->a, t->x, &w, &t->d, N);

    long skipped = 0, total = 0;
    for (int ti = 0; ti < T_COUNT; ti++) {
        if (!((check | zero) >> ti & 1)) continue;
        long n = tensor_size(t, ti);
        if (n == 0) continue;
        double *v = tensor_ptr(t, t->p, t->x, ti), *g = tensor_ptr(t, gp, gx, ti);
        double *num = malloc((size_t)n * sizeof(double)), *ana = malloc((size_t)n * sizeof(double));
        long m = 0;
        for (long i = 0; i < n; i++) {
            double v0 = v[i];
            v[i] = v0 + h;
            double Lp = loss(t, wy, daux);
            int flip = memcmp(topk0, t->a.topk, (size_t)nk * sizeof(int)) != 0;
            v[i] = v0 - h;
            double Lm = loss(t, wy, daux);
            flip |= memcmp(topk0, t->a.topk, (size_t)nk * sizeof(int)) != 0;
            v[i] = v0;
            total++;
            if (flip) {
                skipped++;
                continue;
            }
            num[m] = (Lp - Lm) / (2 * h);
            ana[m] = g[i];
            m++;
        }
        double nn = 0, na = 0;
        for (long i = 0; i < m; i++) {
            nn += num[i] * num[i];
            na += ana[i] * ana[i];
        }
        if (zero >> ti & 1) {
            int nonzero = 0;
            for (long i = 0; i < n; i++) nonzero += g[i] != 0;
            CHECK_MSG(nonzero == 0, "%s: d%s should be exactly zero, %d entries are not", label, tensor_names[ti], nonzero);
            CHECK_MSG(sqrt(nn) < 1e-9, "%s: numeric d%s should be zero, norm %.3g", label, tensor_names[ti], sqrt(nn));
        } else {
            double err = rel_error(ana, num, m);
            CHECK_MSG(nn > 0 && na > 0, "%s: d%s is zero (analytic %.3g, numeric %.3g)", label, tensor_names[ti],
                      sqrt(na), sqrt(nn));
            CHECK_MSG(err < 1e-6, "%s: d%s rel error %.3g (|grad| %.3g)", label, tensor_names[ti], err, sqrt(nn));
        }
        free(num);
        free(ana);
    }
    CHECK_MSG(skipped <= 2 + total / 100, "%s: %ld of %ld coordinates flipped the top-k selection", label, skipped,
              total);
    forward(t); /* leave the acts consistent with the unperturbed inputs */
    omp_set_num_threads(saved_threads);
    free(gp);
    free(gx);
    free(dy);
    free(topk0);
}

static void gradcheck_case(MoeDims d, int N, uint64_t seed, int with_bias, const char *label) {
    Case t;
    case_init(&t, d, N, seed, with_bias);
    unsigned check = ALL_TENSORS;
    if (d.n_shared == 0) check &= ~((1u << T_SGATE) | (1u << T_SUP) | (1u << T_SDOWN));
    gradcheck(&t, 1.0, 0.7, check, 0, label);
    case_free(&t);
}

static void test_gradcheck_softmax(void) {
    gradcheck_case(dims(8, 5, 2, 5, 1, 0, 1, 2.5), 6, 11, 0, "softmax norm");
    gradcheck_case(dims(8, 5, 2, 5, 1, 0, 0, 2.5), 6, 12, 0, "softmax no-norm");
    gradcheck_case(dims(8, 4, 2, 5, 0, 0, 1, 1.5), 6, 13, 1, "softmax norm S=0 bias");
}

static void test_gradcheck_sigmoid(void) {
    gradcheck_case(dims(8, 6, 2, 5, 1, 1, 1, 2.5), 6, 21, 0, "sigmoid norm");
    gradcheck_case(dims(8, 6, 2, 5, 1, 1, 0, 2.5), 6, 22, 0, "sigmoid no-norm");
    gradcheck_case(dims(8, 4, 3, 5, 0, 1, 1, 0.5), 6, 23, 1, "sigmoid norm k=3 S=0 bias");
}

static void test_gradcheck_edge_shapes(void) {
    gradcheck_case(dims(8, 5, 1, 5, 1, 0, 1, 2.0), 6, 31, 0, "softmax norm k=1 (constant gate)");
    gradcheck_case(dims(8, 5, 1, 5, 1, 1, 0, 2.0), 6, 32, 0, "sigmoid no-norm k=1");
    gradcheck_case(dims(8, 4, 4, 5, 1, 0, 1, 2.0), 6, 33, 0, "softmax k=E");
    gradcheck_case(dims(8, 4, 4, 5, 0, 1, 1, 2.0), 6, 34, 0, "sigmoid k=E");
    /* all tokens to expert 2 (empty experts have zero-row ranges) */
    Case t;
    case_init(&t, dims(8, 5, 2, 5, 1, 0, 1, 2.0), 6, 35, 1);
    t.bias[2] = 100.0f;
    gradcheck(&t, 1.0, 0.7, ALL_TENSORS, 0, "all to expert 2");
    case_free(&t);
}

/* The router, top-k and gates alone: no aux term, so the router gradient flows only through the
 * gate values; only router and x are checked (the expert weights are held as constants). */
static void test_gradcheck_router_gates_path(void) {
    const int sig[2] = {0, 1}, norm[2] = {0, 1};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            char label[64];
            snprintf(label, sizeof label, "router path %s norm=%d", sig[a] ? "sigmoid" : "softmax", norm[b]);
            Case t;
            case_init(&t, dims(8, 5, 2, 5, 1, sig[a], norm[b], 1.7), 6, 40 + 2 * a + b, 1);
            gradcheck(&t, 1.0, 0.0, (1u << T_ROUTER) | (1u << T_X), 0, label);
            case_free(&t);
        }
}

/* The aux loss alone: y does not enter the loss, so every expert gradient is exactly zero and the
 * router and x gradients come only from P. */
static void test_gradcheck_aux_loss_alone(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(8, 5, 2, 5, 1, sig, 1, 2.0), 6, 50 + sig, 0);
        gradcheck(&t, 0.0, 1.3, (1u << T_ROUTER) | (1u << T_X), EXPERT_TENSORS,
                  sig ? "aux alone sigmoid" : "aux alone softmax");
        case_free(&t);
    }
}

/* ---------- forward against the reference, routing edge cases ---------- */

static void test_forward_matches_reference(void) {
    for (int sig = 0; sig < 2; sig++)
        for (int norm = 0; norm < 2; norm++)
            for (int S = 0; S < 3; S++) {
                char label[64];
                snprintf(label, sizeof label, "sigmoid=%d norm=%d S=%d", sig, norm, S);
                Case t;
                case_init(&t, dims(8, 6, 2, 5, S, sig, norm, 2.5), 7, 60 + 6 * sig + 3 * norm + S, S == 1);
                check_against_reference(&t, label);
                case_free(&t);
            }
}

static void test_all_tokens_to_one_expert(void) {
    /* by a huge bias, k = 1 and k = 2 */
    for (int k = 1; k <= 2; k++) {
        Case t;
        case_init(&t, dims(8, 4, k, 5, 1, 0, 1, 2.0), 6, 70 + k, 1);
        t.bias[2] = 1000.0f;
        check_against_reference(&t, k == 1 ? "bias k=1" : "bias k=2");
        CHECK_EQ_INT(t.a.counts[2], k == 1 ? t.N * k : t.N);
        for (int n = 0; n < t.N; n++) CHECK_EQ_INT(t.a.topk[n * k], 2);
        if (k == 1)
            for (int n = 0; n < t.N; n++) CHECK_NEAR(t.a.gates[n], 2.0, 1e-15); /* renormalised over one */
        CHECK_EQ_INT(t.a.expert_offset[2], 0 + t.a.counts[0] + t.a.counts[1]);
        case_free(&t);
    }
    /* by a dominant router column: x[:, 0] > 1 and router[0, 3] = 40 */
    Case t;
    case_init(&t, dims(8, 4, 1, 5, 0, 0, 0, 1.0), 6, 73, 0);
    for (int n = 0; n < t.N; n++) t.x[(long)n * 8] = 1.0 + fabs(t.x[(long)n * 8]);
    t.p[t.off[T_ROUTER] + 3] = 40.0;
    check_against_reference(&t, "dominant router column");
    CHECK_EQ_INT(t.a.counts[3], t.N);
    for (int e = 0; e < 4; e++)
        if (e != 3) CHECK_EQ_INT(t.a.counts[e], 0);
    CHECK_EQ_INT(t.a.expert_offset[3], 0);
    CHECK_EQ_INT(t.a.expert_offset[4], t.N);
    case_free(&t);
}

static void test_k_equals_num_experts(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(8, 5, 5, 4, 1, sig, 1, 1.5), 6, 80 + sig, 1);
        check_against_reference(&t, sig ? "k=E sigmoid" : "k=E softmax");
        for (int e = 0; e < 5; e++) CHECK_EQ_INT(t.a.counts[e], t.N);
        /* every expert selected, gates = scores normalised over all experts, times scaling */
        for (int n = 0; n < t.N; n++) {
            const double *s = t.a.scores + (long)n * 5;
            double z = 0;
            for (int e = 0; e < 5; e++) z += s[e];
            int seen = 0;
            for (int j = 0; j < 5; j++) {
                int e = t.a.topk[n * 5 + j];
                seen |= 1 << e;
                CHECK_NEAR(t.a.gates[n * 5 + j], 1.5 * s[e] / z, 1e-15);
            }
            CHECK_EQ_INT(seen, 31);
        }
        /* f_e = 1/E for every e, and P sums to 1: aux = 1 exactly up to rounding */
        CHECK_NEAR(t.a.aux_loss, 1.0, 1e-14);
        case_free(&t);
    }
}

/* Identical router columns give identical logits: selection is the lowest ids; a bias that breaks
 * the tie steers it; a tie in the bias goes to the lower id again. */
static void test_ties(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(8, 5, 2, 5, 0, sig, 1, 2.0), 6, 90 + sig, 1);
        for (int c = 0; c < 8; c++)
            for (int e = 1; e < 5; e++) t.p[t.off[T_ROUTER] + c * 5 + e] = t.p[t.off[T_ROUTER] + c * 5];
        const float biases[4][5] = {{0, 0, 0, 0, 0}, {0, 0.1f, 0, 0.2f, 0}, {0, 0.2f, 0.2f, 0, 0}, {0, 0, 0.2f, 0, 0.2f}};
        const int want[4][2] = {{0, 1}, {3, 1}, {1, 2}, {2, 4}};
        for (int b = 0; b < 4; b++) {
            memcpy(t.bias, biases[b], sizeof biases[b]);
            forward(&t);
            for (int n = 0; n < t.N; n++) {
                const double *l = t.a.logits + n * 5;
                for (int e = 1; e < 5; e++) CHECK_MSG(l[e] == l[0], "precondition: logits tie (token %d)", n);
                CHECK_MSG(t.a.topk[2 * n] == want[b][0] && t.a.topk[2 * n + 1] == want[b][1],
                          "sigmoid=%d bias set %d token %d: selected (%d, %d), want (%d, %d)", sig, b, n,
                          t.a.topk[2 * n], t.a.topk[2 * n + 1], want[b][0], want[b][1]);
                /* equal scores: each gate is scaling / k whatever the bias */
                CHECK_NEAR(t.a.gates[2 * n], 1.0, 1e-15);
                CHECK_NEAR(t.a.gates[2 * n + 1], 1.0, 1e-15);
            }
            check_against_reference(&t, "ties");
        }
        case_free(&t);
    }
    /* k = 3 with the bias tie between 2 and 4: then the lowest remaining id */
    Case t;
    case_init(&t, dims(8, 5, 3, 5, 0, 0, 1, 1.0), 4, 92, 1);
    for (int c = 0; c < 8; c++)
        for (int e = 1; e < 5; e++) t.p[t.off[T_ROUTER] + c * 5 + e] = t.p[t.off[T_ROUTER] + c * 5];
    const float bias[5] = {0, 0, 0.2f, 0, 0.2f};
    memcpy(t.bias, bias, sizeof bias);
    forward(&t);
    for (int n = 0; n < t.N; n++) {
        CHECK_EQ_INT(t.a.topk[3 * n], 2);
        CHECK_EQ_INT(t.a.topk[3 * n + 1], 4);
        CHECK_EQ_INT(t.a.topk[3 * n + 2], 0);
    }
    case_free(&t);
}

/* The bias moves selection, never the gate values. */
static void test_bias_steers_selection_not_gates(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(8, 6, 2, 5, 1, sig, 1, 2.5), 8, 100 + sig, 1);
        const int nk = t.N * 2;
        memset(t.bias, 0, 6 * sizeof(float));
        forward(&t);
        int *tk0 = malloc((size_t)nk * sizeof(int));
        double *g0 = malloc((size_t)nk * sizeof(double));
        memcpy(tk0, t.a.topk, (size_t)nk * sizeof(int));
        memcpy(g0, t.a.gates, (size_t)nk * sizeof(double));
        /* the same bias on every expert changes nothing */
        for (int e = 0; e < 6; e++) t.bias[e] = 0.3f;
        forward(&t);
        CHECK(memcmp(tk0, t.a.topk, (size_t)nk * sizeof(int)) == 0);
        CHECK(memcmp(g0, t.a.gates, (size_t)nk * sizeof(double)) == 0);
        /* a large bias on the expert least often chosen: it is now picked first by every token,
         * and the gates are its unbiased score, normalised */
        int least = 0, cnt[6] = {0};
        for (int i = 0; i < nk; i++) cnt[tk0[i]]++;
        for (int e = 1; e < 6; e++)
            if (cnt[e] < cnt[least]) least = e;
        for (int e = 0; e < 6; e++) t.bias[e] = e == least ? 5.0f : 0.0f;
        check_against_reference(&t, "biased");
        CHECK(memcmp(tk0, t.a.topk, (size_t)nk * sizeof(int)) != 0);
        for (int n = 0; n < t.N; n++) {
            const double *s = t.a.scores + n * 6;
            int e0 = t.a.topk[2 * n], e1 = t.a.topk[2 * n + 1];
            CHECK_EQ_INT(e0, least);
            CHECK_NEAR(t.a.gates[2 * n], 2.5 * s[e0] / (s[e0] + s[e1]), 1e-15);
            CHECK_NEAR(t.a.gates[2 * n + 1], 2.5 * s[e1] / (s[e0] + s[e1]), 1e-15);
            CHECK_NEAR(t.a.gates[2 * n] + t.a.gates[2 * n + 1], 2.5, 1e-14); /* the bias is not in them */
        }
        free(tk0);
        free(g0);
        case_free(&t);
    }
}

/* A forced selection (`mokc check`'s: the GPU's choices): the router's own changes nothing, bit for bit, and counts
 * no difference; a token's last choice swapped for its next-best expert counts one, with that expert's shortfall
 * below the last own choice as the gap, and the gates follow the forced experts' scores; a row with an expert id out
 * of range or repeated is refused (the token keeps its own selection; an infinite gap). */
static void test_forced_selection(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(8, 7, 3, 5, 1, sig, 1, 1.5), 9, 300 + sig, 1);
        const int k = 3, E = 7, nk = t.N * k;
        forward(&t);
        int *own = malloc((size_t)nk * sizeof(int));
        double *y0 = malloc((size_t)t.N * 8 * sizeof(double));
        memcpy(own, t.a.topk, (size_t)nk * sizeof(int));
        memcpy(y0, t.y, (size_t)t.N * 8 * sizeof(double));
        t.a.forced_topk = own;
        forward(&t);
        CHECK(memcmp(t.y, y0, (size_t)t.N * 8 * sizeof(double)) == 0);
        CHECK(t.a.forced_differ == 0 && t.a.forced_gap == 0);
        /* token 4's last choice: the best expert the router left out */
        int *forced = malloc((size_t)nk * sizeof(int));
        memcpy(forced, own, (size_t)nk * sizeof(int));
        const int n = 4;
        const double *sc = t.a.scores + (size_t)n * E;
        int next = -1;
        for (int e = 0; e < E; e++) {
            int chosen = 0;
            for (int j = 0; j < k; j++) chosen |= own[n * k + j] == e;
            if (!chosen && (next < 0 || sc[e] + t.bias[e] > sc[next] + t.bias[next])) next = e;
        }
        const int last = own[n * k + k - 1];
        const double v_last = sc[last] + t.bias[last], v_next = sc[next] + t.bias[next];
        forced[n * k + k - 1] = next;
        t.a.forced_topk = forced;
        forward(&t);
        CHECK_EQ_INT(t.a.forced_differ, 1);
        CHECK_NEAR(t.a.forced_gap, (v_last - v_next) / fabs(v_last), 1e-12);
        CHECK(memcmp(t.a.topk, forced, (size_t)nk * sizeof(int)) == 0);
        double sum = 0;
        for (int j = 0; j < k; j++) sum += sc[forced[n * k + j]];
        for (int j = 0; j < k; j++) CHECK_NEAR(t.a.gates[n * k + j], 1.5 * sc[forced[n * k + j]] / sum, 1e-15);
        CHECK(memcmp(t.y + n * 8, y0 + n * 8, 8 * sizeof(double)) != 0); /* token 4 moved, the others did not */
        CHECK(memcmp(t.y, y0, (size_t)n * 8 * sizeof(double)) == 0);
        CHECK(memcmp(t.y + (n + 1) * 8, y0 + (n + 1) * 8, (size_t)(t.N - n - 1) * 8 * sizeof(double)) == 0);
        /* a row naming no expert, or one expert twice, is no selection: its token keeps its own, all k count */
        for (int bad = 0; bad < 2; bad++) {
            memcpy(forced, own, (size_t)nk * sizeof(int));
            forced[2 * k + 1] = bad ? forced[2 * k] : E;
            t.a.forced_topk = forced;
            forward(&t);
            CHECK_EQ_INT(t.a.forced_differ, k);
            CHECK(isinf(t.a.forced_gap));
            CHECK(memcmp(t.a.topk, own, (size_t)nk * sizeof(int)) == 0);
            CHECK(memcmp(t.y, y0, (size_t)t.N * 8 * sizeof(double)) == 0);
        }
        free(own), free(forced), free(y0);
        case_free(&t);
    }
}

/* Rows grouped by expert in (token, j) order; slot_row and row_slot inverse; xe rows are x rows. */
static void test_dispatch_order(void) {
    Case t;
    case_init(&t, dims(8, 6, 3, 5, 0, 0, 1, 1.0), 9, 110, 1);
    forward(&t);
    const MoeActs_f64 *a = &t.a;
    CHECK_EQ_INT(a->expert_offset[0], 0);
    CHECK_EQ_INT(a->expert_offset[6], t.N * 3);
    for (int e = 0; e < 6; e++) {
        CHECK_EQ_INT(a->expert_offset[e + 1] - a->expert_offset[e], a->counts[e]);
        for (int r = a->expert_offset[e]; r < a->expert_offset[e + 1]; r++) {
            CHECK_EQ_INT(a->topk[a->row_slot[r]], e);
            if (r > a->expert_offset[e]) CHECK(a->row_slot[r] > a->row_slot[r - 1]);
            CHECK_EQ_INT(a->slot_row[a->row_slot[r]], r);
            CHECK(memcmp(a->xe + (long)r * 8, t.x + (long)(a->row_slot[r] / 3) * 8, 8 * sizeof(double)) == 0);
        }
    }
    case_free(&t);
}

/* ---------- float vs double, coverage, determinism, ep ---------- */

typedef struct {
    float *p, *x, *dy, *y, *gp, *gx;
    MoeActs a;
} F32Run;

static void run_f32(F32Run *f, const Case *t, const double *dy, double daux) {
    const long np = t->off[T_X], nx = (long)t->N * t->d.C;
    f->p = malloc((size_t)np * sizeof(float));
    f->x = malloc((size_t)nx * sizeof(float));
    f->dy = malloc((size_t)nx * sizeof(float));
    f->y = malloc((size_t)nx * sizeof(float));
    f->gp = calloc((size_t)np + 1, sizeof(float));
    f->gx = calloc((size_t)nx, sizeof(float));
    for (long i = 0; i < np; i++) f->p[i] = (float)t->p[i];
    for (long i = 0; i < nx; i++) {
        f->x[i] = (float)t->x[i];
        f->dy[i] = (float)dy[i];
        f->y[i] = NAN;
    }
    moe_acts_alloc(&f->a, &t->d, t->N);
    MoeWeights w = view_f32(f->p, t), dw = view_f32(f->gp, t);
    moe_forward(f->y, &f->a, f->x, &w, t->bias, &t->d, t->N);
    moe_backward(f->gx, &dw, f->dy, daux, &f->a, f->x, &w, &t->d, t->N);
}

static void free_f32(F32Run *f) {
    moe_acts_free(&f->a);
    free(f->p);
    free(f->x);
    free(f->dy);
    free(f->y);
    free(f->gp);
    free(f->gx);
}

static double rel_error_f32(const float *a, const double *b, long n) {
    double *ad = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++) ad[i] = a[i];
    double e = rel_error(ad, b, n);
    free(ad);
    return e;
}

static void test_float_matches_double(void) {
    for (int sig = 0; sig < 2; sig++) {
        Case t;
        case_init(&t, dims(16, 6, 2, 8, 1, sig, 1, 2.5), 12, 120 + sig, 1);
        const long np = t.off[T_X], nx = (long)t.N * t.d.C;
        double *gp = calloc((size_t)np, sizeof(double)), *gx = calloc((size_t)nx, sizeof(double));
        forward(&t);
        MoeWeights_f64 w = view_f64(t.p, &t), dw = view_f64(gp, &t);
        moe_backward_f64(gx, &dw, t.R, 0.7, &t.a, t.x, &w, &t.d, t.N);
        F32Run f;
        run_f32(&f, &t, t.R, 0.7);
        CHECK(memcmp(f.a.topk, t.a.topk, (size_t)t.N * 2 * sizeof(int)) == 0);
        double e = rel_error_f32(f.y, t.y, nx);
        CHECK_MSG(e < 1e-5, "sigmoid=%d: y float vs double %.3g", sig, e);
        CHECK_NEAR(f.a.aux_loss, t.a.aux_loss, 1e-5 * t.a.aux_loss);
        e = rel_error_f32(f.gx, gx, nx);
        CHECK_MSG(e < 1e-5, "sigmoid=%d: dx float vs double %.3g", sig, e);
        for (int ti = 0; ti < T_X; ti++) {
            long n = t.off[ti + 1] - t.off[ti];
            e = rel_error_f32(f.gp + t.off[ti], gp + t.off[ti], n);
            CHECK_MSG(e < 1e-5, "sigmoid=%d: d%s float vs double %.3g", sig, tensor_names[ti], e);
        }
        free_f32(&f);
        free(gp);
        free(gx);
        case_free(&t);
    }
}

/* y pre-filled with NaN comes out finite, with and without shared experts, and with fewer tokens
 * than the activations hold. */
static void test_every_output_written(void) {
    for (int S = 0; S < 2; S++) {
        Case t;
        case_init(&t, dims(8, 5, 2, 5, S, 0, 1, 1.0), 7, 130 + S, 1);
        for (long i = 0; i < 7L * 8; i++) t.y[i] = NAN;
        MoeWeights_f64 w = view_f64(t.p, &t);
        moe_forward_f64(t.y, &t.a, t.x, &w, t.bias, &t.d, 5); /* 5 of 7 tokens */
        int bad = 0;
        for (long i = 0; i < 5L * 8; i++) bad += !isfinite(t.y[i]);
        CHECK_MSG(bad == 0, "S=%d: %d of %d outputs not written (double)", S, bad, 5 * 8);
        for (long i = 5L * 8; i < 7L * 8; i++) CHECK(isnan(t.y[i])); /* and nothing past N */
        F32Run f;
        run_f32(&f, &t, t.R, 0.5); /* run_f32 pre-fills y with NaN */
        bad = 0;
        for (long i = 0; i < 7L * 8; i++) bad += !isfinite(f.y[i]) + !isfinite(f.gx[i]);
        CHECK_MSG(bad == 0, "S=%d: %d outputs not written or not finite (float)", S, bad);
        free_f32(&f);
        case_free(&t);
    }
}

static void test_deterministic_across_threads(void) {
    Case t;
    case_init(&t, dims(48, 8, 3, 24, 1, 0, 1, 2.5), 96, 140, 1);
    const long np = t.off[T_X], nx = (long)t.N * t.d.C;
    int saved = omp_get_max_threads();
    F32Run r[3];
    const int threads[3] = {1, 2, 2};
    for (int i = 0; i < 3; i++) {
        omp_set_num_threads(threads[i]);
        run_f32(&r[i], &t, t.R, 0.7);
    }
    omp_set_num_threads(saved);
    for (int i = 1; i < 3; i++) {
        CHECK_MSG(memcmp(r[0].y, r[i].y, (size_t)nx * sizeof(float)) == 0, "y differs: 1 vs %d threads", threads[i]);
        CHECK_MSG(memcmp(r[0].gx, r[i].gx, (size_t)nx * sizeof(float)) == 0, "dx differs: 1 vs %d threads", threads[i]);
        CHECK_MSG(memcmp(r[0].gp, r[i].gp, (size_t)np * sizeof(float)) == 0, "dW differs: 1 vs %d threads", threads[i]);
        CHECK(memcmp(r[0].a.gates, r[i].a.gates, (size_t)t.N * 3 * sizeof(float)) == 0);
        CHECK(memcmp(r[0].a.counts, r[i].a.counts, 8 * sizeof(int)) == 0);
        CHECK(r[0].a.aux_loss == r[i].a.aux_loss);
    }
    for (int i = 0; i < 3; i++) free_f32(&r[i]);
    case_free(&t);
}

/* The backward ADDS into dx and dw (gradient accumulation over micro-steps, a tensor used twice):
 * from a random pre-fill it must land on pre-fill + the gradient computed from zeros. */
static void test_backward_accumulates(void) {
    Case t;
    case_init(&t, dims(8, 5, 2, 5, 1, 1, 1, 2.0), 6, 145, 1);
    const long np = t.off[T_X], nx = (long)t.N * t.d.C;
    double *g0 = calloc((size_t)(np + nx), sizeof(double)), *g1 = malloc((size_t)(np + nx) * sizeof(double));
    double *fill = malloc((size_t)(np + nx) * sizeof(double));
    Rng r = {146};
    for (long i = 0; i < np + nx; i++) g1[i] = fill[i] = rng_sym(&r, 1.0);
    forward(&t);
    MoeWeights_f64 w = view_f64(t.p, &t), dw0 = view_f64(g0, &t), dw1 = view_f64(g1, &t);
    moe_backward_f64(g0 + np, &dw0, t.R, 0.7, &t.a, t.x, &w, &t.d, t.N);
    moe_backward_f64(g1 + np, &dw1, t.R, 0.7, &t.a, t.x, &w, &t.d, t.N);
    for (int ti = 0; ti < T_COUNT; ti++) {
        long o = ti == T_X ? np : t.off[ti], n = tensor_size(&t, ti);
        double worst = 0;
        for (long i = o; i < o + n; i++) worst = fmax(worst, fabs(g1[i] - (fill[i] + g0[i])));
        CHECK_MSG(worst < 1e-14, "d%s does not accumulate (max diff %.3g)", tensor_names[ti], worst);
    }
    free(g0);
    free(g1);
    free(fill);
    case_free(&t);
}

/* Runs the block in a child process set up by `mode` and returns what it wrote on stderr (static
 * buffer); *status gets the wait status. Modes: 0 forward with ep = 2, 1 backward with ep = 2,
 * 2 forward with a NaN in the router. */
static const char *run_child(Case *t, int mode, int *status) {
    static char buf[2048];
    char path[4300];
    snprintf(path, sizeof path, "%s/stderr.txt", test_tmpdir());
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        /* The parent's OpenMP pool does not survive fork: one thread, and a deadline so a block
         * that wrongly runs on cannot hang the suite. */
        omp_set_num_threads(1);
        alarm(20);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(99);
        MoeWeights_f64 w = view_f64(t->p, t);
        if (mode == 1) {
            t->d.ep = 2;
            double *g = calloc((size_t)t->off[T_X] + (size_t)t->N * t->d.C, sizeof(double));
            MoeWeights_f64 dw = view_f64(g, t);
            moe_backward_f64(g + t->off[T_X], &dw, t->R, 0.0, &t->a, t->x, &w, &t->d, t->N);
        } else {
            if (mode == 0) t->d.ep = 2;
            if (mode == 2) t->p[t->off[T_ROUTER] + 1] = NAN;
            moe_forward_f64(t->y, &t->a, t->x, &w, NULL, &t->d, t->N);
        }
        _exit(0);
    }
    *status = -1;
    buf[0] = 0;
    if (pid < 0 || waitpid(pid, status, 0) != pid) return buf;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static int died_with_error(int status) { return WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 99; }

/* ep > 1 without an EP communicator of that size stops with a message, not a wrong exchange. */
static void test_ep_without_communicator_refused(void) {
    for (int bwd = 0; bwd < 2; bwd++) {
        Case t;
        case_init(&t, dims(8, 4, 2, 5, 0, 0, 1, 1.0), 4, 150, 0);
        if (bwd) forward(&t);
        int status;
        const char *err = run_child(&t, bwd, &status);
        CHECK_MSG(died_with_error(status), "ep = 2 should exit non-zero with a message (status %d)", status);
        CHECK_STR_CONTAINS(err, "ep = 2");
        CHECK_STR_CONTAINS(err, "EP communicator has 1 rank");
        case_free(&t);
    }
}

/* A NaN router cannot select experts: a clear error, not an out-of-bounds index. */
static void test_nan_router_refused(void) {
    Case t;
    case_init(&t, dims(8, 4, 2, 5, 0, 0, 1, 1.0), 4, 151, 0);
    int status;
    const char *err = run_child(&t, 2, &status);
    CHECK_MSG(died_with_error(status), "a NaN router should exit non-zero with a message (status %d)", status);
    CHECK_STR_CONTAINS(err, "non-finite router scores");
    case_free(&t);
}

TEST_SUITE(moe,
           TEST_CASE(test_forward_matches_reference),
           TEST_CASE(test_gradcheck_softmax),
           TEST_CASE(test_gradcheck_sigmoid),
           TEST_CASE(test_gradcheck_edge_shapes),
           TEST_CASE(test_gradcheck_router_gates_path),
           TEST_CASE(test_gradcheck_aux_loss_alone),
           TEST_CASE(test_all_tokens_to_one_expert),
           TEST_CASE(test_k_equals_num_experts),
           TEST_CASE(test_ties),
           TEST_CASE(test_bias_steers_selection_not_gates), TEST_CASE(test_forced_selection),
           TEST_CASE(test_dispatch_order),
           TEST_CASE(test_float_matches_double),
           TEST_CASE(test_every_output_written),
           TEST_CASE(test_deterministic_across_threads),
           TEST_CASE(test_backward_accumulates),
           TEST_CASE(test_ep_without_communicator_refused),
           TEST_CASE(test_nan_router_refused));
