/* test_dataset_arrays.c: data sets built from memory (copies, label checks) and gathering
 * batches by index, including out-of-range indices and NULL outputs. */
#include <stdint.h>

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

    ls_dataset *e = NULL;
    labels[2] = 3;
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 3, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT,
                  "label 3 at index 2 is outside [0, 3)");
    LS_EXPECT(e == NULL);
    LS_EXPECT_ERR(ls_dataset_from_arrays(-1, 3, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT,
                  "n=-1");
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 0, 3, images, labels, &e), LS_ERR_INVALID_ARGUMENT,
                  "features=0");
    LS_EXPECT_ERR(ls_dataset_from_arrays(5, 3, 3, NULL, labels, &e), LS_ERR_INVALID_ARGUMENT,
                  "NULL");
    LS_REQUIRE_OK(ls_dataset_from_arrays(0, 3, 3, NULL, NULL, &e)); /* empty is fine */
    LS_EXPECT(e->n == 0);
    ls_dataset_destroy(e);
    LS_TEST_END();
}
