/* Reading and comparing the float datasets of HDF5 files (checkpoints) in tests. */
#ifndef MOKC_TEST_H5_COMPARE_H
#define MOKC_TEST_H5_COMPARE_H

#include <hdf5.h>

/* Every float dataset of `group` in file a equals, bit for bit, the one of the same name in b,
 * and b has no others (a failed check otherwise). Returns the number compared. */
int test_h5_same_group(const char *a, const char *b, const char *group);
/* The values of the float datasets of `group` in file that are not bf16 numbers (low 16 bits set); *values: how
 * many were read (0 when the file or group cannot be read). */
long test_h5_count_not_bf16(const char *file, const char *group, long *values);
/* All elements of dataset `name` under loc as floats; NULL if unreadable. The caller frees. */
float *test_h5_read_floats(hid_t loc, const char *name, hssize_t *n);

#endif
