/*
 * The row-major GEMM wrappers against the CPU's matmuls: every transpose combination, bf16 and
 * fp32 operands and outputs, accumulate (beta = 1), odd sizes and pointers into the middle of a
 * buffer (the cuBLASLt plans must honour their alignment), operands inside wider rows (gemm_rm_ld), strided
 * batches, runs of problems whose M or K changes from call to call (gemm_rm_dynamic), more problems than the
 * plan table holds; bitwise repeatable.
 * fp32 GEMMs on tensor cores (gemm_f32x3.h): the chunk rule and scratch bound, every layout
 * against a double reference in one and several chunks, each way of giving the operands (fp32,
 * planes, either operand's bf16 values) bit for bit the same, and the fixed-order sum of the
 * chunks' partials bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/reduce.h"
#include "cpu/ops.h"
#include "gpu/check.h"
#include "gpu/gemm.h"
#include "../../kernels/gemm_f32x3.h"
#include "../../kernels/mok/mok.h"
#include "gpu_test.h"

static uint64_t rng = 99;
static float urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Fills n floats; for bf16 operands the values are bf16-exact so only accumulation differs. */
static float *random_matrix(long n, int bf16_exact) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) x[i] = bf16_exact ? host_from_bf16(host_to_bf16(urand())) : urand();
    return x;
}

/* Device copy of x in type t, placed `skew` elements into a larger buffer (misaligned on purpose). */
static void *device_copy(const float *x, long n, GemmType t, int skew, void **base) {
    size_t es = t == GEMM_BF16 ? 2 : 4;
    char *buf = NULL;
    cudaCheck(cudaMalloc((void **)&buf, (size_t)(n + skew) * es));
    void *host = malloc((size_t)n * es);
    for (long i = 0; i < n; i++) {
        if (t == GEMM_BF16) ((bf16_t *)host)[i] = host_to_bf16(x[i]);
        else ((float *)host)[i] = x[i];
    }
    cudaCheck(cudaMemcpy(buf + skew * es, host, (size_t)n * es, cudaMemcpyHostToDevice));
    free(host);
    *base = buf;
    return buf + skew * es;
}

static void to_float(float *out, const void *dev, long n, GemmType t) {
    size_t es = t == GEMM_BF16 ? 2 : 4;
    void *host = malloc((size_t)n * es);
    gpu_download(host, dev, (size_t)n * es);
    for (long i = 0; i < n; i++) out[i] = t == GEMM_BF16 ? host_from_bf16(((bf16_t *)host)[i]) : ((float *)host)[i];
    free(host);
}

/* CPU reference of C = op(A) op(B) (+ C), with A, B stored as the wrapper expects. */
static void reference(float *C, const float *A, const float *B, int ta, int tb, int M, int N, int K, int acc) {
    float *Ar = malloc(sizeof(float) * (size_t)M * K), *Br = malloc(sizeof(float) * (size_t)K * N);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) Ar[(size_t)m * K + k] = ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) Br[(size_t)k * N + n] = tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
    matmul_nn(C, Ar, Br, M, K, N, acc);
    free(Ar), free(Br);
}

/* got[0] within tol of ref (relative, no NaN) and got[1] the same bits; frees both. */
static void check_runs(float *got[2], const float *ref, long n, double tol, const char *what) {
    const double err = rel_error_f(got[0], ref, n);
    const long nan = count_nan(got[0], n);
    CHECK_MSG(err < tol && nan == 0, "%s: relative error %.3g, %ld NaN", what, err, nan);
    CHECK_MSG(memcmp(got[0], got[1], sizeof(float) * (size_t)n) == 0, "%s: not repeatable", what);
    free(got[0]), free(got[1]);
}

