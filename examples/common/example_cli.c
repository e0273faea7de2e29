/* example_cli.c: the example programs' shared flag parsing, clock and error line (example_cli.h). */
#include "example_cli.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

int ex_parse_i64(const char *prog, const char *flag, const char *s, int64_t min, int64_t max, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    /* digits with an optional '-' only: strtoll also took leading spaces and a '+' */
    int plain = (s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9');
    if (!plain || *end != '\0' || errno || v < min || v > max) {
        if (max == INT64_MAX)
            fprintf(stderr, "%s: %s '%s' must be a whole number >= %lld%s\n", prog, flag, s, (long long)min,
                    plain && *end == '\0' && errno == ERANGE && v == LLONG_MAX ? " (at most 9223372036854775807)" : "");
        else
            fprintf(stderr, "%s: %s '%s' must be a whole number from %lld to %lld\n", prog, flag, s, (long long)min,
                    (long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

int ex_parse_f64(const char *prog, const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* inf, and what overflows to it (1e400, or past a float's range, 1e39, in the configs' floats),
     * would train on non-finite numbers: NaN from step one, or an eps of inf updates of 0 */
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !(v >= 0) || !(v <= FLT_MAX)) {
        fprintf(stderr, "%s: %s '%s' must be a finite number >= 0%s\n", prog, flag, s,
                v > FLT_MAX && isfinite(v) ? " that a float holds (at most 3.4e38)" : "");
        return -1;
    }
    *out = v;
    return 0;
}

int ex_parse_fraction(const char *prog, const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !(v >= 0 && v < 1)) {
        fprintf(stderr, "%s: %s '%s' must be a number from 0 to below 1\n", prog, flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int ex_parse_fraction_f32(const char *prog, const char *flag, const char *s, double *out) {
    if (ex_parse_fraction(prog, flag, s, out)) return -1;
    /* below 1 as a float too (0.99999999999 became a dropout of 1, refused only when the model was
     * built) */
    if ((float)*out < 1.0f) return 0;
    fprintf(stderr, "%s: %s '%s' must be a number from 0 to below 1 (it rounds to 1 as a float)\n", prog, flag, s);
    return -1;
}

int ex_parse_betas(const char *prog, const char *flag, const char *s, double out[2]) {
    char *end;
    double v[2];
    const char *p = s;
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++) {
        errno = 0;
        v[k] = strtod(p, &end);
        ok = end != p && errno != ERANGE && v[k] >= 0 && v[k] < 1 && *end == (k ? '\0' : ',');
        p = end + 1;
    }
    if (!ok) {
        fprintf(stderr, "%s: %s '%s' must be two numbers from 0 to below 1, as 0.9,0.999\n", prog, flag, s);
        return -1;
    }
    out[0] = v[0];
    out[1] = v[1];
    return 0;
}

int ex_nonempty(const char *prog, const char *flag, const char *s) {
    if (s && *s) return 0;
    fprintf(stderr, "%s: %s must not be empty (leave the flag out for its default)\n", prog, flag);
    return -1;
}

double ex_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* stderr is a pipe or a socket: what mpirun and srun give a rank's stderr */
static int stderr_is_pipe(void) {
    struct stat st;
    return fstat(STDERR_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

ls_status ex_progress_decide(ls_comm *comm, int flag, int *on) {
    /* rank 0's stderr decides, or lockstep-run's when rank 0's is mpirun's pipe (LOCKSTEP_STDERR_TTY);
     * not where rank 0's stderr is a file (`sh -c 'prog 2>rank0.log'` under lockstep-run: the log
     * got the progress lines, carriage returns and escapes) */
    const char *tty = getenv("LOCKSTEP_STDERR_TTY");
    int32_t v = flag >= 0 ? flag : isatty(STDERR_FILENO) || (tty && strcmp(tty, "1") == 0 && stderr_is_pipe());
    LS_CHECK(ls_comm_broadcast_host(comm, &v, 1, LS_I32, 0));
    *on = v != 0;
    return LS_OK;
}

ls_status ex_progress(ls_trainer *t, ls_comm *comm, int64_t epoch, int64_t j, int64_t steps, int64_t seen,
                      double elapsed_s) {
    ls_train_totals tot;
    LS_CHECK(ls_trainer_totals_peek(t, &tot));
    double v[2] = {tot.loss_sum, (double)tot.samples}; /* over the ranks, as the epoch line's */
    LS_CHECK(ls_comm_allreduce_host(comm, v, 2, LS_F64, LS_REDUCE_SUM));
    if (ls_comm_rank(comm) != 0) {
        /* rank 0's line is on the terminal this rank's stderr reaches too (lockstep-run's): a line
         * logged here clears it first, as rank 0's own do (it was appended to it) */
        ls_log_progress_shown(1);
        return LS_OK;
    }
    char loss[EX_LOSS_TEXT] = "-"; /* nothing has arrived yet */
    /* "nan" as the epoch line's, not "-nan"; a diverging loss in all its digits overran the
     * buffer: 1.1367e+35 shown cut to 31 digits */
    if (v[1] > 0) ex_loss_text(v[0] / v[1], loss);
    /* erased to the end of the line: a longer line before left its tail */
    fprintf(stderr, "\repoch %d  step %lld/%lld  loss %s  %.0f samples/s\033[K", (int)epoch + 1, (long long)(j + 1),
            (long long)steps, loss, elapsed_s > 0 ? (double)seen / elapsed_s : 0.0);
    ls_log_progress_shown(1);
    return LS_OK;
}

void ex_progress_clear(void) {
    fputs("\r\033[K", stderr);
    ls_log_progress_shown(0);
}

void ex_epoch_part(char *buf, size_t len, int64_t j0, int64_t j_end, int64_t steps) {
    buf[0] = '\0';
    if (j0 == 0 && j_end == steps) return;
    const char *why = j0 > 0 && j_end < steps ? "resumed within the epoch, stopped at --max-steps"
                      : j0 > 0                ? "resumed within the epoch"
                                              : "stopped at --max-steps";
    if (j_end == j0 + 1) /* one step: "steps 4-4" read oddly */
        snprintf(buf, len, "  (train figures of step %lld of %lld: %s)", (long long)j_end, (long long)steps, why);
    else
        snprintf(buf, len, "  (train figures of steps %lld-%lld of %lld: %s)", (long long)j0 + 1, (long long)j_end,
                 (long long)steps, why);
}

double ex_plain_nan(double v) { return isnan(v) ? NAN : v; }

const char *ex_loss_text(double v, char buf[EX_LOSS_TEXT]) {
    v = ex_plain_nan(v);
    snprintf(buf, EX_LOSS_TEXT, isfinite(v) && fabs(v) >= 1e6 ? "%.4e" : "%.4f", v);
    return buf;
}

void ex_diverged_hint(const char *prog, double train_loss, double clip) {
    static int said;
    if (isfinite(train_loss) || said) return;
    said = 1;
    /* a run that clips already was told to clip */
    char c[64] = "--clip-grad-norm";
    if (clip > 0) snprintf(c, sizeof c, "a --clip-grad-norm below %g", clip);
    printf("%s: the train loss is %s: the training diverged (a lower --lr, a longer --warmup-steps or %s may "
           "help)\n",
           prog, isnan(train_loss) ? "nan" : "inf", c);
}

void ex_skipped_note(int64_t skipped, int64_t trained) {
    if (skipped <= 0)
        printf("\n");
    else if (skipped >= trained && trained > 1)
        printf("  (all %lld steps skipped: inf/NaN gradients, no step taken this epoch)\n", (long long)skipped);
    else
        printf("  (%lld step%s skipped: inf/NaN gradients)\n", (long long)skipped, skipped == 1 ? "" : "s");
}

void ex_step_oom_hint(char *buf, size_t len, int64_t batch, int batch_auto, ls_precision precision, int checkpointing,
                      const char *model_flags) {
    char item[5][128];
    int n = 0;
    if (batch > 1) {
        if (batch_auto > 0)
            snprintf(item[n++], sizeof item[0], "a smaller --batch-size than the %lld --batch-size auto found",
                     (long long)batch);
        else
            snprintf(item[n++], sizeof item[0], "a smaller --batch-size%s",
                     batch_auto == 0 ? " (or --batch-size auto)" : "");
    }
    if (precision == LS_PRECISION_FP32) snprintf(item[n++], sizeof item[0], "--precision bf16");
    if (!checkpointing) snprintf(item[n++], sizeof item[0], "--checkpoint-activations");
    if (batch <= 1) {
        snprintf(item[n++], sizeof item[0], "a larger cap");
        snprintf(item[n++], sizeof item[0], "a smaller model (%.100s)", model_flags);
    }
    size_t o = (size_t)snprintf(buf, len, "To fit, try ");
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s",
                              i == 0      ? ""
                              : i + 1 < n ? ", "
                              : n > 2     ? ", or "
                                          : " or ",
                              item[i]);
}

int ex_fail(const char *prog, const char *what, ls_status s) {
    /* not appended to a progress line */
    fprintf(stderr, "%s%s: %s: %s: %s\n", ls_log_progress_shown(0) ? "\r\033[K" : "", prog, what, ls_status_name(s),
            ls_last_error());
    return 1;
}

ls_status ex_parse_widths(const char *s, ls_resnet_config *cfg) {
    cfg->n_stages = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long w = strtoll(p, &end, 10);
        if (end == p || w < 1 || w > INT32_MAX || (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0') ||
            cfg->n_stages == LS_RESNET_MAX_STAGES)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "--widths '%s' is not a comma-separated list of 1 to %d "
                            "positive channel counts",
                            s, LS_RESNET_MAX_STAGES);
        cfg->widths[cfg->n_stages++] = w;
        p = *end ? end + 1 : end;
    }
    if (cfg->n_stages == 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "--widths is empty");
    return LS_OK;
}

ls_status ex_check_fashion_shape(const ls_dataset *train, const ls_dataset *test) {
    const ls_dataset *sets[2] = {train, test};
    for (int i = 0; i < 2; i++) {
        if (sets[i]->features != 784)
            return ls_error(LS_ERR_FORMAT,
                            "the %s images have %lld pixels, not Fashion-MNIST's 28 x 28 = 784: check the files in "
                            "--data-dir (or LOCKSTEP_FASHION_DIR)",
                            i ? "test" : "training", (long long)sets[i]->features);
        /* 14 x 56 has the pixels too, and the ResNet trained on it as 28 x 28 */
        if (sets[i]->rows != 28 || sets[i]->cols != 28)
            return ls_error(LS_ERR_FORMAT,
                            "the %s images are %lld x %lld, not Fashion-MNIST's 28 x 28: check the files in "
                            "--data-dir (or LOCKSTEP_FASHION_DIR)",
                            i ? "test" : "training", (long long)sets[i]->rows, (long long)sets[i]->cols);
    }
    return LS_OK;
}

ls_status ex_check_steps(const ls_sampler *s, int64_t steps, int64_t per_step) {
    if (steps > 0) return LS_OK;
    if (ls_sampler_num_samples(s) == 0) /* no batch helps: fewer samples than ranks */
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "no whole step in an epoch: this rank gets no training samples under --sampler drop-last "
                        "(fewer samples than ranks); use more samples (--train-limit), fewer ranks, or --sampler pad");
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "no whole step in an epoch: this rank's %lld training samples are fewer than a step's %lld "
                    "(--batch-size x --accum-steps) under --sampler drop-last; use a smaller batch, or "
                    "--sampler pad",
                    (long long)ls_sampler_num_samples(s), (long long)per_step);
}

ls_status ex_batcher_init(ex_batcher *b, int64_t per_step) {
    memset(b, 0, sizeof *b);
    b->next_j = -1;
    for (int i = 0; i < 2; i++) {
        b->buf[i] = malloc((size_t)(per_step > 0 ? per_step : 1) * sizeof *b->buf[i]);
        if (!b->buf[i]) {
            ex_batcher_free(b);
            return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for batch indices");
        }
    }
    return LS_OK;
}

void ex_batcher_free(ex_batcher *b) {
    free(b->buf[0]);
    free(b->buf[1]);
    b->buf[0] = b->buf[1] = NULL;
}

void ex_batcher_epoch(ex_batcher *b) { b->next_j = -1; }

ls_status ex_batcher_step(ex_batcher *b, ls_sampler *s, ls_trainer *t, const ls_dataset *d, int64_t j, int64_t steps,
                          int64_t per_step, int64_t **idx, int64_t *count, int64_t *global) {
    if (b->next_j == j) {
        b->cur ^= 1;
        *count = b->ncount;
        *global = b->nglobal;
    } else {
        LS_CHECK(ls_sampler_batch(s, j, per_step, b->buf[b->cur], count, global));
    }
    *idx = b->buf[b->cur];
    b->next_j = -1;
    if (j + 1 < steps) {
        LS_CHECK(ls_sampler_batch(s, j + 1, per_step, b->buf[b->cur ^ 1], &b->ncount, &b->nglobal));
        LS_CHECK(ls_trainer_prefetch(t, d, b->buf[b->cur ^ 1], b->ncount));
        b->next_j = j + 1;
    }
    return LS_OK;
}

ls_status ex_gpu_monitor_start(const char *prog, ls_device dev, int rank, ls_gpu_monitor **out) {
    *out = NULL;
    int interval = 0;
    LS_CHECK(ls_gpu_monitor_interval_from_env(&interval));
    if (dev.type != LS_DEVICE_CUDA || interval == 0) return LS_OK;
    if (ls_gpu_monitor_start(dev, interval, out) != LS_OK) {
        fprintf(stderr, "%s: rank %d: no GPU figures (%s)\n", prog, rank, ls_last_error());
        *out = NULL;
    }
    return LS_OK;
}

void ex_gpu_monitor_restart(ls_gpu_monitor *m) {
    ls_gpu_stats st;
    if (m) (void)ls_gpu_monitor_read(m, &st);
}

void ex_print_nothing_to_train(const char *prog, int epochs, int64_t start_epoch, int64_t step, const double ev[3]) {
    char why[96];
    if (epochs == 0)
        snprintf(why, sizeof why, "--epochs 0");
    else if (start_epoch >= epochs)
        snprintf(why, sizeof why, "all %d epoch%s done at step %lld", epochs, epochs == 1 ? "" : "s", (long long)step);
    else
        snprintf(why, sizeof why, "step %lld has reached --max-steps", (long long)step);
    char l[EX_LOSS_TEXT];
    printf("%s: nothing to train (%s); the model as it is: test loss %s  test acc %.2f%%\n", prog, why,
           ex_loss_text(ev[2] > 0 ? ev[0] / ev[2] : 0.0, l), ev[2] > 0 ? 100.0 * ev[1] / ev[2] : 0.0);
    fflush(stdout);
}

/* 64-bit FNV-1a of the host name and the GPU's id: ranks sharing a GPU have the same key. */
static uint64_t gpu_key(const char *device_id) {
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ '|') * 1099511628211ULL;
    for (const char *p = device_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h | 1; /* never 0, which stands for "no GPU" */
}

ls_status ex_gpu_monitor_report(ls_gpu_monitor *m, ls_comm *comm, int rank) {
    ls_gpu_stats st;
    int have = m && ls_gpu_monitor_read(m, &st) == LS_OK;
    /* ranks that share a GPU count it once: the lowest of them speaks for it */
    int world = ls_comm_world(comm);
    uint64_t key = have ? gpu_key(st.device_id) : 0;
    int32_t mine[2] = {(int32_t)(key >> 32), (int32_t)(key & 0xffffffffu)};
    int32_t *keys = malloc(sizeof(int32_t) * 2 * (size_t)world);
    if (!keys) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the GPU report");
    ls_status s = ls_comm_allgather_host(comm, mine, keys, 2, LS_I32);
    for (int r = 0; s == LS_OK && have && r < rank; r++)
        if (keys[2 * r] == mine[0] && keys[2 * r + 1] == mine[1]) have = 0;
    free(keys);
    LS_CHECK(s);
    /* a figure a GPU does not report (< 0) counts as missing: +big for the minimum, -1 for the
     * maximum, nothing in the sums */
    const double big = 1e300;
#define LO(x) (have && (x) >= 0 ? (x) : big)
#define HI(x) (have && (x) >= 0 ? (x) : -1.0)
    double lo[3] = {LO(st.util_pct), LO(st.mem_util_pct), LO(st.sm_clock_mhz)};
    double hi[6] = {HI(st.util_pct),
                    HI(st.mem_util_pct),
                    HI(st.sm_clock_mhz),
                    HI(st.temp_c),
                    have ? (double)st.mem_used : -1.0,
                    have ? (double)st.mem_total : -1.0};
    double sum[4] = {have ? 1.0 : 0.0, have && st.power_w >= 0 ? st.power_w : 0.0,
                     have && st.power_w >= 0 && st.power_limit_w > 0 ? st.power_limit_w : 0.0,
                     have && st.power_w >= 0 ? 1.0 : 0.0};
#undef LO
#undef HI
    LS_CHECK(ls_comm_allreduce_host(comm, lo, 3, LS_F64, LS_REDUCE_MIN));
    LS_CHECK(ls_comm_allreduce_host(comm, hi, 6, LS_F64, LS_REDUCE_MAX));
    LS_CHECK(ls_comm_allreduce_host(comm, sum, 4, LS_F64, LS_REDUCE_SUM));
    if (rank != 0 || sum[0] < 1) return LS_OK;
    const char *name = have ? st.name : "GPU";
    char buf[400];
    if (sum[0] < 1.5) { /* one GPU: its own figures */
        ls_gpu_stats one;
        memset(&one, 0, sizeof one);
        one.util_pct = hi[0];
        one.mem_util_pct = hi[1];
        one.sm_clock_mhz = hi[2];
        one.temp_c = hi[3];
        one.mem_used = hi[4] > 0 ? (uint64_t)hi[4] : 0;
        one.mem_total = hi[5] > 0 ? (uint64_t)hi[5] : 0;
        one.power_w = sum[3] > 0 ? sum[1] : -1;
        one.power_limit_w = sum[2] > 0 ? sum[2] : -1;
        printf("  %s: %s\n", name, ls_gpu_stats_format(&one, buf, sizeof buf));
        return LS_OK;
    }
    int k = snprintf(buf, sizeof buf, "%.0f GPUs (%s): gpu %.0f-%.0f%% busy (memory %.0f-%.0f%%)", sum[0], name, lo[0],
                     hi[0], lo[1], hi[1]);
    if (hi[5] > 0 && k < (int)sizeof buf)
        k += snprintf(buf + k, sizeof buf - (size_t)k, ", up to %.1f GiB used of %.1f GiB", hi[4] / 1073741824.0,
                      hi[5] / 1073741824.0);
    if (sum[3] > 0 && k < (int)sizeof buf) {
        k += snprintf(buf + k, sizeof buf - (size_t)k, ", %.0f W in all", sum[1]);
        if (sum[2] > 0 && k < (int)sizeof buf) k += snprintf(buf + k, sizeof buf - (size_t)k, " (of %.0f W)", sum[2]);
    }
    if (hi[3] >= 0 && k < (int)sizeof buf) k += snprintf(buf + k, sizeof buf - (size_t)k, ", up to %.0f C", hi[3]);
    if (hi[2] >= 0 && lo[2] < big && k < (int)sizeof buf)
        snprintf(buf + k, sizeof buf - (size_t)k, ", %.0f-%.0f MHz", lo[2], hi[2]);
    printf("  %s\n", buf);
    return LS_OK;
}

/* The lines of f (from its start) that ex_truncate_step_file keeps go to g, or, g NULL, only
 * counted: *prefix_end is then the offset after the last line kept before the first one dropped,
 * and *prefix 1 where no line after that is kept (the lines kept are the file's first bytes). */
static void step_lines(FILE *f, FILE *g, int64_t last, long *prefix_end, int *prefix) {
    char line[4096];
    int dropped = 0;
    *prefix_end = 0;
    *prefix = 1;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break; /* a last line cut short (the run died writing it) */
        const char *p = line;
        while (*p && (*p < '0' || *p > '9')) p++;
        if (*p && strtoll(p, NULL, 10) <= last) {
            if (g) fputs(line, g);
            if (dropped)
                *prefix = 0;
            else
                *prefix_end = ftell(f);
        } else {
            dropped = 1;
        }
    }
}

ls_status ex_truncate_step_file(const char *path, int64_t last, const char *flag) {
    /* Only a regular file is rewritten: a device (/dev/null), a pipe or a terminal is appended to
     * as it is (reading a FIFO would wait for a writer, and a rename would put a plain file in the
     * device's place); a symbolic link's target is rewritten, the link kept. The lines kept are
     * the file's first ones (as a run writes them): the file is cut there, in place, keeping its
     * inode, owner and mode (a file the run may write in a directory it may not, too); else they
     * are written to PATH.tmp, renamed over it. */
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return LS_OK;
    char real[PATH_MAX];
    if (!realpath(path, real)) return ls_error(LS_ERR_IO, "cannot resolve '%s': %s", path, strerror(errno));
    path = real;
    FILE *f = fopen(path, "r");
    if (!f) return LS_OK;
    long end;
    int prefix;
    step_lines(f, NULL, last, &end, &prefix);
    if (prefix) {
        fclose(f);
        if (end < st.st_size && truncate(path, (off_t)end) != 0)
            return ls_error(LS_ERR_IO, "cannot cut '%s' back to step %lld: %s", path, (long long)last, strerror(errno));
        return LS_OK;
    }
    rewind(f);
    char tmp[PATH_MAX + 8];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        fclose(f);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s path '%s' is too long", flag, path);
    }
    FILE *g = fopen(tmp, "w");
    if (!g) {
        fclose(f);
        return ls_error(LS_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    }
    step_lines(f, g, last, &end, &prefix);
    fclose(f);
    const int failed = ferror(g);
    if (fclose(g) != 0 || failed || rename(tmp, path) != 0) {
        /* a full disk: PATH as it was, and no PATH.tmp left beside it (it was, cut short) */
        const int e = errno;
        unlink(tmp);
        return ls_error(LS_ERR_IO, "cannot rewrite '%s': %s", path, strerror(e));
    }
    return LS_OK;
}

/* The regular file fd writes, st its stat: where stdout goes to a file, /dev/stdout names it */
static int same_regular_file(int fd, const struct stat *st) {
    struct stat s;
    return S_ISREG(st->st_mode) && fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino;
}

ls_status ex_step_file_open(const char *path, int64_t resume_last, const char *flag, FILE **out) {
    struct stat st;
    *out = NULL;
    if (stat(path, &st) == 0 && (same_regular_file(STDOUT_FILENO, &st) || same_regular_file(STDERR_FILENO, &st))) {
        *out = same_regular_file(STDOUT_FILENO, &st) ? stdout : stderr;
        return LS_OK;
    }
    if (resume_last >= 0) LS_CHECK(ex_truncate_step_file(path, resume_last, flag));
    *out = fopen(path, resume_last >= 0 ? "a" : "w");
    if (!*out) return ls_error(LS_ERR_IO, "cannot open '%s' for writing: %s", path, strerror(errno));
    return LS_OK;
}

/* rank 0: whether path can be opened as ex_step_file_open will, without changing it (an existing
 * regular file is opened to append, nothing written; one that is not there is created and
 * removed); a device, a FIFO or a link to no file is left to the open itself */
static ls_status step_file_probe(const char *path) {
    struct stat st;
    if (!path) return LS_OK;
    const int exists = stat(path, &st) == 0;
    if (exists ? !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) : lstat(path, &st) == 0)
        return LS_OK; /* a dangling symbolic link: the open creates its target */
    int fd = open(path, exists ? O_WRONLY | O_APPEND | O_NOCTTY : O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0666);
    if (fd < 0) return ls_error(LS_ERR_IO, "cannot open '%s' for writing: %s", path, strerror(errno));
    close(fd);
    if (!exists) unlink(path);
    return LS_OK;
}

ls_status ex_step_files_probe(ls_comm *comm, const char *metrics, const char *log_steps, const char **flag,
                              int *agreed) {
    /* before the data is read and --batch-size auto's trials (minutes): a path that cannot be
     * written was found after them. Rank 0's files (the other ranks' flags are not used): its
     * error is every rank's, said by rank 0 alone (*agreed) */
    *agreed = 0;
    int32_t bad = 0;
    ls_status s = LS_OK;
    *flag = "--log-steps";
    if (ls_comm_rank(comm) == 0) {
        s = step_file_probe(log_steps);
        if (s == LS_OK) {
            *flag = "--metrics";
            s = step_file_probe(metrics);
        }
        bad = s != LS_OK;
    }
    ls_status b = ls_comm_broadcast_host(comm, &bad, 1, LS_I32, 0);
    if (b != LS_OK) return b;
    if (!bad) return LS_OK;
    *agreed = 1;
    if (ls_comm_rank(comm) != 0) return ls_error(LS_ERR_IO, "rank 0's --metrics or --log-steps cannot be written");
    return s;
}

void ex_step_file_close(FILE *f) {
    if (f && f != stdout && f != stderr) fclose(f);
}

ls_status ex_metrics_open(ex_metrics *m, ls_comm *comm, const char *path, int64_t resume_last, FILE *log_steps,
                          const char *dump_params) {
    memset(m, 0, sizeof *m);
    /* rank 0's option, whose figures every rank adds to: rank 0's choice decides (as --log-steps) */
    int32_t on = path != NULL;
    LS_CHECK(ls_comm_broadcast_host(comm, &on, 1, LS_I32, 0));
    m->on = on;
    m->path = path;
    if (!path || ls_comm_rank(comm) != 0) return LS_OK;
    /* one regular file opened twice: each FILE writes at its own offset, over the other's lines
     * (stdout's file, named /dev/stdout, is written through stdout by both) */
    struct stat st;
    if (log_steps && log_steps != stdout && log_steps != stderr && stat(path, &st) == 0 &&
        same_regular_file(fileno(log_steps), &st))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s' is the file of --log-steps too: each would write over the other's lines; give "
                        "each its own file",
                        path);
    LS_CHECK(ex_step_file_open(path, resume_last, "--metrics", &m->f));
    return ex_check_not_dump(m->f, path, dump_params);
}

