/*
 * Tests of the dense CPU ops (src/cpu/ops.c). Forwards are compared with naive re-implementations
 * written here, backwards with central finite differences of the double build on a random
 * projection loss L = sum(out * R); gradients are checked as increments over randomly pre-filled
 * buffers, which also tests that backwards ADD. Plus: float agrees with double, every output
 * element is written, attention is causal, and results are bitwise identical for 1 and 3 threads.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/ops.h"
#include "test.h"

/* ---------- random inputs (splitmix64), helpers ---------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static void rng_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static double rnd(void) { return (double)(rng_next() >> 11) * 0x1.0p-52 - 1.0; }

static double *rand_vec(long n) {
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (long i = 0; i < n; i++) x[i] = rnd();
    return x;
}

static double *copy_vec(const double *x, long n) {
    double *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    memcpy(y, x, (size_t)n * sizeof(double));
    return y;
}

static float *to_f32(const double *x, long n) {
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

/* Rounds x to float precision in place, so that float and double runs see the same inputs. */
static void round_to_f32(double *x, long n) {
    for (long i = 0; i < n; i++) x[i] = (float)x[i];
}

static double dot(const double *a, const double *b, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double norm(const double *a, long n) { return sqrt(dot(a, a, n)); }

/* ||f - d|| / ||d|| with f from the float build. */
static double rel_error_f32(const float *f, const double *d, long n) {
    double *fd = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (long i = 0; i < n; i++) fd[i] = f[i];
    double e = rel_error(fd, d, n);
    free(fd);
    return e;
}

static void fill_nan_f64(double *x, long n) {
    for (long i = 0; i < n; i++) x[i] = NAN;
}
static void fill_nan_f32(float *x, long n) {
    for (long i = 0; i < n; i++) x[i] = NAN;
}
static long count_nan_f64(const double *x, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += isnan(x[i]) != 0;
    return c;
}
static long count_nan_f32(const float *x, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += isnan(x[i]) != 0;
    return c;
}

/* ---------- finite differences ---------- */
typedef double (*LossFn)(void *ctx);

#define GRAD_TOL 1e-6
#define F32_TOL 1e-5

/* Compares `after - before` (the analytic gradient added by a backward into a buffer that held
 * `before`) with central differences of f with respect to x[0..n). */
static void grad_check(const char *what, LossFn f, void *ctx, double *x, long n, const double *after,
                       const double *before) {
    const double h = 1e-5;
    double *numeric = malloc((size_t)n * sizeof(double)), *analytic = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double lp = f(ctx);
        x[i] = saved - h;
        double lm = f(ctx);
        x[i] = saved;
        numeric[i] = (lp - lm) / (2 * h);
        analytic[i] = after[i] - before[i];
    }
    double err = rel_error(analytic, numeric, n);
    CHECK_MSG(norm(numeric, n) > 1e-3, "%s: numeric gradient is ~0 (%g); the check would be vacuous", what,
              norm(numeric, n));
    CHECK_MSG(err < GRAD_TOL, "%s: relative error %.3g vs finite differences (n=%ld)", what, err, n);
    free(numeric);
    free(analytic);
}

/* ---------- matmul ---------- */
enum { MM_NN, MM_NT, MM_TN };
static const char *mm_name[] = {"nn", "nt", "tn"};

/* Operand sizes for each variant: A, B, C element counts. */
static void mm_sizes(int kind, int M, int K, int N, long *na, long *nb, long *nc) {
    *na = (long)M * K;
    *nb = kind == MM_TN ? (long)M * N : (long)K * N;
    *nc = kind == MM_TN ? (long)K * N : (long)M * N;
}

static void mm_f64(int kind, double *C, const double *A, const double *B, int M, int K, int N, int acc) {
    if (kind == MM_NN) matmul_nn_f64(C, A, B, M, K, N, acc);
    else if (kind == MM_NT) matmul_nt_f64(C, A, B, M, K, N, acc);
    else matmul_tn_f64(C, A, B, M, K, N, acc);
}

static void mm_f32(int kind, float *C, const float *A, const float *B, int M, int K, int N, int acc) {
    if (kind == MM_NN) matmul_nn(C, A, B, M, K, N, acc);
    else if (kind == MM_NT) matmul_nt(C, A, B, M, K, N, acc);
    else matmul_tn(C, A, B, M, K, N, acc);
}

/* Naive reference with the documented layouts: nn A[M,K] B[K,N]; nt A[M,K] B[N,K]; tn A[M,K] B[M,N]. */
static void mm_naive(int kind, double *C, const double *A, const double *B, int M, int K, int N) {
    if (kind == MM_TN) {
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int m = 0; m < M; m++) s += A[(long)m * K + k] * B[(long)m * N + j];
                C[(long)k * N + j] = s;
            }
        return;
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += A[(long)i * K + k] * (kind == MM_NN ? B[(long)k * N + j] : B[(long)j * K + k]);
            C[(long)i * N + j] = s;
        }
}

