/* How many OpenMP threads the CPU backend gets on each rank, and a note when the launcher left a rank
 * a small part of its host: Open MPI binds each rank to one core by default (up to 2 ranks), so
 * `mpirun -np 1 mokc check` ran its CPU reference on 1 of 16 cores, 5.3x slower than unbound
 * (bench/results/2026-12-03-1xH200/session46/r1). */
#ifndef MOKC_CPU_THREADS_H
#define MOKC_CPU_THREADS_H

#include <stdbool.h>
#include <stddef.h>

#include "dist.h"

typedef struct {
    int min, max;    /* OpenMP threads a rank, over the ranks */
    char note[512];  /* "" or, for the lowest rank the launcher narrowed, why and what to pass instead */
} CpuThreads;

/* Whether a rank with `threads` OpenMP threads, one of `ranks_here` ranks on a host of `host_cpus`
 * CPUs (those its cpuset allows), leaves at least half of them idle while the CPU backend runs. Never
 * when the user chose the count (OMP_NUM_THREADS set). */
bool cpu_threads_narrow(int threads, int ranks_here, int host_cpus, bool omp_env_set);

/* The CPUs in a Linux CPU list ("0-3,8,10-11\n": 7); 0 if it is not one. */
int cpu_list_count(const char *list);

/* The note for such a rank: its rank, threads and host, and the launch options that give it more. */
void cpu_threads_format_note(char *note, size_t len, int rank, int threads, int ranks_here, int host_cpus);

/* "1 thread a rank", "16 threads a rank", "4-16 threads a rank". */
void cpu_threads_describe(const CpuThreads *t, char *text, size_t len);

/* A collective: every rank calls it; all learn the range and the note. */
void cpu_threads_survey(const Dist *dist, CpuThreads *out);

#endif
