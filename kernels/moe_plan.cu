/*
 * MoE dispatch plan (moe_plan.h): a stable counting sort of the (token, j) slots by expert with
 * integer arithmetic only. Within a chunk one warp assigns ranks in slot order; the per-expert
 * counters live in the warp's shared memory (or, for very many experts, in the chunk's own row of
 * chunk_counts), with __syncwarp between every read and write round.
 */
#include "moe_plan.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kCountWarps = 4;
constexpr int kCountBatch = 8;
constexpr int kCountSmemMax = 48 * 1024; /* counters in shared memory up to E = 3072 (histogram: 12288) */
constexpr int kScanThreads = 1024;
constexpr int kScanBatch = 8;
constexpr int kHistThreads = 1024, kHistBatch = 8, kHistSlots = kHistThreads * kHistBatch;

/* The counters of chunk c live in shared memory when the launch gave each warp E ints of it
 * (smem), else in the chunk's row of chunk_counts; the chunk's expert ids are read 8 rounds at a
 * time, so that only the counter round trip is serial. */
__global__ void plan_count_kernel(int *__restrict__ chunk_counts, int *__restrict__ slot_rank,
                                  const int *__restrict__ topk, long nslots, int E, int chunks, bool smem) {
    extern __shared__ int warp_counts[];
    const int lane = threadIdx.x & 31;
    for (long c = (long)blockIdx.x * kCountWarps + (threadIdx.x >> 5); c < chunks;
         c += (long)gridDim.x * kCountWarps) {
        int *cnt = smem ? warp_counts + (threadIdx.x >> 5) * E : chunk_counts + c * E;
        for (int e = lane; e < E; e += 32) cnt[e] = 0;
        __syncwarp();
        const long s0 = c * MOE_PLAN_CHUNK;
        const long s1 = s0 + MOE_PLAN_CHUNK < nslots ? s0 + MOE_PLAN_CHUNK : nslots;
        for (long base = s0; base < s1; base += 32 * kCountBatch) {
            int ids[kCountBatch];
#pragma unroll
            for (int i = 0; i < kCountBatch; i++) {
                const long s = base + 32 * i + lane;
                ids[i] = s < s1 ? topk[s] : -1 - lane; /* a unique key for idle lanes */
            }
#pragma unroll
            for (int i = 0; i < kCountBatch; i++) {
                const long s = base + 32 * i + lane;
                const bool valid = s < s1;
                const int e = ids[i];
                const unsigned peers = __match_any_sync(kFull, e);
                const int lower = __popc(peers & ((1u << lane) - 1u));
                const int before = valid ? cnt[e] : 0;
                __syncwarp();
                if (valid) {
                    slot_rank[s] = before + lower;
                    if (lane == 31 - __clz(peers)) cnt[e] = before + __popc(peers); /* the group's last lane */
                }
                __syncwarp();
            }
        }
        if (smem)
            for (int e = lane; e < E; e += 32) chunk_counts[c * E + e] = cnt[e];
        __syncwarp();
    }
}

__global__ void __launch_bounds__(kScanThreads) plan_scan_kernel(int *__restrict__ chunk_counts, int *__restrict__ counts,
                                 long long *__restrict__ stat_counts, int *__restrict__ expert_offset, int chunks,
                                 int E) {
    __shared__ int sm[kScanThreads];
    const int t = threadIdx.x;
    for (int e = t; e < E; e += kScanThreads) {
        int run = 0;
        for (int c0 = 0; c0 < chunks; c0 += kScanBatch) { /* a batch's loads in flight together */
            int v[kScanBatch];
#pragma unroll
            for (int i = 0; i < kScanBatch; i++) v[i] = c0 + i < chunks ? chunk_counts[(long)(c0 + i) * E + e] : 0;
#pragma unroll
            for (int i = 0; i < kScanBatch; i++) {
                if (c0 + i >= chunks) break;
                chunk_counts[(long)(c0 + i) * E + e] = run;
                run += v[i];
            }
        }
        counts[e] = run;
        stat_counts[e] = run;
    }
    __syncthreads(); /* counts visible to the whole block */
    const int per = (E + kScanThreads - 1) / kScanThreads;
    const int lo = t * per < E ? t * per : E, hi = lo + per < E ? lo + per : E;
    int own = 0;
    for (int e = lo; e < hi; e++) own += counts[e];
    sm[t] = own;
    __syncthreads();
    for (int off = 1; off < kScanThreads; off <<= 1) { /* inclusive Hillis-Steele scan */
        const int v = t >= off ? sm[t - off] : 0;
        __syncthreads();
        sm[t] += v;
        __syncthreads();
    }
    int run = sm[t] - own;
    for (int e = lo; e < hi; e++) {
        expert_offset[e] = run;
        run += counts[e];
    }
    if (t == kScanThreads - 1) expert_offset[E] = sm[t];
}

/* kHistSlots slots a block, kHistBatch loads in flight a thread before its adds: integer counts, so the order of
 * the atomic adds does not show in the result. The bins are shared memory when E of them fit (smem), each block
 * then adding its bins into the outputs, else the outputs themselves; the launcher zeroes the outputs first. */
