/*
 * The MoK megakernel, forward: the schedule kernel and the persistent kernel (protocol in mok.h).
 */
#include "../device_util.cuh"
#include "mok.h"
#include "mok_protocol.cuh"
#include "tile_mma.cuh"

#include <cuda_bf16.h>

#include <type_traits>

static_assert(MOK_TILE_M == MOK_BM && MOK_TILE_N == MOK_BN && MOK_BLOCK_THREADS == MOK_THREADS, "tile constants");

/* ------------------------------------------------------------------------------------------------
 * Schedule
 * ---------------------------------------------------------------------------------------------- */

constexpr int kScheduleThreads = 256;

/* M tiles per local expert, scanned by one block: each thread sums the tiles of a run of experts,
 * the runs are scanned across warps, then each thread writes its experts' starts (integer sums, so
 * any order gives the same result; one load latency instead of El dependent ones). */
__global__ void __launch_bounds__(kScheduleThreads)
    mok_schedule_kernel(int *mt_start, int *total_mt, const int *eo, int e0, int El, int tile_m) {
    __shared__ int warp_tiles[kScheduleThreads / 32];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int per = (El + kScheduleThreads - 1) / kScheduleThreads;
    const int lo = t * per < El ? t * per : El, hi = lo + per < El ? lo + per : El;
    auto tiles = [&](int el) { return (eo[e0 + el + 1] - eo[e0 + el] + tile_m - 1) / tile_m; };
    int own = 0;
    for (int el = lo; el < hi; el++) own += tiles(el);
    int upto = own; /* inclusive scan over the warp */
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, upto, o);
        if (lane >= o) upto += v;
    }
    if (lane == 31) warp_tiles[warp] = upto;
    __syncthreads();
    int mt = upto - own, total = 0;
    for (int w = 0; w < kScheduleThreads / 32; w++) {
        mt += w < warp ? warp_tiles[w] : 0;
        total += warp_tiles[w];
    }
    for (int el = lo; el < hi; el++) {
        mt_start[el] = mt;
        mt += tiles(el);
    }
    if (t == 0) {
        mt_start[El] = total;
        *total_mt = total;
    }
}

extern "C" int mok_mt_max(long R_max, int El) { return (int)((R_max + MOK_TILE_M - 1) / MOK_TILE_M) + El; }

extern "C" int mok_tile_m(int tile) { return tile == MOK_TILE_WGMMA ? 2 * MOK_TILE_M : MOK_TILE_M; }

extern "C" void mok_schedule(int *mt_start, int *total_mt, const int *expert_offset_all, int e0, int El, int tile_m,
                             cudaStream_t stream) {
    mok_schedule_kernel<<<1, kScheduleThreads, 0, stream>>>(mt_start, total_mt, expert_offset_all, e0, El, tile_m);
    cudaCheckLaunch();
}

__global__ void mok_iota_kernel(int *p, long n) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) p[i] = (int)i;
}

extern "C" void mok_iota(int *p, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const long blocks = (n + 255) / 256;
    mok_iota_kernel<<<(int)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(p, n);
    cudaCheckLaunch();
}

/* ------------------------------------------------------------------------------------------------
 * The roles
 * ---------------------------------------------------------------------------------------------- */

__device__ void mok_dispatch(const MokFwdParams &p, int MT) {
    __shared__ int s_mt;
    const int warp = threadIdx.x >> 5;
    const int base = p.expert_offset_all[p.e0];
    for (;;) {
        if (threadIdx.x == 0) s_mt = (int)atomicAdd(p.ticket + MOK_TICKET_PART, 1u);
        __syncthreads();
        const int mt = s_mt;
        if (mt >= MT) return;
        int el, r0, nrows;
        mok_tile_rows(p, mt, el, r0, nrows);
        for (int r = warp; r < nrows; r += MOK_THREADS / 32) mok_pull_row(p, base, r0 + r, p.xr, p.x_off, MOK_UNSCALED);
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            mok_red_release(p.arrive + mt, 1u);
        }
    }
}

