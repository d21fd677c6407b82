/*
 * Symmetric memory of the megakernel (API in mok.h): one NCCL window per EP rank, the device
 * communicator, and a device table of every EP rank's window base (ncclGetLsaPointer), so the
 * persistent kernel reaches peers with plain pointer arithmetic. EP = 1: a cudaMalloc buffer.
 */
#include "mok.h"

#include <nccl.h>
#include <nccl_device.h>
#include <stdlib.h>

#define MOK_MAX_EP 64

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
        if (msg) *msg = "ep is larger than the megakernel's peer table (64)";
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
