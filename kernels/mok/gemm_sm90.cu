/*
 * The grouped GEMM of gemm_sm90.h on the megakernel's Hopper pipeline (sm90_pipeline.cuh). One
 * block per SM, 384 threads (the token-side tiles below: 512): lane 0 of warpgroup 0 loads stages
 * with TMA (A: one 128-row x 64-K box; B: up to four 64-K x 64-N panels, as the forward's w_down),
 * warpgroups 1 and 2 compute rows [64w, 64w + 64) x 256 columns with sm90_mma<0, 1> (A K-major,
 * B N-major), then store their half of the tile through the staging. Producer and consumers walk
 * the same fixed tile sequence (t = blockIdx.x, + gridDim.x, ...): no ticket and no task ring.
 *
 * The token-side tiles (gemm_sm90_grouped_tok, groups of at most 176 rows: an expert's
 * tokens) compute C^T = B^T A^T: a tile is TOK_BN = 192 columns of B (wgmma's M, three consumer
 * warpgroups of 64, B panels N-major: sm90_mma<1, 0>) by every row of the group (wgmma's N = 176,
 * one K-major box of M rounded up to 8 rows). Each slice of B is read once per group, and the
 * products cover 176 rows, not M rounded up to 128. 512 threads, TOK_STAGES stages of 24 + 22 KB;
 * the accumulator columns past M hold stale shared memory and are never stored; the consumers
 * store their 64 columns x M rows straight from registers (bf16, 16 bytes of a row a lane group).
 *
 * The 192 x 192 tiles (gemm_sm90_grouped_r192) have the token-side tiles' bytes with the operands
 * as in the 128 x 256 tiles: 192 rows of A (one K-major box; consumer w its rows 64w..) by 192
 * columns of B (three N-major panels, wgmma's N), sm90_mma<0, 1>, so an accumulator row is a row of
 * C as in the megakernel's epilogues; groups of up to 192 rows read each slice of B once. Stored
 * from registers, two columns a store. gemm_sm90_grouped_r192_b32: the same with B in 32-column
 * panels (64-byte swizzle), two boxes of 96 columns a stage.
 *
 * gemm_sm90_logits runs the 128 x 256 tile with B K-major (the LM head's (V, C) weights: one 256-row box a stage,
 * sm90_mma<0, 0>) and an epilogue for the cross-entropy: each row's softmax statistics of the tile from the
 * accumulators, its target's logit, and 16-bit codes of the logits staged and stored as bf16 results are.
 */
#include "gemm_sm90.h"

#include <climits>
#include <cstdio>
#include <cstring>

#include "../cross_entropy.h" /* the logits' code */
#include "sm90_pipeline.cuh"

#define GEMM_BN 256        /* columns of a tile: one m64n256 accumulator per consumer */
#define GEMM_BAND 16       /* M tiles per rasterisation band (16 x 128 rows of A and ~8 B panels in flight) */
#define GEMM_BUDGET_NS 10000000000LL
#define GEMM_MAX_DEVICES 64

typedef struct {
    CUtensorMap a, b; /* (G, M, K): 64 K x 128 rows boxes (token-side: x rows8); (G, K, N): 64 N x 64 K boxes */
    Sm90Panels b32;   /* the 192 x 192 tiles with B in 32-column panels: B's, 3 panels (96 columns) a box */
} GemmSm90Maps;

typedef struct {
    __nv_bfloat16 *c;
    float *stats, *target_logit; /* gemm_sm90_logits: each row's (max, sum of exp) a tile; its target's logit */
    const int *targets;
    const float *rope;  /* NULL, or gemm_sm90_rope's table: rotate pairs of each head of D columns */
    int rope_T, rope_D;
    MokError *err;
    unsigned *claim;
    long long budget_ns;
    int M, N, K;
    int mt, nt, tiles; /* M and N tiles of a group (token-side: 1 and 192-column tiles); of all groups */
    int rows8;         /* token-side: M rounded up to 8, the rows loaded */
} GemmSm90Params;

struct GemmTile {
    int g, m0, n0;
};

/* Tile t: groups in order; inside a group, bands of GEMM_BAND M tiles, M fastest within a band. */
__device__ __forceinline__ GemmTile gemm_tile(const GemmSm90Params &p, int t) {
    const int per_group = p.mt * p.nt, per_band = GEMM_BAND * p.nt;
    GemmTile k;
    k.g = t / per_group;
    const int u = t - k.g * per_group, band = u / per_band, v = u - band * per_band;
    const int rows = min(GEMM_BAND, p.mt - band * GEMM_BAND);
    k.m0 = (band * GEMM_BAND + v % rows) * SM90_BM;
    k.n0 = v / rows * GEMM_BN;
    return k;
}

