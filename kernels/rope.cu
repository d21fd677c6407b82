/*
 * RoPE (rope.h): a double-precision table of cos/sin per (t, i), then an in-place elementwise
 * rotation of bf16 pairs (i, i + D/2) in fp32. VEC = 8 pairs per thread with 16-byte accesses when
 * (D/2) % 8 == 0, the row pitch a multiple of 8 and the pointers are aligned, else 1.
 */
#include "rope.h"

#include <cuda_bf16.h>
#include <stdio.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void rope_table_kernel(float *table, int T, int D, float theta) {
    const int half = D / 2;
    const long items = (long)T * half, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < items; idx += stride) {
        const int t = (int)(idx / half), i = (int)(idx - (long)t * half);
        const double angle = t * pow((double)theta, -2.0 * i / D);
        table[(long)t * D + i] = (float)cos(angle);
        table[(long)t * D + half + i] = (float)sin(angle);
    }
}

/* One item = VEC pairs of one head of one row: items = B*T*H * (D/2 / VEC). */
template <int VEC>
__global__ void rope_kernel(__nv_bfloat16 *x, const float *table, long rows, int T, int H, int D, long ld,
                            float sign) {
    const int half = D / 2, hv = half / VEC;
    const long items = rows * H * hv, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < items; idx += stride) {
        const long nh = idx / hv;
        const int i0 = (int)(idx - nh * hv) * VEC;
        const long n = nh / H;
        const int t = (int)(n % T);
        __nv_bfloat16 *x1p = x + n * ld + (nh - n * H) * D + i0, *x2p = x1p + half;
        const float *cp = table + (long)t * D + i0, *sp = cp + half;
        float x1[VEC], x2[VEC], c[VEC], s[VEC];
        load_bf16<VEC>(x1, x1p);
        load_bf16<VEC>(x2, x2p);
        load_f32<VEC>(c, cp);
        load_f32<VEC>(s, sp);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float a = x1[k], b = x2[k];
            rope_rotate(a, b, c[k], sign * s[k], x1[k], x2[k]);
        }
        store_bf16<VEC>(x1p, x1);
        store_bf16<VEC>(x2p, x2);
    }
}

void check_even(int D, const char *fn) {
    if (D % 2 == 0 && D > 0) return;
    char what[128];
    snprintf(what, sizeof what, "%s: head dim D = %d must be even and positive for rotary embeddings", fn, D);
    mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
}

} // namespace

extern "C" long gpu_rope_table_floats(int T, int D) { return (long)T * D; }

extern "C" void gpu_rope_table_init(float *table, int T, int D, float theta, cudaStream_t stream) {
    check_even(D, "gpu_rope_table_init");
    if (T <= 0) return;
    rope_table_kernel<<<grid_for((long)T * (D / 2), kThreads), kThreads, 0, stream>>>(table, T, D, theta);
    cudaCheckLaunch();
}

extern "C" void gpu_rope(bf16_t *x, const float *table, int B, int T, int H, int D, long ld, int inverse,
                         cudaStream_t stream) {
    check_even(D, "gpu_rope");
    const long rows = (long)B * T;
    if (rows <= 0 || H <= 0) return;
    if (ld < (long)H * D) {
        char what[128];
        snprintf(what, sizeof what, "gpu_rope: rows %ld elements apart cannot hold %d heads of %d", ld, H, D);
        mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
    }
    __nv_bfloat16 *xb = reinterpret_cast<__nv_bfloat16 *>(x);
    const float sign = inverse ? -1.0f : 1.0f;
    if ((D / 2) % 8 == 0 && ld % 8 == 0 && aligned16(x) && aligned16(table))
        rope_kernel<8><<<grid_for(rows * H * (D / 16), kThreads), kThreads, 0, stream>>>(xb, table, rows, T, H, D, ld,
                                                                                          sign);
    else
        rope_kernel<1><<<grid_for(rows * H * (D / 2), kThreads), kThreads, 0, stream>>>(xb, table, rows, T, H, D, ld,
                                                                                         sign);
    cudaCheckLaunch();
}
