/*
 * The JSON model spec: every shipped spec parses, defaults/aliases/overrides resolve as documented,
 * each invalid spec is rejected with a message that names the offending JSON path and what would be
 * valid, all problems are reported at once, and the JSON/table/reference printers cover every key.
 * Specs are written with single quotes for readability; sq() turns them into JSON.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "test.h"

/* ---------- helpers ---------- */

/* 'a' -> "a": the specs below are C strings, and single quotes keep them legible. */
static char *sq(const char *text) {
    char *s = strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'') *p = '"';
    return s;
}

static bool parse_sq(const char *spec, const char *const *sets, int n_sets, MokcConfig *cfg, ConfigErrors *err) {
    char *json = sq(spec);
    bool ok = config_parse(json, sets, n_sets, cfg, err);
    free(json);
    return ok;
}

static char *join_errors(const ConfigErrors *err) {
    size_t n = 1;
    for (int i = 0; i < err->count; i++) n += strlen(err->messages[i]) + 3;
    char *s = calloc(n, 1);
    for (int i = 0; i < err->count; i++) {
        strcat(s, " | ");
        strcat(s, err->messages[i]);
    }
    return s;
}

/* Index of the message that starts with "path:" and contains `hint`, or -1. */
static int find_error(const ConfigErrors *err, const char *path, const char *hint) {
    size_t pl = strlen(path);
    for (int i = 0; i < err->count; i++) {
        const char *m = err->messages[i];
        if (strncmp(m, path, pl) == 0 && m[pl] == ':' && strstr(m + pl, hint)) return i;
    }
    return -1;
}

/* Parses `spec` (single-quoted JSON) with overrides; it must fail with a message about `path` that
 * contains `hint`, and with exactly `count` messages when count > 0. */
static void expect_error_at(const char *file, int line, const char *spec, const char *const *sets, int n_sets,
                            const char *path, const char *hint, int count) {
    MokcConfig cfg;
    ConfigErrors err;
    bool ok = parse_sq(spec, sets, n_sets, &cfg, &err);
    char *all = join_errors(&err);
    if (ok) test_fail(file, line, "spec was accepted, expected an error at %s: %s", path, spec);
    else if (find_error(&err, path, hint) < 0)
        test_fail(file, line, "no message starting with \"%s:\" and containing \"%s\"; got:%s", path, hint, all);
    else if (count > 0 && err.count != count)
        test_fail(file, line, "expected %d message(s), got %d:%s", count, err.count, all);
    for (int i = 0; i < err.count; i++)
        if (!err.messages[i] || !err.messages[i][0]) test_fail(file, line, "empty error message %d", i);
    free(all);
    config_errors_free(&err);
}
#define EXPECT_ERROR(spec, path, hint, count) expect_error_at(__FILE__, __LINE__, spec, NULL, 0, path, hint, count)
#define EXPECT_SET_ERROR(spec, set, path, hint, count)                                      \
    do {                                                                                    \
        const char *_sets[] = {set};                                                        \
        expect_error_at(__FILE__, __LINE__, spec, _sets, 1, path, hint, count);             \
    } while (0)

static void expect_ok_at(const char *file, int line, const char *spec, const char *const *sets, int n_sets,
                         MokcConfig *cfg) {
    ConfigErrors err;
    bool ok = parse_sq(spec, sets, n_sets, cfg, &err);
    if (!ok || err.count != 0) {
        char *all = join_errors(&err);
        test_fail(file, line, "spec rejected (%d messages):%s", err.count, all);
        free(all);
    }
    config_errors_free(&err);
}
#define EXPECT_OK(spec, cfg) expect_ok_at(__FILE__, __LINE__, spec, NULL, 0, cfg)

/* A dense model with only the required keys (plus intermediate_size, which dense layers need). */
#define DENSE_MODEL "'vocab_size':256,'hidden_size':64,'num_layers':2,'num_heads':4,'intermediate_size':128"
#define TRAIN_MIN "'train':{'seq_len':32,'steps':10}"
#define MINIMAL "{'model':{" DENSE_MODEL "}," TRAIN_MIN "}"
/* An MoE model: 4 experts, top-2, every layer MoE. */
#define MOE_MODEL "'vocab_size':256,'hidden_size':64,'num_layers':2,'num_heads':4"
#define MOE_MIN "'num_experts':4,'num_experts_per_tok':2,'moe_intermediate_size':32"
#define MOE_SPEC(model_extra, moe_extra, rest) \
    "{'model':{" MOE_MODEL model_extra "},'moe':{" MOE_MIN moe_extra "}," TRAIN_MIN rest "}"
#define DENSE_SPEC(model_extra, train_extra, rest) \
    "{'model':{" DENSE_MODEL model_extra "},'train':{'seq_len':32,'steps':10" train_extra "}" rest "}"

/* ---------- valid specs ---------- */

static void shipped_specs_parse(void) {
    glob_t g;
    int rc = glob("configs/*.json", 0, NULL, &g);
    CHECK_MSG(rc == 0 && g.gl_pathc >= 1, "no configs/*.json found (tests run from the repository root)");
    if (rc != 0) return;
    bool saw_tiny = false;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        saw_tiny |= strcmp(path, "configs/tiny.json") == 0;
        MokcConfig cfg;
        ConfigErrors err;
        bool ok = config_load(path, NULL, 0, &cfg, &err);
        char *all = join_errors(&err);
        CHECK_MSG(ok && err.count == 0, "%s rejected:%s", path, all);
        CHECK_MSG(strcmp(cfg.source, path) == 0, "%s: source = '%s'", path, cfg.source);
        /* Resolved values are always concrete. */
        CHECK_MSG(cfg.model.num_kv_heads > 0 && cfg.model.head_dim > 0, "%s: kv_heads/head_dim not resolved", path);
        free(all);
        config_errors_free(&err);
    }
    CHECK(saw_tiny);
    globfree(&g);
}