/* ---- three-consumer tiles: token-side, and 192 x 192 ---- */

#define TOK_BN 192                       /* columns of B a tile: three consumers of 64 */
#define TOK_STAGES 4
#define TOK_THREADS 512
#define TOK_A_BYTES (3 * SM90_PANEL_BYTES) /* 192 columns of B x 64 K, N-major panels */
#define TOK_PRODUCER_REGS 40
#define TOK_CONSUMER_REGS 152 /* 88 or 96 accumulators; 40 x 128 + 152 x 384 <= 65536 */

/* The token-side kernel's shared memory (sm90_setup carves it) for tiles of TN rows of a group
 * (wgmma's N: 176 or 192): its stage geometry for sm90_mma, no staging. BPC: the columns of B's
 * N-major panels (the 192 x 192 tiles: 64, or 32 with the 64-byte swizzle). */
template <int TN, int BPC = 64>
struct GemmTokSmem {
    static constexpr int STAGES = TOK_STAGES, A_BYTES = TOK_A_BYTES, B_BYTES = TN * SM90_BK * 2;
    static constexpr int STAGING_BYTES = 0, CONSUMERS = (TOK_THREADS - 128) / 128, B_PANEL_COLS = BPC;
    static constexpr int BYTES = 1024 + STAGES * (A_BYTES + B_BYTES) + (int)sizeof(Sm90BarsT<TOK_STAGES>);
    static_assert(BYTES <= 227 * 1024, "shared memory of one block");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages keep the 128-byte swizzle's alignment");
    unsigned char *a, *b;
    Sm90BarsT<TOK_STAGES> *bars;
};

/* Tile t: groups in order; inside a group, 192-column tiles of B in order, the group's tiles of
 * 192 rows fastest (they read the same slice of B one after another; token-side: one, p.mt = 1). */
__device__ __forceinline__ GemmTile gemm_tile_192(const GemmSm90Params &p, int t) {
    const int per_group = p.mt * p.nt;
    GemmTile k;
    k.g = t / per_group;
    const int u = t - k.g * per_group;
    k.m0 = u % p.mt * TOK_BN;
    k.n0 = u / p.mt * TOK_BN;
    return k;
}

/* Stages of the three-consumer tiles: the tile's rows of A (one K-major box at m0: 192 rows, or the
 * token-side's rows8, zero past M) and its B panels (those inside N). ROWS (the 192 x 192 tiles):
 * the rows into A's slot, the panels into B's; token-side: the panels into A's slot (wgmma's M),
 * the rows into B's. BPC 32: B as two boxes of three 32-column panels, columns [n0, n0 + 96) and
 * [n0 + 96, n0 + 192) (the megakernel's gate/up pairs would take each from its own matrix). */
template <int TN, bool ROWS, int BPC>
__device__ void gemm_produce_192(const GemmSm90Params &p, const GemmSm90Maps &tm, const Sm90Watch &wd,
                                 const GemmTokSmem<TN, BPC> &sm) {
    using Smem = GemmTokSmem<TN, BPC>;
    Sm90Ring sr(Smem::STAGES);
    const int KB = (p.K + SM90_BK - 1) / SM90_BK;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        const GemmTile k = gemm_tile_192(p, t);
        const int panels = min(3, (p.N - k.n0 + 63) / 64);
        const unsigned b_bytes = BPC == 32 ? sm90_panels_bytes(tm.b32, k.n0, p.N) +
                                                 sm90_panels_bytes(tm.b32, k.n0 + TOK_BN / 2, p.N)
                                           : panels * SM90_PANEL_BYTES;
        const unsigned bytes = (ROWS ? TOK_BN : p.rows8) * SM90_BK * 2 + b_bytes;
        for (int kb = 0; kb < KB; kb++) {
            const int s = sm90_stage_begin(wd, sm.bars, sr, bytes, t);
            uint64_t *full = &sm.bars->full[s];
            unsigned char *a = sm.a + s * Smem::A_BYTES, *b = sm.b + s * Smem::B_BYTES;
            if (ROWS) mok_tma_load_3d(a, &tm.a, full, kb * SM90_BK, k.m0, k.g);
            if constexpr (BPC == 32) {
                sm90_load_panels(b, tm.b32, full, k.n0, p.N, kb * SM90_BK, k.g);
                sm90_load_panels(b + Smem::B_BYTES / 2, tm.b32, full, k.n0 + TOK_BN / 2, p.N, kb * SM90_BK, k.g);
            } else {
                for (int j = 0; j < panels; j++)
                    mok_tma_load_3d((ROWS ? b : a) + j * SM90_PANEL_BYTES, &tm.b, full, k.n0 + 64 * j, kb * SM90_BK,
                                    k.g);
            }
            if (!ROWS) mok_tma_load_3d(b, &tm.a, full, kb * SM90_BK, k.m0, k.g);
        }
    }
}

