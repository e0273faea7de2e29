/* test_totals.c: running totals (ls_train_config.totals, ls_trainer_totals). A trainer that keeps
 * them and is given no stats (or stats on some steps only) trains exactly as one given stats at
 * every step, and its totals are the sums of that trainer's stats in step order, bit for bit:
 * read every few steps with reset (an epoch, a progress line) and at the end without, and peeked
 * at (ls_trainer_totals_peek: no wait) after every step, which keeps them in step order; with
 * gradient accumulation and a short last step (fewer samples than its micro-batches hold); with
 * data kept on the device and staged batches (LOCKSTEP_DATA_ON_DEVICE); in fp16 with an overflow
 * injected at one step (LOCKSTEP_AMP_INJECT_INF: totals.skipped counts it). Bad input: totals read
 * from a trainer that keeps none, a totals flag that is not 0 or 1; a step that fails in its last
 * micro-batch, between two good ones, counts in no totals (on the CPU). Args: [cpu|cuda]; with cuda
 * the copies run on the compute stream into pinned memory, and the test exits 77 where no GPU is
 * usable. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 400
#define F 36
#define B 24
#define STEPS 13
#define READ_EVERY 4  /* totals read with reset after every 4th step */
#define FAIL_BEFORE 6 /* a step that fails comes before step 6 (fail_step) */

static ls_ctx *C;
static ls_dataset *D;

typedef struct plan {
    const char *name;
    int accum;
    const char *data_mode; /* LOCKSTEP_DATA_ON_DEVICE */
    ls_precision precision;
    const char *inject; /* LOCKSTEP_AMP_INJECT_INF, or NULL */
} plan;

/* The samples of step k: a full step but the last, which has count_last. */
static int64_t step_samples(const plan *p, int k, int64_t *idx) {
    int64_t n = (int64_t)B * p->accum, count_last = n - B / 2 - 3;
    if (k == STEPS - 1) n = count_last;
    for (int64_t i = 0; i < n; i++) idx[i] = ((int64_t)k * 97 + i * 13) % N;
    return n;
}

/* Sums of one stretch of steps, as ls_train_totals. */
static void add(ls_train_totals *s, const ls_step_stats *st) {
    s->loss_sum += st->loss_sum;
    s->correct += st->correct;
    s->samples += st->samples;
    s->steps++;
    s->skipped += st->skipped;
}

static int same(const ls_train_totals *a, const ls_train_totals *b) {
    return a->loss_sum == b->loss_sum && a->correct == b->correct && a->samples == b->samples && a->steps == b->steps &&
           a->skipped == b->skipped;
}

/* A step that fails in its last micro-batch: a label outside the classes in a set filled by hand
 * (the library's sets refuse one when built), the step's other micro-batches fine. It counts in
 * neither the stats nor the totals: its first micro-batches' losses were added to the next step's
 * totals (samples and loss_sum more than the steps' stats summed). On the CPU only: labels are
 * checked where they are on the host (on a GPU they are the data set's promise). */
static void fail_step(const plan *p, ls_trainer *t, int with_stats) {
    if (C->device.type != LS_DEVICE_CPU) return;
    static int32_t labels[N];
    memcpy(labels, D->labels, sizeof labels);
    ls_dataset bad = *D;
    bad.id = 0;
    bad.labels = labels;
    int64_t idx[B * 3], n = (int64_t)B * p->accum;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    labels[n - 1] = 99;
    ls_step_stats st;
    LS_EXPECT_ERR(ls_trainer_step(t, &bad, idx, n, n, with_stats ? &st : NULL), LS_ERR_INVALID_ARGUMENT, "99");
}

/* Trains STEPS steps. totals 0: stats at every step, summed here per stretch of READ_EVERY steps
 * into part[]; 1: running totals, stats only at steps 2 and 9, totals read with reset after
 * every stretch into part[]. Returns the parameters. */
