/*
 * The megakernel forward with the Hopper tile: wgmma + TMA, warp-specialised (sm_90a). Same
 * protocol as the mma.sync kernel (mok.h): M tiles of an expert's rows, arrival counters, the
 * monotonic ticket in topological order (every gate/up task before every down task), down outputs
 * pushed to the source rank's combine slot. What differs:
 *  - M tiles of 128 rows (tile_m = 128), tasks of 128 x 256: every weight byte brought into shared
 *    memory serves 128 rows (the layer is bound by L2 -> SM traffic: 64 x 256 tasks measured 2.17 ms
 *    at E=128 H=2048 I=768, 5.8 TB/s of tile loads).
 *  - one block per SM, 384 threads = 3 warpgroups. Warpgroup 0 (64 registers a thread): lane 0 of
 *    warp 0 is the producer (takes the tickets, waits on the counters, issues the TMA loads into a
 *    ring of SM90_STAGES stages, hands each task to the consumers through a 2-slot task ring);
 *    warps 1-3 pull dispatched rows (in the first n_comm blocks). Warpgroups 1 and 2 consume
 *    (208 registers): consumer w computes rows [64w, 64w + 64) of the task, all 256 columns, with
 *    wgmma m64n256k16 into 128 fp32 registers a thread, then its epilogue.
 *  - gate/up task (mt, 128 columns of I): the 256 columns are [n0, n0 + 128) of w_gate then the
 *    same of w_up, so SwiGLU is elementwise in registers; the task is done when both consumers
 *    signalled: gu_done[mt] == 2 * nI. Down task (mt, 256 columns of C).
 *  - K in blocks of 64 in order (fixed accumulation order: reproducible). TMA zero-fills past the
 *    tensors' edges (the K tail, columns past I or C, rows past R_max), so any C, I that are
 *    multiples of 8 work; rows of a tile past its expert's count are computed and discarded.
 *  - epilogues stage the tile in shared memory and write whole 16-byte vectors (h, pre_gate,
 *    pre_up locally; the down rows, 256 bytes each, over NVLink to the source's window).
 *  - TMA reads rows that other blocks wrote with plain stores in the same launch (xr by the
 *    dispatch warps, h by gate/up epilogues): writers fence the async proxy before their release,
 *    the producer after its acquire.
 * Shared memory: SM90_STAGES x (A 16 KB + B 32 KB) + 2 x 16 KB staging + barriers ≈ 225 KB.
 */
#include "mok.h"
#include "mok_protocol.cuh"
#include "tile_wgmma.cuh"

#include <cuda_bf16.h>
#include <cudaTypedefs.h>

extern "C" {
#include "common.h" /* src/common.h: mokc_die */
}

#define SM90_THREADS 384
#define SM90_STAGES 4
#define SM90_BK 64
#define SM90_BM 128
#define SM90_PANEL_BYTES (64 * 64 * 2)      /* one B box: 64 K x 64 columns, bf16 */
#define SM90_A_BYTES (SM90_BM * 64 * 2)     /* one A box: 128 rows x 64 K */
#define SM90_B_BYTES (4 * SM90_PANEL_BYTES) /* 256 columns */
#define SM90_STAGING_BYTES (2 * 64 * 128 * 2) /* per consumer: 64 x 128 bf16, 16-byte chunks swizzled */

/* TMA maps of xr and h (2D, boxes of 64 K x 128 rows) and of the (El, K, N) weights (3D, 64 x 64
 * x 1 boxes), all 128-byte swizzled; encoded at each launch from the pointers in MokFwdParams (a
 * kernel parameter of their own: CUtensorMap's 64-byte alignment stays out of host structs). */
typedef struct {
    CUtensorMap xr, h, w_gate, w_up, w_down;
} Sm90Maps;

typedef struct {
    uint64_t full[SM90_STAGES], empty[SM90_STAGES];
    uint64_t task_full[2], task_empty[2];
    int task[2];
} Sm90Bars;

#define SM90_SMEM_BYTES \
    (1024 + SM90_STAGES * (SM90_A_BYTES + SM90_B_BYTES) + SM90_STAGING_BYTES + (int)sizeof(Sm90Bars))

static_assert(SM90_SMEM_BYTES <= 227 * 1024, "shared memory of one block");

