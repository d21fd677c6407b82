/* JSON model spec: descriptor table, parsing with cJSON, defaults, validation, printing. */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef enum { KT_INT, KT_INT64, KT_FLOAT, KT_BOOL, KT_STRING, KT_ENUM } KeyType;

typedef struct {
    const char *path;
    KeyType type;
    size_t offset;
    bool required;
    double def_num;
    const char *def_str;
    double min, max;              /* inclusive range of numbers */
    const char *const *choices;   /* enum spellings, NULL-terminated; index = enum value */
    const char *doc;
} KeyDesc;

static const char *const scoring_choices[] = {"softmax", "sigmoid", NULL};
static const char *const schedule_choices[] = {"cosine", "linear", "constant", NULL};
static const char *const backend_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const moe_impl_choices[] = {"auto", "mok", "unfused", NULL};
static const char *const opt_state_choices[] = {"fp32", "bf16", NULL};

#define OFF(field) offsetof(MokcConfig, field)
#define BIG 1073741824.0
#define REQ_INT(p, f, lo, hi, d) {p, KT_INT, OFF(f), true, 0, NULL, lo, hi, NULL, d}
#define INT(p, f, def, lo, hi, d) {p, KT_INT, OFF(f), false, def, NULL, lo, hi, NULL, d}
#define FLT(p, f, def, lo, hi, d) {p, KT_FLOAT, OFF(f), false, def, NULL, lo, hi, NULL, d}
#define BOOLK(p, f, def, d) {p, KT_BOOL, OFF(f), false, def, NULL, 0, 1, NULL, d}
#define STR(p, f, d) {p, KT_STRING, OFF(f), false, 0, "", 0, 0, NULL, d}
#define ENUMK(p, f, def, ch, d) {p, KT_ENUM, OFF(f), false, 0, def, 0, 0, ch, d}

