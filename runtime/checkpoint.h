/* checkpoint.h: training checkpoints. A validating safetensors reader and writer, save/resume of a
 * whole training state (weights, optimizer state, step, schedule, sampler position, RNG, loss
 * scaler) written crash-safely with a CRC32 manifest, and the SIGTERM/SIGINT preemption flag that
 * every rank agrees on. Layout and atomicity are described below; rank 0 reads and writes, the
 * other ranks receive what it read by broadcast, so no shared file system is needed. */
#ifndef LOCKSTEP_CHECKPOINT_H
#define LOCKSTEP_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "ema.h"
#include "nn.h"
#include "optim.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- safetensors
 * The format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {"key": "string", ...}, "name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ...}, then the tensors' raw little-endian bytes. Offsets are
 * relative to the end of the header. The writer pads the header with spaces to a multiple of 8
 * and lays tensors out contiguously in the order given.
 * The reader accepts exactly what the reference implementation accepts: N <= 100 MB and within
 * the file, a header that starts with '{', is UTF-8 JSON (trailing whitespace allowed), has no
 * duplicate names, known dtypes, integer shapes and offsets, shape product x dtype size equal to
 * each offset span, and spans that tile the data section exactly (no gap, no overlap, nothing
 * after the last). Every error is LS_ERR_FORMAT naming the file and, where there is one, the
 * tensor. Host byte order must be little-endian (LS_ERR_UNSUPPORTED otherwise). */

#define LS_SAFETENSORS_MAX_DIMS 8
#define LS_SAFETENSORS_MAX_HEADER 100000000ull

typedef struct ls_safetensors ls_safetensors;

