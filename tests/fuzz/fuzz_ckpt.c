/* fuzz_ckpt.c: libFuzzer target for what a resume reads of a checkpoint beyond the safetensors
 * bytes (fuzz_safetensors.c has those): state.json against a model, and a whole checkpoint
 * directory through ls_ckpt_verify. The model is a stub of four parameters (a Linear, a 1-D
 * BatchNorm weight, a Linear) with its layer list; a valid checkpoint of it (step 1, AdamW) is
 * written once into a private directory DIR/step-1. The first input byte picks (mod 5):
 * 0 ls_ckpt_state_parse of the rest with the model (its signature and layers compared); a parsed
 *   state must survive a write/parse round trip with the model unchanged;
 * 1 the rest as manifest.json beside the valid files, then ls_ckpt_verify;
 * 2 the rest as state.json, 3 as model.safetensors, 4 as optimizer.safetensors, with the
 *   manifest rewritten to their sizes and CRCs so that verify reads their contents; a checkpoint
 *   verify passes must be one a resume can read: state.json parses at step 1, the tensors read.
 * checkpoint.c is included (its manifest writer and CRC are static); what it calls outside the
 * readers is stubbed in ckpt_stubs.h. Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/CMakeLists.txt. */
#include "checkpoint.c"

#include <stdint.h>
#include <stdlib.h>

#include "ckpt_stubs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the stub model: names, shapes and layers; the data is not read ---- */
#define N_PARAMS 4
static const char *const param_names[N_PARAMS] = {"0.weight", "0.bias", "1.weight", "3.weight"};
static const int param_ndim[N_PARAMS] = {2, 1, 1, 2};
static const int64_t param_shape[N_PARAMS][2] = {{4, 3}, {4, 0}, {4, 0}, {2, 4}};
static const char *const layer_desc[] = {"Linear", "BatchNorm1d(eps=1e-05, momentum=0.1)", "ReLU", "Linear"};
static float param_data[N_PARAMS][12];
static ls_tensor params[N_PARAMS];
static char model_tag;
#define MODEL ((ls_module *)(void *)&model_tag)

int ls_module_num_params(const ls_module *m) {
    if (m != MODEL) abort();
    return N_PARAMS;
}
ls_tensor *ls_module_param(ls_module *m, int i) {
    if (m != MODEL || i < 0 || i >= N_PARAMS) abort();
    return &params[i];
}
const char *ls_module_param_name(const ls_module *m, int i) {
    if (m != MODEL || i < 0 || i >= N_PARAMS) abort();
    return param_names[i];
}
int ls_module_layers(const ls_module *m, char (*out)[LS_LAYER_DESC_MAX], int max) {
    const int n = (int)(sizeof layer_desc / sizeof *layer_desc);
    if (m != MODEL || max < 0 || (max && !out)) abort();
    for (int i = 0; i < n && i < max; i++) snprintf(out[i], LS_LAYER_DESC_MAX, "%s", layer_desc[i]);
    return n;
}

/* ---- the valid checkpoint ---- */
enum { K_MODEL, K_OPTIM, K_STATE, K_N };
static char dir[64], ck_dir[96], paths[K_N + 1][160]; /* paths[K_N]: manifest.json */
static void *valid[K_N];
static size_t valid_len[K_N];