ls_status ex_check_not_dump(FILE *f, const char *path, const char *dump_params) {
    /* --dump-params, written as a new file renamed over its path after training, replaced the
     * step file's lines with the raw parameters, and the run ended 0 */
    struct stat st;
    if (f && dump_params && stat(dump_params, &st) == 0 && same_regular_file(fileno(f), &st))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s' is the file of --dump-params too: the parameters written there after training "
                        "would replace these lines; give each its own file",
                        path);
    return LS_OK;
}

/* A JSON number, or null where the value is not finite (a diverged run): "nan" is not JSON. */
static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

ls_status ex_metrics_step(ex_metrics *m, ls_comm *comm, ls_allocator *alloc, int64_t step, int64_t epoch,
                          const ls_step_stats *st, double step_s, int clipping) {
    if (!m->on) return LS_OK;
    ls_memory_stats ms;
    ls_allocator_stats(alloc, &ms);
    double sum[3] = {st->loss_sum, (double)st->correct, (double)st->samples};
    double mx[4] = {step_s, (double)ms.live_bytes, (double)ms.peak_bytes, (double)ms.pinned_bytes};
    LS_CHECK(ls_comm_allreduce_host(comm, sum, 3, LS_F64, LS_REDUCE_SUM));
    LS_CHECK(ls_comm_allreduce_host(comm, mx, 4, LS_F64, LS_REDUCE_MAX));
    if (!m->f) return LS_OK;
    double n = sum[2] > 0 ? sum[2] : 1;
    fprintf(m->f, "{\"step\": %lld, \"epoch\": %lld", (long long)step, (long long)epoch);
    json_num(m->f, "loss", sum[0] / n, "%.17g");
    json_num(m->f, "accuracy", sum[1] / n, "%.17g");
    json_num(m->f, "samples", sum[2], "%.0f");
    json_num(m->f, "lr", (double)st->lr, "%.9g");
    json_num(m->f, "step_ms", mx[0] * 1e3, "%.6f");
    json_num(m->f, "samples_per_s", mx[0] > 0 ? sum[2] / mx[0] : 0.0, "%.3f");
    json_num(m->f, "loss_scale", st->loss_scale, "%.17g");
    fprintf(m->f, ", \"skipped\": %d", st->skipped);
    json_num(m->f, "mem_live_bytes", mx[1], "%.0f");
    json_num(m->f, "mem_peak_bytes", mx[2], "%.0f");
    json_num(m->f, "mem_pinned_bytes", mx[3], "%.0f");
    if (clipping) json_num(m->f, "grad_norm", st->grad_norm, "%.17g");
    fputs("}\n", m->f);
    if (ferror(m->f) || fflush(m->f) != 0)
        return ls_error(LS_ERR_IO, "cannot write '%s': %s", m->path, strerror(errno));
    return LS_OK;
}

