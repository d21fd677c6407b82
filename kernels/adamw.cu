/*
 * Fused AdamW (adamw.h). The update spells out every rounding with __f*_rn intrinsics so nvcc
 * cannot contract into FMAs: the result is the float arithmetic of src/optim.c adamw_step.
 */
#include "adamw.h"

#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include <type_traits>

#include "device_util.cuh"
#include "master_split.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kOwedTensors = 3;
constexpr int kOwedGrid = 1056; /* 8 blocks of kThreads on each of an H200's 132 SMs */

struct AdamWConst {
    float lr, b1, b2, omb1, omb2, ic1, ic2, eps, wd, gs;
};

/* One element; BF16: m and v rounded to bf16 after their update (as stored), and the step taken with those. */
template <bool BF16>
__device__ __forceinline__ void adamw_elem(float &w, float graw, float &m, float &v, const AdamWConst &a) {
    const float g = __fmul_rn(graw, a.gs);
    m = __fadd_rn(__fmul_rn(a.b1, m), __fmul_rn(a.omb1, g));
    v = __fadd_rn(__fmul_rn(a.b2, v), __fmul_rn(__fmul_rn(a.omb2, g), g));
    if (BF16) m = __bfloat162float(__float2bfloat16_rn(m)), v = __bfloat162float(__float2bfloat16_rn(v));
    const float mhat = __fmul_rn(m, a.ic1), vhat = __fmul_rn(v, a.ic2);
    const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), a.eps)), __fmul_rn(a.wd, w));
    w = __fsub_rn(w, __fmul_rn(a.lr, step));
}

/* Four elements through adamw_elem (the vector paths). */
template <bool BF16>
__device__ __forceinline__ void adamw_elem4(float4 &w, float4 g, float4 &m, float4 &v, const AdamWConst &a) {
    adamw_elem<BF16>(w.x, g.x, m.x, v.x, a);
    adamw_elem<BF16>(w.y, g.y, m.y, v.y, a);
    adamw_elem<BF16>(w.z, g.z, m.z, v.z, a);
    adamw_elem<BF16>(w.w, g.w, m.w, v.w, a);
}

/* Call c's constants from sched (gpu_adamw_record), the others a's. */
__device__ __forceinline__ AdamWConst call_const(AdamWConst a, const float *sched, int c) {
    a.lr = __ldg(sched + 3 * c), a.ic1 = __ldg(sched + 3 * c + 1), a.ic2 = __ldg(sched + 3 * c + 2);
    return a;
}

/* An element whose moments are both zero keeps them zero under a zero gradient (+0 after the first call, a -0 m
 * included), and its step's quotient is then +0 / eps = +0: adamw_elem's float operations reduce to the weight
 * decay's, call c's lr from sched. Needs eps > 0 and finite bias corrections (beta1, beta2 < 1). */
__device__ __forceinline__ float decay_only(float w, const AdamWConst &a, const float *sched, int c) {
    return __fsub_rn(w, __fmul_rn(__ldg(sched + 3 * c), __fadd_rn(0.0f, __fmul_rn(a.wd, w))));
}

/* Calls from + 1 .. upto as gpu_adamw made them on a zero gradient, each with its constants from sched, the state in
 * registers between calls (split masters and bf16 moments round trip exactly, master_split.cuh): one element or
 * four. Elements with zero moments (rows and experts no gradient has reached since the state began) take
 * decay_only: 4 float operations a call where adamw_elem's square root and division take their slow paths at 0
 * (76 instructions an element and call, s43 r1). */
