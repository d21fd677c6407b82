/*
 * The training loop: load and validate the spec, lay out the ranks, build the model, then for
 * each optimizer step run grad_accum micro-batches forward and backward, average gradients over
 * the data-parallel ranks, clip, step AdamW, update the expert biases, log, validate.
 */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "cpu/model_cpu.h"
#include "data.h"
#include "dist.h"
#include "model.h"
#include "optim.h"

typedef struct {
    MokcConfig cfg;
    Dist dist;
    ModelDims dims;
    ParamTable table;
    float *params, *grads, *adam_m, *adam_v;
    float *expert_bias;         /* (L, E): selection bias, not a parameter */
    int64_t *load;              /* (L, E): tokens routed per expert in this step, all ranks */
    CpuModel model;
    TokenSet train_set, val_set;
    DataLoader train_loader, val_loader;
    int *inputs, *targets;
    int step;                   /* optimizer steps done */
    int64_t tokens_seen;
    FILE *metrics;
    const char *backend_note;   /* why this backend was chosen */
} Trainer;

/* ---------- setup ---------- */

static void parse_args(int argc, char **argv, const char *help, const char **spec, const char ***sets, int *n_sets) {
    *spec = NULL;
    *sets = callocCheck((size_t)argc, sizeof(char *));
    *n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(help, stdout);
            exit(0);
        } else if (strcmp(a, "--set") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mokc: error: --set needs key.path=value\n\n%s", help);
                exit(MOKC_EXIT_USAGE);
            }
            (*sets)[(*n_sets)++] = argv[++i];
        } else if (strncmp(a, "--set=", 6) == 0) {
            (*sets)[(*n_sets)++] = a + 6;
        } else if (a[0] == '-') {
            fprintf(stderr, "mokc: error: unknown option '%s' for `mokc train`\n\n%s", a, help);
            exit(MOKC_EXIT_USAGE);
        } else if (*spec) {
            fprintf(stderr, "mokc: error: more than one spec given ('%s' and '%s')\n\n%s", *spec, a, help);
            exit(MOKC_EXIT_USAGE);
        } else {
            *spec = a;
        }
    }
    if (!*spec) {
        fprintf(stderr, "mokc: error: no spec given\n\n%s", help);
        exit(MOKC_EXIT_USAGE);
    }
}

/* Errors every rank detects the same way: rank 0 prints, all exit with the same code. */
static void fail_all(Trainer *tr, int code, const char *hint, const char *msg) {
    if (tr->dist.rank == 0) {
        fprintf(stderr, "mokc: error: %s\n", msg);
        if (hint) fprintf(stderr, "---> HINT: %s\n", hint);
    }
    dist_exit(&tr->dist, code);
}

static void choose_backend(Trainer *tr) {
    enum backend_kind b = tr->cfg.backend;
#ifdef MOKC_CUDA
    const char *why = "the CUDA training backend is not built yet (issue 6)";
#else
    const char *why = "this binary was built without CUDA (NO_CUDA=1 or no nvcc)";
#endif
    if (b == BACKEND_CUDA)
        fail_all(tr, MOKC_EXIT_USAGE, "set \"backend\": \"cpu\" or \"auto\"", why);
    tr->backend_note = b == BACKEND_AUTO ? why : "as the spec asks";
}

static void open_data(Trainer *tr) {
    const MokcConfig *c = &tr->cfg;
    char err[2048];
    if (!c->data.train[0])
        fail_all(tr, MOKC_EXIT_USAGE, "make one with `mokc prepare --text FILE --out DATA.h5` (or `make data`)",
                 "data.train: `mokc train` needs a token file; the spec sets none");
    if (data_open(&tr->train_set, c->data.train, c->model.vocab_size, err, sizeof err) ||
        loader_init(&tr->train_loader, &tr->train_set, c->train.seq_len, c->train.micro_batch,
                    (uint64_t)c->train.seed, tr->dist.rank, tr->dist.world, err, sizeof err))
        mokc_die(MOKC_EXIT_USAGE, NULL, "data.train: %s", err);
    if (c->data.val[0] &&
        (data_open(&tr->val_set, c->data.val, c->model.vocab_size, err, sizeof err) ||
         loader_init(&tr->val_loader, &tr->val_set, c->train.seq_len, c->train.micro_batch, DATA_VAL_SEED,
                     tr->dist.rank, tr->dist.world, err, sizeof err)))
        mokc_die(MOKC_EXIT_USAGE, NULL, "data.val: %s", err);
}

