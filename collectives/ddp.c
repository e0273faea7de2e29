/* ddp.c: parameter broadcast, model signature check and metric reductions across ranks. The
 * signature check exchanges fixed-size records only (count, then per-parameter descriptors, then
 * a min-allreduce locating the first difference) so every rank reaches the same verdict; the
 * broadcast and the metric sums agree on their arguments first, in one small all-reduce. */
#include "ddp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LS_SIG_NAME 96

/* A parameter as the signature sees it (fixed size, exchanged as bytes). */
typedef struct ls_sig_desc {
    int64_t ndim, dtype;
    int64_t shape[LS_MAX_DIMS];
} ls_sig_desc;

static void ls_sig_of(const ls_tensor *t, ls_sig_desc *d) {
    memset(d, 0, sizeof *d);
    d->ndim = t->ndim;
    d->dtype = t->dtype;
    for (int k = 0; k < t->ndim && k < LS_MAX_DIMS; k++) d->shape[k] = t->shape[k];
}

static const char *ls_sig_str(const ls_sig_desc *d, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int64_t k = 0; k < d->ndim && k < LS_MAX_DIMS && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, k ? ", %lld" : "%lld", (long long)d->shape[k]);
    if (n < len) snprintf(buf + n, len - n, "] %s", ls_dtype_name((ls_dtype)d->dtype));
    return buf;
}

static ls_status ls_check_list(const char *fn, int n, ls_tensor *const *params) {
    if (n < 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: negative parameter count %d", fn, n);
    if (n > 0 && !params) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: parameter list is NULL", fn);
    for (int i = 0; i < n; i++)
        if (!params[i]) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: parameter %d is NULL", fn, i);
    return LS_OK;
}

static ls_status other_count(ls_comm *c, int n, int *who, int *their_n, int *n0);
static ls_status first_difference(ls_comm *c, int first, int n, int *at, int *who);

/* A call's own checks (status local) and what every rank must pass alike (key: a digest of it),
 * agreed in one all-reduce before the call's collective, so that a rank that failed its checks or
 * was given another call does not leave the others waiting there (until LOCKSTEP_COMM_TIMEOUT, or
 * in MPI for ever) or pair their collectives with another. A rank's failed check fails every rank
 * (ls_comm_agree: its message, " (on rank N)" on the others); *differ = whether the keys differ
 * (the caller then says how, collectively). One rank, or c NULL: local. */
static ls_status agree_call(ls_comm *c, ls_status local, uint64_t key, int *differ) {
    *differ = 0;
    if (!c || ls_comm_world(c) <= 1) return local;
    const int world = ls_comm_world(c);
    const double k = (double)(key >> 12); /* 52 bits: exact as a double */
    double v[3] = {local != LS_OK ? ls_comm_rank(c) : world, k, -k};
    LS_CHECK(ls_comm_allreduce_host(c, v, 3, LS_F64, LS_REDUCE_MIN));
    if (v[0] < world) return ls_comm_agree(c, local); /* every rank saw a failure */
    *differ = v[1] != -v[2];
    return LS_OK;
}

/* A parameter as a broadcast pairs it across ranks: its elements, dtype and root. */
typedef struct ls_bc_desc {
    int64_t numel, dtype, root;
} ls_bc_desc;

static uint64_t ls_fnv(uint64_t h, const void *p, size_t n);

static void ls_bc_of(const ls_tensor *t, const int *roots, int i, ls_bc_desc *d) {
    memset(d, 0, sizeof *d);
    d->numel = ls_tensor_numel(t);
    d->dtype = t->dtype;
    d->root = roots ? roots[i] : 0;
}

/* Collective, where the ranks' broadcasts differ: the error naming the first difference (the
 * count, else the lowest parameter, then the lowest rank). */
static ls_status broadcast_mismatch(ls_comm *c, const char *fn, int n, ls_tensor *const *params, const int *roots) {
    int who, nb, n0;
    LS_CHECK(other_count(c, n, &who, &nb, &n0));
    if (who >= 0)
        return ls_error(LS_ERR_MISMATCH, "%s: the ranks' calls differ: rank %d broadcasts %d parameters, rank 0 %d", fn,
                        who, nb, n0);
    ls_bc_desc *ref = calloc((size_t)(n > 0 ? n : 1), sizeof *ref);
    int32_t ok = ref != NULL;
    LS_CHECK(ls_comm_allreduce_host(c, &ok, 1, LS_I32, LS_REDUCE_MIN));
    if (!ok) {
        free(ref);
        return ls_error(LS_ERR_MISMATCH, "%s: the ranks' calls differ (%s no memory to say how)", fn,
                        ref ? "a rank had" : "this rank has");
    }
    for (int i = 0; i < n; i++) ls_bc_of(params[i], roots, i, &ref[i]);
    ls_status s = ls_comm_broadcast_host(c, ref, (int64_t)((size_t)n * sizeof *ref), LS_U8, 0);
    int first = n, at = -1;
    for (int i = 0; i < n && first == n && s == LS_OK; i++) {
        ls_bc_desc mine;
        ls_bc_of(params[i], roots, i, &mine);
        if (memcmp(&mine, &ref[i], sizeof mine)) first = i;
    }
    if (s == LS_OK) s = first_difference(c, first, n, &at, &who);
    ls_bc_desc theirs = {0, 0, 0}, zero = at >= 0 ? ref[at] : ref[0];
    free(ref);
    if (s != LS_OK) return s;
    if (who < 0) /* the digests differ, the lists not (a hash collision would go the other way) */
        return ls_error(LS_ERR_INTERNAL, "%s: the ranks' digests of their calls differ, their calls not", fn);
    if (ls_comm_rank(c) == who) ls_bc_of(params[at], roots, at, &theirs);
    LS_CHECK(ls_comm_broadcast_host(c, &theirs, (int64_t)sizeof theirs, LS_U8, who));
    return ls_error(LS_ERR_MISMATCH,
                    "%s: the ranks' calls differ: parameter %d is %lld %s elements from rank %lld on rank %d but "
                    "%lld %s elements from rank %lld on rank 0",
                    fn, at, (long long)theirs.numel, ls_dtype_name((ls_dtype)theirs.dtype), (long long)theirs.root, who,
                    (long long)zero.numel, ls_dtype_name((ls_dtype)zero.dtype), (long long)zero.root);
}

/* This rank's own checks of a broadcast's arguments. */
static ls_status check_broadcast(ls_comm *c, const char *fn, int n, ls_tensor *const *params, const int *roots) {
    LS_CHECK(ls_check_list(fn, n, params));
    ls_device dev = ls_comm_device(c);
    for (int i = 0; i < n; i++) {
        if (params[i]->device.type != dev.type) {
            char d[32];
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: parameter %d is on %s, the communicator on %s", fn, i,
                            ls_device_str(params[i]->device, d, sizeof d), dev.type == LS_DEVICE_CPU ? "cpu" : "cuda");
        }
        if (roots && (roots[i] < 0 || roots[i] >= ls_comm_world(c)))
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: parameter %d's root %d is not a rank of %d", fn, i, roots[i],
                            ls_comm_world(c));
    }
    return LS_OK;
}

