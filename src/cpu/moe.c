/*
 * The MoE block of the CPU reference, forward and backward (semantics in moe.h). The forward runs
 * in four phases: (1) route: router logits, scores, top-k, gates, counts, aux loss; (2) dispatch:
 * group the (token, j) slots by expert in stable order and gather their rows; (3) expert compute
 * over each local expert's contiguous rows; (4) combine in fixed j order, plus the shared experts.
 * The backward mirrors them in reverse. Between (2) and (3) the dispatched rows travel to their
 * experts' owners (MPI_Alltoallv over the EP group; a copy when ep = 1), and between (3) and (4)
 * the outputs travel back; the backward moves dy and dx the same way. Phases (3) and (3') only see
 * an owner's rows grouped by local expert, in the stable order (source rank, token, j).
 * Every output element is written by one thread in a fixed order: results are bitwise identical
 * for any OMP_NUM_THREADS.
 */
#include "real.h"
#include "moe.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"

typedef OP(MoeWeights) Weights;
typedef OP(MoeActs) Acts;

#if REAL_IS_F64
#define MPI_REAL_T MPI_DOUBLE
#else
#define MPI_REAL_T MPI_FLOAT
#endif

static int ep_size(const MoeDims *d) {
    int n = 1;
    if (d->comm) mpiCheck(MPI_Comm_size(d->comm->ep, &n));
    return n;
}

static int stats_size(const MoeDims *d) {
    int n = 1;
    if (d->comm) mpiCheck(MPI_Comm_size(d->comm->stats, &n));
    return n;
}

static void check_dims(const MoeDims *d, int N, const char *who) {
    if (d->ep < 1 || d->E % d->ep != 0 || d->ep_rank < 0 || d->ep_rank >= d->ep || ep_size(d) != d->ep)
        mokc_die(MOKC_EXIT_RUNTIME, "expert parallelism needs an EP communicator of ep ranks and E divisible by ep",
                 "%s: ep = %d, ep_rank = %d, E = %d, but the EP communicator has %d rank(s)", who, d->ep,
                 d->ep_rank, d->E, ep_size(d));
    if (d->C <= 0 || d->E <= 0 || d->I <= 0 || d->k < 1 || d->k > d->E || d->n_shared < 0 || N < 0)
        mokc_die(MOKC_EXIT_USAGE, "need C, E, I > 0, 1 <= k <= E, n_shared >= 0, N >= 0",
                 "%s: invalid MoE shape C=%d E=%d k=%d I=%d n_shared=%d N=%d", who, d->C, d->E, d->k, d->I,
                 d->n_shared, N);
}

void OP(moe_acts_alloc)(Acts *a, const MoeDims *d, int N) {
    check_dims(d, N, "moe_acts_alloc");
    const size_t n = (size_t)N, E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C, I = (size_t)d->I;
    const size_t SI = (size_t)d->n_shared * I;
    memset(a, 0, sizeof *a);
    a->N = N;
    a->logits = mallocCheck(n * E * sizeof(real));
    a->scores = mallocCheck(n * E * sizeof(real));
    a->topk = mallocCheck(n * k * sizeof(int));
    a->gates = mallocCheck(n * k * sizeof(real));
    a->expert_offset = callocCheck(E + 1, sizeof(int));
    a->row_slot = mallocCheck(n * k * sizeof(int));
    a->slot_row = mallocCheck(n * k * sizeof(int));
    a->xe = mallocCheck(n * k * C * sizeof(real));
    a->ye = mallocCheck(n * k * C * sizeof(real));
    /* An owner receives at most min(k, E_local) rows per token from each of the ep ranks. */
    const size_t E_local = E / (size_t)d->ep, ep = (size_t)d->ep;
    const size_t R = ep * n * (k < E_local ? k : E_local);
    a->send_rows = callocCheck(ep, sizeof(int));
    a->recv_rows = callocCheck(ep, sizeof(int));
    a->recv_offset = callocCheck(E_local + 1, sizeof(int));
    a->recv_source_row = mallocCheck(R * sizeof(int));
    a->xr = mallocCheck(R * C * sizeof(real));
    a->pre_gate = mallocCheck(R * I * sizeof(real));
    a->pre_up = mallocCheck(R * I * sizeof(real));
    a->h = mallocCheck(R * I * sizeof(real));
    a->stage = mallocCheck(R * C * sizeof(real));
    a->rows_out = mallocCheck(R * C * sizeof(real));
    if (SI > 0) {
        a->s_gate = mallocCheck(n * SI * sizeof(real));
        a->s_up = mallocCheck(n * SI * sizeof(real));
        a->s_h = mallocCheck(n * SI * sizeof(real));
    }
    a->counts = callocCheck(E, sizeof(int));
    a->stat_counts = callocCheck(E, sizeof(long long));
    a->aux_loss = 0;
}

