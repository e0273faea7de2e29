/* test_ckpt.c: training checkpoints on a tiny MLP. Save/load round trips (SGD and AdamW: every
 * parameter and state byte, the step counts, the state fields), the on-disk layout, --keep-last,
 * auto-resume falling back past a damaged newest checkpoint, each bad input (truncated,
 * bit-flipped, missing file, missing manifest, wrong model, wrong dtype, wrong optimizer) as a
 * status and a message naming the file and the problem, a crash at each stage of a save (a forked
 * child killed by LOCKSTEP_CKPT_CRASH_AT) leaving the previous checkpoint loadable, the resume
 * position at a new world size, the preemption flag (also set by a signal handled on another thread), and a ResNet's BatchNorm running statistics
 * (buffers) saved beside its parameters and restored on every rank, and an EMA of the weights
 * (ema.safetensors: saved, recorded, loaded on every rank as rank 0's, reset where a checkpoint has
 * none), an optimizer over some of the parameters (a frozen one), and a sharded optimizer's state (the unsharded save's files; no rank holds the others'
 * state, by the allocator's peak). Run alone (self) or under mpirun: loads are broadcast from rank 0, and a failure on rank 0
 * fails every rank with the same message. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_test.h"
#include "cnn.h"
#include "testutil.h"

static ls_ctx *ctx;
static ls_comm *comm;
static int rank, world;
static char root[64]; /* rank 0's scratch directory */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static ls_module *make_model(int64_t hidden, ls_dtype dt, uint64_t seed) {
    ls_module *m;
    int64_t sizes[3] = {4, hidden, 3};
    LS_REQUIRE_OK(ls_mlp_create(ctx, dt, 3, sizes, LS_ACT_RELU, seed, &m));
    return m;
}

static ls_optimizer *make_opt_cfg(ls_module *m, const ls_optim_config *c) {
    enum { MAXP = 64 };
    ls_tensor *p[MAXP], *g[MAXP];
    int n = ls_module_num_params(m);
    LS_REQUIRE(n <= MAXP);
    for (int i = 0; i < n; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(ctx, n, p, g, c, &o));
    return o;
}

static ls_optimizer *make_opt(ls_module *m, ls_optim_kind kind) {
    ls_optim_config c = ls_optim_defaults(kind);
    return make_opt_cfg(m, &c);
}

/* Deterministic contents, different for each salt (and rank, so a load must overwrite them). */
static void fill(ls_tensor *t, int salt) {
    int64_t n = ls_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = (double)((i * 7 + salt * 13) % 23) / 8.0 - 1.0;
        if (t->dtype == LS_F64)
            ((double *)t->data)[i] = v;
        else
            ((float *)t->data)[i] = (float)v;
    }
}

static void fill_all(ls_module *m, ls_optimizer *o, int salt) {
    for (int i = 0; i < ls_module_num_params(m); i++) {
        fill(ls_module_param(m, i), salt + i);
        for (int s = 0; o && s < 2; s++)
            if (ls_optimizer_state(o, i, s)) fill(ls_optimizer_state(o, i, s), salt + 50 * (s + 1) + i);
    }
    if (o) ls_optimizer_set_num_steps(o, 100 + salt);
}

/* 1 when every parameter and state tensor of (a, oa) equals (b, ob) byte for byte. */
static int64_t num_steps(ls_optimizer *o) {
    int64_t n = -1;
    LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &n));
    return n;
}

static int same_all(ls_module *a, ls_optimizer *oa, ls_module *b, ls_optimizer *ob) {
    for (int i = 0; i < ls_module_num_params(a); i++) {
        ls_tensor *x = ls_module_param(a, i), *y = ls_module_param(b, i);
        if (memcmp(x->data, y->data, ls_tensor_nbytes(x)) != 0) return 0;
        for (int s = 0; oa && s < 2; s++) {
            ls_tensor *u = ls_optimizer_state(oa, i, s), *v = ls_optimizer_state(ob, i, s);
            if ((u == NULL) != (v == NULL)) return 0;
            if (u && memcmp(u->data, v->data, ls_tensor_nbytes(u)) != 0) return 0;
        }
    }
    return !oa || num_steps(oa) == num_steps(ob);
}

static ls_ckpt_state make_state(int64_t step, ls_optim_kind kind) {
    ls_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.epoch = 2;
    s.epoch_samples = 640;
    s.steps_per_epoch = 32;
    s.world_size = 2;
    s.batch_per_rank = 16;
    s.accum_steps = 1;
    s.seed = 18446744073709551557ull; /* beyond 2^53: must survive exactly */
    s.lr = (ls_lr_schedule){0.05f, 0.001f, 100, 960, LS_LR_COSINE};
    s.optim = ls_optim_defaults(kind);
    s.n_loss_scaler = 2;
    snprintf(s.loss_scaler[0].key, sizeof s.loss_scaler[0].key, "scale");
    s.loss_scaler[0].value = 65536;
    snprintf(s.loss_scaler[1].key, sizeof s.loss_scaler[1].key, "growth_tracker");
    s.loss_scaler[1].value = 17;
    s.n_rng = 1;
    snprintf(s.rng[0].name, sizeof s.rng[0].name, "dropout");
    ls_rng_init(&s.rng[0].rng, 99);
    (void)ls_rng_u32(&s.rng[0].rng); /* partly consumed: offset 1, 3 words left */
    return s;
}

static void path_of(char *out, size_t len, const char *dir, int64_t step, const char *file) {
    if (file)
        snprintf(out, len, "%s/step-%08lld/%s", dir, (long long)step, file);
    else
        snprintf(out, len, "%s/step-%08lld", dir, (long long)step);
}

static void save(const char *dir, int keep, ls_module *m, ls_optimizer *o, int64_t step, ls_optim_kind kind) {
    ls_ckpt_state s = make_state(step, kind);
    char p[LS_CKPT_PATH_MAX], want[LS_CKPT_PATH_MAX];
    LS_REQUIRE_OK(ls_ckpt_save(comm, ctx, dir, keep, m, o, &s, p, sizeof p));
    path_of(want, sizeof want, dir, step, NULL);
    LS_EXPECT(strcmp(p, want) == 0);
}

