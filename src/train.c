/*
 * The training loop: load and validate the spec, lay out the ranks, build the model, then for
 * each optimizer step run grad_accum micro-batches forward and backward, average gradients over
 * the data-parallel ranks, clip, step AdamW, update the expert biases, log, validate.
 */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "common.h"
#include "config.h"
#include "cpu/model_cpu.h"
#include "cpu/threads.h"
#include "data.h"
#include "dist.h"
#include "model.h"
#include "optim.h"
#include "replica_check.h"
#include "run_record.h"
#include "signals.h"
#include "step_parts.h"
#ifdef MOKC_CUDA
#include "gpu/comms.h"
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#endif

typedef struct {
    MokcConfig cfg;
    Dist dist;
    ModelDims dims;
    ParamTable table;
    float *params, *grads, *adam_m, *adam_v;
    float *expert_bias;         /* (L, E): selection bias, not a parameter */
    int64_t *load;              /* (L, E): tokens routed per expert in this step, all ranks */
    int64_t *replica_load;      /* (L, E): the same over this rank's EP group only (one data-parallel replica) */
    double *ep_rank_imbalance;  /* (L): each MoE layer's busiest EP rank over the mean, the worst replica's */
    CpuModel model;
    CpuThreads threads;         /* the CPU backend's, over the ranks */
    TokenSet train_set, val_set;
    DataLoader train_loader, val_loader;
    int *inputs, *targets;
    int step;                   /* optimizer steps done */
    int64_t tokens_seen;
    FILE *metrics;              /* rank 0's run record (log.metrics_path) */
    int metrics_lost_at;        /* > 0: the step whose line could not be written; the record stops before it */
    long metrics_whole;         /* the record's bytes up to its last whole line */
    const char *spec_path;
    int argc;                   /* the command line, for the record */
    char **argv;
    int first_step;             /* the step this process started after (> 0: resumed) */
    double window_seconds;      /* the closing summary's steps: their time, tokens, GPU parts */
    int64_t window_tokens;
    int window_steps;
    double window_parts[STEP_PARTS];
    OpTimes profile;            /* log.profile_step's step, op by op */
    double run_seconds;         /* all of this process's steps, for the ETA */
    int saved_step;             /* step of the newest checkpoint written or loaded; -1: none */
    const char *backend_note;   /* why this backend was chosen */
    int use_gpu;                /* the CUDA backend runs the model (else the CPU reference) */
#ifdef MOKC_CUDA
    GpuModel *gpu;
    GpuComms comms;
    char gpu_name[256];
    char moe_note[384];         /* the backend note when it says why mok does not run */
#endif
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
static void fail_all(Trainer *tr, int code, const char *hint, const char *msg) __attribute__((noreturn));
static void fail_all(Trainer *tr, int code, const char *hint, const char *msg) {
    dist_fail_all(&tr->dist, code, hint, msg);
}

/* backend auto: the GPU when this binary has the CUDA backend and the machine a GPU. Every rank runs the same
 * backend (their collectives differ): a rank that sees no GPU where another does stops them all, named. On the GPU
 * the note (which MoE layer runs) is written once the device is chosen: gpu_moe_note. */
static void choose_backend(Trainer *tr) {
    enum backend_kind b = tr->cfg.backend;
#ifdef MOKC_CUDA
    const int gpus = gpu_device_count();
    int any = gpus > 0; /* some rank sees a GPU */
    if (tr->dist.world > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    char msg[256], who[32] = "this process";
    if (tr->dist.world > 1) snprintf(who, sizeof who, "rank %d", tr->dist.rank);
    snprintf(msg, sizeof msg, "backend: \"%s\" but no GPU is visible to %s%s", b == BACKEND_CUDA ? "cuda" : "auto", who,
             any ? ", while other ranks see one" : "");
    if (dist_agree(&tr->dist, gpus == 0 && (b == BACKEND_CUDA || (b == BACKEND_AUTO && any)), msg, sizeof msg))
        fail_all(tr, MOKC_EXIT_USAGE,
                 tr->dist.world > 1 ? "give every rank a GPU (check CUDA_VISIBLE_DEVICES and the launch), or set "
                                      "\"backend\": \"cpu\""
                                    : "run on a machine with an NVIDIA GPU, or set \"backend\": \"cpu\"",
                 msg);
    tr->use_gpu = b == BACKEND_CUDA || (b == BACKEND_AUTO && any);
    if (!tr->use_gpu) tr->backend_note = b == BACKEND_AUTO ? "no GPU visible" : "as the spec asks";
#else
    if (b == BACKEND_CUDA)
        fail_all(tr, MOKC_EXIT_USAGE, "set \"backend\": \"cpu\" or \"auto\", or build with nvcc and NCCL present",
                 "backend: \"cuda\" but this binary was built without the CUDA backend (NO_CUDA=1 or no nvcc)");
    tr->backend_note = b == BACKEND_AUTO ? "this binary was built without CUDA" : "as the spec asks";
#endif
}

#ifdef MOKC_CUDA
/* The GPU backend's note: which MoE layer runs (the model decides: gpu_model_moe_impl); "auto"
 * says why it fell back to the unfused layer. */
static void gpu_moe_note(Trainer *tr, const GpuModel *g) {
    const ModelDims *d = &tr->dims;
    if (!model_layer_is_moe(d, d->L - 1))
        tr->backend_note = "no MoE layers";
    else if (gpu_model_moe_impl(g) == MOE_IMPL_MOK)
        tr->backend_note = "MoE layers: mok (megakernel forward and backward)";
    else if (tr->cfg.moe_impl == MOE_IMPL_UNFUSED)
        tr->backend_note = "MoE layers: unfused";
    else {
        snprintf(tr->moe_note, sizeof tr->moe_note, "MoE layers: unfused; mok unavailable: %s",
                 gpu_model_moe_why(g));
        tr->backend_note = tr->moe_note;
    }
}
#endif

/* Every rank opens its data; a problem on any rank (one rank's file can differ) stops all of them
 * with the first failing rank's message, printed once. */
static void open_data(Trainer *tr) {
    const MokcConfig *c = &tr->cfg;
    char err[2048], msg[2200];
    if (!c->data.train[0])
        fail_all(tr, MOKC_EXIT_USAGE, "make one with `mokc prepare --text FILE --out DATA.h5` (or `make data`)",
                 "data.train: `mokc train` needs a token file; the spec sets none");
    int failed = 0;
    if (data_open(&tr->train_set, c->data.train, c->model.vocab_size, err, sizeof err) ||
        loader_init(&tr->train_loader, &tr->train_set, c->train.seq_len, c->train.micro_batch,
                    (uint64_t)c->train.seed, tr->dist.rank, tr->dist.world, err, sizeof err))
        failed = 1, snprintf(msg, sizeof msg, "data.train (rank %d): %s", tr->dist.rank, err);
    else if (c->data.val[0] &&
             (data_open(&tr->val_set, c->data.val, c->model.vocab_size, err, sizeof err) ||
              loader_init(&tr->val_loader, &tr->val_set, c->train.seq_len, c->train.micro_batch, DATA_VAL_SEED,
                          tr->dist.rank, tr->dist.world, err, sizeof err)))
        failed = 1, snprintf(msg, sizeof msg, "data.val (rank %d): %s", tr->dist.rank, err);
    if (dist_agree(&tr->dist, failed, msg, sizeof msg)) fail_all(tr, MOKC_EXIT_USAGE, NULL, msg);
}

static void print_model_summary(const Trainer *tr) {
    if (tr->dist.rank != 0) return;
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        printf("backend: cuda on %s (%s)\n", tr->gpu_name, tr->backend_note);
        gpu_model_print_plan(tr->gpu);
    } else
#endif
    {
        char threads[64];
        cpu_threads_describe(&tr->threads, threads, sizeof threads);
        printf("backend: cpu (%s), %s\n", tr->backend_note, threads);
        if (tr->threads.note[0]) mokc_warn("%s", tr->threads.note);
    }
    const ModelDims *d = &tr->dims;
    double mib = (double)tr->table.total * sizeof(float) / (1 << 20);
    printf("model: %lld parameters (%lld active per token), %.1f MFLOP per token (fwd+bwd)\n",
           (long long)model_param_count(d), (long long)model_active_param_count(d),
           model_flops_per_token(d, tr->cfg.train.seq_len) / 1e6);
    /* the host's arrays: fp32 moments also for optimizer_state bf16 (the GPU's plan, printed above, halves them) */
    printf("memory per rank: parameters %.1f MiB, gradients %.1f MiB, AdamW moments %.1f MiB\n", mib, mib, 2 * mib);
    printf("tokens: %lld train, %lld val; global batch %d sequences x %d tokens\n",
           (long long)tr->train_set.num_tokens, (long long)tr->val_set.num_tokens,
           tr->dist.world * tr->cfg.train.micro_batch * tr->cfg.train.grad_accum, tr->cfg.train.seq_len);
}

/* ---------- resuming (checkpoint.resume) ---------- */

static CkptState ckpt_state(Trainer *tr) {
    CkptState s = {&tr->cfg, &tr->dist, &tr->dims, &tr->table, tr->params, tr->adam_m, tr->adam_v,
                   tr->expert_bias, tr->step, tr->tokens_seen, loader_position(&tr->train_loader)};
    return s;
}

/* Loads the newest complete checkpoint ("auto") or the one named into the initialised trainer;
 * a fresh start otherwise. A mismatched or damaged checkpoint stops every rank with exit 2. */
static void checkpoint_resume(Trainer *tr) {
    const CheckpointConfig *cc = &tr->cfg.checkpoint;
    char path[CKPT_PATH_MAX], err[4096];
    tr->saved_step = -1;
    if (!ckpt_resolve_resume(cc, &tr->dist, path, sizeof path)) {
        if (tr->dist.rank == 0 && cc->resume[0])
            printf("checkpoint: no complete checkpoint in '%s'; starting fresh\n", cc->dir);
        else if (tr->dist.rank == 0 && cc->dir[0] && ckpt_find_latest(cc->dir, path, sizeof path) >= 0)
            mokc_warn("checkpoint.dir '%s' already holds checkpoints (newest: %s) and this run starts fresh "
                      "(checkpoint.resume = \"\"); its checkpoints will mix with them: set checkpoint.resume = "
                      "\"auto\" to continue instead, or use another checkpoint.dir", cc->dir, path);
        return;
    }
    CkptState st = ckpt_state(tr);
    if (ckpt_load(&st, path, err, sizeof err) != 0)
        fail_all(tr, MOKC_EXIT_USAGE, "resume from another checkpoint (checkpoint.resume = its step_NNNNNNNN "
                 "directory, or \"auto\" for the newest complete one), or start fresh with checkpoint.resume = \"\"",
                 err);
    /* Resuming an older checkpoint of checkpoint.dir while newer ones sit there replays the run from
     * that point: the newer ones are replaced as the run reaches their steps (equal ones, if nothing
     * else changed). Until then they outrank this run's own, so say so. */
    char newest[CKPT_PATH_MAX];
    int newest_step = cc->dir[0] ? ckpt_find_latest(cc->dir, newest, sizeof newest) : -1;
    if (newest_step > st.step && tr->dist.rank == 0)
        mokc_warn("checkpoint.resume: '%s' is step %d but checkpoint.dir '%s' already holds the newer %s; this run "
                  "replaces checkpoints as it reaches their steps, and until then resume = \"auto\" picks the newer "
                  "ones: write a changed run to another checkpoint.dir", path, st.step, cc->dir, newest);
    optim_round_state(tr->adam_m, tr->adam_v, tr->table.total, &tr->cfg.train);
    tr->step = tr->saved_step = st.step;
    tr->tokens_seen = st.tokens_seen;
    loader_seek(&tr->train_loader, st.loader_position);
    if (tr->dist.rank == 0) {
        printf("resumed from %s: step %d, %lld tokens seen\n", path, tr->step, (long long)tr->tokens_seen);
        if (tr->step >= tr->cfg.train.steps)
            printf("nothing left to train: the checkpoint is at step %d and train.steps = %d\n", tr->step,
                   tr->cfg.train.steps);
    }
}

/* Rank 0's metrics file: new for a fresh run. A resumed run keeps the lines up to its checkpoint's
 * step (a crashed run may have logged later ones) and appends, so the file reads as one run. A path
 * the spec names must be writable; the default ("auto") only warns when it is not. */
static void open_metrics(Trainer *tr) {
    char *path = tr->cfg.log.metrics_path;
    const bool automatic = strcmp(path, "auto") == 0;
    if (automatic) { /* runs/<the spec's file name without .json>.jsonl */
        const char *base = strrchr(tr->spec_path, '/');
        base = base ? base + 1 : tr->spec_path;
        int stem = (int)strlen(base);
        if (stem > 5 && strcmp(base + stem - 5, ".json") == 0) stem -= 5;
        snprintf(path, CONFIG_PATH_MAX, "runs/%.*s.jsonl", stem, base);
    }
    if (!path[0] || tr->dist.rank != 0) return;
    if (automatic && !mokc_writable(path)) {
        fprintf(stderr, "mokc: warning: no run record: cannot write '%s' (%s); set log.metrics_path to a "
                "writable file\n", path, strerror(errno));
        path[0] = 0;
        return;
    }
    if (!mokc_make_parent_dirs(path))
        mokc_die(MOKC_EXIT_USAGE, "choose a log.metrics_path in a writable directory",
                 "log.metrics_path: cannot create the directory of '%s'", path);
    FILE *old = tr->step > 0 ? fopen(path, "r") : NULL;
    if (old) {
        char tmp[CONFIG_PATH_MAX + 32], *line = NULL;
        size_t cap = 0;
        snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
        FILE *kept = fopenCheck(tmp, "w");
        while (getline(&line, &cap, old) > 0) {
            const char *step = strstr(line, "\"step\": ");
            if (!step || atoi(step + 8) <= tr->step) fputs(line, kept);
        }
        free(line);
        fclose(old);
        if (fclose(kept) != 0 || rename(tmp, path) != 0) {
            unlink(tmp);
            mokc_die(MOKC_EXIT_RUNTIME, "check free disk space", "cannot rewrite the metrics file '%s'", path);
        }
    }
    tr->metrics = fopenCheck(path, tr->step > 0 ? "a" : "w");
    fseek(tr->metrics, 0, SEEK_END); /* a resumed run's kept lines: a header that cannot be written leaves them */
    tr->metrics_whole = ftell(tr->metrics);
    char *config = config_to_json(&tr->cfg);
    RunHeader h = {.command = "train", .argc = tr->argc, .argv = tr->argv, .config_json = config, .dist = &tr->dist,
                   .backend = tr->use_gpu ? "cuda" : "cpu", .gpu = "none", .gpus = 0,
                   .seed = (long long)tr->cfg.train.seed,
                   .resumed_from = tr->step > 0 ? tr->step : -1};
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        h.gpu = tr->gpu_name, h.gpus = tr->dist.world;
        h.moe_impl = gpu_model_moe_impl(tr->gpu) == MOE_IMPL_MOK ? "mok" : "unfused";
    }
#endif
    run_record_header(tr->metrics, &h);
    free(config);
    if (run_record_flush(&tr->metrics, path, &tr->metrics_whole) != 0)
        mokc_die(MOKC_EXIT_RUNTIME, "free disk space, or choose a log.metrics_path on a disk with room",
                 "cannot write the run record '%s': %s", path, strerror(errno));
}

