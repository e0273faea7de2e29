/* half.c: batch f32 <-> f16/bf16 conversions. On x86-64 CPUs with F16C (every one since 2012)
 * f16 goes through VCVTPS2PH/VCVTPH2PS eight at a time, chosen once at run time; bf16 and the
 * fallback run half_impl.h's inline functions, bf16's under AVX2 where the CPU has it. Results
 * are bitwise those of the inline functions (tests/kernels/test_convert.c checks every f16 value
 * and millions of f32 values against them). */
#include <stdint.h>

#include "half_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LS_HALF_X86 1
#include <immintrin.h>
#else
#define LS_HALF_X86 0
#endif

#if LS_HALF_X86
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = ls_hi_f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = ls_hi_f16_to_f32(src[i]);
}

/* The same loops as the scalar bf16 ones; the target lets the compiler vectorize them 8 wide. */
__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_f32_to_bf16(src[i]);
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_bf16_to_f32(src[i]);
}
#endif

/* What the CPU and OS support, read once with CPUID (bit 1: F16C with AVX state enabled, bit 2:
 * AVX2; 0x80: read). <cpuid.h>, not __builtin_cpu_supports: clang 14 does not know "f16c" there. */
#if LS_HALF_X86
#include <cpuid.h>

static int cpu_features(void) {
    static int cached;
    int f = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (f) return f;
    f = 0x80;
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
        int ymm = 0;
        if (osxsave) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ymm = (lo & 6u) == 6u; /* XMM and YMM state saved by the OS */
        }
        if (avx && ymm && f16c) f |= 1;
        if (avx && ymm && __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((b >> 5) & 1)) f |= 2;
    }
    __atomic_store_n(&cached, f, __ATOMIC_RELAXED);
    return f;
}
static int simd_off; /* ls_half_set_simd(0): tests compare the portable code with the SIMD one */
#define HAS_F16C (!__atomic_load_n(&simd_off, __ATOMIC_RELAXED) && (cpu_features() & 1))
#define HAS_AVX2 (!__atomic_load_n(&simd_off, __ATOMIC_RELAXED) && (cpu_features() & 2))
#else
#define HAS_F16C 0
#define HAS_AVX2 0
#endif

void ls_half_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n) {
#if LS_HALF_X86
    if (HAS_F16C) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_f32_to_f16(src[i]);
}

void ls_half_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
#if LS_HALF_X86
    if (HAS_F16C) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_f16_to_f32(src[i]);
}

void ls_half_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) {
#if LS_HALF_X86
    if (HAS_AVX2) {
        f32_to_bf16_avx2(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_f32_to_bf16(src[i]);
}

void ls_half_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
#if LS_HALF_X86
    if (HAS_AVX2) {
        bf16_to_f32_avx2(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = ls_hi_bf16_to_f32(src[i]);
}

const char *ls_half_impl(void) {
    if (HAS_F16C) return HAS_AVX2 ? "f16c+avx2" : "f16c";
    return "scalar";
}

int ls_half_has_f16c(void) { return HAS_F16C && HAS_AVX2 ? 1 : 0; }

int ls_half_set_simd(int on) {
#if LS_HALF_X86
    int was = !__atomic_exchange_n(&simd_off, !on, __ATOMIC_RELAXED);
    return was;
#else
    (void)on;
    return 0;
#endif
}