void OP(moe_acts_free)(Acts *a) {
    free(a->logits);
    free(a->scores);
    free(a->topk);
    free(a->gates);
    free(a->expert_offset);
    free(a->row_slot);
    free(a->slot_row);
    free(a->xe);
    free(a->ye);
    free(a->send_rows);
    free(a->recv_rows);
    free(a->recv_offset);
    free(a->recv_source_row);
    free(a->xr);
    free(a->pre_gate);
    free(a->pre_up);
    free(a->h);
    free(a->stage);
    free(a->rows_out);
    free(a->s_gate);
    free(a->s_up);
    free(a->s_h);
    free(a->counts);
    free(a->stat_counts);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------------------------------------
 * Phase 1: routing
 * ---------------------------------------------------------------------------------------------- */

static void scores_from_logits(real *s, const real *l, int E, int sigmoid) {
    if (sigmoid) {
        for (int e = 0; e < E; e++) s[e] = (real)(1.0 / (1.0 + exp(-(double)l[e])));
        return;
    }
    double mx = l[0];
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
    for (int e = 0; e < E; e++) s[e] = (real)(exp((double)l[e] - mx) / sum);
}

/* The k largest of score + bias, in order. Pick j is the best candidate strictly below pick j-1 in
 * the order (value descending, id ascending); scanning ids upwards with a strict '>' makes the lower
 * id win ties. No mask needed, O(k*E). Returns 0 if a pick found no candidate (NaN scores). */
static int select_topk(int *topk, const real *s, const float *bias, int E, int k) {
    double prev_v = INFINITY;
    int prev_e = -1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        double best_v = -INFINITY;
        for (int e = 0; e < E; e++) {
            double v = (double)s[e] + (bias ? (double)bias[e] : 0.0);
            int below_prev = v < prev_v || (v == prev_v && e > prev_e);
            if (!below_prev) continue;
            if (best < 0 || v > best_v) {
                best = e;
                best_v = v;
            }
        }
        if (best < 0) {
            for (; j < k; j++) topk[j] = 0; /* keep later phases in bounds until the caller dies */
            return 0;
        }
        topk[j] = best;
        prev_v = best_v;
        prev_e = best;
    }
    return 1;
}

/* gates: the selected unbiased scores, / their sum when norm_topk, times scaling. */
static void gates_from_scores(real *g, const int *topk, const real *s, const MoeDims *d) {
    double sum = 0;
    for (int j = 0; j < d->k; j++) sum += (double)s[topk[j]];
    double mul = d->norm_topk ? d->scaling / sum : d->scaling;
    for (int j = 0; j < d->k; j++) g[j] = (real)((double)s[topk[j]] * mul);
}

/* Per-token normaliser of the scores for the aux loss' P: softmax scores already sum to 1. */
static double aux_norm(const real *s, int E, int sigmoid) {
    if (!sigmoid) return 1.0;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += (double)s[e];
    return sum;
}

/* aux = E * sum_e f_e P_e with f_e = stat_counts_e / (Ns k) and P_e = (1/Ns) sum_n p_{n,e} over
 * the Ns tokens of every rank in comm.stats. Each rank sums its tokens serially in a fixed order;
 * the ranks' sums are added by MPI_Allreduce (a fixed order for a fixed rank count). */
