/*
 * The MoK megakernel, forward (issue 7): C API of the schedule kernel, the persistent kernel and
 * the symmetric memory (NCCL window + device communicator + peer pointer table). Host
 * orchestration: src/gpu/moe_mok.h.
 *
 * Schedule (destination side, from the EP group's gathered top-k ids, on the GPU): the dispatch
 * plan (kernels/moe_plan.h) run over all ep * N * k slots in (source rank, token, j) order gives
 * expert_offset_all (E + 1) and row_slot_all (ep * N * k); this rank's local experts
 * [e0, e0 + El) own rows [expert_offset_all[e0], expert_offset_all[e0 + El]): local row
 * lr = row - expert_offset_all[e0], exactly the unfused layer's owner-side order. mok_schedule then
 * cuts each local expert's rows into M tiles of tile_m rows (the last one partial; 64 for the
 * mma.sync tiles, 128 for wgmma: mok_tile_m): mt_start (El + 1) and *total_mt.
 *
 * Persistent kernel, mma.sync tiles (grid = SMs x mok_blocks_per_sm(), MOK_THREADS threads, roles by
 * block index; the wgmma kernel keeps the protocol with roles by warp, and its dispatch hands out
 * tiles in parts, arrive[mt] counting them: mok_forward_sm90.cu, sm90_dispatch):
 *   blocks [0, n_comm): dispatch. M tiles in order from the dispatch counter ticket[2] (a block
 *     that is not resident yet, e.g. behind NCCL's kernels, holds no tile that others wait on):
 *     each row lr of the tile is pulled from its source rank p's window (x rows at x_off, 16-byte
 *     vectors) into xr; then arrive[mt] += 1 (release, GPU scope).
 *   blocks [n_comm, grid): compute, tasks from the monotonic ticket in topological order:
 *     tickets [0, MT * nI): gate/up tile (mt, n tile of I): waits arrive[mt] >= 1 (acquire), then
 *       pre_gate, pre_up = x @ w_gate, x @ w_up (bf16), h = silu(pre_gate) * pre_up (bf16, from the
 *       rounded values, as kernels/swiglu.cu), gu_done[mt] += 1;
 *     tickets [MT * nI, MT * (nI + nC)): down tile (mt, n tile of C): waits gu_done[mt] == nI, then
 *       out = h @ w_down (bf16) stored straight into the source rank's combine slot
 *       (y_off + (token * k + j) * C), peer pointer, plain stores.
 *   MT = *total_mt (device memory: no host synchronisation).
 * Every spin-wait is bounded by budget_ns (globaltimer); on expiry the first block to expire fills
 * *err (host-mapped) and traps.
 * Requirements: mok_tile_supported(tile, C, I) (M is masked), 1 <= n_comm < grid (mma.sync) or
 * <= grid (wgmma).
 * Counters (arrive, gu_done: mt_max each; ticket: MOK_TICKETS) must be zero at launch (mok_forward_launch
 * zeroes them on the stream first). Deterministic: each output element is computed once, by one
 * tile, with a fixed K order.
 */
#ifndef MOKC_KERNELS_MOK_MOK_H
#define MOKC_KERNELS_MOK_MOK_H

#include <nccl.h>
#include <stddef.h>

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOK_TILE_M 64 /* == MOK_BM of tile_mma.cuh; the smallest tile_m of any tile */
#define MOK_TILE_N 64 /* == MOK_BN */
#define MOK_BLOCK_THREADS 128

/* GEMM tile variants. mma.sync (kernels/mok/tile_mma.cuh, any GPU; needs C % 64 == 0 and
 * I % 64 == 0), two versions with bitwise identical results: plain shared-memory loads, or cp.async
 * double buffering + ldmatrix. wgmma + TMA (kernels/mok/mok_forward_sm90.cu, sm_90a only; needs
 * C % 8 == 0 and I % 8 == 0): other bits than the mma.sync tiles (another K blocking), reproducible
 * in itself. */
