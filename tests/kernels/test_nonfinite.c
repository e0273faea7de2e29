/* test_nonfinite.c: inf and NaN through the CPU's ReLUs (the activation, the ReLU fused into batch
 * normalization and into the residual add) as PyTorch passes them, in every float dtype: forward,
 * a NaN stays NaN (relu(NaN) = NaN, not 0: a NaN must not be hidden from the loss and the inf/NaN
 * checks), -0 and negatives give +0, inf stays inf; backward, dy is zeroed where the input (or the
 * output) is <= 0 only, so a NaN position passes dy, as torch's threshold_backward does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half_impl.h"
#include "ops.h"
#include "testutil.h"

static ls_ctx *C;

static void put(ls_dtype t, const double *v, int64_t n, void *out) {
    for (int64_t i = 0; i < n; i++) switch (t) {
        case LS_F64: ((double *)out)[i] = v[i]; break;
        case LS_F32: ((float *)out)[i] = (float)v[i]; break;
        case LS_F16: ((uint16_t *)out)[i] = ls_hi_f32_to_f16((float)v[i]); break;
        case LS_BF16: ((uint16_t *)out)[i] = ls_hi_f32_to_bf16((float)v[i]); break;
        default: LS_REQUIRE(0);
        }
}

static double get1(ls_dtype t, const void *p, int64_t i) {
    switch (t) {
    case LS_F64: return ((const double *)p)[i];
    case LS_F32: return ((const float *)p)[i];
    case LS_F16: return ls_hi_f16_to_f32(((const uint16_t *)p)[i]);
    case LS_BF16: return ls_hi_bf16_to_f32(((const uint16_t *)p)[i]);
    default: LS_REQUIRE(0);
    }
    return 0;
}

/* got (dtype t, n) equals want: NaN where want is NaN, +0 (not -0) where want is +0, else within
 * the dtype's rounding of want. */
static void expect(const char *what, ls_dtype t, const void *got, const double *want, int64_t n) {
    double tol = t == LS_F16 || t == LS_BF16 ? 1e-2 : 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double g = get1(t, got, i), w = want[i];
        int ok = isnan(w)   ? isnan(g)
                 : w == 0   ? g == 0 && !signbit(g)
                 : isinf(w) ? g == w
                            : fabs(g - w) <= tol * fabs(w);
        if (!ok) fprintf(stderr, "%s %s: element %lld is %g, wanted %g\n", what, ls_dtype_name(t), (long long)i, g, w);
        LS_EXPECT(ok);
    }
}

