/*
 * The megakernel forward with the Hopper tile: wgmma + TMA, warp-specialised (sm_90a). Same
 * protocol as the mma.sync kernel (mok.h): M tiles of an expert's rows, arrival counters, the
 * monotonic ticket in topological order (every gate/up task of an M tile before its down tasks;
 * grouped: sm90_fwd_task), down outputs pushed to the source rank's combine slot. What differs:
 *  - M tiles of 128 rows (tile_m = 128), tasks of 128 x 256: every weight byte brought into shared
 *    memory serves 128 rows (the layer is bound by L2 -> SM traffic: 64 x 256 tasks measured 2.17 ms
 *    at E=128 H=2048 I=768, 5.8 TB/s of tile loads).
 *  - one block per SM, 384 threads = 3 warpgroups. Warpgroup 0 (64 registers a thread): lane 0 of
 *    warp 0 is the producer (takes the tickets, waits on the counters, issues the TMA loads into a
 *    ring of SM90_STAGES stages, hands each task to the consumers through a 2-slot task ring);
 *    warps 1-3 pull dispatched rows (in the first n_comm blocks). Warpgroups 1 and 2 consume
 *    (208 registers): consumer w computes rows [64w, 64w + 64) of the task, all 256 columns, with
 *    wgmma m64n256k16 into 128 fp32 registers a thread, then its epilogue.
 *  - gate/up task (mt, 128 columns of I): the 256 columns are [n0, n0 + 128) of w_gate then the
 *    same of w_up, so SwiGLU is elementwise in registers; the task is done when both consumers
 *    signalled: gu_done[mt] == 2 * nI. Down task (mt, 256 columns of C).
 *  - K in blocks of 64 in order (fixed accumulation order: reproducible). TMA zero-fills past the
 *    tensors' edges (the K tail, columns past I or C, rows past R_max), so any C, I that are
 *    multiples of 8 work; rows of a tile past its expert's count are computed and discarded, except
 *    that a tile of at most 64 rows loads a 64-row box of A and only consumer 0 multiplies
 *    (consumer 1 lets the stages pass: sm90_skip_task).
 *  - epilogues stage the tile in shared memory and write it out: h, and pre_gate, pre_up when a
 *    backward keeps them, locally, by TMA stores of 64 x 64 boxes (whole 16-byte vectors from the
 *    threads where a consumer's rows end inside a box); the down rows, staged whole and sent by
 *    bulk copies of up to 512 bytes, over NVLink to the source's window.
 *  - TMA reads rows that other blocks wrote in the same launch (xr by the dispatch warps' plain
 *    stores, h by the gate/up epilogues): writers complete their stores and fence the async proxy
 *    before their release, the producer after its acquire.
 * The pipeline (roles, stages, staging, dispatch warps) is shared with the backward:
 * sm90_pipeline.cuh. Shared memory: 3 x (A 16 KB + B 32 KB) + 2 x 33 KB staging ≈ 211 KB.
 */
#include "../device_util.cuh"
#include "mok.h"
#include "sm90_pipeline.cuh"


/* TMA maps of xr and h (2D, boxes of 64 K x 128 rows) and of the (El, K, N) weights (64 x 64
 * panels, Sm90Panels); encoded at each launch from the pointers in MokFwdParams (a kernel
 * parameter of their own: CUtensorMap's 64-byte alignment stays out of host structs). */
typedef struct {
    CUtensorMap xr, h;
    Sm90Panels w_gate, w_up, w_down; /* B: 2 (gate/up) or 4 (down) panels a box */
    CUtensorMap xr_half, h_half; /* boxes of 64 rows: M tiles of at most 64 rows (one consumer's),
                                    and the gate/up epilogue's stores of h */
    CUtensorMap pre_gate, pre_up; /* boxes of 64 x 64: the gate/up epilogue's stores (when kept) */
} Sm90FwdMaps;

