/* NCCL communicators: world from an MPI-broadcast id, dp and ep split from it. */
#include "gpu/comms.h"

#include <stdlib.h>
#include <string.h>

#include "gpu/check.h"

void gpu_comms_init(GpuComms *c, const Dist *dist) {
    memset(c, 0, sizeof *c);
    if (dist->world == 1) return;
    /* Multicast objects can take a shared host's GPUs down; never let NCCL create them. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclUniqueId id;
    if (dist->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclCheck(ncclCommInitRank(&c->world, dist->world, id, dist->rank));
    /* color = group, key = rank inside the group (the same numbering as the MPI groups). */
    if (dist->ep > 1) ncclCheck(ncclCommSplit(c->world, dist->dp_rank, dist->ep_rank, &c->ep, NULL));
    else ncclCheck(ncclCommSplit(c->world, NCCL_SPLIT_NOCOLOR, 0, &c->ep, NULL));
    if (dist->dp > 1) ncclCheck(ncclCommSplit(c->world, dist->ep_rank, dist->dp_rank, &c->dp, NULL));
    else ncclCheck(ncclCommSplit(c->world, NCCL_SPLIT_NOCOLOR, 0, &c->dp, NULL));
}

void gpu_comms_destroy(GpuComms *c) {
    if (c->ep) ncclCommDestroy(c->ep);
    if (c->dp) ncclCommDestroy(c->dp);
    if (c->world) ncclCommDestroy(c->world);
    memset(c, 0, sizeof *c);
}
