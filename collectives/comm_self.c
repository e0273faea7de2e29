/* comm_self.c: the one-rank backend. Reductions over one rank are the identity (avg divides by 1),
 * so allreduce, reduce and broadcast touch nothing; allgather and reduce-scatter copy send to recv when
 * they differ (through the device allocator for device buffers). Async ops complete at start. */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

typedef struct ls_self_state {
    ls_comm_env env;
} ls_self_state;

static ls_status ls_self_run(void *st, const ls_coll_op *op) {
    ls_self_state *s = st;
    if (op->kind != LS_COLL_ALLGATHER && op->kind != LS_COLL_REDUCE_SCATTER) return LS_OK;
    size_t bytes = (size_t)op->count * ls_dtype_size(op->dtype);
    if (bytes == 0 || op->send == op->recv) return LS_OK;
    if (op->host || s->env.device.type == LS_DEVICE_CPU) {
        memmove(op->recv, op->send, bytes);
        return LS_OK;
    }
    return ls_allocator_copy(s->env.dev, op->recv, 1, op->send, 1, bytes);
}

static ls_status ls_self_wait(void *st, void *h) { return LS_OK; }

static ls_status ls_self_test(void *st, void *h, int *done) {
    *done = 1;
    return LS_OK;
}

static void ls_self_destroy(void *st) { free(st); }

static const ls_comm_iface ls_self_iface = {
    .name = "self",
    .run = ls_self_run,
    .start = NULL, /* comm.c runs it at start */
    .wait = ls_self_wait,
    .test = ls_self_test,
    .set_compute_stream = NULL,
    .abort = NULL,
    .destroy = ls_self_destroy,
};

ls_status ls_comm_self_create(const ls_comm_env *env, const ls_comm_iface **iface, void **state) {
    ls_self_state *s = calloc(1, sizeof *s);
    if (!s) return ls_error(LS_ERR_OUT_OF_MEMORY, "self communicator: out of host memory");
    s->env = *env;
    *iface = &ls_self_iface;
    *state = s;
    return LS_OK;
}
