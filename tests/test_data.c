/*
 * Tests for src/data.c (HDF5 token files, the window loader) and src/prepare.c (`mokc prepare`).
 * Token data is fresh random data each run (the seed is printed in failure messages); the loader
 * tests identify every row they get back by matching it against the token set, so they check
 * which windows were handed out, not just that something was. Bad files are built with HDF5
 * directly to reach the reader's error paths that our own writer refuses to produce.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "data.h"
#include "prepare.h"
#include "test.h"

/* ---------- helpers ---------- */

static uint64_t test_seed(void) {
    static uint64_t counter;
    return ((uint64_t)time(NULL) << 20) ^ ((uint64_t)getpid() << 4) ^ (++counter * 0x9e3779b97f4a7c15ULL);
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64*, distinct from the loader's generator */
    uint64_t x = *s ? *s : 0x1234567ULL;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* n random tokens in [0, vocab), forced to contain vocab-1 and a non-zero value. */
static uint32_t *random_tokens(int64_t n, int vocab, uint64_t seed) {
    uint32_t *t = malloc((size_t)n * sizeof *t);
    uint64_t s = seed | 1;
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)(rng_next(&s) % (uint64_t)vocab);
    t[n / 2] = (uint32_t)vocab - 1;
    return t;
}

/* dir/name in one of 32 rotating buffers (enough for any one test's live paths). */
static char *path_in(const char *dir, const char *name) {
    static char buf[32][4400];
    static int k;
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s/%s", dir, name); /* dir may itself be one of the buffers */
    char *p = buf[k++ % 32];
    memcpy(p, tmp, strlen(tmp) + 1);
    return p;
}

/* An in-memory token set for loader tests (no file needed). */
static TokenSet mem_set(int64_t n, int vocab, uint64_t seed) {
    TokenSet s;
    memset(&s, 0, sizeof s);
    s.tokens = random_tokens(n, vocab, seed);
    s.num_tokens = n;
    s.vocab_size = vocab;
    s.path = strdup("(memory)");
    return s;
}

