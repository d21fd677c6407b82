/* Bit-for-bit comparison of the float datasets of one group in two HDF5 files (checkpoints). */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h5_compare.h"
#include "test.h"

typedef struct {
    const char *other;
    const char *group;
    int compared, failed;
} CompareCtx;

float *test_h5_read_floats(hid_t loc, const char *name, hssize_t *n) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t sp = H5Dget_space(d);
    *n = H5Sget_simple_extent_npoints(sp);
    float *x = malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1));
    if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0) {
        free(x);
        x = NULL;
    }
    H5Sclose(sp);
    H5Dclose(d);
    return x;
}

static herr_t compare_one(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    CompareCtx *c = data;
    hid_t f2 = H5Fopen(c->other, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g2 = f2 >= 0 ? H5Gopen2(f2, c->group, H5P_DEFAULT) : -1;
    hssize_t na = 0, nb = 0;
    float *a = test_h5_read_floats(g, name, &na), *b = g2 >= 0 ? test_h5_read_floats(g2, name, &nb) : NULL;
    if (!a || !b || na != nb || memcmp(a, b, sizeof(float) * (size_t)na) != 0) {
        if (c->failed++ < 3) test_fail(__FILE__, __LINE__, "%s/%s differs from %s", c->group, name, c->other);
    }
    c->compared++;
    free(a);
    free(b);
    if (g2 >= 0) H5Gclose(g2);
    if (f2 >= 0) H5Fclose(f2);
    return 0;
}

int test_h5_same_group(const char *a, const char *b, const char *group) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures are reported by the checks */
    CompareCtx ca = {b, group, 0, 0}, cb = {a, group, 0, 0};
    for (int pass = 0; pass < 2; pass++) {
        CompareCtx *c = pass ? &cb : &ca;
        hid_t f = H5Fopen(pass ? b : a, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t g = f >= 0 ? H5Gopen2(f, group, H5P_DEFAULT) : -1;
        CHECK_MSG(g >= 0, "cannot open %s in %s", group, pass ? b : a);
        if (g >= 0) H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, compare_one, c);
        if (g >= 0) H5Gclose(g);
        if (f >= 0) H5Fclose(f);
    }
    CHECK_EQ_INT(ca.compared, cb.compared);
    return ca.compared;
}

typedef struct {
    long not_bf16, values;
} Bf16Count;

static herr_t count_not_bf16(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    Bf16Count *c = data;
    hssize_t n = 0;
    float *x = test_h5_read_floats(group, name, &n);
    for (hssize_t i = 0; x && i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        c->not_bf16 += (u & 0xffffu) != 0;
    }
    c->values += x ? n : 0;
    free(x);
    return 0;
}

long test_h5_count_not_bf16(const char *file, const char *group, long *values) {
    Bf16Count c = {0, 0};
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = f >= 0 ? H5Gopen2(f, group, H5P_DEFAULT) : -1;
    if (g >= 0) H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, count_not_bf16, &c);
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    *values = c.values;
    return c.not_bf16;
}