/* Consumer w's 64 columns (from k.n0 + 64w) x the group's M rows, from registers: acc[4i + e] is
 * column 16 (warp % 4) + lane / 4 + 8 (e >= 2) of the 64 and row 8i + 2 (lane % 4) + (e & 1). */
template <int TN>
__device__ __forceinline__ void gemm_store_tok(const GemmSm90Params &p, const float (&acc)[TN / 2], int w,
                                               const GemmTile &k) {
    const int tid = threadIdx.x & 127, n = k.n0 + 64 * w + 16 * (tid >> 5) + ((tid & 31) >> 2), m2 = 2 * (tid & 3);
    __nv_bfloat16 *c = p.c + (size_t)k.g * p.M * p.N;
#pragma unroll
    for (int i = 0; i < TN / 8; i++) {
        if (8 * i >= p.M) break;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int m = 8 * i + m2 + (e & 1), col = n + 8 * (e >> 1);
            if (m < p.M && col < p.N) c[(size_t)m * p.N + col] = __float2bfloat16_rn(acc[4 * i + e]);
        }
    }
}

/* Consumer w's 64 rows (from k.m0 + 64w) x 192 columns, from registers: acc[4i + e] is row
 * 16 (warp % 4) + lane / 4 + 8 (e >= 2) of the 64 and column 8i + 2 (lane % 4) + (e & 1); a pair
 * of columns is one 4-byte store (N is a multiple of 8). */
__device__ __forceinline__ void gemm_store_r192(const GemmSm90Params &p, const float (&acc)[96], int w,
                                                const GemmTile &k) {
    const int tid = threadIdx.x & 127, m = k.m0 + 64 * w + 16 * (tid >> 5) + ((tid & 31) >> 2);
    const int n = k.n0 + 2 * (tid & 3);
    __nv_bfloat16 *c = p.c + (size_t)k.g * p.M * p.N;
#pragma unroll
    for (int i = 0; i < TOK_BN / 8; i++) {
        if (n + 8 * i >= p.N) break;
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (m + 8 * h < p.M)
                *reinterpret_cast<__nv_bfloat162 *>(c + (size_t)(m + 8 * h) * p.N + n + 8 * i) =
                    __floats2bfloat162_rn(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
    }
}

/* The three-consumer tiles (512 threads): token-side (ROWS false: TN of a group's rows as wgmma's
 * N, sm90_mma<1, 0>) or 192 x 192 (ROWS, TN = 192: sm90_mma<0, 1>; BPC: B's panel columns). */
template <int TN, bool ROWS, int BPC = 64>
__global__ void __launch_bounds__(TOK_THREADS, 1)
    gemm_sm90_192_kernel(const __grid_constant__ GemmSm90Params p, const __grid_constant__ GemmSm90Maps tm) {
#if MOK_SM90
    static_assert(BPC == 64 || ROWS, "32-column panels: the 192 x 192 tiles' B");
    using Smem = GemmTokSmem<TN, BPC>;
    extern __shared__ unsigned char smem_raw[];
    const Smem sm = sm90_setup<Smem>(smem_raw);
    const Sm90Watch wd = {p.err, p.claim, p.budget_ns};
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<TOK_PRODUCER_REGS>();
        if (threadIdx.x == 0) gemm_produce_192<TN, ROWS, BPC>(p, tm, wd, sm);
        return;
    }
    mok_setmaxnreg_inc<TOK_CONSUMER_REGS>();
    float acc[TN / 2];
#pragma unroll
    for (int i = 0; i < TN / 2; i++) acc[i] = 0.0f;
    Sm90Ring sr(Smem::STAGES);
    const int KB = (p.K + SM90_BK - 1) / SM90_BK;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        const GemmTile k = gemm_tile_192(p, t);
        if constexpr (ROWS) {
            sm90_mma<0, 1>(acc, wd, sm, sr, wg - 1, KB, 64, t);
            gemm_store_r192(p, acc, wg - 1, k);
        } else {
            sm90_mma<1, 0>(acc, wd, sm, sr, wg - 1, KB, 64, t);
            gemm_store_tok<TN>(p, acc, wg - 1, k);
        }
    }