/* A value of configs/tiny.json read straight from the file (NAN if absent), to compare the struct
 * against without hard-coding numbers that may be retuned. */
static double file_num(const cJSON *root, const char *section, const char *key) {
    const cJSON *sec = section ? cJSON_GetObjectItemCaseSensitive(root, section) : root;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sec, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static const char *file_str(const cJSON *root, const char *section, const char *key) {
    const cJSON *sec = section ? cJSON_GetObjectItemCaseSensitive(root, section) : root;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sec, key);
    return cJSON_IsString(v) ? v->valuestring : "(absent)";
}

static void tiny_resolved_values(void) {
    MokcConfig c;
    ConfigErrors err;
    bool ok = config_load("configs/tiny.json", NULL, 0, &c, &err);
    CHECK(ok);
    config_errors_free(&err);
    FILE *f = fopen("configs/tiny.json", "rb");
    char *text = f ? calloc(1 << 20, 1) : NULL;
    if (f) {
        size_t got = fread(text, 1, (1 << 20) - 1, f);
        (void)got;
        fclose(f);
    }
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(j != NULL);
    if (!ok || !j) {
        cJSON_Delete(j);
        return;
    }
    /* What the issue asks of tiny.json: byte vocabulary, a few layers, >= 8 experts, top-2, one
     * shared expert, one dense first layer, CPU-sized. */
    CHECK_EQ_INT(c.model.vocab_size, 256);
    CHECK(c.model.num_layers >= 2 && c.model.num_layers <= 8);
    CHECK(c.moe.num_experts >= 8);
    CHECK_EQ_INT(c.moe.num_experts_per_tok, 2);
    CHECK_EQ_INT(c.moe.n_shared_experts, 1);
    CHECK_EQ_INT(c.model.first_k_dense_replace, 1);
    CHECK(c.model.intermediate_size > 0);
    CHECK(config_layer_is_moe(&c, 1) && !config_layer_is_moe(&c, 0));
    CHECK(c.model.hidden_size <= 512);
    /* Every value the file gives is in the struct. */
    CHECK_NEAR(c.model.hidden_size, file_num(j, "model", "hidden_size"), 0);
    CHECK_NEAR(c.model.num_layers, file_num(j, "model", "num_layers"), 0);
    CHECK_NEAR(c.model.num_heads, file_num(j, "model", "num_heads"), 0);
    CHECK_NEAR(c.model.max_seq_len, file_num(j, "model", "max_seq_len"), 0);
    CHECK_NEAR(c.model.intermediate_size, file_num(j, "model", "intermediate_size"), 0);
    CHECK_NEAR(c.model.tie_word_embeddings, file_num(j, "model", "tie_word_embeddings"), 0);
    CHECK_NEAR(c.model.rope_theta, file_num(j, "model", "rope_theta"), 0);
    CHECK_NEAR(c.model.rms_norm_eps, file_num(j, "model", "rms_norm_eps"), 0);
    CHECK_NEAR(c.moe.num_experts, file_num(j, "moe", "num_experts"), 0);
    CHECK_NEAR(c.moe.moe_intermediate_size, file_num(j, "moe", "moe_intermediate_size"), 0);
    CHECK_NEAR(c.moe.norm_topk_prob, file_num(j, "moe", "norm_topk_prob"), 0);
    CHECK_NEAR(c.moe.router_aux_loss_coef, file_num(j, "moe", "router_aux_loss_coef"), 0);
    CHECK_NEAR(c.moe.expert_bias_update_rate, file_num(j, "moe", "expert_bias_update_rate"), 0);
    CHECK(strcmp(file_str(j, "moe", "scoring_func"), c.moe.scoring_func == SCORING_SOFTMAX ? "softmax" : "sigmoid") == 0);
    CHECK_EQ_INT(c.parallel.ep, 1);
    CHECK_NEAR(c.train.seq_len, file_num(j, "train", "seq_len"), 0);
    CHECK_NEAR(c.train.micro_batch, file_num(j, "train", "micro_batch"), 0);
    CHECK_NEAR(c.train.steps, file_num(j, "train", "steps"), 0);
    CHECK_NEAR(c.train.warmup_steps, file_num(j, "train", "warmup_steps"), 0);
    CHECK_NEAR(c.train.lr, file_num(j, "train", "lr"), 0);
    CHECK_NEAR(c.train.min_lr, file_num(j, "train", "min_lr"), 0);
    CHECK_NEAR(c.train.beta2, file_num(j, "train", "beta2"), 0);
    CHECK_NEAR(c.train.eps, file_num(j, "train", "eps"), 0);
    CHECK_NEAR(c.train.seed, file_num(j, "train", "seed"), 0);
    CHECK(strcmp(c.data.train, file_str(j, "data", "train")) == 0);
    CHECK(strcmp(c.data.val, file_str(j, "data", "val")) == 0);
    CHECK_NEAR(c.data.val_every, file_num(j, "data", "val_every"), 0);
    CHECK_NEAR(c.log.every, file_num(j, "log", "every"), 0);
    CHECK(strcmp(c.source, "configs/tiny.json") == 0);
    /* Derived values: 0 or absent in the file means "from the other keys". */
    double kv = file_num(j, "model", "num_kv_heads"), hd = file_num(j, "model", "head_dim");
    CHECK_NEAR(c.model.num_kv_heads, isnan(kv) || kv == 0 ? c.model.num_heads : kv, 0);
    CHECK_NEAR(c.model.head_dim, isnan(hd) || hd == 0 ? c.model.hidden_size / c.model.num_heads : hd, 0);
    CHECK(c.model.num_kv_heads < c.model.num_heads); /* tiny exercises grouped-query attention */
    CHECK_EQ_INT(c.model.num_heads % c.model.num_kv_heads, 0);
    cJSON_Delete(j);
}