template <bool BF16>
__device__ __forceinline__ void replay(float &w, float &m, float &v, int from, int upto, const AdamWConst &a,
                                       const float *sched) {
    if (m == 0.0f && v == 0.0f && a.eps > 0.0f) {
        for (int c = from + 1; c <= upto; c++) w = decay_only(w, a, sched, c);
        if (from < upto) m = 0.0f, v = 0.0f;
        return;
    }
    for (int c = from + 1; c <= upto; c++) adamw_elem<BF16>(w, 0.0f, m, v, call_const(a, sched, c));
}
template <bool BF16>
__device__ __forceinline__ void replay(float4 &w, float4 &m, float4 &v, int from, int upto, const AdamWConst &a,
                                       const float *sched) {
    if (m.x == 0.0f && m.y == 0.0f && m.z == 0.0f && m.w == 0.0f && v.x == 0.0f && v.y == 0.0f && v.z == 0.0f &&
        v.w == 0.0f && a.eps > 0.0f) {
        for (int c = from + 1; c <= upto; c++) {
            w.x = decay_only(w.x, a, sched, c), w.y = decay_only(w.y, a, sched, c);
            w.z = decay_only(w.z, a, sched, c), w.w = decay_only(w.w, a, sched, c);
        }
        if (from < upto) m = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v = m;
        return;
    }
    for (int c = from + 1; c <= upto; c++)
        adamw_elem4<BF16>(w, make_float4(0.0f, 0.0f, 0.0f, 0.0f), m, v, call_const(a, sched, c));
}

/* The moments as stored: fp32, or bf16 (values already rounded, so packing them is exact). */
template <bool BF16> struct Moments {
    using T = typename std::conditional<BF16, __nv_bfloat16, float>::type;
    __device__ __forceinline__ static float4 load4(const T *p, long gi) {
        if constexpr (BF16) {
            const uint2 u = reinterpret_cast<const uint2 *>(p)[gi];
            return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
        } else {
            return reinterpret_cast<const float4 *>(p)[gi];
        }
    }
    __device__ __forceinline__ static void store4(T *p, long gi, float4 x) {
        if constexpr (BF16) reinterpret_cast<uint2 *>(p)[gi] = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
        else reinterpret_cast<float4 *>(p)[gi] = x;
    }
    __device__ __forceinline__ static float load(const T *p, long i) {
        if constexpr (BF16) return __bfloat162float(p[i]);
        else return p[i];
    }
    __device__ __forceinline__ static void store(T *p, long i, float x) {
        if constexpr (BF16) p[i] = __float2bfloat16_rn(x);
        else p[i] = x;
    }
};

/* The masters as stored: fp32 beside an optional bf16 copy (written, round to nearest even), or SPLIT, the pair of
 * master_split.h (the bf16 weight and its remainder, read and written). */
template <bool SPLIT> struct Masters {
    float *w32;
    __nv_bfloat16 *bf;
    int16_t *lo;
    __device__ __forceinline__ float4 load4(long gi) const {
        if constexpr (SPLIT) {
            const uint2 h = reinterpret_cast<const uint2 *>(bf)[gi], l = reinterpret_cast<const uint2 *>(lo)[gi];
            return make_float4(join(h.x, l.x), join(h.x >> 16, l.x >> 16), join(h.y, l.y), join(h.y >> 16, l.y >> 16));
        } else {
            return reinterpret_cast<const float4 *>(w32)[gi];
        }
    }
    __device__ __forceinline__ void store4(long gi, float4 w) const {
        if constexpr (SPLIT) {
            uint16_t h[4];
            int16_t l[4];
            master_split_elem(w.x, h[0], l[0]);
            master_split_elem(w.y, h[1], l[1]);
            master_split_elem(w.z, h[2], l[2]);
            master_split_elem(w.w, h[3], l[3]);
            reinterpret_cast<uint2 *>(bf)[gi] = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
            reinterpret_cast<uint2 *>(lo)[gi] = make_uint2((uint16_t)l[0] | (uint32_t)(uint16_t)l[1] << 16,
                                                           (uint16_t)l[2] | (uint32_t)(uint16_t)l[3] << 16);
        } else {
            reinterpret_cast<float4 *>(w32)[gi] = w;
            if (bf) reinterpret_cast<uint2 *>(bf)[gi] = make_uint2(pack_bf16x2(w.x, w.y), pack_bf16x2(w.z, w.w));
        }
    }
    __device__ __forceinline__ float load(long i) const {
        if constexpr (SPLIT) return master_join_elem(__bfloat16_as_ushort(bf[i]), lo[i]);
        else return w32[i];
    }
    __device__ __forceinline__ void store(long i, float w) const {
        if constexpr (SPLIT) {
            uint16_t h;
            master_split_elem(w, h, lo[i]);
            bf[i] = __ushort_as_bfloat16(h);
        } else {
            w32[i] = w;
            if (bf) bf[i] = __float2bfloat16_rn(w);
        }
    }
    /* the pair in the low 16 bits of two words */
    __device__ __forceinline__ static float join(uint32_t h, uint32_t l) {
        return master_join_elem((uint16_t)h, (int16_t)(uint16_t)l);
    }
};