enum { MOK_TILE_SIMPLE = 0, MOK_TILE_PIPE = 1, MOK_TILE_WGMMA = 2 };

/* The kernels' scalar counters, ticket[MOK_TICKETS]: the task ticket, the watchdog's claim, the
 * dispatch's part ticket, and (the backward's) parts landed and dgrad releases over all M tiles. */
enum { MOK_TICKET_TASK, MOK_TICKET_CLAIM, MOK_TICKET_PART, MOK_TICKET_LANDED, MOK_TICKET_DGRAD, MOK_TICKETS };

/* Roles in the error record. */
enum {
    MOK_ROLE_NONE = 0,
    MOK_ROLE_GATEUP_WAIT_DISPATCH = 1,
    MOK_ROLE_DOWN_WAIT_GATEUP = 2,
    MOK_ROLE_PIPELINE = 3, /* wgmma tile: a shared-memory pipeline barrier never completed */
    MOK_ROLE_BWD_WAIT_DISPATCH = 4, /* backward: a task waiting for its dy rows */
    MOK_ROLE_BWD_WAIT_SWIGLU = 5    /* backward: a task waiting for the SwiGLU backward of its rows */
};

/* The watchdog's host-visible record (cudaHostAlloc mapped). flag != 0 once filled. */
typedef struct {
    volatile int flag;
    int role;          /* MOK_ROLE_* */
    int block;         /* blockIdx.x of the waiter */
    int tile;          /* the ticket (task) that waited */
    int counter;       /* index of the counter (the M tile) */
    int expected, seen;
    long long waited_ns;
} MokError;

typedef struct {
    bf16_t *xr;                  /* (R_max, C) dispatched rows, owner order                    */
    bf16_t *h;                   /* (R_max, I)                                                 */
    bf16_t *pre_gate, *pre_up;   /* (R_max, I) or NULL (not stored)                            */
    const bf16_t *w_gate, *w_up; /* (El, C, I)                                                 */
    const bf16_t *w_down;        /* (El, I, C)                                                 */
    char *const *peer_base;      /* (ep) device array: each EP rank's window base (local one too) */
    size_t x_off, y_off;         /* byte offsets of the x rows and the combine slots in a window */
    const int *row_slot_all;     /* (ep * N * k) */
    const int *expert_offset_all;/* (E + 1)     */
    const int *mt_start;         /* (El + 1)    */
    const int *total_mt;         /* (1)         */
    unsigned *arrive, *gu_done;  /* (mt_max) counters */
    unsigned *ticket;            /* (MOK_TICKETS) */
    MokError *err;               /* device pointer of the mapped record */
    long long budget_ns;
    int e0, El, NK, k, C, I;     /* NK = N * k: slots per rank */
    int mt_max;                  /* counters' length */
    int tile_m;                  /* rows per M tile: mok_tile_m(tile) */
    long R_max;                  /* rows of xr and h                                           */
    int n_comm;                  /* mma.sync: dispatch blocks; wgmma: blocks whose producer
                                    warpgroup also dispatches (3 warps each)                  */
    int skip_dispatch;           /* debug: the dispatch blocks do nothing (the watchdog test) */
    int dispatch_only;           /* benchmark: the compute blocks do nothing (dispatch bandwidth) */
    int tile;                    /* MOK_TILE_* */
    int group_mt;                /* wgmma tile: M tiles a group of the ticket order (down tasks of
                                    group j after gate/up of group j + 1); 0: all gate/up first */
    unsigned long long *trace;   /* wgmma tile: NULL, or (grid x MOK_TRACE_SLOTS): where time goes */
} MokFwdParams;