void ex_metrics_close(ex_metrics *m) {
    ex_step_file_close(m->f);
    m->f = NULL;
}

void ex_print_shard(const char *prog, const ls_optimizer *opt, const ls_trainer *trainer, int world) {
    int n = ls_optimizer_num_params(opt);
    if (ls_optimizer_owner(opt, 0) < 0 || world < 2) return;
    int64_t *share = calloc((size_t)world, sizeof *share), total = 0;
    if (!share) return;
    for (int i = 0; i < n; i++) {
        int64_t k = ls_tensor_numel(ls_optimizer_param(opt, i, NULL));
        share[ls_optimizer_owner(opt, i)] += k;
        total += k;
    }
    printf("%s: optimizer state sharded over %d ranks (ZeRO stage 1): ranks 0..%d keep the state of", prog, world,
           world - 1);
    for (int r = 0; r < world; r++) printf(" %lld%s", (long long)share[r], r + 1 < world ? "," : "");
    printf(" of the %lld parameters; gradients %s\n", (long long)total,
           ls_trainer_shard_reduce(trainer) > 0 ? "reduced to their owners" : "all-reduced");
    free(share);
}

void ex_train_flags_init(ex_train_flags *f) {
    memset(f, 0, sizeof *f);
    f->lr_schedule = "cosine";
    f->betas[0] = f->betas[1] = f->eps = f->ema = -1;
}

