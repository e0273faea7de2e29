/* metrics_check.c: checks a --metrics file (one JSON object per optimizer step) against the run's
 * --log-steps file: every line parses and has every field with a number; the steps are 1..N,
 * each once, in order; the epoch follows from the step; the samples per step are as given; the
 * loss is the --log-steps loss of the same step to the last bit; the accuracy is a count over the
 * samples; samples_per_s agrees with samples and step_ms; fp32 means loss scale 1 and no skipped
 * step; the peak memory is at least the live memory, the pinned memory a whole number of bytes;
 * grad_norm is there exactly when clipping.
 *   metrics_check METRICS LOG_STEPS STEPS SAMPLES STEPS_PER_EPOCH clip|noclip|diverged [OUTPUT]
 * diverged: only that every line is JSON and some loss is null (not finite). OUTPUT: the run's
 * printed epochs; each epoch's "train acc" must be the mean of its steps' accuracies (so the
 * accuracy counts every rank's correct samples, not rank 0's). 
 * Prints the first failures and exits 1, else prints a summary and exits 0. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_fail.h"

static double num(const cJSON *o, const char *k, int line) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) {
        BAD("line %d: no number \"%s\"", line, k);
        return NAN;
    }
    return v->valuedouble;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr,
                "usage: metrics_check METRICS LOG_STEPS STEPS SAMPLES STEPS_PER_EPOCH clip|noclip|diverged [OUTPUT]\n");
        return 2;
    }
    long steps = atol(argv[3]), per_epoch = atol(argv[5]);
    double samples = atof(argv[4]);
    int clip = !strcmp(argv[6], "clip");
    if (!strcmp(argv[6], "diverged")) { /* a run that blew up: every line still JSON, NaN as null */
        FILE *f = fopen(argv[1], "r");
        char b[4096];
        int nulls = 0, lines = 0;
        while (f && fgets(b, sizeof b, f)) {
            lines++;
            cJSON *o = cJSON_Parse(b);
            const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
            if (!cJSON_IsObject(o) || !(cJSON_IsNumber(loss) || cJSON_IsNull(loss)))
                BAD("line %d is not valid: %s", lines, b);
            nulls += cJSON_IsNull(loss);
            cJSON_Delete(o);
        }
        if (f) fclose(f);
        if (lines != steps) BAD("%d lines, want %ld", lines, steps);
        if (!nulls) BAD("no step has a null loss: the run did not diverge");
        if (fails) return 1;
        printf("PASS: %d lines of valid JSON, %d with a null (non-finite) loss\n", lines, nulls);
        return 0;
    }
    double *logloss = calloc((size_t)steps + 1, sizeof *logloss);
    FILE *lf = fopen(argv[2], "r"), *mf = fopen(argv[1], "r");
    if (!lf || !mf || !logloss) {
        printf("FAIL: cannot open %s or %s\n", argv[1], argv[2]);
        return 1;
    }
    long s;
    double l;
    while (fscanf(lf, "%ld %lf", &s, &l) == 2)
        if (s >= 1 && s <= steps) logloss[s] = l;
    fclose(lf);
    char buf[4096];
    long want = 1;
    int line = 0;
    double sum_ms = 0, ep_acc[64] = {0};
    int ep_n[64] = {0};
    while (fgets(buf, sizeof buf, mf)) {
        line++;
        cJSON *o = cJSON_Parse(buf);
        if (!cJSON_IsObject(o)) {
            BAD("line %d is not a JSON object: %s", line, buf);
            cJSON_Delete(o);
            continue;
        }
        double step = num(o, "step", line), epoch = num(o, "epoch", line), loss = num(o, "loss", line);
        double acc = num(o, "accuracy", line), n = num(o, "samples", line), lr = num(o, "lr", line);
        double ms = num(o, "step_ms", line), sps = num(o, "samples_per_s", line);
        double scale = num(o, "loss_scale", line), skipped = num(o, "skipped", line);
        double live = num(o, "mem_live_bytes", line), peak = num(o, "mem_peak_bytes", line);
        double pinned = num(o, "mem_pinned_bytes", line);
        int has_norm = cJSON_GetObjectItemCaseSensitive(o, "grad_norm") != NULL;
        if (step != (double)want) BAD("line %d: step %g, want %ld", line, step, want);
        if (epoch != (double)((want - 1) / per_epoch))
            BAD("line %d: epoch %g, want %ld", line, epoch, (want - 1) / per_epoch);
        if (n != samples) BAD("line %d: samples %g, want %g", line, n, samples);
        if (want <= steps && loss != logloss[want])
            BAD("line %d: loss %.17g, but --log-steps has %.17g", line, loss, logloss[want]);
        if (!(acc >= 0 && acc <= 1) || fabs(acc * n - round(acc * n)) > 1e-6)
            BAD("line %d: accuracy %.17g is not a count over %g samples", line, acc, n);
        if (!(lr > 0)) BAD("line %d: lr %g", line, lr);
        if (!(ms > 0) || fabs(sps - n * 1000.0 / ms) > 1e-3 * sps)
            BAD("line %d: %g samples in %g ms, but samples_per_s %g", line, n, ms, sps);
        if (scale != 1 || skipped != 0) BAD("line %d: loss_scale %g, skipped %g (fp32: 1, 0)", line, scale, skipped);
        if (!(live > 0) || !(peak >= live)) BAD("line %d: live %g bytes, peak %g", line, live, peak);
        if (!(pinned >= 0) || pinned != floor(pinned)) BAD("line %d: pinned %g bytes", line, pinned);
        if (has_norm != clip) BAD("line %d: grad_norm %s", line, clip ? "missing" : "present without clipping");
        if (clip && has_norm && !(num(o, "grad_norm", line) > 0)) BAD("line %d: grad_norm not positive", line);
        sum_ms += ms;
        if (epoch >= 0 && epoch < 64) {
            ep_acc[(int)epoch] += acc;
            ep_n[(int)epoch]++;
        }
        want++;
        cJSON_Delete(o);
    }
    fclose(mf);
    if (want - 1 != steps) BAD("%ld steps in the metrics, want %ld", want - 1, steps);
    if (argc == 8) { /* "epoch E  train loss L  train acc A%" lines of the run's output */
        FILE *o = fopen(argv[7], "r");
        int e;
        double a;
        int seen = 0;
        while (o && fgets(buf, sizeof buf, o)) {
            const char *p = strstr(buf, "train acc ");
            if (sscanf(buf, "epoch %d", &e) == 1 && p && sscanf(p, "train acc %lf%%", &a) == 1 && e >= 1 && e <= 64 &&
                ep_n[e - 1]) {
                double mean = 100.0 * ep_acc[e - 1] / ep_n[e - 1];
                if (fabs(mean - a) > 0.006)
                    BAD("epoch %d: the steps' accuracy averages %.4f%%, the run printed %.2f%%", e, mean, a);
                seen++;
            }
        }
        if (o) fclose(o);
        if (!seen) BAD("no epoch lines with a train accuracy in %s", argv[7]);
    }
    free(logloss);
    if (fails) return 1;
    printf("PASS: %ld steps, %g samples each, losses equal to --log-steps, mean step %.3f ms\n", steps, samples,
           sum_ms / (double)steps);
    return 0;
}