static void defaults_applied(void) {
    MokcConfig c;
    EXPECT_OK(MINIMAL, &c);
    CHECK_EQ_INT(c.model.num_kv_heads, 4); /* = num_heads */
    CHECK_EQ_INT(c.model.head_dim, 16);    /* = 64 / 4 */
    CHECK_EQ_INT(c.model.max_seq_len, 2048);
    CHECK_NEAR(c.model.rope_theta, 10000.0, 0);
    CHECK_NEAR(c.model.rms_norm_eps, 1e-6, 0);
    CHECK(!c.model.tie_word_embeddings);
    CHECK_EQ_INT(c.model.first_k_dense_replace, 0);
    CHECK_EQ_INT(c.moe.num_experts, 0);
    CHECK_EQ_INT(c.moe.num_experts_per_tok, 0);
    CHECK_EQ_INT(c.moe.n_shared_experts, 0);
    CHECK_EQ_INT(c.moe.scoring_func, SCORING_SOFTMAX);
    CHECK(c.moe.norm_topk_prob);
    CHECK_NEAR(c.moe.routed_scaling_factor, 1.0, 0);
    CHECK_NEAR(c.moe.router_aux_loss_coef, 0.0, 0);
    CHECK_NEAR(c.moe.expert_bias_update_rate, 0.0, 0);
    CHECK_EQ_INT(c.parallel.ep, 1);
    CHECK_EQ_INT(c.train.micro_batch, 1);
    CHECK_EQ_INT(c.train.grad_accum, 1);
    CHECK_NEAR(c.train.lr, 3e-4, 0);
    CHECK_NEAR(c.train.min_lr, 0.0, 0);
    CHECK_EQ_INT(c.train.warmup_steps, 0);
    CHECK_EQ_INT(c.train.lr_schedule, LR_COSINE);
    CHECK_EQ_INT(c.train.optimizer_state, OPT_STATE_FP32);
    CHECK_NEAR(c.train.weight_decay, 0.1, 0);
    CHECK_NEAR(c.train.beta1, 0.9, 0);
    CHECK_NEAR(c.train.beta2, 0.95, 0);
    CHECK_NEAR(c.train.eps, 1e-8, 0);
    CHECK_NEAR(c.train.grad_clip, 1.0, 0);
    CHECK_EQ_INT(c.train.seed, 1234);
    CHECK(c.data.train[0] == 0 && c.data.val[0] == 0);
    CHECK_EQ_INT(c.data.val_every, 0);
    CHECK_EQ_INT(c.data.val_batches, 8);
    CHECK(c.checkpoint.dir[0] == 0 && c.checkpoint.resume[0] == 0);
    CHECK_EQ_INT(c.checkpoint.every, 0);
    CHECK_EQ_INT(c.checkpoint.keep, 3);
    CHECK_MSG(strcmp(c.log.metrics_path, "auto") == 0, "log.metrics_path defaults to '%s'", c.log.metrics_path);
    CHECK_EQ_INT(c.log.every, 1);
    CHECK_EQ_INT(c.backend, BACKEND_AUTO);
    CHECK_EQ_INT(c.moe_impl, MOE_IMPL_AUTO);
    CHECK(c.source[0] == 0);
    CHECK(!config_layer_is_moe(&c, 0));

    /* An explicit head_dim is kept even when hidden_size != heads x head_dim (decoupled heads). */
    EXPECT_OK(DENSE_SPEC(",'head_dim':32,'num_kv_heads':2", "", ""), &c);
    CHECK_EQ_INT(c.model.head_dim, 32);
    CHECK_EQ_INT(c.model.num_kv_heads, 2);
    /* MoE without any dense layer needs no intermediate_size. */
    EXPECT_OK(MOE_SPEC("", "", ""), &c);
    CHECK_EQ_INT(c.moe.num_experts, 4);
    CHECK_EQ_INT(c.model.intermediate_size, 0);
    CHECK(config_layer_is_moe(&c, 0) && config_layer_is_moe(&c, 1));
}

static void aliases_for_num_experts(void) {
    MokcConfig c;
    const char *mixtral = "{'model':{" MOE_MODEL "},'moe':{'num_local_experts':8,'num_experts_per_tok':2,"
                          "'moe_intermediate_size':32}," TRAIN_MIN "}";
    EXPECT_OK(mixtral, &c);
    CHECK_EQ_INT(c.moe.num_experts, 8);
    const char *deepseek = "{'model':{" MOE_MODEL "},'moe':{'n_routed_experts':16,'num_experts_per_tok':2,"
                           "'moe_intermediate_size':32}," TRAIN_MIN "}";
    EXPECT_OK(deepseek, &c);
    CHECK_EQ_INT(c.moe.num_experts, 16);
    /* Two names for one key is an error, whichever pair. */
    EXPECT_ERROR(MOE_SPEC("", ",'n_routed_experts':4", ""), "moe.n_routed_experts", "moe.num_experts", 1);
    EXPECT_ERROR("{'model':{" MOE_MODEL "},'moe':{'num_local_experts':4,'n_routed_experts':4,"
                 "'num_experts_per_tok':2,'moe_intermediate_size':32}," TRAIN_MIN "}",
                 "moe.n_routed_experts", "twice", 1);
    /* An override of the canonical name replaces the alias instead of colliding with it. */
    const char *set16[] = {"moe.num_experts=16"};
    char *json = sq(deepseek);
    ConfigErrors err;
    bool ok = config_parse(json, set16, 1, &c, &err);
    char *all = join_errors(&err);
    CHECK_MSG(ok, "--set moe.num_experts on an n_routed_experts spec:%s", all);
    CHECK_EQ_INT(c.moe.num_experts, 16);
    free(all);
    free(json);
    config_errors_free(&err);
    const char *set_alias[] = {"moe.num_local_experts=4"};
    expect_ok_at(__FILE__, __LINE__, MOE_SPEC("", "", ""), set_alias, 1, &c);
    CHECK_EQ_INT(c.moe.num_experts, 4);
}

