/* example_cli.h: what the example programs (and benchmarks) share: strict number parsing for
 * flags, a monotonic clock, the error line of a failed call with its TRY macro, and the ResNet
 * --widths list. Messages start with the program's name, EX_PROG, which each program defines
 * before including this header. */
#ifndef LOCKSTEP_EXAMPLE_CLI_H
#define LOCKSTEP_EXAMPLE_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "cnn.h"
#include "comm.h"
#include "data.h"
#include "ema.h"
#include "gpumon.h"
#include "status.h"
#include "train.h"

/* Upper bounds of the examples' count flags: far above any real run, and low enough that the
 * products made of them (batch x accumulation steps x ranks x features) stay far from overflow. */
#define EX_MAX_EPOCHS 1000000
#define EX_MAX_BATCH (INT64_C(1) << 24)
#define EX_MAX_ACCUM 65536
#define EX_MAX_SEGMENTS 1000000
#define EX_MAX_BLOCKS 1024

/* *out = s as a whole number from min to max; else prints "PROG: FLAG 'S' must be a whole number
 * from MIN to MAX" (">= MIN" when max is INT64_MAX) and -1. */
int ex_parse_i64(const char *prog, const char *flag, const char *s, int64_t min, int64_t max, int64_t *out);
/* *out = s as a finite number >= 0 that a float holds; else prints "PROG: FLAG 'S' must be a finite number >= 0" and -1. */
int ex_parse_f64(const char *prog, const char *flag, const char *s, double *out);
/* *out = s as a number in [0, 1); else prints "PROG: FLAG 'S' must be a number from 0 to below 1"
 * and -1. */
int ex_parse_fraction(const char *prog, const char *flag, const char *s, double *out);
/* The same for a value kept as a float (--dropout): one that rounds to 1 there is refused too. */
int ex_parse_fraction_f32(const char *prog, const char *flag, const char *s, double *out);
/* out[0], out[1] = s as "B1,B2", each in [0, 1) (AdamW's betas); else prints "PROG: FLAG 'S' must be
 * two numbers from 0 to below 1, as 0.9,0.999" and -1. */
int ex_parse_betas(const char *prog, const char *flag, const char *s, double out[2]);
/* 0 when s is a non-empty string; else prints "PROG: FLAG must not be empty (leave the flag out
 * for its default)" and -1: `--device ''` or `--resume ''` from an unset shell variable would
 * otherwise quietly mean the default (auto). */
int ex_nonempty(const char *prog, const char *flag, const char *s);
/* Seconds on the monotonic clock. */
double ex_now_s(void);
/* First thing in main: a stdin, stdout or stderr the program was started without (`>&-`) is
 * /dev/null, so that no file it opens becomes one (with stdout closed, --metrics got fd 1 and the
 * epoch lines went into it). */
void ex_stdio_guard(void);
/* The exit status, rc, or 1 where stdout's lines could not all be written (a full disk,
 * /dev/full: the run exited 0 without them), said on stderr. */
int ex_exit_status(const char *prog, int rc);
/* v, with a NaN's sign dropped: printf writes a NaN of the sign bit as "-nan", so the epoch lines
 * said "train loss -nan" where the hint says "nan" (a scraper's pattern missed one of them). */
double ex_plain_nan(double v);
/* A loss as the epoch, evaluation and progress lines show it: "%.4f", or "%.4e" from 1e6 up (a
 * diverging run's 4.9e+31 was printed in all its 36 digits), "nan" without a sign. Returns buf,
 * which holds EX_LOSS_TEXT bytes. */
#define EX_LOSS_TEXT 32
const char *ex_loss_text(double v, char buf[EX_LOSS_TEXT]);
/* Prints "PROG: WHAT: STATUS: the library's last error" to stderr; returns 1 (an exit status). */
int ex_fail(const char *prog, const char *what, ls_status s);
/* Whether the progress line is on, the same on every rank (collective): flag 1 or 0 (--progress,
 * --no-progress), or -1: when rank 0's stderr is a terminal, or lockstep-run's was
 * (LOCKSTEP_STDERR_TTY=1, which it sets: under mpirun a rank's stderr is a pipe) and rank 0's is a
 * pipe or socket (not a file it was redirected to). */
ls_status ex_progress_decide(ls_comm *comm, int flag, int *on);
/* The progress line, rewritten in place on rank 0's stderr (collective: call on every rank):
 * epoch (0-based), step j of steps, the epoch's mean loss over the ranks' steps whose losses have
 * reached the host (ls_trainer_totals_peek: no wait for the device; "-" before any has) and
 * samples/s (seen samples over elapsed_s). On the other ranks, whose stderr reaches the same terminal
 * under lockstep-run, their next log or error line clears that line first. */
