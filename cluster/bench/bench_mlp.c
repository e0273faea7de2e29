/* bench_mlp.c: lockstep's side of the MLP benchmarks: trains the 784-512-256-10 MLP on
 * Fashion-MNIST with the real training step (ls_trainer_step: gather, forward, loss, backward,
 * SGD momentum; under mpirun also the bucketed gradient all-reduce) and prints global samples/s
 * and achieved GFLOP/s per rank, both of the samples stepped (an epoch's last step may be short),
 * and the time per step; with --sgemm it instead times OpenBLAS sgemm alone on the same
 * eight GEMM shapes a step runs, the ceiling for the achieved rate. --batch-size is per rank;
 * --ema DECAY also updates an EMA of the weights after every step; --dropout P puts a Dropout
 * after each hidden activation (masks keyed to step and sample); --freeze N fine-tunes: the first N
 * layers frozen (ls_module_set_requires_grad, left out of the optimizer; with --freeze-optim only
 * left out of the optimizer, their gradients still computed and all-reduced, the A of an A/B);
 * --checkpoint-activations[=N] recomputes the activations in backward (ls_checkpoint_sequential,
 * N segments; with --freeze, a segment wholly frozen is not recomputed). Not a test: compare_mlp.py,
 * compare_ddp.py and compare_ema.py run it beside PyTorch. */
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "data.h"
#include "ema.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

#define BENCH_PROG "bench_mlp"
#include "bench_args.h"

/* --batch-size's bound while parsing, far beyond a real per-rank batch (--sgemm's operands at it
 * are 5 GiB; a failed allocation is reported); training further needs the batch within the rank's
 * share of the training set, checked once the set is loaded. */
#define MAX_BATCH (INT64_C(1) << 20)

static void usage(FILE *f) {
    fprintf(f, "usage: bench_mlp [options]\n"
               "  --batch-size N         samples per rank per step (default 128; at most the rank's share of the\n"
               "                         60000 training samples)\n"
               "  --steps N              timed steps, after 20 untimed (default 400)\n"
               "  --data-dir DIR         Fashion-MNIST (default $LOCKSTEP_FASHION_DIR, else\n"
               "                         /usr/share/datasets/fashion-mnist)\n"
               "  --device cpu|cuda[:N]  default $LOCKSTEP_DEVICE, else a GPU if there is one\n"
               "  --sgemm                time OpenBLAS sgemm alone on a step's GEMM shapes (no training)\n"
               "  --ema DECAY            also update an exponential moving average of the weights after\n"
               "                         every step (ls_ema_update)\n"
               "  --dropout P            a Dropout(P) after each hidden activation (ls_mlp_create_dropout)\n"
               "  --freeze N             fine-tuning: the first N (0 to 2) of the 3 layers frozen (no gradient\n"
               "                         computed or all-reduced: ls_module_set_requires_grad; default 0)\n"
               "  --freeze-optim         with --freeze: the frozen layers only left out of the optimizer, their\n"
               "                         gradients computed and all-reduced as before\n"
               "  --checkpoint-activations[=N]  recompute activations in backward: the layers (5, 7 with\n"
               "                         --dropout) split into N segments (default 2) whose inner activations\n"
               "                         are not kept, but the last's (ls_checkpoint_sequential)\n"
               "  -h, --help             this text\n");
}

/* GEMM FLOPs of one training step: forward of every layer, weight gradients of every layer, and
 * input gradients of every layer but the first; with the first skip layers needing no gradient,
 * their forward alone, and no input gradient of the first layer that trains. */
static double step_flops(const int64_t *s, int n, int64_t B, int skip) {
    double f = 0;
    for (int i = 0; i + 1 < n; i++) {
        double layer = 2.0 * (double)B * (double)s[i] * (double)s[i + 1];
        f += layer * (i < skip ? 1 : i == skip ? 2 : 3);
    }
    return f;
}

/* Every layer's GEMMs on the same three buffers, each sized by the largest shape it holds: a, a
 * layer's input or input gradient (B x in); c, its output gradient (B x out); w, its weight or
 * weight gradient (out x in). (c was once maxd x maxd, overrun from batch 1201.) */
