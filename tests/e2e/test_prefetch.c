/* test_prefetch.c: batches staged through host memory and copied to the device, with the next
 * step's first micro-batch gathered and copied while the current step runs (ls_trainer_prefetch),
 * train exactly as without prefetching: the parameters after the steps are identical bit for bit,
 * and the prefetch statistics say which path ran. Cases: hints that are right (every prefetched
 * batch used), hints that are wrong (none used, the right samples loaded anyway), a data set
 * changed in place between the hint and the step (ls_dataset_changed: the stale batch is not
 * used), gradient accumulation, batches that grow (the buffers are remade under a prefetch),
 * an evaluation between steps, bf16 inputs; again with a data set of bytes (staged as bytes and
 * decoded on the device); and bad input: an index outside the data set, a bad
 * LOCKSTEP_PREFETCH. Args: [cpu|cuda]. On the CPU LOCKSTEP_PREFETCH=on stages through the
 * context's allocator (the same code path, with plain copies); with cuda the data set stays on
 * the host (LOCKSTEP_DATA_ON_DEVICE=off) so every batch is staged in pinned memory and copied on
 * the copy stream (and counted in the allocator's pinned_bytes until the trainer goes). Exits 77
 * there without a usable GPU. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "nn.h"
#include "optim.h"
#include "mlp_run.h"
#include "testutil.h"
#include "train.h"

#define STEPS 14

/* the data set and batch of the current case: small by default; the stress case makes every
 * batch 4 MiB, so a copy that raced the compute stream on a GPU would show */
static int64_t N_SAMPLES = 300, FEATURES = 48, B = 32;
static int BYTES; /* the data set keeps bytes and 256 values (as Fashion-MNIST's does) */

static ls_ctx *C;
static const char *on_mode;  /* LOCKSTEP_PREFETCH for the runs that prefetch */
static const char *ref_data; /* LOCKSTEP_DATA_ON_DEVICE for the reference runs */

enum { HINT_NONE, HINT_NEXT, HINT_WRONG };

typedef struct plan {
    int accum;
    int hint;
    int grow;         /* step counts 5, 32, 9, 32, ...: the buffers grow under a prefetch */
    int change_every; /* > 0: after every such step, change the data set in place */
    int evaluate;     /* an evaluation over 40 samples after every third step */
    ls_precision precision;
} plan;

static ls_dataset *make_data(void) {
    float *x = malloc(sizeof(float) * (size_t)(N_SAMPLES * FEATURES));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)N_SAMPLES);
    LS_REQUIRE(x && y);
    uint64_t r = 12345;
    for (int64_t i = 0; i < N_SAMPLES * FEATURES; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((r >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int64_t i = 0; i < N_SAMPLES; i++) y[i] = (int32_t)((i * 7 + (int)(x[i * FEATURES] * 10 + 5)) % 10);
    ls_dataset *d = NULL;
    if (BYTES) {
        uint8_t *b = malloc((size_t)(N_SAMPLES * FEATURES));
        float lut[256];
        LS_REQUIRE(b);
        for (int64_t i = 0; i < N_SAMPLES * FEATURES; i++) b[i] = (uint8_t)((x[i] + 0.5f) * 256.0f);
        for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - 0.3f) / 0.35f;
        LS_REQUIRE_OK(ls_dataset_from_bytes(N_SAMPLES, FEATURES, 10, b, lut, y, &d));
        free(b);
    } else {
        LS_REQUIRE_OK(ls_dataset_from_arrays(N_SAMPLES, FEATURES, 10, x, y, &d));
    }
    free(x);
    free(y);
    return d;
}

/* The samples of step k: a fixed shuffle, counts from the plan. */
static int64_t step_count(const plan *p, int k) {
    int64_t full = (int64_t)B * p->accum;
    if (p->grow) return k % 2 ? full : 5 + 4 * (k / 2) % (full - 5);
    return k == STEPS - 1 ? full / 2 + 3 : full; /* a short last step */
}

static void step_indices(const plan *p, int k, int64_t *idx, int64_t *count) {
    *count = step_count(p, k);
    for (int64_t i = 0; i < *count; i++) idx[i] = ((int64_t)k * 97 + i * 31) % N_SAMPLES;
}

