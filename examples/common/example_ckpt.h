/* example_ckpt.h: what the training examples share to checkpoint a run: the flags (--max-steps,
 * --save-every, --checkpoint-dir, --keep-last, --save-async, --resume, --log-steps, --dump-params) with their
 * --help lines, resuming (weights and buffers, optimizer, step and schedule, loss scaler, where in
 * which epoch), the per-step loss log, saves every N steps and at the end, and preemption: after
 * every step the ranks agree whether any got SIGTERM/SIGINT, and if so all save and stop after
 * that same step. Messages start with the program's name (prog). */
#ifndef LOCKSTEP_EXAMPLE_CKPT_H
#define LOCKSTEP_EXAMPLE_CKPT_H

#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "comm.h"
#include "example_cli.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

/* getopt_long codes of the shared flags (EX_CKPT_LONGOPTS), clear of any letter a program uses. */
enum {
    EX_OPT_MAX_STEPS = 0x4000,
    EX_OPT_SAVE_EVERY,
    EX_OPT_CHECKPOINT_DIR,
    EX_OPT_KEEP_LAST,
    EX_OPT_RESUME,
    EX_OPT_LOG_STEPS,
    EX_OPT_DUMP_PARAMS,
    EX_OPT_SAVE_ASYNC
};

/* Entries of a program's struct option array. */
#define EX_CKPT_LONGOPTS                                                                                               \
    {"max-steps", required_argument, 0, EX_OPT_MAX_STEPS}, {"save-every", required_argument, 0, EX_OPT_SAVE_EVERY},    \
        {"checkpoint-dir", required_argument, 0, EX_OPT_CHECKPOINT_DIR},                                               \
        {"keep-last", required_argument, 0, EX_OPT_KEEP_LAST}, {"resume", required_argument, 0, EX_OPT_RESUME},        \
        {"log-steps", required_argument, 0, EX_OPT_LOG_STEPS},                                                         \
        {"dump-params", required_argument, 0, EX_OPT_DUMP_PARAMS}, {                                                   \
        "save-async", no_argument, 0, EX_OPT_SAVE_ASYNC                                                                \
    }

/* --help lines of the shared flags but --dump-params (whose line says what the program writes),
 * and of --metrics, which is resumed the same way. */
#define EX_CKPT_HELP_FLAGS                                                                                             \
    "  --max-steps N         stop after N optimizer steps in all, resumed ones included (default: no\n"                \
    "                        limit); the learning-rate schedule still spans --epochs (a stop, as\n"                    \
    "                        between the chunks of a long job, not a shorter run)\n"                                   \
    "  --save-every N        write a checkpoint every N optimizer steps and at the end (default 0: at\n"               \
    "                        the end when --checkpoint-dir or --resume auto is given, else only on\n"                  \
    "                        SIGTERM/SIGINT)\n"                                                                        \
    "  --checkpoint-dir DIR  checkpoints go to DIR/step-NNNNNNNN/ (default ./checkpoints); given (or\n"                \
    "                        --resume auto), the last step is saved at the end even without\n"                         \
    "                        --save-every, and DIR is created and checked for writing, and for room\n"                 \
    "                        for a checkpoint, at the start, and held (DIR/.lock) until the end: a\n"                  \
    "                        second run saving there is refused; with --resume, no --save-every, a DIR\n"              \
    "                        that cannot be written is only read: a warning, no save at the end\n"                     \
    "  --keep-last K         keep the K newest checkpoints, remove older ones (default 3; 0 keeps all)\n"              \
    "  --save-async          write checkpoints in the background: training stops only while rank 0\n"                  \
    "                        copies the state to host memory (held from then on: the checkpoint's size);\n"            \
    "                        a save's line is printed once it is written, at the next save or the end;\n"              \
    "                        needs --save-every (a signal's or the end's checkpoint is written at once)\n"             \
    "  --resume auto|PATH    auto: continue from the newest valid checkpoint in --checkpoint-dir (start\n"             \
    "                        afresh when it holds none; an error when all it holds are damaged);\n"                    \
    "                        PATH: from that checkpoint directory\n"                                                   \
    "  --log-steps FILE      rank 0 writes \"step loss\" per optimizer step (mean over the global batch,\n"            \
    "                        17 digits); on resume, lines past the resumed step are dropped, "                         \
    "new ones appended\n"                                                                                              \
    "  --metrics FILE        rank 0 writes one JSON object per optimizer step: loss, accuracy, lr, "                   \
    "step time,\n"                                                                                                     \
    "                        samples/s, loss scale, memory, and with --clip-grad-norm the norm before "                \
    "clipping\n"                                                                                                       \
    "                        (a value that is inf/NaN, a diverged run's loss too, is null) (resumed like\n"            \
    "                        --log-steps)\n"