static int count_entries(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (e->d_name[0] != '.' && l >= sl && strcmp(e->d_name + l - sl, suffix) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

static void read_text(const char *p, char *buf, size_t len) {
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

static void test_round_trip(ls_optim_kind kind) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/rt-%s/nested", root, kind == LS_OPTIM_SGD ? "sgd" : "adamw");
    ls_module *a = make_model(8, LS_F32, 1), *b = make_model(8, LS_F32, 2);
    ls_optimizer *oa = make_opt(a, kind), *ob = make_opt(b, kind);
    fill_all(a, oa, 1);
    fill_all(b, ob, 2 + rank);
    save(dir, 3, a, oa, 20, kind);
    LS_EXPECT(!same_all(a, oa, b, ob));
    ls_ckpt_state got, want = make_state(20, kind);
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, p, sizeof p));
    LS_EXPECT(found == 1);
    if (rank == 0)
        LS_EXPECT(same_all(a, oa, b, ob));
    else
        LS_EXPECT(num_steps(ob) == 101); /* rank 0's value, broadcast */
    LS_EXPECT(got.step == 20 && got.epoch == 2 && got.epoch_samples == 640 && got.steps_per_epoch == 32);
    LS_EXPECT(got.world_size == 2 && got.batch_per_rank == 16 && got.accum_steps == 1);
    LS_EXPECT(got.seed == want.seed && got.optim_steps == 101);
    LS_EXPECT(memcmp(&got.lr, &want.lr, sizeof want.lr) == 0);
    LS_EXPECT(got.optim.kind == kind && got.optim.lr == want.optim.lr && got.optim.beta2 == want.optim.beta2 &&
              got.optim.eps == want.optim.eps && got.optim.momentum == want.optim.momentum);
    LS_EXPECT(got.n_loss_scaler == 2 && strcmp(got.loss_scaler[1].key, "growth_tracker") == 0 &&
              got.loss_scaler[0].value == 65536 && got.loss_scaler[1].value == 17);
    LS_EXPECT(got.n_rng == 1 && strcmp(got.rng[0].name, "dropout") == 0 &&
              memcmp(&got.rng[0].rng, &want.rng[0].rng, sizeof want.rng[0].rng) == 0);
    /* The restored stream continues with the same numbers as the saved one. */
    LS_EXPECT(ls_rng_u32(&got.rng[0].rng) == ls_rng_u32(&want.rng[0].rng));
    if (rank == 0) {
        char txt[64];
        snprintf(p, sizeof p, "%s/latest", dir);
        read_text(p, txt, sizeof txt);
        LS_EXPECT(strcmp(txt, "step-00000020\n") == 0);
        path_of(p, sizeof p, dir, 20, NULL);
        LS_EXPECT(count_entries(p, ".safetensors") == 2 && count_entries(p, ".json") == 2 &&
                  count_entries(p, ".tmp") == 0);
        /* Optimizer tensor names follow PyTorch's state names. */
        path_of(p, sizeof p, dir, 20, "optimizer.safetensors");
        ls_safetensors *f;
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        if (kind == LS_OPTIM_SGD)
            LS_EXPECT(ls_safetensors_count(f) == 4 && ls_safetensors_find(f, "0.weight.momentum"));
        else
            LS_EXPECT(ls_safetensors_count(f) == 8 && ls_safetensors_find(f, "2.bias.exp_avg") &&
                      ls_safetensors_find(f, "2.bias.exp_avg_sq"));
        LS_EXPECT(strcmp(ls_safetensors_metadata(f, "optimizer"), kind == LS_OPTIM_SGD ? "sgd" : "adamw") == 0);
        ls_safetensors_close(f);
        path_of(p, sizeof p, dir, 20, "model.safetensors");
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        LS_EXPECT(ls_safetensors_count(f) == 4 && strcmp(ls_safetensors_tensor(f, 0)->name, "0.weight") == 0 &&
                  strcmp(ls_safetensors_metadata(f, "format"), "pt") == 0);
        ls_safetensors_close(f);
    }
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* BatchNorm's running statistics are saved after the parameters ("<bn>.running_mean") and loaded
 * (then broadcast) on every rank: a model whose statistics moved, saved, then loaded into a fresh
 * one, ends with the same buffers bitwise. */
static void test_buffers(void) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/buffers", root);
    ls_resnet_config cfg = {.param_dtype = LS_F32,
                            .act_dtype = LS_F32,
                            .in_channels = 1,
                            .in_h = 8,
                            .in_w = 8,
                            .n_stages = 2,
                            .widths = {4, 8},
                            .blocks = 1,
                            .num_classes = 3,
                            .seed = 5};
    ls_module *a, *b;
    LS_REQUIRE_OK(ls_resnet_create(ctx, &cfg, &a));
    LS_REQUIRE_OK(ls_resnet_create(ctx, &cfg, &b));
    int nb = ls_cnn_num_buffers(a), np = ls_module_num_params(a);
    LS_EXPECT(nb >= 2 && nb == ls_cnn_num_buffers(b));
    /* training-mode forwards on rank-dependent inputs move a's statistics, differently per rank */
    float x[6 * 64];
    for (int i = 0; i < 6 * 64; i++) x[i] = (float)((i * 37 + 11 * rank) % 23) / 7.0f - 1.5f;
    ls_tensor xt = ls_tensor_view(x, LS_F32, ls_device_cpu(), 2, (int64_t[]){6, 64});
    const ls_tensor *y;
    for (int k = 0; k < 3; k++) LS_REQUIRE_OK(ls_module_forward(a, &xt, &y));
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_SGD);
    save(dir, 1, a, oa, 7, LS_OPTIM_SGD);
    /* rank 0's saved statistics, which every rank must end with */
    float *want = NULL;
    int64_t total = 0;
    for (int i = 0; i < nb; i++) total += ls_tensor_numel(ls_cnn_buffer(a, i, NULL, 0));
    want = malloc((size_t)total * sizeof *want);
    LS_REQUIRE(want != NULL);
    for (int i = 0, off = 0; i < nb; i++) {
        ls_tensor *t = ls_cnn_buffer(a, i, NULL, 0);
        memcpy(want + off, t->data, (size_t)ls_tensor_numel(t) * sizeof(float));
        off += (int)ls_tensor_numel(t);
    }
    LS_REQUIRE_OK(ls_comm_broadcast_host(comm, want, total, LS_F32, 0));
    int moved = 0; /* running variance starts at 1, mean at 0: the forwards changed them */
    for (int64_t i = 0; i < total; i++) moved += want[i] != 0.0f && want[i] != 1.0f;
    LS_EXPECT(moved > 0);
    ls_ckpt_state got;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, p, sizeof p));
    LS_EXPECT(found == 1);
    int same = 1;
    for (int i = 0, off = 0; i < nb; i++) {
        ls_tensor *t = ls_cnn_buffer(b, i, NULL, 0);
        same &= memcmp(want + off, t->data, (size_t)ls_tensor_numel(t) * sizeof(float)) == 0;
        off += (int)ls_tensor_numel(t);
    }
    LS_EXPECT(same);
    if (rank == 0) {
        char name[160];
        ls_safetensors *f;
        path_of(p, sizeof p, dir, 7, "model.safetensors");
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        ls_cnn_buffer(a, 0, name, sizeof name);
        LS_EXPECT(ls_safetensors_count(f) == np + nb && ls_safetensors_find(f, name) != NULL);
        LS_EXPECT(strstr(name, "running_mean") != NULL);
        ls_safetensors_close(f);
    }
    free(want);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* ls_model_load: rank 0's weights reach every rank whose model is rank 0's; a rank with another
 * model (wider, narrower, deeper) makes every rank return LS_ERR_MISMATCH naming it, before any
 * weight is sent (it used to fill a wider model in part, fail on one rank only, or hang). */
static void test_model_load_ranks(void) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/model_load", root);
    ls_module *a = make_model(8, LS_F32, 3);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD);
    fill_all(a, oa, 1);
    save(dir, 0, a, oa, 1, LS_OPTIM_SGD);
    path_of(p, sizeof p, dir, 1, "model.safetensors");

    ls_module *b = make_model(8, LS_F32, 100 + (uint64_t)rank);
    LS_REQUIRE_OK(ls_model_load(comm, ctx, p, b));
    LS_EXPECT(same_all(a, NULL, b, NULL));
    ls_module_destroy(b);
    if (world > 1) {
        const int64_t hidden[2] = {16, 2};
        for (int k = 0; k < 2; k++) {
            ls_module *c = make_model(rank == 1 ? hidden[k] : 8, LS_F32, 5);
            char want[96];
            snprintf(want, sizeof want, "has shape [%lld, 4] f32 on rank 1 but [8, 4] f32 on rank 0",
                     (long long)hidden[k]);
            LS_EXPECT_ERR(ls_model_load(comm, ctx, p, c), LS_ERR_MISMATCH, want);
            LS_EXPECT(strstr(ls_last_error(), "model differs between ranks: parameter 0 (0.weight)") != NULL);
            ls_module_destroy(c);
        }
        ls_module *d;
        int64_t deeper[4] = {4, 8, 3, 3};
        LS_REQUIRE_OK(ls_mlp_create(ctx, LS_F32, rank == 1 ? 4 : 3, deeper, LS_ACT_RELU, 5, &d));
        LS_EXPECT_ERR(ls_model_load(comm, ctx, p, d), LS_ERR_MISMATCH, "rank 1 has 6 parameters, rank 0 has 4");
        ls_module_destroy(d);
    }
    ls_optimizer_destroy(oa);
    ls_module_destroy(a);
}

/* 1 when every average of e equals the bytes in want (rank 0's, concatenated). */
static int ema_equals(ls_ema *e, const float *want) {
    int64_t off = 0;
    for (int i = 0; i < ls_ema_num_tensors(e); i++) {
        ls_tensor *t = ls_ema_tensor(e, i);
        if (memcmp(want + off, t->data, ls_tensor_nbytes(t)) != 0) return 0;
        off += ls_tensor_numel(t);
    }
    return 1;
}

