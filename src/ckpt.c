/* Checkpoint writer, reader and directory housekeeping (layout and guarantees in ckpt.h). */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "common.h"
#include "dist.h"
#include "h5io.h"

/* Chunk size bound: far below HDF5's 4 GiB chunk limit, and a checksum per 16 MiB. */
#define CHUNK_BYTES ((hsize_t)16 << 20)
#define MODEL_FILE "model.h5"
#define DONE_FILE "DONE"

/* The test hook of ckpt.h: dies exactly like kill -9 would, at a chosen point of one checkpoint. */
static void fault_point(const char *point, int step) {
    const char *want = getenv("MOKC_CKPT_FAULT");
    char here[64];
    snprintf(here, sizeof here, "%s:%d", point, step);
    if (!want || strcmp(want, here) != 0) return;
    fprintf(stderr, "mokc: MOKC_CKPT_FAULT: killing this process at '%s' of checkpoint %d\n", point, step);
    fflush(stderr);
    raise(SIGKILL);
}

/* ---------- directories ---------- */

/* The step of a checkpoint directory name "step_<digits>" (*tmp = 0) or an interrupted write
 * "step_<digits>.tmp-<anything>" (*tmp = 1); -1 for any other name. */
static int parse_step_name(const char *name, int *tmp) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *p = name + 5;
    long step = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) step = step * 10 + (*p - '0');
    if (digits == 0 || step > 2147483647L) return -1;
    if (*p == '\0') *tmp = 0;
    else if (strncmp(p, ".tmp-", 5) == 0) *tmp = 1;
    else return -1;
    return (int)step;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_done(const char *dir) {
    char p[CKPT_PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/" DONE_FILE, dir);
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Deletes a (flat) checkpoint directory, DONE first: an interruption leaves it incomplete and so
 * ignored, never complete with files missing. */
static int remove_checkpoint_dir(const char *path, int fault_step) {
    char p[CKPT_PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/" DONE_FILE, path);
    if (unlink(p) != 0 && errno != ENOENT) return -1;
    if (fault_step >= 0) fault_point("prune", fault_step);
    DIR *dir = opendir(path);
    if (!dir) return -1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && unlinkat(dirfd(dir), e->d_name, 0) != 0)
            rc = -1;
    closedir(dir);
    if (rmdir(path) != 0) rc = -1;
    return rc;
}

typedef struct {
    int step, complete;
    char name[32];
} DirEntry;

static int by_step_desc(const void *a, const void *b) {
    const DirEntry *x = a, *y = b;
    return (x->step < y->step) - (x->step > y->step);
}

/* Checkpoint directories in dir (complete = named step_N and holding DONE), newest first. */
static int list_checkpoints(const char *dir, DirEntry **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    while ((e = readdir(d))) {
        int tmp = 0, step = parse_step_name(e->d_name, &tmp);
        if (step < 0 || strlen(e->d_name) >= sizeof(*out)->name) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!is_dir(path)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            DirEntry *grown = realloc(*out, sizeof(DirEntry) * (size_t)cap);
            if (!grown) break;
            *out = grown;
        }
        DirEntry *x = &(*out)[n++];
        x->step = step;
        x->complete = !tmp && has_done(path);
        memcpy(x->name, e->d_name, strlen(e->d_name) + 1); /* fits: checked above */
    }
    closedir(d);
    if (n) qsort(*out, (size_t)n, sizeof(DirEntry), by_step_desc);
    return n;
}

/* Removes interrupted writes and all but the newest `keep` complete checkpoints; never the one
 * just written at step `saved` (-1: none), whatever other checkpoints the directory holds. */
static int clean(const char *dir, int keep, int saved) {
    DirEntry *list;
    int n = list_checkpoints(dir, &list), kept = 0, removed = 0;
    char path[CKPT_PATH_MAX];
    for (int i = 0; i < n; i++) {
        int mine = list[i].complete && list[i].step == saved;
        if (list[i].complete && (mine || keep <= 0 || kept < keep)) {
            kept++;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, list[i].name);
        if (remove_checkpoint_dir(path, list[i].complete ? saved : -1) != 0)
            mokc_warn("cannot remove the old checkpoint directory '%s': %s; delete it by hand", path, strerror(errno));
        else removed++;
        if (!list[i].complete) printf("checkpoint: removed '%s', left by an interrupted write\n", path);
    }
    free(list);
    return removed;
}

int ckpt_clean(const char *dir, int keep) { return clean(dir, keep, -1); }

int ckpt_find_latest(const char *dir, char *path, size_t pathlen) {
    DirEntry *list;
    int n = list_checkpoints(dir, &list), step = -1;
    for (int i = 0; i < n && step < 0; i++)
        if (list[i].complete) {
            step = list[i].step;
            snprintf(path, pathlen, "%s/%s", dir, list[i].name);
        }
    free(list);
    return step;
}

int ckpt_resolve_resume(const CheckpointConfig *cc, const Dist *d, char *path, size_t pathlen) {
    if (!cc->resume[0]) return 0;
    if (strcmp(cc->resume, "auto") != 0) {
        snprintf(path, pathlen, "%s", cc->resume);
        return 1;
    }
    int step = -1;
    if (d->rank == 0) {
        ckpt_clean(cc->dir, 0);
        step = ckpt_find_latest(cc->dir, path, pathlen);
    }
    if (d->world > 1) {
        mpiCheck(MPI_Bcast(&step, 1, MPI_INT, 0, MPI_COMM_WORLD));
        mpiCheck(MPI_Bcast(path, (int)pathlen, MPI_CHAR, 0, MPI_COMM_WORLD));
    }
    return step >= 0;
}

/* Moves the finished directory into place. A checkpoint of the same step (a run resumed from an
 * older one) is swapped out atomically where the file system can, else removed first. */
static int install_dir(const char *tmp, const char *final) {
    if (rename(tmp, final) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return errno;
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        remove_checkpoint_dir(tmp, -1); /* the old one, now under the temporary name: a leftover goes later */
        return 0;
    }
#endif
    if (remove_checkpoint_dir(final, -1) != 0) return errno;
    return rename(tmp, final) == 0 ? 0 : errno;
}

/* ---------- tensors ---------- */

/* A table entry's shape in the files: global (expert tensors span all E experts) and the part this
 * rank holds. */
typedef struct {
    int ndim;
    hsize_t global[3], start[3], count[3];
} Geom;

static Geom geom_of(const ParamInfo *p, const ModelDims *d) {
    Geom g;
    g.ndim = p->ndim;
    for (int i = 0; i < 3; i++) {
        g.global[i] = g.count[i] = (hsize_t)p->shape[i];
        g.start[i] = 0;
    }
    if (p->kind == PARAM_EXPERT) {
        g.global[0] = (hsize_t)d->E;
        g.start[0] = (hsize_t)d->ep_rank * (hsize_t)d->E_local;
    }
    return g;
}

static const char *shape_text(int ndim, const hsize_t *dims, char *buf, size_t len) {
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, "]");
    return buf;
}