static void print_model_summary(const Trainer *tr) {
    if (tr->dist.rank != 0) return;
    printf("backend: cpu (%s)\n", tr->backend_note);
    const ModelDims *d = &tr->dims;
    double mib = (double)tr->table.total * sizeof(float) / (1 << 20);
    printf("model: %lld parameters (%lld active per token), %.1f MFLOP per token (fwd+bwd)\n",
           (long long)model_param_count(d), (long long)model_active_param_count(d),
           model_flops_per_token(d, tr->cfg.train.seq_len) / 1e6);
    printf("memory per rank: parameters %.1f MiB, gradients %.1f MiB, AdamW moments %.1f MiB\n", mib, mib, 2 * mib);
    printf("tokens: %lld train, %lld val; global batch %d sequences x %d tokens\n",
           (long long)tr->train_set.num_tokens, (long long)tr->val_set.num_tokens,
           tr->dist.world * tr->cfg.train.micro_batch * tr->cfg.train.grad_accum, tr->cfg.train.seq_len);
}

static void setup(Trainer *tr, int argc, char **argv, const char *help) {
    const char *spec, **sets;
    int n_sets;
    parse_args(argc, argv, help, &spec, &sets, &n_sets);
    /* Every rank reads the same spec and finds the same problems: report them before MPI starts,
     * once, from the rank the launcher calls 0. */
    ConfigErrors errors;
    if (!config_load(spec, sets, n_sets, &tr->cfg, &errors)) {
        if (dist_launcher_rank() == 0) config_errors_print(&errors, spec, stderr);
        config_errors_free(&errors);
        free(sets);
        exit(MOKC_EXIT_USAGE);
    }
    free(sets);
    dist_init(&tr->dist, &argc, &argv);
    char msg[512];
    if (!dist_make_groups(&tr->dist, tr->cfg.parallel.ep, msg, sizeof msg))
        fail_all(tr, MOKC_EXIT_USAGE, "change parallel.ep or the number of ranks (mpirun -np)", msg);
    choose_backend(tr);
    open_data(tr);
    if (tr->dist.rank == 0) config_print_table(&tr->cfg, stdout);
    dist_print_layout(&tr->dist, tr->cfg.moe.num_experts);

    const MokcConfig *c = &tr->cfg;
    model_dims_from_config(&tr->dims, c, tr->dist.ep, tr->dist.ep_rank);
    param_table_build(&tr->table, &tr->dims);
    size_t n = tr->table.total;
    tr->params = mallocCheck(n * sizeof(float));
    tr->grads = callocCheck(n, sizeof(float));
    tr->adam_m = callocCheck(n, sizeof(float));
    tr->adam_v = callocCheck(n, sizeof(float));
    size_t nbias = (size_t)c->model.num_layers * (size_t)(c->moe.num_experts > 0 ? c->moe.num_experts : 1);
    tr->expert_bias = callocCheck(nbias, sizeof(float));
    tr->load = callocCheck(nbias, sizeof(int64_t));
    model_init_params(tr->params, &tr->table, &tr->dims, (uint64_t)c->train.seed);
    MoeComms comms = {.ep = tr->dist.ep_comm, .stats = MPI_COMM_WORLD};
    cpu_model_init(&tr->model, &tr->dims, &tr->table, c->train.micro_batch, c->train.seq_len, &comms);
    size_t N = (size_t)c->train.micro_batch * c->train.seq_len;
    tr->inputs = mallocCheck(N * sizeof(int));
    tr->targets = mallocCheck(N * sizeof(int));
    print_model_summary(tr);
    if (c->log.metrics_path[0] && tr->dist.rank == 0) {
        if (!mokc_make_parent_dirs(c->log.metrics_path))
            mokc_die(MOKC_EXIT_USAGE, "choose a log.metrics_path in a writable directory",
                     "log.metrics_path: cannot create the directory of '%s'", c->log.metrics_path);
        tr->metrics = fopenCheck(c->log.metrics_path, "w");
    }
}

static void teardown(Trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    cpu_model_free(&tr->model);
    param_table_free(&tr->table);
    free(tr->params), free(tr->grads), free(tr->adam_m), free(tr->adam_v);
    free(tr->expert_bias), free(tr->load), free(tr->inputs), free(tr->targets);
    loader_free(&tr->train_loader);
    data_close(&tr->train_set);
    if (tr->cfg.data.val[0]) {
        loader_free(&tr->val_loader);
        data_close(&tr->val_set);
    }
}

/* ---------- one step ---------- */

