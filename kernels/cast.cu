/*
 * Elementwise casts (cast.h). Grid-stride loops over 16-byte groups when every pointer is
 * 16-byte aligned, then an element-by-element tail; the same loop does everything when not aligned.
 */
#include "cast.h"

#include <cuda_bf16.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *out, const float *in, long n, int vec) {
    long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    long groups = vec ? n / 8 : 0;
    for (long g = tid; g < groups; g += stride) {
        float4 a = reinterpret_cast<const float4 *>(in)[2 * g];
        float4 b = reinterpret_cast<const float4 *>(in)[2 * g + 1];
        uint4 o;
        o.x = pack_bf16x2(a.x, a.y);
        o.y = pack_bf16x2(a.z, a.w);
        o.z = pack_bf16x2(b.x, b.y);
        o.w = pack_bf16x2(b.z, b.w);
        reinterpret_cast<uint4 *>(out)[g] = o;
    }
    for (long i = groups * 8 + tid; i < n; i += stride) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void bf16_to_f32_kernel(float *out, const __nv_bfloat16 *in, long n, int vec) {
    long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    long groups = vec ? n / 8 : 0;
    for (long g = tid; g < groups; g += stride) {
        uint4 u = reinterpret_cast<const uint4 *>(in)[g];
        reinterpret_cast<float4 *>(out)[2 * g] = make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
        reinterpret_cast<float4 *>(out)[2 * g + 1] = make_float4(bf16_lo(u.z), bf16_hi(u.z), bf16_lo(u.w), bf16_hi(u.w));
    }
    for (long i = groups * 8 + tid; i < n; i += stride) out[i] = __bfloat162float(in[i]);
}

} // namespace

extern "C" void gpu_cast_f32_to_bf16(bf16_t *out, const float *in, long n, cudaStream_t stream) {
    if (n <= 0) return;
    int vec = aligned16(out) && aligned16(in);
    f32_to_bf16_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out), in, n, vec);
    cudaCheckLaunch();
}

extern "C" void gpu_cast_bf16_to_f32(float *out, const bf16_t *in, long n, cudaStream_t stream) {
    if (n <= 0) return;
    int vec = aligned16(out) && aligned16(in);
    bf16_to_f32_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(
        out, reinterpret_cast<const __nv_bfloat16 *>(in), n, vec);
    cudaCheckLaunch();
}