static void test_ema(void) {
    char dir[128], plain[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ema", root);
    snprintf(plain, sizeof plain, "%s/ema_none", root);
    ls_module *a = make_model(5, LS_F32, 1), *b = make_model(5, LS_F32, 2);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_SGD);
    ls_ema *ea, *eb;
    LS_REQUIRE_OK(ls_ema_create(ctx, a, 0.75, 1, &ea));
    LS_REQUIRE_OK(ls_ema_create(ctx, b, 0.75, 1, &eb));
    int n = ls_ema_num_tensors(ea);
    LS_EXPECT(n == ls_module_num_params(a));
    for (int i = 0; i < n; i++) fill(ls_ema_tensor(ea, i), 40 + i + 7 * rank); /* differ per rank */
    ls_ema_set_num_updates(ea, 7);
    fill_all(a, oa, 3);
    ls_ckpt_state s = make_state(9, LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_ckpt_save_ema(comm, ctx, dir, 1, a, oa, ea, &s, p, sizeof p));
    /* rank 0's averages, which every rank must load */
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += ls_tensor_numel(ls_ema_tensor(ea, i));
    float *want = malloc((size_t)total * sizeof *want);
    LS_REQUIRE(want != NULL);
    for (int i = 0, off = 0; i < n; i++) {
        ls_tensor *t = ls_ema_tensor(ea, i);
        memcpy(want + off, t->data, ls_tensor_nbytes(t));
        off += (int)ls_tensor_numel(t);
    }
    LS_REQUIRE_OK(ls_comm_broadcast_host(comm, want, total, LS_F32, 0));
    if (rank == 0) { /* the file: the model's names and count; state.json: decay, warmup, updates */
        ls_safetensors *f;
        path_of(p, sizeof p, dir, 9, "ema.safetensors");
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        LS_EXPECT(ls_safetensors_count(f) == n);
        for (int i = 0; i < n; i++) {
            const ls_safetensors_info *ti = ls_safetensors_find(f, ls_module_param_name(a, i));
            LS_EXPECT(ti && memcmp(ti->data, ls_ema_tensor(ea, i)->data, ti->nbytes) == 0);
        }
        LS_EXPECT(ls_safetensors_metadata(f, "lockstep") && strcmp(ls_safetensors_metadata(f, "lockstep"), "ema") == 0);
        ls_safetensors_close(f);
        char text[4096];
        ls_ckpt_state st;
        path_of(p, sizeof p, dir, 9, "state.json");
        read_text(p, text, sizeof text);
        LS_REQUIRE_OK(ls_ckpt_state_parse(text, strlen(text), p, a, &st));
        LS_EXPECT(st.has_ema == 1 && st.ema_decay == 0.75 && st.ema_warmup == 1 && st.ema_updates == 7);
    }
    ls_ckpt_state got;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load_ema(comm, ctx, dir, "auto", b, ob, eb, &got, &found, p, sizeof p));
    LS_EXPECT(found == 1 && got.has_ema == 1 && got.ema_updates == 7 && ls_ema_num_updates(eb) == 7);
    LS_EXPECT(ema_equals(eb, want));
    LS_EXPECT(same_all(a, oa, b, ob)); /* the model too (fill_all made every rank's the same) */
    /* without an EMA to load into: the checkpoint still says it holds one */
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, p, sizeof p));
    LS_EXPECT(found == 1 && got.has_ema == 1);
    /* a checkpoint without one: the average starts again from the weights loaded */
    fill_all(a, oa, 5);
    s = make_state(4, LS_OPTIM_SGD);
    /* a path_out too small for the path is refused before the save (it was filled with its first
     * bytes, the save reported done) */
    {
        char small[8];
        LS_EXPECT_ERR(ls_ckpt_save(comm, ctx, plain, 1, a, oa, &s, small, sizeof small), LS_ERR_INVALID_ARGUMENT,
                      "ls_ckpt_save: path_out holds 8 bytes, and the checkpoint's path");
        char q[LS_CKPT_PATH_MAX];
        path_of(q, sizeof q, plain, 4, "manifest.json");
        LS_EXPECT(access(q, F_OK) != 0);
    }
    LS_REQUIRE_OK(ls_ckpt_save(comm, ctx, plain, 1, a, oa, &s, p, sizeof p));
    LS_REQUIRE_OK(ls_ckpt_load_ema(comm, ctx, plain, "auto", b, ob, eb, &got, &found, p, sizeof p));
    LS_EXPECT(found == 1 && got.has_ema == 0 && ls_ema_num_updates(eb) == 0);
    int reset = 1;
    for (int i = 0; i < n; i++)
        reset &= memcmp(ls_ema_tensor(eb, i)->data, ls_module_param(a, i)->data,
                        ls_tensor_nbytes(ls_module_param(a, i))) == 0;
    LS_EXPECT(reset);
    path_of(p, sizeof p, plain, 4, "ema.safetensors");
    LS_EXPECT(access(p, F_OK) != 0);
    /* an EMA of another model is refused, on every rank */
    ls_module *c = make_model(6, LS_F32, 3);
    ls_ema *ec;
    LS_REQUIRE_OK(ls_ema_create(ctx, c, 0.5, 0, &ec));
    s = make_state(10, LS_OPTIM_SGD);
    LS_EXPECT_ERR(ls_ckpt_save_ema(comm, ctx, dir, 1, a, oa, ec, &s, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "the EMA's '0.weight' is [6, 4] f32 cpu but the model's is [5, 4] f32 cpu: not an EMA of this model");
    path_of(p, sizeof p, dir, 10, NULL);
    LS_EXPECT(access(p, F_OK) != 0);
    LS_EXPECT_ERR(ls_ckpt_load_ema(comm, ctx, dir, "auto", b, ob, ec, &got, &found, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "not an EMA of this model");
    /* some ranks with an EMA, some without: an error on every rank, not a hang */
    if (world > 1)
        LS_EXPECT_ERR(ls_ckpt_load_ema(comm, ctx, dir, "auto", b, ob, rank == 0 ? eb : NULL, &got, &found, NULL, 0),
                      LS_ERR_MISMATCH, "EMA");
    free(want);
    ls_ema_destroy(ea);
    ls_ema_destroy(eb);
    ls_ema_destroy(ec);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
    ls_module_destroy(c);
}

static void test_keep_last_and_fallback(void) {
    char dir[128], p[LS_CKPT_PATH_MAX], q[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/keep", root);
    ls_module *a = make_model(8, LS_F32, 1), *b = make_model(8, LS_F32, 2);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_SGD);
    for (int s = 1; s <= 5; s++) {
        fill_all(a, oa, s);
        save(dir, 2, a, oa, s, LS_OPTIM_SGD);
    }
    if (rank == 0) {
        LS_EXPECT(count_entries(dir, "") == 3); /* step-4, step-5, latest */
        path_of(p, sizeof p, dir, 4, NULL);
        LS_EXPECT(access(p, F_OK) == 0);
        path_of(p, sizeof p, dir, 3, NULL);
        LS_EXPECT(access(p, F_OK) != 0);
        int found = 0;
        LS_REQUIRE_OK(ls_ckpt_find_latest(dir, p, sizeof p, &found));
        path_of(q, sizeof q, dir, 5, NULL);
        LS_EXPECT(found && strcmp(p, q) == 0);
        /* Flip one bit in the newest's weights: auto falls back to step 4, with a warning. */
        path_of(p, sizeof p, dir, 5, "model.safetensors");
        FILE *f = fopen(p, "r+b");
        LS_REQUIRE(f && fseek(f, 200, SEEK_SET) == 0);
        int c = fgetc(f);
        fseek(f, 200, SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
        LS_REQUIRE_OK(ls_ckpt_find_latest(dir, p, sizeof p, &found));
        path_of(q, sizeof q, dir, 4, NULL);
        LS_EXPECT(found && strcmp(p, q) == 0);
    }
    /* A newer checkpoint left by an earlier run is kept, but not counted among the K: it made this
     * run's second newest go at every save (with K such leftovers, all but the one just written). */
    char left[128];
    snprintf(left, sizeof left, "%s/keep_leftover", root);
    save(left, 2, a, oa, 99, LS_OPTIM_SGD);
    for (int s = 1; s <= 4; s++) save(left, 2, a, oa, s, LS_OPTIM_SGD);
    if (rank == 0) {
        LS_EXPECT(count_entries(left, "") == 4); /* step-3, step-4, step-99, latest */
        for (int s = 2; s <= 99; s++) {
            path_of(p, sizeof p, left, s, NULL);
            LS_EXPECT((access(p, F_OK) == 0) == (s == 3 || s == 4 || s == 99));
        }
    }
    /* A checkpoint moved to another disk and linked back: --keep-last removes the link, not what
     * it points to (its files were deleted there, and a dangling step-N.prune.tmp left). */
    char linked[128], away[160];
    snprintf(linked, sizeof linked, "%s/keep_link", root);
    snprintf(away, sizeof away, "%s/keep_link_away", root);
    save(linked, 1, a, oa, 1, LS_OPTIM_SGD);
    if (rank == 0) {
        path_of(p, sizeof p, linked, 1, NULL);
        LS_REQUIRE(rename(p, away) == 0 && symlink(away, p) == 0);
    }
    for (int s = 2; s <= 3; s++) save(linked, 1, a, oa, s, LS_OPTIM_SGD);
    if (rank == 0) {
        LS_EXPECT(count_entries(linked, "") == 2); /* step-3, latest: the link removed */
        LS_EXPECT(count_entries(away, ".safetensors") == 2 && count_entries(away, ".json") == 2);
        LS_EXPECT(ls_ckpt_verify(away, NULL) == LS_OK);
    }
    fill_all(a, oa, 4);
    ls_ckpt_state st;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &st, &found, p, sizeof p));
    path_of(q, sizeof q, dir, 4, NULL);
    LS_EXPECT(found && st.step == 4 && strcmp(p, q) == 0);
    LS_EXPECT(same_all(a, oa, b, ob));
    /* A directory with no checkpoints: nothing found, no error; the same for one that is missing. */
    snprintf(q, sizeof q, "%s/empty", root);
    if (rank == 0) mkdir(q, 0755);
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, q, "auto", b, ob, &st, &found, p, sizeof p));
    LS_EXPECT(found == 0);
    snprintf(q, sizeof q, "%s/missing", root);
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, q, NULL, b, ob, &st, &found, p, sizeof p));
    LS_EXPECT(found == 0);
    /* An explicit PATH naming the top directory works like auto there. */
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, "unused", dir, b, ob, &st, &found, p, sizeof p));
    LS_EXPECT(found && st.step == 4);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* DIR/latest that cannot be replaced (latest.tmp a directory here; a full disk alike): the save's
 * checkpoint is complete, so the save succeeds, with a warning, prunes as asked, and latest is
 * removed rather than left naming an older checkpoint. (It failed the save: a SIGTERM's run exited
 * 1, not 143, after its checkpoint was written.) */
static void test_latest_unwritable(void) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/latest_fail", root);
    ls_module *a = make_model(8, LS_F32, 1);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD);
    fill_all(a, oa, 1);
    save(dir, 1, a, oa, 1, LS_OPTIM_SGD);
    if (rank == 0) {
        snprintf(p, sizeof p, "%s/latest.tmp", dir);
        LS_REQUIRE(mkdir(p, 0755) == 0);
    }
    save(dir, 1, a, oa, 2, LS_OPTIM_SGD);
    if (rank == 0) {
        path_of(p, sizeof p, dir, 2, NULL);
        LS_EXPECT(ls_ckpt_verify(p, NULL) == LS_OK);
        path_of(p, sizeof p, dir, 1, NULL);
        LS_EXPECT(access(p, F_OK) != 0);
        snprintf(p, sizeof p, "%s/latest", dir);
        LS_EXPECT(access(p, F_OK) != 0);
    }
    ls_optimizer_destroy(oa);
    ls_module_destroy(a);
}

/* A run's lock on its checkpoint directory, kept across its saves: the directory removed while the
 * run goes on is made and locked again before the next save (it was made afresh by the save,
 * unlocked, and a second run started then took the lock: both saved there, each replacing and
 * pruning the other's checkpoints); where a second run holds it by then, this one stops. */
static void test_relock(void) {
    char dir[160];
    snprintf(dir, sizeof dir, "%s/relock", root);
    int fd = -1, other = -1;
    LS_REQUIRE_OK(ls_ckpt_prepare_dir(dir));
    LS_REQUIRE_OK(ls_ckpt_lock_dir(dir, &fd));
    LS_REQUIRE(fd >= 0);
    const int first = fd;
    LS_EXPECT(ls_ckpt_relock_dir(dir, &fd) == LS_OK && fd == first); /* still held: nothing done */
    rm_rf(dir);
    LS_EXPECT(ls_ckpt_relock_dir(dir, &fd) == LS_OK && fd >= 0);
    /* this process again: said so (it called itself another run) */
    char mine[96];
    snprintf(mine, sizeof mine, "is already locked by this process (pid %ld on", (long)getpid());
    LS_EXPECT_ERR(ls_ckpt_lock_dir(dir, &other), LS_ERR_IO, mine);
    LS_EXPECT(other == -1);
    /* another process: another run */
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        int theirs = -1;
        const ls_status s = ls_ckpt_lock_dir(dir, &theirs);
        _exit(s == LS_ERR_IO && theirs == -1 && strstr(ls_last_error(), "is in use by another run (pid ") ? 0 : 1);
    }
    int wst = 0;
    LS_REQUIRE(child > 0 && waitpid(child, &wst, 0) == child);
    LS_EXPECT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    rm_rf(dir); /* removed again, and a second run locks it before this one's next save */
    LS_REQUIRE_OK(ls_ckpt_prepare_dir(dir));
    LS_REQUIRE_OK(ls_ckpt_lock_dir(dir, &other));
    LS_EXPECT_ERR(ls_ckpt_relock_dir(dir, &fd), LS_ERR_IO, "was removed or replaced while this run held it");
    LS_EXPECT(strstr(ls_last_error(), "is already locked by this process") != NULL);
    ls_ckpt_unlock_dir(other);
    ls_ckpt_unlock_dir(fd);
    int none = -1; /* no lock held (a file system that cannot lock): nothing to keep */
    LS_EXPECT(ls_ckpt_relock_dir(dir, &none) == LS_OK && none == -1);
}