static void one_case(cublasHandle_t h, int ta, int tb, int M, int N, int K, GemmType tin, GemmType tout, int acc,
                     int skew) {
    int exact = tin == GEMM_BF16;
    float *A = random_matrix((long)M * K, exact), *B = random_matrix((long)K * N, exact);
    float *C0 = random_matrix((long)M * N, tout == GEMM_BF16), *ref = malloc(sizeof(float) * (size_t)M * N);
    memcpy(ref, C0, sizeof(float) * (size_t)M * N);
    reference(ref, A, B, ta, tb, M, N, K, acc);
    void *ba, *bb, *bc;
    void *dA = device_copy(A, (long)M * K, tin, skew, &ba), *dB = device_copy(B, (long)K * N, tin, skew, &bb);
    void *dC = device_copy(C0, (long)M * N, tout, skew, &bc);
    float *got[2];
    char what[128];
    snprintf(what, sizeof what, "gemm %dx%dx%d trans %d/%d in %s out %s acc %d skew %d", M, N, K, ta, tb,
             tin == GEMM_BF16 ? "bf16" : "f32", tout == GEMM_BF16 ? "bf16" : "f32", acc, skew);
    /* Run 0 in place (gemm_rm); run 1 from a fresh copy of C: in place again for a bf16 C, else into a
     * NaN-poisoned D (gemm_rm_out): the same bits, every element written, C left as it was. */
    gemm_rm(h, ta, tb, M, N, K, dA, tin, dB, tin, dC, tout, 1.0f, acc ? 1.0f : 0.0f);
    got[0] = malloc(sizeof(float) * (size_t)M * N);
    to_float(got[0], dC, (long)M * N, tout);
    cudaFree(bc);
    dC = device_copy(C0, (long)M * N, tout, skew, &bc);
    got[1] = malloc(sizeof(float) * (size_t)M * N);
    if (tout == GEMM_BF16) {
        gemm_rm(h, ta, tb, M, N, K, dA, tin, dB, tin, dC, tout, 1.0f, acc ? 1.0f : 0.0f);
        to_float(got[1], dC, (long)M * N, tout);
    } else {
        char *bd = NULL;
        cudaCheck(cudaMalloc((void **)&bd, (size_t)((long)M * N + skew) * 4));
        cudaCheck(cudaMemset(bd, 0xff, (size_t)((long)M * N + skew) * 4));
        float *dD = (float *)bd + skew;
        gemm_rm_out(h, ta, tb, M, N, K, dA, tin, dB, tin, dC, dD, 1.0f, acc ? 1.0f : 0.0f);
        to_float(got[1], dD, (long)M * N, GEMM_F32);
        float *c_after = malloc(sizeof(float) * (size_t)M * N);
        to_float(c_after, dC, (long)M * N, GEMM_F32);
        CHECK_MSG(memcmp(c_after, C0, sizeof(float) * (size_t)M * N) == 0, "%s: gemm_rm_out changed C", what);
        free(c_after);
        cudaFree(bd);
    }
    check_runs(got, ref, (long)M * N, tin == GEMM_BF16 || tout == GEMM_BF16 ? 1e-2 : 1e-5, what);
    cudaFree(ba), cudaFree(bb), cudaFree(bc);
    free(A), free(B), free(C0), free(ref);
}

static void test_gemm_rm(void) {
    if (!gpu_test_begin()) return;
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    const int shapes[][3] = {{1, 8, 8}, {37, 24, 40}, {128, 96, 64}, {257, 136, 72}};
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++)
            for (int acc = 0; acc < 2; acc++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                one_case(h, t & 1, t >> 1, M, N, K, GEMM_BF16, GEMM_F32, acc, 0);
                one_case(h, t & 1, t >> 1, M, N, K, GEMM_BF16, GEMM_BF16, acc, 8);
                one_case(h, t & 1, t >> 1, M, N, K, GEMM_F32, GEMM_F32, acc, 4);
            }
    cublasDestroy(h);
}

/* rows x cols of x (packed) inside rows of ld elements, the gaps set to `gap`. */
static float *widen(const float *x, int rows, int cols, int ld, float gap) {
    float *w = malloc(sizeof(float) * (size_t)rows * ld);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) w[(size_t)r * ld + c] = c < cols ? x[(size_t)r * cols + c] : gap;
    return w;
}

/* C's part of rows of ld elements, packed; counts the gap elements that are not `gap`. */
static float *narrow(const void *dev, int rows, int cols, int ld, float gap, long *gaps_changed) {
    float *w = malloc(sizeof(float) * (size_t)rows * ld), *x = malloc(sizeof(float) * (size_t)rows * cols);
    to_float(w, dev, (long)rows * ld, GEMM_F32);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) {
            const float v = w[(size_t)r * ld + c];
            if (c < cols) x[(size_t)r * cols + c] = v;
            else *gaps_changed += v != gap;
        }
    free(w);
    return x;
}

/* gemm_rm_ld: every operand inside wider rows (pads of 8 and 40 elements, A's and B's gaps NaN so a read of
 * one shows in C): C against the CPU on packed copies, C's gaps left as they were, a second run the same bits. */
