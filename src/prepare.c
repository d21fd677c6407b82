/*
 * `mokc prepare`: input -> HDF5 token files (data.h) for training and validation. Inputs are a
 * text, tokenized byte by byte (token id = byte value, vocab 256), or tokens another tokenizer
 * already made (llm.c .bin shards, raw uint16/uint32 arrays: import.h), so users keep theirs.
 * The first (1 - fraction) of the tokens become the training set and the last fraction the
 * validation set, so the two never share text. Output files are written crash-safely by
 * data_write_tokens.
 */
#include "prepare.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "data.h"
#include "import.h"

#define BYTE_VOCAB 256

static const char usage_text[] =
    "usage: mokc prepare (--text FILE | --bin FILE.bin | --raw-u16 FILE | --raw-u32 FILE) --out DATA.h5\n"
    "                    [--vocab N] [--tokenizer NAME] [--val-out VAL.h5] [--val-fraction F]\n"
    "\n"
    "Writes HDF5 token files for 'mokc train': from a text, tokenized byte by byte (vocab 256), or\n"
    "from the ids another tokenizer made, so you keep your tokenizer.\n"
    "\n"
    "  --text FILE        input text (any bytes; UTF-8 is kept as its bytes)\n"
    "  --bin FILE.bin     an llm.c token shard: 256 x int32 header (magic 20240520: uint16 ids,\n"
    "                     20240801: uint32 ids), then the ids\n"
    "  --raw-u16 FILE     a bare array of little-endian uint16 ids (e.g. numpy's tofile)\n"
    "  --raw-u32 FILE     the same with uint32 ids\n"
    "  --vocab N          the tokenizer's vocabulary size: required with --bin and --raw-*, and\n"
    "                     every id must be below it (it becomes the file's vocab_size); with --text\n"
    "                     optional (default 256): byte ids recorded in a larger vocabulary, so a\n"
    "                     model of that vocabulary can train on the text (throughput runs)\n"
    "  --tokenizer NAME   recorded in the file (default: bytes for text, gpt2/llama3 for llm.c\n"
    "                     shards, unknown for raw ids)\n"
    "  --out DATA.h5      training tokens: the first (1 - F) of the input\n"
    "  --val-out VAL.h5   validation tokens: the last F of the input\n"
    "                     (default: DATA with .h5 replaced by -val.h5)\n"
    "  --val-fraction F   validation share in [0, 0.5], default 0.05; 0 writes no validation file\n"
    "  --help             this text\n"
    "\n"
    "examples: mokc prepare --text data/devils-dictionary.txt --out data/devil.h5\n"
    "          mokc prepare --bin fineweb_val_000000.bin --vocab 50257 --out data/fw-val.h5 --val-fraction 0\n";

