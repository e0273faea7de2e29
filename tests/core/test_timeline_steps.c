/* test_timeline_steps.c: which steps a timeline records, and an earlier run's trace kept. The
 * values of LOCKSTEP_TIMELINE_STEPS (N, FIRST:LAST, FIRST:, all, none for the default bound) read,
 * and bad ones refused naming the variable; a window FIRST:LAST records its steps and what runs
 * between them, nothing before, and closes the file after its last step (valid JSON at once, no
 * close called), a later open refused until ls_timeline_close; a count records the first N steps
 * whatever their numbers (a resumed run's); a window the run starts past records no step; no
 * window set records every step; the default bound stops after LS_TIMELINE_DEFAULT_STEPS steps
 * with one warning naming the file and the variable; ls_timeline_keep_earlier moves a non-empty
 * file aside to <stem>.prevK<ext> (K from 1, the first free), content intact, and leaves a missing
 * or empty file and a device alone. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "testutil.h"
#include "timeline.h"

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    LS_REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* The file's step spans ("step N") as the numbers N in order, "," between them ("3,4,5"), and
 * how many spans are called other; -1 in *n_other where the file is not one whole JSON array. */
static void steps_of(const char *path, const char *other, char *out, size_t len, int *n_other) {
    char *text = ls_test_slurp(path);
    LS_REQUIRE(text);
    cJSON *a = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    out[0] = 0;
    *n_other = -1;
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(a);
        return;
    }
    *n_other = 0;
    const cJSON *e;
    size_t o = 0;
    cJSON_ArrayForEach(e, a) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph")), "X") != 0) continue;
        if (!strncmp(name, "step ", 5))
            o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", name + 5);
        else if (!strcmp(name, other))
            (*n_other)++;
    }
    cJSON_Delete(a);
}

/* Steps from..to as the trainer takes them: begin, the step's span, a span after it (an
 * evaluation), end. */
static void run_steps(int64_t from, int64_t to) {
    for (int64_t s = from; s <= to; s++) {
        ls_timeline_step_begin(s);
        double t = ls_timeline_now();
        char name[32];
        snprintf(name, sizeof name, "step %lld", (long long)s);
        if (ls_timeline_active()) ls_timeline_span(name, "step", t, t + 1);
        ls_timeline_span("between", "test", t + 1, t + 2);
        ls_timeline_step_end(s);
    }
}

static void expect_steps(const char *path, const char *want, int want_between) {
    char got[8192];
    int between;
    steps_of(path, "between", got, sizeof got, &between);
    if (strcmp(got, want) || between != want_between) {
        fprintf(stderr, "%s: steps '%s' and %d spans between, expected '%s' and %d\n", path, got, between, want,
                want_between);
        ls_test_failures++;
    }
}

static void parse_ok(const char *v, int64_t count, int64_t first, int64_t last, int by_default) {
    ls_timeline_steps w;
    memset(&w, 0x55, sizeof w);
    ls_status s = ls_timeline_steps_parse(v, &w);
    if (s != LS_OK || w.count != count || w.first != first || w.last != last || w.by_default != by_default) {
        fprintf(stderr, "'%s': %s, count %lld first %lld last %lld default %d\n", v ? v : "(null)", ls_last_error(),
                (long long)w.count, (long long)w.first, (long long)w.last, w.by_default);
        ls_test_failures++;
    }
}

static void parse_bad(const char *v, const char *msg) {
    ls_timeline_steps w;
    char want[256];
    snprintf(want, sizeof want, "LOCKSTEP_TIMELINE_STEPS='%s': %s", v, msg);
    LS_EXPECT_ERR(ls_timeline_steps_parse(v, &w), LS_ERR_INVALID_ARGUMENT, want);
}

