/* The CPU backend's threads per rank, and the note for a rank its launcher narrowed. */
#include "cpu/threads.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool cpu_threads_narrow(int threads, int ranks_here, int host_cpus, bool omp_env_set) {
    return !omp_env_set && 2l * threads * ranks_here <= host_cpus;
}

void cpu_threads_format_note(char *note, size_t len, int rank, int threads, int ranks_here, int host_cpus) {
    const int share = host_cpus / (ranks_here > 0 ? ranks_here : 1);
    snprintf(note, len,
             "rank %d runs the CPU work on %d thread%s, while %d CPUs are there for the %d rank%s of its host: its CPU "
             "affinity allows %d (a launcher's binding: Open MPI binds each of up to two ranks to one core by default; "
             "taskset, numactl and srun --cpu-bind narrow too). To give each rank its share: mpirun --map-by "
             "slot:PE=%d --use-hwthread-cpus (srun: --cpus-per-task=%d), or set OMP_NUM_THREADS to keep this count "
             "without this note",
             rank, threads, threads == 1 ? "" : "s", host_cpus, ranks_here, ranks_here == 1 ? "" : "s", threads,
             share, share);
}

int cpu_list_count(const char *list) {
    int count = 0;
    const char *p = list;
    while (*p && *p != '\n') {
        char *end;
        const long a = strtol(p, &end, 10);
        if (end == p || a < 0) return 0;
        long b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a) return 0;
        }
        count += (int)(b - a + 1);
        if (*end == ',') end++;
        else if (*end && *end != '\n') return 0;
        p = end;
    }
    return count;
}

/* The CPUs of the cpuset file under cgroup root `root` at `path` (this process's cgroup), else at the root (a
 * container sees its own cgroup there); 0 if neither is readable. */
static int cpuset_cpus(const char *root, const char *path, const char *file) {
    char name[4200];
    for (int at_root = 0; at_root < 2; at_root++) {
        snprintf(name, sizeof name, "%s%s/%s", root, at_root ? "" : path, file);
        FILE *f = fopen(name, "r");
        if (!f) continue;
        char *list = NULL; /* the whole line: a cpuset of scattered CPUs on a large host runs to kilobytes */
        size_t cap = 0;
        const int n = getline(&list, &cap, f) > 0 ? cpu_list_count(list) : 0;
        free(list);
        fclose(f);
        if (n > 0) return n;
    }
    return 0;
}

/* The CPUs this process's rank may share with the others on its host: those of its cpuset (a container, a Slurm
 * allocation; cgroup v1 or v2), at most the host's online CPUs. */
static int host_cpus(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    int n = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    while (f && n == 0 && fgets(line, sizeof line, f)) { /* "id:controllers:path" */
        char *c = strchr(line, ':'), *path = c ? strchr(c + 1, ':') : NULL;
        if (!path) continue;
        *path++ = 0, path[strcspn(path, "\n")] = 0;
        if (c[1] == 0) n = cpuset_cpus("/sys/fs/cgroup", path, "cpuset.cpus.effective");
        else if (strstr(c + 1, "cpuset")) n = cpuset_cpus("/sys/fs/cgroup/cpuset", path, "cpuset.effective_cpus");
    }
    if (f) fclose(f);
    return n > 0 && (online <= 0 || n < online) ? n : (int)(online > 0 ? online : 1);
}

void cpu_threads_survey(const Dist *dist, CpuThreads *out) {
    const int threads = omp_get_max_threads();
    const int cpus = host_cpus();
    const char *env = getenv("OMP_NUM_THREADS");
    out->note[0] = 0;
    const bool narrow = cpu_threads_narrow(threads, dist->local_size, cpus, env && *env);
    if (narrow) cpu_threads_format_note(out->note, sizeof out->note, dist->rank, threads, dist->local_size, cpus);
    dist_agree(dist, narrow, out->note, sizeof out->note);
    int range[2] = {-threads, threads};
    if (dist->world > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    out->min = -range[0], out->max = range[1];
}

void cpu_threads_describe(const CpuThreads *t, char *text, size_t len) {
    if (t->min == t->max) snprintf(text, len, "%d thread%s a rank", t->min, t->min == 1 ? "" : "s");
    else snprintf(text, len, "%d-%d threads a rank", t->min, t->max);
}
