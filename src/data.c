/*
 * Token files (HDF5) and the deterministic window loader; data.h documents the format and the
 * order in which windows are handed to ranks. HDF5's own error-stack printing is switched off
 * around every call here: on a bad file the user gets one message of ours, with the innermost
 * HDF5 reason appended, instead of a page of library traces.
 */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "common.h"
#include "h5io.h"

/* ---------- writing ---------- */

int data_write_tokens(const char *path, const uint32_t *tokens, int64_t n, int vocab_size,
                      const char *source, const char *tokenizer, char *err, size_t errlen) {
    if (!path || !path[0]) return mokc_fail(err, errlen, "no output path given for the token file");
    if (n < 1 || !tokens)
        return mokc_fail(err, errlen, "no tokens to write to '%s' (got %lld); the input text is empty", path,
                         (long long)n);
    if (vocab_size < 1)
        return mokc_fail(err, errlen, "cannot write '%s': vocab_size %d must be >= 1", path, vocab_size);
    /* Refuse to write a file that data_open would reject. */
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] >= (uint32_t)vocab_size)
            return mokc_fail(err, errlen, "cannot write '%s': token %u at index %lld is >= vocab_size %d", path,
                             tokens[i], (long long)i, vocab_size);

    size_t tmplen = strlen(path) + 32;
    char *tmp = malloc(tmplen);
    if (!tmp) return mokc_fail(err, errlen, "out of memory writing '%s'", path);
    snprintf(tmp, tmplen, "%s.tmp-%ld", path, (long)getpid());

    H5Quiet quiet;
    h5io_quiet_begin(&quiet);
    H5Reason why;
    enum { FAPL, FILE_, SPACE, DSET, NIDS };
    hid_t ids[NIDS] = {-1, -1, -1, -1};
    int rc = 1;
    const char *what = NULL; /* the step that failed, for the message */

    ids[FAPL] = h5io_fapl(1);
    errno = 0;
    ids[FILE_] = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, ids[FAPL] >= 0 ? ids[FAPL] : H5P_DEFAULT);
    if (ids[FILE_] < 0) {
        int e = errno;
        mokc_fail(err, errlen,
                  "cannot create '%s' (temporary file for '%s'): %s (HDF5: %s); check that the directory "
                  "exists and is writable",
                  tmp, path, e ? strerror(e) : "error", h5io_reason(&why));
        goto done;
    }
    hsize_t dims[1] = {(hsize_t)n};
    ids[SPACE] = H5Screate_simple(1, dims, NULL);
    hid_t ftype = vocab_size <= DATA_U16_MAX_VOCAB ? H5T_STD_U16LE : H5T_STD_U32LE;
    if (ids[SPACE] < 0) { what = "creating the dataspace"; goto h5fail; }
    ids[DSET] = H5Dcreate2(ids[FILE_], "tokens", ftype, ids[SPACE], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ids[DSET] < 0) { what = "creating /tokens"; goto h5fail; }
    if (H5Dwrite(ids[DSET], H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens) < 0) {
        what = "writing /tokens";
        goto h5fail;
    }
    int vocab = vocab_size, version = DATA_FORMAT_VERSION;
    int64_t count = n;
    if (h5io_write_attr(ids[FILE_], "vocab_size", H5T_STD_I32LE, H5T_NATIVE_INT, &vocab) < 0 ||
        h5io_write_attr(ids[FILE_], "num_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, &count) < 0 ||
        h5io_write_attr_string(ids[FILE_], "source", source ? source : "") < 0 ||
        h5io_write_attr_string(ids[FILE_], "tokenizer", tokenizer ? tokenizer : "") < 0 ||
        h5io_write_attr(ids[FILE_], "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version) < 0) {
        what = "writing the attributes";
        goto h5fail;
    }
    /* Close explicitly: a failed final flush (disk full) must not go unnoticed. */
    if (H5Dclose(ids[DSET]) < 0) { ids[DSET] = -1; what = "closing /tokens"; goto h5fail; }
    ids[DSET] = -1;
    if (H5Fclose(ids[FILE_]) < 0) { ids[FILE_] = -1; what = "closing the file"; goto h5fail; }
    ids[FILE_] = -1;

    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        mokc_fail(err, errlen, "cannot sync '%s' to disk: %s", tmp, strerror(e));
        goto done;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        mokc_fail(err, errlen, "cannot rename '%s' to '%s': %s; check that '%s' is not a directory and its "
                  "directory is writable", tmp, path, strerror(errno), path);
        goto done;
    }
    h5io_fsync_parent(path);
    rc = 0;
    goto done;

h5fail:
    mokc_fail(err, errlen, "cannot write '%s' (%s): HDF5: %s; check free disk space and permissions", tmp,
              what, h5io_reason(&why));
done:
    h5io_close_all(ids, NIDS);
    h5io_quiet_end(&quiet);
    if (rc != 0) unlink(tmp); /* never leave a partial file behind */
    free(tmp);
    return rc;
}

