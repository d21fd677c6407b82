/*
 * Hopper building blocks of the megakernel's wgmma tile (kernels/mok/mok_forward_sm90.cu): mbarriers,
 * TMA tensor loads, shared-memory matrix descriptors and wgmma.mma_async m64n256k16, m64n176k16 and
 * m64n192k16 (bf16 in, fp32 accumulators in registers; the latter two for gemm_sm90.cu's
 * three-consumer tiles). sm_90a only: every body is compiled only where __CUDA_ARCH_FEAT_SM90_ALL is
 * defined (the callers check MOK_SM90 before using them).
 *
 * Shared-memory layouts (128-byte swizzled, written by TMA with CU_TENSOR_MAP_SWIZZLE_128B, each tile
 * 1024-byte aligned so the descriptors' base offset is 0; one 64-byte swizzled form below):
 *  - A, K-major: a box of rows x 64 K (bf16): row r at r * 128 bytes; 8-row groups 1024 bytes
 *    apart (SBO = 1024; LBO unused for swizzled K-major). The k-th 16-wide K step starts 32 bytes
 *    further (the hardware applies the XOR swizzle to the final addresses).
 *  - B K-major (N rows of 64 K): as A, with N for rows.
 *  - B N-major ((K, N) row-major, N contiguous): boxes of 64 K rows x 64 N, one per 64-column
 *    panel, 8192 bytes apart (LBO = panel stride); K row r at r * 128 bytes inside a panel, 8-row
 *    groups 1024 bytes apart (SBO). The k-th 16-row K step starts 2048 bytes further.
 *  - A M-major: as B N-major, with M for N (an m64 instruction reads one panel).
 *  - B N-major in 32-column panels (CU_TENSOR_MAP_SWIZZLE_64B, descriptor layout 2): 64 K rows x 32 N
 *    a panel, 4096 bytes apart (LBO); K row r at r * 64 bytes, 8-row groups 512 bytes apart (SBO);
 *    the k-th 16-row K step starts 1024 bytes further. Lets a tile's columns start at any multiple
 *    of 32 (the forward's gate/up pairs, 96 columns each).
 */
#ifndef MOKC_KERNELS_MOK_TILE_WGMMA_CUH
#define MOKC_KERNELS_MOK_TILE_WGMMA_CUH

#include <cuda.h>
#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOK_SM90 1
#else
#define MOK_SM90 0
#endif

__device__ __forceinline__ uint32_t mok_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mok_mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mok_smem_u32(bar)), "r"(count) : "memory");
}

/* Makes the initialised barriers visible to the async proxy (TMA) before first use. */
__device__ __forceinline__ void mok_mbar_fence_init() {
#if MOK_SM90
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

__device__ __forceinline__ void mok_mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mok_smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mok_mbar_arrive_expect_tx(uint64_t *bar, unsigned bytes) {
#if MOK_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mok_smem_u32(bar)), "r"(bytes)
                 : "memory");
#endif
}

__device__ __forceinline__ bool mok_mbar_try_wait(uint64_t *bar, unsigned parity) {
    uint32_t ok = 1;
#if MOK_SM90
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(mok_smem_u32(bar)), "r"(parity)
        : "memory");
#endif
    return ok != 0;
}

/* Whether the phase of that parity has completed, without waiting (the traced builds' probe). */
__device__ __forceinline__ bool mok_mbar_test_wait(uint64_t *bar, unsigned parity) {
    uint32_t ok = 1;
#if MOK_SM90
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(mok_smem_u32(bar)), "r"(parity)
        : "memory");
#endif
    return ok != 0;
}

/* Global writes of the generic proxy (plain stores by other blocks, seen through an acquire) made
 * visible to this thread's later async-proxy reads (TMA), and the writer's side of the same. */
