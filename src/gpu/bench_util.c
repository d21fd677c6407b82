/* Shared pieces of the GPU benchmarks (bench_util.h). */
#include "gpu/bench_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double bench_time_ms(BenchFn fn, void *ctx, int iters, int warmup, cudaStream_t s) {
    cudaEvent_t e[2];
    for (int i = 0; i < 2; i++) cudaCheck(cudaEventCreate(&e[i]));
    double *t = callocCheck((size_t)iters, sizeof(double));
    for (int it = -warmup; it < iters; it++) {
        cudaCheck(cudaEventRecord(e[0], s));
        fn(ctx, s);
        cudaCheck(cudaEventRecord(e[1], s));
        cudaCheck(cudaEventSynchronize(e[1]));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, e[0], e[1]));
        if (it >= 0) t[it] = ms;
    }
    const double med = bench_median(t, iters);
    free(t);
    for (int i = 0; i < 2; i++) cudaCheck(cudaEventDestroy(e[i]));
    return med;
}

static float bf16_value(bf16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double bench_rel_err_bf16(const bf16_t *a, const bf16_t *b, long n, long *nan) {
    /* the copies below run on the legacy stream, which does not wait for the benches' non-blocking
     * streams: a result still being written there (bench attn's reference) would be read early */
    cudaCheck(cudaDeviceSynchronize());
    const long chunk = 1l << 24;
    bf16_t *ha = mallocCheck((size_t)chunk * 2), *hb = mallocCheck((size_t)chunk * 2);
    double num = 0, den = 0;
    long nans = 0;
    for (long off = 0; off < n; off += chunk) {
        const long m = n - off < chunk ? n - off : chunk;
        cudaCheck(cudaMemcpy(ha, a + off, (size_t)m * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(hb, b + off, (size_t)m * 2, cudaMemcpyDeviceToHost));
        for (long i = 0; i < m; i++) {
            const double x = bf16_value(ha[i]), y = bf16_value(hb[i]);
            nans += isnan(x) != 0;
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    free(ha), free(hb);
    if (nan) *nan = nans;
    return sqrt(num / (den > 0 ? den : 1));
}
