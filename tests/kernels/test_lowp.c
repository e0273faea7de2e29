/* test_lowp.c: f16/bf16 ops on the CPU compute in f32 and store in the low precision. Each op's
 * low-precision result must equal the f32 op applied to the same rounded inputs, then rounded
 * (bitwise for the output dtype), with f32 master gradients, probabilities and losses. */
#include <stdlib.h>

#include "cpu/cpu.h"
#include "gradcheck.h"

static ls_ctx *C;

static ls_tensor *mk(ls_dtype t, int64_t r, int64_t c) { return gc_tensor(C, t, c ? 2 : 1, (int64_t[]){r, c}); }

/* round an f32 tensor through dtype t (in place) and also produce its low-precision copy */
static ls_tensor *lowcopy(ls_tensor *f, ls_dtype t) {
    ls_tensor *l = gc_tensor(C, t, f->ndim, f->shape);
    LS_REQUIRE_OK(ls_op_convert(C, f, l));
    LS_REQUIRE_OK(ls_op_convert(C, l, f));
    return l;
}

static int same_after_rounding(const ls_tensor *low, const ls_tensor *f32) {
    ls_tensor *r = gc_tensor(C, low->dtype, f32->ndim, f32->shape);
    LS_REQUIRE_OK(ls_op_convert(C, f32, r));
    int eq = memcmp(r->data, low->data, ls_tensor_nbytes(r)) == 0;
    ls_tensor_destroy(r);
    return eq;
}

static void check(ls_dtype t) {
    ls_rng r;
    ls_rng_init(&r, (uint64_t)t);
    int64_t B = 16, in = 24, out = 10;
    ls_tensor *x = mk(LS_F32, B, in), *w = mk(LS_F32, out, in), *b = mk(LS_F32, out, 0);
    ls_tensor *dy = mk(LS_F32, B, out);
    gc_fill(&r, x, 0);
    gc_fill(&r, w, 0);
    gc_fill(&r, b, 0);
    gc_fill(&r, dy, 0);
    ls_tensor *xl = lowcopy(x, t), *wl = lowcopy(w, t), *bl = lowcopy(b, t), *dyl = lowcopy(dy, t);
    ls_tensor *y = mk(LS_F32, B, out), *yl = mk(t, B, out);
    LS_REQUIRE_OK(ls_op_linear_forward(C, x, w, b, y));
    LS_REQUIRE_OK(ls_op_linear_forward(C, xl, wl, bl, yl));
    LS_EXPECT(same_after_rounding(yl, y));
    ls_tensor *dx = mk(LS_F32, B, in), *dxl = mk(t, B, in), *dw = mk(LS_F32, out, in), *dwl = mk(LS_F32, out, in);
    ls_tensor *db = mk(LS_F32, out, 0), *dbl = mk(LS_F32, out, 0);
    LS_REQUIRE_OK(ls_op_linear_backward(C, dy, x, w, dx, dw, db));
    LS_REQUIRE_OK(ls_op_linear_backward(C, dyl, xl, wl, dxl, dwl, dbl)); /* master grads are f32 */
    LS_EXPECT(same_after_rounding(dxl, dx));
    LS_EXPECT(memcmp(dw->data, dwl->data, ls_tensor_nbytes(dw)) == 0);
    LS_EXPECT(memcmp(db->data, dbl->data, ls_tensor_nbytes(db)) == 0);
    ls_tensor *wrong = mk(t, out, in);
    LS_EXPECT_ERR(ls_op_linear_backward(C, dyl, xl, wl, dxl, wrong, dbl), LS_ERR_INVALID_ARGUMENT,
                  "expected [10, 24] f32");

    for (int a = 0; a < 2; a++) {
        ls_tensor *ya = mk(LS_F32, B, in), *yal = mk(t, B, in), *ga = mk(LS_F32, B, in), *gal = mk(t, B, in);
        ls_tensor *g = mk(LS_F32, B, in);
        gc_fill(&r, g, 0);
        ls_tensor *gl = lowcopy(g, t);
        LS_REQUIRE_OK(ls_op_act_forward(C, (ls_act)a, x, ya));
        LS_REQUIRE_OK(ls_op_act_forward(C, (ls_act)a, xl, yal));
        LS_EXPECT(same_after_rounding(yal, ya));
        LS_REQUIRE_OK(ls_op_act_backward(C, (ls_act)a, x, g, ga));
        LS_REQUIRE_OK(ls_op_act_backward(C, (ls_act)a, xl, gl, gal));
        LS_EXPECT(same_after_rounding(gal, ga));
        ls_tensor_destroy(ya);
        ls_tensor_destroy(yal);
        ls_tensor_destroy(ga);
        ls_tensor_destroy(gal);
        ls_tensor_destroy(g);
        ls_tensor_destroy(gl);
    }
    /* cross-entropy: f32 probabilities and losses from low-precision logits */
    ls_tensor *lab = gc_tensor(C, LS_I32, 1, (int64_t[]){B});
    for (int64_t i = 0; i < B; i++) ((int32_t *)lab->data)[i] = (int32_t)(i % out);
    ls_tensor *p = mk(LS_F32, B, out), *l = mk(LS_F32, B, 0), *pl = mk(LS_F32, B, out), *ll = mk(LS_F32, B, 0);
    double m32, mlow;
    LS_REQUIRE_OK(ls_op_convert(C, yl, y)); /* the same rounded logits both ways */
    LS_REQUIRE_OK(ls_op_xent_forward(C, y, lab, p, l, &m32));
    LS_REQUIRE_OK(ls_op_xent_forward(C, yl, lab, pl, ll, &mlow));
    LS_EXPECT(m32 == mlow);
    LS_EXPECT(memcmp(p->data, pl->data, ls_tensor_nbytes(p)) == 0);
    ls_tensor *d = mk(LS_F32, B, out), *dl = mk(t, B, out);
    LS_REQUIRE_OK(ls_op_xent_backward(C, p, lab, 1.0 / B, d));
    LS_REQUIRE_OK(ls_op_xent_backward(C, pl, lab, 1.0 / B, dl));
    LS_EXPECT(same_after_rounding(dl, d));
    LS_EXPECT_ERR(ls_op_xent_forward(C, yl, lab, yl, ll, &mlow), LS_ERR_INVALID_ARGUMENT, "probabilities");
    ls_tensor *all[] = {x,  w,   b,  dy,  xl,    wl,  bl, dyl, y,  yl, dx, dxl,
                        dw, dwl, db, dbl, wrong, lab, p,  l,   pl, ll, d,  dl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ls_tensor_destroy(all[i]);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    check(LS_BF16);
    check(LS_F16);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
