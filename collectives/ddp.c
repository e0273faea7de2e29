/* ddp.c: parameter broadcast, model signature check and metric reductions across ranks. The
 * signature check exchanges fixed-size records only (count, then per-parameter descriptors, then
 * a min-allreduce locating the first difference) so every rank reaches the same verdict. */
#include "ddp.h"

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

ls_status ls_ddp_broadcast_params(ls_comm *c, int n, ls_tensor *const *params) {
    return ls_ddp_broadcast_owned(c, n, params, NULL, 0);
}

ls_status ls_ddp_broadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order) {
    const char *fn = roots ? "ls_ddp_broadcast_owned" : "ls_ddp_broadcast_params";
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
        ls_status w = stream_order && s == LS_OK ? ls_comm_wait_stream(reqs[i]) : ls_comm_wait(reqs[i]);
        if (w != LS_OK && s == LS_OK) s = ls_error_context(w, "broadcasting the parameters");
    }
    free(reqs);
    free(bufs);
    free(counts);
    free(from);
    return s;
}

ls_status ls_ddp_check_signature(ls_comm *c, int n, ls_tensor *const *params, const char *const *names) {
    LS_CHECK(ls_check_list("ls_ddp_check_signature", n, params));
    const int rank = ls_comm_rank(c), world = ls_comm_world(c);

    /* 1. the parameter count */
    int32_t n0 = n;
    LS_CHECK(ls_comm_broadcast_host(c, &n0, 1, LS_I32, 0));
    int32_t bad = n != n0 ? rank : world;
    LS_CHECK(ls_comm_allreduce_host(c, &bad, 1, LS_I32, LS_REDUCE_MIN));
    if (bad < world) {
        int32_t nb = n;
        LS_CHECK(ls_comm_broadcast_host(c, &nb, 1, LS_I32, bad));
        return ls_error(LS_ERR_MISMATCH, "model differs between ranks: rank %d has %d parameters, rank 0 has %d",
                        (int)bad, (int)nb, (int)n0);
    }

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

    /* 3. the first difference over all ranks: lowest index, then lowest rank */
    double key = (double)first * world + rank, none = (double)n * world;
    if (first == n) key = none;
    s = ls_comm_allreduce_host(c, &key, 1, LS_F64, LS_REDUCE_MIN);
    if (s != LS_OK || key >= none) {
        free(ref);
        return s;
    }
    int at = (int)(key / world), who = (int)(key - (double)at * world);
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

ls_status ls_ddp_sum_metrics(ls_comm *c, double *vals, int n) {
    if (n < 0 || (n > 0 && !vals)) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ddp_sum_metrics: bad values (%d)", n);
    return ls_comm_allreduce_host(c, vals, n, LS_F64, LS_REDUCE_SUM);
}

ls_status ls_ddp_average_metrics(ls_comm *c, double *vals, int n) {
    LS_CHECK(ls_ddp_sum_metrics(c, vals, n));
    const int world = ls_comm_world(c);
    for (int i = 0; i < n; i++) vals[i] /= world;
    return LS_OK;
}
