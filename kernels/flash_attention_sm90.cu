/*
 * The flash attention forward for Hopper (sm_90a): TMA + wgmma, warp-specialised, head dim 128.
 * Same contract and results' accuracy as the mma.sync forward of flash_attention.cu (which
 * flash_attention_forward runs instead where this one does not: flash_attention_forward_kernel).
 *
 * Persistent: the grid is the SMs (at most the tiles). A tile is (query block of 128 rows, batch x
 * query head); tiles are listed longest first, and block c takes tiles c, 2G - 1 - c, 2G + c,
 * 4G - 1 - c, ... (a snake over the list: at B=4 T=4096 Hq=16 on 132 SMs every block gets 256 key
 * blocks). 384 threads = 3 warpgroups a block:
 *  - warpgroup 0 (40 registers a thread): one thread issues the TMA loads: per tile Q once, then
 *    K and V blocks of 128 keys into a ring of 2 stages, with a full and an empty mbarrier per
 *    stage for K and for V apart (a K stage is refilled as soon as both consumers' S product that
 *    read it is done, a V stage once their P V is), in the consumers' order (K of block j + 1 with
 *    V of block j). It runs on into the next tile while the consumers finish the current one: Q
 *    is refilled once both consumers' last S product of the tile is done (the q_empty mbarrier).
 *    The rest of the warpgroup idles.
 *  - warpgroups 1 and 2 (232 registers): consumer w owns query rows [64w, 64w + 64). Per key
 *    block: S = Q K^T by wgmma m64n128k16 from shared memory (8 steps over D), the online softmax
 *    on the accumulators (fp32, exp2 with the scale folded into log2 e, the arithmetic of the
 *    mma.sync kernel), P rounded to bf16 in registers, O += P V by wgmma with P as the register
 *    operand (8 steps over the keys). exp2 is one ex2.approx.ftz instruction: results below
 *    2^-126 flush to 0 instead of staying denormals, and they are below any fp32 sum's
 *    resolution (the row sum is >= 1).
 *  - Overlap inside a consumer: the S = Q K^T of key block j is issued in one batch with the
 *    O += P V of block j - 1, and block j's softmax runs while that P V is still on the tensor
 *    cores; O is rescaled after it, and only when a row max of the warp changed (a warp vote; a
 *    factor of exactly 1 changes no bit). The branch on the vote also keeps ptxas from hoisting
 *    the wait for P V into the softmax (it puts a wait there to fill latency bubbles, which
 *    stalls the warp until P V is done); each arm has its own wait.
 *  - Ping-pong: the consumers take turns issuing their wgmma batches (named barriers kBarTurn +
 *    w), so one's softmax runs while the other's products do and the tensor cores see whole
 *    batches in a fixed alternation.
 * Causal: key blocks past the tile's last row are never loaded. Only a tile's last key block can
 * hold a masked entry (every other one ends before the tile's first row and before T), so the
 * loop runs an unmasked copy of the step for the others and a masked copy for the last.
 * Deterministic: each output element's operations have one fixed order, and a tile's results do
 * not depend on which block computes it or when.
 * Measured on an H200 (B=4 T=4096 Hq=16 Hkv=4 D=128 causal): 0.443-0.452 ms = 620 TFLOP/s,
 * against 0.670 ms = 410 TFLOP/s for the previous kernel (one block a tile, no overlap).
 *
 * Shared memory, every tile 128-byte swizzled by TMA (layouts as kernels/mok/tile_wgmma.cuh): Q, K
 * and V tiles of 128 rows x 128 columns, each two boxes of 64 columns (16 KB apart): row r of a
 * box at r * 128 bytes, 8-row groups 1024 bytes apart. Q and K are K-major operands (D contiguous);
 * V is the N-major B operand of P V (keys along lines, LBO = the box stride). Rows past the tensors'
 * end are zero-filled by TMA; rows past T inside the tensors (the next batch's) are masked.
 * Total: 1 KB alignment slack + Q 32 KB + 2 stages x (K 32 KB + V 32 KB) + 80 bytes of barriers.
 * Helpers of this file only (flash_sm90.cuh has the shared ones; exp2 is device_util.cuh's exp2_approx): the
 * turn barriers, fwd_fence_p, mask_s, online_softmax, fence_softmax, rescale_o, pack_p, tile_at, tile_of_round.
 */
#include "flash_attention.h"

#include <cuda_bf16.h>
#include <math.h>

#include <type_traits>

#include "device_util.cuh"
#include "flash_sm90.cuh"

