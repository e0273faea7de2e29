/* tensor.c: creation, description and explicit copies of tensors. */
#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

size_t ls_dtype_size(ls_dtype t) {
    switch (t) {
    case LS_F32: return 4;
    case LS_F16: return 2;
    case LS_BF16: return 2;
    case LS_F64: return 8;
    case LS_I32: return 4;
    case LS_U8: return 1;
    }
    return 0;
}

const char *ls_dtype_name(ls_dtype t) {
    switch (t) {
    case LS_F32: return "f32";
    case LS_F16: return "f16";
    case LS_BF16: return "bf16";
    case LS_F64: return "f64";
    case LS_I32: return "i32";
    case LS_U8: return "u8";
    }
    return "?";
}

ls_status ls_dtype_parse(const char *s, ls_dtype *out) {
    LS_CHECK_ARG(out, "ls_dtype_parse: out is NULL");
    static const struct {
        const char *n;
        ls_dtype t;
    } names[] = {{"f32", LS_F32},  {"fp32", LS_F32},    {"float32", LS_F32}, {"f16", LS_F16},
                 {"fp16", LS_F16}, {"float16", LS_F16}, {"bf16", LS_BF16},   {"bfloat16", LS_BF16},
                 {"f64", LS_F64},  {"fp64", LS_F64},    {"float64", LS_F64}};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].n) == 0) {
            *out = names[i].t;
            return LS_OK;
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "dtype '%s' is not one of fp32, fp16, bf16, f64", s ? s : "(null)");
}

static ls_status ls_shape_check(int ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 0 || ndim > LS_MAX_DIMS)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "tensor rank %d is outside 0..%d", ndim, LS_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
        if (shape[i] && n > INT64_MAX / 8 / shape[i])
            return ls_error(LS_ERR_INVALID_ARGUMENT, "tensor shape overflows");
        n *= shape[i];
    }
    *numel = n;
    return LS_OK;
}

ls_tensor ls_tensor_view(void *data, ls_dtype dtype, ls_device device, int ndim, const int64_t *shape) {
    ls_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    if (ndim < 0 || ndim > LS_MAX_DIMS || (ndim > 0 && !shape)) { /* an invalid view: refused where used */
        t.data = NULL;
        t.ndim = -1;
        for (int i = 0; i < LS_MAX_DIMS; i++) t.shape[i] = 0;
        return t;
    }
    t.ndim = ndim;
    for (int i = 0; i < LS_MAX_DIMS; i++) t.shape[i] = i < ndim ? shape[i] : 1;
    return t;
}

ls_status ls_tensor_create(ls_allocator *a, ls_dtype dtype, int ndim, const int64_t *shape, const char *what,
                           ls_tensor **out) {
    LS_CHECK_ARG(a && out && (shape || ndim == 0), "ls_tensor_create: %s is NULL",
                 !a     ? "the allocator"
                 : !out ? "out"
                        : "shape");
    int64_t numel = 0;
    *out = NULL;
    LS_CHECK_ARG(ls_dtype_size(dtype) > 0, "%s: unknown dtype %d", what ? what : "tensor", (int)dtype);
    LS_CHECK(ls_shape_check(ndim, shape, &numel));
    ls_tensor *t = malloc(sizeof *t);
    if (!t) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a tensor descriptor");
    *t = ls_tensor_view(NULL, dtype, ls_allocator_device(a), ndim, shape);
    ls_status s = ls_alloc(a, (size_t)numel * ls_dtype_size(dtype), what, &t->data);
    if (s != LS_OK) {
        free(t);
        return s;
    }
    t->alloc = a;
    *out = t;
    return LS_OK;
}

void ls_tensor_destroy(ls_tensor *t) {
    if (!t) return;
    if (t->holders > 0) { /* its holder would use it, and write its count, after the free */
        char d[64];
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_tensor_destroy: the tensor (%s) is still held by %d object%s that use%s it later (an optimizer "
                 "over it, ls_optimizer_create): destroy %s first; the tensor is left as it is, not freed",
                 ls_tensor_describe(t, d, sizeof d), t->holders, t->holders == 1 ? "" : "s", t->holders == 1 ? "s" : "",
                 t->holders == 1 ? "it" : "them");
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    if (t->alloc) ls_free(t->alloc, t->data);
    free(t);
}

int64_t ls_tensor_numel(const ls_tensor *t) {
    if (t->ndim < 0 || t->ndim > LS_MAX_DIMS) return 0; /* an invalid view */
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t ls_tensor_nbytes(const ls_tensor *t) { return (size_t)ls_tensor_numel(t) * ls_dtype_size(t->dtype); }

int ls_tensor_same_shape(const ls_tensor *a, const ls_tensor *b) {
    if (a->ndim != b->ndim || a->ndim < 0 || a->ndim > LS_MAX_DIMS) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *ls_tensor_describe(const ls_tensor *t, char *buf, int len) {
    if (!buf || len <= 0) return "";
    if (t->ndim < 0 || t->ndim > LS_MAX_DIMS) {
        snprintf(buf, (size_t)len, "(an invalid view: made with a rank outside 0..%d)", LS_MAX_DIMS);
        return buf;
    }
    int n = snprintf(buf, (size_t)len, "[");
    for (int i = 0; i < t->ndim && n < len; i++)
        n += snprintf(buf + n, (size_t)(len - n), i ? ", %lld" : "%lld", (long long)t->shape[i]);
    char dev[32];
    if (n < len)
        snprintf(buf + n, (size_t)(len - n), "] %s %s", ls_dtype_name(t->dtype),
                 ls_device_str(t->device, dev, sizeof dev));
    return buf;
}

ls_status ls_tensor_copy(ls_allocator *alloc, ls_tensor *dst, const ls_tensor *src) {
    char a[64], b[64];
    LS_CHECK_ARG(dst && src, "ls_tensor_copy: %s is NULL", !dst ? "dst" : "src"); /* alloc may be */
    if (dst->ndim < 0 || src->ndim < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_tensor_copy: %s is %s", dst->ndim < 0 ? "dst" : "src",
                        ls_tensor_describe(dst->ndim < 0 ? dst : src, a, 64));
    if (dst->dtype != src->dtype || ls_tensor_numel(dst) != ls_tensor_numel(src))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "cannot copy %s into %s: dtype or size differ",
                        ls_tensor_describe(src, a, 64), ls_tensor_describe(dst, b, 64));
    int dd = dst->device.type != LS_DEVICE_CPU, sd = src->device.type != LS_DEVICE_CPU;
    if (!dd && !sd) {
        if (dst->data != src->data) memmove(dst->data, src->data, ls_tensor_nbytes(src));
        return LS_OK;
    }
    if (!alloc) alloc = dd ? dst->alloc : src->alloc;
    if (!alloc || ls_allocator_device(alloc).type == LS_DEVICE_CPU)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "copying %s into %s needs the device allocator, and none was given",
                        ls_tensor_describe(src, a, 64), ls_tensor_describe(dst, b, 64));
    return ls_allocator_copy(alloc, dst->data, dd, src->data, sd, ls_tensor_nbytes(src));
}

ls_status ls_tensor_zero(ls_tensor *t) {
    LS_CHECK_ARG(t, "ls_tensor_zero: the tensor is NULL");
    size_t n = ls_tensor_nbytes(t);
    if (t->device.type == LS_DEVICE_CPU) {
        if (n) memset(t->data, 0, n);
        return LS_OK;
    }
    if (!t->alloc) return ls_error(LS_ERR_INVALID_ARGUMENT, "cannot zero a device view without its allocator");
    return ls_allocator_set_zero(t->alloc, t->data, n);
}
