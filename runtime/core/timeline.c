/* timeline.c: the Chrome-trace timeline (timeline.h). One open file per process, guarded by a
 * mutex; each thread gets a row number the first time it records in a session (a session
 * generation tells a thread its row is from an earlier one); lanes get rows from 1000 up. A window
 * of steps pauses the recording outside it and closes the file after its last step. */
#define _POSIX_C_SOURCE 200809L
#include "timeline.h"

#include "log.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TL_NAME 64
#define TL_LANES 256

static pthread_mutex_t tl_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int tl_on;
static FILE *tl_f;
static char tl_path[4096];
static int tl_pid, tl_gen, tl_next_tid, tl_first, tl_nlanes;
static char tl_lanes[TL_LANES][TL_NAME];
/* Named threads' rows: a thread of a name seen before (each --save-async save's writer) takes that
 * row, not one more of the same name. */
static char tl_rows[TL_LANES][TL_NAME];
static int tl_row_tid[TL_LANES], tl_nrows;

static _Thread_local int tl_my_gen, tl_my_tid;
static _Thread_local char tl_my_name[TL_NAME];

/* The length of the valid UTF-8 character at s (1-4), or 0 when s does not start one (an invalid
 * or overlong lead byte, a missing continuation byte, a surrogate or a value past U+10FFFF). */
static int tl_utf8_len(const unsigned char *s) {
    unsigned c = s[0], n, cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (unsigned i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return (int)n;
}

/* Copy s into a JSON string body of at most TL_NAME - 1 bytes: quotes, backslashes, control
 * characters and bytes that are not valid UTF-8 become '_'; a character that would not fit whole
 * ends the copy. */
static void tl_clean(char *dst, const char *s) {
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    size_t o = 0;
    while (*u) {
        int n = tl_utf8_len(u);
        if (n <= 1) {
            if (o + 1 > TL_NAME - 1) break;
            dst[o++] = n == 0 || *u < 0x20 || *u == '"' || *u == '\\' ? '_' : (char)*u;
            u++;
            continue;
        }
        if (o + (size_t)n > TL_NAME - 1) break;
        memcpy(dst + o, u, (size_t)n);
        o += (size_t)n;
        u += n;
    }
    dst[o] = 0;
}

/* The events go to the file whole: gathered in tl_buf, written (one write(2), the file being
 * unbuffered) only at an event's end, when the buffer is full and at each flush. A run killed at
 * any moment leaves whole events, which the viewers and timeline_summary.py read without the
 * closing bracket; stdio's own buffer had gone out when full, in the middle of an event (a
 * killed run's trace then ended in `"dur":2942.250` and no reader took it). Under tl_mu. */
static char tl_buf[1 << 16];
static size_t tl_len;
/* Bytes put since the file's start. No event crosses a 4 KiB boundary of the file: one that would
 * starts at the boundary, after spaces. Linux copies a write to a file a page at a time and stops
 * between pages when the process is killed (a SIGKILL in a 64 KiB write left a trace cut at a 4 KiB
 * boundary, '{"' its end), so a cut write ends between whole events too. */
static uint64_t tl_off;
enum { TL_PAGE = 4096 };

static int tl_err;  /* errno of the first failed write of this trace, 0 while none failed */
static int tl_said; /* that failure was logged at a flush (not again at exit) */

/* The window of steps (ls_timeline_set_steps), under tl_mu: tl_win says one is set (read without
 * the lock by the step calls, to cost nothing without one); tl_paused, that this moment is outside
 * it; tl_taken, the steps recorded; tl_in_step, that the step under way is recorded. tl_ended: the
 * window ended and the file was closed (tl_f NULL), tl_end_err the errno of that close (0: fine);
 * the session lasts until ls_timeline_close. */
static atomic_int tl_win;
static ls_timeline_steps tl_steps;
static int tl_paused, tl_in_step, tl_ended, tl_end_err;
static int64_t tl_taken;

/* tl_on from the state: a file, not paused, no failed write said. Under tl_mu. */
static void tl_set_on(void) { atomic_store(&tl_on, tl_f && !tl_paused && !tl_said); }

static void tl_drain(void) {
    if (tl_len && fwrite(tl_buf, 1, tl_len, tl_f) != tl_len && !tl_err) tl_err = errno ? errno : EIO;
    tl_len = 0;
}

static void tl_put_raw(const char *s, size_t n) {
    if (tl_len + n > sizeof tl_buf) tl_drain();
    memcpy(tl_buf + tl_len, s, n);
    tl_len += n;
    tl_off += n;
}

static void tl_put(const char *s, size_t n) {
    const size_t room = TL_PAGE - (size_t)(tl_off % TL_PAGE);
    if (n > room && n <= TL_PAGE) { /* spaces to the boundary: JSON whitespace between events */
        if (tl_len + room > sizeof tl_buf) tl_drain();
        memset(tl_buf + tl_len, ' ', room);
        tl_len += room;
        tl_off += room;
    }
    tl_put_raw(s, n);
}

/* One event: the separator and the formatted object (names are cut to TL_NAME: it fits). */
static void tl_emitf(const char *fmt, ...) {
    char line[1024];
    int n = tl_first ? 0 : snprintf(line, sizeof line, ",\n");
    tl_first = 0;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)(n + k) >= sizeof line) k = (int)(sizeof line - 1) - n;
    tl_put(line, (size_t)(n + k));
}