/* A step's line that cannot be written (a disk full mid-run) ends the record at its last whole line with one
 * warning naming the step: the training goes on, and a run that ends normally says again where the record stops. */
static void metrics_flush(Trainer *tr) {
    if (run_record_flush(&tr->metrics, tr->cfg.log.metrics_path, &tr->metrics_whole) == 0) return;
    fprintf(stderr, "mokc: warning: cannot write the run record '%s' at step %d (%s); training goes on without it\n",
            tr->cfg.log.metrics_path, tr->step, strerror(errno));
    tr->metrics_lost_at = tr->step;
}

static void setup(Trainer *tr, int argc, char **argv, const char *help) {
    const char *spec, **sets;
    int n_sets;
    parse_args(argc, argv, help, &spec, &sets, &n_sets);
    tr->spec_path = spec, tr->argc = argc, tr->argv = argv;
    /* Every rank reads the same spec and finds the same problems: report them before MPI starts,
     * once, from the rank the launcher calls 0 (dist_pre_init_exit: it alone fails). */
    ConfigErrors errors;
    if (!config_load(spec, sets, n_sets, &tr->cfg, &errors)) {
        if (dist_launcher_rank() == 0) config_errors_print(&errors, spec, stderr);
        config_errors_free(&errors);
        free(sets);
        exit(dist_pre_init_exit(MOKC_EXIT_USAGE));
    }
    free(sets);
    dist_init(&tr->dist, &argc, &argv);
    char msg[512];
    if (!dist_make_groups(&tr->dist, tr->cfg.parallel.ep, msg, sizeof msg))
        fail_all(tr, MOKC_EXIT_USAGE, "change parallel.ep or the number of ranks (mpirun -np)", msg);
    choose_backend(tr);
    if (!tr->use_gpu && tr->cfg.log.profile_step > 0)
        fail_all(tr, MOKC_EXIT_USAGE, "set log.profile_step to 0 on the CPU backend, or train on a GPU",
                 "log.profile_step times the model's ops on the GPU, but this run trains on the CPU");
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
    tr->replica_load = callocCheck(nbias, sizeof(int64_t));
    tr->ep_rank_imbalance = callocCheck((size_t)c->model.num_layers, sizeof(double));
    if (!tr->use_gpu) model_init_params(tr->params, &tr->table, &tr->dims, (uint64_t)c->train.seed);
    size_t N = (size_t)c->train.micro_batch * c->train.seq_len;
    tr->inputs = mallocCheck(N * sizeof(int));
    tr->targets = mallocCheck(N * sizeof(int));
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        int dev = gpu_take_device(&tr->dist, "or set \"backend\": \"cpu\"");
        gpu_describe(dev, tr->gpu_name, sizeof tr->gpu_name);
        gpu_comms_init(&tr->comms, &tr->dist);
        tr->gpu = gpu_model_create(&tr->dims, &tr->table, &c->train, &tr->dist, &tr->comms,
                                   c->train.micro_batch, c->train.seq_len, c->moe_impl);
        gpu_moe_note(tr, tr->gpu);
    }
