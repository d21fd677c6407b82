/*
 * Importing tokens made by other tools (src/import.c, `mokc prepare --bin/--raw-u16/--raw-u32`):
 * each format round-trips id for id into a token file, foreign HDF5 token files train, and bad
 * inputs (corrupt llm.c header, id >= vocab, truncated or padded files, missing --vocab) stop with
 * exit 2, a message naming the problem and no output file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "data.h"
#include "import.h"
#include "test.h"

static char *path_in(const char *dir, const char *name) {
    static char buf[16][4400];
    static int k;
    char *p = buf[k++ % 16];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* n ids in [0, vocab), including vocab - 1 (the boundary) and 0. */
static uint32_t *make_ids(int64_t n, uint32_t vocab, uint64_t seed) {
    uint32_t *t = malloc((size_t)n * sizeof *t);
    uint64_t x = seed | 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t[i] = (uint32_t)(x % vocab);
    }
    t[n / 3] = vocab - 1;
    t[n / 2] = 0;
    return t;
}

static void put_le(unsigned char *p, uint32_t v, int width) {
    for (int b = 0; b < width; b++) p[b] = (unsigned char)(v >> (8 * b));
}

/* An llm.c shard in memory: header (magic, version, count) + ids of `width` bytes. */
static unsigned char *llmc_bytes(uint32_t magic, uint32_t version, int32_t count, const uint32_t *ids, int64_t n,
                                 int width, size_t *size) {
    *size = LLMC_HEADER_BYTES + (size_t)n * (size_t)width;
    unsigned char *b = calloc(1, *size);
    put_le(b, magic, 4);
    put_le(b + 4, version, 4);
    put_le(b + 8, (uint32_t)count, 4);
    for (int64_t i = 0; i < n; i++) put_le(b + LLMC_HEADER_BYTES + i * width, ids[i], width);
    return b;
}

static unsigned char *raw_bytes(const uint32_t *ids, int64_t n, int width, size_t *size) {
    *size = (size_t)n * (size_t)width;
    unsigned char *b = malloc(*size);
    for (int64_t i = 0; i < n; i++) put_le(b + i * width, ids[i], width);
    return b;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

static int prepare(const char *args, char *out, size_t outlen) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s prepare %s", test_mokc_binary(), args);
    return test_run(cmd, out, outlen);
}

/* The token file(s) prepare wrote hold exactly ids[0..n), train then val. */
static void check_tokens(const char *train, const char *val, const uint32_t *ids, int64_t n, int vocab,
                         const char *tokenizer) {
    TokenSet a, b;
    char err[1024] = "";
    CHECK_MSG(data_open(&a, train, vocab, err, sizeof err) == 0, "%s", err);
    int64_t nb = 0;
    if (val) {
        CHECK_MSG(data_open(&b, val, vocab, err, sizeof err) == 0, "%s", err);
        nb = b.num_tokens;
    }
    CHECK_EQ_INT(a.num_tokens + nb, n);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0 && a.tokens; i++) {
        uint32_t got = i < a.num_tokens ? a.tokens[i] : (val && b.tokens ? b.tokens[i - a.num_tokens] : ~0u);
        if (got != ids[i]) bad = i;
    }
    CHECK_MSG(bad < 0, "id %lld differs after the import", (long long)bad);
    CHECK(a.tokenizer && strcmp(a.tokenizer, tokenizer) == 0);
    CHECK_EQ_INT(a.vocab_size, vocab);
    data_close(&a);
    if (val) data_close(&b);
}

/* ---------- round trips ---------- */

static void llmc_gpt2_roundtrip(void) {
    const char *dir = test_tmpdir();
    const int64_t n = 20000;
    uint32_t *ids = make_ids(n, 50257, (uint64_t)time(NULL));
    size_t size;
    unsigned char *b = llmc_bytes(LLMC_MAGIC_U16, LLMC_VERSION_U16, (int32_t)n, ids, n, 2, &size);
    write_file(path_in(dir, "shard.bin"), b, size);
    char args[9000], out[4096];
    snprintf(args, sizeof args, "--bin %s --vocab 50257 --out %s", path_in(dir, "shard.bin"), path_in(dir, "t.h5"));
    int rc = prepare(args, out, sizeof out);
    CHECK_MSG(rc == 0, "prepare failed (%d): %s", rc, out);
    CHECK_STR_CONTAINS(out, "llm.c .bin");
    check_tokens(path_in(dir, "t.h5"), path_in(dir, "t-val.h5"), ids, n, 50257, "gpt2");
    free(b);
    free(ids);
}

