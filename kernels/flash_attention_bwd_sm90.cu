/*
 * The flash attention backward for Hopper (sm_90a): TMA + wgmma, warp-specialised, head dims 64
 * and 128. Same contract as the mma.sync backward of flash_attention.cu (which
 * flash_attention_backward runs instead where this one does not: flash_attention_backward_kernel);
 * delta = rowsum(dout * out) comes in, computed by flash_attention.cu's delta kernel.
 *
 * One block per (kv block j of 128 rows, batch, kv head), 384 threads = 3 warpgroups. Blocks take
 * their item from a ticket counter, kv block 0 (the longest) first, so an item is only started
 * after every earlier one has been started by a running block (the dQ order below relies on it).
 * The block loops over the query blocks of 64 rows from the last one down to its diagonal (2j),
 * and inside each over the group's query heads: step s is query block NQ - 1 - s / G, head
 * h0 + s % G.
 *  - warpgroup 0 (40 registers): warp 0 lane 0 loads K and V once, then Q and dO of each step
 *    into a ring of 2 stages by TMA; warp 1 writes -lse * log2 e and delta of the step's 64 rows
 *    into the same stage (0 past T); warps 2-3 are the dQ writer (below).
 *  - warpgroups 1 and 2 (232 registers): consumer w owns kv rows [64w, 64w + 64) and keeps their
 *    dK and dV in registers (fp32). Per step, by wgmma: S^T = K Q^T and dP^T = V dO^T (m64n64,
 *    K-major operands), P^T = exp2(S^T * scale * log2 e - lse * log2 e) (0 where u > t or t >= T),
 *    dS^T = P^T (dP^T - delta), both rounded to bf16 in registers, which is the A operand layout:
 *    dV += P^T dO and dK += dS^T Q from registers (m64nD, B N-major); dS^T to shared memory, then
 *    the block's dQ partial from this consumer's rows, dS K (m64nD, A M-major, B N-major), handed
 *    to the writer in fp32 through shared memory. The consumers never wait for each other. Their
 *    mbarrier waits have no timeout (a trap there makes ptxas serialize the wgmma and spill); the
 *    writer's timed waits, one per step, catch a consumer that is stuck.
 *  - dQ writer: dQ of (b, h, query block m) = the sum over kv blocks j = 0 .. m/2 of their
 *    partials, added in increasing j. Block j adds consumer 1's partial into consumer 0's, waits
 *    until the counter of (b, h, m) reads j (blocks 0 .. j-1 have stored their sum), loads that
 *    fp32 sum (workspace; cp.async.cg, L2 only) and adds it, stores the new sum and sets the
 *    counter to j + 1 (release); block 0 reads nothing, the last (j = m/2, the diagonal block)
 *    writes dq in bf16 times the scale instead. Integer flags only: no floating-point atomics, a
 *    fixed order of additions, bitwise reproducible. Decreasing query blocks put (h, m) at the
 *    same step index in blocks j - 1 and j, so the chain costs each block one short lag at its
 *    start, not a wait per step.
 * dK and dV (scale applied to dK) are written once at the end, in bf16, rows below T.
 *
 * Shared memory (offsets from a 1024-byte aligned base; tiles as kernels/mok/tile_wgmma.cuh,
 * 128-byte swizzled boxes of 64 columns written by TMA, zero-filled past the tensors' end):
 *   K, V      128 rows x D: D/64 boxes of 128 rows (16 KB); K-major A of S^T / dP^T (consumer w
 *             from row 64w), and K is the N-major B of dS K (lines = kv rows, LBO = the box).
 *   Q, dO     2 stages x 64 rows x D: boxes of 64 rows (8 KB); K-major B of S^T / dP^T and N-major
 *             B of dK / dV (lines = query rows, LBO = 8 KB).
 *   dS^T      per consumer 64 kv lines x 64 queries (8 KB), the M-major A of dS K: line u at
 *             u * 128 bytes, 16-byte chunk c at c ^ (u % 8) (what TMA's 128-byte swizzle does).
 *   X         per consumer 64 x D fp32 (the dQ partial), rows padded to D + 4 floats: the
 *             accumulator's float2 writes (8 rows a warp) hit each bank twice, the minimum.
 *   stats     2 stages x (-lse * log2 e, delta) x 64 floats; then the mbarriers.
 * D = 128: 32 + 32 + 64 + 16 + 66 + 1 KB = 211 KB; D = 64: 115 KB.
 */
