/* Run record headers (run_record.h). */
#include "run_record.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "version.h"
#ifdef MOKC_CUDA
#include "gpu/device.h"
#endif

void run_libraries(RunLibraries *out) {
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    snprintf(out->hdf5, sizeof out->hdf5, "HDF5 %u.%u.%u", maj, min, rel);
    snprintf(out->cjson, sizeof out->cjson, "cJSON %s", cJSON_Version());
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, ",\n")] = 0; /* "Open MPI v4.1.6, package: ..." -> its first part */
    snprintf(out->mpi, sizeof out->mpi, "%s", mpi);
}

void run_record_header(FILE *f, const RunHeader *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "record", "mokc run");
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    cJSON_AddStringToObject(o, "started", now);
    if (h->command) cJSON_AddStringToObject(o, "command", h->command);
    if (h->argv) cJSON_AddItemToObject(o, "argv", cJSON_CreateStringArray((const char *const *)h->argv, h->argc));
    cJSON_AddStringToObject(o, "mokc", MOKC_VERSION);
    cJSON_AddStringToObject(o, "git", MOKC_GIT_REVISION);
    cJSON_AddStringToObject(o, "build", MOKC_BUILD_FLAGS);
    RunLibraries lib;
    run_libraries(&lib);
    cJSON *libs = cJSON_AddObjectToObject(o, "libraries");
    cJSON_AddStringToObject(libs, "cjson", lib.cjson);
    cJSON_AddStringToObject(libs, "hdf5", lib.hdf5);
    cJSON_AddStringToObject(libs, "mpi", lib.mpi);
#ifdef MOKC_CUDA
    GpuVersions v;
    gpu_versions(&v);
    cJSON_AddStringToObject(libs, "cuda_runtime", v.runtime);
    cJSON_AddStringToObject(libs, "cuda_driver", v.driver);
    cJSON_AddStringToObject(libs, "nccl", v.nccl);
#endif
    if (h->dist) {
        cJSON *w = cJSON_AddObjectToObject(o, "world");
        cJSON_AddNumberToObject(w, "ranks", h->dist->world);
        cJSON_AddNumberToObject(w, "ep", h->dist->ep);
        cJSON_AddNumberToObject(w, "dp", h->dist->dp);
        cJSON_AddNumberToObject(w, "ranks_on_this_host", h->dist->local_size);
        cJSON_AddStringToObject(w, "host_of_rank_0", h->dist->host);
    }
    if (h->backend) cJSON_AddStringToObject(o, "backend", h->backend);
    if (h->moe_impl) cJSON_AddStringToObject(o, "moe_impl", h->moe_impl);
    if (h->gpu) cJSON_AddStringToObject(o, "gpu", h->gpu);
    if (h->gpus >= 0) cJSON_AddNumberToObject(o, "gpus", h->gpus);
    if (h->seed >= 0) cJSON_AddNumberToObject(o, "seed", (double)h->seed);
    if (h->resumed_from >= 0) cJSON_AddNumberToObject(o, "resumed_from_step", h->resumed_from);
    if (h->config_json) {
        cJSON *cfg = cJSON_Parse(h->config_json);
        if (!cfg) mokc_die(MOKC_EXIT_RUNTIME, NULL, "run record: the resolved config is not JSON (internal)");
        cJSON_AddItemToObject(o, "config", cfg);
    }
    char *line = cJSON_PrintUnformatted(o);
    if (!line) mokc_die(MOKC_EXIT_RUNTIME, "check free memory", "run record: cannot print the header");
    fprintf(f, "%s\n", line);
    cJSON_free(line);
    cJSON_Delete(o);
}

int run_record_flush(FILE **f, const char *path, long *whole) {
    if (fflush(*f) == 0 && !ferror(*f)) {
        *whole = ftell(*f);
        return 0;
    }
    const int why = errno ? errno : EIO; /* an earlier write's error may have been the one, its errno since reused */
    fclose(*f); /* closed before the cut: a close flushes what the stream still holds */
    *f = NULL;
    if (truncate(path, *whole) != 0)
        fprintf(stderr, "mokc: warning: the run record '%s' ends in a part of a line: %s\n", path, strerror(errno));
    errno = why;
    return -1;
}
