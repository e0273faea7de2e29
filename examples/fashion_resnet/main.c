/* fashion_resnet: trains a small ResNet (conv3x3 stem, BasicBlock stages with stride-2
 * downsampling, global average pooling, linear) on Fashion-MNIST, data-parallel when started by
 * lockstep-run (one rank per GPU, or per CPU slot), on the CPU where no GPU is usable. Mixed
 * precision (--precision), activation checkpointing (--checkpoint-activations) and a memory-fitted
 * batch (--batch-size auto, within --memory-cap) are flags. Prints per-epoch loss, test accuracy,
 * samples/s and peak memory. --batch-size is per rank (DDP's convention). Checkpoints (weights,
 * BatchNorm's running statistics, optimizer, schedule, loss scaler, position in the epoch) every
 * --save-every steps and on SIGTERM/SIGINT; --resume continues from one, bitwise with the same ranks
 * and batch: --augment's shifts and flips are drawn per (seed, epoch, sample), so they continue too. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amp.h"
#include "autobatch.h"
#include "cnn.h"
#include "comm.h"
#include "data.h"
#include "device.h"
#include "log.h"
#include "nn.h"
#include "optim.h"
#include "rng.h"
#include "train.h"

#define EX_PROG "fashion_resnet"
#include "example_ckpt.h"
#include "example_cli.h"

typedef struct options {
    int epochs;
    int64_t batch; /* 0: auto */
    int64_t train_limit, test_limit;
    int accum;
    const char *optimizer, *widths, *precision, *memory_cap;
    double lr, weight_decay, momentum, clip, dropout;
    int momentum_given; /* --momentum: SGD's, refused with AdamW */
    int64_t warmup;
    ex_train_flags tf; /* the flags both examples share (example_cli.h) */
    int blocks, ckpt_segments, sync_bn, augment, freeze_backbone;
    uint64_t seed;
    const char *data_dir, *device, *comm, *metrics;
    int progress;       /* -1 auto */
    ex_ckpt_options ck; /* --max-steps, --save-every, --checkpoint-dir, --keep-last, --resume, ... */
} options;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: fashion_resnet [options]\n"
        "Trains a small ResNet on Fashion-MNIST (data-parallel under lockstep-run).\n\n"
        "  --epochs N            epochs (default 5); with nothing left to train (0, a finished checkpoint,\n"
        "                        --max-steps reached) the model is evaluated on the test set as it is\n"
        "  --batch-size N|auto   samples per rank per micro-step (default 64); auto: the largest batch\n"
        "                        whose training step and evaluation fit the memory cap with 10%% headroom,\n"
        "                        found by trials (doubling, then bisection), the minimum over ranks;\n"
        "                        found again on --resume: where it differs from the checkpoint's batch,\n"
        "                        the run says whether that one fits (give it to continue bitwise); on the\n"
        "                        CPU the cap must be within the host's memory, shared by its ranks\n"
        "  --memory-cap SIZE     cap on the device memory lockstep allocates, e.g. 2GiB (default\n"
        "                        $LOCKSTEP_MEMORY_LIMIT on the CPU, LOCKSTEP_GPU_MEMORY's limit:SIZE on a\n"
        "                        GPU, else none)\n"
        "  --accum-steps N       micro-steps per optimizer step, gradients accumulated (default 1); a\n"
        "                        step's gradient is the mean over all its samples on every rank (a\n"
        "                        short last batch weighs each of its samples as a full one does)\n"
        "  --optimizer sgd|adamw optimizer (default sgd: momentum 0.9, nesterov)\n"
        "  --lr X                peak learning rate (default 0.1 for sgd, 0.002 for adamw)\n"
        "  --momentum X          SGD momentum (default 0.9)\n"
        "  --betas B1,B2         AdamW's betas (default 0.9,0.999)\n"
        "  --eps X               AdamW's epsilon, above 0 (default 1e-8)\n"
        "  --weight-decay X      weight decay (default 5e-4 for sgd, 0.05 for adamw)\n"
        "  --no-decay-1d         no weight decay on biases and batch norm's scale and shift (1-D\n"
        "                        parameters), as timm and nanoGPT group them (default: every parameter\n"
        "                        decays, as torch.optim)\n"
        "  --warmup-steps N      linear warmup before the decay: step s < N takes lr x (s+1)/N, so none\n"
        "                        trains at 0 (default 200)\n"
        "  --lr-schedule S       after the warmup: cosine (default) or linear decay toward --min-lr,\n"
        "                        reached at step T = epochs x steps an epoch, one past the last step\n"
        "                        trained (as Hugging Face's get_cosine/linear_schedule_with_warmup,\n"
        "                        whose warmup starts at 0), or constant\n"
        "  --min-lr X            the learning rate the decay tends to, at most --lr (default 0)\n"
        "  --clip-grad-norm X    clip the global gradient norm to X (default off)\n"
        "  --label-smoothing X   cross-entropy's label smoothing in [0, 1), as torch.nn.CrossEntropyLoss's\n"
        "                        (default 0); the train loss printed is the smoothed one, the test loss\n"
        "                        the plain cross-entropy\n"
        "  --widths A,B,...      channels of each stage; stages after the first halve the resolution\n"
        "                        (default 32,64,128)\n"
        "  --blocks N            BasicBlocks per stage (default 1)\n"
        "  --dropout P           dropout before the classifier, P in [0, 1) (default 0), as timm's\n"
        "                        drop_rate; its masks are drawn per sample and step (the same after a\n"
        "                        resume and in a recomputed forward)\n"
        "  --precision P         fp32 (default), bf16 or fp16: f16/bf16 activations with f32 master\n"
        "                        weights; fp16 adds dynamic loss scaling\n"
        "  --checkpoint-activations[=N]  recompute activations in backward: the top-level layers split\n"
        "                        into N segments (default 3) whose inner activations are not kept,\n"
        "                        but the last's (its backward follows at once: PyTorch's rule)\n" EX_TRAIN_HELP_SHARD
            EX_TRAIN_HELP_EMA
        "  --sync-bn             batch-norm statistics over all ranks (SyncBatchNorm) instead of per rank\n"
        "  --augment             random shifts (up to 2 pixels) and horizontal flips of the training images\n"
        "                        (default off: with 5 epochs the model underfits rather than overfits)\n"
        "  --init-from FILE      start from the weights in FILE, a safetensors file: a checkpoint's\n"
        "                        model.safetensors or ema.safetensors, or a PyTorch state_dict of the\n"
        "                        same names and shapes (f32, f16, bf16 or f64); a checkpoint resumed\n"
        "                        replaces them\n"
        "  --freeze-backbone     fine-tuning: train the classifier (the last Linear) alone, every other\n"
        "                        layer frozen: no gradient computed or all-reduced for it, as PyTorch's\n"
        "                        requires_grad_(False); batch norm's statistics still update (a\n"
        "                        checkpoint saved with it resumes only with it)\n"
        "  --seed N              seed for initialization, shuffling and augmentation (default 42)\n"
        "  --train-limit N       use only the first N training samples (default all 60000)\n"
        "  --test-limit N        use only the first N test samples (default all 10000)\n"
        "  --data-dir DIR        Fashion-MNIST files, .gz or not (default $LOCKSTEP_FASHION_DIR or\n"
        "                        /usr/share/datasets/fashion-mnist)\n"
        "  --device D            cpu, cuda or cuda:N (default $LOCKSTEP_DEVICE, else GPU when usable)\n"
        "  --comm B              self, mpi or nccl (default $LOCKSTEP_COMM, else automatic)\n"
        "  --dump-params FILE    after training, rank 0 writes all parameters, then BatchNorm's running\n"
        "                        statistics, as raw f32\n" EX_CKPT_HELP_FLAGS
        "  --progress / --no-progress  progress line on rank 0: the epoch's mean loss so far over\n"
        "                        the ranks and samples/s (default: when stderr is a terminal, or\n"
        "                        lockstep-run's, rank 0's being its pipe: LOCKSTEP_STDERR_TTY=1)\n"
        "  -h, --help            this text\n\n" EX_CKPT_HELP_CONTENTS
        "model.safetensors also holds BatchNorm's running statistics (rank 0's, which evaluation\n"
        "uses); --augment's shifts and flips are drawn per seed, epoch and sample, so a resumed run\n"
        "continues them.\n\n" EX_CKPT_HELP_PREEMPTION "\n" EX_HELP_SAME_OPTIONS(
            ", --memory-cap (--batch-size auto takes the smallest batch that fits\nevery rank)") "\n" EX_CKPT_HELP_ENV);
}

