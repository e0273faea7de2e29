/* gpumon.c: GPU monitoring through NVML loaded with dlopen (gpumon.h). NVML's C interface is
 * stable across drivers; the few types and calls used here are declared below as nvml.h declares
 * them (nvml.h is not part of every toolkit install). */
#include "gpumon.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device_probe.h"
#include "parse.h"

/* ---- from nvml.h ---- */
typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned int gpu;    /* % of the last sample period during which a kernel ran */
    unsigned int memory; /* % of it during which device memory was read or written */
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvmlMemory_t;
enum { NVML_SUCCESS = 0, NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_SM = 1 };

typedef struct nvml_api {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*by_pci)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);       /* mW */
    nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int *); /* mW */
    nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int *);  /* MHz */
} nvml_api;

/* sums and peaks since the last read */
typedef struct acc {
    int n, n_power, n_temp, n_clock;
    double util, mem_util, power, clock, temp_max;
    uint64_t mem_used_max, mem_total;
} acc;

struct ls_gpu_monitor {
    nvml_api api;
    nvmlDevice_t dev;
    char name[96];
    char device_id[64];
    double power_limit_w;
    int interval_ms;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    acc a;
};

static const char *nvml_str(const nvml_api *api, nvmlReturn_t r) {
    const char *s = api->error_string ? api->error_string(r) : NULL;
    return s ? s : "unknown NVML error";
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    return p;
}

#define NVML_BIND(field, name) api->field = (__typeof__(api->field))sym(api->lib, name)