/* ---------- reading ---------- */

/* The object that carries attribute `name`: the root group, else the dataset; -1 if neither. */
static hid_t attr_holder(hid_t file, hid_t dset, const char *name) {
    if (H5Aexists(file, name) > 0) return file;
    if (H5Aexists(dset, name) > 0) return dset;
    return -1;
}

/* Reads /tokens slice by slice as int64 (so that any integer type, signed or not, converts
 * exactly) and checks every id against [0, vocab). Returns 0, or fills err. */
static int read_tokens(hid_t dset, hid_t file_space, const char *path, uint32_t *out, int64_t n, int64_t vocab,
                       char *err, size_t errlen) {
    enum { SLICE = 1 << 20 };
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(n < SLICE ? n : SLICE));
    if (!buf) return mokc_fail(err, errlen, "out of memory loading the tokens of '%s'", path);
    int rc = 0;
    for (int64_t begin = 0; begin < n && rc == 0; begin += SLICE) {
        hsize_t start[1] = {(hsize_t)begin}, count[1] = {(hsize_t)(n - begin < SLICE ? n - begin : SLICE)};
        hid_t mem = H5Screate_simple(1, count, NULL);
        H5Reason why;
        if (mem < 0 || H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(dset, H5T_NATIVE_INT64, mem, file_space, H5P_DEFAULT, buf) < 0)
            rc = mokc_fail(err, errlen, "cannot read the tokens of '%s': the file is truncated or corrupt (HDF5: "
                           "%s); re-create it with 'mokc prepare'", path, h5io_reason(&why));
        if (mem >= 0) H5Sclose(mem);
        for (hsize_t i = 0; rc == 0 && i < count[0]; i++) {
            int64_t t = buf[i];
            if (t < 0 || t >= vocab)
                rc = mokc_fail(err, errlen,
                               "'%s': token %lld at index %lld is %s %lld; the file is corrupt or was made for "
                               "another tokenizer (re-create it with 'mokc prepare')",
                               path, (long long)t, (long long)(begin + (int64_t)i),
                               t < 0 ? "negative; ids are 0 .." : ">= vocab_size",
                               t < 0 ? (long long)vocab - 1 : (long long)vocab);
            else out[begin + (int64_t)i] = (uint32_t)t;
        }
    }
    free(buf);
    return rc;
}

void data_close(TokenSet *set) {
    if (!set) return;
    free(set->tokens);
    free(set->path);
    free(set->source);
    free(set->tokenizer);
    memset(set, 0, sizeof *set);
}

