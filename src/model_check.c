/*
 * `mokc check`: one micro-batch of the spec's model on the GPU and on the CPU reference, from the same weights and
 * tokens, under the spec's parallel layout. The GPU runs first, twice: the second pass at twice the loss must give
 * exactly twice the gradients (an element neither zeroed nor written would keep the first pass's value; a
 * nondeterministic kernel would change bits). The CPU then runs with the GPU's expert choices, each of which must be
 * its own or a near-tie of it (CHECK_ROUTING_GAP); then the loss, the aux loss and every gradient tensor compared.
 */
#include "model_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "cpu/model_cpu.h"
#include "cpu/threads.h"
#include "dist.h"
#include "optim.h"
#ifdef MOKC_CUDA
#include "gpu/comms.h"
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#endif

double rel_error_f(const float *a, const float *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

long count_nan(const float *x, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += isnan(x[i]) != 0;
    return c;
}

void check_weights(float *params, const ParamTable *t, float scale) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *info = &t->items[i];
        if (info->ndim == 1) continue;
        const int fp32_on_gpu = strstr(info->name, "router") != NULL;
        float *w = params + info->offset;
        for (size_t j = 0; j < info->numel; j++) w[j] = fp32_on_gpu ? w[j] * scale : bf16_round(w[j] * scale);
    }
}

void check_grads(const ParamTable *t, const float *got, const float *twice, const float *want, GradCheck *out) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *info = &t->items[i];
        const float *g = got + info->offset;
        GradCheck *c = &out[i];
        c->rel_error = rel_error_f(g, want + info->offset, (long)info->numel);
        c->nan = count_nan(g, (long)info->numel);
        c->unscaled = 0;
        for (size_t j = 0; twice && j < info->numel; j++) {
            const float doubled = 2.0f * g[j];
            c->unscaled += memcmp(&doubled, &twice[info->offset + j], sizeof(float)) != 0;
        }
    }
}

int check_verdict(const CheckFindings *f) {
    int bad = 0;
    for (int i = 0; i < f->count; i++) bad |= grad_check_ok(&f->grads[i]) ? 0 : CHECK_BAD_GRADS;
    if (!(f->loss_error < CHECK_LOSS_TOL)) bad |= CHECK_BAD_LOSS;
    if (!(f->aux_error < CHECK_LOSS_TOL)) bad |= CHECK_BAD_AUX;
    if (!f->repeated) bad |= CHECK_NOT_REPEATED;
    if (!(f->routing_gap < CHECK_ROUTING_GAP)) bad |= CHECK_BAD_ROUTING;
    return bad;
}

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x) /* the help text's tolerances from the constants themselves */
static const char *check_help =
    "usage: mokc check SPEC.json [--set key.path=value ...] [--layers N] [--tokens T]\n"
    "\n"
    "Runs the model SPEC.json describes on the GPU and on the CPU reference, from the same weights and tokens,\n"
    "and compares them: the loss and the aux loss (relative error < " STRINGIFY(CHECK_LOSS_TOL) "), every gradient\n"
    "tensor (< " STRINGIFY(CHECK_GRAD_TOL) ", no NaN). A second GPU pass at twice the loss must give exactly twice\n"
    "the gradients: a value left from the first pass shows, and so does any bit that changes. The MoE layer\n"
    "checked is the spec's moe_impl (--set moe_impl=unfused for the other). Under mpirun the spec's parallel\n"
    "layout runs: each rank checks its own tensors, rank 0 prints the worst.\n"
    "So that the CPU keeps up, the model is cut to its first N layers (--layers; default: the dense layers and\n"
    "the first MoE layer, or one layer without experts) and one sequence of T tokens a rank (--tokens; default:\n"
    "train.seq_len, at most 256). The weights are the spec's initialisation from train.seed, the matrices\n"
    "rounded to bf16 values, so both backends multiply the same values (the routers stay fp32, as the GPU\n"
    "keeps them). Where two experts' scores nearly tie, the GPU (bf16 router inputs) may choose the other: the\n"
    "CPU follows its choices, each of which must fall short of the CPU's own by < " STRINGIFY(CHECK_ROUTING_GAP)
    " of the score.\n"
    "Exit status: 0 when the backends agree, 1 when they do not, 2 for bad input or no GPU.\n";

