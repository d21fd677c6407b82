/*
 * MoE routing kernels (moe_route.h): one warp per token for scores / top-k / gates and for the
 * router backward; column sums over token chunks for the aux statistic. Warp reductions use the
 * xor butterfly: every lane ends with the same, run-to-run identical value.
 */
#include "moe_route.h"

#include <math.h>

#include "device_util.cuh"

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;
constexpr unsigned kFull = 0xffffffffu;
/* loads in flight a thread before their in-order sums: the aux kernels' sums are serial, so their time is
 * the number of batches times a load's latency (s26: 16 and 16 took 10 us each at 8192 tokens) */
constexpr int kAuxBatch = 32, kPsumBatch = 64;

int blocks_for_tokens(int N) {
    long b = ((long)N + kWarpsPerBlock - 1) / kWarpsPerBlock;
    return (int)(b < 65535L * 16 ? b : 65535L * 16); /* the loops are grid-stride beyond this */
}

__device__ __forceinline__ float warp_max_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

/* (v, e) is better than (bv, be): larger value, ties to the lower id; e < 0 means "none". */
__device__ __forceinline__ bool better(double v, int e, double bv, int be) {
    if (e < 0) return false;
    if (be < 0) return true;
    return v > bv || (v == bv && e < be);
}

__global__ void route_kernel(float *__restrict__ scores, int *__restrict__ topk, float *__restrict__ gates,
                             double *__restrict__ pnorm, int *__restrict__ fail, const float *__restrict__ logits,
                             const float *__restrict__ bias, int N, int E, int k, int sigmoid, int norm_topk,
                             double scaling) {
    const int lane = threadIdx.x & 31;
    const long warp0 = (long)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const long wstride = (long)gridDim.x * kWarpsPerBlock;
    for (long n = warp0; n < N; n += wstride) {
        const float *l = logits + n * E;
        float *s = scores + n * E;
        /* scores */
        if (sigmoid) {
            double sum = 0;
            for (int e = lane; e < E; e += 32) {
                float v = 1.0f / (1.0f + expf(-l[e]));
                s[e] = v;
                sum += (double)v;
            }
            sum = warp_sum(sum);
            if (lane == 0) pnorm[n] = sum;
        } else {
            float mx = -INFINITY;
            for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
            mx = warp_max_f(mx);
            float sum = 0;
            for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
            sum = warp_sum(sum);
            for (int e = lane; e < E; e += 32) s[e] = expf(l[e] - mx) / sum;
            if (lane == 0) pnorm[n] = 1.0;
        }
        /* top-k: each lane reads back only the scores it wrote itself */
        double prev_v = INFINITY, selsum = 0;
        int prev_e = -1, j = 0;
        for (; j < k; j++) {
            double best_v = -INFINITY;
            int best = -1;
            float best_s = 0;
            for (int e = lane; e < E; e += 32) {
                const float se = s[e];
                const double v = (double)se + (bias ? (double)bias[e] : 0.0);
                const bool below_prev = v < prev_v || (v == prev_v && e > prev_e);
                if (!below_prev) continue;
                if (best < 0 || v > best_v) {
                    best = e;
                    best_v = v;
                    best_s = se;
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const double ov = __shfl_xor_sync(kFull, best_v, o);
                const int oe = __shfl_xor_sync(kFull, best, o);
                const float os = __shfl_xor_sync(kFull, best_s, o);
                if (better(ov, oe, best_v, best)) {
                    best_v = ov;
                    best = oe;
                    best_s = os;
                }
            }
            if (best < 0) break; /* every lane agrees */
            if (lane == 0) topk[n * k + j] = best;
            selsum += (double)best_s;
            prev_v = best_v;
            prev_e = best;
        }
        if (j < k) { /* no candidate: non-finite scores. Keep later phases in bounds: k distinct ids
                      * (k <= E), so no owner receives more of this token's rows than it sizes for */
            __syncwarp();
            for (int i = lane; i < k; i += 32) topk[n * k + i] = i;
            for (int i = lane; i < k; i += 32) gates[n * k + i] = 0.0f;
            if (lane == 0) *fail = 1;
            __syncwarp();
            continue;
        }
        __syncwarp(); /* topk (lane 0) and scores (all lanes) visible to the whole warp */
        const double mul = norm_topk ? scaling / selsum : scaling;
        for (int i = lane; i < k; i += 32) {
            const int e = topk[n * k + i];
            gates[n * k + i] = (float)((double)s[e] * mul);
        }
        __syncwarp();
    }
}

/* v[i] = p[i * stride] for i < n, else fill: a whole batch's loads with no test each, which ptxas would
 * otherwise issue a few at a time */
template <int B, class T>
__device__ __forceinline__ void load_batch(T (&v)[B], const T *__restrict__ p, long stride, int n, T fill) {
    if (n >= B) {
#pragma unroll
        for (int i = 0; i < B; i++) v[i] = p[i * stride];
    } else {
#pragma unroll
        for (int i = 0; i < B; i++) v[i] = i < n ? p[i * stride] : fill;
    }
}

__global__ void aux_partial_kernel(double *__restrict__ partial, const float *__restrict__ scores,
                                   const double *__restrict__ pnorm, int N, int E, int chunks) {
    for (int c = blockIdx.y; c < chunks; c += gridDim.y) {
        const int n0 = c * MOE_AUX_CHUNK, n1 = min(n0 + MOE_AUX_CHUNK, N);
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < E; e += gridDim.x * blockDim.x) {
            double acc = 0;
            for (int n = n0; n < n1; n += kAuxBatch) { /* a batch's loads in flight, then its sum in order */
                float sv[kAuxBatch];
                double pv[kAuxBatch];
                load_batch(sv, scores + (long)n * E + e, E, n1 - n, 0.0f);
                load_batch(pv, pnorm + n, 1, n1 - n, 1.0);
#pragma unroll
                for (int i = 0; i < kAuxBatch; i++)
                    if (n + i < n1) acc += (double)sv[i] * (1.0 / pv[i]);
            }
            partial[(long)c * E + e] = acc;
        }
    }
}

