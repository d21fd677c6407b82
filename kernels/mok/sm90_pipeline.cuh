/*
 * The Hopper megakernels' shared machinery (mok_forward_sm90.cu, mok_backward_sm90.cu): one block
 * per SM of SM90_THREADS = 384 threads. Warpgroup 0 produces: lane 0 of warp 0 takes tickets, waits
 * on the protocol's counters and fills a ring of SM90_STAGES shared-memory stages with TMA; warps
 * 1-3 pull rows over NVLink (the dispatch). Warpgroups 1 and 2 consume: consumer w computes rows
 * [64w, 64w + 64) x 256 columns of a 128 x 256 task with wgmma m64n256k16 (128 fp32 registers a
 * thread), then an epilogue. Tasks reach the consumers through a 2-slot task ring.
 *
 * A stage holds A (16 KB) and B (32 KB), both 128-byte swizzled (layouts: tile_wgmma.cuh):
 *   A K-major: one box of 128 rows x 64 K (consumer w: rows 64w.., at + 8 KB * w);
 *   A M-major: two panels of 64 K lines x 64 M (consumer w: M panel w, at + 8 KB * w);
 *   B K-major: one box of 256 N rows x 64 K;  B N-major: four panels of 64 K lines x 64 N.
 * MN-major panels come several to a TMA box where the tensor's columns allow (sm90_load_panels).
 * The MN-major operands carry K along lines, so a K tail (the last block of an expert's rows in a
 * weight gradient) is cut by zeroing whole 128-byte lines (sm90_zero_k_tail).
 *
 * The ring's barriers (Sm90BarsT), sm90_stage_begin and sm90_mma also serve a tile of another
 * geometry: sm90_mma takes the stage count and slot sizes from its shared-memory type and the
 * accumulator count from its array (gemm_sm90.cu's token-side tile: 512 threads, three consumers
 * of m64n176, four stages of 24 + 22 KB).
 */
#ifndef MOKC_KERNELS_MOK_SM90_PIPELINE_CUH
#define MOKC_KERNELS_MOK_SM90_PIPELINE_CUH

#include <cuda_bf16.h>
#include <type_traits>

#include "mok.h"
#include "mok_protocol.cuh"
#include "tile_mma.cuh" /* cp.async */
#include "tile_wgmma.cuh"

extern "C" {
#include "common.h" /* src/common.h: mokc_die */
}

#define SM90_THREADS 384
#define SM90_STAGES 3 /* 4 measured no faster (2026-11-30 (s3)); a fourth's 48 KB hold the staging */
#define SM90_BK 64
#define SM90_BM 128
#define SM90_PANEL_BYTES (64 * 64 * 2)        /* one 64 x 64 bf16 panel */
#define SM90_A_BYTES (2 * SM90_PANEL_BYTES)   /* 128 rows (or M) x 64 K */
#define SM90_B_BYTES (4 * SM90_PANEL_BYTES)   /* 256 columns x 64 K */
#define SM90_STG_PITCH 264                     /* bf16 a staged row: 256 + 8, conflict-free pair writes */
#define SM90_STG_ELEMS (64 * SM90_STG_PITCH)   /* a consumer's staging */
/* The consumers' staging, SM90_STG_ELEMS bf16 each; from consumer 1's on, 48 KB, where the backward's
 * short weight-gradient tasks hold three of its four 16 KB parts of fp32 results (sm90_wgrad_buf) */
#define SM90_STAGING_BYTES (SM90_STG_ELEMS * 2 + 3 * 16384)
#define SM90_PRODUCER_REGS 64  /* setmaxnreg of warpgroup 0: the dispatch warps' row copies fit */
#define SM90_CONSUMER_REGS 208 /* setmaxnreg of the consumers: 128 accumulators and the epilogues */

/* STAGES: the ring's length (SM90_STAGES here; other tiles of the same machinery may differ). */
template <int STAGES>
struct Sm90BarsT {
    uint64_t full[STAGES], empty[STAGES];
    uint64_t task_full[2], task_empty[2];
    uint64_t g_old[2][2]; /* the backward's added weight gradients: consumer w's old values (sm90_epilogue_wgrad_tma) */
    alignas(16) int task[2][8]; /* the task ring: a kernel's decoded task (Sm90FwdTask, Sm90BwdTask) */
    int dispatch_part; /* the dispatch warps' current part of an M tile */
    int push_base;     /* the megakernels' expert_offset_all[e0]: the rank's first row in row_slot_all */
    int push_slot[2][64]; /* consumer w's rows' slots for sm90_push_rows (sm90_push_prefetch) */
    unsigned long long trace[MOK_TRACE_SLOTS]; /* the kernel's trace (mok.h), written out at the end */
};
typedef Sm90BarsT<SM90_STAGES> Sm90Bars;

#define SM90_SMEM_BYTES \
    (1024 + SM90_STAGES * (SM90_A_BYTES + SM90_B_BYTES) + SM90_STAGING_BYTES + (int)sizeof(Sm90Bars))

static_assert(SM90_SMEM_BYTES <= 227 * 1024, "shared memory of one block");

/* The block's shared memory, carved from the dynamic allocation (1024-byte aligned tiles). The
 * constants are the stage geometry sm90_mma reads (a shared-memory type of another tile gives its own). */
