/* test_load_atomic.c: a load that refuses its file leaves the caller's objects exactly as they
 * were. ls_model_load with a file of a wrong shape, a missing tensor, a tensor of an integer dtype,
 * a NaN, an f64 past f32's range, a tensor the model lacks, a truncated or damaged file: each
 * refused naming the problem, and the model's parameters bit for bit as before (the wrong tensor
 * is the model's last, so a load that wrote as it checked had filled the others). ls_ckpt_load_ema
 * of a checkpoint whose optimizer is of another kind: refused, and the model, the optimizer's
 * state and step count and the EMA as before (the model's weights were written before the
 * optimizer's file was looked at). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_test.h"
#include "testutil.h"

static ls_ctx *ctx;
static char root[64];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static ls_module *make_model(uint64_t seed) {
    ls_module *m;
    int64_t sizes[3] = {4, 8, 3};
    LS_REQUIRE_OK(ls_mlp_create(ctx, LS_F32, 3, sizes, LS_ACT_RELU, seed, &m));
    return m;
}

static ls_optimizer *make_opt(ls_module *m, ls_optim_kind kind) {
    ls_tensor *p[8], *g[8];
    int n = ls_module_num_params(m);
    LS_REQUIRE(n <= 8);
    for (int i = 0; i < n; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config c = ls_optim_defaults(kind);
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(ctx, n, p, g, &c, &o));
    return o;
}

/* Every byte of the tensors the load could write: the parameters, the optimizer's states and step
 * count, the EMA's averages (malloc'd; *len its size). */
static unsigned char *snapshot(ls_module *m, ls_optimizer *o, ls_ema *e, size_t *len) {
    size_t n = 0, cap = 1 << 16;
    unsigned char *b = malloc(cap);
    LS_REQUIRE(b);
#define PUT(ptr, sz)                                                                                                   \
    do {                                                                                                               \
        LS_REQUIRE(n + (sz) <= cap);                                                                                   \
        memcpy(b + n, (ptr), (sz));                                                                                    \
        n += (sz);                                                                                                     \
    } while (0)
    for (int i = 0; i < ls_module_num_params(m); i++) {
        ls_tensor *t = ls_module_param(m, i);
        PUT(t->data, ls_tensor_nbytes(t));
        for (int s = 0; o && s < 2; s++) {
            ls_tensor *st = ls_optimizer_state(o, i, s);
            if (st) PUT(st->data, ls_tensor_nbytes(st));
        }
    }
    if (o) {
        int64_t steps = -1;
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &steps));
        PUT(&steps, sizeof steps);
    }
    for (int i = 0; e && i < ls_ema_num_tensors(e); i++) {
        ls_tensor *t = ls_ema_tensor(e, i);
        PUT(t->data, ls_tensor_nbytes(t));
    }
#undef PUT
    *len = n;
    return b;
}

static int unchanged(const unsigned char *before, size_t len, ls_module *m, ls_optimizer *o, ls_ema *e) {
    size_t n;
    unsigned char *now = snapshot(m, o, e, &n);
    int same = n == len && memcmp(now, before, n) == 0;
    free(now);
    return same;
}

/* Write path with the model's tensors, the last (2.bias) replaced by last (NULL: left out), and
 * extra (not NULL) added under the name "3.weight". */
static void write_file(const char *path, ls_module *m, const ls_tensor *last, const ls_tensor *extra) {
    const char *names[6];
    const ls_tensor *ts[6];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        names[n] = ls_module_param_name(m, i);
        ts[n++] = ls_module_param(m, i);
    }
    if (last) {
        names[n] = ls_module_param_name(m, 3);
        ts[n++] = last;
    }
    if (extra) {
        names[n] = "3.weight";
        ts[n++] = extra;
    }
    LS_REQUIRE_OK(ls_safetensors_write(path, n, names, ts, NULL, NULL));
}

