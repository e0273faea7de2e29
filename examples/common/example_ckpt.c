/* example_ckpt.c: the training examples' checkpointing, resume, step log and preemption
 * (example_ckpt.h), on top of runtime/checkpoint.h. */
#include "example_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cnn.h"
#include "device.h"
#include "example_cli.h"
#include "log.h"

void ex_ckpt_options_init(ex_ckpt_options *o) {
    memset(o, 0, sizeof *o);
    o->keep_last = 3;
    o->checkpoint_dir = "checkpoints";
}

int ex_ckpt_option(const char *prog, ex_ckpt_options *o, int c, const char *arg) {
    switch (c) {
    case EX_OPT_MAX_STEPS: return ex_parse_i64(prog, "--max-steps", arg, 1, INT64_MAX, &o->max_steps) ? -1 : 1;
    case EX_OPT_SAVE_EVERY: return ex_parse_i64(prog, "--save-every", arg, 0, INT64_MAX, &o->save_every) ? -1 : 1;
    /* at most a million (the save takes an int: 4294967298 became 2, and pruned) */
    case EX_OPT_KEEP_LAST: return ex_parse_i64(prog, "--keep-last", arg, 0, 1000000, &o->keep_last) ? -1 : 1;
    case EX_OPT_CHECKPOINT_DIR:
        o->checkpoint_dir = arg;
        o->dir_given = 1;
        return 1;
    case EX_OPT_RESUME: o->resume = arg; return ex_nonempty(prog, "--resume", arg) ? -1 : 1;
    case EX_OPT_LOG_STEPS: o->log_steps = arg; return ex_nonempty(prog, "--log-steps", arg) ? -1 : 1;
    case EX_OPT_DUMP_PARAMS: o->dump_params = arg; return ex_nonempty(prog, "--dump-params", arg) ? -1 : 1;
    case EX_OPT_SAVE_ASYNC: o->save_async = 1; return 1;
    default: return 0;
    }
}

int ex_ckpt_saves(const ex_ckpt_options *o) {
    return o->save_every > 0 || o->dir_given || (o->resume && strcmp(o->resume, "auto") == 0);
}

int ex_ckpt_options_check(const char *prog, const ex_ckpt_options *o) {
    if (!o->checkpoint_dir[0]) {
        fprintf(stderr, "%s: --checkpoint-dir must not be empty\n", prog);
        return -1;
    }
    /* it did nothing: no save but a signal's and the end's, each waited for at once either way */
    if (o->save_async && o->save_every == 0) {
        fprintf(stderr,
                "%s: --save-async: invalid argument: writes --save-every's checkpoints in the background: add "
                "--save-every N\n",
                prog);
        return -1;
    }
    return 0;
}

/* The settings a checkpoint records beyond its own fields (ls_ckpt_state.settings). */
static void record_settings(ex_ckpt *c, const ls_setting *set, int n) {
    static const char *const kept[] = {"--precision",
                                       "--clip-grad-norm",
                                       "--augment",
                                       "--sampler",
                                       "--sync-bn",
                                       "--freeze-backbone",
                                       "the training set's size (--train-limit, --data-dir)",
                                       "the training set's CRC32 (its files in --data-dir)"};
    c->n_settings = 0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof kept / sizeof kept[0] && c->n_settings < LS_CKPT_MAX_SETTINGS; k++) {
            if (strcmp(set[i].name, kept[k]) != 0) continue;
            ls_ckpt_setting *x = &c->settings[c->n_settings++];
            snprintf(x->name, sizeof x->name, "%s", set[i].name);
            if (set[i].kind == LS_SETTING_STR)
                snprintf(x->value, sizeof x->value, "%s", set[i].str ? set[i].str : "(none)");
            else if (set[i].kind == LS_SETTING_FLAG)
                snprintf(x->value, sizeof x->value, "%s", set[i].num != 0 ? "on" : "off");
            else
                snprintf(x->value, sizeof x->value, "%.17g", set[i].num);
        }
}