int data_open(TokenSet *set, const char *path, int expected_vocab, char *err, size_t errlen) {
    memset(set, 0, sizeof *set);
    if (!path || !path[0])
        return mokc_fail(err, errlen, "no token file given (set data.train / data.val in the spec)");
    struct stat st;
    if (stat(path, &st) != 0)
        return mokc_fail(err, errlen,
                         "cannot open token file '%s': %s; create it with 'mokc prepare --text FILE --out %s' "
                         "(or scripts/fetch-data.sh for the default corpus)",
                         path, strerror(errno), path);
    if (!S_ISREG(st.st_mode)) return mokc_fail(err, errlen, "token file '%s' is not a regular file", path);
    if (access(path, R_OK) != 0)
        return mokc_fail(err, errlen, "cannot read token file '%s': %s", path, strerror(errno));

    H5Quiet quiet;
    h5io_quiet_begin(&quiet);
    H5Reason why;
    enum { FAPL, FILE_, DSET, SPACE, TYPE, NIDS };
    hid_t ids[NIDS] = {-1, -1, -1, -1, -1};
    int rc = 1;
    uint32_t *tokens = NULL;
    char *source = NULL, *tokenizer = NULL;

#if H5_VERSION_GE(1, 12, 0)
    htri_t is_hdf5 = H5Fis_accessible(path, H5P_DEFAULT); /* H5Fis_hdf5 is deprecated there */
#else
    htri_t is_hdf5 = H5Fis_hdf5(path);
#endif
    if (is_hdf5 <= 0) {
        mokc_fail(err, errlen,
                  "token file '%s' (%lld bytes) is not an HDF5 file; token files are made by "
                  "'mokc prepare --text FILE --out %s'",
                  path, (long long)st.st_size, path);
        goto done;
    }
    ids[FAPL] = h5io_fapl(0);
    ids[FILE_] = H5Fopen(path, H5F_ACC_RDONLY, ids[FAPL] >= 0 ? ids[FAPL] : H5P_DEFAULT);
    if (ids[FILE_] < 0) {
        mokc_fail(err, errlen,
                  "cannot open HDF5 file '%s' (%lld bytes): it is truncated or corrupt (HDF5: %s); "
                  "re-create it with 'mokc prepare'",
                  path, (long long)st.st_size, h5io_reason(&why));
        goto done;
    }
    if (H5Lexists(ids[FILE_], "tokens", H5P_DEFAULT) <= 0) {
        mokc_fail(err, errlen,
                  "'%s' has no dataset '/tokens'; a token file holds its ids in a 1-D integer dataset named "
                  "'tokens' (make one with 'mokc prepare')",
                  path);
        goto done;
    }
    ids[DSET] = H5Dopen2(ids[FILE_], "tokens", H5P_DEFAULT);
    if (ids[DSET] < 0) {
        mokc_fail(err, errlen, "'/tokens' in '%s' is not a readable dataset (HDF5: %s)", path, h5io_reason(&why));
        goto done;
    }
    ids[SPACE] = H5Dget_space(ids[DSET]);
    int ndims = ids[SPACE] >= 0 ? H5Sget_simple_extent_ndims(ids[SPACE]) : -1;
    if (ndims != 1) {
        mokc_fail(err, errlen, "dataset '/tokens' in '%s' has %d dimensions; expected a 1-D array of tokens",
                  path, ndims);
        goto done;
    }
    hsize_t dims[1] = {0};
    H5Sget_simple_extent_dims(ids[SPACE], dims, NULL);
    ids[TYPE] = H5Dget_type(ids[DSET]);
    H5T_class_t cls = ids[TYPE] >= 0 ? H5Tget_class(ids[TYPE]) : H5T_NO_CLASS;
    if (cls != H5T_INTEGER) {
        mokc_fail(err, errlen, "dataset '/tokens' in '%s' holds %s values; expected integer token ids "
                  "(mokc prepare writes uint16/uint32)", path, h5io_type_class_name(cls));
        goto done;
    }

    /* Files from other tools need only /tokens: every attribute is optional, and checked when present. */
    int64_t vocab = expected_vocab, num_tokens = (int64_t)dims[0], version = DATA_FORMAT_VERSION;
    hid_t holder = attr_holder(ids[FILE_], ids[DSET], "format_version");
    if (holder >= 0 && h5io_read_attr_int64(holder, path, "format_version", &version, err, errlen)) goto done;
    if (version != DATA_FORMAT_VERSION) {
        mokc_fail(err, errlen, "'%s' has format_version %lld; this mokc reads version %d (re-create it with "
                  "this mokc's 'prepare')", path, (long long)version, DATA_FORMAT_VERSION);
        goto done;
    }
    holder = attr_holder(ids[FILE_], ids[DSET], "vocab_size");
    if (holder < 0 && expected_vocab <= 0) {
        mokc_fail(err, errlen, "'%s' has no vocab_size attribute and no model vocabulary was given to check "
                  "its tokens against; add the attribute (an integer on '/') or re-create the file with "
                  "'mokc prepare'", path);
        goto done;
    }
    if (holder >= 0 && h5io_read_attr_int64(holder, path, "vocab_size", &vocab, err, errlen)) goto done;
    if (vocab < 1 || vocab > INT_MAX) {
        mokc_fail(err, errlen, "'%s' has an invalid vocab_size attribute %lld", path, (long long)vocab);
        goto done;
    }
    if (expected_vocab > 0 && vocab != expected_vocab) {
        mokc_fail(err, errlen,
                  "'%s' has vocab_size %lld but the model's vocab_size is %d; re-run 'mokc prepare' with "
                  "the model's tokenizer, or set model.vocab_size to %lld",
                  path, (long long)vocab, expected_vocab, (long long)vocab);
        goto done;
    }
    holder = attr_holder(ids[FILE_], ids[DSET], "num_tokens");
    if (holder >= 0 && h5io_read_attr_int64(holder, path, "num_tokens", &num_tokens, err, errlen)) goto done;
    if (num_tokens < 0 || (hsize_t)num_tokens != dims[0]) {
        mokc_fail(err, errlen, "'%s' says num_tokens = %lld but dataset '/tokens' holds %llu tokens; the file "
                  "is damaged (re-create it with 'mokc prepare')",
                  path, (long long)num_tokens, (unsigned long long)dims[0]);
        goto done;
    }
    holder = attr_holder(ids[FILE_], ids[DSET], "source");
    source = holder < 0 ? strdup("") : NULL;
    if (holder >= 0 && h5io_read_attr_string(holder, path, "source", &source, err, errlen)) goto done;
    holder = attr_holder(ids[FILE_], ids[DSET], "tokenizer");
    tokenizer = holder < 0 ? strdup("") : NULL;
    if (holder >= 0 && h5io_read_attr_string(holder, path, "tokenizer", &tokenizer, err, errlen)) goto done;
    if (!source || !tokenizer) {
        mokc_fail(err, errlen, "out of memory opening '%s'", path);
        goto done;
    }
    if (num_tokens == 0) {
        mokc_fail(err, errlen, "'%s' holds no tokens; prepare it from a non-empty text", path);
        goto done;
    }
    if ((uint64_t)num_tokens > SIZE_MAX / sizeof(uint32_t)) {
        mokc_fail(err, errlen, "'%s' holds %lld tokens, too many for this machine's address space", path,
                  (long long)num_tokens);
        goto done;
    }
    tokens = malloc((size_t)num_tokens * sizeof(uint32_t));
    if (!tokens) {
        mokc_fail(err, errlen, "out of memory loading %lld tokens from '%s'", (long long)num_tokens, path);
        goto done;
    }
    if (read_tokens(ids[DSET], ids[SPACE], path, tokens, num_tokens, vocab, err, errlen)) goto done;

    set->path = strdup(path);
    if (!set->path) {
        mokc_fail(err, errlen, "out of memory opening '%s'", path);
        goto done;
    }
    set->tokens = tokens;
    set->num_tokens = num_tokens;
    set->vocab_size = (int)vocab;
    set->format_version = (int)version;
    set->source = source;
    set->tokenizer = tokenizer;
    tokens = NULL;
    source = tokenizer = NULL;
    rc = 0;
done:
    h5io_close_all(ids, NIDS);
    h5io_quiet_end(&quiet);
    free(tokens);
    free(source);
    free(tokenizer);
    return rc;
}

