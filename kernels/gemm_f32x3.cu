/*
 * fp32 GEMMs on bf16 tensor cores (gemm_f32x3.h). The kernels read the fp32 operands into
 * registers (vectors where aligned and inside, else element by element, zeros outside) and split
 * each value in three bf16 terms by integer arithmetic; then the six plane products.
 *  - Hopper (sm_90a): a 128 x 128 tile, two warpgroups of m64n128k16 wgmma, persistent (one block
 *    an SM, the K blocks of its tiles in one stream). A goes from global memory straight into
 *    each thread's registers ahead of use (one K block; two k steps when given as planes) and is
 *    split there, 16 of K at a time, as wgmma's register operand; B's planes go to four 128-byte
 *    swizzled shared-memory stages, two K blocks ahead. Shared memory once held A's planes too:
 *    its traffic (the split's stores, six products reading both operands) kept the tensor cores
 *    half idle (2026-11-30 (s13) in docs/perf-notes.md). Operands given as planes are read (A) or
 *    copied by cp.async (B) instead of split; an operand of bf16 values is its own h plane, and only
 *    the products of its h run (three of the six; one when both operands are bf16 values).
 *  - Any other GPU (or forced): a 64 x 128 tile of 8 warps, mma.sync m16n8k16 from ldmatrix
 *    fragments of planes stored to shared memory, one stage, the next K block in registers
 *    meanwhile; reads fp32 values (and bf16 values), never planes.
 */
#include "gemm_f32x3.h"

#include <cuda_bf16.h>
#include <limits.h>

#include <array>
#include <utility>

#include "device_util.cuh"
#include "flash_sm90.cuh" /* wgmma m64n128k16 */
#include "mok/mok.h"
#include "mok/tile_mma.cuh"
#include "mok/tile_wgmma.cuh"
#include "reduce.h"

extern "C" {
#include "../src/common.h" /* mokc_die */
}

namespace {

constexpr int THREADS = 256;
constexpr int TILE_N = 128; /* both kernels; TILE_M: 128 (wgmma) or 64 (mma.sync) */

/* x = h + m + l, each a bf16 (its bits in the high half of the word): rounded to nearest by
 * integer adds on the bits (the conversion instructions run at a sixteenth of the ALU rate);
 * x - h and r - m are exact in fp32. gpu_split_f32x3 writes the same planes. */
__device__ __forceinline__ void split3(float x, uint32_t &h, uint32_t &m, uint32_t &l) {
    h = (__float_as_uint(x) + 0x8000u) & 0xffff0000u;
    const float r = x - __uint_as_float(h);
    m = (__float_as_uint(r) + 0x8000u) & 0xffff0000u;
    l = __float_as_uint(r - __uint_as_float(m)); /* at most 8 significant bits: already a bf16 */
}

/* The bf16 pair (lo, hi) from two words holding bf16 bits in their high halves. */
__device__ __forceinline__ uint32_t pack_hi(uint32_t lo, uint32_t hi) { return __byte_perm(lo, hi, 0x7632); }

/* A value's fp32 bits: an fp32's own, a bf16's (its 16 bits) in the high half. */
__device__ __forceinline__ uint32_t bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits(uint16_t x) { return (uint32_t)x << 16; }

/* One operand's K block in registers: R rows (of M or N) x BK, read as groups of 4 elements
 * along the contiguous dimension (K when K_CONTIG), GROUPS a thread. */
template <int R, int BK, bool K_CONTIG>
struct Loader {
    static constexpr int GROUPS = R * BK / 4 / THREADS;
    uint32_t v[GROUPS][4];

    /* Group i of this thread: row r and k of its first element, within the block. */
    __device__ __forceinline__ static void at(int i, int &r, int &k) {
        const int f = (int)threadIdx.x + THREADS * i;
        if (K_CONTIG) r = f / (BK / 4), k = 4 * (f % (BK / 4));
        else k = f / (R / 4), r = 4 * (f % (R / 4));
    }

    /* The block at (r0, k0) of an operand stored with leading dimension ld, rows < rows,
     * k < k_end: fp32 values, or bf16 values (T = uint16_t, held as the fp32 they are). vec:
     * aligned groups (16 or 8 bytes; then a group is wholly inside or outside). */
    template <class T>
    __device__ __forceinline__ void load(const T *p, long ld, int r0, int rows, int k0, int k_end, bool vec) {
        constexpr bool BF16 = sizeof(T) == 2;
#pragma unroll
        for (int i = 0; i < GROUPS; i++) {
            int r, k;
            at(i, r, k);
            r += r0, k += k0;
            const T *q = p + (K_CONTIG ? (long)r * ld + k : (long)k * ld + r);
            if (vec && (K_CONTIG ? r < rows && k < k_end : k < k_end && r < rows)) {
                if constexpr (BF16) {
                    const uint2 w = *reinterpret_cast<const uint2 *>(q);
                    v[i][0] = w.x << 16, v[i][1] = w.x & 0xffff0000u, v[i][2] = w.y << 16, v[i][3] = w.y & 0xffff0000u;
                } else {
                    const uint4 w = *reinterpret_cast<const uint4 *>(q);
                    v[i][0] = w.x, v[i][1] = w.y, v[i][2] = w.z, v[i][3] = w.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const bool in = K_CONTIG ? r < rows && k + j < k_end : k < k_end && r + j < rows;
                    v[i][j] = in && !vec ? bits(q[j]) : 0u;
                }
            }
        }
    }

