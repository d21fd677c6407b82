/*
 * The run specification: one typed struct for everything a JSON model spec can say, and the
 * parser/validator that fills it. A single descriptor table (config.c) drives parsing, defaults,
 * range checks, `--set` overrides, the resolved-config table and `mokc help config`, so the
 * documentation and the checks cannot drift apart.
 */
#ifndef MOKC_CONFIG_H
#define MOKC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum scoring_func { SCORING_SOFTMAX, SCORING_SIGMOID };
enum lr_schedule { LR_COSINE, LR_LINEAR, LR_CONSTANT };
/* AdamW's moments: fp32, or rounded to bf16 after each update (half the optimizer's state bytes). */
enum optimizer_state { OPT_STATE_FP32, OPT_STATE_BF16 };
#define BF16_STATE_MAX_BETA 0.99 /* the largest beta1, beta2 with bf16 moments (config.c says why) */
enum backend_kind { BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA };
enum moe_impl { MOE_IMPL_AUTO, MOE_IMPL_MOK, MOE_IMPL_UNFUSED };

#define CONFIG_PATH_MAX 4096

typedef struct {
    int vocab_size;
    int hidden_size;
    int num_layers;
    int num_heads;
    int num_kv_heads;          /* 0 in JSON = num_heads */
    int head_dim;              /* 0 in JSON = hidden_size / num_heads */
    int max_seq_len;
    double rope_theta;
    double rms_norm_eps;
    bool tie_word_embeddings;
    int intermediate_size;     /* dense SwiGLU width */
    int first_k_dense_replace; /* the first this-many layers use the dense FFN */
} ModelConfig;

typedef struct {
    int num_experts;           /* 0 = no MoE: every layer dense */
    int num_experts_per_tok;   /* k */
    int moe_intermediate_size;
    int n_shared_experts;
    enum scoring_func scoring_func;
    bool norm_topk_prob;
    double routed_scaling_factor;
    double router_aux_loss_coef;
    double expert_bias_update_rate;
} MoeConfig;

typedef struct {
    int ep;
} ParallelConfig;

typedef struct {
    int seq_len;
    int micro_batch;
    int grad_accum;
    int steps;
    double lr;
    double min_lr;
    int warmup_steps;
    enum lr_schedule lr_schedule;
    double weight_decay;
    double beta1;
    double beta2;
    double eps;
    double grad_clip;          /* 0 = no clipping */
    enum optimizer_state optimizer_state;
    int64_t seed;
} TrainConfig;

typedef struct {
    char train[CONFIG_PATH_MAX];
    char val[CONFIG_PATH_MAX]; /* "" = no validation */
    int val_every;             /* steps; 0 = only at the end */
    int val_batches;           /* micro-batches per validation pass */
} DataConfig;

typedef struct {
    char dir[CONFIG_PATH_MAX]; /* "" = no checkpoints */
    int every;
    int keep;
    char resume[CONFIG_PATH_MAX]; /* "" = fresh start, "auto" = newest complete, else a path */
} CheckpointConfig;

typedef struct {
    char metrics_path[CONFIG_PATH_MAX]; /* "" = no metrics file */
    int every;
    int profile_step; /* 0 = none; else the step timed op by op on the GPU */
} LogConfig;

typedef struct {
    ModelConfig model;
    MoeConfig moe;
    ParallelConfig parallel;
    TrainConfig train;
    DataConfig data;
    CheckpointConfig checkpoint;
    LogConfig log;
    enum backend_kind backend;
    enum moe_impl moe_impl;
    char source[CONFIG_PATH_MAX]; /* the spec file it came from */
} MokcConfig;

/* Collected validation problems: every one is reported, then the caller exits 2. */
typedef struct {
    int count;
    char **messages;
} ConfigErrors;

/* Parses JSON text, applies `--set path=value` overrides (in order), fills defaults, validates.
 * Returns true if there were no errors; otherwise `errors` holds one message per problem, each
 * starting with the JSON path it is about. */
bool config_parse(const char *json_text, const char *const *overrides, int n_overrides,
                  MokcConfig *cfg, ConfigErrors *errors);
/* Reads the file, then config_parse. A file that cannot be read is one error. */
bool config_load(const char *path, const char *const *overrides, int n_overrides,
                 MokcConfig *cfg, ConfigErrors *errors);
void config_errors_free(ConfigErrors *errors);
void config_errors_print(const ConfigErrors *errors, const char *spec_path, FILE *out);

/* The resolved configuration as a two-column table (rank 0 prints it at start). */
void config_print_table(const MokcConfig *cfg, FILE *out);
/* The resolved configuration as JSON text (checkpoints and run records carry it). Caller frees. */
char *config_to_json(const MokcConfig *cfg);
/* Reference of every key: path, type, default, range/choices, meaning (`mokc help config`). */
void config_print_reference(FILE *out, bool markdown);

/* Derived sizes. */
static inline bool config_layer_is_moe(const MokcConfig *cfg, int layer) {
    return cfg->moe.num_experts > 0 && layer >= cfg->model.first_k_dense_replace;
}

#endif
