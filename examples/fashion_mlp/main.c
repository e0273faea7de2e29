/* fashion_mlp: trains a 784-512-256-10 ReLU MLP on Fashion-MNIST, data-parallel when started by
 * lockstep-run (one rank per GPU, or per CPU slot), on the CPU where no GPU is usable. Prints
 * per-epoch loss, test accuracy, samples/s and peak memory; a progress line while an epoch
 * runs when stderr is a terminal. --batch-size is per rank (DDP's convention). Checkpoints every
 * --save-every steps and on SIGTERM/SIGINT; --resume continues from one. */
#include <getopt.h>
#include <signal.h>
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
#include "example_cli.h"

typedef struct options {
    int epochs;
    int64_t batch, train_limit, test_limit;
    int accum;
    const char *optimizer;
    double lr, weight_decay, momentum, clip;
    int64_t warmup;
    uint64_t seed;
    const char *data_dir, *device, *comm, *dump_params, *hidden, *activation, *sampler;
    int progress; /* -1 auto */
    const char *precision;
    int ckpt_segments; /* activation checkpointing: segments, 0 off */
    int64_t max_steps, save_every, keep_last;
    const char *checkpoint_dir, *resume, *log_steps, *metrics;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: fashion_mlp [options]\n"
            "Trains a 784-512-256-10 MLP on Fashion-MNIST (data-parallel under lockstep-run).\n\n"
            "  --epochs N            epochs (default 5)\n"
            "  --batch-size N        samples per rank per micro-step (default 128)\n"
            "  --accum-steps N       micro-steps per optimizer step, gradients accumulated (default 1)\n"
            "  --optimizer sgd|adamw optimizer (default sgd: momentum 0.9)\n"
            "  --lr X                peak learning rate (default 0.05 for sgd, 0.001 for adamw)\n"
            "  --momentum X          SGD momentum (default 0.9)\n"
            "  --weight-decay X      weight decay (default 0 for sgd, 0.01 for adamw)\n"
            "  --warmup-steps N      linear warmup steps before the cosine decay (default 100)\n"
            "  --clip-grad-norm X    clip the global gradient norm to X (default off; fp16: after unscaling)\n"
            "  --precision P         fp32 (default), bf16 or fp16: f16/bf16 activations and GEMM inputs with\n"
            "                        f32 master weights; fp16 adds dynamic loss scaling (GradScaler's rules)\n"
            "  --checkpoint-activations[=N]  recompute activations in backward: the layers split into N\n"
            "                        segments (default 2) whose inner activations are not kept\n"
            "  --hidden A,B,...      hidden layer sizes (default 512,256)\n"
            "  --activation relu|gelu (default relu)\n"
            "  --seed N              seed for initialization and shuffling (default 42)\n"
            "  --train-limit N       use only the first N training samples (default all 60000)\n"
            "  --test-limit N        use only the first N test samples (default all 10000)\n"
            "  --sampler pad|drop-last|exact  how uneven shards are handled (default pad, as DDP)\n"
            "  --data-dir DIR        Fashion-MNIST .gz files (default $LOCKSTEP_FASHION_DIR or\n"
            "                        /usr/share/datasets/fashion-mnist)\n"
            "  --device D            cpu, cuda or cuda:N (default $LOCKSTEP_DEVICE, else GPU when usable)\n"
            "  --comm B              self, mpi or nccl (default $LOCKSTEP_COMM, else automatic)\n"
            "  --dump-params FILE    after training, rank 0 writes all parameters as raw f32\n"
            "  --max-steps N         stop after N optimizer steps in all, resumed ones included (default: no limit)\n"
            "  --save-every N        write a checkpoint every N optimizer steps and at the end (default 0: only\n"
            "                        on SIGTERM/SIGINT)\n"
            "  --checkpoint-dir DIR  checkpoints go to DIR/step-NNNNNNNN/ (default ./checkpoints)\n"
            "  --keep-last K         keep the K newest checkpoints, remove older ones (default 3; 0 keeps all)\n"
            "  --resume auto|PATH    auto: continue from the newest valid checkpoint in --checkpoint-dir (start\n"
            "                        afresh when there is none); PATH: from that checkpoint directory\n"
            "  --log-steps FILE      rank 0 writes \"step loss\" per optimizer step (mean over the global batch,\n"
            "                        17 digits); on resume, lines past the resumed step are dropped, new ones appended\n"
            "  --metrics FILE        rank 0 writes one JSON object per optimizer step: loss, accuracy, lr, step time,\n"
            "                        samples/s, loss scale, memory (resumed like --log-steps)\n"
            "  --progress / --no-progress  progress line during an epoch (default: when stderr is a tty)\n"
            "  -h, --help            this text\n\n"
            "Checkpoints hold the weights (model.safetensors), the optimizer state (optimizer.safetensors),\n"
            "the step, schedule, sampler position and settings (state.json), checksummed by manifest.json;\n"
            "rank 0 writes them. Resuming with the same ranks and batch continues bitwise as if never\n"
            "stopped; with another world size or batch, from the next step boundary of the saved epoch.\n\n"
            "Preemption: on SIGTERM or SIGINT every rank finishes the current step, a checkpoint is written,\n"
            "\"received SIGTERM: finished step N, saved checkpoint DIR/step-0000000N; exiting\" is printed and\n"
            "the program exits with 128 + the signal number (143 for SIGTERM, 130 for SIGINT): run it again\n"
            "with --resume auto. A second signal stops at once. Under mpirun, signal the ranks (as Slurm\n"
            "does), not mpirun, which kills its ranks 1 s after forwarding a signal.\n"
            "Exit status: 0 done, 1 error, 2 bad usage, 130/143 stopped by a signal after a checkpoint.\n\n"
            "Environment: LOCKSTEP_LOG=error|warn|info|debug, LOCKSTEP_DEVICE, LOCKSTEP_COMM,\n"
            "LOCKSTEP_MEMORY_LIMIT (host memory cap, e.g. 2GiB), LOCKSTEP_FASHION_DIR,\n"
            "LOCKSTEP_DATA_ON_DEVICE=auto|on|off (keep the data set on the GPU, gather batches there),\n"
            "LOCKSTEP_PREFETCH=auto|on|off (batches copied from the host: the next one staged during a step),\n"
            "LOCKSTEP_GPU_MONITOR=MS|off (a GPU's use, power, temperature after each epoch; default 500 ms),\n"
            "LOCKSTEP_BUCKET_MB / LOCKSTEP_FIRST_BUCKET_MB (gradient bucket sizes, default 25 / 1),\n"
            "LOCKSTEP_CKPT_CRASH_AT=<stage> (tests: kill the process at that stage of a checkpoint save).\n");
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
    o->seed = 42;
    o->hidden = "512,256";
    o->activation = "relu";
    o->sampler = "pad";
    o->progress = -1;
    o->precision = "fp32";
    o->keep_last = 3;
    o->checkpoint_dir = "checkpoints";
    static const struct option longopts[] = {
        {"epochs", required_argument, 0, 'e'},        {"batch-size", required_argument, 0, 'b'},
        {"accum-steps", required_argument, 0, 'A'},   {"optimizer", required_argument, 0, 'o'},
        {"lr", required_argument, 0, 'l'},            {"momentum", required_argument, 0, 'm'},
        {"weight-decay", required_argument, 0, 'w'},  {"warmup-steps", required_argument, 0, 'W'},
        {"clip-grad-norm", required_argument, 0, 'c'}, {"precision", required_argument, 0, 1001},
        {"checkpoint-activations", optional_argument, 0, 1002}, {"hidden", required_argument, 0, 'H'},
        {"activation", required_argument, 0, 'a'},    {"seed", required_argument, 0, 's'},
        {"train-limit", required_argument, 0, 'T'},   {"test-limit", required_argument, 0, 't'},
        {"sampler", required_argument, 0, 'S'},       {"data-dir", required_argument, 0, 'd'},
        {"device", required_argument, 0, 'D'},        {"comm", required_argument, 0, 'C'},
        {"dump-params", required_argument, 0, 'P'},   {"progress", no_argument, 0, 'p'},
        {"no-progress", no_argument, 0, 'N'},         {"help", no_argument, 0, 'h'},
        {"max-steps", required_argument, 0, 'M'},     {"save-every", required_argument, 0, 'V'},
        {"checkpoint-dir", required_argument, 0, 'K'}, {"keep-last", required_argument, 0, 'L'},
        {"resume", required_argument, 0, 'R'},        {"log-steps", required_argument, 0, 'G'},
        {"metrics", required_argument, 0, 'J'},
        {0, 0, 0, 0}};
    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'e': if (parse_i64("--epochs", optarg, 0, &v)) return -1; o->epochs = (int)v; break;
        case 'b': if (parse_i64("--batch-size", optarg, 1, &o->batch)) return -1; break;
        case 'A': if (parse_i64("--accum-steps", optarg, 1, &v)) return -1; o->accum = (int)v; break;
        case 'o': o->optimizer = optarg; break;
        case 'l': if (parse_f64("--lr", optarg, &o->lr)) return -1; break;
        case 'm': if (parse_f64("--momentum", optarg, &o->momentum)) return -1; break;
        case 'w': if (parse_f64("--weight-decay", optarg, &o->weight_decay)) return -1; break;
        case 'W': if (parse_i64("--warmup-steps", optarg, 0, &o->warmup)) return -1; break;
        case 'c': if (parse_f64("--clip-grad-norm", optarg, &o->clip)) return -1; break;
        case 1001: o->precision = optarg; break;
        case 1002:
            o->ckpt_segments = 2;
            if (optarg && parse_i64("--checkpoint-activations", optarg, 1, &v)) return -1;
            if (optarg) o->ckpt_segments = (int)v;
            break;
        case 'H': o->hidden = optarg; break;
        case 'a': o->activation = optarg; break;
        case 's': if (parse_i64("--seed", optarg, 0, &v)) return -1; o->seed = (uint64_t)v; break;
        case 'T': if (parse_i64("--train-limit", optarg, 1, &o->train_limit)) return -1; break;
        case 't': if (parse_i64("--test-limit", optarg, 1, &o->test_limit)) return -1; break;
        case 'S': o->sampler = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 'D': o->device = optarg; break;
        case 'C': o->comm = optarg; break;
        case 'P': o->dump_params = optarg; break;
        case 'p': o->progress = 1; break;
        case 'N': o->progress = 0; break;
        case 'M': if (parse_i64("--max-steps", optarg, 1, &o->max_steps)) return -1; break;
        case 'V': if (parse_i64("--save-every", optarg, 0, &o->save_every)) return -1; break;
        case 'K': o->checkpoint_dir = optarg; break;
        case 'L': if (parse_i64("--keep-last", optarg, 0, &o->keep_last)) return -1; break;
        case 'R': o->resume = optarg; break;
        case 'G': o->log_steps = optarg; break;
        case 'J': o->metrics = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fashion_mlp: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->checkpoint_dir[0]) {
        fprintf(stderr, "fashion_mlp: --checkpoint-dir must not be empty\n");
        return -1;
    }
    return 0;
}