/* Damage one checkpoint in a fresh copy; expect the load of PATH to fail with status and needle. */
typedef enum { TRUNCATE, BITFLIP, REMOVE, NONE } damage;

static void expect_load_error(const char *tag, damage d, const char *file, ls_module *m, ls_optimizer *o,
                              ls_status want, const char *needle) {
    char dir[128], ck[LS_CKPT_PATH_MAX], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/bad-%s", root, tag);
    ls_module *src = make_model(8, LS_F32, 1);
    ls_optimizer *so = make_opt(src, LS_OPTIM_SGD);
    fill_all(src, so, 3);
    save(dir, 0, src, so, 7, LS_OPTIM_SGD);
    path_of(ck, sizeof ck, dir, 7, NULL);
    path_of(p, sizeof p, dir, 7, file);
    if (rank == 0) {
        struct stat sb;
        LS_REQUIRE(file == NULL || stat(p, &sb) == 0);
        if (d == TRUNCATE) LS_REQUIRE(truncate(p, sb.st_size - 100) == 0);
        if (d == REMOVE) LS_REQUIRE(unlink(p) == 0);
        if (d == BITFLIP) {
            FILE *f = fopen(p, "r+b");
            LS_REQUIRE(f && fseek(f, sb.st_size - 5, SEEK_SET) == 0);
            int c = fgetc(f);
            fseek(f, sb.st_size - 5, SEEK_SET);
            fputc(c ^ 1, f);
            fclose(f);
        }
    }
    ls_ckpt_state st;
    int found = 7;
    char out[LS_CKPT_PATH_MAX] = "";
    ls_status s = ls_ckpt_load(comm, ctx, NULL, ck, m, o, &st, &found, out, sizeof out);
    const char *msg = ls_last_error();
    int ok = s == want && strstr(msg, needle) && found == 0 && (file == NULL || strstr(msg, p)) &&
             (rank == 0 || strstr(msg, "(on rank 0)"));
    if (!ok) {
        fprintf(stderr, "rank %d, %s: got %s '%s', expected %s naming '%s' with '%s'\n", rank, tag, ls_status_name(s),
                msg, ls_status_name(want), file ? p : "-", needle);
        ls_test_failures++;
    }
    /* auto over the same directory fails the same way: its only checkpoint is damaged. */
    if (d != NONE) {
        s = ls_ckpt_load(comm, ctx, dir, "auto", m, o, &st, &found, out, sizeof out);
        LS_EXPECT(s == want && strstr(ls_last_error(), "no valid checkpoint in") && strstr(ls_last_error(), needle));
    }
    ls_optimizer_destroy(so);
    ls_module_destroy(src);
}

static void test_bad_inputs(void) {
    ls_module *m = make_model(8, LS_F32, 5);
    ls_optimizer *o = make_opt(m, LS_OPTIM_SGD);
    expect_load_error("truncated", TRUNCATE, "model.safetensors", m, o, LS_ERR_FORMAT,
                      "bytes but the manifest records");
    expect_load_error("truncated2", TRUNCATE, "model.safetensors", m, o, LS_ERR_FORMAT, "(truncated)");
    expect_load_error("bitflip", BITFLIP, "optimizer.safetensors", m, o, LS_ERR_FORMAT,
                      "does not match the manifest's");
    expect_load_error("bitflip-state", BITFLIP, "state.json", m, o, LS_ERR_FORMAT, "(the file is damaged)");
    expect_load_error("missing", REMOVE, "optimizer.safetensors", m, o, LS_ERR_IO,
                      "is missing (listed in the manifest): the checkpoint is incomplete");
    expect_load_error("nomanifest", REMOVE, "manifest.json", m, o, LS_ERR_IO,
                      "is an incomplete checkpoint or not a checkpoint");
    ls_module *wide = make_model(9, LS_F32, 5);
    ls_optimizer *wo = make_opt(wide, LS_OPTIM_SGD);
    expect_load_error("wrong-model", NONE, "state.json", wide, wo, LS_ERR_INVALID_ARGUMENT,
                      "parameter 0 is '0.weight' [8, 4] F32 in the checkpoint but '0.weight' [9, 4] F32 in this model");
    ls_module *f64 = make_model(8, LS_F64, 5);
    ls_optimizer *fo = make_opt(f64, LS_OPTIM_SGD);
    expect_load_error("wrong-dtype", NONE, "state.json", f64, fo, LS_ERR_INVALID_ARGUMENT,
                      "'0.weight' [8, 4] F32 in the checkpoint but '0.weight' [8, 4] F64 in this model");
    ls_optimizer *ao = make_opt(m, LS_OPTIM_ADAMW);
    expect_load_error("wrong-optimizer", NONE, "optimizer.safetensors", m, ao, LS_ERR_INVALID_ARGUMENT,
                      "the checkpoint's optimizer is sgd but this run's is adamw");
    char nodir[128];
    snprintf(nodir, sizeof nodir, "%s/nowhere/step-00000001", root);
    ls_ckpt_state st;
    int found;
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, NULL, nodir, m, o, &st, &found, NULL, 0), LS_ERR_IO,
                  "no such checkpoint directory");
    /* DIR/latest, the file naming the newest checkpoint, given as PATH: it was "no such checkpoint
     * directory" of a file that is there; now what it is and what to give (the wrong-model case's
     * directory holds step-00000007 and its latest) */
    char latest[LS_CKPT_PATH_MAX], want[3 * LS_CKPT_PATH_MAX];
    snprintf(latest, sizeof latest, "%s/bad-wrong-model/latest", root);
    snprintf(want, sizeof want,
             "'%s' is a file, not a checkpoint directory: it names the newest checkpoint, step-00000007; give "
             "%s/bad-wrong-model/step-00000007, or %s/bad-wrong-model for its newest valid checkpoint",
             latest, root, root);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, NULL, latest, m, o, &st, &found, NULL, 0), LS_ERR_IO, want);
    /* a name of DIR's for PATH, which is a path of its own: it was "'7': no such checkpoint
     * directory" alone, though DIR held it; now what to give (the test's working directory holds none
     * of these names) */
    char bdir[LS_CKPT_PATH_MAX];
    snprintf(bdir, sizeof bdir, "%s/bad-wrong-model", root);
    snprintf(want, sizeof want,
             "'7': no such checkpoint directory: the checkpoint of step 7 in '%s' is '%s/step-00000007'", bdir, bdir);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, bdir, "7", m, o, &st, &found, NULL, 0), LS_ERR_IO, want);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, bdir, "step-00000007", m, o, &st, &found, NULL, 0), LS_ERR_IO,
                  "'step-00000007': no such checkpoint directory: the checkpoint of step 7 in '");
    snprintf(want, sizeof want, "'8': no such checkpoint directory (nor is there a '%s/step-00000008')", bdir);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, bdir, "8", m, o, &st, &found, NULL, 0), LS_ERR_IO, want);
    snprintf(want, sizeof want,
             "'latest': no such checkpoint directory (\"auto\" takes the newest valid checkpoint in '%s')", bdir);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, bdir, "latest", m, o, &st, &found, NULL, 0), LS_ERR_IO, want);
    LS_EXPECT(found == 0);
    snprintf(latest, sizeof latest, "%s/bad-wrong-model/step-00000007/state.json", root);
    LS_EXPECT_ERR(ls_ckpt_load(comm, ctx, NULL, latest, m, o, &st, &found, NULL, 0), LS_ERR_IO,
                  "state.json' is a file, not a checkpoint directory (DIR/step-N)");
    ls_optimizer_destroy(ao);
    ls_optimizer_destroy(fo);
    ls_module_destroy(f64);
    ls_optimizer_destroy(wo);
    ls_module_destroy(wide);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

/* SGD saved without momentum, resumed with momentum 0.9 and dampening 0.5: a warning and a resume
 * (it was an error, "no tensor '0.weight.momentum' for this run's optimizer", where momentum 0.9 to
 * 0 only warned), whose next steps are a fresh optimizer's on the resumed weights, bit for bit,
 * stepped on the host and counted on the device: the first step's buffer is its gradient, as
 * torch.optim.SGD's for a parameter without one (zeroed buffers would give it half, 0.9 * 0 + (1 -
 * 0.5) * grad), the second uses it. The step count goes on from the checkpoint's. */