    /* The block, split, into three planes plane_bytes apart; off(r, k) is the byte offset of
     * element (r, k) in a plane (a group's 4 elements are contiguous there). */
    template <class F>
    __device__ __forceinline__ void store(unsigned char *planes, int plane_bytes, F off) const {
#pragma unroll
        for (int i = 0; i < GROUPS; i++) {
            int r, k;
            at(i, r, k);
            uint32_t s[4][3];
#pragma unroll
            for (int j = 0; j < 4; j++) split3(__uint_as_float(v[i][j]), s[j][0], s[j][1], s[j][2]);
            unsigned char *d = planes + off(r, k);
#pragma unroll
            for (int p = 0; p < 3; p++)
                *reinterpret_cast<uint2 *>(d + p * plane_bytes) = make_uint2(pack_hi(s[0][p], s[1][p]), pack_hi(s[2][p], s[3][p]));
        }
    }
};

/* The tensor cores' fp32 additions truncate, so their error grows with the depth they add over
 * (2.75e-5 relative at 4096 deep, measured 2026-11-30 (s5)): every PROMOTE_K of K the kernels add
 * their accumulators into a second set in IEEE arithmetic and restart them from zero. */
constexpr int PROMOTE_K = 256;

/* sum += acc; acc = 0 (the wgmma kernel fences acc around it: mok_fence_acc). */
template <int V>
__device__ __forceinline__ void promote(float (&sum)[V], float (&acc)[V]) {
#pragma unroll
    for (int i = 0; i < V; i++) sum[i] += acc[i], acc[i] = 0.0f;
}

/* Where a block's results go: C = alpha acc + beta C, or (chunks) the chunk's partial alpha acc.
 * A thread's results come in pairs of adjacent columns (v[2j], v[2j + 1] at (m[2j], n[2j]) and
 * n[2j] + 1: both kernels' accumulator layouts), written and read as 8 bytes where `pairs` (N
 * even, the destination 8-byte aligned): whole 32-byte sectors a warp instruction. The reads of C
 * go in rounds of 16 values, each round's before its writes, so that none waits on a store to the
 * same array before it: beside the Hopper kernel's accumulators, rounds of 32 spill more and ran
 * slower (2026-11-30 (s13) in docs/perf-notes.md). */
struct Out {
    float *out;
    int M, N;
    float alpha, beta;
    bool add, pairs;

