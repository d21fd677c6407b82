/*
 * Flash attention with mma.sync.m16n8k16 (bf16 -> fp32), forward and backward (API and layouts in
 * flash_attention.h). Every tile goes global -> shared memory by cp.async (zero-filled past T),
 * shared -> registers by ldmatrix; shared rows are padded to D + 8 elements so the eight 16-byte
 * rows of an ldmatrix fall in different banks.
 *
 *  forward    one block per (query block of 128 rows, batch x query head); 4 warps, 32 rows each
 *             (two m16 slabs: every K/V fragment loaded from shared memory serves both). Key/value
 *             blocks of 64 rows (32 at D = 128), double-buffered. Rows' running max and sum in fp32;
 *             scores scaled by scale * log2 e so exp2 does the exponentials. On an H100/H200 with an
 *             sm_90a build, D = 128 runs the wgmma kernel of flash_attention_sm90.cu instead
 *             (flash_attention_forward_kernel).
 *  delta      rowsum(dout * out) per (b, h, t), one group of D/8 lanes per row and head.
 *  dK/dV      one block per (kv block of 128 rows, batch x kv head); 8 warps, 16 kv rows each.
 *             A warp computes the transposed products (S^T = K Q^T, dP^T = V dO^T), so P^T and
 *             dS^T stay in its registers and feed dV += P^T dO and dK += dS^T Q directly: no shared
 *             memory round trip, no exchange between warps. Loops over the group's query heads,
 *             then the query blocks of 64 from the diagonal on, in that fixed order, prefetching the
 *             next Q / dO / lse / delta tile while computing this one.
 *  dQ         one block per (query block of 64 rows, batch x query head); 4 warps, 16 rows each;
 *             loops over the key blocks of 64 up to the diagonal: dQ += dS K.
 *             On an H100/H200 with an sm_90a build, D = 64 and 128 run the wgmma backward of
 *             flash_attention_bwd_sm90.cu after delta instead of these two kernels (one pass, dQ
 *             summed in a fixed order: flash_attention_backward_kernel).
 * Causal: the blocks with no visible (t, u) are never loaded; a warp whose rows see none of a
 * block skips its mma (its results would be exact zeros: skipping changes no bit).
 */
#include "flash_attention.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_util.cuh"

namespace {

typedef __nv_bfloat16 bf16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ----

__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared; valid = false writes zeros (src is not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* This thread's copies but the newest group have landed (the newest may be empty). */
__device__ __forceinline__ void cp_async_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c += a (16 x 16, row) b (16 x 8, col). Accumulator element e of lane (g = lane/4, q = lane%4):
 * row g + 8*(e/2), column 2q + e%2. */
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- fragments of a padded shared tile (row-major, pitch P elements) ----
// Lane roles of ldmatrix.x4: lane l gives the address of row l % 8 of matrix l / 8.

/* The A operand (16 rows x 16 columns at (r0, c0)) of one m16n8k16. */
template <int P>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16 *tile, int r0, int c0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4(a, tile + (r0 + (lane & 15)) * P + c0 + (lane >> 4) * 8);
}

/* B operands of two n8 slabs where B = tile^T: tile rows n0..n0+15 are the n index, columns
 * c0..c0+15 the k index (K in S = Q K^T). b[0], b[1]: slab n0; b[2], b[3]: slab n0 + 8. */
template <int P>
__device__ __forceinline__ void frag_bt(uint32_t (&b)[4], const bf16 *tile, int n0, int c0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4(b, tile + (n0 + (lane >> 4) * 8 + (lane & 7)) * P + c0 + ((lane >> 3) & 1) * 8);
}

/* B operands of two n8 slabs where B = tile: rows k0..k0+15 are the k index, columns n0..n0+15 the
 * n index (V in O = P V). b[0], b[1]: slab n0; b[2], b[3]: slab n0 + 8. */
template <int P>
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const bf16 *tile, int k0, int n0) {
    const int lane = threadIdx.x & 31;
    ldsm_x4_t(b, tile + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * P + n0 + (lane >> 4) * 8);
}