/* A count flag's value: a whole number in [1, max] (the spec's key max_key), or a usage error naming the flag (printed
 * where `say`). */
static int count_arg(const char *flag, const char *text, long max, const char *max_key, int say, long *out) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == 0 || *end != 0 || v < 1 || v > max) {
        if (say)
            fprintf(stderr, "mokc: error: %s %s: give a whole number from 1 to %ld (the spec's %s)\n\n%s", flag, text,
                    max, max_key, check_help);
        return 0;
    }
    *out = v;
    return 1;
}

typedef struct {
    const char *spec;
    const char **sets;
    int n_sets;
    const char *layers, *tokens; /* as given; NULL: the defaults */
} CheckArgs;

/* Returns -1, or the exit code of --help or a usage error. */
static int parse_check_args(int argc, char **argv, CheckArgs *a) {
    memset(a, 0, sizeof *a);
    a->sets = callocCheck((size_t)argc, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char **value = strcmp(arg, "--layers") == 0 ? &a->layers : strcmp(arg, "--tokens") == 0 ? &a->tokens
                             : strcmp(arg, "--set") == 0 ? &a->sets[a->n_sets] : NULL;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(check_help, stdout);
            return 0;
        } else if (value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mokc: error: %s needs a value\n\n%s", arg, check_help);
                return MOKC_EXIT_USAGE;
            }
            *value = argv[++i];
            a->n_sets += value == &a->sets[a->n_sets];
        } else if (strncmp(arg, "--set=", 6) == 0) {
            a->sets[a->n_sets++] = arg + 6;
        } else if (arg[0] == '-') {
            fprintf(stderr, "mokc: error: unknown option '%s' for `mokc check`\n\n%s", arg, check_help);
            return MOKC_EXIT_USAGE;
        } else if (a->spec) {
            fprintf(stderr, "mokc: error: more than one spec given ('%s' and '%s')\n\n%s", a->spec, arg, check_help);
            return MOKC_EXIT_USAGE;
        } else {
            a->spec = arg;
        }
    }
    if (!a->spec) {
        fprintf(stderr, "mokc: error: no spec given\n\n%s", check_help);
        return MOKC_EXIT_USAGE;
    }
    return -1;
}

/* The spec loaded and cut to the layers and tokens checked (*tokens). Returns -1, or the exit code of a bad spec or
 * flag (reported by the launcher's rank 0 alone, before MPI starts: dist_pre_init_exit). */
static int load_cut_spec(const CheckArgs *a, MokcConfig *cfg, int *tokens) {
    ConfigErrors errors;
    if (!config_load(a->spec, a->sets, a->n_sets, cfg, &errors)) {
        if (dist_launcher_rank() == 0) config_errors_print(&errors, a->spec, stderr);
        config_errors_free(&errors);
        return dist_pre_init_exit(MOKC_EXIT_USAGE);
    }
    ModelConfig *m = &cfg->model;
    /* every kind of layer once: the dense ones before the first MoE layer, and that one */
    long layers = cfg->moe.num_experts == 0 ? 1
                  : m->first_k_dense_replace < m->num_layers ? m->first_k_dense_replace + 1 : m->num_layers;
    long T = cfg->train.seq_len < 256 ? cfg->train.seq_len : 256;
    const int say = dist_launcher_rank() == 0; /* every rank parses alike */
    if ((a->layers && !count_arg("--layers", a->layers, m->num_layers, "model.num_layers", say, &layers)) ||
        (a->tokens && !count_arg("--tokens", a->tokens, m->max_seq_len, "model.max_seq_len", say, &T)))
        return dist_pre_init_exit(MOKC_EXIT_USAGE);
    m->num_layers = (int)layers;
    if (m->first_k_dense_replace > m->num_layers) m->first_k_dense_replace = m->num_layers;
    *tokens = (int)T;
    return -1;
}

