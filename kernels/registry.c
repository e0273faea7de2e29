/* registry.c: the one place that knows which backends this build has. Maps a device type to
 * its op table; every other file asks here instead of testing build flags. */
#include "ops.h"

extern const ls_ops ls_cpu_ops;
#if LOCKSTEP_CUDA
extern const ls_ops ls_cuda_ops;
#endif

const ls_ops *ls_ops_for(ls_device_type type) {
    switch (type) {
    case LS_DEVICE_CPU: return &ls_cpu_ops;
    case LS_DEVICE_CUDA:
#if LOCKSTEP_CUDA
        return &ls_cuda_ops;
#else
        return NULL;
#endif
    }
    return NULL;
}