static const KeyDesc keys[] = {
    REQ_INT("model.vocab_size", model.vocab_size, 2, BIG, "tokens in the vocabulary (256 for byte-level data)"),
    REQ_INT("model.hidden_size", model.hidden_size, 1, BIG, "width of the residual stream"),
    REQ_INT("model.num_layers", model.num_layers, 1, 100000, "transformer blocks"),
    REQ_INT("model.num_heads", model.num_heads, 1, 100000, "query heads"),
    INT("model.num_kv_heads", model.num_kv_heads, 0, 0, 100000, "key/value heads (grouped-query attention); 0 = num_heads"),
    INT("model.head_dim", model.head_dim, 0, 0, 100000, "width of one head, even (RoPE); 0 = hidden_size / num_heads"),
    INT("model.max_seq_len", model.max_seq_len, 2048, 1, BIG, "longest sequence the model supports"),
    FLT("model.rope_theta", model.rope_theta, 10000.0, 1.0, 1e12, "RoPE base frequency"),
    FLT("model.rms_norm_eps", model.rms_norm_eps, 1e-6, 1e-12, 1.0, "epsilon inside RMSNorm"),
    BOOLK("model.tie_word_embeddings", model.tie_word_embeddings, 0, "LM head shares the embedding matrix"),
    INT("model.intermediate_size", model.intermediate_size, 0, 0, BIG, "dense SwiGLU width; required when any layer is dense"),
    INT("model.first_k_dense_replace", model.first_k_dense_replace, 0, 0, 100000, "the first this-many layers use the dense FFN"),
    INT("moe.num_experts", moe.num_experts, 0, 0, 1000000, "routed experts per MoE layer (aliases: num_local_experts, n_routed_experts); 0 = dense model"),
    INT("moe.num_experts_per_tok", moe.num_experts_per_tok, 0, 0, 1000000, "k: routed experts per token; required with experts"),
    INT("moe.moe_intermediate_size", moe.moe_intermediate_size, 0, 0, BIG, "width of each routed and shared expert; required with experts"),
    INT("moe.n_shared_experts", moe.n_shared_experts, 0, 0, 1024, "shared SwiGLU experts every token passes through"),
    ENUMK("moe.scoring_func", moe.scoring_func, "softmax", scoring_choices, "router score function"),
    BOOLK("moe.norm_topk_prob", moe.norm_topk_prob, 1, "renormalise the k gate values to sum to 1"),
    FLT("moe.routed_scaling_factor", moe.routed_scaling_factor, 1.0, 0.0, 1e6, "multiplies the gate values"),
    FLT("moe.router_aux_loss_coef", moe.router_aux_loss_coef, 0.0, 0.0, 1e6, "weight of the Switch-style load-balancing loss"),
    FLT("moe.expert_bias_update_rate", moe.expert_bias_update_rate, 0.0, 0.0, 1e6, "aux-loss-free balancing: bias step per optimizer step; 0 = off"),
    INT("parallel.ep", parallel.ep, 1, 1, 1000000, "expert-parallel group size; must divide the world size and moe.num_experts"),
    REQ_INT("train.seq_len", train.seq_len, 1, BIG, "tokens per sequence"),
    INT("train.micro_batch", train.micro_batch, 1, 1, BIG, "sequences per rank per micro-step"),
    INT("train.grad_accum", train.grad_accum, 1, 1, BIG, "micro-steps per optimizer step"),
    REQ_INT("train.steps", train.steps, 1, BIG, "optimizer steps"),
    FLT("train.lr", train.lr, 3e-4, 0.0, 10.0, "peak learning rate"),
    FLT("train.min_lr", train.min_lr, 0.0, 0.0, 10.0, "learning rate at the end of the decay"),
    INT("train.warmup_steps", train.warmup_steps, 0, 0, BIG, "linear warmup steps"),
    ENUMK("train.lr_schedule", train.lr_schedule, "cosine", schedule_choices, "decay after warmup"),
    FLT("train.weight_decay", train.weight_decay, 0.1, 0.0, 10.0, "AdamW decoupled weight decay (matrices only)"),
    FLT("train.beta1", train.beta1, 0.9, 0.0, 0.999999, "AdamW beta1, in [0, 1)"),
    FLT("train.beta2", train.beta2, 0.95, 0.0, 0.999999999, "AdamW beta2, in [0, 1)"),
    FLT("train.eps", train.eps, 1e-8, 1e-30, 1.0, "AdamW epsilon"),
    FLT("train.grad_clip", train.grad_clip, 1.0, 0.0, 1e9, "global gradient-norm clip; 0 = off"),
    ENUMK("train.optimizer_state", train.optimizer_state, "fp32", opt_state_choices,
          "AdamW's m and v: fp32, or bf16 (rounded after each update: half the optimizer's bytes and memory; "
          "needs beta1, beta2 <= 0.99)"),
    {"train.seed", KT_INT64, OFF(train.seed), false, 1234, NULL, 0, 9007199254740991.0, NULL, "seed of initialisation and data order"},
    STR("data.train", data.train, "HDF5 token file from `mokc prepare` (required by `mokc train`)"),
    STR("data.val", data.val, "HDF5 token file for validation; \"\" = none"),
    INT("data.val_every", data.val_every, 0, 0, BIG, "steps between validation passes; 0 = only after the last step"),
    INT("data.val_batches", data.val_batches, 8, 1, BIG, "micro-batches per validation pass"),
    STR("checkpoint.dir", checkpoint.dir, "directory of checkpoints; \"\" = none"),
    INT("checkpoint.every", checkpoint.every, 0, 0, BIG, "steps between checkpoints; 0 = only after the last step and on a stop signal"),
    INT("checkpoint.keep", checkpoint.keep, 3, 1, BIG, "newest complete checkpoints kept"),
    STR("checkpoint.resume", checkpoint.resume, "\"\" = fresh start, \"auto\" = newest complete checkpoint, or a checkpoint path"),
    {"log.metrics_path", KT_STRING, OFF(log.metrics_path), false, 0, "auto", 0, 0, NULL,
     "the run record (JSON lines: a header with the command, config, build and machine, then one object per step); "
     "\"auto\" = runs/<the spec's file name>.jsonl, \"\" = none"},
    INT("log.every", log.every, 1, 1, BIG, "steps between progress lines"),
    INT("log.profile_step", log.profile_step, 0, 0, BIG,
        "a step timed op by op on the GPU (CUDA events between the model's ops: a table on stdout and `op_ms` in "
        "its run-record line); 0 = none"),
    ENUMK("backend", backend, "auto", backend_choices, "auto = cuda when a GPU is present and built in, else cpu"),
    ENUMK("moe_impl", moe_impl, "auto", moe_impl_choices,
          "GPU MoE layer: auto = the megakernel where it runs (else unfused, said at start); mok = the megakernel or stop; unfused = the baseline"),
};
#define N_KEYS ((int)(sizeof(keys) / sizeof(keys[0])))

static const struct { const char *alias, *path; } aliases[] = {
    {"moe.num_local_experts", "moe.num_experts"},
    {"moe.n_routed_experts", "moe.num_experts"},
};
#define N_ALIASES ((int)(sizeof(aliases) / sizeof(aliases[0])))

