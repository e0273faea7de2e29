/* test_idx_corrupt.c: the IDX reader and the Fashion-MNIST loader on small crafted files in a
 * temporary directory, plain and gzip: every malformed input gives the right status and a message
 * naming the file and the problem, and good files round-trip exactly. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "testutil.h"

static char tmpdir[] = "/tmp/ls_test_idx_XXXXXX";
static char created[64][512];
static int ncreated = 0;

/* A path inside the temporary directory, remembered for cleanup. */
static const char *tmp_path(const char *name) {
    LS_REQUIRE(ncreated < 64);
    snprintf(created[ncreated], sizeof created[0], "%s/%s", tmpdir, name);
    return created[ncreated++];
}

static void write_plain(const char *path, const uint8_t *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    LS_REQUIRE(f != NULL);
    LS_REQUIRE(fwrite(bytes, 1, n, f) == n);
    LS_REQUIRE(fclose(f) == 0);
}

static void write_gz(const char *path, const uint8_t *bytes, size_t n) {
    gzFile g = gzopen(path, "wb");
    LS_REQUIRE(g != NULL);
    LS_REQUIRE(n == 0 || gzwrite(g, bytes, (unsigned)n) == (int)n);
    LS_REQUIRE(gzclose(g) == Z_OK);
}

/* IDX bytes: header (type 0x08, ndim dims) followed by data_len bytes of data (pattern i*7+1). */
static size_t make_idx(uint8_t *buf, int ndim, const uint32_t *dims, size_t data_len) {
    size_t p = 0;
    buf[p++] = 0;
    buf[p++] = 0;
    buf[p++] = 0x08;
    buf[p++] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[p++] = (uint8_t)(dims[i] >> 24);
        buf[p++] = (uint8_t)(dims[i] >> 16);
        buf[p++] = (uint8_t)(dims[i] >> 8);
        buf[p++] = (uint8_t)dims[i];
    }
    for (size_t i = 0; i < data_len; i++) buf[p++] = (uint8_t)(i * 7 + 1);
    return p;
}

static char expect_buf[1024];
#define EXPECTED(...) (snprintf(expect_buf, sizeof expect_buf, __VA_ARGS__), expect_buf)