/* Elements [i0, i1) of one tensor (groups of four with vec: i0 and i1 count groups) in steps of stride from i0: each
 * loaded, its calls from + 1 .. upto replayed, with grads call upto + 1 made with its gradient (constants ag), and
 * stored. */
template <bool BF16, bool SPLIT>
__device__ __forceinline__ void replay_span(const Masters<SPLIT> &p, typename Moments<BF16>::T *m,
                                            typename Moments<BF16>::T *v, long i0, long i1, long stride, int vec,
                                            int from, int upto, const AdamWConst &a, const float *sched,
                                            const float *grads, const AdamWConst &ag) {
    typedef Moments<BF16> S;
    if (vec) {
        for (long i = i0; i < i1; i += stride) {
            float4 w = p.load4(i), mm = S::load4(m, i), vv = S::load4(v, i);
            replay<BF16>(w, mm, vv, from, upto, a, sched);
            if (grads) adamw_elem4<BF16>(w, reinterpret_cast<const float4 *>(grads)[i], mm, vv, ag);
            p.store4(i, w);
            S::store4(m, i, mm);
            S::store4(v, i, vv);
        }
    } else {
        for (long i = i0; i < i1; i += stride) {
            float w = p.load(i), mm = S::load(m, i), vv = S::load(v, i);
            replay<BF16>(w, mm, vv, from, upto, a, sched);
            if (grads) adamw_elem<BF16>(w, grads[i], mm, vv, ag);
            p.store(i, w);
            S::store(m, i, mm);
            S::store(v, i, vv);
        }
    }
}

/* blockIdx.y: the elements [y block_n, (y + 1) block_n) of n, whose gradient is zeros, not read, where live[y] is 0
 * (live NULL: one block of all n). With updated, such a block is not touched at all (its update deferred to
 * adamw_catch_up_kernel) and a live one records `call` as its state's. With vec, block_n is a multiple of 4. */
template <bool BF16, bool SPLIT>
__global__ void adamw_kernel(Masters<SPLIT> p, const float *grads, typename Moments<BF16>::T *m,
                             typename Moments<BF16>::T *v, long n, const int *live, long block_n, int *updated,
                             int call, AdamWConst a, int vec) {
    typedef Moments<BF16> S;
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long b0 = (long)blockIdx.y * block_n, b1 = min(n, b0 + block_n);
    const bool zeros = live && live[blockIdx.y] == 0;
    if (updated) {
        if (zeros) return;
        if (tid == 0) updated[blockIdx.y] = call;
    }
    const long g0 = b0 / 4, g1 = vec ? g0 + (b1 - b0) / 4 : g0;
    for (long gi = g0 + tid; gi < g1; gi += stride) {
        float4 w = p.load4(gi);
        const float4 g = zeros ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : reinterpret_cast<const float4 *>(grads)[gi];
        float4 mm = S::load4(m, gi), vv = S::load4(v, gi);
        adamw_elem4<BF16>(w, g, mm, vv, a);
        p.store4(gi, w);
        S::store4(m, gi, mm);
        S::store4(v, gi, vv);
    }
    for (long i = b0 + (g1 - g0) * 4 + tid; i < b1; i += stride) {
        float w = p.load(i), mm = S::load(m, i), vv = S::load(v, i);
        adamw_elem<BF16>(w, zeros ? 0.0f : grads[i], mm, vv, a);
        p.store(i, w);
        S::store(m, i, mm);
        S::store(v, i, vv);
    }
}

/* The blocks owed calls: list[0] = their count, then (block, its state's call) pairs in block order; updated[b] =
 * upto for each, as the catch-up will leave them. One warp, 32 blocks a round. */