/* The backward (kernels/mok/mok_backward_sm90.cu, sm_90a, the wgmma tile only), one persistent
 * launch over the forward's schedule (tile_m = 128), tasks from the ticket in topological order:
 *   [dgrad]  (mt, 256 columns of I): dh = dyr @ w_down^T (K = C, fp32), then the SwiGLU backward
 *            from the saved pre_gate, pre_up (as kernels/swiglu.cu) -> dpg, dpu (bf16);
 *            dpg_done[mt] += 1 per consumer. Waits arrive[mt] (its dy rows pulled).
 *   [wdown]  (local expert el, 128 rows of I, 256 columns of C): g_down[el] += h^T @ dyr over el's
 *            rows in order (fp32, read-modify-write: one task per element). Waits arrive of el's tiles.
 *   [dx]     (mt, 256 columns of C): dx rows = dpg @ w_gate^T + dpu @ w_up^T (K = 2I, fp32, bf16
 *            out), pushed to the source's slot (token * k + j) at y_off. Waits dpg_done[mt] == 2 nA.
 *   [wgu]    (el, 128 rows of C, 128 columns of I): g_gate[el] += xr^T @ dpg, g_up[el] += xr^T @ dpu
 *            (one 256-wide accumulator). Waits dpg_done of el's tiles.
 * Dispatch warps pull each owner row's dy, the token's bf16 row at dy_off in the source's window
 * times the slot's gate at gate_off, rounded to bf16 (mok_pull_row), into dyr, a tile in parts
 * (sm90_dispatch), and add each to arrive[mt] and to
 * ticket[MOK_TICKET_LANDED]; each dgrad consumer's release goes to dpg_done[mt] and to
 * ticket[MOK_TICKET_DGRAD]. A weight-gradient task's producer that finds the whole count complete
 * waits on no expert's tiles again (one acquire, not two a tile for each of El experts). Counters
 * (arrive, dpg_done: mt_max each; ticket: MOK_TICKETS) zeroed by mok_backward_launch.
 * Deterministic: one task per output element, fixed K order. */
typedef struct {
    bf16_t *dyr, *dpg, *dpu;           /* (R_max, C), (R_max, I) x 2: owner-side scratch        */
    const bf16_t *xr, *h;              /* the forward's owner rows and SwiGLU output (R_max, .) */
    const bf16_t *pre_gate, *pre_up;   /* (R_max, I)                                            */
    const bf16_t *w_gate, *w_up, *w_down;
    float *g_gate, *g_up, *g_down;     /* fp32 gradients of this rank's experts (see overwrite) */
    char *const *peer_base;
    size_t dy_off, gate_off, y_off;    /* window offsets: dy rows (bf16), gates, dx slots       */
    const int *row_slot_all, *expert_offset_all, *mt_start, *total_mt; /* the forward's schedule */
    unsigned *arrive, *dpg_done, *ticket;
    MokError *err;
    long long budget_ns;
    long R_max;
    int e0, El, NK, k, C, I, mt_max, tile_m;
    int n_comm, skip_dispatch;
    int overwrite;                     /* 1: the weight gradients are written, not added to      */
    const int *rows_before;            /* NULL, or (El) each local expert's rows in the step's
                                          launches before this one (mok_expert_sq_rest's
                                          rows_step): then an expert without rows here is left
                                          unwritten, and one with rows is written where the step
                                          gave it none before (overwrite: every one), else added */
    float *sq;                         /* NULL, or the step's last backward: each weight-gradient
                                          task's squares of what it leaves in the gradients
                                          (slots: mok_expert_sq_floats; what the epilogues leave
                                          out: mok_expert_sq_rest)                               */
    unsigned long long *trace;         /* NULL, or (grid x MOK_TRACE_SLOTS): where time goes      */
} MokBwdParams;

