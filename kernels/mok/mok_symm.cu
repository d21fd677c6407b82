/*
 * Symmetric memory of the megakernel (API in mok.h): one NCCL window per EP rank, the device
 * communicator, and a device table of every EP rank's window base (ncclGetLsaPointer), so the
 * persistent kernel reaches peers with plain pointer arithmetic. EP = 1: a cudaMalloc buffer.
 */
#include "mok.h"

#include <nccl.h>
#include <nccl_device.h>
#include <stdio.h>
#include <stdlib.h>

/* The peer table's capacity (one block of threads fills it): room for a whole NVL72 rack. */
#define MOK_MAX_EP 128

struct MokSymm {
    ncclComm_t comm; /* NULL: ep == 1, buf from cudaMalloc */
    int ep;
    void *buf;
    ncclWindow_t win;
    ncclDevComm dev;
    int has_win, has_dev;
    char **table; /* device (ep) */
};

struct MokLsaIndex {
    int idx[MOK_MAX_EP];
};

__global__ void mok_symm_table_kernel(char **table, ncclWindow_t win, MokLsaIndex lsa, int ep) {
    const int p = threadIdx.x;
    if (p < ep) table[p] = static_cast<char *>(ncclGetLsaPointer(win, 0, lsa.idx[p]));
}

#define MOK_NCCL(call, what)                                                                                           \
    do {                                                                                                               \
        const ncclResult_t rc_ = (call);                                                                               \
        if (rc_ != ncclSuccess) {                                                                                      \
            if (msg) *msg = what;                                                                                      \
            mok_symm_destroy(s);                                                                                       \
            return rc_;                                                                                                \
        }                                                                                                              \
    } while (0)