namespace {

constexpr int kD = 128, kBM = 128, kBN = 128, kStages = 2, kThreads = 384;
constexpr int kBox = 128 * 128; // one box: 128 rows x 64 bf16 columns
constexpr int kTile = 2 * kBox; // 128 rows x 128 columns

struct Maps {
    CUtensorMap q, k, v;
};

struct Params {
    __nv_bfloat16 *out;
    float *lse;
    int T, Hq, group;
    int BH, n_qb, n_tiles; // B x Hq, query blocks per (b, h), tiles
    float sl2;             // scale * log2 e
};

/* K and V have their own full (TMA landed) and empty (8 consumer warps done) barriers. */
struct Bars {
    uint64_t q_full, q_empty, full_k[kStages], full_v[kStages], empty_k[kStages], empty_v[kStages];
};

/* Alignment slack, Q, the K and V stages, barriers: 164944 bytes. */
constexpr int kSmem = 1024 + kTile * (1 + 2 * kStages) + (int)sizeof(Bars);
static_assert(kBM == 128 && kBN == 128, "one box height serves Q, K and V");
static_assert(kSmem <= 227 * 1024, "shared memory of one block");

#if MOK_SM90 // the device code below exists in sm_90a device passes only (elsewhere the kernel traps)

constexpr float kLn2 = 0.6931471805599453f;
constexpr int kBarTurn = 1; // named barriers kBarTurn + w: consumer w's turn to issue

/* Named barriers of 256 threads (both consumers): consumer w waits for its turn on kBarTurn + w,
 * then hands the turn to the other. Constant ids: a register id makes ptxas reserve all 16. */
template <int ID>
__device__ __forceinline__ void bar_sync_n() {
    asm volatile("bar.sync %0, 256;" ::"n"(ID) : "memory");
}
template <int ID>
__device__ __forceinline__ void bar_arrive_n() {
    asm volatile("bar.arrive %0, 256;" ::"n"(ID) : "memory");
}
__device__ __forceinline__ void wait_turn(int w) {
    if (w == 0) bar_sync_n<kBarTurn>();
    else bar_sync_n<kBarTurn + 1>();
}
__device__ __forceinline__ void pass_turn(int w) {
    if (w == 0) bar_arrive_n<kBarTurn + 1>();
    else bar_arrive_n<kBarTurn>();
}

/* Keeps P (the register operand of an O += P V in flight) where it is until the wgmma is done. */
__device__ __forceinline__ void fwd_fence_p(uint32_t (&pa)[kBN / 16][4]) {
#pragma unroll
    for (int k = 0; k < kBN / 16; k++)
#pragma unroll
        for (int r = 0; r < 4; r++) asm volatile("" : "+r"(pa[k][r])::"memory");
}

/* What tile n is: query block (longest first), batch x head, key blocks with a visible entry. */
struct Tile {
    int bh, q0, n_kb;
};
__device__ __forceinline__ Tile tile_at(const Params &p, int n) {
    Tile t;
    const int lvl = n / p.BH;
    t.bh = n - lvl * p.BH;
    t.q0 = (p.n_qb - 1 - lvl) * kBM;
    t.n_kb = (min(t.q0 + kBM, p.T) - 1) / kBN + 1;
    return t;
}

/* The index of this block's tile of round r (>= n_tiles: none): the snake of the header comment. */
__device__ __forceinline__ int tile_of_round(int r) {
    const int G = gridDim.x, c = blockIdx.x;
    return r * G + ((r & 1) ? G - 1 - c : c);
}

/* S = Q K^T of a consumer's 64 rows: 8 steps over D (box kk / 4, 32 bytes per 16 columns in it). */
__device__ __forceinline__ void gemm_qk(float (&sc)[64], uint64_t dq, uint64_t dk) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; kk++) {
        const uint64_t off = (kk / 4) * (kBox >> 4) + 2 * (kk % 4);
        if (kk == 0) flash_wgmma_ss_set<0, 0>(sc, dq + off, dk + off);
        else flash_wgmma_ss<0, 0>(sc, dq + off, dk + off, 1);
    }
}

/* O += P V: P as the A operand, keys 16k..16k+15 = 16 key lines of V per step. */
__device__ __forceinline__ void gemm_pv(float (&o)[64], const uint32_t (&pa)[kBN / 16][4], uint64_t dv) {
#pragma unroll
    for (int k = 0; k < kBN / 16; k++) flash_wgmma_rs<1>(o, pa[k], dv + k * (16 * 128 >> 4), 1);
}

