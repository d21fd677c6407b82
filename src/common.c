/* Fatal errors with rank and hint, checked allocation and file opening. */
#include "common.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int log_rank = -1;

void mokc_set_log_rank(int rank) { log_rank = rank; }
int mokc_log_rank(void) { return log_rank; }

static void print_prefix(const char *kind) {
    if (log_rank >= 0) fprintf(stderr, "mokc[rank %d]: %s: ", log_rank, kind);
    else fprintf(stderr, "mokc: %s: ", kind);
}

void mokc_verror(const char *context, const char *hint, const char *fmt, va_list ap) {
    fflush(stdout);
    print_prefix("error");
    if (context) fprintf(stderr, "%s: ", context);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (hint) fprintf(stderr, "---> HINT: %s\n", hint);
    fflush(stderr);
}

void mokc_die(int code, const char *hint, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mokc_verror(NULL, hint, fmt, ap);
    va_end(ap);
    /* One failing rank must bring the whole job down, never leave the others waiting. */
    int inited = 0, finalized = 0, world = 1;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (inited && !finalized && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void mokc_warn(const char *fmt, ...) {
    fflush(stdout);
    print_prefix("warning");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int mokc_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 1;
}

void *mokc_malloc_check(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p)
        mokc_die(MOKC_EXIT_RUNTIME, "the model or batch is too large for this machine's memory",
                 "out of memory allocating %zu bytes at %s:%d", size, file, line);
    return p;
}

void *mokc_calloc_check(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        mokc_die(MOKC_EXIT_RUNTIME, "the model or batch is too large for this machine's memory",
                 "out of memory allocating %zu x %zu bytes at %s:%d", count, size, file, line);
    return p;
}

FILE *mokc_fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f)
        mokc_die(MOKC_EXIT_USAGE, "check that the path exists and that you may read/write it",
                 "cannot open '%s' (mode %s): %s [%s:%d]", path, mode, strerror(errno), file, line);
    return f;
}

double mokc_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mokc_make_parent_dirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return 0;
        *p = '/';
    }
    return 1;
}

int mokc_writable(const char *path) {
    const int existed = access(path, F_OK) == 0;
    FILE *probe = mokc_make_parent_dirs(path) ? fopen(path, "a") : NULL;
    if (!probe) return 0;
    fclose(probe);
    if (!existed) unlink(path);
    return 1;
}