/* The task behind ticket t. Gate/up tasks are (mt, 128 columns of I), down tasks (mt, 256 of C).
 * The M tiles form groups of G (the last one shorter); the order is gate/up of group 0, then for
 * j = 1, 2, ..: gate/up of group j, down of group j - 1; then down of the last group. A down task
 * is claimed after its tiles' gate/up tasks and the next group's (G * nI tickets, fewer for the
 * last group; the host picks G so that they span rounds of the grid: the tiles' gate/up tasks are
 * done or nearly), and its pushes over NVLink overlap the next group's gate/up tasks instead of
 * all coming at the end. G >= MT: every gate/up task first. */
struct Sm90FwdTask {
    int t; /* the ticket; -1: the end (the task ring's message) */
    int down, mt, nt;
    Sm90TileRows rows; /* M tile mt's (the producer's mok_tile_rows) */
};
struct Sm90FwdOrder {
    int MT, G, nI, nC; /* M tiles, tiles a group, gate/up and down tasks per M tile */
    int total;         /* tasks */
};
__device__ __forceinline__ Sm90FwdTask sm90_fwd_task(int t, const Sm90FwdOrder &o) {
    const int MT = o.MT, G = o.G, nI = o.nI, nC = o.nC;
    const int n = (MT + G - 1) / G, last = MT - (n - 1) * G;
    Sm90FwdTask k;
    k.t = t;
    auto pick = [&](int down, int g, int u) {
        const int w = down ? nC : nI;
        k.down = down, k.mt = g * G + u / w, k.nt = u % w;
    };
    const int g0 = n > 1 ? G : last;
    if (t < g0 * nI) {
        pick(0, 0, t);
        return k;
    }
    int u = t - g0 * nI;
    const int P = G * (nI + nC), F = n > 2 ? n - 2 : 0; /* full pairs: groups 1 .. n - 2 */
    if (u < F * P) {
        const int j = 1 + u / P, v = u % P;
        if (v < G * nI) pick(0, j, v);
        else pick(1, j - 1, v - G * nI);
        return k;
    }
    u -= F * P;
    if (n > 1) { /* gate/up of the last group, down of the one before */
        if (u < last * nI) {
            pick(0, n - 1, u);
            return k;
        }
        u -= last * nI;
        if (u < G * nC) {
            pick(1, n - 2, u);
            return k;
        }
        u -= G * nC;
    }
    pick(1, n - 1, u);
    return k;
}

/* One thread: tickets -> counters -> TMA loads. */
template <bool TRACE>
__device__ void sm90_fwd_produce(const MokFwdParams &p, const Sm90FwdMaps &tm, const Sm90Watch &wd, const Sm90Smem &sm,
                                 const Sm90FwdOrder &o) {
    Sm90Ring sr(SM90_STAGES), tr(2);
    for (;;) {
        const int t = (int)atomicAdd(p.ticket + MOK_TICKET_TASK, 1u);
        Sm90FwdTask k = t < o.total ? sm90_fwd_task(t, o) : Sm90FwdTask{-1, 0, 0, 0, {0, 0, 0}};
        if (k.t >= 0) mok_tile_rows(p, k.mt, k.rows.el, k.rows.r0, k.rows.nrows);
        sm90_send_task(wd, sm.bars, tr, k);
        if (k.t < 0) return;
        const long long tw = TRACE ? mok_globaltimer() : 0;
        if (k.down)
            mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.gu_done + k.mt, 2u * o.nI,
                     MOK_ROLE_DOWN_WAIT_GATEUP, t, k.mt);
        else
            mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.arrive + k.mt, SM90_DISPATCH_PARTS,
                     MOK_ROLE_GATEUP_WAIT_DISPATCH, t, k.mt);
        if (TRACE) sm.bars->trace[MOK_TRACE_PRODUCER + k.down] += mok_globaltimer() - tw;
        mok_fence_proxy_async_global();
        const int el = k.rows.el, r0 = k.rows.r0, nrows = k.rows.nrows;
        const int K = k.down ? p.I : p.C, N = k.down ? p.C : p.I, KB = (K + SM90_BK - 1) / SM90_BK;
        /* a tile of at most 64 rows loads half of A's box, and only consumer 0 multiplies */
        const bool half = nrows <= 64;
        /* B: gate/up, 128 columns of w_gate then the same of w_up; down, 256 of w_down (columns past
         * N are discarded) */
        const int c0 = k.down ? k.nt * 256 : k.nt * 128;
        const unsigned bytes = (half ? SM90_A_BYTES / 2 : SM90_A_BYTES) +
                               (k.down ? sm90_panels_bytes(tm.w_down, c0, N) : 2 * sm90_panels_bytes(tm.w_gate, c0, N));
        for (int kb = 0; kb < KB; kb++) {
            const int s = sm90_stage_begin(wd, sm.bars, sr, bytes, t);
            uint64_t *full = &sm.bars->full[s];
            const CUtensorMap *a_map = k.down ? (half ? &tm.h_half : &tm.h) : (half ? &tm.xr_half : &tm.xr);
            mok_tma_load_2d(sm.a + s * SM90_A_BYTES, a_map, full, kb * SM90_BK, r0);
            unsigned char *b = sm.b + s * SM90_B_BYTES;
            if (k.down) {
                sm90_load_panels(b, tm.w_down, full, c0, N, kb * SM90_BK, el);
            } else {
                sm90_load_panels(b, tm.w_gate, full, c0, N, kb * SM90_BK, el);
                sm90_load_panels(b + 2 * SM90_PANEL_BYTES, tm.w_up, full, c0, N, kb * SM90_BK, el);
            }
        }
    }
}

