/* Parameter initialisation (init_params.h): one thread a value, grid-stride. */
#include "init_params.h"

#include "../src/rng.h"
#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void init_normal_kernel(float *w, size_t n, uint64_t block_state, double std) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride)
        w[j] = mokc_init_value(block_state, j, std);
}

__global__ void init_ones_kernel(float *w, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) w[j] = 1.0f;
}

} // namespace

extern "C" void gpu_init_normal(float *w, size_t n, uint64_t block_state, double std, cudaStream_t stream) {
    if (n == 0) return;
    init_normal_kernel<<<grid_for((long)n, kThreads), kThreads, 0, stream>>>(w, n, block_state, std);
    cudaCheckLaunch();
}

extern "C" void gpu_init_ones(float *w, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    init_ones_kernel<<<grid_for((long)n, kThreads), kThreads, 0, stream>>>(w, n);
    cudaCheckLaunch();
}
