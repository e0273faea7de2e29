/* test_malloc_tuning.c [on|off|refused]: the host allocator tunes glibc's malloc once (ls_malloc_tune
 * in memory.c) so that a block of up to 32 MiB freed and asked for again each step stays in the heap
 * instead of going back to the kernel: a 20 MiB buffer must come from the heap (mallinfo2's
 * hblkhd, the bytes in mmapped blocks, does not grow), and a freed one must not be trimmed away
 * (arena stays). "off" (run with LOCKSTEP_MALLOC_TUNING=0, and =off): glibc's defaults, the 20 MiB
 * block mmapped ("off" left the tuning on without a word). "refused" (run with
 * LOCKSTEP_MALLOC_TUNING=maybe): the allocator is not made, and the error names the variable and
 * its value. Skipped (77) without glibc or under AddressSanitizer or ThreadSanitizer, whose malloc is
 * their own. */
#include <stdio.h>
#include <string.h>

#include "memory.h"
#include "testutil.h"

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include <malloc.h>

int main(int argc, char **argv) {
    const int on = !(argc > 1 && strcmp(argv[1], "off") == 0);
    ls_allocator *a;
    if (argc > 1 && strcmp(argv[1], "refused") == 0) {
        a = NULL;
        LS_EXPECT(ls_host_allocator_create(0, &a) == LS_ERR_INVALID_ARGUMENT && a == NULL);
        printf("refused: %s\n", ls_last_error());
        LS_EXPECT(strstr(ls_last_error(), "LOCKSTEP_MALLOC_TUNING=maybe: expected 0, off or false") != NULL);
        LS_TEST_END();
    }
    LS_REQUIRE_OK(ls_host_allocator_create(0, &a));
    struct mallinfo2 before = mallinfo2();
    void *p;
    LS_REQUIRE_OK(ls_alloc(a, 20u << 20, "a step's buffer", &p));
    memset(p, 1, 20u << 20);
    struct mallinfo2 live = mallinfo2();
    size_t mapped = live.hblkhd - before.hblkhd;
    ls_free(a, p);
    struct mallinfo2 after = mallinfo2();
    printf("%s: 20 MiB buffer: %zu bytes mmapped; after its free the heap holds %zu bytes, %zu free\n",
           on ? "tuned" : "glibc's defaults", mapped, after.arena, after.fordblks);
    if (on) {
        LS_EXPECT(mapped == 0);                 /* from the heap, not a fresh mmap */
        LS_EXPECT(after.fordblks >= 20u << 20); /* kept for the next step, not trimmed */
    } else {
        LS_EXPECT(mapped >= 20u << 20); /* the threshold glibc starts with (128 KiB) */
    }
    ls_allocator_destroy(a);
    LS_TEST_END();
}
#else
int main(void) { LS_SKIP("glibc's malloc is not the one in use"); }
#endif
