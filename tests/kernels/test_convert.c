/* test_convert.c: f16 and bf16 conversions: known encodings, round-to-nearest-even ties,
 * overflow, subnormals, NaN, and an exact round trip of every finite f16 value. */
#include <stdint.h>

#include "cpu/cpu.h"
#include "half_impl.h"
#include "testutil.h"

/* The batch conversions (F16C/AVX2 where the CPU has them) give bitwise the inline functions'
 * results: every f16 and bf16 value, and f32 values with every exponent and sign and the
 * rounding-relevant low bits (ties, just below and above them), from an odd offset so the
 * vector loops' tails and unaligned loads run too. Returns the number of mismatches. */
static int64_t check_batch(void) {
    enum { N = 1 << 16 };
    static uint16_t h[N + 1], h2[N + 1];
    static float f[N + 1];
    int64_t bad = 0;
    for (uint32_t i = 0; i < N; i++) h[i + 1] = (uint16_t)i;
    ls_half_f16_to_f32_n(h + 1, f + 1, N);
    for (uint32_t i = 0; i < N; i++) bad += memcmp(&f[i + 1], &(float){ls_hi_f16_to_f32((uint16_t)i)}, 4) != 0;
    ls_half_bf16_to_f32_n(h + 1, f + 1, N);
    for (uint32_t i = 0; i < N; i++) bad += memcmp(&f[i + 1], &(float){ls_hi_bf16_to_f32((uint16_t)i)}, 4) != 0;
    /* f32 -> 16 bits: the low bits that decide rounding, under every value of the top bits */
    static const uint32_t low13[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x0abc};
    static const uint32_t low16[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4321};
    for (int which = 0; which < 2; which++) {
        const uint32_t *low = which ? low16 : low13;
        int shift = which ? 16 : 13;
        for (uint64_t top = 0; top < (1ull << (32 - shift)); top += N / 8) {
            for (int i = 0; i < N; i++) {
                uint32_t u = (uint32_t)(((top + (uint64_t)(i / 8)) << shift) | low[i % 7]);
                memcpy(&f[i + 1], &u, 4);
            }
            int n = N - (int)(top & 7); /* vary the length: tails of 0-7 elements */
            if (which)
                ls_half_f32_to_bf16_n(f + 1, h + 1, n);
            else
                ls_half_f32_to_f16_n(f + 1, h + 1, n);
            for (int i = 0; i < n; i++) h2[i + 1] = which ? ls_hi_f32_to_bf16(f[i + 1]) : ls_hi_f32_to_f16(f[i + 1]);
            for (int i = 0; i < n; i++) bad += h[i + 1] != h2[i + 1];
        }
    }
    return bad;
}

int main(void) {
    LS_EXPECT(ls_f32_to_f16(1.0f) == 0x3c00);
    LS_EXPECT(ls_f32_to_f16(-2.0f) == 0xc000);
    LS_EXPECT(ls_f32_to_f16(65504.0f) == 0x7bff);
    LS_EXPECT(ls_f32_to_f16(65519.0f) == 0x7bff); /* below the midpoint to 65536 */
    LS_EXPECT(ls_f32_to_f16(65520.0f) == 0x7c00); /* ties to even: inf */
    LS_EXPECT(ls_f32_to_f16(1e9f) == 0x7c00);
    LS_EXPECT(ls_f32_to_f16(5.9604645e-8f) == 0x0001); /* smallest subnormal */
    LS_EXPECT(ls_f32_to_f16(2.0e-8f) == 0x0000);
    LS_EXPECT(ls_f32_to_f16(6.1035156e-5f) == 0x0400);      /* smallest normal */
    LS_EXPECT(ls_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie: to even */
    LS_EXPECT(ls_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02); /* tie: to even (up) */
    LS_EXPECT((ls_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (ls_f32_to_f16(NAN) & 0x3ff) != 0);
    LS_EXPECT(ls_f32_to_bf16(1.0f) == 0x3f80);
    LS_EXPECT(ls_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
    LS_EXPECT(ls_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    LS_EXPECT(ls_f32_to_bf16(-INFINITY) == 0xff80);
    LS_EXPECT(isnan(ls_bf16_to_f32(ls_f32_to_bf16(NAN))));
    LS_EXPECT(ls_bf16_to_f32(0x4049) == 3.140625f);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaNs */
        if (ls_f32_to_f16(ls_f16_to_f32((uint16_t)h)) != h) bad++;
        if (ls_f32_to_bf16(ls_bf16_to_f32((uint16_t)h)) != h && !((h & 0x7f80) == 0x7f80 && (h & 0x7f))) bad++;
    }
    LS_EXPECT(bad == 0);
    /* the op table entry: f32 -> f16 -> f64 */
    float src[4] = {0.5f, -1.25f, 3.0e4f, 1e-3f};
    uint16_t half[4];
    double back[4];
    LS_REQUIRE_OK(ls_cpu_convert(4, LS_F32, src, LS_F16, half));
    LS_REQUIRE_OK(ls_cpu_convert(4, LS_F16, half, LS_F64, back));
    for (int i = 0; i < 4; i++) LS_EXPECT_NEAR(back[i], src[i], fabs(src[i]) * 1e-3);
    int64_t batch_bad = check_batch();
    if (batch_bad)
        fprintf(stderr, "batch conversions (%s): %lld values differ from the inline ones\n", ls_half_impl(),
                (long long)batch_bad);
    LS_EXPECT(batch_bad == 0);
    printf("batch conversions: %s\n", ls_half_impl());
    LS_EXPECT_ERR(ls_cpu_convert(4, LS_I32, src, LS_F16, half), LS_ERR_UNSUPPORTED, "cannot convert i32 to f16");
    LS_TEST_END();
}
