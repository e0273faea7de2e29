/* commtest.h: helpers for the collectives tests: typed element access for every dtype the
 * communicator supports, deterministic small-integer values (exact under f16/bf16 sums), and
 * the reference reductions the results are checked against. */
#ifndef LOCKSTEP_COMMTEST_H
#define LOCKSTEP_COMMTEST_H

#include <stdint.h>
#include <stdlib.h>

#include "comm.h"
#include "half_impl.h"
#include "tensor.h"

static inline void ct_set(void *buf, ls_dtype t, int64_t i, double v) {
    switch (t) {
    case LS_F32: ((float *)buf)[i] = (float)v; break;
    case LS_F64: ((double *)buf)[i] = v; break;
    case LS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LS_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case LS_F16: ((uint16_t *)buf)[i] = ls_hi_f32_to_f16((float)v); break;
    case LS_BF16: ((uint16_t *)buf)[i] = ls_hi_f32_to_bf16((float)v); break;
    }
}

static inline double ct_get(const void *buf, ls_dtype t, int64_t i) {
    switch (t) {
    case LS_F32: return ((const float *)buf)[i];
    case LS_F64: return ((const double *)buf)[i];
    case LS_I32: return ((const int32_t *)buf)[i];
    case LS_U8: return ((const uint8_t *)buf)[i];
    case LS_F16: return ls_hi_f16_to_f32(((const uint16_t *)buf)[i]);
    case LS_BF16: return ls_hi_bf16_to_f32(((const uint16_t *)buf)[i]);
    }
    return 0;
}

/* Element i of rank r's input for test salt: small integers, non-negative for u8. */
static inline double ct_val(ls_dtype t, int r, int64_t i, int salt) {
    int64_t v = (i * 7 + (int64_t)r * 13 + salt * 5) % 17;
    return t == LS_U8 ? (double)v : (double)(v - 8);
}

static inline int ct_is_int(ls_dtype t) { return t == LS_I32 || t == LS_U8; }

/* The reduction of ct_val over world ranks at element i, as the communicator defines it. */
static inline double ct_expect(ls_dtype t, ls_reduce_op op, int world, int64_t i, int salt) {
    double acc = ct_val(t, 0, i, salt);
    for (int r = 1; r < world; r++) {
        double v = ct_val(t, r, i, salt);
        if (op == LS_REDUCE_MAX)
            acc = v > acc ? v : acc;
        else if (op == LS_REDUCE_MIN)
            acc = v < acc ? v : acc;
        else
            acc += v;
    }
    if (op == LS_REDUCE_AVG) {
        if (ct_is_int(t)) return (double)((int64_t)acc / world); /* truncates toward zero */
        return acc / world;
    }
    return acc;
}

/* Tolerance for comparing a result of dtype t with the exact value v. */
static inline double ct_tol(ls_dtype t, double v) {
    double a = v < 0 ? -v : v;
    switch (t) {
    case LS_F32: return 1e-6 * (a + 1);
    case LS_F64: return 1e-12 * (a + 1);
    case LS_F16: return 1e-3 * (a + 1);
    case LS_BF16: return 8e-3 * (a + 1);
    default: return 0;
    }
}

/* Expects every element i < n of the host buffer buf (dtype t) to equal want_expr (which may use
 * i) within ct_tol; reports the first difference with the rank. Needs testutil.h. */
#define CT_CHECK_ELEMS(rank, what, buf, t, n, want_expr)                                                               \
    do {                                                                                                               \
        int64_t bad_ = 0;                                                                                              \
        for (int64_t i = 0; i < (n); i++) {                                                                            \
            double w_ = (want_expr), g_ = ct_get((buf), (t), i);                                                       \
            if (!(fabs(g_ - w_) <= ct_tol((t), w_))) {                                                                 \
                if (!bad_)                                                                                             \
                    fprintf(stderr, "rank %d: %s %s n=%lld: element %lld = %g, expected %g\n", (rank), (what),         \
                            ls_dtype_name(t), (long long)(n), (long long)i, g_, w_);                                   \
                bad_++;                                                                                                \
            }                                                                                                          \
        }                                                                                                              \
        LS_EXPECT(bad_ == 0);                                                                                          \
    } while (0)

static const ls_dtype ct_all_dtypes[] = {LS_F32, LS_F64, LS_I32, LS_F16, LS_BF16, LS_U8};
#define CT_NDTYPES ((int)(sizeof ct_all_dtypes / sizeof ct_all_dtypes[0]))

#endif
