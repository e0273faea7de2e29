/* oom_challenge: a ResNet whose training step at batch 256 needs more memory than a cap allows
 * fails with the runtime's out-of-memory error (what was requested, the cap, what is in use, the
 * remedies); then each remedy alone (a smaller batch, mixed precision, activation checkpointing)
 * and all three together train within the cap. Prints a table of peak memory and step time per
 * configuration. On a GPU the cap is 48 GiB and the model large; on the CPU both are scaled down
 * so the challenge runs in seconds (see --help). Synthetic data: the same on every run. */
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
#include "rng.h"
#include "train.h"

#define EX_PROG "oom_challenge"
#include "example_cli.h"

typedef struct options {
    const char *device, *comm, *memory_cap, *precision, *widths;
    int64_t batch, small_batch, image;
    int blocks, segments, steps, measure;
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: oom_challenge [options]\n"
               "Trains a ResNet at a batch that does not fit a memory cap, shows the out-of-memory error, then\n"
               "each remedy alone and all together, and prints peak memory and step time for each.\n\n"
               "  --memory-cap SIZE     the cap (default on a GPU LOCKSTEP_GPU_MEMORY's limit:SIZE, else 48GiB;\n"
               "                        on the CPU $LOCKSTEP_MEMORY_LIMIT, else 384MiB)\n"
               "  --batch-size N        the batch that does not fit (default 256; at least 2: remedy 1 is smaller)\n"
               "  --small-batch N       remedy 1: the smaller batch (default a quarter of --batch-size)\n"
               "  --precision bf16|fp16 remedy 2: mixed precision (default bf16)\n"
               "  --checkpoint-activations[=N]  remedy 3: activation checkpointing over N segments of the\n"
               "                        top-level layers (default: one per layer)\n"
               "  --widths A,B,...      stage widths (default 64,128,256,512 on a GPU, 16,32,64 on the CPU)\n"
               "  --blocks N            BasicBlocks per stage (default 3 on a GPU, 2 on the CPU)\n"
               "  --image-size N        synthetic N x N RGB (GPU) or grey (CPU) images (default 128 / 28)\n"
               "  --steps N             timed steps per configuration, after one warm-up step (default 2)\n"
               "  --measure-baseline    also run the baseline without the cap and report what it needs\n"
               "  --device D            cpu, cuda or cuda:N (default $LOCKSTEP_DEVICE, else GPU when usable)\n"
               "  --comm B              self, mpi or nccl (default $LOCKSTEP_COMM, else automatic)\n"
               "  -h, --help            this text\n\n"
               "Several ranks (lockstep-run) run the same configurations and must be given the same options\n"
               "but --device: they compare them at start, and a difference stops every rank with an error\n"
               "that names it.\n"
               "Exit status: 0 when the first configuration runs out of memory and every remedy fits the cap,\n"
               "2 for a bad flag, 1 otherwise.\n");
}