static void test_gemm_ld(void) {
    if (!gpu_test_begin()) return;
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    const int M = 70, N = 48, K = 56, pads[2] = {8, 40};
    const float gap = 1234.5f;
    for (int t = 0; t < 4; t++)
        for (int acc = 0; acc < 2; acc++)
            for (int p = 0; p < 2; p++) {
                const int ta = t & 1, tb = t >> 1, pad = pads[p];
                const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                const int lda = ac + pad, ldb = bc + pad + 8, ldc = N + pad;
                float *A = random_matrix((long)M * K, 1), *B = random_matrix((long)K * N, 1);
                float *C0 = random_matrix((long)M * N, 0), *ref = malloc(sizeof(float) * (size_t)M * N);
                memcpy(ref, C0, sizeof(float) * (size_t)M * N);
                reference(ref, A, B, ta, tb, M, N, K, acc);
                float *Aw = widen(A, ar, ac, lda, NAN), *Bw = widen(B, br, bc, ldb, NAN);
                float *Cw = widen(C0, M, N, ldc, gap);
                void *ba, *bb, *bc_;
                void *dA = device_copy(Aw, (long)ar * lda, GEMM_BF16, 0, &ba);
                void *dB = device_copy(Bw, (long)br * ldb, GEMM_BF16, 0, &bb);
                char what[96];
                snprintf(what, sizeof what, "gemm_rm_ld %dx%dx%d trans %d/%d acc %d, lda %d ldb %d ldc %d", M, N, K,
                         ta, tb, acc, lda, ldb, ldc);
                float *got[2];
                long gaps_changed = 0;
                for (int run = 0; run < 2; run++) {
                    void *dC = device_copy(Cw, (long)M * ldc, GEMM_F32, 0, &bc_);
                    gemm_rm_ld(h, ta, tb, M, N, K, dA, GEMM_BF16, lda, dB, GEMM_BF16, ldb, dC, GEMM_F32, ldc, 1.0f,
                               acc ? 1.0f : 0.0f);
                    got[run] = narrow(dC, M, N, ldc, gap, &gaps_changed);
                    cudaFree(bc_);
                }
                CHECK_MSG(gaps_changed == 0, "%s: %ld elements of C's gaps written", what, gaps_changed);
                check_runs(got, ref, (long)M * N, 1e-2, what);
                cudaFree(ba), cudaFree(bb);
                free(A), free(B), free(C0), free(ref), free(Aw), free(Bw), free(Cw);
            }
    cublasDestroy(h);
}

static void test_gemm_strided(void) {
    if (!gpu_test_begin()) return;
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    const int M = 33, N = 40, K = 24, batch = 3;
    float *A = random_matrix((long)batch * M * K, 1), *B = random_matrix((long)batch * K * N, 1);
    float *ref = malloc(sizeof(float) * (size_t)batch * M * N), *got = malloc(sizeof(float) * (size_t)batch * M * N);
    for (int b = 0; b < batch; b++)
        reference(ref + (size_t)b * M * N, A + (size_t)b * M * K, B + (size_t)b * K * N, 0, 1, M, N, K, 0);
    void *ba, *bb, *bc;
    void *dA = device_copy(A, (long)batch * M * K, GEMM_BF16, 0, &ba);
    void *dB = device_copy(B, (long)batch * K * N, GEMM_BF16, 0, &bb);
    void *dC = device_copy(ref, (long)batch * M * N, GEMM_F32, 0, &bc);
    cudaCheck(cudaMemset(dC, 0xff, sizeof(float) * (size_t)batch * M * N));
    gemm_rm_strided(h, 0, 1, M, N, K, dA, GEMM_BF16, (long long)M * K, dB, GEMM_BF16, (long long)K * N, dC, GEMM_F32,
                    (long long)M * N, batch, 1.0f, 0.0f);
    to_float(got, dC, (long)batch * M * N, GEMM_F32);
    double err = rel_error_f(got, ref, (long)batch * M * N);
    CHECK_MSG(err < 1e-2 && count_nan(got, (long)batch * M * N) == 0, "strided batch: relative error %.3g", err);
    cudaFree(ba), cudaFree(bb), cudaFree(bc);
    free(A), free(B), free(ref), free(got);
    cublasDestroy(h);
}

/* gemm_rm_dynamic as the unfused MoE layer calls it: a run of problems whose M (vary == 'M') or K
 * ('K') changes from one to the next, within one grid step and across steps, each on its own slices
 * of shared buffers (so the pointers' alignments vary too), beside a fixed width `fixed` on the
 * grid or off it. Every problem against the CPU, every output element written (C poisoned when not
 * accumulating), and the run again in reverse order gives the same bits (each call sets its own
 * shape on the plan its step shares). */