static void tl_meta_thread(int tid, const char *name) {
    char n[TL_NAME];
    tl_clean(n, name);
    tl_emitf("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", tl_pid, tid,
             n);
    tl_emitf("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}", tl_pid,
             tid, tid);
}

/* The calling thread's row in this session, named on first use. Under tl_mu. */
static int tl_tid(void) {
    if (tl_my_gen != tl_gen) {
        tl_my_gen = tl_gen;
        for (int i = 0; tl_my_name[0] && i < tl_nrows; i++)
            if (strcmp(tl_rows[i], tl_my_name) == 0) return tl_my_tid = tl_row_tid[i];
        tl_my_tid = tl_next_tid++;
        if (tl_my_name[0] && tl_nrows < TL_LANES) {
            snprintf(tl_rows[tl_nrows], TL_NAME, "%s", tl_my_name);
            tl_row_tid[tl_nrows++] = tl_my_tid;
        }
        char dflt[32] = "main";
        if (tl_my_tid > 1) snprintf(dflt, sizeof dflt, "thread %d", tl_my_tid);
        tl_meta_thread(tl_my_tid, tl_my_name[0] ? tl_my_name : dflt);
    }
    return tl_my_tid;
}

static void tl_event(int tid, const char *name, const char *cat, double t0, double t1) {
    char n[TL_NAME], c[TL_NAME];
    tl_clean(n, name);
    tl_clean(c, cat ? cat : "lockstep");
    tl_emitf("{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", n, c,
             tl_pid, tid, t0, t1 > t0 ? t1 - t0 : 0.0);
}

double ls_timeline_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int ls_timeline_active(void) { return atomic_load_explicit(&tl_on, memory_order_relaxed); }

int ls_timeline_is_open(void) {
    pthread_mutex_lock(&tl_mu);
    int open = tl_f != NULL || tl_ended;
    pthread_mutex_unlock(&tl_mu);
    return open;
}

/* Where an earlier trace went (ls_timeline_open): a warning on rank 0, which says it for all ranks. */
static void tl_say_kept(const char *path, const char *aside, int rank) {
    ls_log(rank == 0 ? LS_LOG_WARN : LS_LOG_INFO, "timeline: the earlier trace in '%s' is kept as '%s'", path, aside);
}