static void set_overrides(void) {
    MokcConfig c;
    /* numbers, booleans, enums and plain strings without quotes; later overrides win */
    const char *sets[] = {"train.steps=7", "train.lr=0.01", "model.tie_word_embeddings=true",
                          "data.train=data/x.h5", "train.lr_schedule=linear", "backend=cpu",
                          "train.steps=5", "data.val=\"quoted.h5\"", "train.seed=42", "train.optimizer_state=bf16"};
    expect_ok_at(__FILE__, __LINE__, MINIMAL, sets, 10, &c);
    CHECK_EQ_INT(c.train.steps, 5);
    CHECK_NEAR(c.train.lr, 0.01, 0);
    CHECK(c.model.tie_word_embeddings);
    CHECK_MSG(strcmp(c.data.train, "data/x.h5") == 0, "data.train = '%s'", c.data.train);
    CHECK_MSG(strcmp(c.data.val, "quoted.h5") == 0, "data.val = '%s'", c.data.val);
    CHECK_EQ_INT(c.train.lr_schedule, LR_LINEAR);
    CHECK_EQ_INT(c.backend, BACKEND_CPU);
    CHECK_EQ_INT(c.train.seed, 42);
    CHECK_EQ_INT(c.train.optimizer_state, OPT_STATE_BF16);

    /* A value that merely starts like JSON is still a plain string. */
    const char *paths[] = {"data.train=2024.h5", "data.val=true_val.h5", "log.metrics_path=null-run.jsonl"};
    expect_ok_at(__FILE__, __LINE__, MINIMAL, paths, 3, &c);
    CHECK_MSG(strcmp(c.data.train, "2024.h5") == 0, "data.train = '%s'", c.data.train);
    CHECK_MSG(strcmp(c.data.val, "true_val.h5") == 0, "data.val = '%s'", c.data.val);
    CHECK_MSG(strcmp(c.log.metrics_path, "null-run.jsonl") == 0, "log.metrics_path = '%s'", c.log.metrics_path);
    /* ... but a complete JSON number is a number, so a numeric directory name needs quotes. */
    EXPECT_SET_ERROR(MINIMAL, "checkpoint.dir=1e3", "checkpoint.dir", "expected a string", 1);

    /* Creating a section the spec does not have. */
    const char *mk[] = {"checkpoint.dir=ck", "checkpoint.every=5", "moe.num_experts=4",
                        "moe.num_experts_per_tok=1", "moe.moe_intermediate_size=16"};
    expect_ok_at(__FILE__, __LINE__, MINIMAL, mk, 5, &c);
    CHECK(strcmp(c.checkpoint.dir, "ck") == 0);
    CHECK_EQ_INT(c.checkpoint.every, 5);
    CHECK_EQ_INT(c.moe.num_experts, 4);
    CHECK_EQ_INT(c.moe.num_experts_per_tok, 1);

    /* Overrides that introduce problems are reported with the key's path. */
    EXPECT_SET_ERROR(MINIMAL, "train.lr=-1", "train.lr", "valid: 0..10", 1);
    EXPECT_SET_ERROR(MINIMAL, "train.steps=many", "train.steps", "expected an integer, got a string", 1);
    EXPECT_SET_ERROR(MINIMAL, "model.hiden_size=3", "model.hiden_size", "did you mean 'model.hidden_size'", 1);
    EXPECT_SET_ERROR(MINIMAL, "train.warmup_steps=11", "train.warmup_steps", "train.steps = 10", 1);
    EXPECT_SET_ERROR(MINIMAL, "log.profile_step=11", "log.profile_step", "past train.steps = 10", 1);
    EXPECT_SET_ERROR(MINIMAL, "log.profile_step=-1", "log.profile_step", "valid: >= 0", 1);
    EXPECT_SET_ERROR(MINIMAL, "parallel.ep=2", "parallel.ep", "ep = 1", 1);
    EXPECT_SET_ERROR(MINIMAL, "model.tie_word_embeddings=1", "model.tie_word_embeddings", "true or false", 1);
    /* Malformed --set arguments. */
    EXPECT_SET_ERROR(MINIMAL, "train.steps", "--set train.steps", "key.path=value", 1);
    EXPECT_SET_ERROR(MINIMAL, "=5", "--set =5", "key.path=value", 1);
}

static void comments_ignored(void) {
    MokcConfig c;
    EXPECT_OK("{'_comment':'top','model':{'_comment':'in a section','_note':{'any':[1,2]}," DENSE_MODEL "},"
              "'train':{'seq_len':32,'steps':10,'_why':3}}", &c);
    CHECK_EQ_INT(c.model.hidden_size, 64);
    CHECK_EQ_INT(c.train.steps, 10);
}

/* ---------- invalid specs: each names its path and what is valid ---------- */

