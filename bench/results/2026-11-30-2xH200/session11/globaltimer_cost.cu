// s11 diagnostic: what one read of %globaltimer costs a thread, in SM cycles, and its step.
#include <cstdio>
__device__ __forceinline__ long long gt() { long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void k(long long *out, int n) {
    if (threadIdx.x) return;
    long long c0 = clock64(), g0 = gt(), acc = 0, last = g0, steps = 0, minstep = 1LL << 60;
    for (int i = 0; i < n; i++) { long long g = gt(); acc += g; if (g != last) { steps++; if (g - last < minstep) minstep = g - last; last = g; } }
    long long c1 = clock64(), g1 = gt();
    long long c2 = clock64(); for (int i = 0; i < n; i++) acc += clock64(); long long c3 = clock64();
    out[blockIdx.x * 6 + 0] = c1 - c0; out[blockIdx.x * 6 + 1] = g1 - g0; out[blockIdx.x * 6 + 2] = steps;
    out[blockIdx.x * 6 + 3] = minstep; out[blockIdx.x * 6 + 4] = c3 - c2; out[blockIdx.x * 6 + 5] = acc & 1;
}
int main() {
    long long *d, h[6 * 132]; const int n = 100000;
    cudaMalloc(&d, sizeof h);
    for (int blocks : {1, 132}) {
        k<<<blocks, 32>>>(d, n); cudaDeviceSynchronize();
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        printf("%3d blocks: globaltimer read %.1f cycles, %.1f ns each; %lld distinct steps, smallest %lld ns; clock64 read %.1f cycles\n",
               blocks, (double)h[0] / n, (double)h[1] / n, h[2], h[3], (double)h[4] / n);
    }
    return 0;
}
