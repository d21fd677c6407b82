/* Dense ops of the CPU reference, declared for float (plain names) and double (_f64 names). */
#ifndef MOKC_CPU_OPS_H
#define MOKC_CPU_OPS_H

#define DECL_REAL float
#define DECL_OP(name) name
#include "ops_decl.h"
#undef DECL_REAL
#undef DECL_OP
#define DECL_REAL double
#define DECL_OP(name) name##_f64
#include "ops_decl.h"
#undef DECL_REAL
#undef DECL_OP

#endif