static float *run(const plan *p, int totals, ls_train_totals part[], int64_t *n_out) {
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", p->data_mode, 1) == 0);
    if (p->inject)
        LS_REQUIRE(setenv("LOCKSTEP_AMP_INJECT_INF", p->inject, 1) == 0);
    else
        unsetenv("LOCKSTEP_AMP_INJECT_INF");
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer_ex(C, F, B, p->accum, p->precision, totals, 0.0, &m, &o);
    int64_t idx[B * 3], since = 0; /* samples since the last reset */
    memset(part, 0, sizeof(ls_train_totals) * (STEPS / READ_EVERY + 1));
    for (int k = 0; k < STEPS; k++) {
        int64_t n = step_samples(p, k, idx);
        ls_step_stats st;
        int with_stats = !totals || k == 2 || k == 9;
        if (k == FAIL_BEFORE) fail_step(p, t, with_stats);
        LS_REQUIRE_OK(ls_trainer_step(t, D, idx, n, n, with_stats ? &st : NULL));
        since += n;
        if (totals) { /* a progress line's read: every step counted, the samples that have arrived */
            ls_train_totals pk;
            LS_REQUIRE_OK(ls_trainer_totals_peek(t, &pk));
            LS_EXPECT(pk.steps == k % READ_EVERY + 1 && pk.samples <= since);
            if (C->device.type == LS_DEVICE_CPU) LS_EXPECT(pk.samples == since);
        }
        if (!totals) add(&part[k / READ_EVERY], &st);
        if (totals && (k + 1) % READ_EVERY == 0) {
            LS_REQUIRE_OK(ls_trainer_totals(t, &part[k / READ_EVERY], 1));
            since = 0;
        }
    }
    if (totals) {
        ls_train_totals again;
        LS_REQUIRE_OK(ls_trainer_totals(t, &part[STEPS / READ_EVERY], 0));
        LS_REQUIRE_OK(ls_trainer_totals(t, &again, 1)); /* without reset: read again, the same */
        LS_EXPECT(same(&again, &part[STEPS / READ_EVERY]));
        LS_REQUIRE_OK(ls_trainer_totals(t, &again, 0));
        LS_EXPECT(again.steps == 0 && again.samples == 0 && again.loss_sum == 0 && again.correct == 0);
    } else {
        ls_train_totals none;
        ls_status s = ls_trainer_totals(t, &none, 0);
        LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && strstr(ls_last_error(), "keeps no totals") &&
                  strstr(ls_last_error(), "totals = 1"));
        s = ls_trainer_totals_peek(t, &none);
        LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && strstr(ls_last_error(), "keeps no totals"));
    }
    ls_trainer_destroy(t);
    float *out = params_to_host(C, m, n_out);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    return out;
}

static void check(const plan *p) {
    enum { PARTS = STEPS / READ_EVERY + 1 };
    ls_train_totals want[PARTS], got[PARTS];
    int64_t na, nb;
    float *a = run(p, 0, want, &na);
    float *b = run(p, 1, got, &nb);
    int params = na == nb && !memcmp(a, b, sizeof(float) * (size_t)na);
    int sums = 1;
    int64_t samples = 0, skipped = 0;
    for (int i = 0; i < PARTS; i++) {
        sums &= same(&want[i], &got[i]);
        samples += got[i].samples;
        skipped += got[i].skipped;
    }
    printf("%-40s parameters %s; totals %s the stats' sums (last stretch: loss %.17g / %.17g, correct %lld / "
           "%lld, %lld steps); %lld samples, %lld skipped\n",
           p->name, params ? "identical" : "DIFFER", sums ? "equal" : "DIFFER from", want[PARTS - 1].loss_sum,
           got[PARTS - 1].loss_sum, (long long)want[PARTS - 1].correct, (long long)got[PARTS - 1].correct,
           (long long)got[PARTS - 1].steps, (long long)samples, (long long)skipped);
    LS_EXPECT(params && sums);
    int64_t idx[B * 3], all = 0;
    for (int k = 0; k < STEPS; k++) all += step_samples(p, k, idx);
    LS_EXPECT(samples == all);
    LS_EXPECT(got[0].steps == READ_EVERY && got[PARTS - 1].steps == STEPS % READ_EVERY);
    LS_EXPECT(got[0].loss_sum > 0 && got[0].correct > 0);
    LS_EXPECT(skipped == (p->inject ? 1 : 0));
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    LS_REQUIRE_OK(ls_ctx_create(mlp_device_arg(argc, argv), NULL, &C));
    int32_t y[N];
    float *x = mlp_points(N, F, 4242, y);
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &D));
    free(x);
    const plan plans[] = {
        {"data on the device", 1, "on", LS_PRECISION_FP32, NULL},
        {"on the device, 3 micro-batches", 3, "on", LS_PRECISION_FP32, NULL},
        {"staged, 2 micro-batches", 2, "off", LS_PRECISION_FP32, NULL},
        {"fp16, an overflow at step 5", 2, "auto", LS_PRECISION_FP16, "5"},
        {"bf16", 1, "auto", LS_PRECISION_BF16, NULL},
    };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) check(&plans[i]);

    /* a totals flag that is neither 0 nor 1 */
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    mlp_sgd(C, F, 0.05f, &m, &o);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = 1;
    tc.totals = 2;
    ls_trainer *t = NULL;
    ls_status s = ls_trainer_create(C, NULL, m, o, &tc, &t);
    LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && t == NULL && strstr(ls_last_error(), "totals 2 must be 0 or 1"));
    LS_EXPECT(ls_trainer_totals(NULL, NULL, 0) == LS_ERR_INVALID_ARGUMENT);
    LS_EXPECT(ls_trainer_totals_peek(NULL, NULL) == LS_ERR_INVALID_ARGUMENT);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(D);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