static void test_matmul_matches_naive(void) {
    /* Shapes cross the kernel's tile edges (rows 4, columns 16/32, row blocks 64, k blocks 256). */
    const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {37, 300, 45}, {70, 17, 33}, {4, 256, 32}, {65, 513, 16}};
    rng_seed(1);
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            long na, nb, nc;
            mm_sizes(kind, M, K, N, &na, &nb, &nc);
            double *A = rand_vec(na), *B = rand_vec(nb), *C = malloc(nc * sizeof(double)),
                   *ref = malloc(nc * sizeof(double));
            round_to_f32(A, na);
            round_to_f32(B, nb);
            mm_naive(kind, ref, A, B, M, K, N);
            fill_nan_f64(C, nc);
            mm_f64(kind, C, A, B, M, K, N, 0);
            double err = rel_error(C, ref, nc);
            CHECK_MSG(err < 1e-13, "matmul_%s_f64 %dx%dx%d: relative error %.3g vs naive", mm_name[kind], M, K, N, err);
            float *Af = to_f32(A, na), *Bf = to_f32(B, nb), *Cf = malloc(nc * sizeof(float));
            fill_nan_f32(Cf, nc);
            mm_f32(kind, Cf, Af, Bf, M, K, N, 0);
            err = rel_error_f32(Cf, ref, nc);
            CHECK_MSG(err < F32_TOL, "matmul_%s (float) %dx%dx%d: relative error %.3g vs double", mm_name[kind], M, K,
                      N, err);
            free(A), free(B), free(C), free(ref), free(Af), free(Bf), free(Cf);
        }
}

static void test_matmul_accumulate(void) {
    rng_seed(2);
    int M = 13, K = 270, N = 40;
    for (int kind = 0; kind < 3; kind++) {
        long na, nb, nc;
        mm_sizes(kind, M, K, N, &na, &nb, &nc);
        double *A = rand_vec(na), *B = rand_vec(nb), *C0 = rand_vec(nc), *C = copy_vec(C0, nc),
               *P = malloc(nc * sizeof(double));
        mm_f64(kind, P, A, B, M, K, N, 0);
        mm_f64(kind, C, A, B, M, K, N, 1);
        for (long i = 0; i < nc; i++) P[i] += C0[i];
        double err = rel_error(C, P, nc);
        CHECK_MSG(err < 1e-13, "matmul_%s accumulate=1 is not C + A@B: relative error %.3g", mm_name[kind], err);
        /* accumulate = 0 overwrites whatever was there */
        memcpy(C, C0, nc * sizeof(double));
        mm_f64(kind, C, A, B, M, K, N, 0);
        for (long i = 0; i < nc; i++) P[i] -= C0[i];
        CHECK_MSG(rel_error(C, P, nc) < 1e-13, "matmul_%s accumulate=0 does not overwrite C", mm_name[kind]);
        free(A), free(B), free(C0), free(C), free(P);
    }
    /* K = 0: the product is empty, so C = 0 (or unchanged when accumulating). */
    double C[6] = {1, 2, 3, 4, 5, 6}, dummy = 0;
    matmul_nn_f64(C, &dummy, &dummy, 2, 0, 3, 1);
    CHECK(C[0] == 1 && C[5] == 6);
    matmul_nn_f64(C, &dummy, &dummy, 2, 0, 3, 0);
    CHECK(C[0] == 0 && C[5] == 0);
}

typedef struct {
    int kind, M, K, N;
    double *A, *B, *C, *R;
} MatmulCtx;

static double matmul_loss(void *p) {
    MatmulCtx *c = p;
    mm_f64(c->kind, c->C, c->A, c->B, c->M, c->K, c->N, 0);
    long na, nb, nc;
    mm_sizes(c->kind, c->M, c->K, c->N, &na, &nb, &nc);
    return dot(c->C, c->R, nc);
}

static void test_matmul_grad(void) {
    /* Each variant is the forward in turn; its backward uses the other two (with accumulate = 1). */
    rng_seed(3);
    int M = 9, K = 6, N = 35;
    for (int kind = 0; kind < 3; kind++) {
        long na, nb, nc;
        mm_sizes(kind, M, K, N, &na, &nb, &nc);
        MatmulCtx c = {kind, M, K, N, rand_vec(na), rand_vec(nb), malloc(nc * sizeof(double)), rand_vec(nc)};
        double *dA0 = rand_vec(na), *dB0 = rand_vec(nb);
        double *dA = copy_vec(dA0, na), *dB = copy_vec(dB0, nb);
        if (kind == MM_NN) { /* C = A B */
            matmul_nt_f64(dA, c.R, c.B, M, N, K, 1);
            matmul_tn_f64(dB, c.A, c.R, M, K, N, 1);
        } else if (kind == MM_NT) { /* C = A B^T */
            matmul_nn_f64(dA, c.R, c.B, M, N, K, 1);
            matmul_tn_f64(dB, c.R, c.A, M, N, K, 1);
        } else { /* C = A^T B */
            matmul_nt_f64(dA, c.B, c.R, M, N, K, 1);
            matmul_nn_f64(dB, c.A, c.R, M, K, N, 1);
        }
        char what[64];
        snprintf(what, sizeof what, "matmul_%s dA", mm_name[kind]);
        grad_check(what, matmul_loss, &c, c.A, na, dA, dA0);
        snprintf(what, sizeof what, "matmul_%s dB", mm_name[kind]);
        grad_check(what, matmul_loss, &c, c.B, nb, dB, dB0);
        free(c.A), free(c.B), free(c.C), free(c.R), free(dA0), free(dB0), free(dA), free(dB);
    }
}

/* ---------- embedding ---------- */
typedef struct {
    int N, C, V;
    int *tokens;
    double *table, *out, *R;
} EmbCtx;

static double emb_loss(void *p) {
    EmbCtx *c = p;
    embedding_forward_f64(c->out, c->tokens, c->table, c->N, c->C);
    return dot(c->out, c->R, (long)c->N * c->C);
}