static int run_sgemm(const int64_t *s, int n, int64_t B, int steps) {
    int64_t maxin = 0, maxout = 0;
    for (int i = 0; i + 1 < n; i++) {
        maxin = s[i] > maxin ? s[i] : maxin;
        maxout = s[i + 1] > maxout ? s[i + 1] : maxout;
    }
    float *a = calloc((size_t)(B * maxin), 4), *w = calloc((size_t)(maxout * maxin), 4),
          *c = calloc((size_t)(B * maxout), 4);
    if (!a || !w || !c) {
        fprintf(stderr, "bench_mlp: --sgemm: cannot allocate the operands of batch %lld (%.1f MiB)\n", (long long)B,
                (double)(B * maxin + maxout * maxin + B * maxout) * 4 / 1048576.0);
        free(a);
        free(w);
        free(c);
        return 1;
    }
    for (int64_t i = 0; i < B * maxin; i++) a[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < maxout * maxin; i++) w[i] = (float)(i % 5) * 0.1f;
    double t0 = 0;
    for (int it = -20; it < steps; it++) {
        if (it == 0) t0 = bench_now_s();
        for (int i = 0; i + 1 < n; i++) {
            int in = (int)s[i], out = (int)s[i + 1], b = (int)B;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, out, in, 1, a, in, w, in, 1, c, out);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, b, 1, c, out, a, in, 1, w, in);
            if (i > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, in, out, 1, c, out, w, in, 0, a, in);
        }
    }
    double dt = bench_now_s() - t0;
    printf("sgemm GFLOP/s %.2f step_ms %.3f\n", step_flops(s, n, B, 0) * steps / dt / 1e9, 1000 * dt / steps);
    free(a);
    free(w);
    free(c);
    return 0;
}