ls_status ex_check_same_options(ls_comm *comm, ls_setting *set, int n, const ex_train_flags *tf,
                                const ex_ckpt_options *ck, const ls_dataset *train, const ls_dataset *test,
                                ex_ckpt *record) {
    n += ex_train_flags_settings(tf, set + n);
    set[n++] = ls_setting_num("--max-steps", (double)ck->max_steps);
    set[n++] = ls_setting_num("--save-every", (double)ck->save_every);
    set[n++] = ls_setting_flag("--save-async", ck->save_async);
    set[n++] = ls_setting_str("--resume", ck->resume);
    set[n++] = ls_setting_num("the training set's size (--train-limit, --data-dir)", (double)train->n);
    set[n++] = ls_setting_num("the test set's size (--test-limit, --data-dir)", (double)test->n);
    /* the same sizes from other files (another host's --data-dir) */
    set[n++] = ls_setting_num("the training set's CRC32 (its files in --data-dir)", ls_dataset_crc32(train));
    set[n++] = ls_setting_num("the test set's CRC32 (its files in --data-dir)", ls_dataset_crc32(test));
    if (record) record_settings(record, set, n);
    return ls_ddp_check_settings(comm, n, set);
}

/* Restores the loss scaler's "scale", "growth_tracker" and "skipped" (see save), when this run scales the
 * loss (fp16): a checkpoint of an fp16 run resumed in bf16 or fp32 has no scale to apply. */
/* fp16: the checkpoint's loss scale and growth tracker (path: the checkpoint, for errors). A value
 * that is not one is refused, named (a growth tracker of 2.5 was truncated); a checkpoint without
 * them (written without fp16) starts the scaler afresh, said so. */
static ls_status restore_loss_scaler(ls_trainer *t, const ls_ckpt_state *saved, const char *path, int rank) {
    ls_loss_scaler sc;
    LS_CHECK(ls_trainer_get_loss_scaler(t, &sc));
    if (!sc.enabled) return LS_OK;
    int have = 0;
    for (int k = 0; k < saved->n_loss_scaler; k++) {
        const char *key = saved->loss_scaler[k].key;
        double v = saved->loss_scaler[k].value;
        if (strcmp(key, "scale") == 0) {
            if (!(isfinite(v) && v > 0))
                return ls_error(LS_ERR_FORMAT, "'%s/state.json': the loss scale %g is not a number > 0", path, v);
            sc.scale = v;
            have = 1;
        }
        if (strcmp(key, "growth_tracker") == 0) {
            if (!(v >= 0 && v == floor(v) && v <= (double)(1ll << 53)))
                return ls_error(LS_ERR_FORMAT,
                                "'%s/state.json': the loss scaler's growth_tracker %g is not a whole "
                                "number >= 0",
                                path, v);
            sc.growth_tracker = (int64_t)v;
        }
        /* in checkpoints since 7 December 2026 (before: the count starts at 0); a whole number >= 0
         * (ls_ckpt_state_parse) */
        if (strcmp(key, "skipped") == 0) sc.skipped = (int64_t)v;
    }
    if (!have && rank == 0)
        LS_LOG_W("'%s' holds no loss scale (written without fp16): the scaler starts at %g", path, sc.scale);
    ls_status s = ls_trainer_set_loss_scaler(t, &sc);
    return s == LS_OK ? s : ls_error_context(s, "the checkpoint's loss scaler");
}

static ls_status shared(ex_ckpt *c, ls_status s);

/* Recorded settings that decide which parameters the optimizer steps: a checkpoint's optimizer
 * state fits only a run where it is the same. What each value means, in words. */
static const struct {
    const char *name, *on, *off;
} same_on_resume[] = {{"--freeze-backbone", "the backbone frozen, without optimizer state", "every layer trained"}};

/* Rank 0, a resume that failed (s) once saved (state.json's settings, read before the tensors)
 * was read: where the checkpoint's optimizer state did not fit this run's (LS_ERR_INVALID_ARGUMENT)
 * and a setting of same_on_resume differs, the error says how it was saved and the flag to add or
 * drop (it said only that a tensor was missing). */