static const char *const sections[] = {"model", "moe", "parallel", "train", "data", "checkpoint", "log"};
#define N_SECTIONS ((int)(sizeof(sections) / sizeof(sections[0])))

/* ---------- error collection ---------- */

static void add_error(ConfigErrors *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_error(ConfigErrors *e, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    e->messages = realloc(e->messages, sizeof(char *) * (size_t)(e->count + 1));
    if (!e->messages) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of memory collecting config errors");
    e->messages[e->count] = strdup(buf);
    e->count++;
}

void config_errors_free(ConfigErrors *errors) {
    for (int i = 0; i < errors->count; i++) free(errors->messages[i]);
    free(errors->messages);
    errors->messages = NULL;
    errors->count = 0;
}

void config_errors_print(const ConfigErrors *errors, const char *spec_path, FILE *out) {
    fprintf(out, "mokc: error: %d problem%s in %s:\n", errors->count, errors->count == 1 ? "" : "s",
            spec_path);
    for (int i = 0; i < errors->count; i++) fprintf(out, "  %s\n", errors->messages[i]);
    fprintf(out, "---> HINT: `mokc help config` lists every key with its type, default and range\n");
}

/* ---------- did-you-mean ---------- */

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* The closest known key (full path) within `section` ("" = top level), or NULL if none is close. */
static const char *closest_key(const char *section, const char *name) {
    const char *best = NULL;
    int best_d = 1 + (int)strlen(name) / 3;
    if (best_d < 3) best_d = 3;
    size_t sl = strlen(section);
    for (int i = 0; i < N_KEYS; i++) {
        const char *p = keys[i].path;
        const char *leaf = p;
        if (sl) {
            if (strncmp(p, section, sl) != 0 || p[sl] != '.') continue;
            leaf = p + sl + 1;
        } else if (strchr(p, '.')) {
            continue;
        }
        int dist = edit_distance(name, leaf);
        if (dist < best_d) best_d = dist, best = p;
    }
    if (!sl)
        for (int i = 0; i < N_SECTIONS; i++) {
            int dist = edit_distance(name, sections[i]);
            if (dist < best_d) best_d = dist, best = sections[i];
        }
    if (!best && strlen(name) >= 4) /* a truncated name: "scoring" for "scoring_func" */
        for (int i = 0; i < N_KEYS; i++) {
            const char *p = keys[i].path;
            if (sl ? strncmp(p, section, sl) == 0 && p[sl] == '.' && strncmp(p + sl + 1, name, strlen(name)) == 0
                   : !strchr(p, '.') && strncmp(p, name, strlen(name)) == 0)
                return p;
        }
    if (!best) /* the right name in the wrong place: "hidden_size" at the top level or under train */
        for (int i = 0; i < N_KEYS; i++) {
            const char *dot = strchr(keys[i].path, '.');
            if (dot && strcmp(dot + 1, name) == 0) return keys[i].path;
        }
    return best;
}

/* "valid keys in model: vocab_size, hidden_size, ..." (or the top-level keys and sections). */
static void list_valid_keys(const char *section, char *buf, size_t n) {
    size_t sl = strlen(section);
    snprintf(buf, n, "valid %s%s: ", sl ? "keys in " : "top-level keys", section);
    bool first = true;
    if (!sl)
        for (int i = 0; i < N_SECTIONS; i++, first = false) {
            strncat(buf, first ? "" : ", ", n - strlen(buf) - 1);
            strncat(buf, sections[i], n - strlen(buf) - 1);
        }
    for (int i = 0; i < N_KEYS; i++) {
        const char *p = keys[i].path;
        if (sl ? strncmp(p, section, sl) != 0 || p[sl] != '.' : strchr(p, '.') != NULL) continue;
        strncat(buf, first ? "" : ", ", n - strlen(buf) - 1);
        strncat(buf, sl ? p + sl + 1 : p, n - strlen(buf) - 1);
        first = false;
    }
}

/* ---------- lookup ---------- */

static int find_key(const char *path) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].path, path) == 0) return i;
    return -1;
}

static const char *resolve_alias(const char *path) {
    for (int i = 0; i < N_ALIASES; i++)
        if (strcmp(aliases[i].alias, path) == 0) return aliases[i].path;
    return path;
}

static bool is_section(const char *name) {
    for (int i = 0; i < N_SECTIONS; i++)
        if (strcmp(sections[i], name) == 0) return true;
    return false;
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* BIG is the "no practical limit" bound: shown as ">= min", unless the value is above it. */
static void format_range(const KeyDesc *k, bool above_max, char *buf, size_t n) {
    if (k->max == BIG && !above_max) snprintf(buf, n, ">= %g", k->min);
    else snprintf(buf, n, "%.16g..%.16g", k->min, k->max);
}

static void list_choices(const KeyDesc *k, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; k->choices[i]; i++) {
        strncat(buf, i ? ", \"" : "\"", n - strlen(buf) - 1);
        strncat(buf, k->choices[i], n - strlen(buf) - 1);
        strncat(buf, "\"", n - strlen(buf) - 1);
    }
}

