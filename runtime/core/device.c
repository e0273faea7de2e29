/* device.c: parsing and selection of the compute device. The CUDA probe itself lives in
 * device_probe_cuda.c or device_probe_none.c, whichever the build chose. */
#include "device.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_probe.h"
#include "log.h"

ls_status ls_device_parse(const char *s, ls_device *out) {
    LS_CHECK_ARG(out, "ls_device_parse: out is NULL");
    if (!s) return ls_error(LS_ERR_INVALID_ARGUMENT, "device string is missing");
    if (strcmp(s, "cpu") == 0) {
        *out = ls_device_cpu();
        return LS_OK;
    }
    if (strcmp(s, "cuda") == 0) {
        out->type = LS_DEVICE_CUDA;
        out->index = -1;
        return LS_OK;
    }
    /* digits only: strtol took "cuda: 1" and "cuda:+1" for cuda:1 */
    if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
        char *end = NULL;
        errno = 0;
        long idx = strtol(s + 5, &end, 10);
        if (errno == 0 && *end == '\0' && idx >= 0 && idx < 1024) {
            out->type = LS_DEVICE_CUDA;
            out->index = (int)idx;
            return LS_OK;
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "device '%s' is not one of cpu, cuda, cuda:N", s);
}

const char *ls_device_str(ls_device d, char *buf, int len) {
    if (d.type == LS_DEVICE_CPU)
        snprintf(buf, (size_t)len, "cpu");
    else if (d.type == LS_DEVICE_CUDA)
        snprintf(buf, (size_t)len, "cuda:%d", d.index);
    else /* no such type: named as what it is, not as a GPU */
        snprintf(buf, (size_t)len, "unknown device type %d", (int)d.type);
    return buf;
}

int ls_device_cuda_count(char *why, int why_len) {
    char reason[256] = "";
    int n = ls_device_probe_cuda(reason, sizeof reason);
    if (n <= 0) {
        n = 0;
        if (why && why_len > 0) snprintf(why, (size_t)why_len, "%s", reason);
    }
    return n;
}

ls_status ls_device_select(const char *request, int local_rank, ls_device *out) {
    LS_CHECK_ARG(out, "ls_device_select: out is NULL");
    /* the caller's request is named by the caller (a program's --device); the variable is named here */
    const char *source = "asked for";
    int from_env = 0;
    if (!request || !*request) {
        request = getenv("LOCKSTEP_DEVICE");
        source = "LOCKSTEP_DEVICE asks for";
        from_env = 1;
    }
    char why[256] = "";
    if (!request || !*request || strcmp(request, "auto") == 0) {
        int n = ls_device_cuda_count(why, sizeof why);
        if (n > 0) {
            out->type = LS_DEVICE_CUDA;
            out->index = (local_rank < 0 ? 0 : local_rank) % n;
        } else {
            *out = ls_device_cpu();
            /* A CUDA build without a usable GPU says so once per node (its first rank, once per
             * process: like a warning from torch, without one per rank); a CPU-only build has
             * nothing to report. */
            static atomic_int said = 0;
            if (ls_device_probe_built() && local_rank <= 0 && atomic_exchange(&said, 1) == 0)
                LS_LOG_W("no usable CUDA device (%s); running on the CPU", why);
            else
                LS_LOG_D("running on the CPU: %s", why);
        }
        return LS_OK;
    }
    ls_device d;
    if (ls_device_parse(request, &d) != LS_OK) { /* auto, taken above, is one too (its list left it out) */
        ls_error(LS_ERR_INVALID_ARGUMENT, "device '%s' is not one of auto, cpu, cuda, cuda:N", request);
        return from_env ? ls_error_context(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_DEVICE") : LS_ERR_INVALID_ARGUMENT;
    }
    if (d.type == LS_DEVICE_CUDA) {
        int n = ls_device_cuda_count(why, sizeof why);
        if (n == 0)
            return ls_error(LS_ERR_DEVICE, "%s device '%s' but no CUDA device is usable: %s", source, request, why);
        if (d.index < 0) d.index = (local_rank < 0 ? 0 : local_rank) % n;
        if (d.index >= n)
            return ls_error(LS_ERR_DEVICE, "%s device '%s' but only %d CUDA device%s visible", source, request, n,
                            n == 1 ? " is" : "s are");
    }
    *out = d;
    return LS_OK;
}

ls_status ls_env_tf32(int *on) {
    LS_CHECK_ARG(on, "ls_env_tf32: on is NULL");
    const char *v = getenv("LOCKSTEP_TF32");
    *on = v && (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true"));
    if (v && *v && !*on && strcmp(v, "0") && strcmp(v, "off") && strcmp(v, "false"))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "LOCKSTEP_TF32=%s: expected 1, on or true (TF32 tensor cores for f32 GEMMs), or 0, off or "
                        "false",
                        v);
    return LS_OK;
}
