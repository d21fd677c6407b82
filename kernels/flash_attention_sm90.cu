/*
 * The flash attention forward for Hopper (sm_90a): TMA + wgmma, warp-specialised, head dim 128.
 * Same contract and results' accuracy as the mma.sync forward of flash_attention.cu (which
 * flash_attention_forward runs instead where this one does not: flash_attention_forward_kernel).
 *
 * One block per (query block of 128 rows, batch x query head), 384 threads = 3 warpgroups:
 *  - warpgroup 0 (40 registers a thread): one thread issues the TMA loads, Q once, then K and V
 *    blocks of 128 keys into a ring of 2 stages (full / empty mbarriers); the rest idle.
 *  - warpgroups 1 and 2 (232 registers): consumer w owns query rows [64w, 64w + 64). Per key
 *    block: S = Q K^T by wgmma m64n128k16 from shared memory (8 steps over D), the online softmax
 *    on the accumulators (fp32, exp2 with the scale folded into log2 e, the same arithmetic as the
 *    mma.sync kernel), P rounded to bf16 in registers, O += P V by wgmma with P as the register
 *    operand (8 steps over the keys); then the stage is released.
 * The two consumers run independently, so one's softmax overlaps the other's products. Causal:
 * key blocks past the block's last row are never loaded; the diagonal block is masked.
 *
 * Shared memory, every tile 128-byte swizzled by TMA (layouts as kernels/mok/tile_wgmma.cuh): Q, K
 * and V tiles of 128 rows x 128 columns, each two boxes of 64 columns (16 KB apart): row r of a
 * box at r * 128 bytes, 8-row groups 1024 bytes apart. Q and K are K-major operands (D contiguous);
 * V is the N-major B operand of P V (keys along lines, LBO = the box stride). Rows past the tensors'
 * end are zero-filled by TMA; rows past T inside the tensors (the next batch's) are masked.
 * Total: Q 32 KB + 2 stages x (K 32 KB + V 32 KB) = 160 KB.
 */
#include "flash_attention.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>

#include "device_util.cuh"
#include "flash_sm90.cuh"