static void remove_dir(void) {
    for (int i = 0; i <= K_N; i++) unlink(paths[i]);
    rmdir(ck_dir);
    rmdir(dir);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* model.safetensors (the parameters, then the BatchNorm's running statistics) or
 * optimizer.safetensors (AdamW's two states of each parameter), serialized into valid[k]. */
static void serialize(int k) {
    const char *names[3 * N_PARAMS];
    char owned[3 * N_PARAMS][64];
    const ls_tensor *t[3 * N_PARAMS];
    int n = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        const int copies = k == K_OPTIM ? 2 : i == 2 ? 3 : 1;
        for (int c = 0; c < copies; c++) {
            if (k == K_OPTIM)
                snprintf(owned[n], sizeof owned[n], "%s%s", param_names[i], c ? ".exp_avg_sq" : ".exp_avg");
            else
                snprintf(owned[n], sizeof owned[n], "%s",
                         c == 0   ? param_names[i]
                         : c == 1 ? "1.running_mean"
                                  : "1.running_var");
            names[n] = owned[n];
            t[n++] = &params[i];
        }
    }
    const char *meta_optim[] = {"optimizer", "adamw", NULL};
    const char *meta_model[] = {"format", "pt", NULL};
    if (ls_safetensors_serialize(n, names, t, k == K_OPTIM ? meta_optim : meta_model, NULL, &valid[k], &valid_len[k]) !=
        LS_OK)
        abort();
}

static void write_checkpoint(int k, const uint8_t *p, size_t n, const uint8_t *manifest, size_t manifest_len);

/* LS_FUZZ_CKPT_SEEDS=DIR: writes the seed corpus (corpus_ckpt/: the valid files, each behind the
 * byte of its mode) into DIR. */
static void write_seeds(const char *to) {
    if (!to) return;
    write_checkpoint(K_N, NULL, 0, NULL, 0);
    static const char *const seed[5] = {"state-model.json", "manifest.json", "state.json", "model.safetensors",
                                        "optimizer.safetensors"};
    for (int mode = 0; mode < 5; mode++) {
        const char *from = mode == 1   ? paths[K_N]
                           : mode == 3 ? paths[K_MODEL]
                           : mode == 4 ? paths[K_OPTIM]
                                       : paths[K_STATE];
        char out[512];
        snprintf(out, sizeof out, "%s/%s", to, seed[mode]);
        FILE *in = fopen(from, "rb"), *f = fopen(out, "wb");
        if (!in || !f || fputc(mode, f) == EOF) abort();
        for (int c; (c = fgetc(in)) != EOF;)
            if (fputc(c, f) == EOF) abort();
        if (fclose(in) != 0 || fclose(f) != 0) abort();
    }
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/lockstep-fuzz-ckpt-%ld", (long)getpid());
    snprintf(ck_dir, sizeof ck_dir, "%s/step-1", dir);
    if (mkdir(dir, 0700) != 0 || mkdir(ck_dir, 0700) != 0) abort();
    for (int i = 0; i < K_N; i++) snprintf(paths[i], sizeof paths[i], "%s/%s", ck_dir, ckpt_required[i]);
    snprintf(paths[K_N], sizeof paths[K_N], "%s/manifest.json", ck_dir);
    atexit(remove_dir);
    for (int i = 0; i < N_PARAMS; i++) {
        for (int k = 0; k < 12; k++) param_data[i][k] = (float)(i * 12 + k) * 0.25f;
        params[i] = ls_tensor_view(param_data[i], LS_F32, ls_device_cpu(), param_ndim[i], param_shape[i]);
    }
    serialize(K_MODEL);
    serialize(K_OPTIM);
    ls_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = 1;
    st.steps_per_epoch = 10;
    st.epoch_samples = 8;
    st.world_size = 1;
    st.batch_per_rank = 8;
    st.accum_steps = 1;
    st.seed = 42;
    st.lr = (ls_lr_schedule){.base_lr = 0.1f, .min_lr = 0, .warmup_steps = 2, .total_steps = 10};
    st.optim.kind = LS_OPTIM_ADAMW;
    st.optim.lr = 0.1f;
    st.optim.beta1 = 0.9f;
    st.optim.beta2 = 0.999f;
    st.optim.eps = 1e-8f;
    st.optim_steps = 1;
    st.n_loss_scaler = 1;
    snprintf(st.loss_scaler[0].key, sizeof st.loss_scaler[0].key, "scale");
    st.loss_scaler[0].value = 65536;
    char *text = NULL;
    if (ls_ckpt_state_to_json(&st, MODEL, &text) != LS_OK) abort();
    valid[K_STATE] = text;
    valid_len[K_STATE] = strlen(text);
    write_seeds(getenv("LS_FUZZ_CKPT_SEEDS"));
}

/* Writes the checkpoint with file k's bytes replaced by p[0..n) (k == K_N: none), and its manifest
 * (the input itself when manifest is non-NULL). */
static void write_checkpoint(int k, const uint8_t *p, size_t n, const uint8_t *manifest, size_t manifest_len) {
    ckpt_manifest m;
    memset(&m, 0, sizeof m);
    m.step = 1;
    for (int i = 0; i < K_N; i++) {
        const void *b = i == k ? (const void *)p : valid[i];
        const size_t len = i == k ? n : valid_len[i];
        write_bytes(paths[i], b, len);
        snprintf(m.files[m.n].name, sizeof m.files[0].name, "%s", ckpt_required[i]);
        m.files[m.n].size = len;
        m.files[m.n++].crc = crc32_of(b, len);
    }
    if (manifest) {
        write_bytes(paths[K_N], manifest, manifest_len);
        return;
    }
    char *text = manifest_json(&m);
    if (!text) abort();
    write_bytes(paths[K_N], text, strlen(text));
    free(text);
}

/* What a checkpoint that verify passed must be: its state parses at its step, every tensor of its
 * safetensors files reads. */
static void check_verified(int64_t step) {
    if (step != 1) abort();
    ls_ckpt_state st;
    ckpt_bundle b;
    if (ckpt_read(ck_dir, &b) != LS_OK) abort();
    if (ls_ckpt_state_parse((const char *)b.f[F_STATE].p, b.f[F_STATE].len, NULL, NULL, &st) != LS_OK || st.step != 1)
        abort();
    for (int i = 0; i < N_REQUIRED; i++) {
        if (i == F_STATE) continue;
        ls_safetensors *f = NULL;
        if (ls_safetensors_open_memory(b.f[i].p, b.f[i].len, "fuzz.safetensors", &f) != LS_OK) abort();
        for (int j = 0; j < ls_safetensors_count(f); j++) {
            const ls_safetensors_info *t = ls_safetensors_tensor(f, j);
            if (!t->has_dtype || t->nbytes > (1u << 20)) continue;
            void *buf = malloc(t->nbytes + 1);
            if (!buf) abort();
            ls_tensor dst = ls_tensor_view(buf, t->dtype, ls_device_cpu(), t->ndim, t->shape);
            if (ls_safetensors_read(f, t->name, NULL, &dst) != LS_OK) abort();
            free(buf);
        }
        ls_safetensors_close(f);
    }
    bundle_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    const int mode = data[0] % 5;
    if (mode == 0) {
        ls_ckpt_state a, b;
        if (ls_ckpt_state_parse((const char *)p, n, "fuzz.json", MODEL, &a) == LS_OK) {
            char *text = NULL;
            if (ls_ckpt_state_to_json(&a, MODEL, &text) != LS_OK) abort();
            if (ls_ckpt_state_parse(text, strlen(text), "fuzz.json", MODEL, &b) != LS_OK) abort();
            memset(a.layers_changed, 0, sizeof a.layers_changed); /* written from the model: the same */
            if (memcmp(&a, &b, sizeof a) != 0) abort();
            free(text);
        }
    } else {
        if (mode == 1)
            write_checkpoint(K_N, NULL, 0, p, n);
        else
            write_checkpoint(mode == 2 ? K_STATE : mode == 3 ? K_MODEL : K_OPTIM, p, n, NULL, 0);
        int64_t step = -1;
        if (ls_ckpt_verify(ck_dir, &step) == LS_OK)
            check_verified(step);
        else if (!ls_last_error()[0])
            abort(); /* a refusal says why */
    }
    ls_error_clear();
    return 0;
}
