/* Dense ops of the CPU reference, declared for float (plain names) and double (_f64 names). */
#ifndef MOKC_CPU_OPS_H
#define MOKC_CPU_OPS_H

/* The embedding backward sums an id's rows in runs of this many positions (each run in position order from its
 * first row) and adds the runs' sums to the table's row in order: the GPU's kernels/embedding.cu spreads the runs of
 * a frequent id over many blocks and adds them in the same order, so the two agree bit for bit. */
#define EMBEDDING_BWD_RUN 32

#define REAL_DECL_FILE "ops_decl.h"
#include "declare_both.h"

#endif