struct Sm90Smem {
    static constexpr int STAGES = SM90_STAGES, A_BYTES = SM90_A_BYTES, B_BYTES = SM90_B_BYTES;
    static constexpr int STAGING_BYTES = SM90_STAGING_BYTES, CONSUMERS = 2, B_PANEL_COLS = 64;
    unsigned char *a, *b; /* SM90_STAGES stages each */
    __nv_bfloat16 *stg;   /* consumer w's staging at + SM90_STG_ELEMS * w */
    Sm90Bars *bars;
};

/* What a bounded wait reports on expiry. */
struct Sm90Watch {
    MokError *err;
    unsigned *claim;
    long long budget_ns;
};

__device__ __forceinline__ void sm90_named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* Carves the shared memory of a Smem (Sm90Smem, or another tile's type with the same constants:
 * STAGES stages of A_BYTES, then of B_BYTES, then STAGING_BYTES of staging when it has any, then
 * the barriers); thread 0 initialises the barriers (every thread of the CONSUMERS warpgroups
 * releases a stage and a task slot); then a block barrier. */
template <class Smem = Sm90Smem>
__device__ __forceinline__ Smem sm90_setup(unsigned char *raw, const int *push_base = nullptr) {
    unsigned char *base = raw + ((1024 - (mok_smem_u32(raw) & 1023)) & 1023);
    Smem s;
    s.a = base;
    s.b = s.a + Smem::STAGES * Smem::A_BYTES;
    unsigned char *rest = s.b + Smem::STAGES * Smem::B_BYTES;
    if constexpr (Smem::STAGING_BYTES > 0) s.stg = reinterpret_cast<__nv_bfloat16 *>(rest);
    s.bars = reinterpret_cast<decltype(s.bars)>(rest + Smem::STAGING_BYTES);
    if (threadIdx.x == 0) {
        for (int i = 0; i < Smem::STAGES; i++) {
            mok_mbar_init(&s.bars->full[i], 1);
            mok_mbar_init(&s.bars->empty[i], 128 * Smem::CONSUMERS);
        }
        for (int i = 0; i < 2; i++) {
            mok_mbar_init(&s.bars->task_full[i], 1);
            mok_mbar_init(&s.bars->task_empty[i], 128 * Smem::CONSUMERS);
            mok_mbar_init(&s.bars->g_old[i][0], 1);
            mok_mbar_init(&s.bars->g_old[i][1], 1);
        }
        for (int i = 0; i < MOK_TRACE_SLOTS; i++) s.bars->trace[i] = 0;
        if (push_base) s.bars->push_base = *push_base;
        mok_mbar_fence_init();
    }
    __syncthreads();
    return s;
}

/* Bounded wait on a pipeline barrier. Its budget is twice the counters': a stalled counter is
 * reported by the producer that waits on it, not by the consumers idling behind it. */
__device__ __forceinline__ void sm90_wait(const Sm90Watch &wd, uint64_t *bar, unsigned parity, int tile) {
    if (mok_mbar_try_wait(bar, parity)) return;
    const long long t0 = mok_globaltimer();
    bool fired = false;
    while (!mok_mbar_try_wait(bar, parity)) {
        const long long dt = mok_globaltimer() - t0;
        if (!fired && dt > 2 * wd.budget_ns) {
            fired = true;
            mok_watchdog_fire(wd.err, wd.claim, MOK_ROLE_PIPELINE, tile, -1, 1u, 0u, dt);
        }
    }
}

/* The traced builds' section timer of an epilogue: lap(i) adds the time since the previous lap
 * (or the start) to tr[base + i] (MOK_TRACE_EPI: the first kind's epilogue; MOK_TRACE_PUSH: the
 * pushes); with tr == nullptr (untraced, or not the block's timekeeper) it does nothing. */
struct Sm90Laps {
    unsigned long long *tr;
    long long ts;
    int base;
    __device__ __forceinline__ explicit Sm90Laps(unsigned long long *t, int base_ = MOK_TRACE_EPI)
        : tr(t), ts(t ? mok_globaltimer() : 0), base(base_) {}
    __device__ __forceinline__ void lap(int slot) {
        if (!tr) return;
        const long long now = mok_globaltimer();
        tr[base + slot] += now - ts;
        ts = now;
    }
};

/* The traced builds' timekeeping of a consumer's tasks (mok.h's trace slots), kept by one thread
 * of consumer 0 (on; for the others, and in the untraced builds, every call does nothing):
 * asked(in_ring) before it asks for a task (whether the producer had sent it), arrived() when a
 * task comes (the wait since the last one into [0], and into [MOK_TRACE_LATE] when it was not sent
 * yet), mma_done() after its main loop, done(kind) after its epilogue (the task's wait also into
 * [MOK_TRACE_WAIT + kind]),
 * skipped() after a task without work; epilogue_trace() is Sm90Laps's argument; write_out()
 * copies the slots of n_kinds kinds, their waits and the epilogue's sections to the block's record
 * in `trace`, write_span() the time since the start. */
