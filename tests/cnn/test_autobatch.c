/* test_autobatch.c: --batch-size auto. With a trial whose memory is a known function of the batch,
 * the search must double from the start until the first out-of-memory, bisect to the exact
 * largest batch that fits in the cap less 10% headroom, restore the cap, and fail clearly without
 * a cap or when nothing fits. Under mpirun every rank has a different cap and all must agree on
 * the smallest rank's answer. Then a real one: a small ResNet with ls_trainer_trial_step under a
 * cap finds a batch whose training step fits with the headroom while one more sample does not,
 * and leaves the parameters and BatchNorm's running statistics untouched. */
#include <stdlib.h>

#include "autobatch.h"
#include "cnn.h"
#include "kernels/gradcheck.h"

typedef struct fake {
    ls_allocator *a;
    size_t base, per; /* a trial at batch b allocates base + per * b bytes */
} fake;

static ls_status fake_trial(void *user, int64_t b) {
    fake *f = user;
    void *p;
    LS_CHECK(ls_alloc(f->a, f->base + f->per * (size_t)b, "fake activations", &p));
    ls_free(f->a, p);
    return LS_OK;
}

static ls_status big_trial(void *user, int64_t b) {
    fake *f = user;
    void *p;
    LS_CHECK(ls_alloc(f->a, f->base + f->per * (size_t)b, "big-batch activations", &p));
    ls_free(f->a, p);
    return LS_OK;
}

/* fails otherwise than out of memory on one rank, from a batch on */
typedef struct failing {
    fake f;
    int fails;
    int64_t from;
} failing;

static ls_status failing_trial(void *user, int64_t b) {
    failing *x = user;
    if (x->fails && b >= x->from) return ls_error(LS_ERR_IO, "cannot read the trial's data");
    return fake_trial(&x->f, b);
}

/* a "device" allocator over host memory: an allocator whose device is a GPU, without one */
static void *fake_gpu_alloc(void *state, size_t bytes) {
    (void)state;
    return malloc(bytes ? bytes : 1);
}
static void fake_gpu_free(void *state, void *ptr, size_t bytes) {
    (void)state;
    (void)bytes;
    free(ptr);
}
static ls_status fake_gpu_copy(void *state, void *dst, int dst_on_device, const void *src, int src_on_device,
                               size_t n) {
    (void)state;
    (void)dst_on_device;
    (void)src_on_device;
    memmove(dst, src, n);
    return LS_OK;
}
static ls_status fake_gpu_zero(void *state, void *ptr, size_t n) {
    (void)state;
    memset(ptr, 0, n);
    return LS_OK;
}

static void expect_trials(const ls_batch_search_result *r, const int64_t *want, int n) {
    LS_EXPECT(r->trials == n);
    for (int i = 0; i < n && i < r->trials; i++) {
        if (r->tried[i] != want[i])
            fprintf(stderr, "trial %d: %lld, expected %lld\n", i, (long long)r->tried[i], (long long)want[i]);
        LS_EXPECT(r->tried[i] == want[i]);
    }
}

