/* test_comm_select.c: backend selection and the self backend. Alone: the automatic choice is
 * self; self's collectives (identity reductions, copying gathers, requests done at start);
 * abort; LOCKSTEP_COMM overrides and their errors (unknown name, nccl on a CPU context, self
 * under a launcher of several ranks, torchrun), a bad LOCKSTEP_COMM_TIMEOUT; last, LOCKSTEP_COMM=mpi
 * as a singleton when the build has MPI. Under mpirun (any size): auto gives mpi; self and nccl
 * are errors on every rank without hanging; an explicit mpi works beside the first communicator. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "testutil.h"

#ifndef LS_TEST_HAVE_MPI
#define LS_TEST_HAVE_MPI 0
#endif
#ifndef LS_TEST_HAVE_NCCL
#define LS_TEST_HAVE_NCCL 0
#endif

static void expect_nccl_refused(void) {
    ls_comm *c = NULL;
    setenv("LOCKSTEP_COMM", "nccl", 1);
    if (LS_TEST_HAVE_NCCL)
        LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT, "computes on the cpu");
    else
        LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_UNSUPPORTED, "no NCCL");
    LS_EXPECT(c == NULL);
    unsetenv("LOCKSTEP_COMM");
}

static void test_self_backend(void) {
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
    LS_EXPECT(!strcmp(ls_comm_backend_name(c), "self"));
    LS_EXPECT(ls_comm_rank(c) == 0 && ls_comm_world(c) == 1);
    LS_EXPECT(!strcmp(ls_comm_rank_info(c)->launcher, "none"));

    float v[3] = {1.5f, -2.0f, 3.25f};
    for (int op = LS_REDUCE_SUM; op <= LS_REDUCE_MIN; op++) {
        LS_REQUIRE_OK(ls_comm_allreduce(c, v, 3, LS_F32, (ls_reduce_op)op));
        LS_EXPECT(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f);
    }
    int32_t iv[2] = {7, -7};
    LS_REQUIRE_OK(ls_comm_allreduce(c, iv, 2, LS_I32, LS_REDUCE_AVG));
    LS_EXPECT(iv[0] == 7 && iv[1] == -7);
    LS_REQUIRE_OK(ls_comm_broadcast(c, v, 3, LS_F32, 0));
    LS_EXPECT_ERR(ls_comm_broadcast(c, v, 3, LS_F32, 1), LS_ERR_INVALID_ARGUMENT, "not a rank of 1");
    double g[4] = {0}, s[2] = {4, 5};
    LS_REQUIRE_OK(ls_comm_allgather(c, s, g, 2, LS_F64));
    LS_EXPECT(g[0] == 4 && g[1] == 5 && g[2] == 0);
    double rs[2] = {0};
    LS_REQUIRE_OK(ls_comm_reduce_scatter(c, s, rs, 2, LS_F64, LS_REDUCE_SUM));
    LS_EXPECT(rs[0] == 4 && rs[1] == 5);
    LS_REQUIRE_OK(ls_comm_barrier(c));

    ls_comm_request *r = NULL;
    LS_REQUIRE_OK(ls_comm_iallreduce(c, v, 3, LS_F32, LS_REDUCE_SUM, &r));
    int done = 0;
    LS_REQUIRE_OK(ls_comm_test(r, &done));
    LS_EXPECT(done == 1);
    LS_REQUIRE_OK(ls_comm_wait(&r));
    LS_REQUIRE_OK(ls_comm_iallgather(c, s, g, 2, LS_F64, &r));
    LS_REQUIRE_OK(ls_comm_wait(&r));
    LS_REQUIRE_OK(ls_comm_ibarrier(c, &r));
    LS_REQUIRE_OK(ls_comm_wait(&r));

    /* abort: later calls fail instead of running */
    ls_comm_abort(c, "test abort");
    LS_EXPECT_ERR(ls_comm_allreduce(c, v, 3, LS_F32, LS_REDUCE_SUM), LS_ERR_COMM, "aborted (test abort)");
    LS_EXPECT_ERR(ls_comm_ibarrier(c, &r), LS_ERR_COMM, "aborted");
    ls_comm_destroy(c);
}

