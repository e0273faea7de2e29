/* conv.c: the CPU backend's NCHW conv2d (stride, padding, groups, optional bias) through im2col
 * and OpenBLAS GEMMs over chunks of images (one image for large feature maps, several for small
 * ones, so the workspace stays a few MiB): forward and backward (dw and db accumulated; dx by a
 * correlation for stride 1, else GEMM + col2im). Instantiated from conv_impl.inc for f32,
 * f64, and f16/bf16 computed in f32. */
#include <cblas.h>
#include <string.h>

#include "cpu.h"
#include "cpu_cnn.h"
#include "half_impl.h"

#include "conv_common.h"

#define TS float
#define TC float
#define SFX f32
#define LD(v) (v)
#define ST(v) (v)
#define LDN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define STN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define LOWP 0
#define GEMM cblas_sgemm
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

#define TS double
#define TC double
#define SFX f64
#define LD(v) (v)
#define ST(v) (v)
#define LDN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define STN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define LOWP 0
#define GEMM cblas_dgemm
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

#define TS uint16_t
#define TC float
#define SFX f16
#define LD(v) ls_hi_f16_to_f32(v)
#define ST(v) ls_hi_f32_to_f16(v)
#define LDN(s, d, n) ls_half_f16_to_f32_n((s), (d), (n))
#define STN(s, d, n) ls_half_f32_to_f16_n((s), (d), (n))
#define LOWP 1
#define GEMM cblas_sgemm
#include "conv_impl.inc"
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN

#define SFX bf16
#define LD(v) ls_hi_bf16_to_f32(v)
#define ST(v) ls_hi_f32_to_bf16(v)
#define LDN(s, d, n) ls_half_bf16_to_f32_n((s), (d), (n))
#define STN(s, d, n) ls_half_f32_to_bf16_n((s), (d), (n))
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

/* f16: the F16C build (conv_f16c.c) where the CPU has it, else the portable one; the same bits. */
#if LS_HAVE_NP_F16C
#define F16C_OK ls_half_has_f16c()
#else
#define F16C_OK 0
#define ls_cpu_conv_fwd_f16c conv_fwd_f16
#define ls_cpu_conv_bwd_f16c conv_bwd_f16
#define ls_cpu_conv_ws_bytes_f16c conv_ws_bytes_f16
#endif

size_t ls_cpu_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int pass) {
    switch (t) {
    case LS_F32: return conv_ws_bytes_f32(p, pass);
    case LS_F64: return conv_ws_bytes_f64(p, pass);
    case LS_F16: return (F16C_OK ? ls_cpu_conv_ws_bytes_f16c : conv_ws_bytes_f16)(p, pass);
    case LS_BF16: return conv_ws_bytes_bf16(p, pass);
    default: return 0;
    }
}

ls_status ls_cpu_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                            const void *b, void *y, void *ws) {
    switch (t) {
    case LS_F32: conv_fwd_f32(p, x, w, b, y, ws); return LS_OK;
    case LS_F64: conv_fwd_f64(p, x, w, b, y, ws); return LS_OK;
    case LS_F16: (F16C_OK ? ls_cpu_conv_fwd_f16c : conv_fwd_f16)(p, x, w, b, y, ws); return LS_OK;
    case LS_BF16: conv_fwd_bf16(p, x, w, b, y, ws); return LS_OK;
    default: return LS_CPU_BAD_DTYPE4("conv2d", t);
    }
}

ls_status ls_cpu_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db, void *ws) {
    switch (t) {
    case LS_F32: conv_bwd_f32(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_F64: conv_bwd_f64(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_F16: (F16C_OK ? ls_cpu_conv_bwd_f16c : conv_bwd_f16)(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_BF16: conv_bwd_bf16(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    default: return LS_CPU_BAD_DTYPE4("conv2d backward", t);
    }
}
