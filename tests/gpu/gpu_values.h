/* gpu_values.h: host values for the GPU parity tests: doubles packed to a float dtype's bytes
 * (f16/bf16 rounded to nearest even) and unpacked back. Header-only, static functions. */
#ifndef LOCKSTEP_TEST_GPU_VALUES_H
#define LOCKSTEP_TEST_GPU_VALUES_H

#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "testutil.h"

/* Into p: v's n values as dtype t's bytes. (One loop per dtype: a switch per element was a fifth
 * of the parity tests' time on their tensors of millions.) */
static inline void pack_into(void *p, const double *v, ls_dtype t, int64_t n) {
    switch (t) {
    case LS_F32:
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)v[i];
        break;
    case LS_F64:
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] = v[i];
        break;
    case LS_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = ls_f32_to_f16((float)v[i]);
        break;
    case LS_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = ls_f32_to_bf16((float)v[i]);
        break;
    default: LS_REQUIRE(!"pack: not a float dtype");
    }
}

static void *pack(const double *v, ls_dtype t, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * ls_dtype_size(t));
    LS_REQUIRE(p);
    pack_into(p, v, t, n);
    return p;
}

/* Into v: the n values of dtype t at p. */
static inline void unpack_into(double *v, const void *p, ls_dtype t, int64_t n) {
    switch (t) {
    case LS_F32:
        for (int64_t i = 0; i < n; i++) v[i] = ((const float *)p)[i];
        break;
    case LS_F64:
        for (int64_t i = 0; i < n; i++) v[i] = ((const double *)p)[i];
        break;
    case LS_F16:
        for (int64_t i = 0; i < n; i++) v[i] = ls_f16_to_f32(((const uint16_t *)p)[i]);
        break;
    case LS_BF16:
        for (int64_t i = 0; i < n; i++) v[i] = ls_bf16_to_f32(((const uint16_t *)p)[i]);
        break;
    default: LS_REQUIRE(!"unpack: not a float dtype");
    }
}

static double *unpack(const void *p, ls_dtype t, int64_t n) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    LS_REQUIRE(v);
    unpack_into(v, p, t, n);
    return v;
}

/* v's n values rounded in place to what dtype t holds: unpack(pack(v)), without the copies. */
static inline void round_to(double *v, ls_dtype t, int64_t n) {
    switch (t) {
    case LS_F32:
        for (int64_t i = 0; i < n; i++) v[i] = (float)v[i];
        break;
    case LS_F64: break;
    case LS_F16:
        for (int64_t i = 0; i < n; i++) v[i] = ls_f16_to_f32(ls_f32_to_f16((float)v[i]));
        break;
    case LS_BF16:
        for (int64_t i = 0; i < n; i++) v[i] = ls_bf16_to_f32(ls_f32_to_bf16((float)v[i]));
        break;
    default: LS_REQUIRE(!"round_to: not a float dtype");
    }
}

#endif
