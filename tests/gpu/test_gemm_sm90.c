/*
 * The megakernel's Hopper tile as a grouped GEMM (kernels/mok/gemm_sm90.h) against the CPU's
 * matmul, one group at a time: M and N that are not multiples of the 128 x 256 tile (TMA
 * zero-fills past the edges; panels wholly past N are not loaded), K multiples of 8 but not of 64,
 * more M tiles than one rasterisation band, more tiles than SMs (blocks take several tiles, the
 * stage ring wraps mid-tile). The output starts poisoned (NaN), with a poisoned guard after it:
 * every element must be written and nothing past the end; a second run gives the same bits. Groups
 * of at most 176 (192) rows also run on the token-side tiles (gemm_sm90_grouped_tok, _tok192: M not a multiple of
 * 8, N past the last 192-column tile, ending inside its second or third panel, or under 64, more
 * tiles than SMs so that blocks lap the stage ring across tiles), held to the same, and every group
 * on the 192 x 192 tiles (gemm_sm90_grouped_r192: M and N past their last tile; _r192_b32, B in 32-column
 * panels: N ending inside either 96-column box or past the first, and the same bits as _r192). And
 * the same tile with the rotary embedding in its epilogue (gemm_sm90_rope) against matmul + rope, and with B K-major,
 * the rows' softmax statistics a tile, the logits' codes and the target logits (gemm_sm90_logits) against matmul_nt.
 * Skipped without an SM 9.0 GPU and a build for sm_90a.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/mok/gemm_sm90.h"
#include "../../kernels/mok/mok.h"
#include "../../kernels/rope.h"
#include "cpu/ops.h"
#include "gpu_test.h"

#define GUARD 4096 /* poisoned elements after C */

typedef void (*GroupedGemm)(bf16_t *, const bf16_t *, const bf16_t *, int, int, int, int, cudaStream_t);

/* One implementation on one shape, twice into the poisoned C: every element near ref, none past the
 * end written, the same bits both times. */
static void check_impl(const char *name, GroupedGemm gemm, const bf16_t *dA, const bf16_t *dB, const float *ref,
                       int G, int M, int N, int K) {
    const long nC = (long)G * M * N;
    const size_t bytes = (size_t)(nC + GUARD) * sizeof(bf16_t);
    bf16_t *dC = gpu_poisoned(bytes), *run[2];
    for (int r = 0; r < 2; r++) {
        if (r) cudaCheck(cudaMemset(dC, 0xff, bytes));
        gemm(dC, dA, dB, G, M, N, K, 0);
        run[r] = mallocCheck(bytes);
        gpu_download(run[r], dC, bytes);
    }
    float *got = callocCheck((size_t)nC, sizeof(float));
    for (long i = 0; i < nC; i++) got[i] = host_from_bf16(run[0][i]);
    long guard_hit = 0;
    for (long i = nC; i < nC + GUARD; i++) guard_hit += run[0][i] != 0xffff;
    const double err = rel_error_f(got, ref, nC);
    const long nan = count_nan(got, nC);
    CHECK_MSG(nan == 0 && err < 1e-2, "%s %d x (%d x %d x %d): relative error %.3g, %ld elements unwritten", name, G, M,
              N, K, err, nan);
    CHECK_MSG(guard_hit == 0, "%s %d x (%d x %d x %d): %ld elements written past C", name, G, M, N, K, guard_hit);
    CHECK_MSG(memcmp(run[0], run[1], (size_t)nC * sizeof(bf16_t)) == 0,
              "%s %d x (%d x %d x %d): not bitwise repeatable", name, G, M, N, K);
    cudaCheck(cudaFree(dC));
    free(got), free(run[0]), free(run[1]);
}

/* Two implementations that run the same products on the same values: the same bits. */
static void same_bits(const char *name, GroupedGemm gemm, const char *ref_name, GroupedGemm ref_gemm,
                      const bf16_t *dA, const bf16_t *dB, int G, int M, int N, int K) {
    const size_t bytes = (size_t)G * M * N * sizeof(bf16_t);
    bf16_t *dC[2], *got[2];
    for (int i = 0; i < 2; i++) {
        dC[i] = gpu_poisoned(bytes);
        (i ? ref_gemm : gemm)(dC[i], dA, dB, G, M, N, K, 0);
        got[i] = mallocCheck(bytes);
        gpu_download(got[i], dC[i], bytes);
        cudaCheck(cudaFree(dC[i]));
    }
    CHECK_MSG(memcmp(got[0], got[1], bytes) == 0, "%s %d x (%d x %d x %d): not the same bits as %s", name, G, M, N, K,
              ref_name);
    free(got[0]), free(got[1]);
}