static void test_momentum_turned_on(void) {
    char dir[128], logp[160];
    snprintf(dir, sizeof dir, "%s/momentum-on", root);
    snprintf(logp, sizeof logp, "%s/momentum-on-r%d.log", root, rank);
    ls_optim_config off = ls_optim_defaults(LS_OPTIM_SGD), on = off;
    off.momentum = 0;
    on.dampening = 0.5f;
    ls_module *a = make_model(8, LS_F32, 1);
    ls_optimizer *oa = make_opt_cfg(a, &off);
    fill_all(a, oa, 1); /* 101 steps */
    ls_ckpt_state st = make_state(5, LS_OPTIM_SGD);
    st.optim = off;
    LS_REQUIRE_OK(ls_ckpt_save(comm, ctx, dir, 0, a, oa, &st, NULL, 0));
    static const double no_skip = 0; /* device memory of the CPU context */
    for (int counted = 0; counted < 2; counted++) {
        ls_module *b = make_model(8, LS_F32, 2), *c = make_model(8, LS_F32, 3);
        ls_optimizer *ob = make_opt_cfg(b, &on);
        fill_all(b, ob, 9); /* buffers not zero, 109 steps: the load replaces both */
        int saved = ls_test_stderr_to(logp);
        ls_ckpt_state got;
        int found = 0;
        ls_status s = ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, NULL, 0);
        ls_test_stderr_back(saved);
        LS_REQUIRE_OK(s);
        size_t len = 0;
        char *log = (char *)ckpt_test_slurp(logp, &len);
        LS_REQUIRE(log);
        char want[LS_CKPT_PATH_MAX + 300];
        snprintf(want, sizeof want,
                 "'%s/step-00000005/optimizer.safetensors' holds no momentum (the checkpoint's sgd kept none): this "
                 "run's momentum, 0.9, starts afresh as a new optimizer's (each buffer the gradient of its first step)",
                 dir);
        if (rank == 0 && !strstr(log, want)) {
            fprintf(stderr, "the resume with momentum turned on logged '%s', expected '%s'\n", log, want);
            ls_test_failures++;
        }
        free(log);
        LS_EXPECT(found && got.step == 5 && num_steps(ob) == 101);
        for (int i = 0; i < ls_module_num_params(b); i++) {
            ls_tensor *x = ls_module_param(b, i), *y = ls_module_param(c, i);
            memcpy(y->data, x->data, ls_tensor_nbytes(x));
        }
        ls_optimizer *oc = make_opt_cfg(c, &on);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < ls_module_num_params(b); i++) {
                fill(ls_module_grad(b, i), 30 + 3 * k + i);
                fill(ls_module_grad(c, i), 30 + 3 * k + i);
            }
            if (counted) {
                LS_REQUIRE_OK(ls_optimizer_step_unless(ob, 0.1f, &no_skip));
                LS_REQUIRE_OK(ls_optimizer_step_unless(oc, 0.1f, &no_skip));
            } else {
                LS_REQUIRE_OK(ls_optimizer_step(ob, 0.1f));
                LS_REQUIRE_OK(ls_optimizer_step(oc, 0.1f));
            }
            int same = 1;
            for (int i = 0; i < ls_module_num_params(b); i++) {
                ls_tensor *x = ls_module_param(b, i), *y = ls_module_param(c, i);
                ls_tensor *u = ls_optimizer_state(ob, i, 0), *v = ls_optimizer_state(oc, i, 0);
                same = same && memcmp(x->data, y->data, ls_tensor_nbytes(x)) == 0 &&
                       memcmp(u->data, v->data, ls_tensor_nbytes(u)) == 0;
            }
            if (!same) {
                fprintf(stderr, "rank %d: step %d after the resume (%s) is not a fresh optimizer's\n", rank, k + 1,
                        counted ? "counted on the device" : "on the host");
                ls_test_failures++;
            }
        }
        LS_EXPECT(num_steps(ob) == 103 && num_steps(oc) == 2);
        ls_optimizer_destroy(oc);
        ls_optimizer_destroy(ob);
        ls_module_destroy(c);
        ls_module_destroy(b);
    }
    ls_optimizer_destroy(oa);
    ls_module_destroy(a);
}

static unsigned char *file_bytes(const char *p, long *len) {
    FILE *f = fopen(p, "rb");
    LS_REQUIRE(f && fseek(f, 0, SEEK_END) == 0);
    *len = ftell(f);
    unsigned char *b = malloc((size_t)*len + 1);
    LS_REQUIRE(b && fseek(f, 0, SEEK_SET) == 0 && fread(b, 1, (size_t)*len, f) == (size_t)*len);
    fclose(f);
    return b;
}

static int same_file(const char *p, const char *q) {
    long n, m;
    unsigned char *a = file_bytes(p, &n), *b = file_bytes(q, &m);
    int same = n == m && memcmp(a, b, (size_t)n) == 0;
    free(a);
    free(b);
    return same;
}

/* A sharded optimizer (ZeRO stage 1, ls_optimizer_shard) saves the same files as the unsharded one
 * it was split from, byte for byte, and a load gives each rank its own states back, bitwise. Neither
 * gathers the others' states on rank 0: the states another rank keeps travel one tensor at a time,
 * so the allocator's peak grows by the largest of them, exactly (ZeroRedundancyOptimizer's
 * consolidate_state_dict holds all of them on one rank). A failed save or load fails every rank. */
static void test_sharded(ls_optim_kind kind) {
    if (world < 2) return;
    char dir[128], full[128], p[LS_CKPT_PATH_MAX], q[LS_CKPT_PATH_MAX];
    const char *kn = kind == LS_OPTIM_SGD ? "sgd" : "adamw";
    snprintf(dir, sizeof dir, "%s/shard-%s", root, kn);
    snprintf(full, sizeof full, "%s/shard-full-%s", root, kn);
    ls_module *a = make_model(64, LS_F32, 1), *b = make_model(64, LS_F32, 2);
    ls_optimizer *oa = make_opt(a, kind), *os = make_opt(a, kind), *ob = make_opt(b, kind);
    fill_all(a, oa, 1);
    fill_all(a, os, 1);
    save(full, 1, a, oa, 30, kind);
    LS_REQUIRE_OK(ls_optimizer_shard(os, rank, world));
    LS_REQUIRE_OK(ls_optimizer_shard(ob, rank, world));
    fill_all(b, ob, 2 + rank);
    size_t transit = 0; /* the largest state another rank than 0 and this one keeps */
    for (int i = 0; i < ls_module_num_params(a); i++) {
        int owner = ls_optimizer_owner(os, i);
        size_t nb = ls_tensor_nbytes(ls_module_param(a, i));
        if (owner > 0 && owner != rank && nb > transit) transit = nb;
    }
    LS_EXPECT(rank == world - 1 || transit > 0);

    ls_memory_stats m0, m1;
    ls_allocator_stats(ctx->alloc, &m0);
    ls_allocator_reset_peak(ctx->alloc);
    save(dir, 1, a, os, 30, kind);
    ls_allocator_stats(ctx->alloc, &m1);
    if (m1.live_bytes != m0.live_bytes || m1.peak_bytes - m0.live_bytes != transit) {
        fprintf(stderr, "rank %d: a sharded save peaked %zu bytes above the %zu live (%zu after), expected %zu\n", rank,
                m1.peak_bytes - m0.live_bytes, m0.live_bytes, m1.live_bytes, transit);
        ls_test_failures++;
    }
    if (rank == 0) {
        static const char *const files[] = {"optimizer.safetensors", "model.safetensors", "state.json"};
        for (int k = 0; k < 3; k++) {
            path_of(p, sizeof p, dir, 30, files[k]);
            path_of(q, sizeof q, full, 30, files[k]);
            if (!same_file(p, q)) {
                fprintf(stderr, "%s differs from the unsharded save's %s\n", p, q);
                ls_test_failures++;
            }
        }
    }

    ls_ckpt_state got;
    int found = 0;
    ls_allocator_stats(ctx->alloc, &m0);
    ls_allocator_reset_peak(ctx->alloc);
    LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, NULL, 0));
    ls_allocator_stats(ctx->alloc, &m1);
    if (m1.live_bytes != m0.live_bytes || m1.peak_bytes - m0.live_bytes != transit) {
        fprintf(stderr, "rank %d: a sharded load peaked %zu bytes above the %zu live (%zu after), expected %zu\n", rank,
                m1.peak_bytes - m0.live_bytes, m0.live_bytes, m1.live_bytes, transit);
        ls_test_failures++;
    }
    LS_EXPECT(found == 1 && same_all(a, os, b, ob)); /* this rank's states, none of the others' */
    for (int i = 0; i < ls_module_num_params(a); i++)
        LS_EXPECT((ls_optimizer_state(ob, i, 0) != NULL) == (ls_optimizer_owner(ob, i) == rank));

    /* rank 0 cannot write there: every rank fails with its message, before any state travels */
    snprintf(p, sizeof p, "%s/shard-file-%s", root, kn);
    if (rank == 0) {
        FILE *f = fopen(p, "w");
        LS_REQUIRE(f && fclose(f) == 0);
    }
    snprintf(q, sizeof q, "%s/shard-file-%s/sub", root, kn);
    ls_ckpt_state st = make_state(31, kind);
    ls_status s = ls_ckpt_save(comm, ctx, q, 1, a, os, &st, NULL, 0);
    LS_EXPECT(s != LS_OK && strstr(ls_last_error(), p) && (rank == 0 || strstr(ls_last_error(), "(on rank 0)")));
    /* a checkpoint of an optimizer without state (SGD without momentum) into one with: its momentum
     * starts afresh on every rank, whichever keeps it (it was an error: test_momentum_turned_on) */
    if (kind == LS_OPTIM_SGD) {
        int n = ls_module_num_params(a);
        ls_tensor *pp[8], *gg[8];
        for (int i = 0; i < n; i++) {
            pp[i] = ls_module_param(a, i);
            gg[i] = ls_module_grad(a, i);
        }
        ls_optim_config c = ls_optim_defaults(LS_OPTIM_SGD);
        c.momentum = 0;
        ls_optimizer *plain;
        LS_REQUIRE_OK(ls_optimizer_create(ctx, n, pp, gg, &c, &plain));
        snprintf(q, sizeof q, "%s/shard-plain", root);
        save(q, 1, a, plain, 32, kind);
        LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, q, "auto", b, ob, &got, &found, NULL, 0));
        LS_EXPECT(found && got.step == 32 && num_steps(ob) == 0);
        for (int i = 0; i < n; i++) {
            const ls_tensor *m = ls_optimizer_state(ob, i, 0);
            LS_EXPECT((m != NULL) == (ls_optimizer_owner(ob, i) == rank));
            for (int64_t k = 0; m && k < ls_tensor_numel(m); k++) LS_EXPECT(((const float *)m->data)[k] == 0);
        }
        ls_optimizer_destroy(plain);
    }
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(os);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* An optimizer over some of the model's parameters, in another order (parameter 0 frozen, as the
 * guide says to freeze one): each state is saved under its own parameter's name, the frozen one has
 * none (state.json marks it), verify passes, and a load puts every state back into the optimizer's
 * own parameter, also when sharded. Each state was named by the optimizer's index as if it were
 * the model's: the save wrote '0.weight.momentum' of 2.weight's shape and every load refused it. */
