/*
 * The megakernel backward with the Hopper tile (sm_90a): the protocol is in mok.h (MokBwdParams),
 * the pipeline (producer lane, dispatch warps, two wgmma consumers, staging) in sm90_pipeline.cuh.
 * Operand layouts per task kind (K-major: rows of 64 K; MN-major: 64 K lines of 64 M or N):
 *   dgrad: A dyr K-major (K = C), B w_down K-major (its rows are I, contiguous in C);
 *   dx:    A dpg then dpu K-major (K = 2I), B w_gate then w_up K-major (rows C, contiguous in I);
 *   wdown: A h M-major (M = I), B dyr N-major (N = C), K = the expert's rows;
 *   wgu:   A xr M-major (M = C), B dpg | dpu N-major (N = 128 + 128 of I), K = the expert's rows.
 * A weight-gradient task's last K block ends inside the next expert's rows: the consumers zero
 * those K lines in shared memory before their MMAs (sm90_zero_k_tail). A dgrad or dx tile of at
 * most 64 rows loads a 64-row box of A, and only consumer 0 multiplies (as the forward).
 */
#include "../device_util.cuh"
#include "wgrad_tasks.cuh"
#include "sm90_pipeline.cuh"

/* TMA maps. K-major A operands: boxes of 64 K x 128 rows; MN-major operands: panels of 64 columns
 * x 64 K lines (Sm90Panels); weights, K-major B: 64 K x 256 rows of one expert. */
typedef struct {
    CUtensorMap dyr_k, dpg_k, dpu_k;            /* (R, C), (R, I), (R, I) */
    CUtensorMap dyr_half, dpg_half, dpu_half;   /* the same in boxes of 64 rows: M tiles of <= 64 */
    Sm90Panels h_mn, xr_mn;            /* A of wdown, wgu: 2 panels a box */
    Sm90Panels dyr_mn, dpg_mn, dpu_mn; /* B of wdown (4 panels a box), wgu (2 of dpg, 2 of dpu) */
    CUtensorMap w_down_k, w_gate_k, w_up_k;     /* (El, I, C), (El, C, I) x 2 */
    CUtensorMap g_down, g_gate, g_up;           /* fp32 gradients, as the weights: TMA stores */
    int g_tma; /* the gradients are 16-byte aligned: by TMA (stores, and loads where they are added) */
} Sm90BwdMaps;

enum { BWD_DGRAD = 0, BWD_WDOWN = 1, BWD_DX = 2, BWD_WGU = 3 };

/* Tasks per kind, from the shape (the producer decodes every ticket: sm90_bwd_task). */
__device__ __forceinline__ int bwd_nA(const MokBwdParams &p) { return (p.I + 255) / 256; } /* dgrad per M tile */
__device__ __forceinline__ int bwd_nX(const MokBwdParams &p) { return (p.C + 255) / 256; } /* dx per M tile */
__device__ __forceinline__ int bwd_total(const MokBwdParams &p, int MT) {
    return MT * (bwd_nA(p) + bwd_nX(p)) + p.El * mok_wgrad_tasks(p.C, p.I);
}

/* Local expert el's first owner row and row count. */
__device__ __forceinline__ void sm90_expert_rows(const MokBwdParams &p, int el, int &rs, int &cnt) {
    const int *eo = p.expert_offset_all + p.e0;
    rs = eo[el] - eo[0];
    cnt = eo[el + 1] - eo[el];
}

struct Sm90BwdTask {
    int t;                 /* the ticket; -1: the end (the task ring's message) */
    int kind, idx, mi, ni; /* idx: the M tile (dgrad, dx) or the local expert (wdown, wgu) */
    Sm90TileRows rows;     /* M tile idx's rows, or expert idx's (r0: its first row, nrows: its count) */
};

/* Weight-gradient tasks that add into the gradients by TMA and have at most SM90_WIDE_KB K blocks (an expert's
 * rows: ≈ 170 at Kimi-like sizes) are wide: they stage a task's whole result (sm90_wgrad_buf), in the consumers'
 * staging and the stage ring's last stage, lent while they run (sm90_lend_stage), so that all four parts' old
 * values load as soon as the previous task's stores have read their places. Kimi-like backward kernel adding
 * 29.8-30.3 -> 27.0-27.2 ms (s19 r2, r6). Writing, the same cost 1.6 ms (s19 r1): the two-stage ring lengthened
 * the main loops by 0.5 us a task, and the epilogue stayed at 2.8 us with the whole result staged, so its stores'
 * drain is not what holds it. Longer tasks (Qwen-like: ≈ 1000 rows) keep the three stages their main loops need.
 * Producer and consumers decide it alike, from the task and the launch's constants. */
#define SM90_WIDE_KB 4

/* Whether local expert el's weight-gradient tasks write its gradients (else add to them): at a step's first
 * backward, or where the step has given it no rows before this launch (rows_before). */
__device__ __forceinline__ bool sm90_wgrad_writes(const MokBwdParams &p, int el) {
    return p.overwrite || (p.rows_before && p.rows_before[el] == 0);
}

/* Whether a weight-gradient task has nothing to do: no rows, and nothing to write either (adding, or idle experts
 * left unwritten: rows_before). */
__device__ __forceinline__ bool sm90_wgrad_idle(const MokBwdParams &p, int cnt) {
    return cnt == 0 && (!p.overwrite || p.rows_before);
}

__device__ __forceinline__ bool sm90_bwd_wide(const MokBwdParams &p, const Sm90BwdMaps &tm, const Sm90BwdTask &k) {
    return (k.kind == BWD_WDOWN || k.kind == BWD_WGU) && tm.g_tma && !sm90_wgrad_writes(p, k.idx) &&
           k.rows.nrows <= SM90_WIDE_KB * SM90_BK;
}