static ls_status resume_failed(const ex_ckpt *c, const ls_ckpt_state *saved, ls_status s) {
    if (s != LS_ERR_INVALID_ARGUMENT) return s;
    for (size_t k = 0; k < sizeof same_on_resume / sizeof same_on_resume[0]; k++)
        for (int i = 0; i < saved->n_settings; i++)
            for (int j = 0; j < c->run.n_settings; j++) {
                const ls_ckpt_setting *a = &saved->settings[i], *b = &c->run.settings[j];
                if (strcmp(a->name, same_on_resume[k].name) != 0 || strcmp(b->name, a->name) != 0 ||
                    strcmp(a->value, b->value) == 0)
                    continue;
                const int on = strcmp(a->value, "on") == 0;
                return ls_error_context(
                    s, "the checkpoint was saved %s %s (%s): %s %s to resume it", on ? "with" : "without", a->name,
                    on ? same_on_resume[k].on : same_on_resume[k].off, on ? "add" : "drop", a->name);
            }
    return s;
}

/* Rank 0, resuming with --batch-size auto: the search ran again and may find another batch than the
 * checkpoint's (another cap, another machine). The warning above says only that the batches differ;
 * this says which the search found and what to do: the saved batch is at most the one found, so it
 * fits (give it to continue bitwise), or it is larger and does not fit this cap. */
static void batch_auto_note(const ex_ckpt *c, const ls_ckpt_state *saved) {
    const long long found = (long long)c->run.batch_per_rank, was = (long long)saved->batch_per_rank;
    if (!c->batch_auto || was <= 0 || was == found) return;
    if (was < found && saved->world_size == c->run.world_size && saved->accum_steps == c->run.accum_steps)
        printf("%s: --batch-size auto found %lld per rank, the checkpoint was trained at %lld: give --batch-size %lld "
               "(it fits) to continue it bitwise\n",
               c->prog, found, was, was);
    else if (was < found)
        printf("%s: --batch-size auto found %lld per rank, the checkpoint was trained at %lld (it fits: give "
               "--batch-size %lld to keep it)\n",
               c->prog, found, was, was);
    else
        printf("%s: --batch-size auto found %lld per rank, the checkpoint was trained at %lld, which does not fit "
               "this cap: training goes on at %lld, not bitwise\n",
               c->prog, found, was, found);
}