struct Sm90TaskClock {
    bool on, late = false;
    unsigned long long *tr; /* the block's slots in shared memory */
    long long start, t0, t1, t2;
    __device__ __forceinline__ Sm90TaskClock(bool on_, unsigned long long *tr_)
        : on(on_), tr(tr_), start(on_ ? mok_globaltimer() : 0), t0(start), t1(0), t2(0) {}
    __device__ __forceinline__ void asked(bool in_ring) { late = !in_ring; }
    __device__ __forceinline__ void arrived() {
        if (!on) return;
        t1 = mok_globaltimer();
        tr[0] += t1 - t0;
        if (late) tr[MOK_TRACE_LATE] += 1, tr[MOK_TRACE_LATE + 1] += t1 - t0;
    }
    __device__ __forceinline__ void mma_done() {
        if (on) t2 = mok_globaltimer();
    }
    __device__ __forceinline__ void skipped() {
        if (on) t0 = mok_globaltimer();
    }
    __device__ __forceinline__ void done(int kind) {
        if (!on) return;
        const long long t_prev = t0;
        t0 = mok_globaltimer();
        tr[1 + 3 * kind] += 1;
        tr[2 + 3 * kind] += t2 - t1;
        tr[3 + 3 * kind] += t0 - t2;
        tr[MOK_TRACE_WAIT + kind] += t1 - t_prev;
    }
    __device__ __forceinline__ unsigned long long *epilogue_trace() const { return on ? tr : nullptr; }
    /* the consumer's span, start to now (after its last task), into the block's record */
    __device__ __forceinline__ void write_span(unsigned long long *trace) const {
        if (on) trace[(size_t)blockIdx.x * MOK_TRACE_SLOTS + MOK_TRACE_SPAN] = mok_globaltimer() - start;
    }
    __device__ __forceinline__ void write_out(unsigned long long *trace, int n_kinds) const {
        if (!on) return;
        unsigned long long *out = trace + (size_t)blockIdx.x * MOK_TRACE_SLOTS;
        for (int i = 0; i < 1 + 3 * n_kinds; i++) out[i] = tr[i];
        for (int i = MOK_TRACE_EPI; i < MOK_TRACE_EPI + 4; i++) out[i] = tr[i];
        for (int i = MOK_TRACE_PUSH; i < MOK_TRACE_PUSH + 3; i++) out[i] = tr[i];
        for (int i = MOK_TRACE_WAIT; i < MOK_TRACE_WAIT + n_kinds; i++) out[i] = tr[i];
        out[MOK_TRACE_LATE] = tr[MOK_TRACE_LATE];
        out[MOK_TRACE_LATE + 1] = tr[MOK_TRACE_LATE + 1];
    }
};

/* The traced builds' producer thread, at its end: its waits on the protocol's counters by task
 * kind (n_kinds slots from MOK_TRACE_PRODUCER of the block's shared slots) to the block's record. */
__device__ __forceinline__ void sm90_trace_producer_out(unsigned long long *trace, const unsigned long long *slots,
                                                        int n_kinds) {
    unsigned long long *out = trace + (size_t)blockIdx.x * MOK_TRACE_SLOTS;
    for (int i = MOK_TRACE_PRODUCER; i < MOK_TRACE_PRODUCER + n_kinds; i++) out[i] = slots[i];
}

/* A position in a ring of at most 4 slots, in one register (the consumers hold two rings through
 * whole tasks, beside 128 accumulators): bits 0-3 each slot's lap parity, bits 4-5 the current
 * slot, bits 6-8 the ring's length. The parities are kept a slot, not a ring: the backward's short
 * weight-gradient tasks run the stage ring one stage short (sm90_lend_stage), so its slots do not
 * go round together. */
struct Sm90Ring {
    unsigned v;
    __device__ __forceinline__ explicit Sm90Ring(int n) : v((unsigned)n << 6) {}
    __device__ __forceinline__ int slot() const { return (int)((v >> 4) & 3u); }
    __device__ __forceinline__ unsigned phase_of(int s) const { return (v >> s) & 1u; }
    __device__ __forceinline__ unsigned phase() const { return phase_of(slot()); }
    __device__ __forceinline__ void flip(int s) { v ^= 1u << s; }
    /* past the current slot (its next use is a lap on) to the next */
    __device__ __forceinline__ void next() {
        const unsigned s = (v >> 4) & 3u;
        v ^= 1u << s;
        v = s + 1 == (v >> 6) ? v & ~0x30u : v + 0x10u;
    }
    /* n slots from here on: a current slot past them becomes slot 0 */
    __device__ __forceinline__ void resize(int n) {
        const unsigned s = (unsigned)slot() < (unsigned)n ? (unsigned)slot() : 0u;
        v = (v & 15u) | (s << 4) | ((unsigned)n << 6);
    }
};

/* Producer: hands a decoded task k to both consumers (Task: the kernel's task, its ticket in k.t, -1 for
 * the end). The producer decodes each ticket once, so the consumers hold none of the schedule's
 * state in their registers (the backward's consumers spilled it) and do no divisions. */
template <class Task>
__device__ __forceinline__ void sm90_send_task(const Sm90Watch &wd, Sm90Bars *bars, Sm90Ring &tr, const Task &k) {
    static_assert(sizeof(Task) <= sizeof bars->task[0], "a task fits its slot of the task ring");
    sm90_wait(wd, &bars->task_empty[tr.slot()], tr.phase() ^ 1u, k.t);
    *reinterpret_cast<Task *>(bars->task[tr.slot()]) = k;
    mok_mbar_arrive(&bars->task_full[tr.slot()]);
    tr.next();
}