#endif
    if (!tr->use_gpu) {
        MoeComms comms = {.ep = tr->dist.ep_comm, .stats = MPI_COMM_WORLD};
        cpu_model_init(&tr->model, &tr->dims, &tr->table, c->train.micro_batch, c->train.seq_len, &comms);
        cpu_threads_survey(&tr->dist, &tr->threads);
    }
    print_model_summary(tr);
    checkpoint_resume(tr);
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        if (tr->saved_step >= 0) gpu_model_upload_state(tr->gpu, tr->params, tr->adam_m, tr->adam_v);
        else gpu_model_init_state(tr->gpu, (uint64_t)c->train.seed);
        gpu_model_set_expert_bias(tr->gpu, tr->expert_bias);
    }
#endif
    tr->first_step = tr->step;
    if (c->log.profile_step > 0 && c->log.profile_step <= tr->step && tr->dist.rank == 0)
        printf("note: log.profile_step %d is not profiled: this run resumes after step %d\n", c->log.profile_step,
               tr->step);
    open_metrics(tr);
}

static void teardown(Trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        gpu_model_destroy(tr->gpu);
        gpu_comms_destroy(&tr->comms);
    }
#endif
    if (!tr->use_gpu) cpu_model_free(&tr->model);
    param_table_free(&tr->table);
    free(tr->params), free(tr->grads), free(tr->adam_m), free(tr->adam_v);
    free(tr->expert_bias), free(tr->load), free(tr->replica_load), free(tr->ep_rank_imbalance);
    free(tr->inputs), free(tr->targets);
    loader_free(&tr->train_loader);
    data_close(&tr->train_set);
    if (tr->cfg.data.val[0]) {
        loader_free(&tr->val_loader);
        data_close(&tr->val_set);
    }
}

