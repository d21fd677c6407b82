/*
 * What the Hopper flash attention kernels share (flash_attention_sm90.cu: forward,
 * flash_attention_bwd_sm90.cu: backward; gemm_f32x3.cu takes the m64n128k16 one too): wgmma
 * m64n64k16 and m64n128k16 (bf16 in, fp32 accumulators), a fence that pins accumulators around
 * them, and mbarrier waits. The mbarrier, TMA and descriptor helpers are kernels/mok/tile_wgmma.cuh's.
 * Device bodies exist in sm_90a passes only (MOK_SM90); callers check MOK_SM90 too.
 *
 * Accumulator layout of m64nNk16 (per thread of the warpgroup, warp w = warp % 4, lane l):
 * d[4i + e] is row 16w + l/4 + 8*(e >= 2), column 8i + 2*(l%4) + (e & 1), i < N/8.
 * Register A operand (RS form): the mma.sync m16n8k16 A fragment of each warp's 16 rows; the
 * accumulator columns 16k..16k+15 (slabs 2k, 2k + 1) rounded to bf16 pairs are A's k-th step:
 * a[r] = pack(d[8k + 2r], d[8k + 2r + 1]), r < 4.
 */
#ifndef MOKC_KERNELS_FLASH_SM90_CUH
#define MOKC_KERNELS_FLASH_SM90_CUH

#include <stdint.h>

#include "mok/tile_wgmma.cuh"

/* the asm text's accumulator lists and operand lists (tile_wgmma.cuh's pieces) */
#define FLASH_ACC32 "{" MOK_WGMMA_R0_31 "}"
#define FLASH_ACC64 "{" MOK_WGMMA_R0_31 ", " MOK_WGMMA_R32_63 "}"
#define FLASH_OPS32(c) MOK_WGMMA_F32(c, 0)
#define FLASH_OPS64(c) MOK_WGMMA_F32(c, 0), MOK_WGMMA_F32(c, 32)

/* d (+)= A (64 x 16, desc a; TA: M-major, else K-major) B (16 x N, desc b; TB: N-major, else
 * K-major), N = 64 (d[32]) or 128 (d[64]); scale_d = 0 overwrites. */
template <int TA, int TB>
__device__ __forceinline__ void flash_wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLASH_ACC32
                 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : FLASH_OPS32("+f")
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}
template <int TA, int TB>
__device__ __forceinline__ void flash_wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FLASH_ACC64
                 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : FLASH_OPS64("+f")
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

/* d = A B as above, d written only: its old contents are not an input (an accumulator the asm
 * read would stay live across the caller's loop, costing N/2 registers). */
template <int TA, int TB>
__device__ __forceinline__ void flash_wgmma_ss_set(float (&d)[32], uint64_t a, uint64_t b) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLASH_ACC32
                 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : FLASH_OPS32("=f")
                 : "l"(a), "l"(b), "r"(0), "n"(TA), "n"(TB));
#endif
}
template <int TA, int TB>
__device__ __forceinline__ void flash_wgmma_ss_set(float (&d)[64], uint64_t a, uint64_t b) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FLASH_ACC64
                 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : FLASH_OPS64("=f")
                 : "l"(a), "l"(b), "r"(0), "n"(TA), "n"(TB));
#endif
}

/* d (+)= A (64 x 16 in registers, the layout above) B (16 x N, desc b; TB: N-major, else
 * K-major); scale_d = 0 overwrites. */
template <int TB>
__device__ __forceinline__ void flash_wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLASH_ACC32
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : FLASH_OPS32("+f")
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
#endif
}
template <int TB>
__device__ __forceinline__ void flash_wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FLASH_ACC64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : FLASH_OPS64("+f")
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
#endif
}

#undef FLASH_ACC32
#undef FLASH_ACC64
#undef FLASH_F8
#undef FLASH_OPS32
#undef FLASH_OPS64

/* Waits for the phase of `parity` of an mbarrier. A lost arrival (a bug, never a slow producer)
 * traps after about 2^35 cycles instead of hanging the GPU. Not in code that keeps many wgmma
 * accumulators live: there the trap makes ptxas serialize the wgmma and spill (flash_spin_bar). */
__device__ __forceinline__ void flash_wait_bar(uint64_t *bar, unsigned parity) {
    if (mok_mbar_try_wait(bar, parity)) return;
    const long long t0 = clock64();
    while (!mok_mbar_try_wait(bar, parity))
        if (clock64() - t0 > (1ll << 35)) __trap();
}

/* The same without the timeout, for wgmma-heavy loops; a watchdog elsewhere in the block (a timed
 * wait on this warp's progress) must catch a lost arrival. */
__device__ __forceinline__ void flash_spin_bar(uint64_t *bar, unsigned parity) {
    while (!mok_mbar_try_wait(bar, parity)) {
    }
}

#endif
