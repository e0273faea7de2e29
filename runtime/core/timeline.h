/* timeline.h: a record of where each thread's time goes, written as a Chrome trace (the JSON array
 * format that chrome://tracing and ui.perfetto.dev open): one process per rank, one row per
 * thread (the caller's, MPI's communication thread) and per lane (a gradient bucket's all-reduce,
 * from launch to completion). Spans are "complete" events, streamed to the file as they end, so a
 * run that dies keeps what came before (the viewers accept the array without its closing bracket;
 * the trainer flushes after each step, so the file then ends with whole events).
 * Process-wide, like the log level; off unless opened, and then a span costs two clock reads and a
 * buffered write under a lock. The trainer opens it from LOCKSTEP_TIMELINE. Times are the wall
 * clock in microseconds, so ranks on several hosts line up as well as their clocks agree. */
#ifndef LOCKSTEP_TIMELINE_H
#define LOCKSTEP_TIMELINE_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Start writing to path as rank (the trace's process id). A second open while one is open is
 * LS_ERR_INVALID_ARGUMENT; a file that cannot be created is LS_ERR_IO naming it. */
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
 * disk): ls_timeline_open would refuse another one until ls_timeline_close. */
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