static double aux_loss_forward(Acts *a, const MoeDims *d, int N) {
    const int E = d->E;
    double *psum = callocCheck((size_t)E, sizeof(double));
    for (int n = 0; n < N; n++) {
        const real *s = a->scores + (size_t)n * E;
        double inv = 1.0 / aux_norm(s, E, d->sigmoid);
        for (int e = 0; e < E; e++) psum[e] += (double)s[e] * inv;
    }
    for (int e = 0; e < E; e++) a->stat_counts[e] = a->counts[e];
    const int ranks = stats_size(d);
    if (ranks > 1) {
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, psum, E, MPI_DOUBLE, MPI_SUM, d->comm->stats));
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, a->stat_counts, E, MPI_LONG_LONG, MPI_SUM, d->comm->stats));
    }
    const double Ns = (double)N * ranks; /* every rank holds a micro-batch of N tokens */
    double acc = 0;
    for (int e = 0; e < E; e++) acc += (double)a->stat_counts[e] * psum[e];
    free(psum);
    return Ns > 0 ? (double)E * acc / (Ns * Ns * (double)d->k) : 0.0;
}

/* Replaces the router's own selection tk (one token's) with `forced`; returns how many forced choices it lacks and,
 * in *gap, the largest shortfall of their score + bias below its k-th choice's, relative to that. A forced row that
 * names an expert outside [0, E) or one twice is no selection at all: tk stays the router's own, every choice counts
 * as differing, and the gap is infinite. */
static int force_topk(int *tk, const int *forced, const real *s, const float *bias, int E, int k, double *gap) {
    *gap = 0;
    for (int j = 0; j < k; j++) {
        int repeated = 0;
        for (int i = 0; i < j; i++) repeated |= forced[i] == forced[j];
        if (forced[j] < 0 || forced[j] >= E || repeated) {
            *gap = INFINITY;
            return k;
        }
    }
    const double kth = (double)s[tk[k - 1]] + (bias ? (double)bias[tk[k - 1]] : 0.0);
    int differ = 0;
    for (int j = 0; j < k; j++) {
        int own = 0;
        for (int i = 0; i < k; i++) own |= tk[i] == forced[j];
        if (own) continue;
        const double v = (double)s[forced[j]] + (bias ? (double)bias[forced[j]] : 0.0);
        const double short_of = (kth - v) / fabs(kth);
        differ++;
        if (!(short_of <= *gap)) *gap = isnan(short_of) ? INFINITY : short_of;
    }
    memcpy(tk, forced, (size_t)k * sizeof(int));
    return differ;
}

static void route_forward(Acts *a, const real *x, const Weights *w, const float *expert_bias, const MoeDims *d,
                          int N) {
    const int E = d->E, k = d->k;
    OP(matmul_nn)(a->logits, x, w->router, N, d->C, E, 0);
    int failed = 0, differ = 0; /* die outside the parallel region, not from a worker thread */
    double worst_gap = 0;
#pragma omp parallel for schedule(static) reduction(| : failed) reduction(+ : differ) reduction(max : worst_gap)
    for (int n = 0; n < N; n++) {
        real *s = a->scores + (size_t)n * E;
        int *tk = a->topk + (size_t)n * k;
        scores_from_logits(s, a->logits + (size_t)n * E, E, d->sigmoid);
        const int found = select_topk(tk, s, expert_bias, E, k);
        failed |= !found;
        if (a->forced_topk && found) {
            double gap;
            differ += force_topk(tk, a->forced_topk + (size_t)n * k, s, expert_bias, E, k, &gap);
            worst_gap = gap > worst_gap ? gap : worst_gap;
        }
        gates_from_scores(a->gates + (size_t)n * k, tk, s, d);
    }
    a->forced_differ = differ, a->forced_gap = worst_gap;
    if (failed)
        mokc_die(MOKC_EXIT_RUNTIME, "the router weights, the input or expert_bias contain NaN; lower the learning rate",
                 "moe_forward: top-%d selection found no candidate (non-finite router scores)", k);
    memset(a->counts, 0, (size_t)E * sizeof(int));
    for (long slot = 0; slot < (long)N * k; slot++) a->counts[a->topk[slot]]++;
    a->aux_loss = aux_loss_forward(a, d, N);
}