#include "flash_attention.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>

#include "device_util.cuh"
#include "flash_sm90.cuh"

namespace {

constexpr int kThreads = 384, kKvRows = 128, kQRows = 64;
constexpr int kKvBox = kKvRows * 128, kQBox = kQRows * 128; // bytes of one 64-column box
constexpr int kDsBytes = 64 * 64 * 2;                       // one consumer's dS^T

template <int D>
struct Layout {
    static constexpr int kKvTile = D / 64 * kKvBox, kQTile = D / 64 * kQBox, kXRow = D + 4, kX = 64 * kXRow * 4;
    static constexpr int k = 0, v = kKvTile, q = 2 * kKvTile, dO = q + 2 * kQTile, ds = dO + 2 * kQTile;
    static constexpr int x = ds + 2 * kDsBytes, stats = x + 2 * kX, bars = stats + 4 * 64 * 4;
};

struct Bars {
    uint64_t kv, full[2], empty[2], xfull, xempty;
    unsigned item;
};

template <int D>
constexpr int smem_bytes() {
    return 1024 + Layout<D>::bars + (int)sizeof(Bars); // alignment slack, tiles, barriers
}
/* TMA's 128-byte swizzle and the wgmma descriptors (base offset 0) need 1024-byte aligned tiles. */
template <int D>
constexpr bool tiles_aligned() {
    using L = Layout<D>;
    return (L::k | L::v | L::q | L::dO | L::ds | L::kQTile | kDsBytes) % 1024 == 0 && (L::x | L::stats) % 16 == 0;
}
static_assert(tiles_aligned<64>() && tiles_aligned<128>(), "tile alignment");
static_assert(smem_bytes<128>() <= 227 * 1024, "shared memory of one block");

struct Maps {
    CUtensorMap q, dout, k, v; // boxes of 64 columns x 64 rows (q, dout), x 128 rows (k, v)
};

struct Params {
    __nv_bfloat16 *dq, *dk, *dv;
    const float *lse, *delta;
    float *acc;     // (B, Hq, NQ, 64, D) fp32 partial sums of dQ
    unsigned *ctr;  // [0]: the ticket; [1 + (b*Hq + h)*NQ + m]: kv blocks added into (b, h, m)
    int B, T, Hq, Hkv, group, NQ;
    float sl2, scale; // scale * log2 e, scale = 1/sqrt(D)
};

/* What a block works on (from its ticket). */
struct Item {
    int b, kvh, j, kv0, h0, steps;
};

#if MOK_SM90 // the device code below exists in sm_90a device passes only (elsewhere the kernel traps)

constexpr int kProducerRegs = 40, kConsumerRegs = 232; // 128 x 40 + 256 x 232 = 384 x 168
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* *(addr ^ x) = v in shared memory; the XOR inside the asm keeps the compiler from hoisting 16
 * swizzled addresses out of the step loop into registers. */
__device__ __forceinline__ void st_shared_xor(uint32_t addr, uint32_t x, uint32_t v) {
    asm volatile("{\n.reg .b32 a;\nxor.b32 a, %0, %1;\nst.shared.u32 [a], %2;\n}\n" ::"r"(addr), "r"(x), "r"(v)
                 : "memory");
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(mok_smem_u32(dst)), "l"(src) : "memory");
}

/* Spins until *c == v (acquire, GPU scope). A counter that never gets there (a bug) traps after
 * about 2^36 cycles instead of hanging the GPU. */
__device__ __forceinline__ void wait_counter(const unsigned *c, unsigned v) {
    const long long t0 = clock64();
    for (;;) {
        unsigned x;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(x) : "l"(c) : "memory");
        if (x == v) return;
        if (clock64() - t0 > (1ll << 36)) __trap();
    }
}