    template <int V>
    __device__ __forceinline__ void put(const int (&m)[V], const int (&n)[V], const float (&v)[V]) const {
        constexpr int G = V < 16 ? V : 16;
        static_assert(V % G == 0 && G % 2 == 0, "results in whole rounds of pairs");
#pragma unroll
        for (int g = 0; g < V; g += G) {
            float old[G];
#pragma unroll
            for (int j = 0; j < G; j += 2) {
                const int i = g + j;
                const bool in0 = m[i] < M && n[i] < N, in1 = m[i] < M && n[i] + 1 < N;
                const float *q = out + (size_t)m[i] * N + n[i];
                if (add && pairs && in1) {
                    const float2 x = *reinterpret_cast<const float2 *>(q);
                    old[j] = x.x, old[j + 1] = x.y;
                } else {
                    old[j] = add && in0 ? q[0] : 0.0f, old[j + 1] = add && in1 ? q[1] : 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < G; j += 2) {
                const int i = g + j;
                const bool in0 = m[i] < M && n[i] < N, in1 = m[i] < M && n[i] + 1 < N;
                float *q = out + (size_t)m[i] * N + n[i];
                const float r0 = add ? __fmaf_rn(beta, old[j], alpha * v[i]) : alpha * v[i];
                const float r1 = add ? __fmaf_rn(beta, old[j + 1], alpha * v[i + 1]) : alpha * v[i + 1];
                if (pairs && in1) {
                    *reinterpret_cast<float2 *>(q) = make_float2(r0, r1);
                } else {
                    if (in0) q[0] = r0;
                    if (in1) q[1] = r1;
                }
            }
        }
    }
};

/* Chunk z's destination: C itself, or (split) its partial. */
__device__ __forceinline__ Out out_of(float *C, float *parts, int M, int N, float alpha, float beta, int z, bool split) {
    float *out = split ? parts + (size_t)z * M * N : C;
    return Out{out, M, N, alpha, beta, !split && beta != 0.0f, N % 2 == 0 && ((uintptr_t)out & 7) == 0};
}

/* ------------------------------------------------------------------------------------------------
 * Hopper: wgmma, A from registers
 * ---------------------------------------------------------------------------------------------- */

constexpr int WG_BM = 128, WG_BK = 64, WG_STEPS = WG_BK / 16;
constexpr int WG_PANEL = 64 * 64 * 2;                 /* bytes: 64 rows of 128 */
constexpr int WG_TILE = 2 * WG_PANEL;                 /* one plane of B: 128 x 64 bf16 */
constexpr int WG_STAGE = 3 * WG_TILE;                 /* B's three planes */
constexpr int WG_STAGES = 4;                          /* B is copied two K blocks ahead (the kernel says why 4) */
constexpr int WG_SMEM = WG_STAGES * WG_STAGE + 1024; /* and room to align to 1024 */

/* Byte offset of element (mn, k) in a 128 x 64 plane tile, 128-byte swizzled (tile_wgmma.cuh):
 * K-major, row mn of 64 K; or MN-major, 64-wide panels of 64 K rows. */
template <bool K_MAJOR>
__device__ __forceinline__ int wg_offset(int mn, int k) {
    const int row = K_MAJOR ? mn : (mn >> 6) * 64 + k, c = K_MAJOR ? k : mn & 63;
    return row * 128 + ((((c >> 3) ^ row) & 7) << 4) + (c & 7) * 2;
}

/* A block of an operand given as NP planes (ps elements apart, laid out as the fp32 with leading
 * dimension ld; NP 1: bf16 values) into a stage's plane tiles: 16-byte chunks by cp.async (zeros
 * outside), or element by element where vec is off (ld % 8, alignment). */
template <int R, bool K_MAJOR, int NP>
__device__ __forceinline__ void wg_copy_planes(const uint16_t *p, long ps, long ld, int r0, int rows, int k0, int k_end,
                                               bool vec, unsigned char *tile) {
    constexpr int CHUNKS = R * WG_BK / 8; /* a plane's, each 8 elements along the contiguous dimension */
    /* chunk i of this thread: its byte offset in a plane tile, its row and k in the operand */
    auto at = [&](int i, int &gr, int &gk) {
        const int f = (int)threadIdx.x + THREADS * i;
        const int r = K_MAJOR ? f / (WG_BK / 8) : 8 * (f % (R / 8)), k = K_MAJOR ? 8 * (f % (WG_BK / 8)) : f / (R / 8);
        gr = r0 + r, gk = k0 + k;
        return wg_offset<K_MAJOR>(r, k);
    };
    if (vec) { /* ld % 8 == 0: a chunk is wholly inside or wholly outside (one test of vec, not one a chunk) */
#pragma unroll
        for (int i = 0; i < CHUNKS / THREADS; i++) {
            int gr, gk;
            const int off = at(i, gr, gk);
            const bool in = gr < rows && gk < k_end;
            const long base = K_MAJOR ? (long)gr * ld + gk : (long)gk * ld + gr;
#pragma unroll
            for (int pl = 0; pl < NP; pl++) mok_cp_async16(tile + pl * WG_TILE + off, in ? p + pl * ps + base : p, in);
        }
        return;
    }
#pragma unroll 1
    for (int i = 0; i < CHUNKS / THREADS; i++) {
        int gr, gk;
        const int off = at(i, gr, gk);
        const long base = K_MAJOR ? (long)gr * ld + gk : (long)gk * ld + gr;
#pragma unroll
        for (int pl = 0; pl < NP; pl++) {
            const uint16_t *q = p + pl * ps + base;
            uint32_t e[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const bool in = K_MAJOR ? gr < rows && gk + j < k_end : gk < k_end && gr + j < rows;
                e[j] = in ? q[j] : 0u;
            }
            *reinterpret_cast<uint4 *>(tile + pl * WG_TILE + off) =
                make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
        }
    }
}

/* How an operand reaches the Hopper kernel: its fp32 values (split there), its three planes, or bf16
 * values (one plane: m and l are zero, so only the products of h run). */
enum OpKind { OP_F32 = 0, OP_PLANES = 1, OP_BF16 = 2 };

/* B's K block into a stage: its planes (or bf16 values) copied, or its fp32 read and split here. */
template <bool K_MAJOR, int BK>
__device__ __forceinline__ void wg_fill_b(const float *f, const uint16_t *pl, long ps, long ld, int n0, int cols,
                                          int k0, int k_end, bool vec, unsigned char *stage) {
    if constexpr (BK != OP_F32) {
        wg_copy_planes<TILE_N, K_MAJOR, BK == OP_PLANES ? 3 : 1>(pl, ps, ld, n0, cols, k0, k_end, vec, stage);
    } else { /* in two halves of 64 columns: half the registers beside A's */
#pragma unroll
        for (int h = 0; h < TILE_N; h += 64) {
            Loader<64, WG_BK, K_MAJOR> regs;
            regs.load(f, ld, n0 + h, cols, k0, k_end, vec);
            regs.store(stage, WG_TILE, [h](int r, int k) { return wg_offset<K_MAJOR>(h + r, k); });
        }
    }
}

/* A thread's part of A in one 16-wide k step, for wgmma's register operand (flash_sm90.cuh): pair i
 * (i < 4) holds row r + 8 (i & 1), columns c + 8 (i >> 1) and the one after (c = k + 2 (lane % 4)).
 * Read from the fp32 values (v[2 i + j], split when the step is multiplied) or from the planes
 * (v[4 p + i], plane p's pair, already bf16; one plane for OP_BF16). A_T: A stored (K, M). A
 * transposed A's bf16 pair is two loads a row apart: each value in its own register (v[2 i + j]),
 * joined when multiplied, as the fp32 values are split then; joined at the load, the thread waited
 * there for the load (its router weight-gradient GEMM ran slower than from fp32, s32 r2). */
template <bool A_T, int AK>
struct AStep {
    static constexpr int NP = AK == OP_PLANES ? 3 : 1;       /* planes read (OP_F32: none) */
    static constexpr bool JOIN_LATE = A_T && AK == OP_BF16; /* v[2 i + j]: value j of pair i */
    uint32_t v[AK == OP_F32 || JOIN_LATE ? 8 : 4 * NP];

