/*
 * RMSNorm forward/backward (rmsnorm.h). The forward runs one block of kThreads per row, the backward one
 * per run of rows; every thread owns the channels c = (threadIdx.x + k * kThreads) * VEC, so per-thread
 * sums run in a fixed order and the block reduction (warp butterflies, then each warp reduces the
 * per-warp partials the same way) is a fixed tree: results are bitwise reproducible.
 */
#include "rmsnorm.h"

#include <cuda_bf16.h>
#include <stdio.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(__nv_bfloat16 *out, float *rstd, const float *x, const float *weight, int C, float eps) {
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
        store_bf16<VEC>(out + base + c, v);
    }
}

/* Block b handles rows [b * rows_per_block, min(N, (b + 1) * rows_per_block)) in order and writes its dweight
 * partial (its rows' sum, in order) to partial[b]. Thread t owns chunks i = 0, 1, ... of VEC channels at
 * c = (t + i * kThreads) * VEC, so every sum runs in the same order whatever CH is:
 *  - CH > 0 (C <= kThreads * VEC * CH): a row's chunks (dout, x and dx) come into registers in one pass, before
 *    the row's reduction, so a row waits on memory once; weight and the dweight sums stay in registers;
 *  - CH = 0 (any C): the second pass loads again, and dweight sums in C floats of dynamic shared memory.
 * dx_add = 0 starts each dx from zero instead of its old value, by the same arithmetic, so writing gives the bits
 * adding to zeros gives. dx_bf16, when not NULL, gets bf16(dx) as written. */
template <int VEC, int CH>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_kernel(float *dx, int dx_add, __nv_bfloat16 *dx_bf16, float *partial, const float *dout,
                            const float *x, const float *weight, const float *rstd, int N, int C, int rows_per_block) {
    extern __shared__ float dw_smem[];
    __shared__ float red[32];
    constexpr int R = CH > 0 ? CH : 1; /* the register arrays' chunks (unused at CH = 0) */
    float wr[R][VEC], dwr[R][VEC];
    if constexpr (CH > 0) {
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int c = (threadIdx.x + i * kThreads) * VEC;
            if (c < C) load_f32<VEC>(wr[i], weight + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) dwr[i][k] = 0.0f;
        }
    } else {
        for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC)
#pragma unroll
            for (int k = 0; k < VEC; k++) dw_smem[c + k] = 0.0f;
    }
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = r0 + rows_per_block < N ? r0 + rows_per_block : N;
    for (int row = r0; row < r1; row++) {
        const long base = (long)row * C;
        const float *g = dout + base, *xr = x + base;
        const float r = rstd[row];
        float dot = 0.0f;
        if constexpr (CH > 0) {
            float gv[CH][VEC], xv[CH][VEC], dv[CH][VEC];
#pragma unroll
            for (int i = 0; i < CH; i++) {
                const int c = (threadIdx.x + i * kThreads) * VEC;
                if (c >= C) continue;
                load_f32<VEC>(gv[i], g + c);
                load_f32<VEC>(xv[i], xr + c);
                if (dx_add) load_f32<VEC>(dv[i], dx + base + c);
                else
#pragma unroll
                    for (int k = 0; k < VEC; k++) dv[i][k] = 0.0f;
#pragma unroll
                for (int k = 0; k < VEC; k++) dot += gv[i][k] * wr[i][k] * xv[i][k];
            }
            dot = block_sum(dot, red);
            const float coef = (float)((double)r * r * r * dot / C);
#pragma unroll
            for (int i = 0; i < CH; i++) {
                const int c = (threadIdx.x + i * kThreads) * VEC;
                if (c >= C) continue;
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    dv[i][k] += r * wr[i][k] * gv[i][k] - xv[i][k] * coef;
                    dwr[i][k] += gv[i][k] * xv[i][k] * r;
                }
                store_f32<VEC>(dx + base + c, dv[i]);
                if (dx_bf16) store_bf16<VEC>(dx_bf16 + base + c, dv[i]);
            }
        } else {
            for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
                float gv[VEC], xv[VEC], wv[VEC];
                load_f32<VEC>(gv, g + c);
                load_f32<VEC>(xv, xr + c);
                load_f32<VEC>(wv, weight + c);
#pragma unroll
                for (int k = 0; k < VEC; k++) dot += gv[k] * wv[k] * xv[k];
            }
            dot = block_sum(dot, red);
            const float coef = (float)((double)r * r * r * dot / C);
            for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC) {
                float gv[VEC], xv[VEC], wv[VEC], dv[VEC];
                load_f32<VEC>(gv, g + c);
                load_f32<VEC>(xv, xr + c);
                load_f32<VEC>(wv, weight + c);
                if (dx_add) load_f32<VEC>(dv, dx + base + c);
                else
#pragma unroll
                    for (int k = 0; k < VEC; k++) dv[k] = 0.0f;
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    dv[k] += r * wv[k] * gv[k] - xv[k] * coef;
                    dw_smem[c + k] += gv[k] * xv[k] * r;
                }
                store_f32<VEC>(dx + base + c, dv);
                if (dx_bf16) store_bf16<VEC>(dx_bf16 + base + c, dv);
            }
        }
    }
    float *prow = partial + (long)blockIdx.x * C;
    if constexpr (CH > 0) {
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int c = (threadIdx.x + i * kThreads) * VEC;
            if (c < C) store_f32<VEC>(prow + c, dwr[i]);
        }
    } else {
        for (int c = threadIdx.x * VEC; c < C; c += kThreads * VEC)
#pragma unroll
            for (int k = 0; k < VEC; k++) prow[c + k] = dw_smem[c + k];
    }
}

