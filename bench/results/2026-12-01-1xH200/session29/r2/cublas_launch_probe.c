/* Probe (s29): is the unfused MoE layer's per-expert cuBLAS loop host-bound when every call sees
 * a new M (training), against the bench's repeated M? And does gemm_rm_dynamic's plan per grid
 * step remove the cost? (r1 also tried cublasGemmGroupedBatchedEx, bf16 in and out: status 15,
 * not supported.)
 * Shape: El experts on one owner, H=2048, I=768, rows per expert around `mean`. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef WITH_MOKC
#include "gpu/gemm.h"
#endif

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1); } } while (0)

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static uint64_t rs = 12345;
static double urand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (rs >> 11) * (1.0 / 9007199254740992.0); }

enum { H = 2048, I = 768 };
static int El, mean;
static cublasHandle_t hb;
static void *xr, *wg, *wu, *wd, *pg, *pu, *hh, *ye, *dy, *dh, *gwg, *gwu, *gwd, *dx;

/* row-major C(M,N) = op(A) op(B), as the project's gemm_rm */
static int use_mokc;
static void rm(int ta, int tb, int M, int N, int K, const void *A, cudaDataType_t at, const void *B, cudaDataType_t bt,
               void *C, cudaDataType_t ct, float beta) {
    float alpha = 1.0f;
#ifdef WITH_MOKC
    if (use_mokc) {
        gemm_rm_dynamic(hb, ta, tb, M, N, K, A, at == CUDA_R_16BF ? GEMM_BF16 : GEMM_F32, B,
                        bt == CUDA_R_16BF ? GEMM_BF16 : GEMM_F32, C, ct == CUDA_R_16BF ? GEMM_BF16 : GEMM_F32, 1.0f, beta);
        return;
    }
#endif
    int ldb = tb ? K : N, lda = ta ? M : K;
    CB(cublasGemmEx(hb, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, bt, ldb, A,
                    at, lda, &beta, C, ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
#define BF CUDA_R_16BF
#define F32 CUDA_R_32F
#define P(b, off, es) ((char *)(b) + (size_t)(off) * (es))

static void loop_calls(const int *off) {
    const size_t CI = (size_t)H * I;
    for (int e = 0; e < El; e++) {
        int r0 = off[e], M = off[e + 1] - r0;
        if (!M) continue;
        rm(0, 0, M, I, H, P(xr, r0 * H, 2), BF, P(wg, e * CI, 2), BF, P(pg, r0 * I, 2), BF, 0);
        rm(0, 0, M, I, H, P(xr, r0 * H, 2), BF, P(wu, e * CI, 2), BF, P(pu, r0 * I, 2), BF, 0);
    }
    for (int e = 0; e < El; e++) {
        int r0 = off[e], M = off[e + 1] - r0;
        if (!M) continue;
        rm(0, 0, M, H, I, P(hh, r0 * I, 2), BF, P(wd, e * CI, 2), BF, P(ye, r0 * H, 2), BF, 0);
    }
    for (int e = 0; e < El; e++) { /* backward, as moe_unfused_backward */
        int r0 = off[e], M = off[e + 1] - r0;
        if (!M) continue;
        rm(0, 1, M, I, H, P(dy, r0 * H, 2), BF, P(wd, e * CI, 2), BF, P(dh, r0 * I, 4), F32, 0);
        rm(1, 0, I, H, M, P(hh, r0 * I, 2), BF, P(dy, r0 * H, 2), BF, P(gwd, e * CI, 4), F32, 1);
    }
    for (int e = 0; e < El; e++) {
        int r0 = off[e], M = off[e + 1] - r0;
        if (!M) continue;
        rm(1, 0, H, I, M, P(xr, r0 * H, 2), BF, P(pg, r0 * I, 2), BF, P(gwg, e * CI, 4), F32, 1);
        rm(1, 0, H, I, M, P(xr, r0 * H, 2), BF, P(pu, r0 * I, 2), BF, P(gwu, e * CI, 4), F32, 1);
        rm(0, 1, M, H, I, P(pg, r0 * I, 2), BF, P(wg, e * CI, 2), BF, P(dx, r0 * H, 4), F32, 0);
        rm(0, 1, M, H, I, P(pu, r0 * I, 2), BF, P(wu, e * CI, 2), BF, P(dx, r0 * H, 4), F32, 1);
    }
}

static void offsets(int *off, int fresh_seed) {
    if (fresh_seed) rs = (uint64_t)fresh_seed * 2654435761u + 1;
    off[0] = 0;
    for (int e = 0; e < El; e++) {
        double u = urand() + urand() + urand() - 1.5; /* roughly normal, sd 0.5 */
        int M = (int)(mean * (1.0 + 0.6 * u));
        if (M < 1) M = 1;
        off[e + 1] = off[e] + M;
    }
}

static void fill(void *p, size_t n, int is_f32) {
    size_t bytes = n * (is_f32 ? 4 : 2);
    unsigned short *h = malloc(bytes);
    for (size_t i = 0; i < bytes / 2; i++) h[i] = is_f32 ? (unsigned short)(urand() * 65535) : (unsigned short)(0x3c00 + (int)(urand() * 256) - 128) ^ (urand() < 0.5 ? 0x8000 : 0);
    if (is_f32) for (size_t i = 1; i < bytes / 2; i += 2) h[i] = 0x3c00 + (int)(urand() * 64); /* positive smallish floats */
    CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    free(h);
}

int main(int argc, char **argv) {
    El = argc > 1 ? atoi(argv[1]) : 64;
    mean = argc > 2 ? atoi(argv[2]) : 1024;
    const int iters = 20;
    CB(cublasCreate(&hb));
    const size_t R = (size_t)El * mean * 2, CI = (size_t)H * I;
    void **bufs[] = {&xr, &ye, &dy}; for (int i = 0; i < 3; i++) CK(cudaMalloc(bufs[i], R * H * 2));
    void **bi[] = {&pg, &pu, &hh}; for (int i = 0; i < 3; i++) CK(cudaMalloc(bi[i], R * I * 2));
    CK(cudaMalloc(&dh, R * I * 4)); CK(cudaMalloc(&dx, R * H * 4));
    void **w[] = {&wg, &wu, &wd}; for (int i = 0; i < 3; i++) CK(cudaMalloc(w[i], El * CI * 2));
    void **gw[] = {&gwg, &gwu, &gwd}; for (int i = 0; i < 3; i++) CK(cudaMalloc(gw[i], El * CI * 4));
    fill(xr, R * H, 0); fill(dy, R * H, 0); fill(pg, R * I, 0); fill(pu, R * I, 0); fill(hh, R * I, 0);
    fill(wg, El * CI, 0); fill(wu, El * CI, 0); fill(wd, El * CI, 0);
    int *off = malloc((El + 1) * sizeof(int));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const char *names[] = {"cublasGemmEx, same M each iteration", "cublasGemmEx, new M each iteration",
                           "gemm_rm_dynamic, same M each iteration", "gemm_rm_dynamic, new M each iteration"};
#ifdef WITH_MOKC
    const int modes = 4;
#else
    const int modes = 2;
#endif
    for (int mode = 0; mode < modes; mode++) {
        use_mokc = mode >= 2;
        double host = 0, wall = 0; float gpu = 0;
        for (int it = -3; it < iters; it++) {
            offsets(off, mode % 2 == 0 ? 7 : 1000 * mode + it + 100);
            CK(cudaDeviceSynchronize());
            double t0 = now_us();
            CK(cudaEventRecord(e0, 0));
            loop_calls(off);
            double t1 = now_us();
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            double t2 = now_us();
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 0) { host += t1 - t0; wall += t2 - t0; gpu += ms; }
        }
        printf("%-40s El %d mean %d: host enqueue %.2f ms, wall %.2f ms, gpu %.2f ms per layer fwd+bwd (%d GEMMs)\n",
               names[mode], El, mean, host / iters / 1e3, wall / iters / 1e3, gpu / iters, 10 * El);
    }
    /* bits: loop against grouped on one fresh routing (gradients zeroed before each) */
    size_t outs_n[] = {R * I * 2, R * I * 2, R * H * 2, R * I * 4, El * CI * 4, El * CI * 4, El * CI * 4, R * H * 4};
    void *outs[] = {pg, pu, ye, dh, gwd, gwg, gwu, dx};
    const char *on[] = {"pre_gate", "pre_up", "y", "dh", "dW_down", "dW_gate", "dW_up", "dx"};
    /* pg/pu feed later GEMMs: restore them between runs */
    void *pg0, *pu0; CK(cudaMalloc(&pg0, R * I * 2)); CK(cudaMalloc(&pu0, R * I * 2));
    CK(cudaMemcpy(pg0, pg, R * I * 2, cudaMemcpyDeviceToDevice)); CK(cudaMemcpy(pu0, pu, R * I * 2, cudaMemcpyDeviceToDevice));
    offsets(off, 4242);
    void *ref[8];
#ifdef WITH_MOKC
    for (int v = 0; v < 2; v++) {
        CK(cudaMemcpy(pg, pg0, R * I * 2, cudaMemcpyDeviceToDevice)); CK(cudaMemcpy(pu, pu0, R * I * 2, cudaMemcpyDeviceToDevice));
        for (int i = 0; i < 3; i++) CK(cudaMemset(*gw[i], 0, El * CI * 4));
        CK(cudaMemset(ye, 0, R * H * 2)); CK(cudaMemset(dh, 0, R * I * 4)); CK(cudaMemset(dx, 0, R * H * 4));
        use_mokc = v;
        loop_calls(off);
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < 8; i++) {
            void *h = malloc(outs_n[i]);
            CK(cudaMemcpy(h, outs[i], outs_n[i], cudaMemcpyDeviceToHost));
            if (v == 0) ref[i] = h;
            else { size_t nd = 0, used = (i < 4 || i == 7) ? 0 : outs_n[i];
                   (void)used;
                   for (size_t j = 0; j < outs_n[i]; j++) nd += ((char *)h)[j] != ((char *)ref[i])[j];
                   printf("bits %-8s cublasGemmEx vs gemm_rm_dynamic: %zu of %zu bytes differ\n", on[i], nd, outs_n[i]); free(h); }
        }
    }
#endif
    return 0;
}