/* ---------- assigning one value ---------- */

static void set_default(MokcConfig *cfg, const KeyDesc *k) {
    char *base = (char *)cfg + k->offset;
    switch (k->type) {
    case KT_INT: *(int *)base = (int)k->def_num; break;
    case KT_INT64: *(int64_t *)base = (int64_t)k->def_num; break;
    case KT_FLOAT: *(double *)base = k->def_num; break;
    case KT_BOOL: *(bool *)base = k->def_num != 0; break;
    case KT_STRING: snprintf(base, CONFIG_PATH_MAX, "%s", k->def_str); break;
    case KT_ENUM:
        for (int i = 0; k->choices[i]; i++)
            if (strcmp(k->choices[i], k->def_str) == 0) *(int *)base = i;
        break;
    }
}

static void assign(MokcConfig *cfg, const KeyDesc *k, const cJSON *v, const char *shown_path,
                   ConfigErrors *err) {
    char *base = (char *)cfg + k->offset;
    char range[64];
    switch (k->type) {
    case KT_INT:
    case KT_INT64:
    case KT_FLOAT: {
        if (!cJSON_IsNumber(v)) {
            add_error(err, "%s: expected %s, got %s", shown_path,
                      k->type == KT_FLOAT ? "a number" : "an integer", json_type_name(v));
            return;
        }
        double x = v->valuedouble;
        format_range(k, x > k->max, range, sizeof range);
        if (k->type != KT_FLOAT && x != floor(x)) {
            add_error(err, "%s: expected an integer, got %g", shown_path, x);
            return;
        }
        if (!isfinite(x) || x < k->min || x > k->max) {
            add_error(err, "%s: %g is out of range; valid: %s", shown_path, x, range);
            return;
        }
        if (k->type == KT_INT) *(int *)base = (int)x;
        else if (k->type == KT_INT64) *(int64_t *)base = (int64_t)x;
        else *(double *)base = x;
        return;
    }
    case KT_BOOL:
        if (!cJSON_IsBool(v)) {
            add_error(err, "%s: expected true or false, got %s", shown_path, json_type_name(v));
            return;
        }
        *(bool *)base = cJSON_IsTrue(v);
        return;
    case KT_STRING:
        if (!cJSON_IsString(v)) {
            add_error(err, "%s: expected a string, got %s", shown_path, json_type_name(v));
            return;
        }
        if (strlen(v->valuestring) >= CONFIG_PATH_MAX) {
            add_error(err, "%s: longer than %d characters", shown_path, CONFIG_PATH_MAX - 1);
            return;
        }
        snprintf(base, CONFIG_PATH_MAX, "%s", v->valuestring);
        return;
    case KT_ENUM: {
        char ch[256];
        list_choices(k, ch, sizeof ch);
        if (!cJSON_IsString(v)) {
            add_error(err, "%s: expected one of %s, got %s", shown_path, ch, json_type_name(v));
            return;
        }
        for (int i = 0; k->choices[i]; i++)
            if (strcmp(k->choices[i], v->valuestring) == 0) {
                *(int *)base = i;
                return;
            }
        add_error(err, "%s: \"%s\" is not one of %s", shown_path, v->valuestring, ch);
        return;
    }
    }
}

/* ---------- --set overrides ---------- */

/* Puts `value` at dotted `path` in the tree, creating sections. A value that is not valid JSON is
 * taken as a string, so `--set data.train=x.h5` needs no quotes. */
