// Device-to-device copy: cudaMemcpyAsync against a 16-byte-vector copy kernel, at the MoE layer's x sizes.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void copy16(uint4 *__restrict__ d, const uint4 *__restrict__ s, long n) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) d[i] = s[i];
}
int main() {
    const long sizes[2] = {8192L * 2048 * 2, 4096L * 7168 * 2};
    for (long bytes : sizes) {
        void *a, *b;
        cudaMalloc(&a, bytes); cudaMalloc(&b, bytes);
        cudaMemset(a, 1, bytes);
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        float best[2] = {1e9f, 1e9f}, sum[2] = {0, 0};
        for (int it = 0; it < 40; it++)
            for (int v = 0; v < 2; v++) {
                cudaEventRecord(e0);
                if (v == 0) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
                else copy16<<<132 * 8, 512>>>((uint4 *)b, (const uint4 *)a, bytes / 16);
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                float ms; cudaEventElapsedTime(&ms, e0, e1);
                if (it >= 5) { sum[v] += ms; if (ms < best[v]) best[v] = ms; }
            }
        printf("%6.1f MB: cudaMemcpyAsync D2D mean %.4f ms (best %.4f, %.2f TB/s r+w); copy kernel mean %.4f ms (best %.4f, %.2f TB/s)\n",
               bytes / 1e6, sum[0] / 35, best[0], 2 * bytes / (best[0] * 1e-3) / 1e12, sum[1] / 35, best[1],
               2 * bytes / (best[1] * 1e-3) / 1e12);
        cudaFree(a); cudaFree(b);
    }
    return 0;
}