static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 5;
    o->batch = 64;
    o->accum = 1;
    o->optimizer = "sgd";
    o->lr = -1;
    o->weight_decay = -1;
    o->momentum = 0.9;
    o->warmup = 200;
    ex_train_flags_init(&o->tf);
    o->widths = "32,64,128";
    o->blocks = 1;
    o->precision = "fp32";
    o->seed = 42;
    o->progress = -1;
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
                                             {"widths", required_argument, 0, 'H'},
                                             {"blocks", required_argument, 0, 'B'},
                                             {"dropout", required_argument, 0, 1100},
                                             {"precision", required_argument, 0, 'P'},
                                             {"checkpoint-activations", optional_argument, 0, 'K'},
                                             {"sync-bn", no_argument, 0, 'Y'},
                                             {"augment", no_argument, 0, 'G'},
                                             {"freeze-backbone", no_argument, 0, 1101},
                                             {"memory-cap", required_argument, 0, 'M'},
                                             {"seed", required_argument, 0, 's'},
                                             {"train-limit", required_argument, 0, 'T'},
                                             {"test-limit", required_argument, 0, 't'},
                                             {"data-dir", required_argument, 0, 'd'},
                                             {"device", required_argument, 0, 'D'},
                                             {"comm", required_argument, 0, 'C'},
                                             {"progress", no_argument, 0, 'p'},
                                             {"no-progress", no_argument, 0, 'N'},
                                             {"metrics", required_argument, 0, 'J'},
                                             {"help", no_argument, 0, 'h'},
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
            if (strcmp(optarg, "auto") == 0)
                o->batch = 0;
            else if (parse_i64("--batch-size", optarg, 1, EX_MAX_BATCH, &o->batch))
                return -1;
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
        case 'H': o->widths = optarg; break;
        case 'B':
            if (parse_i64("--blocks", optarg, 1, EX_MAX_BLOCKS, &v)) return -1;
            o->blocks = (int)v;
            break;
        case 'P': o->precision = optarg; break;
        case 1100:
            if (ex_parse_fraction_f32(EX_PROG, "--dropout", optarg, &o->dropout)) return -1;
            break;
        case 'K':
            o->ckpt_segments = 3;
            if (optarg && parse_i64("--checkpoint-activations", optarg, 1, EX_MAX_SEGMENTS, &v)) return -1;
            if (optarg) o->ckpt_segments = (int)v;
            break;
        case 'Y': o->sync_bn = 1; break;
        case 'G': o->augment = 1; break;
        case 1101: o->freeze_backbone = 1; break;
        case 'M': o->memory_cap = optarg; break;
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
        case 'd': STR_OPT("--data-dir", o->data_dir); break;
        case 'D': STR_OPT("--device", o->device); break;
        case 'C': STR_OPT("--comm", o->comm); break;
        case 'J': STR_OPT("--metrics", o->metrics); break;
        case 'p': o->progress = 1; break;
        case 'N': o->progress = 0; break;
        case 'h': usage(stdout); exit(ex_exit_status("fashion_resnet", 0));
        default: /* getopt said what was wrong; 120 lines of help per rank buried it */
            fprintf(stderr, "Try 'fashion_resnet --help' for the options.\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fashion_resnet: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return ex_ckpt_options_check(EX_PROG, &o->ck);
}