#else
    asm volatile("trap;");
#endif
}

/* ---- 128 x 256 tiles ---- */

/* B_KMAJOR: B is (G, N, K), K-major like A, and a stage takes its 256 rows as one box (zero past N, and
 * counted in full); else B's N-major panels inside N. */
template <bool B_KMAJOR>
__device__ void gemm_produce(const GemmSm90Params &p, const GemmSm90Maps &tm, const Sm90Watch &wd, const Sm90Smem &sm) {
    Sm90Ring sr(SM90_STAGES);
    const int KB = (p.K + SM90_BK - 1) / SM90_BK;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        const GemmTile k = gemm_tile(p, t);
        /* panels wholly past N are not loaded (their columns are discarded) */
        const int panels = B_KMAJOR ? 4 : min(4, (p.N - k.n0 + 63) / 64);
        const unsigned bytes = SM90_A_BYTES + panels * SM90_PANEL_BYTES;
        for (int kb = 0; kb < KB; kb++) {
            const int s = sm90_stage_begin(wd, sm.bars, sr, bytes, t);
            uint64_t *full = &sm.bars->full[s];
            mok_tma_load_3d(sm.a + s * SM90_A_BYTES, &tm.a, full, kb * SM90_BK, k.m0, k.g);
            if constexpr (B_KMAJOR)
                mok_tma_load_3d(sm.b + s * SM90_B_BYTES, &tm.b, full, kb * SM90_BK, k.n0, k.g);
            else
                for (int j = 0; j < panels; j++)
                    mok_tma_load_3d(sm.b + s * SM90_B_BYTES + j * SM90_PANEL_BYTES, &tm.b, full, k.n0 + 64 * j,
                                    kb * SM90_BK, k.g);
        }
    }
}

/* gemm_sm90_rope's unstage: the staged 64 x 128 columns from c0 (whole heads of D, D | 128) out to
 * rows[r] (r < nrows), rotated. Work items are the pairs of 8-column chunks (one in a head's first
 * half, its partner D/2 later): 8 per row, 512 in all, 4 a thread, 2 at a time (4 spill); each
 * loads its position's 8 cosines and sines, does rope.cu's arithmetic on the staged bf16 values
 * and stores both chunks. */
__device__ __forceinline__ void gemm_unstage_rope(const GemmSm90Params &p, __nv_bfloat16 *stg, int w, int nrows,
                                                  int r0, int c0, __nv_bfloat16 *rows) {
    const int tid = threadIdx.x & 127, span = p.rope_D / 16, hd = p.rope_D / 2;
#pragma unroll 2
    for (int j = 0; j < 4; j++) {
        const int v = tid + 128 * j, r = v >> 3, q = v & 7;
        const int e = q % span, c1 = (q / span) * 2 * span + e; /* head q / span, its chunk e */
        if (r >= nrows || c0 + 8 * c1 >= p.N) continue;
        const float *cs = p.rope + (size_t)((r0 + r) % p.rope_T) * p.rope_D + 8 * e;
        float cv[8], sv[8], x1[8], x2[8];
        *reinterpret_cast<float4 *>(cv) = *reinterpret_cast<const float4 *>(cs);
        *reinterpret_cast<float4 *>(cv + 4) = *reinterpret_cast<const float4 *>(cs + 4);
        *reinterpret_cast<float4 *>(sv) = *reinterpret_cast<const float4 *>(cs + hd);
        *reinterpret_cast<float4 *>(sv + 4) = *reinterpret_cast<const float4 *>(cs + hd + 4);
        const int4 a = *reinterpret_cast<const int4 *>(sm90_stg_at(stg, r, c1));
        const int4 b = *reinterpret_cast<const int4 *>(sm90_stg_at(stg, r, c1 + span));
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 fa = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162 *>(&a)[k]);
            const float2 fb = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162 *>(&b)[k]);
            x1[2 * k] = fa.x, x1[2 * k + 1] = fa.y, x2[2 * k] = fb.x, x2[2 * k + 1] = fb.y;
        }
        int4 u1, u2;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float o1[2], o2[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = 2 * k + h;
                rope_rotate(x1[m], x2[m], cv[m], sv[m], o1[h], o2[h]);
            }
            reinterpret_cast<__nv_bfloat162 *>(&u1)[k] = __floats2bfloat162_rn(o1[0], o1[1]);
            reinterpret_cast<__nv_bfloat162 *>(&u2)[k] = __floats2bfloat162_rn(o2[0], o2[1]);
        }
        __nv_bfloat16 *row = rows + (size_t)r * p.N + c0;
        *reinterpret_cast<int4 *>(row + 8 * c1) = u1;
        *reinterpret_cast<int4 *>(row + 8 * (c1 + span)) = u2;
    }
    sm90_named_sync(2 + w, 128);
}

