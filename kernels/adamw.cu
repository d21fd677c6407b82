/*
 * Fused AdamW (adamw.h). The update spells out every rounding with __f*_rn intrinsics so nvcc
 * cannot contract into FMAs: the result is the float arithmetic of src/optim.c adamw_step.
 */
#include "adamw.h"

#include <cuda_bf16.h>
#include <math.h>

#include <type_traits>

#include "device_util.cuh"
#include "master_split.cuh"

namespace {

constexpr int kThreads = 256;

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

/* blockIdx.y: the elements [y block_n, (y + 1) block_n) of n, whose gradient is zeros, not read, where live[y] is 0
 * (live NULL: one block of all n). With vec, block_n is a multiple of 4. */
template <bool BF16, bool SPLIT>
__global__ void adamw_kernel(Masters<SPLIT> p, const float *grads, typename Moments<BF16>::T *m,
                             typename Moments<BF16>::T *v, long n, const int *live, long block_n, AdamWConst a,
                             int vec) {
    typedef Moments<BF16> S;
    const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    const long b0 = (long)blockIdx.y * block_n, b1 = min(n, b0 + block_n);
    const bool zeros = live && live[blockIdx.y] == 0;
    const long g0 = b0 / 4, g1 = vec ? g0 + (b1 - b0) / 4 : g0;
    for (long gi = g0 + tid; gi < g1; gi += stride) {
        float4 w = p.load4(gi);
        const float4 g = zeros ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : reinterpret_cast<const float4 *>(grads)[gi];
        float4 mm = S::load4(m, gi), vv = S::load4(v, gi);
        adamw_elem<BF16>(w.x, g.x, mm.x, vv.x, a);
        adamw_elem<BF16>(w.y, g.y, mm.y, vv.y, a);
        adamw_elem<BF16>(w.z, g.z, mm.z, vv.z, a);
        adamw_elem<BF16>(w.w, g.w, mm.w, vv.w, a);
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

template <bool SPLIT>
void adamw_launch(Masters<SPLIT> p, const float *grads, void *m, void *v, int state_bf16, long n, const int *live,
                  long block_n, AdamWConst a, int vec, cudaStream_t stream) {
    const long blocks = live ? n / block_n : 1, per = live ? block_n : n;
    vec = vec && (!live || per % 4 == 0); /* a whole range ends in the element path's tail */
    const long most = kMaxGridBlocks / blocks > 0 ? kMaxGridBlocks / blocks : 1;
    const long x = grid_for(vec ? per / 4 + 4 : per, kThreads);
    const dim3 grid((unsigned)(x < most ? x : most), (unsigned)blocks);
    if (state_bf16)
        adamw_kernel<true, SPLIT><<<grid, kThreads, 0, stream>>>(p, grads, static_cast<__nv_bfloat16 *>(m),
                                                                 static_cast<__nv_bfloat16 *>(v), n, live, per, a, vec);
    else
        adamw_kernel<false, SPLIT><<<grid, kThreads, 0, stream>>>(p, grads, static_cast<float *>(m),
                                                                  static_cast<float *>(v), n, live, per, a, vec);
}

} // namespace

extern "C" void gpu_adamw(float *params, bf16_t *params_bf16, int16_t *params_lo, const float *grads, void *m,
                          void *v, int state_bf16, long n, const int *live, long block_n, double lr, double beta1,
                          double beta2, double eps, double weight_decay, double grad_scale, long t_step,
                          cudaStream_t stream) {
    if (n <= 0) return;
    if (live && (block_n <= 0 || n % block_n != 0 || n / block_n > 65535))
        mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw: live blocks need n a multiple of block_n, at most 65535 "
                        "blocks", __FILE__, __LINE__);
    AdamWConst a;
    /* The same host-side conversions as adamw_step (src/optim.c). */
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
    const int state_align = state_bf16 ? 8 : 16;
    const int vec_rest = aligned(grads, 16) && aligned(m, state_align) && aligned(v, state_align);
    __nv_bfloat16 *pbf = reinterpret_cast<__nv_bfloat16 *>(params_bf16);
    if (params) {
        const int vec = vec_rest && aligned(params, 16) && (!params_bf16 || aligned(params_bf16, 8));
        adamw_launch(Masters<false>{params, pbf, NULL}, grads, m, v, state_bf16, n, live, block_n, a, vec, stream);
    } else {
        if (!params_bf16 || !params_lo)
            mokc_cuda_check(cudaErrorInvalidValue, "gpu_adamw: split masters need params_bf16 and params_lo",
                            __FILE__, __LINE__);
        const int vec = vec_rest && aligned(params_bf16, 8) && aligned(params_lo, 8);
        adamw_launch(Masters<true>{NULL, pbf, params_lo}, grads, m, v, state_bf16, n, live, block_n, a, vec, stream);
    }
    cudaCheckLaunch();
}
