/* timeline.h: a record of where each thread's time goes, written as a Chrome trace (the JSON array
 * format that chrome://tracing and ui.perfetto.dev open): one process per rank, one row per
 * thread (the caller's, MPI's communication thread) and per lane (a gradient bucket's all-reduce,
 * from launch to completion). Spans are "complete" events, streamed to the file as they end, so a
 * run that dies keeps what came before (the viewers accept the array without its closing bracket;
 * the trainer flushes after each step, so the file then ends with whole events).
 * Process-wide, like the log level; off unless opened, and then a span costs two clock reads and a
 * buffered write under a lock. The trainer opens it from LOCKSTEP_TIMELINE. Times are the wall
 * clock in microseconds, so ranks on several hosts line up as well as their clocks agree. A window of
 * steps (ls_timeline_set_steps; the trainer's from LOCKSTEP_TIMELINE_STEPS, by default the first
 * LS_TIMELINE_DEFAULT_STEPS) bounds the file: after its last step the file is closed. */
#ifndef LOCKSTEP_TIMELINE_H
#define LOCKSTEP_TIMELINE_H

#include "status.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Start writing to path as rank (the trace's process id). A trace already at path (an earlier run's)
 * is not truncated: ls_timeline_keep_earlier moves it to "<stem>.prev<K><ext>" first, said as a
 * warning on rank 0 (info on the others), and its errors are this call's; an empty file or a device
 * is written as it is. A second open while one is open is LS_ERR_INVALID_ARGUMENT (nothing moved);
 * a file that cannot be created is LS_ERR_IO naming it. */
ls_status ls_timeline_open(const char *path, int rank);
/* Close the array and the file (also flushes); nothing when none is open. */
ls_status ls_timeline_close(void);
/* The same, unless another thread is writing the trace at that moment: then it is left open (a
 * rank aborting the job, maybe from a watchdog thread, does not wait on a write that may hang). */
ls_status ls_timeline_close_nowait(void);
/* Write what is buffered, so that the file ends with whole events (the trainer does so after
 * each step). */
void ls_timeline_flush(void);
/* Close the timeline when the process exits normally (atexit; registered once). */
void ls_timeline_close_at_exit(void);
/* Non-zero while a timeline records: open, and no write to it has failed (a relaxed atomic read:
 * call freely). */
int ls_timeline_active(void);
/* Non-zero while a timeline's file is open, recording or stopped after a failed write (a full
 * disk), or closed after its window of steps: ls_timeline_open would refuse another one until
 * ls_timeline_close. */
int ls_timeline_is_open(void);
/* Microseconds of the wall clock; what span times are given in. */
double ls_timeline_now(void);
/* A span of the calling thread: name (copied: up to 63 bytes of whole UTF-8 characters; quotes,
 * backslashes, control characters and invalid UTF-8 become '_'), cat (a category such as
 * "compute", "comm", "data"), from t0 to t1 (ls_timeline_now). No-op when none is open. */
void ls_timeline_span(const char *name, const char *cat, double t0, double t1);
/* The same on a lane of its own (named by lane; one row in the viewer), for work that overlaps
 * the thread that records it. */
void ls_timeline_lane_span(const char *lane, const char *name, const char *cat, double t0, double t1);
/* Name the calling thread's row (e.g. "mpi communication"); the first thread to record is "main". */
void ls_timeline_thread_name(const char *name);
/* Expand LOCKSTEP_TIMELINE's value for rank of world ranks: each "%r" becomes the rank; without one,
 * several ranks get "<stem>.rank<r><ext>" (tl.json -> tl.rank1.json). Returns 0, or -1 when out
 * is too small. */
int ls_timeline_path(const char *pattern, int rank, int world, char *out, int len);
/* The same for attempt restart + 1 of a job that lockstep-run --max-restarts started again
 * (LOCKSTEP_RESTART_COUNT=restart): ".restart<k>" before the extension when restart > 0
 * (tl.rank1.json -> tl.rank1.restart2.json), so a restart keeps the trace of the attempt that
 * failed instead of truncating it. */
