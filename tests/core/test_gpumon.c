/* test_gpumon.c: the GPU monitor (gpumon.h) against a stand-in NVML library (fake_nvml.c, path in
 * argv[1]) whose figures follow from the number of samples taken, so every reported number is
 * checked exactly: means, peaks, the per-read reset, a figure the GPU does not report, the text
 * line; and the errors: no library, NVML failing to start, an unknown GPU, a CPU device, a bad
 * LOCKSTEP_GPU_MONITOR; and a stop that does not wait out a long interval. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "device_probe.h"
#include "gpumon.h"
#include "testutil.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The figures the stand-in gives after total samples, k of them since the last read. */
static void expect_stats(const ls_gpu_stats *s, int k, long long total, int power) {
    LS_EXPECT(s->samples == k);
    LS_EXPECT(!strcmp(s->name, "Fake GPU 141GB"));
    LS_EXPECT_NEAR(s->util_pct, 80.0, 0);
    LS_EXPECT_NEAR(s->mem_util_pct, 30.0, 0);
    LS_EXPECT(s->mem_used == (uint64_t)total << 30);
    LS_EXPECT(s->mem_total == 140ULL << 30);
    LS_EXPECT_NEAR(s->temp_c, 60.0 + (double)total - 1, 0);
    LS_EXPECT_NEAR(s->sm_clock_mhz, 1980.0, 0);
    LS_EXPECT_NEAR(s->power_limit_w, 700.0, 0);
    if (power)
        LS_EXPECT_NEAR(s->power_w, 455.25, 0);
    else
        LS_EXPECT(s->power_w < 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gpumon PATH-OF-THE-STAND-IN-libnvidia-ml.so.1\n");
        return 2;
    }
    ls_gpu_monitor *m = NULL;
    ls_gpu_stats st;
    char buf[256], want[256];

    /* no library */
    setenv("LOCKSTEP_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    LS_EXPECT_ERR(ls_gpu_monitor_start_index(0, 10, &m), LS_ERR_DEVICE,
                  "GPU monitoring: cannot load NVML (/nonexistent/libnvidia-ml.so.1)");
    LS_EXPECT(m == NULL);

    setenv("LOCKSTEP_NVML_LIBRARY", argv[1], 1);
    setenv("FAKE_NVML_INIT", "fail", 1);
    LS_EXPECT_ERR(ls_gpu_monitor_start_index(0, 10, &m), LS_ERR_DEVICE,
                  "GPU monitoring: nvmlInit_v2 failed: Driver Not Loaded");
    unsetenv("FAKE_NVML_INIT");
    LS_EXPECT_ERR(ls_gpu_monitor_start_index(2, 10, &m), LS_ERR_DEVICE,
                  "GPU monitoring: NVML has no GPU 2: Invalid Argument");
    setenv("FAKE_NVML_NO_UTIL", "1", 1); /* a GPU without utilization figures (MIG, vGPU) */
    LS_EXPECT_ERR(ls_gpu_monitor_start_index(0, 10, &m), LS_ERR_UNSUPPORTED,
                  "GPU monitoring: NVML gives no utilization for Fake GPU 141GB (nvml:0): Not Supported");
    unsetenv("FAKE_NVML_NO_UTIL");
    LS_EXPECT_ERR(ls_gpu_monitor_start_index(0, 0, &m), LS_ERR_INVALID_ARGUMENT, "the interval must be >= 1 ms");
    LS_EXPECT_ERR(ls_gpu_monitor_start(ls_device_cpu(), 10, &m), LS_ERR_UNSUPPORTED,
                  "GPU monitoring: cpu is not a GPU");
    /* a CUDA device is found by its PCI bus id. Where CUDA has none (no driver, or a CPU-only
     * build) that is the error. On a GPU: the stand-in does not know the real bus id, then is told
     * it (FAKE_NVML_BUS_ID), and the monitor started for cuda:0 reads its device 0 */
    char bus[256];
    if (ls_device_probe_pci_bus_id(0, bus, (int)sizeof bus) != 0) {
        LS_EXPECT_ERR(ls_gpu_monitor_start((ls_device){LS_DEVICE_CUDA, 0}, 10, &m), LS_ERR_DEVICE,
                      "GPU monitoring: no PCI bus id for cuda:0");
        printf("cuda:0 here: %s\n", ls_last_error());
    } else {
        LS_EXPECT_ERR(ls_gpu_monitor_start((ls_device){LS_DEVICE_CUDA, 0}, 10, &m), LS_ERR_DEVICE,
                      "GPU monitoring: NVML does not know cuda:0");
        setenv("FAKE_NVML_BUS_ID", bus, 1);
        LS_REQUIRE_OK(ls_gpu_monitor_start((ls_device){LS_DEVICE_CUDA, 0}, 100000, &m));
        LS_REQUIRE_OK(ls_gpu_monitor_read(m, &st));
        printf("cuda:0 (PCI %s) through the stand-in: %s\n", bus, ls_gpu_stats_format(&st, buf, sizeof buf));
        LS_EXPECT(!strcmp(st.device_id, bus));
        LS_EXPECT(st.samples >= 1 && st.util_pct == 80.0);
        ls_gpu_monitor_stop(m);
        m = NULL;
        unsetenv("FAKE_NVML_BUS_ID");
    }

    /* sampling every 10 ms: two reads, each the figures since the one before */
    LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 10, &m));
    usleep(120000);
    LS_REQUIRE_OK(ls_gpu_monitor_read(m, &st));
    int k1 = st.samples;
    printf("first read: %d samples: %s\n", k1, ls_gpu_stats_format(&st, buf, sizeof buf));
    LS_EXPECT(k1 >= 2);
    expect_stats(&st, k1, k1, 1);
    LS_EXPECT(!strcmp(st.device_id, "nvml:0"));
    snprintf(want, sizeof want,
             "gpu 80%% busy (memory 30%%), %d.0 GiB used of 140.0 GiB, 455 W of 700 W, %d C, 1980 MHz", k1,
             60 + k1 - 1);
    LS_EXPECT(!strcmp(buf, want));
    usleep(60000);
    LS_REQUIRE_OK(ls_gpu_monitor_read(m, &st));
    int k2 = st.samples;
    printf("second read: %d samples: %s\n", k2, ls_gpu_stats_format(&st, buf, sizeof buf));
    LS_EXPECT(k2 >= 1);
    expect_stats(&st, k2, k1 + k2, 1);
    ls_gpu_monitor_stop(m);

    /* power not reported: left out of the figures and the line; a read right after the start
     * has the start's sample */
    setenv("FAKE_NVML_NO_POWER", "1", 1);
    LS_REQUIRE_OK(ls_gpu_monitor_start_index(0, 100000, &m));
    double t0 = now_s();
    LS_REQUIRE_OK(ls_gpu_monitor_read(m, &st));
    expect_stats(&st, st.samples, st.samples, 0);
    LS_EXPECT(st.samples == 1);
    ls_gpu_stats_format(&st, buf, sizeof buf);
    LS_EXPECT(strstr(buf, " W") == NULL);
    printf("no power: %s\n", buf);
    ls_gpu_monitor_stop(m); /* the thread waits 100 s between samples: the stop wakes it */
    double dt = now_s() - t0;
    printf("stop during a 100 s interval took %.3f s\n", dt);
    LS_EXPECT(dt < 5.0);
    unsetenv("FAKE_NVML_NO_POWER");
    ls_gpu_monitor_stop(NULL);

    /* LOCKSTEP_GPU_MONITOR */
    int iv = -1;
    unsetenv("LOCKSTEP_GPU_MONITOR");
    LS_REQUIRE_OK(ls_gpu_monitor_interval_from_env(&iv));
    LS_EXPECT(iv == 500);
    setenv("LOCKSTEP_GPU_MONITOR", "off", 1);
    LS_REQUIRE_OK(ls_gpu_monitor_interval_from_env(&iv));
    LS_EXPECT(iv == 0);
    setenv("LOCKSTEP_GPU_MONITOR", "250", 1);
    LS_REQUIRE_OK(ls_gpu_monitor_interval_from_env(&iv));
    LS_EXPECT(iv == 250);
    setenv("LOCKSTEP_GPU_MONITOR", "fast", 1);
    LS_EXPECT_ERR(ls_gpu_monitor_interval_from_env(&iv), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MONITOR='fast': use a sampling interval in milliseconds");
    /* digits only: strtol took a space and a '+' */
    setenv("LOCKSTEP_GPU_MONITOR", " 250", 1);
    LS_EXPECT_ERR(ls_gpu_monitor_interval_from_env(&iv), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MONITOR=' 250': use a sampling interval in milliseconds");
    setenv("LOCKSTEP_GPU_MONITOR", "+250", 1);
    LS_EXPECT_ERR(ls_gpu_monitor_interval_from_env(&iv), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MONITOR='+250': use a sampling interval in milliseconds");
    setenv("LOCKSTEP_GPU_MONITOR", "0", 1);
    LS_REQUIRE_OK(ls_gpu_monitor_interval_from_env(&iv));
    LS_EXPECT(iv == 0);
    LS_TEST_END();
}