__global__ void adamw_owed_kernel(int *list, int *updated, const int *rows_at, int blocks, int upto) {
    const int lane = threadIdx.x;
    int count = 0;
    for (int b0 = 0; b0 < blocks; b0 += 32) {
        const int b = b0 + lane;
        const bool wanted = b < blocks && (!rows_at || rows_at[b + 1] > rows_at[b]);
        const int from = wanted ? updated[b] : upto;
        const unsigned owed = __ballot_sync(0xffffffffu, from < upto);
        if (from < upto) {
            const int at = count + __popc(owed & ((1u << lane) - 1));
            list[1 + 2 * at] = b, list[2 + 2 * at] = from;
            updated[b] = upto;
        }
        count += __popc(owed);
    }
    if (lane == 0) list[0] = count;
}

/* Up to three tensors that share their blocks' calls (an MoE layer's w_gate, w_up, w_down). */
template <bool BF16, bool SPLIT> struct OwedTensors {
    Masters<SPLIT> p[kOwedTensors];
    typename Moments<BF16>::T *m[kOwedTensors], *v[kOwedTensors];
    float wd[kOwedTensors];
};

/* The owed blocks of adamw_owed_kernel's list, each block and tensor in turn over the whole grid (whatever the list's
 * length): each element replays its block's calls from + 1 .. upto, so the bits are those the calls would have
 * left. */
template <bool BF16, bool SPLIT>
__global__ void adamw_catch_up_kernel(OwedTensors<BF16, SPLIT> t, int n_tensors, long block_n, const int *list,
                                      int upto, const float *sched, AdamWConst a, int vec) {
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long span = vec ? block_n / 4 : block_n;
    const int owed = list[0] * n_tensors;
    for (int ek = 0; ek < owed; ek++) {
        const int k = ek % n_tensors, b = list[1 + 2 * (ek / n_tensors)], from = list[2 + 2 * (ek / n_tensors)];
        AdamWConst ak = a;
        ak.wd = t.wd[k];
        replay_span<BF16, SPLIT>(t.p[k], t.m[k], t.v[k], (long)b * span + tid, (long)(b + 1) * span, stride, vec, from,
                                 upto, ak, sched, nullptr, ak);
    }
}

/* A block a row of row_n elements (row ids[blockIdx.x], distinct; ids NULL: row blockIdx.x): the calls updated[r] + 1
 * .. upto replayed, then with grads call upto + 1 with the row's gradient; updated[r] becomes the last call made. A
 * row already there is not touched. With vec, row_n is a multiple of 4. */
template <bool BF16, bool SPLIT>
__global__ void adamw_rows_kernel(Masters<SPLIT> p, typename Moments<BF16>::T *m, typename Moments<BF16>::T *v,
                                  const float *grads, long row_n, const int *ids, int *updated, int upto,
                                  const float *sched, AdamWConst a, int vec) {
    const long r = ids ? ids[blockIdx.x] : blockIdx.x;
    const int from = updated[r], last = grads ? upto + 1 : upto;
    __syncthreads(); /* every thread has read updated[r] before thread 0 moves it */
    if (from >= last) return;
    if (threadIdx.x == 0) updated[r] = last;
    const long span = vec ? row_n / 4 : row_n;
    replay_span<BF16, SPLIT>(p, m, v, r * span + threadIdx.x, (r + 1) * span, blockDim.x, vec, from, upto, a, sched,
                             grads, call_const(a, sched, last));
}

__global__ void adamw_record_kernel(float *sched, int call, float lr, float ic1, float ic2) {
    sched[3 * call] = lr, sched[3 * call + 1] = ic1, sched[3 * call + 2] = ic2;
}

/* A tensor's masters as the kernels take them. */
template <bool SPLIT> Masters<SPLIT> masters_of(const AdamWTensor &t) {
    return Masters<SPLIT>{t.params, reinterpret_cast<__nv_bfloat16 *>(t.params_bf16), t.params_lo};
}

/* launch(BF16, SPLIT) with the state's form as two std::bool_constant: bf16 or fp32 moments, split or fp32 masters. */
template <class Launch> void by_state_form(int state_bf16, int split, const Launch &launch) {
    if (state_bf16 && split) launch(std::true_type{}, std::true_type{});
    else if (state_bf16) launch(std::true_type{}, std::false_type{});
    else if (split) launch(std::false_type{}, std::true_type{});
    else launch(std::false_type{}, std::false_type{});
}