/* ------------------------------------------------------------------------------------------------
 * Phase 2: dispatch plan and gather
 * ---------------------------------------------------------------------------------------------- */

/* Counting sort of the slots by expert; visiting slots in (token, j) order keeps each expert's
 * rows in that stable order. */
static void dispatch_plan(Acts *a, const MoeDims *d, int N) {
    const int E = d->E, nslots = N * d->k;
    a->expert_offset[0] = 0;
    for (int e = 0; e < E; e++) a->expert_offset[e + 1] = a->expert_offset[e] + a->counts[e];
    int *cursor = mallocCheck((size_t)E * sizeof(int));
    memcpy(cursor, a->expert_offset, (size_t)E * sizeof(int));
    for (int slot = 0; slot < nslots; slot++) {
        int r = cursor[a->topk[slot]]++;
        a->row_slot[r] = slot;
        a->slot_row[slot] = r;
    }
    free(cursor);
}

/* xe[r] = x[token of row r]. */
static void dispatch_gather(real *xe, const real *x, const int *row_slot, int rows, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        memcpy(xe + (size_t)r * C, x + (size_t)(row_slot[r] / k) * C, (size_t)C * sizeof(real));
}

/* ------------------------------------------------------------------------------------------------
 * The exchange between the dispatching ranks and the experts' owners. xe is grouped by global
 * expert, hence by owner: owner p gets the contiguous block of experts [p*E_local, (p+1)*E_local).
 * MPI delivers rows in source-rank order; owners regroup them by local expert, so each expert's
 * rows are in (source rank, token, j) order whatever the ep.
 * ---------------------------------------------------------------------------------------------- */

/* Row counts per peer and the owner-side grouping, from this forward's routing. */
static void exchange_plan(Acts *a, const MoeDims *d) {
    const int ep = d->ep, El = d->E / d->ep;
    int *recv_counts = mallocCheck((size_t)d->E * sizeof(int)); /* [source][local expert] */
    if (ep > 1) mpiCheck(MPI_Alltoall(a->counts, El, MPI_INT, recv_counts, El, MPI_INT, d->comm->ep));
    else memcpy(recv_counts, a->counts, (size_t)d->E * sizeof(int));
    int *source_start = mallocCheck((size_t)d->E * sizeof(int)); /* [source][el]: first row in source order */
    int row = 0;
    for (int p = 0; p < ep; p++) {
        a->send_rows[p] = a->recv_rows[p] = 0;
        for (int el = 0; el < El; el++) {
            a->send_rows[p] += a->counts[p * El + el];
            a->recv_rows[p] += recv_counts[p * El + el];
            source_start[p * El + el] = row;
            row += recv_counts[p * El + el];
        }
    }
    a->rows_in = row;
    int r = 0;
    for (int el = 0; el < El; el++) {
        a->recv_offset[el] = r;
        for (int p = 0; p < ep; p++)
            for (int i = 0; i < recv_counts[p * El + el]; i++) a->recv_source_row[r++] = source_start[p * El + el] + i;
    }
    a->recv_offset[El] = r;
    free(recv_counts);
    free(source_start);
}

/* Moves C-wide rows between the ranks: from `send` (counts per peer in send_rows) into `recv`. */
static void alltoall_rows(real *recv, const int *recv_rows, const real *send, const int *send_rows,
                          const MoeDims *d) {
    const int ep = d->ep, C = d->C;
    if (ep == 1) {
        memcpy(recv, send, (size_t)send_rows[0] * C * sizeof(real));
        return;
    }
    int *sc = mallocCheck(4 * (size_t)ep * sizeof(int)), *sd = sc + ep, *rc = sc + 2 * ep, *rd = sc + 3 * ep;
    int so = 0, ro = 0;
    for (int p = 0; p < ep; p++) {
        if ((long long)(so + send_rows[p]) * C > 2147483647ll || (long long)(ro + recv_rows[p]) * C > 2147483647ll)
            mokc_die(MOKC_EXIT_RUNTIME, "use a smaller micro-batch or more ranks", "MoE exchange over 2^31 elements");
        sc[p] = send_rows[p] * C, sd[p] = so * C, so += send_rows[p];
        rc[p] = recv_rows[p] * C, rd[p] = ro * C, ro += recv_rows[p];
    }
    mpiCheck(MPI_Alltoallv(send, sc, sd, MPI_REAL_T, recv, rc, rd, MPI_REAL_T, d->comm->ep));
    free(sc);
}

