/* Counter-based random fills (moe_fill.h). */
#include "moe_fill.h"

#include <cuda_bf16.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float value(unsigned long long seed, unsigned long long i, float scale, float step) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float v = scale * ((float)(z >> 40) * 0x1.0p-23f - 1.0f); /* 24 random bits -> [-1, 1) */
    return step > 0 ? rintf(v / step) * step : v;
}

__global__ void fill_f32_kernel(float *p, long n, unsigned long long seed, long offset, float scale, float step) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        p[i] = value(seed, (unsigned long long)(offset + i), scale, step);
}

__global__ void fill_bf16_kernel(__nv_bfloat16 *p, long n, unsigned long long seed, long offset, float scale,
                                 float step) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(value(seed, (unsigned long long)(offset + i), scale, step));
}

} // namespace

extern "C" void gpu_moe_fill_f32(float *p, long n, unsigned long long seed, long offset, float scale, float step,
                                 cudaStream_t stream) {
    if (n <= 0) return;
    fill_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(p, n, seed, offset, scale, step);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_fill_bf16(bf16_t *p, long n, unsigned long long seed, long offset, float scale, float step,
                                  cudaStream_t stream) {
    if (n <= 0) return;
    fill_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16 *>(p), n, seed,
                                                                      offset, scale, step);
    cudaCheckLaunch();
}