static int prep_error(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mokc_die's output, but returns so that the caller (and tests) get the code. */
static int prep_error(const char *hint, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mokc_verror("prepare", hint, fmt, ap);
    va_end(ap);
    return MOKC_EXIT_USAGE;
}

static const char *const help_hint = "run 'mokc prepare --help' for the options";

/* Whether two paths name the same existing file (hard links and ./ spellings included). */
static int same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Reads a whole regular file (flag: the option that named it). Returns 0, or prints the error and
 * returns the exit code. */
static int read_input(const char *flag, const char *path, unsigned char **data, int64_t *size) {
    *data = NULL;
    *size = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return prep_error("check the path given to the input option", "cannot read %s file '%s': %s", flag,
                          path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return prep_error("the input must be a plain file", "'%s' is not a regular file", path);
    if (st.st_size == 0)
        return prep_error("give a file with some content", "%s file '%s' is empty", flag, path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return prep_error("check the file's permissions", "cannot read %s file '%s': %s", flag, path,
                          strerror(errno));
    unsigned char *buf = malloc((size_t)st.st_size);
    if (!buf) {
        fclose(f);
        return prep_error(NULL, "out of memory reading '%s' (%lld bytes)", path, (long long)st.st_size);
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got == 0) {
        free(buf);
        return prep_error("check the file's permissions", "cannot read %s file '%s'", flag, path);
    }
    *data = buf;
    *size = (int64_t)got; /* a file that shrank while we read it: use what was there */
    return 0;
}

typedef struct {
    const char *path, *format; /* the input and its format ("bytes", or import_format_name) */
    uint32_t *tokens;
    int64_t n;
    int vocab;
    const char *tokenizer;
} Tokens;

static int write_split(const char *out, const Tokens *t, int64_t begin, int64_t end) {
    char source[4300];
    bool bytes = strcmp(t->format, "bytes") == 0;
    snprintf(source, sizeof source, "%s %s%s%s [%lld, %lld) of %lld", t->path, bytes ? "" : "(", t->format,
             bytes ? "" : ") tokens", (long long)begin, (long long)end, (long long)t->n);
    char err[1024];
    if (data_write_tokens(out, t->tokens + begin, end - begin, t->vocab, source, t->tokenizer, err, sizeof err)) {
        fflush(stdout);
        fprintf(stderr, "mokc: error: prepare: %s\n", err);
        return MOKC_EXIT_RUNTIME;
    }
    return 0;
}

/* Parses --vocab: required with token inputs; with --text optional (default 256), at least 256. */
static int parse_vocab(const char *vocab_str, const char *input_flag, int *vocab) {
    const int text = strcmp(input_flag, "--text") == 0;
    if (text && !vocab_str) {
        *vocab = BYTE_VOCAB;
        return 0;
    }
    if (!vocab_str)
        return prep_error("pass the vocabulary size of the tokenizer that made the ids, e.g. --vocab 50257 "
                          "for GPT-2", "%s needs --vocab N (the ids cannot tell their vocabulary)", input_flag);
    char *end = NULL;
    errno = 0;
    long v = strtol(vocab_str, &end, 10);
    if (end == vocab_str || *end != '\0' || errno != 0 || v < 2 || v > INT32_MAX)
        return prep_error("give an integer such as --vocab 50257", "--vocab '%s' is not an integer >= 2",
                          vocab_str);
    if (text && v < BYTE_VOCAB)
        return prep_error("drop --vocab, or give one of at least 256: a text's tokens are its bytes",
                          "--vocab %ld is below 256, the byte ids of --text", v);
    *vocab = (int)v;
    return 0;
}

/* Reads the input into token ids. */
static int load_tokens(const char *flag, const char *path, int vocab, const char *tokenizer, Tokens *t) {
    unsigned char *bytes = NULL;
    int64_t n = 0;
    int rc = read_input(flag + 2, path, &bytes, &n);
    if (rc) return rc;
    t->path = path;
    t->vocab = vocab;
    if (strcmp(flag, "--text") == 0) {
        t->format = "bytes";
        t->tokens = malloc((size_t)n * sizeof *t->tokens);
        if (!t->tokens) rc = prep_error(NULL, "out of memory for %lld tokens", (long long)n);
        for (int64_t i = 0; t->tokens && i < n; i++) t->tokens[i] = bytes[i]; /* byte-level: id = byte */
        t->n = n;
        t->tokenizer = "bytes";
    } else {
        enum import_format f = strcmp(flag, "--bin") == 0 ? IMPORT_LLMC_BIN
                               : strcmp(flag, "--raw-u16") == 0 ? IMPORT_RAW_U16 : IMPORT_RAW_U32;
        ImportedTokens imp;
        char err[1024];
        if (import_tokens(f, bytes, (size_t)n, vocab, path, &imp, err, sizeof err)) {
            rc = prep_error("check the input option (--bin, --raw-u16, --raw-u32) and --vocab", "%s", err);
        } else {
            t->format = import_format_name(f);
            t->tokens = imp.tokens;
            t->n = imp.count;
            t->tokenizer = imp.tokenizer;
        }
    }
    if (tokenizer) t->tokenizer = tokenizer;
    free(bytes);
    return rc;
}

int cmd_prepare(int argc, char **argv) {
    static const char *const input_flags[] = {"--text", "--bin", "--raw-u16", "--raw-u32"};
    const char *inputs[4] = {NULL, NULL, NULL, NULL};
    const char *out = NULL, *val_out = NULL, *frac_str = NULL, *vocab_str = NULL, *tokenizer = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0)
            return prep_error(help_hint, "unexpected argument '%s' (options start with --, e.g. --text %s)",
                              arg, arg);
        /* Accept both "--flag value" and "--flag=value". */
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const char **slot = NULL;
#define IS(flag) (name_len == strlen(flag) && strncmp(arg, flag, name_len) == 0)
        for (int k = 0; k < 4; k++)
            if (IS(input_flags[k])) slot = &inputs[k];
        if (IS("--out")) slot = &out;
        else if (IS("--val-out")) slot = &val_out;
        else if (IS("--val-fraction")) slot = &frac_str;
        else if (IS("--vocab")) slot = &vocab_str;
        else if (IS("--tokenizer")) slot = &tokenizer;
#undef IS
        if (!slot)
            return prep_error(help_hint, "unknown option '%.*s'; the options are --text, --bin, --raw-u16, "
                              "--raw-u32, --vocab, --tokenizer, --out, --val-out, --val-fraction and --help",
                              (int)name_len, arg);
        const char *value = NULL;
        if (eq) value = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) value = argv[++i];
        if (!value || !value[0])
            return prep_error(help_hint, "option '%.*s' needs a value", (int)name_len, arg);
        if (*slot)
            return prep_error(help_hint, "option '%.*s' is given twice", (int)name_len, arg);
        *slot = value;
    }
    int input = -1;
    for (int k = 0; k < 4; k++) {
        if (!inputs[k]) continue;
        if (input >= 0)
            return prep_error("give one input file per run", "%s and %s both given; prepare reads one input",
                              input_flags[input], input_flags[k]);
        input = k;
    }
    if (input < 0)
        return prep_error(help_hint, "missing --text FILE (the text to tokenize) or --bin/--raw-u16/--raw-u32 "
                          "FILE (tokens to import)");
    const char *flag = input_flags[input], *in = inputs[input];
    if (!out) return prep_error(help_hint, "missing --out DATA.h5 (where the training tokens go)");
    int vocab = 0;
    int rc = parse_vocab(vocab_str, flag, &vocab);
    if (rc) return rc;

    double frac = 0.05;
    if (frac_str) {
        char *end = NULL;
        errno = 0;
        frac = strtod(frac_str, &end);
        if (end == frac_str || *end != '\0' || errno != 0 || !isfinite(frac))
            return prep_error("use a number such as --val-fraction 0.05",
                              "--val-fraction '%s' is not a number", frac_str);
        if (frac < 0.0 || frac > 0.5)
            return prep_error("use a value in [0, 0.5], e.g. 0.05 (0 writes no validation file)",
                              "--val-fraction %g is outside [0, 0.5]", frac);
    }
    if (frac == 0.0 && val_out)
        return prep_error("drop --val-out, or give a --val-fraction above 0",
                          "--val-out '%s' given with --val-fraction 0 (no validation split)", val_out);

    char *val_default = NULL;
    if (frac > 0.0 && !val_out) {
        size_t len = strlen(out);
        val_default = malloc(len + 16);
        if (!val_default) return prep_error(NULL, "out of memory");
        if (len > 3 && strcmp(out + len - 3, ".h5") == 0)
            snprintf(val_default, len + 16, "%.*s-val.h5", (int)(len - 3), out);
        else
            snprintf(val_default, len + 16, "%s-val.h5", out);
        val_out = val_default;
    }

    Tokens t = {0};
    if (same_file(in, out)) {
        rc = prep_error("choose another --out path",
                        "--out '%s' is the input file; refusing to overwrite it", out);
        goto done;
    }
    if (val_out && same_file(in, val_out)) {
        rc = prep_error("choose another --val-out path",
                        "--val-out '%s' is the input file; refusing to overwrite it", val_out);
        goto done;
    }
    if (val_out && same_file(out, val_out)) {
        rc = prep_error("give --out and --val-out different paths",
                        "--out and --val-out are the same file '%s'", out);
        goto done;
    }

    rc = load_tokens(flag, in, vocab, tokenizer, &t);
    if (rc) goto done;
    int64_t n = t.n;
    int64_t n_val = val_out ? (int64_t)floor((double)n * frac) : 0;
    int64_t n_train = n - n_val;
    /* One training window needs at least 2 tokens (an input and its target). */
    if (val_out && n_val < 2) {
        rc = prep_error("use a larger input, a larger --val-fraction, or --val-fraction 0",
                        "'%s' has %lld tokens: a validation fraction of %g leaves %lld validation tokens, "
                        "fewer than the 2 one sequence needs", in, (long long)n, frac, (long long)n_val);
        goto done;
    }
    if (n_train < 2) {
        rc = prep_error("use a larger input", "'%s' has %lld tokens, too few for a training set", in,
                        (long long)n);
        goto done;
    }

    rc = write_split(out, &t, 0, n_train);
    if (rc) goto done;
    if (val_out) rc = write_split(val_out, &t, n_train, n);
    if (rc) goto done;

    if (strcmp(t.format, "bytes") == 0)
        printf("prepared '%s': %lld bytes, byte-level tokens (vocab %d)\n", in, (long long)n, vocab);
    else
        printf("prepared '%s': %lld tokens (%s, vocab %d, tokenizer %s)\n", in, (long long)n, t.format, vocab,
               t.tokenizer);
    printf("  train: %lld tokens -> %s\n", (long long)n_train, out);
    if (val_out)
        printf("  val:   %lld tokens -> %s (last %g of the input)\n", (long long)n_val, val_out, frac);
    else printf("  val:   none (--val-fraction 0)\n");
    fflush(stdout);
done:
    free(t.tokens);
    free(val_default);
    return rc;
}
