/* gpu_values.h: host values for the GPU parity tests: doubles packed to a float dtype's bytes
 * (f16/bf16 rounded to nearest even) and unpacked back. Header-only, static functions. */
#ifndef LOCKSTEP_TEST_GPU_VALUES_H
#define LOCKSTEP_TEST_GPU_VALUES_H

#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "testutil.h"

static void *pack(const double *v, ls_dtype t, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * ls_dtype_size(t));
    LS_REQUIRE(p);
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case LS_F32: ((float *)p)[i] = (float)v[i]; break;
        case LS_F64: ((double *)p)[i] = v[i]; break;
        case LS_F16: ((uint16_t *)p)[i] = ls_f32_to_f16((float)v[i]); break;
        case LS_BF16: ((uint16_t *)p)[i] = ls_f32_to_bf16((float)v[i]); break;
        default: LS_REQUIRE(!"pack: not a float dtype");
        }
    }
    return p;
}

static double *unpack(const void *p, ls_dtype t, int64_t n) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    LS_REQUIRE(v);
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case LS_F32: v[i] = ((const float *)p)[i]; break;
        case LS_F64: v[i] = ((const double *)p)[i]; break;
        case LS_F16: v[i] = ls_f16_to_f32(((const uint16_t *)p)[i]); break;
        case LS_BF16: v[i] = ls_bf16_to_f32(((const uint16_t *)p)[i]); break;
        default: LS_REQUIRE(!"unpack: not a float dtype");
        }
    }
    return v;
}

#endif