/* ---------- checkpoints and stop signals ---------- */

/* Brings the GPU's state into the host arrays (all of it for a checkpoint, `saving`; else what the comparison reads),
 * then compares the ranks' replicas (replica_check) and stops every rank, naming the difference, where they differ.
 * Returns the arrays compared (0 at world 1). */
static int replicas_agree_or_stop(Trainer *tr, bool saving) {
#ifdef MOKC_CUDA
    const unsigned compared_kinds = 1u << PARAM_REPLICATED | (tr->dist.dp > 1 ? 1u << PARAM_EXPERT : 0u);
    if (tr->use_gpu)
        gpu_model_download_state_of(tr->gpu, tr->params, tr->adam_m, tr->adam_v,
                                    saving ? GPU_STATE_ALL : compared_kinds);
#endif
    const ModelDims *d = &tr->dims;
    const size_t bias_n = d->E > 0 ? (size_t)d->L * (size_t)d->E : 0;
    int compared = 0;
    char err[4096];
    if (replica_check(&tr->dist, &tr->table, tr->params, tr->adam_m, tr->adam_v, tr->expert_bias, bias_n, &compared,
                      err, sizeof err)) {
        char hint[256];
        snprintf(hint, sizeof hint, "a bug in mokc or faulty GPU or host memory: please report it with the run "
                 "record%s", saving ? "; this step was not saved, the checkpoints written before are intact" : "");
        teardown(tr);
        fail_all(tr, MOKC_EXIT_RUNTIME, hint, err);
    }
    return compared;
}