static void dynamic_case(cublasHandle_t h, int ta, int tb, char vary, int fixed, GemmType tout, int acc) {
    enum { NS = 14 };
    const int sizes[NS] = {1, 5, 16, 17, 23, 24, 25, 40, 47, 48, 100, 191, 192, 193}, N = 72;
    long offs[3][NS + 1] = {{0}};
    for (int i = 0; i < NS; i++) {
        const long M = vary == 'M' ? sizes[i] : fixed, K = vary == 'K' ? sizes[i] : fixed;
        offs[0][i + 1] = offs[0][i] + M * K, offs[1][i + 1] = offs[1][i] + K * N, offs[2][i + 1] = offs[2][i] + M * N;
    }
    float *A = random_matrix(offs[0][NS], 1), *B = random_matrix(offs[1][NS], 1);
    float *C0 = random_matrix(offs[2][NS], tout == GEMM_BF16), *ref = malloc(sizeof(float) * (size_t)offs[2][NS]);
    memcpy(ref, C0, sizeof(float) * (size_t)offs[2][NS]);
    for (int i = 0; i < NS; i++) {
        const int M = vary == 'M' ? sizes[i] : fixed, K = vary == 'K' ? sizes[i] : fixed;
        reference(ref + offs[2][i], A + offs[0][i], B + offs[1][i], ta, tb, M, N, K, acc);
    }
    void *ba, *bb, *bc;
    char *dA = device_copy(A, offs[0][NS], GEMM_BF16, 0, &ba), *dB = device_copy(B, offs[1][NS], GEMM_BF16, 0, &bb);
    char *dC = device_copy(C0, offs[2][NS], tout, 0, &bc);
    const size_t ce = tout == GEMM_BF16 ? 2 : 4;
    float *got[2];
    char what[96];
    snprintf(what, sizeof what, "dynamic %c trans %d/%d fixed %d out %s acc %d", vary, ta, tb, fixed,
             tout == GEMM_BF16 ? "bf16" : "f32", acc);
    for (int run = 0; run < 2; run++) {
        if (run) cudaCheck(cudaFree(bc)), dC = device_copy(C0, offs[2][NS], tout, 0, &bc);
        if (!acc) cudaCheck(cudaMemset(dC, 0xff, ce * (size_t)offs[2][NS]));
        for (int j = 0; j < NS; j++) {
            const int i = run ? NS - 1 - j : j;
            const int M = vary == 'M' ? sizes[i] : fixed, K = vary == 'K' ? sizes[i] : fixed;
            gemm_rm_dynamic(h, ta, tb, M, N, K, dA + 2 * offs[0][i], GEMM_BF16, dB + 2 * offs[1][i], GEMM_BF16,
                            dC + ce * offs[2][i], tout, 1.0f, acc ? 1.0f : 0.0f);
        }
        got[run] = malloc(sizeof(float) * (size_t)offs[2][NS]);
        to_float(got[run], dC, offs[2][NS], tout);
    }
    check_runs(got, ref, offs[2][NS], 1e-2, what);
    cudaFree(ba), cudaFree(bb), cudaFree(bc);
    free(A), free(B), free(C0), free(ref);
}

static void test_gemm_dynamic(void) {
    if (!gpu_test_begin()) return;
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    /* the unfused layer's calls: rows x weights, dgrad against transposed weights, weight gradients (K = rows) */
    dynamic_case(h, 0, 0, 'M', 64, GEMM_BF16, 0);
    dynamic_case(h, 0, 1, 'M', 100, GEMM_F32, 0);
    dynamic_case(h, 0, 1, 'M', 64, GEMM_F32, 1);
    dynamic_case(h, 1, 0, 'K', 100, GEMM_F32, 1);
    dynamic_case(h, 1, 0, 'K', 64, GEMM_F32, 0);
    /* a changing dimension that is a leading dimension: its own plan a size */
    dynamic_case(h, 0, 0, 'K', 100, GEMM_F32, 0);
    dynamic_case(h, 1, 1, 'M', 36, GEMM_BF16, 1);
    cublasDestroy(h);
}

/* More problems than the plan table holds (gemm.c's MAX_PLANS, 1024): a problem run before the
 * table is emptied and refilled gives the same bits after, and every result stays right. */