static void test_embedding(void) {
    rng_seed(4);
    int N = 20, C = 70, V = 11; /* C spans two channel chunks; tokens repeat */
    int tokens[20];
    for (int n = 0; n < N; n++) tokens[n] = (int)(rng_next() % 5) * 2; /* odd rows never used */
    tokens[3] = tokens[7] = tokens[15] = 4;
    EmbCtx c = {N, C, V, tokens, rand_vec((long)V * C), malloc((size_t)N * C * sizeof(double)), rand_vec((long)N * C)};
    fill_nan_f64(c.out, (long)N * C);
    embedding_forward_f64(c.out, tokens, c.table, N, C);
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < C; j++) ok &= c.out[(long)n * C + j] == c.table[(long)tokens[n] * C + j];
    CHECK_MSG(ok, "embedding_forward does not copy table rows");
    double *g0 = rand_vec((long)V * C), *g = copy_vec(g0, (long)V * C);
    embedding_backward_f64(g, c.R, tokens, N, C, V);
    grad_check("embedding dtable", emb_loss, &c, c.table, (long)V * C, g, g0);
    /* float agrees with double */
    float *tf = to_f32(c.table, (long)V * C), *of = malloc((size_t)N * C * sizeof(float)),
          *Rf = to_f32(c.R, (long)N * C), *gf = to_f32(g0, (long)V * C);
    embedding_forward(of, tokens, tf, N, C);
    embedding_backward(gf, Rf, tokens, N, C, V);
    CHECK(rel_error_f32(of, c.out, (long)N * C) < F32_TOL);
    CHECK(rel_error_f32(gf, g, (long)V * C) < F32_TOL);
    free(c.table), free(c.out), free(c.R), free(g0), free(g), free(tf), free(of), free(Rf), free(gf);
}

/* ---------- RMSNorm ---------- */
typedef struct {
    int N, C;
    double eps;
    double *x, *w, *out, *rstd, *R;
} RmsCtx;

static double rms_loss(void *p) {
    RmsCtx *c = p;
    rmsnorm_forward_f64(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
    return dot(c->out, c->R, (long)c->N * c->C);
}

static void test_rmsnorm(void) {
    rng_seed(5);
    int N = 5, C = 70;
    long n = (long)N * C;
    RmsCtx c = {N, C, 1e-5, rand_vec(n), rand_vec(C), malloc(n * sizeof(double)), malloc(N * sizeof(double)),
                rand_vec(n)};
    for (int j = 0; j < C; j++) c.w[j] += 1.5;
    fill_nan_f64(c.out, n);
    fill_nan_f64(c.rstd, N);
    rmsnorm_forward_f64(c.out, c.rstd, c.x, c.w, N, C, c.eps);
    /* forward against the formula */
    double *ref = malloc(n * sizeof(double));
    for (int r = 0; r < N; r++) {
        double ss = 0;
        for (int j = 0; j < C; j++) ss += c.x[(long)r * C + j] * c.x[(long)r * C + j];
        double rs = 1 / sqrt(ss / C + c.eps);
        CHECK_NEAR(c.rstd[r], rs, 1e-12 * rs);
        for (int j = 0; j < C; j++) ref[(long)r * C + j] = c.x[(long)r * C + j] * rs * c.w[j];
    }
    CHECK(rel_error(c.out, ref, n) < 1e-14);
    double *dx0 = rand_vec(n), *dw0 = rand_vec(C), *dx = copy_vec(dx0, n), *dw = copy_vec(dw0, C);
    rmsnorm_backward_f64(dx, dw, c.R, c.x, c.w, c.rstd, N, C);
    grad_check("rmsnorm dx", rms_loss, &c, c.x, n, dx, dx0);
    grad_check("rmsnorm dweight", rms_loss, &c, c.w, C, dw, dw0);
    /* float agrees with double */
    rmsnorm_forward_f64(c.out, c.rstd, c.x, c.w, N, C, c.eps);
    float *xf = to_f32(c.x, n), *wf = to_f32(c.w, C), *Rf = to_f32(c.R, n), *of = malloc(n * sizeof(float)),
          *rf = malloc(N * sizeof(float)), *dxf = to_f32(dx0, n), *dwf = to_f32(dw0, C);
    double *xd = copy_vec(c.x, n), *wd = copy_vec(c.w, C), *Rd = copy_vec(c.R, n);
    round_to_f32(xd, n), round_to_f32(wd, C), round_to_f32(Rd, n);
    double *dxd = copy_vec(dx0, n), *dwd = copy_vec(dw0, C);
    round_to_f32(dxd, n), round_to_f32(dwd, C);
    rmsnorm_forward_f64(c.out, c.rstd, xd, wd, N, C, c.eps);
    rmsnorm_backward_f64(dxd, dwd, Rd, xd, wd, c.rstd, N, C);
    rmsnorm_forward(of, rf, xf, wf, N, C, (float)c.eps);
    rmsnorm_backward(dxf, dwf, Rf, xf, wf, rf, N, C);
    CHECK(rel_error_f32(of, c.out, n) < F32_TOL);
    CHECK(rel_error_f32(rf, c.rstd, N) < F32_TOL);
    CHECK(rel_error_f32(dxf, dxd, n) < F32_TOL);
    CHECK(rel_error_f32(dwf, dwd, C) < F32_TOL);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.R), free(ref), free(dx0), free(dw0), free(dx), free(dw);
    free(xf), free(wf), free(Rf), free(of), free(rf), free(dxf), free(dwf), free(xd), free(wd), free(Rd), free(dxd),
        free(dwd);
}

