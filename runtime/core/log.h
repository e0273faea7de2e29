/* log.h: leveled logging to stderr with a rank prefix ("[lockstep r1 warn] ...").
 * The level comes from LOCKSTEP_LOG=error|warn|info|debug (default warn); the rank prefix is
 * set once the rank is known (ls_log_set_rank), -1 meaning a single process (no prefix). */
#ifndef LOCKSTEP_LOG_H
#define LOCKSTEP_LOG_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_log_level { LS_LOG_ERROR = 0, LS_LOG_WARN = 1, LS_LOG_INFO = 2, LS_LOG_DEBUG = 3 } ls_log_level;

/* Parse "error|warn|info|debug" (case-insensitive). */
ls_status ls_log_level_parse(const char *s, ls_log_level *out);
/* Current level: the last ls_log_set_level, else LOCKSTEP_LOG, else warn. */
ls_log_level ls_log_get_level(void);
void ls_log_set_level(ls_log_level level);
void ls_log_set_rank(int rank);
int ls_log_enabled(ls_log_level level);
void ls_log(ls_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fd itself, or where it is 0, 1 or 2 (a program started with that stream closed) a duplicate
 * above 2 with fd closed: a file the library writes is never the process's stdin, stdout or
 * stderr (a run with stdout closed got a checkpoint file as its fd 1, and its printf lines went
 * into the checkpoint). -1 (errno set) where fd is negative or cannot be duplicated. */
int ls_fd_off_stdio(int fd);

/* A program's progress line ("\repoch 1  step 21/32 ...", no newline) is on stderr now (1) or
 * not (0): while it is, a log line first clears it ("\r" and erase to the end of the line) rather
 * than being appended to it, and marks it gone (the program draws it again). Returns what it was. */
int ls_log_progress_shown(int shown);

#define LS_LOG_E(...) ls_log(LS_LOG_ERROR, __VA_ARGS__)
#define LS_LOG_W(...) ls_log(LS_LOG_WARN, __VA_ARGS__)
#define LS_LOG_I(...) ls_log(LS_LOG_INFO, __VA_ARGS__)
#define LS_LOG_D(...) ls_log(LS_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