static void test_gemm_plan_table_refill(void) {
    if (!gpu_test_begin()) return;
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    enum { M = 33, K = 40, N_MAX = 8 * 1200 };
    float *A = random_matrix((long)M * K, 1), *B = random_matrix((long)K * N_MAX, 1);
    float *ref = malloc(sizeof(float) * (size_t)M * 8), *got[2] = {malloc(sizeof(float) * (size_t)M * 8), NULL};
    void *ba, *bb, *bc;
    void *dA = device_copy(A, (long)M * K, GEMM_BF16, 0, &ba), *dB = device_copy(B, (long)K * N_MAX, GEMM_BF16, 0, &bb);
    void *dC = device_copy(B, (long)M * N_MAX, GEMM_F32, 0, &bc); /* any values: written, not read */
    for (int n = 8, i = 0; n <= N_MAX; n += 8, i++) { /* 1200 distinct problems */
        gemm_rm(h, 0, 0, M, n, K, dA, GEMM_BF16, dB, GEMM_BF16, dC, GEMM_F32, 1.0f, 0.0f);
        if (i == 0) to_float(got[0], dC, (long)M * 8, GEMM_F32);
    }
    gemm_rm(h, 0, 0, M, 8, K, dA, GEMM_BF16, dB, GEMM_BF16, dC, GEMM_F32, 1.0f, 0.0f);
    got[1] = malloc(sizeof(float) * (size_t)M * 8);
    to_float(got[1], dC, (long)M * 8, GEMM_F32);
    reference(ref, A, B, 0, 0, M, 8, K, 0); /* the N = 8 problem reads B's first K x 8 values */
    check_runs(got, ref, (long)M * 8, 1e-2, "the first problem after 1200 others");
    cudaFree(ba), cudaFree(bb), cudaFree(bc);
    free(A), free(B), free(ref);
    cublasDestroy(h);
}

/* ---------- fp32 on tensor cores (kernels/gemm_f32x3.h) ---------- */

/* The chunk rule: the router's shapes on an H200 (132 SMs; expectations from the grid of 128 x 128
 * tiles alone: 64 tiles in 2 chunks, 16 in 8 (one wave, then no gain); 1792 tiles, 13.6 waves, not
 * split; Kimi-like logits 96 tiles in 4 chunks (2.9 waves of quarter-K items: 0.75 of one whole-K
 * wave) and its router gradient 168 tiles in 3 (1.33 of 2 waves, the partials within the scratch;
 * 4 would need more); at most 16, and K / S >= 256), and for any SM count: S within bounds and the
 * partials within gpu_gemm_f32x3_scratch_bytes. No GPU needed. */
static void test_gemm_f32x3_rule(void) {
    const int h200[][4] = {{8192, 128, 2048, 2}, {2048, 128, 8192, 8},  {8192, 2048, 128, 1}, {4096, 384, 7168, 4},
                           {7168, 384, 4096, 3}, {4096, 7168, 384, 1},  {1024, 128, 8192, 16}, {256, 384, 4096, 16},
                           {64, 64, 100000, 16}, {100, 100, 300, 1}};
    for (int i = 0; i < 10; i++) {
        const int S = gpu_gemm_f32x3_chunks(h200[i][0], h200[i][1], h200[i][2], 132);
        CHECK_MSG(S == h200[i][3], "%dx%dx%d on 132 SMs: %d chunks, expected %d", h200[i][0], h200[i][1], h200[i][2],
                  S, h200[i][3]);
    }
    const int shapes[][3] = {{8192, 128, 2048}, {2048, 128, 8192}, {4096, 384, 7168}, {7168, 384, 4096},
                             {701, 128, 2048},  {2048, 128, 701},  {64, 32, 512},     {37, 23, 9000},
                             {1, 1, 100000},    {8192, 2048, 128}, {300, 256, 520},   {4096, 128, 255}};
    for (int i = 0; i < 12; i++) {
        const int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        for (int sms = 1; sms <= 256; sms++) {
            const int S = gpu_gemm_f32x3_chunks(M, N, K, sms);
            const size_t need = S > 1 ? (size_t)S * M * N * sizeof(float) : 0;
            CHECK_MSG(S >= 1 && S <= 16 && (S == 1 || K / S >= 256) && need <= gpu_gemm_f32x3_scratch_bytes(sms),
                      "%dx%dx%d on %d SMs: %d chunks, %zu bytes of %zu", M, N, K, sms, S, need,
                      gpu_gemm_f32x3_scratch_bytes(sms));
        }
    }
}

/* alpha * op(A) op(B) + beta * C in double, rounded once. */
static void reference_f64(float *C, const float *A, const float *B, int ta, int tb, int M, int N, int K, float alpha,
                          float beta) {
#pragma omp parallel for
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k]) *
                     (tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
            const double c = beta != 0 ? (double)beta * C[(size_t)m * N + n] : 0.0;
            C[(size_t)m * N + n] = (float)(alpha * s + c);
        }
}

