/* timeline_check.c: checks one rank's LOCKSTEP_TIMELINE file from a training run: the file is valid
 * UTF-8 and one JSON array of trace events, nothing after it; the process is "rank R"; the caller's
 * thread is "main"; every span has a name, a category, a start and a non-negative duration; the
 * steps are "step 1".."step N", each once, in order, on the main thread, not overlapping; each step
 * holds exactly one "forward", "backward" and "optimizer" span, in that order, and the module spans
 * ("Linear forward", ...) lie inside forward and backward spans. With several ranks (BUCKETS > 0):
 * every bucket has a row ("bucket 0", ...) with one all-reduce per step, bucket 0's launched inside
 * the step's backward (the exchange overlaps backward), each within its step; "mpi communication"
 * is a thread with MPI_Allreduce spans; and the step's "gradient all-reduce wait" comes after
 * backward. timeline_check FILE RANK STEPS BUCKETS Prints the first failures and exits 1, else a
 * summary and exits 0. */
#include <cjson/cJSON.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_fail.h"

typedef struct span {
    const char *name, *cat;
    int tid;
    double t0, t1;
} span;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int inside(const span *a, const span *outer) { return a->t0 >= outer->t0 && a->t1 <= outer->t1 + 0.001; }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: timeline_check FILE RANK STEPS BUCKETS\n");
        return 2;
    }
    const int rank = atoi(argv[2]), steps = atoi(argv[3]), buckets = atoi(argv[4]);
    char *text = slurp(argv[1]);
    if (!text) {
        printf("FAIL: cannot read %s\n", argv[1]);
        return 1;
    }
    if (!setlocale(LC_CTYPE, "C.UTF-8") || mbstowcs(NULL, text, 0) == (size_t)-1) {
        printf("FAIL: %s is not valid UTF-8 (or no C.UTF-8 locale to check it)\n", argv[1]);
        return 1;
    }
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    if (!cJSON_IsArray(root)) {
        printf("FAIL: %s is not one JSON array (with nothing after it)\n", argv[1]);
        return 1;
    }
    int n = cJSON_GetArraySize(root), ns = 0;
    span *sp = calloc((size_t)n, sizeof *sp);
    char thread_name[2048][64];
    memset(thread_name, 0, sizeof thread_name);
    const char *process = NULL;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_GetArrayItem(root, i);
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        cJSON *pid = cJSON_GetObjectItem(e, "pid"), *tid = cJSON_GetObjectItem(e, "tid");
        if (!ph || !name || !cJSON_IsNumber(pid) || !cJSON_IsNumber(tid) || tid->valueint < 0 ||
            tid->valueint >= 2048) {
            BAD("event %d lacks ph, name, pid or tid", i);
            continue;
        }
        if (pid->valueint != rank) BAD("event %d ('%s') has pid %d, not the rank %d", i, name, pid->valueint, rank);
        cJSON *args = cJSON_GetObjectItem(e, "args");
        if (!strcmp(ph, "M")) {
            const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(args, "name"));
            if (!strcmp(name, "process_name")) process = v;
            if (!strcmp(name, "thread_name") && v) snprintf(thread_name[tid->valueint], 64, "%s", v);
            continue;
        }
        cJSON *ts = cJSON_GetObjectItem(e, "ts"), *dur = cJSON_GetObjectItem(e, "dur");
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
        if (strcmp(ph, "X") || !cat || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || dur->valuedouble < 0) {
            BAD("event %d ('%s') is not a complete span with cat, ts and dur >= 0", i, name);
            continue;
        }
        sp[ns++] = (span){name, cat, tid->valueint, ts->valuedouble, ts->valuedouble + dur->valuedouble};
    }
    char want[32];
    snprintf(want, sizeof want, "rank %d", rank);
    if (!process || strcmp(process, want)) BAD("process name '%s', expected '%s'", process ? process : "", want);
    if (strcmp(thread_name[1], "main")) BAD("thread 1 is '%s', expected 'main'", thread_name[1]);

    /* the steps, in order, on the main thread */
    span **step = calloc((size_t)steps + 1, sizeof *step);
    for (int i = 0; i < ns; i++) {
        if (!starts(sp[i].name, "step ")) continue;
        int k = atoi(sp[i].name + 5);
        if (k < 1 || k > steps)
            BAD("unexpected span '%s'", sp[i].name);
        else if (step[k])
            BAD("'%s' twice", sp[i].name);
        else
            step[k] = &sp[i];
        if (sp[i].tid != 1) BAD("'%s' is not on the main thread", sp[i].name);
    }
    for (int k = 1; k <= steps; k++) {
        if (!step[k]) {
            BAD("no span 'step %d'", k);
            continue;
        }
        if (k > 1 && step[k - 1] && step[k]->t0 < step[k - 1]->t1) BAD("step %d starts before step %d ends", k, k - 1);
    }
    int overlapped = 0, comm_spans = 0, waits = 0, module_spans = 0;
    for (int k = 1; k <= steps; k++) {
        if (!step[k]) continue;
        const span *fw = NULL, *bw = NULL, *opt = NULL, *wait = NULL;
        int nfw = 0, nbw = 0, nopt = 0;
        for (int i = 0; i < ns; i++) {
            if (sp[i].tid != 1 || !inside(&sp[i], step[k])) continue;
            if (!strcmp(sp[i].name, "forward")) fw = &sp[i], nfw++;
            if (!strcmp(sp[i].name, "backward")) bw = &sp[i], nbw++;
            if (!strcmp(sp[i].name, "optimizer")) opt = &sp[i], nopt++;
            if (!strcmp(sp[i].name, "gradient all-reduce wait")) wait = &sp[i];
        }
        if (nfw != 1 || nbw != 1 || nopt != 1) {
            BAD("step %d holds %d forward, %d backward, %d optimizer spans (1 each expected)", k, nfw, nbw, nopt);
            continue;
        }
        if (!(fw->t1 <= bw->t0 + 0.001 && bw->t1 <= opt->t0 + 0.001))
            BAD("step %d: forward, backward, optimizer out of order", k);
        for (int i = 0; i < ns; i++) {
            if (strcmp(sp[i].cat, "module") || !inside(&sp[i], step[k])) continue;
            const span *pass = strstr(sp[i].name, " forward") ? fw : bw;
            if (!inside(&sp[i], pass))
                BAD("step %d: '%s' is outside the step's %s", k, sp[i].name, pass == fw ? "forward" : "backward");
            module_spans++;
        }
        if (buckets > 0) {
            if (!wait)
                BAD("step %d: no 'gradient all-reduce wait'", k);
            else {
                waits++;
                if (wait->t0 < bw->t1 - 0.001) BAD("step %d: the all-reduce wait starts inside backward", k);
            }
            for (int b = 0; b < buckets; b++) {
                char lane[32];
                snprintf(lane, sizeof lane, "bucket %d", b);
                int found = 0;
                for (int i = 0; i < ns; i++) {
                    if (sp[i].tid < 1000 || strcmp(thread_name[sp[i].tid], lane) || !inside(&sp[i], step[k])) continue;
                    found++;
                    if (!starts(sp[i].name, "allreduce ")) BAD("step %d: '%s' on the row '%s'", k, sp[i].name, lane);
                    if (b == 0 && sp[i].t0 >= bw->t0 && sp[i].t0 < bw->t1) overlapped++;
                }
                if (found != 1) BAD("step %d: %d spans on the row '%s', expected 1", k, found, lane);
            }
        }
    }
    if (module_spans < steps * 2) BAD("only %d module spans in %d steps", module_spans, steps);
    if (buckets > 0) {
        if (overlapped != steps) BAD("bucket 0 was launched inside backward in %d of %d steps", overlapped, steps);
        for (int i = 0; i < ns; i++)
            if (!strcmp(thread_name[sp[i].tid], "mpi communication") && starts(sp[i].name, "MPI_Allreduce "))
                comm_spans++;
        if (comm_spans < steps)
            BAD("%d MPI_Allreduce spans on the 'mpi communication' thread for %d steps", comm_spans, steps);
    } else {
        for (int i = 0; i < ns; i++)
            if (sp[i].tid >= 1000) BAD("one rank, yet a row '%s'", thread_name[sp[i].tid]);
    }
    if (fails) return 1;
    printf("%s: rank %d, %d spans: %d steps in order, each with forward, backward and optimizer, %d module spans "
           "inside them",
           argv[1], rank, ns, steps, module_spans);
    if (buckets > 0)
        printf("; %d buckets a step, bucket 0 launched inside backward in every step, %d MPI_Allreduce spans on the "
               "communication thread, %d waits after backward",
               buckets, comm_spans, waits);
    printf("\n");
    cJSON_Delete(root);
    free(sp);
    free(step);
    free(text);
    return 0;
}