ls_status ex_progress(ls_trainer *t, ls_comm *comm, int64_t epoch, int64_t j, int64_t steps, int64_t seen,
                      double elapsed_s);
/* Clears the progress line (on stderr: "\r", erase to the end of the line) for a line of its own. */
void ex_progress_clear(void);
/* The epoch line's note when its train figures are of steps j0+1..j_end of steps only (resumed
 * within the epoch, or stopped by --max-steps): "  (train figures of steps A-B of N: why)" ("of step B" for one); else "". */
void ex_epoch_part(char *buf, size_t len, int64_t j0, int64_t j_end, int64_t steps);
/* Once a run, after an epoch line whose train loss is not finite: "PROG: the train loss is nan:
 * the training diverged (...what may help)" (the run goes on, as PyTorch's would); clip: the run's
 * --clip-grad-norm, 0 off (a run that clips is told of a lower one). */
void ex_diverged_hint(const char *prog, double train_loss, double clip);
/* The epoch line's end: "\n", or how many of its `trained` steps were skipped for inf/NaN
 * gradients, "all" of them said so (a run whose every step overflows no longer trains). */
void ex_skipped_note(int64_t skipped, int64_t trained);
/* The out-of-memory hint of a training step (ls_allocator_set_oom_hint): "To fit, try ..." with the
 * remedies this run does not use yet (a run in bf16 was told to use bf16): a smaller batch (batch_auto
 * 1: than the one --batch-size auto found; 0: or --batch-size auto; -1: the program has no auto),
 * --precision bf16, --checkpoint-activations; at a batch of 1, a larger cap and a smaller model
 * (model_flags, e.g. "--hidden"). */
void ex_step_oom_hint(char *buf, size_t len, int64_t batch, int batch_auto, ls_precision precision, int checkpointing,
                      const char *model_flags);
/* cfg->widths and n_stages from "32,64,128": 1 to LS_RESNET_MAX_STAGES positive channel counts;
 * else LS_ERR_INVALID_ARGUMENT naming --widths. */
ls_status ex_parse_widths(const char *s, ls_resnet_config *cfg);

/* LS_ERR_INVALID_ARGUMENT unless both sets hold Fashion-MNIST's 28 x 28 images (the examples' models
 * take 784 pixels): other IDX files load, and would fail only at the first step, naming no file. */
ls_status ex_check_fashion_shape(const ls_dataset *train, const ls_dataset *test);
/* LS_ERR_INVALID_ARGUMENT when an epoch of s has no step of per_step samples (--sampler drop-last
 * with a batch larger than this rank's share of the training set): an epoch would train nothing. */
ls_status ex_check_steps(const ls_sampler *s, int64_t steps, int64_t per_step);

/* The samples of each step of an epoch, with the next step's handed to the trainer as a prefetch
 * hint (ls_trainer_prefetch): two index buffers of per_step entries, used in turn. */
typedef struct ex_batcher {
    int64_t *buf[2];
    int cur;
    int64_t next_j; /* the step whose samples are in buf[cur ^ 1] (-1: none) */
    int64_t ncount, nglobal;
} ex_batcher;
ls_status ex_batcher_init(ex_batcher *b, int64_t per_step);
void ex_batcher_free(ex_batcher *b);
/* Step j of steps (this epoch's) into *idx, *count, *global (ls_sampler_batch), and step j + 1's
 * samples to the trainer as its prefetch hint. Call ex_batcher_epoch after ls_sampler_set_epoch. */
ls_status ex_batcher_step(ex_batcher *b, ls_sampler *s, ls_trainer *t, const ls_dataset *d, int64_t j, int64_t steps,
                          int64_t per_step, int64_t **idx, int64_t *count, int64_t *global);
void ex_batcher_epoch(ex_batcher *b);

/* Per-step metrics (--metrics FILE): one JSON object per optimizer step, written by rank 0 and
 * flushed at once:
 *   {"step": 12, "epoch": 0, "loss": 0.512, "accuracy": 0.8125, "samples": 256, "lr": 0.05,
 *    "step_ms": 3.41, "samples_per_s": 75073.3, "loss_scale": 1, "skipped": 0,
 *    "mem_live_bytes": 6815744, "mem_peak_bytes": 8126464, "mem_pinned_bytes": 0[, "grad_norm": 1.23]}
 * loss and accuracy over the step's global batch; step_ms the slowest rank's time in the step
 * (batch, forward, backward, exchange, optimizer); memory the largest rank's, in the context's
 * allocator; pinned: its pinned host memory (batch and MPI staging on a GPU; 0 on the CPU). Every
 * rank calls ex_metrics_step (it holds two small all-reduces). */
