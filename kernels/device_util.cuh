/*
 * Helpers the kernel files share: launch geometry and alignment tests on the host; bf16 packing,
 * float and bf16 vector loads/stores and the fixed-tree warp/block sums on the device. CUDA C++
 * only: the .cu files in kernels/ include it, C never does. Everything is inline in an anonymous
 * namespace: each .cu gets its own copy and nothing reaches the linker.
 *
 * These are the exact operations the kernels used before they were gathered here (the kernels are
 * checked bit for bit): bf16 conversions round to nearest even, loads and stores are plain vector
 * accesses, and the sums add in one fixed order, so results are reproducible run to run.
 */
#ifndef MOKC_KERNELS_DEVICE_UTIL_CUH
#define MOKC_KERNELS_DEVICE_UTIL_CUH

#ifndef __CUDACC__
#error "device_util.cuh is CUDA C++: include it from .cu files only"
#endif

#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

namespace {

// ---- host: alignment and launch geometry ----

/* p is a multiple of bytes (a power of two). */
inline bool aligned(const void *p, unsigned bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }
inline bool aligned16(const void *p) { return aligned(p, 16); }

/* Grid-stride kernels stop adding blocks here; their loops cover the rest. */
constexpr long kMaxGridBlocks = 8192;

/* Blocks of `threads` threads for `items` work items, one item a thread: at least 1, at most
 * kMaxGridBlocks. */
inline int grid_for(long items, int threads) {
    long b = (items + threads - 1) / threads;
    if (b < 1) b = 1;
    return (int)(b < kMaxGridBlocks ? b : kMaxGridBlocks);
}

// ---- device: bf16 <-> float ----

/* Two floats rounded to bf16 in one 32-bit word, a at the lower address (.x). */
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
/* The bf16 at the lower (lo) or upper (hi) address of a 32-bit word, as float (exact). */
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* 2^x as one MUFU.EX2 instruction (approximate, results below 2^-126 flushed to 0): the softmax-style exps of
 * the flash forward, the LM head's logits epilogue and the SwiGLU's sigmoid, where an IEEE exp's extra instructions
 * would be most of their arithmetic. */
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* SwiGLU of one element, forward (h = silu(g) * u) and backward (dg, du from dh = d), all fp32.
 * kernels/swiglu.cu and the megakernels share them, so the unfused and fused layers give the same
 * bits. The logistic function is one MUFU.EX2 and one MUFU.RCP (approximate, flushing subnormals;
 * x -> +inf gives 1, x -> -inf 1 / inf = 0): every result is rounded to bf16 next, so a few ulp do
 * not show. An IEEE reciprocal adds a slow-path branch per element that keeps the compiler from
 * overlapping elements: ~ 17 us a task in the dgrad epilogue, ~ 6 us in the gate/up one
 * (docs/perf-notes.md, 2026-11-30 (s5) and (s7)). */
__device__ __forceinline__ float swiglu_sigmoid(float x) {
    const float e = exp2_approx(x * -1.4426950408889634f); /* exp(-x) */
    float s;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(1.0f + e));
    return s;
}
__device__ __forceinline__ float silu_mul_f32(float g, float u) { return g * swiglu_sigmoid(g) * u; }
__device__ __forceinline__ void swiglu_backward_f32(float d, float g, float u, float &dg, float &du) {
    const float s = swiglu_sigmoid(g);
    dg = d * u * (s + g * s * (1.0f - s));
    du = d * g * s;
}

/* RoPE's rotation of one pair (a at column i, b at i + D/2) by the angle whose cosine is c and sine
 * sk (the table's sine, negated for the inverse), rounded as written (no FMA contraction): the float
 * math of the CPU reference's rope_apply. rope.cu and the q/k projection tile's epilogue share it,
 * so they give the same bits. */
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float sk, float &x1, float &x2) {
    x1 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sk));
    x2 = __fadd_rn(__fmul_rn(a, sk), __fmul_rn(b, c));
}