static void one_case(int G, int M, int N, int K) {
    const long nA = (long)G * M * K, nB = (long)G * K * N, nC = (long)G * M * N;
    float *A = gpu_rand_array(nA, 1.0f, 1), *B = gpu_rand_array(nB, 1.0f, 1);
    float *ref = callocCheck((size_t)nC, sizeof(float));
    for (int g = 0; g < G; g++)
        matmul_nn(ref + (long)g * M * N, A + (long)g * M * K, B + (long)g * K * N, M, K, N, 0);
    bf16_t *dA = gpu_upload_bf16(A, nA), *dB = gpu_upload_bf16(B, nB);
    check_impl("gemm_sm90", gemm_sm90_grouped, dA, dB, ref, G, M, N, K);
    if (M <= 176) check_impl("gemm_sm90_tok", gemm_sm90_grouped_tok, dA, dB, ref, G, M, N, K);
    if (M <= 192) check_impl("gemm_sm90_tok192", gemm_sm90_grouped_tok192, dA, dB, ref, G, M, N, K);
    check_impl("gemm_sm90_r192", gemm_sm90_grouped_r192, dA, dB, ref, G, M, N, K);
    check_impl("gemm_sm90_r192_b32", gemm_sm90_grouped_r192_b32, dA, dB, ref, G, M, N, K);
    same_bits("gemm_sm90_r192_b32", gemm_sm90_grouped_r192_b32, "gemm_sm90_r192", gemm_sm90_grouped_r192, dA, dB, G,
              M, N, K);
    cudaCheck(cudaFree(dA)), cudaCheck(cudaFree(dB));
    free(A), free(B), free(ref);
}