/* Dispatcher rows (xe layout) -> the owners' rows grouped by local expert (xr layout). */
static void send_to_owners(real *owner_rows, const real *rows, Acts *a, const MoeDims *d) {
    const int C = d->C;
    alltoall_rows(a->stage, a->recv_rows, rows, a->send_rows, d);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < a->rows_in; r++)
        memcpy(owner_rows + (size_t)r * C, a->stage + (size_t)a->recv_source_row[r] * C, (size_t)C * sizeof(real));
}

/* The owners' rows (xr layout) -> back to the dispatchers, in their xe layout. */
static void return_to_sources(real *rows, const real *owner_rows, Acts *a, const MoeDims *d) {
    const int C = d->C;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < a->rows_in; r++)
        memcpy(a->stage + (size_t)a->recv_source_row[r] * C, owner_rows + (size_t)r * C, (size_t)C * sizeof(real));
    alltoall_rows(rows, a->send_rows, a->stage, a->recv_rows, d);
}

/* ------------------------------------------------------------------------------------------------
 * Phase 3: routed experts over contiguous row ranges. offset has E_local + 1 entries: local expert
 * el owns rows [offset[el], offset[el+1]) of xe / ye and of the saved pre_gate, pre_up, h.
 * ---------------------------------------------------------------------------------------------- */

static void experts_forward(real *ye, real *pre_gate, real *pre_up, real *h, const real *xe, const int *offset,
                            const Weights *w, int E_local, int C, int I) {
    for (int el = 0; el < E_local; el++) {
        const int r0 = offset[el], M = offset[el + 1] - r0;
        if (M == 0) continue;
        const real *wg = w->w_gate + (size_t)el * C * I, *wu = w->w_up + (size_t)el * C * I;
        const real *wd = w->w_down + (size_t)el * I * C;
        real *pg = pre_gate + (size_t)r0 * I, *pu = pre_up + (size_t)r0 * I, *hh = h + (size_t)r0 * I;
        OP(matmul_nn)(pg, xe + (size_t)r0 * C, wg, M, C, I, 0);
        OP(matmul_nn)(pu, xe + (size_t)r0 * C, wu, M, C, I, 0);
        OP(swiglu_forward)(hh, pg, pu, (long)M * I);
        OP(matmul_nn)(ye + (size_t)r0 * C, hh, wd, M, I, C, 0);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Phase 4: shared experts and the fixed-order combine
 * ---------------------------------------------------------------------------------------------- */

/* y = shared SwiGLU of width SI (overwrites y). */
static void shared_forward(real *y, Acts *a, const real *x, const Weights *w, int N, int C, int SI) {
    OP(matmul_nn)(a->s_gate, x, w->shared_gate, N, C, SI, 0);
    OP(matmul_nn)(a->s_up, x, w->shared_up, N, C, SI, 0);
    OP(swiglu_forward)(a->s_h, a->s_gate, a->s_up, (long)N * SI);
    OP(matmul_nn)(y, a->s_h, w->shared_down, N, SI, C, 0);
}

/* y[n] = sum_{j=0..k-1 in order} gate[n,j] * ye[slot_row[n*k+j]]  (+ y[n] if the shared output is
 * already there). The routed sum is accumulated in double and rounded once. */
static void combine_forward(real *y, const real *ye, const real *gates, const int *slot_row, int N, int k, int C,
                            int add_shared) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *yn = y + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int j = 0; j < k; j++) {
                const int slot = n * k + j;
                acc += (double)gates[slot] * (double)ye[(size_t)slot_row[slot] * C + c];
            }
            yn[c] = add_shared ? (real)acc + yn[c] : (real)acc;
        }
    }
}