static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->batch = 256;
    o->precision = "bf16";
    o->steps = 2;
    o->segments = -1; /* one per layer */
    static const struct option longopts[] = {{"memory-cap", required_argument, 0, 'M'},
                                             {"batch-size", required_argument, 0, 'b'},
                                             {"small-batch", required_argument, 0, 's'},
                                             {"precision", required_argument, 0, 'p'},
                                             {"checkpoint-activations", optional_argument, 0, 'K'},
                                             {"widths", required_argument, 0, 'W'},
                                             {"blocks", required_argument, 0, 'B'},
                                             {"image-size", required_argument, 0, 'i'},
                                             {"steps", required_argument, 0, 'n'},
                                             {"device", required_argument, 0, 'D'},
                                             {"comm", required_argument, 0, 'C'},
                                             {"measure-baseline", no_argument, 0, 'm'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    int64_t v = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'M': o->memory_cap = optarg; break;
        case 'b':
            /* at least 2: remedy 1 is a smaller batch (a batch of 1 ran 1 as the "smaller" one) */
            if (parse_i64("--batch-size", optarg, 2, EX_MAX_BATCH, &o->batch)) return -1;
            break;
        case 's':
            if (parse_i64("--small-batch", optarg, 1, EX_MAX_BATCH, &o->small_batch)) return -1;
            break;
        case 'p': o->precision = optarg; break;
        case 'K':
            if (optarg && parse_i64("--checkpoint-activations", optarg, 1, EX_MAX_SEGMENTS, &v)) return -1;
            o->segments = optarg ? (int)v : -1;
            break;
        case 'W': o->widths = optarg; break;
        case 'B':
            if (parse_i64("--blocks", optarg, 1, EX_MAX_BLOCKS, &v)) return -1;
            o->blocks = (int)v;
            break;
        case 'i': /* N x N x 3 floats a sample */
            if (parse_i64("--image-size", optarg, 1, 4096, &o->image)) return -1;
            break;
        case 'n':
            if (parse_i64("--steps", optarg, 1, 1000000, &v)) return -1;
            o->steps = (int)v;
            break;
        case 'D': STR_OPT("--device", o->device); break;
        case 'C': STR_OPT("--comm", o->comm); break;
        case 'm': o->measure = 1; break;
        case 'h': usage(stdout); exit(ex_exit_status("oom_challenge", 0));
        default: /* getopt said what was wrong; 120 lines of help per rank buried it */
            fprintf(stderr, "Try 'oom_challenge --help' for the options.\n");
            return -1;
        }
    }
    /* the remedy must be smaller than the batch that does not fit */
    if (o->small_batch && o->small_batch >= o->batch) {
        fprintf(stderr, "oom_challenge: --small-batch %lld must be smaller than --batch-size %lld\n",
                (long long)o->small_batch, (long long)o->batch);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "oom_challenge: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

typedef struct config {
    const char *name;
    int64_t batch;
    ls_precision precision;
    int checkpoint;
    /* results */
    ls_status status;
    int in_model; /* out of memory while the model, optimizer or trainer was made: before any step */
    char error[640];
    size_t peak;
    double step_s;
} config;

typedef struct setup {
    ls_ctx *ctx;
    ls_comm *comm;
    ls_resnet_config model;
    int segments; /* <= 0: one per layer */
    int steps;
    const ls_dataset *data;
} setup;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Build the configuration's model, optimizer and trainer, train warm-up + timed steps, free it
 * all. The peak is what the allocator held at most meanwhile. */
#define MODEL_HINT                                                                                                     \
    "The model (its weights, gradients and optimizer state) does not fit whatever the batch: a larger "                \
    "--memory-cap, or a smaller model (--widths, --blocks)"
#define STEP_HINT                                                                                                      \
    "To fit: a smaller --batch-size, --precision bf16|fp16 (half the activation memory), or "                          \
    "--checkpoint-activations (recompute activations in backward)"

static ls_status run_config(const setup *su, config *c) {
    ls_module *m = NULL;
    ls_optimizer *opt = NULL;
    ls_trainer *tr = NULL;
    ls_tensor **p = NULL, **g = NULL;
    int64_t *idx = NULL;
    double *times = NULL;
    ls_status s;
    ls_resnet_config rc = su->model;
    rc.act_dtype = ls_precision_dtype(c->precision);
    ls_allocator_reset_peak(su->ctx->alloc);
    /* what helps depends on what ran out: the model before any step (no batch helps), or a step */
    ls_allocator_set_oom_hint(su->ctx->alloc, MODEL_HINT);
    c->in_model = 1;
    LS_CHECK_GOTO(ls_resnet_create(su->ctx, &rc, &m), s, done);
    if (c->checkpoint) {
        int n = ls_resnet_num_layers(&rc);
        int segs = su->segments > 0 ? su->segments : n; /* at most n: checked at the start */
        LS_CHECK_GOTO(ls_checkpoint_sequential(m, segs, &m), s, done);
    }
    int np = ls_module_num_params(m);
    p = calloc((size_t)np, sizeof *p);
    g = calloc((size_t)np, sizeof *g);
    idx = malloc((size_t)c->batch * sizeof *idx);
    times = calloc((size_t)su->steps + 1, sizeof *times);
    if (!p || !g || !idx || !times) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for the configuration");
        goto done;
    }
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.05f;
    oc.weight_decay = 5e-4f;
    LS_CHECK_GOTO(ls_optimizer_create(su->ctx, np, p, g, &oc, &opt), s, done);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = c->batch;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.precision = c->precision;
    LS_CHECK_GOTO(ls_trainer_create(su->ctx, su->comm, m, opt, &tc, &tr), s, done);
    int world = su->comm ? ls_comm_world(su->comm) : 1, rank = su->comm ? ls_comm_rank(su->comm) : 0;
    ls_allocator_set_oom_hint(su->ctx->alloc, STEP_HINT);
    c->in_model = 0;
    for (int64_t i = 0; i < c->batch; i++) idx[i] = (rank * c->batch + i) % su->data->n;
    for (int k = -1; k < su->steps; k++) {
        double t0 = ex_now_s();
        LS_CHECK_GOTO(ls_trainer_step(tr, su->data, idx, c->batch, c->batch * world, NULL), s, done);
        if (k >= 0) times[k] = ex_now_s() - t0;
    }
    qsort(times, (size_t)su->steps, sizeof *times, cmp_double);
    c->step_s = times[su->steps / 2];
    s = LS_OK;
done:;
    ls_memory_stats st;
    ls_allocator_stats(su->ctx->alloc, &st);
    c->peak = st.peak_bytes;
    c->status = s;
    if (s != LS_OK) snprintf(c->error, sizeof c->error, "%s", ls_last_error());
    ls_trainer_destroy(tr);
    ls_optimizer_destroy(opt);
    ls_module_destroy(m);
    free(p);
    free(g);
    free(idx);
    free(times);
    return s;
}