/* Consumer w's 64 x 256 result as bf16 into rows m0 + 64w.. of group g, two staged halves; ROPE:
 * rotated (p.rope). */
template <bool ROPE>
__device__ __forceinline__ void gemm_store(const GemmSm90Params &p, const float (&acc)[128], __nv_bfloat16 *stg,
                                           int w, const GemmTile &k) {
    const int r0 = k.m0 + 64 * w;
    __nv_bfloat16 *rows = p.c + ((size_t)k.g * p.M + r0) * p.N;
    if constexpr (ROPE)
        sm90_store_parts(acc, stg, w, k.n0, p.N, [&](int c0) { gemm_unstage_rope(p, stg, w, p.M - r0, r0, c0, rows); });
    else
        sm90_store_rows(acc, stg, w, p.M - r0, k.n0, p.N, [&](int r) { return rows + (size_t)r * p.N; });
}

/* gemm_sm90_logits' code of logit x in a tile whose row maximum is m (cross_entropy.h): (m - x) in units of
 * 2^-MOKC_LOGIT_CODE_BITS, rounded, at most 65535. */
__device__ __forceinline__ unsigned logit_code(float x, float m) {
    /* + 1.5 * 2^23 rounds to the nearest integer into the low mantissa bits: no conversion instruction (a sixteenth
     * of the ALU rate) */
    constexpr float unit = 1 << MOKC_LOGIT_CODE_BITS, to_int = 12582912.0f;
    return __float_as_uint(fmaf(fminf(m - x, 65535.0f / unit), unit, to_int)) & 0xffffu;
}

/* Each of consumer w's rows' (max m, sum of exp(c - m)) over the tile's columns inside N into its stats slot (a
 * lane's columns in order, then the quad's butterflies: every lane the same bits), and the target's logit where
 * the row's target is in the tile. FULL: every column inside N (all tiles but the last column's), no per-column
 * test. The target's select runs only where a lane of the warp holds one (a row's target is in one of its
 * N / 256 tiles). */
template <bool FULL>
__device__ __forceinline__ void gemm_logit_stats(const GemmSm90Params &p, const float (&acc)[128], int m, int n0,
                                                 float (&mx)[2]) {
    const int lane = threadIdx.x & 31, n = n0 + 2 * (lane & 3);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float sum = 0.0f;
        mx[h] = -INFINITY;
#pragma unroll
        for (int i = 0; i < GEMM_BN / 8; i++)
            if (FULL || n + 8 * i < p.N) mx[h] = fmaxf(mx[h], fmaxf(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2)); /* finite: the quad covers the tile */
        constexpr float log2e = 1.4426950408889634f;
        const float base = mx[h] * log2e;
#pragma unroll
        for (int i = 0; i < GEMM_BN / 8; i++)
            if (FULL || n + 8 * i < p.N) {
                sum += exp2_approx(fmaf(acc[4 * i + 2 * h], log2e, -base));
                sum += exp2_approx(fmaf(acc[4 * i + 2 * h + 1], log2e, -base));
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = m + 8 * h;
        const bool in = row < p.M;
        const int tc = in ? p.targets[row] - n : -1; /* the target's column, relative to this lane's first */
        if (in && (lane & 3) == 0)
            reinterpret_cast<float2 *>(p.stats)[(size_t)row * p.nt + n0 / GEMM_BN] = make_float2(mx[h], sum);
        if (!__any_sync(0xffffffffu, tc >= 0 && tc < GEMM_BN && (tc & 7) < 2)) continue;
#pragma unroll
        for (int i = 0; i < GEMM_BN / 8; i++) /* static indices (a select): the accumulators stay in registers */
            if (tc == 8 * i || tc == 8 * i + 1)
                p.target_logit[row] = tc & 1 ? acc[4 * i + 2 * h + 1] : acc[4 * i + 2 * h];
    }
}

/* gemm_sm90_logits' epilogue, consumer w's 64 rows x 256 columns (acc[4i + e] is row 16 (warp % 4) + lane / 4 +
 * 8 (e >= 2) of the 64 and column 8i + 2 (lane % 4) + (e & 1)): the rows' statistics (gemm_logit_stats), and the
 * codes through the staging as bf16 results go. */
