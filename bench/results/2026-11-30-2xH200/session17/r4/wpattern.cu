// s17: does the weight-gradient tiles' write pattern cost HBM rate? 192 experts x (7168 x 2048) fp32 (33.8 GB),
// written by 132 persistent blocks taking tiles of TM rows x TN columns from a ticket (fp32, row pitch 2048 or 7168),
// against a plain sequential fill.
#include <cstdio>
#include <cuda_runtime.h>
__device__ unsigned ticket;
// g: El matrices of M x N fp32 (N contiguous); tiles TM x TN; order 0: column tiles fastest, 1: row tiles fastest
__global__ void __launch_bounds__(256) tiles(float *g, int El, int M, int N, int TM, int TN, int order, float v) {
  __shared__ int s_t;
  const int nm = M / TM, nn = N / TN, per = nm * nn, total = El * per;
  for (;;) {
    if (threadIdx.x == 0) s_t = atomicAdd(&ticket, 1u);
    __syncthreads();
    const int t = s_t;
    __syncthreads();
    if (t >= total) return;
    const int el = t / per, r = t % per, mi = order ? r % nm : r / nn, ni = order ? r / nm : r % nn;
    float *base = g + (size_t)el * M * N + (size_t)mi * TM * N + (size_t)ni * TN;
    const int c4 = TN / 4; // float4 per tile row
    for (int i = threadIdx.x; i < TM * c4; i += 256) {
      const int row = i / c4, c = i % c4;
      reinterpret_cast<float4 *>(base + (size_t)row * N)[c] = make_float4(v, v, v, v);
    }
  }
}
__global__ void fill(float4 *p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_float4(v, v, v, v);
}
int main() {
  const int El = 192, M = 2048, N = 7168;
  const size_t bytes = (size_t)El * M * N * 4;
  float *g; cudaMalloc(&g, bytes);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); float ms;
  struct { int M, N, TM, TN, order; const char *what; } cs[] = {
    {M, N, 128, 256, 0, "wdown-like 2048x7168, 128x256 tiles, column tiles fastest (today)"},
    {M, N, 128, 256, 1, "wdown-like 2048x7168, 128x256 tiles, row tiles fastest"},
    {M, N, 64, 512, 0, "wdown-like 2048x7168, 64x512 tiles"},
    {M, N, 256, 128, 0, "wdown-like 2048x7168, 256x128 tiles"},
    {M, N, 128, 1024, 0, "wdown-like 2048x7168, 128x1024 tiles"},
    {M, N, 16, N, 0, "whole rows, 16 x 7168 tiles (this kernel's own rate)"},
    {N, M, 128, 256, 0, "wgu-like 7168x2048, 128x256 tiles (today)"},
    {N, M, 64, 512, 0, "wgu-like 7168x2048, 64x512 tiles"},
  };
  for (int rep = 0; rep < 2; rep++) {
    cudaEventRecord(a); fill<<<132 * 8, 512>>>((float4 *)g, bytes / 16, 1.0f); cudaEventRecord(b); cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b); printf("sequential fill: %.3f ms, %.2f TB/s\n", ms, bytes / ms / 1e9);
    for (auto &c : cs) {
      unsigned z = 0; cudaMemcpyToSymbol(ticket, &z, 4);
      cudaEventRecord(a); tiles<<<132, 256>>>(g, El, c.M, c.N, c.TM, c.TN, c.order, 2.0f); cudaEventRecord(b);
      cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b);
      printf("%-70s %.3f ms, %.2f TB/s\n", c.what, ms, bytes / ms / 1e9);
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
