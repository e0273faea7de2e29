/* norm_pool_f16c.c: norm_pool_impl.inc's f16 kernels once more, compiled for AVX2 + F16C so that
 * every f16 load and store is one VCVTPH2PS / VCVTPS2PH instead of the portable bit-twiddling
 * conversion (bitwise the same results: both round to nearest even and keep NaN quiet, see
 * tests/kernels/test_convert.c). Built only for x86-64 (kernels/CMakeLists.txt); norm_pool.c calls
 * these through ls_cpu_np_f16c when the CPU has F16C and AVX2, the portable ones otherwise. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_cnn.h"

/* this file is compiled for one ISA already: no further clones */
#undef LS_CPU_HOT
#define LS_CPU_HOT

#define LS_CAT_(a, b) a##b
#define LS_CAT(a, b) LS_CAT_(a, b)

#define TS uint16_t
#define TC float
#define LOWP 1
#define SFX f16c
#define LD(v) _cvtsh_ss(v)
#define ST(v) ((uint16_t)_cvtss_sh((v), _MM_FROUND_TO_NEAREST_INT))
#include "norm_pool_impl.inc"

const ls_cpu_np_f16 ls_cpu_np_f16c = {
    .bn_stats = bn_stats_f16c,
    .bn_fwd = bn_fwd_f16c,
    .bn_bwd_reduce = bn_bwd_reduce_f16c,
    .bn_bwd_dx = bn_bwd_dx_f16c,
    .pool_fwd = pool_fwd_f16c,
    .pool_bwd = pool_bwd_f16c,
    .gap_fwd = gap_fwd_f16c,
    .gap_bwd = gap_bwd_f16c,
    .add = add_f16c,
};