/* --help paragraphs on what a checkpoint holds (a program may add lines to it before the blank
 * line), and on preemption and the exit status. */
#define EX_CKPT_HELP_CONTENTS                                                                                          \
    "Checkpoints hold the weights (model.safetensors), the optimizer state (optimizer.safetensors),\n"                 \
    "with --ema the average of the weights (ema.safetensors), the step, schedule, sampler position\n"                  \
    "and settings (state.json), checksummed by manifest.json; rank 0 writes them. Resuming with the\n"                 \
    "same ranks and batch continues bitwise as if never stopped; with another world size or batch,\n"                  \
    "from the next step boundary of the saved epoch, the learning-rate schedule from the same point\n"                 \
    "of the data in this run's steps.\n"
#define EX_CKPT_HELP_PREEMPTION                                                                                        \
    "Preemption: on SIGTERM or SIGINT every rank finishes the current step, a checkpoint is written,\n"                \
    "\"received SIGTERM: finished step N, saved checkpoint DIR/step-0000000N; exiting\" is printed and\n"              \
    "the program exits with 128 + the signal number (143 for SIGTERM, 130 for SIGINT): run it again\n"                 \
    "with --resume auto. A second signal of the same kind (SIGTERM twice, SIGINT twice) stops at once.\n"              \
    "A stop that reaches any rank stops them all.\n"                                                                   \
    "Under lockstep-run, signal lockstep-run: it passes the signal to the ranks (mpirun's ranks on its\n"              \
    "host, or the job's through scancel in Slurm). A SIGTERM to mpirun itself reaches the ranks, but\n"                \
    "mpirun kills them 1 s later (Open MPI's odls_base_sigkill_timeout) and exits 1.\n"                                \
    "Exit status: 0 done, 1 error, 2 bad usage, 130/143 stopped by a signal after a checkpoint.\n"

/* --help's paragraph on several ranks' options (extra: more that may differ, ", --x" each). */
#define EX_HELP_SAME_OPTIONS(extra)                                                                                    \
    "Several ranks: each must be given the same options, but for those only rank 0 uses\n"                             \
    "(--checkpoint-dir, --keep-last, --log-steps, --metrics, --dump-params, --progress) and --device,\n"               \
    "--data-dir" extra ". The ranks compare those that shape the training, and the data they read, at\n"               \
    "start: a difference stops every rank with an error that names it (\"--epochs is 2 on rank 1 but 1\n"              \
    "on rank 0\") rather than a hang or ranks that train apart.\n"

