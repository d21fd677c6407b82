/* s30 r2: does NCCL 2.28 register a symmetric window over 4 GiB, and do LSA pointers reach past 4 GiB in it?
 * One rank (the lent machine has one GPU): the registration and pointer paths, not a peer's mapping.
 * Build: nvcc -O2 -gencode=arch=compute_90a,code=sm_90a nccl_big_window.cu -lnccl -o big_window */
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { printf("FAIL %s: %s\n", #x, ncclGetErrorString(r_)); exit(1); } } while (0)

__global__ void base_kernel(char **out, ncclWindow_t win) { *out = (char *)ncclGetLsaPointer(win, 0, 0); }

/* writes value i at 64-bit word i of [off, off + n) through the LSA base */
__global__ void write_kernel(char *const *base, size_t off, size_t n) {
    unsigned long long *p = (unsigned long long *)(*base + off);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / 8; i += (size_t)gridDim.x * blockDim.x)
        p[i] = off + i;
}

int main(int argc, char **argv) {
    const size_t gib = 1ull << 30, bytes = (size_t)(argc > 1 ? atof(argv[1]) * gib : 8.5 * gib);
    int ver = 0;
    NK(ncclGetVersion(&ver));
    ncclUniqueId id;
    NK(ncclGetUniqueId(&id));
    ncclComm_t comm;
    CK(cudaSetDevice(0));
    NK(ncclCommInitRank(&comm, 1, id, 0));
    void *buf = NULL;
    NK(ncclMemAlloc(&buf, bytes));
    ncclWindow_t win;
    NK(ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
    /* a one-rank communicator has no device communicator (ncclDevCommCreate: invalid usage); the window's LSA
     * pointer needs none */
    char **d_base;
    CK(cudaMalloc(&d_base, sizeof(char *)));
    base_kernel<<<1, 1>>>(d_base, win);
    CK(cudaDeviceSynchronize());
    char *base = NULL;
    CK(cudaMemcpy(&base, d_base, sizeof base, cudaMemcpyDeviceToHost));
    printf("NCCL %d, window %.2f GiB at %p, LSA base %p\n", ver, bytes / (double)gib, buf, (void *)base);
    const size_t chunk = 64ull << 20, offs[] = {0, 4 * gib - chunk / 2, 4 * gib + 12345 * 8, bytes - chunk};
    int bad = 0;
    unsigned long long *h = (unsigned long long *)malloc(chunk);
    for (int t = 0; t < 4; t++) {
        const size_t off = offs[t];
        write_kernel<<<264, 256>>>(d_base, off, chunk);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h, (char *)buf + off, chunk, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < chunk / 8; i++) wrong += h[i] != off + i;
        printf("  %.3f GiB + 64 MiB through the LSA pointer, read back locally: %zu words wrong\n", off / (double)gib, wrong);
        bad += wrong != 0;
    }
    NK(ncclCommWindowDeregister(comm, win));
    NK(ncclMemFree(buf));
    NK(ncclCommDestroy(comm));
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad != 0;
}