/* Consumer (the traced builds' probe): whether the next task is in the ring already. */
__device__ __forceinline__ bool sm90_task_in_ring(Sm90Bars *bars, const Sm90Ring &tr) {
    return mok_mbar_test_wait(&bars->task_full[tr.slot()], tr.phase());
}

/* Consumer: the next task (k.t < 0: the end). */
template <class Task>
__device__ __forceinline__ Task sm90_recv_task(const Sm90Watch &wd, Sm90Bars *bars, Sm90Ring &tr) {
    sm90_wait(wd, &bars->task_full[tr.slot()], tr.phase(), -1);
    const Task k = *reinterpret_cast<const Task *>(bars->task[tr.slot()]);
    mok_mbar_arrive(&bars->task_empty[tr.slot()]);
    tr.next();
    return k;
}

/* Producer: waits for a free stage and arms its barrier for `bytes`; returns the stage index. */
template <int STAGES>
__device__ __forceinline__ int sm90_stage_begin(const Sm90Watch &wd, Sm90BarsT<STAGES> *bars, Sm90Ring &sr,
                                                unsigned bytes, int tile) {
    static_assert(STAGES <= 4, "Sm90Ring keeps the parities of 4 slots");
    const int s = sr.slot();
    sm90_wait(wd, &bars->empty[s], sr.phase() ^ 1u, tile);
    mok_mbar_arrive_expect_tx(&bars->full[s], bytes);
    sr.next();
    return s;
}

/* The stage ring's last stage lent to the consumers as staging, and given back: both sides call these
 * at the same tasks, the ring one stage short in between. Lending is a ring step of that stage
 * without bytes: the producer waits until the consumers have released its last load and completes
 * its full barrier with no transfer (sm90_lend_stage); the consumers take it there (sm90_borrow_stage)
 * and give it back with their empty arrivals, once nothing of theirs reads it any more
 * (sm90_return_stage), which the producer's next use of the stage waits for. */
template <int STAGES>
__device__ __forceinline__ void sm90_lend_stage(const Sm90Watch &wd, Sm90BarsT<STAGES> *bars, Sm90Ring &sr, int tile) {
    constexpr int s = STAGES - 1;
    sr.resize(STAGES - 1);
    sm90_wait(wd, &bars->empty[s], sr.phase_of(s) ^ 1u, tile);
    mok_mbar_arrive(&bars->full[s]);
    sr.flip(s);
}
template <int STAGES>
__device__ __forceinline__ void sm90_borrow_stage(const Sm90Watch &wd, Sm90BarsT<STAGES> *bars, Sm90Ring &sr,
                                                  int tile) {
    constexpr int s = STAGES - 1;
    sr.resize(STAGES - 1);
    sm90_wait(wd, &bars->full[s], sr.phase_of(s), tile);
    sr.flip(s);
}
template <int STAGES>
__device__ __forceinline__ void sm90_return_stage(Sm90BarsT<STAGES> *bars, Sm90Ring &sr) {
    mok_mbar_arrive(&bars->empty[STAGES - 1]);
    sr.resize(STAGES);
}

/* Consumers (both consumers' 256 threads, Sm90Smem's stages only): zero K lines [valid, 64) of the
 * stage's A panels and B panels (MN-major operands only), make the writes visible to wgmma, and
 * wait for each other. */
__device__ __forceinline__ void sm90_zero_k_tail(unsigned char *a, unsigned char *b, int valid) {
    /* a panel's lines [valid, 64) are its bytes [128 valid, 8192): a thread zeroes one 16-byte chunk
     * of that range in all six panels at a time (no division; the panels' offsets are constants) */
    const int4 zero = make_int4(0, 0, 0, 0);
    for (int c = 8 * valid + (int)threadIdx.x - 128; c < SM90_PANEL_BYTES / 16; c += 256) {
#pragma unroll
        for (int panel = 0; panel < 2; panel++)
            *reinterpret_cast<int4 *>(a + panel * SM90_PANEL_BYTES + 16 * c) = zero;
#pragma unroll
        for (int panel = 0; panel < 4; panel++)
            *reinterpret_cast<int4 *>(b + panel * SM90_PANEL_BYTES + 16 * c) = zero;
    }
    mok_fence_proxy_async_shared();
    sm90_named_sync(4, 256);
}

/* The bytes sm90_load_panels brings for panels from column c0 of a tensor of `cols` columns. */
__device__ __forceinline__ unsigned sm90_panels_bytes(const Sm90Panels &p, int c0, int cols) {
    if (c0 >= cols) return 0;
    const int n = p.whole ? p.n : min(p.n, (cols - c0 + p.width - 1) / p.width);
    return (unsigned)n * (unsigned)p.width * 128u;
}

/* Producer: the n panels of p from column c0 (a multiple of the panels' width) of a tensor of `cols`
 * columns, K lines [k0, k0 + 64) of matrix `mat`, into dst (panel j at dst + j * 128 * width bytes).
 * One box where the columns are whole panels (its panels past them zero-filled, their bytes
 * counted); else one a panel, those wholly past the columns not loaded (none at all from c0 >= cols). */
