/* example_cli.c: the example programs' shared flag parsing, clock and error line (example_cli.h). */
#include "example_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ex_parse_i64(const char *prog, const char *flag, const char *s, int64_t min, int64_t *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min) {
        fprintf(stderr, "%s: %s '%s' must be an integer >= %lld\n", prog, flag, s, (long long)min);
        return -1;
    }
    *out = v;
    return 0;
}

int ex_parse_f64(const char *prog, const char *flag, const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0)) {
        fprintf(stderr, "%s: %s '%s' must be a number >= 0\n", prog, flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

double ex_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ex_fail(const char *prog, const char *what, ls_status s) {
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, ls_status_name(s), ls_last_error());
    return 1;
}

ls_status ex_parse_widths(const char *s, ls_resnet_config *cfg) {
    cfg->n_stages = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long w = strtoll(p, &end, 10);
        if (end == p || w < 1 || (*end != ',' && *end != '\0') || cfg->n_stages == LS_RESNET_MAX_STAGES)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "--widths '%s' is not a comma-separated list of 1 to %d "
                            "positive channel counts", s, LS_RESNET_MAX_STAGES);
        cfg->widths[cfg->n_stages++] = w;
        p = *end ? end + 1 : end;
    }
    if (cfg->n_stages == 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "--widths is empty");
    return LS_OK;
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

ls_status ex_batcher_step(ex_batcher *b, ls_sampler *s, ls_trainer *t, const ls_dataset *d, int64_t j,
                          int64_t steps, int64_t per_step, int64_t **idx, int64_t *count, int64_t *global) {
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
    if (dev.type != LS_DEVICE_CUDA || rank != 0 || interval == 0) return LS_OK;
    if (ls_gpu_monitor_start(dev, interval, out) != LS_OK) {
        fprintf(stderr, "%s: no GPU figures (%s)\n", prog, ls_last_error());
        *out = NULL;
    }
    return LS_OK;
}

void ex_gpu_monitor_print(ls_gpu_monitor *m) {
    ls_gpu_stats st;
    char buf[256];
    if (!m || ls_gpu_monitor_read(m, &st) != LS_OK) return;
    printf("  %s: %s\n", st.name, ls_gpu_stats_format(&st, buf, sizeof buf));
}

ls_status ex_truncate_step_file(const char *path, int64_t last, const char *flag) {
    FILE *f = fopen(path, "r");
    if (!f) return LS_OK;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        fclose(f);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s path '%s' is too long", flag, path);
    }
    FILE *g = fopen(tmp, "w");
    if (!g) {
        fclose(f);
        return ls_error(LS_ERR_IO, "%s: cannot create '%s'", flag, tmp);
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p && (*p < '0' || *p > '9')) p++;
        if (*p && strtoll(p, NULL, 10) <= last) fputs(line, g);
    }
    fclose(f);
    if (fclose(g) != 0 || rename(tmp, path) != 0) return ls_error(LS_ERR_IO, "%s: cannot rewrite '%s'", flag, path);
    return LS_OK;
}

ls_status ex_metrics_open(ex_metrics *m, const char *path, int rank, int64_t resume_last) {
    memset(m, 0, sizeof *m);
    if (!path) return LS_OK;
    m->on = 1;
    if (rank != 0) return LS_OK;
    if (resume_last >= 0) LS_CHECK(ex_truncate_step_file(path, resume_last, "--metrics"));
    m->f = fopen(path, resume_last >= 0 ? "a" : "w");
    if (!m->f) return ls_error(LS_ERR_IO, "--metrics: cannot open '%s' for writing", path);
    return LS_OK;
}

ls_status ex_metrics_step(ex_metrics *m, ls_comm *comm, ls_allocator *alloc, int64_t step, int64_t epoch,
                          const ls_step_stats *st, double step_s, int clipping) {
    if (!m->on) return LS_OK;
    ls_memory_stats ms;
    ls_allocator_stats(alloc, &ms);
    double sum[3] = {st->loss_sum, (double)st->correct, (double)st->samples};
    double mx[3] = {step_s, (double)ms.live_bytes, (double)ms.peak_bytes};
    LS_CHECK(ls_comm_allreduce(comm, sum, 3, LS_F64, LS_REDUCE_SUM));
    LS_CHECK(ls_comm_allreduce(comm, mx, 3, LS_F64, LS_REDUCE_MAX));
    if (!m->f) return LS_OK;
    double n = sum[2] > 0 ? sum[2] : 1;
    fprintf(m->f,
            "{\"step\": %lld, \"epoch\": %lld, \"loss\": %.17g, \"accuracy\": %.17g, \"samples\": %.0f, "
            "\"lr\": %.9g, \"step_ms\": %.6f, \"samples_per_s\": %.3f, \"loss_scale\": %.17g, \"skipped\": %d, "
            "\"mem_live_bytes\": %.0f, \"mem_peak_bytes\": %.0f",
            (long long)step, (long long)epoch, sum[0] / n, sum[1] / n, sum[2], (double)st->lr, mx[0] * 1e3,
            mx[0] > 0 ? sum[2] / mx[0] : 0.0, st->loss_scale, st->skipped, mx[1], mx[2]);
    if (clipping) fprintf(m->f, ", \"grad_norm\": %.17g", st->grad_norm);
    fputs("}\n", m->f);
    if (fflush(m->f) != 0) return ls_error(LS_ERR_IO, "--metrics: cannot write");
    return LS_OK;
}

void ex_metrics_close(ex_metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