int ls_timeline_path_restart(const char *pattern, int rank, int world, int restart, char *out, int len);

/* Which steps a trace records (ls_timeline_steps_parse, ls_timeline_set_steps). */
typedef struct ls_timeline_steps {
    int64_t count;       /* > 0: the first count steps this process takes, whatever their numbers; 0: first..last */
    int64_t first, last; /* with count 0: the steps numbered first to last (from 1); last INT64_MAX: no end */
    int by_default;      /* no value given: the first LS_TIMELINE_DEFAULT_STEPS steps, their end said as a warning */
    int64_t max_bytes;   /* > 0: also closed at the end of the step whose events pass this size (the default's) */
    char text[32];       /* the value given, for messages ("" for the default) */
} ls_timeline_steps;

/* The default bound: 2-10 MB of trace for an MLP or a small ResNet (2-8 KB a step), and at most
 * LS_TIMELINE_DEFAULT_BYTES (a step writes about 230 bytes per module and micro-step: fashion_resnet
 * --blocks 16 --accum-steps 4, 268 KB a step, passes it at step 1000). */
#define LS_TIMELINE_DEFAULT_STEPS 1000
#define LS_TIMELINE_DEFAULT_BYTES (256LL << 20)

/* LOCKSTEP_TIMELINE_STEPS's value: "N" (the first N steps), "FIRST:LAST" or "FIRST:" (the steps
 * of those numbers, counted from 1; FIRST: has no end), "all" (every step), NULL or "" (the default
 * bound: LS_TIMELINE_DEFAULT_STEPS steps or LS_TIMELINE_DEFAULT_BYTES of trace, whichever comes
 * first; a value given has no byte bound). Anything else is LS_ERR_INVALID_ARGUMENT naming the variable and the forms. */
ls_status ls_timeline_steps_parse(const char *value, ls_timeline_steps *out);
/* Record only the steps of *steps in the open trace (ls_timeline_step_begin/_end tell it the
 * steps): with a count, or FIRST 1, from now on; else from the start of step FIRST. After the
 * window's last step (or at the first step past it, or at the end of the step that passes
 * max_bytes) the file is closed, a valid JSON array, and
 * the end said once (a warning for the default bound, naming the variable; else at info level);
 * ls_timeline_is_open stays non-zero until ls_timeline_close. Without a window a trace records
 * every step. LS_ERR_INVALID_ARGUMENT where no trace is open. */
ls_status ls_timeline_set_steps(const ls_timeline_steps *steps);
/* Step `step` (its number: a resumed run's continue) starts: recording goes on or off as the window
 * says. Nothing without a window. */
void ls_timeline_step_begin(int64_t step);
/* Step `step` ended: a flush (ls_timeline_flush), and the file's close after the window's last step. */
void ls_timeline_step_end(int64_t step);
/* Keep an earlier run's trace at path (ls_timeline_open does so: a resume by hand with the same
 * LOCKSTEP_TIMELINE, a program run again): a non-empty regular file there is renamed
 * "<stem>.prev<K><ext>" (tl.json -> tl.prev1.json), K the first from 1 that names no file, so the
 * new trace takes path and higher K are newer. aside gets
 * the new name, or "" where nothing was moved (no file, an empty one, a device). LS_ERR_IO naming
 * both where the rename fails; LS_ERR_INVALID_ARGUMENT where the name does not fit aside. */
ls_status ls_timeline_keep_earlier(const char *path, char *aside, int len);

/* Time a block: LS_TL_T0(t); ... LS_TL_SPAN(t, "forward", "compute"); */
#define LS_TL_T0(var) double var = ls_timeline_active() ? ls_timeline_now() : 0.0
#define LS_TL_SPAN(var, name, cat)                                                                                     \
    do {                                                                                                               \
        if (ls_timeline_active() && (var) > 0) ls_timeline_span((name), (cat), (var), ls_timeline_now());              \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