/* Random shifts by up to 2 pixels (the border filled with the background, pixel 0) and
 * horizontal flips, drawn per (seed, epoch, sample): the same on every rank. Both sets keep the
 * pixels as bytes (ls_fashion_mnist_load). */
static void augment(const ls_dataset *src, ls_dataset *dst, uint64_t seed, int64_t epoch) {
    const int64_t H = src->rows, W = src->cols;
    const uint8_t bg = 0;
    for (int64_t i = 0; i < src->n; i++) {
        ls_rng r;
        ls_rng_init_stream(&r, seed ^ 0xa5a5a5a5ull, (uint64_t)epoch * 1000003ull + (uint64_t)i);
        int dy = (int)ls_rng_below(&r, 5) - 2, dx = (int)ls_rng_below(&r, 5) - 2, flip = (int)ls_rng_below(&r, 2);
        const uint8_t *in = src->bytes + i * H * W;
        uint8_t *out = dst->bytes + i * H * W;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int64_t sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
                out[y * W + x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? in[sy * W + sx] : bg;
            }
    }
}

/* ev = test loss sum, correct, count over every rank's shard of the test set: with rank 0's running
 * statistics (DDP's broadcast_buffers), in eval mode, in pieces no larger than a training step so
 * that evaluation fits wherever training did. */