/* Gate/up epilogue of consumer w (its rows r0.. r0 + nrows of M tile mt): pre_gate and pre_up rounded to
 * bf16 into the two halves of its staging and stored when kept, then h = silu(pre_gate) * pre_up from those rounded
 * values (as kernels/swiglu.cu) in place of pre_gate, and stored; then the signal. A consumer with all 64 rows stores
 * by TMA (two 64 x 64 boxes a matrix, from one thread; h's writes complete before the signal, the down tasks read it by
 * TMA); one with fewer stores from registers (TMA clips a box only at the tensor's edge, and the next expert's rows
 * follow). h is computed from the staging, not from the accumulators: with all 128 of them live, ptxas either
 * serialises the 64 elements or spills. */
__device__ __forceinline__ void sm90_epilogue_gateup(const MokFwdParams &p, const Sm90FwdMaps &tm,
                                                     const float (&acc)[128], __nv_bfloat16 *stg, int w, int mt,
                                                     int r0, int nrows, int nt, unsigned long long *tr) {
    Sm90Laps laps(tr); /* tr: the traced build's timekeeper only */
    const int col0 = nt * 128, tid = threadIdx.x & 127;
    const bool by_tma = nrows >= 64;
    __nv_bfloat16 *sg = stg, *su = stg + 64 * 128; /* half tiles: gate, up */
    static_assert(2 * 64 * 128 <= SM90_STG_ELEMS, "two half tiles fit in a consumer's staging");
    auto row_of = [&](bf16_t *m) { return [=](int r) { return m + (size_t)(r0 + r) * p.I + col0; }; };
    /* SM90_TMA_STORER stores the half tile's boxes (those left of column I) by TMA, one bulk group */
    auto store_boxes = [&](const CUtensorMap *map, const __nv_bfloat16 *half) {
        if (tid != SM90_TMA_STORER) return;
        for (int b = 0; b < 2 && col0 + 64 * b < p.I; b++)
            mok_tma_store_2d(map, half + b * SM90_BOX_ELEMS, col0 + 64 * b, r0);
        mok_bulk_commit();
    };
    sm90_staging_acquire(w);
    sm90_stage<true>(sg, w, [&](int i, int half) { return sm90_pair(acc, i, half); });
    sm90_stage<true>(su, w, [&](int i, int half) { return sm90_pair(acc, i + 16, half); });
    laps.lap(0);
    if (p.pre_gate) {
        if (by_tma) {
            store_boxes(&tm.pre_gate, sg); /* sm90_stage<true> fenced the staging for TMA */
            store_boxes(&tm.pre_up, su);
            if (tid == SM90_TMA_STORER) mok_bulk_wait_read<1>(); /* pre_gate's boxes read: h may overwrite them */
            sm90_named_sync(2 + w, 128);
        } else {
            sm90_unstage<true>(sg, w, nrows, col0, p.I, row_of(p.pre_gate));
            sm90_unstage<true>(su, w, nrows, col0, p.I, row_of(p.pre_up));
        }
    }
    laps.lap(1);
    /* each thread rewrites the pairs its accumulators staged (conflict-free, as sm90_stage), four
     * chunks at a time: their loads first (the compiler keeps a load after an earlier store to the
     * same staging), and no more at once (the accumulators stay live: the wgmma asm takes them as
     * read-write operands, though the next task's first product overwrites them) */
    const int ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t2 = 2 * (tid & 3);
#pragma unroll
    for (int i0 = 0; i0 < 16; i0 += 4) {
        __nv_bfloat162 g[4][2], u[4][2];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int r = ra + 8 * half;
                g[i][half] = *reinterpret_cast<const __nv_bfloat162 *>(sm90_stg_at<true>(sg, r, i0 + i) + t2);
                u[i][half] = *reinterpret_cast<const __nv_bfloat162 *>(sm90_stg_at<true>(su, r, i0 + i) + t2);
            }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int half = 0; half < 2; half++)
                *reinterpret_cast<__nv_bfloat162 *>(sm90_stg_at<true>(sg, ra + 8 * half, i0 + i) + t2) =
                    __floats2bfloat162_rn(silu_mul_f32(__low2float(g[i][half]), __low2float(u[i][half])),
                                          silu_mul_f32(__high2float(g[i][half]), __high2float(u[i][half])));
    }
    if (by_tma) mok_fence_proxy_async_shared(); /* the TMA stores read it */
    sm90_named_sync(2 + w, 128);
    laps.lap(2);
    if (by_tma) {
        store_boxes(&tm.h_half, sg);
        if (tid == SM90_TMA_STORER) mok_bulk_wait(); /* h has landed (and pre_up has been read) */
    } else {
        sm90_unstage<true>(sg, w, nrows, col0, p.I, row_of(p.h));
    }
    mok_fence_proxy_async_global(); /* h is read by TMA in the down tasks */
    sm90_named_sync(2 + w, 128);
    if (tid == 0) {
        __threadfence();
        mok_red_release(p.gu_done + mt, 1u);
    }
    laps.lap(3);
}