/* acc[m] (MS accumulators of 16 x 8*NS) += A_m B^T: A_m = rows a_r0 + 16m.. of a_tile, columns
 * 0..K; B = rows b_n0..b_n0 + 8*NS of b_tile, columns 0..K (S = Q K^T and its relatives). Each B
 * fragment serves all MS slabs. Two k steps per iteration: fully unrolled, the scheduler hoists
 * every fragment load and the D = 128 kernels spill. */
template <int K, int MS, int NS, int P>
__device__ __forceinline__ void mma_abt(float (&acc)[MS][NS][4], const bf16 *a_tile, int a_r0, const bf16 *b_tile,
                                        int b_n0) {
#pragma unroll 2
    for (int kk = 0; kk < K; kk += 16) {
        uint32_t a[MS][4];
#pragma unroll
        for (int m = 0; m < MS; m++) frag_a<P>(a[m], a_tile, a_r0 + 16 * m, kk);
#pragma unroll
        for (int n = 0; n < NS; n += 2) {
            uint32_t b[4];
            frag_bt<P>(b, b_tile, b_n0 + n * 8, kk);
#pragma unroll
            for (int m = 0; m < MS; m++) {
                mma16816(acc[m][n], a[m], b[0], b[1]);
                mma16816(acc[m][n + 1], a[m], b[2], b[3]);
            }
        }
    }
}

/* acc[m] (16 x 8*NS) += A_m B with A_m in registers (16 x 16*KS as KS fragments, from pack_a) and
 * B = rows 0..16*KS of b_tile, columns 0..8*NS (O += P V and its relatives). */
template <int KS, int MS, int NS, int P>
__device__ __forceinline__ void mma_ab(float (&acc)[MS][NS][4], const uint32_t (&a)[MS][KS][4], const bf16 *b_tile) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int n = 0; n < NS; n += 2) {
            uint32_t b[4];
            frag_b<P>(b, b_tile, ks * 16, n * 8);
#pragma unroll
            for (int m = 0; m < MS; m++) {
                mma16816(acc[m][n], a[m][ks], b[0], b[1]);
                mma16816(acc[m][n + 1], a[m][ks], b[2], b[3]);
            }
        }
}

/* MS fp32 accumulators (16 x 8*NS) rounded to bf16 A fragments (16 x 16 each): the C layout of
 * slabs 2j, 2j+1 is the A layout of k block j. */
template <int MS, int NS>
__device__ __forceinline__ void pack_a(uint32_t (&a)[MS][NS / 2][4], const float (&c)[MS][NS][4]) {
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int j = 0; j < NS / 2; j++) {
            a[m][j][0] = pack_bf16x2(c[m][2 * j][0], c[m][2 * j][1]);
            a[m][j][1] = pack_bf16x2(c[m][2 * j][2], c[m][2 * j][3]);
            a[m][j][2] = pack_bf16x2(c[m][2 * j + 1][0], c[m][2 * j + 1][1]);
            a[m][j][3] = pack_bf16x2(c[m][2 * j + 1][2], c[m][2 * j + 1][3]);
        }
}

template <int MS, int NS>
__device__ __forceinline__ void zero(float (&c)[MS][NS][4]) {
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) c[m][n][e] = 0.f;
}

// ---- global -> shared ----

/* Rows r0..r0+R of one head (row r at src + r*ld) into tile[R][D + 8]; rows >= T become zeros. */
template <int R, int D, int THREADS>
__device__ __forceinline__ void load_rows(bf16 *tile, const bf16 *src, long ld, int r0, int T) {
    constexpr int CH = D / 8, N = R * CH;
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += THREADS) {
        const int i = i0 + threadIdx.x, r = i / CH, c = (i % CH) * 8;
        if (N % THREADS != 0 && i >= N) break;
        const bool ok = r0 + r < T;
        cp_async16(tile + r * (D + 8) + c, ok ? src + (long)(r0 + r) * ld + c : src, ok);
    }
}

/* n floats src[t0..t0+n) into dst; entries >= T become zeros. */
template <int N, int THREADS>
__device__ __forceinline__ void load_vec(float *dst, const float *src, int t0, int T) {
    for (int i = threadIdx.x; i < N; i += THREADS) {
        const bool ok = t0 + i < T;
        cp_async4(dst + i, ok ? src + t0 + i : src, ok);
    }
}

