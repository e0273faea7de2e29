/* bench_resnet.c: lockstep's side of the ResNet benchmark: trains examples/fashion_resnet's model
 * (torch_resnet.py builds the same one) on Fashion-MNIST with the real training step
 * (ls_trainer_step: gather, forward, loss, backward, SGD momentum; --precision bf16|fp16 as
 * fashion_resnet's: f16/bf16 activations, f32 masters, the trainer's mixed-precision step) and
 * prints samples/s and the peak memory. On the CPU by default (compare_resnet.py compares CPU
 * threads); --device cuda runs it on a GPU (tests/gpu/device-check.sh compares it with
 * torch_resnet.py --device cuda). Data-parallel when started under mpirun (each rank a share of the
 * global batch). Not a test. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp.h"
#include "cnn.h"
#include "comm.h"
#include "data.h"
#include "device.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

#include "example_cli.h"

#define BENCH_PROG "bench_resnet"
#include "bench_args.h"

/* Bounds while parsing, far beyond real runs: the global batch (each rank's share of it must also
 * fit in its share of the training set, checked once the set is loaded) and blocks per stage. */
#define MAX_BATCH (INT64_C(1) << 20)
#define MAX_BLOCKS 1024

static void usage(FILE *f) {
    fprintf(f, "usage: bench_resnet [--batch-size N (global)] [--steps N] [--warmup N] [--widths A,B,C] [--blocks N]\n"
               "                    (--widths default 32,64,128 and --blocks 1: fashion_resnet's defaults)\n"
               "                    [--precision fp32|bf16|fp16] [--checkpoint-activations SEGMENTS]\n"
               "                    [--device cpu|cuda[:N] (default $LOCKSTEP_DEVICE, else cpu)] [--data-dir DIR]\n"
               "SEGMENTS: recompute activations in backward, the model's top-level layers split in SEGMENTS\n"
               "(0, the default: off), all but the last recomputed (ls_checkpoint_sequential).\n");
}

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* CPU time of every thread of this process: on a shared machine, less sensitive to other load */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int main(int argc, char **argv) {
    int64_t B = 128;
    int steps = 50, warmup = 5, segments;
    const char *segments_arg = "0", *dir = NULL, *widths = "32,64,128", *precision = "fp32", *device = NULL;
    ls_resnet_config cfg = {LS_F32, LS_F32, 1, 28, 28, 0, {0}, 1, 10, 42, NULL, 0};
    static const struct option opts[] = {{"batch-size", required_argument, 0, 'b'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"data-dir", required_argument, 0, 'd'},
                                         {"widths", required_argument, 0, 'W'},
                                         {"blocks", required_argument, 0, 'B'},
                                         {"precision", required_argument, 0, 'p'},
                                         {"checkpoint-activations", required_argument, 0, 'c'},
                                         {"device", required_argument, 0, 'D'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'b')
            B = bench_int("--batch-size", optarg, 1, MAX_BATCH);
        else if (c == 'n')
            steps = (int)bench_int("--steps", optarg, 1, BENCH_MAX_COUNT);
        else if (c == 'w')
            warmup = (int)bench_int("--warmup", optarg, 0, BENCH_MAX_COUNT);
        else if (c == 'd')
            dir = bench_str("--data-dir", optarg);
        else if (c == 'W')
            widths = optarg;
        else if (c == 'B')
            cfg.blocks = (int)bench_int("--blocks", optarg, 1, MAX_BLOCKS);
        else if (c == 'p')
            precision = optarg;
        else if (c == 'c') /* parsed below: up to the model's layers, known once it is configured */
            segments_arg = optarg;
        else if (c == 'D')
            device = bench_str("--device", optarg);
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    ls_precision prec;
    if (ex_parse_widths(widths, &cfg) != LS_OK) { /* its message names --widths and the value */
        fprintf(stderr, "bench_resnet: %s\n", ls_last_error());
        return 2;
    }
    if (ls_precision_parse(precision, &prec) != LS_OK)
        bench_bad("--precision", precision, "not a precision", "fp32, bf16 or fp16");
    cfg.act_dtype = ls_precision_dtype(prec);
    segments = (int)bench_int("--checkpoint-activations", segments_arg, 0, ls_resnet_num_layers(&cfg));
    ls_ctx *ctx;
    ls_comm *comm;
    ls_dataset *data;
    ls_module *model;
    ls_optimizer *opt;
    ls_trainer *tr;
    ls_sampler *smp;
    ls_rank_info ri;
    ls_device dev;
    char devname[32];
    const char *env_device = getenv("LOCKSTEP_DEVICE");
    if (!device && !(env_device && *env_device)) device = "cpu"; /* a CPU benchmark unless asked */
    BENCH_CHECK("rank discovery", ls_rank_discover(&ri));
    BENCH_CHECK_FLAG("--device", device, "device", ls_device_select(device, ri.local_rank, &dev));
    BENCH_CHECK("context", ls_ctx_create(dev, NULL, &ctx));
    BENCH_CHECK("communicator", ls_comm_create(ctx, NULL, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    int64_t b = (B + world - 1) / world;
    BENCH_CHECK("data", ls_fashion_mnist_load(dir, 1, 0, &data));
    BENCH_CHECK("sampler", ls_sampler_create(data->n, rank, world, 42, 1, LS_SAMPLER_PAD, &smp));
    /* b, B's share per rank, at most the rank's share of the set: B at most the whole (padded) set */
    bench_batch_fits("--batch-size", B, ls_sampler_num_samples(smp) * world, "the training samples", comm);
    BENCH_CHECK("model", ls_resnet_create(ctx, &cfg, &model));
    if (segments > 0) BENCH_CHECK("checkpointing", ls_checkpoint_sequential(model, segments, &model));
    int np = ls_module_num_params(model);
    ls_tensor **p = malloc(sizeof *p * (size_t)np), **g = malloc(sizeof *g * (size_t)np);
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(model, i);
        g[i] = ls_module_grad(model, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.05f;
    oc.weight_decay = 5e-4f;
    BENCH_CHECK("optimizer", ls_optimizer_create(ctx, np, p, g, &oc, &opt));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = b;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.precision = prec;
    BENCH_CHECK("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &tr));
    int64_t per_epoch = ls_sampler_steps(smp, b), *idx = malloc(sizeof(int64_t) * (size_t)b);
    /* samples stepped in the timed steps over all ranks: an epoch's last step is smaller when the
     * global batch does not divide the set (PAD mode), so steps * B would overstate the rate */
    int64_t stepped = 0;
    double t0 = 0, c0 = 0;
    ls_step_stats st;
    for (int it = -warmup, j = 0; it < steps; it++, j++) {
        if (it == 0) {
            BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
            BENCH_CHECK("barrier", ls_comm_barrier(comm));
            t0 = bench_now_s();
            c0 = cpu_s();
        }
        if (j == per_epoch) {
            j = 0;
            BENCH_CHECK("epoch", ls_sampler_set_epoch(smp, ls_sampler_epoch(smp) + 1));
        }
        int64_t count, global;
        BENCH_CHECK("batch", ls_sampler_batch(smp, j, b, idx, &count, &global));
        /* the loss read only at the last step, as torch_resnet.py's loss.item() after its loop */
        BENCH_CHECK("step", ls_trainer_step(tr, data, idx, count, global, it == steps - 1 ? &st : NULL));
        if (it >= 0) stepped += global;
    }
    BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
    BENCH_CHECK("barrier", ls_comm_barrier(comm));
    double dt = bench_now_s() - t0, dc = cpu_s() - c0;
    ls_memory_stats ms;
    ls_allocator_stats(ctx->alloc, &ms);
    if (rank == 0)
        printf("lockstep samples/s %.1f step_ms %.3f cpu_ms_per_step %.3f ranks %d batch %lld peak_mib %.1f loss %.4f "
               "device %s precision %s\n",
               (double)stepped / dt, 1000 * dt / steps, 1000 * dc / steps, world, (long long)(b * world),
               (double)ms.peak_bytes / 1048576.0, st.loss_sum / (double)(st.samples ? st.samples : 1),
               ls_device_str(dev, devname, sizeof devname), ls_precision_name(prec));
    free(idx);
    free(p);
    free(g);
    ls_sampler_destroy(smp);
    ls_trainer_destroy(tr);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_dataset_destroy(data);
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return 0;
}
