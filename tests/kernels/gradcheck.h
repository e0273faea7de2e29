/* gradcheck.h: helpers for finite-difference gradient checks in double precision. */
#ifndef LOCKSTEP_TEST_GRADCHECK_H
#define LOCKSTEP_TEST_GRADCHECK_H

#include <math.h>

#include "ops.h"
#include "rng.h"
#include "testutil.h"

static inline ls_tensor *gc_tensor(ls_ctx *c, ls_dtype t, int ndim, const int64_t *shape) {
    ls_tensor *x;
    LS_REQUIRE_OK(ls_tensor_create(c->alloc, t, ndim, shape, "test", &x));
    LS_REQUIRE_OK(ls_tensor_zero(x));
    return x;
}

/* Uniform in [-1, 1), optionally kept away from 0 by at least gap (for kinks). */
static inline void gc_fill(ls_rng *r, ls_tensor *x, double gap) {
    for (int64_t i = 0; i < ls_tensor_numel(x); i++) {
        double v = 2.0 * ls_rng_uniform(r) - 1.0;
        if (gap > 0 && fabs(v) < gap) v = v < 0 ? v - gap : v + gap;
        if (x->dtype == LS_F32)
            ((float *)x->data)[i] = (float)v;
        else
            ((double *)x->data)[i] = v;
    }
}

static inline double gc_dot(const ls_tensor *a, const ls_tensor *b) {
    double s = 0;
    for (int64_t i = 0; i < ls_tensor_numel(a); i++) s += ((double *)a->data)[i] * ((double *)b->data)[i];
    return s;
}

/* Max error between analytic and numeric gradients: relative, absolute below magnitude 1e-3. */
static inline double gc_relerr(const double *an, const double *num, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(an[i] - num[i]) / fmax(1e-3, fmax(fabs(an[i]), fabs(num[i])));
        if (e > worst) worst = e;
    }
    return worst;
}

#endif