/* A warp's 16*MS x D accumulator rows (acc[m][d-slab][e], rows r0.. of the padded tile, which
 * only this warp reads) rounded to bf16 and written to global rows row0 + r < T (row r at
 * dst + r*ld), 16 bytes a store. */
template <int MS, int D>
__device__ __forceinline__ void store_rows(bf16 *tile, int r0, const float (&acc)[MS][D / 8][4], float mul, bf16 *dst,
                                           long ld, int row0, int T) {
    constexpr int P = D + 8, CH = D / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    __syncwarp();
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                *reinterpret_cast<uint32_t *>(tile + (r0 + 16 * m + g + 8 * hf) * P + 8 * n + 2 * q) =
                    pack_bf16x2(acc[m][n][2 * hf] * mul, acc[m][n][2 * hf + 1] * mul);
    __syncwarp();
    for (int i = lane; i < 16 * MS * CH; i += 32) {
        const int r = i / CH, c = (i % CH) * 8;
        if (row0 + r < T)
            *reinterpret_cast<uint4 *>(dst + (long)(row0 + r) * ld + c) =
                *reinterpret_cast<const uint4 *>(tile + (r0 + r) * P + c);
    }
}

struct Args {
    const bf16 *q, *k, *v, *dout;
    const bf16 *fwd_out;    // the forward's output, read by the backward
    bf16 *out, *dq, *dk, *dv;
    float *lse_out, *delta; // written by the forward, by the backward's first kernel
    const float *lse;
    int T, Hq, group;
    long ldq, ldkv; // row strides of q-like and kv-like tensors (elements)
    long ldg;       // of the gradient rows dq, dk, dv lie in (flash_attention_backward's layout)
    float scale, sl2; // 1/sqrt(D), and scale * log2 e
};

// ================================================================================================
// Forward

constexpr int kFwdBM = 128, kFwdThreads = 128;

/* Key block rows: 32 at D = 128 keeps a warp's 32 x 128 output accumulator, its 32 x BN scores
 * and their bf16 copy within 255 registers (64 spills about 130 bytes). */
template <int D>
constexpr int kFwdBN = D == 128 ? 32 : 64;

template <int D>
constexpr int fwd_smem_bytes() {
    return (kFwdBM + 4 * kFwdBN<D>) * (D + 8) * 2; // Q, then K and V in two stages each
}

