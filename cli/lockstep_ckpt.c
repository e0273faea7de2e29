/* lockstep-ckpt: look at training checkpoints without a training program. verify checks every
 * file of each checkpoint against its manifest (size and CRC32), as a resume would, so a copied or
 * archived checkpoint can be trusted before a job depends on it; info summarizes one (the state a
 * resume continues from, its files); tensors lists a safetensors file's tensors (any file: one
 * saved by PyTorch too, before --init-from); diff compares two files or checkpoints tensor by
 * tensor (bitwise, or the largest difference relative to the tensor's largest value), so a claim
 * such as "2 ranks train as 1 within 1e-5" can be checked on one's own runs. Built on the
 * library's own reader, so what it accepts is what a resume accepts. Exit status: 0 all good, 1 a
 * damaged checkpoint (or one of a newer format), a difference (diff), an error or output that
 * could not be written, 2 bad usage (diff: also unreadable input). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "half_impl.h"

static void usage(FILE *f) {
    fprintf(f, "usage: lockstep-ckpt verify PATH...\n"
               "       lockstep-ckpt info PATH\n"
               "       lockstep-ckpt tensors FILE\n"
               "       lockstep-ckpt diff A B [--tolerance X]\n"
               "Looks at checkpoints written by lockstep (--save-every, ls_ckpt_save).\n\n"
               "  verify PATH...  check each checkpoint as a resume does: its files against its manifest\n"
               "                  (present, size, CRC32), state.json read (its values in range), the\n"
               "                  safetensors files' tensors (names, dtypes, shapes) against the model\n"
               "                  and optimizer it records;\n"
               "                  PATH is a checkpoint (DIR/step-N, or DIR/latest: the one it names;\n"
               "                  also for info and diff) or a checkpoint directory (each step-N in\n"
               "                  it); exit status 1 when any is damaged, of a newer format than this\n"
               "                  build reads (NEWER FORMAT), not readable by this user (UNREADABLE),\n"
               "                  not there (MISSING), or a directory with no checkpoint in it (NONE)\n"
               "  info PATH       the checkpoint's step, epoch, ranks and batch, optimizer, schedule and\n"
               "                  files (PATH a checkpoint directory: its newest valid checkpoint)\n"
               "  tensors FILE    a safetensors file's tensors: name, dtype, shape, bytes (any file, one\n"
               "                  saved by PyTorch too)\n"
               "  diff A B        compare two safetensors files, or two checkpoints' model, optimizer and\n"
               "                  EMA files (each summed up on a line), tensor by tensor, by name:\n"
               "                  identical bits, or the largest |a - b| over the largest |a|, |b| of\n"
               "                  the two; names, dtypes and shapes must match; the same report\n"
               "                  whichever is A; a checkpoint is verified first (damaged: exit status 1)\n"
               "  --tolerance X   diff: the two agree when every tensor is within X (default 0: bitwise;\n"
               "                  also --tolerance=X); after --, every argument is a path\n"
               "  -h, --help      this text\n"
               "  --version       the version\n\n"
               "Exit status: 0 good (diff: the same, or within --tolerance), 1 a damaged checkpoint (or\n"
               "one of a newer format), a difference, an error or output that could not be written, 2 bad\n"
               "usage (diff: also input it cannot compare).\n");
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_manifest(const char *p) {
    char m[PATH_MAX + 32]; /* past the library's LS_CKPT_PATH_MAX too: it then says the path is too long */
    struct stat st;
    snprintf(m, sizeof m, "%s/manifest.json", p);
    return stat(m, &st) == 0;
}

/* a step-N directory's name (N digits only): 1; 2 where a resume passes it over, as the library's
 * search does (N past int64, a name of 64 bytes or more): verify said "ok" of such a checkpoint,
 * which neither a resume nor info ever takes */
static int is_step_name(const char *n) {
    if (strncmp(n, "step-", 5) != 0 || !n[5]) return 0;
    long long v = 0;
    int big = strlen(n) >= 64;
    for (const char *c = n + 5; *c; c++) {
        if (*c < '0' || *c > '9') return 0;
        if (v > (LLONG_MAX - 9) / 10)
            big = 1;
        else
            v = v * 10 + (*c - '0');
    }
    return big ? 2 : 1;
}