/* The task behind ticket t: all dgrad, then wdown, then dx, then wgu (topological order), with its
 * rows from the schedule. */
__device__ __forceinline__ Sm90BwdTask sm90_bwd_task(const MokBwdParams &p, int MT, int t) {
    Sm90BwdTask k;
    k.t = t;
    const int e0 = MT * bwd_nA(p), e1 = e0 + p.El * mok_wdown_tasks(p.C, p.I), e2 = e1 + MT * bwd_nX(p);
    k.kind = t < e0 ? BWD_DGRAD : t < e1 ? BWD_WDOWN : t < e2 ? BWD_DX : BWD_WGU;
    const int u = t - (k.kind == BWD_DGRAD ? 0 : k.kind == BWD_WDOWN ? e0 : k.kind == BWD_DX ? e1 : e2);
    if (k.kind == BWD_DGRAD || k.kind == BWD_DX) {
        const int n = k.kind == BWD_DGRAD ? bwd_nA(p) : bwd_nX(p);
        k.idx = u / n, k.mi = 0, k.ni = u - k.idx * n;
        mok_tile_rows(p, k.idx, k.rows.el, k.rows.r0, k.rows.nrows);
    } else {
        const int n = k.kind == BWD_WDOWN ? mok_wdown_cols(p.C) : mok_wgu_cols(p.I);
        const int per = k.kind == BWD_WDOWN ? mok_wdown_tasks(p.C, p.I) : mok_wgu_tasks(p.C, p.I);
        k.idx = u / per;
        const int r = u - k.idx * per;
        k.mi = r / n, k.ni = r - (r / n) * n;
        k.rows.el = k.idx;
        sm90_expert_rows(p, k.idx, k.rows.r0, k.rows.nrows);
    }
    return k;
}

/* Producer: waits until every M tile of expert el has `ctr` >= expected. */
__device__ __forceinline__ void sm90_wait_expert(const MokBwdParams &p, const unsigned *ctr, unsigned expected, int role,
                                                 int t, int el) {
    for (int mt = p.mt_start[el]; mt < p.mt_start[el + 1]; mt++)
        mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, ctr + mt, expected, role, t, mt);
}

/* The producer's memory of readiness per weight-gradient kind (wdown, wgu): the last expert found
 * ready (a block takes several tasks of one expert in a row, short ones at Kimi-like sizes), and
 * whether every expert is (the kind's count over all tiles seen complete). Counters only grow. Each
 * block meets every expert: at Kimi-like sizes a per-tile wait on each cost ≈ 3 µs of the producer's
 * acquire loads under the L2's load, 0.6 ms a block per kind (s10 trace). */
struct Sm90Ready {
    int el[2] = {-1, -1};
    bool all[2] = {false, false};
};

/* Producer: makes weight-gradient task t's inputs ready (expert el, kind KD = 0 wdown, 1 wgu; a
 * constant, so that ready stays in registers, not in local memory). */
template <int KD>
__device__ __forceinline__ void sm90_wgrad_ready(const MokBwdParams &p, Sm90Ready &ready, int t, int el, int MT) {
    if (ready.el[KD] == el) return;
    const unsigned *all = p.ticket + (KD == 0 ? MOK_TICKET_LANDED : MOK_TICKET_DGRAD);
    const unsigned per_tile = KD == 0 ? SM90_DISPATCH_PARTS : 2u * bwd_nA(p);
    if (!ready.all[KD]) ready.all[KD] = mok_ld_acquire(all) >= (unsigned)MT * per_tile;
    if (!ready.all[KD])
        sm90_wait_expert(p, KD == 0 ? p.arrive : p.dpg_done, per_tile,
                         KD == 0 ? MOK_ROLE_BWD_WAIT_DISPATCH : MOK_ROLE_BWD_WAIT_SWIGLU, t, el);
    ready.el[KD] = el;
    mok_fence_proxy_async_global(); /* what the acquires saw is read by TMA */
}