int ex_train_flags_parse(const char *prog, ex_train_flags *f, int c, const char *arg, int *bad) {
    switch (c) {
    case 1003: f->no_decay_1d = 1; break;
    case 1004: *bad = ex_parse_fraction(prog, "--label-smoothing", arg, &f->label_smoothing) != 0; break;
    case 1005:
        *bad = ex_nonempty(prog, "--init-from", arg) != 0;
        f->init_from = arg;
        break;
    case 1006: f->shard_optimizer = 1; break;
    case 1007:
        *bad = ex_nonempty(prog, "--lr-schedule", arg) != 0;
        f->lr_schedule = arg;
        break;
    case 1008: *bad = ex_parse_f64(prog, "--min-lr", arg, &f->min_lr) != 0; break;
    case 1009: *bad = ex_parse_betas(prog, "--betas", arg, f->betas) != 0; break;
    case 1010: *bad = ex_parse_f64(prog, "--eps", arg, &f->eps) != 0; break;
    case 1011: *bad = ex_parse_fraction(prog, "--ema", arg, &f->ema) != 0; break;
    case 1012: f->ema_warmup = 1; break;
    default: return 0;
    }
    return 1;
}

ls_status ex_train_flags_check(const ex_train_flags *f, ls_optim_kind kind, ls_lr_kind *lr_kind, const char **flag) {
    *flag = "--lr-schedule";
    LS_CHECK(ls_lr_kind_parse(f->lr_schedule, lr_kind));
    *flag = "--min-lr"; /* the constant schedule never decays toward it: it was dropped without a word */
    if (*lr_kind == LS_LR_CONSTANT && f->min_lr > 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the constant schedule does not decay toward a minimum: add --lr-schedule cosine or linear");
    *flag = f->betas[0] >= 0 ? "--betas" : "--eps";
    if ((f->betas[0] >= 0 || f->eps >= 0) && kind != LS_OPTIM_ADAMW)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "betas and eps are AdamW's: add --optimizer adamw");
    *flag = "--eps"; /* AdamW divides by sqrt(v) + eps: 0 makes a weight whose gradients are all 0 NaN */
    if (f->eps == 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "'0' must be above 0 (AdamW divides by sqrt(v) + eps)");
    *flag = "--ema-warmup";
    if (f->ema_warmup && f->ema < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "warms up an EMA of the weights: add --ema DECAY");
    return LS_OK;
}