static void test_gemm_sm90_grouped(void) {
    if (!gpu_test_begin()) return;
    if (!mok_sm90_available()) {
        test_skip("the mok Hopper tile needs an SM 9.0 GPU and a build for sm_90a");
        return;
    }
    gpu_rng_seed(9);
    /* groups, M, N, K */
    const int shapes[][4] = {{1, 1, 8, 8},        {3, 200, 136, 72},  {2, 129, 264, 200}, {2, 2100, 264, 64},
                             {40, 130, 520, 136}, {1, 300, 1000, 1096}, {6, 170, 392, 712}, {2, 176, 128, 64},
                             {3, 37, 40, 520},    {60, 24, 400, 72},
                             {300, 40, 392, 200}, {5, 185, 392, 136}, {2, 192, 200, 72},
                             {4, 150, 480, 264},  {2, 100, 224, 128}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        one_case(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
}

/* gemm_sm90_rope: the projection of (B x T) rows into H heads of D and the rotary embedding in its
 * epilogue, against the CPU's matmul then rope_apply. T not a tile multiple (positions wrap inside
 * a tile), heads of 64 and 128, N past the last 256-column tile, K not a multiple of 64; poisoned
 * output, every element written, bitwise repeatable. */
static void rope_case(int B, int T, int H, int D, int K) {
    const int M = B * T, N = H * D;
    const float theta = 10000.0f;
    float *A = gpu_rand_array((long)M * K, 1.0f, 1), *W = gpu_rand_array((long)K * N, 1.0f, 1);
    float *ref = callocCheck((size_t)M * N, sizeof(float)), *got = callocCheck((size_t)M * N, sizeof(float));
    matmul_nn(ref, A, W, M, K, N, 0);
    rope_apply(ref, B, T, H, D, theta, 0);
    bf16_t *dA = gpu_upload_bf16(A, (long)M * K), *dW = gpu_upload_bf16(W, (long)K * N);
    float *table = NULL;
    cudaCheck(cudaMalloc((void **)&table, sizeof(float) * (size_t)gpu_rope_table_floats(T, D)));
    gpu_rope_table_init(table, T, D, theta, 0);
    const size_t bytes = (size_t)M * N * sizeof(bf16_t);
    bf16_t *dC = gpu_poisoned(bytes), *run[2];
    for (int r = 0; r < 2; r++) {
        if (r) cudaCheck(cudaMemset(dC, 0xff, bytes));
        gemm_sm90_rope(dC, dA, dW, M, N, K, table, T, D, 0);
        run[r] = mallocCheck(bytes);
        gpu_download(run[r], dC, bytes);
    }
    for (long i = 0; i < (long)M * N; i++) got[i] = host_from_bf16(run[0][i]);
    const double err = rel_error_f(got, ref, (long)M * N);
    const long nan = count_nan(got, (long)M * N);
    CHECK_MSG(nan == 0 && err < 1e-2, "gemm_sm90_rope B=%d T=%d H=%d D=%d K=%d: relative error %.3g, %ld unwritten", B,
              T, H, D, K, err, nan);
    CHECK_MSG(memcmp(run[0], run[1], bytes) == 0, "gemm_sm90_rope B=%d T=%d H=%d D=%d: not bitwise repeatable", B, T,
              H, D);
    cudaCheck(cudaFree(dA)), cudaCheck(cudaFree(dW)), cudaCheck(cudaFree(dC)), cudaCheck(cudaFree(table));
    free(A), free(W), free(ref), free(got), free(run[0]), free(run[1]);
}

static void test_gemm_sm90_rope(void) {
    if (!gpu_test_begin()) return;
    if (!mok_sm90_available()) {
        test_skip("the mok Hopper tile needs an SM 9.0 GPU and a build for sm_90a");
        return;
    }
    gpu_rng_seed(10);
    rope_case(3, 77, 5, 64, 200);   /* N = 320: a second, partial column tile */
    rope_case(2, 300, 3, 128, 136); /* positions past one 128-row tile */
    rope_case(1, 1, 2, 128, 64);
    const char *why = NULL;
    CHECK(gemm_sm90_rope_ok(4096, 2048, 2048, 128, &why));
    CHECK(!gemm_sm90_rope_ok(4096, 2000, 2048, 80, &why) && strstr(why, "head dim"));
    CHECK(!gemm_sm90_rope_ok(4096, 2080, 2048, 64, &why) && strstr(why, "whole number of heads"));
}

/* gemm_sm90_logits: A (M x K) @ B^T (B N x K, K-major as the LM head's weights) against the CPU's matmul_nt in fp32:
 * each row's statistics a 256-column tile (the maximum within 1e-5 relative, the sum of exp within 1e-4), each code
 * decoding to its logit within 2^-12 + 1e-5 relative (or, at the largest code, the logit at least that far below
 * the maximum), the target logits within 1e-5. Rows shifted by +-40, and columns of B scaled so that a tile spans
 * more than 32 (some codes clamped, which must happen). Two runs into outputs poisoned differently (the codes first
 * with zero bytes, then with 0xff ones; statistics and target logits NaN) give the same bits: every element
 * written, and repeatably; a guard after each output stays poisoned. */
static void logits_case(int M, int N, int K) {
    const int T = gemm_sm90_logits_tiles(N);
    CHECK_EQ_INT(T, (N + 255) / 256);
    float *A = gpu_rand_array((long)M * K, 1.0f, 1), *B = gpu_rand_array((long)N * K, 1.0f, 1);
    for (int m = 0; m < M; m++) A[(long)m * K] = m % 3 == 1 ? 40.0f : (m % 3 == 2 ? -40.0f : A[(long)m * K]);
    for (int n = 0; n < N; n++) B[(long)n * K] = 1.0f; /* A's column 0 shifts the whole row */
    for (int n = 5; n < N && K > 1; n += 37) B[(long)n * K + 1] = 40.0f; /* spreads a tile past 32: clamped codes */
    int *tgt = mallocCheck((size_t)M * sizeof(int));
    for (int m = 0; m < M; m++) tgt[m] = (int)(((long)m * 7919 + 13) % N);
    float *ref = callocCheck((size_t)M * N, sizeof(float));
    matmul_nt(ref, A, B, M, K, N, 0);
    bf16_t *dA = gpu_upload_bf16(A, (long)M * K), *dB = gpu_upload_bf16(B, (long)N * K);
    int *dT = gpu_upload(tgt, (size_t)M * sizeof(int));
    const long nC = (long)M * N, nS = (long)M * T * 2;
    const size_t cb = (size_t)(nC + GUARD) * 2, sb = (size_t)(nS + GUARD) * 4, tb = (size_t)(M + GUARD) * 4;
    uint16_t *dC = gpu_poisoned(cb), *c[2];
    float *dS = gpu_poisoned(sb), *dL = gpu_poisoned(tb), *st[2], *tl[2];
    for (int r = 0; r < 2; r++) {
        cudaCheck(cudaMemset(dC, r ? 0xff : 0, cb)), cudaCheck(cudaMemset(dS, 0xff, sb));
        cudaCheck(cudaMemset(dL, 0xff, tb));
        gemm_sm90_logits(dC, dS, dL, dT, dA, dB, M, N, K, 0);
        c[r] = mallocCheck(cb), st[r] = mallocCheck(sb), tl[r] = mallocCheck(tb);
        gpu_download(c[r], dC, cb), gpu_download(st[r], dS, sb), gpu_download(tl[r], dL, tb);
    }
    long guard = 0;
    for (long i = 0; i < GUARD; i++) guard += c[1][nC + i] != 0xffff || !isnan(st[0][nS + i]) || !isnan(tl[0][M + i]);
    CHECK_MSG(guard == 0, "gemm_sm90_logits %d x %d x %d: %ld elements written past an output", M, N, K, guard);
    CHECK_MSG(memcmp(c[0], c[1], (size_t)nC * 2) == 0 && memcmp(st[0], st[1], (size_t)nS * 4) == 0 &&
                  memcmp(tl[0], tl[1], (size_t)M * 4) == 0,
              "gemm_sm90_logits %d x %d x %d: codes unwritten or the two runs differ", M, N, K);
    const long nan = count_nan(st[0], nS) + count_nan(tl[0], M);
    double worst_m = 0, worst_s = 0, worst_code = 0, worst_t = 0;
    long clamped = 0;
    for (int m = 0; m < M && nan == 0; m++) {
        const float *x = ref + (long)m * N;
        worst_t = fmax(worst_t, fabs(tl[0][m] - x[tgt[m]]) / fmax(1.0, fabs(x[tgt[m]])));
        for (int t = 0; t < T; t++) {
            float mx;
            int n1;
            const double sum = host_tile_stats(x, N, t, &mx, &n1);
            const float *got = st[0] + 2 * ((long)m * T + t);
            worst_m = fmax(worst_m, fabs(got[0] - mx) / fmax(1.0, fabs(mx)));
            worst_s = fmax(worst_s, fabs(got[1] - sum) / sum);
            for (int n = 256 * t; n < n1; n++) {
                const unsigned q = c[0][(long)m * N + n];
                clamped += q == 65535;
                const double dec = got[0] - q / 2048.0, tol = 1.0 / 4096 + 1e-5 * fmax(1.0, fabs(x[n]));
                /* the largest code: the logit that far below the maximum or further (clamped) */
                const double off = q == 65535 ? (x[n] > dec + tol ? 2.0 : 0.0) : fabs(dec - x[n]) / tol;
                worst_code = fmax(worst_code, off);
            }
        }
    }
    CHECK_MSG(nan == 0 && worst_m < 1e-5 && worst_s < 1e-4 && worst_code <= 1.0 && worst_t < 1e-5,
              "gemm_sm90_logits %d x %d x %d: %ld NaN statistics or target logits; worst: tile maximum %.3g, sum "
              "of exp %.3g, code %.3g of its tolerance, target logit %.3g", M, N, K, nan, worst_m, worst_s, worst_code,
              worst_t);
    CHECK_MSG(nan != 0 || K < 2 || clamped > 0,
              "gemm_sm90_logits %d x %d x %d: no code at its largest: the clamp untested", M, N, K);
    cudaCheck(cudaFree(dA)), cudaCheck(cudaFree(dB)), cudaCheck(cudaFree(dT)), cudaCheck(cudaFree(dC));
    cudaCheck(cudaFree(dS)), cudaCheck(cudaFree(dL));
    free(A), free(B), free(tgt), free(ref);
    for (int r = 0; r < 2; r++) free(c[r]), free(st[r]), free(tl[r]);
}

static void test_gemm_sm90_logits(void) {
    if (!gpu_test_begin()) return;
    if (!mok_sm90_available()) {
        test_skip("the mok Hopper tile needs an SM 9.0 GPU and a build for sm_90a");
        return;
    }
    gpu_rng_seed(11);
    logits_case(200, 1000, 72);  /* M, N past their last tiles; one K block and a tail */
    logits_case(130, 8, 136);    /* a tile of 8 columns */
    logits_case(2100, 520, 200); /* more M tiles than a rasterisation band, more tiles than SMs */
    logits_case(64, 151936, 64); /* the vocabulary of Qwen3: 594 column tiles, the last half full */
}

static void test_gemm_sm90_shapes(void) {
    const char *why = NULL;
    CHECK(gemm_sm90_shape_ok(64, 1024, 1536, 2048, &why) && why == NULL);
    CHECK(!gemm_sm90_shape_ok(1, 128, 100, 64, &why) && strstr(why, "N must"));
    CHECK(!gemm_sm90_shape_ok(1, 128, 256, 60, &why) && strstr(why, "K must"));
    CHECK(!gemm_sm90_shape_ok(0, 128, 256, 64, &why) && strstr(why, "at least 1"));
    CHECK(!gemm_sm90_shape_ok(1 << 20, 1 << 20, 1 << 20, 64, &why) && strstr(why, "2^31"));
}

TEST_SUITE(gpu_gemm_sm90, TEST_CASE(test_gemm_sm90_grouped), TEST_CASE(test_gemm_sm90_rope),
           TEST_CASE(test_gemm_sm90_logits), TEST_CASE(test_gemm_sm90_shapes));
