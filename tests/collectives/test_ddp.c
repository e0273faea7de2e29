/* test_ddp.c: the DDP helpers across ranks: rank 0's parameters reach every rank; identical models
 * pass the signature check; a rank with a different shape, dtype or parameter count makes EVERY
 * rank return LS_ERR_MISMATCH with the message naming the first difference, and the ranks go on
 * communicating afterwards (no hang: the ctest timeout would catch one); metrics sum/average.
 * Run with any number of ranks (alone: self, where every check passes trivially). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "ddp.h"
#include "testutil.h"

static ls_comm *C;
static int R, W;
static ls_allocator *A;

static ls_tensor *make(int ndim, int64_t d0, int64_t d1, ls_dtype t, double fill) {
    int64_t shape[2] = {d0, d1};
    ls_tensor *x = NULL;
    LS_REQUIRE_OK(ls_tensor_create(A, t, ndim, shape, "test parameter", &x));
    int64_t n = ls_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (t == LS_F32)
            ((float *)x->data)[i] = (float)(fill + (double)i);
        else if (t == LS_F64)
            ((double *)x->data)[i] = fill + (double)i;
    }
    return x;
}

/* The MLP-like model: fc1.weight [512, 784], fc1.bias [512], fc2.weight [256, 512], fc2.bias [256]
 * (a fifth and sixth parameter when extra). */
typedef struct model {
    int n;
    ls_tensor *p[6];
} model;

static const char *names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};

static model build(int64_t fc2_in, ls_dtype bias_t, int extra, double fill) {
    model m;
    memset(&m, 0, sizeof m);
    m.p[0] = make(2, 512, 784, LS_F32, fill);
    m.p[1] = make(1, 512, 1, bias_t, fill);
    m.p[2] = make(2, 256, 512, LS_F32, fill);
    m.p[3] = make(2, 256, fc2_in, LS_F32, fill); /* parameter 3 is fc2.weight's twin in shape */
    m.n = 4;
    if (extra) {
        m.p[4] = make(2, 10, 256, LS_F32, fill);
        m.p[5] = make(1, 10, 1, LS_F32, fill);
        m.n = 6;
    }
    return m;
}

static void drop(model *m) {
    for (int i = 0; i < m->n; i++) ls_tensor_destroy(m->p[i]);
}

/* Every rank must get the same status and message; and the ranks must still talk afterwards. */
static void expect_mismatch_everywhere(model *m, const char *const *nm, const char *want) {
    ls_status s = ls_ddp_check_signature(C, m->n, m->p, nm);
    if (W == 1) {
        LS_EXPECT(s == LS_OK);
        return;
    }
    LS_EXPECT(s == LS_ERR_MISMATCH);
    if (strcmp(ls_last_error(), want)) {
        fprintf(stderr, "rank %d: got  '%s'\n        expected '%s'\n", R, ls_last_error(), want);
        ls_test_failures++;
    }
    LS_REQUIRE_OK(ls_comm_barrier(C));
}

int main(void) {
    LS_REQUIRE_OK(ls_host_allocator_create(0, &A));
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);

    /* broadcast: every rank starts from its own values and ends with rank 0's */
    model m = build(512, LS_F32, 0, 1000.0 * R);
    LS_REQUIRE_OK(ls_ddp_check_signature(C, m.n, m.p, names));
    LS_REQUIRE_OK(ls_ddp_check_signature(C, m.n, m.p, NULL));
    LS_REQUIRE_OK(ls_ddp_broadcast_params(C, m.n, m.p));
    for (int k = 0; k < m.n; k++) {
        int64_t n = ls_tensor_numel(m.p[k]), bad = 0;
        for (int64_t i = 0; i < n; i++) bad += ((float *)m.p[k]->data)[i] != (float)i;
        LS_EXPECT(bad == 0);
    }
    drop(&m);

    /* rank 1 (and on 3+ ranks, rank 2 too) builds parameter 3 differently: the first is reported */
    char want[256];
    m = build(R == 1 || R == 2 ? 512 : 500, LS_F32, 0, 0);
    snprintf(want, sizeof want,
             "model differs between ranks: parameter 3 (fc2.weight) has shape [256, 512] f32 on rank 1 but "
             "[256, 500] f32 on rank 0");
    {
        const char *nm[6] = {"fc1.weight", "fc1.bias", "fc2.weight.0", "fc2.weight", "x", "y"};
        expect_mismatch_everywhere(&m, nm, want);
    }
    /* without names, only the index */
    expect_mismatch_everywhere(&m, NULL,
                               "model differs between ranks: parameter 3 has shape [256, 512] f32 on rank 1 but "
                               "[256, 500] f32 on rank 0");
    drop(&m);

    /* a dtype difference on the last rank only */
    m = build(500, R == W - 1 ? LS_F64 : LS_F32, 0, 0);
    snprintf(want, sizeof want,
             "model differs between ranks: parameter 1 (fc1.bias) has shape [512] f64 on rank %d but [512] "
             "f32 on rank 0",
             W - 1);
    expect_mismatch_everywhere(&m, names, want);
    drop(&m);

    /* rank 1 has 6 parameters, rank 0 has 4 */
    m = build(500, LS_F32, R == 1, 0);
    expect_mismatch_everywhere(&m, names, "model differs between ranks: rank 1 has 6 parameters, rank 0 has 4");
    drop(&m);

    /* still in agreement afterwards */
    m = build(500, LS_F32, 1, 0);
    LS_REQUIRE_OK(ls_ddp_check_signature(C, m.n, m.p, names));
    drop(&m);
    LS_EXPECT_ERR(ls_ddp_check_signature(C, -1, NULL, NULL), LS_ERR_INVALID_ARGUMENT, "negative parameter count");

    /* metrics */
    double v[3] = {R, 2.0 * R + 1, 1};
    LS_REQUIRE_OK(ls_ddp_sum_metrics(C, v, 3));
    LS_EXPECT_NEAR(v[0], W * (W - 1) / 2.0, 1e-12);
    LS_EXPECT_NEAR(v[1], (double)W * W, 1e-12);
    LS_EXPECT_NEAR(v[2], W, 1e-12);
    double a[2] = {R, 5};
    LS_REQUIRE_OK(ls_ddp_average_metrics(C, a, 2));
    LS_EXPECT_NEAR(a[0], (W - 1) / 2.0, 1e-12);
    LS_EXPECT_NEAR(a[1], 5, 1e-12);
    LS_REQUIRE_OK(ls_ddp_average_metrics(C, NULL, 0));

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(C, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(C);
    ls_allocator_destroy(A);
    LS_TEST_END();
}