static ls_status resume(ex_ckpt *c, int64_t *start_epoch, int64_t *start_j) {
    int rank = ls_comm_rank(c->comm), found, exact;
    ls_ckpt_state saved;
    /* rank 0 reads and shares the outcome: a failure is every rank's (said once, no abort) */
    ls_status ls = shared(c, ls_ckpt_load_ema(c->comm, c->ctx, c->o->checkpoint_dir, c->o->resume, c->model, c->opt,
                                              c->ema, &saved, &found, c->path, sizeof c->path));
    if (ls != LS_OK) return rank == 0 ? resume_failed(c, &saved, ls) : ls;
    c->agreed = 0;
    if (!found) {
        if (rank == 0) printf("%s: no checkpoint in %s; starting from step 0\n", c->prog, c->o->checkpoint_dir);
        return LS_OK;
    }
    ls_trainer_set_num_steps(c->trainer, saved.step);
    LS_CHECK(restore_loss_scaler(c->trainer, &saved, c->path, rank));
    c->last_saved = saved.step;
    int64_t steps = c->run.steps_per_epoch, gb = c->global_batch;
    ls_ckpt_resume_position(&saved, gb, steps, start_epoch, start_j, &exact);
    /* the schedule's total counts this run's steps: its position is where the data is in them (with
     * another global batch, not the saved step count) */
    const int64_t at = *start_epoch * steps + *start_j;
    if (at != saved.step) ls_trainer_set_schedule_step(c->trainer, at);
    if (rank != 0) return LS_OK;
    ls_ckpt_warn_changes(&saved, &c->run);
    batch_auto_note(c, &saved);
    if (!exact) {
        /* the next step boundary, or the epoch's end where that is past its last step (the position
         * then moved to step 0 of the next epoch: counted from there, the skip was negative) */
        int64_t boundary = (saved.epoch_samples + gb - 1) / gb;
        /* before the epoch's last step every step is full, so the count skipped is known; the last
         * one may be short (128 skipped of the 80 left was printed) */
        if (boundary < steps)
            printf("%s: the checkpoint had consumed %lld samples of epoch %lld, not a multiple of this run's "
                   "global batch of %lld: continuing at the next step boundary (%lld samples skipped)\n",
                   c->prog, (long long)saved.epoch_samples, (long long)saved.epoch + 1, (long long)gb,
                   (long long)(boundary * gb - saved.epoch_samples));
        else
            printf("%s: the checkpoint had consumed %lld samples of epoch %lld, not a multiple of this run's "
                   "global batch of %lld: continuing at the start of epoch %lld (the rest of epoch %lld, less than "
                   "a global batch, skipped)\n",
                   c->prog, (long long)saved.epoch_samples, (long long)saved.epoch + 1, (long long)gb,
                   (long long)saved.epoch + 2, (long long)saved.epoch + 1);
    }
    if (at != saved.step && c->run.lr.total_steps > 0) /* --epochs 0: no schedule to continue */
        printf("%s: the learning-rate schedule continues from its step %lld of %lld (the samples consumed in "
               "steps of this run's global batch), not from the saved step count %lld\n",
               c->prog, (long long)at, (long long)c->run.lr.total_steps, (long long)saved.step);
    if (*start_j == 0 && *start_epoch > 0) /* saved at an epoch's end */
        printf("%s: resumed from %s at step %lld, the end of epoch %lld\n", c->prog, c->path, (long long)saved.step,
               (long long)*start_epoch);
    else
        printf("%s: resumed from %s at step %lld, epoch %lld (step %lld of %lld in the epoch)\n", c->prog, c->path,
               (long long)saved.step, (long long)*start_epoch + 1, (long long)*start_j, (long long)steps);
    return LS_OK;
}

void ex_ckpt_init(ex_ckpt *c, const char *prog, const ex_ckpt_options *o) {
    memset(c, 0, sizeof *c);
    c->prog = prog;
    c->o = o;
    c->last_saved = -1;
    c->lock_fd = -1;
}

