/*
 * Embedding forward (a row gather) and backward (a per-id ordered sum over host-built buckets),
 * see embedding.h. VEC = 4 moves float4s (C % 4 == 0 and aligned pointers), VEC = 1 floats.
 */
#include "embedding.h"

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kBwdThreads = 128;

template <int VEC> struct Vec;
template <> struct Vec<4> {
    typedef float4 T;
    static __device__ __forceinline__ void add(float4 &a, const float4 &b) {
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
    }
};
template <> struct Vec<1> {
    typedef float T;
    static __device__ __forceinline__ void add(float &a, const float &b) { a += b; }
};

/* One item = VEC channels of one row; items = N * (C / VEC). */
template <int VEC>
__global__ void embedding_forward_kernel(float *out, const int *tokens, const float *table, int N, int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC, items = (long)N * cv;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        long n = i / cv, c = i - n * cv;
        long id = tokens[n];
        reinterpret_cast<T *>(out)[n * cv + c] = reinterpret_cast<const T *>(table)[id * cv + c];
    }
}

/* grid.x = bucket, grid.y = channel chunk of kBwdThreads * VEC channels. */
template <int VEC>
__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int *order, const int *bucket_start,
                                          const int *bucket_id, int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC;
    const long c = (long)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cv) return;
    const int b = blockIdx.x;
    const int p0 = bucket_start[b], p1 = bucket_start[b + 1];
    T *dst = reinterpret_cast<T *>(dtable) + (long)bucket_id[b] * cv + c;
    T acc = *dst;
    for (int p = p0; p < p1; p++) Vec<VEC>::add(acc, reinterpret_cast<const T *>(dout)[(long)order[p] * cv + c]);
    *dst = acc;
}

} // namespace

extern "C" void gpu_embedding_forward(float *out, const int *tokens, const float *table, int N, int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 4 == 0 && aligned16(out) && aligned16(table);
    const int blocks = grid_for((long)N * (vec ? C / 4 : C), kThreads);
    if (vec)
        embedding_forward_kernel<4><<<blocks, kThreads, 0, stream>>>(out, tokens, table, N, C);
    else
        embedding_forward_kernel<1><<<blocks, kThreads, 0, stream>>>(out, tokens, table, N, C);
    cudaCheckLaunch();
}

extern "C" void gpu_embedding_backward(float *dtable, const float *dout, const int *order, const int *bucket_start,
                                   const int *bucket_id, int nb, int C, cudaStream_t stream) {
    if (nb <= 0 || C <= 0) return;
    const int vec = C % 4 == 0 && aligned16(dtable) && aligned16(dout);
    const int cv = vec ? C / 4 : C;
    dim3 grid((unsigned)nb, (unsigned)((cv + kBwdThreads - 1) / kBwdThreads));
    if (vec)
        embedding_backward_kernel<4><<<grid, kBwdThreads, 0, stream>>>(dtable, dout, order, bucket_start, bucket_id, C);
    else
        embedding_backward_kernel<1><<<grid, kBwdThreads, 0, stream>>>(dtable, dout, order, bucket_start, bucket_id, C);
    cudaCheckLaunch();
}
