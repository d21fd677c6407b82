/*
 * GPU tests of the MoK megakernel forward (src/gpu/moe_mok.c, kernels/mok/) on one GPU, ep = 1,
 * against the unfused layer (src/gpu/moe_unfused.c, itself tested against the CPU reference in
 * test_moe_gpu.c) on the same inputs: identical top-k ids, counts and aux loss (the same routing
 * kernels), y within 1e-2 relative (different GEMM accumulation order, bf16 rounding), no NaN left
 * in the poisoned output, a second forward bitwise identical, and the same bits for any number of
 * communication blocks. Shapes: small, k = 1 with every token on one expert, skewed k = 2, E = 384
 * k = 8 sigmoid, k = E, token counts below / above / not a multiple of the 64-row tile, shared
 * experts on and off, x given as bf16 or rounded by the layer.
 * The watchdog: a child process (this test binary re-executed with a filter and an environment
 * switch, since a trap kills the CUDA context) runs a forward whose dispatch blocks skip their
 * work with a 1 s budget; the parent checks that the child exits non-zero within the time limit
 * and printed the record (role, task, counter, expected, seen).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "gpu/moe_mok.h"
#include "gpu/moe_unfused.h"
#include "gpu_test.h"

#define BF16_TOL 1e-2


static void *up_f32(long n, float a) {
    float *h = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) h[i] = gpu_rsym(a);
    void *d = gpu_upload(h, (size_t)(n > 0 ? n : 1) * sizeof(float));
    free(h);
    return d;
}
static void *up_bf16(long n, float a) {
    bf16_t *h = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(bf16_t));
    for (long i = 0; i < n; i++) h[i] = host_to_bf16(gpu_rsym(a));
    void *d = gpu_upload(h, (size_t)(n > 0 ? n : 1) * sizeof(bf16_t));
    free(h);
    return d;
}

enum { SKEW_NONE, SKEW_ONE, SKEW_FIRST };

typedef struct {
    const char *label;
    int N, C, E, k, I, S, sigmoid, skew, give_bf16;
    uint64_t seed;
} Shape;

typedef struct {
    MoeGpuDims d;
    MoeGpuWeights w;
    float *x, *bias;
    bf16_t *xb;
} Problem;

static void problem_create(Problem *P, const Shape *s) {
    gpu_rng_seed(s->seed);
    memset(P, 0, sizeof *P);
    MoeGpuDims d = {.C = s->C, .E = s->E, .k = s->k, .I = s->I, .n_shared = s->S, .sigmoid = s->sigmoid,
                    .norm_topk = 1, .scaling = s->sigmoid ? 2.5 : 1.0, .ep = 1, .ep_rank = 0};
    P->d = d;
    const long C = s->C, E = s->E, I = s->I, SI = (long)s->S * s->I;
    P->w.router = up_f32(C * E, 1.0f / (float)sqrt((double)C) * 3.0f);
    P->w.w_gate = up_bf16(E * C * I, 1.0f / (float)sqrt((double)C));
    P->w.w_up = up_bf16(E * C * I, 1.0f / (float)sqrt((double)C));
    P->w.w_down = up_bf16(E * I * C, 1.0f / (float)sqrt((double)I));
    if (SI > 0) {
        P->w.shared_gate = up_bf16(C * SI, 1.0f / (float)sqrt((double)C));
        P->w.shared_up = up_bf16(C * SI, 1.0f / (float)sqrt((double)C));
        P->w.shared_down = up_bf16(SI * C, 1.0f / (float)sqrt((double)SI));
    }
    P->x = up_f32((long)s->N * C, 1.0f);
    if (s->give_bf16) {
        float *h = mallocCheck((size_t)s->N * C * sizeof(float));
        gpu_download(h, P->x, (size_t)s->N * C * sizeof(float));
        bf16_t *b = mallocCheck((size_t)s->N * C * sizeof(bf16_t) + 2);
        for (long i = 0; i < (long)s->N * C; i++) b[i] = host_to_bf16(h[i]);
        P->xb = gpu_upload(b, (size_t)s->N * C * sizeof(bf16_t));
        free(h);
        free(b);
    }
    if (s->skew != SKEW_NONE) {
        float *b = calloc((size_t)E, sizeof(float));
        b[E / 2] = 100.0f; /* every token's first pick: expert E/2 */
        P->bias = gpu_upload(b, (size_t)E * sizeof(float));
        free(b);
    }
}

