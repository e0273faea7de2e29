/* test_mixed_sets.c: one trainer fed from several data sets in turn, as training on one set while
 * evaluating on another does, with the sets kept in different ways: f32, bytes (staged as bytes
 * and decoded on the device, or kept on the device), and a struct of bytes filled by hand (id 0:
 * never kept on the device). Steps of 32 and 64 samples and odd sizes, accumulation over 2
 * micro-batches, an evaluation on yet another set every other step, and prefetch hints that are
 * right, missing, or name the wrong set (the batch prefetched for it is dropped, and may still be
 * in flight in a slot the device gather then uses). Every combination of LOCKSTEP_PREFETCH and
 * LOCKSTEP_DATA_ON_DEVICE must give parameters identical bit for bit to the plain path.
 * A set changed in place every few steps (ls_dataset_changed, as fashion_resnet's --augment each
 * epoch) trains on its new contents, and its device copy replaces the old one rather than staying
 * beside it (two copies of the training set from epoch 2 on, past what --batch-size auto sized).
 * Args: [cpu|cuda]; with cuda the reference keeps the sets on the device and does not prefetch,
 * and the test exits 77 where no GPU is usable. */
#include <stdlib.h>

#include "data.h"
#include "nn.h"
#include "optim.h"
#include "mlp_run.h"
#include "testutil.h"
#include "train.h"

#define N 300
#define F 48
#define B 32
#define STEPS 30

static ls_ctx *C;
static ls_dataset *Fs, *Bs; /* f32 and bytes, made by the library */
static ls_dataset Hs;       /* bytes, filled by hand (id 0) */

static void make_sets(void) {
    float *x = malloc(sizeof(float) * N * F), lut[256];
    uint8_t *b = malloc(N * F);
    int32_t y[N];
    Hs.bytes = malloc(N * F);
    LS_REQUIRE(x && b && Hs.bytes);
    uint64_t r = 7;
    for (int i = 0; i < N * F; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        b[i] = (uint8_t)(r >> 56);
    }
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - 0.3f) / 0.35f;
    for (int i = 0; i < N * F; i++) x[i] = lut[(uint8_t)(b[i] ^ 0x55)];
    for (int i = 0; i < N; i++) y[i] = (b[i * F] + i) % 10;
    LS_REQUIRE_OK(ls_dataset_from_bytes(N, F, 10, b, lut, y, &Bs));
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &Fs));
    uint8_t *hb = Hs.bytes;
    Hs = *Bs; /* the same labels and table, other bytes */
    Hs.id = 0;
    Hs.bytes = hb;
    for (int i = 0; i < N * F; i++) Hs.bytes[i] = (uint8_t)(b[i] + 3);
    free(x);
    free(b);
}

/* The set of step k: f32, bytes, then bytes again or the hand-filled set. */
static const ls_dataset *set_of(int k, int hand) {
    int m = k % 3;
    return m == 0 ? Fs : m == 1 || !hand ? Bs : &Hs;
}

static int64_t count_of(int k) { return k % 4 == 3 ? 5 + k : k % 5 == 4 ? 2 * B : B; }

enum { HINTS_NONE, HINTS_RIGHT, HINTS_WRONG_SET };

static float *run(const char *prefetch, const char *data_mode, int hints, int hand, int64_t *total_out) {
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", prefetch, 1) == 0);
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", data_mode, 1) == 0);
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer(C, F, B, 2, LS_PRECISION_FP32, &m, &o);
    int64_t idx[2 * B], next[2 * B], ev[40];
    for (int i = 0; i < 40; i++) ev[i] = (i * 13) % N;
    for (int k = 0; k < STEPS; k++) {
        int64_t c = count_of(k), nc = count_of(k + 1);
        for (int i = 0; i < c; i++) idx[i] = (k * 97 + i * 31) % N;
        for (int i = 0; i < nc; i++) next[i] = ((k + 1) * 97 + i * 31) % N;
        if (hints != HINTS_NONE) {
            const ls_dataset *h = set_of(k + 1, hand);
            if (hints == HINTS_WRONG_SET && k % 2) h = h == Fs ? Bs : Fs; /* the right samples of another set */
            LS_REQUIRE_OK(ls_trainer_prefetch(t, h, next, nc));
        }
        LS_REQUIRE_OK(ls_trainer_step(t, set_of(k, hand), idx, c, c, NULL));
        if (k % 2 == 0) {
            double loss;
            int64_t correct;
            LS_REQUIRE_OK(ls_trainer_evaluate(t, set_of(k + 2, hand), ev, 40, &loss, &correct));
        }
    }
    float *out = params_to_host(C, m, total_out);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    return out;
}

/* Steps on a copy of Bs that is changed in place every 4 steps; the parameters at the end, into
 * *live_first what the allocator held after step 3 (the last before a change), into *live_max the
 * most it held after a step from there on. */