typedef struct ex_metrics {
    FILE *f; /* rank 0's file; NULL elsewhere */
    const char *path;
    int on;
} ex_metrics;
/* Collective: opens path on rank 0; on = rank 0 was given a path (the others' path is ignored:
 * each step's figures are summed over every rank, so all take part where rank 0 writes).
 * resume_last >= 0: a resumed run keeps the lines up to that step and appends (the lines of steps
 * after the checkpoint are dropped). log_steps: --log-steps' file, open (or NULL): path naming
 * the same regular file is an error, and so is dump_params (--dump-params, or NULL) naming it. */
ls_status ex_metrics_open(ex_metrics *m, ls_comm *comm, const char *path, int64_t resume_last, FILE *log_steps,
                          const char *dump_params);
/* An error where the step file f (--log-steps, --metrics, opened as path; NULL: none) is the file
 * dump_params names (NULL: none): the dump, renamed over it after training, would replace its lines. */
ls_status ex_check_not_dump(FILE *f, const char *path, const char *dump_params);
ls_status ex_metrics_step(ex_metrics *m, ls_comm *comm, ls_allocator *alloc, int64_t step, int64_t epoch,
                          const ls_step_stats *st, double step_s, int clipping);
void ex_metrics_close(ex_metrics *m);
/* Opens a per-step file (--log-steps, --metrics: flag) for writing: afresh (truncated), or with
 * resume_last >= 0 cut back to that step (ex_truncate_step_file) and appended to. A path naming
 * the regular file stdout or stderr writes (--metrics /dev/stdout >run.log) gives that stream
 * itself, neither truncated nor cut back: opened again, the two wrote over each other's lines. */
ls_status ex_step_file_open(const char *path, int64_t resume_last, const char *flag, FILE **out);
/* Rank 0's --metrics and --log-steps (NULL: not given) can be opened for writing, checked before
 * the data is read, nothing changed: else the error, *flag the flag, and *agreed 1 (every rank
 * fails; rank 0 says why, for TRY_AGREED). Collective. */
ls_status ex_step_files_probe(ls_comm *comm, const char *metrics, const char *log_steps, const char **flag,
                              int *agreed);
/* Closes what ex_step_file_open opened (not stdout or stderr); NULL is fine. */
void ex_step_file_close(FILE *f);
/* Keep the lines of a per-step file (--log-steps, --metrics) whose step, the first integer on the
 * line, is at most last: a resumed run appends after them. A missing file is fine. */
ls_status ex_truncate_step_file(const char *path, int64_t last, const char *flag);

/* GPU monitoring of dev on every rank (LOCKSTEP_GPU_MONITOR, gpumon.h): *out stays NULL on the
 * CPU, when it is off, or when NVML is missing (then PROG says so on stderr, naming the rank: not
 * an error). A bad LOCKSTEP_GPU_MONITOR is an error. */
ls_status ex_gpu_monitor_start(const char *prog, ls_device dev, int rank, ls_gpu_monitor **out);
/* Every rank calls it after an epoch: the figures of every rank's monitor since the last call,
 * combined, printed by rank 0 (nothing when no rank monitors a GPU; ranks that share a GPU count
 * it once). One GPU:
 *   "  NVIDIA H200: gpu 97% busy (memory 41%), 20.3 GiB used of 140.0 GiB, 455 W of 700 W, 62 C, 1980 MHz"
 * several: "  4 GPUs (NVIDIA H200): gpu 91-97% busy (memory 38-41%), up to 20.3 GiB used of
 * 140.0 GiB, 1820 W in all (of 2800 W), up to 64 C, 1950-1980 MHz" (the range over the GPUs
 * shows a straggler). */
ls_status ex_gpu_monitor_report(ls_gpu_monitor *m, ls_comm *comm, int rank);
/* Drops the figures so far (model building, data loading): the first epoch's line covers the
 * epoch. No collective; NULL is fine. */
void ex_gpu_monitor_restart(ls_gpu_monitor *m);

/* The training flags fashion_mlp and fashion_resnet share (their --help lines stay each
 * program's): --no-decay-1d, --label-smoothing, --init-from, --shard-optimizer, --lr-schedule,
 * --min-lr, --betas, --eps, --ema, --ema-warmup. EX_TRAIN_LONGOPTS goes into the getopt_long
 * table. */