__global__ void aux_psum_kernel(double *__restrict__ psum, const double *__restrict__ partial, int chunks, int E) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < E; e += gridDim.x * blockDim.x) {
        double acc = 0;
        for (int c0 = 0; c0 < chunks; c0 += kPsumBatch) { /* a batch's loads in flight, then its sum in order */
            double v[kPsumBatch];
            load_batch(v, partial + (long)c0 * E + e, E, chunks - c0, 0.0);
#pragma unroll
            for (int i = 0; i < kPsumBatch; i++)
                if (c0 + i < chunks) acc += v[i];
        }
        psum[e] = acc;
    }
}

__global__ void aux_loss_kernel(double *aux, const double *__restrict__ psum, const long long *__restrict__ counts,
                                int E, int k, double Ns) {
    __shared__ double sm[kThreads];
    double acc = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) acc += (double)counts[e] * psum[e];
    sm[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) sm[threadIdx.x] += sm[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *aux = Ns > 0 ? (double)E * sm[0] / (Ns * Ns * (double)k) : 0.0;
}

/* d loss / d score_e of one token, recomputed where needed instead of stored. */
struct DsCtx {
    const int *tk;
    const float *dg;
    const long long *counts;
    int k, norm_topk, sigmoid, with_aux;
    double mul, dot, base, adot, ssum;
};

__device__ __forceinline__ double ds_of(const DsCtx &c, int e) {
    double ds = 0;
    for (int j = 0; j < c.k; j++)
        if (c.tk[j] == e) ds = c.norm_topk ? c.mul * ((double)c.dg[j] - c.dot) : c.mul * (double)c.dg[j];
    if (c.with_aux)
        ds += c.sigmoid ? (c.base * (double)c.counts[e] - c.adot) / c.ssum : c.base * (double)c.counts[e];
    return ds;
}