static void test_frozen(ls_optim_kind kind) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/frozen-%s", root, kind == LS_OPTIM_SGD ? "sgd" : "adamw");
    ls_module *a = make_model(8, LS_F32, 1), *b = make_model(8, LS_F32, 2);
    static const int pick[3] = {2, 3, 1}; /* 2.weight, 2.bias, 0.bias: 0.weight frozen */
    ls_tensor *pa[3], *ga[3], *pb[3], *gb[3];
    for (int k = 0; k < 3; k++) {
        pa[k] = ls_module_param(a, pick[k]);
        ga[k] = ls_module_grad(a, pick[k]);
        pb[k] = ls_module_param(b, pick[k]);
        gb[k] = ls_module_grad(b, pick[k]);
    }
    ls_optim_config c = ls_optim_defaults(kind);
    ls_optimizer *oa, *ob;
    LS_REQUIRE_OK(ls_optimizer_create(ctx, 3, pa, ga, &c, &oa));
    LS_REQUIRE_OK(ls_optimizer_create(ctx, 3, pb, gb, &c, &ob));
    fill_all(a, NULL, 1);
    fill_all(b, NULL, 2 + rank);
    const int slots = ls_optimizer_num_state_slots(oa);
    for (int k = 0; k < 3; k++)
        for (int sl = 0; sl < slots; sl++) {
            fill(ls_optimizer_state(oa, k, sl), 60 + 10 * sl + k);
            fill(ls_optimizer_state(ob, k, sl), 90 + rank);
        }
    save(dir, 1, a, oa, 40, kind);
    if (rank == 0) {
        int64_t step = -1;
        path_of(p, sizeof p, dir, 40, NULL);
        LS_REQUIRE_OK(ls_ckpt_verify(p, &step));
        LS_EXPECT(step == 40);
        ls_safetensors *f;
        path_of(p, sizeof p, dir, 40, "optimizer.safetensors");
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        const char *suffix = kind == LS_OPTIM_SGD ? "momentum" : "exp_avg";
        for (int i = 0; i < 4; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s.%s", ls_module_param_name(a, i), suffix);
            const ls_safetensors_info *t = ls_safetensors_find(f, name);
            const ls_tensor *want = ls_module_param(a, i);
            if (i == 0 ? t != NULL : !t || t->numel != ls_tensor_numel(want)) {
                fprintf(stderr, "%s: '%s' %s\n", p, name, i == 0 ? "saved for a frozen parameter" : "wrong or missing");
                ls_test_failures++;
            }
        }
        LS_EXPECT(ls_safetensors_count(f) == 3 * slots);
        ls_safetensors_close(f);
    }
    for (int pass = 0; pass < (world > 1 ? 2 : 1); pass++) {
        if (pass == 1) LS_REQUIRE_OK(ls_optimizer_shard(ob, rank, world)); /* ZeRO: each state to its owner */
        ls_ckpt_state got;
        int found = 0;
        LS_REQUIRE_OK(ls_ckpt_load(comm, ctx, dir, "auto", b, ob, &got, &found, NULL, 0));
        LS_EXPECT(found == 1 && got.step == 40);
        for (int i = 0; i < 4; i++) {
            ls_tensor *x = ls_module_param(a, i), *y = ls_module_param(b, i);
            LS_EXPECT(memcmp(x->data, y->data, ls_tensor_nbytes(x)) == 0);
        }
        for (int k = 0; k < 3; k++)
            for (int sl = 0; sl < slots; sl++) {
                ls_tensor *u = ls_optimizer_state(oa, k, sl), *v = ls_optimizer_state(ob, k, sl);
                if (pass == 1 && ls_optimizer_owner(ob, k) != rank) continue;
                LS_EXPECT(v && memcmp(u->data, v->data, ls_tensor_nbytes(u)) == 0);
            }
    }
    /* a run that trains the frozen parameter: no state for it, said so */
    ls_optimizer *full = make_opt(b, kind);
    ls_ckpt_state got;
    int found = 0;
    ls_status s = ls_ckpt_load(comm, ctx, dir, "auto", b, full, &got, &found, NULL, 0);
    LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && strstr(ls_last_error(), "no tensor '0.weight.") &&
              strstr(ls_last_error(), "frozen"));
    /* an optimizer of another model's tensors: its states would have no name */
    ls_optimizer *other = make_opt(b, kind);
    ls_ckpt_state st = make_state(41, kind);
    s = ls_ckpt_save(comm, ctx, dir, 1, a, other, &st, NULL, 0);
    LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && strstr(ls_last_error(), "is not one of the model's"));
    ls_optimizer_destroy(other);
    ls_optimizer_destroy(full);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* A save killed at each stage leaves step 1 loadable (step 2 once its directory is renamed); the
 * next save clears the debris. Forks, so rank 0 / single process only. */
static void test_crash_stages(void) {
    static const char *stages[] = {"mid-write", "tmpfile", "before-manifest", "before-rename", "before-latest"};
    for (int k = 0; k < 5; k++) {
        char dir[128], p[LS_CKPT_PATH_MAX], q[LS_CKPT_PATH_MAX], txt[64];
        snprintf(dir, sizeof dir, "%s/crash-%s", root, stages[k]);
        ls_module *a = make_model(8, LS_F32, 1), *b = make_model(8, LS_F32, 2);
        ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_SGD);
        fill_all(a, oa, 1);
        LS_REQUIRE_OK(ls_ckpt_save(NULL, ctx, dir, 3, a, oa,
                                   &(ls_ckpt_state){.step = 1, .world_size = 1, .batch_per_rank = 1, .accum_steps = 1},
                                   NULL, 0));
        fflush(NULL);
        pid_t pid = fork();
        LS_REQUIRE(pid >= 0);
        if (pid == 0) {
            setenv("LOCKSTEP_CKPT_CRASH_AT", stages[k], 1);
            fill_all(a, oa, 2);
            ls_ckpt_state s2 = make_state(2, LS_OPTIM_SGD);
            ls_ckpt_save(NULL, ctx, dir, 1, a, oa, &s2, NULL, 0);
            _exit(3); /* not reached: the save kills this process */
        }
        int ws;
        LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
        LS_EXPECT(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
        int late = strcmp(stages[k], "before-latest") == 0;
        int found = 0;
        LS_REQUIRE_OK(ls_ckpt_find_latest(dir, p, sizeof p, &found));
        path_of(q, sizeof q, dir, late ? 2 : 1, NULL);
        if (!found || strcmp(p, q) != 0) {
            fprintf(stderr, "crash at %s: resume would pick '%s', expected '%s'\n", stages[k], found ? p : "-", q);
            ls_test_failures++;
        }
        ls_ckpt_state st;
        LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, "auto", b, ob, &st, &found, NULL, 0));
        fill_all(a, oa, late ? 2 : 1);
        LS_EXPECT(found && st.step == (late ? 2 : 1) && same_all(a, oa, b, ob));
        /* latest still names step 1: it is updated only after the directory is complete. */
        snprintf(p, sizeof p, "%s/latest", dir);
        read_text(p, txt, sizeof txt);
        LS_EXPECT(strcmp(txt, "step-00000001\n") == 0);
        LS_EXPECT(count_entries(dir, ".tmp") == (late ? 0 : 1));
        if (k == 0) { /* as if this was the first save: the directory holds only its debris */
            char aside[160], want[3 * LS_CKPT_PATH_MAX];
            snprintf(aside, sizeof aside, "%s/crash-aside", root);
            path_of(q, sizeof q, dir, 1, NULL);
            LS_REQUIRE(rename(q, aside) == 0);
            LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, "auto", b, ob, &st, &found, NULL, 0));
            LS_EXPECT(found == 0);
            /* named: what it is (it was "'DIR/manifest.json' is missing: 'DIR' is an incomplete
             * checkpoint or not a checkpoint", a damaged checkpoint to look for) */
            snprintf(want, sizeof want,
                     "'%s' holds no checkpoint (no manifest.json, no step-N directory): '%s/step-00000002.tmp' was "
                     "left by a save that was interrupted, not a checkpoint",
                     dir, dir);
            LS_EXPECT_ERR(ls_ckpt_load(NULL, ctx, "unused", dir, b, ob, &st, &found, NULL, 0), LS_ERR_IO, want);
            snprintf(p, sizeof p, "%s/step-00000002.tmp", dir);
            snprintf(want, sizeof want,
                     "'%s/manifest.json' is missing: '%s' was left by a save that was interrupted (or is one in "
                     "progress), not a checkpoint",
                     p, p);
            LS_EXPECT_ERR(ls_ckpt_load(NULL, ctx, "unused", p, b, ob, &st, &found, NULL, 0), LS_ERR_IO, want);
            LS_REQUIRE(rename(aside, q) == 0);
        }
        /* The next save removes the debris and prunes as asked. */
        LS_REQUIRE_OK(ls_ckpt_save(NULL, ctx, dir, 1, a, oa,
                                   &(ls_ckpt_state){.step = 3, .world_size = 1, .batch_per_rank = 1, .accum_steps = 1},
                                   NULL, 0));
        LS_EXPECT(count_entries(dir, ".tmp") == 0 && count_entries(dir, "") == 2);
        ls_optimizer_destroy(oa);
        ls_optimizer_destroy(ob);
        ls_module_destroy(a);
        ls_module_destroy(b);
    }
}