/* The kernels' traces (diagnostic, MOKC_MOK_TRACE=1), per block, in ns of globaltimer. Consumer
 * warpgroup 0 (its partner runs in step): [0] waiting for tasks, then per task kind (backward:
 * dgrad, wdown, dx, wgu; forward: gate/up, down) [1 + 3 kind] tasks, [2 + 3 kind] main loop,
 * [3 + 3 kind] epilogue; the producer: [MOK_TRACE_PRODUCER + kind] waiting on the protocol's
 * counters; [MOK_TRACE_EPI + 0..3] the sections of the first kind's epilogue (backward, dgrad:
 * staging, SwiGLU, stores, release; forward, gate/up: pre_gate and pre_up staged, stored, the
 * SwiGLU, h stored and the release); [MOK_TRACE_PUSH + 0..2] those of the pushes (forward
 * down, backward dx). [MOK_TRACE_SPAN] consumer 0 from start to its last task (the spread over
 * blocks is the tail). Forward only: [MOK_TRACE_FWD_DISPATCH] the block's dispatch warps from
 * start to their last row. [MOK_TRACE_WAIT + kind]: the part of [0] spent
 * waiting for a task of that kind (skipped tasks' waits stay in [0] only). [MOK_TRACE_LATE]: tasks not
 * yet in the task ring when the consumer asked, [MOK_TRACE_LATE + 1] their waits (the rest of [0]
 * is the others': time between tasks that the producer did not cause). The traced backward spills
 * (108 / 104 bytes at s19; the untraced kernels spill nothing: tests/test_kernel_report.c): its times run a
 * little long. */
/* MOK_TRACE_SLOTS: a block's words; the forward's and the backward's traces are separate buffers,
 * so the forward's slots 15, 16 and the backward producer's do not collide */
#define MOK_TRACE_SLOTS 32
#define MOK_TRACE_PRODUCER 13 /* the producer's 4 slots follow the consumer's 13 */
#define MOK_TRACE_FWD_DISPATCH 15
#define MOK_TRACE_EPI 17
#define MOK_TRACE_WAIT 21 /* 4 slots: waiting for tasks, by the kind that came */
#define MOK_TRACE_LATE 25 /* 2 slots: tasks not in the ring when asked for, and their waits */
#define MOK_TRACE_PUSH 27 /* 3 slots: the push epilogues' (down, dx) staging acquired, rows staged, copies issued */
#define MOK_TRACE_SPAN 30 /* consumer 0 from start to its last task, both kernels */

void mok_backward_launch(const MokBwdParams *p, int grid, cudaStream_t stream);

/* The routed experts' gradient squares, for the gradient norm without another read of the gradients
 * (22 GB a step at mokc-small's sizes, 3.6 ms: docs/perf-notes.md, s36). On the step's last backward
 * (MokBwdParams.sq) the weight-gradient epilogues sum the squares of the values they leave, one float a
 * warp: the slot of expert el's task t (kernels/mok/wgrad_tasks.cuh: the wdown tasks, then the wgu tasks)
 * holds MOK_SQ_FLOATS floats, consumer w's warp j at w * 4 + j, each in fp32 over a thread's 128 values
 * and a fixed butterfly. */
#define MOK_SQ_FLOATS 8
long mok_expert_sq_floats(int El, int C, int I); /* the slots of El experts, in floats */

/* Whether the backward kernel moves the weight gradients by TMA (16-byte aligned): only then do its epilogues take
 * their squares (mok_expert_sq_rest takes the rest). */
static inline int mok_grads_by_tma(const float *g_gate, const float *g_up, const float *g_down) {
    return ((size_t)g_gate | (size_t)g_up | (size_t)g_down) % 16 == 0;
}

/* After each backward launch, on its stream (idle: the launch had rows_before = rows_step): with sq (the step's
 * last backward), first the slots the epilogues left are filled: every task of an expert the kernel skipped (no
 * rows in this launch, adding or idle; every expert where the gradients are not mok_grads_by_tma) and the tasks at
 * the gradients' edges (C or I not a multiple of the tile). Zeros where the expert had no rows all step (its
 * gradients are zeros the first launch wrote, or unwritten where idle), else the squares of the task's part of the
 * gradients, read once in a fixed order. Then rows_step[el] becomes the rows local expert el had in this step so
 * far (restarting when overwrite). rows from expert_offset_all (E + 1) as the kernel takes them; gradients as
 * MokBwdParams's. */