ls_status ex_ckpt_begin(ex_ckpt *c, ls_comm *comm, ls_ctx *ctx, ls_module *model, ls_optimizer *opt,
                        ls_trainer *trainer, const ls_train_config *tc, const ls_optim_config *oc, uint64_t seed,
                        int64_t steps_per_epoch, int64_t *start_epoch, int64_t *start_j) {
    const ex_ckpt_options *o = c->o;
    c->agreed = 0;
    c->comm = comm;
    c->ctx = ctx;
    c->model = model;
    c->opt = opt;
    c->trainer = trainer;
    /* this run's settings, saved with each checkpoint and compared with a resumed one's */
    memset(&c->run, 0, sizeof c->run);
    c->run.steps_per_epoch = steps_per_epoch;
    c->run.world_size = ls_comm_world(comm);
    c->run.batch_per_rank = tc->batch_per_rank;
    c->run.accum_steps = tc->accum_steps;
    c->run.seed = seed;
    c->run.label_smoothing = tc->label_smoothing;
    c->run.dropout = c->dropout;
    c->run.n_settings = c->n_settings;
    memcpy(c->run.settings, c->settings, sizeof c->settings);
    c->run.lr = tc->lr;
    c->run.optim = *oc;
    if (c->ema) { /* compared with a resumed checkpoint's (a save takes them from the EMA) */
        c->run.has_ema = 1;
        c->run.ema_decay = ls_ema_decay(c->ema);
        c->run.ema_warmup = ls_ema_warmup(c->ema);
    }
    c->global_batch = tc->batch_per_rank * tc->accum_steps * c->run.world_size;
    *start_epoch = *start_j = 0;
    int saves = ex_ckpt_saves(o); /* rank 0's: shared below */
    if (saves && ls_comm_rank(comm) == 0) {
        /* before the resume reads it: a second run saving into the same directory (started twice,
         * or an old job beside its requeued copy) is refused, not left to prune the first's */
        c->what = "--checkpoint-dir";
        ls_status ps = ls_ckpt_prepare_dir(o->checkpoint_dir);
        if (ps != LS_OK && o->save_every == 0 && o->resume) {
            /* --checkpoint-dir alone asks for the save at the end, but is also where --resume auto
             * looks: a checkpoint store this run may read but not write (read-only, another
             * user's) is resumed from, and only the save at the end is given up, saying so
             * (without --resume, a directory that cannot be written is an error at the start) */
            LS_LOG_W("--checkpoint-dir %s: no checkpoint will be saved at the end of this run (--save-every N would "
                     "make this an error)",
                     ls_last_error());
            saves = 0;
        } else {
            LS_CHECK(ps);
            LS_CHECK(ls_ckpt_lock_dir(o->checkpoint_dir, &c->lock_fd));
        }
    }
    if (o->resume) {
        c->what = "--resume";
        LS_CHECK(resume(c, start_epoch, start_j));
        fflush(stdout);
    }
    c->step = c->first_step = ls_trainer_num_steps(trainer);
    c->pos_epoch = *start_epoch;
    c->pos_samples = *start_j * c->global_batch;
    /* --log-steps is rank 0's option (the others may lack it), but the loss it writes is summed over
     * every rank: rank 0's choice decides where all take part (a rank 0 alone with the flag made its
     * all-reduce meet the others' next collective: MPI_ERR_TRUNCATE, or a hang) */
    /* the same for the save at the end that a --checkpoint-dir without --save-every asks for (a
     * collective: rank 0 alone with the flag would wait in it for ever) */
    int32_t on[2] = {o->log_steps != NULL, saves};
    c->what = "--log-steps";
    LS_CHECK(ls_comm_broadcast_host(comm, on, 2, LS_I32, 0));
    c->log_steps_on = on[0];
    c->save_at_end = on[1];
    if (o->log_steps && ls_comm_rank(comm) == 0) {
        LS_CHECK(ex_step_file_open(o->log_steps, c->last_saved, "--log-steps", &c->step_log));
    }
    if (o->dump_params && ls_comm_rank(comm) == 0) { /* written after training: found out now, not then */
        c->what = "--log-steps";
        LS_CHECK(ex_check_not_dump(c->step_log, o->log_steps, o->dump_params));
        c->what = "--dump-params";
        struct stat sb;
        const int existed = stat(o->dump_params, &sb) == 0;
        if (existed && !S_ISREG(sb.st_mode)) { /* a FIFO, a device: written as it is; opened now, a
                                                  FIFO's reader got its end and the dump hung */
            if (S_ISDIR(sb.st_mode) || access(o->dump_params, W_OK) != 0)
                return ls_error(LS_ERR_IO, "cannot open '%s' for writing: %s", o->dump_params,
                                S_ISDIR(sb.st_mode) ? strerror(EISDIR) : strerror(errno));
        } else {
            FILE *f = fopen(o->dump_params, "ab");
            if (!f) return ls_error(LS_ERR_IO, "cannot open '%s' for writing: %s", o->dump_params, strerror(errno));
            fclose(f);
            if (!existed) unlink(o->dump_params);
        }
    }
    if (saves && ls_comm_rank(comm) == 0) { /* the same: not after the epochs to be saved */
        c->what = "--checkpoint-dir";       /* (ls_ckpt_prepare_dir above) */
        /* (a full disk was found at the first save, after the training it was to keep) */
        LS_CHECK(ls_ckpt_check_space(o->checkpoint_dir, ls_ckpt_size_estimate(model, opt, c->ema)));
    }
    c->what = "signal handlers";
    LS_CHECK(ls_preempt_install());
    c->preempt_installed = 1;
    return LS_OK;
}

int ex_ckpt_done(ex_ckpt *c) {
    if (c->o->max_steps > 0 && c->step >= c->o->max_steps) c->max_reached = 1;
    return c->max_reached;
}