void OP(moe_forward)(real *y, Acts *a, const real *x, const Weights *w, const float *expert_bias, const MoeDims *d,
                     int N) {
    check_dims(d, N, "moe_forward");
    if (N > a->N)
        mokc_die(MOKC_EXIT_RUNTIME, "allocate the MoE activations for the largest micro-batch",
                 "moe_forward: %d tokens but the activations hold %d", N, a->N);
    const int C = d->C, I = d->I, k = d->k, SI = d->n_shared * d->I;
    const int E_local = d->E / d->ep;
    route_forward(a, x, w, expert_bias, d, N);                                /* (1) */
    dispatch_plan(a, d, N);                                                   /* (2) */
    dispatch_gather(a->xe, x, a->row_slot, N * k, k, C);
    exchange_plan(a, d);
    send_to_owners(a->xr, a->xe, a, d);
    experts_forward(a->rows_out, a->pre_gate, a->pre_up, a->h, a->xr, a->recv_offset, w, E_local, C, I); /* (3) */
    return_to_sources(a->ye, a->rows_out, a, d);
    if (SI > 0) shared_forward(y, a, x, w, N, C, SI);                         /* (4) */
    combine_forward(y, a->ye, a->gates, a->slot_row, N, k, C, SI > 0);
}

/* ------------------------------------------------------------------------------------------------
 * Backward, phase 4': combine and shared experts
 * ---------------------------------------------------------------------------------------------- */

/* dye[slot_row[n,j]] = gate[n,j] * dy[n];  dgates[n,j] = <dy[n], ye[slot_row[n,j]]>. */
static void combine_backward(real *dye, double *dgates, const real *dy, const real *ye, const real *gates,
                             const int *slot_row, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *dyn = dy + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            const int slot = n * k + j;
            const size_t r = (size_t)slot_row[slot];
            const real g = gates[slot];
            double dot = 0;
            for (int c = 0; c < C; c++) {
                dye[r * C + c] = g * dyn[c];
                dot += (double)dyn[c] * (double)ye[r * C + c];
            }
            dgates[slot] = dot;
        }
    }
}

static void shared_backward(real *dx, const Weights *dw, const real *dy, const Acts *a, const real *x,
                            const Weights *w, int N, int C, int SI) {
    real *ds_h = mallocCheck((size_t)N * SI * sizeof(real));
    real *ds_gate = callocCheck((size_t)N * SI, sizeof(real));
    real *ds_up = callocCheck((size_t)N * SI, sizeof(real));
    OP(matmul_nt)(ds_h, dy, w->shared_down, N, C, SI, 0);
    OP(matmul_tn)(dw->shared_down, a->s_h, dy, N, SI, C, 1);
    OP(swiglu_backward)(ds_gate, ds_up, ds_h, a->s_gate, a->s_up, (long)N * SI);
    OP(matmul_tn)(dw->shared_gate, x, ds_gate, N, C, SI, 1);
    OP(matmul_tn)(dw->shared_up, x, ds_up, N, C, SI, 1);
    OP(matmul_nt)(dx, ds_gate, w->shared_gate, N, SI, C, 1);
    OP(matmul_nt)(dx, ds_up, w->shared_up, N, SI, C, 1);
    free(ds_h);
    free(ds_gate);
    free(ds_up);
}

/* ------------------------------------------------------------------------------------------------
 * Backward, phase 3': routed experts over the same row ranges as the forward. Writes dxe (rows),
 * adds the expert weight gradients (each expert's dW is one GEMM over its rows: fixed K order).
 * ---------------------------------------------------------------------------------------------- */