static void llmc_llama3_roundtrip(void) {
    const char *dir = test_tmpdir();
    const int64_t n = 5000;
    uint32_t *ids = make_ids(n, 128256, (uint64_t)time(NULL) + 1);
    size_t size;
    unsigned char *b = llmc_bytes(LLMC_MAGIC_U32, LLMC_VERSION_U32, (int32_t)n, ids, n, 4, &size);
    write_file(path_in(dir, "shard.bin"), b, size);
    char args[9000], out[4096];
    snprintf(args, sizeof args, "--bin %s --vocab 128256 --out %s --val-fraction 0 --tokenizer my-bpe",
             path_in(dir, "shard.bin"), path_in(dir, "t.h5"));
    int rc = prepare(args, out, sizeof out);
    CHECK_MSG(rc == 0, "prepare failed (%d): %s", rc, out);
    check_tokens(path_in(dir, "t.h5"), NULL, ids, n, 128256, "my-bpe");
    CHECK(!file_exists(path_in(dir, "t-val.h5")));
    free(b);
    free(ids);
}

static void raw_roundtrips(void) {
    const char *dir = test_tmpdir();
    const int64_t n = 3000;
    for (int width = 2; width <= 4; width += 2) {
        int vocab = width == 2 ? 65536 : 200000;
        uint32_t *ids = make_ids(n, (uint32_t)vocab, (uint64_t)width * 977);
        size_t size;
        unsigned char *b = raw_bytes(ids, n, width, &size);
        char *in = path_in(dir, width == 2 ? "ids.u16" : "ids.u32"), *t = path_in(dir, width == 2 ? "a.h5" : "b.h5");
        char *v = path_in(dir, width == 2 ? "a-val.h5" : "b-val.h5");
        write_file(in, b, size);
        char args[9000], out[4096];
        snprintf(args, sizeof args, "--raw-u%d=%s --vocab=%d --out %s --val-fraction 0.1", width * 8, in, vocab, t);
        int rc = prepare(args, out, sizeof out);
        CHECK_MSG(rc == 0, "prepare failed (%d): %s", rc, out);
        check_tokens(t, v, ids, n, vocab, "unknown");
        free(b);
        free(ids);
    }
}

/* An HDF5 file another tool wrote: only a 1-D int64 dataset named tokens, no attributes. It
 * trains (its vocabulary is the model's), after the reader checked every id. */
static void foreign_hdf5_trains(void) {
    const char *dir = test_tmpdir();
    const int64_t n = 4000;
    uint32_t *ids = make_ids(n, 256, 5);
    int64_t *wide = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) wide[i] = ids[i];
    char *p = path_in(dir, "foreign.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "tokens", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, wide) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    TokenSet s;
    char err[1024] = "";
    CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "%s", err);
    CHECK(s.tokens && memcmp(s.tokens, ids, sizeof(uint32_t) * (size_t)n) == 0);
    data_close(&s);
    char cmd[9000], out[16384];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s train configs/tiny.json --set data.train=%s --set data.val= --set data.val_every=0 "
             "--set train.steps=2 --set train.warmup_steps=0 --set train.seq_len=32 --set train.micro_batch=2 "
             "--set log.metrics_path=", test_mokc_binary(), p);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "train on a foreign HDF5 file failed (%d): %s", rc, out);
    free(wide);
    free(ids);
}

/* ---------- bad inputs ---------- */

/* prepare fails with exit 2, the message holds each needle, and no output file appears. */
static void expect_prepare_error(const char *dir, const char *args, const char *n1, const char *n2) {
    char cmd[14000], out[8192];
    snprintf(cmd, sizeof cmd, "%s --out %s", args, path_in(dir, "never.h5"));
    int rc = prepare(cmd, out, sizeof out);
    CHECK_MSG(rc == 2, "exit %d (expected 2) for '%s': %s", rc, args, out);
    if (n1) CHECK_STR_CONTAINS(out, n1);
    if (n2) CHECK_STR_CONTAINS(out, n2);
    CHECK_STR_CONTAINS(out, "---> HINT");
    CHECK(!file_exists(path_in(dir, "never.h5")));
    CHECK(!file_exists(path_in(dir, "never-val.h5")));
}