/* Rank 0 writes every parameter, in order, as raw little-endian f32. */
static ls_status dump_params(ls_ctx *ctx, ls_module *m, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return ls_error(LS_ERR_IO, "cannot open '%s' for writing", path);
    ls_status s = LS_OK;
    for (int i = 0; i < ls_module_num_params(m) && s == LS_OK; i++) {
        ls_tensor *p = ls_module_param(m, i);
        void *h = malloc(ls_tensor_nbytes(p));
        if (!h) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to dump parameters");
            break;
        }
        ls_tensor ht = ls_tensor_view(h, p->dtype, ls_device_cpu(), p->ndim, p->shape);
        s = ls_tensor_copy(ctx->alloc, &ht, p);
        if (s == LS_OK && fwrite(h, 1, ls_tensor_nbytes(p), f) != ls_tensor_nbytes(p))
            s = ls_error(LS_ERR_IO, "short write to '%s'", path);
        free(h);
    }
    if (fclose(f) != 0 && s == LS_OK) s = ls_error(LS_ERR_IO, "cannot close '%s'", path);
    return s;
}

static ls_status save_checkpoint(ls_comm *comm, ls_ctx *ctx, const options *o, ls_module *model, ls_optimizer *opt,
                                 ls_trainer *tr, const ls_ckpt_state *run, int64_t step, int64_t epoch,
                                 int64_t epoch_samples, char *path, size_t len) {
    ls_ckpt_state st = *run;
    const ls_loss_scaler *sc = ls_trainer_loss_scaler(tr);
    if (sc->enabled) {
        st.n_loss_scaler = 2;
        snprintf(st.loss_scaler[0].key, sizeof st.loss_scaler[0].key, "scale");
        st.loss_scaler[0].value = sc->scale;
        snprintf(st.loss_scaler[1].key, sizeof st.loss_scaler[1].key, "growth_tracker");
        st.loss_scaler[1].value = (double)sc->growth_tracker;
    }
    st.step = step;
    st.epoch = epoch;
    st.epoch_samples = epoch_samples;
    LS_CHECK(ls_ckpt_save(comm, ctx, o->checkpoint_dir, (int)o->keep_last, model, opt, &st, path, len));
    if (ls_comm_rank(comm) == 0) {
        printf("fashion_mlp: saved checkpoint %s (step %lld)\n", path, (long long)step);
        fflush(stdout);
    }
    return LS_OK;
}