typedef struct ex_train_flags {
    int no_decay_1d;
    double label_smoothing;
    const char *init_from; /* weights to start from, or NULL */
    int shard_optimizer;
    const char *lr_schedule;
    double min_lr;
    double betas[2], eps; /* < 0: unset (AdamW's defaults) */
    double ema;           /* the EMA's decay; < 0: no EMA of the weights */
    int ema_warmup;
} ex_train_flags;
#define EX_TRAIN_LONGOPTS                                                                                              \
    {"no-decay-1d", no_argument, 0, 1003}, {"label-smoothing", required_argument, 0, 1004},                            \
        {"init-from", required_argument, 0, 1005}, {"shard-optimizer", no_argument, 0, 1006},                          \
        {"lr-schedule", required_argument, 0, 1007}, {"min-lr", required_argument, 0, 1008},                           \
        {"betas", required_argument, 0, 1009}, {"eps", required_argument, 0, 1010},                                    \
        {"ema", required_argument, 0, 1011}, {                                                                         \
        "ema-warmup", no_argument, 0, 1012                                                                             \
    }
/* --help lines of --ema and --ema-warmup (the same in both programs). */
#define EX_TRAIN_HELP_SHARD                                                                                            \
    "  --shard-optimizer     ZeRO stage 1: with several ranks each keeps the optimizer state of its\n"                 \
    "                        share of the parameters only, receives their gradients summed over the\n"                 \
    "                        ranks (each reduced to its owner, as DeepSpeed; LOCKSTEP_SHARD_REDUCE=all:\n"             \
    "                        all-reduced, as ZeroRedundancyOptimizer), updates them and broadcasts\n"                  \
    "                        them; less memory per rank, the same training (bit for bit on 2 ranks\n"                  \
    "                        and with =all; on more the sums come in MPI_Reduce's order: within\n"                     \
    "                        rounding) and the same checkpoint files\n"
#define EX_TRAIN_HELP_EMA                                                                                              \
    "  --ema DECAY           also keep an exponential moving average of the weights, as timm's\n"                      \
    "                        ModelEmaV3 (e.g. 0.999): updated after every step, evaluated beside the\n"                \
    "                        model after every epoch, saved in checkpoints (ema.safetensors, which\n"                  \
    "                        --init-from takes)\n"                                                                     \
    "  --ema-warmup          the average's decay ramps up as timm's: update t takes min(DECAY,\n"                      \
    "                        1 - t^(-2/3)) (the first, t = 1, copies the weights, with or without)\n"
void ex_train_flags_init(ex_train_flags *f);
/* Option c of getopt_long (its argument arg): 1 when it is one of these, taken (*bad = 1 when its
 * value was refused, the message printed), 0 when it is not. */
int ex_train_flags_parse(const char *prog, ex_train_flags *f, int c, const char *arg, int *bad);
/* What the flags need of the rest: a known schedule (*lr_kind), betas and eps only with AdamW,
 * --ema-warmup only with --ema. Else LS_ERR_INVALID_ARGUMENT with *flag the flag at fault (a usage
 * error). */
ls_status ex_train_flags_check(const ex_train_flags *f, ls_optim_kind kind, ls_lr_kind *lr_kind, const char **flag);
/* What the flags need of the optimizer's settings oc, its defaults filled in (lr_given,
 * wd_given: --lr, --weight-decay given): --min-lr at most the peak learning rate (above it, the
 * schedule rose to it), --no-decay-1d only with a weight decay to leave out (where the default is
 * 0, fashion_mlp's SGD, it changed nothing). Else LS_ERR_INVALID_ARGUMENT with *flag the flag at
 * fault (a usage error). */
ls_status ex_train_flags_check_optim(const ex_train_flags *f, const ls_optim_config *oc, int lr_given, int wd_given,
                                     const char **flag);
/* The flags above as settings every rank must be given alike (ls_ddp_check_settings): writes at
 * most EX_TRAIN_SETTINGS to out, returns how many. */
#define EX_TRAIN_SETTINGS 11
/* A number flag whose value is negative when not given: the setting "not given" then. */
ls_setting ex_setting_given(const char *name, double v);
/* A seed: a number (exact up to 2^53) or, above, its digits in buf (24 bytes). */
ls_setting ex_setting_seed(const char *name, uint64_t seed, char *buf);
int ex_train_flags_settings(const ex_train_flags *f, ls_setting *out);
/* Into the optimizer's config (--no-decay-1d, --betas, --eps; --shard-optimizer as rank of world)
 * and the trainer's (--label-smoothing, --min-lr and the schedule's kind). */