    /* fast: both rows and the whole K block inside, and (K-major) vec: no per-element tests, which cost more
     * instructions than the loads and the split */
    __device__ __forceinline__ void load(const float *f, const uint16_t *pl, long ps, long ld, int r, int rows, int c,
                                         int k_end, bool vec, bool fast) {
        if (fast) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r + 8 * (i & 1), col = c + 8 * (i >> 1);
                const long at0 = A_T ? (long)col * ld + row : (long)row * ld + col, at1 = A_T ? at0 + ld : at0 + 1;
                if constexpr (JOIN_LATE) {
                    v[2 * i] = pl[at0], v[2 * i + 1] = pl[at1];
                } else if constexpr (AK != OP_F32) {
#pragma unroll
                    for (int p = 0; p < NP; p++) {
                        const uint16_t *q = pl + p * ps;
                        v[4 * p + i] = A_T ? (uint32_t)q[at0] | (uint32_t)q[at1] << 16
                                           : *reinterpret_cast<const uint32_t *>(q + at0);
                    }
                } else if constexpr (A_T) {
                    v[2 * i] = __float_as_uint(f[at0]), v[2 * i + 1] = __float_as_uint(f[at1]);
                } else {
                    const float2 x = *reinterpret_cast<const float2 *>(f + at0);
                    v[2 * i] = __float_as_uint(x.x), v[2 * i + 1] = __float_as_uint(x.y);
                }
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r + 8 * (i & 1), col = c + 8 * (i >> 1);
            const bool in0 = row < rows && col < k_end, in1 = row < rows && col + 1 < k_end;
            const long at0 = A_T ? (long)col * ld + row : (long)row * ld + col, at1 = A_T ? at0 + ld : at0 + 1;
            if constexpr (JOIN_LATE) {
                v[2 * i] = in0 ? pl[at0] : 0u;
                v[2 * i + 1] = in1 ? pl[at1] : 0u;
            } else if constexpr (AK != OP_F32) {
#pragma unroll
                for (int p = 0; p < NP; p++) {
                    const uint16_t *q = pl + p * ps;
                    if (!A_T && vec && in1) /* ld and ps even, 16-byte aligned planes: the pair is one word */
                        v[4 * p + i] = *reinterpret_cast<const uint32_t *>(q + at0);
                    else
                        v[4 * p + i] = (in0 ? (uint32_t)q[at0] : 0u) | (in1 ? (uint32_t)q[at1] : 0u) << 16;
                }
            } else if (!A_T && vec && in1) { /* ld % 4 == 0, 16-byte aligned: the pair is 8 aligned bytes */
                const float2 x = *reinterpret_cast<const float2 *>(f + at0);
                v[2 * i] = __float_as_uint(x.x), v[2 * i + 1] = __float_as_uint(x.y);
            } else {
                v[2 * i] = in0 ? __float_as_uint(f[at0]) : 0u;
                v[2 * i + 1] = in1 ? __float_as_uint(f[at1]) : 0u;
            }
        }
    }

    /* the planes' registers: a[p] for plane p (h, m, l; h only for OP_BF16) */
    __device__ __forceinline__ void frag(uint32_t (&a)[3][4]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (JOIN_LATE) {
                a[0][i] = __byte_perm(v[2 * i], v[2 * i + 1], 0x5410); /* the low halves: (v[2 i], v[2 i + 1]) */
            } else if constexpr (AK != OP_F32) { /* a copy the compiler keeps: else the wgmma would read v, which
                                                   the next load_a rewrites while it runs, and ptxas serializes every
                                                   wgmma to allow that */
#pragma unroll
                for (int p = 0; p < NP; p++) asm volatile("mov.b32 %0, %1;" : "=r"(a[p][i]) : "r"(v[4 * p + i]));
            } else {
                uint32_t s0[3], s1[3];
                split3(__uint_as_float(v[2 * i]), s0[0], s0[1], s0[2]);
                split3(__uint_as_float(v[2 * i + 1]), s1[0], s1[1], s1[2]);
#pragma unroll
                for (int p = 0; p < 3; p++) a[p][i] = pack_hi(s0[p], s1[p]);
            }
        }
    }
};

/* The work of one block of the Hopper kernel: output tile (m0, n0) over K chunk [k_begin, k_end),
 * from item i = (chunk * m_tiles + m_tile) * n_tiles + n_tile (neighbours share A's rows). */
struct WgItem {
    int m0, n0, z, k_begin, k_end;
    __device__ __forceinline__ WgItem(int i, int n_tiles, int m_tiles, int kc, int K) {
        const int nt = i % n_tiles, rest = i / n_tiles;
        m0 = (rest % m_tiles) * WG_BM, n0 = nt * TILE_N, z = rest / m_tiles;
        k_begin = z * kc, k_end = min(K, k_begin + kc);
    }
};

/* A place in a block's stream of K blocks: item i (b, b + grid, ...), K block k0 of it. */
struct WgPos {
    int i, k0;
    WgItem it;
    __device__ __forceinline__ WgPos(int i_, int n_tiles, int m_tiles, int kc, int K)
        : i(i_), k0(0), it(i_, n_tiles, m_tiles, kc, K) {
        k0 = it.k_begin;
    }
    __device__ __forceinline__ bool last() const { return k0 + WG_BK >= it.k_end; }
    __device__ __forceinline__ void next(int n_tiles, int m_tiles, int kc, int K) {
        if (last()) *this = WgPos(i + (int)gridDim.x, n_tiles, m_tiles, kc, K);
        else k0 += WG_BK;
    }
};

/* A_T: A stored (K, M); B_T: B stored (N, K); AK, BK: how A and B come (OpKind). Persistent:
 * block b takes items b, b + gridDim.x, ...; their K blocks form one stream. Each thread reads
 * its part of A into registers ahead of use (RING k steps), and multiplies from registers
 * (wgmma's RS form): no shared-memory traffic for A. B goes through WG_STAGES shared-memory stages, copied
 * two K blocks ahead into the stage that K block t - 2 used: both warpgroups finished it before
 * the barrier of block t (each waits for its products two k steps back before the next step).
 * A finished tile's results go out while the next tile's first products run. WG_SMEM bytes. */
