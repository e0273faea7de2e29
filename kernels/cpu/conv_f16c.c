/* conv_f16c.c: conv_impl.inc's f16 convolution once more, compiled for AVX2 + F16C so that im2col's
 * per-element f16 loads are VCVTPH2PS (bitwise the portable conversion's results; see
 * norm_pool_f16c.c). Built only for x86-64; conv.c calls it where the CPU has F16C and AVX2. */
#include <cblas.h>
#include <immintrin.h>
#include <string.h>

#include "conv_common.h"
#include "cpu.h"
#include "cpu_cnn.h"
#include "half_impl.h"

/* this file is compiled for one ISA already: no further clones */
#undef LS_CPU_HOT
#define LS_CPU_HOT

#define TS uint16_t
#define TC float
#define SFX f16c
#define LD(v) _cvtsh_ss(v)
#define ST(v) ((uint16_t)_cvtss_sh((v), _MM_FROUND_TO_NEAREST_INT))
#define LDN(s, d, n) ls_half_f16_to_f32_n((s), (d), (n))
#define STN(s, d, n) ls_half_f32_to_f16_n((s), (d), (n))
#define LOWP 1
#define GEMM cblas_sgemm
#include "conv_impl.inc"

void ls_cpu_conv_fwd_f16c(const ls_conv2d_params *p, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                          uint16_t *y, void *ws) {
    conv_fwd_f16c(p, x, w, b, y, ws);
}

void ls_cpu_conv_bwd_f16c(const ls_conv2d_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                          uint16_t *dx, float *dw, float *db, void *ws) {
    conv_bwd_f16c(p, dy, x, w, dx, dw, db, ws);
}

size_t ls_cpu_conv_ws_bytes_f16c(const ls_conv2d_params *p, int pass) { return conv_ws_bytes_f16c(p, pass); }