static void unknown_keys(void) {
    /* did-you-mean inside a section; the misspelt key also leaves the real one missing */
    EXPECT_ERROR("{'model':{'vocab_size':256,'hiden_size':64,'num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.hiden_size", "did you mean 'model.hidden_size'", 2);
    EXPECT_ERROR("{'model':{'vocab_size':256,'hiden_size':64,'num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.hidden_size", "required", 2);
    EXPECT_ERROR(MOE_SPEC("", ",'scoring_fn':'sigmoid'", ""), "moe.scoring_fn", "moe.scoring_func", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'warmup':5", ""), "train.warmup", "did you mean 'train.warmup_steps'", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'log':{'metrics':'m.jsonl'}"), "log.metrics", "did you mean 'log.metrics_path'", 1);
    /* unknown top-level section, with a suggestion */
    EXPECT_ERROR(DENSE_SPEC("", "", ",'chekpoint':{'dir':'x'}"), "chekpoint", "did you mean 'checkpoint'", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'backnd':'cpu'"), "backnd", "did you mean 'backend'", 1);
    /* the right key in the wrong place */
    EXPECT_ERROR(DENSE_SPEC("", "", ",'ep':2"), "ep", "parallel.ep", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'val_every':5", ""), "train.val_every", "data.val_every", 1);
    /* nothing close: the valid keys are listed */
    EXPECT_ERROR(DENSE_SPEC(",'colour':'blue'", "", ""), "model.colour", "num_kv_heads", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'optimizer':{}"), "optimizer", "checkpoint", 1);
}

static void wrong_types(void) {
    EXPECT_ERROR("{'model':{'vocab_size':256,'hidden_size':'64','num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.hidden_size", "expected an integer, got a string", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'micro_batch':2.5", ""), "train.micro_batch", "expected an integer", 1);
    EXPECT_ERROR(DENSE_SPEC(",'tie_word_embeddings':1", "", ""), "model.tie_word_embeddings", "true or false", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'data':{'train':{'path':'x.h5'}}"), "data.train", "expected a string, got an object", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'lr':'3e-4'", ""), "train.lr", "expected a number, got a string", 1);
    EXPECT_ERROR(DENSE_SPEC(",'rope_theta':null", "", ""), "model.rope_theta", "got null", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'log':{'every':[10]}"), "log.every", "got an array", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'lr_schedule':1", ""), "train.lr_schedule", "\"cosine\", \"linear\", \"constant\"", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'seed':1.5", ""), "train.seed", "expected an integer", 1);
}

static void out_of_range(void) {
    EXPECT_ERROR(DENSE_SPEC("", ",'warmup_steps':-1", ""), "train.warmup_steps", "valid: >= 0", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'micro_batch':0", ""), "train.micro_batch", "valid: >= 1", 1);
    EXPECT_ERROR("{'model':{" DENSE_MODEL "},'train':{'seq_len':32,'steps':0}}", "train.steps", "valid: >= 1", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'beta1':1", ""), "train.beta1", "valid: 0..", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'beta2':1.0", ""), "train.beta2", "valid: 0..", 1);
    EXPECT_ERROR(DENSE_SPEC(",'rms_norm_eps':0", "", ""), "model.rms_norm_eps", "valid: 1e-12..1", 1);
    EXPECT_ERROR(DENSE_SPEC(",'rope_theta':0.5", "", ""), "model.rope_theta", "valid: 1..", 1);
    EXPECT_ERROR("{'model':{'vocab_size':1,'hidden_size':64,'num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.vocab_size", "valid: >= 2", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'seed':-3", ""), "train.seed", "valid: 0..", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'lr':1e999", ""), "train.lr", "out of range", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'checkpoint':{'keep':0}"), "checkpoint.keep", "valid: >= 1", 1);
    EXPECT_ERROR(MOE_SPEC("", ",'n_shared_experts':-1", ""), "moe.n_shared_experts", "valid: 0..1024", 1);
}

static void bad_choices(void) {
    EXPECT_ERROR(MOE_SPEC("", ",'scoring_func':'relu'", ""), "moe.scoring_func", "\"softmax\", \"sigmoid\"", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'lr_schedule':'cosine_with_restarts'", ""), "train.lr_schedule", "\"constant\"", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'backend':'gpu'"), "backend", "\"auto\", \"cpu\", \"cuda\"", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'moe_impl':'fused'"), "moe_impl", "\"mok\", \"unfused\"", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'backend':'CPU'"), "backend", "\"cpu\"", 1); /* case matters */
}

static void inconsistent_shapes(void) {
    /* num_experts % ep */
    EXPECT_ERROR("{'model':{" MOE_MODEL "},'moe':{'num_experts':6,'num_experts_per_tok':2,'moe_intermediate_size':32},"
                 "'parallel':{'ep':4}," TRAIN_MIN "}", "parallel.ep", "divisor of 6", 1);
    /* num_kv_heads must divide num_heads */
    EXPECT_ERROR(DENSE_SPEC(",'num_kv_heads':3", "", ""), "model.num_kv_heads", "divisor of 4", 1);
    /* hidden_size not divisible by num_heads and no head_dim */
    EXPECT_ERROR("{'model':{'vocab_size':256,'hidden_size':66,'num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.hidden_size", "model.head_dim", 1);
    /* odd head_dim, explicit or derived */
    EXPECT_ERROR(DENSE_SPEC(",'head_dim':15", "", ""), "model.head_dim", "even", 1);
    EXPECT_ERROR("{'model':{'vocab_size':256,'hidden_size':60,'num_layers':2,'num_heads':4,'intermediate_size':128},"
                 TRAIN_MIN "}", "model.head_dim", "even", 1);
    /* k > num_experts, k = 0 with experts */
    EXPECT_ERROR("{'model':{" MOE_MODEL "},'moe':{'num_experts':4,'num_experts_per_tok':5,'moe_intermediate_size':32},"
                 TRAIN_MIN "}", "moe.num_experts_per_tok", "valid: 1..4", 1);
    EXPECT_ERROR("{'model':{" MOE_MODEL "},'moe':{'num_experts':4,'moe_intermediate_size':32}," TRAIN_MIN "}",
                 "moe.num_experts_per_tok", "valid: 1..4", 1);
    /* k without experts */
    EXPECT_ERROR(DENSE_SPEC("", "", ",'moe':{'num_experts_per_tok':2}"), "moe.num_experts_per_tok", "moe.num_experts is 0", 1);
    /* experts without their width */
    EXPECT_ERROR("{'model':{" MOE_MODEL "},'moe':{'num_experts':4,'num_experts_per_tok':2}," TRAIN_MIN "}",
                 "moe.moe_intermediate_size", "required", 1);
    /* first_k_dense_replace > num_layers */
    EXPECT_ERROR(MOE_SPEC(",'first_k_dense_replace':3,'intermediate_size':128", "", ""),
                 "model.first_k_dense_replace", "valid: 0..2", 1);
    /* dense layers without intermediate_size: a dense model, or first_k_dense_replace > 0 */
    EXPECT_ERROR("{'model':{" MOE_MODEL "}," TRAIN_MIN "}", "model.intermediate_size", "no experts", 1);
    EXPECT_ERROR(MOE_SPEC(",'first_k_dense_replace':1", "", ""), "model.intermediate_size", "first_k_dense_replace", 1);
    /* expert widths on a dense model */
    EXPECT_ERROR(DENSE_SPEC("", "", ",'moe':{'moe_intermediate_size':64}"), "moe.moe_intermediate_size",
                 "moe.num_experts is 0", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'moe':{'n_shared_experts':1}"), "moe.n_shared_experts", "moe.num_experts is 0", 1);
    /* ep > 1 without experts */
    EXPECT_ERROR(DENSE_SPEC("", "", ",'parallel':{'ep':2}"), "parallel.ep", "use ep = 1", 1);
}

static void inconsistent_training(void) {
    EXPECT_ERROR(DENSE_SPEC(",'max_seq_len':16", "", ""), "train.seq_len", "model.max_seq_len = 16", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'lr':0.001,'min_lr':0.01", ""), "train.min_lr", "valid: 0..0.001", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'warmup_steps':11", ""), "train.warmup_steps", "valid: 0..10", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'checkpoint':{'every':5}"), "checkpoint.every", "checkpoint.dir", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'checkpoint':{'resume':'auto'}"), "checkpoint.resume", "checkpoint.dir", 1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'data':{'train':'x.h5','val_every':5}"), "data.val_every", "data.val", 1);
    /* bf16 moments cannot follow a beta this close to 1 */
    EXPECT_ERROR(DENSE_SPEC("", ",'optimizer_state':'bf16','beta2':0.999", ""), "train.optimizer_state",
                 "train.beta2 = 0.999", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'optimizer_state':'bf16','beta1':0.995", ""), "train.optimizer_state",
                 "beta2 <= 0.99", 1);
    EXPECT_ERROR(DENSE_SPEC("", ",'optimizer_state':'fp16'", ""), "train.optimizer_state", "\"fp32\", \"bf16\"", 1);
}

static void missing_required(void) {
    EXPECT_ERROR("{'model':{'hidden_size':64,'num_layers':2,'num_heads':4,'intermediate_size':128}," TRAIN_MIN "}",
                 "model.vocab_size", "required", 1);
    EXPECT_ERROR("{'model':{" DENSE_MODEL "}}", "train.seq_len", "required", 2);
    EXPECT_ERROR("{'model':{" DENSE_MODEL "}}", "train.steps", "required", 2);
    /* An empty object: every required key, each by path, and the dense model's missing width
     * (the cross-key checks still run on the keys that are sound). */
    const char *req[] = {"model.vocab_size", "model.hidden_size", "model.num_layers", "model.num_heads",
                         "train.seq_len", "train.steps", "model.intermediate_size"};
    for (int i = 0; i < 7; i++) EXPECT_ERROR("{}", req[i], "required", 7);
}

static void malformed_documents(void) {
    /* not JSON: the message has the line and column */
    EXPECT_ERROR("{\n  'model': {\n    'vocab_size': 256\n    'hidden_size': 64\n  }\n}", "(file)", "line 4", 1);
    EXPECT_ERROR("{\n  'model': {\n    'vocab_size': 256\n    'hidden_size': 64\n  }\n}", "(file)", "column", 1);
    EXPECT_ERROR("{'model':{'vocab_size':256,}}", "(file)", "not valid JSON", 1); /* trailing comma */
    EXPECT_ERROR("", "(file)", "the spec is empty", 1);
    EXPECT_ERROR(" \n\t", "(file)", "the spec is empty", 1);
    EXPECT_ERROR(MINIMAL " trailing", "(file)", "not valid JSON", 1);
    /* top level not an object */
    EXPECT_ERROR("[1,2,3]", "(file)", "must be a JSON object, got an array", 1);
    EXPECT_ERROR("'spec.json'", "(file)", "must be a JSON object, got a string", 1);
    /* a dotted key at the top level is not a shortcut for its section */
    EXPECT_ERROR("{'model.hidden_size':64,'model':{" DENSE_MODEL "}," TRAIN_MIN "}", "model.hidden_size",
                 "keys live inside their section", 1);
    /* a section that is not an object */
    EXPECT_ERROR("{'model':5," TRAIN_MIN "}", "model", "expected an object", -1);
    EXPECT_ERROR("{'model':{" DENSE_MODEL "},'train':[32,10]}", "train", "expected an object", -1);
    EXPECT_ERROR(DENSE_SPEC("", "", ",'parallel':'ep=2'"), "parallel", "expected an object", 1);
    /* --set into a section that is not an object */
    EXPECT_SET_ERROR(DENSE_SPEC("", "", ",'log':3"), "log.every=2", "--set log.every", "not a section", -1);
}

/* ---------- all errors at once ---------- */

static void expect_all(const char *spec, const char *const *paths, int n) {
    MokcConfig c;
    ConfigErrors err;
    bool ok = parse_sq(spec, NULL, 0, &c, &err);
    char *all = join_errors(&err);
    CHECK(!ok);
    CHECK_MSG(err.count >= n, "expected >= %d messages, got %d:%s", n, err.count, all);
    for (int i = 0; i < n; i++) CHECK_MSG(find_error(&err, paths[i], "") >= 0, "no message for %s:%s", paths[i], all);
    free(all);
    config_errors_free(&err);
}

static void all_errors_reported(void) {
    /* independent per-key problems: type, range, choice, unknown key, missing key */
    const char *p1[] = {"model.hidden_size", "train.beta1", "backend", "log.evry", "train.steps"};
    expect_all("{'model':{'vocab_size':256,'hidden_size':'64','num_layers':2,'num_heads':4,'intermediate_size':128},"
               "'train':{'seq_len':32,'beta1':1.5},'backend':'gpu','log':{'evry':3}}", p1, 5);
    /* independent consistency problems */
    const char *p2[] = {"model.num_kv_heads", "train.warmup_steps", "data.val_every", "checkpoint.every"};
    expect_all(DENSE_SPEC(",'num_kv_heads':3", ",'warmup_steps':20",
                          ",'data':{'val_every':5},'checkpoint':{'every':2}"), p2, 4);
    /* mixed: per-key problems and consistency problems between other, sound keys, in one run */
    const char *p3[] = {"model.hiden_size", "train.beta1", "train.warmup_steps", "model.num_kv_heads"};
    expect_all(DENSE_SPEC(",'hiden_size':8,'num_kv_heads':3", ",'warmup_steps':20,'beta1':2", ""), p3, 4);
    /* the same through config_errors_print: a count line, one line per problem, a hint */
    MokcConfig c;
    ConfigErrors err;
    parse_sq(DENSE_SPEC(",'num_kv_heads':3", ",'warmup_steps':20", ",'data':{'val_every':5}"), NULL, 0, &c, &err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_errors_print(&err, "bad.json", f);
    fclose(f);
    CHECK_STR_CONTAINS(buf, "3 problems in bad.json");
    CHECK_STR_CONTAINS(buf, "\n  model.num_kv_heads: ");
    CHECK_STR_CONTAINS(buf, "\n  train.warmup_steps: ");
    CHECK_STR_CONTAINS(buf, "\n  data.val_every: ");
    CHECK_STR_CONTAINS(buf, "mokc help config");
    free(buf);
    config_errors_free(&err);
}

/* ---------- printing ---------- */

static void to_json_round_trip(void) {
    const char *specs[] = {
        MINIMAL,
        MOE_SPEC(",'first_k_dense_replace':1,'intermediate_size':96,'num_kv_heads':2,'tie_word_embeddings':true",
                 ",'scoring_func':'sigmoid','norm_topk_prob':false,'routed_scaling_factor':2.5,"
                 "'expert_bias_update_rate':0.001,'n_shared_experts':2",
                 ",'parallel':{'ep':2},'data':{'train':'d.h5','val':'v.h5','val_every':3},"
                 "'checkpoint':{'dir':'ck','every':4,'resume':'auto'},'log':{'metrics_path':'m.jsonl'},"
                 "'backend':'cpu','moe_impl':'unfused'"),
    };
    for (int s = 0; s < 2; s++) {
        MokcConfig a, b;
        ConfigErrors err;
        bool ok = parse_sq(specs[s], NULL, 0, &a, &err);
        char *all = join_errors(&err);
        CHECK_MSG(ok, "spec %d rejected:%s", s, all);
        free(all);
        config_errors_free(&err);
        if (!ok) continue;
        a.train.seed = 9007199254740991LL; /* the largest seed JSON numbers carry exactly */
        a.train.lr = 0.1 + 0.2;            /* a double that needs 17 digits */
        snprintf(a.data.train, sizeof a.data.train, "we\"ird\\path\n\tünï.h5"); /* escapes survive */
        snprintf(a.source, sizeof a.source, "spec%d.json", s);
        char *text = config_to_json(&a);
        CHECK(text != NULL);
        if (!text) continue;
        ok = config_parse(text, NULL, 0, &b, &err);
        all = join_errors(&err);
        CHECK_MSG(ok, "to_json output rejected:%s\n%s", all, text);
        free(all);
        config_errors_free(&err);
        memset(a.source, 0, sizeof a.source);
        memset(b.source, 0, sizeof b.source);
        CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "round trip of spec %d differs:\n%s", s, text);
        CHECK_EQ_INT(b.train.seed, 9007199254740991LL);
        CHECK(b.train.lr == 0.1 + 0.2);
        free(text);
    }
}

static char *capture_reference(bool markdown) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_reference(f, markdown);
    fclose(f);
    return buf;
}

static const char *const spot_paths[] = {
    "model.vocab_size", "model.num_kv_heads", "model.head_dim", "model.first_k_dense_replace",
    "moe.num_experts", "moe.num_experts_per_tok", "moe.scoring_func", "moe.expert_bias_update_rate",
    "parallel.ep", "train.seq_len", "train.lr_schedule", "train.beta2", "train.seed", "data.train",
    "data.val_every", "checkpoint.dir", "checkpoint.resume", "log.metrics_path", "log.every", "backend", "moe_impl",
};
#define N_SPOT ((int)(sizeof(spot_paths) / sizeof(spot_paths[0])))

/* Every key the round-trip JSON has (the struct's full set) must also be in `text`. */
static void check_mentions_every_key(const char *text, const char *what) {
    MokcConfig c;
    ConfigErrors err;
    parse_sq(MINIMAL, NULL, 0, &c, &err);
    config_errors_free(&err);
    char *json = config_to_json(&c);
    int keys = 0;
    /* Walk the "name": occurrences of the printed JSON, tracking the section we are in. */
    char section[128] = "";
    for (const char *p = json; p && *p; p++) {
        if (*p == '}') section[0] = 0;
        if (*p != '"') continue;
        const char *q = strchr(p + 1, '"');
        if (!q) break;
        const char *after = q + 1;
        while (*after == ' ' || *after == '\t') after++;
        if (*after == ':') {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(q - p - 1), p + 1);
            const char *v = after + 1;
            while (*v == ' ' || *v == '\t') v++;
            if (*v == '{') snprintf(section, sizeof section, "%s", name);
            else {
                char full[300];
                snprintf(full, sizeof full, "%s%s%s", section, section[0] ? "." : "", name);
                keys++;
                CHECK_MSG(strstr(text, full) != NULL, "%s does not mention %s", what, full);
            }
        }
        p = q;
    }
    CHECK_MSG(keys >= 45, "only %d keys found in config_to_json output", keys);
    free(json);
}

