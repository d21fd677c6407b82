/* The CPU backend's threads per rank, and the note for a rank its launcher narrowed. */
#include "cpu/threads.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

bool cpu_threads_narrow(int threads, int ranks_here, int host_cpus, bool omp_env_set) {
    return !omp_env_set && 2l * threads * ranks_here <= host_cpus;
}

void cpu_threads_format_note(char *note, size_t len, int rank, int threads, int ranks_here, int host_cpus) {
    const int share = host_cpus / (ranks_here > 0 ? ranks_here : 1);
    snprintf(note, len,
             "rank %d runs the CPU work on %d thread%s, while its host has %d CPUs for %d rank%s: its CPU affinity "
             "allows %d (Open MPI binds each rank to one core by default). To give each rank its share: mpirun "
             "--map-by slot:PE=%d (srun: --cpus-per-task=%d), or set OMP_NUM_THREADS to keep this count without this "
             "note",
             rank, threads, threads == 1 ? "" : "s", host_cpus, ranks_here, ranks_here == 1 ? "" : "s", threads,
             share, share);
}

void cpu_threads_survey(const Dist *dist, CpuThreads *out) {
    const int threads = omp_get_max_threads();
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int host_cpus = cpus > 0 ? (int)cpus : threads;
    const char *env = getenv("OMP_NUM_THREADS");
    out->note[0] = 0;
    const bool narrow = cpu_threads_narrow(threads, dist->local_size, host_cpus, env && *env);
    if (narrow)
        cpu_threads_format_note(out->note, sizeof out->note, dist->rank, threads, dist->local_size, host_cpus);
    dist_agree(dist, narrow, out->note, sizeof out->note);
    int range[2] = {-threads, threads};
    if (dist->world > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    out->min = -range[0], out->max = range[1];
}

void cpu_threads_describe(const CpuThreads *t, char *text, size_t len) {
    if (t->min == t->max) snprintf(text, len, "%d thread%s a rank", t->min, t->min == 1 ? "" : "s");
    else snprintf(text, len, "%d-%d threads a rank", t->min, t->max);
}