__device__ __forceinline__ void sm90_named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* Bounded wait on a pipeline barrier. Its budget is twice the counters': a stalled counter is
 * reported by the producer that waits on it, not by the consumers idling behind it. */
__device__ __forceinline__ void sm90_wait(const MokFwdParams &p, uint64_t *bar, unsigned parity, int tile) {
    if (mok_mbar_try_wait(bar, parity)) return;
    const long long t0 = mok_globaltimer();
    bool fired = false;
    while (!mok_mbar_try_wait(bar, parity)) {
        const long long dt = mok_globaltimer() - t0;
        if (!fired && dt > 2 * p.budget_ns) {
            fired = true;
            mok_watchdog_fire(p.err, p.ticket + 1, MOK_ROLE_PIPELINE, tile, -1, 1u, 0u, dt);
        }
    }
}

/* The task behind ticket t. */
struct Sm90Task {
    int down, mt, nt;
};
__device__ __forceinline__ Sm90Task sm90_task(long t, long n_gu, int nI, int nC) {
    Sm90Task k;
    k.down = t >= n_gu;
    const long u = k.down ? t - n_gu : t;
    const int n = k.down ? nC : nI;
    k.mt = (int)(u / n);
    k.nt = (int)(u - (long)k.mt * n);
    return k;
}

/* Warps 1-3 of warpgroup 0: pull the rows of M tiles blockIdx.x, + n_comm, ... then release. */
__device__ void sm90_dispatch(const MokFwdParams &p, int MT) {
    const int warp = threadIdx.x >> 5, base = p.expert_offset_all[p.e0];
    for (int mt = blockIdx.x; mt < MT; mt += p.n_comm) {
        int el, r0, nrows;
        mok_tile_rows(p, mt, el, r0, nrows);
        for (int r = warp - 1; r < nrows; r += 3) mok_pull_row(p, base, r0 + r);
        mok_fence_proxy_async_global();
        sm90_named_sync(1, 96);
        if (threadIdx.x == 32) {
            __threadfence();
            mok_red_release(p.arrive + mt, 1u);
        }
    }
}

/* One thread: tickets -> counters -> TMA loads. */
__device__ void sm90_produce(const MokFwdParams &p, const Sm90Maps &tm, Sm90Bars *bars, unsigned char *sA, unsigned char *sB, long n_gu,
                             long total, int nI, int nC) {
    int stage = 0, ts = 0;
    unsigned phase = 0, tphase = 0;
    for (;;) {
        const long t = (long)atomicAdd(p.ticket, 1u);
        sm90_wait(p, &bars->task_empty[ts], tphase ^ 1u, (int)t);
        bars->task[ts] = (int)(t < total ? t : total);
        mok_mbar_arrive(&bars->task_full[ts]);
        if (++ts == 2) ts = 0, tphase ^= 1u;
        if (t >= total) return;
        const Sm90Task k = sm90_task(t, n_gu, nI, nC);
        if (k.down)
            mok_wait(p.err, p.ticket + 1, p.budget_ns, p.gu_done + k.mt, 2u * nI, MOK_ROLE_DOWN_WAIT_GATEUP, (int)t,
                     k.mt);
        else
            mok_wait(p.err, p.ticket + 1, p.budget_ns, p.arrive + k.mt, 1u, MOK_ROLE_GATEUP_WAIT_DISPATCH, (int)t, k.mt);
        mok_fence_proxy_async_global();
        int el, r0, nrows;
        mok_tile_rows(p, k.mt, el, r0, nrows);
        const int K = k.down ? p.I : p.C, N = k.down ? p.C : p.I, KB = (K + SM90_BK - 1) / SM90_BK;
        /* panel j's first column (gate/up: j = 0, 1 of w_gate, 2, 3 of w_up); panels wholly past N
         * are not loaded (their columns are discarded) */
        int col[4];
        unsigned bytes = SM90_A_BYTES;
        for (int j = 0; j < 4; j++) {
            col[j] = k.down ? k.nt * 256 + 64 * j : k.nt * 128 + 64 * (j & 1);
            if (col[j] < N) bytes += SM90_PANEL_BYTES;
        }
        for (int kb = 0; kb < KB; kb++) {
            sm90_wait(p, &bars->empty[stage], phase ^ 1u, (int)t);
            uint64_t *full = &bars->full[stage];
            mok_mbar_arrive_expect_tx(full, bytes);
            mok_tma_load_2d(sA + stage * SM90_A_BYTES, k.down ? &tm.h : &tm.xr, full, kb * SM90_BK, r0);
            unsigned char *b = sB + stage * SM90_B_BYTES;
            for (int j = 0; j < 4; j++) {
                if (col[j] >= N) continue;
                const CUtensorMap *map = k.down ? &tm.w_down : j >= 2 ? &tm.w_up : &tm.w_gate;
                mok_tma_load_3d(b + j * SM90_PANEL_BYTES, map, full, col[j], kb * SM90_BK, el);
            }
            if (++stage == SM90_STAGES) stage = 0, phase ^= 1u;
        }
    }
}