/* One thread: tickets -> counters -> TMA loads. */
template <bool TRACE>
__device__ void sm90_bwd_produce(const MokBwdParams &p, const Sm90BwdMaps &tm, const Sm90Watch &wd, const Sm90Smem &sm,
                                 int MT) {
    Sm90Ring sr(SM90_STAGES), tr(2);
    Sm90Ready ready;
    bool lent = false; /* the last stage is the consumers' (wide tasks) */
    const int total = bwd_total(p, MT), KBc = (p.C + SM90_BK - 1) / SM90_BK, KBi = (p.I + SM90_BK - 1) / SM90_BK;
    for (;;) {
        const int t = (int)atomicAdd(p.ticket + MOK_TICKET_TASK, 1u);
        const Sm90BwdTask k = t < total ? sm90_bwd_task(p, MT, t) : Sm90BwdTask{-1, 0, 0, 0, 0, {0, 0, 0}};
        sm90_send_task(wd, sm.bars, tr, k);
        if (k.t < 0) return;
        if (sm90_bwd_wide(p, tm, k) != lent) {
            if (lent) sr.resize(SM90_STAGES);
            else sm90_lend_stage(wd, sm.bars, sr, t);
            lent = !lent;
        }
        const long long tw = TRACE ? mok_globaltimer() : 0;
        if (k.kind == BWD_DGRAD || k.kind == BWD_DX) {
            if (k.kind == BWD_DGRAD)
                mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.arrive + k.idx, SM90_DISPATCH_PARTS,
                         MOK_ROLE_BWD_WAIT_DISPATCH, t, k.idx);
            else
                mok_wait(p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns, p.dpg_done + k.idx, 2u * bwd_nA(p),
                         MOK_ROLE_BWD_WAIT_SWIGLU, t, k.idx);
            if (TRACE) sm.bars->trace[MOK_TRACE_PRODUCER + k.kind] += mok_globaltimer() - tw;
            mok_fence_proxy_async_global();
            const int el = k.rows.el, r0 = k.rows.r0, nrows = k.rows.nrows;
            const int KB = k.kind == BWD_DGRAD ? KBc : 2 * KBi;
            /* a tile of at most 64 rows loads half of A's box, and only consumer 0 multiplies */
            const bool half = nrows <= 64;
            const unsigned bytes = (half ? SM90_A_BYTES / 2 : SM90_A_BYTES) + SM90_B_BYTES;
            for (int kb = 0; kb < KB; kb++) {
                const int s = sm90_stage_begin(wd, sm.bars, sr, bytes, t);
                uint64_t *full = &sm.bars->full[s];
                const int second = kb >= KBi, kk = (k.kind == BWD_DX && second ? kb - KBi : kb) * SM90_BK;
                const CUtensorMap *ma = k.kind == BWD_DGRAD ? (half ? &tm.dyr_half : &tm.dyr_k)
                                        : second            ? (half ? &tm.dpu_half : &tm.dpu_k)
                                                            : (half ? &tm.dpg_half : &tm.dpg_k);
                const CUtensorMap *mb = k.kind == BWD_DGRAD ? &tm.w_down_k : second ? &tm.w_up_k : &tm.w_gate_k;
                mok_tma_load_2d(sm.a + s * SM90_A_BYTES, ma, full, kk, r0);
                mok_tma_load_3d(sm.b + s * SM90_B_BYTES, mb, full, kk, k.ni * 256, el);
            }
            continue;
        }
        /* weight gradients: K runs over the expert's rows */
        const int rs = k.rows.r0, cnt = k.rows.nrows;
        if (cnt == 0) continue;
        if (k.kind == BWD_WDOWN) sm90_wgrad_ready<0>(p, ready, t, k.idx, MT);
        else sm90_wgrad_ready<1>(p, ready, t, k.idx, MT);
        if (TRACE) sm.bars->trace[MOK_TRACE_PRODUCER + k.kind] += mok_globaltimer() - tw;
        const bool down = k.kind == BWD_WDOWN;
        const int M = down ? p.I : p.C, N = down ? p.C : p.I;
        const Sm90Panels &ma = down ? tm.h_mn : tm.xr_mn;
        const int a0 = k.mi * 128, b0 = down ? k.ni * 256 : k.ni * 128;
        const unsigned bytes = sm90_panels_bytes(ma, a0, M) +
                               (down ? sm90_panels_bytes(tm.dyr_mn, b0, N) : 2 * sm90_panels_bytes(tm.dpg_mn, b0, N));
        const int KB = (cnt + SM90_BK - 1) / SM90_BK;
        for (int kb = 0; kb < KB; kb++) {
            const int s = sm90_stage_begin(wd, sm.bars, sr, bytes, t), row = rs + kb * SM90_BK;
            uint64_t *full = &sm.bars->full[s];
            unsigned char *b = sm.b + s * SM90_B_BYTES;
            sm90_load_panels(sm.a + s * SM90_A_BYTES, ma, full, a0, M, row, 0);
            if (down) {
                sm90_load_panels(b, tm.dyr_mn, full, b0, N, row, 0);
            } else {
                sm90_load_panels(b, tm.dpg_mn, full, b0, N, row, 0);
                sm90_load_panels(b + 2 * SM90_PANEL_BYTES, tm.dpu_mn, full, b0, N, row, 0);
            }
        }
    }
}

/* Part q of a dgrad task's saved pre_gate and pre_up (64 rows x 64 columns each; zeros outside
 * the consumer's nrows rows from r0 and outside I) by cp.async into half q & 1 of its staging
 * (chunks 0-7 and 8-15 of a half tile, box layout), one commit group. */
__device__ __forceinline__ void sm90_dgrad_fetch(const MokBwdParams &p, __nv_bfloat16 *stg_base, int r0, int nrows,
                                                 int nt, int q) {
    const int tid = threadIdx.x & 127, c0 = nt * 256 + 64 * q;
    __nv_bfloat16 *buf = stg_base + (q & 1) * 64 * 128;
#pragma unroll 1 /* unrolled, its addresses stay live across the epilogue's parts and spill */
    for (int j = 0; j < 8; j++) {
        const int v = tid + 128 * j, r = v >> 4, c = v & 15, col = c0 + 8 * (c & 7);
        const bool in = r < nrows && col < p.I;
        const bf16_t *src = c < 8 ? p.pre_gate : p.pre_up;
        mok_cp_async16(sm90_stg_at<true>(buf, r, c), in ? src + (size_t)(r0 + r) * p.I + col : src, in);
    }
    mok_cp_async_commit();
}

/* dgrad epilogue of consumer w (its rows r0.. r0 + nrows of M tile mt), in four 64-column parts: the saved pre_gate and
 * pre_up of the part in the staging (sm90_dgrad_fetch; part 0's issued by the caller during the main loop, after
 * sm90_staging_acquire, each next part's while this one is computed), dh (fp32, in acc) through the SwiGLU backward in
 * place there (each thread rewrites the pairs it read), then dpg and dpu out (by TMA, a 64 x 64 box each, where the
 * consumer has all 64 rows; else from registers: TMA clips a box only at the tensor's edge); then the signal once they
 * have landed. acc is only read: wgmma accumulators written outside the MMAs serialize every wgmma of the kernel (ptxas
 * C7520), and loading the saved values into registers spills. */