template <int D>
__global__ void __launch_bounds__(kFwdThreads, 2) flash_fwd_kernel(const Args a) {
    constexpr int BN = kFwdBN<D>, P = D + 8, NS = BN / 8, DS = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sK = sQ + kFwdBM * P, *sV = sK + 2 * BN * P;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int T = a.T, bh = blockIdx.x, b = bh / a.Hq, h = bh % a.Hq;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kFwdBM; // the longest rows first
    const bf16 *Q = a.q + (long)b * T * a.ldq + (long)h * D;
    const bf16 *K = a.k + (long)b * T * a.ldkv + (long)(h / a.group) * D;
    const bf16 *V = a.v + (long)b * T * a.ldkv + (long)(h / a.group) * D;
    const int n_kb = (min(q0 + kFwdBM, T) - 1) / BN + 1; // key blocks with a visible entry
    const int w0 = q0 + 32 * warp;                      // this warp's first row

    load_rows<kFwdBM, D, kFwdThreads>(sQ, Q, a.ldq, q0, T);
    load_rows<BN, D, kFwdThreads>(sK, K, a.ldkv, 0, T);
    load_rows<BN, D, kFwdThreads>(sV, V, a.ldkv, 0, T);
    cp_async_commit();

    float o[2][DS][4], m[2][2], l[2][2]; // [m16 slab][half: row g or g + 8]
    zero(o);
#pragma unroll
    for (int i = 0; i < 2; i++) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.f;
    for (int j = 0; j < n_kb; j++) {
        const int k0 = j * BN;
        const bf16 *sKj = sK + (j & 1) * BN * P, *sVj = sV + (j & 1) * BN * P;
        if (j + 1 < n_kb) {
            load_rows<BN, D, kFwdThreads>(sK + ((j + 1) & 1) * BN * P, K, a.ldkv, k0 + BN, T);
            load_rows<BN, D, kFwdThreads>(sV + ((j + 1) & 1) * BN * P, V, a.ldkv, k0 + BN, T);
        }
        cp_async_commit();
        cp_async_wait_prev();
        __syncthreads();
        if (k0 <= w0 + 31) {
            const bool mask = k0 + BN - 1 > w0 || k0 + BN > T;
            float s[2][NS][4];
            zero(s);
            mma_abt<D, 2, NS, P>(s, sQ, 32 * warp, sKj, 0);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int t = w0 + 16 * i + g + 8 * hf;
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NS; n++)
#pragma unroll
                        for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                            const int u = k0 + 8 * n + 2 * qd + (e & 1);
                            if (mask && (u > t || u >= T)) s[i][n][e] = -INFINITY;
                            mx = fmaxf(mx, s[i][n][e]);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m[i][hf], mx * a.sl2);
                    const float base = m_new == -INFINITY ? 0.f : m_new; // a row with nothing visible yet
                    const float corr = exp2f(m[i][hf] - base);
                    m[i][hf] = m_new;
                    float rs = 0.f;
#pragma unroll
                    for (int n = 0; n < NS; n++)
#pragma unroll
                        for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                            s[i][n][e] = exp2f(fmaf(s[i][n][e], a.sl2, -base));
                            rs += s[i][n][e];
                        }
                    l[i][hf] = l[i][hf] * corr + rs;
#pragma unroll
                    for (int n = 0; n < DS; n++) o[i][n][2 * hf] *= corr, o[i][n][2 * hf + 1] *= corr;
                }
            uint32_t p[2][NS / 2][4];
            pack_a<2, NS>(p, s);
            mma_ab<NS / 2, 2, DS, P>(o, p, sVj);
        }
        __syncthreads(); // this stage is overwritten by the loads of iteration j + 1
    }

    // Row sums over the quad (fixed order), normalise, write out and lse.
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float sum = l[i][hf] + __shfl_xor_sync(0xffffffffu, l[i][hf], 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = 1.f / sum;
            const int t = w0 + 16 * i + g + 8 * hf;
            if (qd == 0 && t < T) a.lse_out[(long)bh * T + t] = (m[i][hf] + log2f(sum)) * kLn2;
#pragma unroll
            for (int n = 0; n < DS; n++) o[i][n][2 * hf] *= inv, o[i][n][2 * hf + 1] *= inv;
        }
    store_rows<2, D>(sQ, 32 * warp, o, 1.f, a.out + (long)b * T * a.ldq + (long)h * D, a.ldq, w0, T);
}

// ================================================================================================
// Backward: delta = rowsum(dout * out)

constexpr int kDeltaThreads = 256;

/* One item = (row n, head h) = n*Hq + h, D/8 lanes each with 8 elements; fixed shuffle tree. A
 * warp takes 32/(D/8) consecutive items per pass (its loop bound is uniform: the shuffles need
 * every lane). */
template <int D>
__global__ void flash_delta_kernel(const Args a, long items) {
    constexpr int L = D / 8, PER_WARP = 32 / L;
    const long warps = (long)gridDim.x * blockDim.x / 32;
    const int sub = threadIdx.x % L;
    for (long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32; w * PER_WARP < items; w += warps) {
        const long it = w * PER_WARP + (threadIdx.x & 31) / L;
        float acc = 0.f;
        if (it < items) {
            float x[8], y[8];
            load_bf16<8>(x, a.dout + it * D + sub * 8);
            load_bf16<8>(y, a.fwd_out + it * D + sub * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) acc = fmaf(x[e], y[e], acc);
        }
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (it < items && sub == 0) {
            const long n = it / a.Hq, t = n % a.T;
            const int h = (int)(it % a.Hq);
            a.delta[((n / a.T) * a.Hq + h) * a.T + t] = acc;
        }
    }
}

