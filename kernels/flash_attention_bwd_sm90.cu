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
 *    into the same stage (0 past T); warp 2 lane 0 loads the dQ sums, warp 3 lane 0 stores them
 *    (below).
 *  - warpgroups 1 and 2 (232 registers): consumer w owns kv rows [64w, 64w + 64) and keeps their
 *    dK and dV in registers (fp32). Per step, by wgmma: S^T = K Q^T and dP^T = V dO^T (m64n64,
 *    K-major operands), P^T = exp2(S^T * scale * log2 e - lse * log2 e) (0 where u > t or t >= T),
 *    dS^T = P^T (dP^T - delta), both rounded to bf16 in registers, which is the A operand layout:
 *    dV += P^T dO and dK += dS^T Q from registers (m64nD, B N-major); dS^T to shared memory. Their
 *    mbarrier waits have no timeout (a trap there makes ptxas serialize the wgmma and spill); the
 *    dQ storer's timed waits, one per step, catch a consumer that is stuck. Descriptors and
 *    mbarriers are kept as 32-bit shared addresses (the dQ accumulators leave no room for more).
 *  - dQ: the block's dQ partial of step s is dS K over all 128 keys (A = both consumers' dS^T
 *    panels, M-major, K = 128; B = K, N-major; m64n64k16), computed at the end of step s + 1 (or
 *    after the loop, for the last step), when the other consumer's dS^T of step s is long
 *    written: at D = 128 each consumer computes 64 of the columns, at D = 64 the consumer of
 *    parity (s + 1) % 2 computes all of them (the two alternate). Either way no partial is added
 *    to another in shared memory, and a consumer holds 32 dQ accumulators beside dK and dV. dS^T
 *    is double-buffered by step parity; named barriers per (consumer, parity) order it: READY (a
 *    consumer's dS^T of step s is written) and FREE (a consumer's dQ of step s has read the slot,
 *    which step s + 2 overwrites); a consumer waits only for the other's step s - 1 or s - 2.
 *    dQ of (b, h, query block m) = the sum over kv blocks j = 0 .. m/2 of their partials, added in
 *    increasing j through the fp32 workspace `acc`: block j's loader (warp 2) waits until the
 *    counter of (b, h, m) reads j (blocks 0 .. j-1 have stored their sum), then bulk-copies that
 *    64 x D fp32 sum into a shared slot (TMA, cp.async.bulk); the consumers add their partial
 *    (sum + partial, fp32, in registers) and write the new sum back into the slot; the storer
 *    (warp 3) bulk-copies it to `acc`, waits for the copy to complete and sets the counter to
 *    j + 1 (release). Block 0 loads nothing; the last block (j = m/2, the diagonal one) writes dq
 *    in bf16 times the scale from registers instead. The sums are kept in the consumers'
 *    accumulator layout (the columns [64c, 64c + 64) of consumer c at D = 128 in the slot's half
 *    c; thread i's 16-byte chunk k of them at (128 k + i) * 16 bytes: a warp reads and writes 512
 *    contiguous bytes), not as rows: nothing but this kernel reads them. Integer flags only: no
 *    floating-point atomics, a fixed order of additions, bitwise reproducible. Decreasing query
 *    blocks put (h, m) at the same step index in blocks j - 1 and j, so the chain costs each
 *    block one short lag at its start, not a wait per step. Two slots: the load for step s + 1
 *    and the store of step s - 1 overlap the consumers' step s. (The previous scheme, each
 *    consumer's partial over its own 64 keys handed to warps 2-3 to add, load and store the sums,
 *    was 2.5x slower on the H200.)
 * dK and dV (scale applied to dK) are written once at the end, in bf16, rows below T.
 *
 * Shared memory (offsets from a 1024-byte aligned base; tiles as kernels/mok/tile_wgmma.cuh,
 * 128-byte swizzled boxes of 64 columns written by TMA, zero-filled past the tensors' end):
 *   K, V      128 rows x D: D/64 boxes of 128 rows (16 KB); K-major A of S^T / dP^T (consumer w
 *             from row 64w), and K is the N-major B of dS K (lines = kv rows, LBO = the box).
 *   Q, dO     2 stages x 64 rows x D: boxes of 64 rows (8 KB); K-major B of S^T / dP^T and N-major
 *             B of dK / dV (lines = query rows, LBO = 8 KB).
 *   dS^T      2 slots (step parity) x 2 consumers x 64 kv lines x 64 queries (8 KB): the M-major A
 *             of dS K, K running over consumer 0's lines then consumer 1's: line u at u * 128
 *             bytes, 16-byte chunk c at c ^ (u % 8) (what TMA's 128-byte swizzle does).
 *   sums      2 slots (step parity) x 64 x D fp32 (the dQ sums, accumulator layout).
 *   stats     2 stages x (-lse * log2 e, delta) x 64 floats; then the mbarriers.
 * D = 128: 32 + 32 + 64 + 32 + 64 + 1 KB = 225 KB; D = 64: 129 KB.
 */
#include "flash_attention.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "device_util.cuh"
#include "flash_sm90.cuh"

namespace {

constexpr int kThreads = 384, kKvRows = 128, kQRows = 64;
constexpr int kKvBox = kKvRows * 128, kQBox = kQRows * 128; // bytes of one 64-column box
constexpr int kDsBytes = 64 * 64 * 2;                       // one consumer's dS^T

template <int D>
struct Layout {
    static constexpr int kKvTile = D / 64 * kKvBox, kQTile = D / 64 * kQBox;
    static constexpr int kSum = 64 * D * 4; // one slot of dQ sums
    static constexpr int k = 0, v = kKvTile, q = 2 * kKvTile, dO = q + 2 * kQTile, ds = dO + 2 * kQTile;
    static constexpr int x = ds + 4 * kDsBytes, stats = x + 2 * kSum;
    static constexpr int bars = stats + 4 * 64 * 4;
};

struct Bars {
    uint64_t kv, full[2], empty[2], xfull[2], xempty[2], yfull[2];
    unsigned item;
};

template <int D>
constexpr int smem_bytes() {
    return 1024 + Layout<D>::bars + (int)sizeof(Bars); // alignment slack, tiles, barriers
}
/* TMA's 128-byte swizzle and the wgmma descriptors (base offset 0) need 1024-byte aligned tiles;
 * the bulk copies 16-byte aligned slots. */
template <int D>
constexpr bool tiles_aligned() {
    using L = Layout<D>;
    return (L::k | L::v | L::q | L::dO | L::ds | L::kQTile | kDsBytes) % 1024 == 0 &&
           (L::x | L::stats | L::kSum) % 16 == 0;
}
static_assert(tiles_aligned<128>() && tiles_aligned<64>() && smem_bytes<128>() <= 227 * 1024 &&
                  smem_bytes<64>() <= 227 * 1024,
              "tile alignment, or more shared memory than one block has");

struct Maps {
    CUtensorMap q, dout, k, v; // boxes of 64 columns x 64 rows (q, dout), x 128 rows (k, v)
};

struct Params {
    __nv_bfloat16 *dq, *dk, *dv; // in rows of ldg elements a token (flash_attention_backward's layout)
    long ldg;
    const float *lse, *delta;
    float *acc;     // (B, Hq, NQ) tiles of 64 x D fp32: the sums of dQ partials
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

/* Named barriers (0 is __syncthreads), 256 threads (both consumers): READY + 2w + parity, ids 4-7
 * (consumer w's dS^T of a step of that parity is written); FREE + 2w + parity, ids 8-11 (consumer
 * w's dQ of that step has read the slot). */
constexpr int kBarReady = 4, kBarFree = 8;

/* At D = 128 both consumers compute dQ every step, 64 columns each; at D = 64 they alternate. */
template <int D>
constexpr bool kSplitN = D == 128;

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* *(addr ^ x) = v in shared memory; the XOR inside the asm keeps the compiler from hoisting 16
 * swizzled addresses out of the step loop into registers. */
__device__ __forceinline__ void st_shared_xor(uint32_t addr, uint32_t x, uint32_t v) {
    asm volatile("{\n.reg .b32 a;\nxor.b32 a, %0, %1;\nst.shared.u32 [a], %2;\n}\n" ::"r"(addr), "r"(x), "r"(v)
                 : "memory");
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared by the TMA unit,
 * completing as transaction bytes on bar. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     mok_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(mok_smem_u32(bar))
                 : "memory");
}

/* bytes shared -> global by the TMA unit; returns when the writes are complete (visible). */
__device__ __forceinline__ void bulk_store_wait(void *dst, const void *src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(mok_smem_u32(src)),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* wgmma descriptors (mok_wgmma_desc, 128-byte swizzle) as their low word: start address and LBO.
 * The high word (SBO = 1024, the swizzle mode) is the same for every operand here, so the
 * consumers keep 32 bits a descriptor and make the 64 at each use. */
constexpr uint32_t kDescHi = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t desc_lo(uint32_t smem_addr, uint32_t lbo) {
    return ((smem_addr & 0x3FFFF) >> 4) | ((lbo & 0x3FFFF) >> 4) << 16;
}
__device__ __forceinline__ uint64_t desc(uint32_t lo) { return (uint64_t)kDescHi << 32 | lo; }

/* mbarrier waits and arrivals by 32-bit shared address (the consumers keep no 64-bit pointers). */
__device__ __forceinline__ void spin_bar(uint32_t bar, unsigned parity) {
    uint32_t ok;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
}
__device__ __forceinline__ void arrive_bar(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
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

/* *c = v (release, GPU scope). After this thread's completed bulk store (and a proxy fence): its
 * writes happen before any read that follows an acquire of v. */
__device__ __forceinline__ void release_counter(unsigned *c, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(c), "r"(v) : "memory");
}

/* Where step s of an item works: query block m, head h, and the (b, h, m) index of its sum. */
struct Step {
    int m, h;
    long slot;
    bool first, last; // no earlier kv block (j = 0); the diagonal kv block (j = m/2): writes dq
};
__device__ __forceinline__ Step step_of(const Params &p, const Item &it, int s) {
    Step r;
    r.m = p.NQ - 1 - s / p.group, r.h = it.h0 + s % p.group;
    r.slot = ((long)it.b * p.Hq + r.h) * p.NQ + r.m;
    r.first = it.j == 0, r.last = it.j == r.m / 2;
    return r;
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

/* Warp 2 lane 0: the sum of kv blocks 0 .. j-1 of each step into sum slot s % 2, once the
 * storer has finished with step s - 2 (its slot) and block j - 1 has stored that sum. Block 0
 * only hands the slot over. */
template <int D>
__device__ __forceinline__ void load_sums(const Params &p, unsigned char *sm, Bars *bars, const Item &it) {
    using L = Layout<D>;
    for (int s = 0; s < it.steps; s++) {
        const int slot = s & 1;
        const Step t = step_of(p, it, s);
        if (s >= 2) flash_wait_bar(&bars->xempty[slot], ((s >> 1) - 1) & 1);
        if (t.first) {
            mok_mbar_arrive(&bars->yfull[slot]);
            continue;
        }
        wait_counter(p.ctr + 1 + t.slot, (unsigned)it.j);
        mok_fence_proxy_async_global(); /* block j-1's stores, seen by the acquire, before the bulk read */
        mok_mbar_arrive_expect_tx(&bars->yfull[slot], L::kSum);
        bulk_load(sm + L::x + slot * L::kSum, p.acc + t.slot * 64 * D, L::kSum, &bars->yfull[slot]);
    }
}

/* Warp 3 lane 0: once the consumers have written the new sum of step s into its slot, stores it
 * (not for the diagonal block, which wrote dq itself), waits for the writes to complete, sets the
 * counter to j + 1 and hands the slot back to the loader. Its timed waits are the watchdog of the
 * consumers. */
template <int D>
__device__ __forceinline__ void store_sums(const Params &p, unsigned char *sm, Bars *bars, const Item &it) {
    using L = Layout<D>;
    for (int s = 0; s < it.steps; s++) {
        const int slot = s & 1;
        const Step t = step_of(p, it, s);
        flash_wait_bar(&bars->xfull[slot], (s >> 1) & 1);
        if (!t.last) {
            bulk_store_wait(p.acc + t.slot * 64 * D, sm + L::x + slot * L::kSum, L::kSum);
            mok_fence_proxy_async_global();
            release_counter(p.ctr + 1 + t.slot, (unsigned)it.j + 1);
        }
        mok_mbar_arrive(&bars->xempty[slot]);
    }
}

/* Consumer w (warpgroup 1 + w): kv rows [64w, 64w + 64) of the block. */
template <int D>
__device__ __forceinline__ void consume(const Params &p, unsigned char *sm, const Item &it, int w) {
    using L = Layout<D>;
    constexpr int DN = D / 2; // accumulator floats a thread of an m64nD product
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int rl = 16 * warp + g;                 // this thread's rows rl, rl + 8 of the consumer's 64
    const int u0 = it.kv0 + 64 * w + rl;          // their key positions
    const int warp_last = it.kv0 + 64 * w + 16 * warp + 15; // the warp's last key position
    const uint32_t sb = mok_smem_u32(sm);
    /* this thread's dS^T byte (line rl, chunk g: XOR-ed per store) in this consumer's panel of slot
     * 0 (slot 1 at + 2 kDsBytes) */
    const uint32_t ds_at = sb + L::ds + w * kDsBytes + rl * 128 + (g << 4) + 4 * qd;
    const float *stats = reinterpret_cast<const float *>(sm + L::stats);
    const uint32_t bar = sb + L::bars;               /* the Bars, by offsetof */
    /* K-major A (K, V rows from 64w; 32 bytes per 16 columns, a box per 64); N-major B of dS K (K
     * lines from 0, the box of this consumer's 64 columns at D = 128; 2048 bytes per 16 lines);
     * M-major A of dS K (slot 0's two panels, 2048 bytes per 16 lines across both). */
    const uint32_t a_k0 = desc_lo(sb + L::k + w * 64 * 128, 16), a_v0 = desc_lo(sb + L::v + w * 64 * 128, 16);
    const uint32_t b_kn0 = desc_lo(sb + L::k + (kSplitN<D> ? w * kKvBox : 0), kKvBox);
    const uint32_t a_ds0 = desc_lo(sb + L::ds, kDsBytes);

    /* Whether consumer c computes (part of) the dQ of step s: both at D = 128 (columns [64c,
     * 64c + 64)), the one of parity (s + 1) % 2 at D = 64 (all 64 columns). */
    auto computes = [&](int s, int c) { return kSplitN<D> || ((s + 1) & 1) == c; };
    const int col0 = kSplitN<D> ? 64 * w : 0; // the first dQ column this consumer computes

    /* This consumer's dQ columns of step s (see the top), at its step s + 1 or after its loop:
     * dS (both panels of slot s % 2) K[:, col0 .. col0 + 64) by m64n64k16, K = 128 keys. */
    auto dq_step = [&](int s) {
        const int slot = s & 1;
        named_sync(kBarReady + 2 * (1 - w) + slot, 256); /* the other consumer's dS^T of step s (and ours) */
        uint32_t a_ds = a_ds0 + slot * (2 * kDsBytes >> 4), b_kn = b_kn0;
        float dq[32];
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 8; k++) {
            /* advanced one 16-line step at a time (the asm keeps the compiler from computing all 16
             * descriptors ahead into registers) */
            asm volatile("" : "+r"(a_ds), "+r"(b_kn));
            if (k == 0) flash_wgmma_ss_set<1, 1>(dq, desc(a_ds), desc(b_kn));
            else flash_wgmma_ss<1, 1>(dq, desc(a_ds), desc(b_kn), 1);
            a_ds += 128, b_kn += 128;
        }
        mok_wgmma_commit();
        mok_wgmma_wait<0>();
        mok_fence_acc(dq);
        if (s + 2 < it.steps) named_arrive(kBarFree + 2 * w + slot, 256); /* step s + 2 may overwrite it */
        spin_bar(bar + offsetof(Bars, yfull) + 8 * slot, (s >> 1) & 1);
        /* this thread's chunk c of its columns' part of the slot, at (128 c + tid) * 16 bytes */
        const uint32_t sum = sb + L::x + slot * L::kSum + col0 * 256 + 16 * tid;
        const int m = p.NQ - 1 - s / p.group; // query block; the diagonal kv block is m / 2
        if (it.j != 0) { /* the sum of blocks 0 .. j-1, plus this block's */
#pragma unroll
            for (int c = 0; c < 8; c++) {
                float4 y;
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                             : "=f"(y.x), "=f"(y.y), "=f"(y.z), "=f"(y.w)
                             : "r"(sum + 2048 * c)
                             : "memory");
                dq[4 * c] = y.x + dq[4 * c], dq[4 * c + 1] = y.y + dq[4 * c + 1];
                dq[4 * c + 2] = y.z + dq[4 * c + 2], dq[4 * c + 3] = y.w + dq[4 * c + 3];
            }
        }
        if (it.j != m / 2) {
#pragma unroll
            for (int c = 0; c < 8; c++)
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(sum + 2048 * c), "f"(dq[4 * c]),
                             "f"(dq[4 * c + 1]), "f"(dq[4 * c + 2]), "f"(dq[4 * c + 3])
                             : "memory");
        } else { /* the diagonal block: dq itself */
            const int t0 = kQRows * m, h = it.h0 + s % p.group;
            __nv_bfloat16 *out = p.dq + ((long)it.b * p.T + t0 + rl) * p.ldg + (long)h * D + col0 + 2 * qd;
#pragma unroll
            for (int hf = 0; hf < 2; hf++) { /* query row rl + 8hf, columns col0 + 8i + 2qd, +1 */
                if (t0 + rl + 8 * hf >= p.T) continue;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    *reinterpret_cast<uint32_t *>(out + 8l * hf * p.ldg + 8 * i) =
                        pack_bf16x2(dq[4 * i + 2 * hf] * p.scale, dq[4 * i + 2 * hf + 1] * p.scale);
            }
        }
        mok_fence_proxy_async_shared(); /* for the bulk copies of the slot */
        arrive_bar(bar + offsetof(Bars, xfull) + 8 * slot);
    };

    float dk[DN], dv[DN];
#pragma unroll
    for (int i = 0; i < DN; i++) dk[i] = 0.f, dv[i] = 0.f;
    spin_bar(bar + offsetof(Bars, kv), 0);
    for (int s = 0; s < it.steps; s++) {
        const int st = s & 1, t0 = kQRows * (p.NQ - 1 - s / p.group);
        const uint32_t q = sb + L::q + st * L::kQTile, dO = sb + L::dO + st * L::kQTile;
        spin_bar(bar + offsetof(Bars, full) + 8 * st, (s >> 1) & 1);
        /* per step, so that the 16 + 8 descriptors derived from them are not hoisted out of the
         * loop into 48 registers */
        uint32_t a_k = a_k0, a_v = a_v0;
        asm volatile("" : "+r"(a_k), "+r"(a_v));

        // S^T = K Q^T, dP^T = V dO^T (64 kv rows x 64 queries each), K over D.
        float sp[32], dp[32];
        {
            const uint32_t b_q = desc_lo(q, 16), b_do = desc_lo(dO, 16);
            mok_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint64_t a = desc(a_k + (kk / 4) * (kKvBox >> 4) + 2 * (kk % 4));
                const uint64_t b = desc(b_q + (kk / 4) * (kQBox >> 4) + 2 * (kk % 4));
                if (kk == 0) flash_wgmma_ss_set<0, 0>(sp, a, b);
                else flash_wgmma_ss<0, 0>(sp, a, b, 1);
            }
            mok_wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint64_t a = desc(a_v + (kk / 4) * (kKvBox >> 4) + 2 * (kk % 4));
                const uint64_t b = desc(b_do + (kk / 4) * (kQBox >> 4) + 2 * (kk % 4));
                if (kk == 0) flash_wgmma_ss_set<0, 0>(dp, a, b);
                else flash_wgmma_ss<0, 0>(dp, a, b, 1);
            }
            mok_wgmma_commit();
        }

        // P^T while dP^T is still running; then dS^T. Element 4i + e: key u0 + 8(e >> 1), query
        // t0 + 8i + 2qd + (e & 1).
        mok_wgmma_wait<1>();
        mok_fence_acc(sp);
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
        mok_fence_acc(dp);
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
        const uint32_t b_don = desc_lo(dO, kQBox), b_qn = desc_lo(q, kQBox);
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++) flash_wgmma_rs<1>(dv, pa[k], desc(b_don + 128 * k), 1);
        mok_wgmma_commit();
        /* slot s % 2 was read by the dQ of step s - 2 (at step s - 1) */
        if (s >= 2 && computes(s - 2, 1 - w)) named_sync(kBarFree + 2 * (1 - w) + (s & 1), 256);
        const uint32_t at = ds_at + (s & 1) * 2 * kDsBytes;
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int r = 0; r < 4; r++) /* line rl + 8(r & 1), queries 16k + 8(r >> 1) + 2qd, +1 */
                st_shared_xor(at + 8 * 128 * (r & 1), (2 * k + (r >> 1)) << 4, da[k][r]);
        mok_fence_proxy_async_shared(); /* visible to wgmma */
        /* for the other consumer's dQ of step s, at its step s + 1 */
        if (computes(s, 1 - w)) named_arrive(kBarReady + 2 * w + (s & 1), 256);
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++) flash_wgmma_rs<1>(dk, da[k], desc(b_qn + 128 * k), 1);
        mok_wgmma_commit();
        mok_wgmma_wait<0>();
        mok_fence_acc(dv);
        mok_fence_acc(dk);
        arrive_bar(bar + offsetof(Bars, empty) + 8 * st); /* Q, dO and the stats of this stage are read */

        if (s >= 1 && computes(s - 1, w)) dq_step(s - 1);
    }
    if (computes(it.steps - 1, w)) dq_step(it.steps - 1);

    // dK (times the scale) and dV, rows below T.
    const long ld = p.ldg;
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
        for (int s = 0; s < 2; s++) {
            mok_mbar_init(&bars->full[s], 1 + 32), mok_mbar_init(&bars->empty[s], 256);
            /* per slot: the consumers that compute dQ (both at D = 128), the storer, the loader */
            mok_mbar_init(&bars->xfull[s], kSplitN<D> ? 256 : 128);
            mok_mbar_init(&bars->xempty[s], 1);
            mok_mbar_init(&bars->yfull[s], 1);
        }
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
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (warp == 0) {
            if (lane == 0) produce<D>(maps, p, sm, bars, it);
        } else if (warp == 1) {
            load_stats<D>(p, sm, bars, it);
        } else if (lane == 0) {
            if (warp == 2) load_sums<D>(p, sm, bars, it);
            else store_sums<D>(p, sm, bars, it);
        }
        return;
    }
    mok_setmaxnreg_inc<kConsumerRegs>();
    consume<D>(p, sm, it, wg - 1);
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

extern "C" void flash_attention_backward_sm90(bf16_t *dqkv, void *work, const float *delta, const bf16_t *dout,
                                              const float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v,
                                              int B, int T, int Hq, int Hkv, int D, cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    if (D != 64 && D != 128) {
        char what[128];
        snprintf(what, sizeof what, "flash_attention_backward_sm90: head dim %d (the wgmma backward takes 64, 128)", D);
        mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
    }
    Params p;
    p.dq = reinterpret_cast<__nv_bfloat16 *>(dqkv), p.dk = p.dq + (long)Hq * D, p.dv = p.dk + (long)Hkv * D;
    p.ldg = (long)(Hq + 2 * Hkv) * D;
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
    if (D == 64) launch<64>(p, maps, stream);
    else launch<128>(p, maps, stream);
}