static void apply_override(cJSON *root, const char *override, ConfigErrors *err) {
    const char *eq = strchr(override, '=');
    if (!eq || eq == override) {
        add_error(err, "--set %s: expected key.path=value", override);
        return;
    }
    char path[256];
    size_t plen = (size_t)(eq - override);
    if (plen >= sizeof path) {
        add_error(err, "--set %s: key path too long", override);
        return;
    }
    memcpy(path, override, plen);
    path[plen] = 0;
    const char *text = eq + 1;
    /* The whole text must be JSON: "2024.h5" or "true.h5" are strings, not 2024 or true. */
    cJSON *value = cJSON_ParseWithOpts(text, NULL, true);
    if (!value) value = cJSON_CreateString(text);
    char *dot = strchr(path, '.');
    cJSON *parent = root;
    const char *leaf = path;
    if (dot) {
        *dot = 0;
        leaf = dot + 1;
        parent = cJSON_GetObjectItemCaseSensitive(root, path);
        if (!parent) {
            parent = cJSON_CreateObject();
            cJSON_AddItemToObject(root, path, parent);
        } else if (!cJSON_IsObject(parent)) {
            add_error(err, "--set %s.%s: '%s' is not a section", path, leaf, path);
            cJSON_Delete(value);
            return;
        }
    }
    /* An override replaces the key under any of its names: --set moe.num_experts=16 on a spec that
     * says n_routed_experts must not read as the key given twice. */
    char full[256];
    memcpy(full, override, plen);
    full[plen] = 0;
    const char *canon = resolve_alias(full);
    for (cJSON *it = parent->child, *next; it; it = next) {
        next = it->next;
        if (!it->string || strcmp(it->string, leaf) == 0) continue;
        char other[300];
        snprintf(other, sizeof other, "%s%s%s", dot ? path : "", dot ? "." : "", it->string);
        if (strcmp(resolve_alias(other), canon) == 0) cJSON_Delete(cJSON_DetachItemViaPointer(parent, it));
    }
    if (cJSON_GetObjectItemCaseSensitive(parent, leaf)) cJSON_ReplaceItemInObjectCaseSensitive(parent, leaf, value);
    else cJSON_AddItemToObject(parent, leaf, value);
}

/* ---------- consistency between keys ---------- */

typedef struct {
    MokcConfig *c;
    ConfigErrors *err;
    const bool *bad; /* per key: missing (required) or rejected, so its value means nothing */
} Checker;

/* True when every key in the space-separated list holds a usable value. */
static bool sound(const Checker *k, const char *paths) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", paths);
    for (char *save = NULL, *p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        int i = find_key(p);
        if (i < 0 || k->bad[i]) return false;
    }
    return true;
}

/* Checks between keys; each runs when the keys it reads are sound, so a spec's problems are
 * all reported in one run. */
