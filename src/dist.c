/* MPI bootstrap, EP/DP groups and the printed layout. */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

void dist_mpi_check(int rc, const char *what, const char *file, int line) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    mokc_die(MOKC_EXIT_RUNTIME, "check the MPI launch (mpirun/srun), that every rank runs the same spec, and the network",
             "%s failed at %s:%d: %s", what, file, line, text);
}

int dist_launcher_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

int dist_pre_init_exit(int code) { return dist_launcher_rank() == 0 ? code : 0; }

void dist_init(Dist *d, int *argc, char ***argv) {
    memset(d, 0, sizeof *d);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) mpiCheck(MPI_Init(argc, argv));
    /* Errors come back to mpiCheck, which names the call, the place and the rank. */
    mpiCheck(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &d->local_rank));
    mpiCheck(MPI_Comm_size(local, &d->local_size));
    mpiCheck(MPI_Comm_free(&local));
    gethostname(d->host, sizeof d->host - 1);
    d->ep = d->dp = 1;
    d->ep_comm = d->dp_comm = MPI_COMM_NULL;
    mokc_set_log_rank(d->world > 1 ? d->rank : -1);
}

bool dist_make_groups(Dist *d, int ep, char *msg, size_t msglen) {
    if (ep < 1 || d->world % ep != 0) {
        int n = snprintf(msg, msglen, "parallel.ep = %d does not divide the world size %d; valid: ", ep, d->world);
        for (int e = 1; e <= d->world && n > 0 && (size_t)n < msglen; e++)
            if (d->world % e == 0) n += snprintf(msg + n, msglen - (size_t)n, "%s%d", e == 1 ? "" : ", ", e);
        return false;
    }
    d->ep = ep;
    d->dp = d->world / ep;
    d->ep_rank = d->rank % ep;
    d->dp_rank = d->rank / ep;
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, d->dp_rank, d->ep_rank, &d->ep_comm));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, d->ep_rank, d->dp_rank, &d->dp_comm));
    return true;
}

void dist_print_layout(const Dist *d, int num_experts) {
    char hosts[256 * 64];
    memset(hosts, 0, sizeof hosts);
    int n = d->world < 64 ? d->world : 64;
    char mine[256];
    snprintf(mine, sizeof mine, "%s", d->host);
    if (d->world <= 64) mpiCheck(MPI_Gather(mine, 256, MPI_CHAR, hosts, 256, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (d->rank != 0) return;
    printf("layout: world %d = dp %d x ep %d\n", d->world, d->dp, d->ep);
    for (int r = 0; r < n; r++) {
        int ep_rank = r % d->ep, per = num_experts / d->ep;
        printf("  rank %d: dp_rank %d ep_rank %d host %s", r, r / d->ep, ep_rank, d->world <= 64 ? hosts + 256 * r : "?");
        if (num_experts > 0) printf(" experts %d..%d", ep_rank * per, ep_rank * per + per - 1);
        printf("\n");
    }
    if (d->world > n) printf("  ... (%d more ranks)\n", d->world - n);
}

int dist_agree(const Dist *d, int failed, char *err, size_t errlen) {
    if (d->world == 1) return failed;
    int first = failed ? d->rank : d->world;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == d->world) return 0;
    mpiCheck(MPI_Bcast(err, (int)errlen, MPI_CHAR, first, MPI_COMM_WORLD));
    return 1;
}

void dist_finalize(Dist *d) {
    if (d->ep_comm != MPI_COMM_NULL) mpiCheck(MPI_Comm_free(&d->ep_comm));
    if (d->dp_comm != MPI_COMM_NULL) mpiCheck(MPI_Comm_free(&d->dp_comm));
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

void dist_exit(Dist *d, int code) {
    fflush(stdout);
    fflush(stderr);
    dist_finalize(d);
    exit(code);
}

void dist_fail_all(Dist *d, int code, const char *hint, const char *msg) {
    fflush(stdout);
    if (d->rank == 0) {
        fprintf(stderr, "mokc: error: %s\n", msg);
        if (hint) fprintf(stderr, "---> HINT: %s\n", hint);
    }
    dist_exit(d, code);
}

void dist_average_grads(const Dist *d, const ParamTable *t, float *grads) {
    if (d->world == 1) return;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        MPI_Comm comm = p->kind == PARAM_EXPERT ? d->dp_comm : MPI_COMM_WORLD;
        float *g = grads + p->offset;
        /* MPI counts are ints: large tensors go in pieces. */
        for (size_t done = 0; (p->kind != PARAM_EXPERT || d->dp > 1) && done < p->numel; done += (1u << 30)) {
            size_t part = p->numel - done < (1u << 30) ? p->numel - done : (1u << 30);
            mpiCheck(MPI_Allreduce(MPI_IN_PLACE, g + done, (int)part, MPI_FLOAT, MPI_SUM, comm));
        }
        for (size_t j = 0; j < p->numel; j++) g[j] /= (float)d->world;
    }
}
