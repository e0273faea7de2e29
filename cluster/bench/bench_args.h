/* bench_args.h: strict flag values for the benchmarks in cluster/bench/ (header only: each
 * benchmark is one file), and the training benchmarks' batch against the data. atoi and atof read "3x" as 3, "abc" as 0
 * and wrapped numbers past their type ("4294967297" rounds as 1), so a mistyped flag ran a
 * different benchmark than asked; these take the whole string or refuse it. A bad value is a usage
 * error: "PROG: FLAG 'VALUE': the problem (the range)" on stderr and exit status 2. The benchmarks
 * parse before creating a communicator, so under mpirun every rank refuses alike. Each program
 * defines BENCH_PROG, its name, before including this. */
#ifndef LOCKSTEP_BENCH_ARGS_H
#define LOCKSTEP_BENCH_ARGS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm.h"

#ifndef BENCH_PROG
#error "define BENCH_PROG (the program's name) before including bench_args.h"
#endif

/* The largest count of steps, rounds or calls a flag takes: far beyond any real run, and small
 * enough that a loop counter (int) holds warmup + steps. */
#define BENCH_MAX_COUNT 1000000000

/* Prints "PROG: FLAG 'VALUE': PROBLEM (RANGE)" and exits with 2 (bad usage). */
static inline _Noreturn void bench_bad(const char *flag, const char *value, const char *problem, const char *range) {
    fprintf(stderr, "%s: %s '%s': %s (%s)\n", BENCH_PROG, flag, value, problem, range);
    exit(2);
}

/* s as a whole number from lo to hi, else bench_bad. */
static inline int64_t bench_int(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char range[80];
    snprintf(range, sizeof range, "a whole number from %lld to %lld", (long long)lo, (long long)hi);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') bench_bad(flag, s, "not a whole number", range);
    /* out of long long (errno ERANGE) saturates, past any bound here */
    if (errno == ERANGE || v < lo || v > hi) bench_bad(flag, s, "out of range", range);
    return (int64_t)v;
}

/* s as a number from lo (above lo when lo_open) to hi, else bench_bad; NaN and inf never pass. */
static inline double bench_num(const char *flag, const char *s, double lo, int lo_open, double hi) {
    char range[80];
    snprintf(range, sizeof range, lo_open ? "a number above %g, up to %g" : "a number from %g to %g", lo, hi);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || v != v) bench_bad(flag, s, "not a number", range); /* v != v: NaN */
    if (errno == ERANGE || !(lo_open ? v > lo : v >= lo) || !(v <= hi)) bench_bad(flag, s, "out of range", range);
    return v;
}

/* s unless it is empty, else bench_bad: an unset shell variable would quietly mean the default. */
static inline const char *bench_str(const char *flag, const char *s) {
    if (!*s) bench_bad(flag, s, "empty", "leave the flag out for its default");
    return s;
}

/* The training benchmarks' batch against the training samples it is drawn from: a larger one would
 * train on all of them each step yet count the whole batch, a false rate. When value > most, rank
 * 0 says so as bench_int would, naming what most is, and every rank (each decides alike) closes
 * comm, so that MPI ends cleanly, and exits with 2. comm may be NULL: a program without ranks. */
static inline void bench_batch_fits(const char *flag, int64_t value, int64_t most, const char *what, ls_comm *comm) {
    if (value <= most) return;
    char ranks[48] = "";
    if (comm) snprintf(ranks, sizeof ranks, " with %d rank(s)", ls_comm_world(comm));
    if (ls_comm_rank(comm) == 0)
        fprintf(stderr, "%s: %s '%lld': out of range (a whole number from 1 to %lld, %s%s)\n", BENCH_PROG, flag,
                (long long)value, (long long)most, what, ranks);
    ls_comm_destroy(comm);
    exit(2);
}

/* getopt_long moves the operands to the end: none is expected, so the first left is an error. */
static inline void bench_no_operands(int argc, char **argv, int first) {
    if (first < argc) {
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", BENCH_PROG, argv[first]);
        exit(2);
    }
}

/* Seconds on the monotonic clock. */
static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* expr (an ls_status) or "PROG: WHAT: the error" on stderr and return 1 (from main). */
#define BENCH_CHECK(what, expr)                                                                                        \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            fprintf(stderr, "%s: %s: %s\n", BENCH_PROG, what, ls_last_error());                                        \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* BENCH_CHECK for the step that reads a flag's value (value: the flag's, NULL where it was not
 * given): a value it refuses as invalid (LS_ERR_INVALID_ARGUMENT: --device foo, --backend foo) is
 * bad usage, "PROG: FLAG: the error" and return 2 (from main), as bench_bad; other failures (no GPU
 * for --device cuda, a backend this build lacks), and a bad default or variable, are BENCH_CHECK's:
 * "PROG: WHAT: the error" and 1. */
#define BENCH_CHECK_FLAG(flag, value, what, expr)                                                                      \
    do {                                                                                                               \
        ls_status s_ = (expr);                                                                                         \
        if (s_ != LS_OK) {                                                                                             \
            int usage_ = (value) != NULL && s_ == LS_ERR_INVALID_ARGUMENT;                                             \
            fprintf(stderr, "%s: %s: %s\n", BENCH_PROG, usage_ ? (flag) : (what), ls_last_error());                    \
            return usage_ ? 2 : 1;                                                                                     \
        }                                                                                                              \
    } while (0)

#endif
