/*
 * The megakernel's GEMM tile, mma.sync version (the one replaceable piece: the wgmma/TMA tile of
 * issue 9 replaces this header with the same interface).
 *
 * One thread block of MOK_THREADS = 128 threads (4 warps as 2 x 2, each warp 32 x 32) computes a
 * MOK_BM x MOK_BN = 64 x 64 fp32 tile of  A (rows x K, row-major, bf16) @ B_j (K x n, row-major,
 * bf16, columns [n0, n0 + 64))  for NB right-hand sides B_j at once (gate and up share the A tile).
 * K runs in steps of MOK_BK = 32 in order (fixed accumulation order: bitwise reproducible).
 * Requirements: K % 32 == 0, ldb % 8 == 0, lda % 8 == 0, 16-byte aligned bases; rows past
 * `rows_valid` read as zero (their results are discarded by the caller's epilogue).
 * A is read with ld.global.cg (L2): its rows were written earlier in the same launch by other
 * blocks. mma.sync.m16n8k16 bf16 -> fp32; plain shared-memory fragment loads (no ldmatrix).
 *
 * Accumulator layout (per thread): acc[j][mi][ni][e], mi < 2 (16-row slabs), ni < 4 (8-col slabs),
 * element e: row = wm*32 + mi*16 + g + (e >= 2 ? 8 : 0), col = wn*32 + ni*8 + 2*t + (e & 1), with
 * warp = wm*2 + wn, g = lane / 4, t = lane % 4 (mok_tile_coord gives both).
 */
#ifndef MOKC_KERNELS_MOK_TILE_MMA_CUH
#define MOKC_KERNELS_MOK_TILE_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#define MOK_BM 64
#define MOK_BN 64
#define MOK_BK 32
#define MOK_THREADS 128

#define MOK_APAD (MOK_BK + 8) /* shared row pitch of A, and of B transposed (n-major) */

template <int NB>
struct alignas(16) MokTileSmem {
    __nv_bfloat16 a[MOK_BM][MOK_APAD];
    __nv_bfloat16 bt[NB][MOK_BN][MOK_APAD]; /* B transposed: bt[j][n][k] */
};

__device__ __forceinline__ void mok_mma16816(float *c, const uint32_t *a, const uint32_t *b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* (row, col) inside the tile of accumulator element (mi, ni, e) of this thread. */
__device__ __forceinline__ void mok_tile_coord(int mi, int ni, int e, int &row, int &col) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;
    row = wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
    col = wn * 32 + ni * 8 + 2 * t + (e & 1);
}

/* acc[j] = A[0:64, 0:K] @ B_j[0:K, n0:n0+64] (overwrites acc). Ends with a __syncthreads so the
 * caller may reuse the shared memory. */
template <int NB>
__device__ __forceinline__ void mok_tile_mma(float (&acc)[NB][2][4][4], MokTileSmem<NB> &sm, const __nv_bfloat16 *A,
                                             long lda, int rows_valid, const __nv_bfloat16 *const (&B)[NB], long ldb,
                                             int n0, int K) {
#pragma unroll
    for (int j = 0; j < NB; j++)
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][mi][ni][e] = 0.0f;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;
    for (int k0 = 0; k0 < K; k0 += MOK_BK) {
        /* A: 64 rows x 4 vectors of 8; B_j: 32 rows x 8 vectors of 8 */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int v = tid + i * MOK_THREADS, r = v >> 2, c8 = (v & 3) * 8;
            int4 val = make_int4(0, 0, 0, 0);
            if (r < rows_valid) val = __ldcg(reinterpret_cast<const int4 *>(A + (long)r * lda + k0 + c8));
            *reinterpret_cast<int4 *>(&sm.a[r][c8]) = val;
        }
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int v = tid + i * MOK_THREADS, r = v >> 3, c8 = (v & 7) * 8;
                const int4 val = *reinterpret_cast<const int4 *>(B[j] + (long)(k0 + r) * ldb + n0 + c8);
                const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&val);
#pragma unroll
                for (int q = 0; q < 8; q++) sm.bt[j][c8 + q][r] = e[q];
            }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MOK_BK; kk += 16) {
            uint32_t af[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int r = wm * 32 + mi * 16 + g;
                af[mi][0] = *reinterpret_cast<const uint32_t *>(&sm.a[r][kk + 2 * t]);
                af[mi][1] = *reinterpret_cast<const uint32_t *>(&sm.a[r + 8][kk + 2 * t]);
                af[mi][2] = *reinterpret_cast<const uint32_t *>(&sm.a[r][kk + 2 * t + 8]);
                af[mi][3] = *reinterpret_cast<const uint32_t *>(&sm.a[r + 8][kk + 2 * t + 8]);
            }
#pragma unroll
            for (int j = 0; j < NB; j++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    const int n = wn * 32 + ni * 8 + g;
                    uint32_t bf[2];
                    bf[0] = *reinterpret_cast<const uint32_t *>(&sm.bt[j][n][kk + 2 * t]);
                    bf[1] = *reinterpret_cast<const uint32_t *>(&sm.bt[j][n][kk + 2 * t + 8]);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) mok_mma16816(acc[j][mi][ni], af[mi], bf);
                }
        }
        __syncthreads();
    }
}