static void test_overrides_alone(void) {
    ls_comm *c = NULL;
    setenv("LOCKSTEP_COMM", "bogus", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_COMM='bogus' is not a communicator backend: use self, mpi, nccl or auto");
    /* the argument beats the environment */
    LS_REQUIRE_OK(ls_comm_create(NULL, "self", &c));
    LS_EXPECT(!strcmp(ls_comm_backend_name(c), "self"));
    ls_comm_destroy(c);
    LS_EXPECT_ERR(ls_comm_create(NULL, "gloo", &c), LS_ERR_INVALID_ARGUMENT, "backend argument 'gloo'");
    setenv("LOCKSTEP_COMM", "self", 1);
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
    LS_EXPECT(!strcmp(ls_comm_backend_name(c), "self"));
    ls_comm_destroy(c);
    setenv("LOCKSTEP_COMM", "auto", 1);
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
    LS_EXPECT(!strcmp(ls_comm_backend_name(c), "self"));
    ls_comm_destroy(c);
    unsetenv("LOCKSTEP_COMM");

    expect_nccl_refused();
    if (!LS_TEST_HAVE_MPI) {
        LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &c), LS_ERR_UNSUPPORTED, "no MPI");
    }

    /* self when a launcher says 2 ranks: an error on every rank (decided from the environment) */
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, "self", &c), LS_ERR_INVALID_ARGUMENT,
                  "the mpi launcher started 2 ranks: they would train independently");
    /* an inconsistent launcher environment stops creation */
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "OMPI_COMM_WORLD_RANK=2 is not a rank of OMPI_COMM_WORLD_SIZE=2");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");

    /* torchrun starts ranks without MPI: automatic selection refuses clearly */
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "0", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_UNSUPPORTED, "launched by torchrun with WORLD_SIZE=2");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");

    setenv("LOCKSTEP_COMM_TIMEOUT", "soon", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_COMM_TIMEOUT=soon");
    /* beyond a deadline a timespec can hold (the thread-progress wait spun on its error) */
    setenv("LOCKSTEP_COMM_TIMEOUT", "inf", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_COMM_TIMEOUT=inf is not a number of seconds in decimal digits (e.g. 30 or 0.5; 0 waits "
                  "forever)");
    setenv("LOCKSTEP_COMM_TIMEOUT", "1e19", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_COMM_TIMEOUT=1e19 is more than 1000000000 seconds (about 31 years); 0 waits forever");
    setenv("LOCKSTEP_COMM_TIMEOUT", "1e400", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_COMM_TIMEOUT=1e400 is more than");
    /* strtod read hex ("0x10" was 16 s), a space or '+', and 1e-400 as 0, which waits forever */
    static const char *const not_seconds[] = {"0x10", " 5", "+5", "1e-400", "5s", "1e3x", "nan"};
    for (size_t i = 0; i < sizeof not_seconds / sizeof not_seconds[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "LOCKSTEP_COMM_TIMEOUT=%s is not a number of seconds in decimal digits",
                 not_seconds[i]);
        setenv("LOCKSTEP_COMM_TIMEOUT", not_seconds[i], 1);
        LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT, want);
    }
    static const char *const seconds[] = {"0", "30", "0.5", ".5", "1e3", "1e9"};
    for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
        setenv("LOCKSTEP_COMM_TIMEOUT", seconds[i], 1);
        LS_REQUIRE_OK(ls_comm_create(NULL, "self", &c));
        ls_comm_destroy(c);
    }
    unsetenv("LOCKSTEP_COMM_TIMEOUT");

    /* last (MPI initializes once per process): mpi as a singleton */
    if (LS_TEST_HAVE_MPI) {
        setenv("LOCKSTEP_COMM", "mpi", 1);
        LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
        LS_EXPECT(!strcmp(ls_comm_backend_name(c), "mpi") && ls_comm_world(c) == 1);
        float f[2] = {1, 2};
        LS_REQUIRE_OK(ls_comm_allreduce(c, f, 2, LS_F32, LS_REDUCE_AVG));
        LS_EXPECT(f[0] == 1 && f[1] == 2);
        ls_comm_destroy(c);
        unsetenv("LOCKSTEP_COMM");
    }
}

static void test_under_launcher(const ls_rank_info *ri) {
    ls_comm *world = NULL, *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &world)); /* keeps MPI initialized throughout */
    LS_EXPECT(!strcmp(ls_comm_backend_name(world), "mpi"));
    LS_EXPECT(ls_comm_world(world) == ri->world && ls_comm_rank(world) == ri->rank);

    if (ri->world > 1) {
        setenv("LOCKSTEP_COMM", "self", 1);
        LS_EXPECT_ERR(ls_comm_create(NULL, NULL, &c), LS_ERR_INVALID_ARGUMENT, "would train independently");
        unsetenv("LOCKSTEP_COMM");
    }
    /* nccl on CPU ranks: refused on every rank (agreed over MPI when the build has NCCL) */
    ls_comm *n = NULL;
    setenv("LOCKSTEP_COMM", "nccl", 1);
    ls_status s = ls_comm_create(NULL, NULL, &n);
    unsetenv("LOCKSTEP_COMM");
    LS_EXPECT(s != LS_OK && n == NULL);
    LS_EXPECT(strstr(ls_last_error(), LS_TEST_HAVE_NCCL ? "computes on the cpu" : "no NCCL") != NULL);

    /* a second, explicit mpi communicator is independent of the first */
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &c));
    int32_t x = ls_comm_rank(c) + 1;
    LS_REQUIRE_OK(ls_comm_allreduce(c, &x, 1, LS_I32, LS_REDUCE_SUM));
    LS_EXPECT(x == ri->world * (ri->world + 1) / 2);
    int32_t y = 1;
    LS_REQUIRE_OK(ls_comm_allreduce(world, &y, 1, LS_I32, LS_REDUCE_SUM));
    LS_EXPECT(y == ri->world);
    ls_comm_destroy(c);

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(world, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(world);
}

int main(void) {
    unsetenv("LOCKSTEP_COMM");
    unsetenv("LOCKSTEP_COMM_TIMEOUT");
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    if (!strcmp(ri.launcher, "none")) {
        test_self_backend();
        test_overrides_alone();
    } else if (!strcmp(ri.launcher, "mpi")) {
        if (!LS_TEST_HAVE_MPI) LS_SKIP("launched by mpirun but this build has no MPI");
        test_under_launcher(&ri);
    } else {
        LS_SKIP("launched by %s: run alone or under mpirun", ri.launcher);
    }
    LS_TEST_END();
}