int main(int argc, char **argv) {
    ex_stdio_guard();
    options o;
    if (parse_options(argc, argv, &o) != 0) return 2;
    ls_rank_info ri;
    ls_device dev;
    ls_ctx *ctx = NULL;
    ls_comm *comm = NULL;
    ls_dataset *data = NULL;
    float *img = NULL;
    int32_t *lab = NULL;
    int rc = 1, all_failed = 0; /* all_failed: the ranks' options differ (every rank knows) */
    ls_status s;
    ls_precision prec;
    const char *what = "--precision"; /* a flag's name: a usage error (exit status 2) */
    if ((s = ls_precision_parse(o.precision, &prec)) != LS_OK) goto fail;
    if (prec == LS_PRECISION_FP32) {
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "the remedy is bf16 or fp16, not fp32");
        goto fail;
    }
    if (o.memory_cap) unsetenv("LOCKSTEP_MEMORY_LIMIT"); /* the flag wins: a bad value there stopped its run */
    what = "rank discovery";
    if ((s = ls_rank_discover(&ri)) != LS_OK) goto fail;
    what = o.device ? "--device" : "device";
    if ((s = ls_device_select(o.device, ri.local_rank, &dev)) != LS_OK) goto fail;
    what = "context";
    if ((s = ls_ctx_create(dev, NULL, &ctx)) != LS_OK) goto fail;
    what = o.comm ? "--comm" : "communicator";
    if ((s = ls_comm_create(ctx, o.comm, &comm)) != LS_OK) goto fail;
    int gpu = dev.type != LS_DEVICE_CPU, rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    /* the GPU challenge and its CPU scale model: same architecture family, smaller everything */
    setup su;
    memset(&su, 0, sizeof su);
    su.ctx = ctx;
    su.comm = world > 1 ? comm : NULL;
    su.segments = o.segments;
    su.steps = o.steps;
    su.model.param_dtype = LS_F32;
    su.model.in_channels = gpu ? 3 : 1;
    su.model.in_h = su.model.in_w = o.image ? o.image : gpu ? 128 : 28;
    su.model.blocks = o.blocks ? o.blocks : gpu ? 3 : 2;
    su.model.num_classes = 10;
    su.model.seed = 7;
    what = "--widths";
    if ((s = ex_parse_widths(o.widths ? o.widths : gpu ? "64,128,256,512" : "16,32,64", &su.model)) != LS_OK) goto fail;
    what = "--checkpoint-activations";
    if (o.segments > ls_resnet_num_layers(&su.model)) { /* as fashion_resnet (it was clamped silently) */
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "cannot split %d layers into %d checkpoint segments (at most %d)",
                     ls_resnet_num_layers(&su.model), o.segments, ls_resnet_num_layers(&su.model));
        goto fail;
    }
    size_t cap;
    ls_memory_stats host_st;
    /* the environment's cap, if set: on the CPU LOCKSTEP_MEMORY_LIMIT's, on a GPU
     * LOCKSTEP_GPU_MEMORY's limit (it was replaced by the default 48GiB, which the banner printed,
     * while the limit went on capping what the allocator holds) */
    ls_allocator_stats(ctx->alloc, &host_st);
    const char *env_name = gpu ? "LOCKSTEP_GPU_MEMORY" : "LOCKSTEP_MEMORY_LIMIT", *env_cap = getenv(env_name);
    const int use_env = !o.memory_cap && host_st.cap_bytes > 0;
    char from[160];
    what = "--memory-cap";
    if (use_env) {
        cap = host_st.cap_bytes;
        snprintf(from, sizeof from, "%s=%.120s", env_name, env_cap ? env_cap : "");
    } else {
        const char *text = o.memory_cap ? o.memory_cap : gpu ? "48GiB" : "384MiB";
        if ((s = ls_memory_parse_cap(text, &cap)) != LS_OK) goto fail;
        snprintf(from, sizeof from, "%s %.120s", o.memory_cap ? "--memory-cap" : "the default", text);
    }
    ls_allocator_set_cap_from(ctx->alloc, cap, from);
    int64_t small = o.small_batch ? o.small_batch : (o.batch / 4 > 0 ? o.batch / 4 : 1);
    /* every rank must run the same configurations: other ones would meet in other collectives. The
     * cap first, in bytes; where it differs, the ranks say where each comes from (it was always
     * "--memory-cap (bytes) is ...", also for LOCKSTEP_MEMORY_LIMIT on one rank and the default on
     * the other): the same text is the same cap, so texts differ where the bytes do */
    what = "options";
    ls_setting cap_bytes = ls_setting_num("the cap (bytes)", (double)cap), cap_from = ls_setting_str("the cap", from);
    if ((s = ls_ddp_check_settings(comm, 1, &cap_bytes)) == LS_ERR_MISMATCH) {
        ls_status named = ls_ddp_check_settings(comm, 1, &cap_from);
        if (named != LS_OK) s = named;
    }
    if (s != LS_OK) {
        all_failed = s == LS_ERR_MISMATCH; /* every rank prints it and exits 1: no ls_comm_abort */
        goto fail;
    }
    ls_setting same[] = {ls_setting_num("--batch-size", (double)o.batch),
                         ls_setting_num("--small-batch", (double)small),
                         ls_setting_str("--precision", o.precision),
                         ls_setting_num("--checkpoint-activations", o.segments),
                         ls_setting_str("--widths", o.widths),
                         ls_setting_num("--blocks", o.blocks),
                         ls_setting_num("--image-size", (double)o.image),
                         ls_setting_num("--steps", o.steps),
                         ls_setting_flag("--measure-baseline", o.measure)};
    if ((s = ls_ddp_check_settings(comm, (int)(sizeof same / sizeof same[0]), same)) != LS_OK) {
        all_failed = s == LS_ERR_MISMATCH; /* every rank prints it and exits 1: no ls_comm_abort */
        goto fail;
    }
    /* synthetic images and labels, one batch's worth */
    int64_t feat = su.model.in_channels * su.model.in_h * su.model.in_w, n = o.batch;
    img = malloc(sizeof *img * (size_t)(n * feat));
    lab = malloc(sizeof *lab * (size_t)n);
    what = "data";
    if (!img || !lab) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for %lld synthetic images", (long long)n);
        goto fail;
    }
    ls_rng r;
    ls_rng_init(&r, 1234);
    for (int64_t i = 0; i < n * feat; i++) img[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < n; i++) lab[i] = (int32_t)ls_rng_below(&r, 10);
    if ((s = ls_dataset_from_arrays(n, feat, 10, img, lab, &data)) != LS_OK) goto fail;
    su.data = data;

    config cf[5] = {
        {"baseline", o.batch, LS_PRECISION_FP32, 0, LS_OK, 0, "", 0, 0},
        {"smaller batch", small, LS_PRECISION_FP32, 0, LS_OK, 0, "", 0, 0},
        {"mixed precision", o.batch, prec, 0, LS_OK, 0, "", 0, 0},
        {"activation checkpointing", o.batch, LS_PRECISION_FP32, 1, LS_OK, 0, "", 0, 0},
        {"all three", small, prec, 1, LS_OK, 0, "", 0, 0},
    };
    char capb[32], devname[32];
    if (rank == 0) {
        printf("oom_challenge: device %s, %d rank%s, cap %s per rank, ResNet widths", ls_device_str(dev, devname, 32),
               world, world == 1 ? "" : "s", ls_memory_format(cap, capb, 32));
        for (int i = 0; i < su.model.n_stages; i++) printf("%s%lld", i ? "," : " ", (long long)su.model.widths[i]);
        printf(" x %d blocks, %lldx%lldx%lld synthetic images\n", su.model.blocks, (long long)su.model.in_channels,
               (long long)su.model.in_h, (long long)su.model.in_w);
        fflush(stdout);
    }
    int met = 1;
    for (int i = 0; i < 5; i++) {
        s = run_config(&su, &cf[i]);
        if (s != LS_OK && s != LS_ERR_OUT_OF_MEMORY) {
            what = cf[i].name;
            goto fail;
        }
        /* agree across ranks: fits only if it fitted everywhere; the largest peak, the slowest step */
        double v[4] = {s == LS_OK ? 0.0 : 1.0, (double)cf[i].peak, cf[i].step_s,
                       s == LS_OK ? 0.0 : (double)cf[i].in_model};
        if (world > 1) {
            what = "agreement";
            if ((s = ls_comm_allreduce_host(comm, v, 4, LS_F64, LS_REDUCE_MAX)) != LS_OK) goto fail;
        }
        cf[i].in_model = v[3] > 0;
        if (v[0] > 0 && cf[i].status == LS_OK) {
            cf[i].status = LS_ERR_OUT_OF_MEMORY;
            snprintf(cf[i].error, sizeof cf[i].error, "out of memory on another rank");
        }
        cf[i].peak = (size_t)v[1];
        cf[i].step_s = v[2];
        if (rank == 0 && i == 0) {
            if (cf[0].status == LS_ERR_OUT_OF_MEMORY && cf[0].in_model) /* not the failure the remedies are for */
                printf("baseline (batch %lld, fp32, no checkpointing) failed while its model was made, before any "
                       "step:\n  %s: %s\n",
                       (long long)cf[0].batch, ls_status_name(cf[0].status), cf[0].error);
            else if (cf[0].status == LS_ERR_OUT_OF_MEMORY)
                printf("baseline (batch %lld, fp32, no checkpointing) failed as expected:\n  %s: %s\n",
                       (long long)cf[0].batch, ls_status_name(cf[0].status), cf[0].error);
            else
                printf("baseline (batch %lld, fp32) fits the cap: raise --batch-size or lower --memory-cap\n",
                       (long long)cf[0].batch);
            fflush(stdout);
        }
        met &= i == 0 ? cf[i].status == LS_ERR_OUT_OF_MEMORY && !cf[i].in_model
                      : cf[i].status == LS_OK && cf[i].peak <= cap;
    }
    config need = cf[0];
    if (o.measure) { /* the baseline again, uncapped: what it needs */
        ls_allocator_set_cap(ctx->alloc, 0);
        s = run_config(&su, &need);
        ls_allocator_set_cap(ctx->alloc, cap);
        double v = (double)need.peak;
        if (world > 1 && s == LS_OK) s = ls_comm_allreduce_host(comm, &v, 1, LS_F64, LS_REDUCE_MAX);
        if (s != LS_OK) {
            what = "--measure-baseline";
            goto fail;
        }
        need.peak = (size_t)v;
    }
    if (rank == 0) {
        printf("\n%-26s %6s  %-9s  %-13s  %13s  %11s  %s\n", "configuration", "batch", "precision", "checkpointing",
               "peak memory", "step time", "within the cap");
        for (int i = 0; i < 5; i++) {
            char pk[32], st[32];
            snprintf(st, sizeof st, "%.3f s", cf[i].step_s);
            printf("%-26s %6lld  %-9s  %-13s  %13s  %11s  %s\n", cf[i].name, (long long)cf[i].batch,
                   ls_precision_name(cf[i].precision), cf[i].checkpoint ? "on" : "off",
                   ls_memory_format(cf[i].peak, pk, 32), cf[i].status == LS_OK ? st : "-",
                   cf[i].status == LS_OK ? (cf[i].peak <= cap ? "yes" : "NO") : "no: out of memory");
        }
        if (o.measure) {
            char pk[32];
            printf("%-26s %6lld  %-9s  %-13s  %13s  %9.3f s  (without the cap)\n", "baseline, uncapped",
                   (long long)need.batch, "fp32", "off", ls_memory_format(need.peak, pk, 32), need.step_s);
        }
        /* the advice that can help the rows that failed: --small-batch only those with the small batch,
         * and only while it can be smaller (at 1 it was advised all the same) */
        int small_failed = 0;
        for (int i = 1; i < 5; i++)
            small_failed |= small > 1 && cf[i].batch == small && !(cf[i].status == LS_OK && cf[i].peak <= cap);
        printf("%s\n", met ? "challenge met: the baseline exceeds the cap and every remedy fits"
                       : cf[0].status != LS_ERR_OUT_OF_MEMORY
                           ? "challenge NOT met: the baseline does not run out of memory"
                       : cf[0].in_model ? "challenge NOT met: the model itself does not fit the cap, whatever the "
                                          "batch (a larger --memory-cap, or smaller --widths or --blocks)"
                       : small_failed   ? "challenge NOT met: a remedy does not fit the cap (see the table; "
                                          "a larger --memory-cap or a smaller --small-batch)"
                                        : "challenge NOT met: a remedy does not fit the cap (see the table; "
                                          "a larger --memory-cap)");
    }
    rc = met ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "oom_challenge: %s: %s: %s\n", what, ls_status_name(s), ls_last_error());
    rc = what[0] == '-' && s == LS_ERR_INVALID_ARGUMENT ? 2 : 1; /* a flag's bad value: bad usage */
done:
    ls_dataset_destroy(data);
    free(img);
    free(lab);
    if (rc == 1 && !all_failed && comm && ls_comm_world(comm) > 1 && s != LS_OK)
        ls_comm_abort(comm, "oom_challenge failed");
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return ex_exit_status("oom_challenge", rc);
}
