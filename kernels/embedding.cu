/*
 * Embedding forward (a row gather), its rows put back, and backward (a per-id ordered sum over host-built buckets),
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

/* One item = VEC channels of one row; items = N * (C / VEC). Row n of `rows` and row ids[n] of `table`: PUT copies
 * the former into the latter, else the latter into the former. */
template <int VEC, bool PUT>
__global__ void embedding_rows_kernel(float *rows, const int *ids, float *table, int N, int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC, items = (long)N * cv;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        long n = i / cv, c = i - n * cv;
        T *r = reinterpret_cast<T *>(rows) + n * cv + c;
        T *t = reinterpret_cast<T *>(table) + (long)ids[n] * cv + c;
        if (PUT) *t = *r;
        else *r = *t;
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

template <bool PUT> void embedding_rows(float *rows, const int *ids, float *table, int N, int C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 4 == 0 && aligned16(rows) && aligned16(table);
    const int blocks = grid_for((long)N * (vec ? C / 4 : C), kThreads);
    if (vec)
        embedding_rows_kernel<4, PUT><<<blocks, kThreads, 0, stream>>>(rows, ids, table, N, C);
    else
        embedding_rows_kernel<1, PUT><<<blocks, kThreads, 0, stream>>>(rows, ids, table, N, C);
    cudaCheckLaunch();
}

} // namespace

extern "C" void gpu_embedding_forward(float *out, const int *tokens, const float *table, int N, int C, cudaStream_t stream) {
    embedding_rows<false>(out, tokens, const_cast<float *>(table), N, C, stream);
}

extern "C" void gpu_embedding_put_rows(float *table, const float *rows, const int *ids, int n, int C,
                                       cudaStream_t stream) {
    embedding_rows<true>(const_cast<float *>(rows), ids, table, n, C, stream);
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
