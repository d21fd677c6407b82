/* s33 r1 probe: the attention's q, k, v input gradient as today's three cuBLASLt GEMMs (K = 4096, then 512 and 512
 * adding into the fp32 result) against one K = 5120 GEMM, through mokc's gemm_rm (the same plans), at the token
 * counts of a micro-batch on one GPU (16384) and at EP2 (8192). Median of 30 after 5 warm-up calls. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/gemm.h"

static int cmp(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static void fill(void *dev, size_t n) {
    unsigned short *h = malloc(n * 2);
    unsigned x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = (float)(x >> 8) / 8388608.0f - 1.0f;
        unsigned u = *(unsigned *)&f;
        h[i] = (unsigned short)(u >> 16);
    }
    cudaMemcpy(dev, h, n * 2, cudaMemcpyHostToDevice);
    free(h);
}

int main(void) {
    const int C = 2048, QD = 4096, KD = 512, K = QD + 2 * KD;
    cublasHandle_t h;
    cublasCreate(&h);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cublasSetStream(h, s);
    for (int N = 16384; N >= 8192; N /= 2) {
        void *a, *w, *c;
        cudaMalloc(&a, (size_t)N * K * 2), cudaMalloc(&w, (size_t)C * K * 2), cudaMalloc(&c, (size_t)N * C * 4);
        fill(a, (size_t)N * K), fill(w, (size_t)C * K); /* random bf16 in [-1, 1): the power drawn is a real one's */
        char *dq = a, *dk = dq + (size_t)N * QD * 2, *dv = dk + (size_t)N * KD * 2;
        char *wq = w, *wk = wq + (size_t)C * QD * 2, *wv = wk + (size_t)C * KD * 2;
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        for (int form = 0; form < 2; form++) {
            float ms[30];
            for (int it = -5; it < 30; it++) {
                cudaEventRecord(e0, s);
                if (form == 0) {
                    gemm_rm(h, 0, 1, N, C, QD, dq, GEMM_BF16, wq, GEMM_BF16, c, GEMM_F32, 1, 0);
                    gemm_rm(h, 0, 1, N, C, KD, dk, GEMM_BF16, wk, GEMM_BF16, c, GEMM_F32, 1, 1);
                    gemm_rm(h, 0, 1, N, C, KD, dv, GEMM_BF16, wv, GEMM_BF16, c, GEMM_F32, 1, 1);
                } else {
                    gemm_rm(h, 0, 1, N, C, K, a, GEMM_BF16, w, GEMM_BF16, c, GEMM_F32, 1, 0);
                }
                cudaEventRecord(e1, s);
                cudaEventSynchronize(e1);
                if (it >= 0) cudaEventElapsedTime(&ms[it], e0, e1);
            }
            qsort(ms, 30, sizeof ms[0], cmp);
            printf("{\"probe\": \"qkv_dgrad\", \"tokens\": %d, \"form\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, "
                   "\"tflops\": %.1f}\n", N, form ? "one K=5120" : "three (4096 + 512 + 512)", ms[15], ms[0],
                   2.0 * N * C * K / (ms[15] * 1e9));
        }
        cudaFree(a), cudaFree(w), cudaFree(c);
    }
    return cudaDeviceSynchronize() != cudaSuccess;
}
