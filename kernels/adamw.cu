/*
 * Fused AdamW (adamw.h). The update spells out every rounding with __f*_rn intrinsics so nvcc
 * cannot contract into FMAs: the result is the float arithmetic of src/optim.c adamw_step.
 */
#include "adamw.h"

#include <cuda_bf16.h>
#include <math.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

struct AdamWConst {
    float lr, b1, b2, omb1, omb2, c1, c2, eps, wd, gs;
};

__device__ __forceinline__ void adamw_elem(float &w, float graw, float &m, float &v, const AdamWConst &a) {
    const float g = __fmul_rn(graw, a.gs);
    m = __fadd_rn(__fmul_rn(a.b1, m), __fmul_rn(a.omb1, g));
    v = __fadd_rn(__fmul_rn(a.b2, v), __fmul_rn(__fmul_rn(a.omb2, g), g));
    const float mhat = __fdiv_rn(m, a.c1), vhat = __fdiv_rn(v, a.c2);
    const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), a.eps)), __fmul_rn(a.wd, w));
    w = __fsub_rn(w, __fmul_rn(a.lr, step));
}

__global__ void adamw_kernel(float *params, __nv_bfloat16 *pbf, const float *grads, float *m, float *v, long n,
                             AdamWConst a, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long groups = vec ? n / 4 : 0;
    for (long gi = tid; gi < groups; gi += stride) {
        float4 w = reinterpret_cast<float4 *>(params)[gi];
        const float4 g = reinterpret_cast<const float4 *>(grads)[gi];
        float4 mm = reinterpret_cast<float4 *>(m)[gi], vv = reinterpret_cast<float4 *>(v)[gi];
        adamw_elem(w.x, g.x, mm.x, vv.x, a);
        adamw_elem(w.y, g.y, mm.y, vv.y, a);
        adamw_elem(w.z, g.z, mm.z, vv.z, a);
        adamw_elem(w.w, g.w, mm.w, vv.w, a);
        reinterpret_cast<float4 *>(params)[gi] = w;
        reinterpret_cast<float4 *>(m)[gi] = mm;
        reinterpret_cast<float4 *>(v)[gi] = vv;
        if (pbf) reinterpret_cast<uint2 *>(pbf)[gi] = make_uint2(pack_bf16x2(w.x, w.y), pack_bf16x2(w.z, w.w));
    }
    for (long i = groups * 4 + tid; i < n; i += stride) {
        float w = params[i], mm = m[i], vv = v[i];
        adamw_elem(w, grads[i], mm, vv, a);
        params[i] = w;
        m[i] = mm;
        v[i] = vv;
        if (pbf) pbf[i] = __float2bfloat16_rn(w);
    }
}

} // namespace

extern "C" void gpu_adamw(float *params, bf16_t *params_bf16, const float *grads, float *m, float *v, long n,
                          double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale,
                          long t_step, cudaStream_t stream) {
    if (n <= 0) return;
    AdamWConst a;
    /* The same host-side conversions as adamw_step (src/optim.c). */
    a.b1 = (float)beta1;
    a.b2 = (float)beta2;
    a.eps = (float)eps;
    a.c1 = (float)(1.0 - pow(beta1, (double)t_step));
    a.c2 = (float)(1.0 - pow(beta2, (double)t_step));
    a.lr = (float)lr;
    a.gs = (float)grad_scale;
    a.wd = (float)weight_decay;
    a.omb1 = 1.0f - a.b1;
    a.omb2 = 1.0f - a.b2;
    const int vec = aligned(params, 16) && aligned(grads, 16) && aligned(m, 16) && aligned(v, 16) &&
                    (!params_bf16 || aligned(params_bf16, 8));
    adamw_kernel<<<grid_for(vec ? n / 4 + 4 : n, kThreads), kThreads, 0, stream>>>(
        params, reinterpret_cast<__nv_bfloat16 *>(params_bf16), grads, m, v, n, a, vec);
    cudaCheckLaunch();
}