void mok_expert_sq_rest(float *sq, int *rows_step, const int *expert_offset_all, int e0, int El, const float *g_gate,
                        const float *g_up, const float *g_down, int C, int I, int overwrite, int idle,
                        cudaStream_t stream);

/* Upper bound of the M tiles of any routing and tile: ceil(R_max / MOK_TILE_M) + El. */
int mok_mt_max(long R_max, int El);

/* Rows per M tile of a GEMM tile variant (MOK_TILE_*). */
int mok_tile_m(int tile);

/* mt_start (El + 1), *total_mt from expert_offset_all (E + 1). One tiny launch. */
void mok_schedule(int *mt_start, int *total_mt, const int *expert_offset_all, int e0, int El, int tile_m,
                  cudaStream_t stream);

/* p[i] = i for i < n (the combine's identity slot map: mok's combine slots are in (token, j) order). */
void mok_iota(int *p, long n, cudaStream_t stream);

/* Blocks of the persistent kernel that fit on one SM at once (at most 4): the grid is this times
 * the SM count, so every block is resident (the spin-waits rely on it). */
int mok_blocks_per_sm(int tile);

/* 1 if `tile` can run shape C x I on the current device with this build (the wgmma tile needs an
 * SM 9.0 GPU and a build for sm_90a); otherwise 0 and *why says what is missing. */
int mok_tile_supported(int tile, int C, int I, const char **why);

/* Zeroes the counters, then launches the persistent kernel on `grid` blocks (the wgmma tile first
 * encodes its tensor maps from the pointers in *p). */
void mok_forward_launch(const MokFwdParams *p, int grid, cudaStream_t stream);

/* The wgmma tile's part of the above (mok_forward_sm90.cu). */
int mok_sm90_blocks_per_sm(void);
int mok_sm90_available(void);
void mok_sm90_forward_launch(const MokFwdParams *p, int grid, cudaStream_t stream);

/* Symmetric memory for the EP group: `bytes` per rank. comm == NULL (ep == 1): a plain cudaMalloc
 * buffer. Otherwise ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) +
 * ncclDevCommCreate, and a device table of every EP rank's window base via ncclGetLsaPointer
 * (requires the whole EP group in one LSA (NVLink) team). Collective over comm. Returns ncclSuccess
 * or the failing NCCL code (*msg says which step); CUDA errors stop the job. */
typedef struct MokSymm MokSymm;
ncclResult_t mok_symm_create(MokSymm **out, ncclComm_t comm, int ep, size_t bytes, const char **msg);
void *mok_symm_local(const MokSymm *s);
char *const *mok_symm_peer_table(const MokSymm *s); /* device array (ep) */
void mok_symm_destroy(MokSymm *s);

/* Whether the megakernel can run on the EP communicator `comm` of `ep` ranks (call it before
 * mok_symm_create, to choose the layer): every EP rank must reach every other by loads and stores,
 * i.e. the EP group is one NCCL LSA team (one NVLink domain: an HGX node, or an NVL72 rack with
 * MNNVL) whose GPUs can map each other's memory (NCCL offers symmetric memory: ncclDevCommCreate
 * succeeds), and ep fits the peer table. Returns 1 if so; otherwise 0 and `why` holds one sentence
 * without a final period, e.g. "the 16 EP ranks span 2 NVLink (LSA) domains of 8 ranks: the
 * megakernel needs every EP peer in one domain". comm == NULL or ep == 1: 1 (no peers). Collective
 * over comm (a device communicator made and destroyed, one ncclAllReduce): every EP rank calls it
 * and all get the same answer. CUDA failures stop the job. */
int mok_symm_lsa_check(ncclComm_t comm, int ep, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