void ex_train_flags_optim(const ex_train_flags *f, int rank, int world, ls_optim_config *oc);
void ex_train_flags_train(const ex_train_flags *f, ls_lr_kind lr_kind, ls_train_config *tc);
/* --ema: an EMA of model's weights in *out (NULL without --ema). Made before a --batch-size auto
 * search, its memory counts in the trials; once the trainer has broadcast rank 0's weights, start
 * it from them (ls_ema_reset). */
ls_status ex_ema_create(const ex_train_flags *f, ls_ctx *ctx, ls_module *model, ls_ema **out);
/* Rank 0, after the model's test figures: the EMA's, ev = loss sum, correct, count. */
void ex_print_ema(const ls_ema *e, const double ev[3]);

/* A sharded optimizer (--shard-optimizer): one line on stdout, each rank's share of the parameters
 * whose optimizer state it keeps and how the trainer sums their gradients; nothing when unsharded. */
void ex_print_shard(const char *prog, const ls_optimizer *opt, const ls_trainer *trainer, int world);
/* Rank 0, when a run has no step to take (--epochs 0; a resumed checkpoint that finished the
 * epochs; --max-steps already reached): says why, and the test figures of the model as it is
 * (ev: loss sum, correct, count), so that --epochs 0 --resume PATH evaluates a checkpoint. */
void ex_print_nothing_to_train(const char *prog, int epochs, int64_t start_epoch, int64_t step, const double ev[3]);

#ifdef EX_PROG
#define parse_i64(flag, s, min, max, out) ex_parse_i64(EX_PROG, flag, s, min, max, out)
#define parse_f64(flag, s, out) ex_parse_f64(EX_PROG, flag, s, out)
#define parse_fraction(flag, s, out) ex_parse_fraction(EX_PROG, flag, s, out)
#define parse_betas(flag, s, out) ex_parse_betas(EX_PROG, flag, s, out)
/* In a getopt loop of a function that returns -1 on a bad flag: field = optarg, unless it is empty. */
#define STR_OPT(flag, field)                                                                                           \
    do {                                                                                                               \
        if (ex_nonempty(EX_PROG, flag, optarg)) return -1;                                                             \
        (field) = optarg;                                                                                              \
    } while (0)
/* TRY(what, expr): on failure, print the error, set rc to 1 and go to done. USAGE(flag, expr): the
 * same for a flag's value, with exit status 2 (bad usage), as for a flag refused while parsing. */
#define TRY_RC(code, what, expr)                                                                                       \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            (void)ex_fail(EX_PROG, what, s_);                                                                          \
            rc = (code);                                                                                               \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)
#define TRY(what, expr) TRY_RC(1, what, expr)
/* TRY_FLAG(value, flag, what, expr): a step that takes a flag's value (NULL: the flag not given,
 * the step named what): a value it refuses as invalid is bad usage (2), other failures (no GPU
 * usable for --device cuda) exit 1. */
#define TRY_FLAG(value, flag, what, expr)                                                                              \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            (void)ex_fail(EX_PROG, (value) ? (flag) : (what), s_);                                                     \
            rc = (value) && s_ == LS_ERR_INVALID_ARGUMENT ? 2 : 1;                                                     \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)
#define USAGE(flag, expr) TRY_RC(2, flag, expr)
/* TRY_ALL(what, expr): TRY for a collective check that fails alike on every rank
 * (ls_ddp_check_settings' LS_ERR_MISMATCH): then every rank prints its line and exits 1 without
 * ls_comm_abort (which could stop another rank before it printed), so done: must not abort when
 * all_failed is set. Other failures of the check are TRY's. */
#define TRY_ALL(what, expr)                                                                                            \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            (void)ex_fail(EX_PROG, what, s_);                                                                          \
            all_failed = s_ == LS_ERR_MISMATCH;                                                                        \
            rc = 1;                                                                                                    \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)
/* TRY_AGREED(what, expr, agreed): TRY for a call after which agreed says whether its failure is
 * the same on every rank (a checkpoint save's, whose error rank 0 shares with all: ex_ckpt's
 * agreed): then rank 0 alone says it (the others' line was its copy, "(on rank 0)") and no rank
 * aborts the job (all_failed: each exits 1 on its own, without Open MPI's MPI_ABORT banner). Needs
 * rank. */
#define TRY_AGREED(what, expr, agreed)                                                                                 \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            all_failed = (agreed);                                                                                     \
            if (!all_failed || rank == 0) (void)ex_fail(EX_PROG, what, s_);                                            \
            rc = 1;                                                                                                    \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)
#endif

#endif
