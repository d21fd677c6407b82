// s26 r5 probe: for mokc-small's cuBLASLt GEMM shapes (row-major, as src/gpu/gemm.c maps them), time the
// heuristic's first 8 algorithms with no workspace and with 32 MiB, and print each one's time and TFLOP/s.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("cuda %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t e = (x); if (e != CUBLAS_STATUS_SUCCESS) { printf("cublas %d line %d\n", (int)e, __LINE__); exit(1); } } while (0)

struct Shape { const char *name; int ta, tb, M, N, K; bool c32, beta; int calls; };

__global__ void fill(unsigned short *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = (unsigned short)(0x3c00u + (h & 0x1ff)) ^ ((h >> 16) & 0x8000u); // +-[2^-7, 2^-6)
    }
}

int main() {
    const int N = 8192, C = 2048, QD = 4096, KD = 512, I = 6144, V = 151936, R = 2048; (void)R;
    Shape shapes[] = {
        {"head logits 1024", 0, 1, 1024, V, C, true, false, 32},
        {"head logits 1536", 0, 1, 1536, V, C, true, false, 24},
        {"head logits 2048", 0, 1, 2048, V, C, true, false, 16},
        {"head logits 2176", 0, 1, 2176, V, C, true, false, 16},
        {"head logits 2560", 0, 1, 2560, V, C, true, false, 13},
        {"head logits 2688", 0, 1, 2688, V, C, true, false, 13},
        {"head logits 4096", 0, 1, 4096, V, C, true, false, 8},
        {"head dgrad", 0, 0, N, C, V, true, false, 4},
        {"head wgrad", 1, 0, V, C, N, true, true, 4},
    };
    cublasLtHandle_t lt; BK(cublasLtCreate(&lt));
    size_t maxa = (size_t)N * V, big = maxa;
    unsigned short *A, *B; float *Cf; void *ws;
    CK(cudaMalloc(&A, big * 2)); CK(cudaMalloc(&B, big * 2)); CK(cudaMalloc(&Cf, (size_t)V * C * 4 > (size_t)N * V * 2 ? (size_t)V * C * 4 : (size_t)N * V * 2));
    CK(cudaMalloc(&ws, 32 << 20));
    fill<<<4096, 256>>>(A, big, 1); fill<<<4096, 256>>>(B, big, 2);
    CK(cudaMemset(Cf, 0, (size_t)V * C * 4));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    printf("%-16s %3s %4s %9s %7s  %s\n", "shape", "ws", "algo", "ms", "TFLOP/s", "(algo 0, ws 0 = what mokc runs)");
    for (const Shape &s : shapes) {
        cublasOperation_t opb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasLtMatmulDesc_t d; BK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb));
        BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa));
        int b_rows = s.tb ? s.K : s.N, b_cols = s.tb ? s.N : s.K, a_rows = s.ta ? s.M : s.K, a_cols = s.ta ? s.K : s.M;
        cublasLtMatrixLayout_t la, lb, lc;
        BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, b_rows, b_cols, b_rows));
        BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a_rows, a_cols, a_rows));
        BK(cublasLtMatrixLayoutCreate(&lc, s.c32 ? CUDA_R_32F : CUDA_R_16BF, s.N, s.M, s.N));
        double flop = 2.0 * s.M * s.N * s.K;
        for (int wsi = 0; wsi < 1; wsi++) {
            uint64_t wsb = wsi ? (32u << 20) : 0;
            cublasLtMatmulPreference_t pref; BK(cublasLtMatmulPreferenceCreate(&pref));
            BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
            cublasLtMatmulHeuristicResult_t res[8]; int found = 0;
            BK(cublasLtMatmulAlgoGetHeuristic(lt, d, lb, la, lc, lc, pref, 8, res, &found));
            float alpha = 1, beta = s.beta ? 1.f : 0.f;
            size_t outb = (size_t)s.M * s.N * (s.c32 ? 4 : 2);
            static unsigned char *ref = NULL, *cur = NULL;
            if (!ref) { ref = (unsigned char *)malloc((size_t)1600 << 20); cur = (unsigned char *)malloc((size_t)1600 << 20); }
            for (int i = 0; i < found; i++) {
                int tile = -1, stages = -1, splitk = -1, swz = -1, cluster = -1; size_t w;
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
                printf("    algo %d: tile %d stages %d splitk %d swizzle %d cluster %d\n", i, tile, stages, splitk, swz, cluster);
                std::vector<float> t;
                for (int it = 0; it < 13; it++) {
                    cudaEventRecord(e0);
                    cublasStatus_t st = cublasLtMatmul(lt, d, &alpha, B, lb, A, la, &beta, Cf, lc, Cf, lc, &res[i].algo, ws, wsb, 0);
                    cudaEventRecord(e1); cudaEventSynchronize(e1);
                    if (st != CUBLAS_STATUS_SUCCESS) { t.clear(); break; }
                    float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms);
                }
                if (t.empty()) { printf("%-16s %3d %4d failed\n", s.name, wsi ? 32 : 0, i); continue; }
                const char *same = "-";
                if (!s.beta && outb <= ((size_t)1600 << 20)) {
                    CK(cudaMemcpy(i == 0 ? ref : cur, Cf, outb, cudaMemcpyDeviceToHost));
                    same = i == 0 ? "ref" : (memcmp(ref, cur, outb) == 0 ? "bits equal to algo 0" : "bits DIFFER from algo 0");
                }
                std::sort(t.begin(), t.end());
                float med = t[t.size() / 2];
                printf("%-16s %3d %4d %9.4f %7.1f  x%d a step: %.2f ms  %s\n", s.name, wsi ? 32 : 0, i, med, flop / med / 1e9, s.calls, med * s.calls, same);
            }
            cublasLtMatmulPreferenceDestroy(pref);
        }
        CK(cudaDeviceSynchronize());
    }
    return 0;
}