// ================================================================================================
// Backward: dK, dV

/* kv rows per block, query rows per step (one tile load), query columns per sub-step (the width
 * of a warp's S^T and dP^T: 32 keeps dK, dV, P^T and dP^T within 255 registers at D = 128). */
constexpr int kKvBN = 128, kKvBM = 64, kKvSub = 32, kKvThreads = 256;

template <int D>
constexpr int kv_smem_bytes() {
    return (2 * kKvBN + 4 * kKvBM) * (D + 8) * 2 + 4 * kKvBM * 4; // K, V; Q, dO x 2; lse, delta x 2
}

template <int D>
__global__ void __launch_bounds__(kKvThreads, 1) flash_bwd_dkdv_kernel(const Args a) {
    constexpr int P = D + 8, NS = kKvSub / 8, DS = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem), *sV = sK + kKvBN * P, *sQ = sV + kKvBN * P, *sdO = sQ + 2 * kKvBM * P;
    float *sL = reinterpret_cast<float *>(sdO + 2 * kKvBM * P), *sD = sL + 2 * kKvBM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int T = a.T, Hkv = a.Hq / a.group, b = blockIdx.x / Hkv, kvh = blockIdx.x % Hkv;
    const int kv0 = blockIdx.y * kKvBN;                               // the longest columns first
    const int qb0 = kv0 / kKvBM, n_qb = (T + kKvBM - 1) / kKvBM - qb0; // query blocks at or below
    const int steps = a.group * n_qb;
    const int u0 = kv0 + 16 * warp; // this warp's first kv row
    const long kv_off = (long)b * T * a.ldkv + (long)kvh * D;
    const bf16 *Qb = a.q + (long)b * T * a.ldq, *dOb = a.dout + (long)b * T * a.ldq;

    // Step s: query head kvh*group + s / n_qb, query block qb0 + s % n_qb.
    auto load_step = [&](int s) {
        const int h = kvh * a.group + s / n_qb, t0 = (qb0 + s % n_qb) * kKvBM, st = s & 1;
        const long vec = ((long)b * a.Hq + h) * T;
        load_rows<kKvBM, D, kKvThreads>(sQ + st * kKvBM * P, Qb + (long)h * D, a.ldq, t0, T);
        load_rows<kKvBM, D, kKvThreads>(sdO + st * kKvBM * P, dOb + (long)h * D, a.ldq, t0, T);
        load_vec<kKvBM, kKvThreads>(sL + st * kKvBM, a.lse + vec, t0, T);
        load_vec<kKvBM, kKvThreads>(sD + st * kKvBM, a.delta + vec, t0, T);
    };
    load_rows<kKvBN, D, kKvThreads>(sK, a.k + kv_off, a.ldkv, kv0, T);
    load_rows<kKvBN, D, kKvThreads>(sV, a.v + kv_off, a.ldkv, kv0, T);
    load_step(0);
    cp_async_commit();

    float dk[1][DS][4], dv[1][DS][4];
    zero(dk);
    zero(dv);
    for (int s = 0; s < steps; s++) {
        const int st = s & 1, t0 = (qb0 + s % n_qb) * kKvBM;
        if (s + 1 < steps) load_step(s + 1);
        cp_async_commit();
        cp_async_wait_prev();
        __syncthreads();
#pragma unroll
        for (int c0 = 0; c0 < kKvBM; c0 += kKvSub) {
            if (u0 > t0 + c0 + kKvSub - 1) continue; // every (u, t) of the warp masked
            const bf16 *q = sQ + (st * kKvBM + c0) * P, *dO = sdO + (st * kKvBM + c0) * P;
            const float *lse = sL + st * kKvBM + c0, *dl = sD + st * kKvBM + c0;
            float p[1][NS][4], ds[1][NS][4];
            zero(p);
            zero(ds);
            mma_abt<D, 1, NS, P>(p, sK, 16 * warp, q, 0);  // S^T
            mma_abt<D, 1, NS, P>(ds, sV, 16 * warp, dO, 0); // dP^T
            const bool mask = u0 + 15 > t0 + c0 || t0 + c0 + kKvSub > T;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 8 * n + 2 * qd + (e & 1), t = t0 + c0 + c, u = u0 + g + 8 * (e >> 1);
                    const float pr =
                        mask && (u > t || t >= T) ? 0.f : exp2f(fmaf(p[0][n][e], a.sl2, -lse[c] * kLog2e));
                    p[0][n][e] = pr;
                    ds[0][n][e] = pr * (ds[0][n][e] - dl[c]); // dS^T, unscaled
                }
            uint32_t pa[1][NS / 2][4], da[1][NS / 2][4];
            pack_a<1, NS>(pa, p);
            pack_a<1, NS>(da, ds);
            mma_ab<NS / 2, 1, DS, P>(dv, pa, dO);
            mma_ab<NS / 2, 1, DS, P>(dk, da, q);
        }
        __syncthreads(); // this stage is overwritten by the loads of step s + 1
    }
    const long g_off = (long)b * T * a.ldg + (long)kvh * D;
    store_rows<1, D>(sK, 16 * warp, dk, a.scale, a.dk + g_off, a.ldg, u0, T);
    store_rows<1, D>(sV, 16 * warp, dv, 1.f, a.dv + g_off, a.ldg, u0, T);
}

