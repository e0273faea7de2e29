/* test_timeline.c: the timeline module on its own: file names per rank (LOCKSTEP_TIMELINE's
 * patterns); nothing recorded while closed; a second open and an uncreatable file refused with
 * errors naming them; spans from the main thread and two others (one named before its first span,
 * one renamed after), a lane shared by two threads, names with quotes, backslashes, control
 * characters and invalid UTF-8 made safe, long names cut to 63 bytes without splitting a
 * character; a flush leaving whole events on disk; the file parsed back (valid UTF-8, one JSON
 * array and nothing after it) with every event where it belongs; a reopened timeline starting its
 * rows afresh; ls_timeline_close_nowait closing it alike; a failed write reported at close, and
 * after one seen at a flush the file still open (ls_timeline_is_open) though nothing more is
 * recorded. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "timeline.h"

static void check_path(const char *pattern, int rank, int world, const char *want) {
    char out[256];
    LS_EXPECT(ls_timeline_path(pattern, rank, world, out, (int)sizeof out) == 0);
    if (strcmp(out, want)) {
        fprintf(stderr, "ls_timeline_path('%s', %d, %d) = '%s', expected '%s'\n", pattern, rank, world, out, want);
        ls_test_failures++;
    }
}

/* The file's text; the test stops where there is none. */
static char *slurp(const char *path) {
    char *b = ls_test_slurp(path);
    LS_REQUIRE(b);
    return b;
}

/* The events of a closed timeline file, parsed: valid UTF-8, one array, nothing after it. */
static cJSON *parse(const char *path) {
    char *text = slurp(path);
    LS_REQUIRE(mbstowcs(NULL, text, 0) != (size_t)-1);
    cJSON *a = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    LS_REQUIRE(cJSON_IsArray(a));
    return a;
}

static const char *str(const cJSON *e, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(e, k)); }
static int num(const cJSON *e, const char *k) { return cJSON_GetObjectItem(e, k)->valueint; }

/* The row named name (thread_name metadata), or -1. The last naming wins, as in the viewers. */
static int row_of(const cJSON *a, const char *name) {
    int tid = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!strcmp(str(e, "ph"), "M") && !strcmp(str(e, "name"), "thread_name") &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")), name))
            tid = num(e, "tid");
    }
    return tid;
}

/* The span called name: its row, or -1 (-2 when there are several). */
static int span_row(const cJSON *a, const char *name) {
    int tid = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!strcmp(str(e, "ph"), "X") && !strcmp(str(e, "name"), name)) tid = tid == -1 ? num(e, "tid") : -2;
    }
    return tid;
}

static void *worker_named_first(void *arg) {
    (void)arg;
    ls_timeline_thread_name("worker \"a\"");
    double t = ls_timeline_now();
    ls_timeline_span("work a", "test", t, t + 5);
    ls_timeline_lane_span("shared lane", "from a", "test", t, t + 1);
    return NULL;
}

static void *worker_renamed(void *arg) {
    (void)arg;
    double t = ls_timeline_now();
    ls_timeline_span("work b", "test", t, t + 5);
    ls_timeline_thread_name("worker b");
    ls_timeline_lane_span("shared lane", "from b", "test", t + 2, t + 3);
    return NULL;
}

