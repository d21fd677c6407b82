/*
 * The megakernel's protocol pieces shared by every kernel variant (mok_forward.cu: mma.sync tiles,
 * any GPU; mok_forward_sm90.cu: wgmma + TMA, Hopper): counters with acquire/release, the bounded
 * spin-wait behind the watchdog, the M-tile lookup and the copy of one dispatched row.
 */
#ifndef MOKC_KERNELS_MOK_PROTOCOL_CUH
#define MOKC_KERNELS_MOK_PROTOCOL_CUH

#include "../device_util.cuh"
#include "mok.h"

__device__ __forceinline__ unsigned mok_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void mok_red_release(unsigned *p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ long long mok_globaltimer() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Fills the host-mapped record once (the first waiter to expire claims it through *claim) and
 * traps; later waiters keep waiting for the trap. */
__device__ __forceinline__ void mok_watchdog_fire(MokError *err, unsigned *claim, int role, int tile, int idx,
                                                  unsigned expected, unsigned seen, long long waited_ns) {
    if (atomicCAS(claim, 0u, 1u) != 0u) return;
    err->role = role;
    err->block = (int)blockIdx.x;
    err->tile = tile;
    err->counter = idx;
    err->expected = (int)expected;
    err->seen = (int)seen;
    err->waited_ns = waited_ns;
    __threadfence_system();
    err->flag = 1;
    __threadfence_system();
    asm volatile("trap;");
}

/* One thread: waits until *ctr >= expected (acquire), bounded by budget_ns. */
static __device__ __noinline__ void mok_wait(MokError *err, unsigned *claim, long long budget_ns, const unsigned *ctr,
                                      unsigned expected, int role, int tile, int idx) {
    unsigned seen = mok_ld_acquire(ctr);
    if (seen >= expected) return;
    const long long t0 = mok_globaltimer();
    unsigned ns = 32;
    bool expired = false;
    while ((seen = mok_ld_acquire(ctr)) < expected) {
        __nanosleep(ns);
        if (ns < 2048) ns *= 2;
        const long long dt = mok_globaltimer() - t0;
        if (!expired && dt > budget_ns) {
            expired = true;
            mok_watchdog_fire(err, claim, role, tile, idx, expected, seen, dt);
        }
    }
}

/* The local expert, first local row and valid rows (<= tile_m) of M tile mt. P: the forward's or
 * the backward's parameters (the schedule fields). */
template <class P>
__device__ __forceinline__ void mok_tile_rows(const P &p, int mt, int &el, int &r0, int &nrows) {
    int lo = 0, hi = p.El - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.mt_start[mid] <= mt) lo = mid;
        else hi = mid - 1;
    }
    el = lo;
    const int *eo = p.expert_offset_all + p.e0;
    const int in = mt - p.mt_start[el], cnt = eo[el + 1] - eo[el];
    r0 = eo[el] - eo[0] + in * p.tile_m;
    nrows = min(p.tile_m, cnt - in * p.tile_m);
}

/* mok_pull_row's gate_off when the rows are copied as they are (the forward's x). */
#define MOK_UNSCALED ((size_t)-1)

/* Lane's 16-byte vectors c, c + 32, ..., c + 32 (B - 1) of a row from s to d, all B loads in
 * flight before the first store; scaled: times w, rounded to bf16 (scale_bf16x8). */
template <int B>
__device__ __forceinline__ void mok_copy_vectors(const uint4 *s, uint4 *d, int c, bool scaled, float w) {
    uint4 v[B];
#pragma unroll
    for (int i = 0; i < B; i++) v[i] = s[c + 32 * i];
#pragma unroll
    for (int i = 0; i < B; i++) d[c + 32 * i] = scaled ? scale_bf16x8(v[i], w) : v[i];
}

/* One warp copies local row lr of dst (C columns) from its source rank's window at offset off: the
 * source's row `token` of slot token * k + j, as it is (gate_off == MOK_UNSCALED: the forward's x),
 * or times the slot's gate (fp32 at gate_off + 4 slot in the source's window) and rounded to bf16
 * (the backward's dy). Eight 16-byte loads in flight per lane (then four, then one for the rest):
 * NVLink latency needs them, and the scaling then waits for one latency per eight, not per four
 * (against four: the dispatch alone -7 %, the Qwen-like backward kernel -0.1 ms; one predicated
 * last batch instead spilled more registers in the backward and slowed it). */
template <class P>
__device__ __forceinline__ void mok_pull_row(const P &p, int base, int lr, bf16_t *dst, size_t off, size_t gate_off) {
    const int lane = threadIdx.x & 31, C8 = p.C / 8;
    const int g = p.row_slot_all[base + lr];
    const int src = g / p.NK, slot = g - src * p.NK, row = slot / p.k;
    const char *win = p.peer_base[src];
    const uint4 *s = reinterpret_cast<const uint4 *>(win + off + (size_t)row * p.C * 2);
    uint4 *d = reinterpret_cast<uint4 *>(dst + (size_t)lr * p.C);
    const bool scaled = gate_off != MOK_UNSCALED;
    const float w = scaled ? *reinterpret_cast<const float *>(win + gate_off + (size_t)slot * 4) : 1.0f;
    int c = lane;
    for (; c + 32 * 7 < C8; c += 32 * 8) mok_copy_vectors<8>(s, d, c, scaled, w);
    for (; c + 32 * 3 < C8; c += 32 * 4) mok_copy_vectors<4>(s, d, c, scaled, w);
    for (; c < C8; c += 32) mok_copy_vectors<1>(s, d, c, scaled, w);
}

#endif