static void reference_lists_every_key(void) {
    char *plain = capture_reference(false);
    char *md = capture_reference(true);
    for (int i = 0; i < N_SPOT; i++) {
        CHECK_STR_CONTAINS(plain, spot_paths[i]);
        char quoted[128];
        snprintf(quoted, sizeof quoted, "`%s`", spot_paths[i]);
        CHECK_STR_CONTAINS(md, quoted);
    }
    check_mentions_every_key(plain, "config_print_reference");
    check_mentions_every_key(md, "config_print_reference(markdown)");
    /* types, defaults, ranges, choices, aliases */
    CHECK_STR_CONTAINS(plain, "required");
    CHECK_STR_CONTAINS(plain, "\"softmax\", \"sigmoid\"");
    CHECK_STR_CONTAINS(plain, "\"cosine\", \"linear\", \"constant\"");
    CHECK_STR_CONTAINS(plain, "num_local_experts");
    CHECK_STR_CONTAINS(plain, "n_routed_experts");
    CHECK_STR_CONTAINS(md, "| key | type | default |");
    free(plain);
    free(md);
}

static void table_lists_every_key(void) {
    MokcConfig c;
    ConfigErrors err;
    bool ok = config_load("configs/tiny.json", NULL, 0, &c, &err);
    config_errors_free(&err);
    CHECK(ok);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_table(&c, f);
    fclose(f);
    for (int i = 0; i < N_SPOT; i++) CHECK_STR_CONTAINS(buf, spot_paths[i]);
    check_mentions_every_key(buf, "config_print_table");
    CHECK_STR_CONTAINS(buf, "configs/tiny.json");
    const char *line = strstr(buf, "| model.head_dim ");
    CHECK_MSG(line && strncmp(strchr(line + 1, '|'), "| 32 ", 5) == 0, "head_dim row: %.80s", line ? line : "(none)");
    CHECK_STR_CONTAINS(buf, "\"softmax\"");
    CHECK_STR_CONTAINS(buf, "\"data/devil.h5\"");
    free(buf);
}

