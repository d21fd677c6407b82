/*
 * The kernels of causal grouped-query attention (the GEMM sequence around them is in
 * src/gpu/attention.c; the API and layouts in attention.h):
 *   - fill_pointers: the device pointer arrays of the batched GEMMs, from affine rules;
 *   - softmax_forward: one block per score row, fp32 scale + causal mask + softmax -> bf16 P;
 *   - softmax_backward: one block per row, dS = P (dP - rowsum(P dP)) scale, written as bf16 in
 *     place over the fp32 dP row;
 *   - group_sum: dK/dV per query head (fp32) summed over each kv group in head order -> bf16.
 * Every reduction runs in a fixed order (per-thread strided partials in index order, a fixed
 * shuffle tree, then the warps in index order), so results are bitwise reproducible.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "attention.h"

namespace {

constexpr int kRowThreads = 256;  // one block per score row
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kFlatThreads = 256; // elementwise kernels

// ---- vector loads and stores (VEC = 1, 4 or 8 consecutive elements; aligned by the caller) ----
template <int VEC>
__device__ __forceinline__ void load_f32(float (&x)[VEC], const float *src) {
    if constexpr (VEC == 1) {
        x[0] = src[0];
    } else {
        static_assert(VEC % 4 == 0, "VEC must be 1 or a multiple of 4");
#pragma unroll
        for (int i = 0; i < VEC / 4; i++) {
            float4 f = reinterpret_cast<const float4 *>(src)[i];
            x[4 * i] = f.x, x[4 * i + 1] = f.y, x[4 * i + 2] = f.z, x[4 * i + 3] = f.w;
        }
    }
}

template <int VEC>
__device__ __forceinline__ void load_bf16(float (&x)[VEC], const __nv_bfloat16 *src) {
    if constexpr (VEC == 1) {
        x[0] = __bfloat162float(src[0]);
    } else {
        static_assert(VEC == 8, "bf16 vector loads are 8 wide (16 bytes)");
        uint4 raw = *reinterpret_cast<const uint4 *>(src);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __bfloat1622float2(h[i]);
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    }
}

template <int VEC>
__device__ __forceinline__ void store_bf16(__nv_bfloat16 *dst, const float (&x)[VEC]) {
    if constexpr (VEC == 1) {
        dst[0] = __float2bfloat16_rn(x[0]);
    } else if constexpr (VEC == 4) {
        __nv_bfloat162 h[2];
        h[0] = __floats2bfloat162_rn(x[0], x[1]);  // .x (lower address) = first element
        h[1] = __floats2bfloat162_rn(x[2], x[3]);
        *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(h);
    } else {
        static_assert(VEC == 8, "bf16 vector stores are 4 or 8 wide");
        __nv_bfloat162 h[4];
#pragma unroll
        for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
        *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(h);
    }
}

// ---- fixed-order block reductions (every thread gets the same value) ----
struct MaxSum {
    float m, l;  // running max and sum of exp(x - m); l == 0 means "no elements"
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
    float m = fmaxf(a.m, b.m);
    float l = (a.l > 0.f ? a.l * expf(a.m - m) : 0.f) + (b.l > 0.f ? b.l * expf(b.m - m) : 0.f);
    return MaxSum{m, l};
}

// Uses red[] once: call at most once per kernel (no barrier after the read).
__device__ __forceinline__ MaxSum block_reduce(MaxSum v, MaxSum *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.l, o)};
        v = combine(v, w);
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    MaxSum r = red[0];
    for (int w = 1; w < kRowWarps; w++) r = combine(r, red[w]);
    return r;
}

__device__ __forceinline__ float block_reduce(float v, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < kRowWarps; w++) r += red[w];
    return r;
}

// ---- kernels ----
struct RuleSet {
    AttnPtrRule r[ATTN_MAX_RULES];
};

__global__ void fill_pointers_kernel(void **table, RuleSet rules, int n_rules, int n_blocks, int B, int H, int group) {
    long long n = (long long)n_rules * n_blocks * B * H;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        long long rest = e;
        int h = (int)(rest % H);
        rest /= H;
        int b = (int)(rest % B);
        rest /= B;
        int i = (int)(rest % n_blocks);
        int r = (int)(rest / n_blocks);
        const AttnPtrRule &R = rules.r[r];
        long long off = b * R.stride_b + h * R.stride_h + (long long)(h / group) * R.stride_kvh + i * R.stride_blk;
        table[e] = reinterpret_cast<void *>(R.base + (unsigned long long)off);
    }
}

// Row r = blockIdx.x of the (rows, T) score matrix, query position t = r % T. VEC = 8 needs T % 8 == 0.
template <int VEC>
__global__ void __launch_bounds__(kRowThreads)
    softmax_forward_kernel(__nv_bfloat16 *att, const float *scores, int T, float scale) {
    __shared__ MaxSum red[kRowWarps];
    long long row = blockIdx.x;
    int n_valid = (int)(row % T) + 1;  // columns u <= t
    const float *s = scores + row * T;
    __nv_bfloat16 *p = att + row * T;

    // Pass 1: online max and sum of exp over the valid columns (each thread in index order).
    MaxSum acc{-INFINITY, 0.f};
    for (int u0 = threadIdx.x * VEC; u0 < n_valid; u0 += kRowThreads * VEC) {
        float x[VEC];
        load_f32<VEC>(x, s + u0);  // with VEC = 8 may read past t (never past T): ignored below
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            if (u0 + e < n_valid) {
                float y = x[e] * scale;
                if (y > acc.m) {
                    acc.l = acc.l * expf(acc.m - y) + 1.f;
                    acc.m = y;
                } else {
                    acc.l += expf(y - acc.m);
                }
            }
        }
    }
    MaxSum tot = block_reduce(acc, red);
    float inv = 1.f / tot.l;

    // Pass 2: write all T columns, exact zeros above the diagonal.
    for (int u0 = threadIdx.x * VEC; u0 < T; u0 += kRowThreads * VEC) {
        float x[VEC], y[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) x[e] = 0.f;
        if (u0 < n_valid) load_f32<VEC>(x, s + u0);
#pragma unroll
        for (int e = 0; e < VEC; e++) y[e] = u0 + e < n_valid ? expf(x[e] * scale - tot.m) * inv : 0.f;
        store_bf16<VEC>(p + u0, y);
    }
}

// dS in place: row r of buf is dP (fp32, T columns) on entry and dS (bf16, the first 2T bytes) on
// exit, written for the columns u < end of t's causal block (zeros for t < u < end); the GEMMs
// never read further. The second pass walks the row in chunks; each chunk's fp32 values are
// loaded by the whole block before a barrier, then its bf16 results are stored. The bf16 of chunk [c, c + C) occupy
// the fp32 slots [c/2, (c + C)/2), all already loaded; later chunks load slots >= c + C, beyond
// every byte stored so far. So no value is overwritten before it is read.
template <int VEC>
__global__ void __launch_bounds__(kRowThreads)
    softmax_backward_kernel(float *buf, const __nv_bfloat16 *att, int T, int block, float scale) {
    __shared__ float red[kRowWarps];
    long long row = blockIdx.x;
    int t = (int)(row % T), n_valid = t + 1;
    int n_write = (t / block + 1) * block < T ? (t / block + 1) * block : T;
    float *dp = buf + row * T;
    __nv_bfloat16 *ds = reinterpret_cast<__nv_bfloat16 *>(dp);  // same bytes, bf16 view
    const __nv_bfloat16 *p = att + row * T;

    // Pass 1: rowsum(P * dP) over the valid columns.
    float acc = 0.f;
    for (int u0 = threadIdx.x * VEC; u0 < n_valid; u0 += kRowThreads * VEC) {
        float x[VEC], pv[VEC];
        load_f32<VEC>(x, dp + u0);
        load_bf16<VEC>(pv, p + u0);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (u0 + e < n_valid) acc += pv[e] * x[e];
    }
    // The reduction's barrier also orders every pass-1 read before any pass-2 store.
    float dot = block_reduce(acc, red);

    // Pass 2, chunk by chunk (the loop bound is the same for all threads: the barrier is uniform).
    for (int c0 = 0; c0 < n_write; c0 += kRowThreads * VEC) {
        int u0 = c0 + threadIdx.x * VEC;
        float x[VEC], pv[VEC], y[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) x[e] = 0.f, pv[e] = 0.f;
        if (u0 < n_valid) {
            load_f32<VEC>(x, dp + u0);
            load_bf16<VEC>(pv, p + u0);
        }
        __syncthreads();
        if (u0 < n_write) {
#pragma unroll
            for (int e = 0; e < VEC; e++) y[e] = u0 + e < n_valid ? pv[e] * (x[e] - dot) * scale : 0.f;
            store_bf16<VEC>(ds + u0, y);
        }
    }
}

// One thread per VEC consecutive d of one (token row, kv head). VEC = 4 needs D % 4 == 0.
template <int VEC>
__global__ void group_sum_kernel(__nv_bfloat16 *dst, long long ld, const float *heads, int T, int Hq, int Hkv,
                                 int D, long long n_vec) {
    int group = Hq / Hkv, d_vecs = D / VEC;
    long long head_stride = (long long)T * D;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_vec; e += stride) {
        int d = (int)(e % d_vecs) * VEC;
        long long rest = e / d_vecs;
        int kh = (int)(rest % Hkv);
        long long n = rest / Hkv;  // token row b*T + u
        long long b = n / T;
        int u = (int)(n % T);
        const float *src = heads + ((b * Hq + (long long)kh * group) * T + u) * D + d;
        float acc[VEC];
        load_f32<VEC>(acc, src);
        for (int j = 1; j < group; j++) {
            float x[VEC];
            load_f32<VEC>(x, src + j * head_stride);
#pragma unroll
            for (int i = 0; i < VEC; i++) acc[i] += x[i];
        }
        store_bf16<VEC>(dst + n * ld + (long long)kh * D + d, acc);
    }
}

unsigned int flat_blocks(long long n) {
    long long blocks = (n + kFlatThreads - 1) / kFlatThreads;
    const long long cap = 132LL * 16;  // grid-stride beyond this
    return (unsigned int)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

}  // namespace

extern "C" void attention_fill_pointers(void **table, const AttnPtrRule *rules, int n_rules, int n_blocks, int B, int H,
                                        int group, cudaStream_t stream) {
    RuleSet set = {};
    if (n_rules > ATTN_MAX_RULES) n_rules = ATTN_MAX_RULES;
    for (int r = 0; r < n_rules; r++) set.r[r] = rules[r];
    long long n = (long long)n_rules * n_blocks * B * H;
    if (n <= 0) return;
    fill_pointers_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(table, set, n_rules, n_blocks, B, H, group);
    cudaCheckLaunch();
}

extern "C" void attention_softmax_forward(bf16_t *att, const float *scores, long rows, int T, float scale,
                                          cudaStream_t stream) {
    if (rows <= 0) return;
    __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(att);
    if (T % 8 == 0)
        softmax_forward_kernel<8><<<(unsigned int)rows, kRowThreads, 0, stream>>>(p, scores, T, scale);
    else
        softmax_forward_kernel<1><<<(unsigned int)rows, kRowThreads, 0, stream>>>(p, scores, T, scale);
    cudaCheckLaunch();
}

extern "C" void attention_softmax_backward(float *buf, const bf16_t *att, long rows, int T, int block, float scale,
                                           cudaStream_t stream) {
    if (rows <= 0) return;
    const __nv_bfloat16 *p = reinterpret_cast<const __nv_bfloat16 *>(att);
    // The vector path needs every row's write limit (a multiple of block, or T) to be a multiple of 8.
    if (T % 8 == 0 && block % 8 == 0)
        softmax_backward_kernel<8><<<(unsigned int)rows, kRowThreads, 0, stream>>>(buf, p, T, block, scale);
    else
        softmax_backward_kernel<1><<<(unsigned int)rows, kRowThreads, 0, stream>>>(buf, p, T, block, scale);
    cudaCheckLaunch();
}

extern "C" void attention_group_sum(bf16_t *dst, long long ld, const float *heads, int B, int T, int Hq, int Hkv,
                                    int D, cudaStream_t stream) {
    __nv_bfloat16 *out = reinterpret_cast<__nv_bfloat16 *>(dst);
    long long n = (long long)B * T * Hkv * D;
    if (n <= 0) return;
    if (D % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0)
        group_sum_kernel<4><<<flat_blocks(n / 4), kFlatThreads, 0, stream>>>(out, ld, heads, T, Hq, Hkv, D, n / 4);
    else
        group_sum_kernel<1><<<flat_blocks(n), kFlatThreads, 0, stream>>>(out, ld, heads, T, Hq, Hkv, D, n);
    cudaCheckLaunch();
}
