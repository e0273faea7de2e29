/* convert.c: f32 <-> f16 (IEEE binary16) and f32 <-> bf16 with round-to-nearest-even,
 * NaN kept NaN, overflow to inf, f16 subnormals handled; f64 via f32 for the low types. */
#include <math.h>
#include <string.h>

#include "cpu.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ls_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float ls_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t ls_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
        /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
        float v = bits_f32(a) * 16777216.0f;
        uint32_t m = (uint32_t)lrintf(v); /* default rounding mode: nearest even */
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((a >> 23) - 127 + 15) << 10;
    uint32_t mant = a & 0x7fffffu;
    uint32_t h = e | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: fine */
    return (uint16_t)(sign | h);
}

float ls_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

static double load_as_double(ls_dtype t, const void *src, int64_t i) {
    switch (t) {
    case LS_F32: return ((const float *)src)[i];
    case LS_F64: return ((const double *)src)[i];
    case LS_F16: return ls_f16_to_f32(((const uint16_t *)src)[i]);
    case LS_BF16: return ls_bf16_to_f32(((const uint16_t *)src)[i]);
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
    /* The hot pairs get direct loops. */
    if (st == LS_F32 && dt == LS_BF16) {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ls_f32_to_bf16(((const float *)src)[i]);
        return LS_OK;
    }
    if (st == LS_F32 && dt == LS_F16) {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ls_f32_to_f16(((const float *)src)[i]);
        return LS_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = load_as_double(st, src, i);
        switch (dt) {
        case LS_F32: ((float *)dst)[i] = (float)v; break;
        case LS_F64: ((double *)dst)[i] = v; break;
        case LS_F16: ((uint16_t *)dst)[i] = ls_f32_to_f16((float)v); break;
        case LS_BF16: ((uint16_t *)dst)[i] = ls_f32_to_bf16((float)v); break;
        default: break;
        }
    }
    return LS_OK;
}
