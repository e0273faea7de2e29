/* test_fashion_load.c: loads the real Fashion-MNIST files from $LOCKSTEP_FASHION_DIR (skips when
 * they are missing): sizes, 6000 (1000) samples per class in train (test), pixels kept as bytes
 * whose normalized train values have mean ~0 and std ~1, limit keeping exactly the first samples,
 * and ls_dataset_to_f32 giving the values the gather gives. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "data.h"
#include "testutil.h"

static void check_set(const ls_dataset *d, int64_t n, int64_t per_class) {
    LS_EXPECT(d->n == n);
    LS_EXPECT(d->rows == 28 && d->cols == 28 && d->features == 784);
    LS_EXPECT(d->num_classes == 10);
    int64_t counts[10] = {0};
    int bad = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (d->labels[i] < 0 || d->labels[i] > 9)
            bad++;
        else
            counts[d->labels[i]]++;
    }
    LS_EXPECT(bad == 0);
    for (int c = 0; c < 10; c++) {
        if (counts[c] != per_class)
            fprintf(stderr, "class %d: %lld samples, expected %lld\n", c, (long long)counts[c], (long long)per_class);
        LS_EXPECT(counts[c] == per_class);
    }
}

int main(void) {
    const char *dir = getenv("LOCKSTEP_FASHION_DIR");
    if (!dir || !dir[0]) dir = "/usr/share/datasets/fashion-mnist";
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    if (stat(path, &st) != 0) LS_SKIP("Fashion-MNIST not found ('%s' is missing)", path);

    ls_dataset *train = NULL, *test = NULL, *part = NULL;
    LS_REQUIRE_OK(ls_fashion_mnist_load(NULL, 1, 0, &train)); /* NULL: from the environment */
    check_set(train, 60000, 6000);
    LS_REQUIRE(train->bytes && !train->images); /* kept as bytes: 47 MB, not 188 */
    LS_EXPECT(ls_dataset_sample_bytes(train) == (size_t)60000 * 784);
    double sum = 0, sq = 0;
    int64_t total = train->n * train->features;
    for (int64_t i = 0; i < total; i++) {
        double v = train->lut[train->bytes[i]];
        sum += v;
        sq += v * v;
    }
    double mean = sum / (double)total, std = sqrt(sq / (double)total - mean * mean);
    printf("train pixels: mean %.5f std %.5f\n", mean, std);
    LS_EXPECT_NEAR(mean, 0.0, 1e-3);
    LS_EXPECT_NEAR(std, 1.0, 1e-2);

    LS_REQUIRE_OK(ls_fashion_mnist_load(dir, 0, 0, &test));
    check_set(test, 10000, 1000);

    LS_REQUIRE_OK(ls_fashion_mnist_load(dir, 1, 1000, &part));
    LS_EXPECT(part->n == 1000 && part->features == 784 && part->rows == 28);
    LS_EXPECT(memcmp(part->bytes, train->bytes, 1000 * 784) == 0);
    LS_EXPECT(memcmp(part->lut, train->lut, sizeof part->lut) == 0);
    /* ls_dataset_to_f32: the same values as gathered, 4x the memory, a new id */
    int64_t idx[1000];
    for (int i = 0; i < 1000; i++) idx[i] = 999 - i;
    float *g = malloc(1000 * 784 * sizeof(float)), *g2 = malloc(1000 * 784 * sizeof(float));
    LS_REQUIRE(g && g2);
    LS_REQUIRE_OK(ls_dataset_gather(part, idx, 1000, g, NULL));
    LS_EXPECT(g[0] == part->lut[part->bytes[999 * 784]] && g[999 * 784 + 783] == part->lut[part->bytes[783]]);
    uint64_t id = part->id;
    LS_REQUIRE_OK(ls_dataset_to_f32(part));
    LS_EXPECT(part->images && !part->bytes && part->id != id);
    LS_EXPECT(ls_dataset_sample_bytes(part) == (size_t)1000 * 784 * sizeof(float));
    LS_REQUIRE_OK(ls_dataset_gather(part, idx, 1000, g2, NULL));
    LS_EXPECT(memcmp(g, g2, 1000 * 784 * sizeof(float)) == 0);
    LS_REQUIRE_OK(ls_dataset_to_f32(part)); /* already f32: unchanged */
    LS_EXPECT(part->images && !part->bytes);
    free(g);
    free(g2);
    LS_EXPECT(memcmp(part->labels, train->labels, 1000 * sizeof(int32_t)) == 0);

    ls_dataset_destroy(part);
    ls_dataset_destroy(test);
    ls_dataset_destroy(train);
    LS_TEST_END();
}