ls_status ex_train_flags_check_optim(const ex_train_flags *f, const ls_optim_config *oc, int lr_given, int wd_given,
                                     const char **flag) {
    const char *opt = oc->kind == LS_OPTIM_SGD ? "sgd" : "adamw";
    *flag = "--min-lr"; /* compared as the schedule takes them, in float: --lr 0.01 --min-lr 0.01 is fine */
    if ((float)f->min_lr > oc->lr)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%g is above the peak learning rate %g (%s%s--lr): the schedule would rise to it, not "
                        "decay; give a --min-lr at most --lr",
                        f->min_lr, (double)oc->lr, lr_given ? "" : opt, lr_given ? "" : "'s default ");
    *flag = "--no-decay-1d";
    if (f->no_decay_1d && !wd_given && oc->weight_decay == 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the weight decay is 0 (%s's default --weight-decay), so no parameter decays: add "
                        "--weight-decay X",
                        opt);
    return LS_OK;
}

ls_setting ex_setting_given(const char *name, double v) {
    return v < 0 ? ls_setting_str(name, NULL) : ls_setting_num(name, v);
}

ls_setting ex_setting_seed(const char *name, uint64_t seed, char *buf) {
    if (seed <= (1ull << 53)) return ls_setting_num(name, (double)seed);
    snprintf(buf, 24, "%llu", (unsigned long long)seed);
    return ls_setting_str(name, buf);
}