int main(void) {
    LS_REQUIRE(setlocale(LC_CTYPE, "C.UTF-8")); /* for mbstowcs's UTF-8 check */
    check_path("tl.json", 0, 1, "tl.json");
    check_path("tl.json", 1, 2, "tl.rank1.json");
    check_path("out/tl.json", 0, 4, "out/tl.rank0.json");
    check_path("out.d/tl", 3, 4, "out.d/tl.rank3");
    check_path("tl", 1, 2, "tl.rank1");
    check_path("dir/.hidden", 1, 2, "dir/.hidden.rank1");
    check_path("t%r/x.json", 12, 16, "t12/x.json");
    check_path("x-%r.json", 0, 1, "x-0.json");
    /* every %r (only the first was replaced: "tl0%r.json") */
    check_path("run%r/tl%r.json", 3, 4, "run3/tl3.json");
    check_path("%r%r", 10, 16, "1010");
    char tiny[8];
    /* a restart's trace beside the failed attempt's (it truncated it) */
    {
        char out[256];
        LS_EXPECT(ls_timeline_path_restart("tl.json", 1, 2, 2, out, (int)sizeof out) == 0 &&
                  !strcmp(out, "tl.rank1.restart2.json"));
        LS_EXPECT(ls_timeline_path_restart("d.x/tl", 0, 1, 1, out, (int)sizeof out) == 0 &&
                  !strcmp(out, "d.x/tl.restart1"));
        LS_EXPECT(ls_timeline_path_restart("tl%r.json", 3, 4, 0, out, (int)sizeof out) == 0 &&
                  !strcmp(out, "tl3.json"));
    }
    LS_EXPECT(ls_timeline_path("long-name.json", 1, 2, tiny, (int)sizeof tiny) == -1);
    LS_EXPECT(ls_timeline_path("tl%r-%r.json", 1, 2, tiny, (int)sizeof tiny) == -1);
    LS_EXPECT(ls_timeline_path("abcd%r%r%r", 1, 2, tiny, (int)sizeof tiny) == 0 && !strcmp(tiny, "abcd111"));
    LS_EXPECT(ls_timeline_path("abcde%r%r%r", 1, 2, tiny, (int)sizeof tiny) == -1);

    char dir[] = "/tmp/ls_timeline_XXXXXX";
    LS_REQUIRE(mkdtemp(dir));
    char path[300], path2[300];
    snprintf(path, sizeof path, "%s/a.json", dir);
    snprintf(path2, sizeof path2, "%s/b.json", dir);

    /* closed: nothing happens */
    LS_EXPECT(!ls_timeline_active());
    ls_timeline_span("ignored", "test", 1, 2);
    LS_EXPECT(ls_timeline_close() == LS_OK);

    LS_EXPECT_ERR(ls_timeline_open("/nonexistent-dir/t.json", 0), LS_ERR_IO,
                  "timeline: cannot create '/nonexistent-dir/t.json': No such file or directory");
    LS_REQUIRE_OK(ls_timeline_open(path, 3));
    LS_EXPECT(ls_timeline_active());
    LS_EXPECT_ERR(ls_timeline_open(path2, 3), LS_ERR_INVALID_ARGUMENT, "is already being written; close it first");
    double t0 = ls_timeline_now();
    LS_EXPECT(t0 > 1.6e15); /* microseconds of the wall clock (after 2020) */
    ls_timeline_span("main \"quoted\" \\ and\ttab", "test", t0, t0 + 10);
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ls_timeline_span(longname, "test", t0, t0 - 5); /* a negative duration becomes 0 */
    /* 62 bytes and a 2-byte character: the character does not fit whole, so it is left out */
    char cut[80];
    memset(cut, 'a', 62);
    strcpy(cut + 62, "\xc3\xa9");
    ls_timeline_span(cut, "test", t0, t0 + 1);
    ls_timeline_span("caf\xc3\xa9 \xff\xc3 ok \xed\xa0\x80 \xf0\x9f\x98\x80", "test", t0, t0 + 1);
    /* flushed: the file on disk is whole events, an array once closed */
    ls_timeline_flush();
    {
        char *text = slurp(path);
        size_t n = strlen(text);
        LS_EXPECT(n > 2 && text[n - 1] == '}');
        char *closed = malloc(n + 3);
        LS_REQUIRE(closed);
        memcpy(closed, text, n);
        memcpy(closed + n, "\n]", 3);
        cJSON *partial = cJSON_ParseWithOpts(closed, NULL, 1);
        LS_EXPECT(cJSON_IsArray(partial));
        cJSON_Delete(partial);
        free(closed);
        free(text);
    }
    pthread_t a, b;
    LS_REQUIRE(pthread_create(&a, NULL, worker_named_first, NULL) == 0);
    pthread_join(a, NULL);
    LS_REQUIRE(pthread_create(&b, NULL, worker_renamed, NULL) == 0);
    pthread_join(b, NULL);
    LS_REQUIRE_OK(ls_timeline_close());
    LS_EXPECT(!ls_timeline_active());
    ls_timeline_span("after close", "test", t0, t0 + 1);

    cJSON *ev = parse(path);
    const cJSON *e;
    int spans = 0, bad_pid = 0, zero_dur = 0, long_ok = 0;
    cJSON_ArrayForEach(e, ev) {
        if (num(e, "pid") != 3) bad_pid++;
        if (strcmp(str(e, "ph"), "X")) continue;
        spans++;
        if (cJSON_GetObjectItem(e, "dur")->valuedouble == 0) zero_dur++;
        if (strlen(str(e, "name")) == 63 && str(e, "name")[62] == 'x') long_ok = 1;
    }
    LS_EXPECT(spans == 8 && bad_pid == 0 && zero_dur == 1 && long_ok);
    char cut62[64];
    memset(cut62, 'a', 62);
    cut62[62] = 0;
    LS_EXPECT(span_row(ev, cut62) == 1);
    /* a lone continuation, a cut sequence and a surrogate each become '_'; whole characters stay */
    LS_EXPECT(span_row(ev, "caf\xc3\xa9 __ ok ___ \xf0\x9f\x98\x80") == 1);
    LS_EXPECT(row_of(ev, "main") == 1);
    LS_EXPECT(span_row(ev, "main _quoted_ _ and_tab") == 1);
    int ra = row_of(ev, "worker _a_"), rb = row_of(ev, "worker b"), lane = row_of(ev, "shared lane");
    LS_EXPECT(ra > 1 && rb > 1 && ra != rb && lane >= 1000);
    LS_EXPECT(span_row(ev, "work a") == ra && span_row(ev, "work b") == rb);
    LS_EXPECT(span_row(ev, "from a") == lane && span_row(ev, "from b") == lane);
    LS_EXPECT(span_row(ev, "after close") == -1 && span_row(ev, "ignored") == -1);
    char *text = slurp(path);
    LS_EXPECT(
        strstr(text, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":3,\"tid\":0,\"args\":{\"name\":\"rank 3\"}}"));
    free(text);
    cJSON_Delete(ev);

    /* reopened: rows start afresh; this thread is "main" (row 1) again */
    LS_REQUIRE_OK(ls_timeline_open(path2, 0));
    ls_timeline_span("again", "test", t0, t0 + 1);
    LS_REQUIRE_OK(ls_timeline_close());
    ev = parse(path2);
    LS_EXPECT(row_of(ev, "main") == 1 && span_row(ev, "again") == 1 && row_of(ev, "worker b") == -1);
    cJSON_Delete(ev);

    /* ls_timeline_close_nowait (a rank aborting the job) closes it alike where no thread writes */
    unlink(path2); /* not kept as b.prev1.json */
    LS_REQUIRE_OK(ls_timeline_open(path2, 0));
    ls_timeline_span("before the abort", "test", t0, t0 + 1);
    LS_REQUIRE_OK(ls_timeline_close_nowait());
    LS_EXPECT(!ls_timeline_is_open() && !ls_timeline_active());
    LS_REQUIRE_OK(ls_timeline_close_nowait()); /* none open: nothing to do */
    ev = parse(path2);
    LS_EXPECT(span_row(ev, "before the abort") == 1);
    cJSON_Delete(ev);

    /* a write that fails is reported at close */
    if (access("/dev/full", W_OK) == 0) {
        LS_REQUIRE_OK(ls_timeline_open("/dev/full", 0));
        for (int i = 0; i < 2000; i++) ls_timeline_span("filler", "test", t0, t0 + 1);
        LS_EXPECT_ERR(ls_timeline_close(), LS_ERR_IO, "timeline: writing '/dev/full' failed: No space left on device");
        LS_EXPECT(!ls_timeline_is_open());
        /* a failed write seen at a flush stops the recording, the file staying open (a trainer
         * made after it takes it for its own, not for none: it failed, "already being written") */
        LS_REQUIRE_OK(ls_timeline_open("/dev/full", 0));
        LS_EXPECT(ls_timeline_active() && ls_timeline_is_open());
        ls_timeline_span("filler", "test", t0, t0 + 1);
        ls_timeline_flush();
        LS_EXPECT(!ls_timeline_active() && ls_timeline_is_open());
        LS_EXPECT_ERR(ls_timeline_open(path, 0), LS_ERR_INVALID_ARGUMENT, "'/dev/full' is already being written");
        LS_EXPECT_ERR(ls_timeline_close(), LS_ERR_IO, "timeline: writing '/dev/full' failed: No space left on device");
        LS_EXPECT(!ls_timeline_is_open());
    }
    unlink(path);
    unlink(path2);
    rmdir(dir);
    LS_TEST_END();
}
