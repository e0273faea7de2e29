/* fuzz_idx.c: libFuzzer target for lockstep's data-file readers (runtime/data.c). The input is
 * written to a file in a private directory and read back; the first byte picks how (mod 3):
 * 0 ls_idx_read on the bytes as they are (plain IDX, or gzip when they start with 1f 8b);
 * 1 the same after gzip-compressing them, so that mutations reach the IDX parser behind zlib;
 * 2 ls_fashion_mnist_load with the bytes as the training images beside a fixed valid label file
 *   of 6 labels, keeping at most (second byte % 8) samples (0: all).
 * What reads must be consistent: count = the product of dims, every dim >= 1, the data there to
 * read; a loaded set has as many samples as labels, its rows x cols features as bytes, each label
 * below 10, and gathers every sample. Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/CMakeLists.txt. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], labels[128], images[128], input[128];

static void remove_dir(void) {
    unlink(labels);
    unlink(images);
    unlink(input);
    rmdir(dir);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* data gzip-compressed into *out (malloc'd); returns its length. */
static size_t gzip(const uint8_t *data, size_t n, uint8_t **out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    size_t cap = deflateBound(&z, (uLong)n) + 32;
    *out = malloc(cap);
    if (!*out) abort();
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    z.next_out = *out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

static void check_idx(const ls_idx *x) {
    if (x->ndim < 1 || x->ndim > 4 || !x->data) abort();
    int64_t count = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (x->dims[i] < 1) abort();
        count *= x->dims[i];
    }
    if (count != x->count) abort();
    volatile uint8_t sink = x->data[0] ^ x->data[x->count - 1]; /* ASan: all of it is there */
    (void)sink;
}

static void check_set(const ls_dataset *d, int64_t limit) {
    if (d->n < 1 || d->n > 6 || (limit > 0 && d->n > limit)) abort();
    if (!d->bytes || d->images || d->features != d->rows * d->cols || d->num_classes != 10) abort();
    int64_t idx[6];
    for (int64_t i = 0; i < d->n; i++) {
        if (d->labels[i] < 0 || d->labels[i] >= 10) abort();
        idx[i] = d->n - 1 - i;
    }
    float *x = malloc(sizeof(float) * (size_t)(d->n * d->features));
    int32_t y[6];
    if (!x) return; /* a huge row: nothing to check beyond the reader's own bounds */
    if (ls_dataset_gather(d, idx, d->n, x, y) != LS_OK) abort();
    for (int64_t i = 0; i < d->n; i++)
        if (y[i] != d->labels[idx[i]] || x[i * d->features] != d->lut[d->bytes[idx[i] * d->features]]) abort();
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/lockstep-fuzz-idx-%ld", (long)getpid());
        if (mkdir(dir, 0700) != 0) abort();
        snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
        snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
        snprintf(input, sizeof input, "%s/input.idx", dir);
        atexit(remove_dir);
        /* 6 labels, valid, beside whatever images the input makes */
        static const uint8_t lab[8 + 6] = {0, 0, 8, 1, 0, 0, 0, 6, 0, 9, 3, 3, 1, 7};
        write_file(labels, lab, sizeof lab); /* plain bytes under the .gz name: the reader sniffs */
    }
    if (size < 2) return 0;
    int mode = data[0] % 3;
    int64_t limit = data[1] % 8;
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    const char *path = mode == 2 ? images : input;
    if (mode == 1) {
        uint8_t *z = NULL;
        size_t zn = gzip(p, n, &z);
        write_file(path, z, zn);
        free(z);
    } else {
        write_file(path, p, n);
    }
    if (mode == 2) {
        ls_dataset *d = NULL;
        if (ls_fashion_mnist_load(dir, 1, limit, &d) == LS_OK)
            check_set(d, limit);
        else if (d)
            abort(); /* an error leaves *out empty */
        ls_dataset_destroy(d);
    } else {
        ls_idx x;
        if (ls_idx_read(path, &x) == LS_OK)
            check_idx(&x);
        else if (x.data || x.ndim || x.count)
            abort(); /* an error leaves *out empty */
        ls_idx_free(&x);
    }
    ls_error_clear();
    return 0;
}