/* The window a row came from: rows are identified by all seq_len+1 tokens; -1 if none matches. */
static int64_t find_window(const TokenSet *set, int S, const int *in, const int *tg) {
    int64_t nw = data_num_windows(set->num_tokens, S);
    for (int64_t w = 0; w < nw; w++) {
        const uint32_t *p = set->tokens + w * S;
        int ok = 1;
        for (int t = 0; t < S && ok; t++) ok = (int)p[t] == in[t] && (int)p[t + 1] == tg[t];
        if (ok) return w;
    }
    return -1;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { test_fail(__FILE__, __LINE__, "cannot write %s", path); return; }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static int count_tmp_files(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

/* Raw HDF5 files for the reader's error paths. attrs bitmask: which attributes to write. */
enum { A_VOCAB = 1, A_NUM = 2, A_SOURCE = 4, A_TOKENIZER = 8, A_VERSION = 16, A_ALL = 31 };

static void raw_attr_int(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, mtype, v);
    H5Aclose(a);
    H5Sclose(sp);
}

static void raw_attr_str(hid_t obj, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void write_raw(const char *path, const char *dset, hid_t ftype, hid_t mtype, const void *data,
                      int ndims, const hsize_t *dims, int vocab, long long num_tokens, int attrs) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f >= 0);
    hid_t sp = H5Screate_simple(ndims, dims, NULL);
    hid_t d = H5Dcreate2(f, dset, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    int version = 1;
    int64_t num = num_tokens;
    if (attrs & A_VOCAB) raw_attr_int(f, "vocab_size", H5T_STD_I32LE, H5T_NATIVE_INT, &vocab);
    if (attrs & A_NUM) raw_attr_int(f, "num_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, &num);
    if (attrs & A_SOURCE) raw_attr_str(f, "source", "test");
    if (attrs & A_TOKENIZER) raw_attr_str(f, "tokenizer", "bytes");
    if (attrs & A_VERSION) raw_attr_int(f, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
}

/* Expects data_open to fail with a message containing each of the needles. */
static void expect_open_error(const char *path, int vocab, const char *n1, const char *n2, const char *n3) {
    TokenSet s;
    char err[1024] = "";
    int rc = data_open(&s, path, vocab, err, sizeof err);
    CHECK_MSG(rc != 0, "data_open('%s') succeeded; expected an error naming '%s'", path, n1);
    CHECK(s.tokens == NULL);
    if (n1) CHECK_STR_CONTAINS(err, n1);
    if (n2) CHECK_STR_CONTAINS(err, n2);
    if (n3) CHECK_STR_CONTAINS(err, n3);
    data_close(&s);
}

/* Runs cmd_prepare with its stdout and stderr captured into out/err (each up to 4 KiB). */
static int run_prepare(const char *dir, char *out, char *err, int argc, char **argv) {
    char opath[4400], epath[4400];
    snprintf(opath, sizeof opath, "%s/prepare.stdout", dir);
    snprintf(epath, sizeof epath, "%s/prepare.stderr", dir);
    fflush(stdout);
    fflush(stderr);
    int save1 = dup(1), save2 = dup(2);
    int f1 = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int f2 = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(f1, 1);
    dup2(f2, 2);
    int rc = cmd_prepare(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(save1, 1);
    dup2(save2, 2);
    close(save1);
    close(save2);
    close(f1);
    close(f2);
    size_t n;
    unsigned char *b = read_all(opath, &n);
    snprintf(out, 4096, "%s", b ? (char *)b : "");
    free(b);
    b = read_all(epath, &n);
    snprintf(err, 4096, "%s", b ? (char *)b : "");
    free(b);
    return rc;
}

/* ---------- file round trips ---------- */

static void check_roundtrip(int vocab, int64_t n, int expect_bytes) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "tok.h5");
    uint64_t seed = test_seed();
    uint32_t *tok = random_tokens(n, vocab, seed);
    char err[1024] = "";
    CHECK_MSG(data_write_tokens(p, tok, n, vocab, "unit test", "bytes", err, sizeof err) == 0, "%s", err);
    TokenSet s;
    CHECK_MSG(data_open(&s, p, vocab, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, n);
    CHECK_EQ_INT(s.vocab_size, vocab);
    CHECK_EQ_INT(s.format_version, 1);
    CHECK(s.source && strcmp(s.source, "unit test") == 0);
    CHECK(s.tokenizer && strcmp(s.tokenizer, "bytes") == 0);
    CHECK(s.path && strcmp(s.path, p) == 0);
    if (s.tokens) {
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (s.tokens[i] != tok[i]) bad = i;
        CHECK_MSG(bad < 0, "token %lld differs after the round trip (seed %llu)", (long long)bad,
                  (unsigned long long)seed);
    }
    data_close(&s);
    CHECK(s.tokens == NULL);
    /* The stored dtype is the narrow one when it fits. */
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    CHECK_EQ_INT(H5Tget_size(t), expect_bytes);
    CHECK(H5Tget_sign(t) == H5T_SGN_NONE);
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);
    CHECK_EQ_INT(count_tmp_files(dir, ".tmp-"), 0);
    free(tok);
}

static void roundtrip_uint16(void) { check_roundtrip(256, 12345, 2); }
static void roundtrip_uint16_max_vocab(void) { check_roundtrip(65536, 5000, 2); }
static void roundtrip_uint32(void) { check_roundtrip(70000, 12345, 4); }

static void open_any_vocab(void) {
    /* expected_vocab <= 0 accepts the file's vocabulary. */
    const char *p = path_in(test_tmpdir(), "tok.h5");
    uint32_t *tok = random_tokens(100, 1000, test_seed());
    char err[1024] = "";
    CHECK(data_write_tokens(p, tok, 100, 1000, "", "bpe", err, sizeof err) == 0);
    TokenSet s;
    CHECK_MSG(data_open(&s, p, 0, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.vocab_size, 1000);
    CHECK(s.source && s.source[0] == '\0');
    data_close(&s);
    free(tok);
}

/* ---------- window order ---------- */

static void permutation_is_pinned(void) {
    /* Saved runs resume through this order: a change here must be deliberate. */
    static const int64_t golden[12] = {6, 10, 3, 7, 5, 11, 2, 4, 0, 1, 8, 9};
    int64_t p[12];
    data_epoch_permutation(42, 0, 12, p);
    for (int i = 0; i < 12; i++)
        CHECK_MSG(p[i] == golden[i], "perm[%d] = %lld, pinned %lld", i, (long long)p[i], (long long)golden[i]);
}

static void permutation_properties(void) {
    uint64_t seed = test_seed();
    int64_t sizes[] = {1, 2, 3, 17, 1000};
    for (int k = 0; k < 5; k++) {
        int64_t n = sizes[k];
        int64_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        char *seen = calloc((size_t)n, 1);
        data_epoch_permutation(seed, 3, n, a);
        data_epoch_permutation(seed, 3, n, b);
        int ok = 1, same = 1;
        for (int64_t i = 0; i < n; i++) {
            if (a[i] < 0 || a[i] >= n || seen[a[i]]) ok = 0;
            else seen[a[i]] = 1;
            if (a[i] != b[i]) same = 0;
        }
        CHECK_MSG(ok, "not a permutation of %lld (seed %llu)", (long long)n, (unsigned long long)seed);
        CHECK(same);
        if (n == 1000) {
            data_epoch_permutation(seed, 4, n, b);
            int diff = 0;
            for (int64_t i = 0; i < n; i++) diff += a[i] != b[i];
            CHECK_MSG(diff > 900, "epochs 3 and 4 share %d of 1000 positions", 1000 - diff);
            data_epoch_permutation(seed + 1, 3, n, b);
            diff = 0;
            for (int64_t i = 0; i < n; i++) diff += a[i] != b[i];
            CHECK_MSG(diff > 900, "seeds s and s+1 share %d of 1000 positions", 1000 - diff);
        }
        free(a);
        free(b);
        free(seen);
    }
}

/* ---------- loader ---------- */

static void loader_shift_and_windows(void) {
    const int S = 16, MB = 3;
    TokenSet set = mem_set(40 * S + 5, 256, test_seed());
    DataLoader ld;
    char err[512] = "";
    CHECK_MSG(loader_init(&ld, &set, S, MB, 7, 0, 1, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(ld.num_windows, 40);
    int in[3 * 16], tg[3 * 16];
    for (int b = 0; b < 5; b++) {
        loader_next_batch(&ld, in, tg);
        for (int j = 0; j < MB; j++) {
            const int *r = in + j * S, *q = tg + j * S;
            for (int t = 0; t + 1 < S; t++) CHECK(q[t] == r[t + 1]);
            int64_t w = find_window(&set, S, r, q);
            CHECK_MSG(w >= 0, "batch %d row %d is not a window at a multiple of seq_len", b, j);
        }
    }
    CHECK_EQ_INT(loader_position(&ld), 5 * MB);
    loader_free(&ld);
    data_close(&set);
}

static void loader_same_seed_same_batches(void) {
    const int S = 8, MB = 4, NB = 6;
    uint64_t seed = test_seed();
    TokenSet set = mem_set(500 * S + 1, 256, seed);
    DataLoader a, b, c;
    char err[512] = "";
    CHECK(loader_init(&a, &set, S, MB, seed, 0, 1, err, sizeof err) == 0);
    CHECK(loader_init(&b, &set, S, MB, seed, 0, 1, err, sizeof err) == 0);
    CHECK(loader_init(&c, &set, S, MB, seed + 1, 0, 1, err, sizeof err) == 0);
    int ia[32], ta[32], ib[32], tb[32], ic[32], tc[32];
    int same_ab = 1, same_ac = 1;
    for (int k = 0; k < NB; k++) {
        loader_next_batch(&a, ia, ta);
        loader_next_batch(&b, ib, tb);
        loader_next_batch(&c, ic, tc);
        if (memcmp(ia, ib, sizeof ia) || memcmp(ta, tb, sizeof ta)) same_ab = 0;
        if (memcmp(ia, ic, sizeof ia)) same_ac = 0;
    }
    CHECK_MSG(same_ab, "same seed %llu gave different batches", (unsigned long long)seed);
    CHECK_MSG(!same_ac, "seeds %llu and +1 gave the same %d batches", (unsigned long long)seed, NB);
    loader_free(&a);
    loader_free(&b);
    loader_free(&c);
    data_close(&set);
}

/* 1 rank x mb 4 == 2 ranks x mb 2 == 4 ranks x mb 1, over several epochs (10 windows, so global
 * batches of 4 straddle epoch boundaries). */
static void loader_ranks_split_the_same_stream(void) {
    const int S = 5, NB = 12;
    TokenSet set = mem_set(10 * S + 3, 256, test_seed());
    char err[512] = "";
    DataLoader one, two[2], four[4];
    CHECK(loader_init(&one, &set, S, 4, 99, 0, 1, err, sizeof err) == 0);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(loader_init(&two[r], &set, S, 2, 99, r, 2, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < 4; r++) CHECK(loader_init(&four[r], &set, S, 1, 99, r, 4, err, sizeof err) == 0);
    int i1[20], t1[20], i2[20], t2[20], i4[20], t4[20];
    for (int b = 0; b < NB; b++) {
        loader_next_batch(&one, i1, t1);
        for (int r = 0; r < 2; r++) loader_next_batch(&two[r], i2 + r * 2 * S, t2 + r * 2 * S);
        for (int r = 0; r < 4; r++) loader_next_batch(&four[r], i4 + r * S, t4 + r * S);
        CHECK_MSG(!memcmp(i1, i2, sizeof i1) && !memcmp(t1, t2, sizeof t1), "batch %d: 1x4 != 2x2", b);
        CHECK_MSG(!memcmp(i1, i4, sizeof i1) && !memcmp(t1, t4, sizeof t1), "batch %d: 1x4 != 4x1", b);
        CHECK_EQ_INT(loader_position(&two[1]), loader_position(&one));
    }
    loader_free(&one);
    for (int r = 0; r < 2; r++) loader_free(&two[r]);
    for (int r = 0; r < 4; r++) loader_free(&four[r]);
    data_close(&set);
}

static void loader_epoch_wrap(void) {
    const int S = 7, NW = 23;
    TokenSet set = mem_set(NW * S + 1, 256, test_seed());
    char err[512] = "";
    DataLoader ld, big;
    CHECK(loader_init(&ld, &set, S, 1, 5, 0, 1, err, sizeof err) == 0);
    CHECK(loader_init(&big, &set, S, 4, 5, 0, 1, err, sizeof err) == 0);
    int64_t order[3][23];
    int in[4 * 7], tg[4 * 7];
    for (int e = 0; e < 3; e++) {
        int seen[23] = {0};
        CHECK_EQ_INT(loader_epoch(&ld), e);
        for (int k = 0; k < NW; k++) {
            loader_next_batch(&ld, in, tg);
            int64_t w = find_window(&set, S, in, tg);
            order[e][k] = w;
            if (w >= 0) seen[w]++;
        }
        for (int w = 0; w < NW; w++)
            CHECK_MSG(seen[w] == 1, "epoch %d saw window %d %d times", e, w, seen[w]);
    }
    int differ = 0;
    for (int k = 0; k < NW; k++) differ += order[0][k] != order[1][k];
    CHECK_MSG(differ > 0, "epochs 0 and 1 have the same order");
    /* A micro-batch of 4 straddles epochs (23 = 5*4 + 3) but walks the same stream. */
    for (int b = 0; b < 17; b++) {
        loader_next_batch(&big, in, tg);
        for (int j = 0; j < 4; j++) {
            int g = b * 4 + j;
            if (g >= 3 * NW) break;
            CHECK_EQ_INT(find_window(&set, S, in + j * S, tg + j * S), order[g / NW][g % NW]);
        }
    }
    loader_free(&ld);
    loader_free(&big);
    data_close(&set);
}

static void loader_seek_resumes(void) {
    const int S = 6;
    uint64_t seed = test_seed();
    TokenSet set = mem_set(31 * S + 2, 300, seed);
    char err[512] = "";
    DataLoader a, b, r0, r1;
    CHECK(loader_init(&a, &set, S, 4, seed, 0, 1, err, sizeof err) == 0);
    int in[24], tg[24], ref_in[9][24], ref_tg[9][24];
    int64_t saved = -1;
    for (int k = 0; k < 9; k++) {
        loader_next_batch(&a, ref_in[k], ref_tg[k]);
        if (k == 3) saved = loader_position(&a);
    }
    CHECK_EQ_INT(saved, 16);
    /* Same layout resumes bitwise. */
    CHECK(loader_init(&b, &set, S, 4, seed, 0, 1, err, sizeof err) == 0);
    loader_next_batch(&b, in, tg); /* state to be overwritten, including the cached epoch */
    loader_seek(&b, saved);
    for (int k = 4; k < 9; k++) {
        loader_next_batch(&b, in, tg);
        CHECK_MSG(!memcmp(in, ref_in[k], sizeof in) && !memcmp(tg, ref_tg[k], sizeof tg),
                  "batch %d after seek", k);
    }
    /* A 2-rank run with the same global batch resumes from the same position. */
    CHECK(loader_init(&r0, &set, S, 2, seed, 0, 2, err, sizeof err) == 0);
    CHECK(loader_init(&r1, &set, S, 2, seed, 1, 2, err, sizeof err) == 0);
    loader_seek(&r0, saved);
    loader_seek(&r1, saved);
    for (int k = 4; k < 9; k++) {
        loader_next_batch(&r0, in, tg);
        loader_next_batch(&r1, in + 12, tg + 12);
        CHECK_MSG(!memcmp(in, ref_in[k], sizeof in) && !memcmp(tg, ref_tg[k], sizeof tg),
                  "2-rank batch %d after seek", k);
    }
    /* loader_reset starts over (validation passes). */
    loader_reset(&b);
    CHECK_EQ_INT(loader_position(&b), 0);
    loader_next_batch(&b, in, tg);
    CHECK(!memcmp(in, ref_in[0], sizeof in) && !memcmp(tg, ref_tg[0], sizeof tg));
    loader_free(&a);
    loader_free(&b);
    loader_free(&r0);
    loader_free(&r1);
    data_close(&set);
}

static void loader_exact_bounds(void) {
    /* n = k*S + 1 uses every token; n = k*S leaves the last window out. The token buffer is
     * exactly n long, so a sanitizer build catches any read past it. */
    const int S = 9;
    for (int extra = 0; extra <= 1; extra++) {
        int64_t n = 12 * S + extra;
        TokenSet set = mem_set(n, 256, test_seed());
        set.tokens[n - 1] = 255;
        char err[512] = "";
        DataLoader ld;
        CHECK(loader_init(&ld, &set, S, 1, 1, 0, 1, err, sizeof err) == 0);
        int64_t nw = extra ? 12 : 11;
        CHECK_EQ_INT(ld.num_windows, nw);
        int in[9], tg[9], last_seen = 0;
        for (int64_t k = 0; k < nw; k++) {
            loader_next_batch(&ld, in, tg);
            int64_t w = find_window(&set, S, in, tg);
            CHECK(w >= 0);
            if (w == nw - 1 && extra) last_seen = tg[S - 1] == 255;
        }
        if (extra) CHECK_MSG(last_seen, "the final token was never a target");
        loader_free(&ld);
        data_close(&set);
    }
    CHECK_EQ_INT(data_num_windows(5, 8), 0);
    CHECK_EQ_INT(data_num_windows(9, 8), 1);
}

/* ---------- errors ---------- */

static void err_missing_file(void) {
    const char *p = path_in(test_tmpdir(), "nope.h5");
    expect_open_error(p, 256, p, "No such file", "mokc prepare");
}

static void err_not_hdf5(void) {
    const char *p = path_in(test_tmpdir(), "garbage.h5");
    uint32_t *junk = random_tokens(1000, 1 << 30, test_seed());
    write_bytes(p, junk, 4000);
    free(junk);
    expect_open_error(p, 256, "not an HDF5 file", p, "mokc prepare");
}

static void err_missing_dataset(void) {
    const char *p = path_in(test_tmpdir(), "other.h5");
    uint16_t v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hsize_t dims[1] = {10};
    write_raw(p, "other", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 1, dims, 256, 10, A_ALL);
    expect_open_error(p, 256, "no dataset '/tokens'", p, NULL);
}

static void err_wrong_dtype(void) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "float.h5");
    float v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hsize_t dims[1] = {10};
    write_raw(p, "tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v, 1, dims, 256, 10, A_ALL);
    expect_open_error(p, 256, "floating-point", "integer token ids", NULL);
    /* Signed ids (other tools write int32/int64) are read while every one is in range. */
    const char *q = path_in(dir, "int32.h5");
    int32_t w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    write_raw(q, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, w, 1, dims, 256, 10, A_ALL);
    TokenSet s;
    char err[1024] = "";
    CHECK_MSG(data_open(&s, q, 256, err, sizeof err) == 0, "%s", err);
    CHECK(s.tokens && s.tokens[9] == 10);
    data_close(&s);
    w[3] = -5;
    const char *r = path_in(dir, "negative.h5");
    write_raw(r, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, w, 1, dims, 256, 10, A_ALL);
    expect_open_error(r, 256, "token -5 at index 3", "negative", NULL);
}

static void err_two_dimensional(void) {
    const char *p = path_in(test_tmpdir(), "2d.h5");
    uint16_t v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    hsize_t dims[2] = {3, 4};
    write_raw(p, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 2, dims, 256, 12, A_ALL);
    expect_open_error(p, 256, "2 dimensions", "1-D", NULL);
}

/* Files from other tools need only /tokens; without vocab_size the model's vocabulary applies. */
static void attributes_are_optional(void) {
    const char *dir = test_tmpdir();
    uint16_t v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hsize_t dims[1] = {10};
    for (int k = 0; k < 5; k++) {
        char name[32];
        snprintf(name, sizeof name, "miss%d.h5", k);
        const char *p = path_in(dir, name);
        write_raw(p, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 1, dims, 256, 10, A_ALL & ~(1 << k));
        TokenSet s;
        char err[1024] = "";
        CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "attribute %d missing: %s", k, err);
        CHECK_EQ_INT(s.num_tokens, 10);
        CHECK_EQ_INT(s.vocab_size, 256);
        data_close(&s);
    }
    const char *bare = path_in(dir, "bare.h5");
    write_raw(bare, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 1, dims, 256, 10, 0);
    expect_open_error(bare, 0, "no vocab_size attribute", bare, NULL);
    expect_open_error(bare, 8, "token 8 at index 7", ">= vocab_size 8", NULL);
}

static void err_token_out_of_range(void) {
    const char *p = path_in(test_tmpdir(), "range.h5");
    uint64_t seed = test_seed();
    const int n = 4000;
    uint32_t *t32 = random_tokens(n, 256, seed);
    uint16_t *v = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = (uint16_t)t32[i];
    uint64_t s = seed;
    int bad = 100 + (int)(rng_next(&s) % 3000);
    v[bad] = 256; /* exactly vocab_size: the off-by-one boundary */
    v[bad + 7] = (uint16_t)(257 + rng_next(&s) % 60000); /* only the first offender is reported */
    hsize_t dims[1] = {(hsize_t)n};
    write_raw(p, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 1, dims, 256, n, A_ALL);
    char idx[64], val[64];
    snprintf(idx, sizeof idx, "index %d ", bad);
    snprintf(val, sizeof val, "token %u ", (unsigned)v[bad]);
    expect_open_error(p, 256, idx, val, ">= vocab_size 256");
    free(v);
    free(t32);
}

static void err_vocab_mismatch(void) {
    const char *p = path_in(test_tmpdir(), "v.h5");
    uint32_t *tok = random_tokens(500, 256, test_seed());
    char err[1024] = "";
    CHECK(data_write_tokens(p, tok, 500, 256, "x", "bytes", err, sizeof err) == 0);
    expect_open_error(p, 512, "vocab_size 256", "vocab_size is 512", "prepare");
    expect_open_error(p, 512, "model.vocab_size", NULL, NULL);
    free(tok);
}

static void err_num_tokens_mismatch(void) {
    const char *p = path_in(test_tmpdir(), "n.h5");
    uint16_t v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hsize_t dims[1] = {10};
    write_raw(p, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v, 1, dims, 256, 11, A_ALL);
    expect_open_error(p, 256, "num_tokens = 11", "holds 10 tokens", NULL);
}

static void err_too_few_tokens(void) {
    const char *p = path_in(test_tmpdir(), "small.h5");
    uint32_t *tok = random_tokens(100, 256, test_seed());
    char err[1024] = "";
    CHECK(data_write_tokens(p, tok, 100, 256, "x", "bytes", err, sizeof err) == 0);
    TokenSet s;
    CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "%s", err);
    DataLoader ld;
    /* 99/16 = 6 windows; 2 ranks x 4 sequences need 8*16+1 = 129 tokens. */
    CHECK(loader_init(&ld, &s, 16, 4, 1, 1, 2, err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "at least 129 tokens");
    CHECK_STR_CONTAINS(err, "has 100 tokens");
    CHECK_STR_CONTAINS(err, p);
    loader_free(&ld);
    /* Exactly enough is fine. */
    CHECK_MSG(loader_init(&ld, &s, 16, 3, 1, 1, 2, err, sizeof err) == 0, "%s", err);
    loader_free(&ld);
    CHECK(loader_init(&ld, &s, 16, 1, 1, 2, 2, err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "rank 2");
    data_close(&s);
    free(tok);
}

static void err_truncated(void) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "full.h5"), *q = path_in(dir, "half.h5");
    uint32_t *tok = random_tokens(20000, 256, test_seed());
    char err[1024] = "";
    CHECK(data_write_tokens(p, tok, 20000, 256, "x", "bytes", err, sizeof err) == 0);
    size_t n;
    unsigned char *b = read_all(p, &n);
    CHECK(b && n > 4000);
    write_bytes(q, b, n / 2);
    free(b);
    expect_open_error(q, 256, "truncated", q, "mokc prepare");
    free(tok);
}

static void writer_rejects_bad_input(void) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "w.h5");
    uint32_t tok[4] = {1, 2, 256, 3};
    char err[1024] = "";
    CHECK(data_write_tokens(p, tok, 4, 256, "x", "bytes", err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "token 256 at index 2");
    CHECK(!file_exists(p));
    CHECK(data_write_tokens(p, tok, 0, 256, "x", "bytes", err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "no tokens");
    const char *nodir = path_in(dir, "no/such/dir/w.h5");
    CHECK(data_write_tokens(nodir, tok, 2, 256, "x", "bytes", err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "directory exists");
    CHECK_EQ_INT(count_tmp_files(dir, ".tmp-"), 0);
}

/* ---------- crash safety ---------- */

static void crash_leftover_tmp_is_harmless(void) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "c.h5");
    uint64_t seed = test_seed();
    uint32_t *v1 = random_tokens(3000, 256, seed), *v2 = random_tokens(2000, 256, seed + 17);
    char err[1024] = "";
    CHECK(data_write_tokens(p, v1, 3000, 256, "v1", "bytes", err, sizeof err) == 0);
    /* A crash mid-write leaves a partial temporary file: one from another process and one whose
     * pid was reused by us; both hold the first half of a real token file. */
    size_t n;
    unsigned char *b = read_all(p, &n);
    char other[4400], mine[4400];
    snprintf(other, sizeof other, "%s.tmp-%d", p, 999999);
    snprintf(mine, sizeof mine, "%s.tmp-%ld", p, (long)getpid());
    write_bytes(other, b, n / 2);
    write_bytes(mine, b, n / 2);
    free(b);
    TokenSet s;
    CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, 3000);
    data_close(&s);
    CHECK_MSG(data_write_tokens(p, v2, 2000, 256, "v2", "bytes", err, sizeof err) == 0, "%s", err);
    CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, 2000);
    CHECK(s.tokens && memcmp(s.tokens, v2, 2000 * sizeof *v2) == 0);
    CHECK(s.source && strcmp(s.source, "v2") == 0);
    data_close(&s);
    CHECK(!file_exists(mine));  /* ours was replaced and renamed away */
    CHECK(file_exists(other));  /* another process's file is not ours to delete */
    free(v1);
    free(v2);
}