ls_status ls_timeline_open(const char *path, int rank) {
    if (!path || !*path) return ls_error(LS_ERR_INVALID_ARGUMENT, "timeline: no file name");
    pthread_mutex_lock(&tl_mu);
    if (tl_f || tl_ended) {
        pthread_mutex_unlock(&tl_mu);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        tl_f ? "timeline: '%s' is already being written; close it first"
                             : "timeline: '%s' ended after its steps; close it first",
                        tl_path);
    }
    /* an earlier trace of that name (the program run again, a resume by hand) is moved aside, not
     * truncated: here for every opener, the trainer's LOCKSTEP_TIMELINE and a program's own trace */
    char aside[sizeof tl_path];
    ls_status kept = ls_timeline_keep_earlier(path, aside, (int)sizeof aside);
    if (kept != LS_OK) {
        pthread_mutex_unlock(&tl_mu);
        return kept;
    }
    /* (not on fd 1 of a program started with stdout closed: its printf lines went into the trace) */
    int fd = ls_fd_off_stdio(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    if (!f) {
        int e = errno;
        pthread_mutex_unlock(&tl_mu);
        ls_status s = ls_error(LS_ERR_IO, "timeline: cannot create '%s': %s", path, strerror(e));
        if (aside[0]) tl_say_kept(path, aside, rank);
        return s;
    }
    tl_f = f;
    snprintf(tl_path, sizeof tl_path, "%s", path);
    tl_pid = rank;
    tl_gen++;
    tl_next_tid = 1;
    tl_first = 1;
    tl_nlanes = 0;
    tl_nrows = 0;
    setvbuf(tl_f, NULL, _IONBF, 0); /* tl_buf is the buffer: whole events at a time */
    tl_len = 0;
    tl_off = 0;
    tl_err = tl_said = 0;
    tl_paused = tl_in_step = 0;
    tl_taken = 0;
    atomic_store(&tl_win, 0);
    tl_put("[\n", 2);
    tl_emitf("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", rank,
             rank);
    tl_emitf("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", rank,
             rank);
    (void)tl_tid(); /* the opener's thread is row 1, "main" unless named */
    tl_drain();
    atomic_store(&tl_on, 1);
    pthread_mutex_unlock(&tl_mu);
    if (aside[0]) tl_say_kept(path, aside, rank);
    return LS_OK;
}