static void test_model_load(void) {
    char p[256];
    snprintf(p, sizeof p, "%s/w.safetensors", root);
    ls_module *a = make_model(1), *b = make_model(2);
    LS_REQUIRE(strcmp(ls_module_param_name(a, 3), "2.bias") == 0);
    size_t len;
    unsigned char *before = snapshot(b, NULL, NULL, &len);

    float f4[4] = {1, 2, 3, 4}, fnan[3] = {0.5f, 0.25f, NAN};
    double dbig[3] = {0.5, 1e300, 0.25};
    int32_t i3[3] = {1, 2, 3};
    const int64_t s3[1] = {3}, s4[1] = {4};
    ls_tensor wide = ls_tensor_view(f4, LS_F32, ls_device_cpu(), 1, s4);
    ls_tensor nan = ls_tensor_view(fnan, LS_F32, ls_device_cpu(), 1, s3);
    ls_tensor big = ls_tensor_view(dbig, LS_F64, ls_device_cpu(), 1, s3);
    ls_tensor ints = ls_tensor_view(i3, LS_I32, ls_device_cpu(), 1, s3);
    const struct {
        const ls_tensor *last, *extra;
        const char *needle;
    } cases[] = {
        {&wide, NULL, "tensor '2.bias' has shape [4] but the model's parameter 3 is [3]"},
        {NULL, NULL, "no tensor '2.bias' (the model's parameter 3)"},
        {&ints, NULL, "tensor '2.bias' is I32, not a floating-point type"},
        {&nan, NULL, "tensor '2.bias' holds NaN at element 2 of 3"},
        {&big, NULL, "tensor '2.bias' holds inf at element 1 of 3 (as the model's dtype)"},
        {ls_module_param(a, 3), &wide, "the file has 1 tensor the model lacks ('3.weight' [4])"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_file(p, a, cases[k].last, cases[k].extra);
        LS_EXPECT_ERR(ls_model_load(NULL, ctx, p, b), LS_ERR_INVALID_ARGUMENT, cases[k].needle);
        if (!unchanged(before, len, b, NULL, NULL)) {
            fprintf(stderr, "case %zu (%s): the refused load changed the model\n", k, cases[k].needle);
            ls_test_failures++;
        }
    }

    /* the whole file, then cut short, then its header damaged: refused at the open */
    write_file(p, a, ls_module_param(a, 3), NULL);
    size_t flen;
    unsigned char *whole = ckpt_test_slurp(p, &flen);
    LS_REQUIRE(whole && flen > 16);
    LS_REQUIRE(truncate(p, (off_t)flen - 4) == 0);
    LS_EXPECT(ls_model_load(NULL, ctx, p, b) == LS_ERR_FORMAT);
    LS_EXPECT(unchanged(before, len, b, NULL, NULL));
    whole[8] = '[';
    FILE *f = fopen(p, "wb");
    LS_REQUIRE(f && fwrite(whole, 1, flen, f) == flen && fclose(f) == 0);
    LS_EXPECT(ls_model_load(NULL, ctx, p, b) == LS_ERR_FORMAT);
    LS_EXPECT(unchanged(before, len, b, NULL, NULL));
    free(whole);

    /* the test can see a load: the good file changes every parameter */
    write_file(p, a, ls_module_param(a, 3), NULL);
    LS_REQUIRE_OK(ls_model_load(NULL, ctx, p, b));
    size_t alen;
    unsigned char *want = snapshot(a, NULL, NULL, &alen);
    LS_EXPECT(unchanged(want, alen, b, NULL, NULL));
    free(want);
    free(before);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

static void test_ckpt_load(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    ls_module *a = make_model(1), *b = make_model(2);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_ADAMW);
    ls_ema *ea, *eb;
    LS_REQUIRE_OK(ls_ema_create(ctx, a, 0.9, 0, &ea));
    LS_REQUIRE_OK(ls_ema_create(ctx, b, 0.9, 0, &eb));
    ls_optimizer_set_num_steps(oa, 5);
    ls_optimizer_set_num_steps(ob, 9);
    ls_ckpt_state st = ckpt_test_state(5, 1);
    st.optim = ls_optimizer_config(oa);
    LS_REQUIRE_OK(ls_ckpt_save_ema(NULL, ctx, dir, 0, a, oa, ea, &st, NULL, 0));

    size_t len;
    unsigned char *before = snapshot(b, ob, eb, &len);
    ls_ckpt_state got;
    int found = -1;
    LS_EXPECT_ERR(ls_ckpt_load_ema(NULL, ctx, dir, "auto", b, ob, eb, &got, &found, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "the checkpoint's optimizer is sgd but this run's is adamw");
    LS_EXPECT(found == 0);
    LS_EXPECT(unchanged(before, len, b, ob, eb));
    free(before);

    /* the test can see a load: with an SGD optimizer it loads */
    ls_optimizer *oc = make_opt(b, LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_ckpt_load_ema(NULL, ctx, dir, "auto", b, oc, eb, &got, &found, NULL, 0));
    size_t alen;
    unsigned char *want = snapshot(a, oa, ea, &alen);
    LS_EXPECT(found == 1 && unchanged(want, alen, b, oc, eb));
    free(want);
    ls_optimizer_destroy(oc);
    ls_ema_destroy(ea);
    ls_ema_destroy(eb);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    snprintf(root, sizeof root, "/tmp/ls_load_atomic_XXXXXX");
    LS_REQUIRE(mkdtemp(root) != NULL);
    test_model_load();
    test_ckpt_load();
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