namespace {

constexpr int kD = 128, kBM = 128, kBN = 128, kStages = 2, kThreads = 384;
constexpr int kBox = 128 * 128;       // one box: 128 rows x 64 bf16 columns
constexpr int kTile = 2 * kBox;       // 128 rows x 128 columns
constexpr int kSmem = 1024 + kTile * (1 + 2 * kStages) + 64; // alignment slack, Q, K and V stages, barriers
static_assert(kBM == 128 && kBN == 128, "one box height serves Q, K and V");
static_assert(kSmem <= 227 * 1024, "shared memory of one block");

struct Maps {
    CUtensorMap q, k, v;
};

struct Params {
    __nv_bfloat16 *out;
    float *lse;
    int T, Hq, group;
    float sl2; // scale * log2 e
};

struct Bars {
    uint64_t q, full[kStages], empty[kStages];
};

#if MOK_SM90 // the device code below exists in sm_90a device passes only (elsewhere the kernel traps)

constexpr float kLn2 = 0.6931471805599453f;

#endif

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Params p, const __grid_constant__ Maps maps) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = smem_raw + ((1024 - (mok_smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *sK = sQ + kTile, *sV = sK + kStages * kTile;
    Bars *bars = reinterpret_cast<Bars *>(sV + kStages * kTile);
    const int T = p.T, bh = blockIdx.x, b = bh / p.Hq, h = bh % p.Hq, kvh = h / p.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * kBM; // the longest rows first
    const int row0 = b * T;                            // this batch's first row in the 2D maps
    const int n_kb = (min(q0 + kBM, T) - 1) / kBN + 1;
    if (threadIdx.x == 0) {
        mok_mbar_init(&bars->q, 1);
        for (int s = 0; s < kStages; s++) mok_mbar_init(&bars->full[s], 1), mok_mbar_init(&bars->empty[s], 256);
        mok_mbar_fence_init();
    }
    __syncthreads();
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        mok_mbar_arrive_expect_tx(&bars->q, kTile);
        for (int c = 0; c < 2; c++) mok_tma_load_2d(sQ + c * kBox, &maps.q, &bars->q, h * kD + 64 * c, row0 + q0);
        for (int j = 0; j < n_kb; j++) {
            const int s = j % kStages;
            flash_wait_bar(&bars->empty[s], ((j / kStages) & 1) ^ 1u); /* the first lap passes at once */
            mok_mbar_arrive_expect_tx(&bars->full[s], 2 * kTile);
            for (int c = 0; c < 2; c++) {
                const int col = kvh * kD + 64 * c, row = row0 + j * kBN;
                mok_tma_load_2d(sK + s * kTile + c * kBox, &maps.k, &bars->full[s], col, row);
                mok_tma_load_2d(sV + s * kTile + c * kBox, &maps.v, &bars->full[s], col, row);
            }
        }
        return;
    }
    mok_setmaxnreg_inc<232>();
    const int w = wg - 1, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int r0 = q0 + 64 * w + 16 * ((threadIdx.x >> 5) & 3) + g; // this thread's rows r0, r0 + 8
    float o[64], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    const uint64_t dq = mok_wgmma_desc(sQ + w * 64 * 128, 16, 1024);
    flash_wait_bar(&bars->q, 0);
    for (int j = 0; j < n_kb; j++) {
        const int s = j % kStages, k0 = j * kBN;
        flash_wait_bar(&bars->full[s], (j / kStages) & 1);
        float sc[64];
        const uint64_t dk = mok_wgmma_desc(sK + s * kTile, 16, 1024);
        mok_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; kk++) { /* box kk / 4, 32 bytes per 16 columns inside it */
            const uint64_t off = (kk / 4) * (kBox >> 4) + 2 * (kk % 4);
            flash_wgmma_ss<0, 0>(sc, dq + off, dk + off, kk > 0);
        }
        mok_wgmma_commit();
        mok_wgmma_wait<0>();
        flash_fence_acc(sc);

        const bool mask = k0 + kBN - 1 > q0 + 64 * w || k0 + kBN > T;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int t = r0 + 8 * hf;
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    const int u = k0 + 8 * i + 2 * qd + (e & 1);
                    if (mask && (u > t || u >= T)) sc[4 * i + e] = -INFINITY;
                    mx = fmaxf(mx, sc[4 * i + e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[hf], mx * p.sl2);
            const float base = m_new == -INFINITY ? 0.f : m_new; // a row with nothing visible yet
            const float corr = exp2f(m[hf] - base);
            m[hf] = m_new;
            float rs = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    sc[4 * i + e] = exp2f(fmaf(sc[4 * i + e], p.sl2, -base));
                    rs += sc[4 * i + e];
                }
            l[hf] = l[hf] * corr + rs;
#pragma unroll
            for (int i = 0; i < 16; i++) o[4 * i + 2 * hf] *= corr, o[4 * i + 2 * hf + 1] *= corr;
        }
        /* P as the A operand: keys 16k..16k+15 are accumulator column slabs 2k and 2k + 1 */
        uint32_t pa[kBN / 16][4];
#pragma unroll
        for (int k = 0; k < kBN / 16; k++)
#pragma unroll
            for (int r = 0; r < 4; r++) pa[k][r] = pack_bf16x2(sc[8 * k + 2 * r], sc[8 * k + 2 * r + 1]);
        const uint64_t dv = mok_wgmma_desc(sV + s * kTile, kBox, 1024);
        mok_wgmma_fence();
#pragma unroll
        for (int k = 0; k < kBN / 16; k++) flash_wgmma_rs<1>(o, pa[k], dv + k * (16 * 128 >> 4), 1); /* 16 key lines */
        mok_wgmma_commit();
        mok_wgmma_wait<0>();
        flash_fence_acc(o);
        mok_mbar_arrive(&bars->empty[s]);
    }

    // Row sums over the quad (fixed order), normalise, write out and lse.
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float sum = l[hf] + __shfl_xor_sync(0xffffffffu, l[hf], 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = 1.f / sum;
        const int t = r0 + 8 * hf;
        if (t >= T) continue;
        if (qd == 0) p.lse[(long)bh * T + t] = (m[hf] + log2f(sum)) * kLn2;
        __nv_bfloat16 *dst = p.out + (long)(row0 + t) * p.Hq * kD + (long)h * kD + 2 * qd;
#pragma unroll
        for (int i = 0; i < 16; i++)
            *reinterpret_cast<uint32_t *>(dst + 8 * i) = pack_bf16x2(o[4 * i + 2 * hf] * inv, o[4 * i + 2 * hf + 1] * inv);
    }
#else
    __trap();
#endif
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
    Params p = {reinterpret_cast<__nv_bfloat16 *>(out), lse, T, Hq, Hq / Hkv,
                (float)(1.4426950408889634 / sqrt((double)kD))};
    cudaCheck(cudaFuncSetAttribute(flash_fwd_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    flash_fwd_sm90_kernel<<<dim3(B * Hq, (T + kBM - 1) / kBM), kThreads, kSmem, stream>>>(p, maps);
    cudaCheckLaunch();
}