/* S = -inf where key u > row t or u >= T (keys k0..k0+127, rows r0 and r0 + 8 of this thread):
 * u > min(t, T - 1), one compare with a constant per element. */
__device__ __forceinline__ void mask_s(float (&sc)[64], int k0, int r0, int qd, int T) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int lim = min(r0 + 8 * hf, T - 1) - k0 - 2 * qd; /* u - k0 - 2 qd = 8i + (e & 1) */
#pragma unroll
        for (int i = 0; i < 16; i++)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; e++)
                if (8 * i + (e & 1) > lim) sc[4 * i + e] = -INFINITY;
    }
}

/* The online softmax of one key block (keys k0..k0+127) on the S accumulators, in place: rows r0
 * and r0 + 8 of this thread (hf), masked (mask_s) if MASK (a tile's last key block); updates the
 * running max m (scaled, log2 units) and sum l; corr = the factor for O. */
template <bool MASK>
__device__ __forceinline__ void online_softmax(float (&sc)[64], float (&m)[2], float (&l)[2], float (&corr)[2],
                                               int k0, int r0, int qd, int T, float sl2) {
    if constexpr (MASK) mask_s(sc, k0, r0, qd, T);
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 16; i++)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; e++) mx = fmaxf(mx, sc[4 * i + e]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[hf], mx * sl2);
        const float base = m_new == -INFINITY ? 0.f : m_new; // a row with nothing visible yet
        corr[hf] = exp2_approx(m[hf] - base);
        m[hf] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i++)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                sc[4 * i + e] = exp2_approx(fmaf(sc[4 * i + e], sl2, -base));
                rs += sc[4 * i + e];
            }
        l[hf] = l[hf] * corr[hf] + rs;
    }
}

/* Pins the softmax's results before what follows (the wait for O += P V). */
__device__ __forceinline__ void fence_softmax(float (&sc)[64], float (&l)[2], float (&corr)[2]) {
    mok_fence_acc(sc);
    mok_fence_acc(l);
    mok_fence_acc(corr);
}

__device__ __forceinline__ void rescale_o(float (&o)[64], const float (&corr)[2]) {
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[4 * i + e] *= corr[e >> 1];
}

/* P as the A operand: keys 16k..16k+15 are accumulator column slabs 2k and 2k + 1. */
__device__ __forceinline__ void pack_p(uint32_t (&pa)[kBN / 16][4], const float (&sc)[64]) {
#pragma unroll
    for (int k = 0; k < kBN / 16; k++)
#pragma unroll
        for (int r = 0; r < 4; r++) pa[k][r] = pack_bf16x2(sc[8 * k + 2 * r], sc[8 * k + 2 * r + 1]);
}

