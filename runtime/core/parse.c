/* parse.c: decimal numbers of LOCKSTEP_* variables, checked character by character before
 * strtoll/strtod read them (see parse.h). */
#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }

int ls_parse_count(const char *s, long long max, long long *out) {
    if (!s || !is_digit(*s)) return 0;
    long long v = 0;
    for (; is_digit(*s); s++) {
        /* v * 10 + digit <= max; max - digit < 0 (a max below 9) divided by 10 rounded up to 0 */
        if (max - (*s - '0') < 0 || v > (max - (*s - '0')) / 10) return 0;
        v = v * 10 + (*s - '0');
    }
    if (*s) return 0;
    *out = v;
    return 1;
}

int ls_parse_decimal(const char *s, double *out) {
    if (!s) return 0;
    const char *p = s;
    int digits = 0;
    for (; is_digit(*p); p++) digits++;
    if (*p == '.')
        for (p++; is_digit(*p); p++) digits++;
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!is_digit(*p)) return 0;
        while (is_digit(*p)) p++;
    }
    if (*p) return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end != p) return 0;
    if (errno == ERANGE && v < 1) return 0; /* underflow: a number that is not 0 */
    if (errno == ERANGE) v = HUGE_VAL;
    *out = v;
    return 1;
}