template <bool A_T, bool B_T, int AK, int BK>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_f32x3_sm90_kernel(int M, int N, int K, int kc, int n_tiles, int m_tiles, int chunks,
                           const float *__restrict__ A, const float *__restrict__ B, float *C, float alpha, float beta,
                           float *__restrict__ parts, bool vec_a, bool vec_b, const uint16_t *__restrict__ planes_a,
                           long ps_a, const uint16_t *__restrict__ planes_b, long ps_b) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (mok_smem_u32(smem_raw) & 1023)) & 1023);
    const int items = n_tiles * m_tiles * chunks;
    if ((int)blockIdx.x >= items) return;
    const long lda = A_T ? M : K, ldb = B_T ? K : N;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 7;
    /* this thread's first row of A within a tile, and its column within a k step */
    const int a_row = 64 * w + 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), a_col = 2 * (lane & 3);
    /* B's descriptors: K-major planes step 32 bytes a k16, N-major 2048 (in 16-byte units) */
    constexpr unsigned lbo_b = B_T ? 16 : WG_PANEL;
    constexpr int step_b = B_T ? 2 : 128;
    float acc[64], sum[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = sum[i] = 0.0f;
    /* A's next RING k steps (their fp32 values, or the planes: 12 registers a step, so only two ahead) */
    constexpr int RING = AK == OP_PLANES ? 2 : WG_STEPS;
    AStep<A_T, AK> ring[RING];
    uint32_t fr[2][3][4]; /* the planes of the k step multiplied, and of the one before */
    WgPos cur(blockIdx.x, n_tiles, m_tiles, kc, K), pa = cur, pb = cur;
    auto load_a = [&](const WgPos &at, int s) { /* k step s of K block `at` into ring[s % RING] */
        const int r = at.it.m0 + a_row;
        const bool fast = (A_T || vec_a) && r + 8 < M && at.k0 + WG_BK <= at.it.k_end;
        ring[s % RING].load(A, planes_a, ps_a, lda, r, M, at.k0 + 16 * s + a_col, at.it.k_end, vec_a, fast);
    };
    auto fill_b = [&](int t) {
        if (pb.i < items)
            wg_fill_b<B_T, BK>(B, planes_b, ps_b, ldb, pb.it.n0, N, pb.k0, pb.it.k_end, vec_b,
                               smem + (t % WG_STAGES) * WG_STAGE);
        mok_cp_async_commit(); /* an empty group past the end keeps the count */
        pb.next(n_tiles, m_tiles, kc, K);
    };
    fill_b(0);
    fill_b(1);
#pragma unroll
    for (int s = 0; s < RING; s++) load_a(cur, s);
    pa.next(n_tiles, m_tiles, kc, K); /* the K block after cur */
    const bool read_c = chunks == 1 && beta != 0.0f; /* the results are added to C's */
    bool pending = false;                            /* a finished tile's results in sum, at out */
    WgItem out = cur.it;
    auto flush = [&]() { /* d[4i + e]: row 16 (warp % 4) + lane / 4 + 8 (e >= 2), column 8i + 2 (lane % 4) + (e & 1) */
        const int row = out.m0 + a_row;
        int rows[64], cols[64];
#pragma unroll
        for (int e = 0; e < 64; e++)
            rows[e] = row + 8 * ((e & 3) >> 1), cols[e] = out.n0 + 8 * (e >> 2) + 2 * (lane & 3) + (e & 1);
        out_of(C, parts, M, N, alpha, beta, out.z, chunks > 1).put(rows, cols, sum);
    };
    for (int t = 0;; t++) {
        unsigned char *st = smem + (t % WG_STAGES) * WG_STAGE;
        mok_cp_async_wait1(); /* this thread's copies of block t (block t + 1's may be in flight) */
        mok_fence_proxy_async_shared(); /* B's planes, to the tensor cores */
        __syncthreads();
        if (read_c && cur.last()) { /* this tile's lines of C into L2 now: its results read them a block later */
            const int q = lane & 3, m = cur.it.m0 + a_row + 8 * (q & 1);
#pragma unroll
            for (int j = 0; j < 2; j++) { /* four lanes, the 8 lines of 32 values of their two rows */
                const int n = cur.it.n0 + 32 * (2 * (q >> 1) + j);
                if (m < M && n < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(C + (size_t)m * N + n));
            }
        }
        /* (A plane, B plane), smallest products first: l h, m m, m h, h l, h m, h h; a bf16 operand's m and l
         * are zero, so the sums skip the products of them (adding a zero product changes no accumulator's bits) */
        const int plane_a[6] = {2, 1, 1, 0, 0, 0}, plane_b[6] = {0, 1, 0, 2, 1, 0};
#pragma unroll
        for (int s = 0; s < WG_STEPS; s++) {
            mok_wgmma_wait<1>(); /* the products of two k steps back, which read fr[s & 1], are done */
            ring[s % RING].frag(fr[s & 1]);
            if (s + RING < WG_STEPS) load_a(cur, s + RING);
            else if (pa.i < items) load_a(pa, s + RING - WG_STEPS);
            mok_wgmma_fence();
#pragma unroll
            for (int q = 0; q < 6; q++) {
                if ((AK == OP_BF16 && plane_a[q] != 0) || (BK == OP_BF16 && plane_b[q] != 0)) continue;
                const uint64_t db = mok_wgmma_desc(st + plane_b[q] * WG_TILE, lbo_b, 1024) + step_b * s;
                flash_wgmma_rs<!B_T>(acc, fr[s & 1][plane_a[q]], db, 1);
            }
            mok_wgmma_commit();
        }
        pa.next(n_tiles, m_tiles, kc, K);
        fill_b(t + 2);
        if (pending) { /* the previous tile's results, while this block's products run */
            flush();
#pragma unroll
            for (int e = 0; e < 64; e++) sum[e] = 0.0f;
            pending = false;
        }
        const bool last = cur.last();
        if (last || (cur.k0 + WG_BK - cur.it.k_begin) % PROMOTE_K == 0) {
            mok_wgmma_wait<0>();
            mok_fence_acc(acc);
            promote(sum, acc);
            mok_fence_acc(acc);
        }
        if (last) pending = true, out = cur.it;
        cur.next(n_tiles, m_tiles, kc, K);
        if (cur.i >= items) break;
    }
    mok_wgmma_wait<0>(); /* done at the last promotion: said again for the compiler, which reuses acc's registers */
    flush();
#else
    asm volatile("trap;");
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Any GPU: mma.sync
 * ---------------------------------------------------------------------------------------------- */

constexpr int MS_BM = 64, MS_BK = 32;
constexpr int KPITCH = MS_BK + 8; /* planes with K contiguous: rows of 80 bytes, conflict-free ldmatrix */

/* A plane tile of R rows x MS_BK: K_CONTIG plane[r * KPITCH + k], else plane[k * (R + 8) + r]
 * (rows of 144 or 272 bytes: conflict-free ldmatrix.trans). */
template <int R, bool K_CONTIG>
struct MsPlane {
    static constexpr int PITCH = K_CONTIG ? KPITCH : R + 8;
    static constexpr int SIZE = K_CONTIG ? R * KPITCH : MS_BK * (R + 8);
};

/* The loaded block, split, into the three planes of one operand. */
template <int R, bool K_CONTIG, class L>
__device__ __forceinline__ void ms_store(const L &ld, __nv_bfloat16 *planes) {
    typedef MsPlane<R, K_CONTIG> P;
    ld.store(reinterpret_cast<unsigned char *>(planes), P::SIZE * 2,
             [](int r, int k) { return 2 * (K_CONTIG ? r * P::PITCH + k : k * P::PITCH + r); });
}

/* A fragment (m16 x k16) at (m, kk) of a plane; B fragments of two n8 tiles (n16 x k16) at (n, kk). */
template <bool K_CONTIG, int PITCH>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const __nv_bfloat16 *plane, int m, int kk) {
    const int lane = threadIdx.x & 31, i = lane >> 3;
    if (K_CONTIG) mok_ldmatrix_x4(a, plane + (m + (lane & 15)) * PITCH + kk + (lane >> 4) * 8);
    else mok_ldmatrix_x4_trans(a, plane + (kk + (lane & 7) + ((i >> 1) << 3)) * PITCH + m + ((i & 1) << 3));
}
template <bool K_CONTIG, int PITCH>
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const __nv_bfloat16 *plane, int n, int kk) {
    const int lane = threadIdx.x & 31, i = lane >> 3;
    if (K_CONTIG) mok_ldmatrix_x4(b, plane + (n + (lane & 7) + ((i >> 1) << 3)) * PITCH + kk + ((i & 1) << 3));
    else mok_ldmatrix_x4_trans(b, plane + (kk + (lane & 7) + ((i & 1) << 3)) * PITCH + n + ((i >> 1) << 3));
}