#ifdef MOKC_CUDA
/* Random token ids of this rank's micro-batch (its own, as in training). */
static void random_tokens(int *ids, int n, int V, uint64_t seed, int rank) {
    uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1));
    for (int i = 0; i < n; i++) ids[i] = (int)(mokc_splitmix64(&state) % (uint64_t)V);
}

typedef struct {
    double loss, aux;
} Losses;

/* The CPU's view of the GPU's expert choices over the MoE layers: how many it would not have made, the largest
 * shortfall of their scores. */
typedef struct {
    long long differ, choices;
    double gap;
} Routing;

/* NaN as infinity: MPI_MAX may drop a NaN, and an error that is NaN is as bad as errors get. */
static double not_nan(double x) { return isnan(x) ? INFINITY : x; }
static double rel_diff(double got, double want) { return not_nan(fabs(got - want) / (want != 0 ? fabs(want) : 1.0)); }

/* Rank 0's report of the worst over the ranks; returns 1 when everything agrees. */
static int report(const Dist *dist, const ParamTable *t, GradCheck *c, Losses gpu, Losses cpu, int repeated,
                  Routing routing) {
    double losses[2] = {rel_diff(gpu.loss, cpu.loss), rel_diff(gpu.aux, cpu.aux)};
    long long routed[2] = {routing.differ, routing.choices};
    routing.gap = not_nan(routing.gap);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, routed, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &routing.gap, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    double *errors = mallocCheck(sizeof(double) * (size_t)t->count);
    int64_t *counts = mallocCheck(sizeof(int64_t) * 2 * (size_t)t->count);
    for (int i = 0; i < t->count; i++) {
        errors[i] = not_nan(c[i].rel_error);
        counts[2 * i] = c[i].nan, counts[2 * i + 1] = c[i].unscaled;
    }
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, losses, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, errors, t->count, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, counts, 2 * t->count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &repeated, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    int bad_tensors = 0;
    for (int i = 0; i < t->count; i++) {
        c[i] = (GradCheck){errors[i], counts[2 * i], counts[2 * i + 1]};
        bad_tensors += !grad_check_ok(&c[i]);
    }
    const CheckFindings found = {c, t->count, losses[0], losses[1], repeated, routing.gap};
    const int bad = check_verdict(&found);
    if (dist->rank == 0) {
        printf("%-36s %12s %11s %6s %10s\n", "gradient", "elements", "rel. error", "NaN", "not 2x");
        for (int i = 0; i < t->count; i++)
            printf("%-36s %12zu %11.3g %6lld %10lld%s\n", t->items[i].name, t->items[i].numel, c[i].rel_error,
                   (long long)c[i].nan, (long long)c[i].unscaled, grad_check_ok(&c[i]) ? "" : "   FAIL");
        printf("loss: gpu %.6f, cpu %.6f (rank 0), worst relative error %.3g%s\n", gpu.loss, cpu.loss, losses[0],
               bad & CHECK_BAD_LOSS ? "   FAIL" : "");
        printf("aux loss: gpu %.6g, cpu %.6g (rank 0), worst relative error %.3g%s\n", gpu.aux, cpu.aux, losses[1],
               bad & CHECK_BAD_AUX ? "   FAIL" : "");
        printf("expert choices: the GPU's %lld, of which %lld not the CPU's own, short of its k-th by %.3g at most%s\n",
               routed[1], routed[0], routing.gap, bad & CHECK_BAD_ROUTING ? "   FAIL" : "");
        printf("second GPU pass at twice the loss: %s\n", bad & CHECK_NOT_REPEATED
                                                            ? "the loss changed between the passes   FAIL"
                                                            : "the same loss, and exactly twice every gradient");
        if (bad)
            printf("check FAILED: %d of %d gradient tensors out of tolerance (%g), NaN or not exactly doubled"
                   "%s%s%s%s\n", bad_tensors, t->count, CHECK_GRAD_TOL,
                   bad & CHECK_BAD_LOSS ? "; the loss differs" : "",
                   bad & CHECK_BAD_AUX ? "; the aux loss differs" : "",
                   bad & CHECK_NOT_REPEATED ? "; the GPU's forward did not repeat itself" : "",
                   bad & CHECK_BAD_ROUTING ? "; the GPU chose experts far from the CPU's own choice" : "");
        else {
            int worst = 0;
            for (int i = 1; i < t->count; i++) worst = c[i].rel_error > c[worst].rel_error ? i : worst;
            printf("check passed: the loss, the aux loss and %d gradient tensors agree with the CPU reference (the "
                   "largest gradient error %.3g, %s)\n", t->count, c[worst].rel_error, t->items[worst].name);
        }
    }
    free(errors), free(counts);
    return !bad;
}