static float *run_changed(const char *data_mode, int64_t *total_out, size_t *live_first, size_t *live_max) {
    LS_REQUIRE(setenv("LOCKSTEP_PREFETCH", "off", 1) == 0);
    LS_REQUIRE(setenv("LOCKSTEP_DATA_ON_DEVICE", data_mode, 1) == 0);
    ls_dataset *a = NULL;
    LS_REQUIRE_OK(ls_dataset_from_bytes(N, F, 10, Bs->bytes, Bs->lut, Bs->labels, &a));
    ls_module *m = NULL;
    ls_optimizer *o = NULL;
    ls_trainer *t = mlp_trainer(C, F, B, 1, LS_PRECISION_FP32, &m, &o);
    int64_t idx[B];
    *live_max = 0;
    for (int k = 0; k < 12; k++) {
        if (k > 0 && k % 4 == 0) { /* a new "augmentation" */
            for (int i = 0; i < N * F; i++) a->bytes[i] = (uint8_t)(a->bytes[i] * 5 + k);
            ls_dataset_changed(a);
        }
        for (int i = 0; i < B; i++) idx[i] = (k * 37 + i * 11) % N;
        LS_REQUIRE_OK(ls_trainer_step(t, a, idx, B, B, NULL));
        ls_memory_stats ms;
        ls_allocator_stats(C->alloc, &ms);
        if (k == 3) *live_first = ms.live_bytes; /* steady: both input slots in use */
        if (k >= 3 && ms.live_bytes > *live_max) *live_max = ms.live_bytes;
    }
    float *out = params_to_host(C, m, total_out);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(a);
    return out;
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    /* prefetch and data modes against the reference (first) */
    const char *modes_cpu[][2] = {{"off", "off"}, {"on", "off"}, {"on", "on"}, {"off", "on"}};
    const char *modes_cuda[][2] = {{"off", "on"}, {"auto", "off"}, {"auto", "auto"}, {"off", "off"}};
    const char *(*modes)[2] = modes_cpu;
    if (!strcmp(dev, "cuda")) {
        char why[256] = "";
        if (ls_device_cuda_count(why, sizeof why) == 0) LS_SKIP("no usable CUDA device: %s", why);
        LS_REQUIRE_OK(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &C));
        modes = modes_cuda;
    } else if (!strcmp(dev, "cpu")) {
        LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    } else {
        fprintf(stderr, "device '%s': use cpu or cuda\n", dev);
        return 2;
    }
    make_sets();
    static const char *hint_names[] = {"no hints", "right hints", "wrong-set hints"};
    for (int hand = 0; hand < 2; hand++)
        for (int hints = HINTS_NONE; hints <= HINTS_WRONG_SET; hints++) {
            int64_t n0, n1;
            float *ref = run(modes[0][0], modes[0][1], HINTS_NONE, hand, &n0);
            for (int c = 1; c < 4; c++) {
                float *got = run(modes[c][0], modes[c][1], hints, hand, &n1);
                int64_t differ = 0;
                for (int64_t i = 0; i < n0 && n0 == n1; i++) differ += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
                printf(
                    "%s, %-16s LOCKSTEP_PREFETCH=%-4s LOCKSTEP_DATA_ON_DEVICE=%-4s: %lld of %lld parameters differ\n",
                    hand ? "f32/bytes/hand-filled" : "f32/bytes            ", hint_names[hints], modes[c][0],
                    modes[c][1], (long long)differ, (long long)n0);
                LS_EXPECT(n0 == n1 && differ == 0);
                free(got);
            }
            free(ref);
        }
    { /* a set changed in place: its new contents, and one device copy of it */
        int64_t n0, n1;
        size_t first0, max0, first1, max1;
        float *ref = run_changed(modes[0][1], &n0, &first0, &max0);
        float *got = run_changed(strcmp(modes[0][1], "on") ? "on" : "off", &n1, &first1, &max1);
        int64_t differ = 0;
        for (int64_t i = 0; i < n0 && n0 == n1; i++) differ += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        printf("a set changed in place every 4 steps: %lld of %lld parameters differ between "
               "LOCKSTEP_DATA_ON_DEVICE=%s and %s; live bytes after step 4 %zu and %zu, at most %zu and %zu\n",
               (long long)differ, (long long)n0, modes[0][1], strcmp(modes[0][1], "on") ? "on" : "off", first0, first1,
               max0, max1);
        LS_EXPECT(n0 == n1 && differ == 0);
        LS_EXPECT(max0 == first0); /* no second copy of the set beside the first */
        LS_EXPECT(max1 == first1);
        free(ref);
        free(got);
    }
    free(Hs.bytes);
    ls_dataset_destroy(Bs);
    ls_dataset_destroy(Fs);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