/* How a test gives an operand: its fp32 values, with its planes too, or its bf16 values. */
enum { OP_F32, OP_PLANES, OP_BF16 };

/* Operand x (n values) on the device as `kind`, `skew` elements off alignment (the planes too,
 * from gpu_split_f32x3); bases[0..1] are what to free. */
static GemmF32x3Operand f32x3_operand(const float *x, long n, int kind, int skew, void *bases[2]) {
    bases[1] = NULL;
    if (kind == OP_BF16) return (GemmF32x3Operand){NULL, device_copy(x, n, GEMM_BF16, skew, &bases[0]), 0};
    const float *d = device_copy(x, n, GEMM_F32, skew, &bases[0]);
    if (kind == OP_F32) return (GemmF32x3Operand){d, NULL, 0};
    bf16_t *p = NULL;
    cudaCheck(cudaMalloc((void **)&p, (size_t)(3 * n + skew) * sizeof(bf16_t)));
    gpu_split_f32x3(p + skew, d, n, 0);
    bases[1] = p;
    return (GemmF32x3Operand){d, p + skew, n};
}

/* One GEMM in S chunks on kernel impl against the double reference, to fp32 accuracy (1e-5; a
 * single bf16 product would be near 3e-3), run twice from the same C: every element written (C
 * poisoned when beta == 0, the scratch always), the same bits both times; and with A's, B's and
 * both operands' planes given, the same bits again. bf16 (bit 0: A, bit 1: B): that operand's
 * values are bf16 ones, and every way of giving the operands that includes it as bf16 values
 * gives the same bits again. skew moves every pointer off alignment (the element-by-element
 * loads). */
static void f32x3_case(int impl, int ta, int tb, int M, int N, int K, int S, float alpha, float beta, int skew,
                       int bf16) {
    const long mn = (long)M * N;
    float *A = random_matrix((long)M * K, bf16 & 1), *B = random_matrix((long)K * N, bf16 & 2);
    float *C0 = random_matrix(mn, 0);
    float *ref = malloc(sizeof(float) * (size_t)mn), *got[2], *other = malloc(sizeof(float) * (size_t)mn);
    memcpy(ref, C0, sizeof(float) * (size_t)mn);
    reference_f64(ref, A, B, ta, tb, M, N, K, alpha, beta);
    void *bc, *bases[2][2];
    float *scratch = gpu_poisoned((size_t)S * mn * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "f32x3 %s %dx%dx%d trans %d/%d S %d alpha %g beta %g skew %d%s%s",
             impl == GEMM_F32X3_WGMMA ? "wgmma" : "mma", M, N, K, ta, tb, S, alpha, beta, skew,
             bf16 & 1 ? " A bf16" : "", bf16 & 2 ? " B bf16" : "");
    /* how each run gives A and B; those with bf16 values where the operand's values are bf16 ones */
    static const int forms[][2] = {{OP_F32, OP_F32},     {OP_F32, OP_F32},       {OP_PLANES, OP_F32},
                                   {OP_F32, OP_PLANES},  {OP_PLANES, OP_PLANES}, {OP_BF16, OP_F32},
                                   {OP_BF16, OP_PLANES}, {OP_F32, OP_BF16},      {OP_PLANES, OP_BF16},
                                   {OP_BF16, OP_BF16}};
    static const char *form_names[3] = {"fp32", "planes", "bf16"};
    for (int run = 0; run < (int)(sizeof forms / sizeof forms[0]); run++) {
        if ((forms[run][0] == OP_BF16 && !(bf16 & 1)) || (forms[run][1] == OP_BF16 && !(bf16 & 2))) continue;
        const GemmF32x3Operand dA = f32x3_operand(A, (long)M * K, forms[run][0], skew, bases[0]);
        const GemmF32x3Operand dB = f32x3_operand(B, (long)K * N, forms[run][1], skew, bases[1]);
        float *dC = device_copy(C0, mn, GEMM_F32, skew, &bc);
        if (beta == 0) cudaCheck(cudaMemset(dC, 0xff, sizeof(float) * (size_t)mn));
        gpu_gemm_f32x3_with(impl, ta, tb, M, N, K, dA, dB, dC, alpha, beta, S, scratch, 0);
        float *dst = run < 2 ? (got[run] = malloc(sizeof(float) * (size_t)mn)) : other;
        to_float(dst, dC, mn, GEMM_F32);
        if (run >= 2)
            CHECK_MSG(memcmp(other, got[0], sizeof(float) * (size_t)mn) == 0, "%s: A %s, B %s give other bits", what,
                      form_names[forms[run][0]], form_names[forms[run][1]]);
        cudaFree(bc);
        for (int o = 0; o < 2; o++) cudaFree(bases[o][0]), cudaFree(bases[o][1]);
    }
    check_runs(got, ref, mn, 1e-5, what);
    cudaFree(scratch);
    free(A), free(B), free(C0), free(ref), free(other);
}

