/* Dense ops of the CPU reference, declared for float (plain names) and double (_f64 names). */
#ifndef MOKC_CPU_OPS_H
#define MOKC_CPU_OPS_H

#define REAL_DECL_FILE "ops_decl.h"
#include "declare_both.h"

#endif
