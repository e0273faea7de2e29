/* bench_ckpt.c: lockstep's side of the checkpoint benchmark: saves or loads one checkpoint of an
 * MLP (784, the --hidden sizes, 10; f32) and its AdamW state through ls_ckpt_save / ls_ckpt_load,
 * as a training run does (fsync'd files, CRC32 manifest; a load verifies the CRCs first). Prints
 * "ready" once the model and optimizer exist (compare_ckpt.py measures the process's memory from
 * there), then one JSON line: {"op", "seconds", "bytes"}. Or trains that model on Fashion-MNIST
 * (train), saving a checkpoint every --save-every steps, synchronously (ls_ckpt_save) or in the
 * background (--async: ls_ckpt_save_async), and prints the run's time and the time the saves
 * stopped the training. Not a test: compare_ckpt.py runs it beside torch_ckpt.py. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "data.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

#define BENCH_PROG "bench_ckpt"
#include "bench_args.h"

#define MAX_LAYERS 4096

static void usage(FILE *f) {
    fprintf(f, "usage: bench_ckpt save|load|train DIR [options]\n"
               "  save: make the model and its AdamW state, then save them as DIR/step-00000001\n"
               "  load: make the model and its AdamW state, then load DIR's newest checkpoint into them\n"
               "  train: train them on Fashion-MNIST for --steps steps, saving into DIR every --save-every\n"
               "  --hidden N,N,...        hidden layer sizes (default 4096,4096,4096: 36.8 M parameters, a\n"
               "                          441 MB checkpoint with AdamW's two moments); NxK: K layers of N\n"
               "                          (16x2000: many small tensors), up to 4096 layers\n"
               "  --device cpu|cuda[:N]   default $LOCKSTEP_DEVICE, else a GPU if there is one\n"
               "  --steps N               train: timed steps (default 60, after 3 untimed)\n"
               "  --save-every N          train: a checkpoint every N steps (default 20; 0: none)\n"
               "  --async                 train: the saves written in the background (ls_ckpt_save_async)\n"
               "  --batch-size N          train: samples per step (default 64; at most the 60000 training\n"
               "                          samples)\n"
               "  --data-dir DIR          train: Fashion-MNIST (default $LOCKSTEP_FASHION_DIR, else\n"
               "                          /usr/share/datasets/fashion-mnist)\n"
               "  -h, --help              this text\n");
}

/* The bytes of the files in path (a checkpoint directory). */
static long long dir_bytes(const char *path) {
    DIR *d = opendir(path);
    long long n = 0;
    if (!d) return -1;
    struct dirent *e;
    char p[LS_CKPT_PATH_MAX + 300];
    struct stat st;
    while ((e = readdir(d)) != NULL) {
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) n += (long long)st.st_size;
    }
    closedir(d);
    return n;
}

/* train: steps timed steps of batch samples (after 3 untimed), a save every save_every (the last
 * asynchronous one waited for inside the timed span); prints the time, the saves, and how long
 * the training stood still in them (a synchronous save's whole time; an asynchronous one's
 * snapshot, and its wait for the save before). */
