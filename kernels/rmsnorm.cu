/*
 * RMSNorm forward/backward (rmsnorm.h). One block of kThreads per row; every thread owns the
 * channels c = (threadIdx.x + k * kThreads) * VEC, so per-thread sums run in a fixed order and the
 * block reduction (warp butterflies, then each warp reduces the per-warp partials the same way) is
 * a fixed tree: results are bitwise reproducible.
 */
#include "rmsnorm.h"

#include <cuda_bf16.h>
#include <stdio.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(__nv_bfloat16 *out, float *out_f32, float *rstd, const float *x, const float *weight, int C,
                           float eps) {
    __shared__ float red[32];
    const long base = (long)blockIdx.x * C;
    const float *xr = x + base;
    float ss = 0.0f;
    for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
        float v[VEC];
        load_f32<VEC>(v, xr + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) ss += v[k] * v[k];
    }
    ss = block_sum(ss, red);
    const float r = (float)(1.0 / sqrt((double)ss / C + (double)eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
        float v[VEC], w[VEC];
        load_f32<VEC>(v, xr + c);
        load_f32<VEC>(w, weight + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = v[k] * r * w[k];
        if (out) store_bf16<VEC>(out + base + c, v);
        if (out_f32) store_f32<VEC>(out_f32 + base + c, v);
    }
}

/* Block b handles rows [b * rows_per_block, min(N, (b + 1) * rows_per_block)) in order. Dynamic
 * shared memory: C floats, the block's dweight partial (each thread touches only its channels). */
template <int VEC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_kernel(float *dx, float *partial, const float *dout, const float *x, const float *weight,
                            const float *rstd, int N, int C, int rows_per_block) {
    extern __shared__ float dw[];
    __shared__ float red[32];
    for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC)
#pragma unroll
        for (int k = 0; k < VEC; k++) dw[c + k] = 0.0f;
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = r0 + rows_per_block < N ? r0 + rows_per_block : N;
    for (int row = r0; row < r1; row++) {
        const long base = (long)row * C;
        const float *g = dout + base, *xr = x + base;
        float dot = 0.0f;
        for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
            float gv[VEC], xv[VEC], wv[VEC];
            load_f32<VEC>(gv, g + c);
            load_f32<VEC>(xv, xr + c);
            load_f32<VEC>(wv, weight + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) dot += gv[k] * wv[k] * xv[k];
        }
        dot = block_sum(dot, red);
        const float r = rstd[row];
        const float coef = (float)((double)r * r * r * dot / C);
        for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
            float gv[VEC], xv[VEC], wv[VEC], dv[VEC];
            load_f32<VEC>(gv, g + c);
            load_f32<VEC>(xv, xr + c);
            load_f32<VEC>(wv, weight + c);
            load_f32<VEC>(dv, dx + base + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                dv[k] += r * wv[k] * gv[k] - xv[k] * coef;
                dw[c + k] += gv[k] * xv[k] * r;
            }
            store_f32<VEC>(dx + base + c, dv);
        }
    }
    float *prow = partial + (long)blockIdx.x * C;
    for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC)
#pragma unroll
        for (int k = 0; k < VEC; k++) prow[c + k] = dw[c + k];
}

/* dweight[c] += sum over blocks b (in order) of partial[b, c]. */
__global__ void rmsnorm_dweight_finish_kernel(float *dweight, const float *partial, int nblocks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < nblocks; b++) s += partial[(long)b * C + c];
    dweight[c] += s;
}

void bwd_geometry(int N, int *rows_per_block, int *nblocks) {
    int rpb = (N + RMSNORM_BWD_MAX_BLOCKS - 1) / RMSNORM_BWD_MAX_BLOCKS;
    if (rpb < 1) rpb = 1;
    *rows_per_block = rpb;
    *nblocks = (N + rpb - 1) / rpb;
}

} // namespace

extern "C" void gpu_rmsnorm_forward(bf16_t *out, float *out_f32, float *rstd, const float *x, const float *weight, int N,
                                int C, float eps, cudaStream_t stream) {
    if (N <= 0) return;
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const bool vec = C % 4 == 0 && aligned(x, 16) && aligned(weight, 16) && (!out || aligned(out, 8)) &&
                     (!out_f32 || aligned(out_f32, 16));
    if (vec)
        rmsnorm_forward_kernel<4><<<N, kThreads, 0, stream>>>(o, out_f32, rstd, x, weight, C, eps);
    else
        rmsnorm_forward_kernel<1><<<N, kThreads, 0, stream>>>(o, out_f32, rstd, x, weight, C, eps);
    cudaCheckLaunch();
}

extern "C" long gpu_rmsnorm_backward_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    int rpb, nblocks;
    bwd_geometry(N, &rpb, &nblocks);
    return (long)nblocks * C;
}

extern "C" void gpu_rmsnorm_backward(float *dx, float *dweight, float *scratch, const float *dout, const float *x,
                                 const float *weight, const float *rstd, int N, int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    int rpb, nblocks;
    bwd_geometry(N, &rpb, &nblocks);
    const size_t smem = (size_t)C * sizeof(float);
    const bool vec = C % 4 == 0 && aligned(dx, 16) && aligned(dout, 16) && aligned(x, 16) && aligned(weight, 16);
    const void *fn = vec ? reinterpret_cast<const void *>(rmsnorm_backward_kernel<4>)
                         : reinterpret_cast<const void *>(rmsnorm_backward_kernel<1>);
    if (smem > 48 * 1024) {
        int dev = 0, optin = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if (smem + 32 * sizeof(float) > (size_t)optin) {
            char what[160];
            snprintf(what, sizeof what, "gpu_rmsnorm_backward: C = %d needs %zu bytes of shared memory, the GPU allows %d",
                     C, smem, optin);
            mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
        }
        cudaCheck(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    if (vec)
        rmsnorm_backward_kernel<4><<<nblocks, kThreads, smem, stream>>>(dx, scratch, dout, x, weight, rstd, N, C, rpb);
    else
        rmsnorm_backward_kernel<1><<<nblocks, kThreads, smem, stream>>>(dx, scratch, dout, x, weight, rstd, N, C, rpb);
    cudaCheckLaunch();
    rmsnorm_dweight_finish_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, stream>>>(dweight, scratch, nblocks, C);
    cudaCheckLaunch();
}
