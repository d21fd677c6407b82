/* Parsers for llm.c token shards and raw token arrays (formats in import.h). */
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Byte by byte: the files are little-endian whatever the host, and the buffer may be unaligned. */
static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

const char *import_format_name(enum import_format format) {
    switch (format) {
    case IMPORT_LLMC_BIN: return "llm.c .bin";
    case IMPORT_RAW_U16: return "raw uint16";
    case IMPORT_RAW_U32: return "raw uint32";
    }
    return "?";
}

/* Decodes count ids of `width` bytes from p, checking each against vocab. */
static int decode(const unsigned char *p, int64_t count, int width, int vocab, const char *name, uint32_t **out,
                  char *err, size_t errlen) {
    uint32_t *t = malloc((size_t)(count > 0 ? count : 1) * sizeof *t);
    if (!t) return mokc_fail(err, errlen, "out of memory for the %lld tokens of '%s'", (long long)count, name);
    for (int64_t i = 0; i < count; i++) {
        t[i] = width == 2 ? le16(p + 2 * i) : le32(p + 4 * i);
        if (t[i] >= (uint32_t)vocab) {
            mokc_fail(err, errlen,
                      "'%s': token %u at index %lld is >= --vocab %d; give the tokenizer's vocabulary size as "
                      "--vocab (every id must be below it), or check that the file is %s tokens",
                      name, t[i], (long long)i, vocab, width == 2 ? "uint16" : "uint32");
            free(t);
            return 1;
        }
    }
    *out = t;
    return 0;
}

static int parse_llmc(const unsigned char *data, size_t n, int vocab, const char *name, ImportedTokens *out,
                      char *err, size_t errlen) {
    if (n < LLMC_HEADER_BYTES)
        return mokc_fail(err, errlen,
                         "'%s' is %zu bytes, shorter than the %d-byte header of an llm.c token shard; it is "
                         "truncated or not an llm.c .bin file (raw token arrays take --raw-u16/--raw-u32)",
                         name, n, LLMC_HEADER_BYTES);
    uint32_t magic = le32(data), version = le32(data + 4);
    int32_t count = (int32_t)le32(data + 8);
    int width;
    uint32_t want_version;
    if (magic == LLMC_MAGIC_U16) {
        width = 2;
        want_version = LLMC_VERSION_U16;
        out->tokenizer = "gpt2";
    } else if (magic == LLMC_MAGIC_U32) {
        width = 4;
        want_version = LLMC_VERSION_U32;
        out->tokenizer = "llama3";
    } else if (magic == LLMC_MAGIC_EVAL) {
        return mokc_fail(err, errlen, "'%s' is an llm.c eval file (magic %d: multiple-choice examples), not a "
                         "token shard; import the *_train_*/*_val_* .bin shards", name, LLMC_MAGIC_EVAL);
    } else {
        return mokc_fail(err, errlen,
                         "'%s' has magic number %u; an llm.c token shard starts with %d (uint16 tokens) or %d "
                         "(uint32 tokens); the file is corrupt or not an llm.c .bin (raw token arrays take "
                         "--raw-u16/--raw-u32)", name, magic, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
    }
    if (version != want_version)
        return mokc_fail(err, errlen, "'%s' has llm.c format version %u; magic %u goes with version %u (the "
                         "header is corrupt, or from an llm.c version this mokc does not know)",
                         name, version, magic, want_version);
    if (count <= 0)
        return mokc_fail(err, errlen, "'%s': the llm.c header says it holds %d tokens; the header is corrupt",
                         name, count);
    size_t payload = n - LLMC_HEADER_BYTES, want = (size_t)count * (size_t)width;
    if (payload < want)
        return mokc_fail(err, errlen,
                         "'%s' is truncated: its header promises %d tokens (%zu bytes) but only %zu bytes (%zu "
                         "tokens) follow the header; copy or download the file again",
                         name, count, want, payload, payload / (size_t)width);
    if (payload > want)
        return mokc_fail(err, errlen,
                         "'%s' has %zu bytes after its header but the header says %d tokens (%zu bytes); the "
                         "token count does not match the file size (corrupt header or concatenated shards)",
                         name, payload, count, want);
    out->count = count;
    return decode(data + LLMC_HEADER_BYTES, count, width, vocab, name, &out->tokens, err, errlen);
}

static int parse_raw(const unsigned char *data, size_t n, int width, int vocab, const char *name,
                     ImportedTokens *out, char *err, size_t errlen) {
    if (n == 0) return mokc_fail(err, errlen, "'%s' is empty; it holds no tokens", name);
    if (n % (size_t)width != 0)
        return mokc_fail(err, errlen,
                         "'%s' is %zu bytes, not a multiple of %d: it is truncated, or its ids are not %s "
                         "(try --raw-u%s)", name, n, width, width == 2 ? "uint16" : "uint32", width == 2 ? "32" : "16");
    out->tokenizer = "unknown";
    out->count = (int64_t)(n / (size_t)width);
    return decode(data, out->count, width, vocab, name, &out->tokens, err, errlen);
}

int import_tokens(enum import_format format, const unsigned char *data, size_t n, int vocab, const char *name,
                  ImportedTokens *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (vocab < 1) return mokc_fail(err, errlen, "--vocab %d must be >= 1", vocab);
    int rc = 1;
    switch (format) {
    case IMPORT_LLMC_BIN: rc = parse_llmc(data, n, vocab, name, out, err, errlen); break;
    case IMPORT_RAW_U16: rc = parse_raw(data, n, 2, vocab, name, out, err, errlen); break;
    case IMPORT_RAW_U32: rc = parse_raw(data, n, 4, vocab, name, out, err, errlen); break;
    }
    if (rc) {
        free(out->tokens);
        memset(out, 0, sizeof *out);
    }
    return rc;
}