/* The gradient of the mean loss over all ranks. A replicated tensor's gradient on each rank comes
 * from its own tokens: sum over the world, divide by the world. An expert's gradient on its owner
 * already sums the tokens of the whole EP group (they were sent to it): sum over the DP group
 * (the other owners of the same experts), and divide by the world too. */
static void average_gradients(Trainer *tr) {
    const Dist *d = &tr->dist;
    if (d->world == 1) return;
    for (int i = 0; i < tr->table.count; i++) {
        const ParamInfo *p = &tr->table.items[i];
        MPI_Comm comm = p->kind == PARAM_EXPERT ? d->dp_comm : MPI_COMM_WORLD;
        float *g = tr->grads + p->offset;
        if (p->kind != PARAM_EXPERT || d->dp > 1) MPI_Allreduce(MPI_IN_PLACE, g, (int)p->numel, MPI_FLOAT, MPI_SUM, comm);
        for (size_t j = 0; j < p->numel; j++) g[j] /= (float)d->world;
    }
}

/* Global gradient norm: replicated tensors are identical on every rank, expert tensors are
 * summed over the EP group (each rank holds different experts). */
static double global_grad_norm(const Trainer *tr) {
    double rep = 0, exp = 0;
    for (int i = 0; i < tr->table.count; i++) {
        const ParamInfo *p = &tr->table.items[i];
        double s = sum_of_squares(tr->grads + p->offset, p->numel);
        if (p->kind == PARAM_EXPERT) exp += s;
        else rep += s;
    }
    if (tr->dist.ep > 1) MPI_Allreduce(MPI_IN_PLACE, &exp, 1, MPI_DOUBLE, MPI_SUM, tr->dist.ep_comm);
    return sqrt(rep + exp);
}

/* Aux-loss-free balancing: raise the bias of under-loaded experts, lower the over-loaded. */
static void update_expert_bias(Trainer *tr) {
    const ModelDims *d = &tr->dims;
    double rate = tr->cfg.moe.expert_bias_update_rate;
    if (rate == 0 || d->E == 0) return;
    for (int l = d->first_dense; l < d->L; l++) {
        const int64_t *load = tr->load + (size_t)l * d->E;
        double mean = 0;
        for (int e = 0; e < d->E; e++) mean += (double)load[e];
        mean /= d->E;
        for (int e = 0; e < d->E; e++) {
            double diff = mean - (double)load[e];
            tr->expert_bias[(size_t)l * d->E + e] += (float)(rate * (diff > 0 ? 1 : diff < 0 ? -1 : 0));
        }
    }
}

/* max over MoE layers of (max expert load / mean expert load) in this step; 0 without experts. */
static double load_imbalance(const Trainer *tr) {
    const ModelDims *d = &tr->dims;
    double worst = 0;
    for (int l = d->first_dense; d->E > 0 && l < d->L; l++) {
        const int64_t *load = tr->load + (size_t)l * d->E;
        int64_t max = 0, sum = 0;
        for (int e = 0; e < d->E; e++) {
            sum += load[e];
            if (load[e] > max) max = load[e];
        }
        double ratio = sum > 0 ? (double)max * d->E / (double)sum : 0;
        if (ratio > worst) worst = ratio;
    }
    return worst;
}

typedef struct {
    double loss, aux, norm, lr, seconds, tokens_per_s, imbalance;
} StepStats;

