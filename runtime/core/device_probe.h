/* device_probe.h (internal): how many CUDA devices this process can use. One of
 * device_probe_cuda.c / device_probe_none.c is compiled, chosen by the build. */
#ifndef LOCKSTEP_DEVICE_PROBE_H
#define LOCKSTEP_DEVICE_PROBE_H
/* Returns the count (>= 0); when 0, why receives the reason. */
int ls_device_probe_cuda(char *why, int why_len);
/* 1 when this build has the CUDA backend. */
int ls_device_probe_built(void);
#endif