/* Rank 0: "saved checkpoint DIR (step N): X MB in Y s" (the files' size: a save of a large model
 * is a pause worth seeing), and what follows. */
static void print_saved(ex_ckpt *c, int64_t step, double seconds, const char *more) {
    double bytes = 0;
    DIR *d = opendir(c->path);
    struct dirent *e;
    struct stat sb;
    char p[sizeof c->path + 300];
    while (d && (e = readdir(d)) != NULL) {
        snprintf(p, sizeof p, "%s/%s", c->path, e->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) bytes += (double)sb.st_size;
    }
    if (d) closedir(d);
    if (c->progress) ex_progress_clear(); /* a line of its own on a terminal */
    printf("%s: saved checkpoint %s (step %lld): %.1f MB in %.2f s%s\n", c->prog, c->path, (long long)step, bytes / 1e6,
           seconds, more);
    fflush(stdout);
}

/* s, the outcome of a call that rank 0 shares with every rank (a save's, the lock's): a failure is
 * then every rank's, but where a collective itself failed (LS_ERR_COMM: the others may not know). */
static ls_status shared(ex_ckpt *c, ls_status s) {
    c->agreed = s != LS_OK && s != LS_ERR_COMM;
    return s;
}

/* --save-async: waits for the save in flight, if any, and prints its line. */
static ls_status finish_async(ex_ckpt *c) {
    ls_ckpt_saved d;
    if (!c->saver) return LS_OK;
    c->what = "checkpoint";
    LS_CHECK(shared(c, ls_ckpt_async_wait(c->saver, c->comm, &d)));
    if (d.step < 0) return LS_OK;
    snprintf(c->path, sizeof c->path, "%s", d.path);
    if (ls_comm_rank(c->comm) == 0) {
        char more[96];
        snprintf(more, sizeof more, " in the background (training stopped %.2f s)", d.snapshot_s + d.wait_s);
        print_saved(c, d.step, d.write_s, more);
    }
    return LS_OK;
}

/* Before a save: rank 0's lock on --checkpoint-dir still held, taken again where the directory
 * was removed while the run went on (ls_ckpt_relock_dir); every rank gets rank 0's outcome. */
static ls_status keep_lock(ex_ckpt *c) {
    ls_status s = ls_comm_rank(c->comm) == 0 ? ls_ckpt_relock_dir(c->o->checkpoint_dir, &c->lock_fd) : LS_OK;
    return ls_comm_agree(c->comm, s);
}

/* Saves step c->step, positioned where the next step starts, with the loss scaler's state. With
 * --save-async the write goes on in the background, unless now (a signal's save, the last one):
 * then it is waited for. */
static ls_status save(ex_ckpt *c, int now) {
    ls_ckpt_state st = c->run;
    ls_loss_scaler sc;
    LS_CHECK(ls_trainer_get_loss_scaler(c->trainer, &sc));
    if (sc.enabled) {
        st.n_loss_scaler = 2;
        snprintf(st.loss_scaler[0].key, sizeof st.loss_scaler[0].key, "scale");
        st.loss_scaler[0].value = sc.scale;
        snprintf(st.loss_scaler[1].key, sizeof st.loss_scaler[1].key, "growth_tracker");
        st.loss_scaler[1].value = (double)sc.growth_tracker;
        /* the steps skipped so far (ls_trainer_get_loss_scaler's): a resume restarted it at 0 */
        st.n_loss_scaler = 3;
        snprintf(st.loss_scaler[2].key, sizeof st.loss_scaler[2].key, "skipped");
        st.loss_scaler[2].value = (double)sc.skipped;
    }
    st.step = c->step;
    st.epoch = c->pos_epoch;
    st.epoch_samples = c->pos_samples;
    if (c->o->save_async) {
        LS_CHECK(finish_async(c)); /* the save before: its line first */
        if (!c->saver) LS_CHECK(ls_ckpt_async_create(&c->saver));
        c->what = "checkpoint";
        LS_CHECK(shared(c, keep_lock(c)));
        LS_CHECK(shared(c, ls_ckpt_save_async(c->saver, c->comm, c->ctx, c->o->checkpoint_dir, (int)c->o->keep_last,
                                              c->model, c->opt, c->ema, &st)));
        c->last_saved = c->step;
        return now ? finish_async(c) : LS_OK;
    }
    c->what = "checkpoint";
    struct timespec t0, t1;
    LS_CHECK(shared(c, keep_lock(c)));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    LS_CHECK(shared(c, ls_ckpt_save_ema(c->comm, c->ctx, c->o->checkpoint_dir, (int)c->o->keep_last, c->model, c->opt,
                                        c->ema, &st, c->path, sizeof c->path)));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->last_saved = c->step;
    if (ls_comm_rank(c->comm) == 0)
        print_saved(c, c->step, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), "");
    return LS_OK;
}

