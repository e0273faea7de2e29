/* device_probe_none.c: the probe of a build without CUDA: never a GPU. */
#include <stdio.h>

#include "device_probe.h"

int ls_device_probe_cuda(char *why, int why_len) {
    snprintf(why, (size_t)why_len, "this build of lockstep has no CUDA support (LOCKSTEP_CUDA=OFF)");
    return 0;
}

int ls_device_probe_built(void) { return 0; }

int ls_device_probe_pci_bus_id(int ordinal, char *buf, int len) {
    snprintf(buf, (size_t)len, "this build of lockstep has no CUDA support");
    return -1;
}