__device__ __forceinline__ void gemm_store_logits(const GemmSm90Params &p, const float (&acc)[128], __nv_bfloat16 *stg,
                                                  int w, const GemmTile &k) {
    const int tid = threadIdx.x & 127, r0 = k.m0 + 64 * w, m = r0 + 16 * (tid >> 5) + ((tid & 31) >> 2);
    float mx[2];
    if (k.n0 + GEMM_BN <= p.N) gemm_logit_stats<true>(p, acc, m, k.n0, mx);
    else gemm_logit_stats<false>(p, acc, m, k.n0, mx);
    __nv_bfloat16 *rows = p.c + (size_t)r0 * p.N;
    sm90_store_parts_as(stg, w, k.n0, p.N, [&](int c0) {
        sm90_unstage(stg, w, p.M - r0, c0, p.N, [&](int r) { return rows + (size_t)r * p.N + c0; });
    }, [&](int i, int half) {
        __nv_bfloat162 q;
        q.x = __ushort_as_bfloat16((unsigned short)logit_code(acc[4 * i + 2 * half], mx[half]));
        q.y = __ushort_as_bfloat16((unsigned short)logit_code(acc[4 * i + 2 * half + 1], mx[half]));
        return q;
    });
}

/* The 128 x 256 tiles' consumers: ROPE, LOGITS (B K-major, gemm_store_logits) or plain bf16 rows. */
template <bool ROPE, bool LOGITS = false>
__device__ __forceinline__ void gemm_consume(const GemmSm90Params &p, const Sm90Watch &wd, const Sm90Smem &sm, int w) {
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;
    __nv_bfloat16 *stg = sm.stg + w * SM90_STG_ELEMS;
    Sm90Ring sr(SM90_STAGES);
    const int KB = (p.K + SM90_BK - 1) / SM90_BK;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        const GemmTile k = gemm_tile(p, t);
        if constexpr (LOGITS) {
            sm90_mma<0, 0>(acc, wd, sm, sr, w, KB, 64, t);
            gemm_store_logits(p, acc, stg, w, k);
        } else {
            sm90_mma<0, 1>(acc, wd, sm, sr, w, KB, 64, t);
            gemm_store<ROPE>(p, acc, stg, w, k);
        }
    }
}

/* ROPE: the epilogue applies p.rope; LOGITS: gemm_sm90_logits (kernels of their own: the plain one keeps its
 * registers). */
template <bool ROPE, bool LOGITS = false>
__global__ void __launch_bounds__(SM90_THREADS, 1)
    gemm_sm90_kernel(const __grid_constant__ GemmSm90Params p, const __grid_constant__ GemmSm90Maps tm) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    const Sm90Smem sm = sm90_setup(smem_raw);
    const Sm90Watch wd = {p.err, p.claim, p.budget_ns};
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<SM90_PRODUCER_REGS>();
        if (threadIdx.x == 0) gemm_produce<LOGITS>(p, tm, wd, sm);
        return;
    }
    mok_setmaxnreg_inc<SM90_CONSUMER_REGS>();
    gemm_consume<ROPE, LOGITS>(p, wd, sm, wg - 1);
#else
    asm volatile("trap;");
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Host side
 * ---------------------------------------------------------------------------------------------- */

/* Per device, made on first use: the watchdog's host-mapped record and its claim word. */
static struct {
    MokError *host, *dev;
    unsigned *claim;
} watch[GEMM_MAX_DEVICES];

extern "C" int gemm_sm90_shape_ok(int G, int M, int N, int K, const char **why) {
    *why = NULL;
    if (G < 1 || M < 1 || N < 1 || K < 1) *why = "every dimension (groups, M, N, K) must be at least 1";
    else if (N % 8 != 0) *why = "N must be a multiple of 8 (B's and C's rows are 16-byte multiples for TMA and stores)";
    else if (K % 8 != 0) *why = "K must be a multiple of 8 (A's rows are 16-byte multiples for TMA)";
    else if ((long)G * (((long)M + SM90_BM - 1) / SM90_BM) * (((long)N + GEMM_BN - 1) / GEMM_BN) > INT_MAX)
        *why = "groups x M x N needs more than 2^31 tiles of 128 x 256";
    return *why == NULL;
}

/* The tiles behind the entry points (GEMM_128x256 also with RoPE in its epilogue). */
enum { GEMM_128x256, GEMM_TOK176, GEMM_TOK192, GEMM_R192, GEMM_R192_B32, GEMM_LOGITS };

