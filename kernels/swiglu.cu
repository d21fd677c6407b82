/*
 * SwiGLU forward/backward (swiglu.h): grid-stride loops over groups of 8 elements with 16-byte
 * accesses when all pointers are 16-byte aligned, then (or otherwise) element by element.
 */
#include "swiglu.h"

#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;
constexpr long kMaxBlocks = 8192;

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int grid_for(long items) {
    long b = (items + kThreads - 1) / kThreads;
    if (b < 1) b = 1;
    return (int)(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
__device__ __forceinline__ void unpack8(float (&v)[8], uint4 u) {
    v[0] = __uint_as_float(u.x << 16);
    v[1] = __uint_as_float(u.x & 0xffff0000u);
    v[2] = __uint_as_float(u.y << 16);
    v[3] = __uint_as_float(u.y & 0xffff0000u);
    v[4] = __uint_as_float(u.z << 16);
    v[5] = __uint_as_float(u.z & 0xffff0000u);
    v[6] = __uint_as_float(u.w << 16);
    v[7] = __uint_as_float(u.w & 0xffff0000u);
}
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
    uint4 u;
    u.x = pack_bf16x2(v[0], v[1]);
    u.y = pack_bf16x2(v[2], v[3]);
    u.z = pack_bf16x2(v[4], v[5]);
    u.w = pack_bf16x2(v[6], v[7]);
    return u;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float swiglu_f(float g, float u) { return g * sigmoidf_(g) * u; }

__device__ __forceinline__ void swiglu_b(float d, float g, float u, float &dg, float &du) {
    const float s = sigmoidf_(g);
    dg = d * u * (s + g * s * (1.0f - s));
    du = d * g * s;
}

__global__ void swiglu_forward_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *gate, const __nv_bfloat16 *up, long n,
                                      int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        float g[8], u[8], o[8];
        unpack8(g, reinterpret_cast<const uint4 *>(gate)[gi]);
        unpack8(u, reinterpret_cast<const uint4 *>(up)[gi]);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = swiglu_f(g[k], u[k]);
        reinterpret_cast<uint4 *>(h)[gi] = pack8(o);
    }
    for (long i = groups * 8 + tid; i < n; i += stride)
        h[i] = __float2bfloat16_rn(swiglu_f(__bfloat162float(gate[i]), __bfloat162float(up[i])));
}

__global__ void swiglu_backward_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup, const float *dh,
                                       const __nv_bfloat16 *gate, const __nv_bfloat16 *up, long n, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        float g[8], u[8], d[8], dg[8], du[8];
        unpack8(g, reinterpret_cast<const uint4 *>(gate)[gi]);
        unpack8(u, reinterpret_cast<const uint4 *>(up)[gi]);
        const float4 d0 = reinterpret_cast<const float4 *>(dh)[2 * gi], d1 = reinterpret_cast<const float4 *>(dh)[2 * gi + 1];
        d[0] = d0.x;
        d[1] = d0.y;
        d[2] = d0.z;
        d[3] = d0.w;
        d[4] = d1.x;
        d[5] = d1.y;
        d[6] = d1.z;
        d[7] = d1.w;
#pragma unroll
        for (int k = 0; k < 8; k++) swiglu_b(d[k], g[k], u[k], dg[k], du[k]);
        reinterpret_cast<uint4 *>(dgate)[gi] = pack8(dg);
        reinterpret_cast<uint4 *>(dup)[gi] = pack8(du);
    }
    for (long i = groups * 8 + tid; i < n; i += stride) {
        float dg, du;
        swiglu_b(dh[i], __bfloat162float(gate[i]), __bfloat162float(up[i]), dg, du);
        dgate[i] = __float2bfloat16_rn(dg);
        dup[i] = __float2bfloat16_rn(du);
    }
}

} // namespace

extern "C" void gpu_swiglu_forward(bf16_t *h, const bf16_t *gate, const bf16_t *up, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(h) && aligned16(gate) && aligned16(up);
    swiglu_forward_kernel<<<grid_for(vec ? n / 8 + 8 : n), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(h), reinterpret_cast<const __nv_bfloat16 *>(gate),
        reinterpret_cast<const __nv_bfloat16 *>(up), n, vec);
    cudaCheckLaunch();
}

extern "C" void gpu_swiglu_backward(bf16_t *dgate, bf16_t *dup, const float *dh, const bf16_t *gate, const bf16_t *up,
                                    long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(dgate) && aligned16(dup) && aligned16(dh) && aligned16(gate) && aligned16(up);
    swiglu_backward_kernel<<<grid_for(vec ? n / 8 + 8 : n), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(dgate), reinterpret_cast<__nv_bfloat16 *>(dup), dh,
        reinterpret_cast<const __nv_bfloat16 *>(gate), reinterpret_cast<const __nv_bfloat16 *>(up), n, vec);
    cudaCheckLaunch();
}