static ls_status nvml_load(nvml_api *api) {
    memset(api, 0, sizeof *api);
    const char *path = getenv("LOCKSTEP_NVML_LIBRARY");
    if (!path || !*path) path = "libnvidia-ml.so.1";
    api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        const char *e = dlerror();
        return ls_error(LS_ERR_DEVICE, "GPU monitoring: cannot load NVML (%s): %s", path, e ? e : "dlopen failed");
    }
    NVML_BIND(init, "nvmlInit_v2");
    NVML_BIND(shutdown, "nvmlShutdown");
    NVML_BIND(error_string, "nvmlErrorString");
    NVML_BIND(by_index, "nvmlDeviceGetHandleByIndex_v2");
    NVML_BIND(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    NVML_BIND(name, "nvmlDeviceGetName");
    NVML_BIND(utilization, "nvmlDeviceGetUtilizationRates");
    NVML_BIND(memory, "nvmlDeviceGetMemoryInfo");
    NVML_BIND(temperature, "nvmlDeviceGetTemperature");
    NVML_BIND(power, "nvmlDeviceGetPowerUsage");
    NVML_BIND(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    NVML_BIND(clock, "nvmlDeviceGetClockInfo");
    const char *missing = !api->init          ? "nvmlInit_v2"
                          : !api->shutdown    ? "nvmlShutdown"
                          : !api->by_index    ? "nvmlDeviceGetHandleByIndex_v2"
                          : !api->by_pci      ? "nvmlDeviceGetHandleByPciBusId_v2"
                          : !api->utilization ? "nvmlDeviceGetUtilizationRates"
                          : !api->memory      ? "nvmlDeviceGetMemoryInfo"
                                              : NULL;
    if (missing) {
        dlclose(api->lib);
        api->lib = NULL;
        return ls_error(LS_ERR_DEVICE,
                        "GPU monitoring: %s has no %s (an NVML older than the driver interface lockstep uses)", path,
                        missing);
    }
    nvmlReturn_t r = api->init();
    if (r != NVML_SUCCESS) {
        ls_status s = ls_error(LS_ERR_DEVICE, "GPU monitoring: nvmlInit_v2 failed: %s", nvml_str(api, r));
        dlclose(api->lib);
        api->lib = NULL;
        return s;
    }
    return LS_OK;
}

static void nvml_unload(nvml_api *api) {
    if (!api->lib) return;
    api->shutdown();
    dlclose(api->lib);
    api->lib = NULL;
}

/* One sample into m->a (m->mu held, or the thread not started). Returns NVML's answer to the
 * utilization query: without it there is no sample. */
static nvmlReturn_t sample_locked(ls_gpu_monitor *m) {
    const nvml_api *api = &m->api;
    nvmlUtilization_t u;
    nvmlMemory_t mem;
    unsigned int v;
    nvmlReturn_t r = api->utilization(m->dev, &u);
    if (r != NVML_SUCCESS) return r;
    acc *a = &m->a;
    a->n++;
    a->util += u.gpu;
    a->mem_util += u.memory;
    if (api->memory(m->dev, &mem) == NVML_SUCCESS) {
        if (mem.used > a->mem_used_max) a->mem_used_max = mem.used;
        a->mem_total = mem.total;
    }
    if (api->power && api->power(m->dev, &v) == NVML_SUCCESS) {
        a->n_power++;
        a->power += v / 1000.0;
    }
    if (api->temperature && api->temperature(m->dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) {
        if (!a->n_temp || v > a->temp_max) a->temp_max = v;
        a->n_temp++;
    }
    if (api->clock && api->clock(m->dev, NVML_CLOCK_SM, &v) == NVML_SUCCESS) {
        a->n_clock++;
        a->clock += v;
    }
    return NVML_SUCCESS;
}

static void *sampler(void *arg) {
    ls_gpu_monitor *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) { /* the first sample was taken at the start: wait, then sample */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long ns = ts.tv_nsec + (long long)m->interval_ms * 1000000LL;
        ts.tv_sec += (time_t)(ns / 1000000000LL);
        ts.tv_nsec = (long)(ns % 1000000000LL);
        while (!m->stop) {
            int rc = pthread_cond_timedwait(&m->cv, &m->mu, &ts);
            if (rc == ETIMEDOUT) break;
            if (rc != 0) { /* cannot wait on the clock (never seen on Linux): sleep instead of spinning */
                pthread_mutex_unlock(&m->mu);
                struct timespec d = {m->interval_ms / 1000, (long)(m->interval_ms % 1000) * 1000000L};
                nanosleep(&d, NULL);
                pthread_mutex_lock(&m->mu);
                break;
            }
        }
        if (!m->stop) (void)sample_locked(m);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Finish a monitor whose api is loaded and dev found: name, a first utilization query, power
 * limit, the thread. */
static ls_status monitor_begin(ls_gpu_monitor *m, int interval_ms, ls_gpu_monitor **out) {
    const nvml_api *api = &m->api;
    unsigned int v;
    if (!api->name || api->name(m->dev, m->name, sizeof m->name) != NVML_SUCCESS)
        snprintf(m->name, sizeof m->name, "GPU");
    m->name[sizeof m->name - 1] = '\0';
    nvmlReturn_t r = sample_locked(m); /* the first sample; the thread is not started yet */
    if (r != NVML_SUCCESS) {           /* e.g. a MIG slice or a vGPU: no figures to show, and the user is told */
        ls_status s = ls_error(LS_ERR_UNSUPPORTED, "GPU monitoring: NVML gives no utilization for %s (%s): %s", m->name,
                               m->device_id, nvml_str(api, r));
        nvml_unload(&m->api);
        free(m);
        return s;
    }
    m->power_limit_w = api->power_limit && api->power_limit(m->dev, &v) == NVML_SUCCESS ? v / 1000.0 : -1;
    m->interval_ms = interval_ms;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&m->mu, NULL);
    if (pthread_create(&m->thread, NULL, sampler, m) != 0) {
        ls_gpu_monitor_stop(m);
        return ls_error(LS_ERR_INTERNAL, "GPU monitoring: cannot start the sampling thread");
    }
    m->thread_started = 1;
    *out = m;
    return LS_OK;
}

static ls_status check_interval(int interval_ms) {
    if (interval_ms < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "GPU monitoring: the interval must be >= 1 ms (got %d)", interval_ms);
    return LS_OK;
}

/* Load NVML and find the GPU: by PCI bus id when bus is given, else by NVML index; who names it
 * in errors. */
static ls_status monitor_open(const char *bus, unsigned index, const char *who, int interval_ms, ls_gpu_monitor **out) {
    ls_gpu_monitor *m = calloc(1, sizeof *m);
    if (!m) return ls_error(LS_ERR_OUT_OF_MEMORY, "GPU monitoring: no memory");
    ls_status s = nvml_load(&m->api);
    if (s != LS_OK) {
        free(m);
        return s;
    }
    if (bus)
        snprintf(m->device_id, sizeof m->device_id, "%.63s", bus);
    else
        snprintf(m->device_id, sizeof m->device_id, "nvml:%u", index);
    nvmlReturn_t r = bus ? m->api.by_pci(bus, &m->dev) : m->api.by_index(index, &m->dev);
    if (r != NVML_SUCCESS) {
        s = ls_error(LS_ERR_DEVICE, "GPU monitoring: NVML %s %s: %s", bus ? "does not know" : "has no", who,
                     nvml_str(&m->api, r));
        nvml_unload(&m->api);
        free(m);
        return s;
    }
    return monitor_begin(m, interval_ms, out);
}

ls_status ls_gpu_monitor_start_index(unsigned nvml_index, int interval_ms, ls_gpu_monitor **out) {
    LS_CHECK_ARG(out, "ls_gpu_monitor_start_index: out is NULL");
    char who[32];
    *out = NULL;
    LS_CHECK(check_interval(interval_ms));
    snprintf(who, sizeof who, "GPU %u", nvml_index);
    return monitor_open(NULL, nvml_index, who, interval_ms, out);
}

ls_status ls_gpu_monitor_start(ls_device dev, int interval_ms, ls_gpu_monitor **out) {
    LS_CHECK_ARG(out, "ls_gpu_monitor_start: out is NULL");
    *out = NULL;
    char bus[256], dstr[32], who[320];
    if (dev.type != LS_DEVICE_CUDA)
        return ls_error(LS_ERR_UNSUPPORTED, "GPU monitoring: %s is not a GPU", ls_device_str(dev, dstr, sizeof dstr));
    LS_CHECK(check_interval(interval_ms));
    if (ls_device_probe_pci_bus_id(dev.index, bus, (int)sizeof bus) != 0)
        return ls_error(LS_ERR_DEVICE, "GPU monitoring: no PCI bus id for %s: %s",
                        ls_device_str(dev, dstr, sizeof dstr), bus);
    snprintf(who, sizeof who, "%s (PCI %s)", ls_device_str(dev, dstr, sizeof dstr), bus);
    return monitor_open(bus, 0, who, interval_ms, out);
}

ls_status ls_gpu_monitor_read(ls_gpu_monitor *m, ls_gpu_stats *out) {
    LS_CHECK_ARG(m && out, "ls_gpu_monitor_read: %s is NULL", !m ? "the monitor" : "out");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    if (m->a.n == 0) (void)sample_locked(m);
    acc a = m->a;
    memset(&m->a, 0, sizeof m->a);
    pthread_mutex_unlock(&m->mu);
    snprintf(out->name, sizeof out->name, "%s", m->name);
    snprintf(out->device_id, sizeof out->device_id, "%s", m->device_id);
    out->samples = a.n;
    out->power_limit_w = m->power_limit_w;
    out->mem_used = a.mem_used_max;
    out->mem_total = a.mem_total;
    out->util_pct = a.n ? a.util / a.n : -1;
    out->mem_util_pct = a.n ? a.mem_util / a.n : -1;
    out->power_w = a.n_power ? a.power / a.n_power : -1;
    out->temp_c = a.n_temp ? a.temp_max : -1;
    out->sm_clock_mhz = a.n_clock ? a.clock / a.n_clock : -1;
    if (!a.n) return ls_error(LS_ERR_DEVICE, "GPU monitoring: NVML gave no utilization for %s", m->name);
    return LS_OK;
}

void ls_gpu_monitor_stop(ls_gpu_monitor *m) {
    if (!m) return;
    if (m->thread_started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    nvml_unload(&m->api);
    free(m);
}

const char *ls_gpu_stats_format(const ls_gpu_stats *s, char *buf, int len) {
    size_t n = (size_t)len, k = 0;
    if (!len) return buf;
    buf[0] = '\0';
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (k < n) {                                                                                                   \
            int w_ = snprintf(buf + k, n - k, __VA_ARGS__);                                                            \
            if (w_ > 0) k += (size_t)w_;                                                                               \
        }                                                                                                              \
    } while (0)
    ADD("gpu %.0f%% busy (memory %.0f%%)", s->util_pct, s->mem_util_pct);
    if (s->mem_total)
        ADD(", %.1f GiB used of %.1f GiB", (double)s->mem_used / 1073741824.0, (double)s->mem_total / 1073741824.0);
    if (s->power_w >= 0) {
        ADD(", %.0f W", s->power_w);
        if (s->power_limit_w > 0) ADD(" of %.0f W", s->power_limit_w);
    }
    if (s->temp_c >= 0) ADD(", %.0f C", s->temp_c);
    if (s->sm_clock_mhz >= 0) ADD(", %.0f MHz", s->sm_clock_mhz);
#undef ADD
    return buf;
}

ls_status ls_gpu_monitor_interval_from_env(int *interval_ms) {
    LS_CHECK_ARG(interval_ms, "ls_gpu_monitor_interval_from_env: interval_ms is NULL");
    *interval_ms = 500;
    const char *e = getenv("LOCKSTEP_GPU_MONITOR");
    if (!e || !*e) return LS_OK;
    if (!strcmp(e, "off")) {
        *interval_ms = 0;
        return LS_OK;
    }
    long long v; /* digits only: strtol took a space and a '+' */
    if (!ls_parse_count(e, 3600000, &v))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "LOCKSTEP_GPU_MONITOR='%s': use a sampling interval in milliseconds (e.g. 500), or 0 or off",
                        e);
    *interval_ms = (int)v;
    return LS_OK;
}