int main(int argc, char **argv) {
    int64_t B = 128;
    int steps = 400, sgemm = 0, freeze = 0, freeze_optim = 0, segments = 0;
    double ema_decay = -1, dropout = 0;
    const char *dir = NULL, *device = NULL;
    static const struct option opts[] = {{"batch-size", required_argument, 0, 'b'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"data-dir", required_argument, 0, 'd'},
                                         {"sgemm", no_argument, 0, 'g'},
                                         {"device", required_argument, 0, 'D'},
                                         {"ema", required_argument, 0, 'e'},
                                         {"dropout", required_argument, 0, 'p'},
                                         {"freeze", required_argument, 0, 'f'},
                                         {"freeze-optim", no_argument, 0, 'F'},
                                         {"checkpoint-activations", optional_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'b')
            B = bench_int("--batch-size", optarg, 1, MAX_BATCH);
        else if (c == 'n')
            steps = (int)bench_int("--steps", optarg, 1, BENCH_MAX_COUNT);
        else if (c == 'd')
            dir = bench_str("--data-dir", optarg);
        else if (c == 'g')
            sgemm = 1;
        else if (c == 'D')
            device = bench_str("--device", optarg);
        else if (c == 'e')
            ema_decay = bench_num("--ema", optarg, 0, 0, 0.999999);
        else if (c == 'p')
            dropout = bench_num("--dropout", optarg, 0, 0, 0.999999);
        else if (c == 'f')
            freeze = (int)bench_int("--freeze", optarg, 0, 2);
        else if (c == 'F')
            freeze_optim = 1;
        else if (c == 'c')
            segments = optarg ? (int)bench_int("--checkpoint-activations", optarg, 1, 7) : 2;
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    int64_t sizes[4] = {784, 512, 256, 10};
    if (sgemm) return run_sgemm(sizes, 4, B, steps);
    ls_ctx *ctx;
    ls_comm *comm;
    ls_dataset *data;
    ls_module *model;
    ls_optimizer *opt;
    ls_trainer *tr;
    ls_sampler *smp;
    ls_rank_info ri;
    ls_device dev;
    BENCH_CHECK("rank discovery", ls_rank_discover(&ri));
    BENCH_CHECK_FLAG("--device", device, "device", ls_device_select(device, ri.local_rank, &dev));
    BENCH_CHECK("context", ls_ctx_create(dev, NULL, &ctx));
    BENCH_CHECK("communicator", ls_comm_create(ctx, NULL, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    BENCH_CHECK("data", ls_fashion_mnist_load(dir, 1, 0, &data));
    BENCH_CHECK("sampler", ls_sampler_create(data->n, rank, world, 42, 1, LS_SAMPLER_PAD, &smp));
    bench_batch_fits("--batch-size", B, ls_sampler_num_samples(smp), "the training samples per rank", comm);
    BENCH_CHECK("model", ls_mlp_create_dropout(ctx, LS_F32, 4, sizes, LS_ACT_RELU, (float)dropout, 42, &model));
    ls_tensor *p[6], *g[6];
    const int nf = 2 * freeze; /* the frozen layers' weights and biases, first in the list */
    for (int i = nf; i < 6; i++) {
        p[i - nf] = ls_module_param(model, i);
        g[i - nf] = ls_module_grad(model, i);
    }
    for (int i = 0; i < nf && !freeze_optim; i++) BENCH_CHECK("--freeze", ls_module_set_requires_grad(model, i, 0));
    if (segments) BENCH_CHECK("--checkpoint-activations", ls_checkpoint_sequential(model, segments, &model));
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.05f;
    BENCH_CHECK("optimizer", ls_optimizer_create(ctx, 6 - nf, p, g, &oc, &opt));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    BENCH_CHECK("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &tr));
    ls_ema *ema = NULL;
    if (ema_decay >= 0) BENCH_CHECK("--ema", ls_ema_create(ctx, model, ema_decay, 0, &ema));
    int64_t per_epoch = ls_sampler_steps(smp, B), *idx = malloc(sizeof(int64_t) * (size_t)B);
    int64_t *nidx = malloc(sizeof(int64_t) * (size_t)B), count, global, ncount, nglobal;
    /* samples stepped in the timed steps, over all ranks and on this rank: an epoch's last step is
     * smaller when world * B does not divide the set (PAD mode), so steps * B * world overstates */
    int64_t stepped_global = 0, stepped_local = 0;
    double t0 = 0;
    ls_step_stats st;
    BENCH_CHECK("batch", ls_sampler_batch(smp, 0, B, idx, &count, &global));
    for (int it = -20, j = 0; it < steps; it++, j++) {
        if (it == 0) {
            BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
            BENCH_CHECK("barrier", ls_comm_barrier(comm));
            t0 = bench_now_s();
        }
        if (j >= per_epoch) {
            j = 0;
            BENCH_CHECK("epoch", ls_sampler_set_epoch(smp, ls_sampler_epoch(smp) + 1));
            BENCH_CHECK("batch", ls_sampler_batch(smp, 0, B, idx, &count, &global));
        }
        /* the next step's samples (within the epoch), gathered and copied while this one runs */
        int more = j + 1 < per_epoch;
        if (more) {
            BENCH_CHECK("batch", ls_sampler_batch(smp, j + 1, B, nidx, &ncount, &nglobal));
            BENCH_CHECK("prefetch", ls_trainer_prefetch(tr, data, nidx, ncount));
        }
        /* the loss read only at the last step, as torch_mlp.py's loss.item() after its loop: a step
         * given no stats does not wait for the device (train.h) */
        BENCH_CHECK("step", ls_trainer_step(tr, data, idx, count, global, it == steps - 1 ? &st : NULL));
        if (ema) BENCH_CHECK("--ema", ls_ema_update(ema));
        if (it >= 0) {
            stepped_global += global;
            stepped_local += count;
        }
        if (more) {
            int64_t *tmp = idx;
            idx = nidx;
            nidx = tmp;
            count = ncount;
            global = nglobal;
        }
    }
    BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
    BENCH_CHECK("barrier", ls_comm_barrier(comm));
    double dt = bench_now_s() - t0;
    int64_t pf_hits = 0, pf_misses = 0;
    ls_trainer_prefetch_stats(tr, &pf_hits, &pf_misses);
    /* GFLOP/s of rank 0: the FLOPs per sample times the samples it stepped */
    if (rank == 0)
        printf("lockstep ranks %d samples/s %.1f step_ms %.3f GFLOP/s %.2f loss %.4f prefetched %lld\n", world,
               (double)stepped_global / dt, 1000 * dt / steps,
               step_flops(sizes, 4, 1, freeze_optim ? 0 : freeze) * (double)stepped_local / dt / 1e9,
               st.loss_sum / (double)st.samples, (long long)pf_hits);
    free(idx);
    free(nidx);
    ls_sampler_destroy(smp);
    ls_trainer_destroy(tr);
    ls_ema_destroy(ema);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_dataset_destroy(data);
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return 0;
}