static void check_idx_errors(void) {
    static uint8_t buf[1 << 16];
    ls_idx idx;
    const char *p;

    p = tmp_path("missing.idx");
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_IO, EXPECTED("cannot open '%s': No such file or directory", p));
    LS_EXPECT(idx.data == NULL && idx.count == 0);

    p = tmp_path("empty.idx");
    write_plain(p, buf, 0);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' is empty", p));
    p = tmp_path("empty.idx.gz");
    write_gz(p, buf, 0);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' is empty: no IDX header", p));
    /* a gzip file cut before its first byte of data is not empty but cut short (it was "is empty:
     * no IDX header (gzip: unexpected end of file)", of a file of 2 bytes or more) */
    static const uint8_t gz_head[10] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03};
    for (size_t cut = 2; cut <= sizeof gz_head; cut += sizeof gz_head - 2) {
        p = tmp_path(cut == 2 ? "cut2.idx.gz" : "cut10.idx.gz");
        write_plain(p, gz_head, cut);
        LS_EXPECT_ERR(
            ls_idx_read(p, &idx), LS_ERR_FORMAT,
            EXPECTED("'%s' is truncated: expected 4 bytes of IDX header, found 0 (gzip: unexpected end of file)", p));
        LS_EXPECT(idx.data == NULL && idx.count == 0);
    }

    p = tmp_path("gif.idx");
    write_plain(p, (const uint8_t *)"GIF89a not an idx file", 22);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' is not an IDX file: bad magic 0x47494638", p));
    p = tmp_path("gif.idx.gz");
    write_gz(p, (const uint8_t *)"GIF89a not an idx file", 22);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' is not an IDX file: bad magic 0x47494638", p));
    /* gzip inside gzip (gzip run on a .gz): the message says so, not only "bad magic 0x1f8b0800" */
    {
        static uint8_t gz[4096];
        uint32_t d1[1] = {3};
        size_t m = make_idx(buf, 1, d1, 3);
        p = tmp_path("twice.idx.gz");
        write_gz(p, buf, m);
        FILE *g = fopen(p, "rb");
        LS_REQUIRE(g != NULL);
        size_t gn = fread(gz, 1, sizeof gz, g);
        LS_REQUIRE(fclose(g) == 0 && gn > 2 && gn < sizeof gz);
        write_gz(p, gz, gn);
        LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                      EXPECTED("'%s' is not an IDX file: bad magic 0x1f8b0800 (its gzip data is gzip again: the file "
                               "was compressed twice; gunzip it once)",
                               p));
    }

    uint32_t dims2[2] = {3, 4};
    size_t n = make_idx(buf, 2, dims2, 12);
    buf[2] = 0x0D; /* float32: valid IDX, not supported */
    p = tmp_path("float.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_UNSUPPORTED, EXPECTED("'%s': unsupported IDX data type 0x0d", p));
    buf[2] = 0x42; /* not an IDX type at all */
    p = tmp_path("type42.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("unknown data type 0x42"));

    n = make_idx(buf, 0, NULL, 0);
    p = tmp_path("ndim0.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': IDX file has 0 dim", p));
    uint32_t dims5[5] = {1, 1, 1, 1, 1};
    n = make_idx(buf, 5, dims5, 1);
    p = tmp_path("ndim5.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_UNSUPPORTED, "has 5 dimensions");

    uint32_t dims_zero[2] = {3, 0};
    n = make_idx(buf, 2, dims_zero, 0);
    p = tmp_path("zero_dim.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': IDX dimension 1 is zero", p));
    uint32_t dims_big[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 2};
    n = make_idx(buf, 4, dims_big, 16);
    p = tmp_path("overflow.idx.gz");
    write_gz(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': IDX dimensions overflow", p));
    /* A header claiming 4 GiB in a tiny gzip file: truncated, without allocating 4 GiB. */
    uint32_t dims_huge[2] = {0x10000u, 0x10000u};
    n = make_idx(buf, 2, dims_huge, 100);
    p = tmp_path("huge.idx.gz");
    write_gz(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' is truncated: expected 4294967296 bytes of data, found 100", p));

    /* Header cut inside the dimensions. */
    n = make_idx(buf, 2, dims2, 0);
    p = tmp_path("short_header.idx");
    write_plain(p, buf, n - 3);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' is truncated: expected 8 bytes of IDX dimensions, found 5", p));
    p = tmp_path("short_magic.idx");
    write_plain(p, buf, 3);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' is truncated", p));

    /* Data shorter than the dims say: plain and gzip (a complete stream with too little data). */
    n = make_idx(buf, 2, dims2, 7);
    p = tmp_path("trunc.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' is truncated: expected 12 bytes of data, found 7", p));
    p = tmp_path("trunc.idx.gz");
    write_gz(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' is truncated: expected 12 bytes of data, found 7", p));

    /* A gzip file cut in the middle of its deflate stream (incompressible data). */
    uint32_t dims_rand[2] = {100, 200};
    n = make_idx(buf, 2, dims_rand, 0);
    uint32_t x = 12345;
    for (int i = 0; i < 20000; i++) {
        x = x * 1664525u + 1013904223u;
        buf[n++] = (uint8_t)(x >> 24);
    }
    p = tmp_path("cut.idx.gz");
    write_gz(p, buf, n);
    FILE *f = fopen(p, "rb");
    LS_REQUIRE(f != NULL);
    static uint8_t gzbytes[1 << 16];
    size_t gzlen = fread(gzbytes, 1, sizeof gzbytes, f);
    fclose(f);
    LS_REQUIRE(gzlen > 1000);
    write_plain(p, gzbytes, gzlen / 2);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' is truncated: expected 20000 bytes of data, found", p));
    LS_EXPECT(strstr(ls_last_error(), "(gzip: unexpected end of file)") != NULL);

    /* A valid gzip header followed by garbage: corrupt deflate data. */
    static const uint8_t garbage[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
                                      0xff, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x11,
                                      0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb};
    p = tmp_path("garbage.gz");
    write_plain(p, garbage, sizeof garbage);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': corrupt gzip stream", p));
    /* A gzip file whose CRC does not match its data. */
    n = make_idx(buf, 2, dims2, 12);
    p = tmp_path("badcrc.idx.gz");
    write_gz(p, buf, n);
    f = fopen(p, "rb");
    LS_REQUIRE(f != NULL);
    gzlen = fread(gzbytes, 1, sizeof gzbytes, f);
    fclose(f);
    gzbytes[gzlen - 8] ^= 0x55; /* CRC32 in the trailer */
    write_plain(p, gzbytes, gzlen);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': corrupt gzip stream", p));
    /* A gzip file cut inside its trailer: all the data is there, the check is not. */
    write_gz(p, buf, n);
    f = fopen(p, "rb");
    LS_REQUIRE(f != NULL);
    gzlen = fread(gzbytes, 1, sizeof gzbytes, f);
    fclose(f);
    write_plain(p, gzbytes, gzlen - 3);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s': corrupt gzip stream", p));
    /* More data than the dimensions describe. */
    n = make_idx(buf, 2, dims2, 13);
    p = tmp_path("long.idx");
    write_plain(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' has extra data", p));
    p = tmp_path("long.idx.gz");
    write_gz(p, buf, n);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT, EXPECTED("'%s' has extra data", p));

    /* Bytes after the gzip data that are not another gzip member: refused as after a plain file
     * (zlib's gzread dropped them, and training went on with the file as if whole). */
    n = make_idx(buf, 2, dims2, 12);
    p = tmp_path("trail.idx.gz");
    write_gz(p, buf, n);
    f = fopen(p, "ab");
    LS_REQUIRE(f != NULL && fwrite("garbage-bytes-here", 1, 18, f) == 18 && fclose(f) == 0);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' has 18 bytes after the end of its gzip data that are not gzip (trailing garbage", p));
    /* ... and one byte that is not zero (a lone byte cannot start a member) */
    write_gz(p, buf, n);
    f = fopen(p, "ab");
    LS_REQUIRE(f != NULL && fputc('x', f) == 'x' && fclose(f) == 0);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                  EXPECTED("'%s' has 1 byte after the end of its gzip data that is not gzip", p));
    /* Zero bytes after the gzip data are padding (a tape's or a download tool's blocks): gzip -t
     * says "decompression OK, trailing zero bytes ignored" and Python's gzip (torchvision's reader)
     * skips them, the data being whole by its CRC; 1 zero and 200000 (past one read of the input) */
    for (int zeros = 1; zeros <= 200000; zeros += 199999) {
        write_gz(p, buf, n);
        f = fopen(p, "ab");
        LS_REQUIRE(f != NULL);
        for (int i = 0; i < zeros; i++) LS_REQUIRE(fputc(0, f) == 0);
        LS_REQUIRE(fclose(f) == 0);
        LS_EXPECT(ls_idx_read(p, &idx) == LS_OK);
        LS_EXPECT(idx.count == 12 && idx.data && memcmp(idx.data, buf + 12, 12) == 0);
        ls_idx_free(&idx);
        /* zeros and then anything else are not padding: all the trailing bytes are counted */
        f = fopen(p, "ab");
        LS_REQUIRE(f != NULL && fputc(7, f) == 7 && fclose(f) == 0);
        LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_FORMAT,
                      EXPECTED("'%s' has %d bytes after the end of its gzip data that are not gzip (trailing garbage",
                               p, zeros + 1));
    }
    /* Two gzip members that together hold the file (gzip -c a b > ab.gz) read as one. */
    p = tmp_path("members.idx.gz");
    write_gz(p, buf, 10);
    gzFile g = gzopen(p, "ab");
    LS_REQUIRE(g != NULL && gzwrite(g, buf + 10, (unsigned)(n - 10)) == (int)(n - 10) && gzclose(g) == Z_OK);
    LS_REQUIRE_OK(ls_idx_read(p, &idx));
    LS_EXPECT(idx.count == 12 && memcmp(idx.data, buf + 12, 12) == 0);
    ls_idx_free(&idx);

    /* Only regular files: a FIFO without a writer hung the open (and every other rank with it),
     * and one with a writer lost its first two bytes to the gzip check. */
    p = tmp_path("fifo.idx.gz");
    LS_REQUIRE(mkfifo(p, 0600) == 0);
    LS_EXPECT_ERR(ls_idx_read(p, &idx), LS_ERR_IO,
                  EXPECTED("'%s' is a FIFO: an IDX file (plain or gzip) must be a regular file", p));
    LS_EXPECT_ERR(ls_idx_read("/dev/null", &idx), LS_ERR_IO, "'/dev/null' is a character device");
    /* A directory is not a file. */
    LS_EXPECT_ERR(ls_idx_read(tmpdir, &idx), LS_ERR_IO, EXPECTED("'%s' is a directory", tmpdir));
    LS_EXPECT_ERR(ls_idx_read(NULL, &idx), LS_ERR_INVALID_ARGUMENT, "NULL");
}

