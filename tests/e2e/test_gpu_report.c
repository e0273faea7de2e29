/* test_gpu_report.c: the examples' GPU line after an epoch (ex_gpu_monitor_report): every rank's
 * monitor, combined over the ranks and printed by rank 0, checked word for word. The monitors
 * read a stand-in NVML (tests/core/fake_nvml.c, path in argv[1]) started by index with a 100 s
 * interval, so each read holds exactly the start's sample. Device 0: 80% busy (memory 30%), 1 GiB
 * used of 140 GiB, 455.25 W of 700 W, 60 C, 1980 MHz; device 1: 90% (40%), 2 GiB, 500 W, 70 C,
 * 1900 MHz. Alone: device 0's line. Under mpirun with 2 ranks: rank r on device r gives the
 * ranges and sums over 2 GPUs (955.25 W prints as 955); both ranks on device 0 count it once
 * (455 W, not 910); rank 1 without a monitor (no NVML there) leaves rank 0's GPU alone; the
 * discarded read (ex_gpu_monitor_restart) leaves nothing for the next one but a fresh sample.
 * No monitor anywhere: no line. */
#include <stdlib.h>
#include <unistd.h>

#include "comm.h"
#include "example_cli.h"
#include "testutil.h"

/* What ex_gpu_monitor_report prints, captured from stdout. */
static void report(ls_gpu_monitor *m, ls_comm *comm, int rank, char *out, size_t len) {
    fflush(stdout);
    int saved = dup(1);
    FILE *t = tmpfile();
    LS_REQUIRE(saved >= 0 && t);
    dup2(fileno(t), 1);
    ls_status s = ex_gpu_monitor_report(m, comm, rank);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    LS_REQUIRE_OK(s);
    rewind(t);
    size_t n = fread(out, 1, len - 1, t);
    out[n] = '\0';
    fclose(t);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gpu_report PATH-OF-THE-STAND-IN-libnvidia-ml.so.1\n");
        return 2;
    }
    setenv("LOCKSTEP_NVML_LIBRARY", argv[1], 1);
    ls_ctx *ctx = NULL;
    ls_comm *comm = NULL;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &comm));
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    char got[512];
    const char *want;
    ls_gpu_monitor *m = NULL;

    const char *dev0 = "  Fake GPU 141GB: gpu 80% busy (memory 30%), 1.0 GiB used of 140.0 GiB, 455 W of 700 W, 60 C, "
                       "1980 MHz\n";
    /* rank r on device r (alone: device 0) */
    LS_REQUIRE_OK(ls_gpu_monitor_start_index((unsigned)rank, 100000, &m));
    report(m, comm, rank, got, sizeof got);
    want = world == 1 ? dev0
                      : "  2 GPUs (Fake GPU 141GB): gpu 80-90% busy (memory 30-40%), up to 2.0 GiB used of 140.0 GiB, "
                        "955 W in all (of 1400 W), up to 70 C, 1900-1980 MHz\n";
    if (rank != 0) want = "";
    printf("rank %d, %d ranks, a GPU each: %s", rank, world, *got ? got : "(nothing)\n");
    LS_EXPECT(!strcmp(got, want));
    ls_gpu_monitor_stop(m);

    /* a read that is dropped, then the report: only samples taken since (here none: the start's
     * sample was dropped, so the report samples afresh: the second query, 61 C and 2 GiB) */
    LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 100000, &m));
    ex_gpu_monitor_restart(m);
    report(m, comm, rank, got, sizeof got);
    want = rank != 0 ? ""
                     : "  Fake GPU 141GB: gpu 80% busy (memory 30%), 2.0 GiB used of 140.0 GiB, 455 W of 700 W, 61 C, "
                       "1980 MHz\n";
    printf("rank %d, after a dropped read (all ranks on device 0): %s", rank, *got ? got : "(nothing)\n");
    LS_EXPECT(!strcmp(got, want)); /* two ranks on one GPU: counted once */
    ls_gpu_monitor_stop(m);

    if (world == 2) { /* rank 1 has no monitor: rank 0's GPU alone */
        m = NULL;
        if (rank == 0) LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 100000, &m));
        report(m, comm, rank, got, sizeof got);
        want = rank == 0 ? dev0 : "";
        printf("rank %d, rank 1 without NVML: %s", rank, *got ? got : "(nothing)\n");
        LS_EXPECT(!strcmp(got, want));
        ls_gpu_monitor_stop(m);
    }
    report(NULL, comm, rank, got, sizeof got); /* no monitor anywhere (a CPU run) */
    LS_EXPECT(!strcmp(got, ""));
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
