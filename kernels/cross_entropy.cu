/*
 * Fused cross-entropy forward/backward (cross_entropy.h). Each thread keeps a running (max m,
 * sum s of exp(x - m)) over its strided elements (or, from a tile's statistics, over its strided
 * tiles' pairs); the block combines the pairs by warp butterflies and then over warps, a fixed
 * tree, so every thread ends with the same (M, S).
 */
#include "cross_entropy.h"

#include <cuda_bf16.h>
#include <math.h>

#include "device_util.cuh"

namespace {

constexpr int kMaxThreads = 1024;

/* (m, s) <- (m, s) (+) (m2, s2); commutative, so a butterfly gives every lane the same result.
 * An empty pair (s == 0, m == -inf) contributes nothing. */
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2) {
    const float M = m > m2 ? m : m2;
    const float a = s == 0.0f ? 0.0f : s * expf(m - M);
    const float b = s2 == 0.0f ? 0.0f : s2 * expf(m2 - M);
    m = M;
    s = a + b;
}

__device__ __forceinline__ void block_combine(float &m, float &s, float *red_m, float *red_s) {
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) {
        red_m[warp] = m;
        red_s[warp] = s;
    }
    __syncthreads();
    m = lane < nw ? red_m[lane] : -INFINITY;
    s = lane < nw ? red_s[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
}

template <int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_kernel(float *losses, __nv_bfloat16 *dlogits, const float *logits, const int *targets, int V,
                         float scale) {
    __shared__ float red_m[32], red_s[32];
    const long row = blockIdx.x;
    const float *x = logits + row * V;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
        float v[VEC];
        load_f32<VEC>(v, x + j);
        float mx = v[0];
#pragma unroll
        for (int k = 1; k < VEC; k++) mx = v[k] > mx ? v[k] : mx;
        if (mx > m) {
            s *= expf(m - mx); /* m = -inf at the start: s = 0 * 0 */
            m = mx;
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) s += expf(v[k] - m);
    }
    block_combine(m, s, red_m, red_s);
    const float lse = m + logf(s);
    const int target = targets[row];
    if (threadIdx.x == 0) losses[row] = lse - x[target];
    if (!dlogits) return;
    __nv_bfloat16 *d = dlogits + row * V;
    /* backwards: the row's end, read last, is the part still in L2 (the rows in flight do not all fit) */
    const int step = blockDim.x * VEC, first = threadIdx.x * VEC;
    for (int j = first < V ? first + (V - 1 - first) / step * step : -1; j >= 0; j -= step) {
        float v[VEC];
        load_f32<VEC>(v, x + j);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = (expf(v[k] - lse) - (j + k == target ? 1.0f : 0.0f)) * scale;
        store_bf16<VEC>(d + j, v);
    }
}

/* gpu_cross_entropy_coded: the row's (max, sum) from its tiles' pairs (thread t combines tiles t, t + blockDim, ...
 * in order, then the block's tree), each tile's exp offset (its maximum - lse) in shared memory, then the gradient
 * from the codes, from the row's end as above (the codes written last are the ones still in L2). VEC divides 256,
 * so VEC adjacent codes share a tile. Two blocks of 1024 threads an SM: 16-byte loads (VEC 8) keep 32 KB an SM in
 * flight, which the HBM rate needs (8-byte ones moved 3.3 TB/s, s39). */
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_coded_kernel(float *losses, __nv_bfloat16 *dlogits, const uint16_t *codes, const float *stats,
                               int tiles, const float *target_logit, const int *targets, int V, float scale) {
    extern __shared__ float offset[]; /* [tiles] */
    __shared__ float red_m[32], red_s[32];
    const long row = blockIdx.x;
    const float2 *st = reinterpret_cast<const float2 *>(stats) + row * tiles;
    float m = -INFINITY, s = 0.0f;
    for (int t = threadIdx.x; t < tiles; t += blockDim.x) {
        const float2 ms = st[t];
        combine(m, s, ms.x, ms.y);
    }
    block_combine(m, s, red_m, red_s);
    const float lse = m + logf(s);
    if (threadIdx.x == 0) losses[row] = lse - target_logit[row];
    if (!dlogits) return;
    for (int t = threadIdx.x; t < tiles; t += blockDim.x) offset[t] = st[t].x - lse;
    __syncthreads();
    const int target = targets[row];
    const uint16_t *q = codes + row * V;
    __nv_bfloat16 *d = dlogits + row * V;
    const float unit = 1.0f / (1 << MOKC_LOGIT_CODE_BITS);
    const int step = blockDim.x * VEC, first = threadIdx.x * VEC;
    for (int j = first < V ? first + (V - 1 - first) / step * step : -1; j >= 0; j -= step) {
        uint16_t c[VEC];
        if constexpr (VEC == 8) *reinterpret_cast<uint4 *>(c) = *reinterpret_cast<const uint4 *>(q + j);
        else if constexpr (VEC == 4) *reinterpret_cast<uint2 *>(c) = *reinterpret_cast<const uint2 *>(q + j);
        else c[0] = q[j];
        const float o = offset[j >> 8];
        float v[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = (expf(o - c[k] * unit) - (j + k == target ? 1.0f : 0.0f)) * scale;
        store_bf16<VEC>(d + j, v);
    }
}

} // namespace

extern "C" void gpu_cross_entropy(float *losses, bf16_t *dlogits, const float *logits, const int *targets, int rows,
                                  int V, float dloss_scale, cudaStream_t stream) {
    if (rows <= 0) return;
    const int threads = V >= 16384 ? kMaxThreads : 256;
    __nv_bfloat16 *d = reinterpret_cast<__nv_bfloat16 *>(dlogits);
    if (V % 4 == 0 && aligned(logits, 16) && (!dlogits || aligned(dlogits, 8)))
        cross_entropy_kernel<4><<<rows, threads, 0, stream>>>(losses, d, logits, targets, V, dloss_scale);
    else
        cross_entropy_kernel<1><<<rows, threads, 0, stream>>>(losses, d, logits, targets, V, dloss_scale);
    cudaCheckLaunch();
}

extern "C" void gpu_cross_entropy_coded(float *losses, bf16_t *dlogits, const uint16_t *codes, const float *stats,
                                        const float *target_logit, const int *targets, int rows, int V,
                                        float dloss_scale, cudaStream_t stream) {
    if (rows <= 0) return;
    const int threads = V >= 16384 ? kMaxThreads : 256, tiles = (V + 255) / 256;
    const size_t smem = sizeof(float) * (size_t)tiles;
    __nv_bfloat16 *d = reinterpret_cast<__nv_bfloat16 *>(dlogits);
    if (V % 8 == 0 && aligned(codes, 16) && (!dlogits || aligned(dlogits, 16)))
        cross_entropy_coded_kernel<8><<<rows, threads, smem, stream>>>(losses, d, codes, stats, tiles, target_logit,
                                                                       targets, V, dloss_scale);
    else if (V % 4 == 0 && aligned(codes, 8) && (!dlogits || aligned(dlogits, 8)))
        cross_entropy_coded_kernel<4><<<rows, threads, smem, stream>>>(losses, d, codes, stats, tiles, target_logit,
                                                                       targets, V, dloss_scale);
    else
        cross_entropy_coded_kernel<1><<<rows, threads, smem, stream>>>(losses, d, codes, stats, tiles, target_logit,
                                                                       targets, V, dloss_scale);
    cudaCheckLaunch();
}
