/* half_impl.h: host conversions between f32 and the 16-bit float formats (IEEE f16, bfloat16), round to
 * nearest even, NaN kept NaN. Used where the MPI backend stages 16-bit reductions through f32. */
#ifndef LOCKSTEP_HALF_IMPL_H
#define LOCKSTEP_HALF_IMPL_H

#include <stdint.h>
#include <string.h>

static inline float ls_half_bits_to_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint32_t ls_half_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ls_bf16_to_f32(uint16_t h) { return ls_half_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t ls_f32_to_bf16(float f) {
    uint32_t u = ls_half_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ls_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return ls_half_bits_to_f32(sign);
        float v = (float)man * (1.0f / 16777216.0f); /* subnormal: man * 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31) return ls_half_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return ls_half_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t ls_f32_to_f16(float f) {
    uint32_t u = ls_half_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return sign;                    /* below 2^-25: rounds to zero */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

#endif
