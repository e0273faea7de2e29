/* fashion_mlp: trains a 784-512-256-10 ReLU MLP on Fashion-MNIST, data-parallel when started by
 * lockstep-run (one rank per GPU, or per CPU slot), on the CPU where no GPU is usable. Prints
 * per-epoch loss, test accuracy, samples/s and peak memory; a progress line while an epoch
 * runs when stderr is a terminal. --batch-size is per rank (DDP's convention). Checkpoints every
 * --save-every steps and on SIGTERM/SIGINT; --resume continues from one. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "data.h"
#include "device.h"
#include "log.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

#define EX_PROG "fashion_mlp"
#include "example_ckpt.h"
#include "example_cli.h"

typedef struct options {
    int epochs;
    int64_t batch, train_limit, test_limit;
    int accum;
    const char *optimizer;
    double lr, weight_decay, momentum, clip;
    int momentum_given; /* --momentum: SGD's, refused with AdamW */
    int64_t warmup;
    ex_train_flags tf; /* the flags both examples share (example_cli.h) */
    uint64_t seed;
    const char *data_dir, *device, *comm, *hidden, *activation, *sampler;
    int progress; /* -1 auto */
    const char *precision;
    int ckpt_segments; /* activation checkpointing: segments, 0 off */
    double dropout;    /* after each hidden layer, 0 none */
    const char *metrics;
    ex_ckpt_options ck; /* --max-steps, --save-every, --checkpoint-dir, --keep-last, --resume, ... */
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: fashion_mlp [options]\n"
               "Trains a 784-512-256-10 MLP on Fashion-MNIST (data-parallel under lockstep-run).\n\n"
               "  --epochs N            epochs (default 5); with nothing left to train (0, a finished checkpoint,\n"
               "                        --max-steps reached) the model is evaluated on the test set as it is\n"
               "  --batch-size N        samples per rank per micro-step (default 128)\n"
               "  --accum-steps N       micro-steps per optimizer step, gradients accumulated (default 1); a\n"
               "                        step's gradient is the mean over all its samples on every rank (a\n"
               "                        short last batch weighs each of its samples as a full one does)\n"
               "  --optimizer sgd|adamw optimizer (default sgd: momentum 0.9)\n"
               "  --lr X                peak learning rate (default 0.05 for sgd, 0.001 for adamw)\n"
               "  --momentum X          SGD momentum (default 0.9)\n"
               "  --betas B1,B2         AdamW's betas (default 0.9,0.999)\n"
               "  --eps X               AdamW's epsilon, above 0 (default 1e-8)\n"
               "  --weight-decay X      weight decay (default 0 for sgd, 0.01 for adamw)\n"
               "  --no-decay-1d         no weight decay on the biases (1-D parameters), as timm and nanoGPT group\n"
               "                        them (default: every parameter decays, as torch.optim); with SGD\n"
               "                        give a --weight-decay (its default, 0, leaves nothing to exempt)\n"
               "  --warmup-steps N      linear warmup before the decay: step s < N takes lr x (s+1)/N, so none\n"
               "                        trains at 0 (default 100)\n"
               "  --lr-schedule S       after the warmup: cosine (default) or linear decay toward --min-lr,\n"
               "                        reached at step T = epochs x steps an epoch, one past the last step\n"
               "                        trained (as Hugging Face's get_cosine/linear_schedule_with_warmup,\n"
               "                        whose warmup starts at 0), or constant\n"
               "  --min-lr X            the learning rate the decay tends to, at most --lr (default 0)\n"
               "  --clip-grad-norm X    clip the global gradient norm to X (default off; fp16: after unscaling)\n"
               "  --label-smoothing X   cross-entropy's label smoothing in [0, 1), as torch.nn.CrossEntropyLoss's\n"
               "                        (default 0); the train loss printed is the smoothed one, the test loss\n"
               "                        the plain cross-entropy\n"
               "  --precision P         fp32 (default), bf16 or fp16: f16/bf16 activations and GEMM inputs with\n"
               "                        f32 master weights; fp16 adds dynamic loss scaling (GradScaler's rules)\n"
               "  --checkpoint-activations[=N]  recompute activations in backward: the layers split into N\n"
               "                        segments (default 2) whose inner activations are not kept, but\n"
               "                        the last's (its backward follows at once: PyTorch's rule)\n" EX_TRAIN_HELP_SHARD
                   EX_TRAIN_HELP_EMA
               "  --hidden A,B,...      hidden layer sizes, at most 6 (default 512,256; '' for none: a linear\n"
               "                        model)\n"
               "  --activation relu|gelu (default relu)\n"
               "  --dropout P           dropout after each hidden layer's activation, P in [0, 1) (default 0),\n"
               "                        numbered as nn.Sequential(Linear, act, Dropout, ...): 0, 3, 6...;\n"
               "                        its masks are drawn per sample and step, so a run trains the same on\n"
               "                        any number of ranks and with any --accum-steps (within rounding)\n"
               "  --init-from FILE      start from the weights in FILE, a safetensors file: a checkpoint's\n"
               "                        model.safetensors or ema.safetensors, or a PyTorch state_dict of the\n"
               "                        same names and shapes (f32, f16, bf16 or f64); a checkpoint resumed\n"
               "                        replaces them\n"
               "  --seed N              seed for initialization and shuffling (default 42)\n"
               "  --train-limit N       use only the first N training samples (default all 60000)\n"
               "  --test-limit N        use only the first N test samples (default all 10000)\n"
               "  --sampler pad|drop-last|exact  how uneven shards are handled: pad (default) repeats samples\n"
               "                        to a multiple of the ranks (DistributedSampler); drop-last drops the\n"
               "                        rest and an epoch's short last step (DistributedSampler's and\n"
               "                        DataLoader's drop_last); exact takes each sample once, a rank's\n"
               "                        last batch short or empty\n"
               "  --data-dir DIR        Fashion-MNIST files, .gz or not (default $LOCKSTEP_FASHION_DIR or\n"
               "                        /usr/share/datasets/fashion-mnist)\n"
               "  --device D            cpu, cuda or cuda:N (default $LOCKSTEP_DEVICE, else GPU when usable)\n"
               "  --comm B              self, mpi or nccl (default $LOCKSTEP_COMM, else automatic)\n"
               "  --dump-params FILE    after training, rank 0 writes all parameters as raw f32\n" EX_CKPT_HELP_FLAGS
               "  --progress / --no-progress  progress line on rank 0: the epoch's mean loss so far over\n"
               "                        the ranks and samples/s (default: when stderr is a terminal, or\n"
               "                        lockstep-run's, rank 0's being its pipe: LOCKSTEP_STDERR_TTY=1)\n"
               "  -h, --help            this text\n\n" EX_CKPT_HELP_CONTENTS "\n" EX_CKPT_HELP_PREEMPTION
               "\n" EX_HELP_SAME_OPTIONS("") "\n" EX_CKPT_HELP_ENV);
}