/* A save that replaces step-S (a resume from an older checkpoint reaching S again), killed at each
 * instant, leaves a whole step-S, the old or the new (moving the old aside, then the new in, lost
 * both to a crash in between); a step-S.old.tmp without step-S (that way, where the file system
 * cannot exchange directories) goes back to step-S. Forks: one process only. */
static void test_crash_replace(void) {
    char dir[128], p[LS_CKPT_PATH_MAX + 16], q[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/crash-replace", root);
    ls_module *a = make_model(8, LS_F32, 1), *b = make_model(8, LS_F32, 2);
    ls_optimizer *oa = make_opt(a, LS_OPTIM_SGD), *ob = make_opt(b, LS_OPTIM_SGD);
    fill_all(a, oa, 1);
    save(dir, 0, a, oa, 2, LS_OPTIM_SGD);
    static const char *stages[] = {"before-rename", "before-remove-old"};
    for (int k = 0; k < 2; k++) {
        fflush(NULL);
        pid_t pid = fork();
        LS_REQUIRE(pid >= 0);
        if (pid == 0) {
            setenv("LOCKSTEP_CKPT_CRASH_AT", stages[k], 1);
            fill_all(a, oa, 2 + k);
            ls_ckpt_state s2 = make_state(2, LS_OPTIM_SGD);
            ls_ckpt_save(NULL, ctx, dir, 0, a, oa, &s2, NULL, 0);
            _exit(3);
        }
        int ws;
        LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
        LS_EXPECT(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
        /* killed before the rename: the old step 2 (salt 1); after the exchange: the new (salt 3) */
        path_of(q, sizeof q, dir, 2, NULL);
        ls_ckpt_state st;
        int found = 0;
        LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, q, b, ob, &st, &found, p, sizeof p));
        fill_all(a, oa, k == 0 ? 1 : 3);
        LS_EXPECT(found && st.step == 2 && same_all(a, oa, b, ob));
        LS_EXPECT(count_entries(dir, ".tmp") == 1); /* the new one unrenamed, or the old one exchanged */
    }
    /* as the fallback's crash leaves it: the checkpoint moved aside, no step-2 */
    path_of(q, sizeof q, dir, 2, NULL);
    snprintf(p, sizeof p, "%s.old.tmp", q);
    LS_REQUIRE(rename(q, p) == 0);
    fill_all(a, oa, 5);
    save(dir, 0, a, oa, 5, LS_OPTIM_SGD);
    int found = 0;
    ls_ckpt_state st;
    LS_REQUIRE_OK(ls_ckpt_load(NULL, ctx, dir, q, b, ob, &st, &found, NULL, 0));
    fill_all(a, oa, 3);
    LS_EXPECT(found && st.step == 2 && same_all(a, oa, b, ob));
    LS_EXPECT(count_entries(dir, ".tmp") == 0);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* st to state.json and back into *round; again with key renamed (as a state written before the
 * key existed) into *absent; with the key's value (which must start with value) replaced by bad,
 * of the same length, refused with want. */
static void optional_key(const ls_ckpt_state *st, const char *key, const char *value, const char *bad, const char *want,
                         ls_ckpt_state *round, ls_ckpt_state *absent) {
    char *text, quoted[64];
    LS_REQUIRE(strlen(value) == strlen(bad));
    LS_REQUIRE_OK(ls_ckpt_state_to_json(st, NULL, &text));
    LS_REQUIRE_OK(ls_ckpt_state_parse(text, strlen(text), "x.json", NULL, round));
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    char *at = strstr(text, quoted);
    LS_REQUIRE(at);
    size_t last = strlen(quoted) - 2;
    char was = at[last];
    at[last] = at[last] == 'x' ? 'y' : 'x';
    LS_REQUIRE_OK(ls_ckpt_state_parse(text, strlen(text), "x.json", NULL, absent));
    at[last] = was;
    char *v = strstr(at, value);
    LS_REQUIRE(v);
    memcpy(v, bad, strlen(bad));
    ls_ckpt_state got;
    LS_EXPECT_ERR(ls_ckpt_state_parse(text, strlen(text), "x.json", NULL, &got), LS_ERR_FORMAT, want);
    free(text);
}

static void test_state_json(void) {
    ls_ckpt_state s = make_state(5, LS_OPTIM_ADAMW), got;
    char *text;
    LS_REQUIRE_OK(ls_ckpt_state_to_json(&s, NULL, &text));
    LS_REQUIRE_OK(ls_ckpt_state_parse(text, strlen(text), "x.json", NULL, &got));
    LS_EXPECT(got.seed == s.seed && got.step == 5 && got.optim.kind == LS_OPTIM_ADAMW && !got.optim.no_decay_1d);
    const char *ndk = strstr(text, "\"no_decay_1d\":");
    LS_EXPECT(ndk && strncmp(ndk + 14 + strspn(ndk + 14, " \t"), "false", 5) == 0);
    /* optional fields: each round-trips; a state written before it existed (the key renamed here)
     * parses as the old behaviour; a bad value is refused */
    ls_ckpt_state round, absent, nd = s, ls = s;
    nd.optim.no_decay_1d = 1;
    optional_key(&nd, "no_decay_1d", "true", "1   ", "'x.json': optimizer \"no_decay_1d\" is not true/false", &round,
                 &absent);
    LS_EXPECT(round.optim.no_decay_1d == 1 && absent.optim.no_decay_1d == 0 && absent.optim.eps == s.optim.eps);
    ls.label_smoothing = 0.1;
    optional_key(&ls, "label_smoothing", "0.1", "1.1", "'x.json': \"label_smoothing\" 1.1 is not in [0, 1)", &round,
                 &absent);
    LS_EXPECT(round.label_smoothing == 0.1 && absent.label_smoothing == 0);
    ls_ckpt_state dr = s;
    dr.dropout = 0.25;
    optional_key(&dr, "dropout", "0.25", "1.25", "'x.json': \"dropout\" 1.25 is not in [0, 1)", &round, &absent);
    LS_EXPECT(round.dropout == 0.25 && absent.dropout == 0);
    ls_ckpt_state lk = s;
    lk.lr.kind = LS_LR_LINEAR;
    optional_key(&lk, "decay", "linear", "linxar", "'x.json': lr_schedule \"decay\" is not cosine, linear or constant",
                 &round, &absent);
    LS_EXPECT(round.lr.kind == LS_LR_LINEAR && absent.lr.kind == LS_LR_COSINE && absent.lr.min_lr == s.lr.min_lr);
    /* Without the model signature a model check cannot pass. */
    ls_module *m = make_model(8, LS_F32, 1);
    LS_EXPECT_ERR(ls_ckpt_state_parse(text, strlen(text), "x.json", m, &got), LS_ERR_FORMAT,
                  "'x.json': \"model\" (the model signature) is missing");
    char *bad = strdup(text);
    char *at = strstr(bad, "\"epoch_samples\"");
    LS_REQUIRE(at);
    memcpy(at, "\"epoch_sample_\"", 15);
    LS_EXPECT_ERR(ls_ckpt_state_parse(bad, strlen(bad), "x.json", NULL, &got), LS_ERR_FORMAT,
                  "'x.json': \"epoch_samples\" is missing or not an integer from 0 to 2^53");
    LS_EXPECT_ERR(ls_ckpt_state_parse(text, strlen(text) / 2, "x.json", NULL, &got), LS_ERR_FORMAT,
                  "'x.json': not valid JSON");
    /* more after the object (it was taken as the object alone, where the manifest's is refused);
     * trailing whitespace, and a length that stops before the text's terminator, are fine */
    size_t tl = strlen(text);
    char *more = malloc(tl + 16);
    LS_REQUIRE(more);
    snprintf(more, tl + 16, "%s \n}x", text);
    char want[96];
    snprintf(want, sizeof want, "'x.json': bytes after its JSON object, at byte %zu (damaged state)", tl + 2);
    LS_EXPECT_ERR(ls_ckpt_state_parse(more, strlen(more), "x.json", NULL, &got), LS_ERR_FORMAT, want);
    LS_EXPECT(ls_ckpt_state_parse(more, tl + 2, "x.json", NULL, &got) == LS_OK && got.step == 5);
    free(more);
    LS_EXPECT_ERR(ls_ckpt_state_parse("{\"format\":\"lockstep-state\",\"version\":2}", 39, "x.json", NULL, &got),
                  LS_ERR_UNSUPPORTED, "state version 2 is not 1");
    free(bad);
    free(text);
    ls_module_destroy(m);
}

/* text with key's value (the first "key": in it) replaced by value; malloc'd */
static char *with_value(const char *text, const char *key, const char *value) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(text, quoted);
    LS_REQUIRE(at);
    const char *v = at + strlen(quoted);
    v += strspn(v, " \t\n");
    const char *end = v + strcspn(v, ",}\n");
    size_t n = strlen(text) + strlen(value) + 1;
    char *out = malloc(n);
    LS_REQUIRE(out);
    snprintf(out, n, "%.*s%s%s", (int)(v - text), text, value, end);
    return out;
}

/* state.json's values out of their ranges are refused naming the file, the field and the value (a
 * negative learning rate, loss scale or sampler position past the epoch's data were taken, and a
 * negative step said only "missing or not an integer") */