int main(int argc, char **argv) {
    options o;
    if (parse_options(argc, argv, &o) != 0) return 2;
    int rc = 0;
    ls_rank_info ri;
    ls_device dev;
    ls_ctx *ctx = NULL;
    ls_comm *comm = NULL;
    ls_dataset *train = NULL, *test = NULL;
    ls_sampler *sampler = NULL, *test_sampler = NULL;
    ls_module *model = NULL;
    ls_optimizer *opt = NULL;
    ls_trainer *trainer = NULL;
    int64_t *idx = NULL, *test_idx = NULL;
    ex_batcher bt = {{NULL, NULL}, 0, -1, 0, 0};
    ex_metrics metrics = {NULL, 0};
    ls_gpu_monitor *gpumon = NULL;
    FILE *step_log = NULL;
    int preempt_installed = 0;

    ls_optim_kind kind;
    ls_act act = LS_ACT_RELU;
    ls_sampler_mode mode = LS_SAMPLER_PAD;
    TRY("--optimizer", ls_optim_kind_parse(o.optimizer, &kind));
    if (strcmp(o.activation, "gelu") == 0) act = LS_ACT_GELU;
    else if (strcmp(o.activation, "relu") != 0)
        TRY("--activation", ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' is not one of relu, gelu", o.activation));
    if (strcmp(o.sampler, "drop-last") == 0) mode = LS_SAMPLER_DROP_LAST;
    else if (strcmp(o.sampler, "exact") == 0) mode = LS_SAMPLER_EXACT;
    else if (strcmp(o.sampler, "pad") != 0)
        TRY("--sampler", ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' is not one of pad, drop-last, exact", o.sampler));
    int64_t sizes[8];
    int n_sizes = 0;
    sizes[n_sizes++] = 784;
    for (const char *p = o.hidden; *p && n_sizes < 7;) {
        char *end;
        long long h = strtoll(p, &end, 10);
        if (end == p || h < 1 || (*end != ',' && *end != '\0'))
            TRY("--hidden", ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' is not a comma-separated list of positive sizes (at most 6)", o.hidden));
        sizes[n_sizes++] = h;
        p = *end ? end + 1 : end;
    }
    sizes[n_sizes++] = 10;

    TRY("rank discovery", ls_rank_discover(&ri));
    TRY("device", ls_device_select(o.device, ri.local_rank, &dev));
    TRY("context", ls_ctx_create(dev, NULL, &ctx));
    TRY("communicator", ls_comm_create(ctx, o.comm, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    TRY("LOCKSTEP_GPU_MONITOR", ex_gpu_monitor_start(EX_PROG, dev, rank, &gpumon));

    TRY("training data", ls_fashion_mnist_load(o.data_dir, 1, o.train_limit, &train));
    TRY("test data", ls_fashion_mnist_load(o.data_dir, 0, o.test_limit, &test));
    ls_precision precision;
    TRY("--precision", ls_precision_parse(o.precision, &precision));
    TRY("model", ls_mlp_create(ctx, LS_F32, n_sizes, sizes, act, o.seed, &model));
    if (o.ckpt_segments > 0) TRY("--checkpoint-activations", ls_checkpoint_sequential(model, o.ckpt_segments, &model));
    ls_optim_config oc = ls_optim_defaults(kind);
    if (o.lr >= 0) oc.lr = (float)o.lr;
    else if (kind == LS_OPTIM_SGD) oc.lr = 0.05f;
    if (o.weight_decay >= 0) oc.weight_decay = (float)o.weight_decay;
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
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = o.batch;
    tc.accum_steps = o.accum;
    tc.lr.base_lr = oc.lr;
    tc.lr.min_lr = 0;
    tc.lr.warmup_steps = o.warmup;
    tc.lr.total_steps = steps * o.epochs;
    tc.clip_grad_norm = o.clip;
    tc.precision = precision;
    tc.buckets.first_bucket_bytes = 0; /* defaults / environment */
    tc.buckets.bucket_bytes = 0;
    TRY("trainer", ls_trainer_create(ctx, comm, model, opt, &tc, &trainer));

    char devname[32];
    if (rank == 0)
        printf("fashion_mlp: %d rank%s, device %s, communicator %s, %lld parameters, %lld train / %lld test "
               "samples, batch %lld per rank x %d accumulation x %d ranks, %lld steps per epoch\n",
               world, world == 1 ? "" : "s", ls_device_str(dev, devname, sizeof devname),
               ls_comm_backend_name(comm), (long long)ls_module_num_elements(model), (long long)train->n,
               (long long)test->n, (long long)o.batch, o.accum, world, (long long)steps);
    fflush(stdout);

    /* This run's settings, saved with each checkpoint and compared with a resumed one's. */
    ls_ckpt_state run;
    memset(&run, 0, sizeof run);
    run.steps_per_epoch = steps;
    run.world_size = world;
    run.batch_per_rank = o.batch;
    run.accum_steps = o.accum;
    run.seed = o.seed;
    run.lr = tc.lr;
    run.optim = oc;
    int64_t global_batch = per_step * world, start_epoch = 0, start_j = 0, last_saved = -1;
    char ckpt_path[LS_CKPT_PATH_MAX];
    if (o.resume) {
        ls_ckpt_state saved;
        int found, exact;
        TRY("--resume", ls_ckpt_load(comm, ctx, o.checkpoint_dir, o.resume, model, opt, &saved, &found, ckpt_path,
                                     sizeof ckpt_path));
        if (found) {
            ls_trainer_set_num_steps(trainer, saved.step);
            ls_loss_scaler *sc = ls_trainer_loss_scaler(trainer);
            for (int k = 0; k < saved.n_loss_scaler; k++) {
                if (strcmp(saved.loss_scaler[k].key, "scale") == 0) sc->scale = saved.loss_scaler[k].value;
                if (strcmp(saved.loss_scaler[k].key, "growth_tracker") == 0)
                    sc->growth_tracker = (int64_t)saved.loss_scaler[k].value;
            }
            last_saved = saved.step;
            ls_ckpt_resume_position(&saved, global_batch, steps, &start_epoch, &start_j, &exact);
            if (rank == 0) {
                ls_ckpt_warn_changes(&saved, &run);
                if (!exact)
                    printf("fashion_mlp: the checkpoint had consumed %lld samples of epoch %lld, not a multiple of this "
                           "run's global batch of %lld: continuing at the next step boundary (%lld samples skipped)\n",
                           (long long)saved.epoch_samples, (long long)saved.epoch + 1, (long long)global_batch,
                           (long long)(start_j * global_batch - saved.epoch_samples));
                printf("fashion_mlp: resumed from %s at step %lld, epoch %lld (step %lld of %lld in the epoch)\n",
                       ckpt_path, (long long)saved.step, (long long)start_epoch + 1, (long long)start_j,
                       (long long)steps);
            }
        } else if (rank == 0) {
            printf("fashion_mlp: no checkpoint in %s; starting from step 0\n", o.checkpoint_dir);
        }
        fflush(stdout);
    }
    if (o.log_steps && rank == 0) {
        if (last_saved >= 0) TRY("--log-steps", ex_truncate_step_file(o.log_steps, last_saved, "--log-steps"));
        step_log = fopen(o.log_steps, last_saved >= 0 ? "a" : "w");
        if (!step_log) TRY("--log-steps", ls_error(LS_ERR_IO, "cannot open '%s' for writing", o.log_steps));
    }
    TRY("--metrics", ex_metrics_open(&metrics, o.metrics, rank, last_saved));
    int progress = o.progress >= 0 ? o.progress : (rank == 0 && isatty(STDERR_FILENO));
    TRY("indices", ex_batcher_init(&bt, per_step));
    test_idx = malloc((size_t)(ls_sampler_num_samples(test_sampler) + 1) * sizeof *test_idx);
    if (!test_idx) TRY("indices", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for batch indices"));
    int64_t test_count = 0, tc_global = 0;
    TRY("test shard", ls_sampler_batch(test_sampler, 0, ls_sampler_num_samples(test_sampler) + 1, test_idx,
                                       &test_count, &tc_global));

    TRY("signal handlers", ls_preempt_install());
    preempt_installed = 1;
    int64_t gstep = ls_trainer_num_steps(trainer);
    int64_t pos_epoch = start_epoch, pos_samples = start_j * global_batch; /* where the next step starts */
    ex_gpu_monitor_restart(gpumon); /* the epochs' figures, not the setup's */
    int max_reached = 0;
    for (int64_t epoch = start_epoch; epoch < o.epochs && !max_reached; epoch++) {
        TRY("sampler", ls_sampler_set_epoch(sampler, epoch));
        ex_batcher_epoch(&bt);
        double t0 = ex_now_s(), m[3] = {0, 0, 0};
        int64_t seen = 0, j0 = epoch == start_epoch ? start_j : 0;
        int64_t epoch_samples = j0 * global_batch;
        for (int64_t j = j0; j < steps; j++) {
            int64_t count, global;
            ls_step_stats st;
            if (o.max_steps > 0 && gstep >= o.max_steps) {
                max_reached = 1;
                break;
            }
            double ts = ex_now_s();
            TRY("batch", ex_batcher_step(&bt, sampler, trainer, train, j, steps, per_step, &idx, &count, &global));
            TRY("training step", ls_trainer_step(trainer, train, idx, count, global, &st));
            gstep = ls_trainer_num_steps(trainer);
            TRY("--metrics", ex_metrics_step(&metrics, comm, ctx->alloc, gstep, epoch, &st, ex_now_s() - ts, o.clip > 0));
            m[0] += st.loss_sum;
            m[1] += (double)st.correct;
            m[2] += (double)st.samples;
            seen += global;
            epoch_samples += global;
            if (o.log_steps) {
                double l[2] = {st.loss_sum, (double)st.samples};
                TRY("--log-steps", ls_comm_allreduce_host(comm, l, 2, LS_F64, LS_REDUCE_SUM));
                if (step_log) {
                    fprintf(step_log, "%lld %.17g\n", (long long)gstep, l[0] / l[1]);
                    fflush(step_log);
                }
            }
            /* Every rank stops after the same step when any rank got SIGTERM/SIGINT. */
            int sig;
            TRY("preemption", ls_preempt_agree(comm, &sig));
            pos_epoch = j + 1 == steps ? epoch + 1 : epoch;
            pos_samples = j + 1 == steps ? 0 : epoch_samples;
            if (sig || (o.save_every > 0 && gstep % o.save_every == 0)) {
                TRY("checkpoint", save_checkpoint(comm, ctx, &o, model, opt, trainer, &run, gstep, pos_epoch, pos_samples,
                                                  ckpt_path, sizeof ckpt_path));
                last_saved = gstep;
            }
            if (sig) {
                if (progress) fprintf(stderr, "\r%*s\r", 70, "");
                if (rank == 0)
                    printf("fashion_mlp: received %s: finished step %lld, saved checkpoint %s; exiting\n",
                           sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal", (long long)gstep,
                           ckpt_path);
                fflush(stdout);
                ls_preempt_hold(); /* saved: a launcher's SIGTERM to the last ranks must not kill them */
                rc = 128 + sig;
                goto done;
            }
            if (progress && (j % 20 == 0 || j + 1 == steps)) {
                double el = ex_now_s() - t0;
                fprintf(stderr, "\repoch %d  step %lld/%lld  loss %.4f  %.0f samples/s   ", (int)epoch + 1,
                        (long long)(j + 1), (long long)steps, st.loss_sum / (double)(st.samples ? st.samples : 1),
                        el > 0 ? (double)seen / el : 0.0);
            }
        }
        if (max_reached && seen == 0) break;
        double train_time = ex_now_s() - t0;
        if (progress) fprintf(stderr, "\r%*s\r", 70, "");
        double ev[3];
        int64_t correct;
        TRY("evaluation", ls_trainer_evaluate(trainer, test, test_idx, test_count, &ev[0], &correct));
        ev[1] = (double)correct;
        ev[2] = (double)test_count;
        TRY("metrics", ls_comm_allreduce_host(comm, m, 3, LS_F64, LS_REDUCE_SUM));
        TRY("metrics", ls_comm_allreduce_host(comm, ev, 3, LS_F64, LS_REDUCE_SUM));
        ls_memory_stats ms;
        ls_allocator_stats(ctx->alloc, &ms);
        double peak = (double)ms.peak_bytes;
        TRY("metrics", ls_comm_allreduce_host(comm, &peak, 1, LS_F64, LS_REDUCE_MAX));
        if (rank == 0) {
            char pk[32];
            printf("epoch %d  train loss %.4f  train acc %.2f%%  test loss %.4f  test acc %.2f%%  "
                   "%.0f samples/s  %.2f s  peak memory %s\n",
                   (int)epoch + 1, m[0] / m[2], 100.0 * m[1] / m[2], ev[0] / ev[2], 100.0 * ev[1] / ev[2],
                   (double)seen / train_time, train_time, ls_memory_format((size_t)peak, pk, sizeof pk));
            fflush(stdout);
        }
        /* the GPUs over the epoch, evaluation included (every rank takes part) */
        TRY("GPU figures", ex_gpu_monitor_report(gpumon, comm, rank));
        fflush(stdout);
    }
    if (max_reached && rank == 0) printf("fashion_mlp: stopped at step %lld (--max-steps)\n", (long long)gstep);
    if (o.save_every > 0 && gstep > 0 && gstep != last_saved)
        TRY("checkpoint", save_checkpoint(comm, ctx, &o, model, opt, trainer, &run, gstep, pos_epoch, pos_samples, ckpt_path,
                                          sizeof ckpt_path));
    if (o.dump_params && rank == 0) TRY("--dump-params", dump_params(ctx, model, o.dump_params));

done:
    ls_gpu_monitor_stop(gpumon);
    ex_metrics_close(&metrics);
    ex_batcher_free(&bt);
    free(test_idx);
    ls_trainer_destroy(trainer);
    ls_optimizer_destroy(opt);
    ls_module_destroy(model);
    ls_sampler_destroy(sampler);
    ls_sampler_destroy(test_sampler);
    ls_dataset_destroy(train);
    ls_dataset_destroy(test);
    if (step_log) fclose(step_log);
    if (preempt_installed) ls_preempt_uninstall();
    if (rc == 1 && comm && ls_comm_world(comm) > 1) ls_comm_abort(comm, "fashion_mlp failed");
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    return rc;
}