int main(void) {
    /* the values */
    parse_ok(NULL, LS_TIMELINE_DEFAULT_STEPS, 0, 0, 1);
    parse_ok("", LS_TIMELINE_DEFAULT_STEPS, 0, 0, 1);
    parse_ok("5", 5, 0, 0, 0);
    parse_ok("3:7", 0, 3, 7, 0);
    parse_ok("4:4", 0, 4, 4, 0);
    parse_ok("3:", 0, 3, INT64_MAX, 0);
    parse_ok("all", 0, 1, INT64_MAX, 0);
    parse_ok("9223372036854775807", INT64_MAX, 0, 0, 0);
    const char *forms = "use N (the first N steps), FIRST:LAST or FIRST: (steps by number, from 1), or all";
    const char *bad[] = {"x",
                         "-1",
                         "+3",
                         " 3",
                         "3 ",
                         "0x10",
                         "1e3",
                         ":5",
                         "3:x",
                         "1:2:3",
                         "3:-4",
                         "ALL",
                         "3.5",
                         "99999999999999999999",
                         "1:99999999999999999999",
                         "0:4"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) parse_bad(bad[i], forms);
    parse_bad("0", "0 steps records nothing (unset LOCKSTEP_TIMELINE for no trace)");
    parse_bad("7:3", "the last step, 3, is before the first, 7");

    char dir[] = "/tmp/ls_timeline_steps_XXXXXX";
    LS_REQUIRE(mkdtemp(dir));
    char path[300], path2[300];
    snprintf(path, sizeof path, "%s/w.json", dir);
    snprintf(path2, sizeof path2, "%s/other.json", dir);
    ls_timeline_steps w;

    /* a window: steps 3 to 5 and what runs between them; the file is closed after step 5 */
    LS_EXPECT_ERR(ls_timeline_set_steps(&w), LS_ERR_INVALID_ARGUMENT, "timeline: no trace is open");
    LS_REQUIRE_OK(ls_timeline_steps_parse("3:5", &w));
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    LS_REQUIRE_OK(ls_timeline_set_steps(&w));
    LS_EXPECT(!ls_timeline_active()); /* before step 3 */
    ls_timeline_span("setup", "test", 1, 2);
    run_steps(1, 5);
    LS_EXPECT(!ls_timeline_active() && ls_timeline_is_open());
    expect_steps(path, "3,4,5", 3); /* whole JSON before any close */
    run_steps(6, 8);
    LS_EXPECT_ERR(ls_timeline_open(path2, 0), LS_ERR_INVALID_ARGUMENT, "w.json' ended after its steps; close it first");
    LS_REQUIRE_OK(ls_timeline_close());
    LS_EXPECT(!ls_timeline_is_open());
    expect_steps(path, "3,4,5", 3);
    {
        char *text = ls_test_slurp(path);
        LS_EXPECT(text && !strstr(text, "\"setup\"") && strstr(text, "\n]\n") &&
                  !strstr(strstr(text, "\n]\n") + 3, "]"));
        free(text);
    }

    /* FIRST: has no end; closed by ls_timeline_close */
    LS_REQUIRE_OK(ls_timeline_steps_parse("2:", &w));
    unlink(path); /* not kept as w.prevK.json */
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    LS_REQUIRE_OK(ls_timeline_set_steps(&w));
    run_steps(1, 4);
    LS_EXPECT(ls_timeline_active());
    LS_REQUIRE_OK(ls_timeline_close());
    expect_steps(path, "2,3,4", 3);

    /* a count: the first 2 steps this process takes, numbered as a resumed run numbers them; what
     * comes before the first step (the trainer's setup) is recorded too */
    LS_REQUIRE_OK(ls_timeline_steps_parse("2", &w));
    unlink(path); /* not kept as w.prevK.json */
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    LS_REQUIRE_OK(ls_timeline_set_steps(&w));
    ls_timeline_span("between", "test", 1, 2);
    run_steps(11, 14);
    LS_REQUIRE_OK(ls_timeline_close());
    expect_steps(path, "11,12", 3);

    /* a run resumed past the window records no step, and closes the file at its first one */
    LS_REQUIRE_OK(ls_timeline_steps_parse("3:5", &w));
    unlink(path); /* not kept as w.prevK.json */
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    LS_REQUIRE_OK(ls_timeline_set_steps(&w));
    run_steps(9, 10);
    LS_EXPECT(!ls_timeline_active() && ls_timeline_is_open());
    expect_steps(path, "", 0);
    LS_REQUIRE_OK(ls_timeline_close());

    /* no window set (a program that opens its own trace): every step */
    unlink(path); /* not kept as w.prevK.json */
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    run_steps(1, 3);
    LS_REQUIRE_OK(ls_timeline_close());
    expect_steps(path, "1,2,3", 3);

    /* the default bound: LS_TIMELINE_DEFAULT_STEPS steps, then one warning naming the file, the
     * bound and how to record more (rank 0; the run goes on) */
    {
        char logp[320];
        snprintf(logp, sizeof logp, "%s/log", dir);
        int saved = ls_test_stderr_to(logp);
        ls_log_set_level(LS_LOG_WARN);
        LS_REQUIRE_OK(ls_timeline_steps_parse(NULL, &w));
        unlink(path); /* not kept as w.prevK.json */
        LS_REQUIRE_OK(ls_timeline_open(path, 0));
        LS_REQUIRE_OK(ls_timeline_set_steps(&w));
        run_steps(1, LS_TIMELINE_DEFAULT_STEPS + 20);
        LS_EXPECT(!ls_timeline_active());
        LS_REQUIRE_OK(ls_timeline_close());
        ls_test_stderr_back(saved);
        char want[8192];
        int n = 0;
        for (int s = 1; s <= LS_TIMELINE_DEFAULT_STEPS; s++)
            n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", s > 1 ? "," : "", s);
        expect_steps(path, want, LS_TIMELINE_DEFAULT_STEPS);
        char *log = ls_test_slurp(logp);
        char line[1024];
        snprintf(line, sizeof line,
                 "timeline: %d steps recorded in '%s', the default bound: the trace ends here and the run goes on "
                 "(LOCKSTEP_TIMELINE_STEPS=N records the first N steps, FIRST:LAST a window, all every step)\n",
                 LS_TIMELINE_DEFAULT_STEPS, path);
        const char *hit = log ? strstr(log, line) : NULL;
        if (!hit || strstr(hit + 1, "timeline:")) {
            fprintf(stderr, "the default bound's log, expected once:\n%s\ngot:\n%s\n", line, log ? log : "(none)");
            ls_test_failures++;
        }
        free(log);
        unlink(logp);
    }

    /* the default bound's bytes: a model whose steps write much (hundreds of modules, gradient
     * accumulation) stops at the end of the step that passes max_bytes, a whole JSON array, with
     * one warning naming the size and the variable; an explicit value has no byte bound */
    {
        LS_REQUIRE_OK(ls_timeline_steps_parse(NULL, &w));
        LS_EXPECT(w.max_bytes == LS_TIMELINE_DEFAULT_BYTES && LS_TIMELINE_DEFAULT_BYTES == 256LL << 20);
        LS_REQUIRE_OK(ls_timeline_steps_parse("all", &w));
        LS_EXPECT(w.max_bytes == 0);
        LS_REQUIRE_OK(ls_timeline_steps_parse("7", &w));
        LS_EXPECT(w.max_bytes == 0);
        char logp[320];
        snprintf(logp, sizeof logp, "%s/log", dir);
        int saved = ls_test_stderr_to(logp);
        ls_log_set_level(LS_LOG_WARN);
        LS_REQUIRE_OK(ls_timeline_steps_parse(NULL, &w));
        w.max_bytes = 1 << 20; /* a step here is 2 spans, about 230 bytes: past 1 MiB in step 4500 or so */
        w.count = 100000;      /* the bytes first */
        unlink(path);
        LS_REQUIRE_OK(ls_timeline_open(path, 0));
        LS_REQUIRE_OK(ls_timeline_set_steps(&w));
        run_steps(1, 8000);
        LS_EXPECT(!ls_timeline_active() && ls_timeline_is_open());
        LS_REQUIRE_OK(ls_timeline_close());
        ls_test_stderr_back(saved);
        static char got[65536], want[65536];
        int between;
        steps_of(path, "between", got, sizeof got, &between);
        struct stat st;
        LS_REQUIRE(stat(path, &st) == 0);
        int n = between; /* whole JSON (between >= 0); the steps 1..n, the file just past the bound */
        int o = 0;
        for (int s = 1; s <= n; s++) o += snprintf(want + o, sizeof want - (size_t)o, "%s%d", s > 1 ? "," : "", s);
        if (n < 2000 || n > 7000 || strcmp(got, want) || st.st_size < (1 << 20) || st.st_size > (1 << 20) + 4096) {
            fprintf(stderr, "the byte bound: steps '%s', %d between, %lld bytes\n", got, between,
                    (long long)st.st_size);
            ls_test_failures++;
        }
        char *log = ls_test_slurp(logp);
        char line[1024];
        snprintf(line, sizeof line,
                 "timeline: %d steps recorded in '%s', %.1f MiB, past the default bound of 1 MiB: the trace ends "
                 "here and the run goes on (LOCKSTEP_TIMELINE_STEPS=N records the first N steps, FIRST:LAST a "
                 "window, all every step)\n",
                 n, path, (double)st.st_size / (1 << 20));
        const char *hit = log ? strstr(log, line) : NULL;
        if (!hit || strstr(hit + 1, "timeline:")) {
            fprintf(stderr, "the byte bound's log, expected once:\n%s\ngot:\n%s\n", line, log ? log : "(none)");
            ls_test_failures++;
        }
        free(log);
        unlink(logp);
    }

    /* an earlier run's trace is moved aside, not written over */
    char aside[300], want[320];
    LS_REQUIRE_OK(ls_timeline_keep_earlier(path2, aside, (int)sizeof aside)); /* none there */
    LS_EXPECT(aside[0] == 0);
    spit(path2, "");
    LS_REQUIRE_OK(ls_timeline_keep_earlier(path2, aside, (int)sizeof aside)); /* empty: nothing to keep */
    LS_EXPECT(aside[0] == 0 && access(path2, F_OK) == 0);
    spit(path2, "[first]");
    LS_REQUIRE_OK(ls_timeline_keep_earlier(path2, aside, (int)sizeof aside));
    snprintf(want, sizeof want, "%s/other.prev1.json", dir);
    LS_EXPECT(!strcmp(aside, want) && access(path2, F_OK) != 0);
    char *text = ls_test_slurp(want);
    LS_EXPECT(text && !strcmp(text, "[first]"));
    free(text);
    spit(path2, "[second]");
    LS_REQUIRE_OK(ls_timeline_keep_earlier(path2, aside, (int)sizeof aside));
    snprintf(want, sizeof want, "%s/other.prev2.json", dir);
    LS_EXPECT(!strcmp(aside, want));
    text = ls_test_slurp(want);
    LS_EXPECT(text && !strcmp(text, "[second]"));
    free(text);
    {
        char noext[300];
        snprintf(noext, sizeof noext, "%s/tl", dir);
        spit(noext, "x");
        LS_REQUIRE_OK(ls_timeline_keep_earlier(noext, aside, (int)sizeof aside));
        snprintf(want, sizeof want, "%s/tl.prev1", dir);
        LS_EXPECT(!strcmp(aside, want));
        unlink(want);
        char tiny[8];
        spit(noext, "x");
        LS_EXPECT_ERR(ls_timeline_keep_earlier(noext, tiny, (int)sizeof tiny), LS_ERR_INVALID_ARGUMENT,
                      "/tl': the name to move it to is too long");
        unlink(noext);
    }
    LS_REQUIRE_OK(ls_timeline_keep_earlier("/dev/null", aside, (int)sizeof aside)); /* not a file of ours */
    LS_EXPECT(aside[0] == 0);

    /* ls_timeline_open keeps it too (a program that opens its own trace, as the trainer does for
     * LOCKSTEP_TIMELINE): a trace written twice to one name has the first run's bytes, exactly, in
     * <stem>.prev1<ext>, said once as a warning (rank 0); an open refused (one is open) moves nothing */
    {
        char api[300], prev[320], prev2[320], logp[320];
        snprintf(api, sizeof api, "%s/api.json", dir);
        snprintf(prev, sizeof prev, "%s/api.prev1.json", dir);
        snprintf(prev2, sizeof prev2, "%s/api.prev2.json", dir);
        snprintf(logp, sizeof logp, "%s/log", dir);
        LS_REQUIRE_OK(ls_timeline_open(api, 0));
        ls_timeline_span("first run", "test", 1, 2);
        LS_REQUIRE_OK(ls_timeline_close());
        char *first = ls_test_slurp(api);
        LS_REQUIRE(first && strstr(first, "\"first run\""));
        int saved = ls_test_stderr_to(logp);
        ls_log_set_level(LS_LOG_WARN);
        LS_REQUIRE_OK(ls_timeline_open(api, 0));
        LS_EXPECT_ERR(ls_timeline_open(api, 0), LS_ERR_INVALID_ARGUMENT, "api.json' is already being written");
        ls_timeline_span("second run", "test", 1, 2);
        LS_REQUIRE_OK(ls_timeline_close());
        ls_test_stderr_back(saved);
        char *kept = ls_test_slurp(prev), *second = ls_test_slurp(api), *log = ls_test_slurp(logp);
        if (!kept || strcmp(kept, first) != 0) {
            fprintf(stderr, "'%s' should hold the first run's trace:\n%s\ngot:\n%s\n", prev, first,
                    kept ? kept : "(no file)");
            ls_test_failures++;
        }
        LS_EXPECT(second && strstr(second, "\"second run\"") && !strstr(second, "\"first run\""));
        LS_EXPECT(access(prev2, F_OK) != 0); /* the refused open moved nothing */
        char line[1024];
        snprintf(line, sizeof line, "timeline: the earlier trace in '%s' is kept as '%s'\n", api, prev);
        const char *hit = log ? strstr(log, line) : NULL;
        if (!hit || strstr(hit + 1, "timeline:")) {
            fprintf(stderr, "the kept trace's log, expected once:\n%s\ngot:\n%s\n", line, log ? log : "(none)");
            ls_test_failures++;
        }
        free(first);
        free(kept);
        free(second);
        free(log);
        unlink(logp);
        unlink(prev);
        unlink(api);
    }

    snprintf(want, sizeof want, "%s/other.prev1.json", dir);
    unlink(want);
    snprintf(want, sizeof want, "%s/other.prev2.json", dir);
    unlink(want);
    unlink(path2);
    unlink(path);
    rmdir(dir);
    LS_TEST_END();
}