/* --help's environment paragraph of a training example that checkpoints. */
#define EX_CKPT_HELP_ENV                                                                                               \
    "Environment: LOCKSTEP_LOG=error|warn|info|debug, LOCKSTEP_DEVICE, LOCKSTEP_COMM,\n"                               \
    "LOCKSTEP_MEMORY_LIMIT (host memory cap, e.g. 2GiB), LOCKSTEP_FASHION_DIR,\n"                                      \
    "LOCKSTEP_DATA_ON_DEVICE=auto|on|off (keep the data set on the GPU, gather batches there),\n"                      \
    "LOCKSTEP_PREFETCH=auto|on|off (batches copied from the host: the next one staged during a step),\n"               \
    "LOCKSTEP_GPU_MONITOR=MS|off (a GPU's use, power, temperature after each epoch; default 500 ms),\n"                \
    "LOCKSTEP_BUCKET_MB / LOCKSTEP_FIRST_BUCKET_MB (gradient bucket sizes, default 25 / 1),\n"                         \
    "LOCKSTEP_GRAD_AS_BUCKET_VIEW=0 (copy gradients into the buckets and back, as DDP's default),\n"                   \
    "LOCKSTEP_GRAD_COMPRESS=none|bf16|fp16 (all-reduce gradients in 16 bits: half the bytes sent),\n"                  \
    "LOCKSTEP_SHARD_REDUCE=owner|all (--shard-optimizer's gradients: reduced to owners or all-reduced),\n"             \
    "LOCKSTEP_TIMELINE=FILE (a Chrome trace of each rank's steps, modules and all-reduces; with\n"                     \
    "several ranks .rankN before FILE's extension, tl.json: tl.rank0.json, or %%r in FILE replaced by\n"               \
    "the rank; an earlier run's tl.json is kept as tl.prev1.json; open in ui.perfetto.dev),\n"                         \
    "LOCKSTEP_TIMELINE_STEPS=N|FIRST:LAST|FIRST:|all (the steps it records; default the first 1000, at\n"              \
    "most 256 MiB),\n"                                                                                                 \
    "LOCKSTEP_MALLOC_TUNING=0 (leave glibc's malloc as it is),\n"                                                      \
    "LOCKSTEP_CKPT_CRASH_AT=<stage> (tests: kill the process at that stage of a checkpoint save).\n"                   \
    "The README's table lists the rest (LOCKSTEP_COMM_TIMEOUT, LOCKSTEP_GPU_MEMORY, LOCKSTEP_TF32, ...).\n"

typedef struct ex_ckpt_options {
    int64_t max_steps;  /* 0: no limit */
    int64_t save_every; /* 0: at the end when dir_given or --resume auto, else only on a signal */
    int64_t keep_last;
    int save_async; /* --save-async */
    int dir_given;  /* --checkpoint-dir given: a checkpoint at the end even without --save-every */
    const char *checkpoint_dir, *resume, *log_steps, *dump_params;
} ex_ckpt_options;

/* The defaults: --keep-last 3, --checkpoint-dir checkpoints, nothing else. */
void ex_ckpt_options_init(ex_ckpt_options *o);
/* One getopt_long result: 1 when c is a shared flag (taken), 0 when not, -1 on a bad value (the
 * message printed). */
int ex_ckpt_option(const char *prog, ex_ckpt_options *o, int c, const char *arg);
/* Whether the run saves checkpoints of its own accord (--save-every; --checkpoint-dir given or
 * --resume auto, which continues a run in it: at the end), not only on a signal. */
int ex_ckpt_saves(const ex_ckpt_options *o);
/* After parsing: 0, or -1 with a message (an empty --checkpoint-dir, --save-async without
 * --save-every). */
int ex_ckpt_options_check(const char *prog, const ex_ckpt_options *o);

struct ex_ckpt;
/* Every rank must be given the same options and read the same data: a rank with other epochs, a
 * smaller data set or another seed would wait in a collective the others never reach, or train on
 * other samples, silently. set[0..n) holds the program's own flags, with room for EX_SAME_EXTRA
 * more, which this adds: the shared training flags (tf), the checkpoint flags that change the run
 * (--max-steps, --save-every, --save-async, --resume; the others only rank 0 uses), and each data
 * set's size and CRC32. All are compared with rank 0's (ls_ddp_check_settings: LS_ERR_MISMATCH on
 * every rank, "--epochs is 2 on rank 1 but 1 on rank 0"). Those that shape the training and no
 * other field of a checkpoint records (--precision, --clip-grad-norm, --augment, --sampler,
 * --sync-bn, --freeze-backbone, the training set's size and CRC32) go to record's settings (may
 * be NULL), saved with each checkpoint: a resume where one changed warns. */
