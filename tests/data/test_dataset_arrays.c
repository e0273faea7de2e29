/* test_dataset_arrays.c: data sets built from memory, as f32 or as bytes with a table of values
 * (copies, label checks) and gathering batches by index, including out-of-range indices and NULL
 * outputs; a set of bytes gathers lut[byte] and converts to f32 with the same values; the threaded
 * gather equals the serial one byte for byte for every thread count and batch size tried. */
#include <stdint.h>
#include <stdlib.h>

#include "data.h"
#include "testutil.h"

int main(void) {
    float images[5 * 3];
    int32_t labels[5] = {0, 1, 2, 1, 0};
    for (int i = 0; i < 15; i++) images[i] = (float)i * 0.5f;
    ls_dataset *d = NULL;
    LS_REQUIRE_OK(ls_dataset_from_arrays(5, 3, 3, images, labels, &d));
    images[0] = 99.0f; /* the data set holds a copy */
    LS_EXPECT(d->n == 5 && d->features == 3 && d->rows == 1 && d->cols == 3);
    LS_EXPECT(d->num_classes == 3);
    LS_EXPECT(d->images[0] == 0.0f && d->images[14] == 7.0f);

    int64_t idx[4] = {4, 0, 4, 2};
    float out[12];
    int32_t lab[4];
    LS_REQUIRE_OK(ls_dataset_gather(d, idx, 4, out, lab));
    for (int i = 0; i < 4; i++) {
        LS_EXPECT(lab[i] == labels[idx[i]]);
        for (int f = 0; f < 3; f++) LS_EXPECT(out[i * 3 + f] == (float)(idx[i] * 3 + f) * 0.5f);
    }
    LS_REQUIRE_OK(ls_dataset_gather(d, idx, 2, NULL, lab));
    LS_EXPECT(lab[0] == 0 && lab[1] == 0);
    LS_REQUIRE_OK(ls_dataset_gather(d, NULL, 0, out, lab));

    int64_t bad[2] = {1, 5};
    LS_EXPECT_ERR(ls_dataset_gather(d, bad, 2, out, lab), LS_ERR_INVALID_ARGUMENT,
                  "index 5 at position 1 is outside [0, 5)");
    bad[1] = -1;
    LS_EXPECT_ERR(ls_dataset_gather(d, bad, 2, out, lab), LS_ERR_INVALID_ARGUMENT, "index -1");
    ls_dataset_destroy(d);
    ls_dataset_destroy(NULL);

    /* the threaded gather: up to 4096 rows of 784 floats (12.25 MiB; 1 MiB a thread or more) */
    {
        int64_t n = 5000, f = 784;
        float *im = malloc(sizeof(float) * (size_t)(n * f));
        int32_t *lb = malloc(sizeof(int32_t) * (size_t)n);
        LS_REQUIRE(im && lb);
        for (int64_t i = 0; i < n * f; i++) im[i] = (float)(i % 9973) * 0.25f;
        for (int64_t i = 0; i < n; i++) lb[i] = (int32_t)(i % 10);
        ls_dataset *big = NULL;
        LS_REQUIRE_OK(ls_dataset_from_arrays(n, f, 10, im, lb, &big));
        int64_t *ix = malloc(sizeof(int64_t) * 4096);
        float *a = malloc(sizeof(float) * 4096 * (size_t)f), *b = malloc(sizeof(float) * 4096 * (size_t)f);
        int32_t *la = malloc(sizeof(int32_t) * 4096), *lb2 = malloc(sizeof(int32_t) * 4096);
        LS_REQUIRE(ix && a && b && la && lb2);
        for (int i = 0; i < 4096; i++) ix[i] = (int64_t)((i * 2654435761u) % (uint64_t)n);
        int64_t counts[] = {0, 1, 5, 334, 335, 1000, 4095, 4096};
        int threads[] = {0, 1, 2, 3, 8, 64};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            LS_REQUIRE_OK(ls_dataset_gather(big, ix, counts[c], a, la));
            for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
                memset(b, 0xff, sizeof(float) * 4096 * (size_t)f);
                memset(lb2, 0xff, sizeof(int32_t) * 4096);
                LS_REQUIRE_OK(ls_dataset_gather_parallel(big, ix, counts[c], b, lb2, threads[t]));
                int same = !memcmp(a, b, sizeof(float) * (size_t)(counts[c] * f)) &&
                           !memcmp(la, lb2, sizeof(int32_t) * (size_t)counts[c]);
                if (!same) printf("threaded gather differs: %lld rows, %d threads\n", (long long)counts[c], threads[t]);
                LS_EXPECT(same);
            }
        }
        /* 5 rows on 4 threads: at most one row each, no thread past the end */
        LS_REQUIRE_OK(ls_dataset_gather_parallel(big, ix, 5, b, lb2, 4));
        LS_EXPECT(!memcmp(b, a, sizeof(float) * 5 * (size_t)f)); /* a still holds the 4096-row gather */
        setenv("LOCKSTEP_GATHER_THREADS", "lots", 1);
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, ix, 4096, b, lb2, 0), LS_ERR_INVALID_ARGUMENT,
                      "LOCKSTEP_GATHER_THREADS='lots': use a thread count from 1 to 64");
        /* digits only: strtol took a space and a '+' */
        setenv("LOCKSTEP_GATHER_THREADS", " 3", 1);
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, ix, 4096, b, lb2, 0), LS_ERR_INVALID_ARGUMENT,
                      "LOCKSTEP_GATHER_THREADS=' 3': use a thread count from 1 to 64");
        setenv("LOCKSTEP_GATHER_THREADS", "+3", 1);
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, ix, 4096, b, lb2, 0), LS_ERR_INVALID_ARGUMENT,
                      "LOCKSTEP_GATHER_THREADS='+3': use a thread count from 1 to 64");
        setenv("LOCKSTEP_GATHER_THREADS", "3", 1);
        LS_REQUIRE_OK(ls_dataset_gather_parallel(big, ix, 4096, b, lb2, 0));
        LS_EXPECT(!memcmp(b, a, sizeof(float) * 4096 * (size_t)f));
        unsetenv("LOCKSTEP_GATHER_THREADS");
        ix[3000] = n; /* a bad index: named with its position in the whole batch */
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, ix, 4096, b, lb2, 4), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_parallel: index 5000 at position 3000 is outside [0, 5000)");
        /* named as the function called on one thread too (both said ls_dataset_gather) */
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, ix + 2999, 2, b, lb2, 1), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_parallel: index 5000 at position 1 is outside [0, 5000)");
        LS_EXPECT_ERR(ls_dataset_gather_parallel(big, NULL, 2, b, lb2, 4), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_parallel: need a data set, count >= 0 and indices (count=2)");
        free(ix);
        free(a);
        free(b);
        free(la);
        free(lb2);
        free(im);
        free(lb);
        ls_dataset_destroy(big);
    }

    /* a set of bytes: gathers lut[byte], as the threaded gather and the set made f32 do */
    { /* ls_dataset_crc32: equal for equal sets, another for a byte, a byte's value, a label, a size */
        uint8_t by[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
        int32_t lb[4] = {0, 1, 2, 1};
        float lut[256];
        for (int v = 0; v < 256; v++) lut[v] = (float)v / 255.0f;
        ls_dataset *x[6] = {NULL};
        LS_REQUIRE_OK(ls_dataset_from_bytes(4, 3, 3, by, lut, lb, &x[0]));
        LS_REQUIRE_OK(ls_dataset_from_bytes(4, 3, 3, by, lut, lb, &x[1]));
        by[7] = 200;
        LS_REQUIRE_OK(ls_dataset_from_bytes(4, 3, 3, by, lut, lb, &x[2]));
        by[7] = 7, lut[7] = 0.5f;
        LS_REQUIRE_OK(ls_dataset_from_bytes(4, 3, 3, by, lut, lb, &x[3]));
        lut[7] = 7 / 255.0f, lb[3] = 2;
        LS_REQUIRE_OK(ls_dataset_from_bytes(4, 3, 3, by, lut, lb, &x[4]));
        lb[3] = 1;
        LS_REQUIRE_OK(ls_dataset_from_bytes(3, 3, 3, by, lut, lb, &x[5]));
        const uint32_t c0 = ls_dataset_crc32(x[0]);
        LS_EXPECT(c0 == ls_dataset_crc32(x[1]) && c0 != 0);
        for (int i = 2; i < 6; i++) LS_EXPECT(ls_dataset_crc32(x[i]) != c0);
        LS_REQUIRE_OK(ls_dataset_to_f32(x[1])); /* the same values stored as f32: the stored form counts */
        LS_EXPECT(ls_dataset_crc32(x[1]) != c0 && ls_dataset_crc32(x[1]) == ls_dataset_crc32(x[1]));
        LS_EXPECT(ls_dataset_crc32(NULL) == 0);
        for (int i = 0; i < 6; i++) ls_dataset_destroy(x[i]);
    }
    {
        int64_t n = 3000, f = 784;
        uint8_t *by = malloc((size_t)(n * f));
        int32_t *lb = malloc(sizeof(int32_t) * (size_t)n);
        float lut[256];
        LS_REQUIRE(by && lb);
        for (int v = 0; v < 256; v++) lut[v] = (float)v * 0.375f - 7.0f;
        for (int64_t i = 0; i < n * f; i++) by[i] = (uint8_t)((i * 131) >> 3);
        for (int64_t i = 0; i < n; i++) lb[i] = (int32_t)(i % 7);
        ls_dataset *bs = NULL;
        LS_REQUIRE_OK(ls_dataset_from_bytes(n, f, 7, by, lut, lb, &bs));
        by[0] ^= 1, lut[by[f]] = 1e9f; /* the set holds copies */
        LS_EXPECT(bs->bytes && !bs->images && bs->bytes[0] == (uint8_t)0 && bs->lut[255] == 255 * 0.375f - 7.0f);
        LS_EXPECT(ls_dataset_sample_bytes(bs) == (size_t)(n * f));
        int64_t ix[2048];
        for (int i = 0; i < 2048; i++) ix[i] = (int64_t)((i * 2654435761u) % (uint64_t)n);
        float *a = malloc(sizeof(float) * 2048 * (size_t)f), *b = malloc(sizeof(float) * 2048 * (size_t)f);
        int32_t la[2048], lb2[2048];
        LS_REQUIRE(a && b);
        LS_REQUIRE_OK(ls_dataset_gather(bs, ix, 2048, a, la));
        int exact = 1;
        for (int i = 0; i < 2048; i++) {
            exact &= la[i] == (int32_t)(ix[i] % 7);
            for (int64_t c = 0; c < f; c++)
                exact &= a[i * f + c] == (float)(uint8_t)(((ix[i] * f + c) * 131) >> 3) * 0.375f - 7.0f;
        }
        LS_EXPECT(exact);
        memset(b, 0xff, sizeof(float) * 2048 * (size_t)f);
        LS_REQUIRE_OK(ls_dataset_gather_parallel(bs, ix, 2048, b, lb2, 3));
        LS_EXPECT(!memcmp(a, b, sizeof(float) * 2048 * (size_t)f) && !memcmp(la, lb2, sizeof la));
        /* ls_dataset_gather_bytes: the rows as stored; its errors name it (they said ls_dataset_gather) */
        uint8_t rows[2 * 784];
        LS_REQUIRE_OK(ls_dataset_gather_bytes(bs, ix, 2, rows, lb2));
        LS_EXPECT(!memcmp(rows, bs->bytes + ix[0] * f, (size_t)f) &&
                  !memcmp(rows + f, bs->bytes + ix[1] * f, (size_t)f));
        LS_EXPECT(lb2[0] == la[0] && lb2[1] == la[1]);
        int64_t out_of_range[2] = {1, n};
        LS_EXPECT_ERR(ls_dataset_gather_bytes(bs, out_of_range, 2, rows, lb2), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_bytes: index 3000 at position 1 is outside [0, 3000)");
        out_of_range[1] = -2;
        LS_EXPECT_ERR(ls_dataset_gather_bytes(bs, out_of_range, 2, NULL, lb2), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_bytes: index -2 at position 1 is outside [0, 3000)");
        LS_EXPECT_ERR(ls_dataset_gather_bytes(bs, ix, -1, rows, lb2), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_bytes: need a data set, count >= 0 and indices (count=-1)");
        uint64_t id = bs->id;
        LS_REQUIRE_OK(ls_dataset_to_f32(bs));
        LS_EXPECT(bs->images && !bs->bytes && bs->id != id);
        LS_EXPECT(ls_dataset_sample_bytes(bs) == (size_t)(n * f) * sizeof(float));
        memset(b, 0xff, sizeof(float) * 2048 * (size_t)f);
        LS_REQUIRE_OK(ls_dataset_gather(bs, ix, 2048, b, NULL));
        LS_EXPECT(!memcmp(a, b, sizeof(float) * 2048 * (size_t)f));
        ls_dataset *e = NULL;
        LS_EXPECT_ERR(ls_dataset_from_bytes(n, f, 7, by, NULL, lb, &e), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_from_bytes: lut is NULL");
        LS_EXPECT_ERR(ls_dataset_from_bytes(n, f, 7, NULL, lut, lb, &e), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_from_bytes: bytes or labels is NULL");
        lb[5] = 7;
        LS_EXPECT_ERR(ls_dataset_from_bytes(n, f, 7, by, lut, lb, &e), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_from_bytes: label 7 at index 5 is outside [0, 7)");
        LS_EXPECT(e == NULL);
        ls_dataset hand = {.n = 2, .features = 3, .num_classes = 2, .labels = la}; /* no samples */
        LS_EXPECT_ERR(ls_dataset_gather(&hand, ix, 1, a, NULL), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather: the data set has neither images nor bytes");
        LS_EXPECT_ERR(ls_dataset_gather_parallel(&hand, ix, 1, a, NULL, 2), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_gather_parallel: the data set has neither images nor bytes");
        uint8_t six[6] = {1, 2, 3, 4, 5, 6};
        hand.bytes = six; /* the caller's memory: not freed, not converted */
        LS_EXPECT_ERR(ls_dataset_to_f32(&hand), LS_ERR_INVALID_ARGUMENT,
                      "ls_dataset_to_f32: a data set filled by hand (id 0) owns no memory the library may free");
        LS_EXPECT(hand.bytes == six && hand.images == NULL && hand.id == 0);
        LS_EXPECT_ERR(ls_dataset_to_f32(NULL), LS_ERR_INVALID_ARGUMENT, "ls_dataset_to_f32: the data set is NULL");
        free(a);
        free(b);
        free(by);
        free(lb);
        ls_dataset_destroy(bs);
    }

    ls_dataset *e = NULL;
    labels[2] = 3;
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 3, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT,
                  "label 3 at index 2 is outside [0, 3)");
    LS_EXPECT(e == NULL);
    LS_EXPECT_ERR(ls_dataset_from_arrays(-1, 3, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT, "n=-1");
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 0, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT, "features=0");
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 3, 3, NULL, labels, &e), LS_ERR_INVALID_ARGUMENT, "NULL");
    LS_REQUIRE_OK(ls_dataset_from_arrays(0, 3, 3, NULL, NULL, &e)); /* empty is fine */
    LS_EXPECT(e->n == 0);
    ls_dataset_destroy(e);
    LS_TEST_END();
}
