/* fake_nvml.c: a stand-in for the driver's libnvidia-ml.so.1 with the NVML calls lockstep's GPU
 * monitor makes, for test_gpumon and test_gpu_report on machines without an NVIDIA driver. Each
 * utilization query counts a sample; the figures follow from the count, so a test knows what the
 * monitor must report. Device 0: utilization 80% (memory 30%), memory in use 1 GiB per sample of
 * 140 GiB, temperature 60 C + samples - 1, 455.25 W of a 700 W limit, SM clock 1980 MHz. Device 1:
 * 90% (40%), 1 GiB more in use, 10 C warmer, 500 W, 1900 MHz. FAKE_NVML_INIT=fail makes
 * nvmlInit_v2 fail with NVML_ERROR_DRIVER_NOT_LOADED (9); FAKE_NVML_NO_POWER=1 and
 * FAKE_NVML_NO_UTIL=1 report power or utilization as NVML_ERROR_NOT_SUPPORTED (3). Devices are
 * found by index (0, 1) or by PCI bus id: 0000:3b:00.0 or $FAKE_NVML_BUS_ID is device 0. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

static int the_devices[2];
#define DEV(d) ((d) == (nvmlDevice_t)&the_devices[1] ? 1 : 0)
#define KNOWN(d) ((d) == (nvmlDevice_t)&the_devices[0] || (d) == (nvmlDevice_t)&the_devices[1])
static unsigned long long calls; /* utilization queries so far */
static int started;

#define EXPORT __attribute__((visibility("default")))

EXPORT nvmlReturn_t nvmlInit_v2(void);
EXPORT nvmlReturn_t nvmlShutdown(void);
EXPORT const char *nvmlErrorString(nvmlReturn_t r);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d);
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len);
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t);
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw);
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw);
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz);

nvmlReturn_t nvmlInit_v2(void) {
    const char *e = getenv("FAKE_NVML_INIT");
    if (e && !strcmp(e, "fail")) return 9;
    started = 1;
    calls = 0;
    return 0;
}
nvmlReturn_t nvmlShutdown(void) {
    started = 0;
    return 0;
}
const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (!started) return 1;
    if (i > 1) return 2;
    *d = (nvmlDevice_t)&the_devices[i];
    return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d) {
    if (!started) return 1;
    const char *other = getenv("FAKE_NVML_BUS_ID");
    if (strcmp(bus, "0000:3b:00.0") != 0 && !(other && !strcmp(bus, other))) return 2;
    *d = (nvmlDevice_t)&the_devices[0];
    return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    if (!KNOWN(d)) return 2;
    strncpy(name, "Fake GPU 141GB", len);
    return 0;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    if (!KNOWN(d)) return 2;
    const char *e = getenv("FAKE_NVML_NO_UTIL");
    if (e && *e == '1') return 3;
    __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    u->gpu = DEV(d) ? 90 : 80;
    u->memory = DEV(d) ? 40 : 30;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    m->total = 140ULL << 30;
    m->used = (calls + (unsigned long long)DEV(d)) << 30;
    m->free = m->total - m->used;
    return 0;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t) {
    if (sensor != 0) return 2;
    *t = (unsigned int)(60 + 10 * DEV(d) + calls - 1);
    return 0;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    const char *e = getenv("FAKE_NVML_NO_POWER");
    if (e && *e == '1') return 3;
    *mw = DEV(d) ? 500000 : 455250;
    return 0;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    *mw = 700000;
    return 0;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    if (type != 1) return 2;
    *mhz = DEV(d) ? 1900 : 1980;
    return 0;
}
