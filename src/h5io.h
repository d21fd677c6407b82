/*
 * Helpers shared by the modules that read and write files (data, ckpt): HDF5 with its error-stack
 * printing silenced and its innermost reason recovered for our own one-line messages, scalar
 * attributes, and durable writes (fsync the file, rename it into place, fsync the directory) so
 * that a crash leaves either the old file or the complete new one.
 */
#ifndef MOKC_H5IO_H
#define MOKC_H5IO_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* Before any other HDF5 call: no HDF5 cleanup at exit. Every file mokc writes is closed where it is written; a
 * write that failed (a full disk) leaves HDF5 1.10 a file whose close failed, and its exit-time cleanup of that
 * file crashed the process after the error message was printed. */
void h5io_no_cleanup_at_exit(void);

/* Silences HDF5's automatic error printing; h5io_quiet_end restores the previous handler. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} H5Quiet;
void h5io_quiet_begin(H5Quiet *q);
void h5io_quiet_end(const H5Quiet *q);

/* The most specific description on the error stack of the call that just failed
 * (e.g. "truncated file: eof = ..."); the text lives in *r. */
typedef struct {
    char text[200];
    int found;
} H5Reason;
const char *h5io_reason(H5Reason *r);

/* File access properties: readers do not lock (every rank opens the same file, and cluster file
 * systems often lack flock); writers lock but tolerate file systems without locks. */
hid_t h5io_fapl(int for_write);
/* Closes every id >= 0 by its type and sets it to -1. */
void h5io_close_all(hid_t *ids, int n);

/* Scalar attributes. Writers return 0 or -1. */
int h5io_write_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *value);
int h5io_write_attr_int64(hid_t obj, const char *name, int64_t value);
int h5io_write_attr_string(hid_t obj, const char *name, const char *value);
/* Readers return 0, or non-zero with a message naming the attribute and `path` in err. */
int h5io_read_attr_int64(hid_t obj, const char *path, const char *name, int64_t *out, char *err, size_t errlen);
/* *out is malloc'ed (fixed- or variable-length strings). */
int h5io_read_attr_string(hid_t obj, const char *path, const char *name, char **out, char *err, size_t errlen);
const char *h5io_type_class_name(H5T_class_t c);

/* fsync of a closed file by path; returns 0 or an errno value. */
int h5io_fsync_path(const char *path);
/* fsync of a directory (makes renames in it durable); file systems that cannot are not an error. */
void h5io_fsync_dir(const char *dir);
/* fsync of the directory that holds path. */
void h5io_fsync_parent(const char *path);
/* fsync(tmp), rename(tmp, path), fsync(dirname(path)); returns 0 or an errno value. */
int h5io_commit(const char *tmp, const char *path);

#endif