static void bad_llmc_files(void) {
    const char *dir = test_tmpdir();
    const int64_t n = 100;
    uint32_t *ids = make_ids(n, 256, 9);
    size_t size;
    char args[9000];
    struct {
        uint32_t magic, version;
        int32_t count;
        int64_t n;
        const char *file, *n1, *n2;
    } cases[] = {
        {12345, 1, 100, 100, "magic.bin", "magic number 12345", "20240520"},
        {LLMC_MAGIC_U16, 2, 100, 100, "version.bin", "version 2", NULL},
        {LLMC_MAGIC_U16, 1, 150, 100, "short.bin", "truncated", "promises 150 tokens"},
        {LLMC_MAGIC_U16, 1, 50, 100, "long.bin", "header says 50 tokens", "does not match"},
        {LLMC_MAGIC_U16, 1, -3, 100, "negative.bin", "holds -3 tokens", NULL},
        {LLMC_MAGIC_EVAL, 1, 100, 100, "eval.bin", "eval file", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = llmc_bytes(cases[i].magic, cases[i].version, cases[i].count, ids, cases[i].n, 2, &size);
        write_file(path_in(dir, cases[i].file), b, size);
        free(b);
        snprintf(args, sizeof args, "--bin %s --vocab 256", path_in(dir, cases[i].file));
        expect_prepare_error(dir, args, cases[i].n1, cases[i].n2);
    }
    /* Shorter than the header. */
    write_file(path_in(dir, "tiny.bin"), "\x28\xf5\x34\x01", 4);
    snprintf(args, sizeof args, "--bin %s --vocab 256", path_in(dir, "tiny.bin"));
    expect_prepare_error(dir, args, "shorter than the 1024-byte header", NULL);
    /* An id equal to the vocabulary size. */
    ids[7] = 300;
    unsigned char *b = llmc_bytes(LLMC_MAGIC_U16, 1, (int32_t)n, ids, n, 2, &size);
    write_file(path_in(dir, "range.bin"), b, size);
    free(b);
    snprintf(args, sizeof args, "--bin %s --vocab 300", path_in(dir, "range.bin"));
    expect_prepare_error(dir, args, "token 300 at index 7 is >= --vocab 300", NULL);
    free(ids);
}

static void bad_raw_files_and_flags(void) {
    const char *dir = test_tmpdir();
    char args[9000];
    write_file(path_in(dir, "odd.u16"), "\x01\x00\x02", 3);
    snprintf(args, sizeof args, "--raw-u16 %s --vocab 256", path_in(dir, "odd.u16"));
    expect_prepare_error(dir, args, "3 bytes, not a multiple of 2", NULL);
    write_file(path_in(dir, "six.u32"), "\x01\x00\x00\x00\x02\x00", 6);
    snprintf(args, sizeof args, "--raw-u32 %s --vocab 256", path_in(dir, "six.u32"));
    expect_prepare_error(dir, args, "not a multiple of 4", "--raw-u16");
    write_file(path_in(dir, "ok.u16"), "\x01\x00\x02\x00\x03\x00\x04\x00", 8);
    snprintf(args, sizeof args, "--raw-u16 %s --vocab 4 --val-fraction 0", path_in(dir, "ok.u16"));
    expect_prepare_error(dir, args, "token 4 at index 3 is >= --vocab 4", NULL);
    snprintf(args, sizeof args, "--raw-u16 %s", path_in(dir, "ok.u16"));
    expect_prepare_error(dir, args, "needs --vocab", NULL);
    snprintf(args, sizeof args, "--raw-u16 %s --vocab lots", path_in(dir, "ok.u16"));
    expect_prepare_error(dir, args, "--vocab 'lots'", NULL);
    snprintf(args, sizeof args, "--text LICENSE --vocab 255");
    expect_prepare_error(dir, args, "--vocab 255 is below 256", NULL);
    snprintf(args, sizeof args, "--text LICENSE --raw-u16 %s --vocab 256", path_in(dir, "ok.u16"));
    expect_prepare_error(dir, args, "--text and --raw-u16 both given", NULL);
    write_file(path_in(dir, "empty.u32"), "", 0);
    snprintf(args, sizeof args, "--raw-u32 %s --vocab 256", path_in(dir, "empty.u32"));
    expect_prepare_error(dir, args, "is empty", NULL);
}

/* The parser on its own: the edge cases the fuzzer starts from. */
static void parser_edges(void) {
    ImportedTokens t;
    char err[1024];
    uint32_t ids[3] = {1, 2, 65535};
    size_t size;
    unsigned char *b = llmc_bytes(LLMC_MAGIC_U16, 1, 3, ids, 3, 2, &size);
    CHECK(import_tokens(IMPORT_LLMC_BIN, b, size, 65536, "x", &t, err, sizeof err) == 0);
    CHECK(t.count == 3 && t.tokens && t.tokens[2] == 65535);
    free(t.tokens);
    CHECK(import_tokens(IMPORT_LLMC_BIN, b, size, 65535, "x", &t, err, sizeof err) != 0);
    CHECK(t.tokens == NULL && t.count == 0);
    CHECK(import_tokens(IMPORT_LLMC_BIN, b, size - 1, 65536, "x", &t, err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "truncated");
    CHECK(import_tokens(IMPORT_LLMC_BIN, b, 0, 65536, "x", &t, err, sizeof err) != 0);
    CHECK(import_tokens(IMPORT_RAW_U16, b, 0, 65536, "x", &t, err, sizeof err) != 0);
    CHECK(import_tokens(IMPORT_RAW_U16, b, 2, 0, "x", &t, err, sizeof err) != 0);
    put_le(b + 8, 0, 4);
    CHECK(import_tokens(IMPORT_LLMC_BIN, b, LLMC_HEADER_BYTES, 65536, "x", &t, err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "holds 0 tokens");
    free(b);
}

TEST_SUITE(import,
    TEST_CASE(llmc_gpt2_roundtrip),
    TEST_CASE(llmc_llama3_roundtrip),
    TEST_CASE(raw_roundtrips),
    TEST_CASE(foreign_hdf5_trains),
    TEST_CASE(bad_llmc_files),
    TEST_CASE(bad_raw_files_and_flags),
    TEST_CASE(parser_edges),
);