/* One block an SM: the second accumulator set takes it to ~160 registers a thread. A16, B16: the operand comes as
 * bf16 values (A16, B16 the pointers; A, B unused). */
template <bool A_T, bool B_T, bool A_BF16, bool B_BF16>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_f32x3_mma_kernel(int M, int N, int K, int kc, const float *__restrict__ A, const uint16_t *__restrict__ A16,
                          const float *__restrict__ B, const uint16_t *__restrict__ B16, float *C, float alpha,
                          float beta, float *__restrict__ parts, bool vec_a, bool vec_b) {
    typedef MsPlane<MS_BM, !A_T> PA;
    typedef MsPlane<TILE_N, B_T> PB;
    __shared__ __align__(16) __nv_bfloat16 sa[3 * PA::SIZE], sb[3 * PB::SIZE];
    const int m0 = blockIdx.x * MS_BM, n0 = blockIdx.y * TILE_N, z = blockIdx.z; /* M tiles on x: many */
    const int k_begin = z * kc, k_end = min(K, k_begin + kc);
    const long lda = A_T ? M : K, ldb = B_T ? K : N;
    const int warp = threadIdx.x >> 5, wm = (warp >> 2) * 32, wn = (warp & 3) * 32;
    float acc[32] = {}, sum[32] = {}; /* acc[16 mt + 4 nt + e]: m16 tile mt, n8 tile nt */
    Loader<MS_BM, MS_BK, !A_T> la;
    Loader<TILE_N, MS_BK, B_T> lb;
    auto load_a = [&](int k0) {
        if constexpr (A_BF16) la.load(A16, lda, m0, M, k0, k_end, vec_a);
        else la.load(A, lda, m0, M, k0, k_end, vec_a);
    };
    auto load_b = [&](int k0) {
        if constexpr (B_BF16) lb.load(B16, ldb, n0, N, k0, k_end, vec_b);
        else lb.load(B, ldb, n0, N, k0, k_end, vec_b);
    };
    load_a(k_begin);
    load_b(k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += MS_BK) {
        __syncthreads(); /* the last block's fragments are read */
        ms_store<MS_BM, !A_T>(la, sa);
        ms_store<TILE_N, B_T>(lb, sb);
        __syncthreads();
        if (k0 + MS_BK < k_end) {
            load_a(k0 + MS_BK);
            load_b(k0 + MS_BK);
        }
#pragma unroll
        for (int kk = 0; kk < MS_BK; kk += 16) {
            uint32_t b[3][4][2];
#pragma unroll
            for (int p = 0; p < 3; p++)
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t r[4];
                    frag_b<B_T, PB::PITCH>(r, sb + p * PB::SIZE, wn + 16 * np, kk);
                    b[p][2 * np][0] = r[0], b[p][2 * np][1] = r[1], b[p][2 * np + 1][0] = r[2], b[p][2 * np + 1][1] = r[3];
                }
            /* A's planes one at a time (registers), smallest first: l h; m m, m h; h l, h m, h h;
             * the eight accumulators innermost, so that consecutive MMAs do not wait on each other */
#pragma unroll
            for (int pa = 2; pa >= 0; pa--) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) frag_a<!A_T, PA::PITCH>(a[mt], sa + pa * PA::SIZE, wm + 16 * mt, kk);
#pragma unroll
                for (int pb = 2 - pa; pb >= 0; pb--)
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int nt = 0; nt < 4; nt++) mok_mma16816(acc + 16 * mt + 4 * nt, a[mt], b[pb][nt]);
            }
        }
        if ((k0 + MS_BK - k_begin) % PROMOTE_K == 0 || k0 + MS_BK >= k_end) promote(sum, acc);
    }
    const int lane = threadIdx.x & 31, g = lane >> 2, t2 = 2 * (lane & 3);
    int rows[32], cols[32];