/* *c = v (release, GPU scope). After a barrier of the writer threads: their stores before it
 * happen before any read that follows an acquire of v (release is cumulative). */
__device__ __forceinline__ void release_counter(unsigned *c, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(c), "r"(v) : "memory");
}

/* Warp 0 lane 0: K and V once, then Q and dO of every step into the stage ring. */
template <int D>
__device__ __forceinline__ void produce(const Maps &maps, const Params &p, unsigned char *sm, Bars *bars,
                                        const Item &it) {
    using L = Layout<D>;
    const int row0 = it.b * p.T;
    mok_mbar_arrive_expect_tx(&bars->kv, 2 * L::kKvTile);
    for (int c = 0; c < D / 64; c++) {
        const int col = it.kvh * D + 64 * c;
        mok_tma_load_2d(sm + L::k + c * kKvBox, &maps.k, &bars->kv, col, row0 + it.kv0);
        mok_tma_load_2d(sm + L::v + c * kKvBox, &maps.v, &bars->kv, col, row0 + it.kv0);
    }
    for (int s = 0; s < it.steps; s++) {
        const int st = s & 1, h = it.h0 + s % p.group, t0 = kQRows * (p.NQ - 1 - s / p.group);
        flash_wait_bar(&bars->empty[st], ((s >> 1) & 1) ^ 1u); /* the first lap passes at once */
        mok_mbar_arrive_expect_tx(&bars->full[st], 2 * L::kQTile);
        for (int c = 0; c < D / 64; c++) {
            const int col = h * D + 64 * c;
            mok_tma_load_2d(sm + L::q + st * L::kQTile + c * kQBox, &maps.q, &bars->full[st], col, row0 + t0);
            mok_tma_load_2d(sm + L::dO + st * L::kQTile + c * kQBox, &maps.dout, &bars->full[st], col, row0 + t0);
        }
    }
}