static ls_status evaluate(ls_trainer *trainer, ls_comm *comm, ls_module *model, const ls_dataset *test,
                          const int64_t *idx, int64_t count, int64_t piece, double ev[3]) {
    LS_CHECK(ls_cnn_broadcast_buffers(comm, model));
    ls_module_set_training(model, 0);
    ls_cnn_release_activations(model);
    ev[0] = ev[1] = 0;
    ev[2] = (double)count;
    ls_status s = LS_OK;
    for (int64_t lo = 0; lo < count && s == LS_OK; lo += piece) {
        int64_t n = count - lo < piece ? count - lo : piece, correct = 0;
        double loss_sum = 0;
        s = ls_trainer_evaluate(trainer, test, idx + lo, n, &loss_sum, &correct);
        ev[0] += loss_sum;
        ev[1] += (double)correct;
    }
    ls_module_set_training(model, 1);
    ls_cnn_release_activations(model);
    LS_CHECK(s);
    return ls_comm_allreduce_host(comm, ev, 3, LS_F64, LS_REDUCE_SUM);
}

/* The same for the EMA of the weights (--ema), swapped into the model for it (its buffers too: rank
 * 0's are broadcast, as the model's). */
static ls_status evaluate_ema(ls_ema *ema, ls_trainer *trainer, ls_comm *comm, ls_module *model, const ls_dataset *test,
                              const int64_t *idx, int64_t count, int64_t piece, double ev[3]) {
    LS_CHECK(ls_ema_swap(ema));
    ls_status s = evaluate(trainer, comm, model, test, idx, count, piece, ev);
    ls_status back = ls_ema_swap(ema);
    return s != LS_OK ? s : back;
}

/* The flags every rank must be given alike (ex_check_same_options; --checkpoint-dir, --keep-last,
 * --log-steps, --metrics, --dump-params and --progress are rank 0's concern, --device, --data-dir
 * and --memory-cap may differ per rank: --batch-size auto takes the smallest batch that fits). */