template <bool BF16, bool SPLIT>
void adamw_launch(const AdamWTensor &t, const float *grads, long n, const int *live, long block_n, int *updated,
                  int call, AdamWConst a, int vec, cudaStream_t stream) {
    typedef typename Moments<BF16>::T T;
    const long blocks = live ? n / block_n : 1, per = live ? block_n : n;
    vec = vec && (!live || per % 4 == 0); /* a whole range ends in the element path's tail */
    const long most = kMaxGridBlocks / blocks > 0 ? kMaxGridBlocks / blocks : 1;
    const long x = grid_for(vec ? per / 4 + 4 : per, kThreads);
    const dim3 grid((unsigned)(x < most ? x : most), (unsigned)blocks);
    adamw_kernel<BF16, SPLIT><<<grid, kThreads, 0, stream>>>(masters_of<SPLIT>(t), grads, static_cast<T *>(t.m),
                                                             static_cast<T *>(t.v), n, live, per, updated, call, a,
                                                             vec);
}

template <bool BF16, bool SPLIT>
void catch_up_launch(const AdamWTensor *ts, int n_tensors, long block_n, const int *list, int upto,
                     const float *sched, AdamWConst a, int vec, cudaStream_t stream) {
    typedef typename Moments<BF16>::T T;
    OwedTensors<BF16, SPLIT> t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < n_tensors; k++) {
        t.p[k] = masters_of<SPLIT>(ts[k]);
        t.m[k] = static_cast<T *>(ts[k].m), t.v[k] = static_cast<T *>(ts[k].v);
        t.wd[k] = (float)ts[k].weight_decay;
    }
    /* enough threads to fill the GPU whatever the list holds; an empty list costs their exit */
    adamw_catch_up_kernel<BF16, SPLIT><<<kOwedGrid, kThreads, 0, stream>>>(t, n_tensors, block_n, list, upto, sched,
                                                                            a, vec);
}

template <bool BF16, bool SPLIT>
void rows_launch(const AdamWTensor *t, const float *grads, long row_n, const int *ids, long n_rows, int *updated,
                 int upto, const float *sched, AdamWConst a, int vec, cudaStream_t stream) {
    typedef typename Moments<BF16>::T T;
    adamw_rows_kernel<BF16, SPLIT><<<(unsigned)n_rows, kThreads, 0, stream>>>(
        masters_of<SPLIT>(*t), static_cast<T *>(t->m), static_cast<T *>(t->v), grads, row_n, ids, updated, upto, sched,
        a, vec);
}

/* The same host-side conversions as adamw_step (src/optim.c). */
AdamWConst adamw_const(double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale,
                       long t_step) {
    AdamWConst a;
    a.b1 = (float)beta1;
    a.b2 = (float)beta2;
    a.eps = (float)eps;
    a.ic1 = (float)(1.0 / (1.0 - pow(beta1, (double)t_step)));
    a.ic2 = (float)(1.0 / (1.0 - pow(beta2, (double)t_step)));
    a.lr = (float)lr;
    a.gs = (float)grad_scale;
    a.wd = (float)weight_decay;
    a.omb1 = 1.0f - a.b1;
    a.omb2 = 1.0f - a.b2;
    return a;
}

/* Whether a tensor's masters and moments allow 4 elements an access; split masters (params NULL) need both halves. */
int state_vec(const float *params, const bf16_t *params_bf16, const int16_t *params_lo, const void *m, const void *v,
              int state_bf16, const char *who) {
    if (!params && (!params_bf16 || !params_lo))
        mokc_cuda_check(cudaErrorInvalidValue, who, __FILE__, __LINE__);
    const int state_align = state_bf16 ? 8 : 16;
    return aligned(m, state_align) && aligned(v, state_align) &&
           (params ? aligned(params, 16) && (!params_bf16 || aligned(params_bf16, 8))
                   : aligned(params_bf16, 8) && aligned(params_lo, 8));
}

} // namespace