static void checkpoint_save(Trainer *tr) {
    /* before the write: replicas that differ are not saved, so the checkpoints kept (and resume = "auto") stay the
     * ones that agreed */
    const int compared = replicas_agree_or_stop(tr, true);
    CkptState st = ckpt_state(tr);
    char path[CKPT_PATH_MAX], err[4096];
    int64_t bytes = 0;
    double t0 = mokc_now_seconds();
    if (ckpt_save(&st, path, sizeof path, &bytes, err, sizeof err) != 0) {
        teardown(tr);
        fail_all(tr, MOKC_EXIT_RUNTIME, "free disk space or fix checkpoint.dir; the checkpoints written before "
                 "are intact", err);
    }
    tr->saved_step = tr->step;
    if (tr->dist.rank != 0) return;
    printf("checkpoint: %s (%.1f MiB in %.2f s", path, (double)bytes / (1 << 20), mokc_now_seconds() - t0);
    if (compared > 0) printf("; replicas bitwise equal: %d arrays over %d ranks", compared, tr->dist.world);
    printf(")\n");
}

static bool checkpoint_due(const Trainer *tr) {
    int every = tr->cfg.checkpoint.every;
    return every > 0 && tr->step % every == 0;
}

/* The stop signal any rank received (0: none), the same on every rank, so that all stop together. */
static int stop_requested(const Trainer *tr) {
    int sig = signals_stop_requested();
    if (tr->dist.world > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return sig;
}

/* After a stop signal: a checkpoint of the step just finished, then exit 0 (the job can be requeued
 * and resumed). Without checkpoint.dir nothing can be kept: exit 128 + signal, as if killed. */
static int stop_for_signal(Trainer *tr, int sig) {
    if (!tr->cfg.checkpoint.dir[0]) {
        if (tr->dist.rank == 0)
            fprintf(stderr, "mokc: error: stopped by %s after step %d; checkpoint.dir is not set, so no checkpoint "
                    "was written\n---> HINT: set checkpoint.dir (and checkpoint.resume = \"auto\") to make runs "
                    "resumable\n", signals_name(sig), tr->step);
        teardown(tr);
        dist_exit(&tr->dist, 128 + sig);
    }
    if (tr->saved_step != tr->step) checkpoint_save(tr);
    if (tr->dist.rank == 0)
        printf("stopped by %s after step %d of %d; checkpoint written: run again with checkpoint.resume = "
               "\"auto\" to continue\n", signals_name(sig), tr->step, tr->cfg.train.steps);
    teardown(tr);
    dist_finalize(&tr->dist);
    return 0;
}

/* ---------- one step ---------- */

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
    if (tr->dist.ep > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &exp, 1, MPI_DOUBLE, MPI_SUM, tr->dist.ep_comm));
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

/* The busiest of a layer's groups of `group` consecutive experts over the mean group, from its (E) routed slots:
 * group 1, its busiest expert (1 = balanced, E / k = every token on one expert); group E_local, its busiest EP
 * rank (1 = balanced, ep at most). */
static double group_imbalance(const int64_t *load, int E, int group) {
    int64_t max = 0, sum = 0;
    for (int g0 = 0; g0 < E; g0 += group) {
        int64_t slots = 0;
        for (int e = g0; e < g0 + group; e++) slots += load[e];
        sum += slots;
        if (slots > max) max = slots;
    }
    return sum > 0 ? (double)max * (E / group) / (double)sum : 0;
}

static double layer_imbalance(const Trainer *tr, int l) {
    return group_imbalance(tr->load + (size_t)l * tr->dims.E, tr->dims.E, 1);
}

/* Layer l's expert with the most routed slots this step (the lowest id among equals): which experts stay hot from
 * step to step is what a placement that follows the load would have to follow. */
static int busiest_expert(const Trainer *tr, int l) {
    const int64_t *load = tr->load + (size_t)l * tr->dims.E;
    int best = 0;
    for (int e = 1; e < tr->dims.E; e++)
        if (load[e] > load[best]) best = e;
    return best;
}

/* Layer l's experts that no token of the step chose, on any rank (0 .. E - k): a dead expert shows here, and so
 * does how much of the experts' gradient a step leaves zero, which the megakernel neither writes nor AdamW reads
 * (MoeGpuGrads.idle_unwritten). */
static int idle_experts(const Trainer *tr, int l) {
    const int64_t *load = tr->load + (size_t)l * tr->dims.E;
    int idle = 0;
    for (int e = 0; e < tr->dims.E; e++) idle += load[e] == 0;
    return idle;
}

/* After the step's micro-batches, before the load is summed over the world: each MoE layer's busiest EP rank
 * over the mean rank, in each data-parallel replica over the step's micro-batches (a GPU waits for the busiest
 * rank of its own EP group), the worst replica's. */
static void measure_ep_rank_imbalance(Trainer *tr) {
    const ModelDims *d = &tr->dims;
    if (d->ep <= 1 || d->E == 0) return;
    const int n = d->L * d->E;
    mpiCheck(MPI_Allreduce(tr->load, tr->replica_load, n, MPI_INT64_T, MPI_SUM, tr->dist.ep_comm));
    for (int l = 0; l < d->L; l++)
        tr->ep_rank_imbalance[l] = group_imbalance(tr->replica_load + (size_t)l * d->E, d->E, d->E_local);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, tr->ep_rank_imbalance, d->L, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
}