static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 5;
    o->batch = 128;
    o->accum = 1;
    o->optimizer = "sgd";
    o->lr = -1;
    o->weight_decay = -1;
    o->momentum = 0.9;
    o->warmup = 100;
    ex_train_flags_init(&o->tf);
    o->seed = 42;
    o->hidden = "512,256";
    o->activation = "relu";
    o->sampler = "pad";
    o->progress = -1;
    o->precision = "fp32";
    ex_ckpt_options_init(&o->ck);
    static const struct option longopts[] = {EX_TRAIN_LONGOPTS,
                                             {"epochs", required_argument, 0, 'e'},
                                             {"batch-size", required_argument, 0, 'b'},
                                             {"accum-steps", required_argument, 0, 'A'},
                                             {"optimizer", required_argument, 0, 'o'},
                                             {"lr", required_argument, 0, 'l'},
                                             {"momentum", required_argument, 0, 'm'},
                                             {"weight-decay", required_argument, 0, 'w'},
                                             {"warmup-steps", required_argument, 0, 'W'},
                                             {"clip-grad-norm", required_argument, 0, 'c'},
                                             {"precision", required_argument, 0, 1001},
                                             {"checkpoint-activations", optional_argument, 0, 1002},
                                             {"hidden", required_argument, 0, 'H'},
                                             {"activation", required_argument, 0, 'a'},
                                             {"dropout", required_argument, 0, 1100},
                                             {"seed", required_argument, 0, 's'},
                                             {"train-limit", required_argument, 0, 'T'},
                                             {"test-limit", required_argument, 0, 't'},
                                             {"sampler", required_argument, 0, 'S'},
                                             {"data-dir", required_argument, 0, 'd'},
                                             {"device", required_argument, 0, 'D'},
                                             {"comm", required_argument, 0, 'C'},
                                             {"progress", no_argument, 0, 'p'},
                                             {"no-progress", no_argument, 0, 'N'},
                                             {"help", no_argument, 0, 'h'},
                                             {"metrics", required_argument, 0, 'J'},
                                             EX_CKPT_LONGOPTS,
                                             {0, 0, 0, 0}};
    int c, r;
    int64_t v;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if ((r = ex_ckpt_option(EX_PROG, &o->ck, c, optarg)) != 0) {
            if (r < 0) return -1;
            continue;
        }
        int bad = 0;
        if (ex_train_flags_parse(EX_PROG, &o->tf, c, optarg, &bad)) {
            if (bad) return -1;
            continue;
        }
        switch (c) {
        case 'e':
            if (parse_i64("--epochs", optarg, 0, EX_MAX_EPOCHS, &v)) return -1;
            o->epochs = (int)v;
            break;
        case 'b':
            if (parse_i64("--batch-size", optarg, 1, EX_MAX_BATCH, &o->batch)) return -1;
            break;
        case 'A':
            if (parse_i64("--accum-steps", optarg, 1, EX_MAX_ACCUM, &v)) return -1;
            o->accum = (int)v;
            break;
        case 'o': o->optimizer = optarg; break;
        case 'l':
            if (parse_f64("--lr", optarg, &o->lr)) return -1;
            break;
        case 'm':
            if (parse_f64("--momentum", optarg, &o->momentum)) return -1;
            o->momentum_given = 1;
            break;
        case 'w':
            if (parse_f64("--weight-decay", optarg, &o->weight_decay)) return -1;
            break;
        case 'W':
            if (parse_i64("--warmup-steps", optarg, 0, INT64_MAX, &o->warmup)) return -1;
            break;
        case 'c':
            if (parse_f64("--clip-grad-norm", optarg, &o->clip)) return -1;
            break;
        case 1001: o->precision = optarg; break;
        case 1002:
            o->ckpt_segments = 2;
            if (optarg && parse_i64("--checkpoint-activations", optarg, 1, EX_MAX_SEGMENTS, &v)) return -1;
            if (optarg) o->ckpt_segments = (int)v;
            break;
        case 'H': o->hidden = optarg; break;
        case 'a': o->activation = optarg; break;
        case 1100:
            if (ex_parse_fraction_f32(EX_PROG, "--dropout", optarg, &o->dropout)) return -1;
            break;
        case 's':
            if (parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return -1;
            o->seed = (uint64_t)v;
            break;
        case 'T':
            if (parse_i64("--train-limit", optarg, 1, INT64_MAX, &o->train_limit)) return -1;
            break;
        case 't':
            if (parse_i64("--test-limit", optarg, 1, INT64_MAX, &o->test_limit)) return -1;
            break;
        case 'S': o->sampler = optarg; break;
        case 'd': STR_OPT("--data-dir", o->data_dir); break;
        case 'D': STR_OPT("--device", o->device); break;
        case 'C': STR_OPT("--comm", o->comm); break;
        case 'p': o->progress = 1; break;
        case 'N': o->progress = 0; break;
        case 'J': STR_OPT("--metrics", o->metrics); break;
        case 'h': usage(stdout); exit(ex_exit_status("fashion_mlp", 0));
        default: /* getopt said what was wrong; 120 lines of help per rank buried it */
            fprintf(stderr, "Try 'fashion_mlp --help' for the options.\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fashion_mlp: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return ex_ckpt_options_check(EX_PROG, &o->ck);
}

/* The flags every rank must be given alike (ex_check_same_options; --checkpoint-dir, --keep-last,
 * --log-steps, --metrics, --dump-params and --progress are rank 0's concern, --device and
 * --data-dir may differ per host). */
static ls_status check_same_options(ls_comm *comm, const options *o, const ls_dataset *train, const ls_dataset *test,
                                    ex_ckpt *record) {
    ls_setting set[EX_SAME_COMMON_N + 3 + EX_SAME_EXTRA];
    char seed[24];
    int n = 0;
    EX_SAME_COMMON(set, n, o, seed);
    set[n++] = ls_setting_str("--hidden", o->hidden);
    set[n++] = ls_setting_str("--activation", o->activation);
    set[n++] = ls_setting_str("--sampler", o->sampler);
    return ex_check_same_options(comm, set, n, &o->tf, &o->ck, train, test, record);
}

/* ev = test loss sum, correct, count over every rank's shard of the test set. */
static ls_status evaluate(ls_trainer *trainer, ls_comm *comm, const ls_dataset *test, const int64_t *idx, int64_t n,
                          double ev[3]) {
    int64_t correct;
    LS_CHECK(ls_trainer_evaluate(trainer, test, idx, n, &ev[0], &correct));
    ev[1] = (double)correct;
    ev[2] = (double)n;
    return ls_comm_allreduce_host(comm, ev, 3, LS_F64, LS_REDUCE_SUM);
}

/* The same for the EMA of the weights (--ema), swapped into the model for it. */
static ls_status evaluate_ema(ls_ema *ema, ls_trainer *trainer, ls_comm *comm, const ls_dataset *test,
                              const int64_t *idx, int64_t n, double ev[3]) {
    LS_CHECK(ls_ema_swap(ema));
    ls_status s = evaluate(trainer, comm, test, idx, n, ev);
    ls_status back = ls_ema_swap(ema);
    return s != LS_OK ? s : back;
}

int main(int argc, char **argv) {
    ex_stdio_guard();
    options o;
    if (parse_options(argc, argv, &o) != 0) return 2;
    int rc = 0, all_failed = 0; /* all_failed: TRY_ALL */
    ls_rank_info ri;
    ls_device dev;
    ls_ctx *ctx = NULL;
    ls_comm *comm = NULL;
    ls_dataset *train = NULL, *test = NULL;
    ls_sampler *sampler = NULL, *test_sampler = NULL;
    ls_module *model = NULL;
    ls_optimizer *opt = NULL;
    ls_trainer *trainer = NULL;
    ls_ema *ema = NULL;
    int64_t *idx = NULL, *test_idx = NULL;
    ex_batcher bt = {{NULL, NULL}, 0, -1, 0, 0};
    ex_metrics metrics = {NULL, NULL, 0};
    ls_gpu_monitor *gpumon = NULL;
    ex_ckpt ck;
    ex_ckpt_init(&ck, EX_PROG, &o.ck);

    ls_optim_kind kind;
    ls_act act = LS_ACT_RELU;
    ls_sampler_mode mode = LS_SAMPLER_PAD;
    ls_precision precision;
    USAGE("--optimizer", ls_optim_kind_parse(o.optimizer, &kind));
    ls_lr_kind lr_kind;
    const char *bad_flag = "";
    USAGE(bad_flag, ex_train_flags_check(&o.tf, kind, &lr_kind, &bad_flag));
    if (o.momentum_given && kind != LS_OPTIM_SGD) /* AdamW took no momentum and said nothing */
        USAGE("--momentum", ls_error(LS_ERR_INVALID_ARGUMENT, "momentum is SGD's (AdamW's is --betas' first): add "
                                                              "--optimizer sgd"));
    USAGE("--precision", ls_precision_parse(o.precision, &precision));
    if (strcmp(o.activation, "gelu") == 0)
        act = LS_ACT_GELU;
    else if (strcmp(o.activation, "relu") != 0)
        USAGE("--activation", ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' is not one of relu, gelu", o.activation));
    if (strcmp(o.sampler, "drop-last") == 0)
        mode = LS_SAMPLER_DROP_LAST;
    else if (strcmp(o.sampler, "exact") == 0)
        mode = LS_SAMPLER_EXACT;
    else if (strcmp(o.sampler, "pad") != 0)
        USAGE("--sampler", ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' is not one of pad, drop-last, exact", o.sampler));
    int64_t sizes[8];
    int n_sizes = 0;
    sizes[n_sizes++] = 784;
    /* up to 6 sizes, each followed by a comma or the end (an empty list: no hidden layer) */
    for (const char *p = o.hidden; *p;) {
        char *end;
        errno = 0;
        long long h = strtoll(p, &end, 10);
        if (end == p || errno || h < 1 || h > INT32_MAX || (*end != ',' && *end != '\0') ||
            (*end == ',' && end[1] == '\0') || n_sizes == 7)
            USAGE("--hidden", ls_error(LS_ERR_INVALID_ARGUMENT,
                                       "'%s' is not a comma-separated list of 1 to 6 positive sizes", o.hidden));
        sizes[n_sizes++] = h;
        p = *end ? end + 1 : end;
    }
    sizes[n_sizes++] = 10;
    if (o.dropout > 0 && n_sizes == 2)
        USAGE("--dropout", ls_error(LS_ERR_INVALID_ARGUMENT, "needs a hidden layer to follow (--hidden '' has none)"));

    TRY("rank discovery", ls_rank_discover(&ri));
    TRY_FLAG(o.device, "--device", "device", ls_device_select(o.device, ri.local_rank, &dev));
    TRY("context", ls_ctx_create(dev, NULL, &ctx));
    TRY_FLAG(o.comm, "--comm", "communicator", ls_comm_create(ctx, o.comm, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    TRY("GPU monitor", ex_gpu_monitor_start(EX_PROG, dev, rank, &gpumon));
    const char *probe_flag = "";
    int probe_agreed = 0;
    TRY_AGREED(probe_flag, ex_step_files_probe(comm, o.metrics, o.ck.log_steps, &probe_flag, &probe_agreed),
               probe_agreed);

    TRY("training data", ls_fashion_mnist_load(o.data_dir, 1, o.train_limit, &train));
    TRY("test data", ls_fashion_mnist_load(o.data_dir, 0, o.test_limit, &test));
    TRY("data", ex_check_fashion_shape(train, test));
    TRY_ALL("options", check_same_options(comm, &o, train, test, &ck));
    ls_allocator_set_oom_hint(ctx->alloc, "The model (its weights, gradients and optimizer state) does not fit "
                                          "whatever the batch: a larger cap, or a smaller model (--hidden)");
    TRY("model", ls_mlp_create_dropout(ctx, LS_F32, n_sizes, sizes, act, (float)o.dropout, o.seed, &model));
    /* more segments than layers: the flag's bad value (2) */
    if (o.ckpt_segments > 0)
        TRY_FLAG("", "--checkpoint-activations", "--checkpoint-activations",
                 ls_checkpoint_sequential(model, o.ckpt_segments, &model));
    if (o.tf.init_from) TRY("--init-from", ls_model_load(comm, ctx, o.tf.init_from, model));
    TRY("--ema", ex_ema_create(&o.tf, ctx, model, &ema));
    ls_optim_config oc = ls_optim_defaults(kind);
    if (o.lr >= 0)
        oc.lr = (float)o.lr;
    else if (kind == LS_OPTIM_SGD)
        oc.lr = 0.05f;
    if (o.weight_decay >= 0) oc.weight_decay = (float)o.weight_decay;
    ex_train_flags_optim(&o.tf, rank, world, &oc);
    USAGE(bad_flag, ex_train_flags_check_optim(&o.tf, &oc, o.lr >= 0, o.weight_decay >= 0, &bad_flag));
    if (kind == LS_OPTIM_SGD) oc.momentum = (float)o.momentum;
    int np = ls_module_num_params(model);
    ls_tensor *params[16], *grads[16];
    for (int i = 0; i < np; i++) {
        params[i] = ls_module_param(model, i);
        grads[i] = ls_module_grad(model, i);
    }
    TRY("optimizer", ls_optimizer_create(ctx, np, params, grads, &oc, &opt));

    TRY("sampler", ls_sampler_create(train->n, rank, world, o.seed, 1, mode, &sampler));
    TRY("test sampler", ls_sampler_create(test->n, rank, world, 0, 0, LS_SAMPLER_EXACT, &test_sampler));
    int64_t per_step = o.batch * o.accum;
    int64_t steps = ls_sampler_steps(sampler, per_step);
    USAGE("--batch-size", ex_check_steps(sampler, steps, per_step)); /* alike on every rank: no abort */
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    ex_train_flags_train(&o.tf, lr_kind, &tc);
    tc.batch_per_rank = o.batch;
    tc.accum_steps = o.accum;
    tc.lr.base_lr = oc.lr;
    tc.lr.warmup_steps = o.warmup;
    tc.lr.total_steps = steps * o.epochs;
    tc.clip_grad_norm = o.clip;
    tc.precision = precision;
    tc.buckets.first_bucket_bytes = 0; /* defaults / environment */
    tc.buckets.bucket_bytes = 0;
    tc.totals = 1; /* the epoch's loss and accuracy: read once, at its end */
    TRY_ALL("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &trainer));
    char hint[512];
    ex_step_oom_hint(hint, sizeof hint, o.batch, -1, precision, o.ckpt_segments > 0, "--hidden");
    ls_allocator_set_oom_hint(ctx->alloc, hint);
    if (ema) TRY("--ema", ls_ema_reset(ema)); /* from rank 0's weights, as the model */

    char devname[32];
    if (rank == 0)
        printf("fashion_mlp: %d rank%s, device %s, communicator %s, %lld parameters, %lld train / %lld test "
               "samples, batch %lld per rank x %d accumulation x %d ranks, %lld step%s per epoch\n",
               world, world == 1 ? "" : "s", ls_device_str(dev, devname, sizeof devname), ls_comm_backend_name(comm),
               (long long)ls_module_num_elements(model), (long long)train->n, (long long)test->n, (long long)o.batch,
               o.accum, world, (long long)steps, steps == 1 ? "" : "s");
    if (rank == 0) ex_print_shard("fashion_mlp", opt, trainer, world);
    fflush(stdout);

    int64_t start_epoch, start_j;
    ck.ema = ema;
    ck.dropout = o.dropout;
    TRY_AGREED(ck.what,
               ex_ckpt_begin(&ck, comm, ctx, model, opt, trainer, &tc, &oc, o.seed, steps, &start_epoch, &start_j),
               ck.agreed);
    TRY("--metrics", ex_metrics_open(&metrics, comm, o.metrics, ck.last_saved, ck.step_log, o.ck.dump_params));
    int progress = 0;
    TRY("--progress", ex_progress_decide(comm, o.progress, &progress));
    ck.progress = progress && rank == 0;
    TRY("indices", ex_batcher_init(&bt, per_step));
    test_idx = malloc((size_t)(ls_sampler_num_samples(test_sampler) + 1) * sizeof *test_idx);
    if (!test_idx) TRY("indices", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for batch indices"));
    int64_t test_count = 0, tc_global = 0;
    TRY("test shard",
        ls_sampler_batch(test_sampler, 0, ls_sampler_num_samples(test_sampler) + 1, test_idx, &test_count, &tc_global));

    if (start_epoch >= o.epochs || ex_ckpt_done(&ck)) { /* a finished checkpoint, --epochs 0: evaluate */
        double ev[3];
        TRY("evaluation", evaluate(trainer, comm, test, test_idx, test_count, ev));
        if (rank == 0) ex_print_nothing_to_train("fashion_mlp", o.epochs, start_epoch, ck.step, ev);
        if (ema) TRY("evaluation", evaluate_ema(ema, trainer, comm, test, test_idx, test_count, ev));
        if (ema && rank == 0) ex_print_ema(ema, ev);
    }
    ex_gpu_monitor_restart(gpumon); /* the epochs' figures, not the setup's */
    for (int64_t epoch = start_epoch; epoch < o.epochs && !ck.max_reached; epoch++) {
        TRY("sampler", ls_sampler_set_epoch(sampler, epoch));
        ex_batcher_epoch(&bt);
        ls_allocator_reset_peak(ctx->alloc); /* the epoch line's peak is the epoch's, as fashion_resnet's */
        double t0 = ex_now_s();
        int64_t seen = 0;
        ls_train_totals tot;
        /* resumed within this epoch: its train figures are of the steps from there on (and to
         * --max-steps: ex_epoch_part says so) */
        const int64_t j0 = epoch == start_epoch ? start_j : 0;
        int64_t j_end = j0;
        for (int64_t j = j0; j < steps && !ex_ckpt_done(&ck); j++) {
            j_end = j + 1;
            int64_t count, global;
            ls_step_stats st;
            int sig;
            double ts = ex_now_s();
            /* without a per-step loss to write, a step does not wait for the device (the totals do) */
            memset(&st, 0, sizeof st);
            int read = metrics.on || ck.log_steps_on; /* rank 0's choice: every rank's loss counts */
            TRY("batch", ex_batcher_step(&bt, sampler, trainer, train, j, steps, per_step, &idx, &count, &global));
            TRY("training step", ls_trainer_step(trainer, train, idx, count, global, read ? &st : NULL));
            if (ema) TRY("--ema", ls_ema_update(ema));
            TRY("--metrics",
                ex_ckpt_step_file_failed(&ck, "--metrics",
                                         ex_metrics_step(&metrics, comm, ctx->alloc, ls_trainer_num_steps(trainer),
                                                         epoch, &st, ex_now_s() - ts, o.clip > 0)));
            seen += global;
            TRY_AGREED(ck.what, ex_ckpt_after_step(&ck, &st, global, j + 1 == steps, &sig), ck.agreed);
            if (sig) {
                rc = 128 + sig;
                goto done;
            }
            if (progress && (j % 20 == 0 || j + 1 == steps))
                TRY("progress", ex_progress(trainer, comm, epoch, j, steps, seen, ex_now_s() - t0));
        }
        TRY("metrics", ls_trainer_totals(trainer, &tot, 1));
        double m[3] = {tot.loss_sum, (double)tot.correct, (double)tot.samples};
        if (ck.max_reached && seen == 0) break;
        double train_time = ex_now_s() - t0;
        if (ck.progress) ex_progress_clear();
        double ev[3];
        TRY("evaluation", evaluate(trainer, comm, test, test_idx, test_count, ev));
        TRY("metrics", ls_comm_allreduce_host(comm, m, 3, LS_F64, LS_REDUCE_SUM));
        ls_memory_stats ms;
        ls_allocator_stats(ctx->alloc, &ms);
        double peak = (double)ms.peak_bytes;
        TRY("metrics", ls_comm_allreduce_host(comm, &peak, 1, LS_F64, LS_REDUCE_MAX));
        if (rank == 0) {
            char pk[32];
            char part[128];
            ex_epoch_part(part, sizeof part, j0, j_end, steps);
            char tl[EX_LOSS_TEXT], vl[EX_LOSS_TEXT];
            printf("epoch %d  train loss %s  train acc %.2f%%  test loss %s  test acc %.2f%%  "
                   "%.0f samples/s  %.2f s  peak memory %s%s",
                   (int)epoch + 1, ex_loss_text(m[0] / m[2], tl), 100.0 * m[1] / m[2], ex_loss_text(ev[0] / ev[2], vl),
                   100.0 * ev[1] / ev[2], (double)seen / train_time, train_time,
                   ls_memory_format((size_t)peak, pk, sizeof pk), part);
            /* the same on every rank: a step is skipped on all of them */
            ex_skipped_note(tot.skipped, j_end - j0);
            ex_diverged_hint("fashion_mlp", m[0] / m[2], o.clip);
            fflush(stdout);
        }
        if (ema) TRY("evaluation", evaluate_ema(ema, trainer, comm, test, test_idx, test_count, ev));
        if (ema && rank == 0) ex_print_ema(ema, ev);
        /* the GPUs over the epoch, evaluation included (every rank takes part) */
        TRY("GPU figures", ex_gpu_monitor_report(gpumon, comm, rank));
        fflush(stdout);
    }
    TRY_AGREED(ck.what, ex_ckpt_end(&ck), ck.agreed);

done:
    ls_gpu_monitor_stop(gpumon);
    ex_metrics_close(&metrics);
    ex_batcher_free(&bt);
    free(test_idx);
    ls_trainer_destroy(trainer);
    ls_ema_destroy(ema);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_sampler_destroy(sampler);
    ls_sampler_destroy(test_sampler);
    ls_dataset_destroy(train);
    ls_dataset_destroy(test);
    ex_ckpt_close(&ck);
    if (rc == 1 && !all_failed && comm && ls_comm_world(comm) > 1) ls_comm_abort(comm, "fashion_mlp failed");
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return ex_exit_status("fashion_mlp", rc);
}
