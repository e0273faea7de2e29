/* device_probe.h (internal): how many CUDA devices this process can use. One of
 * device_probe_cuda.c / device_probe_none.c is compiled, chosen by the build. */
#ifndef LOCKSTEP_DEVICE_PROBE_H
#define LOCKSTEP_DEVICE_PROBE_H
/* Returns the count (>= 0); when 0, why receives the reason. */
int ls_device_probe_cuda(char *why, int why_len);
/* The PCI bus id ("0000:3b:00.0") of CUDA device ordinal into buf: 0; else -1 with the reason in buf. */
int ls_device_probe_pci_bus_id(int ordinal, char *buf, int len);
/* 1 when this build has the CUDA backend. */
int ls_device_probe_built(void);
#endif