/* Warp 1: -lse * log2 e and delta of each step's 64 query rows (0 past T) into its stage. */
template <int D>
__device__ __forceinline__ void load_stats(const Params &p, unsigned char *sm, Bars *bars, const Item &it) {
    const int lane = threadIdx.x & 31;
    float *stats = reinterpret_cast<float *>(sm + Layout<D>::stats);
    for (int s = 0; s < it.steps; s++) {
        const int st = s & 1, h = it.h0 + s % p.group, t0 = kQRows * (p.NQ - 1 - s / p.group);
        const long row = ((long)it.b * p.Hq + h) * p.T;
        flash_wait_bar(&bars->empty[st], ((s >> 1) & 1) ^ 1u);
#pragma unroll
        for (int i = lane; i < kQRows; i += 32) {
            const int t = t0 + i;
            stats[st * 64 + i] = t < p.T ? -p.lse[row + t] * kLog2e : 0.f;
            stats[128 + st * 64 + i] = t < p.T ? p.delta[row + t] : 0.f;
        }
        mok_mbar_arrive(&bars->full[st]);
    }
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* Warps 2-3 (64 threads): the ordered dQ sums (see the top). */
template <int D>
__device__ __forceinline__ void write_dq(const Params &p, unsigned char *sm, Bars *bars, const Item &it) {
    constexpr int RC = D / 4, XR = Layout<D>::kXRow; // 16-byte chunks a row (RC a thread), X's row pitch
    const int wt = threadIdx.x - 64;
    float *x0 = reinterpret_cast<float *>(sm + Layout<D>::x), *x1 = x0 + 64 * XR;
    for (int s = 0; s < it.steps; s++) {
        const int m = p.NQ - 1 - s / p.group, h = it.h0 + s % p.group, t0 = kQRows * m;
        const bool first = it.j == 0, last = it.j == m / 2;
        const long slot = ((long)it.b * p.Hq + h) * p.NQ + m;
        float *tile = p.acc + slot * 64 * D;
        flash_wait_bar(&bars->xfull, s & 1);
        if (!first) {
            /* partial 0 + partial 1 into x0 (two chunks a pass: four loads in flight) */
#pragma unroll 2
            for (int i = 0; i < RC; i += 2) {
                const int c0 = wt + 64 * i, c1 = c0 + 64;
                const int o0 = (c0 / RC) * XR + 4 * (c0 % RC), o1 = (c1 / RC) * XR + 4 * (c1 % RC);
                float4 a0 = *reinterpret_cast<const float4 *>(x0 + o0), a1 = *reinterpret_cast<const float4 *>(x0 + o1);
                const float4 b0 = *reinterpret_cast<const float4 *>(x1 + o0);
                const float4 b1 = *reinterpret_cast<const float4 *>(x1 + o1);
                *reinterpret_cast<float4 *>(x0 + o0) = add4(a0, b0);
                *reinterpret_cast<float4 *>(x0 + o1) = add4(a1, b1);
            }
            /* then the sum of kv blocks 0 .. j-1 into x1, once block j-1 has stored it */
            if (wt == 0) wait_counter(p.ctr + 1 + slot, (unsigned)it.j);
            named_sync(1, 64);
#pragma unroll 4
            for (int i = 0; i < RC; i++) {
                const int c = wt + 64 * i;
                cp_async16(x1 + (c / RC) * XR + 4 * (c % RC), tile + 4 * c);
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
        }
        /* x0 + x1: the first block's two partials, or (this block's partials) + the earlier sum */
        __nv_bfloat16 *dq = p.dq + ((long)it.b * p.T + t0) * p.Hq * D + (long)h * D;
#pragma unroll 2
        for (int i = 0; i < RC; i++) {
            const int c = wt + 64 * i, r = c / RC, o = r * XR + 4 * (c % RC);
            const float4 a = add4(*reinterpret_cast<const float4 *>(x0 + o), *reinterpret_cast<const float4 *>(x1 + o));
            if (!last) {
                *reinterpret_cast<float4 *>(tile + 4 * c) = a;
            } else if (t0 + r < p.T) {
                uint2 u;
                u.x = pack_bf16x2(a.x * p.scale, a.y * p.scale);
                u.y = pack_bf16x2(a.z * p.scale, a.w * p.scale);
                *reinterpret_cast<uint2 *>(dq + (long)r * p.Hq * D + 4 * (c % RC)) = u;
            }
        }
        mok_mbar_arrive(&bars->xempty);
        if (!last) { /* every writer thread's stores, then the counter */
            named_sync(1, 64);
            if (wt == 0) release_counter(p.ctr + 1 + slot, (unsigned)it.j + 1);
        }
    }
}

/* Consumer w (warpgroup 1 + w): kv rows [64w, 64w + 64) of the block. */
template <int D>
__device__ __forceinline__ void consume(const Params &p, unsigned char *sm, Bars *bars, const Item &it, int w) {
    using L = Layout<D>;
    constexpr int DN = D / 2; // accumulator floats a thread of an m64nD product
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int rl = 16 * warp + g;                 // this thread's rows rl, rl + 8 of the consumer's 64
    const int u0 = it.kv0 + 64 * w + rl;          // their key positions
    const int warp_last = it.kv0 + 64 * w + 16 * warp + 15; // the warp's last key position
    unsigned char *ds = sm + L::ds + w * kDsBytes;
    /* this thread's first X float (row rl) and dS^T byte (line rl, chunk g: XOR-ed per store) */
    float *x = reinterpret_cast<float *>(sm + L::x) + w * 64 * L::kXRow + rl * L::kXRow + 2 * qd;
    const uint32_t ds_at = mok_smem_u32(ds) + rl * 128 + (g << 4) + 4 * qd;
    const float *stats = reinterpret_cast<const float *>(sm + L::stats);
    /* K-major A (K, V rows from 64w; 32 bytes per 16 columns, a box per 64), N-major B of dS K (K
     * lines from 64w, 2048 bytes per 16 lines), M-major A of dS K (one 64-line panel). */
    const uint64_t a_k0 = mok_wgmma_desc(sm + L::k + w * 64 * 128, 16, 1024);
    const uint64_t a_v0 = mok_wgmma_desc(sm + L::v + w * 64 * 128, 16, 1024);
    const uint64_t b_kn0 = mok_wgmma_desc(sm + L::k + w * 64 * 128, kKvBox, 1024);
    const uint64_t a_ds0 = mok_wgmma_desc(ds, kDsBytes, 1024);

    float dk[DN], dv[DN];
#pragma unroll
    for (int i = 0; i < DN; i++) dk[i] = 0.f, dv[i] = 0.f;
    flash_spin_bar(&bars->kv, 0);
    for (int s = 0; s < it.steps; s++) {
        const int st = s & 1, t0 = kQRows * (p.NQ - 1 - s / p.group);
        unsigned char *q = sm + L::q + st * L::kQTile, *dO = sm + L::dO + st * L::kQTile;
        flash_spin_bar(&bars->full[st], (s >> 1) & 1);
        /* per step, so that the 16 + 8 descriptors derived from them are not hoisted out of the
         * loop into 48 registers */
        uint64_t a_k = a_k0, a_v = a_v0, b_kn = b_kn0, a_ds = a_ds0;
        asm volatile("" : "+l"(a_k), "+l"(a_v), "+l"(b_kn), "+l"(a_ds));

        // S^T = K Q^T, dP^T = V dO^T (64 kv rows x 64 queries each), K over D.
        float sp[32], dp[32];
        {
            const uint64_t b_q = mok_wgmma_desc(q, 16, 1024), b_do = mok_wgmma_desc(dO, 16, 1024);
            mok_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint64_t a = a_k + (kk / 4) * (kKvBox >> 4) + 2 * (kk % 4);
                const uint64_t b = b_q + (kk / 4) * (kQBox >> 4) + 2 * (kk % 4);
                if (kk == 0) flash_wgmma_ss_set<0, 0>(sp, a, b);
                else flash_wgmma_ss<0, 0>(sp, a, b, 1);
            }
            mok_wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint64_t a = a_v + (kk / 4) * (kKvBox >> 4) + 2 * (kk % 4);
                const uint64_t b = b_do + (kk / 4) * (kQBox >> 4) + 2 * (kk % 4);
                if (kk == 0) flash_wgmma_ss_set<0, 0>(dp, a, b);
                else flash_wgmma_ss<0, 0>(dp, a, b, 1);
            }
            mok_wgmma_commit();
        }

        // P^T while dP^T is still running; then dS^T. Element 4i + e: key u0 + 8(e >> 1), query
        // t0 + 8i + 2qd + (e & 1).
        mok_wgmma_wait<1>();
        flash_fence_acc(sp);
        /* masked: u > t, i.e. 8(e >> 1) - 8i - (e & 1) > t0 + 2qd - u0; or t >= T */
        const bool mask = warp_last > t0 || t0 + kQRows > p.T;
        const int diag = t0 + 2 * qd - u0, tail = p.T - t0 - 2 * qd;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 nl = *reinterpret_cast<const float2 *>(stats + st * 64 + 8 * i + 2 * qd);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int dc = 8 * i + (e & 1); // query t = t0 + 2qd + dc
                const float pr = exp2f(fmaf(sp[4 * i + e], p.sl2, (e & 1) ? nl.y : nl.x));
                sp[4 * i + e] = mask & ((8 * (e >> 1) - dc > diag) | (dc >= tail)) ? 0.f : pr;
            }
        }
        mok_wgmma_wait<0>();
        flash_fence_acc(dp);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 dl = *reinterpret_cast<const float2 *>(stats + 128 + st * 64 + 8 * i + 2 * qd);