/* Consumer w's staging: 64 rows x 16 chunks of 8 bf16; chunk c of row r sits at c ^ (r & 7)
 * (conflict-free for the accumulator's writes and the row-wise 16-byte reads). */
__device__ __forceinline__ __nv_bfloat16 *sm90_stg_at(__nv_bfloat16 *stg, int r, int c) {
    return stg + r * 128 + ((c ^ (r & 7)) << 3);
}

/* Writes f(i, half) (the bf16 pair of accumulator columns 8i + 2t, +1 in row ra + 8 * half,
 * i < 16) into the staging, then the consumer's barrier. */
template <class F>
__device__ __forceinline__ void sm90_stage(__nv_bfloat16 *stg, int w, F f) {
    const int tid = threadIdx.x & 127, ra = 16 * (tid >> 5) + ((tid & 31) >> 2), t = tid & 3;
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int half = 0; half < 2; half++)
            *reinterpret_cast<__nv_bfloat162 *>(sm90_stg_at(stg, ra + 8 * half, i) + 2 * t) = f(i, half);
    sm90_named_sync(2 + w, 128);
}

/* Copies the staged rows r < nrows, chunks with column col0 + 8c < ncols, to row_ptr(r) + 8c;
 * then the consumer's barrier (the staging is free again). */
template <class P>
__device__ __forceinline__ void sm90_unstage(__nv_bfloat16 *stg, int w, int nrows, int col0, int ncols, P row_ptr) {
    const int tid = threadIdx.x & 127;
    for (int v = tid; v < 64 * 16; v += 128) {
        const int r = v >> 4, c = v & 15;
        if (r >= nrows || col0 + 8 * c >= ncols) continue;
        *reinterpret_cast<int4 *>(row_ptr(r) + 8 * c) = *reinterpret_cast<const int4 *>(sm90_stg_at(stg, r, c));
    }
    sm90_named_sync(2 + w, 128);
}

__device__ __forceinline__ __nv_bfloat162 sm90_pair(const float (&acc)[128], int i, int half) {
    return __floats2bfloat162_rn(acc[4 * i + 2 * half], acc[4 * i + 2 * half + 1]);
}

/* Gate/up epilogue of consumer w (rows 64w.. of M tile mt): h = silu(pre_gate) * pre_up from the
 * rounded values (as kernels/swiglu.cu), then pre_gate and pre_up when kept; then the signal. */
__device__ __forceinline__ void sm90_epilogue_gateup(const MokFwdParams &p, const float (&acc)[128],
                                                     __nv_bfloat16 *stg, int w, int mt, int nt) {
    int el, r0, nrows;
    mok_tile_rows(p, mt, el, r0, nrows);
    r0 += 64 * w;
    nrows -= 64 * w;
    const int col0 = nt * 128;
    sm90_stage(stg, w, [&](int i, int half) {
        const __nv_bfloat162 g = sm90_pair(acc, i, half), u = sm90_pair(acc, i + 16, half);
        return __floats2bfloat162_rn(mok_silu_mul(__low2float(g), __low2float(u)),
                                     mok_silu_mul(__high2float(g), __high2float(u)));
    });
    sm90_unstage(stg, w, nrows, col0, p.I, [&](int r) { return p.h + (size_t)(r0 + r) * p.I + col0; });
    if (p.pre_gate) {
        sm90_stage(stg, w, [&](int i, int half) { return sm90_pair(acc, i, half); });
        sm90_unstage(stg, w, nrows, col0, p.I, [&](int r) { return p.pre_gate + (size_t)(r0 + r) * p.I + col0; });
        sm90_stage(stg, w, [&](int i, int half) { return sm90_pair(acc, i + 16, half); });
        sm90_unstage(stg, w, nrows, col0, p.I, [&](int r) { return p.pre_up + (size_t)(r0 + r) * p.I + col0; });
    }
    mok_fence_proxy_async_global(); /* h is read by TMA in the down tasks */
    sm90_named_sync(2 + w, 128);
    if ((threadIdx.x & 127) == 0) {
        __threadfence();
        mok_red_release(p.gu_done + mt, 1u);
    }
}