extern "C" ncclResult_t mok_symm_create(MokSymm **out, ncclComm_t comm, int ep, size_t bytes, const char **msg) {
    MokSymm *s = static_cast<MokSymm *>(calloc(1, sizeof(MokSymm)));
    if (!s) {
        if (msg) *msg = "out of host memory";
        return ncclSystemError;
    }
    *out = NULL;
    if (msg) *msg = "";
    s->comm = ep > 1 ? comm : NULL;
    s->ep = ep;
    if (bytes < 16) bytes = 16;
    cudaCheck(cudaMalloc((void **)&s->table, (size_t)ep * sizeof(char *)));
    if (!s->comm) {
        cudaCheck(cudaMalloc(&s->buf, bytes));
        cudaCheck(cudaMemcpy(s->table, &s->buf, sizeof(char *), cudaMemcpyHostToDevice));
        *out = s;
        return ncclSuccess;
    }
    if (ep > MOK_MAX_EP) {
        if (msg) *msg = "ep is larger than the megakernel's peer table (MOK_MAX_EP)";
        mok_symm_destroy(s);
        return ncclInvalidUsage;
    }
    MOK_NCCL(ncclMemAlloc(&s->buf, bytes), "ncclMemAlloc");
    MOK_NCCL(ncclCommWindowRegister(comm, s->buf, bytes, &s->win, NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)");
    s->has_win = 1;
    ncclDevCommRequirements req = {};
    MOK_NCCL(ncclDevCommCreate(comm, &req, &s->dev), "ncclDevCommCreate");
    s->has_dev = 1;
    const ncclTeam lsa = ncclTeamLsa(comm);
    if (lsa.nRanks != ep) {
        if (msg) *msg = "the EP group is not one NVLink (LSA) domain: the megakernel needs every EP peer load/store "
                        "reachable";
        mok_symm_destroy(s);
        return ncclInvalidUsage;
    }
    int me = -1;
    MOK_NCCL(ncclCommUserRank(comm, &me), "ncclCommUserRank");
    if (lsa.rank != me) {
        if (msg) *msg = "the LSA team's ranks do not follow the EP communicator's ranks";
        mok_symm_destroy(s);
        return ncclInvalidUsage;
    }
    /* the LSA team is the whole EP communicator (checked above), in its rank order: the LSA peer
     * index of EP rank p is p (as in ../shared/examples/nccl_lsa_probe.cu) */
    MokLsaIndex idx;
    for (int p = 0; p < ep; p++) idx.idx[p] = p;
    mok_symm_table_kernel<<<1, MOK_MAX_EP>>>(s->table, s->win, idx, ep);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
    *out = s;
    return ncclSuccess;
}

/* Why an EP communicator cannot carry the megakernel, worst last: the EP ranks agree on the largest. */
enum {
    PEERS_OK = 0,
    PEERS_TOO_MANY,
    PEERS_NO_RUNTIME,
    PEERS_SPLIT,
    PEERS_NO_SYMMETRIC,
    PEERS_ORDER,
    PEERS_NO_AGREEMENT
};

/* This rank's view. Every branch depends only on what NCCL derived from the topology all ranks
 * share (ep, the LSA team size, symmetric support), so all EP ranks take the same branches and
 * reach the collective ncclDevCommCreate together or not at all. */
static int peers_local(ncclComm_t comm, int ep, int *lsa_size) {
    *lsa_size = 0;
    if (ep > MOK_MAX_EP) return PEERS_TOO_MANY;
    /* NCCL's LSA team: the consecutive ranks of one node (or, with MNNVL, of one NVLink domain). */
    const ncclTeam lsa = ncclTeamLsa(comm);
    *lsa_size = lsa.nRanks;
    if (lsa.nRanks <= 0) return PEERS_NO_RUNTIME;
    if (lsa.nRanks < ep) return PEERS_SPLIT;
    /* Symmetric memory also needs every pair of GPUs to map each other's memory (CUDA P2P over
     * NVLink or PCIe, cuMem allocations): NCCL says no by failing the device communicator. */
    ncclDevCommRequirements req = {};
    ncclDevComm dev;
    if (ncclDevCommCreate(comm, &req, &dev) != ncclSuccess) return PEERS_NO_SYMMETRIC;
    int me = -1;
    const int ordered = ncclCommUserRank(comm, &me) == ncclSuccess && dev.lsaSize == ep && dev.lsaRank == me;
    ncclDevCommDestroy(comm, &dev);
    return ordered ? PEERS_OK : PEERS_ORDER;
}

/* The largest code over the EP ranks (one int through ncclAllReduce): a rank that cannot reach its
 * peers turns the megakernel off for all of them, so no rank waits in mok_symm_create alone. */
static int peers_agree(ncclComm_t comm, int code) {
    int *d = NULL, agreed = PEERS_NO_AGREEMENT;
    cudaStream_t st;
    cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaCheck(cudaMalloc((void **)&d, sizeof(int)));
    cudaCheck(cudaMemcpyAsync(d, &code, sizeof(int), cudaMemcpyHostToDevice, st));
    if (ncclAllReduce(d, d, 1, ncclInt32, ncclMax, comm, st) == ncclSuccess)
        cudaCheck(cudaMemcpyAsync(&agreed, d, sizeof(int), cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaFree(d));
    cudaCheck(cudaStreamDestroy(st));
    return agreed;
}

extern "C" int mok_symm_lsa_check(ncclComm_t comm, int ep, char *why, size_t whylen) {
    if (why && whylen) why[0] = '\0';
    if (!comm || ep <= 1) return 1;
    int lsa_size = 0;
    const int code = peers_agree(comm, peers_local(comm, ep, &lsa_size));
    if (code == PEERS_OK) return 1;
    if (!why || !whylen) return 0;
    switch (code) {
    case PEERS_TOO_MANY:
        snprintf(why, whylen, "ep = %d is larger than the megakernel's peer table (%d ranks)", ep, MOK_MAX_EP);
        break;
    case PEERS_NO_RUNTIME:
        snprintf(why, whylen, "NCCL could not set up its device runtime on the EP communicator (NCCL_DEBUG=WARN "
                 "says why)");
        break;
    case PEERS_SPLIT:
        snprintf(why, whylen, "the %d EP ranks span %d NVLink (LSA) domains of %d ranks: the megakernel needs "
                 "every EP peer in one domain", ep, ep / (lsa_size > 0 ? lsa_size : 1), lsa_size);
        break;
    case PEERS_NO_SYMMETRIC:
        snprintf(why, whylen, "NCCL offers no symmetric memory on the EP communicator: the GPUs cannot map each "
                 "other's memory (no CUDA peer access between them, NCCL_CUMEM_ENABLE=0, or GPUs isolated from "
                 "each other by the job's cgroups)");
        break;
    case PEERS_ORDER:
        snprintf(why, whylen, "the NVLink (LSA) team does not list the EP ranks in their order");
        break;
    default:
        snprintf(why, whylen, "the EP ranks could not agree whether their peers are reachable (ncclAllReduce "
                 "failed)");
        break;
    }
    return 0;
}

extern "C" void *mok_symm_local(const MokSymm *s) { return s->buf; }

extern "C" char *const *mok_symm_peer_table(const MokSymm *s) { return s->table; }

extern "C" void mok_symm_destroy(MokSymm *s) {
    if (!s) return;
    if (s->comm) {
        if (s->has_dev) ncclDevCommDestroy(s->comm, &s->dev);
        if (s->has_win) ncclCommWindowDeregister(s->comm, s->win);
        if (s->buf) ncclMemFree(s->buf);
    } else if (s->buf) {
        cudaCheck(cudaFree(s->buf));
    }
    if (s->table) cudaCheck(cudaFree(s->table));
    free(s);
}