ls_status ex_ckpt_step_file_failed(ex_ckpt *c, const char *what, ls_status s) {
    if (s != LS_ERR_IO || c->io_what) return s;
    c->io_what = what;
    snprintf(c->io_why, sizeof c->io_why, "%s", ls_last_error());
    ls_error_clear();
    return LS_OK;
}

static const char *sig_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

ls_status ex_ckpt_after_step(ex_ckpt *c, const ls_step_stats *st, int64_t global, int last_in_epoch, int *sig) {
    *sig = 0;
    c->agreed = 0;
    c->step = ls_trainer_num_steps(c->trainer);
    if (c->log_steps_on) {
        double l[2] = {st->loss_sum, (double)st->samples};
        c->what = "--log-steps";
        LS_CHECK(ls_comm_allreduce_host(c->comm, l, 2, LS_F64, LS_REDUCE_SUM));
        if (c->step_log && (fprintf(c->step_log, "%lld %.17g\n", (long long)c->step, ex_plain_nan(l[0] / l[1])) < 0 ||
                            fflush(c->step_log) != 0))
            (void)ex_ckpt_step_file_failed(
                c, "--log-steps", ls_error(LS_ERR_IO, "cannot write '%s': %s", c->o->log_steps, strerror(errno)));
    }
    /* Every rank stops after the same step when any rank got SIGTERM/SIGINT, or when rank 0 could
     * not write the step's line (a full disk: rank 0 alone failed, and aborted the job, which lost
     * the training since the last checkpoint); agreed in one all-reduce, as ls_preempt_agree's */
    c->what = "preemption";
    int32_t v[2] = {(int32_t)ls_preempt_pending(), c->io_what != NULL};
    if (ls_comm_world(c->comm) > 1) LS_CHECK(ls_comm_allreduce_host(c->comm, v, 2, LS_I32, LS_REDUCE_MAX));
    *sig = (int)v[0];
    c->pos_samples += global;
    if (last_in_epoch) {
        c->pos_epoch++;
        c->pos_samples = 0;
    }
    /* a signal in the same step: both said, and the exit status the error's (1), not the clean
     * stop's (143): the signal alone was said, the line missing from the file unsaid */
    if (v[1]) {
        const int rank0 = ls_comm_rank(c->comm) == 0;
        if (c->progress) ex_progress_clear();
        if (rank0) { /* said first: the save may fail too (the same full disk) */
            fprintf(stderr, "%s: %s: I/O error: %s; saving a checkpoint of step %lld and stopping\n", c->prog,
                    c->io_what ? c->io_what : "a step file", c->io_why, (long long)c->step);
            fflush(stderr);
        }
        if (c->step != c->last_saved) LS_CHECK(save(c, 1));
        if (*sig) {
            if (rank0)
                printf("%s: received %s: finished step %lld, saved checkpoint %s; exiting with status 1 for the %s "
                       "error\n",
                       c->prog, sig_name(*sig), (long long)c->step, c->path, c->io_what ? c->io_what : "step file");
            fflush(stdout);
            ls_preempt_hold(); /* saved: a launcher's SIGTERM to the last ranks must not kill them */
            *sig = 0;          /* the error decides the exit status */
        }
        c->what = rank0 ? c->io_what : "step file";
        c->agreed = 1;
        return ls_error(LS_ERR_IO,
                        "stopped after step %lld, whose line is not in the file; --resume auto continues from %s "
                        "once the file can be written",
                        (long long)c->step, c->path);
    }
    if (*sig || (c->o->save_every > 0 && c->step % c->o->save_every == 0)) LS_CHECK(save(c, *sig != 0));
    if (*sig) {
        if (c->progress) ex_progress_clear();
        if (ls_comm_rank(c->comm) == 0)
            printf("%s: received %s: finished step %lld, saved checkpoint %s; exiting\n", c->prog, sig_name(*sig),
                   (long long)c->step, c->path);
        fflush(stdout);
        ls_preempt_hold(); /* saved: a launcher's SIGTERM to the last ranks must not kill them */
    }
    return LS_OK;
}