__device__ __forceinline__ void sm90_epilogue_dgrad(const MokBwdParams &p, const Sm90BwdMaps &tm,
                                                    const float (&acc)[128], __nv_bfloat16 *stg_base, int w, int mt,
                                                    int r0, int nrows, int nt, unsigned long long *tr) {
    Sm90Laps laps(tr); /* tr: the traced build's timekeeper only */
    const int tid = threadIdx.x & 127;
    const bool by_tma = nrows >= 64; /* else register stores: TMA clips a box only at the tensor's edge */
    static_assert(2 * 64 * 128 <= SM90_STG_ELEMS, "two half tiles fit in a consumer's staging");
#pragma unroll
    for (int part = 0; part < 4; part++) {
        const int col0 = nt * 256 + 64 * part;
        if (col0 >= p.I) break;
        mok_cp_async_wait0();
        if (by_tma && part > 0 && tid == SM90_TMA_STORER) mok_bulk_wait_read(); /* part - 1's boxes read */
        sm90_named_sync(2 + w, 128);
        if (part + 1 < 4 && col0 + 64 < p.I) sm90_dgrad_fetch(p, stg_base, r0, nrows, nt, part + 1);
        __nv_bfloat16 *stg = stg_base + (part & 1) * 64 * 128;
        /* the thread's rows and columns, derived again each part: held across the four parts, the
         * staging addresses computed from them stay live and spill */
        int tp = tid;
        asm volatile("" : "+r"(tp));
        const int ra = 16 * (tp >> 5) + ((tp & 31) >> 2), t2 = 2 * (tp & 3);
        laps.lap(0);
        /* two chunks at a time: their loads first, then the arithmetic of both (the
         * compiler keeps a load after an earlier store to the same staging) */
#pragma unroll
        for (int i0 = 0; i0 < 8; i0 += 2) {
            __nv_bfloat162 g[2][2], u[2][2];
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int r = ra + 8 * half;
                    g[i][half] = *reinterpret_cast<const __nv_bfloat162 *>(sm90_stg_at<true>(stg, r, i0 + i) + t2);
                    u[i][half] = *reinterpret_cast<const __nv_bfloat162 *>(sm90_stg_at<true>(stg, r, 8 + i0 + i) + t2);
                }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int a = 4 * (8 * part + i0 + i) + 2 * half, r = ra + 8 * half;
                    float dg0, du0, dg1, du1;
                    swiglu_backward_f32(acc[a], __low2float(g[i][half]), __low2float(u[i][half]), dg0, du0);
                    swiglu_backward_f32(acc[a + 1], __high2float(g[i][half]), __high2float(u[i][half]), dg1, du1);
                    *reinterpret_cast<__nv_bfloat162 *>(sm90_stg_at<true>(stg, r, i0 + i) + t2) =
                        __floats2bfloat162_rn(dg0, dg1);
                    *reinterpret_cast<__nv_bfloat162 *>(sm90_stg_at<true>(stg, r, 8 + i0 + i) + t2) =
                        __floats2bfloat162_rn(du0, du1);
                }
        }
        if (by_tma) mok_fence_proxy_async_shared(); /* the TMA stores read it */
        sm90_named_sync(2 + w, 128);
        laps.lap(1);
        if (by_tma) {
            if (tid == SM90_TMA_STORER) {
                mok_tma_store_2d(&tm.dpg_half, stg, col0, r0);
                mok_tma_store_2d(&tm.dpu_half, stg + SM90_BOX_ELEMS, col0, r0);
                mok_bulk_commit();
            }
        } else {
#pragma unroll 1 /* as sm90_dgrad_fetch's loop */
            for (int v = tid; v < 64 * 16; v += 128) {
                const int r = v >> 4, c = v & 15, col = col0 + 8 * (c & 7);
                if (r >= nrows || col >= p.I) continue;
                *reinterpret_cast<int4 *>((c < 8 ? p.dpg : p.dpu) + (size_t)(r0 + r) * p.I + col) =
                    *reinterpret_cast<const int4 *>(sm90_stg_at<true>(stg, r, c));
            }
            sm90_named_sync(2 + w, 128);
        }
        laps.lap(2);
    }
    if (by_tma && tid == SM90_TMA_STORER) mok_bulk_wait(); /* dpg, dpu have landed */
    mok_fence_proxy_async_global(); /* dpg, dpu are read by TMA in the dx and wgu tasks */
    sm90_named_sync(2 + w, 128);
    if (tid == 0) {
        __threadfence();
        mok_red_release(p.dpg_done + mt, 1u);
        mok_red_release(p.ticket + MOK_TICKET_DGRAD, 1u);
    }
    laps.lap(3);
}

/* Weight-gradient epilogue of consumer w by register stores, where the gradients are not 16-byte
 * aligned (else sm90_epilogue_wgrad_tma): g[m][col(c)] (+)= acc for rows m = m0 + (its 64 rows) < M
 * (added, or written when overwrite; zeros for an expert without rows: rows == 0); column
 * c < 256 of the task goes to g_lo (c < split) at n0 + c or g_hi at n0 + c - split, < N. Each add
 * waits for its load (the compiler cannot tell the addresses apart): slow, 3.8x the Kimi-like
 * backward kernel's time when all gradients came here (s17). */