template <int PIPE, class Smem>
__device__ void mok_gateup_task(const MokFwdParams &p, Smem &sm, int t, int nI) {
    const int mt = t / nI, nt = t - mt * nI;
    if (threadIdx.x == 0)
        mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.arrive + mt, 1u, MOK_ROLE_GATEUP_WAIT_DISPATCH, t,
                 mt);
    __syncthreads();
    int el, r0, nrows;
    mok_tile_rows(p, mt, el, r0, nrows);
    const size_t CI = (size_t)p.C * p.I;
    const __nv_bfloat16 *A = reinterpret_cast<const __nv_bfloat16 *>(p.xr) + (size_t)r0 * p.C;
    const __nv_bfloat16 *const B[2] = {reinterpret_cast<const __nv_bfloat16 *>(p.w_gate) + el * CI,
                                       reinterpret_cast<const __nv_bfloat16 *>(p.w_up) + el * CI};
    const int n0 = nt * MOK_BN;
    float acc[2][2][4][4];
    if constexpr (PIPE) mok_tile_mma_pipe<2>(acc, sm, A, p.C, nrows, B, p.I, n0, p.C);
    else mok_tile_mma<2>(acc, sm, A, p.C, nrows, B, p.I, n0, p.C);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int row, col;
                mok_tile_coord(mi, ni, 2 * half, row, col);
                if (row >= nrows) continue;
                const __nv_bfloat162 pg = __floats2bfloat162_rn(acc[0][mi][ni][2 * half], acc[0][mi][ni][2 * half + 1]);
                const __nv_bfloat162 pu = __floats2bfloat162_rn(acc[1][mi][ni][2 * half], acc[1][mi][ni][2 * half + 1]);
                const __nv_bfloat162 hv =
                    __floats2bfloat162_rn(silu_mul_f32(__low2float(pg), __low2float(pu)),
                                          silu_mul_f32(__high2float(pg), __high2float(pu)));
                const size_t off = (size_t)(r0 + row) * p.I + n0 + col;
                *reinterpret_cast<__nv_bfloat162 *>(p.h + off) = hv;
                if (p.pre_gate) {
                    *reinterpret_cast<__nv_bfloat162 *>(p.pre_gate + off) = pg;
                    *reinterpret_cast<__nv_bfloat162 *>(p.pre_up + off) = pu;
                }
            }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        mok_red_release(p.gu_done + mt, 1u);
    }
}

template <int PIPE, class Smem>
__device__ void mok_down_task(const MokFwdParams &p, Smem &sm, int t, int tdown, int nI, int nC) {
    const int mt = tdown / nC, nt = tdown - mt * nC;
    if (threadIdx.x == 0)
        mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.gu_done + mt, (unsigned)nI,
                 MOK_ROLE_DOWN_WAIT_GATEUP, t, mt);
    __syncthreads();
    int el, r0, nrows;
    mok_tile_rows(p, mt, el, r0, nrows);
    const size_t CI = (size_t)p.C * p.I;
    const __nv_bfloat16 *A = reinterpret_cast<const __nv_bfloat16 *>(p.h) + (size_t)r0 * p.I;
    const __nv_bfloat16 *const B[1] = {reinterpret_cast<const __nv_bfloat16 *>(p.w_down) + el * CI};
    const int n0 = nt * MOK_BN;
    float acc[1][2][4][4];
    if constexpr (PIPE) mok_tile_mma_pipe<1>(acc, sm, A, p.I, nrows, B, p.C, n0, p.I);
    else mok_tile_mma<1>(acc, sm, A, p.I, nrows, B, p.C, n0, p.I);
    const int base = p.expert_offset_all[p.e0];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int row, col;
            mok_tile_coord(mi, 0, 2 * half, row, col);
            if (row >= nrows) continue;
            const int g = p.row_slot_all[base + r0 + row];
            const int src = g / p.NK, slot = g - src * p.NK;
            __nv_bfloat16 *dst =
                reinterpret_cast<__nv_bfloat16 *>(p.peer_base[src] + p.y_off) + (size_t)slot * p.C + n0;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                mok_tile_coord(mi, ni, 2 * half, row, col);
                *reinterpret_cast<__nv_bfloat162 *>(dst + col) =
                    __floats2bfloat162_rn(acc[0][mi][ni][2 * half], acc[0][mi][ni][2 * half + 1]);
            }
        }
}

