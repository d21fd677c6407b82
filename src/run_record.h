/*
 * Run records: what a `mokc train` or `mokc bench` run ran, on what, and how fast, as JSON lines.
 * The first line of a record (and a further one where a resumed run appends) is a header object
 * whose "record" key is "mokc run"; every other line is one object the command measured (a
 * training step, a benchmark case). scripts/plot reads them.
 */
#ifndef MOKC_RUN_RECORD_H
#define MOKC_RUN_RECORD_H

#include <stdio.h>

#include "dist.h"

/* The libraries this binary runs with: "cJSON 1.7.15", "HDF5 1.10.8", "Open MPI v4.1.6". */
typedef struct {
    char cjson[32], hdf5[32], mpi[MPI_MAX_LIBRARY_VERSION_STRING];
} RunLibraries;
void run_libraries(RunLibraries *out);

/* What the header says besides the build and the libraries (NULL or -1: not known, left out). */
typedef struct {
    const char *command;     /* "train", "bench moe", ... */
    int argc;                /* the command line as given, argv[0] = the command's first word */
    char **argv;
    const char *config_json; /* the resolved spec (config_to_json), or NULL */
    const Dist *dist;        /* world layout, or NULL */
    const char *backend;     /* "cuda" or "cpu" */
    const char *moe_impl;    /* what the MoE layers run: "mok", "unfused" */
    const char *gpu;         /* gpu_describe's line, or NULL */
    int gpus;                /* GPUs in the run (one a rank), or -1 */
    long long seed;          /* -1: none */
    int resumed_from;        /* the step a resumed run starts after, or -1 */
} RunHeader;

/* Writes h as one JSON line: {"record": "mokc run", "started": UTC time, "git", "build", the
 * libraries (and the CUDA runtime, driver and NCCL versions in a CUDA build), then h's fields}. */
void run_record_header(FILE *f, const RunHeader *h);

/* Flushes the record at path after a whole line. *whole: its bytes up to the last whole line (the caller sets it
 * where it opens the file: 0, or the end of what a resumed run keeps), kept here. A write
 * that failed (a disk full) closes it (*f = NULL), cuts it back to *whole (a part of a line would not parse) and
 * returns -1 with errno saying why; else 0. */
int run_record_flush(FILE **f, const char *path, long *whole);

#endif