static void load_errors(void) {
    MokcConfig c;
    ConfigErrors err;
    CHECK(!config_load("/nonexistent/spec.json", NULL, 0, &c, &err));
    CHECK_EQ_INT(err.count, 1);
    if (err.count) {
        CHECK_STR_CONTAINS(err.messages[0], "/nonexistent/spec.json");
        CHECK_STR_CONTAINS(err.messages[0], "No such file");
    }
    config_errors_free(&err);
    /* a directory is not a spec */
    CHECK(!config_load("configs", NULL, 0, &c, &err));
    CHECK_EQ_INT(err.count, 1);
    if (err.count) CHECK_STR_CONTAINS(err.messages[0], "directory");
    config_errors_free(&err);
    /* a file with a NUL byte */
    char path[4300];
    snprintf(path, sizeof path, "%s/nul.json", test_tmpdir());
    FILE *f = fopen(path, "wb");
    fwrite("{\"model\"\0:{}}", 1, 13, f);
    fclose(f);
    CHECK(!config_load(path, NULL, 0, &c, &err));
    CHECK_EQ_INT(err.count, 1);
    if (err.count) CHECK_STR_CONTAINS(err.messages[0], "NUL");
    config_errors_free(&err);
    /* a file that is fine loads, with its source recorded */
    snprintf(path, sizeof path, "%s/ok.json", test_tmpdir());
    f = fopen(path, "w");
    char *json = sq(MINIMAL);
    fputs(json, f);
    free(json);
    fclose(f);
    CHECK(config_load(path, NULL, 0, &c, &err));
    CHECK(strcmp(c.source, path) == 0);
    config_errors_free(&err);
}

TEST_SUITE(config,
    TEST_CASE(shipped_specs_parse),
    TEST_CASE(tiny_resolved_values),
    TEST_CASE(defaults_applied),
    TEST_CASE(aliases_for_num_experts),
    TEST_CASE(set_overrides),
    TEST_CASE(comments_ignored),
    TEST_CASE(unknown_keys),
    TEST_CASE(wrong_types),
    TEST_CASE(out_of_range),
    TEST_CASE(bad_choices),
    TEST_CASE(inconsistent_shapes),
    TEST_CASE(inconsistent_training),
    TEST_CASE(missing_required),
    TEST_CASE(malformed_documents),
    TEST_CASE(all_errors_reported),
    TEST_CASE(to_json_round_trip),
    TEST_CASE(reference_lists_every_key),
    TEST_CASE(table_lists_every_key),
    TEST_CASE(load_errors),
);
