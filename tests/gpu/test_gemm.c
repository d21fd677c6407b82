/*
 * The row-major GEMM wrappers against the CPU's matmuls: every transpose combination, bf16 and
 * fp32 operands and outputs, accumulate (beta = 1), odd sizes and pointers into the middle of a
 * buffer (the cuBLASLt plans must honour their alignment), strided batches; bitwise repeatable.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "gpu/check.h"
#include "gpu/gemm.h"
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
    for (int run = 0; run < 2; run++) {
        if (run) { /* the second run starts from the same C */
            cudaFree(bc);
            dC = device_copy(C0, (long)M * N, tout, skew, &bc);
        }
        gemm_rm(h, ta, tb, M, N, K, dA, tin, dB, tin, dC, tout, 1.0f, acc ? 1.0f : 0.0f);
        got[run] = malloc(sizeof(float) * (size_t)M * N);
        to_float(got[run], dC, (long)M * N, tout);
    }
    double err = rel_error_f(got[0], ref, (long)M * N);
    double tol = tin == GEMM_BF16 || tout == GEMM_BF16 ? 1e-2 : 1e-5;
    CHECK_MSG(err < tol && count_nan(got[0], (long)M * N) == 0,
              "gemm %dx%dx%d trans %d/%d in %s out %s acc %d skew %d: relative error %.3g", M, N, K, ta, tb,
              tin == GEMM_BF16 ? "bf16" : "f32", tout == GEMM_BF16 ? "bf16" : "f32", acc, skew, err);
    CHECK_MSG(memcmp(got[0], got[1], sizeof(float) * (size_t)M * N) == 0, "gemm %dx%dx%d not repeatable", M, N, K);
    cudaFree(ba), cudaFree(bb), cudaFree(bc);
    free(A), free(B), free(C0), free(ref), free(got[0]), free(got[1]);
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

TEST_SUITE(gpu_gemm, TEST_CASE(test_gemm_rm), TEST_CASE(test_gemm_strided));
