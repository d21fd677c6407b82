/*
 * The compiler's resource report of the megakernels and their GEMM tiles (kernels/mok; issue 9: no
 * local-memory spills). The build keeps ptxas's report beside each CUDA object (X.cu.o.ptxas, see
 * the Makefile); every function of kernels/mok must show no stack frame and no spills, except the
 * traced builds of the two megakernels (diagnostic: mok.h, MOK_TRACE_SLOTS), which may spill.
 */
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *const traced[] = {"mok_forward_sm90_kernelILb1E", "mok_backward_sm90_kernelILb1E"};
/* untraced entries each report must have shown (the test is not vacuous) */
static const char *const required[] = {"mok_forward_sm90_kernelILb0E", "mok_backward_sm90_kernelILb0E",
                                       "gemm_sm90_kernelILb0E"};

static bool is_traced(const char *name) {
    for (size_t i = 0; i < sizeof traced / sizeof traced[0]; i++)
        if (strstr(name, traced[i])) return true;
    return false;
}

/* Checks one report; sets seen[i] for each required[i] found. Returns the functions it lists. */
static int check_report(const char *path, bool *seen) {
    char *text = test_read_text(path);
    CHECK_MSG(text != NULL, "%s: no ptxas report (build with `make`, which keeps one beside each CUDA object)", path);
    if (!text) return 0;
    int functions = 0;
    const char *key = "Function properties for ";
    for (char *at = strstr(text, key); at; at = strstr(at, key)) {
        at += strlen(key);
        char name[512];
        int stack = -1, stores = -1, loads = -1;
        const int got = sscanf(at, "%511s %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", name,
                               &stack, &stores, &loads);
        CHECK_MSG(got == 4, "%s: unreadable resource line after \"%s\"", path, name);
        if (got != 4) break;
        functions++;
        for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
            if (strstr(name, required[i])) seen[i] = true;
        if (is_traced(name)) continue;
        CHECK_MSG(stack == 0 && stores == 0 && loads == 0,
                  "%s: %s has a %d-byte stack frame, %d bytes of spill stores, %d of spill loads (none allowed: "
                  "issue 9; docs/perf-notes.md says how the megakernels were kept free of them)",
                  path, name, stack, stores, loads);
    }
    free(text);
    return functions;
}

static void test_megakernels_do_not_spill(void) {
#ifndef MOKC_CUDA
    test_skip("the CUDA backend is not built");
#else
    char bin[PATH_MAX];
    if (!realpath(test_mokc_binary(), bin)) {
        test_fail(__FILE__, __LINE__, "cannot resolve the mokc binary %s (its folder is the build's)",
                  test_mokc_binary());
        return;
    }
    const char *build = dirname(bin);
    glob_t g;
    if (glob("kernels/mok/*.cu", 0, NULL, &g) != 0) {
        test_fail(__FILE__, __LINE__, "kernels/mok/*.cu not found (tests run from the repository root)");
        return;
    }
    bool seen[sizeof required / sizeof required[0]] = {false};
    int functions = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s.o.ptxas", build, g.gl_pathv[i]);
        functions += check_report(path, seen);
    }
    globfree(&g);
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        CHECK_MSG(seen[i], "no function named like %s in the reports under %s/kernels/mok", required[i], build);
    CHECK(functions >= 6);
#endif
}

TEST_SUITE(kernel_report, TEST_CASE(test_megakernels_do_not_spill));
