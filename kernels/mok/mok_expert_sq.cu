/*
 * The routed experts' gradient squares that the backward kernel's epilogues leave out, and the rows a step has
 * given each expert so far, which tell the experts whose gradients are zeros (mok.h: mok_expert_sq_rest).
 */
#include "mok.h"

#include "../device_util.cuh"
#include "wgrad_tasks.cuh"

namespace {

constexpr int kThreads = 32 * MOK_SQ_FLOATS; /* a warp a float of the slot */

__device__ __forceinline__ int expert_rows(const int *eo, int e0, int el) { return eo[e0 + el + 1] - eo[e0 + el]; }

__global__ void rows_step_kernel(int *rows_step, const int *eo, int e0, int El, int overwrite) {
    const int el = blockIdx.x * blockDim.x + threadIdx.x;
    if (el < El) rows_step[el] = (overwrite ? 0 : rows_step[el]) + expert_rows(eo, e0, el);
}

/* Block (t, el): the slot of expert el's task t where the epilogues left it: every task of an expert the kernel
 * skipped (all: of every expert), and tasks at the gradients' edges. Zeros for an expert without rows all step
 * (written so, or left unwritten where idle); else the squares of the task's region (wgrad_tasks.cuh), a warp's sum
 * a float. */
__global__ void __launch_bounds__(kThreads)
    sq_rest_kernel(float *sq, const int *rows_step, const int *eo, int e0, const float *g_gate, const float *g_up,
                   const float *g_down, int C, int I, int overwrite, int idle, int all) {
    const int t = blockIdx.x, el = blockIdx.y;
    const MokWgradRegion r = mok_wgrad_region(t, C, I);
    const int rows = expert_rows(eo, e0, el), rows_before = overwrite ? 0 : rows_step[el];
    const bool skipped = all || (rows == 0 && (!overwrite || idle));
    if (!skipped && mok_wgrad_whole(r)) return; /* the epilogue took it */
    float ss = 0.0f;
    if (rows > 0 || rows_before > 0) {
        const long CI = (long)C * I, N = r.down ? C : I;
        const int cols = r.c1 - r.c0, n = (r.r1 - r.r0) * cols;
        for (int m = 0; m < (r.down ? 1 : 2); m++) {
            const float *g = (r.down ? g_down : m == 0 ? g_gate : g_up) + el * CI;
            for (int j = threadIdx.x; j < n; j += kThreads) {
                const float v = g[(long)(r.r0 + j / cols) * N + r.c0 + j % cols];
                ss = fmaf(v, v, ss);
            }
        }
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) sq[((long)el * gridDim.x + t) * MOK_SQ_FLOATS + (threadIdx.x >> 5)] = ss;
}

} // namespace

extern "C" long mok_expert_sq_floats(int El, int C, int I) { return (long)El * mok_wgrad_tasks(C, I) * MOK_SQ_FLOATS; }

extern "C" void mok_expert_sq_rest(float *sq, int *rows_step, const int *expert_offset_all, int e0, int El,
                                   const float *g_gate, const float *g_up, const float *g_down, int C, int I,
                                   int overwrite, int idle, cudaStream_t stream) {
    if (El <= 0) return;
    if (sq) {
        const dim3 grid(mok_wgrad_tasks(C, I), El);
        sq_rest_kernel<<<grid, kThreads, 0, stream>>>(sq, rows_step, expert_offset_all, e0, g_gate, g_up, g_down, C,
                                                     I, overwrite, idle, !mok_grads_by_tma(g_gate, g_up, g_down));
        cudaCheckLaunch();
    }
    rows_step_kernel<<<(El + 127) / 128, 128, 0, stream>>>(rows_step, expert_offset_all, e0, El, overwrite);
    cudaCheckLaunch();
}