/* Down epilogue of consumer w: each row's 256 columns, in two staged halves, pushed to its source
 * rank's combine slot (token * k + j). */
__device__ __forceinline__ void sm90_epilogue_down(const MokFwdParams &p, const float (&acc)[128],
                                                   __nv_bfloat16 *stg, int w, int mt, int nt) {
    int el, r0, nrows;
    mok_tile_rows(p, mt, el, r0, nrows);
    r0 += 64 * w;
    nrows -= 64 * w;
    const int base = p.expert_offset_all[p.e0];
    for (int part = 0; part < 2; part++) {
        const int col0 = nt * 256 + 128 * part;
        if (col0 >= p.C) break;
        sm90_stage(stg, w, [&](int i, int half) { return sm90_pair(acc, i + 16 * part, half); });
        sm90_unstage(stg, w, nrows, col0, p.C, [&](int r) {
            const int g = p.row_slot_all[base + r0 + r];
            const int src = g / p.NK, slot = g - src * p.NK;
            return reinterpret_cast<__nv_bfloat16 *>(p.peer_base[src] + p.y_off) + (size_t)slot * p.C + col0;
        });
    }
}

/* Consumer warpgroup w (0 or 1). */
__device__ __forceinline__ void sm90_consume(const MokFwdParams &p, Sm90Bars *bars, unsigned char *sA, unsigned char *sB,
                             __nv_bfloat16 *stg, int w, long n_gu, long total, int nI, int nC) {
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;
    int stage = 0, ts = 0;
    unsigned phase = 0, tphase = 0;
    for (;;) {
        sm90_wait(p, &bars->task_full[ts], tphase, -1);
        const long t = bars->task[ts];
        mok_mbar_arrive(&bars->task_empty[ts]);
        if (++ts == 2) ts = 0, tphase ^= 1u;
        if (t >= total) return;
        const Sm90Task k = sm90_task(t, n_gu, nI, nC);
        const int KB = ((k.down ? p.I : p.C) + SM90_BK - 1) / SM90_BK;
        int prev = -1;
        for (int kb = 0; kb < KB; kb++) {
            sm90_wait(p, &bars->full[stage], phase, (int)t);
            const unsigned char *a = sA + stage * SM90_A_BYTES + w * 64 * 128; /* rows 64w.. */
            const unsigned char *b = sB + stage * SM90_B_BYTES;
            /* K step kk: A starts 32 bytes further, B 2048 (the descriptors count 16-byte units) */
            const uint64_t da = mok_wgmma_desc(a, 16, 1024), db = mok_wgmma_desc(b, SM90_PANEL_BYTES, 1024);
            mok_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < SM90_BK / 16; kk++)
                mok_wgmma_m64n256k16(acc, da + 2 * kk, db + 128 * kk, kb > 0 || kk > 0);
            mok_wgmma_commit();
            if (prev >= 0) {
                mok_wgmma_wait<1>(); /* the previous stage's products are done: release it */
                mok_mbar_arrive(&bars->empty[prev]);
            }
            prev = stage;
            if (++stage == SM90_STAGES) stage = 0, phase ^= 1u;
        }
        mok_wgmma_wait<0>();
        mok_fence_acc(acc);
        mok_mbar_arrive(&bars->empty[prev]);
        if (k.down) sm90_epilogue_down(p, acc, stg, w, k.mt, k.nt);
        else sm90_epilogue_gateup(p, acc, stg, w, k.mt, k.nt);
    }
}