int ex_train_flags_settings(const ex_train_flags *f, ls_setting *out) {
    int n = 0;
    out[n++] = ls_setting_flag("--no-decay-1d", f->no_decay_1d);
    out[n++] = ls_setting_num("--label-smoothing", f->label_smoothing);
    out[n++] = ls_setting_str("--init-from", f->init_from);
    out[n++] = ls_setting_flag("--shard-optimizer", f->shard_optimizer);
    out[n++] = ls_setting_str("--lr-schedule", f->lr_schedule);
    out[n++] = ls_setting_num("--min-lr", f->min_lr);
    out[n++] = ex_setting_given("--betas' first", f->betas[0]);
    out[n++] = ex_setting_given("--betas' second", f->betas[1]);
    out[n++] = ex_setting_given("--eps", f->eps);
    out[n++] = ex_setting_given("--ema", f->ema);
    out[n++] = ls_setting_flag("--ema-warmup", f->ema_warmup);
    return n;
}

void ex_train_flags_optim(const ex_train_flags *f, int rank, int world, ls_optim_config *oc) {
    oc->no_decay_1d = f->no_decay_1d;
    if (f->betas[0] >= 0) {
        oc->beta1 = (float)f->betas[0];
        oc->beta2 = (float)f->betas[1];
    }
    if (f->eps >= 0) oc->eps = (float)f->eps;
    if (f->shard_optimizer) { /* ZeRO stage 1: the other ranks' state never allocated here */
        oc->shard_rank = rank;
        oc->shard_world = world;
    }
}

