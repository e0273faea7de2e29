/* emu_registry.c: linked into the example programs built for the emulator (fashion_mlp_emu and
 * the others, tests/gpu/CMakeLists.txt), so that the whole program runs on an emulated GPU.
 * liblockstep asks two of its own functions which devices exist and which op table a device has
 * (registry.c's ls_ops_for, device_probe_cuda.c's probe); a program that defines them itself
 * replaces them for the library too (the ELF dynamic linker binds the library's calls, made
 * through its PLT, to the program's definitions). Here a CUDA device, cuda:0, exists, and its op
 * table is the CUDA backend translated for the emulator (emu_ls_cuda_ops): the library's own code
 * (device selection, the trainer, the reducer, checkpoints) runs unchanged over the backend's own
 * code, its kernels emulated, its cuBLAS and cuDNN calls answered by the stand-ins and its memory
 * from the backend's caching allocator over the emulated runtime. */
#include <stdio.h>

#include "device_probe.h"
#include "ops.h"

extern const ls_ops ls_cpu_ops;
extern const ls_ops emu_ls_cuda_ops;

const ls_ops *ls_ops_for(ls_device_type type) {
    switch (type) {
    case LS_DEVICE_CPU: return &ls_cpu_ops;
    case LS_DEVICE_CUDA: return &emu_ls_cuda_ops;
    }
    return NULL;
}

int ls_device_probe_cuda(char *why, int why_len) {
    (void)why, (void)why_len;
    return 1;
}

int ls_device_probe_pci_bus_id(int ordinal, char *buf, int len) {
    (void)ordinal;
    snprintf(buf, (size_t)len, "the device is emulated: it has none");
    return -1;
}

int ls_device_probe_built(void) { return 1; }