/* The worst MoE layer's busiest expert over the mean (layer_imbalance by expert) this step; 0 without experts. */
static double load_imbalance(const Trainer *tr) {
    const ModelDims *d = &tr->dims;
    double worst = 0;
    for (int l = d->first_dense; d->E > 0 && l < d->L; l++) {
        double ratio = layer_imbalance(tr, l);
        if (ratio > worst) worst = ratio;
    }
    return worst;
}

typedef struct {
    double loss, aux, norm, lr, seconds, tokens_per_s, imbalance;
    int64_t tokens;
    double parts_ms[STEP_PARTS]; /* the GPU's step time by part (gpu/step_timer.h; zeros on the CPU) */
    int profiled;                /* the step was timed op by op: tr->profile */
} StepStats;

/* One micro-batch forward and backward into the gradients; returns its mean loss, adds its aux
 * loss to *aux and its routing to tr->load. */
static double micro_step(Trainer *tr, int last, double *aux) {
    const ModelDims *d = &tr->dims;
    double dloss = 1.0 / tr->cfg.train.grad_accum;
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        double layer_aux = 0;
        double loss = gpu_model_forward_backward(tr->gpu, tr->inputs, tr->targets, dloss, last, &layer_aux, tr->load);
        *aux += layer_aux;
        return loss;
    }
#endif
    (void)last;
    double loss = cpu_model_forward(&tr->model, tr->params, tr->expert_bias, tr->inputs, tr->targets);
    *aux += tr->model.aux_loss;
    for (int l = d->first_dense; d->E > 0 && l < d->L; l++)
        for (int e = 0; e < d->E; e++) tr->load[(size_t)l * d->E + e] += tr->model.moe[l].counts[e];
    cpu_model_backward(&tr->model, tr->params, tr->grads, dloss);
    return loss;
}

/* A gradient that overflowed would write NaN into every weight (and into the next checkpoint).
 * The norm is the same on every rank, so all stop together, before the update. */
static void check_finite_norm(Trainer *tr, double norm) {
    if (isfinite(norm)) return;
    char msg[256];
    snprintf(msg, sizeof msg, "the gradient norm is %g at step %d: the weights were not updated", norm, tr->step + 1);
    fail_all(tr, MOKC_EXIT_RUNTIME, "lower train.lr, keep train.grad_clip on, or resume from the last checkpoint "
             "with a smaller learning rate", msg);
}

/* Gradients averaged over the ranks, clipped, one AdamW step: returns the gradient norm. */
static double optimizer_step(Trainer *tr, double lr) {
    const TrainConfig *t = &tr->cfg.train;
    double norm;
#ifdef MOKC_CUDA
    if (tr->use_gpu) {
        norm = gpu_model_grad_norm(tr->gpu);
        check_finite_norm(tr, norm);
        gpu_model_adamw(tr->gpu, lr, t->grad_clip > 0 && norm > t->grad_clip ? t->grad_clip / norm : 1.0, tr->step + 1);
        return norm;
    }
#endif
    dist_average_grads(&tr->dist, &tr->table, tr->grads);
    norm = global_grad_norm(tr);
    check_finite_norm(tr, norm);
    double scale = t->grad_clip > 0 && norm > t->grad_clip ? t->grad_clip / norm : 1.0;
    adamw_step(tr->params, tr->grads, tr->adam_m, tr->adam_v, &tr->table, t, lr, scale, tr->step + 1);
    return norm;
}

static StepStats train_step(Trainer *tr) {
    const MokcConfig *c = &tr->cfg;
    const ModelDims *d = &tr->dims;
    StepStats s = {0};
    s.profiled = tr->use_gpu && tr->step + 1 == c->log.profile_step;
#ifdef MOKC_CUDA
    if (s.profiled) gpu_model_profile(tr->gpu, 1); /* its events made before the step's clock starts */
#endif
    double t0 = mokc_now_seconds();
#ifdef MOKC_CUDA
    if (tr->use_gpu) gpu_model_zero_grads(tr->gpu);
    else
#endif
        memset(tr->grads, 0, tr->table.total * sizeof(float));
    memset(tr->load, 0, sizeof(int64_t) * (size_t)d->L * (size_t)(d->E > 0 ? d->E : 1));
    double loss_sum = 0, aux_sum = 0;
    for (int micro = 0; micro < c->train.grad_accum; micro++) {
        loader_next_batch(&tr->train_loader, tr->inputs, tr->targets);
        loss_sum += micro_step(tr, micro == c->train.grad_accum - 1, &aux_sum);
    }
    double sums[2] = {loss_sum, aux_sum};
    measure_ep_rank_imbalance(tr);
    if (tr->dist.world > 1) {
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, tr->load, d->L * (d->E > 0 ? d->E : 1), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    }
    s.loss = sums[0] / (c->train.grad_accum * tr->dist.world);
    s.aux = sums[1] / (c->train.grad_accum * tr->dist.world);
    s.lr = lr_at_step(&c->train, tr->step);
    s.norm = optimizer_step(tr, s.lr);
#ifdef MOKC_CUDA
    if (tr->use_gpu) gpu_model_step_times(tr->gpu, s.parts_ms, s.profiled ? &tr->profile : NULL);
    if (s.profiled) gpu_model_profile(tr->gpu, 0);
#endif
    update_expert_bias(tr);
#ifdef MOKC_CUDA
    if (tr->use_gpu) gpu_model_set_expert_bias(tr->gpu, tr->expert_bias);
#endif
    s.imbalance = load_imbalance(tr);
    tr->step++;
    int64_t tokens = (int64_t)c->train.grad_accum * c->train.micro_batch * c->train.seq_len * tr->dist.world;
    tr->tokens_seen += tokens;
    s.tokens = tokens;
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
#ifdef MOKC_CUDA
        if (tr->use_gpu) {
            sum += gpu_model_evaluate(tr->gpu, tr->inputs, tr->targets);
            continue;
        }
#endif
        sum += cpu_model_forward(&tr->model, tr->params, tr->expert_bias, tr->inputs, tr->targets);
    }
    if (tr->dist.world > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return sum / (tr->cfg.data.val_batches * tr->dist.world);
}