static void check_idx_roundtrip(void) {
    static uint8_t buf[4096];
    uint32_t dims[3] = {5, 6, 7};
    size_t n = make_idx(buf, 3, dims, 210);
    const char *paths[2] = {tmp_path("good.idx"), tmp_path("good.idx.gz")};
    write_plain(paths[0], buf, n);
    write_gz(paths[1], buf, n);
    for (int k = 0; k < 2; k++) {
        ls_idx idx;
        LS_REQUIRE_OK(ls_idx_read(paths[k], &idx));
        LS_EXPECT(idx.ndim == 3);
        LS_EXPECT(idx.dims[0] == 5 && idx.dims[1] == 6 && idx.dims[2] == 7);
        LS_EXPECT(idx.count == 210);
        LS_EXPECT(memcmp(idx.data, buf + 16, 210) == 0);
        ls_idx_free(&idx);
        LS_EXPECT(idx.data == NULL && idx.count == 0);
    }
    ls_idx_free(NULL);
}

/* A Fashion-MNIST-like pair in a sub-directory: n_img images of 3x4 and the given labels. */
static const char *make_fashion_dir(const char *name, int n_img, const uint8_t *labels, int n_lab) {
    const char *dir = tmp_path(name);
    LS_REQUIRE(mkdir(dir, 0700) == 0);
    static uint8_t buf[4096];
    char path[600];
    uint32_t dims[3] = {(uint32_t)n_img, 3, 4};
    size_t n = make_idx(buf, 3, dims, (size_t)n_img * 12);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_gz(path, buf, n);
    uint32_t ldims[1] = {(uint32_t)n_lab};
    n = make_idx(buf, 1, ldims, 0);
    memcpy(buf + n, labels, (size_t)n_lab);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_gz(path, buf, n + (size_t)n_lab);
    return dir;
}

