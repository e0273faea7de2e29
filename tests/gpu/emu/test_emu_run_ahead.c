/* test_emu_run_ahead.c: on a GPU a training step waits for the device only when the caller asks
 * for what only the device knows. The whole library runs on the emulated cuda:0 (emu_registry.c:
 * the backend's own code, its caching allocator, copy stream and events) under the lazy schedule,
 * where queued kernels run only when something waits for them, so the count of kernels that have
 * run (emu_work_counts) shows every wait the host made.
 *  - ls_trainer_step with stats NULL does not wait for its own work, nor for the step before: at
 *    least two micro-batches' kernels are still queued when it returns (no kernel of steps k-1
 *    and k has run after step k of one micro-batch; none of step k's after a step of two), as
 *    PyTorch's loop runs ahead when it reads no loss. The host waits only before it rewrites a
 *    slot's staged memory (two slots, used in turn), for the copy made from it last. Data on the
 *    device (each micro-batch's indices staged in pinned memory and copied on the copy stream, not
 *    by a synchronous copy), as floats and as bytes; and a data set kept on the host, its batches
 *    staged and prefetched; one micro-batch and two; in f32, and in fp16 and bf16, whose unscale,
 *    found-inf check, skip and loss-scale update stay on the device (amp.h);
 *  - with stats, the step reads the loss and correct count: every kernel queued has run when it
 *    returns;
 *  - with running totals (cfg.totals) and stats NULL, no step waits either (the losses and counts
 *    are copied to pinned memory on the compute stream; a step waits only for the copies of the
 *    step two back), nor does ls_trainer_totals_peek after each step, and ls_trainer_totals then
 *    gives the sums of the stats of the run with stats, bit for bit;
 *  - the three train alike: the parameters after the steps identical bit for bit, and the loss and
 *    correct count of the last step (read in both) equal;
 *  - ls_trainer_evaluate over ten chunks lets the queued work run dry once, at its end (a host wait
 *    that leaves nothing queued: emu_host_drains), not after every chunk. */
#include <stdlib.h>
#include <string.h>

#include "cuda_emu_rt.h"
#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 512
#define F 64
#define B 32
#define STEPS 10

static ls_ctx *C;
static ls_dataset *D, *Db; /* floats, and bytes */

static void indices(int k, int64_t n, int64_t *idx) {
    for (int64_t i = 0; i < n; i++) idx[i] = ((int64_t)k * 131 + i * 17) % N;
}

typedef struct plan {
    const char *name;
    int accum;
    const char *data_mode; /* LOCKSTEP_DATA_ON_DEVICE */
    int hint;              /* name the next step's samples (ls_trainer_prefetch) */
    int bytes;             /* the data set of bytes (decoded on the device) */
    double clip;           /* clip_grad_norm (0: off) */
    ls_precision prec;
} plan;

enum { NO_STATS, STATS, TOTALS };

/* Trains STEPS steps. NO_STATS passes stats only to the last step, STATS to every step (their sums
 * into *sum), TOTALS to none (running totals on: ls_trainer_totals into *sum at the end). Returns
 * the parameters, and the last step's stats in *last (not TOTALS). Counts the steps after which
 * fewer than two micro-batches' kernels were still queued (*waited: with one micro-batch a kernel
 * of that step or of the one before had run, with two a kernel of that step), and those after
 * which some queued kernel had not run (*ahead). */
/* The first step whose waits are counted. */
static int first_counted(const plan *p) { return p->hint ? 2 : 1; }

