/* test_ddp.c: the DDP helpers across ranks: rank 0's parameters reach every rank; identical models
 * pass the signature check; a rank with a different shape, dtype or parameter count makes EVERY
 * rank return LS_ERR_MISMATCH with the message naming the first difference, and the ranks go on
 * communicating afterwards (no hang: the ctest timeout would catch one); the same for settings
 * (ls_ddp_check_settings: numbers, strings, flags, not given); metrics sum/average; the broadcasts
 * and metric sums given bad arguments or another call on one rank fail every rank at once.
 * Run with any number of ranks (alone: self, where every check passes trivially). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
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

/* Every rank must get the same status and message (s: this rank's); and the ranks must still talk
 * afterwards. */
static void expect_mismatch(ls_status s, const char *want) {
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

static void expect_mismatch_everywhere(model *m, const char *const *nm, const char *want) {
    expect_mismatch(ls_ddp_check_signature(C, m->n, m->p, nm), want);
}

static void expect_settings_mismatch(int n, const ls_setting *set, const char *want) {
    expect_mismatch(ls_ddp_check_settings(C, n, set), want);
}

/* Settings: equal ones pass (0 and -0, NaNs, a string given as another pointer); a difference on
 * some rank fails every rank naming the first (lowest index, then lowest rank) with both values. */
static void check_settings(void) {
    char seed[8];
    snprintf(seed, sizeof seed, "%d", 42);
    ls_setting same[6] = {ls_setting_num("--epochs", 5),    ls_setting_num("--min-lr", R % 2 ? -0.0 : 0.0),
                          ls_setting_num("--x", NAN),       ls_setting_str("--seed", seed),
                          ls_setting_str("--resume", NULL), ls_setting_flag("--augment", 1)};
    LS_REQUIRE_OK(ls_ddp_check_settings(C, 6, same));
    LS_REQUIRE_OK(ls_ddp_check_settings(C, 0, NULL));
    LS_EXPECT_ERR(ls_ddp_check_settings(C, -1, NULL), LS_ERR_INVALID_ARGUMENT, "-1 settings");

    char want[256];
    /* ranks 1 and 2 differ at index 2, the last rank at index 1 too: index 1, the last rank */
    ls_setting set[4] = {ls_setting_num("--epochs", 5), ls_setting_num("--lr", R == W - 1 ? 0.1f : 0.05f),
                         ls_setting_num("--batch-size", R == 1 || R == 2 ? 64 : 128), ls_setting_num("--y", 1)};
    /* float values shown with the digits that tell them apart, no more */
    snprintf(want, sizeof want, "--lr is 0.1 on rank %d but 0.05 on rank 0", W - 1);
    expect_settings_mismatch(4, set, want);
    set[1] = ls_setting_num("--lr", R == W - 1 ? 0.05000001 : 0.05);
    snprintf(want, sizeof want, "--lr is 0.05000001 on rank %d but 0.05 on rank 0", W - 1);
    expect_settings_mismatch(4, set, want);
    set[1] = ls_setting_num("--lr", 0.05);
    expect_settings_mismatch(4, set, "--batch-size is 64 on rank 1 but 128 on rank 0");
    /* whole numbers in all their digits */
    ls_setting crc[1] = {ls_setting_num("a CRC32", R == 1 ? 3603540000.0 : 528641000.0)};
    expect_settings_mismatch(1, crc, "a CRC32 is 3603540000 on rank 1 but 528641000 on rank 0");

    /* strings, not given, flags */
    ls_setting str[3] = {ls_setting_str("--optimizer", R == 1 ? "adamw" : "sgd"),
                         ls_setting_str("--resume", R == 1 ? "auto" : NULL), ls_setting_flag("--sync-bn", R == 1)};
    expect_settings_mismatch(3, str, "--optimizer is 'adamw' on rank 1 but 'sgd' on rank 0");
    expect_settings_mismatch(2, str + 1, "--resume is 'auto' on rank 1 but not given on rank 0");
    expect_settings_mismatch(1, str + 2, "--sync-bn is given on rank 1 but not given on rank 0");
    ls_setting kind[1] = {R == 1 ? ls_setting_str("--batch-size", "auto") : ls_setting_num("--batch-size", 64)};
    expect_settings_mismatch(1, kind, "--batch-size is 'auto' on rank 1 but 64 on rank 0");

    /* long values and names: shown around where they differ (250 bytes that differ at byte 200 were
     * shown as their same first 108), a name in full to where it differs */
    char v250[251], n250[251];
    memset(v250, 'x', 250);
    v250[250] = '\0';
    memcpy(n250, v250, sizeof n250);
    if (R == 1) v250[199] = n250[199] = 'Y';
    ls_setting longs[2] = {ls_setting_str("--data-dir", v250), ls_setting_num(n250, 1)};
    char x49[50], lw[512]; /* '...', 50 bytes before the difference, it, 49 after, '...' */
    memset(x49, 'x', 49);
    x49[49] = '\0';
    snprintf(lw, sizeof lw,
             "--data-dir is '...x%sY%s...' on rank 1 but '...x%sx%s...' on rank 0 (they differ at "
             "character 200)",
             x49, x49, x49, x49);
    expect_settings_mismatch(1, longs, lw);
    snprintf(lw, sizeof lw,
             "settings differ: setting 0 is '...x%sY%s...' on rank 1 but '...x%sx%s...' "
             "on rank 0 (not the same program?)",
             x49, x49, x49, x49);
    expect_settings_mismatch(1, longs + 1, lw);

    /* another program: the count, or a name */
    ls_setting other[2] = {ls_setting_num("--epochs", 5), ls_setting_num(R == 1 ? "--steps" : "--epochs", 5)};
    expect_settings_mismatch(R == 1 ? 1 : 2, other,
                             "settings differ: rank 1 checks 1 settings, rank 0 2 (not the same "
                             "program?)");
    expect_settings_mismatch(2, other,
                             "settings differ: setting 1 is '--steps' on rank 1 but '--epochs' on rank 0 "
                             "(not the same program?)");
    /* and they still agree afterwards */
    LS_REQUIRE_OK(ls_ddp_check_settings(C, 6, same));
}

/* s: every rank fails with status st; the message is mine on the rank that was wrong (bad; -1: on
 * every rank alike), else mine with " (on rank BAD)"; and the ranks still talk afterwards. */
static void expect_all(ls_status s, ls_status st, int bad, const char *mine) {
    char want[512];
    snprintf(want, sizeof want, bad >= 0 && R != bad ? "%s (on rank %d)" : "%s", mine, bad);
    LS_EXPECT(s == st);
    if (strcmp(ls_last_error(), want)) {
        fprintf(stderr, "rank %d: got  %s '%s'\n        expected '%s'\n", R, ls_status_name(s), ls_last_error(), want);
        ls_test_failures++;
    }
    LS_REQUIRE_OK(ls_comm_barrier(C));
}

/* The broadcasts and the metric sums given bad arguments or another call on ONE rank: every rank
 * fails at once naming the rank and the problem, where the others waited in the collective until
 * LOCKSTEP_COMM_TIMEOUT (or MPI paired the calls of other counts); then a broadcast again goes
 * through. */
static void check_one_rank_wrong(void) {
    if (W == 1) return;
    const int last = W - 1;
    double v[3] = {1, 2, 3};
    expect_all(ls_ddp_sum_metrics(C, R == 1 ? NULL : v, 3), LS_ERR_INVALID_ARGUMENT, 1,
               "ls_ddp_sum_metrics: the values are NULL");
    expect_all(ls_ddp_average_metrics(C, v, R == last ? -1 : 3), LS_ERR_INVALID_ARGUMENT, last,
               "ls_ddp_average_metrics: a negative count");
    expect_all(ls_ddp_sum_metrics(C, v, R == 1 ? 2 : 3), LS_ERR_MISMATCH, -1,
               "ls_ddp_sum_metrics: the ranks' calls differ: rank 1 sums 2 values, rank 0 3");

    model m = build(500, LS_F32, 0, 100.0 * R);
    ls_tensor *keep = m.p[2];
    if (R == 1) m.p[2] = NULL;
    expect_all(ls_ddp_broadcast_params(C, m.n, m.p), LS_ERR_INVALID_ARGUMENT, 1,
               "ls_ddp_broadcast_params: parameter 2 is NULL");
    m.p[2] = keep;
    int roots[4] = {0, 1 % W, 0, last};
    if (R == last) roots[1] = W;
    char want[256];
    snprintf(want, sizeof want, "ls_ddp_broadcast_owned: parameter 1's root %d is not a rank of %d", W, W);
    expect_all(ls_ddp_broadcast_owned(C, m.n, m.p, roots, 0), LS_ERR_INVALID_ARGUMENT, last, want);
    roots[1] = 1 % W;
    /* another count, another root, another size */
    expect_all(ls_ddp_broadcast_params(C, R == 1 ? 3 : 4, m.p), LS_ERR_MISMATCH, -1,
               "ls_ddp_broadcast_params: the ranks' calls differ: rank 1 broadcasts 3 parameters, rank 0 4");
    if (R == last) roots[2] = last;
    snprintf(want, sizeof want,
             "ls_ddp_broadcast_owned: the ranks' calls differ: parameter 2 is 131072 f32 elements from rank %d on "
             "rank %d but 131072 f32 elements from rank 0 on rank 0",
             last, last);
    expect_all(ls_ddp_broadcast_owned(C, m.n, m.p, roots, 0), LS_ERR_MISMATCH, -1, want);
    roots[2] = 0;
    drop(&m);
    m = build(R == 1 ? 512 : 500, LS_F32, 0, 100.0 * R);
    expect_all(ls_ddp_broadcast_params(C, m.n, m.p), LS_ERR_MISMATCH, -1,
               "ls_ddp_broadcast_params: the ranks' calls differ: parameter 3 is 131072 f32 elements from rank 0 on "
               "rank 1 but 128000 f32 elements from rank 0 on rank 0");
    drop(&m);

    /* the ranks go on: each parameter from its root, then the same again without the agreement */
    m = build(500, LS_F32, 0, 100.0 * R);
    for (int again = 0; again < 2; again++) {
        LS_REQUIRE_OK(again ? ls_ddp_rebroadcast_owned(C, m.n, m.p, roots, 0)
                            : ls_ddp_broadcast_owned(C, m.n, m.p, roots, 0));
        for (int k = 0; k < m.n; k++) {
            int64_t n = ls_tensor_numel(m.p[k]), bad = 0;
            for (int64_t i = 0; i < n; i++) bad += ((float *)m.p[k]->data)[i] != (float)(100.0 * roots[k] + (double)i);
            LS_EXPECT(bad == 0);
        }
    }
    drop(&m);
    LS_REQUIRE_OK(ls_ddp_sum_metrics(C, v, 3));
    LS_EXPECT_NEAR(v[0], W, 1e-12);
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
    /* a NULL parameter on rank 1 only: every rank fails naming it (the others waited in the count's
     * exchange until LOCKSTEP_COMM_TIMEOUT) */
    if (W > 1) {
        m = build(500, LS_F32, 0, 0);
        ls_tensor *keep = m.p[2];
        if (R == 1) m.p[2] = NULL;
        LS_EXPECT_ERR(ls_ddp_check_signature(C, m.n, m.p, names), LS_ERR_INVALID_ARGUMENT,
                      R == 1 ? "ls_ddp_check_signature: parameter 2 is NULL" : "parameter 2 is NULL (on rank 1)");
        m.p[2] = keep;
        LS_REQUIRE_OK(ls_comm_barrier(C));
        LS_REQUIRE_OK(ls_ddp_check_signature(C, m.n, m.p, names));
        drop(&m);
    }

    check_settings();

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

    check_one_rank_wrong();

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(C, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(C);
    ls_allocator_destroy(A);
    LS_TEST_END();
}
