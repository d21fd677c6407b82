/*
 * SwiGLU forward/backward (swiglu.h): grid-stride loops over groups of 8 elements with 16-byte
 * accesses when all pointers are 16-byte aligned, then (or otherwise) element by element.
 */
#include "swiglu.h"

#include <cuda_bf16.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_forward_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *gate, const __nv_bfloat16 *up, long n,
                                      int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        float g[8], u[8], o[8];
        unpack_bf16x8(g, reinterpret_cast<const uint4 *>(gate)[gi]);
        unpack_bf16x8(u, reinterpret_cast<const uint4 *>(up)[gi]);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = silu_mul_f32(g[k], u[k]);
        reinterpret_cast<uint4 *>(h)[gi] = pack_bf16x8(o);
    }
    for (long i = groups * 8 + tid; i < n; i += stride)
        h[i] = __float2bfloat16_rn(silu_mul_f32(__bfloat162float(gate[i]), __bfloat162float(up[i])));
}

__global__ void swiglu_backward_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup, const float *dh,
                                       const __nv_bfloat16 *gate, const __nv_bfloat16 *up, long n, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        float g[8], u[8], d[8], dg[8], du[8];
        unpack_bf16x8(g, reinterpret_cast<const uint4 *>(gate)[gi]);
        unpack_bf16x8(u, reinterpret_cast<const uint4 *>(up)[gi]);
        load_f32<8>(d, dh + 8 * gi);
#pragma unroll
        for (int k = 0; k < 8; k++) swiglu_backward_f32(d[k], g[k], u[k], dg[k], du[k]);
        reinterpret_cast<uint4 *>(dgate)[gi] = pack_bf16x8(dg);
        reinterpret_cast<uint4 *>(dup)[gi] = pack_bf16x8(du);
    }
    for (long i = groups * 8 + tid; i < n; i += stride) {
        float dg, du;
        swiglu_backward_f32(dh[i], __bfloat162float(gate[i]), __bfloat162float(up[i]), dg, du);
        dgate[i] = __float2bfloat16_rn(dg);
        dup[i] = __float2bfloat16_rn(du);
    }
}

} // namespace

extern "C" void gpu_swiglu_forward(bf16_t *h, const bf16_t *gate, const bf16_t *up, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(h) && aligned16(gate) && aligned16(up);
    swiglu_forward_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(h), reinterpret_cast<const __nv_bfloat16 *>(gate),
        reinterpret_cast<const __nv_bfloat16 *>(up), n, vec);
    cudaCheckLaunch();
}

extern "C" void gpu_swiglu_backward(bf16_t *dgate, bf16_t *dup, const float *dh, const bf16_t *gate, const bf16_t *up,
                                    long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(dgate) && aligned16(dup) && aligned16(dh) && aligned16(gate) && aligned16(up);
    swiglu_backward_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(dgate), reinterpret_cast<__nv_bfloat16 *>(dup), dh,
        reinterpret_cast<const __nv_bfloat16 *>(gate), reinterpret_cast<const __nv_bfloat16 *>(up), n, vec);
    cudaCheckLaunch();
}