/* Chunked float32 dataset with a Fletcher-32 checksum per chunk. Expert tensors get one expert
 * per chunk, so each EP owner writes whole chunks. */
static hid_t create_f32(hid_t loc, const char *name, int ndim, const hsize_t *dims, int per_expert) {
    hsize_t chunk[3];
    for (int i = 0; i < ndim; i++) chunk[i] = dims[i];
    if (per_expert) chunk[0] = 1;
    for (int i = 0; i < ndim; i++) {
        for (;;) {
            hsize_t bytes = sizeof(float);
            for (int j = 0; j < ndim; j++) bytes *= chunk[j];
            if (bytes <= CHUNK_BYTES || chunk[i] == 1) break;
            chunk[i] = (chunk[i] + 1) / 2;
        }
    }
    hid_t space = H5Screate_simple(ndim, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, ndim, chunk) >= 0 && H5Pset_fletcher32(dcpl) >= 0)
        d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return d;
}

static int write_slab(hid_t d, const Geom *g, const float *data) {
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(g->ndim, g->count, NULL);
    int rc = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, g->start, NULL, g->count, NULL) >= 0 &&
                     H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, data) >= 0
                 ? 0
                 : -1;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

/* Reads this rank's part of the float32 dataset `name` in group g of file fpath, after checking
 * that it exists and has exactly the expected global shape. */
static int read_slab(hid_t g, const char *fpath, const char *name, const Geom *geom, float *out, char *err,
                     size_t errlen) {
    if (H5Lexists(g, name, H5P_DEFAULT) <= 0)
        return mokc_fail(err, errlen, "'%s' has no tensor '%s', which this model has: the checkpoint is of a "
                         "different model", fpath, name);
    enum { DSET, TYPE, SPACE, MEM, NIDS };
    hid_t ids[NIDS] = {-1, -1, -1, -1};
    int rc = 1;
    H5Reason why;
    char a[96], b[96];
    ids[DSET] = H5Dopen2(g, name, H5P_DEFAULT);
    ids[TYPE] = ids[DSET] >= 0 ? H5Dget_type(ids[DSET]) : -1;
    ids[SPACE] = ids[DSET] >= 0 ? H5Dget_space(ids[DSET]) : -1;
    if (ids[TYPE] < 0 || ids[SPACE] < 0) {
        mokc_fail(err, errlen, "cannot open tensor '%s' of '%s': the file is corrupt (HDF5: %s)", name, fpath,
                  h5io_reason(&why));
        goto done;
    }
    if (H5Tget_class(ids[TYPE]) != H5T_FLOAT || H5Tget_size(ids[TYPE]) != 4) {
        mokc_fail(err, errlen, "tensor '%s' of '%s' holds %s values of %zu bytes; this mokc reads float32 "
                  "checkpoints", name, fpath, h5io_type_class_name(H5Tget_class(ids[TYPE])), H5Tget_size(ids[TYPE]));
        goto done;
    }
    hsize_t dims[H5S_MAX_RANK];
    int nd = H5Sget_simple_extent_ndims(ids[SPACE]);
    int same = nd == geom->ndim && nd <= H5S_MAX_RANK && H5Sget_simple_extent_dims(ids[SPACE], dims, NULL) == nd;
    for (int i = 0; same && i < nd; i++) same = dims[i] == geom->global[i];
    if (!same) {
        mokc_fail(err, errlen, "tensor '%s' has shape %s in '%s' but %s in this model: the checkpoint is of a "
                  "different model", name, nd >= 0 && nd <= H5S_MAX_RANK ? shape_text(nd, dims, a, sizeof a) : "?",
                  fpath, shape_text(geom->ndim, geom->global, b, sizeof b));
        goto done;
    }
    ids[MEM] = H5Screate_simple(geom->ndim, geom->count, NULL);
    if (ids[MEM] < 0 ||
        H5Sselect_hyperslab(ids[SPACE], H5S_SELECT_SET, geom->start, NULL, geom->count, NULL) < 0 ||
        H5Dread(ids[DSET], H5T_NATIVE_FLOAT, ids[MEM], ids[SPACE], H5P_DEFAULT, out) < 0) {
        mokc_fail(err, errlen, "cannot read tensor '%s' of '%s': the file is corrupt or truncated (HDF5: %s)", name,
                  fpath, h5io_reason(&why));
        goto done;
    }
    rc = 0;
done:
    h5io_close_all(ids, NIDS);
    return rc;
}