#endif

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Params p, const __grid_constant__ Maps maps) {
#if MOK_SM90
    constexpr int S = kStages;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = smem_raw + ((1024 - (mok_smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *sK = sQ + kTile, *sV = sK + S * kTile;
    Bars *bars = reinterpret_cast<Bars *>(sV + S * kTile);
    const int T = p.T, G = gridDim.x; // rounds: r * G < n_tiles
    if (threadIdx.x == 0) {
        mok_mbar_init(&bars->q_full, 1);
        mok_mbar_init(&bars->q_empty, 8);
        for (int s = 0; s < S; s++) {
            mok_mbar_init(&bars->full_k[s], 1), mok_mbar_init(&bars->full_v[s], 1);
            mok_mbar_init(&bars->empty_k[s], 8), mok_mbar_init(&bars->empty_v[s], 8);
        }
        mok_mbar_fence_init();
    }
    __syncthreads();
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        int it = 0, tc = 0; // key blocks and tiles so far
        for (int r = 0; r * G < p.n_tiles; r++) {
            const int n = tile_of_round(r);
            if (n >= p.n_tiles) continue;
            const Tile t = tile_at(p, n);
            const int b = t.bh / p.Hq, h = t.bh - b * p.Hq, kvh = h / p.group, row0 = b * T;
            /* x = 0: K, 1: V of block j; an empty barrier's first lap passes at once */
            auto load = [&](int x, int j) {
                const int i = it + j, s = i % S;
                uint64_t *full = x ? &bars->full_v[s] : &bars->full_k[s];
                flash_wait_bar(x ? &bars->empty_v[s] : &bars->empty_k[s], ((i / S) & 1) ^ 1u);
                mok_mbar_arrive_expect_tx(full, kTile);
                unsigned char *dst = (x ? sV : sK) + s * kTile;
                for (int c = 0; c < 2; c++)
                    mok_tma_load_2d(dst + c * kBox, x ? &maps.v : &maps.k, full, kvh * kD + 64 * c, row0 + j * kBN);
            };
            load(0, 0); /* K of block 0 first: it need not wait for the previous tile's last S (Q does) */
            if (tc > 0) flash_wait_bar(&bars->q_empty, (tc - 1) & 1); /* both consumers' last S */
            mok_mbar_arrive_expect_tx(&bars->q_full, kTile);
            for (int c = 0; c < 2; c++)
                mok_tma_load_2d(sQ + c * kBox, &maps.q, &bars->q_full, h * kD + 64 * c, row0 + t.q0);
            /* the consumers' order: K of block j + 1 is needed with V of block j */
            for (int j = 0; j < t.n_kb; j++) {
                if (j + 1 < t.n_kb) load(0, j + 1);
                load(1, j);
            }
            it += t.n_kb, tc++;
        }
        return;
    }
    mok_setmaxnreg_inc<232>();
    const int w = wg - 1, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int rw = 64 * w + 16 * ((threadIdx.x >> 5) & 3) + g; // this thread's rows in a tile: rw, rw + 8
    const uint64_t dq = mok_wgmma_desc(sQ + w * 64 * 128, 16, 1024);
    const bool leader = lane == 0; // arrives on the empty barriers for its warp
    if (w == 1) pass_turn(w); /* consumer 0 issues first */
    int it = 0, tc = 0;
    for (int r = 0; r * G < p.n_tiles; r++) {
        const int n = tile_of_round(r);
        if (n >= p.n_tiles) continue;
        const Tile t = tile_at(p, n);
        const int r0 = t.q0 + rw;
        const bool final_tile = tile_of_round(r + 1) >= p.n_tiles;
        float o[64], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2], sc[64];
        uint32_t pa[kBN / 16][4];
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.f;
        flash_wait_bar(&bars->q_full, tc & 1);
        auto desc_k = [&](int s) { return mok_wgmma_desc(sK + s * kTile, 16, 1024); };
        auto desc_v = [&](int s) { return mok_wgmma_desc(sV + s * kTile, kBox, 1024); };
        { /* block 0: S alone (masked: it may be the last block) */
            const int s = it % S;
            flash_wait_bar(&bars->full_k[s], (it / S) & 1);
            wait_turn(w);
            mok_wgmma_fence();
            gemm_qk(sc, dq, desc_k(s));
            mok_wgmma_commit();
            pass_turn(w);
            mok_wgmma_wait<0>();
            mok_fence_acc(sc);
            if (leader) mok_mbar_arrive(&bars->empty_k[s]);
            if (leader && t.n_kb == 1) mok_mbar_arrive(&bars->q_empty);
            online_softmax<true>(sc, m, l, corr, 0, r0, qd, T, p.sl2);
            pack_p(pa, sc); /* O is 0: no rescale */
        }
        /* S of block j with O += P V of block j - 1 */
        auto step = [&](int j, auto last) { /* last: std::true_type or std::false_type */
            constexpr bool LAST = decltype(last)::value;
            const int ik = it + j, sk = ik % S, iv = ik - 1, sv = iv % S;
            flash_wait_bar(&bars->full_k[sk], (ik / S) & 1);
            flash_wait_bar(&bars->full_v[sv], (iv / S) & 1);
            wait_turn(w);
            mok_fence_acc(o);
            fwd_fence_p(pa);
            mok_wgmma_fence();
            gemm_qk(sc, dq, desc_k(sk));
            mok_wgmma_commit();
            gemm_pv(o, pa, desc_v(sv));
            mok_wgmma_commit();
            pass_turn(w);
            mok_wgmma_wait<1>();
            mok_fence_acc(sc);
            if (leader) mok_mbar_arrive(&bars->empty_k[sk]);
            if (LAST && leader) mok_mbar_arrive(&bars->q_empty);
            online_softmax<LAST>(sc, m, l, corr, j * kBN, r0, qd, T, p.sl2);
            fence_softmax(sc, l, corr);
            /* O is rescaled only if a row max of the warp changed (a factor of exactly 1 changes
             * no bit). The branch also keeps ptxas from hoisting the wait for O += P V into the
             * softmax (it does that to fill latency bubbles, which stalls the warp until the
             * product is done and undoes the overlap): each arm has its own wait. */
            if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
                mok_wgmma_wait<0>();
                mok_fence_acc(o);
                rescale_o(o, corr);
            } else {
                mok_wgmma_wait<0>();
                mok_fence_acc(o);
            }
            fwd_fence_p(pa);
            if (leader) mok_mbar_arrive(&bars->empty_v[sv]);
            pack_p(pa, sc);
        };
        for (int j = 1; j < t.n_kb - 1; j++) step(j, std::false_type{});
        if (t.n_kb > 1) step(t.n_kb - 1, std::true_type{});
        { /* O += P V of the last block */
            const int iv = it + t.n_kb - 1, sv = iv % S;
            flash_wait_bar(&bars->full_v[sv], (iv / S) & 1);
            wait_turn(w);
            mok_fence_acc(o);
            fwd_fence_p(pa);
            mok_wgmma_fence();
            gemm_pv(o, pa, desc_v(sv));
            mok_wgmma_commit();
            /* consumer 1's last turn is not passed on: no arrival is left pending at the exit (a
             * barrier after the tile loop instead makes ptxas spill 67 registers) */
            if (!(w == 1 && final_tile)) pass_turn(w);
            mok_wgmma_wait<0>();
            mok_fence_acc(o);
            fwd_fence_p(pa);
            if (leader) mok_mbar_arrive(&bars->empty_v[sv]);
        }
        it += t.n_kb, tc++;

        // Row sums over the quad (fixed order), normalise, write out and lse.
        const int b = t.bh / p.Hq, h = t.bh - b * p.Hq;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float sum = l[hf] + __shfl_xor_sync(0xffffffffu, l[hf], 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = 1.f / sum;
            const int tr = r0 + 8 * hf;
            if (tr >= T) continue;
            if (qd == 0) p.lse[(long)t.bh * T + tr] = (m[hf] + log2f(sum)) * kLn2;
            __nv_bfloat16 *dst = p.out + ((long)b * T + tr) * p.Hq * kD + (long)h * kD + 2 * qd;
#pragma unroll
            for (int i = 0; i < 16; i++)
                *reinterpret_cast<uint32_t *>(dst + 8 * i) =
                    pack_bf16x2(o[4 * i + 2 * hf] * inv, o[4 * i + 2 * hf + 1] * inv);
        }
    }
#else
    __trap();
#endif
}

