/* half_impl.h (internal, not installed): inline f32 <-> f16/bf16 conversions (round to nearest
 * even, NaN kept NaN, overflow to inf, f16 subnormals): the one implementation, behind the CPU
 * backend's exported ls_f32_to_f16 & co. (kernels/cpu/convert.c), inlined into the CNN kernels'
 * inner loops and the MPI backend's 16-bit reductions staged through f32. */
#ifndef LOCKSTEP_HALF_IMPL_H
#define LOCKSTEP_HALF_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float ls_hi_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t ls_hi_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ls_hi_bf16_to_f32(uint16_t h) { return ls_hi_bits_f32((uint32_t)h << 16); }

static inline uint16_t ls_hi_f32_to_bf16(float f) {
    uint32_t u = ls_hi_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ls_hi_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) /* inf, or NaN made quiet with its payload kept (as VCVTPH2PS does) */
        return ls_hi_bits_f32(sign | 0x7f800000u | (m ? 0x400000u : 0u) | (m << 13));
    return ls_hi_bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

static inline uint16_t ls_hi_f32_to_f16(float f) {
    uint32_t u = ls_hi_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN (as VCVTPS2PH) */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                       /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                                         /* below 2^-14: subnormal or zero */
        float v = ls_hi_bits_f32(a) * 16777216.0f;
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

/* Batch conversions (runtime/core/half.c): F16C/AVX2 where the CPU has them, bitwise equal to the
 * inline functions above. */
void ls_half_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n);
void ls_half_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void ls_half_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
void ls_half_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
int ls_half_has_f16c(void);     /* the CPU (and OS) can run F16C and AVX2 code */
int ls_half_set_simd(int on);   /* tests: 0 makes everything take the portable code; returns the old state */
const char *ls_half_impl(void); /* "f16c+avx2", "f16c" or "scalar": what the batch functions use here */

#endif