static void experts_backward(real *dxe, const Weights *dw, const real *dye, const real *xe, const real *pre_gate,
                             const real *pre_up, const real *h, const int *offset, const Weights *w, int E_local,
                             int C, int I) {
    const int rows = offset[E_local];
    real *dh = mallocCheck((size_t)rows * I * sizeof(real));
    real *dpg = callocCheck((size_t)rows * I, sizeof(real));
    real *dpu = callocCheck((size_t)rows * I, sizeof(real));
    for (int el = 0; el < E_local; el++) {
        const int r0 = offset[el], M = offset[el + 1] - r0;
        if (M == 0) continue;
        const size_t wo = (size_t)el * C * I;
        const real *xr = xe + (size_t)r0 * C, *dyr = dye + (size_t)r0 * C;
        real *dhr = dh + (size_t)r0 * I, *dpgr = dpg + (size_t)r0 * I, *dpur = dpu + (size_t)r0 * I;
        OP(matmul_nt)(dhr, dyr, w->w_down + wo, M, C, I, 0);
        OP(matmul_tn)(dw->w_down + wo, h + (size_t)r0 * I, dyr, M, I, C, 1);
        OP(swiglu_backward)(dpgr, dpur, dhr, pre_gate + (size_t)r0 * I, pre_up + (size_t)r0 * I, (long)M * I);
        OP(matmul_tn)(dw->w_gate + wo, xr, dpgr, M, C, I, 1);
        OP(matmul_tn)(dw->w_up + wo, xr, dpur, M, C, I, 1);
        OP(matmul_nt)(dxe + (size_t)r0 * C, dpgr, w->w_gate + wo, M, I, C, 0);
        OP(matmul_nt)(dxe + (size_t)r0 * C, dpur, w->w_up + wo, M, I, C, 1);
    }
    free(dh);
    free(dpg);
    free(dpu);
}

/* ------------------------------------------------------------------------------------------------
 * Backward, phase 2': scatter dxe back to tokens, dx[n] += sum_{j in order} dxe[slot_row[n,j]].
 * ---------------------------------------------------------------------------------------------- */

static void scatter_backward(real *dx, const real *dxe, const int *slot_row, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int j = 0; j < k; j++) acc += (double)dxe[(size_t)slot_row[n * k + j] * C + c];
            dx[(size_t)n * C + c] += (real)acc;
        }
    }
}

/* ------------------------------------------------------------------------------------------------
 * Backward, phase 1': gates and aux loss -> scores -> logits -> router weights and dx.
 * ---------------------------------------------------------------------------------------------- */

/* ds (one token's E scores, zeroed by the caller) += d(gates)/d(scores)^T dgates.
 * Without norm_topk g_j = c s_j. With it g_j = c s_j / S, S = sum_i s_i over the selected, so
 * dg_j/ds_i = c (delta_ij / S - s_j / S^2) and ds_i = c / S * (dg_i - sum_j dg_j s_j / S). */
static void gates_backward(double *ds, const double *dg, const int *topk, const real *s, const MoeDims *d) {
    const int k = d->k;
    if (!d->norm_topk) {
        for (int j = 0; j < k; j++) ds[topk[j]] += d->scaling * dg[j];
        return;
    }
    double S = 0, dot = 0;
    for (int j = 0; j < k; j++) S += (double)s[topk[j]];
    for (int j = 0; j < k; j++) dot += dg[j] * (double)s[topk[j]];
    dot /= S;
    for (int j = 0; j < k; j++) ds[topk[j]] += d->scaling / S * (dg[j] - dot);
}

/* ds += daux * d(aux)/d(scores) for one token. d(aux)/dp_{n,e} = E f_e / Ns with f_e held
 * constant. Data-parallel ranks average their gradients, so each rank carries its tokens' share
 * times the rank count: E f_e / N, f_e = stat_counts_e / (Ns k), Ns = N * ranks.
 * Softmax: p = s. Sigmoid: p = s / sum(s), so ds_i = (dp_i - sum_e dp_e p_e) / sum(s). */