__global__ void __launch_bounds__(SM90_THREADS, 1) mok_forward_sm90_kernel(const __grid_constant__ MokFwdParams p, const __grid_constant__ Sm90Maps tm) {
#if MOK_SM90
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (mok_smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *sA = smem, *sB = sA + SM90_STAGES * SM90_A_BYTES;
    __nv_bfloat16 *stg = reinterpret_cast<__nv_bfloat16 *>(sB + SM90_STAGES * SM90_B_BYTES);
    Sm90Bars *bars = reinterpret_cast<Sm90Bars *>(reinterpret_cast<unsigned char *>(stg) + SM90_STAGING_BYTES);
    const int MT = *p.total_mt, nI = (p.I + 127) / 128, nC = (p.C + 255) / 256;
    const long n_gu = (long)MT * nI, total = (long)MT * (nI + nC);
    if (threadIdx.x == 0) {
        for (int s = 0; s < SM90_STAGES; s++) {
            mok_mbar_init(&bars->full[s], 1);
            mok_mbar_init(&bars->empty[s], 256);
        }
        for (int s = 0; s < 2; s++) {
            mok_mbar_init(&bars->task_full[s], 1);
            mok_mbar_init(&bars->task_empty[s], 256);
        }
        mok_mbar_fence_init();
    }
    __syncthreads();
    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        mok_setmaxnreg_dec<64>();
        if (threadIdx.x == 0) {
            if (!p.dispatch_only) sm90_produce(p, tm, bars, sA, sB, n_gu, total, nI, nC);
        } else if (threadIdx.x >= 32 && (int)blockIdx.x < p.n_comm && !p.skip_dispatch) {
            sm90_dispatch(p, MT);
        }
        return;
    }
    mok_setmaxnreg_inc<208>();
    if (p.dispatch_only) return;
    sm90_consume(p, bars, sA, sB, stg + (wg - 1) * 64 * 128, wg - 1, n_gu, total, nI, nC);
#else
    asm volatile("trap;");
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Host side
 * ---------------------------------------------------------------------------------------------- */

static PFN_cuTensorMapEncodeTiled_v12000 sm90_encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !f)
            mokc_die(MOKC_EXIT_RUNTIME, "update the NVIDIA driver, or set MOKC_MOK_TILE=mma",
                     "the CUDA driver has no cuTensorMapEncodeTiled (the wgmma tile needs a CUDA 12+ driver)");
        fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    return fn;
}

/* rank = 2: dims {cols, rows}; rank = 3: {cols, rows, mats}. bf16, boxes of 64 columns x box_rows
 * (x 1), 128B swizzle. */
static void sm90_encode(CUtensorMap *map, const void *base, int rank, long cols, long rows, long mats, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)(rows > 0 ? rows : 1), (cuuint64_t)(mats > 0 ? mats : 1)};
    const cuuint64_t strides[2] = {(cuuint64_t)cols * 2, (cuuint64_t)cols * rows * 2};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1}, estr[3] = {1, 1, 1};
    const CUresult r = sm90_encode_fn()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)base, dims,
                                        strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        mokc_die(MOKC_EXIT_RUNTIME, NULL,
                 "moe_mok: cuTensorMapEncodeTiled failed (error %d) for a %ld x %ld x %ld bf16 tensor at %p (internal)",
                 (int)r, mats, rows, cols, base);
}

extern "C" int mok_sm90_available(void) {
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 9 || minor != 0) return 0;
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, mok_forward_sm90_kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.binaryVersion == 90;
}

extern "C" int mok_sm90_blocks_per_sm(void) { return 1; }

extern "C" void mok_sm90_forward_launch(const MokFwdParams *pin, int grid, cudaStream_t stream) {
    static int attr_set = 0;
    if (!attr_set) {
        cudaCheck(cudaFuncSetAttribute(mok_forward_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SM90_SMEM_BYTES));
        attr_set = 1;
    }
    const MokFwdParams &p = *pin;
    if (p.tile_m != SM90_BM)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok: the wgmma tile needs tile_m = %d, not %d (internal)", SM90_BM,
                 p.tile_m);
    Sm90Maps tm;
    sm90_encode(&tm.xr, p.xr, 2, p.C, p.R_max, 1, SM90_BM);
    sm90_encode(&tm.h, p.h, 2, p.I, p.R_max, 1, SM90_BM);
    sm90_encode(&tm.w_gate, p.w_gate, 3, p.I, p.C, p.El, 64);
    sm90_encode(&tm.w_up, p.w_up, 3, p.I, p.C, p.El, 64);
    sm90_encode(&tm.w_down, p.w_down, 3, p.C, p.I, p.El, 64);
    mok_forward_sm90_kernel<<<grid, SM90_THREADS, SM90_SMEM_BYTES, stream>>>(p, tm);
    cudaCheckLaunch();
}