static float *run(const plan *p, int mode, ls_step_stats *last, ls_train_totals *sum, int *waited, int *ahead,
                  int64_t *n_out) {
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", p->data_mode, 1) == 0);
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", "auto", 1) == 0);
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer_ex(C, F, B, p->accum, p->prec, mode == TOTALS, p->clip, &m, &o);
    const ls_dataset *data = p->bytes ? Db : D;
    int64_t n = (int64_t)B * p->accum, idx[B * 2], next[B * 2];
    unsigned long long before[STEPS], queued, done, done0 = 0;
    const int back = p->accum == 1 ? 1 : 0; /* steps back to the first whose kernels must all be queued */
    *waited = *ahead = 0;
    int64_t peek_samples = 0;
    for (int k = 0; k < STEPS; k++) {
        indices(k, n, idx);
        if (p->hint && k + 1 < STEPS) {
            indices(k + 1, n, next);
            LS_REQUIRE_OK(ls_trainer_prefetch(t, data, next, n));
        }
        emu_work_counts(&before[k], &done);
        int read = mode == STATS || (mode == NO_STATS && k == STEPS - 1);
        LS_REQUIRE_OK(ls_trainer_step(t, data, idx, n, n, read ? last : NULL));
        if (mode == STATS) {
            sum->loss_sum += last->loss_sum;
            sum->correct += last->correct;
            sum->samples += last->samples;
            sum->steps++;
            sum->skipped += last->skipped;
            LS_EXPECT(last->loss_scale == (p->prec == LS_PRECISION_FP16 ? 65536.0 : 1.0));
        }
        if (mode == TOTALS) { /* a progress line's read: never a wait */
            unsigned long long drains = emu_host_drains();
            ls_train_totals pk;
            LS_REQUIRE_OK(ls_trainer_totals_peek(t, &pk));
            LS_EXPECT(emu_host_drains() == drains && pk.steps == k + 1);
            if (k >= 1) peek_samples += pk.samples;
        }
        emu_work_counts(&queued, &done);
        /* the first step allocates and uploads the data set (synchronous copies, which run the
         * work queued before them, its gradients' zeroing): counted from the second, and what ran
         * within the first step is not the second's wait. With prefetching, from the third: the
         * second step's prefetch stages into a slot whose buffers the first step made, and waits
         * for the work queued before they were made (the first step's start) */
        if (k == 0) done0 = done;
        if (k >= first_counted(p) && done > (k - back == 0 ? done0 : before[k - back])) ++*waited;
        if (done < queued) ++*ahead;
    }
    if (mode == TOTALS) {
        /* the copies of steps the device had run by then were folded in as they arrived */
        printf("%-34s totals peeked after each step: %lld samples seen in all\n", p->name, (long long)peek_samples);
        LS_REQUIRE_OK(ls_trainer_totals(t, sum, 1));
        ls_train_totals zero;
        LS_REQUIRE_OK(ls_trainer_totals(t, &zero, 0)); /* reset */
        LS_EXPECT(zero.steps == 0 && zero.samples == 0 && zero.loss_sum == 0);
    }
    ls_trainer_destroy(t);
    float *out = params_to_host(C, m, n_out);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    return out;
}

static void check(const plan *p) {
    ls_step_stats sa, sb, unused;
    ls_train_totals sum, tot;
    memset(&sum, 0, sizeof sum);
    int wa, aa, wb, ab, wc, ac;
    int64_t na, nb, nc;
    float *a = run(p, NO_STATS, &sa, NULL, &wa, &aa, &na);
    float *b = run(p, STATS, &sb, &sum, &wb, &ab, &nb);
    float *c = run(p, TOTALS, &unused, &tot, &wc, &ac, &nc);
    int same = na == nb && !memcmp(a, b, sizeof(float) * (size_t)na);
    int same_c = nc == nb && !memcmp(c, b, sizeof(float) * (size_t)nc);
    printf("%-34s stats NULL: waited after %d of %d steps, ahead after %d; stats: waited after %d, ahead after %d; "
           "totals: waited after %d, ahead after %d; parameters %s, %s; last loss %.9g / %.9g, correct %lld / %lld; "
           "loss sum %.17g / %.17g, correct %lld / %lld\n",
           p->name, wa, STEPS - first_counted(p), aa, wb, ab, wc, ac, same ? "identical" : "DIFFER",
           same_c ? "identical" : "DIFFER", sa.loss_sum, sb.loss_sum, (long long)sa.correct, (long long)sb.correct,
           sum.loss_sum, tot.loss_sum, (long long)sum.correct, (long long)tot.correct);
    /* the last step reads its loss (it waits), so it is not counted among the steps ahead */
    LS_EXPECT(wa == 1 && aa == STEPS - 1);                /* stats NULL: no wait but the last step's, which reads */
    LS_EXPECT(wb == STEPS - first_counted(p) && ab == 0); /* stats: every step waits for all its work */
    LS_EXPECT(wc == 0 && ac == STEPS);                    /* totals: no step waits, the read comes after */
    LS_EXPECT(same && same_c);
    LS_EXPECT(sa.loss_sum == sb.loss_sum && sa.correct == sb.correct && sa.samples == sb.samples);
    LS_EXPECT(sa.samples == (int64_t)B * p->accum && sa.loss_sum > 0);
    LS_EXPECT(tot.loss_sum == sum.loss_sum && tot.correct == sum.correct && tot.samples == sum.samples);
    LS_EXPECT(tot.steps == STEPS && tot.skipped == 0 && sum.skipped == 0 &&
              tot.samples == (int64_t)STEPS * B * p->accum);
    if (p->clip > 0) { /* the last step was clipped (its norm, read with stats, above the limit) */
        printf("%-34s last gradient norm %.9g / %.9g (clipped to %g)\n", "", sa.grad_norm, sb.grad_norm, p->clip);
        LS_EXPECT(sb.grad_norm > p->clip && sa.grad_norm == sb.grad_norm);
    }
    free(a);
    free(b);
    free(c);
}

/* ls_trainer_evaluate over many chunks (of the training batch) runs ahead too: the host waits only
 * for a chunk two back, so the queued work runs dry once, at the end, where evaluating the chunks
 * one call each runs it dry after every chunk (what reading each chunk's loss did); the sums are
 * the same, bit for bit. */
