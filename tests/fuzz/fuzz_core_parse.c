/* fuzz_core_parse.c: libFuzzer target for runtime/core's parsers of LOCKSTEP_* values and flags:
 * the input, NUL-terminated (a NUL inside ends it early), goes to each of ls_parse_count (six
 * maxima), ls_parse_decimal, ls_memory_parse_size, ls_memory_parse_cap,
 * ls_gpu_memory_policy_parse, ls_device_parse, ls_log_level_parse and ls_dtype_parse. What one
 * accepts must be in its range (a count at most its max and the number its digits say, a size
 * at most 1.8e19 bytes, a cap at least a byte, a reserve fraction in (0, 1]); what one refuses
 * must say why. Built with clang -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "log.h"
#include "memory.h"
#include "parse.h"
#include "status.h"
#include "tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a refusal says why */
static void check(ls_status s) {
    if (s != LS_OK && !ls_last_error()[0]) abort();
    ls_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    static const long long maxima[] = {0, 5, 64, 1000, INT_MAX, LLONG_MAX};
    for (size_t i = 0; i < sizeof maxima / sizeof *maxima; i++) {
        long long v = -1;
        if (ls_parse_count(s, maxima[i], &v) &&
            (v < 0 || v > maxima[i] || strtoull(s, NULL, 10) != (unsigned long long)v))
            abort();
    }
    double d = -1;
    if (ls_parse_decimal(s, &d) && !(d >= 0)) abort();
    size_t bytes = 0, cap = 0;
    ls_status st = ls_memory_parse_size(s, &bytes);
    if (st == LS_OK && (double)bytes > 1.8e19) abort();
    check(st);
    st = ls_memory_parse_cap(s, &cap);
    if (st == LS_OK && (cap < 1 || ls_memory_parse_size(s, &bytes) != LS_OK || bytes != cap)) abort();
    check(st);
    ls_gpu_memory_policy pol;
    st = ls_gpu_memory_policy_parse(s, &pol);
    if (st == LS_OK && (!(pol.reserve_fraction >= 0 && pol.reserve_fraction <= 1) ||
                        (pol.reserve_fraction > 0 && pol.reserve_bytes > 0)))
        abort();
    check(st);
    ls_device dev;
    st = ls_device_parse(s, &dev);
    if (st == LS_OK && (dev.type == LS_DEVICE_CPU ? dev.index != 0
                                                  : dev.type != LS_DEVICE_CUDA || dev.index < -1 || dev.index >= 1024))
        abort();
    check(st);
    ls_log_level level;
    st = ls_log_level_parse(s, &level);
    if (st == LS_OK && (level < LS_LOG_ERROR || level > LS_LOG_DEBUG)) abort();
    check(st);
    ls_dtype t;
    st = ls_dtype_parse(s, &t);
    if (st == LS_OK && ls_dtype_size(t) == 0) abort();
    check(st);
    free(s);
    return 0;
}