static StepStats train_step(Trainer *tr) {
    const MokcConfig *c = &tr->cfg;
    const ModelDims *d = &tr->dims;
    StepStats s = {0};
    double t0 = mokc_now_seconds();
    memset(tr->grads, 0, tr->table.total * sizeof(float));
    memset(tr->load, 0, sizeof(int64_t) * (size_t)d->L * (size_t)(d->E > 0 ? d->E : 1));
    double loss_sum = 0, aux_sum = 0;
    for (int micro = 0; micro < c->train.grad_accum; micro++) {
        loader_next_batch(&tr->train_loader, tr->inputs, tr->targets);
        loss_sum += cpu_model_forward(&tr->model, tr->params, tr->expert_bias, tr->inputs, tr->targets);
        aux_sum += tr->model.aux_loss;
        for (int l = d->first_dense; d->E > 0 && l < d->L; l++)
            for (int e = 0; e < d->E; e++) tr->load[(size_t)l * d->E + e] += tr->model.moe[l].counts[e];
        cpu_model_backward(&tr->model, tr->params, tr->grads, 1.0 / c->train.grad_accum);
    }
    double sums[2] = {loss_sum, aux_sum};
    if (tr->dist.world > 1) {
        MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, tr->load, d->L * (d->E > 0 ? d->E : 1), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    }
    average_gradients(tr);
    s.loss = sums[0] / (c->train.grad_accum * tr->dist.world);
    s.aux = sums[1] / (c->train.grad_accum * tr->dist.world);
    s.norm = global_grad_norm(tr);
    double scale = c->train.grad_clip > 0 && s.norm > c->train.grad_clip ? c->train.grad_clip / s.norm : 1.0;
    s.lr = lr_at_step(&c->train, tr->step);
    adamw_step(tr->params, tr->grads, tr->adam_m, tr->adam_v, &tr->table, &c->train, s.lr, scale, tr->step + 1);
    update_expert_bias(tr);
    s.imbalance = load_imbalance(tr);
    tr->step++;
    int64_t tokens = (int64_t)c->train.grad_accum * c->train.micro_batch * c->train.seq_len * tr->dist.world;
    tr->tokens_seen += tokens;
    s.seconds = mokc_now_seconds() - t0;
    s.tokens_per_s = (double)tokens / s.seconds;
    return s;
}

/* Mean validation loss over data.val_batches micro-batches from the start of the val set. */
static double validate(Trainer *tr) {
    loader_reset(&tr->val_loader);
    double sum = 0;
    for (int b = 0; b < tr->cfg.data.val_batches; b++) {
        loader_next_batch(&tr->val_loader, tr->inputs, tr->targets);
        sum += cpu_model_forward(&tr->model, tr->params, tr->expert_bias, tr->inputs, tr->targets);
    }
    if (tr->dist.world > 1) MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / (tr->cfg.data.val_batches * tr->dist.world);
}

static void log_step(Trainer *tr, const StepStats *s, double val_loss) {
    const MokcConfig *c = &tr->cfg;
    if (tr->dist.rank != 0) return;
    bool last = tr->step == c->train.steps;
    if (tr->step % c->log.every == 0 || tr->step == 1 || last) {
        printf("step %5d/%d | loss %.4f | aux %.4f | norm %.3f | lr %.2e | %6.0f ms | %7.0f tok/s | load max/mean %.2f",
               tr->step, c->train.steps, s->loss, s->aux, s->norm, s->lr, s->seconds * 1e3, s->tokens_per_s,
               s->imbalance);
        if (!isnan(val_loss)) printf(" | val %.4f", val_loss);
        printf("\n");
        fflush(stdout);
    }
    if (tr->metrics) {
        fprintf(tr->metrics,
                "{\"step\": %d, \"loss\": %.17g, \"aux_loss\": %.17g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"tokens_seen\": %lld, \"load_max_over_mean\": %.6g",
                tr->step, s->loss, s->aux, s->norm, s->lr, s->seconds * 1e3, s->tokens_per_s,
                (long long)tr->tokens_seen, s->imbalance);
        if (!isnan(val_loss)) fprintf(tr->metrics, ", \"val_loss\": %.17g", val_loss);
        fprintf(tr->metrics, "}\n");
        fflush(tr->metrics);
    }
}

int cmd_train(int argc, char **argv, const char *help) {
    Trainer tr;
    memset(&tr, 0, sizeof tr);
    setup(&tr, argc, argv, help);
    const MokcConfig *c = &tr.cfg;
    double last_loss = NAN, last_val = NAN;
    while (tr.step < c->train.steps) {
        StepStats s = train_step(&tr);
        double val = NAN;
        bool val_due = c->data.val_every > 0 && tr.step % c->data.val_every == 0;
        if (c->data.val[0] && (val_due || tr.step == c->train.steps)) val = last_val = validate(&tr);
        log_step(&tr, &s, val);
        last_loss = s.loss;
        if (!isfinite(s.loss)) {
            if (tr.dist.rank == 0)
                fprintf(stderr, "mokc: error: the loss is %g at step %d; lower train.lr or set train.grad_clip\n",
                        s.loss, tr.step);
            teardown(&tr);
            dist_exit(&tr.dist, MOKC_EXIT_RUNTIME);
        }
    }
    if (tr.dist.rank == 0) {
        printf("final: train loss %.4f", last_loss);
        if (!isnan(last_val)) printf(", val loss %.4f", last_val);
        printf(" (nats/token) after %d steps, %lld tokens\n", tr.step, (long long)tr.tokens_seen);
    }
    teardown(&tr);
    dist_finalize(&tr.dist);
    return 0;
}
