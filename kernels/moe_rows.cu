/*
 * Row gather and regroup for the unfused MoE layer (moe_rows.h): one warp copies one row.
 */
#include "moe_rows.h"

#include <stdint.h>

#include "device_util.cuh"

namespace {

constexpr int kWarps = 8;

int blocks_for_rows(long rows) {
    long b = (rows + kWarps - 1) / kWarps;
    return (int)(b < 65535L * 8 ? b : 65535L * 8);
}

/* One warp copies a row of C bf16: as uint4 (8 bf16) when vec, else as uint16_t. */
__device__ __forceinline__ void copy_row(uint16_t *__restrict__ d, const uint16_t *__restrict__ s, int C, bool vec,
                                         int lane) {
    if (vec) {
        const uint4 *s4 = reinterpret_cast<const uint4 *>(s);
        uint4 *d4 = reinterpret_cast<uint4 *>(d);
        for (int i = lane; i < C / 8; i += 32) d4[i] = s4[i];
    } else {
        for (int i = lane; i < C; i += 32) d[i] = s[i];
    }
}

__global__ void gather_kernel(uint16_t *__restrict__ dst, const uint16_t *__restrict__ src, const int *__restrict__ map,
                              int div, long rows, int C, int vec) {
    const int lane = threadIdx.x & 31;
    for (long i = (long)blockIdx.x * kWarps + (threadIdx.x >> 5); i < rows; i += (long)gridDim.x * kWarps) {
        const long from = map[i] / div;
        copy_row(dst + i * C, src + from * C, C, vec, lane);
    }
}

__global__ void regroup_kernel(uint16_t *owner, uint16_t *stage, const int *__restrict__ owner_start,
                               const int *__restrict__ stage_start, int nseg, long rows, int C, int to_owner,
                               int vec) {
    const int lane = threadIdx.x & 31;
    for (long r = (long)blockIdx.x * kWarps + (threadIdx.x >> 5); r < rows; r += (long)gridDim.x * kWarps) {
        /* the last segment whose start is <= r (empty segments share the next one's start) */
        int lo = 0, hi = nseg - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (owner_start[mid] <= r) lo = mid;
            else hi = mid - 1;
        }
        const long srow = (long)stage_start[lo] + (r - owner_start[lo]);
        if (to_owner) copy_row(owner + r * C, stage + srow * C, C, vec, lane);
        else copy_row(stage + srow * C, owner + r * C, C, vec, lane);
    }
}

} // namespace

extern "C" void gpu_moe_gather_rows(bf16_t *dst, const bf16_t *src, const int *map, int div, long rows, int C,
                                    cudaStream_t stream) {
    if (rows <= 0 || C <= 0) return;
    const int vec = C % 8 == 0 && aligned16(dst) && aligned16(src);
    gather_kernel<<<blocks_for_rows(rows), 32 * kWarps, 0, stream>>>(dst, src, map, div, rows, C, vec);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_regroup_rows(bf16_t *owner, bf16_t *stage, const int *owner_start, const int *stage_start,
                                     int nseg, long rows, int C, int to_owner, cudaStream_t stream) {
    if (rows <= 0 || C <= 0 || nseg <= 0) return;
    const int vec = C % 8 == 0 && aligned16(owner) && aligned16(stage);
    regroup_kernel<<<blocks_for_rows(rows), 32 * kWarps, 0, stream>>>(owner, stage, owner_start, stage_start, nseg,
                                                                      rows, C, to_owner, vec);
    cudaCheckLaunch();
}