__device__ __forceinline__ void sm90_load_panels(unsigned char *dst, const Sm90Panels &p, uint64_t *full, int c0,
                                                 int cols, int k0, int mat) {
    if (c0 >= cols) return;
    if (p.whole) {
        mok_tma_load_4d(dst, &p.map, full, 0, k0, p.width == 32 ? c0 >> 5 : c0 >> 6, mat); /* c0 >= 0 */
        return;
    }
    for (int j = 0; j < p.n && c0 + p.width * j < cols; j++)
        mok_tma_load_3d(dst + j * p.width * 128, &p.map, full, c0 + p.width * j, k0, mat);
}

/* One 16-wide K step of a consumer: acc (+)= A (64 x 16, desc a) @ B (16 x 256, 176 or 192, desc b). */
template <int TA, int TB>
__device__ __forceinline__ void sm90_wgmma_k16(float (&acc)[128], uint64_t a, uint64_t b, int scale_d) {
    mok_wgmma_m64n256k16<TA, TB>(acc, a, b, scale_d);
}
template <int TA, int TB>
__device__ __forceinline__ void sm90_wgmma_k16(float (&acc)[88], uint64_t a, uint64_t b, int scale_d) {
    mok_wgmma_m64n176k16<TA, TB>(acc, a, b, scale_d);
}
template <int TA, int TB>
__device__ __forceinline__ void sm90_wgmma_k16(float (&acc)[96], uint64_t a, uint64_t b, int scale_d) {
    mok_wgmma_m64n192k16<TA, TB>(acc, a, b, scale_d);
}

/* sm90_mma's step in the middle of the main loop: none. */
struct Sm90NoStep {
    __device__ __forceinline__ void operator()() const {}
};

/* Consumer w's main loop over KB blocks of K: acc = A @ B. TA / TB: A M-major / B N-major (else
 * K-major). k_tail (MN-major operands with Sm90Smem's stages only): valid K lines of the last
 * block, 64 when full. N: the accumulator count, 128 (B 256 wide), 88 (176) or 96 (192). Smem: the stage
 * geometry (Sm90Smem's constants, or another tile's). mid() runs once, after block KB / 2's products
 * are issued: work of the epilogue that can start while the tensor cores run (its loads; the
 * epilogues that use it rely on KB >= 1, as the loop's last release does). */
template <int TA, int TB, int N, class Smem, class Mid = Sm90NoStep>
__device__ __forceinline__ void sm90_mma(float (&acc)[N], const Sm90Watch &wd, const Smem &sm, Sm90Ring &sr, int w,
                                         int KB, int k_tail, int tile, Mid mid = Mid()) {
    /* B in 32-column panels (Smem::B_PANEL_COLS, N-major only): the 64-byte swizzle's geometry */
    constexpr bool b32 = Smem::B_PANEL_COLS == 32;
    static_assert(!b32 || TB, "32-column panels are an N-major B's");
    constexpr unsigned lbo_a = TA ? SM90_PANEL_BYTES : 16, lbo_b = TB ? (b32 ? 4096 : SM90_PANEL_BYTES) : 16;
    constexpr unsigned sbo_b = b32 ? 512 : 1024;
    constexpr int step_a = TA ? 128 : 2, step_b = TB ? (b32 ? 64 : 128) : 2; /* a 16-wide K step, 16-byte units */
    int prev = -1;
    for (int kb = 0; kb < KB; kb++) {
        const int s = sr.slot();
        sm90_wait(wd, &sm.bars->full[s], sr.phase(), tile);
        unsigned char *a = sm.a + s * Smem::A_BYTES, *b = sm.b + s * Smem::B_BYTES;
        /* other geometries pass k_tail = 64: their K tails are TMA's zero fill (3D maps) */
        if constexpr ((TA || TB) && std::is_same<Smem, Sm90Smem>::value)
            if (kb == KB - 1 && k_tail < 64) sm90_zero_k_tail(a, b, k_tail);
        const uint64_t da = mok_wgmma_desc(a + w * SM90_PANEL_BYTES, lbo_a, 1024);
        const uint64_t db = mok_wgmma_desc(b, lbo_b, sbo_b, b32 ? 64 : 128);
        mok_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < SM90_BK / 16; kk++)
            sm90_wgmma_k16<TA, TB>(acc, da + step_a * kk, db + step_b * kk, kb > 0 || kk > 0);
        mok_wgmma_commit();
        if (kb == KB / 2) mid();
        if (prev >= 0) {
            mok_wgmma_wait<1>(); /* the previous stage's products are done: release it */
            mok_mbar_arrive(&sm.bars->empty[prev]);
        }
        prev = s;
        sr.next();
    }
    mok_wgmma_wait<0>();
    mok_fence_acc(acc);
    mok_mbar_arrive(&sm.bars->empty[prev]);
}

/* A consumer without rows in a task: its KB stages pass without products, then, where the task
 * signals counters (done and done_all, else NULL), its share of the signals as if it had computed.
 * It waits for each stage to fill before its empty arrival, so that its arrivals stay in the ring's
 * lap. */