/* ---------- RoPE ---------- */
typedef struct {
    int B, T, H, D;
    double theta;
    double *x, *y, *R;
} RopeCtx;

static double rope_loss(void *p) {
    RopeCtx *c = p;
    long n = (long)c->B * c->T * c->H * c->D;
    memcpy(c->y, c->x, n * sizeof(double));
    rope_apply_f64(c->y, c->B, c->T, c->H, c->D, c->theta, 0);
    return dot(c->y, c->R, n);
}

static void test_rope(void) {
    rng_seed(6);
    /* The simplest case by hand: D = 2, i = 0 has frequency 1, so position t rotates by t radians. */
    double x2[2 * 2] = {1, 0, 1, 0}; /* B=1, T=2, H=1, D=2 */
    rope_apply_f64(x2, 1, 2, 1, 2, 10000, 0);
    CHECK(x2[0] == 1 && x2[1] == 0);
    CHECK_NEAR(x2[2], cos(1.0), 1e-15);
    CHECK_NEAR(x2[3], sin(1.0), 1e-15);

    const double thetas[2] = {10000, 7};
    for (int ti = 0; ti < 2; ti++) {
        int B = 2, T = 7, H = 3, D = 8;
        long n = (long)B * T * H * D;
        RopeCtx c = {B, T, H, D, thetas[ti], rand_vec(n), malloc(n * sizeof(double)), rand_vec(n)};
        /* forward against the formula */
        rope_loss(&c);
        double *ref = malloc(n * sizeof(double));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < D / 2; i++) {
                        long o = (((long)b * T + t) * H + h) * D;
                        double ang = t * pow(c.theta, -2.0 * i / D);
                        ref[o + i] = c.x[o + i] * cos(ang) - c.x[o + i + D / 2] * sin(ang);
                        ref[o + i + D / 2] = c.x[o + i] * sin(ang) + c.x[o + i + D / 2] * cos(ang);
                    }
        CHECK_MSG(rel_error(c.y, ref, n) < 1e-14, "rope forward (theta %g) differs from the formula", c.theta);
        /* the backward is the inverse rotation of the incoming gradient */
        double *g0 = rand_vec(n), *g = copy_vec(c.R, n);
        rope_apply_f64(g, B, T, H, D, c.theta, 1);
        for (long i = 0; i < n; i++) g[i] += g0[i];
        grad_check("rope dx", rope_loss, &c, c.x, n, g, g0);
        /* inverse(apply(x)) == x, in double and float */
        memcpy(c.y, c.x, n * sizeof(double));
        rope_apply_f64(c.y, B, T, H, D, c.theta, 0);
        rope_apply_f64(c.y, B, T, H, D, c.theta, 1);
        CHECK(rel_error(c.y, c.x, n) < 1e-14);
        float *xf = to_f32(c.x, n);
        rope_apply(xf, B, T, H, D, (float)c.theta, 0);
        memcpy(c.y, c.x, n * sizeof(double));
        round_to_f32(c.y, n);
        rope_apply_f64(c.y, B, T, H, D, c.theta, 0);
        CHECK(rel_error_f32(xf, c.y, n) < F32_TOL);
        rope_apply(xf, B, T, H, D, (float)c.theta, 1);
        CHECK(rel_error_f32(xf, c.x, n) < F32_TOL);
        free(c.x), free(c.y), free(c.R), free(ref), free(g0), free(g), free(xf);
    }
}

/* ---------- attention ---------- */
typedef struct {
    int B, T, Hq, Hkv, D;
    double *q, *k, *v, *out, *att, *R;
} AttnCtx;

static long attn_nq(const AttnCtx *c) { return (long)c->B * c->T * c->Hq * c->D; }
static long attn_nkv(const AttnCtx *c) { return (long)c->B * c->T * c->Hkv * c->D; }
static long attn_natt(const AttnCtx *c) { return (long)c->B * c->Hq * c->T * c->T; }

static void attn_alloc(AttnCtx *c, int B, int T, int Hq, int Hkv, int D) {
    *c = (AttnCtx){B, T, Hq, Hkv, D, NULL, NULL, NULL, NULL, NULL, NULL};
    c->q = rand_vec(attn_nq(c));
    c->k = rand_vec(attn_nkv(c));
    c->v = rand_vec(attn_nkv(c));
    c->R = rand_vec(attn_nq(c));
    c->out = malloc(attn_nq(c) * sizeof(double));
    c->att = malloc(attn_natt(c) * sizeof(double));
    /* larger queries make the softmax far from uniform */
    for (long i = 0; i < attn_nq(c); i++) c->q[i] *= 2.5;
}

static void attn_free(AttnCtx *c) { free(c->q), free(c->k), free(c->v), free(c->R), free(c->out), free(c->att); }

static double attn_loss(void *p) {
    AttnCtx *c = p;
    attention_forward_f64(c->out, c->att, c->q, c->k, c->v, c->B, c->T, c->Hq, c->Hkv, c->D);
    return dot(c->out, c->R, attn_nq(c));
}