__device__ __forceinline__ void sm90_epilogue_wgrad(const float (&acc)[128], int rows, int overwrite, int w, int m0, int M,
                                                    float *g_lo, float *g_hi, int split, int n0, int N) {
    const int tid = threadIdx.x & 127, ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t2 = 2 * (tid & 3);
#pragma unroll
    for (int i = 0; i < 32; i++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int m = m0 + 64 * w + ra + 8 * half, c = 8 * i + t2;
            const int hi = c >= split, n = n0 + c - (hi ? split : 0);
            if (m >= M || n >= N) continue;
            /* floats, not pairs: only gradients that are not 16-byte aligned come here, maybe not 8 either */
            float *dst = (hi ? g_hi : g_lo) + (size_t)m * N + n;
            float x = 0.0f, y = 0.0f;
            if (rows > 0) x = acc[4 * i + 2 * half], y = acc[4 * i + 2 * half + 1];
            if (!overwrite) {
                x += dst[0];
                y += dst[1];
            }
            dst[0] = x;
            dst[1] = y;
        }
}

/* Where consumer w's 64 x 256 fp32 weight-gradient results of a task go by TMA: column c of the task
 * to map lo (c < split) at n0 + c, or hi at n0 + c - split; rows row.. (the task's m0 + 64 w) of
 * expert el. Part q is columns 64 q.. 64 q + 63, two boxes of 32. */
struct Sm90WgradOut {
    const CUtensorMap *lo, *hi;
    int split, n0, row, el;
    __device__ __forceinline__ const CUtensorMap *box(int q, int b, int &col) const {
        const int c = 64 * q + 32 * b;
        const bool up = c >= split;
        col = n0 + c - (up ? split : 0);
        return up ? hi : lo;
    }
    /* one thread: part q's old values into buf (16 KB), on bar (armed by the caller for them) */
    __device__ __forceinline__ void load_old(int q, unsigned char *buf, uint64_t *bar) const {
        for (int b = 0; b < 2; b++) {
            int col;
            const CUtensorMap *map = box(q, b, col);
            mok_tma_load_3d(buf + b * 8192, map, bar, col, row, el);
        }
    }
};

/* Lane 0 of each of consumer w's warps: the warp's sum of ss (a fixed butterfly) into the task's slot of p.sq
 * (mok.h: mok_expert_sq_floats), the task found from its output's place (out's fields are live here anyway; the
 * task's own, held across the epilogue, spill the consumers' registers). Tasks at the gradients' edges leave their
 * slot to mok_expert_sq_rest (wgrad_tasks.cuh: mok_wgrad_whole). */
__device__ __forceinline__ void sm90_sq_out(const MokBwdParams &p, const Sm90WgradOut &out, int w, float ss) {
    const bool down = out.split == 256; /* wdown: 256 columns of g_down; wgu: 128 of g_gate and of g_up */
    const int t = mok_wgrad_task(down, out.row >> 7, out.n0 / out.split, p.C, p.I);
    if (!mok_wgrad_whole(mok_wgrad_region(t, p.C, p.I))) return;
    ss = warp_sum(ss);
    const int tid = threadIdx.x & 127;
    if ((tid & 31) == 0)
        p.sq[((size_t)out.el * mok_wgrad_tasks(p.C, p.I) + t) * MOK_SQ_FLOATS + 4 * w + (tid >> 5)] = ss;
}

/* Where part q (16 KB: two 128-byte swizzled boxes of 64 rows x 32 fp32, 1024-byte aligned) of consumer w's
 * weight-gradient results is staged: the two halves of its staging in turn; WIDE, a place a part: consumer 0's
 * staging holds its parts 0-1, the lent stage's A slot part 2 and the first half of its B slot part 3; 48 KB from
 * consumer 1's staging on (SM90_STAGING_BYTES) hold its parts 0-2, the second half of the B slot part 3. */
template <bool WIDE>
__device__ __forceinline__ unsigned char *sm90_wgrad_buf(const Sm90Smem &sm, int w, int q) {
    static_assert(SM90_A_BYTES == 16384 && SM90_B_BYTES == 32768 && SM90_STG_ELEMS * 2 % 1024 == 0, "16 KB places");
    static_assert(2 * 16384 <= SM90_STG_ELEMS * 2, "two parts fit a consumer's own staging");
    static_assert(2 * SM90_STG_ELEMS * 2 <= SM90_STAGING_BYTES, "consumer 1's staging past consumer 0's");
    unsigned char *own = reinterpret_cast<unsigned char *>(sm.stg + w * SM90_STG_ELEMS);
    if (!WIDE) return own + (q & 1) * 16384;
    if (q < 2 + w) return own + q * 16384;
    unsigned char *lent_b = sm.b + (SM90_STAGES - 1) * SM90_B_BYTES;
    return w == 1 ? lent_b + 16384 : q == 2 ? sm.a + (SM90_STAGES - 1) * SM90_A_BYTES : lent_b;
}

/* Consumer w, where a run of wide tasks begins: the lent stage taken, and the staging free (its
 * pushes and stores have read it; the generic writes fenced before TMA loads of old values
 * overwrite it). Where the run ends: everything its stores read has been read (the stage given
 * back). */
__device__ __forceinline__ void sm90_wide_begin(const Sm90Watch &wd, const Sm90Smem &sm, Sm90Ring &sr, int w, int t) {
    sm90_borrow_stage(wd, sm.bars, sr, t);
    mok_fence_proxy_async_shared();
    sm90_staging_acquire(w);
}
__device__ __forceinline__ void sm90_wide_end(const Sm90Smem &sm, Sm90Ring &sr, int w) {
    sm90_staging_acquire(w);
    sm90_return_stage(sm.bars, sr);
}

/* One thread of consumer w: the old values of parts q.. q + n - 1 into their places, completing bar. */
template <bool WIDE>
__device__ __forceinline__ void sm90_wgrad_load_old(const Sm90WgradOut &out, const Sm90Smem &sm, int w, int q, int n,
                                                    uint64_t *bar) {
    mok_mbar_arrive_expect_tx(bar, 16384u * n);
    for (int i = q; i < q + n; i++) out.load_old(i, sm90_wgrad_buf<WIDE>(sm, w, i), bar);
}