#pragma unroll
            for (int e = 0; e < 4; e++) dp[4 * i + e] = sp[4 * i + e] * (dp[4 * i + e] - ((e & 1) ? dl.y : dl.x));
        }
        uint32_t pa[4][4], da[4][4]; // A operands: queries 16k..16k+15
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                pa[k][r] = pack_bf16x2(sp[8 * k + 2 * r], sp[8 * k + 2 * r + 1]);
                da[k][r] = pack_bf16x2(dp[8 * k + 2 * r], dp[8 * k + 2 * r + 1]);
            }

        // dV += P^T dO; dS^T to shared memory meanwhile; dK += dS^T Q. B N-major: 16 query lines
        // a step (2048 bytes), LBO = the 8 KB box.
        const uint64_t b_don = mok_wgmma_desc(dO, kQBox, 1024), b_qn = mok_wgmma_desc(q, kQBox, 1024);
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++) flash_wgmma_rs<1>(dv, pa[k], b_don + 128 * k, 1);
        mok_wgmma_commit();
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int r = 0; r < 4; r++) /* line rl + 8(r & 1), queries 16k + 8(r >> 1) + 2qd, +1 */
                st_shared_xor(ds_at + 8 * 128 * (r & 1), (2 * k + (r >> 1)) << 4, da[k][r]);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* visible to wgmma */
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++) flash_wgmma_rs<1>(dk, da[k], b_qn + 128 * k, 1);
        mok_wgmma_commit();
        named_sync(2 + w, 128); /* the consumer's four warps have written dS^T */
        mok_wgmma_wait<0>();
        flash_fence_acc(dv);
        flash_fence_acc(dk);
        mok_mbar_arrive(&bars->empty[st]); /* Q, dO and the stats of this stage are read */

        // dQ partial = dS K over this consumer's 64 keys: A = dS^T M-major, B = K N-major.
        float dq[DN];
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k == 0) flash_wgmma_ss_set<1, 1>(dq, a_ds, b_kn);
            else flash_wgmma_ss<1, 1>(dq, a_ds + 128 * k, b_kn + 128 * k, 1);
        }
        mok_wgmma_commit();
        mok_wgmma_wait<0>();
        flash_fence_acc(dq);
        flash_spin_bar(&bars->xempty, (s & 1) ^ 1u); /* the writer is done with the previous step */
