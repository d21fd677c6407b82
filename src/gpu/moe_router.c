/* The MoE router's GEMMs (moe_router.h). */
#include "gpu/moe_router.h"

#include "../../kernels/cast.h"
#include "../../kernels/gemm_f32x3.h"
#include "gpu/device.h"

/* The partials are sized without asking a GPU (memory plans are made on hosts without one) for
 * this many multiprocessors; a GPU with more is split as if it had this many. */
#define ROUTER_MAX_SMS 256

static int sm_count(void) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    const int sms = gpu_sm_count(dev);
    return sms < ROUTER_MAX_SMS ? sms : ROUTER_MAX_SMS;
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/* The scratch: the split-K partials, then the router's planes (C x E; the backward: its bf16 values), then
 * dlogits' bf16 values (N x E). */
static size_t partial_bytes(void) { return align256(gpu_gemm_f32x3_scratch_bytes(ROUTER_MAX_SMS)); }
static size_t router_plane_bytes(int C, int E) { return align256((size_t)3 * C * E * sizeof(bf16_t)); }

size_t moe_router_scratch_bytes(int N_max, int C, int E) {
    return partial_bytes() + router_plane_bytes(C, E) + (size_t)N_max * E * sizeof(bf16_t);
}

/* x (n values) with its planes written to p. */
static GemmF32x3Operand split(const float *x, bf16_t *p, long n, cudaStream_t stream) {
    gpu_split_f32x3(p, x, n, stream);
    return (GemmF32x3Operand){x, p, n};
}

/* x's bf16 values as an operand (gemm_f32x3.h). */
static GemmF32x3Operand bf16_operand(const bf16_t *x) { return (GemmF32x3Operand){NULL, x, 0}; }

/* x (n values) rounded to bf16 into p, as an operand. */
static GemmF32x3Operand rounded(const float *x, bf16_t *p, long n, cudaStream_t stream) {
    gpu_cast_f32_to_bf16(p, x, n, stream);
    return bf16_operand(p);
}

/* One GEMM with the chunk rule on this GPU. */
static void router_gemm(int ta, int tb, int M, int N, int K, GemmF32x3Operand A, GemmF32x3Operand B, float *C,
                        float beta, char *scratch, cudaStream_t stream) {
    const int S = gpu_gemm_f32x3_chunks(M, N, K, sm_count());
    gpu_gemm_f32x3(ta, tb, M, N, K, A, B, C, 1.0f, beta, S, (float *)scratch, stream);
}

void moe_router_forward(float *logits, const bf16_t *x, const float *router, int N, int C, int E, void *scratch,
                        cudaStream_t stream) {
    char *s = scratch;
    const GemmF32x3Operand r = split(router, (bf16_t *)(s + partial_bytes()), (long)C * E, stream);
    router_gemm(0, 0, N, E, C, bf16_operand(x), r, logits, 0.0f, s, stream);
}

void moe_router_backward(float *g_router, float *dx, const float *dlogits, const bf16_t *x, const float *router, int N,
                         int C, int E, void *scratch, cudaStream_t stream) {
    if (N == 0) return;
    char *s = scratch;
    const GemmF32x3Operand r = rounded(router, (bf16_t *)(s + partial_bytes()), (long)C * E, stream);
    const GemmF32x3Operand dl =
        rounded(dlogits, (bf16_t *)(s + partial_bytes() + router_plane_bytes(C, E)), (long)N * E, stream);
    router_gemm(1, 0, C, E, N, bf16_operand(x), dl, g_router, 1.0f, s, stream);
    router_gemm(0, 1, N, C, E, dl, r, dx, 1.0f, s, stream);
}