/* Where consumer w adds into the gradients, the step its main loop takes in the middle (sm90_mma's
 * mid): the old values of parts 0 and 1 on their way, so that their latency passes under the
 * products (before s18 the epilogue began with them), once the previous task's stores have read
 * their places (WIDE: its parts 0-1, the first two of its four store groups, both into g_old[w][0];
 * else the whole staging, a part into g_old[w][q]). Issued after the last block instead, they gave
 * back what loading parts 2 and 3 at the epilogue's start won (s19 r4). The fence orders the
 * places' last generic writes (the dgrad epilogue's register-store path fences none) before the
 * TMA loads that overwrite them. */
template <bool WIDE>
__device__ __forceinline__ void sm90_wgrad_first_loads(const Sm90WgradOut &out, const Sm90Smem &sm, int w) {
    const int tid = threadIdx.x & 127;
    mok_fence_proxy_async_shared();
    if (WIDE) {
        /* lanes 0-1 commit one store group a part and nothing else while wide (the transitions wait for
         * all theirs): the newest four are the previous task's parts 0-3 */
        if (tid < 2) mok_bulk_wait_read<2>();
        sm90_named_sync(2 + w, 128);
        if (tid == 0) sm90_wgrad_load_old<true>(out, sm, w, 0, 2, &sm.bars->g_old[w][0]);
        return;
    }
    sm90_staging_acquire(w); /* every earlier store of this consumer has read the staging */
    if (tid == 0)
        for (int q = 0; q < 2; q++) sm90_wgrad_load_old<false>(out, sm, w, q, 1, &sm.bars->g_old[w][q]);
}

/* Weight-gradient epilogue of consumer w by TMA (the gradients 16-byte aligned): its 64 rows x 256
 * columns of fp32 go out in four parts of 64 columns (to out), each two boxes that lanes 0-1 of its
 * warp 0 send by TMA stores (a store group a part and lane), each part staged where
 * sm90_wgrad_buf<WIDE> puts it. Not WIDE, the parts alternate between the two halves of the
 * staging, so a part is written while the previous one is read out, and the last two drain while
 * the next task's main loop runs (where the register stores of sm90_epilogue_wgrad hold the
 * consumer until the memory system takes them: 4 ms more on the Kimi-like backward, s17).
 * TMA clips rows >= M and columns >= N. Zeros for an expert without rows. The squares of the values left, to p.sq
 * where set (sm90_sq_out).
 * Where the gradients are added into (ADD), each part's old values come into its place by TMA
 * loads, parts 0 and 1 from the main loop (sm90_wgrad_first_loads), parts 2 and 3 as soon as their
 * places are read out, and each thread adds the values it then overwrites. WIDE: parts 0 and 1 come
 * into g_old[w][0]; once they have landed and the previous task's stores have read the places of
 * parts 2 and 3 (the epilogue's start), those load into g_old[w][0]'s next phase. Else part q + 2
 * once part q's stores have read the half, into g_old[w][q & 1]. Either way each barrier completes
 * twice a task (or not at all), hence the parities. (A parity bit kept a consumer instead, to give
 * parts 2 and 3 a barrier of their own, spilled the consumers' registers.) ADD is a template
 * parameter: a flag read at run time slowed the written case by 1 ms on the Kimi-like backward (s18). */
template <bool ADD, bool WIDE>
__device__ __forceinline__ void sm90_epilogue_wgrad_tma(const MokBwdParams &p, const float (&acc)[128], int rows, int w,
                                                        const Sm90WgradOut &out, const Sm90Smem &sm) {
    static_assert(ADD || !WIDE, "wide tasks add (sm90_bwd_wide)");
    const int tid = threadIdx.x & 127, ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t2 = 2 * (tid & 3);
    float ss = 0.0f;
    Sm90Bars *bars = sm.bars;
    /* Not sm90_wait: this consumer's own loads complete whatever other blocks and ranks do, and the
     * watchdog's code, inlined in four parts, spills the consumers' rings; a count bounds the wait
     * instead (a trap, no record, where a load never lands) */
    auto wait_old = [](uint64_t *bar, unsigned parity) {
        for (unsigned spins = 0; !mok_mbar_try_wait(bar, parity);)
            if (++spins == 1u << 30) asm volatile("trap;");
    };
#pragma unroll
    for (int part = 0; part < 4; part++) {
        unsigned char *buf = sm90_wgrad_buf<WIDE>(sm, w, part);
        if (WIDE) {
            if (part == 0) { /* parts 0 and 1 in; the previous task's parts 2 and 3 have left their places */
                wait_old(&bars->g_old[w][0], 0);
                if (tid < 2) mok_bulk_wait_read<0>();
                sm90_named_sync(2 + w, 128);
                if (tid == 0) sm90_wgrad_load_old<true>(out, sm, w, 2, 2, &bars->g_old[w][0]);
            } else if (part == 2) {
                wait_old(&bars->g_old[w][0], 1);
            }
        } else if (part == 0) {
            if (!ADD) sm90_staging_acquire(w); /* ADD: the main loop acquired it */
        } else if (part >= 2) { /* part - 2's stores, in this half, have read it */
            if (tid < 2) mok_bulk_wait_read<1>();
            sm90_named_sync(2 + w, 128);
            if (ADD && tid == 0) sm90_wgrad_load_old<false>(out, sm, w, part, 1, &bars->g_old[w][part & 1]);
        }
        if (ADD && !WIDE) wait_old(&bars->g_old[w][part & 1], (part >> 1) & 1);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                /* column c of the part (accumulator column 64 part + c), in box c / 32; the 16-byte
                 * chunk j of row r of a box sits at j ^ (r & 7) (the map's 128-byte swizzle) */
                const int r = ra + 8 * half, c = 8 * i + t2, a = 4 * (8 * part + i) + 2 * half;
                float2 v = rows > 0 ? make_float2(acc[a], acc[a + 1]) : make_float2(0.0f, 0.0f);
                float2 *at = reinterpret_cast<float2 *>(buf + (c >> 5) * 8192 + r * 128 +
                                                        ((((c & 31) >> 2) ^ (r & 7)) << 4) + (c & 3) * 4);
                if (ADD) {
                    const float2 o = *at;
                    v.x = o.x + v.x;
                    v.y = o.y + v.y;
                }
                *at = v;
                ss = fmaf(v.x, v.x, ss);
                ss = fmaf(v.y, v.y, ss);
            }
        mok_fence_proxy_async_shared(); /* the TMA stores read it */
        sm90_named_sync(2 + w, 128);
        if (tid < 2) {
            int col;
            const CUtensorMap *map = out.box(part, tid, col);
            mok_tma_store_3d(map, buf + tid * 8192, col, out.row, out.el);
            mok_bulk_commit();
        }
    }
    if (p.sq) sm90_sq_out(p, out, w, ss);
}