#pragma unroll
    for (int i = 0; i < 32; i++) {
        const int mt = i >> 4, nt = (i >> 2) & 3, e = i & 3;
        rows[i] = m0 + wm + 16 * mt + g + 8 * (e >> 1), cols[i] = n0 + wn + 8 * nt + t2 + (e & 1);
    }
    out_of(C, parts, M, N, alpha, beta, blockIdx.z, gridDim.z > 1).put(rows, cols, sum);
}

/* ------------------------------------------------------------------------------------------------
 * Host side
 * ---------------------------------------------------------------------------------------------- */

constexpr int RULE_TILE_M = 128; /* the chunk rule counts 128 x 128 tiles (either kernel) */

int chunk_len(int K, int S, int bk) { return ((K + S - 1) / S + bk - 1) / bk * bk; }

typedef void (*MmaKernel)(int, int, int, int, const float *, const uint16_t *, const float *, const uint16_t *,
                          float *, float, float, float *, bool, bool);
typedef void (*Sm90Kernel)(int, int, int, int, int, int, int, const float *, const float *, float *, float, float,
                           float *, bool, bool, const uint16_t *, long, const uint16_t *, long);

/* Hopper variant I: bit 0 trans_a, bit 1 trans_b, then 4 (A's OpKind + 3 B's). */
constexpr int SM90_VARIANTS = 4 * 3 * 3;
template <int I> constexpr Sm90Kernel sm90_variant() {
    return gemm_f32x3_sm90_kernel<(I & 1) != 0, (I & 2) != 0, I / 4 % 3, I / 12>;
}
template <int... I> constexpr std::array<Sm90Kernel, sizeof...(I)> sm90_table(std::integer_sequence<int, I...>) {
    return {sm90_variant<I>()...};
}
const std::array<Sm90Kernel, SM90_VARIANTS> sm90_kernels = sm90_table(std::make_integer_sequence<int, SM90_VARIANTS>());
/* mma.sync variant I: bit 0 trans_a, bit 1 trans_b, bit 2 A given as bf16 values, bit 3 B. */
constexpr int MMA_VARIANTS = 16;
template <int I> constexpr MmaKernel mma_variant() {
    return gemm_f32x3_mma_kernel<(I & 1) != 0, (I & 2) != 0, (I & 4) != 0, (I & 8) != 0>;
}
template <int... I> constexpr std::array<MmaKernel, sizeof...(I)> mma_table(std::integer_sequence<int, I...>) {
    return {mma_variant<I>()...};
}
const std::array<MmaKernel, MMA_VARIANTS> mma_kernels = mma_table(std::make_integer_sequence<int, MMA_VARIANTS>());

bool aligned(const void *p, int bytes) { return ((uintptr_t)p & (uintptr_t)(bytes - 1)) == 0; }

/* The current device, learned once (the router calls these GEMMs three times a layer, and each
 * query is a host call): whether the Hopper kernels run on it, its multiprocessors, and which
 * Hopper variants have their shared-memory limit raised (an attribute set per device). */
struct DeviceInfo {
    bool known, wgmma;
    int sms;
    unsigned long long raised; /* bit v: variant v */
    static_assert(SM90_VARIANTS <= 64, "a bit a variant");
};
constexpr int kMaxDevices = 64;
DeviceInfo &device_info() {
    static DeviceInfo info[kMaxDevices];
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev >= kMaxDevices)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_gemm_f32x3: device %d, more than %d (internal)", dev, kMaxDevices);
    DeviceInfo &d = info[dev];
    if (!d.known) {
        d.wgmma = mok_sm90_available() != 0;
        cudaCheck(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
        d.known = true;
    }
    return d;
}

/* Hopper variant v ready to launch here; returns the device's multiprocessors. */
int sm90_ready(int v) {
    DeviceInfo &d = device_info();
    if (!(d.raised >> v & 1ull)) {
        cudaCheck(cudaFuncSetAttribute(sm90_kernels[v], cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));
        d.raised |= 1ull << v;
    }
    return d.sms;
}

__global__ void split_kernel(uint16_t *__restrict__ planes, const float *__restrict__ x, long n) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        uint32_t h, m, l;
        split3(x[i], h, m, l);
        planes[i] = (uint16_t)(h >> 16), planes[n + i] = (uint16_t)(m >> 16), planes[2 * n + i] = (uint16_t)(l >> 16);
    }
}

} // namespace

/* Partials of at most this many waves of 128 x 128 tiles: the scratch's size. */
constexpr int RULE_PARTIAL_WAVES = 4;

