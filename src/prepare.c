/*
 * `mokc prepare --text FILE --out DATA.h5 [--val-out VAL.h5] [--val-fraction 0.05]`: byte-level
 * tokenization (token id = byte value, vocab 256). The first (1 - fraction) of the bytes become
 * the training set and the last fraction the validation set, so the two never share text. Output
 * files are written crash-safely by data_write_tokens.
 */
#include "prepare.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "data.h"

#define BYTE_VOCAB 256

static const char usage_text[] =
    "usage: mokc prepare --text FILE --out DATA.h5 [--val-out VAL.h5] [--val-fraction F]\n"
    "\n"
    "Tokenizes a text file byte by byte (vocab 256) into HDF5 token files for 'mokc train'.\n"
    "\n"
    "  --text FILE        input text (any bytes; UTF-8 is kept as its bytes)\n"
    "  --out DATA.h5      training tokens: the first (1 - F) of the bytes\n"
    "  --val-out VAL.h5   validation tokens: the last F of the bytes\n"
    "                     (default: DATA with .h5 replaced by -val.h5)\n"
    "  --val-fraction F   validation share in [0, 0.5], default 0.05; 0 writes no validation file\n"
    "  --help             this text\n"
    "\n"
    "example: mokc prepare --text data/devils-dictionary.txt --out data/devil.h5\n";

static int prep_error(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same shape as mokc_die's output, but returns so that the caller (and tests) get the code. */
static int prep_error(const char *hint, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "mokc: error: prepare: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (hint) fprintf(stderr, "---> HINT: %s\n", hint);
    fflush(stderr);
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

/* Reads a whole regular file. Returns 0, or prints the error and returns the exit code. */
static int read_text(const char *path, unsigned char **data, int64_t *size) {
    *data = NULL;
    *size = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return prep_error("check the path given to --text", "cannot read text file '%s': %s", path,
                          strerror(errno));
    if (!S_ISREG(st.st_mode))
        return prep_error("--text takes a plain text file", "'%s' is not a regular file", path);
    if (st.st_size == 0)
        return prep_error("give a text file with some content", "text file '%s' is empty", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return prep_error("check the file's permissions", "cannot read text file '%s': %s", path,
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
        return prep_error("check the file's permissions", "cannot read text file '%s'", path);
    }
    *data = buf;
    *size = (int64_t)got; /* a file that shrank while we read it: use what was there */
    return 0;
}

static int write_split(const char *out, const unsigned char *bytes, int64_t begin, int64_t end,
                       int64_t total, const char *text) {
    int64_t n = end - begin;
    uint32_t *tokens = malloc((size_t)n * sizeof *tokens);
    if (!tokens) return prep_error(NULL, "out of memory for %lld tokens", (long long)n);
    for (int64_t i = 0; i < n; i++) tokens[i] = bytes[begin + i]; /* byte-level: id = byte */
    char source[4200];
    snprintf(source, sizeof source, "%s bytes [%lld, %lld) of %lld", text, (long long)begin,
             (long long)end, (long long)total);
    char err[1024];
    int rc = data_write_tokens(out, tokens, n, BYTE_VOCAB, source, "bytes", err, sizeof err);
    free(tokens);
    if (rc != 0) {
        fflush(stdout);
        fprintf(stderr, "mokc: error: prepare: %s\n", err);
        return MOKC_EXIT_RUNTIME;
    }
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    const char *text = NULL, *out = NULL, *val_out = NULL, *frac_str = NULL;
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
        if (name_len == 6 && strncmp(arg, "--text", 6) == 0) slot = &text;
        else if (name_len == 5 && strncmp(arg, "--out", 5) == 0) slot = &out;
        else if (name_len == 9 && strncmp(arg, "--val-out", 9) == 0) slot = &val_out;
        else if (name_len == 14 && strncmp(arg, "--val-fraction", 14) == 0) slot = &frac_str;
        else
            return prep_error(help_hint, "unknown option '%.*s'; the options are --text, --out, --val-out, "
                              "--val-fraction and --help", (int)name_len, arg);
        const char *value = NULL;
        if (eq) value = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) value = argv[++i];
        if (!value || !value[0])
            return prep_error(help_hint, "option '%.*s' needs a value", (int)name_len, arg);
        if (*slot)
            return prep_error(help_hint, "option '%.*s' is given twice", (int)name_len, arg);
        *slot = value;
    }
    if (!text) return prep_error(help_hint, "missing --text FILE (the text to tokenize)");
    if (!out) return prep_error(help_hint, "missing --out DATA.h5 (where the training tokens go)");

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

    int rc = 0;
    unsigned char *bytes = NULL;
    if (same_file(text, out)) {
        rc = prep_error("choose another --out path",
                        "--out '%s' is the input text file; refusing to overwrite it", out);
        goto done;
    }
    if (val_out && same_file(text, val_out)) {
        rc = prep_error("choose another --val-out path",
                        "--val-out '%s' is the input text file; refusing to overwrite it", val_out);
        goto done;
    }
    if (val_out && same_file(out, val_out)) {
        rc = prep_error("give --out and --val-out different paths",
                        "--out and --val-out are the same file '%s'", out);
        goto done;
    }

    int64_t n = 0;
    rc = read_text(text, &bytes, &n);
    if (rc) goto done;
    int64_t n_val = val_out ? (int64_t)floor((double)n * frac) : 0;
    int64_t n_train = n - n_val;
    /* One training window needs at least 2 tokens (an input and its target). */
    if (val_out && n_val < 2) {
        rc = prep_error("use a larger text, a larger --val-fraction, or --val-fraction 0",
                        "'%s' has %lld bytes: a validation fraction of %g leaves %lld validation tokens, "
                        "fewer than the 2 one sequence needs", text, (long long)n, frac, (long long)n_val);
        goto done;
    }
    if (n_train < 2) {
        rc = prep_error("use a larger text", "'%s' has %lld bytes, too few for a training set", text,
                        (long long)n);
        goto done;
    }

    rc = write_split(out, bytes, 0, n_train, n, text);
    if (rc) goto done;
    if (val_out) rc = write_split(val_out, bytes, n_train, n, n, text);
    if (rc) goto done;

    printf("prepared '%s': %lld bytes, byte-level tokens (vocab %d)\n", text, (long long)n, BYTE_VOCAB);
    printf("  train: %lld tokens -> %s\n", (long long)n_train, out);
    if (val_out)
        printf("  val:   %lld tokens -> %s (last %g of the text)\n", (long long)n_val, val_out, frac);
    else printf("  val:   none (--val-fraction 0)\n");
    fflush(stdout);
done:
    free(bytes);
    free(val_default);
    return rc;
}
