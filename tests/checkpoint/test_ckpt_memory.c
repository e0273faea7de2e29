/* test_ckpt_memory.c: a checkpoint is written and read without holding its files in memory. The
 * model (a 1024-4200-256-10 MLP, its first weight 17.2 MB: more than one LS_CKPT_STAGE_BYTES) and
 * its AdamW state make a 65 MB checkpoint. Checked:
 *  - the streamed model.safetensors is, byte for byte, what ls_safetensors_serialize (the whole file
 *    built in memory) gives for the same tensors; each optimizer state in optimizer.safetensors is
 *    the optimizer's; ls_safetensors_write streams the same bytes; a load restores every byte;
 *  - on the CPU, a save and a load succeed with the process's data memory (RLIMIT_DATA: the heap
 *    and every private writable mapping) capped 8 MiB above what it already uses: the files go
 *    straight from the tensors to the disk, and come back through a read-only mapping. Holding one
 *    file in memory (the 17 MB model.safetensors) would exceed the cap. Not under AddressSanitizer,
 *    whose shadow memory would count.
 *  - a save that cannot write its file (RLIMIT_FSIZE: the disk full at 1 MiB) fails with the
 *    write's error naming the file, leaves neither step-N nor step-N.tmp, and the checkpoint
 *    before it stays the newest and loads.
 * Args: [cpu|cuda]. With cuda (the emulated GPU in test_ckpt_memory_emu) the tensors live on the
 * device, so the save stages them through host memory, 16 MiB at a time. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../e2e/mlp_run.h"
#include "checkpoint.h"
#include "ckpt_test.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static ls_ctx *ctx;
static char root[64];

/* A tensor's bytes on the host (malloc'd). */
static unsigned char *host_bytes(const ls_tensor *t) {
    size_t n = ls_tensor_nbytes(t);
    unsigned char *h = malloc(n ? n : 1);
    LS_REQUIRE(h);
    ls_tensor v = ls_tensor_view(h, t->dtype, ls_device_cpu(), t->ndim, t->shape);
    LS_REQUIRE_OK(ls_tensor_copy(ctx->alloc, &v, t));
    return h;
}

static void make(uint64_t seed, int salt, ls_module **m, ls_optimizer **o) {
    int64_t sizes[4] = {1024, 4200, 256, 10};
    LS_REQUIRE_OK(ls_mlp_create(ctx, LS_F32, 4, sizes, LS_ACT_RELU, seed, m));
    int np = ls_module_num_params(*m);
    ls_tensor *p[8], *g[8];
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(*m, i);
        g[i] = ls_module_grad(*m, i);
    }
    ls_optim_config c = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_REQUIRE_OK(ls_optimizer_create(ctx, np, p, g, &c, o));
    for (int i = 0; i < np; i++) {
        ckpt_test_fill(ctx, p[i], salt + i);
        for (int k = 0; k < 2; k++) ckpt_test_fill(ctx, ls_optimizer_state(*o, i, k), salt + 50 * (k + 1) + i);
    }
    ls_optimizer_set_num_steps(*o, 100 + salt);
}

/* 1 when the two models and optimizers hold the same bytes. */
static int same(ls_module *a, ls_optimizer *oa, ls_module *b, ls_optimizer *ob) {
    int ok = 1;
    for (int i = 0; i < ls_module_num_params(a) && ok; i++)
        for (int k = -1; k < 2 && ok; k++) {
            ls_tensor *x = k < 0 ? ls_module_param(a, i) : ls_optimizer_state(oa, i, k);
            ls_tensor *y = k < 0 ? ls_module_param(b, i) : ls_optimizer_state(ob, i, k);
            unsigned char *hx = host_bytes(x), *hy = host_bytes(y);
            ok = memcmp(hx, hy, ls_tensor_nbytes(x)) == 0;
            if (!ok) fprintf(stderr, "parameter %d, %s: differs after the load\n", i, k < 0 ? "weights" : "state");
            free(hx);
            free(hy);
        }
    return ok;
}

/* The streamed files against the in-memory serializer and the tensors themselves. */
static void check_files(const char *dir, int64_t step, ls_module *m, ls_optimizer *o) {
    char p[256], stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    int np = ls_module_num_params(m);
    const char *names[8];
    const ls_tensor *ts[8];
    for (int i = 0; i < np; i++) {
        names[i] = ls_module_param_name(m, i);
        ts[i] = ls_module_param(m, i);
    }
    const char *meta[] = {"format", "pt", "lockstep", "model", "step", stepbuf, NULL};
    void *want;
    size_t want_len, got_len;
    LS_REQUIRE_OK(ls_safetensors_serialize(np, names, ts, meta, ctx->alloc, &want, &want_len));
    snprintf(p, sizeof p, "%s/step-%08lld/model.safetensors", dir, (long long)step);
    unsigned char *got = ckpt_test_slurp(p, &got_len);
    LS_REQUIRE(got);
    LS_EXPECT(got_len == want_len && memcmp(got, want, want_len) == 0);
    free(got);
    /* the public writer streams the same bytes */
    snprintf(p, sizeof p, "%s/direct.safetensors", root);
    LS_REQUIRE_OK(ls_safetensors_write(p, np, names, ts, meta, ctx->alloc));
    got = ckpt_test_slurp(p, &got_len);
    LS_REQUIRE(got);
    LS_EXPECT(got_len == want_len && memcmp(got, want, want_len) == 0);
    free(got);
    free(want);

    ls_safetensors *f;
    snprintf(p, sizeof p, "%s/step-%08lld/optimizer.safetensors", dir, (long long)step);
    LS_REQUIRE_OK(ls_safetensors_open(p, &f));
    LS_EXPECT(ls_safetensors_count(f) == 2 * np);
    for (int i = 0; i < np; i++)
        for (int k = 0; k < 2; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", names[i], k ? "exp_avg_sq" : "exp_avg");
            const ls_safetensors_info *t = ls_safetensors_find(f, name);
            ls_tensor *s = ls_optimizer_state(o, i, k);
            unsigned char *h = host_bytes(s);
            LS_EXPECT(t && t->nbytes == ls_tensor_nbytes(s) && memcmp(t->data, h, t->nbytes) == 0);
            free(h);
        }
    ls_safetensors_close(f);
}

