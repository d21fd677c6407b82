/*
 * Deterministic reductions (reduce.h). Per-thread sums over a fixed strided set of elements, then a
 * fixed block tree (warp butterflies, then warp partials the same way), all in double. The split-K
 * partials: one thread per element (or float4), the partials in index order.
 */
#include "reduce.h"

#include "device_util.cuh"

namespace {

constexpr int kPartialThreads = 512;
constexpr int kSumThreads = 1024;

/* Block b: the sum of x[i] (SQUARE: x[i]^2) over elements [b * chunk, min(n, (b + 1) * chunk)), chunk a multiple of
 * 4. */
template <bool SQUARE> __device__ __forceinline__ double term(float v) { return SQUARE ? (double)v * v : (double)v; }
template <bool SQUARE>
__global__ void __launch_bounds__(kPartialThreads)
    partials_kernel(double *partials, const float *x, long n, long chunk, int vec) {
    __shared__ double red[32];
    const long start = (long)blockIdx.x * chunk;
    long end = start + chunk;
    if (end > n) end = n;
    double s = 0.0;
    long done = start;
    if (vec && end > start) {
        const long groups = (end - start) / 4;
        const float4 *x4 = reinterpret_cast<const float4 *>(x + start);
        for (long g = threadIdx.x; g < groups; g += blockDim.x) {
            const float4 v = x4[g];
            s += term<SQUARE>(v.x);
            s += term<SQUARE>(v.y);
            s += term<SQUARE>(v.z);
            s += term<SQUARE>(v.w);
        }
        done = start + groups * 4;
    }
    for (long i = done + threadIdx.x; i < end; i += blockDim.x) s += term<SQUARE>(x[i]);
    s = block_sum(s, red);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

template <bool SQUARE> void launch_partials(double *partials, const float *x, long n, cudaStream_t stream) {
    if (n < 0) n = 0;
    long chunk = (n + REDUCE_PARTIALS - 1) / REDUCE_PARTIALS;
    chunk = (chunk + 3) / 4 * 4;
    partials_kernel<SQUARE><<<REDUCE_PARTIALS, kPartialThreads, 0, stream>>>(partials, x, n, chunk,
                                                                             x != nullptr && aligned16(x));
    cudaCheckLaunch();
}

/* Block b: the squares of the rows rows[r] of table, r in [b * chunk, min(n, (b + 1) * chunk)), in that order. */
template <int VEC>
__global__ void __launch_bounds__(kPartialThreads)
    rows_sumsq_kernel(double *partials, const float *table, const int *rows, int n, int C, int chunk) {
    __shared__ double red[32];
    const int r0 = blockIdx.x * chunk, r1 = r0 + chunk < n ? r0 + chunk : n;
    double s = 0.0;
    for (int r = r0; r < r1; r++) {
        const float *row = table + (long)rows[r] * C;
        for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
            float v[VEC];
            load_f32<VEC>(v, row + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) s += term<true>(v[k]);
        }
    }
    s = block_sum(s, red);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

template <typename T>
__global__ void __launch_bounds__(kSumThreads) sum_kernel(double *out, const T *x, long n, int accumulate) {
    __shared__ double red[32];
    double s = 0.0;
    for (long i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    s = block_sum(s, red);
    if (threadIdx.x == 0) *out = (accumulate ? *out : 0.0) + s;
}

constexpr int kPartsThreads = 256;

/* Element i .. i + VEC - 1 of gpu_sum_partials_f32. */
template <int VEC>
__device__ __forceinline__ void sum_partials_at(float *out, const float *parts, long i, long stride, int S,
                                                float beta) {
    float acc[VEC], v[VEC];
    load_f32<VEC>(acc, parts + i);
    for (int s = 1; s < S; s++) {
        load_f32<VEC>(v, parts + (long)s * stride + i);
        for (int j = 0; j < VEC; j++) acc[j] += v[j];
    }
    if (beta != 0.0f) {
        load_f32<VEC>(v, out + i);
        for (int j = 0; j < VEC; j++) acc[j] = __fmaf_rn(beta, v[j], acc[j]);
    }
    store_f32<VEC>(out + i, acc);
}

/* Groups of VEC elements over [0, n / VEC * VEC), then the tail element by element. */
template <int VEC>
__global__ void __launch_bounds__(kPartsThreads)
    sum_partials_kernel(float *out, const float *parts, long n, long stride, int S, float beta) {
    const long t0 = (long)blockIdx.x * blockDim.x + threadIdx.x, step = (long)gridDim.x * blockDim.x;
    const long groups = n / VEC;
    for (long g = t0; g < groups; g += step) sum_partials_at<VEC>(out, parts, g * VEC, stride, S, beta);
    for (long i = groups * VEC + t0; i < n; i += step) sum_partials_at<1>(out, parts, i, stride, S, beta);
}

} // namespace

extern "C" void gpu_sumsq_partials(double *partials, const float *x, long n, cudaStream_t stream) {
    launch_partials<true>(partials, x, n, stream);
}

extern "C" void gpu_sumsq_rows_partials(double *partials, const float *table, const int *rows, int n, int C,
                                        cudaStream_t stream) {
    if (n < 0) n = 0;
    const int chunk = (n + REDUCE_PARTIALS - 1) / REDUCE_PARTIALS;
    if (C % 4 == 0 && aligned16(table))
        rows_sumsq_kernel<4><<<REDUCE_PARTIALS, kPartialThreads, 0, stream>>>(partials, table, rows, n, C, chunk);
    else
        rows_sumsq_kernel<1><<<REDUCE_PARTIALS, kPartialThreads, 0, stream>>>(partials, table, rows, n, C, chunk);
    cudaCheckLaunch();
}

extern "C" void gpu_sum_f32_partials(double *partials, const float *x, long n, cudaStream_t stream) {
    launch_partials<false>(partials, x, n, stream);
}

extern "C" void gpu_sum_f64(double *out, const double *x, long n, int accumulate, cudaStream_t stream) {
    sum_kernel<double><<<1, kSumThreads, 0, stream>>>(out, x, n < 0 ? 0 : n, accumulate);
    cudaCheckLaunch();
}

extern "C" void gpu_sum_f32(double *out, const float *x, long n, int accumulate, cudaStream_t stream) {
    sum_kernel<float><<<1, kSumThreads, 0, stream>>>(out, x, n < 0 ? 0 : n, accumulate);
    cudaCheckLaunch();
}

extern "C" void gpu_sumsq(double *out, double *partials, const float *x, long n, int accumulate, cudaStream_t stream) {
    gpu_sumsq_partials(partials, x, n, stream);
    gpu_sum_f64(out, partials, REDUCE_PARTIALS, accumulate, stream);
}

extern "C" void gpu_sum_partials_f32(float *out, const float *parts, long n, long stride, int S, float beta,
                                     cudaStream_t stream) {
    if (n <= 0 || S < 1) return;
    if (aligned16(out) && aligned16(parts) && stride % 4 == 0)
        sum_partials_kernel<4><<<grid_for(n / 4, kPartsThreads), kPartsThreads, 0, stream>>>(out, parts, n, stride,
                                                                                              S, beta);
    else
        sum_partials_kernel<1><<<grid_for(n, kPartsThreads), kPartsThreads, 0, stream>>>(out, parts, n, stride, S,
                                                                                          beta);
    cudaCheckLaunch();
}