/* Trains per the plan with LOCKSTEP_PREFETCH=mode; returns the parameters (host floats, one
 * array) and the prefetch statistics. */
static float *run(const plan *p, const char *mode, const char *data_mode, int64_t *hits, int64_t *misses,
                  int64_t *n_out) {
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", mode, 1) == 0);
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", data_mode, 1) == 0);
    ls_dataset *d = make_data();
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer(C, FEATURES, B, p->accum, p->precision, &m, &o);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(B * 4)), *next = malloc(sizeof(int64_t) * (size_t)(B * 4));
    int64_t count, ncount, eval_idx[40];
    LS_REQUIRE(idx && next);
    for (int i = 0; i < 40; i++) eval_idx[i] = (i * 13) % N_SAMPLES;
    for (int k = 0; k < STEPS; k++) {
        step_indices(p, k, idx, &count);
        if (p->hint != HINT_NONE && k + 1 < STEPS) {
            step_indices(p, k + 1, next, &ncount);
            if (p->hint == HINT_WRONG) next[0] = (next[0] + 1) % N_SAMPLES;
            LS_REQUIRE_OK(ls_trainer_prefetch(t, d, next, ncount));
        }
        LS_REQUIRE_OK(ls_trainer_step(t, d, idx, count, count, NULL));
        if (p->change_every && k % p->change_every == 0) {
            for (int64_t i = 0; i < d->n * d->features; i++) {
                if (d->bytes)
                    d->bytes[i] = (uint8_t)(d->bytes[i] * 7 + 1);
                else
                    d->images[i] = d->images[i] * 0.9f + 0.01f;
            }
            ls_dataset_changed(d);
        }
        if (p->evaluate && k % 3 == 0) {
            double loss;
            int64_t correct;
            LS_REQUIRE_OK(ls_trainer_evaluate(t, d, eval_idx, 40, &loss, &correct));
        }
    }
    ls_trainer_prefetch_stats(t, hits, misses);
    free(idx);
    free(next);
    float *out = params_to_host(C, m, n_out);
    /* batches staged from the host to a GPU sit in pinned memory, counted apart (pinned_bytes) and
     * freed with the trainer; the CPU's allocator pins nothing */
    ls_memory_stats ms;
    ls_allocator_stats(C->alloc, &ms);
    if (C->device.type == LS_DEVICE_CPU)
        LS_EXPECT(ms.pinned_bytes == 0);
    else if (!strcmp(data_mode, "off"))
        LS_EXPECT(ms.pinned_bytes > 0);
    ls_trainer_destroy(t);
    ls_allocator_stats(C->alloc, &ms);
    LS_EXPECT(ms.pinned_bytes == 0);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(d);
    return out;
}

