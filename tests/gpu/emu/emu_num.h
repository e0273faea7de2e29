/* emu_num.h: element access for the library stand-ins (emu_cublas.c, emu_cudnn.c): f16 and bf16
 * converted bit by bit here (round to nearest even), not by lockstep's own conversions, which the
 * stand-ins help to check; TF32 as the tensor cores take f32 inputs (10 mantissa bits). */
#ifndef LOCKSTEP_EMU_NUM_H
#define LOCKSTEP_EMU_NUM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef enum emu_num { EMU_F32, EMU_F64, EMU_F16, EMU_BF16 } emu_num;

static inline float emu_f16_to_f32(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    float v;
    if (e == 31) {
        uint32_t x = ((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u | (m << 13);
        memcpy(&v, &x, 4);
        return v;
    }
    v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400u), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

static inline uint16_t emu_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* 65520 and up round to infinity */
    if (ax < 0x38800000u) {                       /* below 2^-14: a subnormal f16, in units of 2^-24 */
        float v;
        memcpy(&v, &ax, 4);
        return sign | (uint16_t)nearbyintf(v * 16777216.0f);
    }
    uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static inline float emu_bf16_to_f32(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float v;
    memcpy(&v, &x, 4);
    return v;
}

static inline uint16_t emu_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* f32 as a TF32 tensor core reads it: the mantissa rounded to 10 bits (nearest, ties away). */
static inline float emu_tf32(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u) return f;
    x = (x + 0x1000u) & ~0x1fffu;
    memcpy(&f, &x, 4);
    return f;
}

static inline size_t emu_num_size(emu_num t) { return t == EMU_F64 ? 8 : t == EMU_F32 ? 4 : 2; }

static inline double emu_load(emu_num t, const void *p, size_t i) {
    switch (t) {
    case EMU_F64: return ((const double *)p)[i];
    case EMU_F32: return ((const float *)p)[i];
    case EMU_F16: return emu_f16_to_f32(((const uint16_t *)p)[i]);
    default: return emu_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* v is rounded to f32 first for the 32-bit and 16-bit types (the GPU's f32 result, converted). */
static inline void emu_store(emu_num t, void *p, size_t i, double v) {
    switch (t) {
    case EMU_F64: ((double *)p)[i] = v; break;
    case EMU_F32: ((float *)p)[i] = (float)v; break;
    case EMU_F16: ((uint16_t *)p)[i] = emu_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = emu_f32_to_bf16((float)v); break;
    }
}

#endif