/* DIR/latest, the file each save rewrites with the newest checkpoint's name: that checkpoint,
 * DIR/step-N, into out (at most size), returned; NULL where p is not such a file or the step-N it
 * names is not a directory. (verify said "DAMAGED: not a directory" of it, diff read it as a
 * safetensors file: "header length 3472328284420011123 exceeds the format's limit".) */
static const char *follow_latest(const char *p, char *out, size_t size) {
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    struct stat st;
    if (strcmp(base, "latest") != 0 || stat(p, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 256) return NULL;
    char name[300] = "";
    FILE *f = fopen(p, "r");
    if (!f) return NULL;
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
    if (is_step_name(name) != 1) return NULL;
    if ((size_t)snprintf(out, size, "%.*s%s", (int)(base - p), p, name) >= size || !is_dir(out)) return NULL;
    return out;
}

/* s as text for a terminal: control bytes (a newline, an escape sequence in a tensor's name) as
 * \xNN; into buf (at most size), returned. */
static const char *printable(const char *s, char *buf, size_t size) {
    size_t n = 0;
    for (; *s && n + 5 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return buf;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One checkpoint: "ok", "DAMAGED", "NEWER FORMAT" (than this build reads: not damaged) or
 * "UNREADABLE" (by this user: not damaged either) and why; returns 1 when not ok. */
static int verify_one(const char *p) {
    int64_t step = -1;
    ls_status s = ls_ckpt_verify(p, &step);
    if (s != LS_OK) {
        printf("%s  %s: %s\n",
               s == LS_ERR_UNSUPPORTED                   ? "NEWER FORMAT"
               : s == LS_ERR_IO && ls_ckpt_unreadable(p) ? "UNREADABLE"
                                                         : "DAMAGED",
               p, ls_last_error());
        return 1;
    }
    printf("ok       %s (step %lld)\n", p, (long long)step);
    return 0;
}

static int verify(int n, char **paths) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char normal[PATH_MAX];
        const char *p = ls_ckpt_path_normalize(paths[i], normal, sizeof normal);
        struct stat sb;
        char target[LS_CKPT_PATH_MAX];
        if (follow_latest(p, target, sizeof target)) {
            printf("note     %s names the newest checkpoint, %s\n", p, target);
            p = target;
        }
        if (!is_dir(p)) {
            /* a path that is not there is missing, not a damaged checkpoint (a typo) */
            if (stat(p, &sb) == 0)
                printf("DAMAGED  %s: not a directory (a checkpoint is a step-N directory)\n", p);
            else
                printf("MISSING  %s: %s\n", p, strerror(errno));
            bad++;
            continue;
        }
        if (has_manifest(p)) {
            bad += verify_one(p);
            continue;
        }
        DIR *d = opendir(p);
        if (!d) {
            int e = errno;
            printf("%s  %s: cannot list it: %s\n", e == EACCES ? "UNREADABLE" : "DAMAGED", p, strerror(e));
            bad++;
            continue;
        }
        /* listed but not searched (r without x: a chmod -R 644): each step-N was "not a directory",
         * and the directory "NONE" */
        if (faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) != 0 && errno == EACCES) {
            printf("UNREADABLE  %s: cannot look into it: %s (this user may read its names but not search it: no x "
                   "permission)\n",
                   p, strerror(EACCES));
            closedir(d);
            bad++;
            continue;
        }
        /* "/" joined as "/step-N" (the path normalized: no '/' at its end but there) */
        const size_t plen = strlen(p);
        const char *sep = plen > 0 && p[plen - 1] == '/' ? "" : "/";
        char **names = NULL;
        int k = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t len = strlen(e->d_name);
            if (strncmp(e->d_name, "step-", 5) == 0 && len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0)
                printf("note     %s%s%s: a save in progress, or left by an interrupted one: not a "
                       "checkpoint (the next save removes it)\n",
                       p, sep, e->d_name);
            const int named = is_step_name(e->d_name);
            if (!named) continue;
            if (named == 2) {
                printf("note     %s%s%s: a step number or name too long for a checkpoint: not one (a resume skips "
                       "it)\n",
                       p, sep, e->d_name);
                continue;
            }
            char full[LS_CKPT_PATH_MAX + 300];
            snprintf(full, sizeof full, "%s%s%s", p, sep, e->d_name);
            if (!is_dir(full)) { /* as a resume, which looks at directories only */
                struct stat lst;
                printf("note     %s: %s: not a checkpoint (a resume skips it)\n", full,
                       lstat(full, &lst) == 0 && S_ISLNK(lst.st_mode) ? "a symbolic link to nothing that exists"
                                                                      : "not a directory");
                continue;
            }
            if (k == cap) {
                cap = cap ? 2 * cap : 16;
                char **nn = realloc(names, (size_t)cap * sizeof *nn);
                if (!nn) break;
                names = nn;
            }
            names[k] = strdup(e->d_name);
            if (names[k]) k++;
        }
        closedir(d);
        if (k == 0) {
            printf("NONE     %s: no checkpoint in it (no manifest.json, no step-N directory); --resume auto starts "
                   "afresh there\n",
                   p);
            bad++;
        }
        if (k > 1) qsort(names, (size_t)k, sizeof *names, cmp_str); /* names is NULL when k is 0 */
        for (int j = 0; j < k; j++) {
            char c[LS_CKPT_PATH_MAX + 300];
            const int w = snprintf(c, sizeof c, "%s%s%s", p, sep, names[j]);
            (void)w; /* cut short: still past LS_CKPT_PATH_MAX, which the library names as too long */
            bad += verify_one(c);
            free(names[j]);
        }
        free(names);
    }
    return bad ? 1 : 0;
}