__global__ void __launch_bounds__(kHistThreads)
    plan_histogram_kernel(int *__restrict__ counts, long long *__restrict__ stat_counts, const int *__restrict__ topk,
                          long nslots, int E, bool smem) {
    extern __shared__ int bins[];
    unsigned long long *stat = reinterpret_cast<unsigned long long *>(stat_counts);
    if (smem) {
        for (int e = threadIdx.x; e < E; e += kHistThreads) bins[e] = 0;
        __syncthreads();
    }
    const long s0 = (long)blockIdx.x * kHistSlots, s1 = s0 + kHistSlots < nslots ? s0 + kHistSlots : nslots;
    int ids[kHistBatch];
#pragma unroll
    for (int i = 0; i < kHistBatch; i++) {
        const long s = s0 + (long)i * kHistThreads + threadIdx.x;
        ids[i] = s < s1 ? topk[s] : -1;
    }
#pragma unroll
    for (int i = 0; i < kHistBatch; i++) {
        if (ids[i] < 0) continue;
        if (smem) {
            atomicAdd(&bins[ids[i]], 1);
        } else {
            atomicAdd(&counts[ids[i]], 1);
            atomicAdd(&stat[ids[i]], 1ull);
        }
    }
    if (!smem) return;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += kHistThreads) {
        const int c = bins[e];
        if (c == 0) continue;
        atomicAdd(&counts[e], c);
        atomicAdd(&stat[e], (unsigned long long)c);
    }
}

__global__ void plan_place_kernel(int *__restrict__ slot_row, int *__restrict__ row_slot, const int *__restrict__ topk,
                                  const int *__restrict__ slot_rank, const int *__restrict__ chunk_counts,
                                  const int *__restrict__ expert_offset, long nslots, int E) {
    for (long s = (long)blockIdx.x * blockDim.x + threadIdx.x; s < nslots; s += (long)gridDim.x * blockDim.x) {
        const int e = topk[s];
        const long c = s / MOE_PLAN_CHUNK;
        const int row = expert_offset[e] + chunk_counts[c * E + e] + slot_rank[s];
        slot_row[s] = row;
        row_slot[row] = (int)s;
    }
}

} // namespace

extern "C" int gpu_moe_plan_chunks(long nslots) {
    return nslots <= 0 ? 0 : (int)((nslots + MOE_PLAN_CHUNK - 1) / MOE_PLAN_CHUNK);
}

extern "C" void gpu_moe_plan_count(int *chunk_counts, int *slot_rank, const int *topk, long nslots, int E,
                                   cudaStream_t stream) {
    const int chunks = gpu_moe_plan_chunks(nslots);
    if (chunks == 0 || E <= 0) return;
    int blocks = (chunks + kCountWarps - 1) / kCountWarps;
    if (blocks > 65535) blocks = 65535;
    const size_t smem = (size_t)kCountWarps * E * sizeof(int);
    const bool in_smem = smem <= (size_t)kCountSmemMax;
    plan_count_kernel<<<blocks, 32 * kCountWarps, in_smem ? smem : 0, stream>>>(chunk_counts, slot_rank, topk, nslots,
                                                                                 E, chunks, in_smem);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_plan_histogram(int *counts, long long *stat_counts, const int *topk, long nslots, int E,
                                       cudaStream_t stream) {
    if (E <= 0) return;
    cudaCheck(cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int), stream));
    cudaCheck(cudaMemsetAsync(stat_counts, 0, (size_t)E * sizeof(long long), stream));
    if (nslots <= 0) return;
    const size_t smem = (size_t)E * sizeof(int);
    const bool in_smem = smem <= (size_t)kCountSmemMax;
    const long blocks = (nslots + kHistSlots - 1) / kHistSlots; /* 2^31 of them: 1.7e13 slots */
    plan_histogram_kernel<<<(unsigned)blocks, kHistThreads, in_smem ? smem : 0, stream>>>(counts, stat_counts, topk,
                                                                                          nslots, E, in_smem);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_plan_scan(int *chunk_counts, int *counts, long long *stat_counts, int *expert_offset,
                                  long nslots, int E, cudaStream_t stream) {
    if (E <= 0) return;
    plan_scan_kernel<<<1, kScanThreads, 0, stream>>>(chunk_counts, counts, stat_counts, expert_offset,
                                                     gpu_moe_plan_chunks(nslots), E);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_plan_place(int *slot_row, int *row_slot, const int *topk, const int *slot_rank,
                                   const int *chunk_counts, const int *expert_offset, long nslots, int E,
                                   cudaStream_t stream) {
    if (nslots <= 0 || E <= 0) return;
    const int threads = 256;
    long blocks = (nslots + threads - 1) / threads;
    if (blocks > 65535L * 8) blocks = 65535L * 8;
    plan_place_kernel<<<(int)blocks, threads, 0, stream>>>(slot_row, row_slot, topk, slot_rank, chunk_counts,
                                                           expert_offset, nslots, E);
    cudaCheckLaunch();
}
