/* status.c: thread-local last-error message and status names. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LS_ERROR_MAX 1024
static _Thread_local char ls_error_msg[LS_ERROR_MAX];

const char *ls_status_name(ls_status s) {
    switch (s) {
    case LS_OK: return "ok";
    case LS_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LS_ERR_OUT_OF_MEMORY: return "out of memory";
    case LS_ERR_IO: return "I/O error";
    case LS_ERR_FORMAT: return "bad format";
    case LS_ERR_DEVICE: return "device error";
    case LS_ERR_UNSUPPORTED: return "unsupported";
    case LS_ERR_COMM: return "communication error";
    case LS_ERR_CUDA: return "CUDA error";
    case LS_ERR_MISMATCH: return "mismatch between ranks";
    case LS_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *ls_last_error(void) { return ls_error_msg; }

void ls_error_clear(void) { ls_error_msg[0] = '\0'; }

ls_status ls_error(ls_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ls_error_msg, sizeof ls_error_msg, fmt, ap);
    va_end(ap);
    return s;
}

ls_status ls_error_context(ls_status s, const char *fmt, ...) {
    char prev[LS_ERROR_MAX];
    memcpy(prev, ls_error_msg, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ls_error_msg, sizeof ls_error_msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof ls_error_msg && prev[0]) {
        int k = snprintf(ls_error_msg + n, sizeof ls_error_msg - (size_t)n, ": %s", prev);
        (void)k; /* a message longer than the buffer is cut, which is fine */
    }
    return s;
}
