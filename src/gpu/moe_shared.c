/* The MoE layer's shared experts on the GPU (moe_shared.h). */
#include "gpu/moe_shared.h"

#include "../../kernels/swiglu.h"
#include "gpu/gemm.h"

void moe_shared_scratch_add(GpuBufList *l, MoeSharedScratch *s, size_t T, size_t SI) {
    gpu_buf_add(l, &s->h, T * SI * 2);
    gpu_buf_add(l, &s->dh, T * SI * 4);
    gpu_buf_add(l, &s->dgate, T * SI * 2);
    gpu_buf_add(l, &s->dup, T * SI * 2);
}

void moe_shared_forward(cublasHandle_t blas, float *y, bf16_t *s_gate, bf16_t *s_up, const bf16_t *x_bf16,
                        const MoeGpuWeights *wt, const MoeSharedScratch *s, int N, int C, int SI, cudaStream_t stream) {
    if (SI == 0 || N == 0) return;
    gemm_rm(blas, 0, 0, N, SI, C, x_bf16, GEMM_BF16, wt->shared_gate, GEMM_BF16, s_gate, GEMM_BF16, 1.0f, 0.0f);
    gemm_rm(blas, 0, 0, N, SI, C, x_bf16, GEMM_BF16, wt->shared_up, GEMM_BF16, s_up, GEMM_BF16, 1.0f, 0.0f);
    gpu_swiglu_forward(s->h, s_gate, s_up, (long)N * SI, stream);
    gemm_rm(blas, 0, 0, N, C, SI, s->h, GEMM_BF16, wt->shared_down, GEMM_BF16, y, GEMM_F32, 1.0f, 0.0f);
}

int moe_shared_backward(cublasHandle_t blas, float *dx, const MoeGpuGrads *g, const bf16_t *dy_bf16,
                        const bf16_t *x_bf16, const MoeGpuWeights *wt, const bf16_t *s_gate, const bf16_t *s_up,
                        const MoeSharedScratch *s, int N, int C, int SI, cudaStream_t stream) {
    if (SI == 0 || N == 0) return 0;
    gpu_swiglu_forward(s->h, s_gate, s_up, (long)N * SI, stream); /* h again: the forward's was overwritten */
    gemm_rm(blas, 0, 1, N, SI, C, dy_bf16, GEMM_BF16, wt->shared_down, GEMM_BF16, s->dh, GEMM_F32, 1.0f, 0.0f);
    gemm_rm(blas, 1, 0, SI, C, N, s->h, GEMM_BF16, dy_bf16, GEMM_BF16, g->shared_down, GEMM_F32, 1.0f, 1.0f);
    gpu_swiglu_backward(s->dgate, s->dup, s->dh, s_gate, s_up, (long)N * SI, stream);
    gemm_rm(blas, 1, 0, C, SI, N, x_bf16, GEMM_BF16, s->dgate, GEMM_BF16, g->shared_gate, GEMM_F32, 1.0f, 1.0f);
    gemm_rm(blas, 1, 0, C, SI, N, x_bf16, GEMM_BF16, s->dup, GEMM_BF16, g->shared_up, GEMM_F32, 1.0f, 1.0f);
    gemm_rm(blas, 0, 1, N, C, SI, s->dgate, GEMM_BF16, wt->shared_gate, GEMM_BF16, dx, GEMM_F32, 1.0f, 0.0f);
    gemm_rm(blas, 0, 1, N, C, SI, s->dup, GEMM_BF16, wt->shared_up, GEMM_BF16, dx, GEMM_F32, 1.0f, 1.0f);
    return 1;
}