/* The closing bracket, and the file closed: 0, or the errno of its first failed write. Under tl_mu. */
static int tl_finish(void) {
    tl_put("\n]\n", 3);
    tl_drain();
    int bad = ferror(tl_f) || tl_err;
    int e = tl_err ? tl_err : errno ? errno : EIO;
    if (fclose(tl_f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    tl_f = NULL;
    return bad ? e : 0;
}

/* Close what is open; tl_mu held, and released here. */
static ls_status tl_close_locked(void) {
    atomic_store(&tl_on, 0);
    atomic_store(&tl_win, 0);
    int e = tl_f ? tl_finish() : tl_ended ? tl_end_err : 0;
    tl_ended = tl_end_err = 0;
    pthread_mutex_unlock(&tl_mu);
    if (e) return ls_error(LS_ERR_IO, "timeline: writing '%s' failed: %s", tl_path, strerror(e));
    return LS_OK;
}

ls_status ls_timeline_close(void) {
    pthread_mutex_lock(&tl_mu);
    return tl_close_locked();
}

ls_status ls_timeline_close_nowait(void) {
    if (pthread_mutex_trylock(&tl_mu) != 0) return LS_OK; /* another thread is writing it: left open */
    return tl_close_locked();
}

void ls_timeline_flush(void) {
    if (!ls_timeline_active()) return;
    pthread_mutex_lock(&tl_mu);
    int failed = 0;
    if (tl_f) {
        tl_drain();
        /* a full disk: said once, now (at exit only, the run's lines came first), and no more
         * events are made; the run goes on */
        if (tl_err && !tl_said) {
            tl_said = failed = 1;
            atomic_store(&tl_on, 0);
        }
    }
    pthread_mutex_unlock(&tl_mu);
    if (failed)
        LS_LOG_W("timeline: writing '%s' failed: %s; the trace stops here (the run goes on)", tl_path,
                 strerror(tl_err));
}

ls_status ls_timeline_steps_parse(const char *value, ls_timeline_steps *out) {
    LS_CHECK_ARG(out, "ls_timeline_steps_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!value || !*value) {
        out->count = LS_TIMELINE_DEFAULT_STEPS;
        out->max_bytes = LS_TIMELINE_DEFAULT_BYTES;
        out->by_default = 1;
        return LS_OK;
    }
    snprintf(out->text, sizeof out->text, "%s", value);
    const char *colon = strchr(value, ':');
    long long a, b;
    char head[32];
    if (!strcmp(value, "all")) {
        out->first = 1;
        out->last = INT64_MAX;
        return LS_OK;
    }
    if (!colon && ls_parse_count(value, INT64_MAX, &a)) {
        if (a == 0)
            return ls_error(
                LS_ERR_INVALID_ARGUMENT,
                "LOCKSTEP_TIMELINE_STEPS='%s': 0 steps records nothing (unset LOCKSTEP_TIMELINE for no trace)", value);
        out->count = a;
        return LS_OK;
    }
    if (colon && (size_t)(colon - value) < sizeof head) {
        memcpy(head, value, (size_t)(colon - value));
        head[colon - value] = 0;
        if (ls_parse_count(head, INT64_MAX, &a) && a >= 1) {
            b = INT64_MAX; /* FIRST: has no end */
            if (!colon[1] || ls_parse_count(colon + 1, INT64_MAX, &b)) {
                if (b < a)
                    return ls_error(LS_ERR_INVALID_ARGUMENT,
                                    "LOCKSTEP_TIMELINE_STEPS='%s': the last step, %lld, is before the first, %lld",
                                    value, b, a);
                out->first = a;
                out->last = b;
                return LS_OK;
            }
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "LOCKSTEP_TIMELINE_STEPS='%s': use N (the first N steps), FIRST:LAST or FIRST: (steps by number, "
                    "from 1), or all",
                    value);
}

ls_status ls_timeline_set_steps(const ls_timeline_steps *steps) {
    LS_CHECK_ARG(steps, "ls_timeline_set_steps: steps is NULL");
    pthread_mutex_lock(&tl_mu);
    if (!tl_f) {
        pthread_mutex_unlock(&tl_mu);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "timeline: no trace is open to set its steps");
    }
    tl_steps = *steps;
    tl_paused = steps->count <= 0 && steps->first > 1; /* until step FIRST */
    tl_taken = 0;
    tl_in_step = 0;
    if (tl_paused) tl_drain();
    tl_set_on();
    atomic_store(&tl_win, 1);
    pthread_mutex_unlock(&tl_mu);
    return LS_OK;
}

/* What tl_end_window closed, said after tl_mu is released. */
struct tl_end {
    char path[sizeof tl_path];
    ls_timeline_steps steps;
    int64_t taken;
    uint64_t bytes; /* the file's size where the byte bound ended it, else 0 */
    int pid, err, said;
};

/* The window is over: the file closed (valid JSON from now on), the session kept until
 * ls_timeline_close; what to say in *end. Under tl_mu. */
static void tl_end_window(struct tl_end *end) {
    int by_bytes = tl_steps.max_bytes > 0 && tl_off >= (uint64_t)tl_steps.max_bytes;
    tl_end_err = tl_finish();
    end->bytes = by_bytes ? tl_off : 0;
    tl_ended = 1;
    atomic_store(&tl_win, 0);
    tl_set_on();
    snprintf(end->path, sizeof end->path, "%s", tl_path);
    end->steps = tl_steps;
    end->taken = tl_taken;
    end->pid = tl_pid;
    end->err = tl_end_err;
    end->said = tl_said;
    tl_said = 1; /* a failure is said below: not again at exit */
}

static void tl_say_end(const struct tl_end *e) {
    if (e->err) {
        if (!e->said) LS_LOG_W("timeline: writing '%s' failed: %s", e->path, strerror(e->err));
    } else if (e->bytes)
        /* rank 0 says it; a rank whose events are more (its buckets, MPI calls) may end a step sooner */
        ls_log(e->pid == 0 ? LS_LOG_WARN : LS_LOG_INFO,
               "timeline: %lld steps recorded in '%s', %.1f MiB, past the default bound of %lld MiB: the trace ends "
               "here and the run goes on (LOCKSTEP_TIMELINE_STEPS=N records the first N steps, FIRST:LAST a window, "
               "all every step)",
               (long long)e->taken, e->path, (double)e->bytes / (1 << 20), (long long)(e->steps.max_bytes >> 20));
    else if (e->pid != 0) {
        /* rank 0 says it for all: every rank ends at the same step */
    } else if (e->steps.by_default)
        LS_LOG_W("timeline: %lld steps recorded in '%s', the default bound: the trace ends here and the run goes on "
                 "(LOCKSTEP_TIMELINE_STEPS=N records the first N steps, FIRST:LAST a window, all every step)",
                 (long long)e->taken, e->path);
    else
        LS_LOG_I("timeline: %lld step%s recorded in '%s' (LOCKSTEP_TIMELINE_STEPS=%s): the trace is closed",
                 (long long)e->taken, e->taken == 1 ? "" : "s", e->path, e->steps.text);
}

void ls_timeline_step_begin(int64_t step) {
    if (!atomic_load_explicit(&tl_win, memory_order_relaxed)) return;
    struct tl_end end;
    int ended = 0;
    pthread_mutex_lock(&tl_mu);
    if (tl_f && atomic_load(&tl_win)) {
        if (tl_steps.count <= 0 && step > tl_steps.last) { /* a run resumed past the window */
            tl_end_window(&end);
            ended = 1;
        } else {
            tl_paused = tl_steps.count <= 0 && step < tl_steps.first;
            tl_in_step = !tl_paused;
            if (tl_paused) tl_drain();
            tl_set_on();
        }
    }
    pthread_mutex_unlock(&tl_mu);
    if (ended) tl_say_end(&end);
}

void ls_timeline_step_end(int64_t step) {
    if (!atomic_load_explicit(&tl_win, memory_order_relaxed)) {
        ls_timeline_flush();
        return;
    }
    struct tl_end end;
    int ended = 0;
    pthread_mutex_lock(&tl_mu);
    if (tl_f && atomic_load(&tl_win)) {
        if (tl_in_step) tl_taken++;
        tl_in_step = 0;
        if ((tl_steps.count > 0 ? tl_taken >= tl_steps.count : step >= tl_steps.last) ||
            (tl_steps.max_bytes > 0 && tl_off >= (uint64_t)tl_steps.max_bytes)) {
            tl_end_window(&end);
            ended = 1;
        }
    }
    pthread_mutex_unlock(&tl_mu);
    if (ended)
        tl_say_end(&end);
    else
        ls_timeline_flush();
}

/* at exit nobody is left to return an error to: a trace that could not be written (a full disk)
 * is said on stderr, not left behind cut short in silence */
static void tl_close_at_exit(void) {
    int said = tl_said;
    if (ls_timeline_close() != LS_OK && !said) LS_LOG_W("%s", ls_last_error());
}
static void tl_register(void) { atexit(tl_close_at_exit); }

void ls_timeline_close_at_exit(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tl_register);
}

void ls_timeline_thread_name(const char *name) {
    tl_clean(tl_my_name, name);
    pthread_mutex_lock(&tl_mu);
    if (tl_f && tl_my_gen == tl_gen) tl_meta_thread(tl_my_tid, tl_my_name); /* renamed after its first span */
    pthread_mutex_unlock(&tl_mu);
}

void ls_timeline_span(const char *name, const char *cat, double t0, double t1) {
    if (!ls_timeline_active()) return;
    pthread_mutex_lock(&tl_mu);
    if (tl_f) tl_event(tl_tid(), name, cat, t0, t1);
    pthread_mutex_unlock(&tl_mu);
}

void ls_timeline_lane_span(const char *lane, const char *name, const char *cat, double t0, double t1) {
    if (!ls_timeline_active()) return;
    char l[TL_NAME];
    tl_clean(l, lane);
    pthread_mutex_lock(&tl_mu);
    if (tl_f) {
        int i = 0;
        while (i < tl_nlanes && strcmp(tl_lanes[i], l) != 0) i++;
        if (i == tl_nlanes && tl_nlanes < TL_LANES) {
            snprintf(tl_lanes[tl_nlanes++], TL_NAME, "%s", l);
            tl_meta_thread(1000 + i, l);
        }
        if (i < TL_LANES) tl_event(1000 + i, name, cat, t0, t1);
    }
    pthread_mutex_unlock(&tl_mu);
}

/* The position of path's extension (".json"), or its end where it has none. */
static const char *extension_of(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1))
        dot = path + strlen(path); /* no extension */
    return dot;
}