void ex_train_flags_train(const ex_train_flags *f, ls_lr_kind lr_kind, ls_train_config *tc) {
    tc->label_smoothing = f->label_smoothing;
    tc->lr.min_lr = (float)f->min_lr;
    tc->lr.kind = lr_kind;
}

ls_status ex_ema_create(const ex_train_flags *f, ls_ctx *ctx, ls_module *model, ls_ema **out) {
    *out = NULL;
    return f->ema < 0 ? LS_OK : ls_ema_create(ctx, model, f->ema, f->ema_warmup, out);
}

void ex_print_ema(const ls_ema *e, const double ev[3]) {
    char l[EX_LOSS_TEXT];
    printf("  EMA of the weights (decay %g%s): test loss %s  test acc %.2f%%\n", ls_ema_decay(e),
           ls_ema_warmup(e) ? " with warmup" : "", ex_loss_text(ev[0] / ev[2], l), 100.0 * ev[1] / ev[2]);
}

void ex_stdio_guard(void) {
    for (;;) {
        int fd = open("/dev/null", O_RDWR);
        if (fd < 0) return;
        if (fd > 2) {
            close(fd);
            return;
        }
    }
}

int ex_exit_status(const char *prog, int rc) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) { /* errno: where this flush failed (an earlier one's is gone) */
        fprintf(stderr, "%s: cannot write the output (stdout)%s%s\n", prog, errno ? ": " : "",
                errno ? strerror(errno) : "");
        if (rc == 0) rc = 1;
    }
    return rc;
}