/* Naive causal GQA attention with an explicit mask. */
static void attn_naive(const AttnCtx *c, double *out, double *att) {
    int T = c->T, D = c->D, Hq = c->Hq, Hkv = c->Hkv;
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < Hq; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / (Hq / Hkv);
                const double *qt = c->q + ((long)(b * T + t) * Hq + h) * D;
                double *a = att + (((long)b * Hq + h) * T + t) * T, mx = -INFINITY, sum = 0;
                for (int u = 0; u < T; u++) {
                    if (u > t) continue;
                    const double *ku = c->k + ((long)(b * T + u) * Hkv + kh) * D;
                    double s = 0;
                    for (int d = 0; d < D; d++) s += qt[d] * ku[d];
                    a[u] = s / sqrt(D);
                    mx = fmax(mx, a[u]);
                }
                for (int u = 0; u < T; u++) sum += u <= t ? exp(a[u] - mx) : 0;
                for (int u = 0; u < T; u++) a[u] = u <= t ? exp(a[u] - mx) / sum : 0;
                double *o = out + ((long)(b * T + t) * Hq + h) * D;
                for (int d = 0; d < D; d++) {
                    double s = 0;
                    for (int u = 0; u <= t; u++) s += a[u] * c->v[((long)(b * T + u) * Hkv + kh) * D + d];
                    o[d] = s;
                }
            }
}

static const int attn_shapes[][5] = {
    /* B, T, Hq, Hkv, D */
    {2, 7, 4, 2, 8}, {2, 7, 3, 3, 8}, {1, 1, 4, 2, 8}, {2, 1, 2, 2, 8}, {1, 5, 4, 1, 8}, {1, 8, 2, 2, 8},
};

static void test_attention_forward(void) {
    rng_seed(7);
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const int *sh = attn_shapes[s];
        AttnCtx c;
        attn_alloc(&c, sh[0], sh[1], sh[2], sh[3], sh[4]);
        double *ro = malloc(attn_nq(&c) * sizeof(double)), *ra = malloc(attn_natt(&c) * sizeof(double));
        attn_naive(&c, ro, ra);
        fill_nan_f64(c.out, attn_nq(&c));
        fill_nan_f64(c.att, attn_natt(&c));
        attn_loss(&c);
        CHECK_MSG(rel_error(c.out, ro, attn_nq(&c)) < 1e-13, "attention out differs from naive (B%d T%d Hq%d Hkv%d)",
                  sh[0], sh[1], sh[2], sh[3]);
        CHECK_MSG(rel_error(c.att, ra, attn_natt(&c)) < 1e-13, "attention probabilities differ from naive");
        int upper_zero = 1;
        for (long i = 0; i < attn_natt(&c); i++) {
            long t = (i / c.T) % c.T, u = i % c.T;
            if (u > t) upper_zero &= c.att[i] == 0;
        }
        CHECK_MSG(upper_zero, "attention probabilities above the diagonal are not 0");
        free(ro), free(ra);
        attn_free(&c);
    }
}

static void test_attention_grad(void) {
    rng_seed(8);
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const int *sh = attn_shapes[s];
        AttnCtx c;
        attn_alloc(&c, sh[0], sh[1], sh[2], sh[3], sh[4]);
        long nq = attn_nq(&c), nkv = attn_nkv(&c);
        double *dq0 = rand_vec(nq), *dk0 = rand_vec(nkv), *dv0 = rand_vec(nkv);
        double *dq = copy_vec(dq0, nq), *dk = copy_vec(dk0, nkv), *dv = copy_vec(dv0, nkv);
        attn_loss(&c);
        attention_backward_f64(dq, dk, dv, c.R, c.att, c.q, c.k, c.v, c.B, c.T, c.Hq, c.Hkv, c.D);
        char what[96];
        snprintf(what, sizeof what, "attention B%d T%d Hq%d Hkv%d: dv", sh[0], sh[1], sh[2], sh[3]);
        grad_check(what, attn_loss, &c, c.v, nkv, dv, dv0);
        if (c.T > 1) {
            snprintf(what, sizeof what, "attention B%d T%d Hq%d Hkv%d: dq", sh[0], sh[1], sh[2], sh[3]);
            grad_check(what, attn_loss, &c, c.q, nq, dq, dq0);
            snprintf(what, sizeof what, "attention B%d T%d Hq%d Hkv%d: dk", sh[0], sh[1], sh[2], sh[3]);
            grad_check(what, attn_loss, &c, c.k, nkv, dk, dk0);
        } else { /* a softmax over one score is constant: q and k get no gradient */
            CHECK_MSG(memcmp(dq, dq0, nq * sizeof(double)) == 0, "attention T=1 must leave dq unchanged");
            CHECK_MSG(memcmp(dk, dk0, nkv * sizeof(double)) == 0, "attention T=1 must leave dk unchanged");
        }
        free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv);
        attn_free(&c);
    }
}

static void test_attention_float_matches_double(void) {
    rng_seed(9);
    AttnCtx c;
    attn_alloc(&c, 2, 13, 4, 2, 16);
    long nq = attn_nq(&c), nkv = attn_nkv(&c), na = attn_natt(&c);
    round_to_f32(c.q, nq), round_to_f32(c.k, nkv), round_to_f32(c.v, nkv), round_to_f32(c.R, nq);
    double *dq = calloc(nq, sizeof(double)), *dk = calloc(nkv, sizeof(double)), *dv = calloc(nkv, sizeof(double));
    attn_loss(&c);
    attention_backward_f64(dq, dk, dv, c.R, c.att, c.q, c.k, c.v, c.B, c.T, c.Hq, c.Hkv, c.D);
    float *qf = to_f32(c.q, nq), *kf = to_f32(c.k, nkv), *vf = to_f32(c.v, nkv), *Rf = to_f32(c.R, nq);
    float *of = malloc(nq * sizeof(float)), *af = malloc(na * sizeof(float));
    float *dqf = calloc(nq, sizeof(float)), *dkf = calloc(nkv, sizeof(float)), *dvf = calloc(nkv, sizeof(float));
    attention_forward(of, af, qf, kf, vf, c.B, c.T, c.Hq, c.Hkv, c.D);
    attention_backward(dqf, dkf, dvf, Rf, af, qf, kf, vf, c.B, c.T, c.Hq, c.Hkv, c.D);
    CHECK(rel_error_f32(of, c.out, nq) < F32_TOL);
    CHECK(rel_error_f32(af, c.att, na) < F32_TOL);
    CHECK(rel_error_f32(dqf, dq, nq) < F32_TOL);
    CHECK(rel_error_f32(dkf, dk, nkv) < F32_TOL);
    CHECK(rel_error_f32(dvf, dv, nkv) < F32_TOL);
    free(dq), free(dk), free(dv), free(qf), free(kf), free(vf), free(Rf), free(of), free(af), free(dqf), free(dkf),
        free(dvf);
    attn_free(&c);
}