static void problem_destroy(Problem *P) {
    const void *p[] = {P->w.router, P->w.w_gate, P->w.w_up, P->w.w_down, P->w.shared_gate, P->w.shared_up,
                       P->w.shared_down, P->x, P->bias, P->xb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]) cudaCheck(cudaFree((void *)p[i]));
}

static void run_shape(const Shape *s) {
    Problem P;
    problem_create(&P, s);
    const int N = s->N, C = s->C, k = s->k, E = s->E;
    const long ny = (long)N * C;
    /* the baseline */
    MoeUnfusedActs a;
    MoeUnfusedWork w;
    moe_unfused_acts_create(&a, &P.d, N);
    moe_unfused_work_create(&w, &P.d, N, NULL);
    float *y_ref_d = gpu_poisoned((size_t)ny * sizeof(float));
    moe_unfused_forward(y_ref_d, &a, &w, P.x, P.xb, &P.w, P.bias, N, 0);
    cudaCheck(cudaDeviceSynchronize());
    /* the megakernel: both GEMM tiles and a few communication-block counts, each run twice; all
     * bitwise identical to the first run (same mma order in both tiles, one tile per element) */
    const int ncomm[4] = {0, 1, 0, 7}, tile[4] = {MOK_TILE_SIMPLE, MOK_TILE_SIMPLE, MOK_TILE_PIPE, MOK_TILE_PIPE};
    float *y_ref = mallocCheck((size_t)ny * sizeof(float)), *y = mallocCheck((size_t)ny * sizeof(float)),
          *y_first = mallocCheck((size_t)ny * sizeof(float));
    gpu_download(y_ref, y_ref_d, (size_t)ny * sizeof(float));
    int *tk_ref = mallocCheck((size_t)N * k * sizeof(int)), *tk = mallocCheck((size_t)N * k * sizeof(int));
    int *cnt_ref = mallocCheck((size_t)E * sizeof(int)), *cnt = mallocCheck((size_t)E * sizeof(int));
    gpu_download(tk_ref, a.topk, (size_t)N * k * sizeof(int));
    gpu_download(cnt_ref, a.counts, (size_t)E * sizeof(int));
    for (int v = 0; v < 4; v++) {
        MoeMok m;
        moe_mok_create(&m, &P.d, N, NULL, ncomm[v]);
        moe_mok_set_debug(&m, 5.0, 0);
        moe_mok_set_tile(&m, tile[v]);
        for (int rep = 0; rep < 2; rep++) {
            float *y_d = gpu_poisoned((size_t)ny * sizeof(float));
            moe_mok_forward(y_d, &m, P.x, P.xb, &P.w, P.bias, N, 0);
            const double aux = moe_mok_aux_loss(&m, 0);
            gpu_download(y, y_d, (size_t)ny * sizeof(float));
            cudaCheck(cudaFree(y_d));
            if (v == 0 && rep == 0) {
                gpu_download(tk, m.topk, (size_t)N * k * sizeof(int));
                gpu_download(cnt, m.counts, (size_t)E * sizeof(int));
                long bad = 0;
                for (long i = 0; i < (long)N * k; i++) bad += tk[i] != tk_ref[i];
                CHECK_MSG(bad == 0, "%s: %ld top-k ids differ from the unfused layer", s->label, bad);
                CHECK_MSG(!memcmp(cnt, cnt_ref, (size_t)E * sizeof(int)), "%s: expert counts differ", s->label);
                CHECK_MSG(aux == a.aux_loss, "%s: aux loss %.17g vs unfused %.17g", s->label, aux, a.aux_loss);
                const long nan = count_nan(y, ny);
                CHECK_MSG(nan == 0, "%s: %ld of %ld outputs not written (NaN)", s->label, nan, ny);
                const double err = rel_error_f(y, y_ref, ny);
                CHECK_MSG(err < BF16_TOL, "%s: mok vs unfused rel err %.3e (tol %g)", s->label, err, BF16_TOL);
                if (err >= BF16_TOL) {
                    for (long i = 0; i < ny && i < 4 * C; i += C / 2 + 1)
                        fprintf(stderr, "    y[%ld]: mok %.6f unfused %.6f\n", i, y[i], y_ref[i]);
                }
                memcpy(y_first, y, (size_t)ny * sizeof(float));
            } else {
                const long nan = count_nan(y, ny);
                CHECK_MSG(!memcmp(y, y_first, (size_t)ny * sizeof(float)),
                          "%s: forward with the %s tile, %d comm blocks (run %d) is not bitwise identical to the first "
                          "(rel err vs unfused %.3e, %ld NaN)",
                          s->label, tile[v] == MOK_TILE_PIPE ? "pipelined" : "simple", m.n_comm, rep + 1,
                          rel_error_f(y, y_ref, ny), nan);
            }
        }
        moe_mok_destroy(&m);
    }
    free(y_ref);
    free(y);
    free(y_first);
    free(tk_ref);
    free(tk);
    free(cnt_ref);
    free(cnt);
    cudaCheck(cudaFree(y_ref_d));
    moe_unfused_acts_destroy(&a);
    moe_unfused_work_destroy(&w);
    problem_destroy(&P);
}

