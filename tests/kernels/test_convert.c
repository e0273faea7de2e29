/* test_convert.c: f16 and bf16 conversions: known encodings, round-to-nearest-even ties,
 * overflow, subnormals, NaN, and an exact round trip of every finite f16 value. */
#include <stdint.h>

#include "cpu/cpu.h"
#include "testutil.h"

int main(void) {
    LS_EXPECT(ls_f32_to_f16(1.0f) == 0x3c00);
    LS_EXPECT(ls_f32_to_f16(-2.0f) == 0xc000);
    LS_EXPECT(ls_f32_to_f16(65504.0f) == 0x7bff);
    LS_EXPECT(ls_f32_to_f16(65519.0f) == 0x7bff); /* below the midpoint to 65536 */
    LS_EXPECT(ls_f32_to_f16(65520.0f) == 0x7c00); /* ties to even: inf */
    LS_EXPECT(ls_f32_to_f16(1e9f) == 0x7c00);
    LS_EXPECT(ls_f32_to_f16(5.9604645e-8f) == 0x0001); /* smallest subnormal */
    LS_EXPECT(ls_f32_to_f16(2.0e-8f) == 0x0000);
    LS_EXPECT(ls_f32_to_f16(6.1035156e-5f) == 0x0400); /* smallest normal */
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
    LS_EXPECT_ERR(ls_cpu_convert(4, LS_I32, src, LS_F16, half), LS_ERR_UNSUPPORTED, "cannot convert i32 to f16");
    LS_TEST_END();
}
