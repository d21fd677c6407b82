/*
 * Declares the functions of REAL_DECL_FILE for both scalar types of the CPU reference: float
 * (plain names) and double (names with _f64). No include guard: a header defines REAL_DECL_FILE
 * and includes this once per declaration file.
 */
#define DECL_REAL float
#define DECL_OP(name) name
#include REAL_DECL_FILE
#undef DECL_REAL
#undef DECL_OP
#define DECL_REAL double
#define DECL_OP(name) name##_f64
#include REAL_DECL_FILE
#undef DECL_REAL
#undef DECL_OP
#undef REAL_DECL_FILE