/* The current device's SMs (cached per device): the grid. */
int sm_count() {
    static int known[64]; /* per device, 0: not asked yet */
    int dev = 0, n = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev < 64 && known[dev]) return known[dev];
    cudaCheck(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < 64) known[dev] = n;
    return n;
}

} // namespace

extern "C" int flash_attention_sm90_available(void) {
    static int known[64]; /* per device: 0 unknown, 1 no, 2 yes */
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev < 64 && known[dev]) return known[dev] == 2;
    int major = 0, minor = 0, ok = 0;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cudaFuncAttributes a;
    if (major == 9 && minor == 0) {
        if (cudaFuncGetAttributes(&a, flash_fwd_sm90_kernel) == cudaSuccess) ok = a.binaryVersion == 90;
        else (void)cudaGetLastError();
    }
    if (dev < 64) known[dev] = ok ? 2 : 1;
    return ok;
}

extern "C" void flash_attention_forward_sm90(bf16_t *out, float *lse, const bf16_t *q, const bf16_t *k,
                                             const bf16_t *v, int B, int T, int Hq, int Hkv, cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    Maps maps;
    sm90_encode(&maps.q, q, 2, (long)Hq * kD, (long)B * T, 1, 128);
    sm90_encode(&maps.k, k, 2, (long)Hkv * kD, (long)B * T, 1, 128);
    sm90_encode(&maps.v, v, 2, (long)Hkv * kD, (long)B * T, 1, 128);
    const int n_qb = (T + kBM - 1) / kBM;
    if ((long)B * Hq * n_qb > 0x7fffffffL)
        mokc_cuda_check(cudaErrorInvalidValue, "flash_attention_forward_sm90: more than 2^31 - 1 tiles", __FILE__,
                        __LINE__);
    Params p = {reinterpret_cast<__nv_bfloat16 *>(out), lse, T, Hq, Hq / Hkv, B * Hq, n_qb, B * Hq * n_qb,
                (float)(1.4426950408889634 / sqrt((double)kD))};
    cudaCheck(cudaFuncSetAttribute(flash_fwd_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    flash_fwd_sm90_kernel<<<min(sm_count(), p.n_tiles), kThreads, kSmem, stream>>>(p, maps);
    cudaCheckLaunch();
}