static long long file_size(const char *dir, const char *name) {
    char p[LS_CKPT_PATH_MAX + 64];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

static char *slurp(const char *p, size_t *len) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
}

/* One top-level layer of state.json's "layers" from e on ("Residual(relu)[", its layers split by
 * "|", "]"), as text into b (at most size): "Residual(relu)[Conv2d(...), BatchNorm2d(...)]".
 * Returns the element after it. */
static const cJSON *layer_text(const cJSON *e, char *b, size_t size) {
    size_t n = 0;
    int depth = 0, first = 1;
    b[0] = '\0';
    for (; e; e = e->next) {
        const char *t = cJSON_IsString(e) ? e->valuestring : "?";
        size_t l = strlen(t);
        int open = l > 0 && t[l - 1] == '[', close = strcmp(t, "]") == 0, bar = strcmp(t, "|") == 0;
        char last = n > 0 && n <= size ? b[n - 1] : '\0';
        const char *sep = first || close || last == '[' ? "" : bar || last == '|' ? " " : ", ";
        if (n < size) n += (size_t)snprintf(b + n, size - n, "%s%s", sep, t);
        first = 0;
        depth += open - close;
        if (depth <= 0) return e->next;
    }
    return NULL;
}

/* state.json's layers, one line: a run of equal top-level layers once, with its count. */
static void print_layers(const cJSON *layers) {
    static char prev[16384], cur[16384];
    const cJSON *e = layers->child;
    int count = 0, printed = 0;
    printf("layers     ");
    while (e || count) {
        const cJSON *next = e ? layer_text(e, cur, sizeof cur) : NULL;
        if (count && (!e || strcmp(cur, prev) != 0)) { /* the run of prev ends */
            static char shown[4 * sizeof prev + 1];
            printf("%s %s", printed++ ? "," : "", printable(prev, shown, sizeof shown));
            if (count > 1) printf(" x %d", count);
            count = 0;
        }
        if (!e) break;
        memcpy(prev, cur, sizeof prev);
        count++;
        e = next;
    }
    printf("\n");
}