static ls_status broadcast_run(ls_comm *c, const char *fn, int n, ls_tensor *const *params, const int *roots,
                               int stream_order);

ls_status ls_ddp_broadcast_params(ls_comm *c, int n, ls_tensor *const *params) {
    return ls_ddp_broadcast_owned(c, n, params, NULL, 0);
}

ls_status ls_ddp_broadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order) {
    const char *fn = roots ? "ls_ddp_broadcast_owned" : "ls_ddp_broadcast_params";
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the communicator is NULL", fn);
    /* checked here, then agreed with the others: a rank's NULL parameter or bad root, or another
     * count, dtype or root than the others', fails every rank before any broadcast */
    ls_status s = check_broadcast(c, fn, n, params, roots);
    uint64_t key = ls_fnv(14695981039346656037ull, &n, sizeof n);
    for (int i = 0; i < n && s == LS_OK; i++) {
        ls_bc_desc d;
        ls_bc_of(params[i], roots, i, &d);
        key = ls_fnv(key, &d, sizeof d);
    }
    int differ;
    LS_CHECK(agree_call(c, s, key, &differ));
    if (differ) return broadcast_mismatch(c, fn, n, params, roots);
    return broadcast_run(c, fn, n, params, roots, stream_order);
}

ls_status ls_ddp_broadcast_abandon(ls_comm *c, ls_status s) {
    if (s == LS_OK) s = ls_error(LS_ERR_INTERNAL, "ls_ddp_broadcast_abandon: called without a failure");
    int differ;
    return agree_call(c, s, 0, &differ); /* s failed: every rank's agreement ends in ls_comm_agree */
}

