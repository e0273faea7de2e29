/* gpumon.h: GPU monitoring through NVML, the driver's management library (libnvidia-ml.so.1, what
 * nvidia-smi reads), loaded at run time so that lockstep needs no NVML to build and runs without
 * it. A background thread samples one GPU every interval: utilization, memory in use (all
 * processes, as nvidia-smi shows it), board power, temperature and SM clock (the first sample at
 * the start); a read returns the means and peaks since the previous read, like `nvidia-smi dmon`
 * over a training epoch.
 * LOCKSTEP_NVML_LIBRARY names another library file (a driver installed elsewhere). */
#ifndef LOCKSTEP_GPUMON_H
#define LOCKSTEP_GPUMON_H

#include <stdint.h>

#include "device.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_gpu_stats {
    char name[96];        /* "NVIDIA H200" */
    char device_id[64];   /* which GPU: its PCI bus id, or "nvml:N" when started by index */
    int samples;          /* samples behind the figures below (0: none yet) */
    double util_pct;      /* mean % of time a kernel was running */
    double mem_util_pct;  /* mean % of time device memory was read or written */
    double power_w;       /* mean board power in W; < 0: the GPU does not report it */
    double power_limit_w; /* enforced power limit in W; < 0: not reported */
    double temp_c;        /* highest GPU temperature in C; < 0: not reported */
    double sm_clock_mhz;  /* mean SM clock; < 0: not reported */
    uint64_t mem_used;    /* highest device memory in use (bytes, every process) */
    uint64_t mem_total;
} ls_gpu_stats;

typedef struct ls_gpu_monitor ls_gpu_monitor;

/* Monitor the CUDA device dev (found in NVML by its PCI bus id) every interval_ms (>= 1).
 * LS_ERR_UNSUPPORTED when dev is not a GPU of this build, or when NVML gives no utilization for
 * it (some virtual or partitioned GPUs); LS_ERR_DEVICE, naming the library or NVML's own error,
 * when NVML cannot be loaded or started or does not know the device. */
ls_status ls_gpu_monitor_start(ls_device dev, int interval_ms, ls_gpu_monitor **out);
/* The same for NVML's device index (NVML counts every GPU, ignoring CUDA_VISIBLE_DEVICES). */
ls_status ls_gpu_monitor_start_index(unsigned nvml_index, int interval_ms, ls_gpu_monitor **out);
/* Means and peaks of the samples since the previous read (or the start); then starts afresh.
 * Takes a sample now if none was taken since. */
ls_status ls_gpu_monitor_read(ls_gpu_monitor *m, ls_gpu_stats *out);
/* Stops the thread and releases NVML. NULL is fine. */
void ls_gpu_monitor_stop(ls_gpu_monitor *m);
/* "gpu 97% busy (memory 41%), 63.2 GiB used of 140.0 GiB, 455 W of 700 W, 62 C, 1980 MHz";
 * a figure the GPU does not report is left out. */
const char *ls_gpu_stats_format(const ls_gpu_stats *s, char *buf, int len);

/* The interval from LOCKSTEP_GPU_MONITOR: milliseconds (default 500), 0 or "off" for none. A bad
 * value is LS_ERR_INVALID_ARGUMENT naming the variable. */
ls_status ls_gpu_monitor_interval_from_env(int *interval_ms);

#ifdef __cplusplus
}
#endif
#endif