static int info(const char *arg) {
    char path[LS_CKPT_PATH_MAX], target[LS_CKPT_PATH_MAX], normal[PATH_MAX];
    arg = ls_ckpt_path_normalize(arg, normal, sizeof normal);
    struct stat sb;
    if (follow_latest(arg, target, sizeof target)) arg = target;
    if (!is_dir(arg)) {
        fprintf(stderr, "lockstep-ckpt: '%s': %s\n", arg,
                stat(arg, &sb) == 0 ? "not a directory (a checkpoint, or a directory of them; for a safetensors "
                                      "file, lockstep-ckpt tensors)"
                                    : "no such directory");
        return 1;
    }
    if (has_manifest(arg)) {
        snprintf(path, sizeof path, "%s", arg);
    } else {
        int found = 0;
        if (ls_ckpt_find_latest(arg, path, sizeof path, &found) != LS_OK) {
            fprintf(stderr, "lockstep-ckpt: %s\n", ls_last_error());
            return 1;
        }
        if (!found) {
            fprintf(stderr, "lockstep-ckpt: '%s' holds no checkpoint (no manifest.json, no step-N directory)\n", arg);
            return 1;
        }
    }
    int64_t step;
    if (ls_ckpt_verify(path, &step) != LS_OK) {
        fprintf(stderr, "lockstep-ckpt: %s\n", ls_last_error());
        return 1;
    }
    char sp[LS_CKPT_PATH_MAX + 32];
    snprintf(sp, sizeof sp, "%s/state.json", path);
    size_t len = 0;
    char *text = slurp(sp, &len);
    ls_ckpt_state st;
    if (!text || ls_ckpt_state_parse(text, len, sp, NULL, &st) != LS_OK) {
        fprintf(stderr, "lockstep-ckpt: %s\n", text ? ls_last_error() : "cannot read state.json");
        free(text);
        return 1;
    }
    cJSON *state = cJSON_ParseWithLength(text, len); /* the layers, which the parse leaves to a model */
    free(text);
    printf("checkpoint  %s (verified: every file's size and CRC32, state.json read, the tensors against it)\n", path);
    /* epochs counted from 1, as the programs print them */
    if (st.epoch > 0 && st.epoch_samples == 0)
        printf("step        %lld (optimizer steps %lld); the end of epoch %lld, %lld steps an epoch\n",
               (long long)st.step, (long long)st.optim_steps, (long long)st.epoch, (long long)st.steps_per_epoch);
    else
        printf("step        %lld (optimizer steps %lld); epoch %lld, %lld samples of it done, %lld steps an epoch\n",
               (long long)st.step, (long long)st.optim_steps, (long long)st.epoch + 1, (long long)st.epoch_samples,
               (long long)st.steps_per_epoch);
    printf("ranks       %d x batch %lld x %d accumulation = %lld samples a step; seed %llu\n", st.world_size,
           (long long)st.batch_per_rank, st.accum_steps,
           (long long)st.world_size * (long long)st.batch_per_rank * st.accum_steps, (unsigned long long)st.seed);
    const ls_optim_config *o = &st.optim;
    if (o->kind == LS_OPTIM_ADAMW)
        printf("optimizer   adamw: lr %g, betas %g,%g, eps %g, weight decay %g\n", (double)o->lr, (double)o->beta1,
               (double)o->beta2, (double)o->eps, (double)o->weight_decay);
    else
        printf("optimizer   sgd: lr %g, momentum %g%s, weight decay %g\n", (double)o->lr, (double)o->momentum,
               o->nesterov ? " (nesterov)" : "", (double)o->weight_decay);
    /* the kind the run was given; with no steps past the warmup it never decays (ls_lr_at) */
    const char *kind = ls_lr_kind_name(st.lr.kind);
    printf("schedule    %s: base lr %g, min lr %g, %lld warmup steps of %lld%s\n", kind ? kind : "?",
           (double)st.lr.base_lr, (double)st.lr.min_lr, (long long)st.lr.warmup_steps, (long long)st.lr.total_steps,
           st.lr.total_steps <= st.lr.warmup_steps ? " (no steps past the warmup: no decay)" : "");
    printf("model       dropout %g, label smoothing %g", st.dropout, st.label_smoothing);
    if (st.has_ema)
        printf(", EMA of the weights (decay %g%s, %lld updates)", st.ema_decay, st.ema_warmup ? ", warmup" : "",
               (long long)st.ema_updates);
    printf("\n");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(state, "layers");
    if (cJSON_IsArray(layers)) print_layers(layers);
    for (int i = 0; i < st.n_settings; i++) { /* state.json's text: its control bytes escaped, as names' */
        char nm[4 * sizeof st.settings[i].name + 1], val[4 * sizeof st.settings[i].value + 1];
        printf("%s%s %s%s", i ? ", " : "settings    ", printable(st.settings[i].name, nm, sizeof nm),
               printable(st.settings[i].value, val, sizeof val), i + 1 == st.n_settings ? "\n" : "");
    }
    cJSON_Delete(state);
    if (st.n_loss_scaler) {
        char nm[4 * sizeof st.loss_scaler[0].key + 1];
        printf("loss scaler");
        for (int i = 0; i < st.n_loss_scaler; i++)
            printf("%s %s %g", i ? "," : "", printable(st.loss_scaler[i].key, nm, sizeof nm), st.loss_scaler[i].value);
        printf("\n");
    }
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "ema.safetensors", "state.json",
                                        "manifest.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        long long n = file_size(path, files[i]);
        if (n < 0) continue;
        char fp[LS_CKPT_PATH_MAX + 64];
        snprintf(fp, sizeof fp, "%s/%s", path, files[i]);
        ls_safetensors *f = NULL;
        if (strstr(files[i], ".safetensors") && ls_safetensors_open(fp, &f) == LS_OK) {
            long long elems = 0;
            for (int t = 0; t < ls_safetensors_count(f); t++) elems += ls_safetensors_tensor(f, t)->numel;
            printf("file        %-22s %12lld bytes, %d tensors, %lld values\n", files[i], n, ls_safetensors_count(f),
                   elems);
            ls_safetensors_close(f);
        } else {
            printf("file        %-22s %12lld bytes\n", files[i], n);
        }
    }
    return 0;
}

