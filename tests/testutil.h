/* testutil.h: assertion macros for lockstep's test executables. A failed check prints the file,
 * line and values and makes the test exit 1; LS_SKIP exits 77 (CTest's skip code) with a reason. */
#ifndef LOCKSTEP_TESTUTIL_H
#define LOCKSTEP_TESTUTIL_H

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"

static int ls_test_failures __attribute__((unused)) = 0;

#define LS_EXPECT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                                        \
            ls_test_failures++;                                                                                        \
        }                                                                                                              \
    } while (0)

#define LS_REQUIRE(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: required %s (last error: %s)\n", __FILE__, __LINE__, #cond, ls_last_error());      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define LS_REQUIRE_OK(expr)                                                                                            \
    do {                                                                                                               \
        ls_status ls_t_s_ = (expr);                                                                                    \
        if (ls_t_s_ != LS_OK) {                                                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, ls_status_name(ls_t_s_),          \
                    ls_last_error());                                                                                  \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* Expect a status and an error message containing needle. */
#define LS_EXPECT_ERR(expr, status, needle)                                                                            \
    do {                                                                                                               \
        ls_status ls_t_s_ = (expr);                                                                                    \
        if (ls_t_s_ != (status) || !strstr(ls_last_error(), (needle))) {                                               \
            fprintf(stderr, "%s:%d: %s gave %s '%s', expected %s containing '%s'\n", __FILE__, __LINE__, #expr,        \
                    ls_status_name(ls_t_s_), ls_last_error(), ls_status_name(status), (needle));                       \
            ls_test_failures++;                                                                                        \
        }                                                                                                              \
    } while (0)

/* The whole file at path, NUL-terminated (free it); NULL where it cannot be opened. */
static __attribute__((unused)) char *ls_test_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    LS_REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

/* stderr into the file path (truncated) until ls_test_stderr_back(saved): saved is the fd that
 * puts it back. For tests that read what the runtime logged. */
static __attribute__((unused)) int ls_test_stderr_to(const char *path) {
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    LS_REQUIRE(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
    close(fd);
    return saved;
}

static __attribute__((unused)) void ls_test_stderr_back(int saved) {
    fflush(stderr);
    LS_REQUIRE(dup2(saved, 2) == 2);
    close(saved);
}

#define LS_EXPECT_NEAR(a, b, tol)                                                                                      \
    do {                                                                                                               \
        double ls_a_ = (double)(a), ls_b_ = (double)(b);                                                               \
        if (!(fabs(ls_a_ - ls_b_) <= (tol))) {                                                                         \
            fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g, differ by more than %g\n", __FILE__, __LINE__, #a, ls_a_,    \
                    #b, ls_b_, (double)(tol));                                                                         \
            ls_test_failures++;                                                                                        \
        }                                                                                                              \
    } while (0)

#define LS_SKIP(...)                                                                                                   \
    do {                                                                                                               \
        fprintf(stderr, "SKIP: " __VA_ARGS__);                                                                         \
        fprintf(stderr, "\n");                                                                                         \
        exit(77);                                                                                                      \
    } while (0)

#define LS_TEST_END()                                                                                                  \
    do {                                                                                                               \
        if (ls_test_failures) {                                                                                        \
            fprintf(stderr, "%d check(s) failed\n", ls_test_failures);                                                 \
            return 1;                                                                                                  \
        }                                                                                                              \
        printf("ok\n");                                                                                                \
        return 0;                                                                                                      \
    } while (0)

#endif