/* Consumer warpgroup w (0 or 1). TRACE: consumer 0's first thread keeps the trace (Sm90TaskClock). */
template <bool TRACE>
__device__ __forceinline__ void sm90_fwd_consume(const MokFwdParams &p, const Sm90FwdMaps &tm, const Sm90Watch &wd,
                                                 const Sm90Smem &sm, int w) {
    const Sm90TaskClock clock = sm90_consume_tasks<Sm90FwdTask, TRACE>(
        wd, sm, w, [&](const Sm90FwdTask &k, float(&acc)[128], __nv_bfloat16 *stg, Sm90Ring &sr, Sm90TaskClock &clock) {
            const int t = k.t;
            const int KB = ((k.down ? p.I : p.C) + SM90_BK - 1) / SM90_BK;
            int r0, nrows;
            sm90_consumer_rows(w, k.rows, r0, nrows);
            if (nrows <= 0) { /* consumer 1 past the tile's rows (never consumer 0, whose trace this skips) */
                sm90_skip_task(wd, sm, sr, KB, t, k.down ? nullptr : p.gu_done + k.mt);
                return;
            }
            if (k.down) {
                sm90_mma<0, 1>(acc, wd, sm, sr, w, KB, 64, t,
                               [&] { sm90_push_prefetch(p, sm.bars, w, r0, nrows); });
                clock.mma_done();
                sm90_push_rows(p, acc, stg, sm.bars, w, nrows, k.nt * 256, p.y_off,
                               clock.epilogue_trace());
            } else {
                sm90_mma<0, 1>(acc, wd, sm, sr, w, KB, 64, t);
                clock.mma_done();
                sm90_epilogue_gateup(p, tm, acc, stg, w, k.mt, r0, nrows, k.nt, clock.epilogue_trace());
            }
            clock.done(k.down);
        });
    clock.write_out(p.trace, 2);
    clock.write_span(p.trace);
}