static ls_status check_same_options(ls_comm *comm, const options *o, const ls_dataset *train, const ls_dataset *test,
                                    ex_ckpt *record) {
    ls_setting set[EX_SAME_COMMON_N + 5 + EX_SAME_EXTRA];
    char seed[24];
    int n = 0;
    EX_SAME_COMMON(set, n, o, seed);
    set[n++] = ls_setting_str("--widths", o->widths);
    set[n++] = ls_setting_num("--blocks", o->blocks);
    set[n++] = ls_setting_flag("--sync-bn", o->sync_bn);
    set[n++] = ls_setting_flag("--augment", o->augment);
    set[n++] = ls_setting_flag("--freeze-backbone", o->freeze_backbone);
    return ex_check_same_options(comm, set, n, &o->tf, &o->ck, train, test, record);
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
    ls_dataset *train = NULL, *test = NULL, *aug = NULL;
    ls_sampler *sampler = NULL, *test_sampler = NULL;
    ls_module *model = NULL;
    ls_optimizer *opt = NULL;
    ls_trainer *trainer = NULL;
    ls_ema *ema = NULL;
    int64_t *idx = NULL, *test_idx = NULL;
    ex_batcher bt = {{NULL, NULL}, 0, -1, 0, 0};
    ex_metrics metrics = {NULL, NULL, 0};
    ls_gpu_monitor *gpumon = NULL;
    ls_tensor **params = NULL, **grads = NULL;
    ex_ckpt ck;
    ex_ckpt_init(&ck, EX_PROG, &o.ck);

    ls_optim_kind kind;
    ls_precision precision;
    ls_resnet_config rcfg;
    memset(&rcfg, 0, sizeof rcfg);
    USAGE("--optimizer", ls_optim_kind_parse(o.optimizer, &kind));
    ls_lr_kind lr_kind;
    const char *bad_flag = "";
    USAGE(bad_flag, ex_train_flags_check(&o.tf, kind, &lr_kind, &bad_flag));
    if (o.momentum_given && kind != LS_OPTIM_SGD) /* AdamW took no momentum and said nothing */
        USAGE("--momentum", ls_error(LS_ERR_INVALID_ARGUMENT, "momentum is SGD's (AdamW's is --betas' first): add "
                                                              "--optimizer sgd"));
    USAGE("--precision", ls_precision_parse(o.precision, &precision));
    USAGE("--widths", ex_parse_widths(o.widths, &rcfg));

    size_t flag_cap = 0;
    if (o.memory_cap) {
        USAGE("--memory-cap", ls_memory_parse_cap(o.memory_cap, &flag_cap));
        unsetenv("LOCKSTEP_MEMORY_LIMIT"); /* the flag wins: a bad value there stopped the flag's run */
    }

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
    if (o.memory_cap) {
        char from[160];
        snprintf(from, sizeof from, "--memory-cap %.140s", o.memory_cap);
        ls_allocator_set_cap_from(ctx->alloc, flag_cap, from);
    }
    /* until the training's buffers: what is allocated does not depend on the batch */
    ls_allocator_set_oom_hint(ctx->alloc, "The model (its weights, gradients and optimizer state) does not fit "
                                          "whatever the batch: a larger cap, or a smaller model (--widths, --blocks)");

    TRY("training data", ls_fashion_mnist_load(o.data_dir, 1, o.train_limit, &train));
    TRY("test data", ls_fashion_mnist_load(o.data_dir, 0, o.test_limit, &test));
    TRY("data", ex_check_fashion_shape(train, test));
    TRY_ALL("options", check_same_options(comm, &o, train, test, &ck));
    if (o.augment) {
        TRY("augmentation", ls_dataset_from_bytes(train->n, train->features, train->num_classes, train->bytes,
                                                  train->lut, train->labels, &aug));
        aug->rows = train->rows;
        aug->cols = train->cols;
    }
    rcfg.param_dtype = LS_F32;
    rcfg.act_dtype = ls_precision_dtype(precision);
    rcfg.in_channels = 1;
    rcfg.in_h = train->rows;
    rcfg.in_w = train->cols;
    rcfg.blocks = o.blocks;
    rcfg.num_classes = 10;
    rcfg.seed = o.seed;
    /* on 1 rank too (a no-op there): the model, its layers as a checkpoint records them, is the same
     * on any number of ranks, so a resume on another world size finds the model it saved */
    rcfg.sync_bn = o.sync_bn ? comm : NULL;
    rcfg.dropout = (float)o.dropout;
    TRY("model", ls_resnet_create(ctx, &rcfg, &model));
    /* more segments than layers: the flag's bad value (2) */
    if (o.ckpt_segments > 0)
        TRY_FLAG("", "--checkpoint-activations", "--checkpoint-activations",
                 ls_checkpoint_sequential(model, o.ckpt_segments, &model));
    if (o.tf.init_from) TRY("--init-from", ls_model_load(comm, ctx, o.tf.init_from, model));
    TRY("--ema", ex_ema_create(&o.tf, ctx, model, &ema)); /* before --batch-size auto: its trials count it */

    ls_optim_config oc = ls_optim_defaults(kind);
    oc.lr = (float)(o.lr >= 0 ? o.lr : kind == LS_OPTIM_SGD ? 0.1 : 0.002);
    oc.weight_decay = (float)(o.weight_decay >= 0 ? o.weight_decay : kind == LS_OPTIM_SGD ? 5e-4 : 0.05);
    ex_train_flags_optim(&o.tf, rank, world, &oc);
    USAGE(bad_flag, ex_train_flags_check_optim(&o.tf, &oc, o.lr >= 0, o.weight_decay >= 0, &bad_flag));
    if (kind == LS_OPTIM_SGD) {
        oc.momentum = (float)o.momentum;
        oc.nesterov = o.momentum > 0;
    }
    int np = ls_module_num_params(model), n_opt = 0;
    if (o.freeze_backbone) { /* all but the classifier, the model's last two parameters */
        TRY("--freeze-backbone", ls_module_set_requires_grad(model, -1, 0));
        for (int i = np - 2; i < np; i++) TRY("--freeze-backbone", ls_module_set_requires_grad(model, i, 1));
    }
    params = calloc((size_t)np, sizeof *params);
    grads = calloc((size_t)np, sizeof *grads);
    if (!params || !grads) TRY("parameters", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the parameter list"));
    for (int i = 0; i < np; i++) /* a frozen parameter is not the optimizer's */
        if (ls_module_requires_grad(model, i)) {
            params[n_opt] = ls_module_param(model, i);
            grads[n_opt++] = ls_module_grad(model, i);
        }
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    ex_train_flags_train(&o.tf, lr_kind, &tc);
    tc.accum_steps = o.accum;
    tc.clip_grad_norm = o.clip;
    tc.precision = precision;
    tc.buckets.first_bucket_bytes = 0; /* defaults / environment */
    tc.buckets.bucket_bytes = 0;
    TRY("sampler", ls_sampler_create(train->n, rank, world, o.seed, 1, LS_SAMPLER_PAD, &sampler));
    TRY("test sampler", ls_sampler_create(test->n, rank, world, 0, 0, LS_SAMPLER_EXACT, &test_sampler));

    const int batch_auto = o.batch == 0;
    if (batch_auto) { /* --batch-size auto */
        ls_batch_search_config bs = {1, (ls_sampler_num_samples(sampler) + o.accum - 1) / o.accum, 0.10};
        ls_batch_search_result br;
        ls_trainer_trial trial = {ctx, comm, model, &oc, &tc, train, test};
        if (bs.max > 1) bs.start = bs.max < 16 ? 1 : 16;
        /* what a trial's out-of-memory error says: the model fit (a batch of 1 that does not is
         * reported as such, with the remedies but a smaller batch) */
        char search_hint[512];
        ex_step_oom_hint(search_hint, sizeof search_hint, 1, 1, precision, o.ckpt_segments > 0, "--widths, --blocks");
        ls_allocator_set_oom_hint(ctx->alloc, search_hint);
        /* no cap (on any rank: the search agrees on it): bad usage (exit 2), as a missing flag. Out
         * of memory (no batch fits, or no room beside the model) is agreed too: every rank says so
         * and exits 1 without ls_comm_abort (TRY_ALL), whose kill could stop the rank whose cap ran
         * out before it printed what ran out (the others only know it was another rank) */
        ls_status searched = ls_batch_size_search(ctx->alloc, comm, &bs, ls_trainer_trial_step, &trial, &br);
        all_failed = searched == LS_ERR_OUT_OF_MEMORY;
        TRY_FLAG("auto", "--batch-size auto", "--batch-size auto", searched);
        o.batch = br.batch;
        if (rank == 0) {
            char a[32], b[32], l[32], who[48] = "", all[128] = "";
            if (br.cap_rank >= 0) snprintf(who, sizeof who, " (rank %d's, the smallest)", br.cap_rank);
            /* the largest batch the data allows: with accumulation a step's micro-batches take them all
             * (3 x 8 of 20 was "3 per rank, all of a rank's training samples") */
            if (br.batch == bs.max && o.accum > 1)
                snprintf(all, sizeof all, ", x %d accumulation: a step takes all of a rank's %lld training samples",
                         o.accum, (long long)ls_sampler_num_samples(sampler));
            else if (br.batch == bs.max)
                snprintf(all, sizeof all, ", all of a rank's training samples");
            printf("batch-size auto: %lld per rank%s (peak %s of the %s cap%s, limit %s with 10%% headroom); trials:",
                   (long long)br.batch, all, ls_memory_format(br.peak_bytes, a, 32),
                   ls_memory_format(br.cap_bytes, b, 32), who, ls_memory_format(br.limit_bytes, l, 32));
            for (int i = 0; i < br.trials; i++) {
                char pk[32];
                printf(" %lld %s (%s)%s", (long long)br.tried[i], br.fit[i] ? "fits" : "out of memory",
                       ls_memory_format(br.peak[i], pk, 32), i + 1 < br.trials ? "," : "\n");
            }
        }
    }
    tc.batch_per_rank = o.batch;
    int64_t per_step = o.batch * o.accum;
    int64_t steps = ls_sampler_steps(sampler, per_step);
    USAGE("--batch-size", ex_check_steps(sampler, steps, per_step)); /* alike on every rank: no abort */
    tc.lr.base_lr = oc.lr;
    tc.lr.warmup_steps = o.warmup;
    tc.lr.total_steps = steps * o.epochs;
    TRY("optimizer", ls_optimizer_create(ctx, n_opt, params, grads, &oc, &opt));
    tc.totals = 1; /* the epoch's loss and accuracy: read once, at its end */
    TRY_ALL("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &trainer));
    char hint[512];
    ex_step_oom_hint(hint, sizeof hint, o.batch, batch_auto, precision, o.ckpt_segments > 0, "--widths, --blocks");
    ls_allocator_set_oom_hint(ctx->alloc, hint);
    if (ema) TRY("--ema", ls_ema_reset(ema)); /* from rank 0's weights, as the model */

    char devname[32], widths[160] = "";
    for (int i = 0, n = 0; i < rcfg.n_stages && n < (int)sizeof widths; i++) /* as parsed: ' 4, 8' is 4,8 */
        n += snprintf(widths + n, sizeof widths - (size_t)n, "%s%lld", i ? "," : "", (long long)rcfg.widths[i]);
    if (rank == 0) {
        printf("fashion_resnet: %d rank%s, device %s, communicator %s, widths %s x %d block%s, %lld parameters, "
               "%s, %s%s%lld train / %lld test samples, batch %lld per rank x %d accumulation x %d ranks, %lld step%s "
               "per epoch\n",
               world, world == 1 ? "" : "s", ls_device_str(dev, devname, sizeof devname), ls_comm_backend_name(comm),
               widths, o.blocks, o.blocks == 1 ? "" : "s", (long long)ls_module_num_elements(model),
               ls_precision_name(precision), o.ckpt_segments ? "activation checkpointing, " : "",
               rcfg.sync_bn && world > 1 ? "synchronized batch norm, " : "", (long long)train->n, (long long)test->n,
               (long long)o.batch, o.accum, world, (long long)steps, steps == 1 ? "" : "s");
        if (o.ckpt_segments)
            printf("activation checkpointing: %d segment%s\n", o.ckpt_segments, o.ckpt_segments == 1 ? "" : "s");
    }
    if (rank == 0 && o.freeze_backbone) {
        int64_t trained = 0;
        for (int i = 0; i < n_opt; i++) trained += ls_tensor_numel(params[i]);
        printf("fashion_resnet: --freeze-backbone: %lld of the %lld parameters train (the classifier)\n",
               (long long)trained, (long long)ls_module_num_elements(model));
    }
    if (rank == 0) ex_print_shard("fashion_resnet", opt, trainer, world);
    fflush(stdout);

    int64_t start_epoch, start_j;
    ck.ema = ema;
    ck.dropout = o.dropout;
    ck.batch_auto = batch_auto;
    TRY_AGREED(ck.what,
               ex_ckpt_begin(&ck, comm, ctx, model, opt, trainer, &tc, &oc, o.seed, steps, &start_epoch, &start_j),
               ck.agreed);
    int progress = 0;
    TRY("--progress", ex_progress_decide(comm, o.progress, &progress));
    ck.progress = progress && rank == 0;
    TRY("--metrics", ex_metrics_open(&metrics, comm, o.metrics, ck.last_saved, ck.step_log, o.ck.dump_params));
    TRY("indices", ex_batcher_init(&bt, per_step));
    test_idx = malloc((size_t)(ls_sampler_num_samples(test_sampler) + 1) * sizeof *test_idx);
    if (!test_idx) TRY("indices", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for batch indices"));
    int64_t test_count = 0, tc_global = 0;
    TRY("test shard",
        ls_sampler_batch(test_sampler, 0, ls_sampler_num_samples(test_sampler) + 1, test_idx, &test_count, &tc_global));
    const int nothing_to_train = start_epoch >= o.epochs || ex_ckpt_done(&ck);
    if (nothing_to_train) { /* a finished checkpoint, --epochs 0: evaluate */
        double ev[3];
        TRY("evaluation", evaluate(trainer, comm, model, test, test_idx, test_count, per_step, ev));
        if (rank == 0) ex_print_nothing_to_train("fashion_resnet", o.epochs, start_epoch, ck.step, ev);
        if (ema) TRY("evaluation", evaluate_ema(ema, trainer, comm, model, test, test_idx, test_count, per_step, ev));
        if (ema && rank == 0) ex_print_ema(ema, ev);
    }
    ex_gpu_monitor_restart(gpumon); /* the epochs' figures, not the setup's */
    double total_time = 0;
    for (int64_t epoch = start_epoch; epoch < o.epochs && !ck.max_reached; epoch++) {
        TRY("sampler", ls_sampler_set_epoch(sampler, epoch));
        ex_batcher_epoch(&bt);
        if (aug) {
            augment(train, aug, o.seed, epoch);
            ls_dataset_changed(aug); /* a GPU trainer's device copy of it is stale */
        }
        const ls_dataset *data = aug ? aug : train;
        ls_allocator_reset_peak(ctx->alloc);
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
            TRY("batch", ex_batcher_step(&bt, sampler, trainer, data, j, steps, per_step, &idx, &count, &global));
            TRY("training step", ls_trainer_step(trainer, data, idx, count, global, read ? &st : NULL));
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
            if (progress && (j % 10 == 0 || j + 1 == steps))
                TRY("progress", ex_progress(trainer, comm, epoch, j, steps, seen, ex_now_s() - t0));
        }
        TRY("metrics", ls_trainer_totals(trainer, &tot, 1));
        double m[3] = {tot.loss_sum, (double)tot.correct, (double)tot.samples};
        int64_t skipped = tot.skipped;
        if (ck.max_reached && seen == 0) break;
        double train_time = ex_now_s() - t0;
        total_time += train_time;
        if (ck.progress) ex_progress_clear();
        double ev[3];
        TRY("evaluation", evaluate(trainer, comm, model, test, test_idx, test_count, per_step, ev));
        ls_memory_stats ms; /* the epoch's peak, its evaluation too (reset at its start, as fashion_mlp's) */
        ls_allocator_stats(ctx->alloc, &ms);
        double peak = (double)ms.peak_bytes;
        TRY("metrics", ls_comm_allreduce_host(comm, m, 3, LS_F64, LS_REDUCE_SUM));
        TRY("metrics", ls_comm_allreduce_host(comm, &peak, 1, LS_F64, LS_REDUCE_MAX));
        if (rank == 0) {
            char pk[32];
            char part[128];
            ex_epoch_part(part, sizeof part, j0, j_end, steps);
            char tl[EX_LOSS_TEXT], vl[EX_LOSS_TEXT];
            printf("epoch %d  train loss %s  train acc %.2f%%  test loss %s  test acc %.2f%%  "
                   "%.0f samples/s  %.1f s  peak memory %s%s",
                   (int)epoch + 1, ex_loss_text(m[0] / m[2], tl), 100.0 * m[1] / m[2], ex_loss_text(ev[0] / ev[2], vl),
                   100.0 * ev[1] / ev[2], (double)seen / train_time, train_time,
                   ls_memory_format((size_t)peak, pk, sizeof pk), part);
            ex_skipped_note(skipped, j_end - j0);
            ex_diverged_hint("fashion_resnet", m[0] / m[2], o.clip);
            fflush(stdout);
        }
        if (ema) TRY("evaluation", evaluate_ema(ema, trainer, comm, model, test, test_idx, test_count, per_step, ev));
        if (ema && rank == 0) ex_print_ema(ema, ev);
        /* the GPUs over the epoch, evaluation included (every rank takes part) */
        TRY("GPU figures", ex_gpu_monitor_report(gpumon, comm, rank));
        fflush(stdout);
    }
    if (rank == 0 && !nothing_to_train) printf("training time %.1f s\n", total_time);
    TRY_AGREED(ck.what, ex_ckpt_end(&ck), ck.agreed);

done:
    ls_gpu_monitor_stop(gpumon);
    ex_metrics_close(&metrics);
    ex_batcher_free(&bt);
    free(test_idx);
    free(params);
    free(grads);
    ls_trainer_destroy(trainer);
    ls_ema_destroy(ema);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_sampler_destroy(sampler);
    ls_sampler_destroy(test_sampler);
    ls_dataset_destroy(train);
    ls_dataset_destroy(test);
    ls_dataset_destroy(aug);
    ex_ckpt_close(&ck);
    if (rc == 1 && !all_failed && comm && ls_comm_world(comm) > 1) ls_comm_abort(comm, "fashion_resnet failed");
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return ex_exit_status("fashion_resnet", rc);
}