ls_status ex_ckpt_end(ex_ckpt *c) {
    int rank = ls_comm_rank(c->comm);
    c->agreed = 0;
    if (c->max_reached && c->step > c->first_step && rank == 0) { /* else "nothing to train" said it */
        printf("%s: stopped at step %lld (--max-steps)\n", c->prog, (long long)c->step);
        fflush(stdout);
    }
    if (c->save_at_end && c->step > 0 && c->step != c->last_saved) LS_CHECK(save(c, 1));
    LS_CHECK(finish_async(c)); /* the last save, when it was the last step's */
    if (c->o->dump_params && rank == 0) {
        c->what = "--dump-params";
        LS_CHECK(ex_dump_params(c->ctx, c->model, c->o->dump_params));
    }
    return LS_OK;
}

void ex_ckpt_close(ex_ckpt *c) {
    ls_ckpt_async_destroy(c->saver); /* after an error: a save in flight is still completed */
    c->saver = NULL;
    ex_step_file_close(c->step_log);
    c->step_log = NULL;
    if (c->preempt_installed) ls_preempt_uninstall();
    c->preempt_installed = 0;
    ls_ckpt_unlock_dir(c->lock_fd);
    c->lock_fd = -1;
}

ls_status ex_dump_params(ls_ctx *ctx, ls_module *m, const char *path) {
    /* a file: written as PATH.tmp, then renamed over PATH (a full disk cut the dump short, and the
     * last one was gone already); a FIFO or a device: in place */
    struct stat sb;
    const int special = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
    char tmp[4200];
    if (!special && (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': the path is too long", path);
    const char *to = special ? path : tmp;
    FILE *f = fopen(to, "wb");
    if (!f) return ls_error(LS_ERR_IO, "cannot open '%s' for writing: %s", to, strerror(errno));
    ls_status s = LS_OK;
    int np = ls_module_num_params(m), n = np + ls_cnn_num_buffers(m);
    for (int i = 0; i < n && s == LS_OK; i++) {
        ls_tensor *p = i < np ? ls_module_param(m, i) : ls_cnn_buffer(m, i - np, NULL, 0);
        void *h = malloc(ls_tensor_nbytes(p));
        if (!h) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to dump parameters");
            break;
        }
        ls_tensor ht = ls_tensor_view(h, p->dtype, ls_device_cpu(), p->ndim, p->shape);
        s = ls_tensor_copy(ctx->alloc, &ht, p);
        if (s == LS_OK && fwrite(h, 1, ls_tensor_nbytes(p), f) != ls_tensor_nbytes(p))
            s = ls_error(LS_ERR_IO, "cannot write '%s': %s", to, strerror(errno));
        free(h);
    }
    if (s == LS_OK && (fflush(f) != 0 || (!special && fsync(fileno(f)) != 0)))
        s = ls_error(LS_ERR_IO, "cannot write '%s': %s", to, strerror(errno));
    if (fclose(f) != 0 && s == LS_OK) s = ls_error(LS_ERR_IO, "cannot close '%s': %s", to, strerror(errno));
    if (!special && s == LS_OK && rename(tmp, path) != 0)
        s = ls_error(LS_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (!special && s != LS_OK) unlink(tmp);
    return s;
}
