/* example_cli.h: what the example programs (and benchmarks) share: strict number parsing for
 * flags, a monotonic clock, the error line of a failed call with its TRY macro, and the ResNet
 * --widths list. Messages start with the program's name, EX_PROG, which each program defines
 * before including this header. */
#ifndef LOCKSTEP_EXAMPLE_CLI_H
#define LOCKSTEP_EXAMPLE_CLI_H

#include <stdint.h>

#include "cnn.h"
#include "data.h"
#include "gpumon.h"
#include "status.h"
#include "train.h"

/* *out = s as an integer >= min; else prints "PROG: FLAG 'S' must be an integer >= MIN" and -1. */
int ex_parse_i64(const char *prog, const char *flag, const char *s, int64_t min, int64_t *out);
/* *out = s as a number >= 0; else prints "PROG: FLAG 'S' must be a number >= 0" and -1. */
int ex_parse_f64(const char *prog, const char *flag, const char *s, double *out);
/* Seconds on the monotonic clock. */
double ex_now_s(void);
/* Prints "PROG: WHAT: STATUS: the library's last error" to stderr; returns 1 (an exit status). */
int ex_fail(const char *prog, const char *what, ls_status s);
/* cfg->widths and n_stages from "32,64,128": 1 to LS_RESNET_MAX_STAGES positive channel counts;
 * else LS_ERR_INVALID_ARGUMENT naming --widths. */
ls_status ex_parse_widths(const char *s, ls_resnet_config *cfg);

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
ls_status ex_batcher_step(ex_batcher *b, ls_sampler *s, ls_trainer *t, const ls_dataset *d, int64_t j,
                          int64_t steps, int64_t per_step, int64_t **idx, int64_t *count, int64_t *global);
void ex_batcher_epoch(ex_batcher *b);

/* GPU monitoring of dev on rank 0 (LOCKSTEP_GPU_MONITOR, gpumon.h): *out stays NULL on the CPU, on
 * other ranks, when it is off, or when NVML is missing (then PROG says so on stderr once: not an
 * error). A bad LOCKSTEP_GPU_MONITOR is an error. */
ls_status ex_gpu_monitor_start(const char *prog, ls_device dev, int rank, ls_gpu_monitor **out);
/* Prints "  gpu 97% busy (memory 41%), ..." (the figures since the last call) when m is not NULL. */
void ex_gpu_monitor_print(ls_gpu_monitor *m);

#ifdef EX_PROG
#define parse_i64(flag, s, min, out) ex_parse_i64(EX_PROG, flag, s, min, out)
#define parse_f64(flag, s, out) ex_parse_f64(EX_PROG, flag, s, out)
/* TRY(what, expr): on failure, print the error, set rc to 1 and go to done. */
#define TRY(what, expr)                                                                            \
    do {                                                                                           \
        ls_status s_ = (expr);                                                                     \
        if (s_ != LS_OK) {                                                                         \
            rc = ex_fail(EX_PROG, what, s_);                                                       \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#endif

#endif