int ls_timeline_path_restart(const char *pattern, int rank, int world, int restart, char *out, int len) {
    if (ls_timeline_path(pattern, rank, world, out, len) != 0) return -1;
    if (restart <= 0) return 0;
    char base[4096];
    if (snprintf(base, sizeof base, "%s", out) >= (int)sizeof base) return -1;
    const char *dot = extension_of(base);
    int n = snprintf(out, (size_t)len, "%.*s.restart%d%s", (int)(dot - base), base, restart, dot);
    return n < 0 || n >= len ? -1 : 0;
}

int ls_timeline_path(const char *pattern, int rank, int world, char *out, int len) {
    const char *r = strstr(pattern, "%r");
    int n;
    if (r) { /* every "%r" ("run%r/tl%r.json" replaced only the first) */
        n = 0;
        for (const char *p = pattern; n >= 0 && n < len;) {
            const char *q = strstr(p, "%r");
            if (!q) {
                n += snprintf(out + n, (size_t)(len - n), "%s", p);
                break;
            }
            n += snprintf(out + n, (size_t)(len - n), "%.*s%d", (int)(q - p), p, rank);
            p = q + 2;
        }
    } else if (world <= 1)
        n = snprintf(out, (size_t)len, "%s", pattern);
    else {
        const char *dot = extension_of(pattern);
        n = snprintf(out, (size_t)len, "%.*s.rank%d%s", (int)(dot - pattern), pattern, rank, dot);
    }
    return n < 0 || n >= len ? -1 : 0;
}

