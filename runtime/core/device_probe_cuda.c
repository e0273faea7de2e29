/* device_probe_cuda.c: counts CUDA devices through the runtime API; a missing driver or GPU
 * is a count of 0 with the runtime's own words as the reason. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "device_probe.h"

int ls_device_probe_cuda(char *why, int why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* The runtime says "CUDA driver version is insufficient" also where there is no driver at
         * all (it could not load libcuda.so.1): a machine without a GPU was told to upgrade one */
        void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (lib) dlclose(lib);
        const int kernel = access("/proc/driver/nvidia/version", F_OK) == 0;
        if (e == cudaErrorInsufficientDriver && !lib)
            snprintf(why, (size_t)why_len, "%s: libcuda.so.1 not found%s (%s)",
                     kernel ? "the NVIDIA driver's library is missing" : "no NVIDIA driver on this machine",
                     kernel ? "" : ", no /proc/driver/nvidia", cudaGetErrorName(e));
        else
            snprintf(why, (size_t)why_len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError(); /* clear the sticky error so later probes see the same */
        return 0;
    }
    if (n == 0) snprintf(why, (size_t)why_len, "the CUDA driver sees no GPU");
    return n;
}

int ls_device_probe_pci_bus_id(int ordinal, char *buf, int len) {
    cudaError_t e = cudaDeviceGetPCIBusId(buf, len, ordinal);
    if (e != cudaSuccess) {
        snprintf(buf, (size_t)len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

int ls_device_probe_built(void) { return 1; }