static void check_consistency(const Checker *k) {
    MokcConfig *c = k->c;
    ConfigErrors *err = k->err;
    ModelConfig *m = &c->model;
    MoeConfig *e = &c->moe;
    if (m->num_kv_heads == 0) m->num_kv_heads = m->num_heads;
    if (sound(k, "model.num_heads model.num_kv_heads") && m->num_heads % m->num_kv_heads != 0)
        add_error(err, "model.num_kv_heads: %d does not divide model.num_heads = %d; use a divisor of %d",
                  m->num_kv_heads, m->num_heads, m->num_heads);
    if (m->head_dim == 0 && sound(k, "model.hidden_size model.num_heads")) {
        if (m->hidden_size % m->num_heads != 0)
            add_error(err, "model.hidden_size: %d is not a multiple of model.num_heads = %d; set "
                      "model.head_dim explicitly or make hidden_size = num_heads x head_dim",
                      m->hidden_size, m->num_heads);
        else m->head_dim = m->hidden_size / m->num_heads;
    }
    if (m->head_dim % 2 != 0)
        add_error(err, "model.head_dim: %d is odd; RoPE rotates pairs, use an even head_dim", m->head_dim);
    if (sound(k, "model.first_k_dense_replace model.num_layers") && m->first_k_dense_replace > m->num_layers)
        add_error(err, "model.first_k_dense_replace: %d exceeds model.num_layers = %d; valid: 0..%d",
                  m->first_k_dense_replace, m->num_layers, m->num_layers);
    bool any_dense = e->num_experts == 0 || m->first_k_dense_replace > 0;
    if (sound(k, "moe.num_experts model.first_k_dense_replace model.intermediate_size") && any_dense &&
        m->intermediate_size == 0)
        add_error(err, "model.intermediate_size: required (> 0) because %s",
                  e->num_experts == 0 ? "the model has no experts (moe.num_experts = 0)"
                                      : "model.first_k_dense_replace makes the first layers dense");
    if (!sound(k, "moe.num_experts")) {
        /* nothing below can be judged without the expert count */
    } else if (e->num_experts > 0) {
        if (sound(k, "moe.num_experts_per_tok") &&
            (e->num_experts_per_tok < 1 || e->num_experts_per_tok > e->num_experts))
            add_error(err, "moe.num_experts_per_tok: %d is out of range; valid: 1..%d (moe.num_experts)",
                      e->num_experts_per_tok, e->num_experts);
        if (sound(k, "moe.moe_intermediate_size") && e->moe_intermediate_size == 0)
            add_error(err, "moe.moe_intermediate_size: required (> 0) when moe.num_experts > 0");
        if (sound(k, "parallel.ep") && e->num_experts % c->parallel.ep != 0)
            add_error(err, "parallel.ep: %d does not divide moe.num_experts = %d; use a divisor of %d",
                      c->parallel.ep, e->num_experts, e->num_experts);
    } else {
        if (sound(k, "moe.num_experts_per_tok") && e->num_experts_per_tok != 0)
            add_error(err, "moe.num_experts_per_tok: set to %d but moe.num_experts is 0; add experts or remove it",
                      e->num_experts_per_tok);
        if (sound(k, "parallel.ep") && c->parallel.ep != 1)
            add_error(err, "parallel.ep: %d needs experts to shard, but moe.num_experts is 0; use ep = 1",
                      c->parallel.ep);
        if (sound(k, "moe.moe_intermediate_size") && e->moe_intermediate_size != 0)
            add_error(err, "moe.moe_intermediate_size: set to %d but moe.num_experts is 0; add experts or remove it",
                      e->moe_intermediate_size);
        if (sound(k, "moe.n_shared_experts") && e->n_shared_experts != 0)
            add_error(err, "moe.n_shared_experts: set to %d but moe.num_experts is 0 (a dense model has no shared "
                      "experts); add routed experts or remove it", e->n_shared_experts);
    }
    if (sound(k, "train.seq_len model.max_seq_len") && c->train.seq_len > m->max_seq_len)
        add_error(err, "train.seq_len: %d exceeds model.max_seq_len = %d; lower seq_len or raise max_seq_len",
                  c->train.seq_len, m->max_seq_len);
    if (sound(k, "train.min_lr train.lr") && c->train.min_lr > c->train.lr)
        add_error(err, "train.min_lr: %g exceeds train.lr = %g; valid: 0..%g", c->train.min_lr,
                  c->train.lr, c->train.lr);
    if (sound(k, "log.profile_step train.steps") && c->log.profile_step > c->train.steps)
        add_error(err, "log.profile_step: %d is past train.steps = %d; valid: 0 (none) to %d",
                  c->log.profile_step, c->train.steps, c->train.steps);
    /* A bf16 moment moves by (1 - beta) of its distance to the new value a step; much under 1 % that is within
     * bf16's rounding (2^-9 to 2^-8 of the value) and the moment stops following. */
    if (sound(k, "train.optimizer_state train.beta1 train.beta2") && c->train.optimizer_state == OPT_STATE_BF16) {
        const int which = c->train.beta2 > BF16_STATE_MAX_BETA ? 2 : c->train.beta1 > BF16_STATE_MAX_BETA ? 1 : 0;
        const double beta = which == 2 ? c->train.beta2 : c->train.beta1;
        if (which)
            add_error(err, "train.optimizer_state: \"bf16\" with train.beta%d = %g: a step moves that moment by %.2g "
                      "%% of its distance to the new value, under what bf16's 8-bit significand keeps; use beta1 and "
                      "beta2 <= %g (DeepSeek-V3 kept bf16 moments with 0.9 and 0.95) or optimizer_state \"fp32\"",
                      which, beta, 100 * (1 - beta), BF16_STATE_MAX_BETA);
    }
    if (sound(k, "train.warmup_steps train.steps") && c->train.warmup_steps > c->train.steps)
        add_error(err, "train.warmup_steps: %d exceeds train.steps = %d; valid: 0..%d",
                  c->train.warmup_steps, c->train.steps, c->train.steps);
    if (sound(k, "checkpoint.every checkpoint.dir") && c->checkpoint.every > 0 && c->checkpoint.dir[0] == 0)
        add_error(err, "checkpoint.every: %d needs checkpoint.dir; set a directory or every = 0",
                  c->checkpoint.every);
    if (sound(k, "checkpoint.resume checkpoint.dir") && c->checkpoint.dir[0] == 0 &&
        strcmp(c->checkpoint.resume, "auto") == 0)
        add_error(err, "checkpoint.resume: \"auto\" needs checkpoint.dir to search; set checkpoint.dir");
    if (sound(k, "data.val_every data.val") && c->data.val_every > 0 && c->data.val[0] == 0)
        add_error(err, "data.val_every: %d needs data.val; set a validation file or val_every = 0",
                  c->data.val_every);
}

/* ---------- top level ---------- */