typedef void (*GemmKernel)(GemmSm90Params, GemmSm90Maps);
typedef struct {
    GemmKernel kernel;
    const char *name;
    int tok;                  /* token-side: the most rows a group (one tile a group's rows), else 0 */
    int bm, bn;               /* rows and columns of C a tile (token-side: a tile takes the group's rows) */
    int threads, smem, regs;  /* regs: the block's setmaxnreg split */
} GemmVariant;

static GemmVariant gemm_variant(int kind, int rope) {
    const int regs3 = TOK_PRODUCER_REGS * 128 + TOK_CONSUMER_REGS * (TOK_THREADS - 128);
    const int smem192 = GemmTokSmem<192>::BYTES;
    switch (kind) {
    case GEMM_TOK176:
        return {gemm_sm90_192_kernel<176, false>, "gemm_sm90_grouped_tok", 176, 0, TOK_BN, TOK_THREADS,
                GemmTokSmem<176>::BYTES, regs3};
    case GEMM_TOK192:
        return {gemm_sm90_192_kernel<192, false>, "gemm_sm90_grouped_tok192", 192, 0, TOK_BN, TOK_THREADS, smem192,
                regs3};
    case GEMM_R192:
        return {gemm_sm90_192_kernel<192, true>, "gemm_sm90_grouped_r192", 0, TOK_BN, TOK_BN, TOK_THREADS, smem192,
                regs3};
    case GEMM_R192_B32:
        return {gemm_sm90_192_kernel<192, true, 32>, "gemm_sm90_grouped_r192_b32", 0, TOK_BN, TOK_BN, TOK_THREADS,
                GemmTokSmem<192, 32>::BYTES, regs3};
    case GEMM_LOGITS:
        return {gemm_sm90_kernel<false, true>, "gemm_sm90_logits", 0, SM90_BM, GEMM_BN, SM90_THREADS, SM90_SMEM_BYTES,
                SM90_PRODUCER_REGS * 128 + SM90_CONSUMER_REGS * 256};
    default:
        return {rope ? gemm_sm90_kernel<true> : gemm_sm90_kernel<false>, rope ? "gemm_sm90_rope" : "gemm_sm90_grouped",
                0, SM90_BM, GEMM_BN, SM90_THREADS, SM90_SMEM_BYTES,
                SM90_PRODUCER_REGS * 128 + SM90_CONSUMER_REGS * 256};
    }
}

/* What gemm_sm90_logits adds to a launch (else NULLs). */
typedef struct {
    float *stats, *target_logit;
    const int *targets;
} GemmLogitsOut;

/* Every entry point: the shape checked, the kernel of `kind` launched (rope: NULL or the table; GEMM_LOGITS: C holds
 * the codes, lo the rest). */
static void gemm_launch(int kind, void *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                        const float *rope, int T, int D, GemmLogitsOut lo, cudaStream_t stream) {
    const char *why = NULL;
    if (!gemm_sm90_shape_ok(G, M, N, K, &why))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gemm_sm90: %d x (%d x %d x %d): %s (internal)", G, M, N, K, why);
    const GemmVariant v = gemm_variant(kind, rope != NULL);
    const long mt = v.tok ? 1 : ((long)M + v.bm - 1) / v.bm, nt = ((long)N + v.bn - 1) / v.bn;
    if (v.tok && M > v.tok)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: %d x (%d x %d): more than %d rows a group (internal)", v.name, G, M, N,
                 v.tok);
    if ((long)G * mt * nt > INT_MAX)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: %d x (%d x %d): 2^31 tiles or more (internal)", v.name, G, M, N);
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)lo.stats) & 15)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gemm_sm90: operands must be 16-byte aligned (internal)");
    sm90_prepare(v.kernel, SM90_BM, v.name, v.smem, v.threads, v.regs);
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= GEMM_MAX_DEVICES)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gemm_sm90: device %d is past the %d it tracks (internal)", dev,
                 GEMM_MAX_DEVICES);
    if (!watch[dev].host) {
        cudaCheck(cudaHostAlloc((void **)&watch[dev].host, sizeof(MokError), cudaHostAllocMapped));
        memset((void *)watch[dev].host, 0, sizeof(MokError));
        cudaCheck(cudaHostGetDevicePointer((void **)&watch[dev].dev, watch[dev].host, 0));
        cudaCheck(cudaMalloc((void **)&watch[dev].claim, sizeof(unsigned)));
        cudaCheck(cudaMemset(watch[dev].claim, 0, sizeof(unsigned)));
        cudaCheck(cudaDeviceSynchronize()); /* the legacy stream's memset, before launches on any stream */
    }
    GemmSm90Maps tm;
    const int rows8 = (M + 7) / 8 * 8;
    sm90_encode(&tm.a, A, 3, K, M, G, v.tok ? rows8 : v.bm);
    if (kind == GEMM_LOGITS) sm90_encode(&tm.b, B, 3, K, N, G, GEMM_BN); /* (G, N, K): 256-row boxes as A's */
    else sm90_encode(&tm.b, B, 3, N, K, G, 64);
    if (kind == GEMM_R192_B32) sm90_encode_panels(&tm.b32, B, N, K, G, 3, 32);
    else memset(&tm.b32, 0, sizeof tm.b32);
    GemmSm90Params p;
    p.c = reinterpret_cast<__nv_bfloat16 *>(C);
    p.stats = lo.stats, p.target_logit = lo.target_logit, p.targets = lo.targets;
    p.rope = rope, p.rope_T = T, p.rope_D = D;
    p.err = watch[dev].dev;
    p.claim = watch[dev].claim;
    p.budget_ns = GEMM_BUDGET_NS;
    p.M = M, p.N = N, p.K = K;
    p.mt = (int)mt, p.nt = (int)nt;
    p.tiles = G * p.mt * p.nt;
    p.rows8 = rows8;
    v.kernel<<<min(sms, p.tiles), v.threads, v.smem, stream>>>(p, tm);
    cudaCheckLaunch();
}