/* TRACE: the diagnostic build of the kernel (mok.h: MOK_TRACE_SLOTS); the other has no trace code. */
template <bool TRACE>
__global__ void __launch_bounds__(SM90_THREADS, 1)
    mok_forward_sm90_kernel(const __grid_constant__ MokFwdParams p, const __grid_constant__ Sm90FwdMaps tm) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    const Sm90Smem sm = sm90_setup(smem_raw, p.expert_offset_all + p.e0);
    const Sm90Watch wd = {p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns};
    Sm90FwdOrder o;
    o.MT = *p.total_mt, o.nI = (p.I + 127) / 128, o.nC = (p.C + 255) / 256;
    o.G = p.group_mt > 0 && p.group_mt < o.MT ? p.group_mt : (o.MT > 0 ? o.MT : 1);
    o.total = o.MT * (o.nI + o.nC);
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<SM90_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            if (!p.dispatch_only) sm90_fwd_produce<TRACE>(p, tm, wd, sm, o);
            if (TRACE) sm90_trace_producer_out(p.trace, sm.bars->trace, 2);
        } else if (threadIdx.x >= 32 && (int)blockIdx.x < p.n_comm && !p.skip_dispatch) {
            const long long t0 = TRACE ? mok_globaltimer() : 0;
            sm90_dispatch(p, o.MT, &sm.bars->dispatch_part, p.xr, p.x_off, MOK_UNSCALED, nullptr);
            if (TRACE && threadIdx.x == 32)
                p.trace[(size_t)blockIdx.x * MOK_TRACE_SLOTS + MOK_TRACE_FWD_DISPATCH] = mok_globaltimer() - t0;
        }
        return;
    }
    mok_setmaxnreg_inc<SM90_CONSUMER_REGS>();
    if (p.dispatch_only) return;
    sm90_fwd_consume<TRACE>(p, tm, wd, sm, wg - 1);
#else
    asm volatile("trap;");
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Host side
 * ---------------------------------------------------------------------------------------------- */

extern "C" int mok_sm90_available(void) {
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 9 || minor != 0) return 0;
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, mok_forward_sm90_kernel<false>) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.binaryVersion == 90;
}

extern "C" int mok_sm90_blocks_per_sm(void) { return 1; }

extern "C" void mok_sm90_forward_launch(const MokFwdParams *pin, int grid, cudaStream_t stream) {
    const MokFwdParams &p = *pin;
    if (p.trace) sm90_prepare(mok_forward_sm90_kernel<true>, p.tile_m, "megakernel forward (traced)");
    else sm90_prepare(mok_forward_sm90_kernel<false>, p.tile_m, "megakernel forward");
    if (p.trace) cudaCheck(cudaMemsetAsync(p.trace, 0, (size_t)grid * MOK_TRACE_SLOTS * 8, stream));
    Sm90FwdMaps tm;
    memset(&tm, 0, sizeof tm); /* pre_gate, pre_up stay unencoded without a backward */
    sm90_encode(&tm.xr, p.xr, 2, p.C, p.R_max, 1, SM90_BM);
    sm90_encode(&tm.h, p.h, 2, p.I, p.R_max, 1, SM90_BM);
    sm90_encode(&tm.xr_half, p.xr, 2, p.C, p.R_max, 1, SM90_BM / 2);
    sm90_encode(&tm.h_half, p.h, 2, p.I, p.R_max, 1, SM90_BM / 2);
    sm90_encode_panels(&tm.w_gate, p.w_gate, p.I, p.C, p.El, 2);
    sm90_encode_panels(&tm.w_up, p.w_up, p.I, p.C, p.El, 2);
    sm90_encode_panels(&tm.w_down, p.w_down, p.C, p.I, p.El, 4);
    if (p.pre_gate) {
        sm90_encode(&tm.pre_gate, p.pre_gate, 2, p.I, p.R_max, 1, SM90_BM / 2);
        sm90_encode(&tm.pre_up, p.pre_up, 2, p.I, p.R_max, 1, SM90_BM / 2);
    }
    if (p.trace) mok_forward_sm90_kernel<true><<<grid, SM90_THREADS, SM90_SMEM_BYTES, stream>>>(p, tm);
    else mok_forward_sm90_kernel<false><<<grid, SM90_THREADS, SM90_SMEM_BYTES, stream>>>(p, tm);
    cudaCheckLaunch();
}