/* Exact: C = op(X) @ I and C = I @ op(X) equal op(X) bit for bit (each output adds one product of
 * x's three planes with 1, and zeros), for X random over 60 binades, so that a plane, product,
 * descriptor or swizzle gone wrong shows in the last bits, which the 1e-5 tolerance would not
 * see. which: 0 puts X in A, 1 in B. planes: 3 gives both operands' planes; 4 gives both as bf16 values
 * (X rounded to bf16: one product, of the h planes). */
static void f32x3_identity_case(int impl, int which, int ta, int tb, int R, int K, int S, int planes) {
    const long rk = (long)R * K, kk = (long)K * K;
    float *X = malloc(sizeof(float) * (size_t)rk), *I = calloc((size_t)kk, sizeof(float));
    float *want = malloc(sizeof(float) * (size_t)rk), *got = malloc(sizeof(float) * (size_t)rk);
    for (long i = 0; i < rk; i++) {
        X[i] = urand() * ldexpf(1.0f, (int)(i % 61) - 30);
        if (planes & 4) X[i] = host_from_bf16(host_to_bf16(X[i]));
    }
    for (int i = 0; i < K; i++) I[(long)i * K + i] = 1.0f;
    /* which 0: C (R, K) = op(A), A = X stored (R, K), or (K, R) when ta;
     * which 1: C (K, R) = op(B), B = X stored (K, R), or (R, K) when tb */
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) {
            if (which == 0) want[(long)r * K + k] = ta ? X[(long)k * R + r] : X[(long)r * K + k];
            else want[(long)k * R + r] = tb ? X[(long)r * K + k] : X[(long)k * R + r];
        }
    void *bases[2][2];
    const int kx = planes & 4 ? OP_BF16 : planes & 1 ? OP_PLANES : OP_F32;
    const int ki = planes & 4 ? OP_BF16 : planes & 2 ? OP_PLANES : OP_F32;
    const GemmF32x3Operand dX = f32x3_operand(X, rk, kx, 0, bases[0]), dI = f32x3_operand(I, kk, ki, 0, bases[1]);
    float *scratch = gpu_poisoned((size_t)S * rk * sizeof(float)), *dC = gpu_poisoned(sizeof(float) * (size_t)rk);
    if (which == 0) gpu_gemm_f32x3_with(impl, ta, tb, R, K, K, dX, dI, dC, 1.0f, 0.0f, S, scratch, 0);
    else gpu_gemm_f32x3_with(impl, ta, tb, K, R, K, dI, dX, dC, 1.0f, 0.0f, S, scratch, 0);
    gpu_download(got, dC, sizeof(float) * (size_t)rk);
    long bad = 0;
    for (long i = 0; i < rk; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    CHECK_MSG(bad == 0, "f32x3 %s identity %s: trans %d/%d %dx%d S %d planes %d: %ld of %ld values not exact",
              impl == GEMM_F32X3_WGMMA ? "wgmma" : "mma", which ? "on the left" : "on the right", ta, tb, R, K, S,
              planes, bad, rk);
    cudaFree(dC), cudaFree(scratch);
    for (int o = 0; o < 2; o++) cudaFree(bases[o][0]), cudaFree(bases[o][1]);
    free(X), free(I), free(want), free(got);
}