/* Consumer warpgroup w (0 or 1). TRACE: consumer 0's first thread keeps the trace (Sm90TaskClock). */
template <bool TRACE>
__device__ __forceinline__ void sm90_bwd_consume(const MokBwdParams &p, const Sm90BwdMaps &tm, const Sm90Watch &wd,
                                                 const Sm90Smem &sm, int w) {
    bool lent = false; /* the stage ring's last stage is the staging's (wide tasks; as the producer's) */
    const Sm90TaskClock clock = sm90_consume_tasks<Sm90BwdTask, TRACE>(
        wd, sm, w, [&](const Sm90BwdTask &k, float(&acc)[128], __nv_bfloat16 *stg, Sm90Ring &sr, Sm90TaskClock &clock) {
            const int t = k.t;
            if (sm90_bwd_wide(p, tm, k) != lent) {
                if (lent) sm90_wide_end(sm, sr, w);
                else sm90_wide_begin(wd, sm, sr, w, t);
                lent = !lent;
            }
            const int KBc = (p.C + SM90_BK - 1) / SM90_BK, KBi = (p.I + SM90_BK - 1) / SM90_BK;
            const size_t CI = (size_t)p.C * p.I;
            if (k.kind == BWD_DGRAD || k.kind == BWD_DX) {
                const int KB = k.kind == BWD_DGRAD ? KBc : 2 * KBi;
                int r0, nrows;
                sm90_consumer_rows(w, k.rows, r0, nrows);
                if (nrows <= 0) { /* consumer 1 past the tile's rows (never consumer 0, whose trace this skips) */
                    const bool dg = k.kind == BWD_DGRAD;
                    sm90_skip_task(wd, sm, sr, KB, t, dg ? p.dpg_done + k.idx : nullptr,
                                   dg ? p.ticket + MOK_TICKET_DGRAD : nullptr);
                    return;
                }
                if (k.kind == BWD_DGRAD) {
                    /* the epilogue's first saved values load while the products run */
                    sm90_mma<0, 0>(acc, wd, sm, sr, w, KB, 64, t, [&] {
                        sm90_staging_acquire(w);
                        sm90_dgrad_fetch(p, stg, r0, nrows, k.ni, 0);
                    });
                    clock.mma_done();
                    sm90_epilogue_dgrad(p, tm, acc, stg, w, k.idx, r0, nrows, k.ni, clock.epilogue_trace());
                } else {
                    sm90_mma<0, 0>(acc, wd, sm, sr, w, KB, 64, t,
                                   [&] { sm90_push_prefetch(p, sm.bars, w, r0, nrows); });
                    clock.mma_done();
                    sm90_push_rows(p, acc, stg, sm.bars, w, nrows, k.ni * 256, p.y_off,
                               clock.epilogue_trace());
                }
            } else {
                const int cnt = k.rows.nrows;
                if (sm90_wgrad_idle(p, cnt)) {
                    clock.skipped();
                    return;
                }
                /* wdown: 256 columns of g_down; wgu: 128 of g_gate, then the same 128 of g_up */
                const bool down = k.kind == BWD_WDOWN;
                const int split = down ? 256 : 128;
                const Sm90WgradOut out = {down ? &tm.g_down : &tm.g_gate, down ? &tm.g_down : &tm.g_up, split,
                                          k.ni * split, k.mi * 128 + 64 * w, k.idx};
                const int KB = (cnt + SM90_BK - 1) / SM90_BK;
                /* a main loop of its own for the wide tasks (lent: adding by TMA): timed so, -0.3 to -0.4 ms on
                 * the Kimi-like backward kernel (s19 r4, r6); as one loop whose mid step chose, within noise (r5) */
                const int k_tail = cnt - (KB - 1) * SM90_BK;
                if (cnt > 0 && lent)
                    sm90_mma<1, 1>(acc, wd, sm, sr, w, KB, k_tail, t,
                                   [&] { sm90_wgrad_first_loads<true>(out, sm, w); });
                else if (cnt > 0)
                    sm90_mma<1, 1>(acc, wd, sm, sr, w, KB, k_tail, t, [&] {
                        if (tm.g_tma && !sm90_wgrad_writes(p, out.el)) sm90_wgrad_first_loads<false>(out, sm, w);
                    });
                clock.mma_done();
                /* asked again, not held across the main loop: one register more there spilled */
                const bool writes = sm90_wgrad_writes(p, out.el);
                if (tm.g_tma) { /* adding: cnt > 0 (tasks without rows are skipped) */
                    if (writes) sm90_epilogue_wgrad_tma<false, false>(p, acc, cnt, w, out, sm);
                    else if (lent) sm90_epilogue_wgrad_tma<true, true>(p, acc, cnt, w, out, sm);
                    else sm90_epilogue_wgrad_tma<true, false>(p, acc, cnt, w, out, sm);
                } else /* no squares: mok_expert_sq_rest takes them */
                    sm90_epilogue_wgrad(acc, cnt, writes, w, k.mi * 128, down ? p.I : p.C,
                                        (down ? p.g_down : p.g_gate) + k.idx * CI,
                                        (down ? p.g_down : p.g_up) + k.idx * CI, split, k.ni * split,
                                        down ? p.C : p.I);
            }
            clock.done(k.kind);
        });
    clock.write_out(p.trace, 4);
    clock.write_span(p.trace);
}