static void test_attention_causal(void) {
    /* Changing key/value t0 of batch row 1 must not change outputs before t0 (nor batch row 0),
     * and must change the output at t0. */
    rng_seed(10);
    AttnCtx c;
    attn_alloc(&c, 2, 7, 4, 2, 8);
    int t0 = 4;
    long row_q = (long)c.Hq * c.D, row_kv = (long)c.Hkv * c.D, nq = attn_nq(&c);
    attn_loss(&c);
    double *before = copy_vec(c.out, nq);
    for (long i = 0; i < row_kv; i++) {
        c.k[(1L * c.T + t0) * row_kv + i] += 0.7;
        c.v[(1L * c.T + t0) * row_kv + i] -= 0.9;
    }
    attn_loss(&c);
    long first_changed = (1L * c.T) * row_q;                  /* start of batch row 1 */
    long unchanged = first_changed + (long)t0 * row_q;         /* everything up to (1, t0) */
    CHECK_MSG(memcmp(before, c.out, unchanged * sizeof(double)) == 0, "attention output before t0 changed");
    CHECK_MSG(memcmp(before + unchanged, c.out + unchanged, row_q * sizeof(double)) != 0,
              "attention output at t0 did not change");
    free(before);
    attn_free(&c);
}

/* ---------- SwiGLU ---------- */
typedef struct {
    long n;
    double *g, *u, *h, *R;
} SwiCtx;

static double swiglu_loss(void *p) {
    SwiCtx *c = p;
    swiglu_forward_f64(c->h, c->g, c->u, c->n);
    return dot(c->h, c->R, c->n);
}

static void test_swiglu(void) {
    rng_seed(11);
    long n = 57;
    SwiCtx c = {n, rand_vec(n), rand_vec(n), malloc(n * sizeof(double)), rand_vec(n)};
    for (long i = 0; i < n; i++) c.g[i] *= 6; /* reach both tails of the sigmoid */
    fill_nan_f64(c.h, n);
    swiglu_loss(&c);
    double *ref = malloc(n * sizeof(double));
    for (long i = 0; i < n; i++) ref[i] = c.g[i] / (1 + exp(-c.g[i])) * c.u[i];
    CHECK(rel_error(c.h, ref, n) < 1e-14);
    double *dg0 = rand_vec(n), *du0 = rand_vec(n), *dg = copy_vec(dg0, n), *du = copy_vec(du0, n);
    swiglu_backward_f64(dg, du, c.R, c.g, c.u, n);
    grad_check("swiglu dgate", swiglu_loss, &c, c.g, n, dg, dg0);
    grad_check("swiglu dup", swiglu_loss, &c, c.u, n, du, du0);
    /* float agrees with double */
    round_to_f32(c.g, n), round_to_f32(c.u, n), round_to_f32(c.R, n);
    memcpy(dg, dg0, n * sizeof(double)), memcpy(du, du0, n * sizeof(double));
    round_to_f32(dg, n), round_to_f32(du, n);
    swiglu_loss(&c);
    swiglu_backward_f64(dg, du, c.R, c.g, c.u, n);
    float *gf = to_f32(c.g, n), *uf = to_f32(c.u, n), *Rf = to_f32(c.R, n), *hf = malloc(n * sizeof(float)),
          *dgf = to_f32(dg0, n), *duf = to_f32(du0, n);
    swiglu_forward(hf, gf, uf, n);
    swiglu_backward(dgf, duf, Rf, gf, uf, n);
    CHECK(rel_error_f32(hf, c.h, n) < F32_TOL);
    CHECK(rel_error_f32(dgf, dg, n) < F32_TOL);
    CHECK(rel_error_f32(duf, du, n) < F32_TOL);
    free(c.g), free(c.u), free(c.h), free(c.R), free(ref), free(dg0), free(du0), free(dg), free(du);
    free(gf), free(uf), free(Rf), free(hf), free(dgf), free(duf);
}

/* ---------- cross-entropy ---------- */
typedef struct {
    int N, V;
    int *targets;
    double *logits;
} CeCtx;

static double ce_loss(void *p) {
    CeCtx *c = p;
    return cross_entropy_f64(NULL, NULL, c->logits, c->targets, c->N, c->V, 1.0);
}