static void test_state_ranges(void) {
    ls_ckpt_state s = make_state(5, LS_OPTIM_ADAMW), got;
    s.has_ema = 1;
    s.ema_decay = 0.5;
    s.ema_updates = 5;
    char *text;
    LS_REQUIRE_OK(ls_ckpt_state_to_json(&s, NULL, &text));
    LS_REQUIRE_OK(ls_ckpt_state_parse(text, strlen(text), "x.json", NULL, &got));
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"step", "-5", "'x.json': \"step\" = -5 is not an integer from 0 to 2^53"},
        {"epoch", "-1", "'x.json': \"epoch\" = -1 is not an integer from 0 to 2^53"},
        {"updates", "-3", "'x.json': \"updates\" = -3 is not an integer from 0 to 2^53"},
        {"world_size", "0", "'x.json': \"world_size\" = 0 is outside [1, 2147483647]"},
        {"world_size", "-2", "'x.json': \"world_size\" = -2 is outside [1, 2147483647]"},
        {"base_lr", "-0.5", "'x.json': lr_schedule \"base_lr\" = -0.5 is not finite and >= 0"},
        {"min_lr", "1e999", "'x.json': \"min_lr\" = inf is not a finite number"},
        {"lr", "-0.25", "'x.json': optimizer \"lr\" = -0.25 is not finite and >= 0"},
        {"lr", "1e39", "'x.json': \"lr\" = 1e+39 is past a float's range"},
        {"beta2", "1", "'x.json': optimizer \"beta2\" = 1 is not from 0 to below 1"},
        {"scale", "-1", "'x.json': loss_scaler \"scale\" = -1 is not a number > 0"},
        {"scale", "0", "'x.json': loss_scaler \"scale\" = 0 is not a number > 0"},
        {"scale", "-1e999", "'x.json': \"scale\" = -inf is not a finite number"},
        {"growth_tracker", "2.5",
         "'x.json': loss_scaler \"growth_tracker\" = 2.5 is not a whole number from 0 to 2^53"},
        {"growth_tracker", "-1", "'x.json': loss_scaler \"growth_tracker\" = -1 is not a whole number from 0 to 2^53"},
        /* 32 steps of 2 ranks x 16: 1024 samples an epoch */
        {"epoch_samples", "1025",
         "'x.json': \"epoch_samples\" = 1025 is past the epoch's data: 32 steps of 2 ranks x batch 16 x 1 accumulation "
         "steps are 1024 samples"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *t = with_value(text, bad[i].key, bad[i].value);
        LS_EXPECT_ERR(ls_ckpt_state_parse(t, strlen(t), "x.json", NULL, &got), LS_ERR_FORMAT, bad[i].want);
        free(t);
    }
    char *t = with_value(text, "epoch_samples", "1024"); /* the epoch's end: still the data */
    LS_EXPECT(ls_ckpt_state_parse(t, strlen(t), "x.json", NULL, &got) == LS_OK && got.epoch_samples == 1024);
    free(t);
    t = with_value(text, "steps_per_epoch", "0"); /* not recorded: no bound */
    LS_EXPECT(ls_ckpt_state_parse(t, strlen(t), "x.json", NULL, &got) == LS_OK);
    free(t);
    free(text);
}

/* A state that its own load would refuse is refused at save, before anything is written. */
static void test_save_refuses_bad_state(void) {
    char dir[128], p[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/refused", root);
    ls_module *m = make_model(8, LS_F32, 1);
    ls_optimizer *o = make_opt(m, LS_OPTIM_SGD);
    ls_ckpt_state st = make_state(3, LS_OPTIM_SGD);
    st.label_smoothing = 1.5;
    LS_EXPECT_ERR(ls_ckpt_save(comm, ctx, dir, 3, m, o, &st, p, sizeof p), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: state.label_smoothing 1.5 is not in [0, 1)");
    path_of(p, sizeof p, dir, 3, NULL);
    LS_EXPECT(access(p, F_OK) != 0);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

static void test_resume_position(void) {
    ls_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.epoch = 1;
    s.epoch_samples = 640; /* 20 steps of 2 ranks x 16 */
    int64_t e, j;
    int exact;
    ls_ckpt_resume_position(&s, 32, 32, &e, &j, &exact); /* same world and batch */
    LS_EXPECT(e == 1 && j == 20 && exact);
    ls_ckpt_resume_position(&s, 48, 21, &e, &j, &exact); /* 3 ranks: 640/48 = 13.3 -> 14 */
    LS_EXPECT(e == 1 && j == 14 && !exact);
    ls_ckpt_resume_position(&s, 16, 63, &e, &j, &exact); /* 1 rank x 16 */
    LS_EXPECT(e == 1 && j == 40 && exact);
    ls_ckpt_resume_position(&s, 100, 7, &e, &j, &exact); /* 640 -> step 7 = the end: next epoch */
    LS_EXPECT(e == 2 && j == 0 && !exact);
}

static void test_preempt(void) {
    LS_EXPECT(ls_preempt_pending() == 0);
    LS_REQUIRE_OK(ls_preempt_install());
    int sig = -1;
    LS_REQUIRE_OK(ls_preempt_agree(NULL, &sig));
    LS_EXPECT(sig == 0);
    raise(SIGTERM); /* handled: recorded, the process lives on */
    LS_EXPECT(ls_preempt_pending() == SIGTERM);
    LS_REQUIRE_OK(ls_preempt_agree(NULL, &sig));
    LS_EXPECT(sig == SIGTERM);
    ls_preempt_uninstall();
    LS_EXPECT(ls_preempt_pending() == 0);
    /* A second signal of the same kind ends the process at once, by that signal. */
    fflush(NULL);
    pid_t pid = fork();
    LS_REQUIRE(pid >= 0);
    if (pid == 0) {
        ls_preempt_install();
        raise(SIGINT);
        if (ls_preempt_pending() != SIGINT) _exit(4);
        raise(SIGINT);
        _exit(5);
    }
    int ws;
    LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
    LS_EXPECT(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGINT);
    /* The same with the other kind between: SIGTERM, SIGINT, SIGTERM ends it at the second SIGTERM
     * (the SIGINT took the first one's place and the second SIGTERM was recorded as a first: a
     * process got TERM and INT by turns, a Ctrl-C passed on as both, and never stopped) */
    fflush(NULL);
    pid = fork();
    LS_REQUIRE(pid >= 0);
    if (pid == 0) {
        ls_preempt_install();
        raise(SIGTERM);
        raise(SIGINT);
        if (ls_preempt_pending() == 0) _exit(4);
        raise(SIGTERM);
        _exit(5);
    }
    LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
    LS_EXPECT(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM);
    /* Held after the checkpoint: more signals of either kind are ignored, also after uninstall,
     * and the process ends with its own exit status. */
    fflush(NULL);
    pid = fork();
    LS_REQUIRE(pid >= 0);
    if (pid == 0) {
        ls_preempt_install();
        raise(SIGTERM);
        if (ls_preempt_pending() != SIGTERM) _exit(4);
        ls_preempt_hold();
        raise(SIGTERM);
        raise(SIGINT);
        ls_preempt_uninstall();
        raise(SIGTERM);
        _exit(143);
    }
    LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
    LS_EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 143);
    ls_preempt_hold(); /* not installed: nothing happens */
    LS_EXPECT(ls_preempt_pending() == 0);
}

static atomic_int idle_stop;
static void *idle_thread(void *arg) {
    (void)arg;
    const struct timespec ms = {0, 1000000};
    while (!atomic_load(&idle_stop)) nanosleep(&ms, NULL);
    return NULL;
}

/* A signal handled on another thread than the training one: a signal sent to the process goes to
 * any thread that does not block it (the MPI progress thread, the GPU monitor's), and the
 * training thread must see it. Here the main thread blocks SIGTERM, so the handler runs on the idle
 * thread while the main thread polls ls_preempt_pending (for up to 20 s). The flags were volatile
 * sig_atomic_t, which orders nothing between threads: a data race ThreadSanitizer reports. */
static void test_preempt_other_thread(void) {
    LS_REQUIRE_OK(ls_preempt_install());
    atomic_store(&idle_stop, 0);
    pthread_t th;
    LS_REQUIRE(pthread_create(&th, NULL, idle_thread, NULL) == 0);
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    LS_REQUIRE(pthread_sigmask(SIG_BLOCK, &term, &old) == 0);
    LS_REQUIRE(kill(getpid(), SIGTERM) == 0);
    const struct timespec ms = {0, 1000000};
    int seen = 0;
    for (int i = 0; i < 20000 && !(seen = ls_preempt_pending()); i++) nanosleep(&ms, NULL);
    LS_EXPECT(seen == SIGTERM);
    int sig = -1;
    LS_REQUIRE_OK(ls_preempt_agree(NULL, &sig));
    LS_EXPECT(sig == SIGTERM);
    atomic_store(&idle_stop, 1);
    pthread_join(th, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    ls_preempt_uninstall();
    LS_EXPECT(ls_preempt_pending() == 0);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &comm));
    rank = ls_comm_rank(comm);
    world = ls_comm_world(comm);
    snprintf(root, sizeof root, "/tmp/ls_ckpt_XXXXXX");
    if (rank == 0) LS_REQUIRE(mkdtemp(root) != NULL);
    LS_REQUIRE_OK(ls_comm_broadcast_host(comm, root, (int64_t)sizeof root, LS_U8, 0));

    test_round_trip(LS_OPTIM_SGD);
    test_round_trip(LS_OPTIM_ADAMW);
    test_keep_last_and_fallback();
    test_latest_unwritable();
    test_buffers();
    test_model_load_ranks();
    test_ema();
    test_bad_inputs();
    test_momentum_turned_on();
    test_sharded(LS_OPTIM_SGD);
    test_sharded(LS_OPTIM_ADAMW);
    test_frozen(LS_OPTIM_SGD);
    test_frozen(LS_OPTIM_ADAMW);
    if (world == 1) {
        test_crash_stages();
        test_crash_replace();
        test_state_json();
        test_state_ranges();
        test_save_refuses_bad_state();
        test_resume_position();
        test_preempt();
        test_preempt_other_thread();
        test_relock();
    }
    if (rank == 0) rm_rf(root);
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