static void test_gemm_f32x3(void) {
    if (!gpu_test_begin()) return;
    /* ta, tb, M, N, K, S: the router's three GEMMs scaled down (logits 0/0, weight gradient 1/0,
     * dx 0/1), the fourth layout, sizes off every tile and vector edge, chunks that do not divide
     * K, more tiles than an H200 has SMs (the persistent kernel's blocks take several), the
     * router gradient's long K, tiles of one K block each on more tiles than SMs (the Hopper
     * kernel's results then go out in consecutive K blocks); on the mma.sync kernel, and on the
     * wgmma one where this GPU has it. First the exact identity products. */
    const int cases[][6] = {{0, 0, 512, 64, 1024, 1}, {0, 0, 512, 64, 1024, 3}, {1, 0, 256, 48, 1000, 1},
                            {1, 0, 256, 48, 1000, 4}, {0, 1, 300, 256, 130, 1}, {0, 1, 300, 256, 520, 2},
                            {1, 1, 37, 23, 777, 1},   {1, 1, 37, 23, 777, 5},   {0, 0, 5, 3, 129, 1},
                            {0, 1, 64, 40, 4099, 11}, {1, 0, 130, 130, 33, 1},  {0, 0, 1, 1, 1, 1},
                            {0, 1, 4096, 640, 100, 1}, {1, 0, 1536, 1280, 320, 2}, {1, 0, 256, 128, 16384, 4},
                            {0, 0, 4096, 640, 48, 1}};
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    const int impls[2] = {GEMM_F32X3_MMA, GEMM_F32X3_WGMMA};
    for (int v = 0; v < (mok_sm90_available() ? 2 : 1); v++)
        for (int t = 0; t < 4; t++)
            for (int which = 0; which < 2; which++) {
                f32x3_identity_case(impls[v], which, t & 1, t >> 1, 200, 136, 1, 0);
                f32x3_identity_case(impls[v], which, t & 1, t >> 1, 200, 136, 2, 3);
                f32x3_identity_case(impls[v], which, t & 1, t >> 1, 200, 136, 2, 4);
            }
    for (int v = 0; v < (mok_sm90_available() ? 2 : 1); v++)
        for (int i = 0; i < n_cases; i++) {
            const int *c = cases[i];
            f32x3_case(impls[v], c[0], c[1], c[2], c[3], c[4], c[5], 1.0f, 0.0f, 0, 0);
            f32x3_case(impls[v], c[0], c[1], c[2], c[3], c[4], c[5], 1.0f, 1.0f, 0, 0);
            f32x3_case(impls[v], c[0], c[1], c[2], c[3], c[4], c[5], 0.5f, 0.75f, 1, 0);
            for (int bf16 = 1; bf16 <= 3; bf16++) {
                f32x3_case(impls[v], c[0], c[1], c[2], c[3], c[4], c[5], 1.0f, 0.0f, 0, bf16);
                f32x3_case(impls[v], c[0], c[1], c[2], c[3], c[4], c[5], 0.5f, 0.75f, 1, bf16);
            }
        }
}

/* gpu_sum_partials_f32 against the same additions on the host, bit for bit: float4 and scalar
 * paths (aligned or not out, a stride that is or is not a multiple of 4), beta 0 (out poisoned)
 * and not. */
static void test_sum_partials(void) {
    if (!gpu_test_begin()) return;
    const long n = 1003;
    const int S = 3;
    const long strides[2] = {1008, 1003};
    for (int si = 0; si < 2; si++)
        for (int skew = 0; skew < 2; skew++)
            for (int b = 0; b < 2; b++) {
                const long stride = strides[si];
                const float beta = b ? 0.5f : 0.0f;
                float *parts = random_matrix(stride * S, 0), *out0 = random_matrix(n, 0);
                float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
                for (long i = 0; i < n; i++) {
                    float acc = parts[i];
                    for (int s = 1; s < S; s++) acc += parts[(size_t)s * stride + i];
                    want[i] = beta != 0 ? fmaf(beta, out0[i], acc) : acc;
                }
                void *bp, *bo;
                float *dp = device_copy(parts, stride * S, GEMM_F32, 0, &bp);
                float *dout = device_copy(out0, n, GEMM_F32, skew, &bo);
                if (beta == 0) cudaCheck(cudaMemset(dout, 0xff, sizeof(float) * (size_t)n));
                gpu_sum_partials_f32(dout, dp, n, stride, S, beta, 0);
                to_float(got, dout, n, GEMM_F32);
                CHECK_MSG(memcmp(got, want, sizeof(float) * (size_t)n) == 0,
                          "sum of partials: stride %ld skew %d beta %g differs from the host", stride, skew, beta);
                cudaFree(bp), cudaFree(bo);
                free(parts), free(out0), free(want), free(got);
            }
}

TEST_SUITE(gpu_gemm, TEST_CASE(test_gemm_rm), TEST_CASE(test_gemm_ld), TEST_CASE(test_gemm_strided),
           TEST_CASE(test_gemm_dynamic), TEST_CASE(test_gemm_plan_table_refill), TEST_CASE(test_gemm_f32x3_rule),
           TEST_CASE(test_gemm_f32x3), TEST_CASE(test_sum_partials));