ls_status ls_ddp_rebroadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order) {
    const char *fn = "ls_ddp_rebroadcast_owned";
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the communicator is NULL", fn);
    LS_CHECK(check_broadcast(c, fn, n, params, roots));
    return broadcast_run(c, fn, n, params, roots, stream_order);
}

/* The broadcasts themselves (the arguments checked). */
static ls_status broadcast_run(ls_comm *c, const char *fn, int n, ls_tensor *const *params, const int *roots,
                               int stream_order) {
    /* one collective for each run of parameters of one dtype, their broadcasts all in flight at once
     * (ls_comm_ibroadcast_many: from different roots, both directions of a link carry data) */
    ls_comm_request **reqs = calloc((size_t)(n > 0 ? n : 1), sizeof *reqs);
    void **bufs = calloc((size_t)(n > 0 ? n : 1), sizeof *bufs);
    int64_t *counts = calloc((size_t)(n > 0 ? n : 1), sizeof *counts);
    int *from = calloc((size_t)(n > 0 ? n : 1), sizeof *from);
    ls_status s = LS_OK;
    int started = 0;
    if (!reqs || !bufs || !counts || !from) s = ls_error(LS_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (int i = 0; i < n && s == LS_OK; i++) {
        bufs[i] = params[i]->data;
        counts[i] = ls_tensor_numel(params[i]);
        from[i] = roots ? roots[i] : 0;
    }
    for (int lo = 0; lo < n && s == LS_OK;) {
        int hi = lo + 1;
        while (hi < n && params[hi]->dtype == params[lo]->dtype) hi++;
        s = ls_comm_ibroadcast_many(c, hi - lo, bufs + lo, counts + lo, from + lo, params[lo]->dtype, &reqs[started]);
        if (s != LS_OK)
            ls_error_context(s, "broadcasting parameters %d..%d", lo, hi - 1);
        else
            started++;
        lo = hi;
    }
    for (int i = 0; i < started; i++) {
        ls_status w = stream_order && s == LS_OK ? ls_comm_wait_stream(&reqs[i]) : ls_comm_wait(&reqs[i]);
        if (w != LS_OK && s == LS_OK) s = ls_error_context(w, "broadcasting the parameters");
    }
    free(reqs);
    free(bufs);
    free(counts);
    free(from);
    return s;
}

/* Collective: *who = the lowest rank whose n differs from rank 0's (*their_n its n, *n0 rank 0's),
 * or -1. */
static ls_status other_count(ls_comm *c, int n, int *who, int *their_n, int *n0) {
    const int rank = ls_comm_rank(c), world = ls_comm_world(c);
    int32_t v0 = n;
    LS_CHECK(ls_comm_broadcast_host(c, &v0, 1, LS_I32, 0));
    int32_t bad = n != v0 ? rank : world;
    LS_CHECK(ls_comm_allreduce_host(c, &bad, 1, LS_I32, LS_REDUCE_MIN));
    int32_t nb = n;
    if (bad < world) LS_CHECK(ls_comm_broadcast_host(c, &nb, 1, LS_I32, bad));
    *who = bad < world ? bad : -1;
    *their_n = nb;
    *n0 = v0;
    return LS_OK;
}

/* Collective: given this rank's first index of n that differs from rank 0's (n: none), *at and
 * *who = the first difference over all ranks, lowest index, then lowest rank; *who -1: none. */
static ls_status first_difference(ls_comm *c, int first, int n, int *at, int *who) {
    const int rank = ls_comm_rank(c), world = ls_comm_world(c);
    double key = (double)first * world + rank, none = (double)n * world;
    if (first == n) key = none;
    LS_CHECK(ls_comm_allreduce_host(c, &key, 1, LS_F64, LS_REDUCE_MIN));
    *at = key >= none ? -1 : (int)(key / world);
    *who = key >= none ? -1 : (int)(key - (double)*at * world);
    return LS_OK;
}

ls_status ls_ddp_check_signature(ls_comm *c, int n, ls_tensor *const *params, const char *const *names) {
    /* a rank's bad list fails every rank (it returned, the others waited in the count's exchange
     * until LOCKSTEP_COMM_TIMEOUT) */
    LS_CHECK(ls_comm_agree(c, ls_check_list("ls_ddp_check_signature", n, params)));
    const int rank = ls_comm_rank(c);

    /* 1. the parameter count */
    int who, nb, n0;
    LS_CHECK(other_count(c, n, &who, &nb, &n0));
    if (who >= 0)
        return ls_error(LS_ERR_MISMATCH, "model differs between ranks: rank %d has %d parameters, rank 0 has %d", who,
                        nb, n0);

    /* 2. rank 0's descriptors, compared locally */
    ls_sig_desc *ref = calloc((size_t)(n > 0 ? n : 1), sizeof *ref);
    if (!ref) return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_ddp_check_signature: out of host memory");
    for (int i = 0; i < n; i++) ls_sig_of(params[i], &ref[i]);
    ls_status s = ls_comm_broadcast_host(c, ref, (int64_t)((size_t)n * sizeof *ref), LS_U8, 0);
    if (s != LS_OK) {
        free(ref);
        return s;
    }
    int first = n;
    for (int i = 0; i < n && first == n; i++) {
        ls_sig_desc mine;
        ls_sig_of(params[i], &mine);
        if (memcmp(&mine, &ref[i], sizeof mine)) first = i;
    }

    /* 3. the first difference over all ranks */
    int at;
    s = first_difference(c, first, n, &at, &who);
    if (s != LS_OK || who < 0) {
        free(ref);
        return s;
    }
    struct {
        ls_sig_desc d;
        char name[LS_SIG_NAME];
    } theirs;
    memset(&theirs, 0, sizeof theirs);
    if (rank == who) {
        ls_sig_of(params[at], &theirs.d);
        if (names && names[at]) snprintf(theirs.name, sizeof theirs.name, "%s", names[at]);
    }
    s = ls_comm_broadcast_host(c, &theirs, (int64_t)sizeof theirs, LS_U8, who);
    if (s != LS_OK) {
        free(ref);
        return s;
    }
    theirs.name[LS_SIG_NAME - 1] = '\0';
    char a[96], b[96];
    s = ls_error(LS_ERR_MISMATCH,
                 "model differs between ranks: parameter %d%s%s%s has shape %s on rank %d but %s on rank 0", at,
                 theirs.name[0] ? " (" : "", theirs.name, theirs.name[0] ? ")" : "", ls_sig_str(&theirs.d, a, sizeof a),
                 who, ls_sig_str(&ref[at], b, sizeof b));
    free(ref);
    return s;
}

static ls_status sum_metrics(const char *fn, ls_comm *c, double *vals, int n) {
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the communicator is NULL", fn);
    /* checked here, then agreed with the others (with the count): a rank's bad arguments or another
     * count fail every rank, where the others waited in the sum (or MPI took another count) */
    ls_status s = n < 0 || (n > 0 && !vals) ? ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                                                       n < 0 ? "a negative count" : "the values are NULL")
                                            : LS_OK;
    int differ, who, nb, n0;
    LS_CHECK(agree_call(c, s, (uint64_t)(uint32_t)n << 12, &differ));
    if (differ) {
        LS_CHECK(other_count(c, n, &who, &nb, &n0));
        return ls_error(LS_ERR_MISMATCH, "%s: the ranks' calls differ: rank %d sums %d values, rank 0 %d", fn, who, nb,
                        n0);
    }
    return ls_comm_allreduce_host(c, vals, n, LS_F64, LS_REDUCE_SUM);
}