static int run_check(const CheckArgs *a, MokcConfig *cfg, int T, int argc, char **argv) {
    Dist dist;
    dist_init(&dist, &argc, &argv);
    char msg[512];
    if (!dist_make_groups(&dist, cfg->parallel.ep, msg, sizeof msg))
        dist_fail_all(&dist, MOKC_EXIT_USAGE, "change parallel.ep or the number of ranks (mpirun -np)", msg);
    snprintf(msg, sizeof msg, "no GPU visible to rank %d: `mokc check` compares the GPU backend with the CPU reference",
             dist.rank);
    if (dist_agree(&dist, gpu_device_count() == 0, msg, sizeof msg)) /* every rank stops, not only those without */
        dist_fail_all(&dist, MOKC_EXIT_USAGE, "run it on a machine with an NVIDIA GPU (nvidia-smi lists them)", msg);
    const int device = gpu_take_device(&dist, NULL);
    char gpu_name[256];
    gpu_describe(device, gpu_name, sizeof gpu_name);
    GpuComms comms;
    gpu_comms_init(&comms, &dist);

    ModelDims d;
    model_dims_from_config(&d, cfg, dist.ep, dist.ep_rank);
    ParamTable t;
    param_table_build(&t, &d);
    const uint64_t seed = (uint64_t)cfg->train.seed;
    float *params = mallocCheck(t.total * sizeof(float));
    model_init_params(params, &t, &d, seed);
    check_weights(params, &t, 1.0f);
    float *bias = callocCheck((size_t)d.L * (size_t)(d.E > 0 ? d.E : 1), sizeof(float));
    int *inputs = mallocCheck(sizeof(int) * (size_t)T), *targets = mallocCheck(sizeof(int) * (size_t)T);
    random_tokens(inputs, T, d.V, seed, dist.rank);
    random_tokens(targets, T, d.V, ~seed, dist.rank);
    if (dist.rank == 0)
        printf("mokc check: %s cut to %d of its layers and 1 x %d tokens a rank, %d rank%s (ep %d), on %s\n", a->spec,
               d.L, T, dist.world, dist.world > 1 ? "s" : "", dist.ep, gpu_name);
    CpuThreads threads;
    cpu_threads_survey(&dist, &threads);
    if (dist.rank == 0 && threads.note[0]) mokc_warn("%s", threads.note);

    double start = mokc_now_seconds();
    GpuModel *gm = gpu_model_create(&d, &t, &cfg->train, &dist, &comms, 1, T, cfg->moe_impl);
    gpu_model_upload_state(gm, params, NULL, NULL);
    gpu_model_set_expert_bias(gm, bias);
    float *got[2];
    Losses gpu[2];
    const size_t choices = (size_t)T * (size_t)d.k;
    int *topk = mallocCheck(sizeof(int) * choices * (size_t)d.L); /* the GPU's choices, by layer */
    for (int pass = 0; pass < 2; pass++) {
        gpu_model_zero_grads(gm);
        gpu[pass].loss = gpu_model_forward_backward(gm, inputs, targets, pass ? 2.0 : 1.0, 1, &gpu[pass].aux, NULL);
        gpu_model_grad_norm(gm); /* waits for the all-reduce */
        got[pass] = mallocCheck(t.total * sizeof(float));
        gpu_model_download_grads(gm, got[pass]);
    }
    for (int l = 0; l < d.L; l++)
        if (model_layer_is_moe(&d, l)) gpu_model_download_topk(gm, l, topk + choices * (size_t)l);
    const double gpu_s = mokc_now_seconds() - start;
    if (dist.rank == 0) {
        const char *impl = !model_layer_is_moe(&d, d.L - 1)           ? "none (no MoE layer)"
                           : gpu_model_moe_impl(gm) == MOE_IMPL_MOK ? "mok (the megakernel)"
                                                                     : "unfused";
        printf("MoE layers: %s%s%s; the GPU's two passes took %.1f s", impl, *gpu_model_moe_why(gm) ? ": " : "",
               gpu_model_moe_why(gm), gpu_s);
    }
    gpu_model_destroy(gm);

    start = mokc_now_seconds();
    CpuModel cm;
    MoeComms moe_comms = {.ep = dist.ep_comm, .stats = MPI_COMM_WORLD};
    cpu_model_init(&cm, &d, &t, 1, T, &moe_comms);
    for (int l = 0; l < d.L; l++)
        if (model_layer_is_moe(&d, l)) cm.moe[l].forced_topk = topk + choices * (size_t)l;
    float *want = callocCheck(t.total, sizeof(float));
    Losses cpu = {.loss = cpu_model_forward(&cm, params, bias, inputs, targets)};
    cpu.aux = cm.aux_loss;
    Routing routing = {0};
    for (int l = 0; l < d.L; l++)
        if (model_layer_is_moe(&d, l)) {
            routing.differ += cm.moe[l].forced_differ, routing.choices += (long long)choices;
            routing.gap = cm.moe[l].forced_gap > routing.gap ? cm.moe[l].forced_gap : routing.gap;
        }
    cpu_model_backward(&cm, params, want, 1.0);
    dist_average_grads(&dist, &t, want);
    cpu_model_free(&cm);
    char described[64];
    cpu_threads_describe(&threads, described, sizeof described);
    if (dist.rank == 0) printf(", the CPU reference %.1f s (%s)\n", mokc_now_seconds() - start, described);

    GradCheck *checks = mallocCheck(sizeof(GradCheck) * (size_t)t.count);
    check_grads(&t, got[0], got[1], want, checks);
    const int repeated = memcmp(&gpu[0].loss, &gpu[1].loss, sizeof(double)) == 0;
    const int agree = report(&dist, &t, checks, gpu[0], cpu, repeated, routing);
    free(checks), free(got[0]), free(got[1]), free(want), free(topk);
    free(inputs), free(targets), free(bias), free(params);
    param_table_free(&t);
    gpu_comms_destroy(&comms);
    fflush(stdout);
    dist_finalize(&dist);
    return agree ? 0 : MOKC_EXIT_RUNTIME;
}
#endif

int cmd_check(int argc, char **argv) {
    CheckArgs a;
    int rc = parse_check_args(argc, argv, &a);
    MokcConfig cfg;
    int T = 0;
    if (rc < 0) rc = load_cut_spec(&a, &cfg, &T);
#ifdef MOKC_CUDA
    if (rc < 0) rc = run_check(&a, &cfg, T, argc, argv);
#else
    if (rc < 0) {
        fprintf(stderr, "mokc: error: `mokc check` compares the GPU backend with the CPU reference, and this binary "
                "was built without the CUDA backend (NO_CUDA=1, or no nvcc)\n---> HINT: build with nvcc and NCCL "
                "present (make), then run it on a machine with an NVIDIA GPU\n");
        rc = MOKC_EXIT_USAGE;
    }
#endif
    free(a.sets);
    return rc;
}