#pragma unroll
        for (int i = 0; i < D / 8; i++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) /* row rl + 8hf, columns 8i + 2qd, +1 */
                *reinterpret_cast<float2 *>(x + 8 * hf * L::kXRow + 8 * i) =
                    make_float2(dq[4 * i + 2 * hf], dq[4 * i + 2 * hf + 1]);
        mok_mbar_arrive(&bars->xfull);
    }

    // dK (times the scale) and dV, rows below T.
    const long ld = (long)p.Hkv * D;
    const long base = (long)it.b * p.T * ld + (long)it.kvh * D + 2 * qd;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int u = u0 + 8 * hf;
        if (u >= p.T) continue;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            const long o = base + (long)u * ld + 8 * i;
            *reinterpret_cast<uint32_t *>(p.dk + o) =
                pack_bf16x2(dk[4 * i + 2 * hf] * p.scale, dk[4 * i + 2 * hf + 1] * p.scale);
            *reinterpret_cast<uint32_t *>(p.dv + o) = pack_bf16x2(dv[4 * i + 2 * hf], dv[4 * i + 2 * hf + 1]);
        }
    }
}

#endif

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Params p, const __grid_constant__ Maps maps) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sm = smem_raw + ((1024 - (mok_smem_u32(smem_raw) & 1023)) & 1023);
    Bars *bars = reinterpret_cast<Bars *>(sm + Layout<D>::bars);
    if (threadIdx.x == 0) {
        mok_mbar_init(&bars->kv, 1);
        for (int s = 0; s < 2; s++) mok_mbar_init(&bars->full[s], 1 + 32), mok_mbar_init(&bars->empty[s], 256);
        mok_mbar_init(&bars->xfull, 256);
        mok_mbar_init(&bars->xempty, 64);
        mok_mbar_fence_init();
        bars->item = atomicAdd(p.ctr, 1u);
    }
    __syncthreads();
    Item it;
    {
        const int per_j = p.B * p.Hkv, item = (int)bars->item, r = item % per_j;
        it.j = item / per_j, it.b = r / p.Hkv, it.kvh = r % p.Hkv;
        it.kv0 = kKvRows * it.j, it.h0 = it.kvh * p.group;
        it.steps = p.group * (p.NQ - 2 * it.j); /* query blocks 2j .. NQ-1: the ones at or below */
    }
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<kProducerRegs>();
        const int warp = threadIdx.x >> 5;
        if (warp == 0) {
            if (threadIdx.x == 0) produce<D>(maps, p, sm, bars, it);
        } else if (warp == 1) {
            load_stats<D>(p, sm, bars, it);
        } else {
            write_dq<D>(p, sm, bars, it);
        }
        return;
    }
    mok_setmaxnreg_inc<kConsumerRegs>();
    consume<D>(p, sm, bars, it, wg - 1);