static void test_mok_vs_unfused(void) {
    if (!gpu_test_begin()) return;
    static const Shape shapes[] = {
        {"small N=37 C=64 E=8 k=2 I=64 shared", 37, 64, 8, 2, 64, 1, 0, SKEW_NONE, 0, 1},
        {"k=1 all tokens on one expert N=200", 200, 128, 8, 1, 128, 0, 0, SKEW_ONE, 1, 2},
        {"skewed k=2 first pick fixed N=130", 130, 64, 16, 2, 192, 1, 0, SKEW_FIRST, 0, 3},
        {"E=384 k=8 sigmoid N=45", 45, 64, 384, 8, 64, 0, 1, SKEW_NONE, 0, 4},
        {"k=E=4 N=64 (tile multiple) 2 shared", 64, 192, 4, 4, 128, 2, 0, SKEW_NONE, 1, 5},
        {"N=1", 1, 64, 8, 2, 64, 1, 0, SKEW_NONE, 0, 6},
        {"N=1000 E=32 k=4 C=256 I=192", 1000, 256, 32, 4, 192, 0, 0, SKEW_NONE, 0, 7},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
}

/* ---------- the watchdog ---------- */

#define WATCHDOG_ENV "MOKC_TEST_MOK_WATCHDOG_CHILD"

/* Runs only as the child of test_mok_watchdog: a forward whose dispatch blocks skip their rows.
 * moe_mok_sync must print the record and exit non-zero; returning is a failure. */
static void test_mok_watchdog_child(void) {
    if (!getenv(WATCHDOG_ENV)) {
        test_skip("runs only as the child of test_mok_watchdog");
        return;
    }
    if (!gpu_test_begin()) return;
    const Shape s = {"watchdog", 100, 64, 8, 2, 64, 0, 0, SKEW_NONE, 0, 9};
    Problem P;
    problem_create(&P, &s);
    MoeMok m;
    moe_mok_create(&m, &P.d, s.N, NULL, 2);
    moe_mok_set_debug(&m, 1.0, 1);
    float *y;
    cudaCheck(cudaMalloc((void **)&y, (size_t)s.N * s.C * sizeof(float)));
    moe_mok_forward(y, &m, P.x, NULL, &P.w, NULL, s.N, 0);
    moe_mok_sync(&m, 0); /* must not return */
    fprintf(stderr, "watchdog child: the forward returned although no row was dispatched\n");
    fflush(stderr);
    _exit(0); /* the parent expects a non-zero exit */
}

static void test_mok_watchdog(void) {
    if (!gpu_test_begin()) return;
    char exe[1024], cmd[1400];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    if (n <= 0) return;
    exe[n] = 0;
    snprintf(cmd, sizeof cmd, "%s=1 timeout -s KILL 60 '%s' mok.test_mok_watchdog_child", WATCHDOG_ENV, exe);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    static char log[16384];
    const int code = test_run(cmd, log, sizeof log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const int ok_code = code == MOKC_EXIT_RUNTIME;
    /* With no rows dispatched, whichever waiting tile's budget expires first reports: a gate/up tile
     * waiting for its rows (role 1) or a down tile waiting for its gate/up tiles (role 2). */
    const int ok_record = strstr(log, "mok watchdog:") && (strstr(log, "role 1") || strstr(log, "role 2")) &&
                          strstr(log, " seen 0 ");
    CHECK_MSG(ok_code, "the watchdog child should exit %d, got %d after %.1f s (137: killed, it hung)",
              MOKC_EXIT_RUNTIME, code, secs);
    CHECK_MSG(ok_record, "the child did not print the expected watchdog record");
    CHECK_MSG(secs < 30.0, "the watchdog child took %.1f s (budget 1 s)", secs);
    if (!ok_code || !ok_record || secs >= 30.0) fprintf(stderr, "---- watchdog child output ----\n%s\n----\n", log);
}

TEST_SUITE(mok, TEST_CASE(test_mok_vs_unfused), TEST_CASE(test_mok_watchdog), TEST_CASE(test_mok_watchdog_child));