/* ---------- writing ---------- */

/* Keeps the HDF5 reason of the first failure: later calls (closing) clear the error stack. */
static int check(int ok, H5Reason *why) {
    if (!ok && !why->found) h5io_reason(why);
    return ok;
}

/* why: the reason check() kept, or NULL to read it now. */
static int write_failed(const char *path, const char *what, H5Reason *why, char *err, size_t errlen) {
    H5Reason now;
    if (!why || !why->found) {
        h5io_reason(&now);
        why = &now;
    }
    return mokc_fail(err, errlen, "cannot write checkpoint file '%s' (%s): HDF5: %s; check free disk space and "
                     "permissions of checkpoint.dir", path, what, why->text);
}

/* Creates (create = 1) or reopens a file for writing. New files get a checksummed superblock and
 * object headers (format of HDF5 >= 1.8): corrupt metadata is detected as well as corrupt data. */
static hid_t open_write(const char *path, int create, char *err, size_t errlen) {
    hid_t fapl = h5io_fapl(1);
    if (fapl >= 0 && create) H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    hid_t use = fapl >= 0 ? fapl : H5P_DEFAULT;
    hid_t f = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, use) : H5Fopen(path, H5F_ACC_RDWR, use);
    if (f < 0) write_failed(path, create ? "creating" : "opening to add this rank's experts", NULL, err, errlen);
    if (fapl >= 0) H5Pclose(fapl);
    return f;
}

/* Root attributes both kinds of file carry. */
static int write_common_attrs(hid_t f, const CkptState *s, const char *kind) {
    const Dist *d = s->dist;
    char *config = config_to_json(s->cfg);
    int rc = !config || h5io_write_attr_int64(f, "format_version", CKPT_FORMAT_VERSION) ||
             h5io_write_attr_string(f, "kind", kind) || h5io_write_attr_int64(f, "step", s->step) ||
             h5io_write_attr_int64(f, "world", d->world) || h5io_write_attr_int64(f, "ep", d->ep) ||
             h5io_write_attr_int64(f, "dp", d->dp) || h5io_write_attr_string(f, "config", config);
    free(config);
    return rc ? -1 : 0;
}

/* Closes f, reporting a failed final flush (disk full) instead of ignoring it. */
static int close_file(hid_t f, const char *path, char *err, size_t errlen) {
    return H5Fclose(f) < 0 ? write_failed(path, "closing", NULL, err, errlen) : 0;
}