static void walk_object(const cJSON *obj, const char *section, MokcConfig *cfg, bool *seen, bool *bad,
                        ConfigErrors *err) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *name = it->string;
        if (name[0] == '_') continue; /* "_comment"-style keys are documentation */
        char path[300];
        if (section[0]) snprintf(path, sizeof path, "%s.%s", section, name);
        else snprintf(path, sizeof path, "%s", name);
        if (!section[0] && is_section(name)) {
            if (!cJSON_IsObject(it)) add_error(err, "%s: expected an object (a section), got %s", name, json_type_name(it));
            else walk_object(it, name, cfg, seen, bad, err);
            continue;
        }
        /* A dotted name at the top level would otherwise match a sectioned key. */
        int idx = !section[0] && strchr(name, '.') ? -1 : find_key(resolve_alias(path));
        if (idx < 0 && !section[0] && strchr(name, '.')) {
            add_error(err, "%s: unknown key; keys live inside their section, e.g. {\"%.*s\": {\"%s\": ...}}", path,
                      (int)(strchr(name, '.') - name), name, strchr(name, '.') + 1);
            continue;
        }
        if (idx < 0) {
            const char *near = closest_key(section, name);
            char valid[640];
            if (near) add_error(err, "%s: unknown key; did you mean '%s'?", path, near);
            else list_valid_keys(section, valid, sizeof valid), add_error(err, "%s: unknown key; %s", path, valid);
            continue;
        }
        if (seen[idx]) {
            add_error(err, "%s: given twice (directly or through an alias of %s)", path, keys[idx].path);
            continue;
        }
        seen[idx] = true;
        int before = err->count;
        assign(cfg, &keys[idx], it, path, err);
        if (err->count > before) bad[idx] = true;
    }
}

bool config_parse(const char *json_text, const char *const *overrides, int n_overrides,
                  MokcConfig *cfg, ConfigErrors *errors) {
    memset(cfg, 0, sizeof *cfg);
    errors->count = 0;
    errors->messages = NULL;
    if (json_text[strspn(json_text, " \t\r\n")] == 0) {
        add_error(errors, "(file): the spec is empty; it must be a JSON object (see configs/tiny.json)");
        return false;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json_text, &end, true);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = json_text; end && p < end; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        add_error(errors, "(file): not valid JSON near line %d, column %d", line, col);
        return false;
    }
    if (!cJSON_IsObject(root)) {
        add_error(errors, "(file): the top level must be a JSON object, got %s", json_type_name(root));
        cJSON_Delete(root);
        return false;
    }
    for (int i = 0; i < n_overrides; i++) apply_override(root, overrides[i], errors);
    bool seen[N_KEYS], bad[N_KEYS];
    memset(seen, 0, sizeof seen);
    memset(bad, 0, sizeof bad);
    for (int i = 0; i < N_KEYS; i++) set_default(cfg, &keys[i]);
    walk_object(root, "", cfg, seen, bad, errors);
    cJSON_Delete(root);
    for (int i = 0; i < N_KEYS; i++)
        if (keys[i].required && !seen[i]) {
            add_error(errors, "%s: required key is missing (%s)", keys[i].path, keys[i].doc);
            bad[i] = true;
        }
    Checker checker = {cfg, errors, bad};
    check_consistency(&checker);
    return errors->count == 0;
}

bool config_load(const char *path, const char *const *overrides, int n_overrides, MokcConfig *cfg,
                 ConfigErrors *errors) {
    errors->count = 0;
    errors->messages = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        memset(cfg, 0, sizeof *cfg);
        add_error(errors, "(file): cannot read '%s': %s", path, strerror(errno));
        return false;
    }
    /* Read in chunks rather than trusting ftell: a directory reports a huge size, a pipe none. */
    const size_t limit = (size_t)64 << 20;
    size_t cap = 1 << 16, got = 0;
    char *text = mallocCheck(cap + 1);
    for (;;) {
        size_t r = fread(text + got, 1, cap - got, f);
        got += r;
        if (got < cap || got > limit) break;
        cap *= 2;
        char *grown = realloc(text, cap + 1);
        if (!grown) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of memory reading '%s'", path);
        text = grown;
    }
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (read_errno || got > limit) {
        free(text);
        memset(cfg, 0, sizeof *cfg);
        if (read_errno) add_error(errors, "(file): cannot read '%s': %s", path, strerror(read_errno));
        else add_error(errors, "(file): '%s' is over 64 MiB; a spec is a small JSON file", path);
        return false;
    }
    text[got] = 0;
    if (strlen(text) != got) {
        free(text);
        memset(cfg, 0, sizeof *cfg);
        add_error(errors, "(file): '%s' contains a NUL byte; a spec is JSON text", path);
        return false;
    }
    bool ok = config_parse(text, overrides, n_overrides, cfg, errors);
    free(text);
    snprintf(cfg->source, sizeof cfg->source, "%s", path);
    return ok;
}