/* dweight[c] += the sum over blocks b of partial[b, c] in a fixed tree: kFinishRuns runs of consecutive blocks, each
 * summed in order by one thread, then the run sums in order. One thread a column summing all the blocks ran C / 256
 * blocks (8 SMs at C = 2048), each thread a chain of nblocks L2 loads: 20.9 against 5.1 us at mokc-small's sizes. */
constexpr int kFinishCols = 32, kFinishRuns = 32;
__global__ void __launch_bounds__(kFinishCols * kFinishRuns)
    rmsnorm_dweight_finish_kernel(float *dweight, const float *partial, int nblocks, int C) {
    __shared__ float run_sum[kFinishRuns][kFinishCols + 1];
    const int col = threadIdx.x % kFinishCols, run = threadIdx.x / kFinishCols;
    const int c = blockIdx.x * kFinishCols + col;
    const int per = (nblocks + kFinishRuns - 1) / kFinishRuns;
    const int b0 = run * per, b1 = b0 + per < nblocks ? b0 + per : nblocks;
    float s = 0.0f;
    if (c < C)
        for (int b = b0; b < b1; b++) s += partial[(long)b * C + c];
    run_sum[run][col] = s;
    __syncthreads();
    if (run > 0 || c >= C) return;
    float t = 0.0f;
    for (int r = 0; r < kFinishRuns; r++) t += run_sum[r][col];
    dweight[c] += t;
}

void bwd_geometry(int N, int *rows_per_block, int *nblocks) {
    int rpb = (N + RMSNORM_BWD_MAX_BLOCKS - 1) / RMSNORM_BWD_MAX_BLOCKS;
    if (rpb < 1) rpb = 1;
    *rows_per_block = rpb;
    *nblocks = (N + rpb - 1) / rpb;
}

} // namespace

extern "C" void gpu_rmsnorm_forward(bf16_t *out, float *rstd, const float *x, const float *weight, int N, int C,
                                    float eps, cudaStream_t stream) {
    if (N <= 0) return;
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const bool vec = C % 4 == 0 && aligned(x, 16) && aligned(weight, 16) && aligned(out, 8);
    if (vec)
        rmsnorm_forward_kernel<4><<<N, kThreads, 0, stream>>>(o, rstd, x, weight, C, eps);
    else
        rmsnorm_forward_kernel<1><<<N, kThreads, 0, stream>>>(o, rstd, x, weight, C, eps);
    cudaCheckLaunch();
}

extern "C" long gpu_rmsnorm_backward_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    int rpb, nblocks;
    bwd_geometry(N, &rpb, &nblocks);
    return (long)nblocks * C;
}

namespace {

/* The backward kernel for (VEC, C): the fewest register chunks (1, 2 or 4) that hold a row's share of a
 * thread, else the shared-memory form (CH = 0). */
template <int VEC> const void *backward_kernel_for(int C, int *ch) {
    const int per = kThreads * VEC;
    *ch = C <= per ? 1 : C <= 2 * per ? 2 : C <= 4 * per ? 4 : 0;
    switch (*ch) {
    case 1: return reinterpret_cast<const void *>(rmsnorm_backward_kernel<VEC, 1>);
    case 2: return reinterpret_cast<const void *>(rmsnorm_backward_kernel<VEC, 2>);
    case 4: return reinterpret_cast<const void *>(rmsnorm_backward_kernel<VEC, 4>);
    default: return reinterpret_cast<const void *>(rmsnorm_backward_kernel<VEC, 0>);
    }
}

} // namespace

extern "C" void gpu_rmsnorm_backward(float *dx, int dx_add, bf16_t *dx_bf16, float *dweight, float *scratch,
                                     const float *dout, const float *x, const float *weight, const float *rstd, int N,
                                     int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    int rpb, nblocks, ch;
    bwd_geometry(N, &rpb, &nblocks);
    const bool vec = C % 4 == 0 && aligned(dx, 16) && aligned(dout, 16) && aligned(x, 16) && aligned(weight, 16) &&
                     aligned(scratch, 16) && (!dx_bf16 || aligned(dx_bf16, 8));
    const void *fn = vec ? backward_kernel_for<4>(C, &ch) : backward_kernel_for<1>(C, &ch);
    const size_t smem = ch ? 0 : (size_t)C * sizeof(float);
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
    __nv_bfloat16 *db = reinterpret_cast<__nv_bfloat16 *>(dx_bf16);
    void *args[] = {&dx, &dx_add, &db, &scratch, &dout, &x, &weight, &rstd, &N, &C, &rpb};
    cudaCheck(cudaLaunchKernel(fn, dim3(nblocks), dim3(kThreads), args, smem, stream));
    rmsnorm_dweight_finish_kernel<<<(C + kFinishCols - 1) / kFinishCols, kFinishCols * kFinishRuns, 0, stream>>>(
        dweight, scratch, nblocks, C);
    cudaCheckLaunch();
}
