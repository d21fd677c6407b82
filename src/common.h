/*
 * Shared host helpers: fatal errors that name the rank and give a hint, checked allocation,
 * checked file I/O. Every module reports failures through these so that a user always sees
 * one clear message on stderr and a non-zero exit, never a crash.
 */
#ifndef MOKC_COMMON_H
#define MOKC_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 1 runtime failure, 2 bad input (command line, spec, data, checkpoint). */
enum { MOKC_EXIT_RUNTIME = 1, MOKC_EXIT_USAGE = 2 };

/* The rank printed in every message; set once the distributed layer knows it (-1: unknown). */
void mokc_set_log_rank(int rank);
int mokc_log_rank(void);

/* Prints "mokc[rank N]: error: <message>" and, if hint is non-NULL, "---> HINT: <hint>",
 * then exits with `code`. Never returns. */
void mokc_die(int code, const char *hint, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* What mokc_die prints, "mokc[rank N]: error: [context: ]<message>" and the hint line, without
 * exiting: for commands that hand their exit code back to the caller. context may be NULL. */
void mokc_verror(const char *context, const char *hint, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void mokc_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* For functions that hand a failure back to their caller in (err, errlen) instead of dying:
 * formats the message into err (when err && errlen) and returns 1, so that
 * `return mokc_fail(err, errlen, "...", ...)` reports and returns in one line. */
int mokc_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void *mokc_malloc_check(size_t size, const char *file, int line);
void *mokc_calloc_check(size_t count, size_t size, const char *file, int line);
FILE *mokc_fopen_check(const char *path, const char *mode, const char *file, int line);
#define mallocCheck(size) mokc_malloc_check((size), __FILE__, __LINE__)
#define callocCheck(count, size) mokc_calloc_check((count), (size), __FILE__, __LINE__)
#define fopenCheck(path, mode) mokc_fopen_check((path), (mode), __FILE__, __LINE__)

/* Creates the directories above `path` (like mkdir -p of its dirname); false on failure. */
int mokc_make_parent_dirs(const char *path);

/* Whether a file can be written at `path` (its directories made); a file the try created is
 * removed again. False with errno set otherwise. */
int mokc_writable(const char *path);

/* Wall-clock seconds from a monotonic clock. */
double mokc_now_seconds(void);

#endif
