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
 * the same tile with the rotary embedding in its epilogue (gemm_sm90_rope) against matmul + rope.
 * Skipped without an SM 9.0 GPU and a build for sm_90a.
 */
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

static void test_gemm_sm90_shapes(void) {
    const char *why = NULL;
    CHECK(gemm_sm90_shape_ok(64, 1024, 1536, 2048, &why) && why == NULL);
    CHECK(!gemm_sm90_shape_ok(1, 128, 100, 64, &why) && strstr(why, "N must"));
    CHECK(!gemm_sm90_shape_ok(1, 128, 256, 60, &why) && strstr(why, "K must"));
    CHECK(!gemm_sm90_shape_ok(0, 128, 256, 64, &why) && strstr(why, "at least 1"));
    CHECK(!gemm_sm90_shape_ok(1 << 20, 1 << 20, 1 << 20, 64, &why) && strstr(why, "2^31"));
}

TEST_SUITE(gpu_gemm_sm90, TEST_CASE(test_gemm_sm90_grouped), TEST_CASE(test_gemm_sm90_rope),
           TEST_CASE(test_gemm_sm90_shapes));