static void check_fake(ls_comm *comm) {
    int rank = comm ? ls_comm_rank(comm) : 0, world = comm ? ls_comm_world(comm) : 1;
    ls_allocator *a;
    LS_REQUIRE_OK(ls_host_allocator_create(1000000, &a));
    fake f = {a, 100000, 7000};
    ls_batch_search_config cfg = {1, 100000, 0.10};
    ls_batch_search_result r;
    if (world == 1) {
        /* limit 900000: b <= (900000 - 100000) / 7000 = 114 */
        LS_REQUIRE_OK(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r));
        LS_EXPECT(r.batch == 114);
        LS_EXPECT(r.cap_bytes == 1000000 && r.limit_bytes == 900000 && r.cap_rank == -1);
        LS_EXPECT(r.peak_bytes == 100000 + 7000 * 114 && r.peak_bytes <= r.limit_bytes);
        int64_t seq[] = {1, 2, 4, 8, 16, 32, 64, 128, 96, 112, 120, 116, 114, 115};
        expect_trials(&r, seq, 14);
        for (int i = 0; i < r.trials; i++) LS_EXPECT(r.fit[i] == (r.tried[i] <= 114));
        ls_memory_stats st;
        ls_allocator_stats(a, &st);
        LS_EXPECT(st.cap_bytes == 1000000); /* restored */
        /* a start above the answer bisects down; a maximum below it stops there */
        cfg.start = 128;
        LS_REQUIRE_OK(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r));
        int64_t down[] = {128, 64, 96, 112, 120, 116, 114, 115};
        expect_trials(&r, down, 8);
        LS_EXPECT(r.batch == 114);
        cfg.start = 1;
        cfg.max = 50;
        LS_REQUIRE_OK(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r));
        int64_t capped[] = {1, 2, 4, 8, 16, 32, 50};
        expect_trials(&r, capped, 7);
        LS_EXPECT(r.batch == 50);
        /* nothing fits / no cap / bad configuration */
        cfg.max = 1000;
        fake huge = {a, 950000, 1};
        LS_EXPECT_ERR(ls_batch_size_search(a, NULL, &cfg, fake_trial, &huge, &r), LS_ERR_OUT_OF_MEMORY,
                      "not even a batch of 1 per rank trains within");
        /* what ran out at batch 1 is said (it said nothing more, also when the model did not fit) */
        LS_EXPECT(strstr(ls_last_error(), "fake activations") != NULL);
        /* and where the cap comes from, as the allocator's own errors say (it was unsaid) */
        ls_allocator_set_cap_from(a, 1000000, "--memory-cap 1000000");
        LS_EXPECT_ERR(ls_batch_size_search(a, NULL, &cfg, fake_trial, &huge, &r), LS_ERR_OUT_OF_MEMORY,
                      "not even a batch of 1 per rank trains within 878.91 KiB (the cap 976.56 KiB (--memory-cap "
                      "1000000) less 10% headroom): ");
        void *model;
        LS_REQUIRE_OK(ls_alloc(a, 950000, "model", &model));
        LS_EXPECT_ERR(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r), LS_ERR_OUT_OF_MEMORY,
                      "more than the 878.91 KiB it trains within (the cap 976.56 KiB (--memory-cap 1000000) less 10% "
                      "headroom)");
        ls_free(a, model);
        ls_memory_stats cs;
        ls_allocator_stats(a, &cs);
        LS_EXPECT(cs.cap_bytes == 1000000 && cs.live_bytes == 0);
        ls_allocator *nocap;
        LS_REQUIRE_OK(ls_host_allocator_create(0, &nocap));
        LS_EXPECT_ERR(ls_batch_size_search(nocap, NULL, &cfg, fake_trial, &f, &r), LS_ERR_INVALID_ARGUMENT,
                      "needs a memory cap");
        ls_allocator_destroy(nocap);
        /* on a GPU the device's cap is --memory-cap or LOCKSTEP_GPU_MEMORY's limit:
         * (LOCKSTEP_MEMORY_LIMIT caps host memory there, so it was the wrong advice) */
        ls_allocator_vtable gpu_like;
        memset(&gpu_like, 0, sizeof gpu_like);
        gpu_like.name = "gpu-like";
        gpu_like.alloc = fake_gpu_alloc;
        gpu_like.free = fake_gpu_free;
        gpu_like.copy = fake_gpu_copy;
        gpu_like.set_zero = fake_gpu_zero;
        LS_REQUIRE_OK(ls_allocator_create(&gpu_like, NULL, (ls_device){LS_DEVICE_CUDA, 0}, 0, &nocap));
        LS_EXPECT_ERR(ls_batch_size_search(nocap, NULL, &cfg, fake_trial, &f, &r), LS_ERR_INVALID_ARGUMENT,
                      "needs a memory cap to fit in: set --memory-cap or LOCKSTEP_GPU_MEMORY=limit:SIZE");
        LS_EXPECT(strstr(ls_last_error(), "LOCKSTEP_MEMORY_LIMIT") == NULL);
        ls_allocator_destroy(nocap);
        /* a host cap above the host's memory (1 PiB): refused before any trial, which could allocate
         * past the host's memory without failing (overcommit) and be killed by the kernel */
        ls_allocator_set_cap_from(a, (size_t)1 << 50, "LOCKSTEP_MEMORY_LIMIT=1024TiB");
        fake petabyte = {a, (size_t)1 << 40, (size_t)1 << 40}; /* never run: its first trial would fail */
        LS_EXPECT_ERR(ls_batch_size_search(a, NULL, &cfg, fake_trial, &petabyte, &r), LS_ERR_INVALID_ARGUMENT,
                      "the batch-size search's cap 1024.00 TiB (LOCKSTEP_MEMORY_LIMIT=1024TiB) is more than this "
                      "host's memory (");
        LS_EXPECT(r.trials == 0);
        ls_allocator_set_cap(a, 1000000);
        cfg.headroom = 1.0;
        LS_EXPECT_ERR(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r), LS_ERR_INVALID_ARGUMENT, "headroom");
    } else {
        /* rank r's cap is 1000000 - 100000 r: every rank must end with the last rank's answer */
        size_t cap = 1000000 - 100000 * (size_t)rank, last = 1000000 - 100000 * (size_t)(world - 1);
        ls_allocator_set_cap(a, last);
        LS_REQUIRE_OK(ls_batch_size_search(a, NULL, &cfg, fake_trial, &f, &r)); /* alone, at the smallest cap */
        int64_t alone = r.batch;
        ls_allocator_set_cap(a, cap);
        LS_REQUIRE_OK(ls_batch_size_search(a, comm, &cfg, fake_trial, &f, &r));
        LS_EXPECT(r.batch == alone);
        LS_EXPECT(alone == (int64_t)((last * 9 / 10 - 100000) / 7000));
        /* the cap reported is the one that bound, the last rank's, on every rank (it was each rank's
         * own, beside peaks over every rank), and this rank's own is back */
        LS_EXPECT(r.cap_bytes == last && r.cap_rank == world - 1 && r.limit_bytes == last * 9 / 10);
        LS_EXPECT(r.peak_bytes <= r.limit_bytes);
        ls_memory_stats st;
        ls_allocator_stats(a, &st);
        LS_EXPECT(st.cap_bytes == cap);
        /* a trial that fails otherwise than out of memory on one rank fails every rank (that rank
         * returned at once and the others waited in the trial's agreement until the communicator's
         * timeout); each rank's cap is back */
        failing x = {f, rank == world - 1, 4};
        cfg.start = 1;
        if (rank == world - 1)
            LS_EXPECT_ERR(ls_batch_size_search(a, comm, &cfg, failing_trial, &x, &r), LS_ERR_IO,
                          "batch-size trial at 4: cannot read the trial's data");
        else
            LS_EXPECT_ERR(ls_batch_size_search(a, comm, &cfg, failing_trial, &x, &r), LS_ERR_IO,
                          "batch-size trial at 4: it failed on another rank (");
        ls_allocator_stats(a, &st);
        LS_EXPECT(st.cap_bytes == cap);
        /* nothing fits: the binding rank names where its cap comes from (the others cannot know) */
        char from[64], want_from[160];
        snprintf(from, sizeof from, "LOCKSTEP_MEMORY_LIMIT=%zu", cap);
        ls_allocator_set_cap_from(a, cap, from);
        fake huge = {a, 2000000, 1};
        if (rank == world - 1)
            snprintf(want_from, sizeof want_from, "(rank %d's, the smallest: LOCKSTEP_MEMORY_LIMIT=%zu) less 10%%",
                     world - 1, last);
        else
            snprintf(want_from, sizeof want_from, "(rank %d's, the smallest) less 10%%", world - 1);
        LS_EXPECT_ERR(ls_batch_size_search(a, comm, &cfg, fake_trial, &huge, &r), LS_ERR_OUT_OF_MEMORY, want_from);
        /* only the last rank fails at batch 1; the others fit it but ran out themselves at larger batches.
         * Their error must not quote their own earlier failure as what ran out at batch 1 (it said
         * "cannot allocate 1.05 MiB for big-batch activations" of the trial at 2, which fit there on
         * another rank's account) */
        fake big = {a, 100000, 500000};
        cfg.start = 16;
        ls_status nothing = ls_batch_size_search(a, comm, &cfg, rank == world - 1 ? fake_trial : big_trial,
                                                 rank == world - 1 ? &huge : &big, &r);
        LS_EXPECT(nothing == LS_ERR_OUT_OF_MEMORY);
        if (rank == world - 1)
            LS_EXPECT(strstr(ls_last_error(), "fake activations") != NULL);
        else {
            if (strstr(ls_last_error(), "big-batch") ||
                !strstr(ls_last_error(), "it ran out of memory on another rank"))
                fprintf(stderr, "rank %d: %s\n", rank, ls_last_error());
            LS_EXPECT(strstr(ls_last_error(), "big-batch") == NULL);
            LS_EXPECT(strstr(ls_last_error(), "it ran out of memory on another rank") != NULL);
        }
        cfg.start = 1;
        /* the last rank's cap above its host's memory fails every rank, before any trial */
        ls_allocator_set_cap(a, rank == world - 1 ? (size_t)1 << 50 : cap);
        LS_EXPECT_ERR(ls_batch_size_search(a, comm, &cfg, fake_trial, &f, &r), LS_ERR_INVALID_ARGUMENT,
                      rank == world - 1 ? "is more than this host's memory" : "the memory of another rank's host");
        LS_EXPECT(r.trials == 0);
        /* a rank without a cap fails every rank, naming it (it left the others in an all-reduce) */
        ls_allocator_set_cap(a, rank == world - 1 ? 0 : cap);
        char want[64];
        snprintf(want, sizeof want, rank == world - 1 ? "needs a memory cap" : "(rank %d has none)", world - 1);
        LS_EXPECT_ERR(ls_batch_size_search(a, comm, &cfg, fake_trial, &f, &r), LS_ERR_INVALID_ARGUMENT, want);
    }
    ls_allocator_destroy(a);
}

