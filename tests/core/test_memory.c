/* test_memory.c: size parsing, live/peak statistics, and the cap's out-of-memory error, which
 * must name the request, the cap (and where it came from) and the peak; a free of what is not a live allocation warns.
 * The hint changed on one thread while another is refused: each error carries one whole hint. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "testutil.h"

/* two hints of a kind the allocator keeps (up to 511 bytes), apart in every byte */
#define HINT_A100 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define HINT_B100 "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
#define HINT_A HINT_A100 HINT_A100 HINT_A100 HINT_A100 "AAAA: a smaller --batch-size"
#define HINT_B HINT_B100 HINT_B100 HINT_B100 HINT_B100 HINT_B100

static atomic_int hints_done;
static void *set_hints(void *arg) {
    ls_allocator *a = arg;
    for (int i = 0; i < 20000; i++) ls_allocator_set_oom_hint(a, i % 2 ? HINT_A : HINT_B);
    atomic_store(&hints_done, 1);
    return NULL;
}

/* The cap's error read the hint after the allocator's lock was let go: a data race with
 * ls_allocator_set_oom_hint on another thread (ThreadSanitizer), and a hint cut or mixed from two. */
static void test_hint_while_refused(void) {
    ls_allocator *a;
    LS_REQUIRE_OK(ls_host_allocator_create(1 << 20, &a));
    ls_allocator_set_oom_hint(a, HINT_A);
    pthread_t th;
    LS_REQUIRE(pthread_create(&th, NULL, set_hints, a) == 0);
    int bad = 0, n = 0;
    do {
        void *p = NULL;
        if (ls_alloc(a, 2 << 20, "big", &p) != LS_ERR_OUT_OF_MEMORY) {
            bad++;
            break;
        }
        const char *e = strstr(ls_last_error(), "the peak so far is 0 B. ");
        e = e ? e + strlen("the peak so far is 0 B. ") : "";
        if (strcmp(e, HINT_A) && strcmp(e, HINT_B)) {
            if (!bad) fprintf(stderr, "hint cut or mixed: '%s'\n", ls_last_error());
            bad++;
        }
        n++;
    } while (!atomic_load(&hints_done));
    pthread_join(th, NULL);
    LS_EXPECT(bad == 0 && n > 0);
    ls_allocator_destroy(a);
}