#define EX_SAME_EXTRA (EX_TRAIN_SETTINGS + 8)
/* The flags both programs have, appended to set[n++] from an options struct o that names them
 * alike (batch 0: auto); seed: 24 bytes (ex_setting_seed). EX_SAME_COMMON_N of them. */
#define EX_SAME_COMMON_N 13
#define EX_SAME_COMMON(set, n, o, seed)                                                                                \
    do {                                                                                                               \
        (set)[(n)++] = ls_setting_num("--epochs", (o)->epochs);                                                        \
        (set)[(n)++] =                                                                                                 \
            (o)->batch ? ls_setting_num("--batch-size", (double)(o)->batch) : ls_setting_str("--batch-size", "auto");  \
        (set)[(n)++] = ls_setting_num("--accum-steps", (o)->accum);                                                    \
        (set)[(n)++] = ls_setting_str("--optimizer", (o)->optimizer);                                                  \
        (set)[(n)++] = ex_setting_given("--lr", (o)->lr);                                                              \
        (set)[(n)++] = ex_setting_given("--weight-decay", (o)->weight_decay);                                          \
        (set)[(n)++] = ls_setting_num("--momentum", (o)->momentum);                                                    \
        (set)[(n)++] = ls_setting_num("--clip-grad-norm", (o)->clip);                                                  \
        (set)[(n)++] = ls_setting_num("--warmup-steps", (double)(o)->warmup);                                          \
        (set)[(n)++] = ex_setting_seed("--seed", (o)->seed, (seed));                                                   \
        (set)[(n)++] = ls_setting_str("--precision", (o)->precision);                                                  \
        (set)[(n)++] = ls_setting_num("--checkpoint-activations", (o)->ckpt_segments);                                 \
        (set)[(n)++] = ls_setting_num("--dropout", (o)->dropout);                                                      \
    } while (0)
ls_status ex_check_same_options(ls_comm *comm, ls_setting *set, int n, const ex_train_flags *tf,
                                const ex_ckpt_options *ck, const ls_dataset *train, const ls_dataset *test,
                                struct ex_ckpt *record);

/* One run's checkpointing. Every rank calls every function (they hold collectives). */
typedef struct ex_ckpt {
    const char *prog;
    const ex_ckpt_options *o;
    ls_comm *comm;
    ls_ctx *ctx;
    ls_module *model; /* parameters and buffers (BatchNorm's running statistics) are saved */
    ls_optimizer *opt;
    ls_trainer *trainer;
    ls_ckpt_async *saver; /* --save-async: the save in flight */
    ls_ema *ema;          /* an EMA of the weights (--ema), saved and resumed with them: set
                                     * before ex_ckpt_begin; NULL: none */
    double dropout;       /* the model's dropout (--dropout), recorded: set before ex_ckpt_begin */
    int batch_auto;       /* the batch was found by --batch-size auto: set before ex_ckpt_begin (a resume
                           * whose batch differs from the checkpoint's says which and what to do) */
    int n_settings;       /* more settings recorded (ex_check_same_options picks them) */
    ls_ckpt_setting settings[LS_CKPT_MAX_SETTINGS];
    ls_ckpt_state run;              /* this run's settings, saved with each checkpoint and compared on resume */
    int64_t global_batch;           /* samples per optimizer step over all ranks */
    int64_t step;                   /* optimizer steps done */
    int64_t first_step;             /* the step this run started from (a resumed one, or 0) */
    int64_t last_saved;             /* step of the newest checkpoint saved or resumed from; -1: none */
    int64_t pos_epoch, pos_samples; /* where the next step starts: epoch, its samples consumed */
    int max_reached;                /* --max-steps reached */
    int progress;                   /* a progress line is on stderr: cleared before the preemption message */
    int preempt_installed;
    int lock_fd;      /* rank 0 of a run that saves: its hold on --checkpoint-dir (ls_ckpt_lock_dir), or -1 */
    FILE *step_log;   /* --log-steps, rank 0 */
    int log_steps_on; /* rank 0 was given --log-steps: every rank takes part in the loss's all-reduce */
    int save_at_end;  /* rank 0 saves of its own accord (ex_ckpt_saves): every rank saves at the end */
    const char *what; /* after a failed call: what failed, for the error line ("checkpoint"...) */
    int agreed;       /* after a failed call: every rank has the same error (a save's, which rank 0 shares
                       * with all): rank 0 says it, and no rank aborts the job (TRY_AGREED) */
    char path[LS_CKPT_PATH_MAX]; /* the last checkpoint saved or resumed from */
    /* rank 0: a step's line that could not be written (--metrics, --log-steps: a full disk), what
     * and why; every rank then saves and stops after that step (ex_ckpt_after_step) */
    const char *io_what;
    char io_why[512];
} ex_ckpt;