ls_status ls_ddp_sum_metrics(ls_comm *c, double *vals, int n) { return sum_metrics("ls_ddp_sum_metrics", c, vals, n); }

ls_status ls_ddp_average_metrics(ls_comm *c, double *vals, int n) {
    LS_CHECK(sum_metrics("ls_ddp_average_metrics", c, vals, n));
    const int world = ls_comm_world(c);
    for (int i = 0; i < n; i++) vals[i] /= world;
    return LS_OK;
}

/* ---- settings every rank must share ---- */

/* What a mismatch's message can show of a name or a string value: the bytes exchanged (longer ones
 * are told apart by their hashes, and past this said to differ "after character N"), and at most
 * LS_SET_SHOW of them in the line, around where the two differ. */
#define LS_SET_TEXT 4096
#define LS_SET_SHOW 100

static uint64_t ls_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A setting's value as a number to compare: 0 and -0 alike, every NaN alike. */
static double ls_set_num(double v) { return v != v ? NAN : v == 0 ? 0.0 : v; }

/* Two 64-bit keys per setting: its name, its value (kind-tagged). */
static void ls_set_keys(const ls_setting *s, uint64_t key[2]) {
    const uint64_t basis = 14695981039346656037ull;
    key[0] = ls_fnv(basis, s->name ? s->name : "", s->name ? strlen(s->name) : 0);
    if (s->kind == LS_SETTING_STR) {
        key[1] = s->str ? ls_fnv(ls_fnv(basis, "s", 1), s->str, strlen(s->str)) : ls_fnv(basis, "0", 1);
    } else if (s->kind == LS_SETTING_FLAG) {
        key[1] = ls_fnv(basis, s->num != 0 ? "f1" : "f0", 2);
    } else {
        double v = ls_set_num(s->num);
        key[1] = ls_fnv(ls_fnv(basis, "n", 1), &v, sizeof v);
    }
}