/* TRACE: the diagnostic build of the kernel (mok.h: MOK_TRACE_SLOTS); the other has no trace code. */
template <bool TRACE>
__global__ void __launch_bounds__(SM90_THREADS, 1)
    mok_backward_sm90_kernel(const __grid_constant__ MokBwdParams p, const __grid_constant__ Sm90BwdMaps tm) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    const Sm90Smem sm = sm90_setup(smem_raw, p.expert_offset_all + p.e0);
    const Sm90Watch wd = {p.err, p.ticket + MOK_TICKET_CLAIM, p.budget_ns};
    const int MT = *p.total_mt, wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<SM90_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            sm90_bwd_produce<TRACE>(p, tm, wd, sm, MT);
            if (TRACE) sm90_trace_producer_out(p.trace, sm.bars->trace, 4);
        } else if (threadIdx.x >= 32 && (int)blockIdx.x < p.n_comm && !p.skip_dispatch)
            sm90_dispatch(p, MT, &sm.bars->dispatch_part, p.dyr, p.dy_off, p.gate_off, p.ticket + MOK_TICKET_LANDED);
        return;
    }
    mok_setmaxnreg_inc<SM90_CONSUMER_REGS>();
    sm90_bwd_consume<TRACE>(p, tm, wd, sm, wg - 1);
#else
    asm volatile("trap;");
#endif
}

extern "C" void mok_backward_launch(const MokBwdParams *pin, int grid, cudaStream_t stream) {
    const MokBwdParams &p = *pin;
    if (p.trace) sm90_prepare(mok_backward_sm90_kernel<true>, p.tile_m, "megakernel backward (traced)");
    else sm90_prepare(mok_backward_sm90_kernel<false>, p.tile_m, "megakernel backward");
    cudaCheck(cudaMemsetAsync(p.arrive, 0, (size_t)p.mt_max * sizeof(unsigned), stream));
    cudaCheck(cudaMemsetAsync(p.dpg_done, 0, (size_t)p.mt_max * sizeof(unsigned), stream));
    cudaCheck(cudaMemsetAsync(p.ticket, 0, MOK_TICKETS * sizeof(unsigned), stream));
    if (p.trace) cudaCheck(cudaMemsetAsync(p.trace, 0, (size_t)grid * MOK_TRACE_SLOTS * 8, stream));
    Sm90BwdMaps tm = {};
    sm90_encode(&tm.dyr_k, p.dyr, 2, p.C, p.R_max, 1, 128);
    sm90_encode(&tm.dpg_k, p.dpg, 2, p.I, p.R_max, 1, 128);
    sm90_encode(&tm.dpu_k, p.dpu, 2, p.I, p.R_max, 1, 128);
    sm90_encode(&tm.dyr_half, p.dyr, 2, p.C, p.R_max, 1, 64);
    sm90_encode(&tm.dpg_half, p.dpg, 2, p.I, p.R_max, 1, 64);
    sm90_encode(&tm.dpu_half, p.dpu, 2, p.I, p.R_max, 1, 64);
    sm90_encode_panels(&tm.h_mn, p.h, p.I, p.R_max, 1, 2);
    sm90_encode_panels(&tm.xr_mn, p.xr, p.C, p.R_max, 1, 2);
    sm90_encode_panels(&tm.dyr_mn, p.dyr, p.C, p.R_max, 1, 4);
    sm90_encode_panels(&tm.dpg_mn, p.dpg, p.I, p.R_max, 1, 2);
    sm90_encode_panels(&tm.dpu_mn, p.dpu, p.I, p.R_max, 1, 2);
    sm90_encode(&tm.w_down_k, p.w_down, 3, p.C, p.I, p.El, 256);
    sm90_encode(&tm.w_gate_k, p.w_gate, 3, p.I, p.C, p.El, 256);
    sm90_encode(&tm.w_up_k, p.w_up, 3, p.I, p.C, p.El, 256);
    tm.g_tma = mok_grads_by_tma(p.g_gate, p.g_up, p.g_down);
    if (tm.g_tma) {
        sm90_encode_f32(&tm.g_down, p.g_down, p.C, p.I, p.El);
        sm90_encode_f32(&tm.g_gate, p.g_gate, p.I, p.C, p.El);
        sm90_encode_f32(&tm.g_up, p.g_up, p.I, p.C, p.El);
    }
    if (p.trace) mok_backward_sm90_kernel<true><<<grid, SM90_THREADS, SM90_SMEM_BYTES, stream>>>(p, tm);
    else mok_backward_sm90_kernel<false><<<grid, SM90_THREADS, SM90_SMEM_BYTES, stream>>>(p, tm);
    cudaCheckLaunch();
}