/* Eight bf16 (16 bytes) to floats and back, in address order. */
__device__ __forceinline__ void unpack_bf16x8(float (&v)[8], uint4 u) {
    v[0] = bf16_lo(u.x);
    v[1] = bf16_hi(u.x);
    v[2] = bf16_lo(u.y);
    v[3] = bf16_hi(u.y);
    v[4] = bf16_lo(u.z);
    v[5] = bf16_hi(u.z);
    v[6] = bf16_lo(u.w);
    v[7] = bf16_hi(u.w);
}
__device__ __forceinline__ uint4 pack_bf16x8(const float (&v)[8]) {
    uint4 u;
    u.x = pack_bf16x2(v[0], v[1]);
    u.y = pack_bf16x2(v[2], v[3]);
    u.z = pack_bf16x2(v[4], v[5]);
    u.w = pack_bf16x2(v[6], v[7]);
    return u;
}

/* Eight bf16 times w, rounded to bf16 again: the backward's gate-scaled dy rows, bf16(w * bf16(dy)).
 * The unfused layer's slot rows and the megakernel's dispatch both call it, so they agree to the bit. */
__device__ __forceinline__ uint4 scale_bf16x8(uint4 u, float w) {
    float v[8];
    unpack_bf16x8(v, u);
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] *= w;
    return pack_bf16x8(v);
}

// ---- device: VEC consecutive elements (VEC > 1: the caller guarantees 16-byte alignment) ----

/* VEC = 1, 4 (one float4) or 8 (two float4s) floats. */
template <int VEC> __device__ __forceinline__ void load_f32(float (&v)[VEC], const float *p) {
    static_assert(VEC == 1 || VEC == 4 || VEC == 8, "load_f32: VEC is 1, 4 or 8");
    if constexpr (VEC == 8) {
        float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        v[0] = a.x;
        v[1] = a.y;
        v[2] = a.z;
        v[3] = a.w;
        v[4] = b.x;
        v[5] = b.y;
        v[6] = b.z;
        v[7] = b.w;
    } else if constexpr (VEC == 4) {
        float4 t = *reinterpret_cast<const float4 *>(p);
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    } else {
        v[0] = *p;
    }
}

/* VEC = 1 or 4 (one float4) floats. */
template <int VEC> __device__ __forceinline__ void store_f32(float *p, const float (&v)[VEC]) {
    static_assert(VEC == 1 || VEC == 4, "store_f32: VEC is 1 or 4");
    if constexpr (VEC == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else
        *p = v[0];
}

/* VEC = 1 or 8 (16 bytes) bf16, as floats. */
template <int VEC> __device__ __forceinline__ void load_bf16(float (&v)[VEC], const __nv_bfloat16 *p) {
    static_assert(VEC == 1 || VEC == 8, "load_bf16: VEC is 1 or 8");
    if constexpr (VEC == 8)
        unpack_bf16x8(v, *reinterpret_cast<const uint4 *>(p));
    else
        v[0] = __bfloat162float(*p);
}

/* VEC = 1, 4 (8 bytes) or 8 (16 bytes) floats rounded to bf16. */
template <int VEC> __device__ __forceinline__ void store_bf16(__nv_bfloat16 *p, const float (&v)[VEC]) {
    static_assert(VEC == 1 || VEC == 4 || VEC == 8, "store_bf16: VEC is 1, 4 or 8");
    if constexpr (VEC == 8)
        *reinterpret_cast<uint4 *>(p) = pack_bf16x8(v);
    else if constexpr (VEC == 4)
        *reinterpret_cast<uint2 *>(p) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
    else
        *p = __float2bfloat16_rn(v[0]);
}

// ---- device: fixed-tree sums (T = float or double) ----

/* Sum over the warp by xor butterflies; every lane gets the same value. */
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "warp_sum: float or double");
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block: warp butterflies, then every warp reduces the per-warp partials the same
 * way, so every thread gets the same value. red: >= 32 T of shared memory. The leading barrier
 * makes back-to-back calls safe. blockDim.x must be a multiple of 32. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *red) {
    v = warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : T(0));
}

} // namespace

#endif