/* ---------- window order ---------- */

/* splitmix64 (Steele, Lea, Flood 2014): a fixed integer recipe, identical on every platform. */
static uint64_t sm64_next(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) by rejection, so no index is favoured (plain % would be biased). */
static uint64_t sm64_below(uint64_t *state, uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound; /* a multiple of bound */
    uint64_t r;
    do r = sm64_next(state);
    while (r >= limit);
    return r % bound;
}

void data_epoch_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm) {
    /* Both seed and epoch go through the mixer so that nearby seeds/epochs give unrelated streams. */
    uint64_t s = seed, e = (uint64_t)epoch;
    uint64_t state = sm64_next(&s) ^ sm64_next(&e);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)sm64_below(&state, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t data_num_windows(int64_t num_tokens, int seq_len) {
    if (seq_len < 1 || num_tokens < (int64_t)seq_len + 1) return 0;
    return (num_tokens - 1) / seq_len;
}

/* ---------- loader ---------- */

int loader_init(DataLoader *ld, const TokenSet *set, int seq_len, int micro_batch, uint64_t seed,
                int rank, int world, char *err, size_t errlen) {
    memset(ld, 0, sizeof *ld);
    ld->perm_epoch = -1;
    if (!set || !set->tokens) return mokc_fail(err, errlen, "data loader: no token set is open");
    if (seq_len < 1) return mokc_fail(err, errlen, "data loader: seq_len %d must be >= 1", seq_len);
    if (micro_batch < 1) return mokc_fail(err, errlen, "data loader: micro_batch %d must be >= 1", micro_batch);
    if (world < 1 || rank < 0 || rank >= world)
        return mokc_fail(err, errlen, "data loader: rank %d is outside a world of %d ranks", rank, world);
    int64_t windows = data_num_windows(set->num_tokens, seq_len);
    int64_t global = (int64_t)world * micro_batch;
    if (windows < global) {
        int64_t need = global * seq_len + 1;
        return mokc_fail(err, errlen,
                         "'%s' has %lld tokens (%lld windows of seq_len %d) but one global batch needs %lld "
                         "sequences (%d ranks x micro_batch %d), i.e. at least %lld tokens; use a larger "
                         "text (for a validation file: a larger --val-fraction), or a smaller train.seq_len or "
                         "train.micro_batch",
                         set->path ? set->path : "(token set)", (long long)set->num_tokens,
                         (long long)windows, seq_len, (long long)global, world, micro_batch, (long long)need);
    }
    ld->perm = malloc((size_t)windows * sizeof *ld->perm);
    if (!ld->perm) return mokc_fail(err, errlen, "out of memory for %lld window indices", (long long)windows);
    ld->set = set;
    ld->seq_len = seq_len;
    ld->micro_batch = micro_batch;
    ld->rank = rank;
    ld->world = world;
    ld->seed = seed;
    ld->num_windows = windows;
    ld->position = 0;
    return 0;
}

void loader_free(DataLoader *ld) {
    if (!ld) return;
    free(ld->perm);
    memset(ld, 0, sizeof *ld);
    ld->perm_epoch = -1;
}

void loader_next_batch(DataLoader *ld, int *inputs, int *targets) {
    const int S = ld->seq_len, mb = ld->micro_batch;
    for (int j = 0; j < mb; j++) {
        int64_t g = ld->position + (int64_t)ld->rank * mb + j; /* index in the global stream */
        int64_t epoch = g / ld->num_windows, idx = g % ld->num_windows;
        /* Positions only grow within a run, so one cached epoch suffices; a batch straddling two
         * epochs recomputes once. */
        if (epoch != ld->perm_epoch) {
            data_epoch_permutation(ld->seed, epoch, ld->num_windows, ld->perm);
            ld->perm_epoch = epoch;
        }
        /* perm[idx] < num_windows, so the window's last token index is at most
         * num_windows*S <= num_tokens - 1: never past the buffer. */
        const uint32_t *w = ld->set->tokens + ld->perm[idx] * S;
        int *in = inputs + (size_t)j * S, *tg = targets + (size_t)j * S;
        for (int t = 0; t < S; t++) {
            in[t] = (int)w[t];
            tg[t] = (int)w[t + 1];
        }
    }
    ld->position += (int64_t)ld->world * mb;
}

int64_t loader_position(const DataLoader *ld) { return ld->position; }

void loader_seek(DataLoader *ld, int64_t position) { ld->position = position < 0 ? 0 : position; }

void loader_reset(DataLoader *ld) { ld->position = 0; }

int64_t loader_epoch(const DataLoader *ld) {
    return ld->num_windows ? ld->position / ld->num_windows : 0;
}
