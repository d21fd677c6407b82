/* Bitwise agreement of the replicas across ranks, by hashes. */
#include "replica_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* splitmix64's finaliser: a bijection of 64-bit words. */
static inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t replica_hash(const float *x, size_t n) {
    /* A sum of per-element terms: integer addition is exact, so the threads may add in any order. A term mixes the
     * element's bits with its position, so a changed element changes its term (mix64 is a bijection), and so the
     * sum. */
    uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        sum += mix64((uint64_t)i * 0x9e3779b97f4a7c15ull + bits);
    }
    return mix64(sum ^ mix64(n));
}

/* What one hash covers, for the message. */
typedef struct {
    const char *name, *what;
} Item;

static const char *const kParts[3] = {"weights", "AdamW first moment", "AdamW second moment"};

/* Compares n hashes over comm; on a difference writes err (the first differing item, the ranks of MPI_COMM_WORLD
 * whose copy differs from the one most ranks of comm hold, ties to the lowest rank's) and returns 1. The same result
 * on every rank of comm. */
static int compare_over(MPI_Comm comm, const uint64_t *h, const Item *items, int n, char *err, size_t errlen) {
    if (n == 0) return 0;
    uint64_t *lo = mallocCheck(sizeof(uint64_t) * (size_t)n), *hi = mallocCheck(sizeof(uint64_t) * (size_t)n);
    mpiCheck(MPI_Allreduce(h, lo, n, MPI_UINT64_T, MPI_MIN, comm));
    mpiCheck(MPI_Allreduce(h, hi, n, MPI_UINT64_T, MPI_MAX, comm));
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (lo[i] != hi[i]) bad = i;
    free(lo), free(hi);
    if (bad < 0) return 0;
    int size = 0, me = 0;
    mpiCheck(MPI_Comm_size(comm, &size));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    uint64_t mine[2] = {h[bad], (uint64_t)me}, *all = mallocCheck(sizeof(uint64_t) * 2 * (size_t)size);
    mpiCheck(MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, comm));
    /* The copy most ranks hold is the reference: one faulty rank of many is named, not the many. */
    int ref = 0, held = 0;
    for (int r = 0; r < size; r++) {
        int same = 0;
        for (int q = 0; q < size; q++) same += all[2 * q] == all[2 * r];
        if (same > held) held = same, ref = r;
    }
    int len = snprintf(err, errlen, "replicas differ: %s (%s) on rank", items[bad].name, items[bad].what);
    for (int r = 0, listed = 0; r < size; r++)
        if (all[2 * r] != all[2 * ref] && len > 0 && (size_t)len < errlen)
            len += snprintf(err + len, errlen - (size_t)len, "%s %d", listed++ ? "," : "", (int)all[2 * r + 1]);
    if (len > 0 && (size_t)len < errlen)
        snprintf(err + len, errlen - (size_t)len, ", against rank %d's copy (held by %d of %d ranks); replicated "
                 "tensors must stay bitwise equal on every rank", (int)all[2 * ref + 1], held, size);
    free(all);
    return 1;
}

int replica_check(const Dist *d, const ParamTable *t, const float *params, const float *adam_m, const float *adam_v,
                  const float *bias, size_t bias_n, int *compared, char *err, size_t errlen) {
    *compared = 0;
    if (d->world == 1) return 0;
    const float *arrays[3] = {params, adam_m, adam_v};
    const size_t cap = 3 * (size_t)t->count + 1;
    uint64_t *rep = mallocCheck(sizeof(uint64_t) * cap), *exp = mallocCheck(sizeof(uint64_t) * cap);
    Item *rep_items = mallocCheck(sizeof(Item) * cap), *exp_items = mallocCheck(sizeof(Item) * cap);
    int nrep = 0, nexp = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        const bool expert = p->kind == PARAM_EXPERT;
        if (expert && d->dp == 1) continue; /* one copy of each expert */
        for (int a = 0; a < 3; a++) {
            const uint64_t h = replica_hash(arrays[a] + p->offset, p->numel);
            const Item it = {p->name, kParts[a]};
            if (expert) exp[nexp] = h, exp_items[nexp++] = it;
            else rep[nrep] = h, rep_items[nrep++] = it;
        }
    }
    if (bias_n > 0) rep[nrep] = replica_hash(bias, bias_n), rep_items[nrep++] = (Item){"expert_bias", "routing bias"};
    err[0] = 0;
    int failed = compare_over(MPI_COMM_WORLD, rep, rep_items, nrep, err, errlen);
    if (!failed && d->dp > 1) failed = compare_over(d->dp_comm, exp, exp_items, nexp, err, errlen);
    free(rep), free(exp), free(rep_items), free(exp_items);
    if (dist_agree(d, failed, err, errlen)) return 1;
    *compared = nrep + nexp;
    return 0;
}