static void check_dtype(ls_dtype t) {
    const double nan = NAN, inf = INFINITY;
    size_t es = ls_dtype_size(t);
    enum { N = 8 };
    double x[N] = {nan, -1, -0.0, 0, 2, inf, -inf, 0.5}, dy[N] = {3, 3, 3, 3, 3, 3, 3, 3};
    void *bx = malloc(N * es), *bdy = malloc(N * es), *by = malloc(N * es), *bdx = malloc(N * es);
    LS_REQUIRE(bx && bdy && by && bdx);
    put(t, x, N, bx);
    put(t, dy, N, bdy);

    LS_REQUIRE_OK(C->ops->act_fwd(C->state, t, LS_ACT_RELU, N, bx, by));
    expect("relu", t, by, (double[N]){nan, 0, 0, 0, 2, inf, 0, 0.5}, N);
    LS_REQUIRE_OK(C->ops->act_bwd(C->state, t, LS_ACT_RELU, N, bx, bdy, bdx));
    expect("relu backward", t, bdx, (double[N]){3, 0, 0, 0, 3, 3, 0, 3}, N);
    /* backward from ReLU's output (as the residual block calls it): the same */
    LS_REQUIRE_OK(C->ops->act_bwd(C->state, t, LS_ACT_RELU, N, by, bdy, bdx));
    expect("relu backward from its output", t, bdx, (double[N]){3, 0, 0, 0, 3, 3, 0, 3}, N);
    LS_REQUIRE_OK(C->ops->act_fwd(C->state, t, LS_ACT_GELU, 1, bx, by));
    expect("gelu", t, by, (double[1]){nan}, 1);

    /* the residual join: a + b, then ReLU */
    double a[4] = {nan, 1, -2, inf}, b[4] = {0, nan, 1, -inf};
    put(t, a, 4, bx);
    put(t, b, 4, bdy);
    LS_REQUIRE_OK(C->ops->add(C->state, t, 4, bx, bdy, 1, by));
    expect("add+relu", t, by, (double[4]){nan, nan, 0, nan}, 4);
    LS_REQUIRE_OK(C->ops->add(C->state, t, 4, bx, bdy, 0, by));
    expect("add", t, by, (double[4]){nan, nan, -1, nan}, 4);

    /* ReLU(BN(x)) with given statistics (mean 0, var 1, gamma 1, beta 0), one channel holding a
     * NaN, another finite; then backward: the NaN position passes dy into sum_dy */
    ls_bn_params p = {1, 2, 4, 0.0, 1};
    double xb[8] = {nan, -1, 2, 3, -1, 1, -2, 4};
    int wide = t == LS_F64;
    size_t cs = wide ? 8 : 4; /* statistics: f64 for f64, else f32 */
    void *mean = calloc(2, cs), *var = malloc(2 * cs), *gamma = malloc(2 * cs), *beta = calloc(2, cs);
    void *s1 = malloc(2 * cs), *s2 = malloc(2 * cs);
    LS_REQUIRE(mean && var && gamma && beta && s1 && s2);
    put(wide ? LS_F64 : LS_F32, (double[2]){1, 1}, 2, var);
    put(wide ? LS_F64 : LS_F32, (double[2]){1, 1}, 2, gamma);
    put(t, xb, 8, bx);
    put(t, (double[8]){1, 1, 1, 1, 1, 1, 1, 1}, 8, bdy);
    LS_REQUIRE_OK(C->ops->bn_fwd(C->state, t, &p, bx, mean, var, gamma, beta, by));
    expect("bn+relu", t, by, (double[8]){nan, 0, 2, 3, 0, 1, 0, 4}, 8);
    LS_REQUIRE_OK(C->ops->bn_bwd_reduce(C->state, t, &p, bdy, bx, by, mean, var, s1, s2));
    expect("bn+relu backward: sum of dy", wide ? LS_F64 : LS_F32, s1, (double[2]){3, 2}, 2);
    expect("bn+relu backward: sum of dy * xhat", wide ? LS_F64 : LS_F32, s2, (double[2]){nan, 5}, 2);
    LS_REQUIRE_OK(C->ops->bn_bwd_dx(C->state, t, &p, bdy, bx, by, mean, var, gamma, NULL, NULL, 0.0, bdx));
    /* statistics given (eval): dx = k * g, x is not in it (PyTorch's batch norm in eval mode, then
     * its ReLU's backward, which passes dy where the output is NaN); the NaN still reaches the
     * weight's gradient through sum(dy * xhat) */
    expect("bn+relu backward (statistics given)", t, bdx, (double[8]){1, 0, 1, 1, 0, 1, 0, 1}, 8);
    printf("ok   %-5s relu, relu backward, gelu, add(+relu), bn+relu forward and backward with inf/NaN\n",
           ls_dtype_name(t));
    free(mean), free(var), free(gamma), free(beta), free(s1), free(s2);
    free(bx), free(bdy), free(by), free(bdx);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    const ls_dtype ts[] = {LS_F32, LS_F64, LS_F16, LS_BF16};
    for (int i = 0; i < 4; i++) check_dtype(ts[i]);
    int was = ls_half_set_simd(0); /* the f16 entries without F16C as well */
    if (was) check_dtype(LS_F16);
    ls_half_set_simd(was);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
