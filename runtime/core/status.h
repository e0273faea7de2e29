/* status.h: lockstep's error model. Every function that can fail returns an ls_status
 * (LS_OK = 0); the place where an error starts records a thread-local message (what, which
 * file/rank/size) that callers read with ls_last_error(). The library never exits. */
#ifndef LOCKSTEP_STATUS_H
#define LOCKSTEP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_status {
    LS_OK = 0,
    LS_ERR_INVALID_ARGUMENT = 1, /* bad user input: flag, shape, dtype, size */
    LS_ERR_OUT_OF_MEMORY = 2,    /* allocation failed or would exceed the cap */
    LS_ERR_IO = 3,               /* open/read/write/fsync/rename failed */
    LS_ERR_FORMAT = 4,           /* a file's content is corrupt or of the wrong kind */
    LS_ERR_DEVICE = 5,           /* requested device missing or unusable */
    LS_ERR_UNSUPPORTED = 6,      /* valid request this build or backend cannot do */
    LS_ERR_COMM = 7,             /* collective communication failed */
    LS_ERR_CUDA = 8,             /* CUDA, cuBLAS or cuDNN call failed */
    LS_ERR_MISMATCH = 9,         /* ranks disagree (model signature, sizes) */
    LS_ERR_INTERNAL = 10         /* broken invariant: a bug in lockstep */
} ls_status;

/* Short stable name of a status code, e.g. "out of memory". */
const char *ls_status_name(ls_status s);

/* The message recorded by the last failing call on this thread ("" if none). */
const char *ls_last_error(void);

/* Record a formatted message for this thread and return s (so: return ls_error(...)). */
ls_status ls_error(ls_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepend context to the current message: "ctx: previous message". Returns s. */
ls_status ls_error_context(ls_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void ls_error_clear(void);

/* Return the status up the stack if it is not LS_OK. */
#define LS_CHECK(expr)                                                                                                 \
    do {                                                                                                               \
        ls_status ls_check_s_ = (expr);                                                                                \
        if (ls_check_s_ != LS_OK) return ls_check_s_;                                                                  \
    } while (0)

/* Store the status in var and jump to label (cleanup in reverse order) if it is not LS_OK. */
#define LS_CHECK_GOTO(expr, var, label)                                                                                \
    do {                                                                                                               \
        (var) = (expr);                                                                                                \
        if ((var) != LS_OK) goto label;                                                                                \
    } while (0)

/* A public function's argument check: LS_ERR_INVALID_ARGUMENT with the message unless ok (a NULL
 * object is an error to its caller, not a crash in the library). */
#define LS_CHECK_ARG(ok, ...)                                                                                          \
    do {                                                                                                               \
        if (!(ok)) return ls_error(LS_ERR_INVALID_ARGUMENT, __VA_ARGS__);                                              \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