static int state_write(const CkptState *s, const char *path, char *err, size_t errlen) {
    const Dist *d = s->dist;
    hid_t f = open_write(path, 1, err, errlen);
    if (f < 0) return 1;
    H5Reason why = {.found = 0};
    int ok = check(write_common_attrs(f, s, "mokc optimizer state") == 0 &&
                       h5io_write_attr_int64(f, "tokens_seen", s->tokens_seen) == 0 &&
                       h5io_write_attr_int64(f, "loader_position", s->loader_position) == 0 &&
                       h5io_write_attr_int64(f, "seed", s->cfg->train.seed) == 0 &&
                       h5io_write_attr_int64(f, "rank", d->rank) == 0 &&
                       h5io_write_attr_int64(f, "ep_rank", d->ep_rank) == 0 &&
                       h5io_write_attr_int64(f, "dp_rank", d->dp_rank) == 0,
                   &why);
    const char *groups[2] = {"adam_m", "adam_v"};
    const float *bufs[2] = {s->adam_m, s->adam_v};
    for (int k = 0; k < 2 && ok; k++) {
        hid_t g = H5Gcreate2(f, groups[k], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok = check(g >= 0, &why);
        for (int i = 0; ok && i < s->table->count; i++) {
            const ParamInfo *p = &s->table->items[i];
            Geom geom = geom_of(p, s->dims);
            memcpy(geom.global, geom.count, sizeof geom.global); /* the rank's own part only */
            memset(geom.start, 0, sizeof geom.start);
            hid_t ds = create_f32(g, p->name, geom.ndim, geom.global, p->kind == PARAM_EXPERT);
            ok = check(ds >= 0 && write_slab(ds, &geom, bufs[k] + p->offset) == 0 &&
                           (p->kind != PARAM_EXPERT ||
                            h5io_write_attr_int64(ds, "first_expert", (int64_t)d->ep_rank * s->dims->E_local) == 0),
                       &why);
            if (ds >= 0 && H5Dclose(ds) < 0) ok = check(0, &why);
        }
        if (g >= 0 && H5Gclose(g) < 0) ok = check(0, &why);
    }
    if (!ok) {
        write_failed(path, "writing the optimizer state", &why, err, errlen);
        H5Fclose(f);
        return 1;
    }
    return close_file(f, path, err, errlen);
}

/* Rank 0's turn: creates the model file with every tensor, writes the replicated ones, its own
 * experts and the expert bias. */
static int model_create(const CkptState *s, const char *path, char *err, size_t errlen) {
    const ModelDims *dm = s->dims;
    hid_t f = open_write(path, 1, err, errlen);
    if (f < 0) return 1;
    hid_t g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Reason why = {.found = 0};
    int ok = check(g >= 0 && write_common_attrs(f, s, "mokc model") == 0, &why);
    for (int i = 0; ok && i < s->table->count; i++) {
        const ParamInfo *p = &s->table->items[i];
        Geom geom = geom_of(p, dm);
        hid_t ds = create_f32(g, p->name, geom.ndim, geom.global, p->kind == PARAM_EXPERT);
        ok = check(ds >= 0 &&
                       h5io_write_attr_string(ds, "kind", p->kind == PARAM_EXPERT ? "expert" : "replicated") == 0 &&
                       write_slab(ds, &geom, s->params + p->offset) == 0,
                   &why);
        if (ds >= 0 && H5Dclose(ds) < 0) ok = check(0, &why);
        if (i == s->table->count / 2) fault_point("model_partial", s->step);
    }
    if (g >= 0 && H5Gclose(g) < 0) ok = check(0, &why);
    if (ok && dm->E > 0) {
        hid_t b = H5Gcreate2(f, "buffers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        Geom geom = {2, {(hsize_t)dm->L, (hsize_t)dm->E, 1}, {0, 0, 0}, {(hsize_t)dm->L, (hsize_t)dm->E, 1}};
        hid_t ds = b >= 0 ? create_f32(b, "expert_bias", 2, geom.global, 0) : -1;
        ok = check(ds >= 0 && write_slab(ds, &geom, s->expert_bias) == 0, &why);
        if (ds >= 0 && H5Dclose(ds) < 0) ok = check(0, &why);
        if (b >= 0 && H5Gclose(b) < 0) ok = check(0, &why);
    }
    if (!ok) {
        write_failed(path, "writing the parameters", &why, err, errlen);
        H5Fclose(f);
        return 1;
    }
    return close_file(f, path, err, errlen);
}

/* Another EP owner's turn: its experts' hyperslabs into the existing file. */
static int model_add_experts(const CkptState *s, const char *path, char *err, size_t errlen) {
    hid_t f = open_write(path, 0, err, errlen);
    if (f < 0) return 1;
    hid_t g = H5Gopen2(f, "params", H5P_DEFAULT);
    H5Reason why = {.found = 0};
    int ok = check(g >= 0, &why);
    for (int i = 0; ok && i < s->table->count; i++) {
        const ParamInfo *p = &s->table->items[i];
        if (p->kind != PARAM_EXPERT) continue;
        Geom geom = geom_of(p, s->dims);
        hid_t ds = H5Dopen2(g, p->name, H5P_DEFAULT);
        ok = check(ds >= 0 && write_slab(ds, &geom, s->params + p->offset) == 0, &why);
        if (ds >= 0 && H5Dclose(ds) < 0) ok = check(0, &why);
    }
    if (g >= 0 && H5Gclose(g) < 0) ok = check(0, &why);
    if (!ok) {
        write_failed(path, "writing this rank's experts", &why, err, errlen);
        H5Fclose(f);
        return 1;
    }
    return close_file(f, path, err, errlen);
}

static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* DONE: what a complete checkpoint holds, with sizes to catch truncated copies. */
static int write_done(const char *dir, int step, int world, const int64_t *state_sizes, int64_t model_size,
                      char *err, size_t errlen) {
    char tmp[CKPT_PATH_MAX + 16], path[CKPT_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s/" DONE_FILE ".tmp", dir);
    snprintf(path, sizeof path, "%s/" DONE_FILE, dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return mokc_fail(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
    fprintf(f, "mokc checkpoint\nformat_version %d\nstep %d\nworld %d\nfile " MODEL_FILE " %lld\n",
            CKPT_FORMAT_VERSION, step, world, (long long)model_size);
    for (int r = 0; r < world; r++) fprintf(f, "file state_rank%05d.h5 %lld\n", r, (long long)state_sizes[r]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return mokc_fail(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
    int rc = h5io_commit(tmp, path);
    return rc ? mokc_fail(err, errlen, "cannot commit '%s': %s", path, strerror(rc)) : 0;
}

int ckpt_save(const CkptState *s, char *path, size_t pathlen, int64_t *bytes, char *err, size_t errlen) {
    const Dist *d = s->dist;
    const char *root = s->cfg->checkpoint.dir;
    char tmpdir[CKPT_PATH_MAX], file[CKPT_PATH_MAX + 32], tmpfile[CKPT_PATH_MAX + 48];
    snprintf(path, pathlen, "%s/step_%08d", root, s->step);
    *bytes = 0;
    err[0] = '\0';
    H5Quiet quiet;
    h5io_quiet_begin(&quiet);

    /* Rank 0 makes the temporary directory; everyone writes into the name it chose. */
    int failed = 0;
    if (d->rank == 0) {
        snprintf(tmpdir, sizeof tmpdir, "%s.tmp-%ld", path, (long)getpid());
        if (!mokc_make_parent_dirs(path)) {
            failed = mokc_fail(err, errlen, "cannot create checkpoint.dir '%s': %s", root, strerror(errno));
        } else {
            clean(root, 0, -1); /* leftovers of interrupted writes */
            if (mkdir(tmpdir, 0755) != 0)
                failed = mokc_fail(err, errlen, "cannot create '%s': %s; check that checkpoint.dir is writable",
                                   tmpdir, strerror(errno));
        }
    }
    if (d->world > 1) mpiCheck(MPI_Bcast(tmpdir, (int)sizeof tmpdir, MPI_CHAR, 0, MPI_COMM_WORLD));
    if ((failed = dist_agree(d, failed, err, errlen))) goto out;
    fault_point("dir", s->step);

    /* Every rank's own state file, all at once (different files). */
    snprintf(file, sizeof file, "%s/state_rank%05d.h5", tmpdir, d->rank);
    snprintf(tmpfile, sizeof tmpfile, "%s.tmp", file);
    failed = state_write(s, tmpfile, err, errlen);
    int rc = failed ? 0 : h5io_commit(tmpfile, file);
    if (rc) failed = mokc_fail(err, errlen, "cannot commit '%s': %s", file, strerror(rc));
    if ((failed = dist_agree(d, failed, err, errlen))) goto out;
    fault_point("state", s->step);

    /* The model file, in turns: rank 0 creates it, then the other EP owners add their experts. */
    snprintf(file, sizeof file, "%s/" MODEL_FILE, tmpdir);
    snprintf(tmpfile, sizeof tmpfile, "%s.tmp", file);
    for (int turn = 0; turn < d->ep; turn++) {
        failed = 0;
        if (d->dp_rank == 0 && d->ep_rank == turn)
            failed = turn == 0 ? model_create(s, tmpfile, err, errlen) : model_add_experts(s, tmpfile, err, errlen);
        if ((failed = dist_agree(d, failed, err, errlen))) goto out;
    }
    rc = d->rank == 0 ? h5io_commit(tmpfile, file) : 0;
    if (rc) failed = mokc_fail(err, errlen, "cannot commit '%s': %s", file, strerror(rc));
    if ((failed = dist_agree(d, failed, err, errlen))) goto out;
    fault_point("model", s->step);

    /* DONE, then the directory goes into place and old checkpoints go. */
    snprintf(file, sizeof file, "%s/state_rank%05d.h5", tmpdir, d->rank);
    int64_t mine = file_size(file);
    int64_t *sizes = d->rank == 0 ? mallocCheck(sizeof(int64_t) * (size_t)d->world) : NULL;
    if (d->world > 1) mpiCheck(MPI_Gather(&mine, 1, MPI_INT64_T, sizes, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
    else sizes[0] = mine;
    if (d->rank == 0) {
        snprintf(file, sizeof file, "%s/" MODEL_FILE, tmpdir);
        int64_t model_size = file_size(file);
        failed = write_done(tmpdir, s->step, d->world, sizes, model_size, err, errlen);
        *bytes = model_size;
        for (int r = 0; r < d->world; r++) *bytes += sizes[r];
        if (!failed) {
            fault_point("done", s->step);
            h5io_fsync_dir(tmpdir);
            rc = install_dir(tmpdir, path);
            if (rc) failed = mokc_fail(err, errlen, "cannot rename '%s' to '%s': %s", tmpdir, path, strerror(rc));
        }
        if (!failed) {
            h5io_fsync_parent(path);
            fault_point("renamed", s->step);
            clean(root, s->cfg->checkpoint.keep, s->step);
        }
    }
    free(sizes);
    failed = dist_agree(d, failed, err, errlen);
out:
    if (failed && d->rank == 0 && is_dir(tmpdir)) remove_checkpoint_dir(tmpdir, -1);
    h5io_quiet_end(&quiet);
    return failed;
}

/* ---------- reading ---------- */

/* The text of DONE (malloc'ed), or NULL with err filled. */
static char *read_done(const char *dir, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/" DONE_FILE, dir);
    FILE *f = fopen(path, "r");
    char newest[CKPT_PATH_MAX];
    if (!f && ckpt_find_latest(dir, newest, sizeof newest) >= 0) {
        mokc_fail(err, errlen, "'%s' holds checkpoints but is not one: name one of its step_NNNNNNNN directories "
                  "(the newest is '%s'), or set checkpoint.dir to it and checkpoint.resume = \"auto\"", dir, newest);
        return NULL;
    }
    if (!f) {
        mokc_fail(err, errlen, "'%s' is not a complete checkpoint: it has no DONE marker (its writer was "
                  "interrupted, or it is not a checkpoint directory)", dir);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *text = mallocCheck(cap);
    size_t got;
    while ((got = fread(text + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) text = realloc(text, cap *= 2);
        if (!text) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of memory reading '%s'", path);
    }
    fclose(f);
    text[n] = '\0';
    if (strncmp(text, "mokc checkpoint\n", 16) != 0) {
        mokc_fail(err, errlen, "'%s' is corrupt: it does not start with \"mokc checkpoint\"", path);
        free(text);
        return NULL;
    }
    return text;
}

/* The number after "\n<key> " in DONE, or -1. */
static int64_t done_value(const char *text, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\n%.100s ", key);
    const char *p = strstr(text, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The file must be listed in DONE with its current size: catches truncated or partial copies. */
static int check_size(const char *done, const char *dir, const char *name, char *err, size_t errlen) {
    char key[96], path[CKPT_PATH_MAX + 32];
    snprintf(key, sizeof key, "file %s", name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int64_t want = done_value(done, key), have = file_size(path);
    if (want < 0) return mokc_fail(err, errlen, "'%s/DONE' does not list '%s'; the checkpoint is corrupt", dir, name);
    if (have < 0) return mokc_fail(err, errlen, "'%s' is missing from the checkpoint: %s", path, strerror(errno));
    if (have != want)
        return mokc_fail(err, errlen, "'%s' is %lld bytes but the checkpoint's DONE records %lld: the file is "
                         "truncated or was changed after the checkpoint was written", path, (long long)have,
                         (long long)want);
    return 0;
}

static hid_t open_read(const char *path, char *err, size_t errlen) {
    hid_t fapl = h5io_fapl(0);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
    H5Reason why;
    if (f < 0) mokc_fail(err, errlen, "cannot open checkpoint file '%s': it is truncated or corrupt (HDF5: %s)", path,
                         h5io_reason(&why));
    if (fapl >= 0) H5Pclose(fapl);
    return f;
}

static int read_int(hid_t f, const char *path, const char *name, int64_t *v, char *err, size_t errlen) {
    if (H5Aexists(f, name) <= 0)
        return mokc_fail(err, errlen, "'%s' lacks the attribute '%s'; it is not a mokc checkpoint file", path, name);
    return h5io_read_attr_int64(f, path, name, v, err, errlen);
}

/* Settings that fix the tensor shapes: a checkpoint with other values cannot load. (The parallel
 * layout is checked on its own.) */
static const char *const structural_keys[] = {
    "model.vocab_size", "model.hidden_size", "model.num_layers", "model.num_heads", "model.num_kv_heads",
    "model.head_dim", "model.intermediate_size", "model.first_k_dense_replace", "model.tie_word_embeddings",
    "moe.num_experts", "moe.moe_intermediate_size", "moe.n_shared_experts",
};

static const cJSON *json_at(const cJSON *root, const char *path) {
    const char *dot = strchr(path, '.');
    if (!dot) return cJSON_GetObjectItemCaseSensitive(root, path);
    char section[32];
    snprintf(section, sizeof section, "%.*s", (int)(dot - path), path);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, section), dot + 1);
}

/* Appends "path: a -> b" style text to buf. */
static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

static void describe_difference(char *buf, size_t len, const char *path, const cJSON *was, const cJSON *now,
                                const char *fmt) {
    char *a = was ? cJSON_PrintUnformatted(was) : NULL, *b = now ? cJSON_PrintUnformatted(now) : NULL;
    append(buf, len, fmt, buf[0] ? "; " : "", path, a ? a : "(absent)", b ? b : "(absent)");
    free(a);
    free(b);
}

/* Structural differences go to err (return 1); other differences, except the checkpoint and log
 * sections, go to notes. */
static int compare_configs(const char *saved_json, const MokcConfig *cfg, const char *fpath, char *err,
                           size_t errlen, char *notes, size_t noteslen) {
    cJSON *saved = cJSON_Parse(saved_json);
    char *now_json = config_to_json(cfg);
    cJSON *now = now_json ? cJSON_Parse(now_json) : NULL;
    free(now_json);
    int rc = 0;
    if (!saved || !now) {
        rc = mokc_fail(err, errlen, "the config attribute of '%s' is not valid JSON; the file is corrupt", fpath);
        goto done;
    }
    char diff[2048] = "";
    int n = (int)(sizeof structural_keys / sizeof structural_keys[0]);
    for (int i = 0; i < n; i++) {
        const cJSON *a = json_at(saved, structural_keys[i]), *b = json_at(now, structural_keys[i]);
        if (!a || !b || !cJSON_Compare(a, b, 1))
            describe_difference(diff, sizeof diff, structural_keys[i], a, b, "%s%s is %s in the checkpoint but %s in the spec");
    }
    if (diff[0]) {
        rc = mokc_fail(err, errlen, "the checkpoint '%s' is of a different model: %s; resume it with the spec it was "
                       "written with", fpath, diff);
        goto done;
    }
    notes[0] = '\0';
    for (const cJSON *item = now->child; item; item = item->next) {
        if (strcmp(item->string, "checkpoint") == 0 || strcmp(item->string, "log") == 0) continue;
        const cJSON *leaf = cJSON_IsObject(item) ? item->child : item;
        for (; leaf; leaf = cJSON_IsObject(item) ? leaf->next : NULL) {
            char path[96];
            if (cJSON_IsObject(item)) snprintf(path, sizeof path, "%s.%s", item->string, leaf->string);
            else snprintf(path, sizeof path, "%s", item->string);
            const cJSON *was = json_at(saved, path);
            if (!was || !cJSON_Compare(was, leaf, 1))
                describe_difference(notes, noteslen, path, was, leaf, "%s%s %s -> %s");
        }
    }
done:
    cJSON_Delete(saved);
    cJSON_Delete(now);
    return rc;
}

typedef struct {
    const ParamTable *table;
    char extra[64];
    int count;
} ExtraNames;

static herr_t note_extra(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    ExtraNames *x = data;
    if (param_table_find(x->table, name) < 0 && x->count++ == 0) snprintf(x->extra, sizeof x->extra, "%s", name);
    return 0;
}

static int load_model(CkptState *s, const char *dir, const char *done, char *err, size_t errlen) {
    const Dist *d = s->dist;
    const ModelDims *dm = s->dims;
    char path[CKPT_PATH_MAX + 32], notes[4096] = "";
    snprintf(path, sizeof path, "%s/" MODEL_FILE, dir);
    if (check_size(done, dir, MODEL_FILE, err, errlen)) return 1;
    hid_t f = open_read(path, err, errlen);
    if (f < 0) return 1;
    enum { PARAMS, BUFFERS, NIDS };
    hid_t ids[NIDS] = {-1, -1};
    int rc = 1;
    int64_t version = 0, step = 0, world = 0, ep = 0, dp = 0;
    char *config = NULL;
    if (read_int(f, path, "format_version", &version, err, errlen)) goto done;
    if (version != CKPT_FORMAT_VERSION) {
        mokc_fail(err, errlen, "'%s' has checkpoint format_version %lld; this mokc reads version %d", path,
                  (long long)version, CKPT_FORMAT_VERSION);
        goto done;
    }
    if (read_int(f, path, "step", &step, err, errlen) || read_int(f, path, "world", &world, err, errlen) ||
        read_int(f, path, "ep", &ep, err, errlen) || read_int(f, path, "dp", &dp, err, errlen))
        goto done;
    if (H5Aexists(f, "config") <= 0 || h5io_read_attr_string(f, path, "config", &config, err, errlen)) {
        if (!config)
            mokc_fail(err, errlen, "'%s' lacks the attribute 'config'; it is not a mokc checkpoint file", path);
        goto done;
    }
    if (compare_configs(config, s->cfg, dir, err, errlen, notes, sizeof notes)) goto done;
    if (world != d->world || ep != d->ep) {
        mokc_fail(err, errlen, "parallel layout: the checkpoint '%s' was written by %lld ranks (dp %lld x ep %lld) but "
                  "this run has %d (dp %d x ep %d); resume with the same number of ranks (mpirun -np %lld) and "
                  "parallel.ep", dir, (long long)world, (long long)dp, (long long)ep, d->world, d->dp, d->ep,
                  (long long)world);
        goto done;
    }
    if (step != done_value(done, "step")) {
        mokc_fail(err, errlen, "'%s' is of step %lld but the checkpoint's DONE says step %lld: the checkpoint is "
                  "corrupt", path, (long long)step, (long long)done_value(done, "step"));
        goto done;
    }
    ids[PARAMS] = H5Gopen2(f, "params", H5P_DEFAULT);
    if (ids[PARAMS] < 0) {
        mokc_fail(err, errlen, "'%s' has no group 'params'; it is not a mokc model file", path);
        goto done;
    }
    for (int i = 0; i < s->table->count; i++) {
        const ParamInfo *p = &s->table->items[i];
        Geom g = geom_of(p, dm);
        if (read_slab(ids[PARAMS], path, p->name, &g, s->params + p->offset, err, errlen)) goto done;
    }
    ExtraNames extra = {s->table, "", 0};
    H5Literate(ids[PARAMS], H5_INDEX_NAME, H5_ITER_NATIVE, NULL, note_extra, &extra);
    if (extra.count) {
        mokc_fail(err, errlen, "'%s' has %d tensor(s) this model lacks, e.g. '%s': the checkpoint is of a different "
                  "model", path, extra.count, extra.extra);
        goto done;
    }
    if (dm->E > 0) {
        ids[BUFFERS] = H5Gopen2(f, "buffers", H5P_DEFAULT);
        Geom g = {2, {(hsize_t)dm->L, (hsize_t)dm->E, 1}, {0, 0, 0}, {(hsize_t)dm->L, (hsize_t)dm->E, 1}};
        if (ids[BUFFERS] < 0) {
            mokc_fail(err, errlen, "'%s' has no group 'buffers' (the expert bias); it is not a mokc model file", path);
            goto done;
        }
        if (read_slab(ids[BUFFERS], path, "expert_bias", &g, s->expert_bias, err, errlen)) goto done;
    }
    s->step = (int)step;
    if (d->rank == 0 && notes[0])
        printf("note: the spec differs from the checkpoint's in: %s; the run continues with the spec's values "
               "(bitwise identical to an uninterrupted run only where they agree)\n", notes);
    rc = 0;
done:
    free(config);
    h5io_close_all(ids, NIDS);
    H5Fclose(f);
    return rc;
}

static int load_state(CkptState *s, const char *dir, const char *done, char *err, size_t errlen) {
    const Dist *d = s->dist;
    char name[32], path[CKPT_PATH_MAX + 32];
    snprintf(name, sizeof name, "state_rank%05d.h5", d->rank);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (check_size(done, dir, name, err, errlen)) return 1;
    hid_t f = open_read(path, err, errlen);
    if (f < 0) return 1;
    int rc = 1;
    int64_t rank = -1, world = 0, step = 0, tokens = 0, position = 0;
    if (read_int(f, path, "rank", &rank, err, errlen) || read_int(f, path, "world", &world, err, errlen) ||
        read_int(f, path, "step", &step, err, errlen) || read_int(f, path, "tokens_seen", &tokens, err, errlen) ||
        read_int(f, path, "loader_position", &position, err, errlen))
        goto done;
    if (rank != d->rank || world != d->world || step != s->step || tokens < 0 || position < 0) {
        mokc_fail(err, errlen, "'%s' holds rank %lld of %lld at step %lld (tokens_seen %lld, loader position %lld), "
                  "not rank %d of %d at step %d: the checkpoint is corrupt", path, (long long)rank, (long long)world,
                  (long long)step, (long long)tokens, (long long)position, d->rank, d->world, s->step);
        goto done;
    }
    const char *groups[2] = {"adam_m", "adam_v"};
    float *bufs[2] = {s->adam_m, s->adam_v};
    for (int k = 0; k < 2; k++) {
        hid_t g = H5Gopen2(f, groups[k], H5P_DEFAULT);
        if (g < 0) {
            mokc_fail(err, errlen, "'%s' has no group '%s'; it is not a mokc state file", path, groups[k]);
            goto done;
        }
        for (int i = 0; i < s->table->count; i++) {
            const ParamInfo *p = &s->table->items[i];
            Geom geom = geom_of(p, s->dims);
            memcpy(geom.global, geom.count, sizeof geom.global);
            memset(geom.start, 0, sizeof geom.start);
            if (read_slab(g, path, p->name, &geom, bufs[k] + p->offset, err, errlen)) {
                H5Gclose(g);
                goto done;
            }
        }
        H5Gclose(g);
    }
    s->tokens_seen = tokens;
    s->loader_position = position;
    rc = 0;
done:
    H5Fclose(f);
    return rc;
}

int ckpt_load(CkptState *s, const char *path, char *err, size_t errlen) {
    err[0] = '\0';
    H5Quiet quiet;
    h5io_quiet_begin(&quiet);
    int failed = 0;
    char *done = NULL;
    if (!is_dir(path))
        failed = mokc_fail(err, errlen, "checkpoint '%s' does not exist or is not a directory (a checkpoint is a "
                           "step_NNNNNNNN directory inside checkpoint.dir)", path);
    else if (!(done = read_done(path, err, errlen)))
        failed = 1;
    else
        failed = load_model(s, path, done, err, errlen) || load_state(s, path, done, err, errlen);
    free(done);
    h5io_quiet_end(&quiet);
    return dist_agree(s->dist, failed, err, errlen) ? MOKC_EXIT_USAGE : 0;
}
