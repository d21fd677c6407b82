/*
 * The weight-gradient tasks of one routed expert: how the backward kernel tiles an expert's gradients (its ticket
 * order and epilogues, mok_backward_sm90.cu) and the region of each that the gradient norm's squares take (mok.h:
 * mok_expert_sq_floats; the epilogues and mok_expert_sq_rest).
 * wdown tasks tile g_down (I x C) in 128 x 256: (mi, ni) covers rows mi * 128.. of I, columns ni * 256.. of C;
 * wgu tasks tile g_gate and g_up (C x I) together in 128 x 128: rows mi * 128.. of C, columns ni * 128.. of I.
 * An expert's task t < mok_wdown_tasks is wdown (t / mok_wdown_cols, t % mok_wdown_cols); else wgu, u = t -
 * mok_wdown_tasks, (u / mok_wgu_cols, u % mok_wgu_cols).
 */
#ifndef MOKC_KERNELS_MOK_WGRAD_TASKS_CUH
#define MOKC_KERNELS_MOK_WGRAD_TASKS_CUH

__host__ __device__ __forceinline__ int mok_wdown_cols(int C) { return (C + 255) / 256; }
__host__ __device__ __forceinline__ int mok_wgu_cols(int I) { return (I + 127) / 128; }
__host__ __device__ __forceinline__ int mok_wdown_tasks(int C, int I) { return ((I + 127) / 128) * mok_wdown_cols(C); }
__host__ __device__ __forceinline__ int mok_wgu_tasks(int C, int I) { return ((C + 127) / 128) * mok_wgu_cols(I); }
__host__ __device__ __forceinline__ int mok_wgrad_tasks(int C, int I) {
    return mok_wdown_tasks(C, I) + mok_wgu_tasks(C, I);
}
__device__ __forceinline__ int mok_wgrad_task(bool down, int mi, int ni, int C, int I) {
    return down ? mi * mok_wdown_cols(C) + ni : mok_wdown_tasks(C, I) + mi * mok_wgu_cols(I) + ni;
}

/* Task t's rows [r0, r1) and columns [c0, c1) of its matrix (two for wgu), clipped to it. */
struct MokWgradRegion {
    bool down;
    int r0, r1, c0, c1;
};
__device__ __forceinline__ MokWgradRegion mok_wgrad_region(int t, int C, int I) {
    const int nwd = mok_wdown_tasks(C, I);
    const bool down = t < nwd;
    const int u = down ? t : t - nwd, n = down ? mok_wdown_cols(C) : mok_wgu_cols(I), w = down ? 256 : 128;
    const int mi = u / n, ni = u - mi * n, M = down ? I : C, N = down ? C : I;
    return {down, mi * 128, min(M, mi * 128 + 128), ni * w, min(N, ni * w + w)};
}

/* Whether the task's whole tile lies inside its matrix. Only then do the epilogues take its squares: past the edges
 * the accumulators need not be zeros (an operand's panel there reads the next row), which the stores clip and the
 * squares would not. */
__device__ __forceinline__ bool mok_wgrad_whole(const MokWgradRegion &r) {
    return r.r1 - r.r0 == 128 && r.c1 - r.c0 == (r.down ? 256 : 128);
}

#endif