extern "C" int gpu_gemm_f32x3_chunks(int M, int N, int K, int sms) {
    const long tiles = (long)((M + RULE_TILE_M - 1) / RULE_TILE_M) * ((N + TILE_N - 1) / TILE_N);
    if (tiles <= 0 || sms <= 0) return 1;
    /* the time of S chunks, in whole-K tiles run one after another on an SM: ceil(S T / sms) / S */
    long best = 1;
    double best_time = (double)((tiles + sms - 1) / sms);
    const double cap = (double)RULE_PARTIAL_WAVES * sms * RULE_TILE_M * TILE_N;
    for (long S = 2; S <= 16 && K / S >= 256 && (double)S * M * N <= cap; S++) {
        const double time = (double)((S * tiles + sms - 1) / sms) / (double)S;
        if (time < 0.95 * best_time) best = S, best_time = time; /* more chunks only for 5 % less */
    }
    if (best == 1) return 1;
    const int kc = chunk_len(K, (int)best, WG_BK);
    return (K + kc - 1) / kc;
}

extern "C" size_t gpu_gemm_f32x3_scratch_bytes(int sms) {
    return (size_t)RULE_PARTIAL_WAVES * sms * RULE_TILE_M * TILE_N * sizeof(float);
}

extern "C" void gpu_split_f32x3(bf16_t *planes, const float *x, long n, cudaStream_t stream) {
    if (n <= 0) return;
    const long blocks = (n + 255) / 256;
    split_kernel<<<(unsigned)(blocks < 65535L * 16 ? blocks : 65535L * 16), 256, 0, stream>>>(planes, x, n);
    cudaCheckLaunch();
}

extern "C" void gpu_gemm_f32x3_with(int impl, int trans_a, int trans_b, int M, int N, int K, GemmF32x3Operand A,
                                    GemmF32x3Operand B, float *C, float alpha, float beta, int S, float *scratch,
                                    cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    /* the kernels' int index arithmetic runs up to a tile (and a K block) past the edges */
    if (M > INT_MAX - 256 || N > INT_MAX - 256 || K > INT_MAX - 256)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_gemm_f32x3: %d x %d x %d is too large (internal)", M, N, K);
    const bool wg = impl == GEMM_F32X3_WGMMA || (impl == GEMM_F32X3_AUTO && device_info().wgmma);
    /* chunks cut at multiples of the wgmma K block, so both kernels sum the same partials */
    const int kc = K > 0 ? chunk_len(K, S < 1 ? 1 : S, WG_BK) : WG_BK;
    const int chunks = K > 0 ? (K + kc - 1) / kc : 1;
    const int bm = wg ? WG_BM : MS_BM, n_tiles = (N + TILE_N - 1) / TILE_N, m_tiles = (M + bm - 1) / bm;
    const long lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const int v = (trans_a ? 1 : 0) | (trans_b ? 2 : 0);
    /* the grids' limits, and room for the Hopper kernel's next item (i + grid) */
    if ((long)n_tiles * m_tiles * chunks > INT_MAX / 2 || n_tiles > 65535 || chunks > 65535)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_gemm_f32x3: a %d x %d output in %d chunks is too large (internal)", M, N,
                 chunks);
    const bool a_bf16 = A.f32 == NULL, b_bf16 = B.f32 == NULL;
    if ((a_bf16 && A.planes == NULL) || (b_bf16 && B.planes == NULL))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_gemm_f32x3: an operand without values (internal)");
    if (wg) {
        /* planes (or bf16 values, one plane): 16-byte chunks of 8 elements where the layout allows, else element by
         * element */
        const bool pa = A.planes != NULL, pb = B.planes != NULL;
        const bool va = pa ? lda % 8 == 0 && (a_bf16 || A.plane_stride % 8 == 0) && aligned(A.planes, 16)
                           : lda % 4 == 0 && aligned(A.f32, 16);
        const bool vb = pb ? ldb % 8 == 0 && (b_bf16 || B.plane_stride % 8 == 0) && aligned(B.planes, 16)
                           : ldb % 4 == 0 && aligned(B.f32, 16);
        const int ak = a_bf16 ? OP_BF16 : pa ? OP_PLANES : OP_F32, bk = b_bf16 ? OP_BF16 : pb ? OP_PLANES : OP_F32;
        const int kv = v + 4 * (ak + 3 * bk), sms = sm90_ready(kv);
        const long items = (long)n_tiles * m_tiles * chunks;
        sm90_kernels[kv]<<<(unsigned)(items < sms ? items : sms), THREADS, WG_SMEM, stream>>>(
            M, N, K, kc, n_tiles, m_tiles, chunks, A.f32, B.f32, C, alpha, beta, scratch, va, vb, A.planes,
            A.plane_stride, B.planes, B.plane_stride);
    } else {
        /* groups of 4 elements: 16 bytes of fp32, 8 of bf16 */
        const bool va = lda % 4 == 0 && (a_bf16 ? aligned(A.planes, 8) : aligned(A.f32, 16));
        const bool vb = ldb % 4 == 0 && (b_bf16 ? aligned(B.planes, 8) : aligned(B.f32, 16));
        const dim3 grid((unsigned)m_tiles, (unsigned)n_tiles, (unsigned)chunks);
        mma_kernels[v + (a_bf16 ? 4 : 0) + (b_bf16 ? 8 : 0)]<<<grid, THREADS, 0, stream>>>(
            M, N, K, kc, A.f32, (const uint16_t *)A.planes, B.f32, (const uint16_t *)B.planes, C, alpha, beta, scratch,
            va, vb);
    }
    cudaCheckLaunch();
    if (chunks > 1) gpu_sum_partials_f32(C, scratch, (long)M * N, (long)M * N, chunks, beta, stream);
}

extern "C" void gpu_gemm_f32x3(int trans_a, int trans_b, int M, int N, int K, GemmF32x3Operand A, GemmF32x3Operand B,
                               float *C, float alpha, float beta, int S, float *scratch, cudaStream_t stream) {
    gpu_gemm_f32x3_with(GEMM_F32X3_AUTO, trans_a, trans_b, M, N, K, A, B, C, alpha, beta, S, scratch, stream);
}