static void test_cross_entropy(void) {
    rng_seed(12);
    int N = 6, V = 37;
    long n = (long)N * V;
    int targets[6];
    for (int i = 0; i < N; i++) targets[i] = (int)(rng_next() % V);
    targets[0] = 0, targets[1] = V - 1;
    CeCtx c = {N, V, targets, rand_vec(n)};
    for (long i = 0; i < n; i++) c.logits[i] *= 4;
    /* loss against the formula */
    double mean = 0, losses_ref[6];
    for (int r = 0; r < N; r++) {
        double z = 0;
        for (int j = 0; j < V; j++) z += exp(c.logits[(long)r * V + j]);
        losses_ref[r] = log(z) - c.logits[(long)r * V + targets[r]];
        mean += losses_ref[r] / N;
    }
    double losses[6], *dl = malloc(n * sizeof(double)), dloss = 0.37;
    fill_nan_f64(losses, N);
    fill_nan_f64(dl, n);
    double got = cross_entropy_f64(dl, losses, c.logits, targets, N, V, dloss);
    CHECK_NEAR(got, mean, 1e-13 * mean);
    CHECK(rel_error(losses, losses_ref, N) < 1e-13);
    /* dlogits = dloss * d(mean loss)/dlogits; grad_check expects an increment over a base */
    double *zero = calloc(n, sizeof(double));
    for (long i = 0; i < n; i++) dl[i] /= dloss;
    grad_check("cross_entropy dlogits", ce_loss, &c, c.logits, n, dl, zero);
    /* stable for large logits: shifting a row changes nothing */
    double *shifted = copy_vec(c.logits, n);
    for (long i = 0; i < n; i++) shifted[i] += 1000;
    double got_shifted = cross_entropy_f64(NULL, NULL, shifted, targets, N, V, 1.0);
    CHECK_MSG(isfinite(got_shifted) && fabs(got_shifted - mean) < 1e-9, "cross_entropy at +1000: %g vs %g",
              got_shifted, mean);
    /* float agrees with double */
    round_to_f32(c.logits, n);
    double d_mean = cross_entropy_f64(dl, NULL, c.logits, targets, N, V, dloss);
    float *lf = to_f32(c.logits, n), *dlf = malloc(n * sizeof(float)), lossesf[6];
    double f_mean = cross_entropy(dlf, lossesf, lf, targets, N, V, (float)dloss);
    CHECK_NEAR(f_mean, d_mean, 1e-6 * d_mean);
    CHECK(rel_error_f32(dlf, dl, n) < F32_TOL);
    free(c.logits), free(dl), free(zero), free(shifted), free(lf), free(dlf);
}

static void test_cross_entropy_bad_target_dies(void) {
    /* An out-of-range target must stop the program with a message, not read out of bounds. */
    double logits[2 * 3] = {0};
    int targets[2] = {1, 3};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(99);
        cross_entropy_f64(NULL, NULL, logits, targets, 2, 3, 1.0);
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 99,
              "cross_entropy with target 3 >= V=3 did not exit with an error (status %d)", status);
}

/* ---------- every output element is written (NaN-filled outputs of float ops) ---------- */
static void test_outputs_all_written(void) {
    rng_seed(13);
    int B = 2, T = 9, Hq = 4, Hkv = 2, D = 8, C = 70, V = 19, N = B * T;
    long nq = (long)N * Hq * D, nkv = (long)N * Hkv * D, na = (long)B * Hq * T * T, nc = (long)N * C;
    const long pool = 40000, cap = 20000; /* enough for every operand and output below */
    double *rd = rand_vec(pool);
    float *r = to_f32(rd, pool); /* random inputs, taken from consecutive slices */
    float *out = malloc(cap * sizeof(float)), *out2 = malloc(cap * sizeof(float));
    int tokens[18];
    for (int i = 0; i < N; i++) tokens[i] = (int)(rng_next() % V);

    const int mm_shapes[][3] = {{37, 300, 45}, {5, 3, 70}};
    for (int kind = 0; kind < 3; kind++)
        for (int s = 0; s < 2; s++) {
            int M = mm_shapes[s][0], K = mm_shapes[s][1], Nn = mm_shapes[s][2];
            long na_, nb_, nc_;
            mm_sizes(kind, M, K, Nn, &na_, &nb_, &nc_);
            fill_nan_f32(out, nc_);
            mm_f32(kind, out, r, r + na_, M, K, Nn, 0);
            CHECK_MSG(count_nan_f32(out, nc_) == 0, "matmul_%s left %ld outputs unwritten", mm_name[kind],
                      count_nan_f32(out, nc_));
        }
    fill_nan_f32(out, nc);
    embedding_forward(out, tokens, r, N, C);
    CHECK(count_nan_f32(out, nc) == 0);
    fill_nan_f32(out, nc);
    fill_nan_f32(out2, N);
    rmsnorm_forward(out, out2, r, r + nc, N, C, 1e-5f);
    CHECK(count_nan_f32(out, nc) == 0 && count_nan_f32(out2, N) == 0);
    fill_nan_f32(out, nq);
    fill_nan_f32(out2, na);
    attention_forward(out, out2, r, r + nq, r + nq + nkv, B, T, Hq, Hkv, D);
    CHECK(count_nan_f32(out, nq) == 0 && count_nan_f32(out2, na) == 0);
    fill_nan_f32(out, nc);
    swiglu_forward(out, r, r + nc, nc);
    CHECK(count_nan_f32(out, nc) == 0);
    fill_nan_f32(out, (long)N * V);
    fill_nan_f32(out2, N);
    double loss = cross_entropy(out, out2, r, tokens, N, V, 1.0f);
    CHECK(isfinite(loss) && count_nan_f32(out, (long)N * V) == 0 && count_nan_f32(out2, N) == 0);
    /* the double build too, for one op per kind of loop */
    double *o64 = malloc(cap * sizeof(double)), *a64 = malloc(cap * sizeof(double));
    fill_nan_f64(o64, nq);
    fill_nan_f64(a64, na);
    attention_forward_f64(o64, a64, rd, rd + nq, rd + nq + nkv, B, T, Hq, Hkv, D);
    CHECK(count_nan_f64(o64, nq) == 0 && count_nan_f64(a64, na) == 0);
    fill_nan_f64(o64, (long)37 * 45);
    matmul_nt_f64(o64, rd, rd + 37 * 300, 37, 300, 45, 0);
    CHECK(count_nan_f64(o64, (long)37 * 45) == 0);
    free(rd), free(r), free(out), free(out2), free(o64), free(a64);
}

