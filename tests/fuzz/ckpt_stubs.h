/* ckpt_stubs.h: the communicator, DDP, CNN-buffer and EMA functions that checkpoint.c calls outside
 * its readers, stubbed for the libFuzzer targets that include checkpoint.c (fuzz_safetensors.c,
 * fuzz_ckpt.c): the readers never reach them, so each aborts if reached (ls_comm_agree, with no
 * communicator, returns its own status as one process does). Include it once, after checkpoint.c. */
#ifndef LOCKSTEP_FUZZ_CKPT_STUBS_H
#define LOCKSTEP_FUZZ_CKPT_STUBS_H

#include <stdlib.h>

int ls_comm_rank(const ls_comm *c) {
    (void)c;
    abort();
}
int ls_comm_world(const ls_comm *c) {
    (void)c;
    abort();
}
ls_status ls_comm_allreduce_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op) {
    (void)c;
    (void)buf;
    (void)count;
    (void)t;
    (void)op;
    abort();
}
ls_status ls_comm_broadcast_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root) {
    (void)c;
    (void)buf;
    (void)count;
    (void)t;
    (void)root;
    abort();
}
ls_status ls_comm_broadcast(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root) {
    (void)c;
    (void)buf;
    (void)count;
    (void)t;
    (void)root;
    abort();
}
ls_status ls_comm_agree(ls_comm *c, ls_status s) { /* one process: its own status */
    if (c) abort();
    return s;
}
ls_status ls_ddp_broadcast_params(ls_comm *c, int n, ls_tensor *const *params) {
    (void)c;
    (void)n;
    (void)params;
    abort();
}
int ls_cnn_num_buffers(ls_module *m) {
    (void)m;
    abort();
}
ls_tensor *ls_cnn_buffer(ls_module *m, int i, char *name, int len) {
    (void)m;
    (void)i;
    (void)name;
    (void)len;
    abort();
}
ls_status ls_cnn_broadcast_buffers(ls_comm *comm, ls_module *m) {
    (void)comm;
    (void)m;
    abort();
}
int ls_ema_num_tensors(const ls_ema *e) {
    (void)e;
    abort();
}
ls_tensor *ls_ema_tensor(ls_ema *e, int i) {
    (void)e;
    (void)i;
    abort();
}
double ls_ema_decay(const ls_ema *e) {
    (void)e;
    abort();
}
int ls_ema_warmup(const ls_ema *e) {
    (void)e;
    abort();
}
int64_t ls_ema_num_updates(const ls_ema *e) {
    (void)e;
    abort();
}
void ls_ema_set_num_updates(ls_ema *e, int64_t t) {
    (void)e;
    (void)t;
    abort();
}
ls_status ls_ema_reset(ls_ema *e) {
    (void)e;
    abort();
}

#endif