/* ---------- printing ---------- */

static void format_value(const MokcConfig *cfg, const KeyDesc *k, char *buf, size_t n) {
    const char *base = (const char *)cfg + k->offset;
    switch (k->type) {
    case KT_INT: snprintf(buf, n, "%d", *(const int *)base); break;
    case KT_INT64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)base); break;
    case KT_FLOAT: snprintf(buf, n, "%.9g", *(const double *)base); break;
    case KT_BOOL: snprintf(buf, n, "%s", *(const bool *)base ? "true" : "false"); break;
    case KT_STRING: snprintf(buf, n, "\"%s\"", base); break;
    case KT_ENUM: snprintf(buf, n, "\"%s\"", k->choices[*(const int *)base]); break;
    }
}

void config_print_table(const MokcConfig *cfg, FILE *out) {
    fprintf(out, "+-------------------------------+------------------------------------------+\n");
    fprintf(out, "| %-29s | %-40s |\n", "config", cfg->source[0] ? cfg->source : "(inline)");
    fprintf(out, "+-------------------------------+------------------------------------------+\n");
    for (int i = 0; i < N_KEYS; i++) {
        char v[CONFIG_PATH_MAX + 8];
        format_value(cfg, &keys[i], v, sizeof v);
        fprintf(out, "| %-29s | %-40s |\n", keys[i].path, v);
    }
    fprintf(out, "+-------------------------------+------------------------------------------+\n");
}

char *config_to_json(const MokcConfig *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < N_KEYS; i++) {
        const KeyDesc *k = &keys[i];
        const char *base = (const char *)cfg + k->offset;
        cJSON *parent = root;
        const char *dot = strchr(k->path, '.');
        const char *leaf = k->path;
        if (dot) {
            char sec[32];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - k->path), k->path);
            parent = cJSON_GetObjectItemCaseSensitive(root, sec);
            if (!parent) parent = cJSON_AddObjectToObject(root, sec);
            leaf = dot + 1;
        }
        switch (k->type) {
        case KT_INT: cJSON_AddNumberToObject(parent, leaf, *(const int *)base); break;
        /* cJSON prints numbers with 15 significant digits; these must read back bit for bit. */
        case KT_INT64: {
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)*(const int64_t *)base);
            cJSON_AddRawToObject(parent, leaf, num);
            break;
        }
        case KT_FLOAT: {
            char num[40];
            double x = *(const double *)base;
            for (int digits = 15; digits <= 17; digits++) {
                snprintf(num, sizeof num, "%.*g", digits, x);
                if (strtod(num, NULL) == x) break;
            }
            cJSON_AddRawToObject(parent, leaf, num);
            break;
        }
        case KT_BOOL: cJSON_AddBoolToObject(parent, leaf, *(const bool *)base); break;
        case KT_STRING: cJSON_AddStringToObject(parent, leaf, base); break;
        case KT_ENUM: cJSON_AddStringToObject(parent, leaf, k->choices[*(const int *)base]); break;
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

void config_print_reference(FILE *out, bool markdown) {
    if (markdown) {
        fprintf(out, "| key | type | default | valid | meaning |\n|---|---|---|---|---|\n");
    }
    for (int i = 0; i < N_KEYS; i++) {
        const KeyDesc *k = &keys[i];
        const char *type = k->type == KT_INT || k->type == KT_INT64 ? "integer"
                           : k->type == KT_FLOAT ? "number" : k->type == KT_BOOL ? "boolean"
                           : k->type == KT_STRING ? "string" : "choice";
        char def[64], valid[256];
        if (k->required) snprintf(def, sizeof def, "required");
        else if (k->type == KT_STRING) snprintf(def, sizeof def, "\"%s\"", k->def_str);
        else if (k->type == KT_ENUM) snprintf(def, sizeof def, "\"%s\"", k->def_str);
        else if (k->type == KT_BOOL) snprintf(def, sizeof def, "%s", k->def_num ? "true" : "false");
        else snprintf(def, sizeof def, "%g", k->def_num);
        if (k->type == KT_ENUM) list_choices(k, valid, sizeof valid);
        else if (k->type == KT_BOOL || k->type == KT_STRING) snprintf(valid, sizeof valid, "-");
        else format_range(k, false, valid, sizeof valid);
        if (markdown) fprintf(out, "| `%s` | %s | %s | %s | %s |\n", k->path, type, def, valid, k->doc);
        else fprintf(out, "  %-30s %-8s default %-10s valid %-22s %s\n", k->path, type, def, valid, k->doc);
    }
}