/* Model FLOPs utilisation per GPU against the H200's dense bf16 peak (DESIGN.md's accounting:
 * 6 x active parameters x tokens + attention). */
#define MFU_PEAK_FLOPS 989e12

static double mfu_at(const Trainer *tr, double tokens_per_s_per_rank) {
    return model_flops_per_token(&tr->dims, tr->cfg.train.seq_len) * tokens_per_s_per_rank / MFU_PEAK_FLOPS;
}

/* The closing summary leaves out a run's first steps (allocation, clocks, library heuristics): the
 * first min(19, steps / 2) of this process, so that a 100-step run averages steps 20-100. */
static int summary_skips(const Trainer *tr) {
    int n = tr->cfg.train.steps - tr->first_step;
    return n / 2 < 19 ? n / 2 : 19;
}

/* "1h02m", "3m05s", "12s": the time left at the mean step time of this process so far. */
static void format_eta(const Trainer *tr, char *buf, size_t len) {
    int done = tr->step - tr->first_step, left = tr->cfg.train.steps - tr->step;
    long t = done > 0 ? (long)(tr->run_seconds / done * left + 0.5) : 0;
    if (t >= 3600) snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, len, "%lds", t);
}

/* Rank 0: the profiled step's ops, the costliest first. */
static void print_profile(const Trainer *tr) {
    const OpTimes *p = &tr->profile;
    int order[STEP_OPS_MAX];
    double total = 0;
    for (int i = 0; i < p->n; i++) order[i] = i, total += p->op[i].ms;
    for (int i = 1; i < p->n; i++) /* insertion sort by time, descending: a few dozen ops */
        for (int j = i; j > 0 && p->op[order[j]].ms > p->op[order[j - 1]].ms; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    printf("step %d op by op (rank 0; CUDA events between the ops on the compute stream, every micro-batch):\n",
           tr->step);
    printf("  %-22s %-18s %6s %10s %10s %6s\n", "op", "part", "calls", "ms a call", "ms", "share");
    for (int i = 0; i < p->n; i++) {
        const OpTime *o = &p->op[order[i]];
        printf("  %-22s %-18s %6d %10.3f %10.2f %5.1f%%\n", o->name, step_part_name(o->part), o->count,
               o->ms / o->count, o->ms, total > 0 ? 100 * o->ms / total : 0.0);
    }
    printf("  %-22s %-18s %6s %10s %10.2f\n", "all", "", "", "", total);
}

/* The profiled step's ops in its run-record line: "op_ms": {"<op>": {"part": .., "calls": .., "ms": ..}, ..}. */
static void record_profile(const Trainer *tr) {
    const OpTimes *p = &tr->profile;
    fprintf(tr->metrics, ", \"op_ms\": {");
    for (int i = 0; i < p->n; i++)
        fprintf(tr->metrics, "%s\"%s\": {\"part\": \"%s\", \"calls\": %d, \"ms\": %.3f}", i ? ", " : "",
                p->op[i].name, step_part_name(p->op[i].part), p->op[i].count, p->op[i].ms);
    fprintf(tr->metrics, "}");
}

static void log_step(Trainer *tr, const StepStats *s, double val_loss) {
    const MokcConfig *c = &tr->cfg;
    const ModelDims *d = &tr->dims;
    tr->run_seconds += s->seconds;
    if (tr->step - tr->first_step > summary_skips(tr)) {
        tr->window_steps++;
        tr->window_seconds += s->seconds;
        tr->window_tokens += s->tokens;
        for (int p = 0; p < STEP_PARTS; p++) tr->window_parts[p] += s->parts_ms[p];
    }
    if (tr->dist.rank != 0) return;
    bool last = tr->step == c->train.steps;
    double per_rank = s->tokens_per_s / tr->dist.world;
    double mfu = tr->use_gpu ? mfu_at(tr, per_rank) : NAN;
    if (tr->step % c->log.every == 0 || tr->step == 1 || last) {
        char eta[32];
        format_eta(tr, eta, sizeof eta);
        printf("step %5d/%d | loss %.4f | aux %.4f | norm %.3f | lr %.2e | %6.0f ms | %7.0f tok/s", tr->step,
               c->train.steps, s->loss, s->aux, s->norm, s->lr, s->seconds * 1e3, s->tokens_per_s);
        if (tr->use_gpu) printf(" | %7.0f tok/s/GPU | MFU %4.1f%%", per_rank, 100 * mfu);
        printf(" | load max/mean %.2f", s->imbalance);
        if (!isnan(val_loss)) printf(" | val %.4f", val_loss);
        if (!last) printf(" | ETA %s", eta);
        printf("\n");
        fflush(stdout);
    }
    if (s->profiled) {
        print_profile(tr);
        fflush(stdout);
    }
    if (tr->metrics) {
        fprintf(tr->metrics,
                "{\"step\": %d, \"loss\": %.17g, \"aux_loss\": %.17g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"tokens_per_s_per_rank\": %.1f, \"tokens_seen\": %lld, "
                "\"load_max_over_mean\": %.6g",
                tr->step, s->loss, s->aux, s->norm, s->lr, s->seconds * 1e3, s->tokens_per_s, per_rank,
                (long long)tr->tokens_seen, s->imbalance);
        if (d->E > 0 && d->first_dense < d->L) /* the expert load of every MoE layer, by expert and by EP rank */
            for (int by_rank = 0; by_rank <= (d->ep > 1); by_rank++) {
                fprintf(tr->metrics, ", \"%sload_max_over_mean_by_layer\": [", by_rank ? "ep_rank_" : "");
                for (int l = d->first_dense; l < d->L; l++)
                    fprintf(tr->metrics, "%s%.4g", l > d->first_dense ? ", " : "",
                            by_rank ? tr->ep_rank_imbalance[l] : layer_imbalance(tr, l));
                fprintf(tr->metrics, "]");
            }
        if (d->E > 0 && d->first_dense < d->L) {
            fprintf(tr->metrics, ", \"busiest_expert_by_layer\": [");
            for (int l = d->first_dense; l < d->L; l++)
                fprintf(tr->metrics, "%s%d", l > d->first_dense ? ", " : "", busiest_expert(tr, l));
            fprintf(tr->metrics, "], \"idle_experts_by_layer\": [");
            for (int l = d->first_dense; l < d->L; l++)
                fprintf(tr->metrics, "%s%d", l > d->first_dense ? ", " : "", idle_experts(tr, l));
            fprintf(tr->metrics, "]");
        }
        if (tr->use_gpu) {
            fprintf(tr->metrics, ", \"mfu\": %.6g, \"gpu_ms\": {", mfu);
            for (int p = 0; p < STEP_PARTS; p++)
                fprintf(tr->metrics, "%s\"%s\": %.3f", p ? ", " : "", step_part_name(p), s->parts_ms[p]);
            fprintf(tr->metrics, "}");
        }
        if (s->profiled) record_profile(tr);
        if (!isnan(val_loss)) fprintf(tr->metrics, ", \"val_loss\": %.17g", val_loss);
        fprintf(tr->metrics, "}\n");
        metrics_flush(tr);
    }
}

/* Rank 0, after the last step: the mean of the summary's steps, and on the GPU where their time went. */
static void print_summary(const Trainer *tr) {
    if (tr->dist.rank != 0 || tr->window_steps == 0) return;
    const int from = tr->step - tr->window_steps + 1;
    const double step_ms = tr->window_seconds / tr->window_steps * 1e3;
    const double per_rank = (double)tr->window_tokens / tr->window_seconds / tr->dist.world;
    printf("steps %d-%d: %.1f ms a step, %.0f tokens/s", from, tr->step, step_ms, per_rank * tr->dist.world);
    if (tr->use_gpu) {
        printf(", %.0f a GPU, MFU %.1f%%\n", per_rank, 100 * mfu_at(tr, per_rank));
        double gpu = 0;
        for (int p = 0; p < STEP_PARTS; p++) gpu += tr->window_parts[p];
        printf("  GPU time a step (rank 0): ");
        for (int p = 0; p < STEP_PARTS; p++)
            printf("%s%s %.1f ms (%.0f%%)", p ? ", " : "", step_part_name(p), tr->window_parts[p] / tr->window_steps,
                   gpu > 0 ? 100 * tr->window_parts[p] / gpu : 0.0);
    }
    printf("\n");
}

int cmd_train(int argc, char **argv, const char *help) {
    /* One progress line at a time in batch logs, never an error spliced into a half-written line. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    Trainer tr;
    memset(&tr, 0, sizeof tr);
    setup(&tr, argc, argv, help);
    signals_install(tr.dist.rank == 0);
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
        if (checkpoint_due(&tr)) checkpoint_save(&tr);
        int sig = stop_requested(&tr);
        if (sig) return stop_for_signal(&tr, sig);
    }
    if (c->checkpoint.dir[0] && tr.saved_step != tr.step) checkpoint_save(&tr);
    if (tr.dist.world > 1 && tr.saved_step != tr.step) { /* a run without a checkpoint of its end checks too */
        const int compared = replicas_agree_or_stop(&tr, false);
        if (tr.dist.rank == 0)
            printf("replicas after step %d: bitwise equal, %d arrays over %d ranks\n", tr.step, compared,
                   tr.dist.world);
    }
    print_summary(&tr);
    if (tr.dist.rank == 0 && !isnan(last_loss)) {
        printf("final: train loss %.4f", last_loss);
        if (!isnan(last_val)) printf(", val loss %.4f", last_val);
        printf(" (nats/token) after %d steps, %lld tokens\n", tr.step, (long long)tr.tokens_seen);
    }
    if (tr.dist.rank == 0 && c->log.metrics_path[0]) {
        printf("run record: %s", c->log.metrics_path);
        if (tr.metrics_lost_at > 0)
            printf(" (incomplete: it stops before step %d, where a write failed)", tr.metrics_lost_at);
        printf("\n");
    }
    teardown(&tr);
    dist_finalize(&tr.dist);
    return 0;
}