ls_status ls_timeline_keep_earlier(const char *path, char *aside, int len) {
    LS_CHECK_ARG(path && aside && len > 0, "ls_timeline_keep_earlier: %s",
                 !path ? "path is NULL" : "no room for aside");
    aside[0] = 0;
    struct stat st;
    /* nothing to keep: no file, an empty one (made for the run), a device (/dev/null) */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return LS_OK;
    const char *dot = extension_of(path);
    for (int k = 1; k <= 1000000; k++) {
        int n = snprintf(aside, (size_t)len, "%.*s.prev%d%s", (int)(dot - path), path, k, dot);
        if (n < 0 || n >= len) {
            aside[0] = 0;
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "timeline: keeping the earlier trace '%s': the name to move it to is too long", path);
        }
        struct stat taken;
        if (lstat(aside, &taken) == 0) continue;
        if (rename(path, aside) != 0) {
            int e = errno;
            ls_status s = ls_error(LS_ERR_IO, "timeline: cannot move the earlier trace '%s' to '%s' (to keep it): %s",
                                   path, aside, strerror(e));
            aside[0] = 0;
            return s;
        }
        return LS_OK;
    }
    aside[0] = 0;
    return ls_error(LS_ERR_IO,
                    "timeline: cannot keep the earlier trace '%s': its names .prev1 to .prev1000000 are taken", path);
}
