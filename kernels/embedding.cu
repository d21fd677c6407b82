/*
 * Embedding forward (a row gather), its rows put back, and backward (per-id ordered sums over host-built runs), see
 * embedding.h. VEC = 4 moves float4s (C % 4 == 0 and aligned pointers), VEC = 1 floats.
 */
#include "embedding.h"

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kBwdThreads = 128;
constexpr int kMaxRun = EMBEDDING_BWD_MAX_RUN;
constexpr int kSumBatch = 16; /* run sums loaded at once before they are added in order */

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
 * the former into the latter (zeros where rows is NULL), else the latter into the former. */
template <int VEC, bool PUT>
__global__ void embedding_rows_kernel(float *rows, const int *ids, float *table, int N, int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC, items = (long)N * cv;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        long n = i / cv, c = i - n * cv;
        T *t = reinterpret_cast<T *>(table) + (long)ids[n] * cv + c;
        if (PUT && !rows) *t = T();
        else if (PUT) *t = reinterpret_cast<T *>(rows)[n * cv + c];
        else reinterpret_cast<T *>(rows)[n * cv + c] = *t;
    }
}

/* The plan's arrays inside its block (embedding.h: EmbeddingBwdPlan). */
struct PlanArrays {
    const int *order, *start, *id, *brun, *slot, *run_bucket, *multi;
    __device__ PlanArrays(const int *ints, int N, int nb, int runs)
        : order(ints), start(ints + N), id(start + nb + 1), brun(id + nb), slot(brun + nb + 1),
          run_bucket(slot + nb), multi(run_bucket + runs) {}
};

/* grid.x = run, grid.y = channel chunk of kBwdThreads * VEC channels. The run's rows (all loads in flight at once),
 * summed in order from the first; then added to the table's row where the id has no other run, else stored as the
 * run's scratch row. */
template <int VEC>
__global__ void embedding_runs_kernel(float *dtable, float *scratch, const float *dout, const int *ints, int N, int nb,
                                      int runs, int run, int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC;
    const long c = (long)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cv) return;
    const PlanArrays a(ints, N, nb, runs);
    const int r = blockIdx.x, b = a.run_bucket[r], j = r - a.brun[b];
    const int p0 = a.start[b] + j * run, n = min(run, a.start[b + 1] - p0);
    const T *g = reinterpret_cast<const T *>(dout) + c;
    T v[kMaxRun];
#pragma unroll
    for (int i = 0; i < kMaxRun; i++)
        if (i < n) v[i] = g[(long)a.order[p0 + i] * cv];
    T acc = v[0];
#pragma unroll
    for (int i = 1; i < kMaxRun; i++)
        if (i < n) Vec<VEC>::add(acc, v[i]);
    const int s = a.slot[b];
    if (s < 0) {
        T *dst = reinterpret_cast<T *>(dtable) + (long)a.id[b] * cv + c;
        T o = *dst;
        Vec<VEC>::add(o, acc);
        *dst = o;
    } else {
        reinterpret_cast<T *>(scratch)[(long)(s + j) * cv + c] = acc;
    }
}

/* grid.x = id with several runs (multi), grid.y = channel chunk: the runs' sums added to the table's row in order,
 * kSumBatch loads in flight at a time. */
template <int VEC>
__global__ void embedding_run_sums_kernel(float *dtable, const float *scratch, const int *ints, int N, int nb, int runs,
                                          int C) {
    typedef typename Vec<VEC>::T T;
    const long cv = C / VEC;
    const long c = (long)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cv) return;
    const PlanArrays a(ints, N, nb, runs);
    const int b = a.multi[blockIdx.x], s = a.slot[b], n = a.brun[b + 1] - a.brun[b];
    const T *src = reinterpret_cast<const T *>(scratch) + (long)s * cv + c;
    T *dst = reinterpret_cast<T *>(dtable) + (long)a.id[b] * cv + c;
    T acc = *dst;
    for (int j0 = 0; j0 < n; j0 += kSumBatch) {
        T v[kSumBatch];
#pragma unroll
        for (int i = 0; i < kSumBatch; i++)
            if (j0 + i < n) v[i] = src[(long)(j0 + i) * cv];
#pragma unroll
        for (int i = 0; i < kSumBatch; i++)
            if (j0 + i < n) Vec<VEC>::add(acc, v[i]);
    }
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

extern "C" void gpu_embedding_backward(float *dtable, float *scratch, const float *dout, const int *ints,
                                       const EmbeddingBwdPlan *plan, int C, cudaStream_t stream) {
    if (plan->runs <= 0 || C <= 0) return;
    const int vec = C % 4 == 0 && aligned16(dtable) && aligned16(dout) && aligned16(scratch);
    const int cv = vec ? C / 4 : C;
    const unsigned chunks = (unsigned)((cv + kBwdThreads - 1) / kBwdThreads);
    const dim3 grid_runs((unsigned)plan->runs, chunks), grid_sums((unsigned)plan->nm, chunks);
    const int N = plan->N, nb = plan->nb, runs = plan->runs, run = plan->run;
    if (vec)
        embedding_runs_kernel<4><<<grid_runs, kBwdThreads, 0, stream>>>(dtable, scratch, dout, ints, N, nb, runs, run, C);
    else
        embedding_runs_kernel<1><<<grid_runs, kBwdThreads, 0, stream>>>(dtable, scratch, dout, ints, N, nb, runs, run, C);
    cudaCheckLaunch();
    if (plan->nm == 0) return;
    if (vec)
        embedding_run_sums_kernel<4><<<grid_sums, kBwdThreads, 0, stream>>>(dtable, scratch, ints, N, nb, runs, C);
    else
        embedding_run_sums_kernel<1><<<grid_sums, kBwdThreads, 0, stream>>>(dtable, scratch, ints, N, nb, runs, C);
    cudaCheckLaunch();
}
