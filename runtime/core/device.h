/* device.h: which device a rank computes on. A device is (type, index); selection follows
 * LOCKSTEP_DEVICE=cpu|cuda|cuda:N, else the CUDA device local_rank mod visible devices when a
 * usable GPU exists, else the CPU (like torch.cuda.is_available()). */
#ifndef LOCKSTEP_DEVICE_H
#define LOCKSTEP_DEVICE_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_device_type { LS_DEVICE_CPU = 0, LS_DEVICE_CUDA = 1 } ls_device_type;

typedef struct ls_device {
    ls_device_type type;
    int index; /* CUDA ordinal; 0 for the CPU */
} ls_device;

static inline ls_device ls_device_cpu(void) {
    ls_device d = {LS_DEVICE_CPU, 0};
    return d;
}
static inline int ls_device_equal(ls_device a, ls_device b) { return a.type == b.type && a.index == b.index; }

/* Parse "cpu", "cuda" (index -1: pick by local rank) or "cuda:N". */
ls_status ls_device_parse(const char *s, ls_device *out);
/* "cpu" or "cuda:N" into buf. */
const char *ls_device_str(ls_device d, char *buf, int len);

/* Number of CUDA devices usable by this process: 0 when the build has no CUDA, there is no
 * driver, or no GPU. If why is not NULL it receives the reason when the count is 0. */
int ls_device_cuda_count(char *why, int why_len);

/* Choose the device for this rank. request: a device string or NULL/"" for LOCKSTEP_DEVICE,
 * then automatic. Asking for cuda where there is none is LS_ERR_DEVICE with the reason. */
ls_status ls_device_select(const char *request, int local_rank, ls_device *out);

/* LOCKSTEP_TF32: *on = 1 for 1, on or true (TF32 tensor cores for f32 GEMMs on a GPU), 0 for 0, off,
 * false or unset; any other value is an error naming it. Read by the CUDA backend, and checked by
 * every context on any device (a typo is found where the job script is tried). */
ls_status ls_env_tf32(int *on);

#ifdef __cplusplus
}
#endif
#endif