__device__ __forceinline__ void mok_fence_proxy_async_global() {
#if MOK_SM90
    asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

/* This thread's shared-memory writes made visible to async-proxy readers (wgmma, TMA and bulk
 * copies) that the next barrier releases. */
__device__ __forceinline__ void mok_fence_proxy_async_shared() {
#if MOK_SM90
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

__device__ __forceinline__ void mok_tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
#if MOK_SM90
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(mok_smem_u32(dst)), "l"(map), "r"(mok_smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
#endif
}

__device__ __forceinline__ void mok_tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                                int c2) {
#if MOK_SM90
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(mok_smem_u32(dst)), "l"(map), "r"(mok_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
#endif
}

__device__ __forceinline__ void mok_tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                                int c2, int c3) {
#if MOK_SM90
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
                 "%6}], [%2];" ::"r"(mok_smem_u32(dst)),
                 "l"(map), "r"(mok_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#endif
}

/* A box of a TMA map from shared memory (laid out as the map's swizzle puts it) to global, in
 * this thread's bulk group (2D and 3D maps). */
__device__ __forceinline__ void mok_tma_store_2d(const CUtensorMap *map, const void *src, int c0, int c1) {
#if MOK_SM90
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
                 "r"(mok_smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
#endif
}
__device__ __forceinline__ void mok_tma_store_3d(const CUtensorMap *map, const void *src, int c0, int c1, int c2) {
#if MOK_SM90
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
                 "r"(mok_smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
#endif
}

/* A bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) from shared memory to a
 * global address (a peer's over NVLink too), in this thread's bulk group; commit, then wait until
 * this thread's groups have read their shared memory (it may be overwritten) or are complete. */
__device__ __forceinline__ void mok_bulk_store(void *dst, const void *src, unsigned bytes) {
#if MOK_SM90
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(mok_smem_u32(src)),
                 "r"(bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void mok_bulk_commit() {
#if MOK_SM90
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
/* PENDING: how many of this thread's newest groups may still be reading. */
template <int PENDING = 0>
__device__ __forceinline__ void mok_bulk_wait_read() {
#if MOK_SM90
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(PENDING) : "memory");
#endif
}
__device__ __forceinline__ void mok_bulk_wait() {
#if MOK_SM90
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* Hands registers between the warpgroups of a block (all threads of a warpgroup execute it). */
template <int N>
__device__ __forceinline__ void mok_setmaxnreg_dec() {
#if MOK_SM90
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void mok_setmaxnreg_inc() {
#if MOK_SM90
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
#endif
}

/* 128-byte-swizzle descriptor of a tile starting at `smem`, byte offsets lbo / sbo. */
/* swizzle: the layout's span in bytes, 128 or 64 (the descriptor's layout type 1 or 2) */
__device__ __forceinline__ uint64_t mok_wgmma_desc(const void *smem, unsigned lbo, unsigned sbo, int swizzle = 128) {
    const uint64_t a = mok_smem_u32(smem);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | ((swizzle == 64 ? 2ull : 1ull) << 62);
}

__device__ __forceinline__ void mok_wgmma_fence() {
#if MOK_SM90
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void mok_wgmma_commit() {
#if MOK_SM90
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void mok_wgmma_wait() {
#if MOK_SM90
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

/* Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma. */
template <int N>
__device__ __forceinline__ void mok_fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* The wgmma wrappers' accumulators (here and in flash_sm90.cuh): registers 0-31 and 32-63 in the
 * asm text, and operand lists of 8 and 32 of them for constraint c (of the wrapper's array d). */
#define MOK_WGMMA_R0_31 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MOK_WGMMA_R32_63 \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MOK_WGMMA_F8(c, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define MOK_WGMMA_F32(c, i) MOK_WGMMA_F8(c, i), MOK_WGMMA_F8(c, i + 8), MOK_WGMMA_F8(c, i + 16), MOK_WGMMA_F8(c, i + 24)

/* d (+)= A (64 x 16, desc a; TA: M-major, else K-major) @ B (16 x 256, desc b; TB: N-major, else
 * K-major); scale_d = 0 overwrites.
 * Accumulator layout (per thread of the warpgroup, warp w = warp % 4, lane l): d[4i + e] is row
 * 16w + l/4 + 8*(e >= 2), column 8i + 2*(l%4) + (e & 1), i < 32.
 * mok_wgmma_m64n176k16 and m64n192k16: the same for B 16 x 176 (d[88], i < 22) and 16 x 192 (d[96],
 * i < 24): the token-side tiles of gemm_sm90.cu, whose columns are a group's rows. */
template <int TA, int TB>
__device__ __forceinline__ void mok_wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MOK_WGMMA_R0_31 ", " MOK_WGMMA_R32_63 ", "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "%128, %129, p, 1, 1, %131, %132;\n}\n"
                 : MOK_WGMMA_F32("+f", 0), MOK_WGMMA_F32("+f", 32), MOK_WGMMA_F32("+f", 64), MOK_WGMMA_F32("+f", 96)
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}
template <int TA, int TB>
__device__ __forceinline__ void mok_wgmma_m64n176k16(float (&d)[88], uint64_t a, uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {" MOK_WGMMA_R0_31 ", " MOK_WGMMA_R32_63 ", "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87}, "
                 "%88, %89, p, 1, 1, %91, %92;\n}\n"
                 : MOK_WGMMA_F32("+f", 0), MOK_WGMMA_F32("+f", 32), MOK_WGMMA_F8("+f", 64), MOK_WGMMA_F8("+f", 72),
                   MOK_WGMMA_F8("+f", 80)
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

template <int TA, int TB>
__device__ __forceinline__ void mok_wgmma_m64n192k16(float (&d)[96], uint64_t a, uint64_t b, int scale_d) {
#if MOK_SM90
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" MOK_WGMMA_R0_31 ", " MOK_WGMMA_R32_63 ", "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
                 "%96, %97, p, 1, 1, %99, %100;\n}\n"
                 : MOK_WGMMA_F32("+f", 0), MOK_WGMMA_F32("+f", 32), MOK_WGMMA_F32("+f", 64)
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

/* Host: a TMA map of a bf16 tensor, 128-byte swizzled, zero-filled past its edges. rank 2: dims
 * {cols, rows}; rank 3: {cols, rows, mats}; boxes of 64 columns x box_rows (x 1). Stops the job
 * with a message when the driver refuses. (kernels/tma_map.cu) */
void sm90_encode(CUtensorMap *map, const void *base, int rank, long cols, long rows, long mats, int box_rows);
/* The same for an fp32 tensor of dims {cols, rows, mats}: boxes of 32 columns (128 bytes) x 64
 * rows, for TMA stores (elements past the edges are not written). */
void sm90_encode_f32(CUtensorMap *map, const float *base, long cols, long rows, long mats);
/* The MN-major panels of a bf16 tensor of dims {cols, rows, mats} (K along rows): `width` columns x
 * 64 K lines each, 64 columns 128-byte swizzled or 32 columns 64-byte swizzled (one line of a panel
 * is the swizzle's span), zero-filled past the edges. Where cols is a multiple of the width
 * (`whole`), `map` is a 4D view {width columns, rows, panels, mats} whose boxes hold n adjacent
 * panels (a TMA load has a cost of its own, beside its bytes: s15 measured it); else a 3D map of
 * one panel a box (a box's last panel would read the next line past a partial panel's columns). */
typedef struct {
    CUtensorMap map;
    int n, whole, width;
} Sm90Panels;
void sm90_encode_panels(Sm90Panels *p, const void *base, long cols, long rows, long mats, int n, int width = 64);

#endif
