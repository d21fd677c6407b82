/* Quiet HDF5 calls with readable reasons, scalar attributes, durable file commits. */
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* ---------- error stack ---------- */

void h5io_quiet_begin(H5Quiet *q) {
    q->func = NULL;
    q->data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5io_quiet_end(const H5Quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

void h5io_no_cleanup_at_exit(void) { H5dont_atexit(); }

/* The POSIX driver's descriptions ("file write failed: time = ..., filename = ..., errno = 27, ...") span lines
 * and overflow the text: they are told by their head and the system's message ("file write failed: File too
 * large"). */
static herr_t reason_cb(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    H5Reason *r = data;
    if (r->found || !e->desc || !e->desc[0]) return 0;
    const char *code = strstr(e->desc, "errno = "), *colon = strchr(e->desc, ':');
    if (code && colon && colon < code)
        snprintf(r->text, sizeof r->text, "%.*s: %s", (int)(colon - e->desc), e->desc, strerror(atoi(code + 8)));
    else
        snprintf(r->text, sizeof r->text, "%s", e->desc);
    r->found = 1;
    return 0;
}

/* Walking upward starts at the innermost function, whose description is the most specific. */
const char *h5io_reason(H5Reason *r) {
    r->found = 0;
    snprintf(r->text, sizeof r->text, "no detail from HDF5");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, reason_cb, r);
    return r->text;
}

/* ---------- files and ids ---------- */

hid_t h5io_fapl(int for_write) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    if (fapl >= 0) H5Pset_file_locking(fapl, for_write ? 1 : 0, 1);
#else
    (void)for_write;
#endif
    return fapl;
}

void h5io_close_all(hid_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0) continue;
        switch (H5Iget_type(ids[i])) {
        case H5I_FILE: H5Fclose(ids[i]); break;
        case H5I_GROUP: H5Gclose(ids[i]); break;
        case H5I_DATASET: H5Dclose(ids[i]); break;
        case H5I_DATASPACE: H5Sclose(ids[i]); break;
        case H5I_DATATYPE: H5Tclose(ids[i]); break;
        case H5I_ATTR: H5Aclose(ids[i]); break;
        case H5I_GENPROP_LST: H5Pclose(ids[i]); break;
        default: break;
        }
        ids[i] = -1;
    }
}

/* ---------- attributes ---------- */

int h5io_write_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *value) {
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0) return -1;
    hid_t attr = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = -1;
    if (attr >= 0) {
        rc = H5Awrite(attr, mem_type, value) < 0 ? -1 : 0;
        if (H5Aclose(attr) < 0) rc = -1;
    }
    H5Sclose(space);
    return rc;
}

int h5io_write_attr_int64(hid_t obj, const char *name, int64_t value) {
    return h5io_write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

int h5io_write_attr_string(hid_t obj, const char *name, const char *value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0) return -1;
    int rc = -1;
    if (H5Tset_size(type, strlen(value) + 1) >= 0 && H5Tset_strpad(type, H5T_STR_NULLTERM) >= 0)
        rc = h5io_write_attr(obj, name, type, type, value);
    H5Tclose(type);
    return rc;
}

const char *h5io_type_class_name(H5T_class_t c) {
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating-point";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    default: return "non-numeric";
    }
}

int h5io_read_attr_int64(hid_t obj, const char *path, const char *name, int64_t *out, char *err, size_t errlen) {
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) return mokc_fail(err, errlen, "cannot read attribute '%s' of '%s'", name, path);
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    int rc = 0;
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (cls != H5T_INTEGER)
        rc = mokc_fail(err, errlen, "attribute '%s' of '%s' is %s; expected an integer", name, path,
                       h5io_type_class_name(cls));
    else if (space < 0 || H5Sget_simple_extent_npoints(space) != 1)
        rc = mokc_fail(err, errlen, "attribute '%s' of '%s' must hold a single value", name, path);
    else if (H5Aread(attr, H5T_NATIVE_INT64, out) < 0)
        rc = mokc_fail(err, errlen, "cannot read attribute '%s' of '%s' as an integer", name, path);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Aclose(attr);
    return rc;
}

int h5io_read_attr_string(hid_t obj, const char *path, const char *name, char **out, char *err, size_t errlen) {
    *out = NULL;
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) return mokc_fail(err, errlen, "cannot read attribute '%s' of '%s'", name, path);
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    int rc = 0;
    if (type < 0 || H5Tget_class(type) != H5T_STRING) {
        rc = mokc_fail(err, errlen, "attribute '%s' of '%s' is %s; expected a string", name, path,
                       h5io_type_class_name(type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS));
    } else if (space < 0 || H5Sget_simple_extent_npoints(space) != 1) {
        rc = mokc_fail(err, errlen, "attribute '%s' of '%s' must hold a single string", name, path);
    } else if (H5Tis_variable_str(type) > 0) {
        char *s = NULL;
        if (H5Aread(attr, type, &s) < 0 || !s) {
            rc = mokc_fail(err, errlen, "cannot read string attribute '%s' of '%s'", name, path);
        } else {
            *out = strdup(s);
            H5free_memory(s);
        }
    } else {
        size_t size = H5Tget_size(type);
        char *buf = calloc(size + 1, 1);
        if (!buf || H5Aread(attr, type, buf) < 0) {
            free(buf);
            rc = mokc_fail(err, errlen, "cannot read string attribute '%s' of '%s'", name, path);
        } else {
            *out = buf;
        }
    }
    if (rc == 0 && !*out) rc = mokc_fail(err, errlen, "out of memory reading '%s'", path);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Aclose(attr);
    return rc;
}

/* ---------- durable commits ---------- */

int h5io_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno;
    int rc = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

void h5io_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

void h5io_fsync_parent(const char *path) {
    char *dir = strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash == dir) d = "/";
    else if (slash) {
        *slash = '\0';
        d = dir;
    }
    h5io_fsync_dir(d);
    free(dir);
}

int h5io_commit(const char *tmp, const char *path) {
    int rc = h5io_fsync_path(tmp);
    if (rc) return rc;
    if (rename(tmp, path) != 0) return errno;
    h5io_fsync_parent(path);
    return 0;
}