/* VmData from /proc/self/status, in bytes: what RLIMIT_DATA counts. */
static size_t data_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    LS_REQUIRE(f);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmData: %zu kB", &kb) == 1) break;
    fclose(f);
    LS_REQUIRE(kb > 0);
    return kb << 10;
}

int main(int argc, char **argv) {
    ls_device dev = mlp_device_arg(argc, argv);
    LS_REQUIRE_OK(ls_ctx_create(dev, NULL, &ctx));
    snprintf(root, sizeof root, "/tmp/ls_ckpt_mem_XXXXXX");
    LS_REQUIRE(mkdtemp(root) != NULL);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/run", root);

    ls_module *a, *b;
    ls_optimizer *oa, *ob;
    make(1, 1, &a, &oa);
    make(2, 7, &b, &ob);
    LS_REQUIRE(ls_tensor_nbytes(ls_module_param(a, 0)) > LS_CKPT_STAGE_BYTES);
    LS_REQUIRE(ls_module_param(a, 0)->device.type == dev.type);

    ls_ckpt_state st = ckpt_test_state(5, 1), got;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_save(NULL, ctx, dir, 0, a, oa, &st, NULL, 0));
    check_files(dir, 5, a, oa);
    LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, "auto", b, ob, &got, &found, NULL, 0));
    LS_EXPECT(found == 1 && got.step == 5 && same(a, oa, b, ob));

    { /* the file system refuses the write midway: the save fails cleanly, step 5 stays */
        struct rlimit old;
        ckpt_test_cap_files(1 << 20, &old);
        st = ckpt_test_state(7, 1);
        ls_status s = ls_ckpt_save(NULL, ctx, dir, 0, a, oa, &st, NULL, 0);
        ckpt_test_uncap_files(&old);
        LS_EXPECT(s == LS_ERR_IO && strstr(ls_last_error(), "step-00000007.tmp/model.safetensors.tmp': write failed") &&
                  strstr(ls_last_error(), "File too large"));
        char p[192];
        struct stat sb;
        snprintf(p, sizeof p, "%s/step-00000007", dir);
        LS_EXPECT(stat(p, &sb) != 0);
        snprintf(p, sizeof p, "%s/step-00000007.tmp", dir);
        LS_EXPECT(stat(p, &sb) != 0);
        char latest[LS_CKPT_PATH_MAX];
        LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, "auto", b, ob, &got, &found, latest, sizeof latest));
        LS_EXPECT(found == 1 && got.step == 5 && strstr(latest, "step-00000005"));
    }

    if (dev.type == LS_DEVICE_CPU && !UNDER_ASAN) {
        ls_optimizer_destroy(ob); /* fresh contents to load into */
        ls_module_destroy(b);
        make(3, 11, &b, &ob);
        size_t total = 0;
        for (int i = 0; i < ls_module_num_params(a); i++) total += 3 * ls_tensor_nbytes(ls_module_param(a, i));
        const size_t margin = (size_t)8 << 20;
        struct rlimit old, cap;
        LS_REQUIRE(getrlimit(RLIMIT_DATA, &old) == 0);
        cap = old;
        cap.rlim_cur = (rlim_t)(data_bytes() + margin);
        LS_REQUIRE(old.rlim_cur == RLIM_INFINITY || cap.rlim_cur < old.rlim_cur);
        LS_REQUIRE(setrlimit(RLIMIT_DATA, &cap) == 0);
        st = ckpt_test_state(6, 1);
        ls_status s1 = ls_ckpt_save(NULL, ctx, dir, 0, a, oa, &st, NULL, 0);
        char e1[512];
        snprintf(e1, sizeof e1, "%s", ls_last_error());
        ls_status s2 = s1 == LS_OK ? ls_ckpt_load(NULL, ctx, dir, "auto", b, ob, &got, &found, NULL, 0) : s1;
        LS_REQUIRE(setrlimit(RLIMIT_DATA, &old) == 0);
        if (s1 != LS_OK || s2 != LS_OK) {
            fprintf(stderr, "with data memory capped %zu MiB above its use: the %s failed: %s\n", margin >> 20,
                    s1 != LS_OK ? "save" : "load", s1 != LS_OK ? e1 : ls_last_error());
            ls_test_failures++;
        } else {
            LS_EXPECT(found == 1 && got.step == 6 && same(a, oa, b, ob));
            fprintf(stderr, "a %.1f MB checkpoint saved and loaded within %zu MiB of data memory\n",
                    (double)total / 1e6, margin >> 20);
        }
    }
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    LS_EXPECT(system(cmd) == 0);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