#else
    __trap();
#endif
}

long blocks_of(int T, int rows) { return ((long)T + rows - 1) / rows; }

size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

size_t counter_bytes(int B, int T, int Hq) { return round256((1 + (size_t)B * Hq * blocks_of(T, kQRows)) * 4); }

template <int D>
void launch(const Params &p, const Maps &maps, cudaStream_t stream) {
    const long grid = blocks_of(p.T, kKvRows) * p.B * p.Hkv;
    cudaCheck(cudaFuncSetAttribute(flash_bwd_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   smem_bytes<D>()));
    flash_bwd_sm90_kernel<D><<<(unsigned)grid, kThreads, smem_bytes<D>(), stream>>>(p, maps);
    cudaCheckLaunch();
}

} // namespace

extern "C" size_t flash_attention_backward_sm90_bytes(int B, int T, int Hq, int D) {
    if (B <= 0 || T <= 0 || (D != 64 && D != 128)) return 0;
    return counter_bytes(B, T, Hq) + (size_t)B * Hq * blocks_of(T, kQRows) * kQRows * D * sizeof(float);
}

extern "C" void flash_attention_backward_sm90(bf16_t *dq, bf16_t *dk, bf16_t *dv, void *work, const float *delta,
                                              const bf16_t *dout, const float *lse, const bf16_t *q,
                                              const bf16_t *k, const bf16_t *v, int B, int T, int Hq, int Hkv, int D,
                                              cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    if (D != 64 && D != 128) {
        char what[128];
        snprintf(what, sizeof what, "flash_attention_backward_sm90: head dim %d (the wgmma backward takes 64, 128)", D);
        mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
    }
    Params p;
    p.dq = reinterpret_cast<__nv_bfloat16 *>(dq), p.dk = reinterpret_cast<__nv_bfloat16 *>(dk);
    p.dv = reinterpret_cast<__nv_bfloat16 *>(dv);
    p.lse = lse, p.delta = delta;
    p.ctr = static_cast<unsigned *>(work);
    p.acc = reinterpret_cast<float *>(static_cast<char *>(work) + counter_bytes(B, T, Hq));
    p.B = B, p.T = T, p.Hq = Hq, p.Hkv = Hkv, p.group = Hq / Hkv, p.NQ = (int)blocks_of(T, kQRows);
    p.scale = (float)(1.0 / sqrt((double)D));
    p.sl2 = (float)(1.4426950408889634 / sqrt((double)D));
    Maps maps;
    sm90_encode(&maps.q, q, 2, (long)Hq * D, (long)B * T, 1, kQRows);
    sm90_encode(&maps.dout, dout, 2, (long)Hq * D, (long)B * T, 1, kQRows);
    sm90_encode(&maps.k, k, 2, (long)Hkv * D, (long)B * T, 1, kKvRows);
    sm90_encode(&maps.v, v, 2, (long)Hkv * D, (long)B * T, 1, kKvRows);
    /* the ticket and the counters start at 0; the partial sums need no clearing (first writes) */
    cudaCheck(cudaMemsetAsync(work, 0, counter_bytes(B, T, Hq), stream));
    if (D == 128) launch<128>(p, maps, stream);
    else launch<64>(p, maps, stream);
}