typedef struct ls_safetensors_info {
    const char *name;
    const char *dtype_name; /* as in the file: "F32", "I64", ... */
    int has_dtype;          /* 1 when lockstep has this dtype (F64, F32, F16, BF16, I32, U8) */
    ls_dtype dtype;         /* valid when has_dtype */
    size_t elem_size;
    int ndim;
    int64_t shape[LS_SAFETENSORS_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the file's bytes (mapped or in memory), little-endian, not necessarily aligned */
    size_t nbytes;
} ls_safetensors_info;

/* Map a file read-only and validate it (read whole where it cannot be mapped): no tensor's bytes
 * are read until used. Like safetensors' safe_open, a file truncated by another program while it
 * is open makes reading the lost bytes fault (SIGBUS); lockstep's own writes replace files by
 * rename, never in place. */
ls_status ls_safetensors_open(const char *path, ls_safetensors **out);
/* Validate a buffer already in memory (borrowed: keep it alive until close). name labels errors. */
ls_status ls_safetensors_open_memory(const void *buf, size_t len, const char *name, ls_safetensors **out);
void ls_safetensors_close(ls_safetensors *f);

/* Tensors in data-offset (file) order. */
int ls_safetensors_count(const ls_safetensors *f);
const ls_safetensors_info *ls_safetensors_tensor(const ls_safetensors *f, int i);
/* NULL when absent. */
const ls_safetensors_info *ls_safetensors_find(const ls_safetensors *f, const char *name);
/* A "__metadata__" value, NULL when absent. */
const char *ls_safetensors_metadata(const ls_safetensors *f, const char *key);
/* Copy tensor `name` into dst (any device; alloc does host->device transfers, NULL for host).
 * Missing: LS_ERR_FORMAT; different dtype or shape: LS_ERR_INVALID_ARGUMENT, naming file and tensor. */
ls_status ls_safetensors_read(const ls_safetensors *f, const char *name, ls_allocator *alloc, ls_tensor *dst);

/* Serialize tensors[0..n) named names[0..n) (on any device: alloc does device->host copies,
 * NULL for host tensors) into a malloc'd buffer *out of *out_len bytes. metadata: NULL or
 * "key", "value", ..., NULL. What a reader would refuse is LS_ERR_INVALID_ARGUMENT, naming it: a name
 * empty or twice, a metadata key twice, a name, key or value that is not UTF-8. */
ls_status ls_safetensors_serialize(int n, const char *const *names, const ls_tensor *const *tensors,
                                   const char *const *metadata, ls_allocator *alloc, void **out, size_t *out_len);
/* Write path crash-safely (path.tmp, fsync, rename, fsync of the directory), each tensor as it
 * comes: the file is never built in memory (device tensors pass through a staging buffer of at
 * most LS_CKPT_STAGE_BYTES). The bytes are ls_safetensors_serialize's. */
ls_status ls_safetensors_write(const char *path, int n, const char *const *names, const ls_tensor *const *tensors,
                               const char *const *metadata, ls_allocator *alloc);

/* ---------------------------------------------------------------- training checkpoints
 * Layout, for step S (8 digits, more when needed):
 *   DIR/step-0000000S/model.safetensors      parameters, named as ls_module_param_name ("0.weight"),
 *                                            then buffers (BatchNorm's running statistics, named as
 *                                            ls_cnn_buffer: "3.body.1.running_mean")
 *   DIR/step-0000000S/optimizer.safetensors  "<param>.momentum" (SGD) or "<param>.exp_avg" and
 *                                            "<param>.exp_avg_sq" (AdamW), named after the model's
 *                                            parameter whatever the optimizer's order; none for a
 *                                            parameter the optimizer leaves out (frozen: state.json's
 *                                            signature marks it "frozen": true)
 *   DIR/step-0000000S/ema.safetensors        only with an EMA of the weights (ls_ckpt_save_ema): its
 *                                            averages, named as in model.safetensors
 *   DIR/step-0000000S/state.json             everything else (ls_ckpt_state) + the model signature
 *   DIR/step-0000000S/manifest.json          written last: step, each file's size and CRC32 (zlib)
 *   DIR/latest                               "step-0000000S\n", for people and scripts (where it
 *                                            cannot be written, a full disk, the save warns and
 *                                            removes it: the checkpoint is complete)
 * Atomicity: every file is written as NAME.tmp, fsynced and renamed, then its directory fsynced;
 * the whole checkpoint is built in DIR/step-S.tmp/ and that directory is renamed to step-S only
 * after its manifest is durable. So a step-S directory exists only when complete, and a crash at
 * any instant leaves at most a step-S.tmp directory (removed by the next save) while the previous
 * checkpoints stay whole; the manifest's sizes and CRCs additionally catch damage done later
 * (truncation, bit rot, a copy cut short). Why a temporary directory rather than manifest-last in
 * the final one: both survive a crash (a reader needs the manifest either way), but with the
 * rename a half-written step-S never exists, so listing, pruning and cleanup go by name alone and
 * an interrupted save is never mistaken for a damaged checkpoint.
 * --keep-last K: after a checkpoint is complete, only the K newest complete ones (by step) up to
 * it are kept; the one just written is never removed, and newer ones, left by an earlier run, are
 * kept but not counted (they once took the places of this run's own).
 * A checkpoint that is a symbolic link (moved to another disk and linked back) is pruned by
 * removing the link; what it points to is left as it is.
 * Resume "auto": the newest step-S directory whose manifest and files verify; damaged newer ones
 * are skipped with a warning. A checkpoint left by an abandoned run with a higher step would win
 * over this run's: the save warns when it sees one.
 * Ranks: rank 0 writes (the state is replicated) and reads; a load is broadcast from rank 0, so
 * the checkpoint directory only needs to be reachable from rank 0. Every rank returns the same
 * status and message for a save or load: no rank is left waiting. Host memory: rank 0 never holds
 * a file. A save writes each tensor as it comes (from the host as it is, from a device through
 * one staging buffer of at most LS_CKPT_STAGE_BYTES); a load maps the files read-only (the page
 * cache's pages, as safetensors' safe_open) and copies each tensor from there. A sharded optimizer
 * (ls_optimizer_shard): the files are an unsharded save's; each state another rank keeps travels
 * from its owner to rank 0's file (a load: from it to its owner) one tensor at a time, so the
 * allocator of a rank holds at most one more tensor than its own share meanwhile (the largest
 * that another rank than 0 and this one keeps), never the whole state.
 * Fault injection for tests: LOCKSTEP_CKPT_CRASH_AT=<stage> kills the writing process with
 * SIGKILL at that instant of a save: "mid-write" (half of model.safetensors.tmp written),
 * "tmpfile" (model.safetensors.tmp complete, not renamed), "before-manifest" (data files done),
 * "before-rename" (manifest done, directory still step-S.tmp), "before-remove-old" (a save that
 * replaces an existing step-S: the new one exchanged in, the old one in step-S.tmp),
 * "before-latest" (directory renamed, latest not updated, nothing pruned). */

/* Saving tensors that live on a device, rank 0 copies them to the host through one staging
 * buffer of at most this many bytes (pinned where the device's allocator offers it). */
#define LS_CKPT_STAGE_BYTES ((size_t)16 << 20)

#define LS_CKPT_MAX_KV 8
#define LS_CKPT_MAX_RNG 4
#define LS_CKPT_PATH_MAX 1024

typedef struct ls_ckpt_kv {
    char key[32];
    double value;
} ls_ckpt_kv;

typedef struct ls_ckpt_rng {
    char name[32];
    ls_rng rng;
} ls_ckpt_rng;

/* A setting a program records in its checkpoints, as text ("--precision", "fp16"). */
#define LS_CKPT_MAX_SETTINGS 16
typedef struct ls_ckpt_setting {
    char name[64];
    char value[48];
} ls_ckpt_setting;

/* Everything but tensors. The caller fills it for a save; a load fills it (and sets the
 * optimizer's step count itself). */
typedef struct ls_ckpt_state {
    int64_t step;            /* optimizer steps completed */
    int64_t epoch;           /* epoch the next step belongs to (0-based) */
    int64_t epoch_samples;   /* global samples of that epoch already consumed */
    int64_t steps_per_epoch; /* at save time (informational) */
    int world_size;          /* ranks at save time */
    int64_t batch_per_rank;  /* micro-batch per rank */
    int accum_steps;
    uint64_t seed;
    double label_smoothing; /* the training loss's (ls_train_config); 0 in checkpoints from before it */
    double dropout;         /* the model's dropout probability (the examples' --dropout); 0 in checkpoints
                             * from before it; a resume with another warns (ls_ckpt_warn_changes) */
    ls_lr_schedule lr;
    ls_optim_config optim; /* kind and hyperparameters (ls_optimizer_config: a save refuses another kind) */
    int64_t optim_steps;   /* the optimizer's step count (filled by save from the optimizer) */
    int n_loss_scaler;     /* e.g. {"scale", 65536}, {"growth_tracker", 0}, {"skipped", 0}; 0 when no scaler */
    ls_ckpt_kv loss_scaler[LS_CKPT_MAX_KV];
    int n_rng; /* named RNG streams to restore exactly */
    ls_ckpt_rng rng[LS_CKPT_MAX_RNG];
    /* An exponential moving average of the weights (ema.h), saved by ls_ckpt_save_ema in
     * ema.safetensors: has_ema 1, its decay, warmup and updates so far (the save fills them from
     * the ls_ema; a load, from state.json; 0 in checkpoints without one) */
    int has_ema;
    int ema_warmup;
    double ema_decay;
    int64_t ema_updates;
    /* Filled by a load (ls_ckpt_state_parse with a model) from state.json's "layers": how the
     * model's layers (ls_module_layers) differ from the checkpoint's where its parameters do not
     * (another activation): "its layers differ: entry 1 is 'GELU' in the checkpoint but 'ReLU' in
     * this model"; empty when they agree, or the checkpoint (from before 6 December 2026) has none.
     * ls_ckpt_warn_changes says it. */
    char layers_changed[320];
    /* Other settings that shape the training, as the program names them (the examples: --precision,
     * --clip-grad-norm, --augment, --sampler, --sync-bn, --freeze-backbone, the training set's size
     * and CRC32): saved in state.json's "settings"; a resume where one that both runs record
     * differs warns, naming it (ls_ckpt_warn_changes). None in checkpoints from before 6 December 2026. */
    int n_settings;
    ls_ckpt_setting settings[LS_CKPT_MAX_SETTINGS];
} ls_ckpt_state;

/* Collective (comm NULL: one process). Writes DIR/step-<state->step> as above (DIR created if
 * missing), then prunes to keep_last (0: keep all; negative: an error). A state that its load
 * would refuse (a field out of range, a NaN loss scale, a key twice) is LS_ERR_INVALID_ARGUMENT
 * before anything is written, on every rank. Rank 0's model and
 * optimizer (not NULL: its state is what a resume needs) are saved. path_out (may be NULL)
 * receives the checkpoint's directory; one of path_len bytes too small for it (LS_CKPT_PATH_MAX
 * always suffices) is LS_ERR_INVALID_ARGUMENT before anything is written. */
ls_status ls_ckpt_save(ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last, ls_module *model, ls_optimizer *opt,
                       const ls_ckpt_state *state, char *path_out, size_t path_len);
/* The same with an EMA of the weights (ema may be NULL: as ls_ckpt_save): its averages also go to
 * DIR/step-S/ema.safetensors (rank 0's, named as model.safetensors: a file --init-from and
 * ls_model_load take as weights), listed in the manifest, and state.json records its decay, warmup
 * and updates. */
ls_status ls_ckpt_save_ema(ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last, ls_module *model,
                           ls_optimizer *opt, ls_ema *ema, const ls_ckpt_state *state, char *path_out, size_t path_len);

/* ---------------------------------------------------------------- asynchronous saves
 * PyTorch DCP's async_save: training stops only while rank 0 copies the model, optimizer and EMA
 * to host memory (a snapshot: for a sharded optimizer, each state another rank keeps arrives from
 * its owner into it); a thread on rank 0 then writes the checkpoint from the snapshot, exactly the
 * files ls_ckpt_save_ema writes (the same crash-safe steps, manifest, latest and --keep-last),
 * while the training goes on. One save is in flight at a time: the next ls_ckpt_save_async, and
 * ls_ckpt_async_wait, wait for it. The snapshot's host memory (pinned where the device's allocator
 * offers it) is the checkpoint's size; it is kept for the next save and freed by
 * ls_ckpt_async_destroy. A process killed during the write leaves step-S.tmp and the previous
 * checkpoints whole, as a killed synchronous save does. */
typedef struct ls_ckpt_async ls_ckpt_async;

/* What ls_ckpt_async_wait reports of the save it waited for. */
typedef struct ls_ckpt_saved {
    int64_t step;                /* the step saved; -1: no save was in flight */
    char path[LS_CKPT_PATH_MAX]; /* its directory */
    double snapshot_s;           /* the time ls_ckpt_save_async took (this rank's; training stood still) */
    double write_s;              /* the time rank 0's thread took to write it */
    double wait_s;               /* the time ls_ckpt_async_wait waited for the thread (this rank's) */
} ls_ckpt_saved;

ls_status ls_ckpt_async_create(ls_ckpt_async **out);
/* Collective (comm NULL: one process), with the arguments of ls_ckpt_save_ema. Waits for the save
 * in flight first (ls_ckpt_async_wait: its failure is returned, and this save not started), takes
 * the snapshot and returns once rank 0's writer thread has started; the files' errors come from the
 * ls_ckpt_async_wait that follows. model, opt and ema may change, or be destroyed, as soon as it
 * returns. Every rank returns the same status (a snapshot that fails on rank 0 fails every rank).
 * Another save into the same DIR while this one is in flight (ls_ckpt_save, another saver) would
 * remove its step-S.tmp: wait first. */
ls_status ls_ckpt_save_async(ls_ckpt_async *a, ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last,
                             ls_module *model, ls_optimizer *opt, ls_ema *ema, const ls_ckpt_state *state);
/* Collective. Waits until the save in flight is written (done may be NULL) and returns its status
 * on every rank (rank 0's message, as ls_ckpt_save's). With none in flight: LS_OK, done->step = -1. */
ls_status ls_ckpt_async_wait(ls_ckpt_async *a, ls_comm *comm, ls_ckpt_saved *done);
/* Not collective: waits for rank 0's writer thread (a save in flight is completed; a failure not
 * yet reported is logged) and frees the snapshot. Before the context whose allocator took it. */
void ls_ckpt_async_destroy(ls_ckpt_async *a);

/* Collective. which: "auto" (or NULL) = the newest valid checkpoint in dir, *found = 0 and LS_OK
 * when dir has none (a missing dir included), an error when it has some but none verifies;
 * otherwise the path of one checkpoint directory (or of a DIR holding step-S directories, then
 * as auto there), which must verify. which is a path, not a name in dir: "latest", a step number
 * or "step-S" where no such path is are LS_ERR_IO naming what dir holds for it. Checks the model signature and the optimizer kind
 * (LS_ERR_INVALID_ARGUMENT naming the first differing parameter), loads parameters and optimizer
 * state into every rank's model/optimizer, sets the optimizer's step count and fills *state.
 * path_out (may be NULL) receives the checkpoint's directory, cut to path_len - 1 bytes as
 * snprintf cuts (LS_CKPT_PATH_MAX bytes always hold it). Every file is checked before any tensor
 * is written: a checkpoint refused (another model, an optimizer of another kind, a state this run's
 * optimizer needs and the file lacks) leaves the model, optimizer and EMA as they were; only a
 * failure of the copies themselves (out of device memory), or with several ranks a difference
 * between their optimizers or EMAs (found after rank 0's load) or a failed broadcast, may leave
 * them in part. On rank 0, *state holds what state.json records where it was read (the error in
 * the tensors: the settings of the run that saved them, to say what differs), else zeros. */
ls_status ls_ckpt_load(ls_comm *comm, ls_ctx *ctx, const char *dir, const char *which, ls_module *model,
                       ls_optimizer *opt, ls_ckpt_state *state, int *found, char *path_out, size_t path_len);
/* The same with an EMA of the weights (ema may be NULL: as ls_ckpt_load, which ignores a saved one;
 * either way state->has_ema says whether the checkpoint holds one). With ema, a checkpoint that
 * holds one loads its averages and update count into ema on every rank (its decay and warmup stay
 * ema's: ls_ckpt_warn_changes names a difference); one that holds none resets ema to the loaded
 * weights (ls_ema_reset). Every rank passes an ema or none (LS_ERR_MISMATCH otherwise). */
ls_status ls_ckpt_load_ema(ls_comm *comm, ls_ctx *ctx, const char *dir, const char *which, ls_module *model,
                           ls_optimizer *opt, ls_ema *ema, ls_ckpt_state *state, int *found, char *path_out,
                           size_t path_len);

/* Collective (comm NULL: one process): a model's weights from one safetensors file, as PyTorch's
 * model.load_state_dict(safetensors.torch.load_file(path)) with strict=True: rank 0 reads path
 * (a checkpoint's model.safetensors, or a file saved from PyTorch with its parameter names:
 * "0.weight", "2.bias", ..., batch norm's "running_mean" and "running_var"), every parameter and
 * buffer must be there with its shape (f32, f64, f16 or bf16: converted to the model's dtype)
 * and every value finite in the model's dtype (a NaN, or an f64 past f32's range, is refused
 * naming the element: it would train into NaN), and every tensor of the file must be the model's
 * but PyTorch's "*.num_batches_tracked", which are skipped; then every rank gets rank 0's values.
 * Every rank's model must have rank 0's parameters and buffers (count, shapes, dtypes), checked
 * first: a difference is LS_ERR_MISMATCH on every rank, naming the first ("model differs between
 * ranks: ..."). Errors name the file and the tensor; every rank returns rank 0's. All or nothing: every
 * tensor is checked (present, shape, dtype, finite, nothing more in the file) before the first is
 * written, so a file refused leaves the model bit for bit as it was; only a failure of the copies
 * themselves (out of device memory) may leave it in part. */
ls_status ls_model_load(ls_comm *comm, ls_ctx *ctx, const char *path, ls_module *model);
/* path with its slashes normalized into buf (size bytes), returned: runs of '/' as one, none at the
 * end but for "/" itself ("run//" -> "run", so that what is joined to it and printed reads
 * "run/step-00000010"); path itself where it does not fit in buf, or is NULL. What the library's
 * messages print of a checkpoint directory or path given to it (lockstep-ckpt prints the same). */
const char *ls_ckpt_path_normalize(const char *path, char *buf, size_t size);

/* Rank 0, before a run that saves: creates dir (and its parents) as a save would, and checks that
 * a file can be written in it, so that a path that is a file, a read-only file system, a missing
 * permission, a path too long or a DIR/latest that is not a file (a directory) is found at the
 * start and not at the first save, after the training it was to keep. */
ls_status ls_ckpt_prepare_dir(const char *dir);
/* Rank 0, for the whole of a run that saves into dir (after ls_ckpt_prepare_dir): an exclusive
 * lock on dir/.lock (flock; the file holds the holder's pid and host), so that a second run
 * saving there, one started twice by mistake or an old job still running beside its requeued
 * copy, is refused at its start instead of overwriting and pruning the first one's checkpoints.
 * *fd gets the lock's descriptor: ls_ckpt_unlock_dir(*fd) releases it, as the process's end does.
 * LS_ERR_IO naming the holder when another process holds it. Where the file system cannot lock
 * (ENOLCK, EOPNOTSUPP) it warns and returns LS_OK with *fd = -1. */
ls_status ls_ckpt_lock_dir(const char *dir, int *fd);
void ls_ckpt_unlock_dir(int fd);
/* Rank 0, before each save of a run that holds dir's lock (*fd from ls_ckpt_lock_dir): where dir or
 * dir/.lock was removed or replaced since (rm -rf of the directory while the run went on), the
 * save would make it afresh, unlocked, and a second run could take it: the directory is made and
 * locked again (a warning), *fd then the new lock's. LS_ERR_IO, naming the holder, where another
 * run holds it by then: stop rather than write beside it. LS_OK at once when the lock is still
 * the one held, or *fd is -1. */
ls_status ls_ckpt_relock_dir(const char *dir, int *fd);
/* The bytes a checkpoint of model, opt and ema (either may be NULL) takes: its tensors, as
 * saved, and a margin for the headers and state.json. */
uint64_t ls_ckpt_size_estimate(ls_module *model, const ls_optimizer *opt, ls_ema *ema);
/* LS_ERR_IO where the file system of dir (which exists) has fewer than bytes free for this user
 * (statvfs): a full disk found at the start, not at the first save after the training. */
ls_status ls_ckpt_check_space(const char *dir, uint64_t bytes);

/* Check one checkpoint directory as a resume reads it, short of a model: manifest present and
 * well-formed, every listed file present with the recorded size and CRC32, state.json parsed (its
 * format, version 1, fields, the manifest's step), every safetensors header valid. *step (may be
 * NULL) gets its step. Errors name the file; LS_ERR_UNSUPPORTED: a state of a newer version. */
ls_status ls_ckpt_verify(const char *ckpt_dir, int64_t *step);
/* 1 where this user may not read checkpoint directory path, or a file directly in it (EACCES: its
 * permissions, which a chmod mends, not damage); 0 otherwise (NULL too). A resume that meets it
 * in the newest checkpoint stops rather than fall back to an older one (whose saves would replace
 * it); lockstep-ckpt verify says UNREADABLE. */
int ls_ckpt_unreadable(const char *path);
/* The newest checkpoint in dir that verifies (damaged newer ones are skipped with a warning) into
 * path_out (cut as ls_ckpt_load's); *found = 0 when dir holds no checkpoint directories; an error when none verifies, and
 * LS_ERR_UNSUPPORTED at a newer one of a newer state version (older ones are not taken past it). */
ls_status ls_ckpt_find_latest(const char *dir, char *path_out, size_t path_len, int *found);

/* state.json: text of a state plus the model's signature (model may be NULL: no signature). The
 * returned string is malloc'd. */
ls_status ls_ckpt_state_to_json(const ls_ckpt_state *state, ls_module *model, char **out);
/* Parse state.json text (len bytes, no terminator needed; whitespace alone may follow the object:
 * anything else is LS_ERR_FORMAT, a damaged state); name labels errors. With model, also
 * compare the signature: LS_ERR_INVALID_ARGUMENT naming the first differing parameter. */
ls_status ls_ckpt_state_parse(const char *text, size_t len, const char *name, ls_module *model, ls_ckpt_state *out);
/* Warn (log) about settings that differ between a saved state and this run's (world size, batch,
 * seed, schedule, optimizer hyperparameters, an EMA of the weights: kept or not, its decay and
 * warmup); returns how many differ (0 where either is NULL). */
int ls_ckpt_warn_changes(const ls_ckpt_state *saved, const ls_ckpt_state *now);

/* Where to continue in the saved epoch with a global batch of global_batch samples per step:
 * *step_in_epoch = ceil(epoch_samples / global_batch) (*exact = 0 when that rounds up, i.e. the
 * world size or batch changed and the saved position is not on a step boundary: a few samples
 * of that epoch are skipped); past the last step it moves to the start of the next epoch.
 * Bitwise continuation is promised only for the same world size and batch. */
void ls_ckpt_resume_position(const ls_ckpt_state *state, int64_t global_batch, int64_t steps_per_epoch, int64_t *epoch,
                             int64_t *step_in_epoch, int *exact); /* state NULL: the start; outputs may be NULL */

/* ---------------------------------------------------------------- preemption
 * What a scheduler sends before it preempts or cancels a job (Slurm, Kubernetes: SIGTERM; a
 * terminal: SIGINT). The handler only records the signal; the training loop asks after each step
 * whether any rank got one, so every rank stops after the same step, saves and exits. A second
 * signal of the same kind on a rank kills that process at once (the default action). The flag is
 * process-wide, as signals are. */
ls_status ls_preempt_install(void);
/* Restore the previous handlers and clear the flag (after ls_preempt_hold: the signals stay
 * ignored). */
void ls_preempt_uninstall(void);
/* Once the checkpoint a signal asked for is saved and the process is on its way out: ignore
 * further SIGTERM/SIGINT until it exits. When one rank exits with 128 + signal before another,
 * the launcher stops the rest (srun --kill-on-bad-exit, mpirun) with SIGTERM, which would
 * otherwise count as the second signal and kill a rank in its cleanup. */
void ls_preempt_hold(void);
/* The signal this process received (SIGTERM or SIGINT), 0 if none. */
int ls_preempt_pending(void);
/* Collective: *signum = the largest signal number pending on any rank, 0 if none. */
ls_status ls_preempt_agree(ls_comm *comm, int *signum);

#ifdef __cplusplus
}
#endif
#endif