int main(void) {
    size_t n;
    LS_REQUIRE_OK(ls_memory_parse_size("2GiB", &n));
    LS_EXPECT(n == 2147483648u);
    LS_REQUIRE_OK(ls_memory_parse_size("512MiB", &n));
    LS_EXPECT(n == 536870912u);
    LS_REQUIRE_OK(ls_memory_parse_size("1.5GB", &n));
    LS_EXPECT(n == 1500000000u);
    LS_REQUIRE_OK(ls_memory_parse_size("4096", &n));
    LS_EXPECT(n == 4096);
    LS_REQUIRE_OK(ls_memory_parse_size("64k", &n));
    LS_EXPECT(n == 65536);
    LS_EXPECT_ERR(ls_memory_parse_size("lots", &n), LS_ERR_INVALID_ARGUMENT, "memory size 'lots'");
    LS_EXPECT_ERR(ls_memory_parse_size("3 parsecs", &n), LS_ERR_INVALID_ARGUMENT, "unknown unit");
    LS_EXPECT_ERR(ls_memory_parse_size("-1GiB", &n), LS_ERR_INVALID_ARGUMENT, "memory size");
    /* strtod's other forms: hexadecimal was taken ("0x100000": 1 MiB), and a fraction of a byte cut */
    LS_EXPECT_ERR(ls_memory_parse_size("0x100000", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory size '0x100000' is not a number of bytes with an optional unit");
    LS_EXPECT_ERR(ls_memory_parse_size(" 8MiB", &n), LS_ERR_INVALID_ARGUMENT, "is not a number of bytes");
    LS_EXPECT_ERR(ls_memory_parse_size("1.5", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory size '1.5' is not a whole number of bytes");
    LS_EXPECT_ERR(ls_memory_parse_size("2.5B", &n), LS_ERR_INVALID_ARGUMENT, "not a whole number of bytes");
    /* too large and an unknown unit were one message ("has an unknown unit or is too large"): each
     * is said apart, the unit quoted (a trailing space shows) */
    LS_EXPECT_ERR(ls_memory_parse_size("99999999999TiB", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory size '99999999999TiB' is too large: more than 1.8e19 bytes");
    /* past a double's range: too large too (it was "not a number of bytes"); below it, 0 bytes */
    LS_EXPECT_ERR(ls_memory_parse_size("1e400", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory size '1e400' is too large: more than 1.8e19 bytes");
    LS_EXPECT_ERR(ls_memory_parse_size("1e400GiB", &n), LS_ERR_INVALID_ARGUMENT, "'1e400GiB' is too large");
    LS_REQUIRE_OK(ls_memory_parse_size("1e-400", &n));
    LS_EXPECT(n == 0);
    LS_EXPECT_ERR(ls_memory_parse_cap("1e-400MiB", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory cap '1e-400MiB' is less than a byte");
    LS_EXPECT_ERR(ls_memory_parse_size("2GiB ", &n), LS_ERR_INVALID_ARGUMENT,
                  "memory size '2GiB ' has an unknown unit 'GiB ' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
    LS_EXPECT_ERR(ls_memory_parse_size("2 kilobytes", &n), LS_ERR_INVALID_ARGUMENT, "has an unknown unit 'kilobytes'");
    LS_REQUIRE_OK(ls_memory_parse_size("1e3", &n));
    LS_EXPECT(n == 1000);
    LS_REQUIRE_OK(ls_memory_parse_size(".5KiB", &n));
    LS_EXPECT(n == 512);

    /* LOCKSTEP_GPU_MEMORY's fraction in decimal digits: strtod took "reserve:0x.8" for a half, and
     * a space or '+'; an empty item at either end was skipped (one between spaces was refused) */
    ls_gpu_memory_policy pol;
    LS_REQUIRE_OK(ls_gpu_memory_policy_parse("reserve:.5", &pol));
    LS_EXPECT(pol.reserve_fraction == 0.5 && pol.reserve_bytes == 0 && pol.limit == 0);
    LS_REQUIRE_OK(ls_gpu_memory_policy_parse("limit:2GiB,reserve:5e-1", &pol));
    LS_EXPECT(pol.reserve_fraction == 0.5 && pol.limit == (size_t)2 << 30);
    LS_REQUIRE_OK(ls_gpu_memory_policy_parse("reserve:0.5GiB", &pol));
    LS_EXPECT(pol.reserve_fraction == 0 && pol.reserve_bytes == (size_t)1 << 29);
    static const char *const not_fraction[] = {"reserve:0x.8", "reserve: 0.5", "reserve:+0.5", "reserve:1e-400"};
    for (size_t i = 0; i < sizeof not_fraction / sizeof not_fraction[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "LOCKSTEP_GPU_MEMORY: '%s' wants a fraction of the free memory in (0, 1] or a size",
                 not_fraction[i]);
        LS_EXPECT_ERR(ls_gpu_memory_policy_parse(not_fraction[i], &pol), LS_ERR_INVALID_ARGUMENT, want);
    }
    LS_EXPECT_ERR(ls_gpu_memory_policy_parse("reserve:2", &pol), LS_ERR_INVALID_ARGUMENT,
                  "'reserve:2': a number alone is a fraction of the free memory, in (0, 1]");
    /* a size's own fault is said: "limit:0" and a size too large only "wanted a size" */
    LS_EXPECT_ERR(ls_gpu_memory_policy_parse("limit:0", &pol), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY: 'limit:0' wants a size (limit:48GiB): memory cap '0' is less than a byte");
    LS_EXPECT_ERR(ls_gpu_memory_policy_parse("limit:48GiB,reserve:0B", &pol), LS_ERR_INVALID_ARGUMENT,
                  "'reserve:0B' wants a fraction of the free memory in (0, 1] or a size (reserve:0.9, reserve:20GiB): "
                  "'0B' reserves nothing (for no reservation, leave reserve out)");
    LS_EXPECT_ERR(ls_gpu_memory_policy_parse("limit:99999999999TiB", &pol), LS_ERR_INVALID_ARGUMENT,
                  "'limit:99999999999TiB' wants a size (limit:48GiB): memory size '99999999999TiB' is too large");
    LS_EXPECT_ERR(ls_gpu_memory_policy_parse("reserve:20GiB,limit:1GiB ", &pol), LS_ERR_INVALID_ARGUMENT,
                  "'limit:1GiB ' wants a size (limit:48GiB): memory size '1GiB ' has an unknown unit 'GiB '");
    LS_EXPECT_ERR(
        ls_gpu_memory_policy_parse("reserve:lots", &pol), LS_ERR_INVALID_ARGUMENT,
        "'reserve:lots' wants a fraction of the free memory in (0, 1] or a size (reserve:0.9, reserve:20GiB): "
        "memory size 'lots' is not a number of bytes");
    static const char *const empty_item[] = {"grow,", ",grow", "limit:2GiB,,grow", "grow, "};
    for (size_t i = 0; i < sizeof empty_item / sizeof empty_item[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "LOCKSTEP_GPU_MEMORY='%s' holds an empty item", empty_item[i]);
        LS_EXPECT_ERR(ls_gpu_memory_policy_parse(empty_item[i], &pol), LS_ERR_INVALID_ARGUMENT, want);
    }

    ls_allocator *a;
    LS_REQUIRE_OK(ls_host_allocator_create(10 << 20, &a)); /* 10 MiB cap */
    void *p1, *p2, *p3;
    LS_REQUIRE_OK(ls_alloc(a, 4 << 20, "first", &p1));
    LS_REQUIRE_OK(ls_alloc(a, 3 << 20, "second", &p2));
    memset(p1, 1, 4 << 20);
    ls_memory_stats st;
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == (7u << 20) && st.peak_bytes == (7u << 20) && st.allocs == 2);
    ls_free(a, p1);
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == (3u << 20) && st.peak_bytes == (7u << 20) && st.frees == 1);
    ls_allocator_set_oom_hint(a, "try a smaller --batch-size");
    LS_EXPECT_ERR(ls_alloc(a, 8 << 20, "activations of layer 3", &p3), LS_ERR_OUT_OF_MEMORY,
                  "out of memory on cpu: cannot allocate 8.00 MiB for activations of layer 3; the cap is "
                  "10.00 MiB, 3.00 MiB is already in use, the peak so far is 7.00 MiB. try a smaller --batch-size");
    LS_EXPECT(p3 == NULL);
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == (3u << 20)); /* a failed request changes nothing */
    LS_REQUIRE_OK(ls_alloc(a, 7 << 20, "fits exactly", &p3));
    ls_free(a, p3);
    ls_allocator_reset_peak(a);
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.peak_bytes == (3u << 20));
    /* many small allocations exercise the pointer table's growth */
    void *ptrs[1000];
    for (int i = 0; i < 1000; i++) LS_REQUIRE_OK(ls_alloc(a, (size_t)i, "small", &ptrs[i]));
    for (int i = 0; i < 1000; i += 2) ls_free(a, ptrs[i]);
    for (int i = 1; i < 1000; i += 2) ls_free(a, ptrs[i]);
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == (3u << 20));
    /* freeing what is not a live allocation frees nothing and says so (stderr to a file here) */
    fflush(stderr);
    int saved = dup(2);
    FILE *log = tmpfile();
    LS_REQUIRE(saved >= 0 && log);
    dup2(fileno(log), 2);
    ls_free(a, (char *)p2 + 64);
    ls_free(a, p1); /* freed above */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[1024] = "";
    rewind(log);
    size_t got = fread(text, 1, sizeof text - 1, log);
    text[got] = 0;
    fclose(log);
    LS_EXPECT(strstr(text, "is not a live allocation of the host allocator") != NULL);
    LS_EXPECT(strstr(strstr(text, "nothing freed") + 1, "nothing freed") != NULL); /* twice */
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == (3u << 20) && st.frees == 1002);
    ls_free(a, p2);
    ls_allocator_destroy(a);

    setenv("LOCKSTEP_MEMORY_LIMIT", "1MiB", 1);
    LS_REQUIRE_OK(ls_host_allocator_create_from_env(&a));
    LS_EXPECT_ERR(ls_alloc(a, 2 << 20, "big", &p1), LS_ERR_OUT_OF_MEMORY,
                  "the cap is 1.00 MiB (LOCKSTEP_MEMORY_LIMIT=1MiB), 0 B is already in use");
    /* a cap set with its source says it; changed to another size, the source is no longer said */
    ls_allocator_set_cap_from(a, 3 << 20, "--memory-cap 3MiB");
    LS_EXPECT_ERR(ls_alloc(a, 4 << 20, "big", &p1), LS_ERR_OUT_OF_MEMORY, "the cap is 3.00 MiB (--memory-cap 3MiB),");
    ls_allocator_set_cap(a, 2 << 20);
    LS_EXPECT_ERR(ls_alloc(a, 4 << 20, "big", &p1), LS_ERR_OUT_OF_MEMORY, "the cap is 2.00 MiB, 0 B");
    ls_allocator_set_cap(a, 3 << 20);
    LS_EXPECT_ERR(ls_alloc(a, 4 << 20, "big", &p1), LS_ERR_OUT_OF_MEMORY, "the cap is 3.00 MiB (--memory-cap 3MiB),");
    ls_allocator_destroy(a);
    setenv("LOCKSTEP_MEMORY_LIMIT", "plenty", 1);
    LS_EXPECT_ERR(ls_host_allocator_create_from_env(&a), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_MEMORY_LIMIT: memory size 'plenty'");
    unsetenv("LOCKSTEP_MEMORY_LIMIT");
    test_hint_while_refused();
    LS_TEST_END();
}
