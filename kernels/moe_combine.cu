/*
 * MoE combine, combine backward and scatter backward (moe_combine.h): one block per token (one warp
 * per slot in the combine backward), grid-stride, each thread owning fixed column groups, sums
 * over j in order in fp32.
 */
#include "moe_combine.h"

#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

int blocks_for_tokens(int N) { return N < 65535 * 16 ? N : 65535 * 16; }

__device__ __forceinline__ float bf(const uint16_t v) { return __uint_as_float((uint32_t)v << 16); }
__device__ __forceinline__ uint16_t to_bf(float f) {
    __nv_bfloat16 h = __float2bfloat16_rn(f);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

__global__ void combine_kernel(float *__restrict__ y, const uint16_t *__restrict__ ye, const float *__restrict__ gates,
                               const int *__restrict__ slot_row, int N, int k, int C, int add,
                               const float *__restrict__ residual, int vec) {
    for (long n = blockIdx.x; n < N; n += gridDim.x) {
        float *yn = y + n * C;
        const float *rn = residual ? residual + n * C : nullptr;
        if (vec) {
            for (int g = threadIdx.x; g < C / 8; g += kThreads) {
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int j = 0; j < k; j++) {
                    const long r = slot_row[n * k + j];
                    const float w = gates[n * k + j];
                    float v[8];
                    unpack_bf16x8(v, reinterpret_cast<const uint4 *>(ye + r * C)[g]);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[i] += w * v[i];
                }
                float4 *y4 = reinterpret_cast<float4 *>(yn) + 2 * g;
                if (add) {
                    const float4 a = y4[0], b = y4[1];
                    acc[0] += a.x, acc[1] += a.y, acc[2] += a.z, acc[3] += a.w;
                    acc[4] += b.x, acc[5] += b.y, acc[6] += b.z, acc[7] += b.w;
                }
                if (rn) {
                    const float4 *r4 = reinterpret_cast<const float4 *>(rn) + 2 * g;
                    const float4 a = r4[0], b = r4[1];
                    acc[0] = a.x + acc[0], acc[1] = a.y + acc[1], acc[2] = a.z + acc[2], acc[3] = a.w + acc[3];
                    acc[4] = b.x + acc[4], acc[5] = b.y + acc[5], acc[6] = b.z + acc[6], acc[7] = b.w + acc[7];
                }
                y4[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
                y4[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            }
        } else {
            for (int c = threadIdx.x; c < C; c += kThreads) {
                float acc = 0;
                for (int j = 0; j < k; j++)
                    acc += gates[n * k + j] * bf(ye[(long)slot_row[n * k + j] * C + c]);
                const float out = add ? acc + yn[c] : acc;
                yn[c] = rn ? rn[c] + out : out;
            }
        }
    }
}

/* One warp per slot s = n * k + j (not a block per token: a block reduction per slot was eight
 * barrier rounds a token): dgates[s] = dot(dy row, ye row), each lane summing its column groups in
 * order, then a fixed butterfly over the lanes; the row's bf16 dy into dyb (slot j = 0's warp)
 * and the slot's row bf16(gate * bf16(dy)) into dye, each where given. */
__global__ void combine_backward_kernel(uint16_t *__restrict__ dye, uint16_t *__restrict__ dyb,
                                        float *__restrict__ dgates, const float *__restrict__ dy,
                                        const uint16_t *__restrict__ ye, const float *__restrict__ gates,
                                        const int *__restrict__ slot_row, int N, int k, int C, int vec) {
    const int lane = threadIdx.x & 31, warps = kThreads / 32;
    const long slots = (long)N * k;
    for (long s = (long)blockIdx.x * warps + (threadIdx.x >> 5); s < slots; s += (long)gridDim.x * warps) {
        const long n = s / k, r = slot_row[s];
        const float *dyn = dy + n * C;
        uint16_t *bn = dyb && s == n * k ? dyb + n * C : nullptr, *er = dye ? dye + r * C : nullptr;
        const float w = gates[s];
        float dot = 0;
        if (vec) {
            /* two of the lane's column groups a step, both groups' loads first: with one group's in flight a warp
             * the pass waited on them, at 75 % of the HBM rate (s32); the sum's order is the groups' still */
            for (int g0 = lane; g0 < C / 8; g0 += 64) {
                const int groups = g0 + 32 < C / 8 ? 2 : 1;
                float4 a[2], b[2];
                uint4 e[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    if (u >= groups) break;
                    const int g = g0 + 32 * u;
                    a[u] = reinterpret_cast<const float4 *>(dyn)[2 * g];
                    b[u] = reinterpret_cast<const float4 *>(dyn)[2 * g + 1];
                    e[u] = reinterpret_cast<const uint4 *>(ye + r * C)[g];
                }
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    if (u >= groups) break;
                    const int g = g0 + 32 * u;
                    const float d[8] = {a[u].x, a[u].y, a[u].z, a[u].w, b[u].x, b[u].y, b[u].z, b[u].w};
                    float v[8];
                    unpack_bf16x8(v, e[u]);
#pragma unroll
                    for (int i = 0; i < 8; i++) dot += d[i] * v[i];
                    const uint4 db = pack_bf16x8(d);
                    if (bn) reinterpret_cast<uint4 *>(bn)[g] = db;
                    if (er) reinterpret_cast<uint4 *>(er)[g] = scale_bf16x8(db, w);
                }
            }
        } else {
            for (int c = lane; c < C; c += 32) {
                const float d = dyn[c];
                dot += d * bf(ye[r * C + c]);
                const uint16_t db = to_bf(d);
                if (bn) bn[c] = db;
                if (er) er[c] = to_bf(w * bf(db));
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) dgates[s] = dot;
    }
}

__global__ void scatter_rows_kernel(float *__restrict__ dx, const uint16_t *__restrict__ dxe,
                                    const int *__restrict__ slot_row, int N, int k, int C, int add, int vec) {
    for (long n = blockIdx.x; n < N; n += gridDim.x) {
        float *dxn = dx + n * C;
        if (vec) {
            for (int g = threadIdx.x; g < C / 8; g += kThreads) {
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int j = 0; j < k; j++) {
                    const long r = slot_row[n * k + j];
                    float v[8];
                    unpack_bf16x8(v, reinterpret_cast<const uint4 *>(dxe + r * C)[g]);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[i] += v[i];
                }
                float4 *d4 = reinterpret_cast<float4 *>(dxn) + 2 * g;
                float4 a = make_float4(acc[0], acc[1], acc[2], acc[3]), b = make_float4(acc[4], acc[5], acc[6], acc[7]);
                if (add) {
                    const float4 a0 = d4[0], b0 = d4[1];
                    a.x += a0.x, a.y += a0.y, a.z += a0.z, a.w += a0.w;
                    b.x += b0.x, b.y += b0.y, b.z += b0.z, b.w += b0.w;
                }
                d4[0] = a;
                d4[1] = b;
            }
        } else {
            for (int c = threadIdx.x; c < C; c += kThreads) {
                float acc = 0;
                for (int j = 0; j < k; j++) acc += bf(dxe[(long)slot_row[n * k + j] * C + c]);
                dxn[c] = add ? dxn[c] + acc : acc;
            }
        }
    }
}

} // namespace