static int train_run(ls_ctx *ctx, ls_module *m, ls_optimizer *o, ls_ckpt_state *st, const char *dir,
                     const char *data_dir, int64_t steps, int64_t save_every, int64_t batch, int async) {
    ls_dataset *data;
    ls_trainer *tr;
    ls_train_config tc;
    ls_ckpt_async *saver = NULL;
    BENCH_CHECK("data", ls_fashion_mnist_load(data_dir, 1, 0, &data));
    /* the batch is consecutive samples of the set: at most all of them (a larger one stepped on
     * indices past its end; the whole set divided by n - batch = 0) */
    bench_batch_fits("--batch-size", batch, data->n, "the training samples", NULL);
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = batch;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0.001f;
    BENCH_CHECK("trainer", ls_trainer_create(ctx, NULL, m, o, &tc, &tr));
    if (async) BENCH_CHECK("saver", ls_ckpt_async_create(&saver));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)batch);
    if (!idx) BENCH_CHECK("indices", ls_error(LS_ERR_OUT_OF_MEMORY, "no memory"));
    double t0 = 0, stopped = 0;
    int saves = 0;
    ls_step_stats ss;
    for (int64_t it = -3; it < steps; it++) {
        if (it == 0) {
            BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
            t0 = bench_now_s();
        }
        int64_t first = batch < data->n ? ((it + 3) * batch) % (data->n - batch) : 0;
        for (int64_t k = 0; k < batch; k++) idx[k] = first + k;
        BENCH_CHECK("step", ls_trainer_step(tr, data, idx, batch, batch, &ss));
        if (it < 0 || save_every == 0 || (it + 1) % save_every != 0) continue;
        st->step = it + 1;
        double s0 = bench_now_s();
        if (async)
            BENCH_CHECK("save", ls_ckpt_save_async(saver, NULL, ctx, dir, 2, m, o, NULL, st));
        else
            BENCH_CHECK("save", ls_ckpt_save(NULL, ctx, dir, 2, m, o, st, NULL, 0));
        double one = bench_now_s() - s0;
        stopped += one;
        fprintf(stderr, "bench_ckpt: step %lld: the save stopped the training %.3f s\n", (long long)(it + 1), one);
        saves++;
    }
    if (async) {
        double s0 = bench_now_s();
        BENCH_CHECK("save", ls_ckpt_async_wait(saver, NULL, NULL));
        stopped += bench_now_s() - s0;
    }
    BENCH_CHECK("sync", ls_ctx_synchronize(ctx));
    double t = bench_now_s() - t0;
    printf("{\"op\": \"train\", \"seconds\": %.6f, \"steps\": %lld, \"saves\": %d, \"stopped\": %.6f, "
           "\"loss\": %.6f}\n",
           t, (long long)steps, saves, stopped, ss.loss_sum / (double)ss.samples);
    ls_ckpt_async_destroy(saver);
    free(idx);
    ls_trainer_destroy(tr);
    ls_dataset_destroy(data);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    /* the command, then DIR: what is missing or not known is named, then the usage's first line */
    if (argc < 2)
        fprintf(stderr, "bench_ckpt: no command given (save, load or train)\n");
    else if (strcmp(argv[1], "save") && strcmp(argv[1], "load") && strcmp(argv[1], "train"))
        fprintf(stderr, "bench_ckpt: unknown command '%s' (save, load or train)\n", argv[1]);
    else if (argc < 3)
        fprintf(stderr, "bench_ckpt: %s: no DIR given\n", argv[1]);
    if (argc < 3 || (strcmp(argv[1], "save") && strcmp(argv[1], "load") && strcmp(argv[1], "train"))) {
        fprintf(stderr, "usage: bench_ckpt save|load|train DIR [options] (see --help)\n");
        return 2;
    }
    const int save = !strcmp(argv[1], "save"), train = !strcmp(argv[1], "train");
    const char *dir = argv[2], *device = getenv("LOCKSTEP_DEVICE"), *data_dir = NULL;
    int64_t steps = 60, save_every = 20, batch = 64;
    int async = 0;
    if (!*dir) {
        fprintf(stderr, "bench_ckpt: DIR is empty: name the checkpoint directory\n");
        return 2;
    }
    static int64_t sizes[MAX_LAYERS + 2] = {784, 4096, 4096, 4096, 10};
    int nsizes = 5;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = bench_str("--device", argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = bench_int("--steps", argv[++i], 1, 1 << 20);
        } else if (!strcmp(argv[i], "--save-every") && i + 1 < argc) {
            save_every = bench_int("--save-every", argv[++i], 0, 1 << 20);
        } else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc) {
            batch = bench_int("--batch-size", argv[++i], 1, 1 << 16);
        } else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc) {
            data_dir = bench_str("--data-dir", argv[++i]);
        } else if (!strcmp(argv[i], "--async")) {
            async = 1;
        } else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) {
            const char *arg = bench_str("--hidden", argv[++i]);
            char buf[256], *next;
            if (strlen(arg) >= sizeof buf) bench_bad("--hidden", arg, "too long", "N,N,... or NxK");
            snprintf(buf, sizeof buf, "%s", arg);
            nsizes = 1;
            /* every entry, empty ones too (strtok_r skipped them: "8,,8" ran as 8,8, which
             * torch_ckpt.py refuses) */
            for (char *tok = buf; tok; tok = next) {
                if ((next = strchr(tok, ','))) *next++ = '\0';
                if (!*tok) bench_bad("--hidden", arg, "empty size", "N,N,... or NxK");
                int64_t size, reps = 1;
                char *x = strchr(tok, 'x'), *end = NULL;
                if (x) { /* NxK: both parts whole numbers in range, else the token is named */
                    errno = 0;
                    size = strtoll(tok, &end, 10);
                    int ok = end == x && x > tok && errno == 0 && size >= 1 && size <= (1 << 20);
                    reps = ok ? strtoll(x + 1, &end, 10) : 0;
                    if (!ok || end == x + 1 || *end != '\0' || errno != 0 || reps < 1 || reps > MAX_LAYERS)
                        bench_bad("--hidden", tok, "not a whole number or NxK",
                                  "N from 1 to 1048576, K from 1 to 4096");
                } else {
                    size = bench_int("--hidden", tok, 1, 1 << 20);
                }
                if (nsizes - 1 + reps > MAX_LAYERS) bench_bad("--hidden", arg, "too many layers", "up to 4096");
                for (int64_t r = 0; r < reps; r++) sizes[nsizes++] = size;
            }
            sizes[nsizes++] = 10;
        } else {
            fprintf(stderr, "bench_ckpt: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    ls_device dev;
    BENCH_CHECK_FLAG("--device", device, "device", ls_device_select(device, 0, &dev));
    ls_ctx *ctx;
    BENCH_CHECK("context", ls_ctx_create(dev, NULL, &ctx));
    ls_module *m;
    BENCH_CHECK("model", ls_mlp_create(ctx, LS_F32, nsizes, sizes, LS_ACT_RELU, 1, &m));
    int np = ls_module_num_params(m);
    static ls_tensor *p[2 * MAX_LAYERS + 2], *g[2 * MAX_LAYERS + 2];
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_ADAMW);
    ls_optimizer *o;
    BENCH_CHECK("optimizer", ls_optimizer_create(ctx, np, p, g, &oc, &o));
    for (int i = 0; i < np && !train; i++) /* moments that are not all zeros, as after training */
        for (int k = 0; k < 2; k++)
            BENCH_CHECK("the state", ls_tensor_copy(ctx->alloc, ls_optimizer_state(o, i, k), p[i]));
    ls_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = 1;
    st.steps_per_epoch = 1;
    st.world_size = 1;
    st.batch_per_rank = 1;
    st.accum_steps = 1;
    st.lr = (ls_lr_schedule){0.001f, 0, 0, 0, LS_LR_CONSTANT};
    st.optim = oc;
    if (train) return train_run(ctx, m, o, &st, dir, data_dir, steps, save_every, batch, async);
    printf("ready\n");
    fflush(stdout);
    char path[LS_CKPT_PATH_MAX];
    double t0 = bench_now_s();
    if (save) {
        BENCH_CHECK("save", ls_ckpt_save(NULL, ctx, dir, 0, m, o, &st, path, sizeof path));
    } else {
        int found = 0;
        ls_ckpt_state got;
        BENCH_CHECK("load", ls_ckpt_load(NULL, ctx, dir, "auto", m, o, &got, &found, path, sizeof path));
        if (!found) {
            fprintf(stderr, "bench_ckpt: no checkpoint in '%s' (run save first)\n", dir);
            return 1;
        }
    }
    double t = bench_now_s() - t0;
    printf("{\"op\": \"%s\", \"seconds\": %.6f, \"bytes\": %lld}\n", argv[1], t, dir_bytes(path));
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(ctx);
    return 0;
}