// ================================================================================================
// Backward: dQ

constexpr int kQBM = 64, kQBN = 64, kQThreads = 128;

template <int D>
constexpr int q_smem_bytes() {
    return (2 * kQBM + 4 * kQBN) * (D + 8) * 2; // Q, dO; K and V in two stages each
}

template <int D>
__global__ void __launch_bounds__(kQThreads, 2) flash_bwd_dq_kernel(const Args a) {
    constexpr int P = D + 8, NS = kQBN / 8, DS = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sdO = sQ + kQBM * P, *sK = sdO + kQBM * P, *sV = sK + 2 * kQBN * P;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int T = a.T, bh = blockIdx.x, b = bh / a.Hq, h = bh % a.Hq;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kQBM; // the longest rows first
    const long q_off = (long)b * T * a.ldq + (long)h * D;
    const bf16 *K = a.k + (long)b * T * a.ldkv + (long)(h / a.group) * D;
    const bf16 *V = a.v + (long)b * T * a.ldkv + (long)(h / a.group) * D;
    const int n_kb = (min(q0 + kQBM, T) - 1) / kQBN + 1;
    const int w0 = q0 + 16 * warp;

    load_rows<kQBM, D, kQThreads>(sQ, a.q + q_off, a.ldq, q0, T);
    load_rows<kQBM, D, kQThreads>(sdO, a.dout + q_off, a.ldq, q0, T);
    load_rows<kQBN, D, kQThreads>(sK, K, a.ldkv, 0, T);
    load_rows<kQBN, D, kQThreads>(sV, V, a.ldkv, 0, T);
    cp_async_commit();

    float nl[2], dl[2]; // -lse * log2 e and delta of rows g, g + 8
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int t = w0 + g + 8 * hf;
        nl[hf] = t < T ? -a.lse[(long)bh * T + t] * kLog2e : 0.f;
        dl[hf] = t < T ? a.delta[(long)bh * T + t] : 0.f;
    }
    float dq[1][DS][4];
    zero(dq);
    for (int j = 0; j < n_kb; j++) {
        const int k0 = j * kQBN;
        const bf16 *sKj = sK + (j & 1) * kQBN * P, *sVj = sV + (j & 1) * kQBN * P;
        if (j + 1 < n_kb) {
            load_rows<kQBN, D, kQThreads>(sK + ((j + 1) & 1) * kQBN * P, K, a.ldkv, k0 + kQBN, T);
            load_rows<kQBN, D, kQThreads>(sV + ((j + 1) & 1) * kQBN * P, V, a.ldkv, k0 + kQBN, T);
        }
        cp_async_commit();
        cp_async_wait_prev();
        __syncthreads();
        if (k0 <= w0 + 15) {
            float p[1][NS][4], ds[1][NS][4];
            zero(p);
            zero(ds);
            mma_abt<D, 1, NS, P>(p, sQ, 16 * warp, sKj, 0);   // S
            mma_abt<D, 1, NS, P>(ds, sdO, 16 * warp, sVj, 0); // dP
            const bool mask = k0 + kQBN - 1 > w0 || k0 + kQBN > T;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hf = e >> 1, t = w0 + g + 8 * hf, u = k0 + 8 * n + 2 * qd + (e & 1);
                    const float pr = mask && (u > t || u >= T) ? 0.f : exp2f(fmaf(p[0][n][e], a.sl2, nl[hf]));
                    ds[0][n][e] = pr * (ds[0][n][e] - dl[hf]); // dS, unscaled
                }
            uint32_t da[1][NS / 2][4];
            pack_a<1, NS>(da, ds);
            mma_ab<NS / 2, 1, DS, P>(dq, da, sKj);
        }
        __syncthreads(); // this stage is overwritten by the loads of iteration j + 1
    }
    store_rows<1, D>(sQ, 16 * warp, dq, a.scale, a.dq + (long)b * T * a.ldg + (long)h * D, a.ldg, w0, T);
}