extern "C" void gpu_moe_combine(float *y, const bf16_t *ye, const float *gates, const int *slot_row, int N, int k,
                                int C, int add, const float *residual, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 8 == 0 && aligned16(y) && aligned16(ye) && (!residual || aligned16(residual));
    combine_kernel<<<blocks_for_tokens(N), kThreads, 0, stream>>>(y, ye, gates, slot_row, N, k, C, add, residual,
                                                                  vec);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_combine_backward(bf16_t *dye, bf16_t *dyb, float *dgates, const float *dy, const bf16_t *ye,
                                         const float *gates, const int *slot_row, int N, int k, int C,
                                         cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 8 == 0 && aligned16(dye) && aligned16(dyb) && aligned16(dy) && aligned16(ye);
    const long slot_blocks = ((long)N * k + kThreads / 32 - 1) / (kThreads / 32);
    const unsigned blocks = (unsigned)(slot_blocks < 65535 * 16 ? slot_blocks : 65535 * 16);
    combine_backward_kernel<<<blocks, kThreads, 0, stream>>>(dye, dyb, dgates, dy, ye, gates, slot_row, N, k, C,
                                                             vec);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_scatter_rows(float *dx, const bf16_t *dxe, const int *slot_row, int N, int k, int C, int add,
                                     cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 8 == 0 && aligned16(dx) && aligned16(dxe);
    scatter_rows_kernel<<<blocks_for_tokens(N), kThreads, 0, stream>>>(dx, dxe, slot_row, N, k, C, add, vec);
    cudaCheckLaunch();
}
