/* quickstart.c: a whole data-parallel training program on lockstep's C API, the one
 * docs/guide.md walks through. It makes a data set in memory (4 classes of points in 16
 * dimensions, the same on every rank), trains a 16-64-64-4 MLP with AdamW, evaluates it on a
 * held-out set after each epoch, and saves a checkpoint after each epoch; run again with the same
 * --checkpoint-dir, it continues from the last one. One process, or several under lockstep-run
 * (one per GPU, else on the CPU). Built in-tree and, by test_e2e_install, against an installed
 * lockstep with find_package(lockstep).
 *
 *   quickstart [--epochs N] [--batch-size N (per rank)] [--checkpoint-dir DIR]
 *   lockstep-run -n 2 quickstart --checkpoint-dir ck */
#include <lockstep/checkpoint.h>
#include <lockstep/train.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every call that can fail returns an ls_status; ls_last_error() says what went wrong. */
#define TRY(what, call)                                                                                                \
    do {                                                                                                               \
        if ((call) != LS_OK) {                                                                                         \
            fprintf(stderr, "quickstart: %s: %s\n", what, ls_last_error());                                            \
            rc = 1;                                                                                                    \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

enum { FEATURES = 16, CLASSES = 4 };

/* n points: class c is a Gaussian blob around its own centre. Deterministic, so every rank builds
 * the same set (a rank would read the same files in a real program). */
static void make_points(int64_t n, uint64_t seed, float *x, int32_t *y) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
#define NEXT_UNIFORM() ((double)((s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 11) * 0x1.0p-53)
    for (int64_t i = 0; i < n; i++) {
        int32_t c = (int32_t)(i % CLASSES);
        y[i] = c;
        for (int f = 0; f < FEATURES; f++) {
            double u1 = NEXT_UNIFORM() + 1e-12, u2 = NEXT_UNIFORM();
            double noise = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
            double centre = ((f * 7 + c * 5) % CLASSES == 0) ? 1.5 : (f % CLASSES == c ? -1.0 : 0.0);
            x[i * FEATURES + f] = (float)(centre + noise);
        }
    }
#undef NEXT_UNIFORM
}

/* A whole number in [lo, hi], else -1. */
static int64_t parse_count(const char *s, int64_t lo, int64_t hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || end == s || *end || v < lo || v > hi ? -1 : (int64_t)v;
}

int main(int argc, char **argv) {
    const int64_t n_train = 8192, n_test = 2048;
    int64_t epochs = 4, batch = 64;
    const char *ckpt_dir = "quickstart-checkpoints";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--epochs"))
            epochs = parse_count(argv[++i], 1, 1000000);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch-size"))
            batch = parse_count(argv[++i], 1, n_train);
        else if (i + 1 < argc && !strcmp(argv[i], "--checkpoint-dir") && argv[i + 1][0])
            ckpt_dir = argv[++i];
        else {
            const char *a = argv[i];
            int help = !strcmp(a, "--help") || !strcmp(a, "-h");
            int known = !strcmp(a, "--epochs") || !strcmp(a, "--batch-size") || !strcmp(a, "--checkpoint-dir");
            if (!help) /* what was wrong, then the usage */
                fprintf(stderr, "quickstart: %s '%s'\n",
                        !known         ? "unknown argument"
                        : i + 1 < argc ? "an empty value for"
                                       : "no value for",
                        a);
            fprintf(help ? stdout : stderr, "usage: quickstart [--epochs N] [--batch-size N] [--checkpoint-dir DIR]\n"
                                            "(defaults: 4 epochs, batch 64 per rank, quickstart-checkpoints)\n");
            return help ? 0 : 2;
        }
        if (epochs < 0 || batch < 0) {
            fprintf(stderr, "quickstart: %s needs a whole number from 1 to %lld\n", argv[i - 1],
                    (long long)(epochs < 0 ? 1000000 : n_train));
            return 2;
        }
    }
    int rc = 0;
    ls_ctx *ctx = NULL;
    ls_comm *comm = NULL;
    ls_dataset *train = NULL, *test = NULL;
    ls_sampler *sampler = NULL;
    ls_module *model = NULL;
    ls_optimizer *opt = NULL;
    ls_trainer *trainer = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    int64_t *idx = NULL, *test_idx = NULL;
    int lock = -1;

    /* 1. Which rank am I, which device is mine (a GPU per local rank, else the CPU), and the
     *    communicator (NCCL on GPUs, MPI on CPUs, a trivial one for one process run directly). */
    ls_rank_info ri;
    ls_device dev;
    TRY("rank discovery", ls_rank_discover(&ri));
    TRY("device", ls_device_select(NULL, ri.local_rank, &dev));
    TRY("context", ls_ctx_create(dev, NULL, &ctx));
    TRY("communicator", ls_comm_create(ctx, NULL, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);

    /* 2. Data: the whole set on every rank; the sampler picks this rank's share of each step. */
    x = malloc((size_t)n_train * FEATURES * sizeof *x);
    y = malloc((size_t)n_train * sizeof *y);
    if (!x || !y) TRY("data", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the points"));
    make_points(n_train, 1, x, y);
    TRY("training set", ls_dataset_from_arrays(n_train, FEATURES, CLASSES, x, y, &train));
    make_points(n_test, 2, x, y);
    TRY("test set", ls_dataset_from_arrays(n_test, FEATURES, CLASSES, x, y, &test));
    /*    Every rank must run the same epochs on the same data: one given another --epochs would
     *    wait in a collective the others never reach. (The trainer checks its own settings.) */
    ls_setting same[2] = {ls_setting_num("--epochs", (double)epochs),
                          ls_setting_num("the training set's size", n_train)};
    TRY("options", ls_ddp_check_settings(comm, 2, same));
    TRY("sampler", ls_sampler_create(n_train, rank, world, 42, 1, LS_SAMPLER_PAD, &sampler));
    int64_t steps = ls_sampler_steps(sampler, batch);

    /* 3. Model and optimizer. Every rank initializes its own replica; the trainer broadcasts
     *    rank 0's parameters so they start equal. */
    int64_t sizes[] = {FEATURES, 64, 64, CLASSES};
    TRY("model", ls_mlp_create(ctx, LS_F32, 4, sizes, LS_ACT_RELU, 42, &model));
    enum { MAX_PARAMS = 64 };
    int np = ls_module_num_params(model);
    if (np > MAX_PARAMS) TRY("model", ls_error(LS_ERR_INVALID_ARGUMENT, "more than %d parameter tensors", MAX_PARAMS));
    ls_tensor *params[MAX_PARAMS], *grads[MAX_PARAMS];
    for (int i = 0; i < np; i++) {
        params[i] = ls_module_param(model, i);
        grads[i] = ls_module_grad(model, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_ADAMW); /* lr 1e-3, weight decay 0.01 */
    TRY("optimizer", ls_optimizer_create(ctx, np, params, grads, &oc, &opt));

    /* 4. The trainer: forward, backward with the gradients all-reduced in buckets while backward
     *    runs, the optimizer step. batch_per_rank is per rank, as in DDP. */
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = batch;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr; /* constant: no warmup, no decay */
    tc.totals = 1;         /* sums of the loss over the steps, read once per epoch */
    TRY("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &trainer));

    /* 5. Resume: the newest checkpoint in ckpt_dir that verifies, if there is one. First rank 0
     *    holds ckpt_dir for the run (a second run saving there is refused), every rank told. */
    ls_status held = rank == 0 ? ls_ckpt_prepare_dir(ckpt_dir) : LS_OK;
    if (rank == 0 && held == LS_OK) held = ls_ckpt_lock_dir(ckpt_dir, &lock);
    TRY("checkpoint directory", ls_comm_agree(comm, held));
    ls_ckpt_state state;
    int found = 0;
    char path[LS_CKPT_PATH_MAX];
    TRY("resume", ls_ckpt_load(comm, ctx, ckpt_dir, "auto", model, opt, &state, &found, path, sizeof path));
    int64_t first_epoch = 0;
    if (found) {
        ls_trainer_set_num_steps(trainer, state.step);
        first_epoch = state.epoch; /* saved at the end of an epoch: the next one starts afresh */
        if (rank == 0) printf("quickstart: resumed from %s (epoch %lld done)\n", path, (long long)first_epoch);
        if (rank == 0 && first_epoch >= epochs)
            printf("quickstart: nothing to train: --epochs %lld are done (more epochs, or another "
                   "--checkpoint-dir)\n",
                   (long long)epochs);
    }
    if (rank == 0)
        printf("quickstart: %d rank%s on %s, %lld parameters, %lld steps per epoch\n", world, world == 1 ? "" : "s",
               ls_device_str(dev, path, sizeof path), (long long)ls_module_num_elements(model), (long long)steps);

    /* This rank's share of the test set, for evaluation. */
    idx = malloc((size_t)batch * sizeof *idx);
    test_idx = malloc((size_t)n_test * sizeof *test_idx);
    if (!idx || !test_idx) TRY("indices", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for indices"));
    int64_t n_mine = 0;
    for (int64_t i = rank; i < n_test; i += world) test_idx[n_mine++] = i;

    for (int64_t epoch = first_epoch; epoch < epochs; epoch++) {
        TRY("sampler", ls_sampler_set_epoch(sampler, epoch)); /* a new shuffle, the same on every rank */
        for (int64_t j = 0; j < steps; j++) {
            int64_t count, global;
            TRY("batch", ls_sampler_batch(sampler, j, batch, idx, &count, &global));
            /* no stats: on a GPU the step returns once its work is queued, the host runs ahead */
            TRY("training step", ls_trainer_step(trainer, train, idx, count, global, NULL));
        }
        ls_train_totals tot; /* the epoch's sums on this rank (waits for the device once) */
        TRY("training loss", ls_trainer_totals(trainer, &tot, 1));
        /* Sums over the ranks: training loss, test loss, correct test predictions, samples. */
        double sums[5] = {tot.loss_sum, (double)tot.samples, 0, 0, (double)n_mine};
        int64_t correct = 0;
        TRY("evaluation", ls_trainer_evaluate(trainer, test, test_idx, n_mine, &sums[2], &correct));
        sums[3] = (double)correct;
        TRY("all-reduce", ls_comm_allreduce_host(comm, sums, 5, LS_F64, LS_REDUCE_SUM));
        if (rank == 0)
            printf("epoch %lld  train loss %.6f  test loss %.6f  test accuracy %.2f%%\n", (long long)epoch + 1,
                   sums[0] / sums[1], sums[2] / sums[4], 100 * sums[3] / sums[4]);

        /* 6. A checkpoint after each epoch: written to step-N.tmp, fsynced, renamed; rank 0 writes. */
        memset(&state, 0, sizeof state);
        state.step = ls_trainer_num_steps(trainer);
        state.epoch = epoch + 1;
        state.steps_per_epoch = steps;
        state.world_size = world;
        state.batch_per_rank = batch;
        state.accum_steps = 1;
        state.seed = 42;
        state.lr = tc.lr;
        state.optim = oc;
        /* the lock kept: taken again where the directory was removed while the run went on */
        TRY("checkpoint", ls_comm_agree(comm, rank == 0 ? ls_ckpt_relock_dir(ckpt_dir, &lock) : LS_OK));
        TRY("checkpoint", ls_ckpt_save(comm, ctx, ckpt_dir, 2, model, opt, &state, path, sizeof path));
        if (rank == 0) printf("quickstart: saved %s\n", path);
        fflush(stdout);
    }

done:
    if (rc && comm && ls_comm_world(comm) > 1) ls_comm_abort(comm, "quickstart failed on this rank");
    free(idx);
    free(test_idx);
    free(x);
    free(y);
    ls_trainer_destroy(trainer);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_sampler_destroy(sampler);
    ls_dataset_destroy(train);
    ls_dataset_destroy(test);
    ls_ckpt_unlock_dir(lock);
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return rc;
}
