// s17: the HBM write floor: how fast one H200 writes 33.8 GB (the Kimi-like backward's fp32 weight gradients).
#include <cstdio>
#include <cuda_runtime.h>
__global__ void fill(float4 *p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_float4(v, v, v, v);
}
__global__ void copy(float4 *d, const float4 *s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d[i] = s[i];
}
int main() {
  const size_t bytes = 33800000000ull, n = bytes / 16;
  float4 *p, *q; cudaMalloc(&p, bytes); cudaMalloc(&q, 8ull << 30);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); float ms;
  for (int r = 0; r < 4; r++) {
    cudaEventRecord(a); fill<<<132 * 8, 512>>>(p, n, 1.0f + r); cudaEventRecord(b); cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b); printf("fill kernel 33.8 GB: %.3f ms, %.2f TB/s\n", ms, bytes / ms / 1e9);
    cudaEventRecord(a); cudaMemsetAsync(p, r, bytes); cudaEventRecord(b); cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b); printf("cudaMemset 33.8 GB: %.3f ms, %.2f TB/s\n", ms, bytes / ms / 1e9);
    const size_t c = 8ull << 30;
    cudaEventRecord(a); copy<<<132 * 8, 512>>>(q, p, c / 16); cudaEventRecord(b); cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b); printf("copy 8 GiB: %.3f ms, %.2f TB/s (read + write)\n", ms, 2.0 * c / ms / 1e9);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
