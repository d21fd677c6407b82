/* Shared pieces of the GPU benchmarks (bench_util.h). */
#include "gpu/bench_util.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"
#include "dist.h"
#include "gpu/device.h"
#include "run_record.h"

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

static struct {
    char path[4096]; /* "" on ranks other than the launcher's 0, and without a record */
    char command[32]; /* "bench moe" */
    int argc;
    char **argv;
    FILE *f;
    long whole; /* its bytes up to the last whole line */
} record;

void bench_record_set(const char *path, const char *what, int argc, char **argv) {
    snprintf(record.command, sizeof record.command, "bench %s", what);
    record.argc = argc, record.argv = argv;
    if (!path[0] || dist_launcher_rank() != 0) return;
    /* tried now, so that a path it cannot write stops the run before any GPU time; written from the
     * first result on, so that a run without results (--help, no GPU) leaves no empty record */
    if (!mokc_writable(path) || strlen(path) >= sizeof record.path)
        mokc_die(MOKC_EXIT_USAGE, "pass --record PATH of a writable file", "cannot write the run record '%s'", path);
    snprintf(record.path, sizeof record.path, "%s", path);
}

/* A result the record cannot keep (a disk full) stops the run: the record is what a benchmark is run for. The
 * results before it stay, in the record and on stdout. */
static void record_flush(void) {
    if (run_record_flush(&record.f, record.path, &record.whole) != 0)
        mokc_die(MOKC_EXIT_RUNTIME, "free disk space, or pass --record PATH on a disk with room",
                 "cannot write the run record '%s': %s", record.path, strerror(errno));
}

/* The record, with its header at the first result: the device is chosen and MPI started by then. */
static FILE *record_file(void) {
    if (record.f || !record.path[0]) return record.f;
    record.f = fopenCheck(record.path, "w");
    int dev = 0, mpi_on = 0, world = 1;
    cudaCheck(cudaGetDevice(&dev));
    char gpu[256];
    gpu_describe(dev, gpu, sizeof gpu);
    MPI_Initialized(&mpi_on);
    if (mpi_on) MPI_Comm_size(MPI_COMM_WORLD, &world);
    RunHeader h = {.command = record.command, .argc = record.argc, .argv = record.argv, .backend = "cuda", .gpu = gpu,
                   .gpus = world, .seed = -1, .resumed_from = -1};
    run_record_header(record.f, &h);
    record_flush();
    return record.f;
}

void bench_emit(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("%s\n", line);
    fflush(stdout);
    FILE *f = record_file();
    if (f) {
        fprintf(f, "%s\n", line);
        record_flush();
    }
}