template <class Smem>
__device__ __forceinline__ void sm90_skip_task(const Sm90Watch &wd, const Smem &sm, Sm90Ring &sr, int KB, int tile,
                                               unsigned *done, unsigned *done_all = nullptr) {
    for (int kb = 0; kb < KB; kb++) {
        sm90_wait(wd, &sm.bars->full[sr.slot()], sr.phase(), tile);
        mok_mbar_arrive(&sm.bars->empty[sr.slot()]);
        sr.next();
    }
    if ((threadIdx.x & 127) != 0) return;
    if (done) mok_red_release(done, 1u);
    if (done_all) mok_red_release(done_all, 1u);
}

/* The rows of a task's tile as the producer read them from the schedule (mok_tile_rows; the
 * backward's weight-gradient tasks: the expert's rows), handed to the consumers in the task so
 * that they do not search the schedule again: local expert el, first local row r0, nrows rows. */
struct Sm90TileRows {
    int el, r0, nrows;
};

/* Consumer w's rows of a tile: the first local row and how many are valid (<= 0 when the tile
 * ends before them). */
__device__ __forceinline__ void sm90_consumer_rows(int w, const Sm90TileRows &rows, int &r0, int &nrows) {
    r0 = rows.r0 + 64 * w;
    nrows = rows.nrows - 64 * w;
}

/* Consumer w's staging (SM90_STG_ELEMS at sm.stg + w * SM90_STG_ELEMS), used two ways. Half tiles
 * (sm90_stage): 64 rows x 16 chunks of 8 bf16, conflict-free for the accumulator's writes and the
 * row-wise 16-byte reads, in one of two layouts: rows of 256 bytes with chunk c of row r at
 * c ^ (r & 7) (BOX false), or two boxes of 64 rows x 64 columns laid out as 128-byte swizzled TMA
 * boxes, chunk c & 7 of row r at (c & 7) ^ (r & 7) in the row's 128 bytes of box c >> 3 (BOX true:
 * what a TMA store of a box reads; the forward's gate/up epilogue). A half tile fills half of the
 * staging; the backward's dgrad epilogue uses both halves in turn, the forward's gate/up one both
 * at once (pre_gate, pre_up). Whole rows (sm90_push_rows): 64 rows of 256 columns at pitch
 * SM90_STG_PITCH, each row read by one bulk copy. */
#define SM90_BOX_ELEMS (64 * 64)
template <bool BOX = false>
__device__ __forceinline__ __nv_bfloat16 *sm90_stg_at(__nv_bfloat16 *stg, int r, int c) {
    if (BOX) return stg + (c >> 3) * SM90_BOX_ELEMS + r * 64 + (((c & 7) ^ (r & 7)) << 3);
    return stg + r * 128 + ((c ^ (r & 7)) << 3);
}

/* The consumer thread (of its 128) that issues an epilogue's TMA stores and waits for them: not in
 * warp 0, whose lanes issue the pushes' bulk copies, so that its wait for its own stores' completion
 * does not also wait for earlier pushes to land on a peer (bulk groups are per thread). */
#define SM90_TMA_STORER 32

/* Before consumer w writes its staging: the bulk copies of its last push (issued by its warp 0)
 * have read it. Only warp 0's groups are waited here: SM90_TMA_STORER waits for its own stores
 * inside the epilogue that issued them, and must keep doing so (or wait here too). */
__device__ __forceinline__ void sm90_staging_acquire(int w) {
    if ((threadIdx.x & 127) < 32) mok_bulk_wait_read();
    sm90_named_sync(2 + w, 128);
}

/* Writes f(i, half) (the bf16 pair of accumulator columns 8i + 2t, +1 in row ra + 8 * half,
 * i < 16) into the staging (layout BOX, as sm90_stg_at; BOX: made visible to TMA stores too), then
 * the consumer's barrier. The caller has acquired the staging (sm90_staging_acquire) since its last
 * push. */
template <bool BOX = false, class F>
__device__ __forceinline__ void sm90_stage(__nv_bfloat16 *stg, int w, F f) {
    const int tid = threadIdx.x & 127, ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t = tid & 3;
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int half = 0; half < 2; half++)
            *reinterpret_cast<__nv_bfloat162 *>(sm90_stg_at<BOX>(stg, ra + 8 * half, i) + 2 * t) = f(i, half);
    if (BOX) mok_fence_proxy_async_shared(); /* TMA stores may read the boxes */
    sm90_named_sync(2 + w, 128);
}

/* Copies the staged rows r < nrows (layout BOX), chunks with column col0 + 8c < ncols, to
 * row_ptr(r) + 8c; then the consumer's barrier (the staging is free again). */
template <bool BOX = false, class P>
__device__ __forceinline__ void sm90_unstage(__nv_bfloat16 *stg, int w, int nrows, int col0, int ncols, P row_ptr) {
    const int tid = threadIdx.x & 127;
#pragma unroll /* row_ptr may load (the slot of a pushed row): keep those loads in flight together */
    for (int j = 0; j < 8; j++) {
        const int v = tid + 128 * j, r = v >> 4, c = v & 15;
        if (r >= nrows || col0 + 8 * c >= ncols) continue;
        *reinterpret_cast<int4 *>(row_ptr(r) + 8 * c) = *reinterpret_cast<const int4 *>(sm90_stg_at<BOX>(stg, r, c));
    }
    sm90_named_sync(2 + w, 128);
}

