/*
 * NCCL communicators mirroring the MPI layout of src/dist.h: world, dp (ranks holding the same
 * experts) and ep (one expert-parallel group), made by ncclCommSplit from the world communicator
 * whose unique id rank 0 broadcasts over MPI. NVLink multicast (NVLS) stays off.
 */
#ifndef MOKC_GPU_COMMS_H
#define MOKC_GPU_COMMS_H

#include <nccl.h>

#include "dist.h"

typedef struct {
    ncclComm_t world, dp, ep;  /* NULL where the group has one rank */
} GpuComms;

void gpu_comms_init(GpuComms *c, const Dist *dist);
void gpu_comms_destroy(GpuComms *c);

#endif