extern "C" void gemm_sm90_grouped(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                  cudaStream_t stream) {
    gemm_launch(GEMM_128x256, C, A, B, G, M, N, K, NULL, 0, 0, GemmLogitsOut{}, stream);
}

extern "C" void gemm_sm90_grouped_tok(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                      cudaStream_t stream) {
    gemm_launch(GEMM_TOK176, C, A, B, G, M, N, K, NULL, 0, 0, GemmLogitsOut{}, stream);
}

extern "C" void gemm_sm90_grouped_tok192(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                         cudaStream_t stream) {
    gemm_launch(GEMM_TOK192, C, A, B, G, M, N, K, NULL, 0, 0, GemmLogitsOut{}, stream);
}

extern "C" void gemm_sm90_grouped_r192(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                       cudaStream_t stream) {
    gemm_launch(GEMM_R192, C, A, B, G, M, N, K, NULL, 0, 0, GemmLogitsOut{}, stream);
}

extern "C" void gemm_sm90_grouped_r192_b32(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                           cudaStream_t stream) {
    gemm_launch(GEMM_R192_B32, C, A, B, G, M, N, K, NULL, 0, 0, GemmLogitsOut{}, stream);
}

extern "C" int gemm_sm90_rope_ok(int M, int N, int K, int D, const char **why) {
    if (!gemm_sm90_shape_ok(1, M, N, K, why)) return 0;
    if (D < 16 || D % 16 != 0 || 128 % D != 0)
        *why = "the head dim must be 16, 32, 64 or 128 (a staged half tile holds whole heads)";
    else if (N % D != 0)
        *why = "N must be a whole number of heads";
    return *why == NULL;
}

extern "C" void gemm_sm90_rope(bf16_t *C, const bf16_t *A, const bf16_t *B, int M, int N, int K, const float *table,
                               int T, int D, cudaStream_t stream) {
    const char *why = NULL;
    if (!gemm_sm90_rope_ok(M, N, K, D, &why) || T < 1 || ((uintptr_t)table & 7))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gemm_sm90_rope: %d x %d x %d, T %d, head dim %d: %s (internal)", M, N, K,
                 T, D, why ? why : "T must be positive and the table 8-byte aligned");
    gemm_launch(GEMM_128x256, C, A, B, 1, M, N, K, table, T, D, GemmLogitsOut{}, stream);
}

extern "C" int gemm_sm90_logits_tiles(int N) { return (N + GEMM_BN - 1) / GEMM_BN; }

extern "C" void gemm_sm90_logits(uint16_t *codes, float *stats, float *target_logit, const int *targets,
                                 const bf16_t *A, const bf16_t *B, int M, int N, int K, cudaStream_t stream) {
    gemm_launch(GEMM_LOGITS, codes, A, B, 1, M, N, K, NULL, 0, 0, GemmLogitsOut{stats, target_logit, targets},
                stream);
}

extern "C" int gemm_sm90_watchdog_report(char *buf, size_t len) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= GEMM_MAX_DEVICES || !watch[dev].host || !watch[dev].host->flag)
        return 0;
    const volatile MokError *e = watch[dev].host;
    snprintf(buf, len, "gemm_sm90 watchdog: block %d, tile %d: a shared-memory pipeline stage never filled (%.3f s)",
             e->block, e->tile, e->waited_ns * 1e-9);
    return 1;
}