__device__ __forceinline__ __nv_bfloat162 sm90_pair(const float (&acc)[128], int i, int half) {
    return __floats2bfloat162_rn(acc[4 * i + 2 * half], acc[4 * i + 2 * half + 1]);
}

/* Consumer w's 64 x 256 result as 16-bit pairs (pair(i, half): of accumulator columns 8i + 2t, +1 in row ra + 8 *
 * half, i < 32) in two staged halves of 128 columns: each staged, then unstage(c0) (c0 = col0 + 128 * part < ncols)
 * writes it out and frees the staging (ending with the consumer's barrier, which the next half's staging relies
 * on). sm90_store_parts: the pairs are bf16. */
template <class U, class Pair>
__device__ __forceinline__ void sm90_store_parts_as(__nv_bfloat16 *stg, int w, int col0, int ncols, U unstage,
                                                    Pair pair) {
    sm90_staging_acquire(w);
#pragma unroll
    for (int part = 0; part < 2; part++) {
        const int c0 = col0 + 128 * part;
        if (c0 >= ncols) break;
        sm90_stage(stg, w, [&](int i, int half) { return pair(i + 16 * part, half); });
        unstage(c0);
    }
}
template <class U>
__device__ __forceinline__ void sm90_store_parts(const float (&acc)[128], __nv_bfloat16 *stg, int w, int col0,
                                                 int ncols, U unstage) {
    sm90_store_parts_as(stg, w, col0, ncols, unstage, [&](int i, int half) { return sm90_pair(acc, i, half); });
}

/* The same to rows: row r < nrows, column col0 + c < ncols to row_at(r)[col0 + c]. */
template <class R>
__device__ __forceinline__ void sm90_store_rows(const float (&acc)[128], __nv_bfloat16 *stg, int w, int nrows,
                                                int col0, int ncols, R row_at) {
    sm90_store_parts(acc, stg, w, col0, ncols, [&](int c0) {
        sm90_unstage(stg, w, nrows, c0, ncols, [&](int r) { return row_at(r) + c0; });
    });
}

/* During the main loop of a task whose result consumer w pushes (sm90_mma's mid step): the slots
 * of its rows r < nrows (rows r0 + r of the owner layout) by cp.async into push_slot[w], each lane
 * of its warp 0 the two rows it will push, so that the epilogue's lookups are not two dependent
 * global loads on the way to the next task. */
template <class P>
__device__ __forceinline__ void sm90_push_prefetch(const P &p, Sm90Bars *bars, int w, int r0, int nrows) {
    const int tid = threadIdx.x & 127;
    if (tid >= 32) return;
    const int *slots = p.row_slot_all + bars->push_base + r0;
#pragma unroll
    for (int h = 0; h < 2; h++)
        if (tid + 32 * h < nrows) mok_cp_async4(&bars->push_slot[w][tid + 32 * h], slots + tid + 32 * h);
    mok_cp_async_commit();
}

/* Consumer w's 64 x 256 result, each row r < nrows pushed to its source rank's slot (token * k +
 * j; sm90_push_prefetch fetched them) at window offset off, columns col0.. < C: the forward's
 * expert outputs and the backward's dx rows. The rows are staged whole; warp 0 then hands each to
 * a bulk copy (two rows a lane) and the consumer goes on: the next staging waits for the reads
 * (sm90_staging_acquire), the end of the kernel for the writes (sm90_push_drain). */
template <class P>
__device__ __forceinline__ void sm90_push_rows(const P &p, const float (&acc)[128], __nv_bfloat16 *stg, Sm90Bars *bars,
                                               int w, int nrows, int col0, size_t off, unsigned long long *tr) {
    Sm90Laps laps(tr, MOK_TRACE_PUSH); /* tr: the traced build's timekeeper only */
    sm90_staging_acquire(w);
    laps.lap(0);
    const int tid = threadIdx.x & 127, ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t2 = 2 * (tid & 3);
#pragma unroll
    for (int i = 0; i < 32; i++)
#pragma unroll
        for (int half = 0; half < 2; half++)
            *reinterpret_cast<__nv_bfloat162 *>(stg + (ra + 8 * half) * SM90_STG_PITCH + 8 * i + t2) =
                sm90_pair(acc, i, half);
    mok_fence_proxy_async_shared(); /* the bulk copies read it */
    sm90_named_sync(2 + w, 128);
    laps.lap(1);
    if (tid < 32) {
        mok_cp_async_wait0(); /* this lane's slots */
        const unsigned bytes = 2u * (unsigned)min(256, p.C - col0);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = tid + 32 * h;
            if (r >= nrows) continue;
            const int g = bars->push_slot[w][r];
            const int src = g / p.NK, slot = g - src * p.NK;
            __nv_bfloat16 *dst = reinterpret_cast<__nv_bfloat16 *>(p.peer_base[src] + off) + (size_t)slot * p.C + col0;
            mok_bulk_store(dst, stg + r * SM90_STG_PITCH, bytes);
        }
        mok_bulk_commit();
    }
    laps.lap(2);
}