static void check(const char *name, plan p, int64_t want_hits, int64_t want_misses) {
    int64_t h0, m0, h1, m1, n0, n1;
    plan ref = p;
    ref.hint = HINT_NONE;
    float *a = run(&ref, "off", ref_data, &h0, &m0, &n0);
    float *b = run(&p, on_mode, "off", &h1, &m1, &n1);
    int same = n0 == n1 && !memcmp(a, b, sizeof(float) * (size_t)n0);
    int64_t differ = 0;
    for (int64_t i = 0; i < n0 && i < n1; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    printf("%-28s parameters %s (%lld of %lld differ); prefetched batches used %lld (want %lld), unused %lld "
           "(want %lld)\n",
           name, same ? "identical" : "DIFFER", (long long)differ, (long long)n0, (long long)h1, (long long)want_hits,
           (long long)m1, (long long)want_misses);
    LS_EXPECT(same);
    LS_EXPECT(h0 == 0 && m0 == 0);
    LS_EXPECT(h1 == want_hits);
    LS_EXPECT(m1 == want_misses);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(dev, "cuda")) {
        char why[256] = "";
        if (ls_device_cuda_count(why, sizeof why) == 0) LS_SKIP("no usable CUDA device: %s", why);
        LS_REQUIRE_OK(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &C));
        on_mode = "auto";
        ref_data = "on"; /* the reference gathers on the device, in compute-stream order: no copy stream */
    } else if (!strcmp(dev, "cpu")) {
        LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
        on_mode = "on";
        ref_data = "off"; /* the reference gathers into host views: no staging */
    } else {
        fprintf(stderr, "device '%s': use cpu or cuda\n", dev);
        return 2;
    }
    printf("device %s: LOCKSTEP_PREFETCH=%s (data on the host) against off (LOCKSTEP_DATA_ON_DEVICE=%s), %d steps "
           "of batch %lld\n",
           dev, on_mode, ref_data, STEPS, (long long)B);
    plan p = {1, HINT_NEXT, 0, 0, 0, LS_PRECISION_FP32};
    check("right hints", p, STEPS - 1, 0);
    p.hint = HINT_WRONG;
    check("wrong hints", p, 0, STEPS - 1);
    p.hint = HINT_NEXT;
    p.change_every = 2; /* steps 0, 2, 4, ...: the batch prefetched during them is stale */
    check("data changed in place", p, STEPS / 2 - 1, STEPS / 2);
    p.change_every = 0;
    p.accum = 2;
    check("accumulation (2 x 32)", p, STEPS - 1, 0);
    p.accum = 1;
    p.grow = 1;
    check("growing batches", p, STEPS - 1, 0);
    p.grow = 0;
    p.evaluate = 1; /* after steps 0, 3, ...: the prefetched batch waits in its slot meanwhile */
    check("evaluation between steps", p, STEPS - 1, 0);
    p.evaluate = 0;
    p.precision = LS_PRECISION_BF16;
    check("bf16", p, STEPS - 1, 0);
    p.precision = LS_PRECISION_FP32;
    N_SAMPLES = 2048;
    FEATURES = 1024;
    B = 1024; /* 4 MiB a batch */
    check("4 MiB batches", p, STEPS - 1, 0);
    BYTES = 1; /* staged as bytes: 1 MiB a batch here */
    check("1 MiB batches of bytes", p, STEPS - 1, 0);
    N_SAMPLES = 300;
    FEATURES = 48;
    B = 32;
    check("bytes, right hints", p, STEPS - 1, 0);
    p.hint = HINT_WRONG;
    check("bytes, wrong hints", p, 0, STEPS - 1);
    p.hint = HINT_NEXT;
    p.grow = 1; /* the staged-bytes buffers and row indices are remade under a prefetch */
    check("bytes, growing batches", p, STEPS - 1, 0);
    p.grow = 0;
    p.change_every = 2;
    check("bytes changed in place", p, STEPS / 2 - 1, STEPS / 2);
    p.change_every = 0;
    p.accum = 2;
    p.evaluate = 1;
    check("bytes, accumulation, eval", p, STEPS - 1, 0);
    p.accum = 1;
    p.evaluate = 0;
    p.precision = LS_PRECISION_BF16;
    check("bytes, bf16", p, STEPS - 1, 0);
    p.precision = LS_PRECISION_FP32;
    BYTES = 0;

    /* bad input */
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", "maybe", 1) == 0);
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = NULL;
    int64_t sizes[3] = {FEATURES, 40, 10};
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 3, sizes, LS_ACT_RELU, 77, &m));
    ls_tensor *pa[4], *ga[4];
    for (int i = 0; i < 4; i++) {
        pa[i] = ls_module_param(m, i);
        ga[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_optimizer_create(C, 4, pa, ga, &oc, &o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = 1;
    LS_EXPECT_ERR(ls_trainer_create(C, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_PREFETCH='maybe': use auto, on or off");
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", on_mode, 1) == 0);
    LS_REQUIRE_OK(ls_trainer_create(C, NULL, m, o, &tc, &t));
    ls_dataset *d = make_data();
    int64_t bad[3] = {0, N_SAMPLES, 1};
    LS_EXPECT_ERR(ls_trainer_prefetch(t, d, bad, 3), LS_ERR_INVALID_ARGUMENT,
                  "prefetch: sample index 300 is outside the data set of 300 samples");
    int64_t good[3] = {0, 1, 2};
    LS_REQUIRE_OK(ls_trainer_prefetch(t, d, good, 3));
    LS_REQUIRE_OK(ls_trainer_step(t, d, good, 3, 3, NULL));
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(d);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