/* a tensor's shape as text, "[10, 16]", into buf (at most size), returned */
static const char *shape_text(const ls_safetensors_info *t, char *buf, size_t size) {
    int n = snprintf(buf, size, "[");
    for (int k = 0; k < t->ndim && n < (int)size; k++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", k ? ", " : "", (long long)t->shape[k]);
    if (n < (int)size) snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

static int tensors(const char *path) {
    ls_safetensors *f = NULL;
    if (ls_safetensors_open(path, &f) != LS_OK) {
        fprintf(stderr, "lockstep-ckpt: %s\n", ls_last_error());
        return 1;
    }
    long long total = 0, bytes = 0;
    for (int i = 0; i < ls_safetensors_count(f); i++) {
        const ls_safetensors_info *t = ls_safetensors_tensor(f, i);
        char shape[160], nm[1024];
        printf("%-40s %-5s %-22s %12zu bytes\n", printable(t->name, nm, sizeof nm), t->dtype_name,
               shape_text(t, shape, sizeof shape), t->nbytes);
        total += t->numel;
        bytes += (long long)t->nbytes;
    }
    printf("%d tensors, %lld values, %lld bytes of data\n", ls_safetensors_count(f), total, bytes);
    ls_safetensors_close(f);
    return 0;
}

/* element i of a float tensor's bytes (little-endian, maybe unaligned) as a double */
static double value_at(const ls_safetensors_info *t, int64_t i) {
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * t->elem_size;
    switch (t->dtype) {
    case LS_F64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case LS_F32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case LS_F16: return ls_hi_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case LS_BF16: return ls_hi_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
    default: return 0;
    }
}

/* One tensor of either file: x in a, y in b (NULL where that file lacks it). */
typedef struct diff_pair {
    const ls_safetensors_info *x, *y;
} diff_pair;

/* by name, numbers as numbers ("2.weight" before "10.weight"): one order whichever file is A */
static int cmp_pair(const void *p, const void *q) {
    const diff_pair *u = p, *v = q;
    return strverscmp((u->x ? u->x : u->y)->name, (v->x ? v->x : v->y)->name);
}

/* The two files' tensors; *worst (the largest relative difference) and the counts grow. label: the
 * file's name in a checkpoint ("ema.safetensors", whose tensors are named as the model's), printed
 * before each tensor's name and on a line of its own that sums the file up; NULL for two files.
 * The report is the same whichever file is A (the sides of a line swapped): the tensors go in one
 * order, by name, and a difference is measured against the larger of the two tensors' largest
 * values (it was A's: 0.333 one way, 0.25 the other, and --tolerance 0.3 passed one of them).
 * Returns 2 when they cannot be compared (a file unreadable; names, dtypes or shapes differ), else 0. */
static int diff_files(const char *a, const char *b, const char *label, double *worst, int *same, int *differ) {
    ls_safetensors *fa = NULL, *fb = NULL;
    if (ls_safetensors_open(a, &fa) != LS_OK || ls_safetensors_open(b, &fb) != LS_OK) {
        fprintf(stderr, "lockstep-ckpt: %s\n", ls_last_error());
        ls_safetensors_close(fa);
        return 2;
    }
    int rc = 0, na = ls_safetensors_count(fa), nb = ls_safetensors_count(fb), np = 0;
    int f_same = 0, f_differ = 0, f_apart = 0;
    double f_worst = 0;
    diff_pair *pairs = malloc(((size_t)na + (size_t)nb + 1) * sizeof *pairs);
    if (!pairs) {
        fprintf(stderr, "lockstep-ckpt: no memory to compare '%s' and '%s'\n", a, b);
        ls_safetensors_close(fa);
        ls_safetensors_close(fb);
        return 2;
    }
    for (int i = 0; i < na; i++) {
        const ls_safetensors_info *x = ls_safetensors_tensor(fa, i);
        pairs[np++] = (diff_pair){x, ls_safetensors_find(fb, x->name)};
    }
    for (int i = 0; i < nb; i++)
        if (!ls_safetensors_find(fa, ls_safetensors_tensor(fb, i)->name))
            pairs[np++] = (diff_pair){NULL, ls_safetensors_tensor(fb, i)};
    if (np > 1) qsort(pairs, (size_t)np, sizeof *pairs, cmp_pair);
    char nm[1024], shown[1100];
    for (int i = 0; i < np; i++) {
        const ls_safetensors_info *x = pairs[i].x, *y = pairs[i].y;
        printable((x ? x : y)->name, nm, sizeof nm);
        snprintf(shown, sizeof shown, "%s%s%s", label ? label : "", label ? ": " : "", nm);
        const char *name = shown;
        if (!x || !y) {
            printf("only in %s: %s\n", x ? a : b, nm); /* the file's path names it */
            rc = 2;
            f_apart++;
            continue;
        }
        int comparable = x->ndim == y->ndim && strcmp(x->dtype_name, y->dtype_name) == 0;
        for (int k = 0; comparable && k < x->ndim; k++) comparable = x->shape[k] == y->shape[k];
        if (!comparable) {
            char sa[160], sb[160]; /* which differs, and how (it said "dtype or shape") */
            printf("%s: not comparable: %s %s in %s, %s %s in %s\n", name, x->dtype_name, shape_text(x, sa, sizeof sa),
                   a, y->dtype_name, shape_text(y, sb, sizeof sb), b);
            rc = 2;
            f_apart++;
            continue;
        }
        if (memcmp(x->data, y->data, x->nbytes) == 0) {
            f_same++;
            continue;
        }
        f_differ++;
        int fl =
            x->has_dtype && (x->dtype == LS_F64 || x->dtype == LS_F32 || x->dtype == LS_F16 || x->dtype == LS_BF16);
        if (!fl) {
            printf("%-40s differs (%s: its bytes compared)\n", name, x->dtype_name);
            f_worst = INFINITY;
            continue;
        }
        double most = 0, big = 0;
        int64_t at = 0, nan_at = -1;
        for (int64_t k = 0; k < x->numel; k++) {
            double u = value_at(x, k), v = value_at(y, k);
            if (isfinite(u) && fabs(u) > big) big = fabs(u);
            if (isfinite(v) && fabs(v) > big) big = fabs(v);
            if (isnan(u) != isnan(v)) { /* a NaN against a number: no difference to measure */
                if (nan_at < 0) nan_at = k;
                continue;
            }
            double d = isnan(u) ? 0 : u == v ? 0 : fabs(u - v); /* inf == inf: 0, not inf - inf */
            if (d > most) {
                most = d;
                at = k;
            }
        }
        double rel = big > 0 ? most / big : (most > 0 ? INFINITY : 0);
        if (nan_at >= 0) {
            printf("%-40s NaN in one and not the other, first at element %lld\n", name, (long long)nan_at);
            rel = INFINITY;
        } else if (most == 0) { /* the bytes differ, the values do not */
            printf("%-40s equal values in other bits (-0 against 0, or NaNs' payloads)\n", name);
        } else {
            printf("%-40s max |a - b| %.3g at element %lld: %.3g of the largest |a|, |b| (%.3g)\n", name, most,
                   (long long)at, rel, big);
        }
        if (!(rel <= f_worst)) f_worst = rel;
    }
    free(pairs);
    ls_safetensors_close(fa);
    ls_safetensors_close(fb);
    if (label) { /* the file summed up: an EMA's differences were told from the model's by nothing */
        if (f_differ == 0 && f_apart == 0)
            printf("%s: identical: %d tensors, bit for bit\n", label, f_same);
        else if (f_differ > 0)
            printf("%s: %d of %d tensors differ; the largest difference is %.3g of its tensor's largest value\n", label,
                   f_differ, f_same + f_differ, f_worst);
        if (f_apart > 0)
            printf("%s: %d tensors not compared (only in one checkpoint, or of another dtype or shape)%s\n", label,
                   f_apart, f_differ == 0 && f_same > 0 ? "; the others identical" : "");
    }
    *same += f_same;
    *differ += f_differ;
    if (!(f_worst <= *worst)) *worst = f_worst;
    return rc;
}

static int diff(const char *a, const char *b, double tol) {
    char ta[LS_CKPT_PATH_MAX], tb[LS_CKPT_PATH_MAX], na[PATH_MAX], nb[PATH_MAX];
    a = ls_ckpt_path_normalize(a, na, sizeof na);
    b = ls_ckpt_path_normalize(b, nb, sizeof nb);
    if (follow_latest(a, ta, sizeof ta)) a = ta;
    if (follow_latest(b, tb, sizeof tb)) b = tb;
    double worst = 0;
    int same = 0, differ = 0, rc = 0, compared = 0;
    struct stat there;
    for (int i = 0; i < 2; i++) /* a path that is not there is named (it was "not both checkpoints") */
        if (stat(i ? b : a, &there) != 0) {
            fprintf(stderr, "lockstep-ckpt: diff: '%s': %s\n", i ? b : a, strerror(errno));
            return 2;
        }
    if (is_dir(a) != is_dir(b)) {
        fprintf(stderr, "lockstep-ckpt: diff: '%s' and '%s' are not both checkpoints or both files\n", a, b);
        return 2;
    }
    /* a directory this user may not search: its files were "only in" the other one, or neither held
     * any ("hold no safetensors files"), the permission unsaid */
    for (int i = 0; i < 2 && is_dir(a); i++)
        if (faccessat(AT_FDCWD, i ? b : a, R_OK | X_OK, AT_EACCESS) != 0) {
            fprintf(stderr, "lockstep-ckpt: diff: '%s': cannot look into it: %s\n", i ? b : a, strerror(errno));
            return 2;
        }
    for (int i = 0; i < 2 && is_dir(a);
         i++) { /* a run's directory: which of its checkpoints is not for diff to guess */
        const char *p = i ? b : a;
        int found = 0;
        if (!has_manifest(p) && ls_ckpt_find_latest(p, NULL, 0, &found) == LS_OK && found) {
            fprintf(stderr, "lockstep-ckpt: diff: '%s' is a directory of checkpoints: give one of them (%s/step-N)\n",
                    p, p);
            return 2;
        }
    }
    /* a checkpoint is verified first: a damaged file's bytes compared as a training's difference,
     * and one bit of rot in a low digit passed --tolerance with exit status 0 */
    int damaged = 0;
    for (int i = 0; i < 2 && is_dir(a); i++) {
        const char *p = i ? b : a;
        if (!has_manifest(p)) continue;
        ls_status s = ls_ckpt_verify(p, NULL);
        if (s == LS_OK || s == LS_ERR_UNSUPPORTED) continue; /* a newer format: its files are whole */
        fprintf(stderr, "lockstep-ckpt: diff: '%s' is damaged: %s (compare its files themselves to see how)\n", p,
                ls_last_error());
        damaged = 1;
    }
    if (damaged) return 1;
    if (is_dir(a)) {
        static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "ema.safetensors"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            long long sa = file_size(a, files[i]), sb = file_size(b, files[i]);
            if (sa < 0 && sb < 0) continue;
            if ((sa < 0) != (sb < 0)) {
                printf("%s: only in %s%s\n", files[i], sa < 0 ? b : a,
                       i == 2 ? " (an EMA of the weights, --ema, in one checkpoint only)" : "");
                rc = 2;
                continue;
            }
            char pa[LS_CKPT_PATH_MAX + 64], pb[LS_CKPT_PATH_MAX + 64];
            snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
            snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
            int r = diff_files(pa, pb, files[i], &worst, &same, &differ);
            if (r > rc) rc = r;
            compared++;
        }
        if (compared == 0) {
            fprintf(stderr, "lockstep-ckpt: diff: '%s' and '%s' hold no safetensors files\n", a, b);
            return 2;
        }
    } else {
        rc = diff_files(a, b, NULL, &worst, &same, &differ);
    }
    if (rc) return rc;
    if (differ == 0) {
        printf("identical: %d tensors, bit for bit\n", same);
        return 0;
    }
    /* which way it went, in words too (the exit status alone told them apart) */
    printf("%d of %d tensors differ; the largest difference is %.3g of its tensor's largest value (tolerance %g%s)\n",
           differ, same + differ, worst, tol,
           tol == 0       ? ": bit for bit"
           : worst <= tol ? ": all within it"
                          : ": over it");
    /* the default, 0, compares bits: values equal in other bits (-0 and 0) differ too */
    return tol > 0 && worst <= tol ? 0 : 1;
}

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

/* Bad usage: what is wrong, in one line, and where the usage is (it printed the whole help and
 * left the reader to guess); exit status 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lockstep-ckpt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nrun lockstep-ckpt --help for the usage\n");
    va_end(ap);
    return 2;
}

static int run(int argc, char **argv) {
    /* lockstep-ckpt --help, and SUBCOMMAND --help (not a path named --help) */
    if ((argc > 1 && is_help(argv[1])) || (argc > 2 && is_help(argv[2]))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) return usage_error("no command given (verify, info, tensors or diff)");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version")) {
        if (argc > 2) return usage_error("--version takes no arguments");
        printf("lockstep-ckpt %s\n", LSC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "verify")) return argc >= 3 ? verify(argc - 2, argv + 2) : usage_error("verify: no PATH given");
    if (!strcmp(cmd, "info") || !strcmp(cmd, "tensors")) {
        if (argc != 3)
            return usage_error("%s: expected one %s, got %d", cmd, !strcmp(cmd, "info") ? "PATH" : "FILE", argc - 2);
        return !strcmp(cmd, "info") ? info(argv[2]) : tensors(argv[2]);
    }
    if (!strcmp(cmd, "diff")) {
        /* A B, with --tolerance X (or --tolerance=X, as getopt_long takes it) before, between or
         * after them; after "--" every argument is a path. Another option is named as one: it was
         * taken for a path, and "--tolerance=1e-5 A B" said "'B' is a third" path. */
        double tol = 0;
        int have_tol = 0, n = 0, paths_only = 0;
        const char *ab[2] = {NULL, NULL};
        for (int i = 2; i < argc; i++) {
            const int eq = !paths_only && !strncmp(argv[i], "--tolerance=", 12);
            if (!paths_only && !strcmp(argv[i], "--")) {
                paths_only = 1;
            } else if (eq || (!paths_only && !strcmp(argv[i], "--tolerance"))) {
                if (have_tol) return usage_error("diff: --tolerance given twice");
                if (!eq && i + 1 >= argc) return usage_error("diff: --tolerance needs a value (a number >= 0)");
                const char *v = eq ? argv[i] + 12 : argv[++i];
                char *end = NULL;
                tol = strtod(v, &end);
                if (end == v || *end || !(tol >= 0) || !isfinite(tol))
                    return usage_error("diff: --tolerance '%s': expected a number >= 0", v);
                have_tol = 1;
            } else if (!paths_only && argv[i][0] == '-' && argv[i][1]) {
                return usage_error("diff: unknown option '%s' (diff takes --tolerance X; a path starting "
                                   "with '-': after --)",
                                   argv[i]);
            } else if (n < 2) {
                ab[n++] = argv[i];
            } else {
                return usage_error("diff: expected two paths, A and B, but '%s' is a third", argv[i]);
            }
        }
        if (n != 2) return usage_error("diff: expected two paths, A and B, got %d", n);
        return diff(ab[0], ab[1], tol);
    }
    if (cmd[0] == '-') return usage_error("unknown option '%s'", cmd);
    return usage_error("unknown command '%s' (verify, info, tensors or diff)", cmd);
}

int main(int argc, char **argv) {
    int rc = run(argc, argv);
    /* a report sent to a full disk or a closed descriptor is lost: not "0, all good" */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "lockstep-ckpt: cannot write the output: %s\n", strerror(errno ? errno : EIO));
        return rc > 1 ? rc : 1;
    }
    return rc;
}