/* Consumer w, at its end: every pushed row has landed. */
__device__ __forceinline__ void sm90_push_drain() {
    if ((threadIdx.x & 127) < 32) mok_bulk_wait();
}

/* Consumer w's task loop, both megakernels': the accumulator (zeros for tasks without rows; a
 * task's first products overwrite it), the consumer's staging, the stage and task rings and the
 * trace's clock (one thread of consumer 0 where TRACE); run(k, acc, stg, sr, clock) does task k,
 * until the producer's end task; then the pushes drain. Returns the clock for its write_out. */
template <class Task, bool TRACE, class Run>
__device__ __forceinline__ Sm90TaskClock sm90_consume_tasks(const Sm90Watch &wd, const Sm90Smem &sm, int w, Run run) {
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;
    __nv_bfloat16 *stg = sm.stg + w * SM90_STG_ELEMS;
    Sm90Ring sr(SM90_STAGES), tr(2);
    Sm90TaskClock clock(TRACE && w == 0 && (threadIdx.x & 127) == 0, sm.bars->trace);
    for (;;) {
        if (clock.on) clock.asked(sm90_task_in_ring(sm.bars, tr));
        const Task k = sm90_recv_task<Task>(wd, sm.bars, tr);
        if (k.t < 0) {
            sm90_push_drain();
            break;
        }
        clock.arrived();
        run(k, acc, stg, sr, clock);
    }
    return clock;
}

/* The dispatch hands out an M tile's rows in SM90_DISPATCH_PARTS parts of tile_m / parts rows
 * (rounded up), in order, and arrive[mt] counts the tile's parts (empty parts of a short tile
 * included). With whole tiles a claim, every block pulled its own tile at once and the first tiles
 * landed only as the first grid's worth all did; in parts, the first tiles' rows land first. */
#define SM90_DISPATCH_PARTS 4

/* Warps 1-3 of warpgroup 0: pull the rows of the tile parts the dispatch counter hands out into
 * dst (owner layout, C columns) from the sources' windows at offset off (mok_pull_row: scaled by
 * the slots' gates at gate_off, or MOK_UNSCALED), then add the part to arrive[mt] and, where given,
 * to *landed (all tiles' parts). */
template <class P>
__device__ __forceinline__ void sm90_dispatch(const P &p, int MT, int *s_part, bf16_t *dst, size_t off,
                                              size_t gate_off, unsigned *landed) {
    const int part_rows = (p.tile_m + SM90_DISPATCH_PARTS - 1) / SM90_DISPATCH_PARTS;
    const int warp = threadIdx.x >> 5, base = p.expert_offset_all[p.e0];
    for (;;) {
        if (threadIdx.x == 32) *s_part = (int)atomicAdd(p.ticket + MOK_TICKET_PART, 1u);
        sm90_named_sync(1, 96);
        const int u = *s_part, mt = u / SM90_DISPATCH_PARTS, r_lo = u % SM90_DISPATCH_PARTS * part_rows;
        if (mt >= MT) return;
        int el, r0, nrows;
        mok_tile_rows(p, mt, el, r0, nrows);
        const int r_hi = min(nrows, r_lo + part_rows);
        for (int r = r_lo + warp - 1; r < r_hi; r += 3) mok_pull_row(p, base, r0 + r, dst, off, gate_off);
        mok_fence_proxy_async_global(); /* the rows are read by TMA */
        sm90_named_sync(1, 96);
        if (threadIdx.x == 32) {
            __threadfence();
            mok_red_release(p.arrive + mt, 1u);
            if (landed) mok_red_release(landed, 1u);
        }
    }
}

/* Host, before a launch of a Hopper kernel on this pipeline: its shared-memory limit (smem_bytes)
 * raised once per kernel, its register count checked against the setmaxnreg split of its threads
 * (regs_split, for the whole block), and the schedule's M tile checked (the megakernels compute
 * 128-row tiles; the standalone GEMMs pass SM90_BM). who names the kernel in the messages. */
template <class Kernel>
static void sm90_prepare(Kernel kernel, int tile_m, const char *who, int smem_bytes = SM90_SMEM_BYTES,
                         int threads = SM90_THREADS, int regs_split = SM90_PRODUCER_REGS * 128 + SM90_CONSUMER_REGS * 256) {
    static const void *done[8]; /* kernels of one signature share this instantiation */
    int i = 0;
    while (i < 8 && done[i] && done[i] != (const void *)kernel) i++;
    if (i == 8) mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: more than 8 Hopper kernels of one signature (internal)", who);
    if (!done[i]) {
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
        /* setmaxnreg waits, unbounded, until the block's registers cover the split (regs_split for
         * the whole block): the kernel must be compiled with at least that many */
        cudaFuncAttributes a;
        cudaCheck(cudaFuncGetAttributes(&a, kernel));
        if (a.numRegs * threads < regs_split)
            mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: the kernel has %d registers a thread, too few for its "
                     "setmaxnreg split (internal)", who, a.numRegs);
        done[i] = (const void *)kernel;
    }
    if (tile_m != SM90_BM)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: needs tile_m = %d, not %d (internal)", who, SM90_BM, tile_m);
}

#endif