/* Before anything can fail (ex_ckpt_close is then safe): no run yet. */
void ex_ckpt_init(ex_ckpt *c, const char *prog, const ex_ckpt_options *o);
/* Starts the run that trainer (built with tc, over model and opt, whose settings are oc) does
 * with this seed and steps_per_epoch optimizer steps an epoch: these settings are saved with each
 * checkpoint. Resumes when o->resume is set: loads the checkpoint into model and optimizer (on
 * every rank), sets the trainer's step and loss scaler, and gives the epoch and step in that epoch
 * to start from (0, 0 for a fresh run); rank 0 prints what it resumed from, with a warning for
 * every setting that changed. Then opens --log-steps (keeping the lines up to the resumed step)
 * and installs the SIGTERM/SIGINT handlers. c->what names what failed. */
ls_status ex_ckpt_begin(ex_ckpt *c, ls_comm *comm, ls_ctx *ctx, ls_module *model, ls_optimizer *opt,
                        ls_trainer *trainer, const ls_train_config *tc, const ls_optim_config *oc, uint64_t seed,
                        int64_t steps_per_epoch, int64_t *start_epoch, int64_t *start_j);
/* Before a step: 1 when --max-steps is reached (c->max_reached set; take no further step). */
int ex_ckpt_done(ex_ckpt *c);
/* A step's line that rank 0 could not write (s: LS_ERR_IO, the error set; what: "--metrics"): noted
 * for ex_ckpt_after_step, which stops every rank after this step with a checkpoint; other
 * statuses are returned as they are. */
ls_status ex_ckpt_step_file_failed(ex_ckpt *c, const char *what, ls_status s);
/* After each optimizer step, st its statistics, global the samples it took over all ranks,
 * last_in_epoch whether it ended the epoch: logs the step's loss (--log-steps), agrees on
 * preemption, saves every --save-every steps, and on a signal saves, prints the preemption
 * message, ignores further signals and sets *sig to the signal (the program then exits with 128 +
 * *sig); else *sig = 0. Where rank 0 could not write the step's line (--log-steps, or --metrics
 * noted by ex_ckpt_step_file_failed), every rank saves a checkpoint of this step and returns
 * LS_ERR_IO with c->agreed set (rank 0 says it, no rank aborts the job). */
ls_status ex_ckpt_after_step(ex_ckpt *c, const ls_step_stats *st, int64_t global, int last_in_epoch, int *sig);
/* After training: says when --max-steps stopped it, saves a last checkpoint (--save-every > 0,
 * unless this step is saved already) and writes --dump-params (rank 0). */
ls_status ex_ckpt_end(ex_ckpt *c);
/* Closes the step log and restores the signal handlers. */
void ex_ckpt_close(ex_ckpt *c);

/* Rank 0's model as raw little-endian f32 (each tensor's dtype): every parameter in order, then
 * every buffer (ls_cnn_buffer: BatchNorm's running statistics; none in an MLP). */
ls_status ex_dump_params(ls_ctx *ctx, ls_module *m, const char *path);

#endif
