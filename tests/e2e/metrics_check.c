/* metrics_check.c: checks a --metrics file (one JSON object per optimizer step) against the run's
 * --log-steps file: every line parses and has every field with a number; the steps are 1..N,
 * each once, in order; the epoch follows from the step; the samples per step are as given; the
 * loss is the --log-steps loss of the same step to the last bit; the accuracy is a count over the
 * samples; samples_per_s agrees with samples and step_ms; fp32 means loss scale 1 and no skipped
 * step; the peak memory is at least the live memory; grad_norm is there exactly when clipping.
 *   metrics_check METRICS LOG_STEPS STEPS SAMPLES STEPS_PER_EPOCH clip|noclip
 * Prints the first failures and exits 1, else prints a summary and exits 0. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (fails++ < 10) {                                                                        \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static double num(const cJSON *o, const char *k, int line) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) {
        BAD("line %d: no number \"%s\"", line, k);
        return NAN;
    }
    return v->valuedouble;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: metrics_check METRICS LOG_STEPS STEPS SAMPLES STEPS_PER_EPOCH clip|noclip\n");
        return 2;
    }
    long steps = atol(argv[3]), per_epoch = atol(argv[5]);
    double samples = atof(argv[4]);
    int clip = !strcmp(argv[6], "clip");
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
    double sum_ms = 0;
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
        int has_norm = cJSON_GetObjectItemCaseSensitive(o, "grad_norm") != NULL;
        if (step != (double)want) BAD("line %d: step %g, want %ld", line, step, want);
        if (epoch != (double)((want - 1) / per_epoch)) BAD("line %d: epoch %g, want %ld", line, epoch, (want - 1) / per_epoch);
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
        if (has_norm != clip) BAD("line %d: grad_norm %s", line, clip ? "missing" : "present without clipping");
        if (clip && has_norm && !(num(o, "grad_norm", line) > 0)) BAD("line %d: grad_norm not positive", line);
        sum_ms += ms;
        want++;
        cJSON_Delete(o);
    }
    fclose(mf);
    if (want - 1 != steps) BAD("%ld steps in the metrics, want %ld", want - 1, steps);
    free(logloss);
    if (fails) return 1;
    printf("PASS: %ld steps, %g samples each, losses equal to --log-steps, mean step %.3f ms\n", steps, samples,
           sum_ms / (double)steps);
    return 0;
}