static void remove_fashion_dir(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    unlink(path);
}

static void check_fashion_small(void) {
    static const uint8_t labels[6] = {0, 9, 3, 3, 1, 7};
    ls_dataset *d = NULL;

    const char *good = make_fashion_dir("good", 6, labels, 6);
    LS_REQUIRE_OK(ls_fashion_mnist_load(good, 1, 0, &d));
    LS_EXPECT(d->n == 6 && d->rows == 3 && d->cols == 4 && d->features == 12);
    LS_EXPECT(d->num_classes == 10);
    LS_EXPECT(d->bytes && !d->images); /* kept as the file's bytes */
    float got[72];
    int64_t all[6] = {0, 1, 2, 3, 4, 5};
    LS_REQUIRE_OK(ls_dataset_gather(d, all, 6, got, NULL));
    int exact = 1;
    for (int i = 0; i < 72; i++) {
        float want = ((float)(uint8_t)(i * 7 + 1) / 255.0f - 0.2860f) / 0.3530f;
        exact &= d->bytes[i] == (uint8_t)(i * 7 + 1) && got[i] == want;
    }
    LS_EXPECT(exact);
    for (int i = 0; i < 6; i++) LS_EXPECT(d->labels[i] == labels[i]);
    ls_dataset_destroy(d);
    d = NULL;
    LS_REQUIRE_OK(ls_fashion_mnist_load(good, 1, 4, &d));
    LS_EXPECT(d->n == 4 && d->features == 12);
    LS_EXPECT(d->labels[3] == 3);
    LS_EXPECT(d->bytes[47] == (uint8_t)(47 * 7 + 1));
    LS_EXPECT(d->lut[d->bytes[47]] == ((float)(uint8_t)(47 * 7 + 1) / 255.0f - 0.2860f) / 0.3530f);
    ls_dataset_destroy(d);
    d = NULL;
    LS_REQUIRE_OK(ls_fashion_mnist_load(good, 1, 100, &d)); /* limit above n keeps all */
    LS_EXPECT(d->n == 6);
    ls_dataset_destroy(d);
    d = NULL;
    char path[600];
    /* with a limit the labels file is still read to its end (its gzip checksum: a corrupt stream
     * gave labels of garbage without a word under --train-limit) */
    {
        static uint8_t lab[64], gzb[256];
        size_t m = make_idx(lab, 1, (const uint32_t[]){6}, 0);
        memcpy(lab + m, labels, 6);
        m += 6;
        uLongf glen = sizeof gzb;
        snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", good);
        write_gz(path, lab, m);
        FILE *f = fopen(path, "rb");
        LS_REQUIRE(f != NULL);
        glen = (uLongf)fread(gzb, 1, sizeof gzb, f);
        fclose(f);
        gzb[glen - 8] ^= 0x55; /* the CRC32 in the trailer */
        write_plain(path, gzb, glen);
        LS_EXPECT_ERR(ls_fashion_mnist_load(good, 1, 4, &d), LS_ERR_FORMAT,
                      EXPECTED("'%s': corrupt gzip stream", path));
        LS_EXPECT(d == NULL);
        write_gz(path, lab, m); /* back to the good file */
    }
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", good);
    /* the .gz is named, and that the un-gzipped name was looked for too */
    LS_EXPECT_ERR(ls_fashion_mnist_load(good, 0, 0, &d), LS_ERR_IO,
                  EXPECTED("cannot open '%s': No such file or directory; 't10k-labels-idx1-ubyte' (un-gzipped) is not "
                           "there either (Fashion-MNIST directory '%s')",
                           path, good));
    LS_EXPECT(d == NULL);
    /* the error says where the directory came from: LOCKSTEP_FASHION_DIR is a remedy only where
     * no directory was given (a program's --data-dir overrides it) */
    LS_REQUIRE(setenv("LOCKSTEP_FASHION_DIR", good, 1) == 0);
    LS_EXPECT_ERR(ls_fashion_mnist_load(NULL, 0, 0, &d), LS_ERR_IO,
                  EXPECTED("is not there either (Fashion-MNIST directory '%s', from LOCKSTEP_FASHION_DIR)", good));
    LS_EXPECT(d == NULL);
    /* a directory too long for its file paths is named, with its length and where it came from
     * (it was "ls_fashion_mnist_load: directory name too long") */
    {
        static char longdir[5000];
        memset(longdir, 'a', 4500);
        longdir[0] = '/';
        longdir[4500] = '\0';
        LS_EXPECT_ERR(ls_fashion_mnist_load(longdir, 1, 0, &d), LS_ERR_INVALID_ARGUMENT,
                      EXPECTED("the Fashion-MNIST directory '%.64s...' is too long: 4500 characters, where a file "
                               "path in it must fit in 4095",
                               longdir));
        LS_REQUIRE(setenv("LOCKSTEP_FASHION_DIR", longdir, 1) == 0);
        LS_EXPECT_ERR(ls_fashion_mnist_load(NULL, 0, 0, &d), LS_ERR_INVALID_ARGUMENT,
                      EXPECTED("'%.64s...' (LOCKSTEP_FASHION_DIR) is too long: 4500 characters", longdir));
        LS_EXPECT(d == NULL);
    }
    LS_REQUIRE(unsetenv("LOCKSTEP_FASHION_DIR") == 0);
    /* un-gzipped files (gunzip's result) are read where no .gz is there: the same set; the images
     * un-gzipped beside the labels' .gz, then both */
    {
        static uint8_t raw[4096];
        uint32_t dims[3] = {6, 3, 4};
        size_t n = make_idx(raw, 3, dims, 72);
        snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", good);
        unlink(path);
        path[strlen(path) - 3] = '\0';
        write_plain(path, raw, n);
        for (int round = 0; round < 2; round++) {
            if (round == 1) {
                uint32_t ld[1] = {6};
                size_t m = make_idx(raw, 1, ld, 0);
                memcpy(raw + m, labels, 6);
                snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", good);
                unlink(path);
                path[strlen(path) - 3] = '\0';
                write_plain(path, raw, m + 6);
            }
            LS_REQUIRE_OK(ls_fashion_mnist_load(good, 1, 0, &d));
            int same = d->n == 6 && d->rows == 3 && d->cols == 4;
            for (int i = 0; same && i < 72; i++) same = d->bytes[i] == (uint8_t)(i * 7 + 1);
            for (int i = 0; same && i < 6; i++) same = d->labels[i] == labels[i];
            LS_EXPECT(same);
            ls_dataset_destroy(d);
            d = NULL;
        }
        /* an un-gzipped images file shorter or longer than its header says is refused with a limit
         * too (its size is known without reading it): it was read as far as the limit */
        n = make_idx(raw, 3, dims, 72);
        snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", good);
        write_plain(path, raw, n - 1);
        LS_EXPECT_ERR(ls_fashion_mnist_load(good, 1, 2, &d), LS_ERR_FORMAT,
                      EXPECTED("'%s' is truncated: expected 72 bytes of data, found 71", path));
        LS_EXPECT(d == NULL);
        raw[n] = 0;
        write_plain(path, raw, n + 1);
        LS_EXPECT_ERR(ls_fashion_mnist_load(good, 1, 2, &d), LS_ERR_FORMAT,
                      EXPECTED("'%s' has extra data after the 72 bytes its IDX dimensions describe", path));
        LS_EXPECT(d == NULL);
        snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", good);
        unlink(path);
        snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", good);
        unlink(path);
    }
    remove_fashion_dir(good);

    /* a gzipped images file cut short after the limit: read as far as the limit, it loads (as
     * data.h and the README say); without a limit, or with one past the cut, it is refused */
    const char *cut = make_fashion_dir("cut_images", 6, labels, 6);
    {
        static uint8_t img[4096];
        size_t m = make_idx(img, 3, (const uint32_t[]){6, 3, 4}, 3 * 12); /* 6 images claimed, 3 there */
        snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", cut);
        write_gz(path, img, m);
        LS_REQUIRE_OK(ls_fashion_mnist_load(cut, 1, 3, &d));
        LS_EXPECT(d->n == 3 && d->bytes[35] == (uint8_t)(35 * 7 + 1) && d->labels[2] == 3);
        ls_dataset_destroy(d);
        d = NULL;
        LS_EXPECT_ERR(ls_fashion_mnist_load(cut, 1, 0, &d), LS_ERR_FORMAT,
                      EXPECTED("'%s' is truncated: expected 72 bytes of data, found 36", path));
        LS_EXPECT_ERR(ls_fashion_mnist_load(cut, 1, 4, &d), LS_ERR_FORMAT,
                      EXPECTED("'%s' is truncated: expected 48 bytes of data, found 36", path));
        LS_EXPECT(d == NULL);
    }
    remove_fashion_dir(cut);

    const char *mismatch = make_fashion_dir("mismatch", 6, labels, 5);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", mismatch);
    LS_EXPECT_ERR(ls_fashion_mnist_load(mismatch, 1, 0, &d), LS_ERR_FORMAT,
                  EXPECTED("'%s' has 6 images but '%s/train-labels-idx1-ubyte.gz' has 5 labels", path, mismatch));
    LS_EXPECT_ERR(ls_fashion_mnist_load(mismatch, 1, 2, &d), LS_ERR_FORMAT, "has 5 labels");
    LS_EXPECT(d == NULL);
    remove_fashion_dir(mismatch);

    static const uint8_t bad_labels[6] = {0, 9, 10, 3, 1, 7}; /* 10: the first bad one */
    const char *badlab = make_fashion_dir("badlabel", 6, bad_labels, 6);
    LS_EXPECT_ERR(ls_fashion_mnist_load(badlab, 1, 0, &d), LS_ERR_FORMAT,
                  EXPECTED("'%s/train-labels-idx1-ubyte.gz': label 10 at index 2 is out of range", badlab));
    LS_EXPECT(d == NULL);
    /* ... also where a limit leaves it out: the file is not Fashion-MNIST's */
    LS_EXPECT_ERR(ls_fashion_mnist_load(badlab, 1, 2, &d), LS_ERR_FORMAT,
                  EXPECTED("'%s/train-labels-idx1-ubyte.gz': label 10 at index 2 is out of range", badlab));
    LS_EXPECT(d == NULL);
    remove_fashion_dir(badlab);

    /* a labels file with 3 dimensions (an images file in its place): said so, before the data it
     * describes (it was "truncated: expected 1203725677686120000 bytes") */
    const char *swapped = make_fashion_dir("swapped", 6, labels, 6);
    static uint8_t img3[64];
    size_t n3 = make_idx(img3, 3, (const uint32_t[]){1000, 28, 28}, 8);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", swapped);
    write_gz(path, img3, n3);
    LS_EXPECT_ERR(ls_fashion_mnist_load(swapped, 1, 0, &d), LS_ERR_FORMAT,
                  EXPECTED("'%s' should hold labels [n] but has 3 dimensions", path));
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", swapped);
    write_gz(path, img3, make_idx(img3, 1, (const uint32_t[]){6}, 6));
    snprintf(expect_buf, sizeof expect_buf, "%s/train-labels-idx1-ubyte.gz", swapped);
    write_gz(expect_buf, img3, make_idx(img3, 1, (const uint32_t[]){6}, 6));
    LS_EXPECT_ERR(ls_fashion_mnist_load(swapped, 1, 0, &d), LS_ERR_FORMAT,
                  EXPECTED("'%s' should hold images [n, rows, cols] but has 1 dimension", path));
    LS_EXPECT(strstr(ls_last_error(), "1 dimensions") == NULL); /* one dimension, not "1 dimensions" */
    LS_EXPECT(d == NULL);
    remove_fashion_dir(swapped);
}

int main(void) {
    LS_REQUIRE(mkdtemp(tmpdir) != NULL);
    check_idx_errors();
    check_idx_roundtrip();
    check_fashion_small();
    for (int i = ncreated - 1; i >= 0; i--)
        if (unlink(created[i]) != 0) rmdir(created[i]);
    LS_EXPECT(rmdir(tmpdir) == 0);
    LS_TEST_END();
}