extern "C" void gpu_adamw(const AdamWTensor *t, const float *grads, int state_bf16, long n, const int *live,
                          long block_n, int *updated, int call, double lr, double beta1, double beta2, double eps,
                          double grad_scale, long t_step, cudaStream_t stream) {
    if (n <= 0) return;
    if (live && (block_n <= 0 || n % block_n != 0 || n / block_n > 65535))
        mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw: live blocks need n a multiple of block_n, at most 65535 "
                        "blocks", __FILE__, __LINE__);
    if (updated && !live)
        mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw: updated needs live", __FILE__, __LINE__);
    const AdamWConst a = adamw_const(lr, beta1, beta2, eps, t->weight_decay, grad_scale, t_step);
    const int vec = aligned(grads, 16) && state_vec(t->params, t->params_bf16, t->params_lo, t->m, t->v, state_bf16,
                                                    "gpu_adamw: split masters need params_bf16 and params_lo");
    by_state_form(state_bf16, t->params == NULL, [&](auto bf16, auto halves) {
        adamw_launch<bf16.value, halves.value>(*t, grads, n, live, block_n, updated, call, a, vec, stream);
    });
    cudaCheckLaunch();
}

extern "C" void gpu_adamw_record(float *sched, int call, double lr, double beta1, double beta2, long t_step,
                                 cudaStream_t stream) {
    const AdamWConst a = adamw_const(lr, beta1, beta2, 0.0, 0.0, 1.0, t_step);
    adamw_record_kernel<<<1, 1, 0, stream>>>(sched, call, a.lr, a.ic1, a.ic2);
    cudaCheckLaunch();
}

extern "C" void gpu_adamw_owed(int *list, int *updated, const int *rows_at, int blocks, int upto,
                               cudaStream_t stream) {
    adamw_owed_kernel<<<1, 32, 0, stream>>>(list, updated, rows_at, blocks, upto);
    cudaCheckLaunch();
}

extern "C" void gpu_adamw_catch_up(const AdamWTensor *tensors, int n_tensors, int state_bf16, long block_n,
                                   const int *list, int upto, const float *sched, double beta1, double beta2,
                                   double eps, cudaStream_t stream) {
    if (n_tensors < 1 || n_tensors > kOwedTensors || block_n <= 0)
        mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw_catch_up: 1 to 3 tensors, blocks of at least 1 element",
                        __FILE__, __LINE__);
    const int split = tensors[0].params == NULL;
    const char *mixed = "gpu_adamw_catch_up: the tensors' masters all fp32 or all split (params_bf16 and params_lo)";
    int vec = block_n % 4 == 0;
    for (int k = 0; k < n_tensors; k++) {
        const AdamWTensor *t = &tensors[k];
        if ((t->params == NULL) != split) mokc_cuda_check(cudaErrorInvalidValue, mixed, __FILE__, __LINE__);
        vec = state_vec(t->params, t->params_bf16, t->params_lo, t->m, t->v, state_bf16, mixed) && vec;
    }
    /* lr, ic1, ic2 come from sched, wd from each tensor; a zero gradient at scale 1 is the scaled zero of any step's
     * positive scale */
    const AdamWConst a = adamw_const(0.0, beta1, beta2, eps, 0.0, 1.0, 1);
    by_state_form(state_bf16, split, [&](auto bf16, auto halves) {
        catch_up_launch<bf16.value, halves.value>(tensors, n_tensors, block_n, list, upto, sched, a, vec, stream);
    });
    cudaCheckLaunch();
}

extern "C" void gpu_adamw_rows(const AdamWTensor *t, int state_bf16, long row_n, const int *ids, long n_rows,
                               int *updated, int upto, const float *grads, double grad_scale, const float *sched,
                               double beta1, double beta2, double eps, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (row_n <= 0 || n_rows > 0x7fffffffL)
        mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw_rows: rows of at least 1 element, at most 2^31 - 1 rows",
                        __FILE__, __LINE__);
    const int vec = row_n % 4 == 0 && (!grads || aligned(grads, 16)) &&
                    state_vec(t->params, t->params_bf16, t->params_lo, t->m, t->v, state_bf16,
                              "gpu_adamw_rows: split masters need params_bf16 and params_lo");
    /* lr, ic1, ic2 come from sched */
    const AdamWConst a = adamw_const(0.0, beta1, beta2, eps, t->weight_decay, grad_scale, 1);
    by_state_form(state_bf16, t->params == NULL, [&](auto bf16, auto halves) {
        rows_launch<bf16.value, halves.value>(t, grads, row_n, ids, n_rows, updated, upto, sched, a, vec, stream);
    });
    cudaCheckLaunch();
}