template <int PIPE>
__global__ void __launch_bounds__(MOK_THREADS) mok_forward_kernel(const MokFwdParams p) {
    using Smem2 = typename std::conditional<PIPE != 0, MokTileSmemPipe<2>, MokTileSmem<2>>::type;
    using Smem1 = typename std::conditional<PIPE != 0, MokTileSmemPipe<1>, MokTileSmem<1>>::type;
    __shared__ Smem2 sm;
    __shared__ int s_ticket;
    const int MT = *p.total_mt;
    if ((int)blockIdx.x < p.n_comm) {
        if (!p.skip_dispatch) mok_dispatch(p, MT);
        return;
    }
    if (p.dispatch_only) return;
    const int nI = p.I / MOK_BN, nC = p.C / MOK_BN;
    const long n_gu = (long)MT * nI, total = (long)MT * (nI + nC);
    for (;;) {
        if (threadIdx.x == 0) s_ticket = (int)atomicAdd(p.ticket + MOK_TICKET_TASK, 1u);
        __syncthreads();
        const int t = s_ticket;
        __syncthreads();
        if (t >= total) break;
        if (t < n_gu) mok_gateup_task<PIPE>(p, sm, t, nI);
        else mok_down_task<PIPE>(p, *reinterpret_cast<Smem1 *>(&sm), t, (int)(t - n_gu), nI, nC);
    }
}

extern "C" int mok_blocks_per_sm(int tile) {
    if (tile == MOK_TILE_WGMMA) return mok_sm90_blocks_per_sm();
    int n = 0;
    if (tile == MOK_TILE_PIPE)
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mok_forward_kernel<1>, MOK_THREADS, 0));
    else cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mok_forward_kernel<0>, MOK_THREADS, 0));
    return n < 1 ? 1 : (n > 4 ? 4 : n);
}

extern "C" int mok_tile_supported(int tile, int C, int I, const char **why) {
    if (tile == MOK_TILE_WGMMA) {
        if (!mok_sm90_available()) {
            *why = "the wgmma tile needs an SM 9.0 (Hopper) GPU and a build for sm_90a";
            return 0;
        }
        if (C % 8 != 0 || I % 8 != 0) {
            *why = "the wgmma tile needs hidden and expert sizes that are multiples of 8 (TMA row pitch)";
            return 0;
        }
        return 1;
    }
    if (C % MOK_TILE_N != 0 || I % MOK_TILE_N != 0) {
        *why = "the mma.sync tile needs hidden and expert sizes that are multiples of 64";
        return 0;
    }
    return 1;
}

extern "C" void mok_forward_launch(const MokFwdParams *p, int grid, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(p->arrive, 0, (size_t)p->mt_max * sizeof(unsigned), stream));
    cudaCheck(cudaMemsetAsync(p->gu_done, 0, (size_t)p->mt_max * sizeof(unsigned), stream));
    cudaCheck(cudaMemsetAsync(p->ticket, 0, MOK_TICKETS * sizeof(unsigned), stream));
    if (p->tile == MOK_TILE_WGMMA) mok_sm90_forward_launch(p, grid, stream);
    else if (p->tile == MOK_TILE_PIPE) mok_forward_kernel<1><<<grid, MOK_THREADS, 0, stream>>>(*p);
    else mok_forward_kernel<0><<<grid, MOK_THREADS, 0, stream>>>(*p);
    cudaCheckLaunch();
}
