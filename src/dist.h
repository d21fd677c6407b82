/*
 * Ranks and groups: the only module that knows the parallel layout. world = dp x ep; rank r has
 * ep_rank = r % ep and dp_rank = r / ep, so an EP group is ep consecutive ranks (one NVLink
 * domain on GPUs). MPI bootstraps everything and only ever sees host memory.
 */
#ifndef MOKC_DIST_H
#define MOKC_DIST_H

#include <mpi.h>
#include <stdbool.h>

#include "model.h"

typedef struct {
    int rank, world;          /* MPI_COMM_WORLD */
    int local_rank, local_size; /* within the node (MPI_COMM_TYPE_SHARED) */
    int ep, dp;               /* group sizes, world = dp * ep */
    int ep_rank, dp_rank;
    MPI_Comm ep_comm;         /* the ep ranks that share one data-parallel replica */
    MPI_Comm dp_comm;         /* the dp ranks that hold the same experts */
    char host[256];
} Dist;

/* The rank the launcher (mpirun, srun, PMI) gave this process, read from the environment before
 * MPI starts; 0 when not launched as a job. */
int dist_launcher_rank(void);

/* The exit status of this rank for a problem every rank found before MPI starts (bad arguments
 * or spec) and the launcher's rank 0 reported: `code` there; 0 elsewhere, because a non-zero exit
 * makes the launcher abort the job at once and can kill rank 0 before it has printed (seen under
 * CI's load). The job still fails, with rank 0's status. */
int dist_pre_init_exit(int code);
/* MPI_Init (if not yet) and the node-local rank. Groups are made by dist_make_groups. */
void dist_init(Dist *dist, int *argc, char ***argv);
/* Splits the world into EP and DP groups. Returns false (with a message naming the sizes that
 * would work in msg) if ep does not divide the world. */
bool dist_make_groups(Dist *dist, int ep, char *msg, size_t msglen);
/* Rank 0 prints the layout: world, dp, ep, hosts and which experts live on which rank. */
void dist_print_layout(const Dist *dist, int num_experts);
/* All ranks learn whether any rank failed; the lowest failing rank's message (err) becomes
 * everyone's. Returns non-zero if any failed. A collective: every rank calls it. */
int dist_agree(const Dist *dist, int failed, char *err, size_t errlen);
void dist_finalize(Dist *dist);
/* Checks an MPI call's return code: on failure prints the call, file:line, the rank and a hint,
 * then stops the job (MPI_COMM_WORLD returns errors instead of aborting inside MPI). */
void dist_mpi_check(int rc, const char *what, const char *file, int line);
#define mpiCheck(call) dist_mpi_check((call), #call, __FILE__, __LINE__)
/* Every rank exits with `code` after a barrier-free MPI_Finalize where possible (errors that all
 * ranks detect identically) — never leaves mpirun hanging. */
void dist_exit(Dist *dist, int code) __attribute__((noreturn));
/* For problems every rank finds alike: rank 0 prints "mokc: error: msg" and the hint (NULL: none), then every rank
 * exits with `code` (dist_exit). */
void dist_fail_all(Dist *dist, int code, const char *hint, const char *msg) __attribute__((noreturn));

/* The CPU backend's all-reduce: the gradient of the mean loss over all ranks. A replicated tensor's gradient on each
 * rank comes from its own tokens: sum over the world, divide by the world. An expert's gradient on its owner already
 * sums the tokens of the whole EP group (they were sent to it): sum over the DP group (the other owners of the same
 * experts), and divide by the world too. */
void dist_average_grads(const Dist *dist, const ParamTable *t, float *grads);

#endif