// ================================================================================================
// Launchers

void check_shape(const char *fn, int T, int D) {
    if (flash_attention_supported(D) && T <= FLASH_ATTENTION_MAX_T) return;
    char what[192];
    snprintf(what, sizeof what, "%s: head dim %d (supported: 16, 32, 64, 128) or T = %d (at most %d) not supported", fn,
             D, T, FLASH_ATTENTION_MAX_T);
    mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
}

template <typename Kernel>
void set_smem(Kernel kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

Args make_args(int T, int Hq, int Hkv, int D) {
    Args a = {};
    a.T = T, a.Hq = Hq, a.group = Hq / Hkv;
    a.ldq = (long)Hq * D, a.ldkv = (long)Hkv * D;
    a.scale = (float)(1.0 / sqrt((double)D));
    a.sl2 = (float)(1.4426950408889634 / sqrt((double)D));
    return a;
}

template <int D>
void forward(const Args &a, int B, cudaStream_t stream) {
    const dim3 grid(B * a.Hq, (a.T + kFwdBM - 1) / kFwdBM);
    set_smem(flash_fwd_kernel<D>, fwd_smem_bytes<D>());
    flash_fwd_kernel<D><<<grid, kFwdThreads, fwd_smem_bytes<D>(), stream>>>(a);
    cudaCheckLaunch();
}

/* delta = rowsum(dout * out), for either backward. */
template <int D>
void delta(const Args &a, int B, cudaStream_t stream) {
    const long items = (long)B * a.T * a.Hq;
    flash_delta_kernel<D><<<grid_for(items * (D / 8), kDeltaThreads), kDeltaThreads, 0, stream>>>(a, items);
    cudaCheckLaunch();
}

/* The mma.sync backward after delta: dK/dV, then dQ. */
template <int D>
void backward(const Args &a, int B, cudaStream_t stream) {
    const dim3 kv_grid(B * (a.Hq / a.group), (a.T + kKvBN - 1) / kKvBN);
    set_smem(flash_bwd_dkdv_kernel<D>, kv_smem_bytes<D>());
    flash_bwd_dkdv_kernel<D><<<kv_grid, kKvThreads, kv_smem_bytes<D>(), stream>>>(a);
    cudaCheckLaunch();
    const dim3 q_grid(B * a.Hq, (a.T + kQBM - 1) / kQBM);
    set_smem(flash_bwd_dq_kernel<D>, q_smem_bytes<D>());
    flash_bwd_dq_kernel<D><<<q_grid, kQThreads, q_smem_bytes<D>(), stream>>>(a);
    cudaCheckLaunch();
}

/* The kernel an env variable (MOKC_FLASH_FWD / MOKC_FLASH_BWD) picks: unset or empty, wgmma where
 * it runs (`wgmma`), else mma; "wgmma" where it does not run stops the run. */
const char *pick_kernel(const char *var, bool wgmma, const char *dims, int D) {
    const char *env = getenv(var);
    if (!env || !env[0]) return wgmma ? "wgmma" : "mma";
    if (!strcmp(env, "mma")) return "mma";
    if (!strcmp(env, "wgmma") && wgmma) return "wgmma";
    char what[224];
    snprintf(what, sizeof what,
             "%s='%s': use mma, or wgmma (head dim %s, an sm_90a build on an H100/H200; here D = %d)", var, env, dims,
             D);
    mokc_cuda_check(cudaErrorInvalidValue, what, __FILE__, __LINE__);
    return "mma";
}

size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

} // namespace