static void check_evaluate(const char *name, const char *data_mode, int bytes) {
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", data_mode, 1) == 0);
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", "auto", 1) == 0);
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer_ex(C, F, B, 1, LS_PRECISION_FP32, 1, 0, &m, &o);
    const ls_dataset *data = bytes ? Db : D;
    enum { COUNT = 9 * B + 5 }; /* ten chunks, the last one partial */
    int64_t idx[COUNT];
    for (int64_t i = 0; i < COUNT; i++) idx[i] = (i * 37) % N;
    double loss = 0, loss1 = 0, one = 0;
    int64_t correct = 0, correct1 = 0, c1 = 0;
    LS_REQUIRE_OK(ls_trainer_step(t, data, idx, B, B, NULL)); /* a step still queued: its totals first */
    LS_REQUIRE_OK(ls_trainer_evaluate(t, data, idx, COUNT, &loss, &correct)); /* buffers taken */
    ls_train_totals tot;
    LS_REQUIRE_OK(ls_trainer_totals(t, &tot, 0));
    LS_EXPECT(tot.steps == 1 && tot.samples == B); /* the step's copies went into the totals */
    unsigned long long d0 = emu_host_drains();
    LS_REQUIRE_OK(ls_trainer_evaluate(t, data, idx, COUNT, &loss, &correct));
    unsigned long long d1 = emu_host_drains();
    for (int64_t lo = 0; lo < COUNT; lo += B) {
        int64_t n = COUNT - lo < B ? COUNT - lo : B;
        LS_REQUIRE_OK(ls_trainer_evaluate(t, data, idx + lo, n, &one, &c1));
        loss1 += one;
        correct1 += c1;
    }
    unsigned long long d2 = emu_host_drains();
    printf("%-34s evaluate, 10 chunks: the device ran dry %llu time(s) in one call, %llu in ten; loss sum %.17g / "
           "%.17g, correct %lld / %lld\n",
           name, d1 - d0, d2 - d1, loss, loss1, (long long)correct, (long long)correct1);
    LS_EXPECT(d1 - d0 == 1 && d2 - d1 == 10);
    LS_EXPECT(loss == loss1 && correct == correct1 && loss > 0 && correct > 0);
    /* a bad index in the fourth chunk, two chunks' copies in flight: an error, and after it the
     * same sums again */
    idx[3 * B + 1] = N;
    LS_EXPECT(ls_trainer_evaluate(t, data, idx, COUNT, &one, &c1) == LS_ERR_INVALID_ARGUMENT);
    idx[3 * B + 1] = ((3 * B + 1) * 37) % N;
    LS_REQUIRE_OK(ls_trainer_evaluate(t, data, idx, COUNT, &one, &c1));
    LS_EXPECT(one == loss && c1 == correct);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

int main(void) {
    /* before the first emulated call: the schedule is read once */
    LS_REQUIRE(setenv("EMU_SCHEDULE", "lazy", 1) == 0);
    LS_REQUIRE_OK(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &C));
    int32_t y[N];
    float *x = mlp_points(N, F, 99, y);
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &D));
    uint8_t *b = malloc(N * F);
    float lut[256];
    LS_REQUIRE(b);
    for (int i = 0; i < N * F; i++) b[i] = (uint8_t)((x[i] + 0.5f) * 256.0f);
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - 0.3f) / 0.35f;
    LS_REQUIRE_OK(ls_dataset_from_bytes(N, F, 10, b, lut, y, &Db));
    free(b);
    free(x);
    const plan plans[] = {
        {"data on the device", 1, "on", 0, 0, 0, LS_PRECISION_FP32},
        {"on the device, 2 micro-batches", 2, "on", 0, 0, 0, LS_PRECISION_FP32},
        {"bytes on the device", 1, "on", 0, 1, 0, LS_PRECISION_FP32},
        {"staged and prefetched", 1, "off", 1, 0, 0, LS_PRECISION_FP32},
        {"staged, prefetched, 2 micro-batches", 2, "off", 1, 0, 0, LS_PRECISION_FP32},
        {"bytes staged and prefetched", 1, "off", 1, 1, 0, LS_PRECISION_FP32},
        {"on the device, clipped to 0.05", 1, "on", 0, 0, 0.05, LS_PRECISION_FP32},
        {"staged, 2 micro-batches, clipped", 2, "off", 1, 0, 0.05, LS_PRECISION_FP32},
        {"fp16, on the device", 1, "on", 0, 0, 0, LS_PRECISION_FP16},
        {"bf16, on the device, 2 micro-batches", 2, "on", 0, 0, 0, LS_PRECISION_BF16},
        {"fp16, staged and prefetched, clipped", 1, "off", 1, 0, 0.05, LS_PRECISION_FP16},
        {"bf16, bytes staged and prefetched", 1, "off", 1, 1, 0, LS_PRECISION_BF16},
    };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) check(&plans[i]);
    check_evaluate("data on the device", "on", 0);
    check_evaluate("bytes on the device", "on", 1);
    check_evaluate("staged", "off", 0);
    check_evaluate("bytes staged", "off", 1);
    ls_dataset_destroy(D);
    ls_dataset_destroy(Db);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