/* A setting as one rank has it, exchanged as bytes (a name or string longer than LS_SET_TEXT - 1:
 * its start, and long set). */
typedef struct ls_set_view {
    double num;
    int32_t kind, has_str, long_name, long_str;
    char name[LS_SET_TEXT];
    char str[LS_SET_TEXT];
} ls_set_view;

static void ls_set_view_of(const ls_setting *s, ls_set_view *v) {
    memset(v, 0, sizeof *v);
    v->num = ls_set_num(s->num);
    v->kind = s->kind == LS_SETTING_STR || s->kind == LS_SETTING_FLAG ? (int32_t)s->kind : LS_SETTING_NUM;
    v->has_str = s->str != NULL;
    const char *name = s->name ? s->name : "";
    v->long_name = strlen(name) >= sizeof v->name;
    snprintf(v->name, sizeof v->name, "%s", name);
    if (s->kind == LS_SETTING_STR && s->str) {
        v->long_str = strlen(s->str) >= sizeof v->str;
        snprintf(v->str, sizeof v->str, "%s", s->str);
    }
}

/* Where a and b (as exchanged) first differ. */
static size_t ls_set_first_diff(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

/* text (long: cut at LS_SET_TEXT - 1) as a message shows it, quoted: whole when short, else the
 * LS_SET_SHOW bytes around at (where it differs from the other rank's: two 250-byte values that
 * differ at byte 200 were shown as their same first 108) with "..." where cut. */
static const char *ls_set_excerpt(const char *text, int is_long, size_t at, char *buf, size_t len) {
    size_t n = strlen(text);
    if (n <= LS_SET_SHOW && !is_long) {
        snprintf(buf, len, "'%s'", text);
        return buf;
    }
    size_t from = at > LS_SET_SHOW / 2 ? at - LS_SET_SHOW / 2 : 0;
    if (from + LS_SET_SHOW > n) from = n > LS_SET_SHOW ? n - LS_SET_SHOW : 0;
    const int more = from + LS_SET_SHOW < n || is_long;
    snprintf(buf, len, "'%s%.*s%s'", from ? "..." : "", LS_SET_SHOW, text + from, more ? "..." : "");
    return buf;
}

/* The value for an error line; a string around at (see ls_set_excerpt); a number with as many
 * digits as it takes to tell it from other's. */
static const char *ls_set_value_str(const ls_set_view *v, const ls_set_view *other, size_t at, char *buf, size_t len) {
    if (v->kind == LS_SETTING_FLAG) return v->num != 0 ? "given" : "not given";
    if (v->kind == LS_SETTING_STR) {
        if (!v->has_str) return "not given";
        return ls_set_excerpt(v->str, v->long_str, at, buf, len);
    }
    if (v->num != v->num) return "nan";
    if (v->num == floor(v->num) && fabs(v->num) < 9007199254740992.0) { /* a whole number: all its digits */
        snprintf(buf, len, "%.0f", v->num);
        return buf;
    }
    for (int digits = 6; digits <= 17; digits++) {
        char theirs[64];
        snprintf(buf, len, "%.*g", digits, v->num);
        if (other->kind != LS_SETTING_NUM || other->num != other->num) break;
        snprintf(theirs, sizeof theirs, "%.*g", digits, other->num);
        if (strcmp(buf, theirs) != 0) break;
    }
    return buf;
}

ls_status ls_ddp_check_settings(ls_comm *c, int n, const ls_setting *settings) {
    /* a rank's bad arguments fail every rank (it returned, the others waited in the count's
     * exchange for good) */
    ls_status bad =
        n >= 0 && (n == 0 || settings)
            ? LS_OK
            : ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ddp_check_settings: %d settings at %p", n, (const void *)settings);
    LS_CHECK(ls_comm_agree(c, bad));

    /* 1. the count */
    int who, nb, n0;
    LS_CHECK(other_count(c, n, &who, &nb, &n0));
    if (who >= 0)
        return ls_error(LS_ERR_MISMATCH,
                        "settings differ: rank %d checks %d settings, rank 0 %d (not the same "
                        "program?)",
                        who, nb, n0);
    if (n == 0) return LS_OK;

    /* 2. rank 0's keys, compared locally */
    uint64_t *ref = malloc((size_t)n * 2 * sizeof *ref);
    /* allocated before the ranks compare notes: a rank without the memory fails them all */
    int32_t ok = ref != NULL;
    ls_status s = ls_comm_allreduce_host(c, &ok, 1, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && !ok)
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "ls_ddp_check_settings: %s no memory for %d settings",
                     ref ? "a rank had" : "this rank has", n);
    if (s != LS_OK) {
        free(ref);
        return s;
    }
    for (int i = 0; i < n; i++) ls_set_keys(&settings[i], ref + 2 * i);
    s = ls_comm_broadcast_host(c, ref, (int64_t)n * 2 * (int64_t)sizeof *ref, LS_U8, 0);
    int first = n;
    for (int i = 0; i < n && first == n && s == LS_OK; i++) {
        uint64_t mine[2];
        ls_set_keys(&settings[i], mine);
        if (mine[0] != ref[2 * i] || mine[1] != ref[2 * i + 1]) first = i;
    }
    free(ref);
    if (s != LS_OK) return s;

    /* 3. the first difference over all ranks */
    int at;
    LS_CHECK(first_difference(c, first, n, &at, &who));
    if (who < 0) return LS_OK;
    ls_set_view *theirs = malloc(sizeof *theirs), *zero = malloc(sizeof *zero);
    int32_t have = theirs && zero; /* every rank takes part in the broadcasts: all or none */
    s = ls_comm_allreduce_host(c, &have, 1, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && !have)
        s = ls_error(LS_ERR_MISMATCH, "settings differ: setting %d on rank %d (no memory to say how)", at, who);
    if (s == LS_OK) {
        ls_set_view_of(&settings[at], theirs);
        ls_set_view_of(&settings[at], zero);
        s = ls_comm_broadcast_host(c, theirs, (int64_t)sizeof *theirs, LS_U8, who);
    }
    if (s == LS_OK) s = ls_comm_broadcast_host(c, zero, (int64_t)sizeof *zero, LS_U8, 0);
    if (s == LS_OK) {
        theirs->name[LS_SET_TEXT - 1] = zero->name[LS_SET_TEXT - 1] = '\0';
        theirs->str[LS_SET_TEXT - 1] = zero->str[LS_SET_TEXT - 1] = '\0';
        char a[LS_SET_SHOW + 16], b[LS_SET_SHOW + 16], tail[64] = "";
        const size_t dn = ls_set_first_diff(theirs->name, zero->name);
        if (strcmp(theirs->name, zero->name) != 0 || theirs->long_name != zero->long_name) {
            s = ls_error(LS_ERR_MISMATCH,
                         "settings differ: setting %d is %s on rank %d but %s on rank 0 (not the same "
                         "program?)",
                         at, ls_set_excerpt(theirs->name, theirs->long_name, dn, a, sizeof a), who,
                         ls_set_excerpt(zero->name, zero->long_name, dn, b, sizeof b));
        } else {
            size_t dv = 0;
            if (theirs->kind == LS_SETTING_STR && zero->kind == LS_SETTING_STR && theirs->has_str && zero->has_str) {
                dv = ls_set_first_diff(theirs->str, zero->str);
                const int cut = strlen(theirs->str) > LS_SET_SHOW || strlen(zero->str) > LS_SET_SHOW ||
                                theirs->long_str || zero->long_str;
                if (cut && (theirs->str[dv] || zero->str[dv] || theirs->long_str != zero->long_str))
                    snprintf(tail, sizeof tail, " (they differ at character %zu)", dv + 1);
                else if (cut) /* the same in the bytes exchanged */
                    snprintf(tail, sizeof tail, " (they differ after character %d)", LS_SET_TEXT - 1);
            }
            char name[LS_SET_SHOW + 16];
            ls_set_excerpt(zero->name, zero->long_name, 0, name, sizeof name);
            name[strlen(name) - 1] = '\0'; /* unquoted */
            s = ls_error(LS_ERR_MISMATCH, "%s is %s on rank %d but %s on rank 0%s", name + 1,
                         ls_set_value_str(theirs, zero, dv, a, sizeof a), who,
                         ls_set_value_str(zero, theirs, dv, b, sizeof b), tail);
        }
    }
    free(theirs);
    free(zero);
    return s;
}
