/* test_gpu_report.c: the examples' GPU line after an epoch (ex_gpu_monitor_report): every rank's
 * monitor, combined over the ranks and printed by rank 0, checked word for word. The monitors
 * read a stand-in NVML (tests/core/fake_nvml.c, path in argv[1]) started by index with a 100 s
 * interval, so each rank's first read holds exactly one sample: 80% busy (memory 30%), 1 GiB
 * used of 140 GiB, 455.25 W of 700 W, 60 C, 1980 MHz. Alone: that GPU's line. Under mpirun with
 * 2 ranks: the ranges and sums over 2 GPUs (910.5 W prints as 910: printf rounds half to even); then with rank 1 not monitoring (its GPU without
 * NVML): rank 0's GPU alone. No monitor anywhere: no line. */
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

    LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 100000, &m));
    report(m, comm, rank, got, sizeof got);
    if (world == 1)
        want = "  Fake GPU 141GB: gpu 80% busy (memory 30%), 1.0 GiB used of 140.0 GiB, 455 W of 700 W, 60 C, 1980 MHz\n";
    else
        want = "  2 GPUs (Fake GPU 141GB): gpu 80-80% busy (memory 30-30%), up to 1.0 GiB used of 140.0 GiB, 910 W in all "
               "(of 1400 W), up to 60 C, 1980-1980 MHz\n";
    if (rank != 0) want = "";
    printf("rank %d, %d ranks: %s", rank, world, *got ? got : "(nothing)\n");
    LS_EXPECT(!strcmp(got, want));
    ls_gpu_monitor_stop(m);

    if (world == 2) { /* rank 1 has no monitor: rank 0's GPU alone, its second session's first sample */
        m = NULL;
        if (rank == 0) LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 100000, &m));
        report(m, comm, rank, got, sizeof got);
        want = rank == 0 ? "  Fake GPU 141GB: gpu 80% busy (memory 30%), 1.0 GiB used of 140.0 GiB, 455 W of 700 W, 60 C, "
                           "1980 MHz\n"
                         : "";
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
