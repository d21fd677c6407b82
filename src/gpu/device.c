/* GPU discovery and selection. */
#include "gpu/device.h"

#include <stdio.h>
#include <string.h>

#include "gpu/check.h"

int gpu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: the CPU backend takes over */
        return 0;
    }
    return n;
}

int gpu_select_device(int local_rank) {
    int n = gpu_device_count();
    int dev = n > 0 ? local_rank % n : 0;
    cudaCheck(cudaSetDevice(dev));
    return dev;
}

void gpu_describe(int device, char *buf, int len) {
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    int driver = 0;
    cudaDriverGetVersion(&driver);
    snprintf(buf, (size_t)len, "%s, %d SMs, %.1f GiB, sm_%d%d, driver API %d.%d", p.name, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, driver / 1000, (driver % 1000) / 10);
}

void gpu_device_uuid(int device, unsigned char uuid[16]) {
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    memcpy(uuid, p.uuid.bytes, 16);
}

int gpu_sm_count(int device) {
    int v = 0;
    cudaCheck(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    return v;
}

int gpu_compute_capability(int device) {
    int major = 0, minor = 0;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major * 10 + minor;
}