/* ------------------------------------------------------------------------------------------------
 * The pipelined variant (same interface; the same mma.sync operations in the same K order, so
 * bitwise the same results as mok_tile_mma): cp.async double buffering (2 stages of MOK_BK), A and B kept
 * row-major in shared memory, fragments through ldmatrix (x4 for A, x4.trans for B). Rows past
 * rows_valid are zero-filled by cp.async (src-size 0).
 * ---------------------------------------------------------------------------------------------- */

#define MOK_BPAD (MOK_BN + 8)

template <int NB>
struct alignas(16) MokTileSmemPipe {
    __nv_bfloat16 a[2][MOK_BM][MOK_APAD];
    __nv_bfloat16 b[2][NB][MOK_BK][MOK_BPAD];
};

__device__ __forceinline__ void mok_cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void mok_cp_async4(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void mok_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void mok_cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
__device__ __forceinline__ void mok_cp_async_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void mok_ldmatrix_x4(uint32_t (&r)[4], const void *smem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void mok_ldmatrix_x4_trans(uint32_t (&r)[4], const void *smem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

template <int NB>
__device__ __forceinline__ void mok_tile_load_stage(MokTileSmemPipe<NB> &sm, int st, const __nv_bfloat16 *A, long lda,
                                                    int rows_valid, const __nv_bfloat16 *const (&B)[NB], long ldb,
                                                    int n0, int k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int v = tid + i * MOK_THREADS, r = v >> 2, c8 = (v & 3) * 8;
        const bool ok = r < rows_valid;
        mok_cp_async16(&sm.a[st][r][c8], ok ? (const void *)(A + (long)r * lda + k0 + c8) : (const void *)A, ok);
    }
#pragma unroll
    for (int j = 0; j < NB; j++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int v = tid + i * MOK_THREADS, r = v >> 3, c8 = (v & 7) * 8;
            mok_cp_async16(&sm.b[st][j][r][c8], B[j] + (long)(k0 + r) * ldb + n0 + c8, true);
        }
}

template <int NB>
__device__ __forceinline__ void mok_tile_mma_pipe(float (&acc)[NB][2][4][4], MokTileSmemPipe<NB> &sm,
                                                  const __nv_bfloat16 *A, long lda, int rows_valid,
                                                  const __nv_bfloat16 *const (&B)[NB], long ldb, int n0, int K) {
#pragma unroll
    for (int j = 0; j < NB; j++)
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][mi][ni][e] = 0.0f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 1, wn = warp & 1, q = lane >> 3, r8 = lane & 7;
    const int KT = K / MOK_BK;
    mok_tile_load_stage<NB>(sm, 0, A, lda, rows_valid, B, ldb, n0, 0);
    mok_cp_async_commit();
    for (int kt = 0; kt < KT; kt++) {
        const int st = kt & 1;
        if (kt + 1 < KT) mok_tile_load_stage<NB>(sm, st ^ 1, A, lda, rows_valid, B, ldb, n0, (kt + 1) * MOK_BK);
        mok_cp_async_commit(); /* possibly empty: keeps the group count uniform */
        mok_cp_async_wait1();  /* stage st has landed (this thread's copies) */
        __syncthreads();       /* ... and everyone's */
#pragma unroll
        for (int kk = 0; kk < MOK_BK; kk += 16) {
            uint32_t af[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
                mok_ldmatrix_x4(af[mi], &sm.a[st][wm * 32 + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
            for (int j = 0; j < NB; j++)
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t bf[4]; /* b0, b1 of n slab 2*np, then of 2*np + 1 */
                    mok_ldmatrix_x4_trans(bf, &sm.b[st][j][kk + (q & 1) * 8 + r8][wn * 32 + np * 16 + (q >> 1) * 8]);
                    const uint32_t b_lo[2] = {bf[0], bf[1]}, b_hi[2] = {bf[2], bf[3]};
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        mok_mma16816(acc[j][mi][2 * np], af[mi], b_lo);
                        mok_mma16816(acc[j][mi][2 * np + 1], af[mi], b_hi);
                    }
                }
        }
        __syncthreads(); /* stage st may be overwritten by the next iteration's loads */
    }
}

#endif
