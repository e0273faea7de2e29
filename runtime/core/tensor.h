/* tensor.h: a tensor is a data structure only: a pointer, a shape (row-major, up to 4 dims),
 * a dtype and the device the bytes live on. Owned tensors come from an allocator; views borrow.
 * Copies between devices are explicit (ls_tensor_copy). Computation lives in kernels/. */
#ifndef LOCKSTEP_TENSOR_H
#define LOCKSTEP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "memory.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LS_MAX_DIMS 4

typedef enum ls_dtype {
    LS_F32 = 0,
    LS_F16 = 1,
    LS_BF16 = 2,
    LS_F64 = 3, /* CPU reference and gradient checks */
    LS_I32 = 4,
    LS_U8 = 5
} ls_dtype;

typedef struct ls_tensor {
    void *data;
    int64_t shape[LS_MAX_DIMS]; /* unused dims are 1 */
    int ndim;
    ls_dtype dtype;
    ls_device device;
    ls_allocator *alloc; /* owner of data; NULL for a view */
    int holders;         /* objects that keep this tensor to use later (an optimizer over it): while
                          * not 0, ls_tensor_destroy refuses to free it, and so does ls_module_destroy
                          * a module with such a parameter */
} ls_tensor;

size_t ls_dtype_size(ls_dtype t);
const char *ls_dtype_name(ls_dtype t);
/* Parse "f32|fp32|float32", "f16|fp16", "bf16", "f64". */
ls_status ls_dtype_parse(const char *s, ls_dtype *out);

/* Allocate a tensor on the allocator's device; what names it in out-of-memory errors. */
ls_status ls_tensor_create(ls_allocator *a, ls_dtype dtype, int ndim, const int64_t *shape, const char *what,
                           ls_tensor **out);
/* Free data (if owned) and the struct. NULL is fine. A tensor with holders (an optimizer made over
 * it, not yet destroyed) is left as it is, not freed: the error is logged and in ls_last_error. */
void ls_tensor_destroy(ls_tensor *t);
/* A borrowed view of existing memory. A rank outside 0..LS_MAX_DIMS (or shape NULL with a rank
 * above 0) gives an invalid view: data NULL, ndim -1, numel 0, of no shape a call expects. */
ls_tensor ls_tensor_view(void *data, ls_dtype dtype, ls_device device, int ndim, const int64_t *shape);

int64_t ls_tensor_numel(const ls_tensor *t);
size_t ls_tensor_nbytes(const ls_tensor *t);
int ls_tensor_same_shape(const ls_tensor *a, const ls_tensor *b);
/* "[128, 784] f32 cpu" into buf. */
const char *ls_tensor_describe(const ls_tensor *t, char *buf, int len);

/* Byte copy between tensors of equal dtype and element count, on any devices; alloc supplies
 * the transfer when either side is on a device (NULL: both must be host). */
ls_status ls_tensor_copy(ls_allocator *alloc, ls_tensor *dst, const ls_tensor *src);
/* Set every byte to zero (through the owning allocator, or memset for host views). */
ls_status ls_tensor_zero(ls_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