/* ---- a real model ---- */
static void check_resnet(void) {
    ls_allocator *host;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &host));
    ls_ctx *ctx;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), host, &ctx));
    ls_resnet_config rc = {LS_F32, LS_F32, 1, 12, 12, 2, {4, 8}, 1, 3, 5, NULL, 0};
    ls_module *m;
    LS_REQUIRE_OK(ls_resnet_create(ctx, &rc, &m));
    int64_t n = 400;
    float *img = malloc(sizeof(float) * (size_t)(n * 144));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
    ls_rng r;
    ls_rng_init(&r, 3);
    for (int64_t i = 0; i < n * 144; i++) img[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < n; i++) lab[i] = (int32_t)(i % 3);
    ls_dataset *d;
    LS_REQUIRE_OK(ls_dataset_from_arrays(n, 144, 3, img, lab, &d));
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 1;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0.1f;
    ls_trainer_trial trial = {ctx, NULL, m, &oc, &tc, d, NULL};
    /* parameters and buffers before */
    int np = ls_module_num_params(m), nb = ls_cnn_num_buffers(m);
    LS_EXPECT(nb == 2 * 6); /* stem BN, 2 in each block, the projection's */
    size_t total = 0;
    for (int i = 0; i < np; i++) total += ls_tensor_nbytes(ls_module_param(m, i));
    for (int i = 0; i < nb; i++) total += ls_tensor_nbytes(ls_cnn_buffer(m, i, NULL, 0));
    char *before = malloc(total), *after = malloc(total);
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        memcpy(before + off, ls_module_param(m, i)->data, ls_tensor_nbytes(ls_module_param(m, i)));
        off += ls_tensor_nbytes(ls_module_param(m, i));
    }
    for (int i = 0; i < nb; i++) {
        ls_tensor *b = ls_cnn_buffer(m, i, NULL, 0);
        memcpy(before + off, b->data, ls_tensor_nbytes(b));
        off += ls_tensor_nbytes(b);
    }
    /* the cap: what a batch of 60 needs (and 1000 bytes) over 0.9, so that 60 fits but not 61 */
    ls_allocator_reset_peak(host);
    LS_REQUIRE_OK(ls_trainer_trial_step(&trial, 60));
    ls_memory_stats st;
    ls_allocator_stats(host, &st);
    size_t cap = (size_t)ceil((double)(st.peak_bytes + 1000) / 0.9);
    ls_allocator_set_cap(host, cap);
    ls_batch_search_config cfg = {4, n, 0.10};
    ls_batch_search_result res;
    LS_REQUIRE_OK(ls_batch_size_search(host, NULL, &cfg, ls_trainer_trial_step, &trial, &res));
    printf("resnet: cap %zu, batch %lld, peak %zu, %d trials\n", cap, (long long)res.batch, res.peak_bytes, res.trials);
    LS_EXPECT(res.batch == 60);
    LS_EXPECT(res.peak_bytes <= res.limit_bytes && res.limit_bytes <= cap - cap / 10);
    /* doubling from 4 until the first failure, then bisection to adjacent fit/failure */
    int64_t b = 4;
    int i = 0;
    for (; i < res.trials && res.fit[i]; i++, b *= 2) LS_EXPECT(res.tried[i] == b);
    LS_EXPECT(i < res.trials && res.tried[i] == b && !res.fit[i]);
    int64_t fail_above = res.batch + 1, seen_fail = 0;
    for (int k = 0; k < res.trials; k++) {
        if (res.tried[k] == fail_above) seen_fail = !res.fit[k];
        LS_EXPECT(res.fit[k] == (res.tried[k] <= res.batch));
    }
    LS_EXPECT(seen_fail);
    /* the answer trains: a real step under the cap keeps the headroom; one more sample does not */
    ls_allocator_set_cap(host, res.limit_bytes);
    ls_allocator_reset_peak(host);
    LS_EXPECT(ls_trainer_trial_step(&trial, res.batch) == LS_OK);
    LS_EXPECT_ERR(ls_trainer_trial_step(&trial, res.batch + 1), LS_ERR_OUT_OF_MEMORY, "out of memory on cpu");
    ls_allocator_set_cap(host, cap);
    /* parameters and running statistics untouched */
    off = 0;
    for (int k = 0; k < np; k++) {
        memcpy(after + off, ls_module_param(m, k)->data, ls_tensor_nbytes(ls_module_param(m, k)));
        off += ls_tensor_nbytes(ls_module_param(m, k));
    }
    for (int k = 0; k < nb; k++) {
        ls_tensor *bt = ls_cnn_buffer(m, k, NULL, 0);
        memcpy(after + off, bt->data, ls_tensor_nbytes(bt));
        off += ls_tensor_nbytes(bt);
    }
    LS_EXPECT(memcmp(before, after, total) == 0);
    /* a sharded AdamW (--shard-optimizer): each rank's trial holds its share of the state only, as
     * its run will: the peak is the whole state's trial's less the other rank's moments, exactly */
    ls_allocator_set_cap(host, 0);
    ls_optim_config ad = ls_optim_defaults(LS_OPTIM_ADAMW);
    trial.optim = &ad;
    ls_allocator_reset_peak(host);
    LS_REQUIRE_OK(ls_trainer_trial_step(&trial, 20));
    ls_allocator_stats(host, &st);
    size_t whole = st.peak_bytes;
    for (int rk = 0; rk < 2; rk++) {
        ls_optim_config sh = ad;
        sh.shard_rank = rk;
        sh.shard_world = 2;
        ls_tensor *pp[64], *gg[64];
        LS_REQUIRE(np <= 64);
        for (int k = 0; k < np; k++) pp[k] = ls_module_param(m, k), gg[k] = ls_module_grad(m, k);
        ls_optimizer *o;
        LS_REQUIRE_OK(ls_optimizer_create(ctx, np, pp, gg, &sh, &o));
        size_t others = 0;
        for (int k = 0; k < np; k++)
            if (ls_optimizer_owner(o, k) != rk) others += 2 * ls_tensor_nbytes(pp[k]);
        ls_optimizer_destroy(o);
        trial.optim = &sh;
        ls_allocator_reset_peak(host);
        LS_REQUIRE_OK(ls_trainer_trial_step(&trial, 20));
        ls_allocator_stats(host, &st);
        printf("resnet, AdamW sharded over 2, rank %d: trial peak %zu, unsharded %zu, the other rank's state %zu\n", rk,
               st.peak_bytes, whole, others);
        LS_EXPECT(others > 0 && st.peak_bytes == whole - others);
    }
    trial.optim = &oc;
    /* room for the model but not for its optimizer's state: no batch fits, and the error says so
     * rather than the program's hint for a step (bf16 or checkpointing would not have helped),
     * which is the allocator's again afterwards */
    ls_optim_config mom = ls_optim_defaults(LS_OPTIM_SGD); /* momentum: a state tensor per parameter */
    trial.optim = &mom;
    ls_allocator_stats(host, &st);
    size_t params = 0;
    for (int k = 0; k < np; k++) params += ls_tensor_nbytes(ls_module_param(m, k));
    ls_allocator_set_cap(host, st.live_bytes + params / 2);
    ls_allocator_set_oom_hint(host, "To fit, try --precision bf16");
    LS_EXPECT_ERR(ls_trainer_trial_step(&trial, 1), LS_ERR_OUT_OF_MEMORY, "optimizer state");
    LS_EXPECT(strstr(ls_last_error(), "--precision bf16") == NULL);
    LS_EXPECT(strstr(ls_last_error(), "whatever the batch") != NULL);
    char hint[128];
    ls_allocator_get_oom_hint(host, hint, sizeof hint);
    LS_EXPECT(strcmp(hint, "To fit, try --precision bf16") == 0);
    ls_allocator_set_oom_hint(host, NULL);
    ls_allocator_set_cap(host, 0);
    trial.optim = &oc;
    free(before);
    free(after);
    free(img);
    free(lab);
    ls_dataset_destroy(d);
    ls_module_destroy(m);
    ls_ctx_destroy(ctx);
    ls_allocator_destroy(host);
}

int main(void) {
    ls_ctx *ctx;
    ls_comm *comm;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &comm));
    check_fake(ls_comm_world(comm) > 1 ? comm : NULL);
    if (ls_comm_world(comm) == 1) check_resnet();
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
