/* ckpt_test.h: what the checkpoint unit tests share: deterministic f32 contents for a tensor on
 * any device, the state of a save, a file's bytes, a disk that fills up. */
#ifndef LOCKSTEP_TEST_CKPT_TEST_H
#define LOCKSTEP_TEST_CKPT_TEST_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "checkpoint.h"
#include "testutil.h"

/* Deterministic f32 contents, different for each salt. */
static inline void ckpt_test_fill(ls_ctx *ctx, ls_tensor *t, int salt) {
    int64_t n = ls_tensor_numel(t);
    float *h = malloc((size_t)n * sizeof *h);
    LS_REQUIRE(h && t->dtype == LS_F32);
    for (int64_t i = 0; i < n; i++) h[i] = (float)((i * 7 + salt * 13) % 1021) / 512.0f - 1.0f;
    ls_tensor v = ls_tensor_view(h, LS_F32, ls_device_cpu(), t->ndim, t->shape);
    LS_REQUIRE_OK(ls_tensor_copy(ctx->alloc, t, &v));
    free(h);
}

/* The state of a save at step with AdamW on world ranks. */
static inline ls_ckpt_state ckpt_test_state(int64_t step, int world) {
    ls_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.steps_per_epoch = 10;
    s.world_size = world;
    s.batch_per_rank = 32;
    s.accum_steps = 1;
    s.lr = (ls_lr_schedule){0.001f, 0, 0, 0, LS_LR_CONSTANT};
    s.optim = ls_optim_defaults(LS_OPTIM_ADAMW);
    return s;
}

/* A file's bytes (malloc'd, NUL-terminated, *len without the NUL); NULL when it cannot be opened. */
static inline unsigned char *ckpt_test_slurp(const char *p, size_t *len) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    LS_REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* The disk full at bytes: files may grow no larger (RLIMIT_FSIZE), and write() returns EFBIG
 * rather than SIGXFSZ killing the process. *old receives the limit ckpt_test_uncap_files restores. */
static inline void ckpt_test_cap_files(rlim_t bytes, struct rlimit *old) {
    LS_REQUIRE(getrlimit(RLIMIT_FSIZE, old) == 0);
    struct rlimit cap = *old;
    cap.rlim_cur = bytes;
    signal(SIGXFSZ, SIG_IGN);
    LS_REQUIRE(setrlimit(RLIMIT_FSIZE, &cap) == 0);
}

static inline void ckpt_test_uncap_files(const struct rlimit *old) {
    LS_REQUIRE(setrlimit(RLIMIT_FSIZE, old) == 0);
    signal(SIGXFSZ, SIG_DFL);
}

#endif
