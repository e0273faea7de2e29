/* strvec.c: the growable, NULL-terminated string vector lockstep-run builds argv in. Running out
 * of memory ends the launcher (it is a process of its own, not the library). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

static void oom(void) {
    fprintf(stderr, "lockstep-run: out of memory\n");
    exit(1);
}

static void push_owned(lsr_strvec *sv, char *s) {
    if (sv->n + 2 > sv->cap) {
        size_t cap = sv->cap ? 2 * sv->cap : 16;
        char **v = realloc(sv->v, cap * sizeof *v);
        if (!v) oom();
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = s;
    sv->v[sv->n] = NULL;
}

void lsr_strvec_push(lsr_strvec *sv, const char *s) {
    char *copy = strdup(s);
    if (!copy) oom();
    push_owned(sv, copy);
}

void lsr_strvec_pushf(lsr_strvec *sv, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) oom();
    char *s = malloc((size_t)len + 1);
    if (!s) oom();
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    push_owned(sv, s);
}

int lsr_strvec_contains(const lsr_strvec *sv, const char *s) {
    for (size_t i = 0; i < sv->n; i++)
        if (!strcmp(sv->v[i], s)) return 1;
    return 0;
}

void lsr_strvec_free(lsr_strvec *sv) {
    for (size_t i = 0; i < sv->n; i++) free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = sv->cap = 0;
}
