/*
 * fp32 masters to and from their bf16 weight and remainder (master_split.h), for the model's upload, initialisation
 * and download; AdamW updates the pairs itself (adamw.cu).
 */
#include "master_split.h"

#include "device_util.cuh"
#include "master_split.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void master_split_kernel(uint16_t *hi, int16_t *lo, const float *x, long n, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x) + 2 * gi;
        const float4 a = x4[0], b = x4[1];
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint32_t h[4], l[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint16_t h0, h1;
            int16_t l0, l1;
            master_split_elem(v[2 * k], h0, l0);
            master_split_elem(v[2 * k + 1], h1, l1);
            h[k] = (uint32_t)h0 | (uint32_t)h1 << 16, l[k] = (uint32_t)(uint16_t)l0 | (uint32_t)(uint16_t)l1 << 16;
        }
        reinterpret_cast<uint4 *>(hi)[gi] = make_uint4(h[0], h[1], h[2], h[3]);
        reinterpret_cast<uint4 *>(lo)[gi] = make_uint4(l[0], l[1], l[2], l[3]);
    }
    for (long i = groups * 8 + tid; i < n; i += stride) master_split_elem(x[i], hi[i], lo[i]);
}

__global__ void master_join_kernel(float *x, const uint16_t *hi, const int16_t *lo, long n, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 8 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        const uint4 hv = reinterpret_cast<const uint4 *>(hi)[gi], lv = reinterpret_cast<const uint4 *>(lo)[gi];
        const uint32_t h[4] = {hv.x, hv.y, hv.z, hv.w}, l[4] = {lv.x, lv.y, lv.z, lv.w};
        float v[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = master_join_elem((uint16_t)h[k], (int16_t)(uint16_t)l[k]);
            v[2 * k + 1] = master_join_elem((uint16_t)(h[k] >> 16), (int16_t)(uint16_t)(l[k] >> 16));
        }
        reinterpret_cast<float4 *>(x)[2 * gi] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4 *>(x)[2 * gi + 1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    for (long i = groups * 8 + tid; i < n; i += stride) x[i] = master_join_elem(hi[i], lo[i]);
}

} // namespace

extern "C" void gpu_master_split(bf16_t *hi, int16_t *lo, const float *x, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(hi) && aligned16(lo) && aligned16(x);
    master_split_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(hi, lo, x, n, vec);
    cudaCheckLaunch();
}

extern "C" void gpu_master_join(float *x, const bf16_t *hi, const int16_t *lo, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const int vec = aligned16(hi) && aligned16(lo) && aligned16(x);
    master_join_kernel<<<grid_for(vec ? n / 8 + 8 : n, kThreads), kThreads, 0, stream>>>(x, hi, lo, n, vec);
    cudaCheckLaunch();
}
