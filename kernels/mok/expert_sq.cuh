/*
 * The weight-gradient tasks of one routed expert as the gradient norm's squares take them (mok.h:
 * mok_expert_sq_floats): shared by the backward kernel's epilogues and mok_expert_sq_rest.
 * Task t < nWd is wdown (mi, ni) = (t / nC, t % nC), nC = ceil(C / 256): rows mi * 128.. of I, columns ni * 256..
 * of C in g_down (I x C); else wgu u = t - nWd, (mi, ni) = (u / nI, u % nI), nI = ceil(I / 128): rows mi * 128.. of
 * C, columns ni * 128.. of I in g_gate and in g_up (C x I). nWd = ceil(I / 128) * nC.
 * The backward's ticket order counts the same tasks with its own copies of these formulas (mok_backward_sm90.cu:
 * bwd_nWd, bwd_nWg, sm90_bwd_task): through the helpers here its kernel compiles to other SASS (+512 bytes, s36,
 * not measured on a GPU), so they stay apart; check_squares in tests/gpu/test_mok.c fails if the two ever part.
 */
#ifndef MOKC_KERNELS_MOK_EXPERT_SQ_CUH
#define MOKC_KERNELS_MOK_EXPERT_SQ_CUH

__host__ __device__ __forceinline__ int mok_sq_wdown_tasks(int C, int I) {
    return ((I + 127) / 128) * ((C + 255) / 256);
}
__host__ __device__ __forceinline__ int mok_sq_tasks(int C, int I) {
    return mok_sq_wdown_tasks(C, I) + ((C + 127) / 128) * ((I + 127) / 128);
}
__device__ __forceinline__ int mok_sq_task(bool down, int mi, int ni, int C, int I) {
    return down ? mi * ((C + 255) / 256) + ni : mok_sq_wdown_tasks(C, I) + mi * ((I + 127) / 128) + ni;
}

/* Task t's rows [r0, r1) and columns [c0, c1) of its matrix (two for wgu), clipped to it. */
struct MokSqRegion {
    bool down;
    int r0, r1, c0, c1;
};
__device__ __forceinline__ MokSqRegion mok_sq_region(int t, int C, int I) {
    const int nwd = mok_sq_wdown_tasks(C, I);
    const bool down = t < nwd;
    const int u = down ? t : t - nwd, n = down ? (C + 255) / 256 : (I + 127) / 128, w = down ? 256 : 128;
    const int mi = u / n, ni = u - mi * n, M = down ? I : C, N = down ? C : I;
    return {down, mi * 128, min(M, mi * 128 + 128), ni * w, min(N, ni * w + w)};
}

/* Whether the task's whole tile lies inside its matrix. Only then do the epilogues take its squares: past the edges
 * the accumulators need not be zeros (an operand's panel there reads the next row), which the stores clip and the
 * squares would not. */
__device__ __forceinline__ bool mok_sq_whole(const MokSqRegion &r) {
    return r.r1 - r.r0 == 128 && r.c1 - r.c0 == (r.down ? 256 : 128);
}

#endif