__global__ void route_backward_kernel(float *__restrict__ dlogits, const float *__restrict__ dgates,
                                      const float *__restrict__ scores, const int *__restrict__ topk,
                                      const long long *__restrict__ counts, double daux, double Ns, int N, int E,
                                      int k, int sigmoid, int norm_topk, double scaling) {
    const int lane = threadIdx.x & 31;
    const long warp0 = (long)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const long wstride = (long)gridDim.x * kWarpsPerBlock;
    const double base = daux * (double)E / ((double)N * Ns * (double)k); /* d aux / d p_e = base * counts_e */
    for (long n = warp0; n < N; n += wstride) {
        const float *s = scores + n * E;
        const int *tk = topk + n * k;
        const float *dg = dgates + n * k;
        /* gate coefficients: ds[topk_j] = coef(j) = c/S (dg_j - <dg, s_sel>/S), or c dg_j */
        double S = 1.0, dot = 0.0, mul = scaling;
        if (norm_topk) {
            S = 0;
            for (int j = 0; j < k; j++) S += (double)s[tk[j]];
            for (int j = 0; j < k; j++) dot += (double)dg[j] * (double)s[tk[j]];
            dot /= S;
            mul = scaling / S;
        }
        /* aux: softmax ds_e += base c_e; sigmoid ds_e += (base c_e - <base c, p>) / sum(s) */
        double ssum = 1.0, adot = 0.0;
        if (daux != 0 && sigmoid) {
            ssum = 0;
            for (int e = lane; e < E; e += 32) ssum += (double)s[e];
            ssum = warp_sum(ssum);
            for (int e = lane; e < E; e += 32) adot += base * (double)counts[e] * ((double)s[e] / ssum);
            adot = warp_sum(adot);
        }
        const DsCtx cx{tk, dg, counts, k, norm_topk, sigmoid, daux != 0, mul, dot, base, adot, ssum};
        if (sigmoid) {
            for (int e = lane; e < E; e += 32) {
                const double se = (double)s[e];
                dlogits[n * E + e] = (float)(ds_of(cx, e) * se * (1.0 - se));
            }
        } else {
            double sdot = 0;
            for (int e = lane; e < E; e += 32) sdot += ds_of(cx, e) * (double)s[e];
            sdot = warp_sum(sdot);
            for (int e = lane; e < E; e += 32) {
                const double se = (double)s[e];
                dlogits[n * E + e] = (float)(se * (ds_of(cx, e) - sdot));
            }
        }
    }
}

} // namespace

extern "C" void gpu_moe_route(float *scores, int *topk, float *gates, double *pnorm, int *fail, const float *logits,
                              const float *bias, int N, int E, int k, int sigmoid, int norm_topk, double scaling,
                              cudaStream_t stream) {
    if (N <= 0 || E <= 0) return;
    route_kernel<<<blocks_for_tokens(N), kThreads, 0, stream>>>(scores, topk, gates, pnorm, fail, logits, bias, N, E,
                                                                k, sigmoid, norm_topk, scaling);
    cudaCheckLaunch();
}

extern "C" int gpu_moe_aux_chunks(int N) { return N <= 0 ? 0 : (N + MOE_AUX_CHUNK - 1) / MOE_AUX_CHUNK; }

extern "C" void gpu_moe_aux_partial(double *partial, const float *scores, const double *pnorm, int N, int E,
                                    cudaStream_t stream) {
    const int chunks = gpu_moe_aux_chunks(N);
    if (chunks == 0 || E <= 0) return;
    const int threads = 32; /* one warp a block: E = 128 over 32 chunks is 128 blocks, not 32 */
    int bx = (E + threads - 1) / threads;
    if (bx > 1024) bx = 1024;
    const int by = chunks < 65535 ? chunks : 65535; /* grid-stride over chunks beyond this */
    aux_partial_kernel<<<dim3((unsigned)bx, (unsigned)by), threads, 0, stream>>>(partial, scores, pnorm, N, E, chunks);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_aux_psum(double *psum, const double *partial, int chunks, int E, cudaStream_t stream) {
    if (E <= 0) return;
    const int threads = 128;
    int blocks = (E + threads - 1) / threads;
    if (blocks > 4096) blocks = 4096;
    aux_psum_kernel<<<blocks, threads, 0, stream>>>(psum, partial, chunks, E);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_aux_loss(double *aux, const double *psum, const long long *stat_counts, int E, int k,
                                 double Ns, cudaStream_t stream) {
    aux_loss_kernel<<<1, kThreads, 0, stream>>>(aux, psum, stat_counts, E, k, Ns);
    cudaCheckLaunch();
}

extern "C" void gpu_moe_route_backward(float *dlogits, const float *dgates, const float *scores, const int *topk,
                                       const long long *stat_counts, double daux, double Ns, int N, int E, int k,
                                       int sigmoid, int norm_topk, double scaling, cudaStream_t stream) {
    if (N <= 0 || E <= 0) return;
    route_backward_kernel<<<blocks_for_tokens(N), kThreads, 0, stream>>>(dlogits, dgates, scores, topk, stat_counts,
                                                                         daux, Ns, N, E, k, sigmoid, norm_topk,
                                                                         scaling);
    cudaCheckLaunch();
}