extern "C" int flash_attention_supported(int D) { return D == 16 || D == 32 || D == 64 || D == 128; }

extern "C" const char *flash_attention_forward_kernel(int D) {
    return pick_kernel("MOKC_FLASH_FWD", D == 128 && flash_attention_sm90_available(), "128", D);
}

extern "C" const char *flash_attention_backward_kernel(int D) {
    return pick_kernel("MOKC_FLASH_BWD", (D == 64 || D == 128) && flash_attention_sm90_available(), "64 or 128", D);
}

extern "C" size_t flash_attention_backward_workspace_bytes(int B, int T, int Hq, int D) {
    if (B <= 0 || T <= 0 || Hq <= 0) return 0;
    return round256((size_t)B * Hq * T * sizeof(float)) + flash_attention_backward_sm90_bytes(B, T, Hq, D);
}

extern "C" void flash_attention_forward(bf16_t *out, float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v,
                                        int B, int T, int Hq, int Hkv, int D, cudaStream_t stream) {
    check_shape("flash_attention_forward", T, D);
    if (B <= 0 || T <= 0) return;
    if (!strcmp(flash_attention_forward_kernel(D), "wgmma")) {
        flash_attention_forward_sm90(out, lse, q, k, v, B, T, Hq, Hkv, stream);
        return;
    }
    Args a = make_args(T, Hq, Hkv, D);
    a.q = reinterpret_cast<const bf16 *>(q), a.k = reinterpret_cast<const bf16 *>(k);
    a.v = reinterpret_cast<const bf16 *>(v), a.out = reinterpret_cast<bf16 *>(out), a.lse_out = lse;
    switch (D) {
    case 16: forward<16>(a, B, stream); break;
    case 32: forward<32>(a, B, stream); break;
    case 64: forward<64>(a, B, stream); break;
    default: forward<128>(a, B, stream); break;
    }
}

extern "C" void flash_attention_backward(bf16_t *dqkv, void *work, const bf16_t *dout, const bf16_t *out,
                                         const float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v, int B,
                                         int T, int Hq, int Hkv, int D, cudaStream_t stream) {
    check_shape("flash_attention_backward", T, D);
    if (B <= 0 || T <= 0) return;
    Args a = make_args(T, Hq, Hkv, D);
    a.q = reinterpret_cast<const bf16 *>(q), a.k = reinterpret_cast<const bf16 *>(k);
    a.v = reinterpret_cast<const bf16 *>(v), a.fwd_out = reinterpret_cast<const bf16 *>(out);
    a.dout = reinterpret_cast<const bf16 *>(dout), a.dq = reinterpret_cast<bf16 *>(dqkv);
    a.dk = a.dq + (long)Hq * D, a.dv = a.dk + (long)Hkv * D, a.ldg = (long)(Hq + 2 * Hkv) * D;
    a.lse = lse, a.delta = static_cast<float *>(work);
    switch (D) {
    case 16: delta<16>(a, B, stream); break;
    case 32: delta<32>(a, B, stream); break;
    case 64: delta<64>(a, B, stream); break;
    default: delta<128>(a, B, stream); break;
    }
    if (!strcmp(flash_attention_backward_kernel(D), "wgmma")) {
        void *rest = static_cast<char *>(work) + round256((size_t)B * Hq * T * sizeof(float));
        flash_attention_backward_sm90(dqkv, rest, a.delta, dout, lse, q, k, v, B, T, Hq, Hkv, D, stream);
        return;
    }
    switch (D) {
    case 16: backward<16>(a, B, stream); break;
    case 32: backward<32>(a, B, stream); break;
    case 64: backward<64>(a, B, stream); break;
    default: backward<128>(a, B, stream); break;
    }
}