static void aux_backward(double *ds, double daux, const long long *stat_counts, const real *s, const MoeDims *d,
                         int N) {
    const int E = d->E;
    const double Ns = (double)N * stats_size(d);
    const double base = daux * (double)E / ((double)N * Ns * (double)d->k); /* dp_e = base * counts_e */
    if (!d->sigmoid) {
        for (int e = 0; e < E; e++) ds[e] += base * (double)stat_counts[e];
        return;
    }
    double sum = aux_norm(s, E, 1), dot = 0;
    for (int e = 0; e < E; e++) dot += base * (double)stat_counts[e] * ((double)s[e] / sum);
    for (int e = 0; e < E; e++) ds[e] += (base * (double)stat_counts[e] - dot) / sum;
}

/* dlogits from dscores: softmax dl_i = s_i (ds_i - sum_e ds_e s_e); sigmoid dl_i = ds_i s_i (1 - s_i). */
static void scores_backward(real *dl, const double *ds, const real *s, int E, int sigmoid) {
    if (sigmoid) {
        for (int e = 0; e < E; e++) dl[e] = (real)(ds[e] * (double)s[e] * (1.0 - (double)s[e]));
        return;
    }
    double dot = 0;
    for (int e = 0; e < E; e++) dot += ds[e] * (double)s[e];
    for (int e = 0; e < E; e++) dl[e] = (real)((double)s[e] * (ds[e] - dot));
}

static void route_backward(real *dx, const Weights *dw, const double *dgates, double daux, const Acts *a,
                           const real *x, const Weights *w, const MoeDims *d, int N) {
    const int E = d->E, k = d->k;
    real *dlogits = mallocCheck((size_t)N * E * sizeof(real));
    double *ds_all = mallocCheck((size_t)N * E * sizeof(double));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *s = a->scores + (size_t)n * E;
        double *ds = ds_all + (size_t)n * E;
        for (int e = 0; e < E; e++) ds[e] = 0;
        gates_backward(ds, dgates + (size_t)n * k, a->topk + (size_t)n * k, s, d);
        if (daux != 0) aux_backward(ds, daux, a->stat_counts, s, d, N);
        scores_backward(dlogits + (size_t)n * E, ds, s, E, d->sigmoid);
    }
    OP(matmul_tn)(dw->router, x, dlogits, N, d->C, E, 1);
    OP(matmul_nt)(dx, dlogits, w->router, N, E, d->C, 1);
    free(dlogits);
    free(ds_all);
}

void OP(moe_backward)(real *dx, const Weights *dw, const real *dy, double daux, Acts *a, const real *x,
                      const Weights *w, const MoeDims *d, int N) {
    check_dims(d, N, "moe_backward");
    if (N > a->N)
        mokc_die(MOKC_EXIT_RUNTIME, "allocate the MoE activations for the largest micro-batch",
                 "moe_backward: %d tokens but the activations hold %d", N, a->N);
    if (N == 0) return;
    const int C = d->C, I = d->I, k = d->k, SI = d->n_shared * d->I;
    const int E_local = d->E / d->ep;
    const size_t rows = (size_t)N * k;
    real *dye = mallocCheck(rows * C * sizeof(real));
    real *dxe = mallocCheck(rows * C * sizeof(real));
    double *dgates = mallocCheck(rows * sizeof(double));
    combine_backward(dye, dgates, dy, a->ye, a->gates, a->slot_row, N, k, C);          /* (4') */
    if (SI > 0) shared_backward(dx, dw, dy, a, x, w, N, C, SI);
    real *dyr = mallocCheck((size_t)(a->rows_in > 0 ? a->rows_in : 1) * C * sizeof(real));
    send_to_owners(dyr, dye, a, d);
    experts_backward(a->rows_out, dw, dyr, a->xr, a->pre_gate, a->pre_up, a->h, a->recv_offset, w, E_local, C, I); /* (3') */
    return_to_sources(dxe, a->rows_out, a, d);
    free(dyr);
    scatter_backward(dx, dxe, a->slot_row, N, k, C);                                   /* (2') */
    route_backward(dx, dw, dgates, daux, a, x, w, d, N);                                /* (1') */
    free(dye);
    free(dxe);
    free(dgates);
}
