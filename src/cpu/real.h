/*
 * The CPU reference is written once over a scalar type `real` and compiled twice: as float (the
 * training backend, names as written) and as double (gradient checks, names with suffix _f64).
 * A file that is compiled both ways includes this header first; the build passes -DMOKC_F64 for
 * the double build. Headers that declare such functions use REAL_DECLARE_BOTH (see ops.h).
 */
#ifndef MOKC_REAL_H
#define MOKC_REAL_H
#ifdef MOKC_F64
typedef double real;
#define OP(name) name##_f64
#define REAL_IS_F64 1
#else
typedef float real;
#define OP(name) name
#define REAL_IS_F64 0
#endif
#endif