static void crash_failed_write_keeps_old_file(void) {
    const char *dir = test_tmpdir();
    const char *p = path_in(dir, "keep.h5");
    uint32_t *v1 = random_tokens(1500, 256, test_seed());
    char err[1024] = "";
    CHECK(data_write_tokens(p, v1, 1500, 256, "v1", "bytes", err, sizeof err) == 0);
    uint32_t bad[3] = {1, 999, 2};
    CHECK(data_write_tokens(p, bad, 3, 256, "v2", "bytes", err, sizeof err) != 0);
    TokenSet s;
    CHECK_MSG(data_open(&s, p, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, 1500);
    data_close(&s);
    /* A failure at the very end (rename onto a non-empty directory) removes the temporary. */
    const char *d = path_in(dir, "isdir.h5");
    mkdir(d, 0755);
    write_bytes(path_in(d, "x"), "x", 1);
    CHECK(data_write_tokens(d, v1, 1500, 256, "v1", "bytes", err, sizeof err) != 0);
    CHECK_STR_CONTAINS(err, "cannot rename");
    CHECK_EQ_INT(count_tmp_files(dir, ".tmp-"), 0);
    free(v1);
}

/* ---------- mokc prepare ---------- */

static void prepare_end_to_end(void) {
    const char *dir = test_tmpdir();
    char *text = path_in(dir, "corpus.txt"), *out = path_in(dir, "corpus.h5");
    char *val = path_in(dir, "corpus-val.h5");
    const int n = 7777;
    uint64_t seed = test_seed();
    uint32_t *r = random_tokens(n, 256, seed);
    unsigned char *bytes = malloc(n);
    for (int i = 0; i < n; i++) bytes[i] = (unsigned char)r[i];
    write_bytes(text, bytes, n);
    char sout[4096], serr[4096];
    char *argv[] = {"prepare", "--text", text, "--out", out};
    int rc = run_prepare(dir, sout, serr, 5, argv);
    CHECK_MSG(rc == 0, "prepare failed (%d): %s", rc, serr);
    int n_val = (int)(n * 0.05), n_train = n - n_val;
    char want[64];
    snprintf(want, sizeof want, "train: %d tokens", n_train);
    CHECK_STR_CONTAINS(sout, want);
    snprintf(want, sizeof want, "val:   %d tokens", n_val);
    CHECK_STR_CONTAINS(sout, want);
    CHECK_STR_CONTAINS(sout, val);
    TokenSet s;
    char err[1024] = "";
    CHECK_MSG(data_open(&s, out, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, n_train);
    CHECK(s.tokenizer && strcmp(s.tokenizer, "bytes") == 0);
    CHECK(s.source && strstr(s.source, text));
    int ok = s.tokens != NULL;
    for (int i = 0; ok && i < n_train; i++) ok = s.tokens[i] == bytes[i];
    CHECK_MSG(ok, "train tokens differ from the text's bytes (seed %llu)", (unsigned long long)seed);
    data_close(&s);
    CHECK_MSG(data_open(&s, val, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, n_val);
    ok = s.tokens != NULL;
    for (int i = 0; ok && i < n_val; i++) ok = s.tokens[i] == bytes[n_train + i];
    CHECK_MSG(ok, "val tokens are not the last bytes of the text");
    data_close(&s);

    /* --flag=value forms, an explicit --val-out, another fraction; and fraction 0 (no val file). */
    char *out2 = path_in(dir, "b.data"), *val2 = path_in(dir, "b-validation.h5");
    char a1[4400], a2[4400], a3[4400];
    snprintf(a1, sizeof a1, "--text=%s", text);
    snprintf(a2, sizeof a2, "--out=%s", out2);
    snprintf(a3, sizeof a3, "--val-out=%s", val2);
    char *argv2[] = {"prepare", a1, a2, a3, "--val-fraction=0.25"};
    CHECK_EQ_INT(run_prepare(dir, sout, serr, 5, argv2), 0);
    CHECK_MSG(data_open(&s, val2, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, (int)(n * 0.25));
    data_close(&s);
    char *out3 = path_in(dir, "c.bin");
    char *argv3[] = {"prepare", "--text", text, "--out", out3, "--val-fraction", "0"};
    CHECK_EQ_INT(run_prepare(dir, sout, serr, 7, argv3), 0);
    CHECK_MSG(data_open(&s, out3, 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(s.num_tokens, n);
    data_close(&s);
    CHECK(!file_exists(path_in(dir, "c.bin-val.h5")));
    /* Default val name for a path without .h5. */
    char *argv4[] = {"prepare", "--text", text, "--out", out3};
    CHECK_EQ_INT(run_prepare(dir, sout, serr, 5, argv4), 0);
    CHECK(file_exists(path_in(dir, "c.bin-val.h5")));
    free(r);
    free(bytes);
}

static void expect_prepare_error(const char *dir, int argc, char **argv, const char *needle) {
    char sout[4096], serr[4096];
    int rc = run_prepare(dir, sout, serr, argc, argv);
    CHECK_MSG(rc == 2, "prepare returned %d, expected 2, for the case '%s'", rc, needle);
    CHECK_STR_CONTAINS(serr, needle);
    CHECK_STR_CONTAINS(serr, "mokc: error: prepare:");
}

static void prepare_errors(void) {
    const char *dir = test_tmpdir();
    char *text = path_in(dir, "t.txt"), *empty = path_in(dir, "empty.txt"), *out = path_in(dir, "o.h5");
    char *missing = path_in(dir, "missing.txt");
    write_bytes(text, "The Devil's Dictionary, a test corpus.\n", 39);
    write_bytes(empty, "", 0);
    {
        char *a[] = {"prepare", "--out", out};
        expect_prepare_error(dir, 3, a, "missing --text");
    }
    {
        char *a[] = {"prepare", "--text", text};
        expect_prepare_error(dir, 3, a, "missing --out");
    }
    {
        char *a[] = {"prepare", "--text", missing, "--out", out};
        expect_prepare_error(dir, 5, a, "No such file");
    }
    {
        char *a[] = {"prepare", "--text", empty, "--out", out};
        expect_prepare_error(dir, 5, a, "is empty");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-fraction", "0.7"};
        expect_prepare_error(dir, 7, a, "outside [0, 0.5]");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-fraction", "-0.1"};
        expect_prepare_error(dir, 7, a, "outside [0, 0.5]");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-fraction", "abc"};
        expect_prepare_error(dir, 7, a, "not a number");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--bogus"};
        expect_prepare_error(dir, 6, a, "unknown option '--bogus'");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out"};
        expect_prepare_error(dir, 4, a, "needs a value");
    }
    {
        char *a[] = {"prepare", text};
        expect_prepare_error(dir, 2, a, "unexpected argument");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", text};
        expect_prepare_error(dir, 5, a, "refusing to overwrite");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-out", text};
        expect_prepare_error(dir, 7, a, "refusing to overwrite");
    }
    {
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-out", out};
        expect_prepare_error(dir, 7, a, "same file");
    }
    {
        /* 39 bytes x 0.01 leaves no validation tokens. */
        char *a[] = {"prepare", "--text", text, "--out", out, "--val-fraction", "0.01"};
        expect_prepare_error(dir, 7, a, "validation tokens");
    }
    CHECK(!file_exists(out));
    CHECK(!file_exists(path_in(dir, "o-val.h5")));
    size_t n;
    unsigned char *b = read_all(text, &n);
    CHECK_MSG(n == 39 && b && memcmp(b, "The Devil", 9) == 0, "the input text was modified");
    free(b);
    char sout[4096], serr[4096];
    char *h[] = {"prepare", "--help"};
    CHECK_EQ_INT(run_prepare(dir, sout, serr, 2, h), 0);
    CHECK_STR_CONTAINS(sout, "usage: mokc prepare");
    CHECK_STR_CONTAINS(sout, "--val-fraction");
}

TEST_SUITE(data,
    TEST_CASE(roundtrip_uint16),
    TEST_CASE(roundtrip_uint16_max_vocab),
    TEST_CASE(roundtrip_uint32),
    TEST_CASE(open_any_vocab),
    TEST_CASE(permutation_is_pinned),
    TEST_CASE(permutation_properties),
    TEST_CASE(loader_shift_and_windows),
    TEST_CASE(loader_same_seed_same_batches),
    TEST_CASE(loader_ranks_split_the_same_stream),
    TEST_CASE(loader_epoch_wrap),
    TEST_CASE(loader_seek_resumes),
    TEST_CASE(loader_exact_bounds),
    TEST_CASE(err_missing_file),
    TEST_CASE(err_not_hdf5),
    TEST_CASE(err_missing_dataset),
    TEST_CASE(err_wrong_dtype),
    TEST_CASE(err_two_dimensional),
    TEST_CASE(attributes_are_optional),
    TEST_CASE(err_token_out_of_range),
    TEST_CASE(err_vocab_mismatch),
    TEST_CASE(err_num_tokens_mismatch),
    TEST_CASE(err_too_few_tokens),
    TEST_CASE(err_truncated),
    TEST_CASE(writer_rejects_bad_input),
    TEST_CASE(crash_leftover_tmp_is_harmless),
    TEST_CASE(crash_failed_write_keeps_old_file),
    TEST_CASE(prepare_end_to_end),
    TEST_CASE(prepare_errors));
