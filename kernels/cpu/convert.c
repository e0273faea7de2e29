/* convert.c: f32 <-> f16 (IEEE binary16) and f32 <-> bf16 with round-to-nearest-even,
 * NaN kept NaN, overflow to inf, f16 subnormals handled; f64 via f32 for the low types. */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "half_impl.h"

/* The conversions themselves are runtime/core/half_impl.h's (inlined into the CNN kernels too). */
uint16_t ls_f32_to_bf16(float f) { return ls_hi_f32_to_bf16(f); }
float ls_bf16_to_f32(uint16_t h) { return ls_hi_bf16_to_f32(h); }
uint16_t ls_f32_to_f16(float f) { return ls_hi_f32_to_f16(f); }
float ls_f16_to_f32(uint16_t h) { return ls_hi_f16_to_f32(h); }

static double load_as_double(ls_dtype t, const void *src, int64_t i) {
    switch (t) {
    case LS_F32: return ((const float *)src)[i];
    case LS_F64: return ((const double *)src)[i];
    case LS_F16: return ls_hi_f16_to_f32(((const uint16_t *)src)[i]);
    case LS_BF16: return ls_hi_bf16_to_f32(((const uint16_t *)src)[i]);
    default: return 0;
    }
}

ls_status ls_cpu_convert(int64_t n, ls_dtype st, const void *src, ls_dtype dt, void *dst) {
    int ok_s = st == LS_F32 || st == LS_F64 || st == LS_F16 || st == LS_BF16;
    int ok_d = dt == LS_F32 || dt == LS_F64 || dt == LS_F16 || dt == LS_BF16;
    if (!ok_s || !ok_d)
        return ls_error(LS_ERR_UNSUPPORTED, "cannot convert %s to %s", ls_dtype_name(st), ls_dtype_name(dt));
    if (st == dt) {
        memmove(dst, src, (size_t)n * ls_dtype_size(st));
        return LS_OK;
    }
    /* The hot pairs (low-precision storage, f32 compute): runtime/core/half.c's batch loops
     * (F16C / AVX2 where the CPU has them). */
    if (st == LS_F32 && dt == LS_BF16) {
        ls_half_f32_to_bf16_n(src, dst, n);
        return LS_OK;
    }
    if (st == LS_F32 && dt == LS_F16) {
        ls_half_f32_to_f16_n(src, dst, n);
        return LS_OK;
    }
    if (st == LS_BF16 && dt == LS_F32) {
        ls_half_bf16_to_f32_n(src, dst, n);
        return LS_OK;
    }
    if (st == LS_F16 && dt == LS_F32) {
        ls_half_f16_to_f32_n(src, dst, n);
        return LS_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = load_as_double(st, src, i);
        switch (dt) {
        case LS_F32: ((float *)dst)[i] = (float)v; break;
        case LS_F64: ((double *)dst)[i] = v; break;
        case LS_F16: ((uint16_t *)dst)[i] = ls_hi_f32_to_f16((float)v); break;
        case LS_BF16: ((uint16_t *)dst)[i] = ls_hi_f32_to_bf16((float)v); break;
        default: break;
        }
    }
    return LS_OK;
}
