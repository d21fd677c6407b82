/*
 * mokc: the command line. Dispatches to train / prepare / bench / check / version / help.
 * Usage errors print the usage on stderr and exit 2.
 */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "h5io.h"
#include "model_check.h"
#include "prepare.h"
#include "run_record.h"
#include "train.h"
#include "version.h"
#ifdef MOKC_CUDA
#include "gpu/bench_attn.h"
#include "gpu/bench_gemm.h"
#include "gpu/bench_moe.h"
#include "gpu/bench_util.h"
#endif

static const char *usage_text =
    "usage: mokc <command> [options]\n"
    "\n"
    "commands:\n"
    "  train SPEC.json [--set key.path=value ...]   train the model a JSON spec describes\n"
    "  prepare --text FILE --out DATA.h5 [...]      text -> byte tokens in HDF5 (--bin/--raw-*: import ids)\n"
    "  bench moe --config SPEC.json [--impl ...]    one MoE layer on the GPUs (builds with CUDA)\n"
    "  bench attn [--seq T --batch B ...]           causal attention on one GPU, flash vs cuBLAS;\n"
    "                                               RoPE's cost\n"
    "  bench gemm [--m M --n N --k K --groups G]    the mok Hopper GEMM tile alone vs cuBLAS, one GPU\n"
    "  check SPEC.json [--layers N --tokens T ...]  the GPU backend vs the CPU reference on the spec's shapes\n"
    "  version                                      version, build options, library versions\n"
    "  help [command|config]                        this text, a command's help, or every spec key\n"
    "\n"
    "launch on several ranks: mpirun -np N ./mokc train SPEC.json   (or: srun --mpi=pmix ./mokc ...)\n"
    "run records: train writes log.metrics_path (default runs/<spec name>.jsonl); bench writes --record PATH\n"
    "(default runs/bench-<what>.jsonl): JSON lines, a header (command, config, build, machine), then the results.\n";

static const char *train_help =
    "usage: mokc train SPEC.json [--set key.path=value ...]\n"
    "\n"
    "Trains the model described by SPEC.json (see `mokc help config`). --set overrides one key\n"
    "before validation; the value is JSON, or a plain string: --set train.steps=10 --set data.train=x.h5\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "mokc: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return MOKC_EXIT_USAGE;
}

static int cmd_version(void) {
    RunLibraries lib;
    run_libraries(&lib);
    printf("mokc %s (git %s)\n", MOKC_VERSION, MOKC_GIT_REVISION);
    printf("build: %s\n", MOKC_BUILD_FLAGS);
    printf("%s, %s, %s\n", lib.cjson, lib.hdf5, lib.mpi);
    return 0;
}

#ifndef MOKC_CUDA
/* why: what the user can do instead, or what the command needs. */
static int not_built(const char *what, const char *why) {
    fprintf(stderr, "mokc: error: `mokc %s` is not built yet: %s.\n", what, why);
    return MOKC_EXIT_RUNTIME;
}
#endif

static int cmd_help(int argc, char **argv) {
    if (argc < 3) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *topic = argv[2];
    if (strcmp(topic, "config") == 0) {
        printf("JSON model spec keys (sections: model, moe, parallel, train, data, checkpoint, log):\n");
        config_print_reference(stdout, argc > 3 && strcmp(argv[3], "--markdown") == 0);
        return 0;
    }
    if (strcmp(topic, "train") == 0) {
        fputs(train_help, stdout);
        return 0;
    }
    if (strcmp(topic, "prepare") == 0) {
        char *prepare_help[] = {"prepare", "--help", NULL};
        return cmd_prepare(2, prepare_help);
    }
#ifdef MOKC_CUDA
    if (strcmp(topic, "bench") == 0) {
        char *bench_help[] = {"bench", "--help", NULL};
        int rc = cmd_bench(2, bench_help);
        if (rc) return rc;
        char *attn_help[] = {"bench", "attn", "--help", NULL};
        putchar('\n');
        rc = cmd_bench_attn(3, attn_help);
        if (rc) return rc;
        char *gemm_help[] = {"bench", "gemm", "--help", NULL};
        putchar('\n');
        return cmd_bench_gemm(3, gemm_help);
    }
#endif
    if (strcmp(topic, "check") == 0) {
        char *check_help[] = {"check", "--help", NULL};
        return cmd_check(2, check_help);
    }
    if (strcmp(topic, "bench") == 0 || strcmp(topic, "version") == 0 ||
        strcmp(topic, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    return usage_error("no help for '%s'", topic);
}

#ifdef MOKC_CUDA
/* `--record PATH` taken out of a bench command line (the benches parse the rest) into *path (NULL
 * without it). Returns -1, or the exit code of a usage error. */
static int take_bench_record(int *argc, char **argv, const char **path) {
    *path = NULL;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--record") != 0) continue;
        if (i + 1 >= *argc) return usage_error("%s", "--record needs a file path");
        *path = argv[i + 1];
        for (int j = i; j + 2 <= *argc; j++) argv[j] = argv[j + 2];
        *argc -= 2;
        break;
    }
    return -1;
}
#endif

int main(int argc, char **argv) {
    h5io_no_cleanup_at_exit();
    if (argc < 2) return usage_error("%s", "no command given");
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1, train_help);
    if (strcmp(cmd, "prepare") == 0) return cmd_prepare(argc - 1, argv + 1);
#ifdef MOKC_CUDA
    if (strcmp(cmd, "bench") == 0) {
        int bargc = argc - 1;
        const char *record = NULL;
        int rc = take_bench_record(&bargc, argv + 1, &record); /* first: --record may come before the bench's name */
        if (rc >= 0) return rc;
        const int named = bargc > 1 && (strcmp(argv[2], "attn") == 0 || strcmp(argv[2], "gemm") == 0);
        const char *what = named ? argv[2] : "moe";
        char dflt[64];
        snprintf(dflt, sizeof dflt, "runs/bench-%s.jsonl", what);
        bench_record_set(record ? record : dflt, what, bargc, argv + 1);
        if (strcmp(what, "attn") == 0) return cmd_bench_attn(bargc, argv + 1);
        if (strcmp(what, "gemm") == 0) return cmd_bench_gemm(bargc, argv + 1);
        return cmd_bench(bargc, argv + 1);
    }
#else
    if (strcmp(cmd, "bench") == 0)
        return not_built("bench", "it needs a build with the CUDA backend (nvcc and NCCL found)");
#endif
    if (strcmp(cmd, "check") == 0) return cmd_check(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) return cmd_version();
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return cmd_help(argc, argv);
    return usage_error("unknown command '%s'", cmd);
}