/* ---------- bitwise determinism across thread counts ---------- */
static void test_deterministic_across_threads(void) {
    rng_seed(14);
    int saved = omp_get_max_threads();
    const int threads[2] = {1, 3};
    /* matmuls: shapes with several row blocks, column tiles and k blocks */
    int M = 150, K = 300, N = 100;
    for (int kind = 0; kind < 3; kind++) {
        long na, nb, nc;
        mm_sizes(kind, M, K, N, &na, &nb, &nc);
        double *Ad = rand_vec(na), *Bd = rand_vec(nb), *Cd = rand_vec(nc);
        float *A = to_f32(Ad, na), *Bm = to_f32(Bd, nb), *C0 = to_f32(Cd, nc);
        float *res[2];
        for (int r = 0; r < 2; r++) {
            omp_set_num_threads(threads[r]);
            res[r] = malloc(nc * sizeof(float));
            memcpy(res[r], C0, nc * sizeof(float));
            mm_f32(kind, res[r], A, Bm, M, K, N, 1);
        }
        CHECK_MSG(memcmp(res[0], res[1], nc * sizeof(float)) == 0, "matmul_%s differs between 1 and 3 threads",
                  mm_name[kind]);
        CHECK_MSG(memcmp(res[0], C0, nc * sizeof(float)) != 0, "matmul_%s did nothing", mm_name[kind]);
        free(Ad), free(Bd), free(Cd), free(A), free(Bm), free(C0), free(res[0]), free(res[1]);
    }
    /* attention forward + backward */
    int B = 2, T = 33, Hq = 4, Hkv = 2, D = 16;
    long nq = (long)B * T * Hq * D, nkv = (long)B * T * Hkv * D, natt = (long)B * Hq * T * T;
    double *pool = rand_vec(2 * nq + 2 * nkv);
    float *in = to_f32(pool, 2 * nq + 2 * nkv), *q = in, *k = in + nq, *v = k + nkv, *dout = v + nkv;
    float *buf[2];
    long total = 2 * nq + 2 * nkv + natt; /* out, att, dq, dk, dv */
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(threads[r]);
        buf[r] = calloc(total, sizeof(float));
        float *out = buf[r], *att = out + nq, *dq = att + natt, *dk = dq + nq, *dv = dk + nkv;
        attention_forward(out, att, q, k, v, B, T, Hq, Hkv, D);
        attention_backward(dq, dk, dv, dout, att, q, k, v, B, T, Hq, Hkv, D);
    }
    CHECK_MSG(memcmp(buf[0], buf[1], total * sizeof(float)) == 0, "attention differs between 1 and 3 threads");
    /* the reductions over rows: rmsnorm dweight, embedding dtable */
    int Nr = 300, C = 150, Vv = 7; /* above the ops' threshold for going parallel */
    double *pd = rand_vec(3L * Nr * C + C);
    float *p = to_f32(pd, 3L * Nr * C + C), *x = p, *g = p + (long)Nr * C, *w = g + (long)Nr * C;
    int *tok = malloc(Nr * sizeof(int));
    for (int i = 0; i < Nr; i++) tok[i] = (int)(rng_next() % Vv);
    float *red[2];
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(threads[r]);
        red[r] = calloc(2L * Nr * C + (long)Vv * C + C + Nr, sizeof(float));
        float *o = red[r], *dx = o + (long)Nr * C, *dt = dx + (long)Nr * C, *dw = dt + (long)Vv * C, *rs = dw + C;
        rmsnorm_forward(o, rs, x, w, Nr, C, 1e-5f);
        rmsnorm_backward(dx, dw, g, x, w, rs, Nr, C);
        embedding_backward(dt, g, tok, Nr, C, Vv);
    }
    CHECK_MSG(memcmp(red[0], red[1], (2L * Nr * C + (long)Vv * C + C + Nr) * sizeof(float)) == 0,
              "rmsnorm/embedding backward differ between 1 and 3 threads");
    omp_set_num_threads(saved);
    free(pool), free(in), free(buf[0]), free(buf[1]), free(pd), free(p), free(tok), free(red[0]), free(red[1]);
}

TEST_SUITE(ops, TEST_CASE(test_matmul_matches_naive), TEST_CASE(test_matmul_accumulate), TEST_CASE(test_matmul_grad),
           TEST_CASE(test_embedding), TEST_CASE(test_rmsnorm), TEST_CASE(test_rope), TEST_CASE(test_attention_forward),
           TEST_CASE(test_attention_grad), TEST_CASE(test_attention_float_matches_double),
           TEST_CASE(test_attention_causal), TEST_CASE(test_swiglu), TEST_CASE(test_cross_entropy),
           TEST_CASE(test_cross_entropy_bad_target_dies), TEST_CASE(test_outputs_all_written),
           TEST_CASE(test_deterministic_across_threads));
