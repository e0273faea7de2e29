/* data.c: IDX reading (plain or gzip through zlib), Fashion-MNIST loading and normalization,
 * in-memory data sets, and the distributed sampler. Data sets live in host memory: samples as f32
 * or as bytes decoded through a 256-entry table on gather, [n, features] row-major; labels int32
 * [n]. The sampler keeps one int64 permutation [N]. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "parse.h"
#include "rng.h"

#define LS_FASHION_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define LS_FASHION_MEAN 0.2860f
#define LS_FASHION_STD 0.3530f
#define LS_FASHION_CLASSES 10
#define LS_IDX_FIRST_CHUNK ((int64_t)16 << 20) /* first buffer for gzip data of unknown length */

/* ---------------------------------------------------------------- IDX source (plain or gzip) */

#define LS_GZ_IN_CHUNK (1u << 17) /* compressed bytes read at a time */

typedef struct idx_src {
    const char *path;
    FILE *f;            /* the file, plain or gzip */
    int gz;             /* gzip: inflated through z */
    int gz_end;         /* gzip: no more data (the last member ended, or the file did: see note) */
    z_stream z;         /* gzip: the inflate stream (window bits 16 + MAX_WBITS: a gzip wrapper) */
    unsigned char *in;  /* gzip: LS_GZ_IN_CHUNK bytes of compressed input */
    const char *note;   /* gzip: why the data ended early ("unexpected end of file"), or "" */
    int64_t plain_size; /* plain: file size in bytes */
} idx_src;

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

static ls_status src_open(const char *path, idx_src *s) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->note = "";
    /* O_NONBLOCK: a FIFO without a writer is refused below instead of hanging the open (and the
     * other ranks in their first collective); the data is read from regular files only, whose
     * size bounds what a plain file's header may claim and which a gzip check may read twice */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ls_error(LS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ls_error(LS_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ls_error(LS_ERR_IO, "'%s' is %s: an IDX file (plain or gzip) must be a regular file", path,
                        file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return ls_error(LS_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    }
    unsigned char magic[2];
    size_t got = fread(magic, 1, 2, f);
    if ((got < 2 && ferror(f)) || fseek(f, 0, SEEK_SET) != 0) {
        int e = errno;
        fclose(f);
        return ls_error(LS_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    s->f = f;
    s->plain_size = (int64_t)st.st_size;
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        s->gz = 1;
        s->in = malloc(LS_GZ_IN_CHUNK);
        int r = s->in ? inflateInit2(&s->z, 16 + MAX_WBITS) : Z_MEM_ERROR;
        if (r != Z_OK) {
            fclose(f);
            free(s->in);
            s->f = NULL;
            s->in = NULL;
            s->gz = 0;
            return ls_error(r == Z_MEM_ERROR ? LS_ERR_OUT_OF_MEMORY : LS_ERR_INTERNAL,
                            "cannot open '%s' as gzip: zlib's inflateInit2 failed (%d)", path, r);
        }
    }
    return LS_OK;
}

static void src_close(idx_src *s) {
    if (s->gz) inflateEnd(&s->z);
    if (s->f) fclose(s->f);
    free(s->in);
    s->f = NULL;
    s->in = NULL;
    s->gz = 0;
}

uint32_t ls_dataset_crc32(const ls_dataset *d) {
    if (!d) return 0;
    int64_t head[4] = {d->n, d->rows, d->cols, d->num_classes};
    uLong crc = crc32_z(0L, (const Bytef *)head, sizeof head);
    const size_t n = (size_t)(d->n > 0 ? d->n : 0), f = (size_t)(d->features > 0 ? d->features : 0);
    if (d->bytes) {
        crc = crc32_z(crc, d->bytes, n * f);
        crc = crc32_z(crc, (const Bytef *)d->lut, sizeof d->lut);
    } else if (d->images) {
        crc = crc32_z(crc, (const Bytef *)d->images, n * f * sizeof *d->images);
    }
    if (d->labels) crc = crc32_z(crc, (const Bytef *)d->labels, n * sizeof *d->labels);
    return (uint32_t)crc;
}

/* gzip: more compressed input, keeping the keep bytes still unread; 0 at the end of the file. */
static ls_status gz_fill(idx_src *s, size_t *added) {
    size_t keep = s->z.avail_in;
    if (keep && s->z.next_in != s->in) memmove(s->in, s->z.next_in, keep);
    size_t r = fread(s->in + keep, 1, LS_GZ_IN_CHUNK - keep, s->f);
    if (r == 0 && ferror(s->f)) return ls_error(LS_ERR_IO, "cannot read '%s': %s", s->path, strerror(errno));
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)(keep + r);
    *added = r;
    return LS_OK;
}

/* gzip: the rest of the file is zero bytes (padding; 1 when it is); reads it. */
static ls_status gz_rest_zero(idx_src *s, int *zero) {
    size_t added = 1;
    *zero = 1;
    while (*zero && added) {
        for (uInt i = 0; i < s->z.avail_in && *zero; i++) *zero = s->z.next_in[i] == 0;
        s->z.avail_in = 0;
        LS_CHECK(gz_fill(s, &added));
    }
    return LS_OK;
}

/* gzip: a member has ended. Another member may follow (gzip -c a b > ab.gz), or zero bytes to the
 * end of the file (padding: gzip -t says "decompression OK, trailing zero bytes ignored" and
 * Python's gzip, torchvision's reader, skips them; the data is whole by its CRC); anything else
 * after it is refused, as extra bytes after a plain file are (zlib's gzread dropped them silently,
 * where gzip -t says "trailing garbage"). */
static ls_status gz_member_end(idx_src *s) {
    size_t added = 1;
    while (s->z.avail_in < 2 && added) LS_CHECK(gz_fill(s, &added));
    if (s->z.avail_in == 0) {
        s->gz_end = 1; /* the end of the file: a clean end */
        return LS_OK;
    }
    if (s->z.avail_in >= 2 && s->z.next_in[0] == 0x1f && s->z.next_in[1] == 0x8b) {
        inflateReset(&s->z);
        return LS_OK;
    }
    long pos = ftell(s->f);
    long long after = pos >= 0 ? (long long)(s->plain_size - pos) + s->z.avail_in : (long long)s->z.avail_in;
    int zero = 0;
    LS_CHECK(gz_rest_zero(s, &zero));
    if (zero) {
        s->gz_end = 1;
        return LS_OK;
    }
    return ls_error(LS_ERR_FORMAT,
                    "'%s' has %lld byte%s after the end of its gzip data that %s not gzip (trailing garbage; "
                    "gzip -t reports it too)",
                    s->path, after, after == 1 ? "" : "s", after == 1 ? "is" : "are");
}

/* Read up to n bytes; *got < n only at the end of the data. Errors name the file. */
static ls_status src_read(idx_src *s, void *buf, int64_t n, int64_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        int64_t want = n - *got;
        if (want > (1 << 30)) want = 1 << 30;
        if (!s->gz) {
            size_t r = fread(p + *got, 1, (size_t)want, s->f);
            *got += (int64_t)r;
            if ((int64_t)r < want) {
                if (ferror(s->f)) return ls_error(LS_ERR_IO, "cannot read '%s': %s", s->path, strerror(errno));
                return LS_OK; /* end of file */
            }
            continue;
        }
        if (s->gz_end) return LS_OK;
        if (s->z.avail_in == 0) {
            size_t added = 0;
            LS_CHECK(gz_fill(s, &added));
            if (!added) { /* the file ended inside a member */
                s->gz_end = 1;
                s->note = "unexpected end of file";
                return LS_OK;
            }
        }
        s->z.next_out = p + *got;
        s->z.avail_out = (uInt)want;
        int r = inflate(&s->z, Z_NO_FLUSH);
        *got += want - (int64_t)s->z.avail_out;
        if (r == Z_STREAM_END) {
            LS_CHECK(gz_member_end(s));
        } else if (r == Z_MEM_ERROR) {
            return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': zlib is out of memory", s->path);
        } else if (r != Z_OK && r != Z_BUF_ERROR) { /* Z_BUF_ERROR: it needs more input, read above */
            return ls_error(LS_ERR_FORMAT, "'%s': corrupt gzip stream: %s", s->path,
                            s->z.msg ? s->z.msg : "invalid data");
        }
    }
    return LS_OK;
}

/* After a short read: why the gzip stream ended (e.g. "unexpected end of file"), or "". */
static const char *src_note(idx_src *s) { return s->gz ? s->note : ""; }

static ls_status src_truncated(idx_src *s, const char *what, int64_t expected, int64_t found) {
    const char *note = src_note(s);
    return ls_error(LS_ERR_FORMAT, "'%s' is truncated: expected %lld bytes of %s, found %lld%s%s%s", s->path,
                    (long long)expected, what, (long long)found, note[0] ? " (gzip: " : "", note, note[0] ? ")" : "");
}

/* After all the data the header describes: the file must end there, and a gzip stream must
 * end with a valid trailer (reading on makes zlib check the CRC and length). */
static ls_status src_expect_end(idx_src *s, int64_t count) {
    unsigned char extra[64];
    int64_t got = 0;
    LS_CHECK(src_read(s, extra, (int64_t)sizeof extra, &got));
    if (got > 0)
        return ls_error(LS_ERR_FORMAT, "'%s' has extra data after the %lld bytes its IDX dimensions describe", s->path,
                        (long long)count);
    const char *note = src_note(s);
    if (note[0]) return ls_error(LS_ERR_FORMAT, "'%s': corrupt gzip stream: %s", s->path, note);
    return LS_OK;
}

/* ---------------------------------------------------------------- IDX reader */

/* Valid IDX element types other than unsigned byte (which we do not read). */
static const char *idx_type_name(unsigned t) {
    switch (t) {
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return NULL;
    }
}

/* Read an IDX file keeping at most max_first (<= 0: all) entries along dims[0]; *full_first
 * receives the file's dims[0]. want_ndim > 0: the file must have that many dimensions, checked
 * with the header (what: "labels [n]"), before the sizes it would give the data. */
static ls_status idx_read_first(const char *path, int64_t max_first, int want_ndim, const char *what, ls_idx *out,
                                int64_t *full_first) {
    memset(out, 0, sizeof *out);
    if (!path) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_idx_read: path is NULL");
    idx_src s;
    LS_CHECK(src_open(path, &s));
    ls_status st = LS_OK;
    uint8_t *data = NULL;
    unsigned char hdr[4 + 4 * 4];
    int64_t got = 0;

    LS_CHECK_GOTO(src_read(&s, hdr, 4, &got), st, fail);
    if (got == 0 && !src_note(&s)[0]) { /* an empty file, or a whole gzip stream of nothing */
        st = ls_error(LS_ERR_FORMAT, "'%s' is empty: no IDX header", path);
        goto fail;
    }
    if (got < 4) { /* a gzip file cut before its first byte of data is no empty file: it is cut short */
        st = src_truncated(&s, "IDX header", 4, got);
        goto fail;
    }
    uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (hdr[0] != 0 || hdr[1] != 0) {
        int twice = s.gz && hdr[0] == 0x1f && hdr[1] == 0x8b; /* gzip run on a .gz */
        st = ls_error(LS_ERR_FORMAT, "'%s' is not an IDX file: bad magic 0x%08x%s", path, magic,
                      twice ? " (its gzip data is gzip again: the file was compressed twice; gunzip it once)" : "");
        goto fail;
    }
    if (hdr[2] != 0x08) {
        const char *tn = idx_type_name(hdr[2]);
        if (tn)
            st = ls_error(LS_ERR_UNSUPPORTED,
                          "'%s': unsupported IDX data type 0x%02x (%s); only unsigned byte (0x08) "
                          "is supported",
                          path, hdr[2], tn);
        else
            st = ls_error(LS_ERR_FORMAT, "'%s' is not an IDX file: unknown data type 0x%02x (magic 0x%08x)", path,
                          hdr[2], magic);
        goto fail;
    }
    int ndim = hdr[3];
    if (want_ndim > 0 && ndim != want_ndim) { /* (a labels file of 3 dimensions was "truncated") */
        st = ls_error(LS_ERR_FORMAT, "'%s' should hold %s but has %d dimension%s", path, what, ndim,
                      ndim == 1 ? "" : "s");
        goto fail;
    }
    if (ndim == 0) {
        st = ls_error(LS_ERR_FORMAT, "'%s': IDX file has 0 dimensions", path);
        goto fail;
    }
    if (ndim > 4) {
        st = ls_error(LS_ERR_UNSUPPORTED, "'%s': IDX file has %d dimensions; at most 4 are supported", path, ndim);
        goto fail;
    }
    LS_CHECK_GOTO(src_read(&s, hdr + 4, 4 * ndim, &got), st, fail);
    if (got < 4 * ndim) {
        st = src_truncated(&s, "IDX dimensions", 4 * ndim, got);
        goto fail;
    }
    int64_t count = 1, row = 1;
    for (int i = 0; i < ndim; i++) {
        const unsigned char *d = hdr + 4 + 4 * i;
        int64_t v = (int64_t)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
        if (v == 0) {
            st = ls_error(LS_ERR_FORMAT, "'%s': IDX dimension %d is zero", path, i);
            goto fail;
        }
        if (count > INT64_MAX / v) {
            st = ls_error(LS_ERR_FORMAT, "'%s': IDX dimensions overflow (dimension %d = %lld)", path, i, (long long)v);
            goto fail;
        }
        count *= v;
        if (i > 0) row *= v;
        out->dims[i] = v;
    }
    out->ndim = ndim;
    *full_first = out->dims[0];
    int64_t full_count = count;
    if (max_first > 0 && max_first < out->dims[0]) {
        out->dims[0] = max_first;
        count = max_first * row;
    }
    if ((uint64_t)count > (uint64_t)SIZE_MAX) {
        st = ls_error(LS_ERR_FORMAT, "'%s': IDX data of %lld bytes is too large", path, (long long)count);
        goto fail;
    }
    int64_t header = 4 + 4 * (int64_t)ndim;
    /* a plain file's size is known: one that does not hold what its header describes is refused
     * also where only its first entries are read (it was read as far as a limit) */
    if (!s.gz && s.plain_size - header < full_count) {
        st = src_truncated(&s, "data", full_count, s.plain_size - header);
        goto fail;
    }
    if (!s.gz && s.plain_size - header > full_count) {
        st = ls_error(LS_ERR_FORMAT, "'%s' has extra data after the %lld bytes its IDX dimensions describe", path,
                      (long long)full_count);
        goto fail;
    }
    /* Plain files are known to hold count bytes; gzip data grows the buffer as it arrives so a
     * lying header cannot make us allocate more than the stream holds (plus a factor 2). */
    int64_t cap = !s.gz ? count : (count < LS_IDX_FIRST_CHUNK ? count : LS_IDX_FIRST_CHUNK);
    int64_t have = 0;
    data = malloc((size_t)cap);
    if (!data) {
        st = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': cannot allocate %lld bytes for IDX data", path, (long long)cap);
        goto fail;
    }
    for (;;) {
        LS_CHECK_GOTO(src_read(&s, data + have, cap - have, &got), st, fail);
        have += got;
        if (have < cap) {
            st = src_truncated(&s, "data", count, have);
            goto fail;
        }
        if (have == count) break;
        int64_t ncap = cap > count / 2 ? count : cap * 2;
        uint8_t *nd = realloc(data, (size_t)ncap);
        if (!nd) {
            st = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': cannot allocate %lld bytes for IDX data", path, (long long)ncap);
            goto fail;
        }
        data = nd;
        cap = ncap;
    }
    if (count == full_count) LS_CHECK_GOTO(src_expect_end(&s, count), st, fail);
    src_close(&s);
    out->data = data;
    out->count = count;
    return LS_OK;

fail:
    free(data);
    src_close(&s);
    memset(out, 0, sizeof *out);
    return st;
}

ls_status ls_idx_read(const char *path, ls_idx *out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_idx_read: out is NULL");
    int64_t full_first = 0;
    return idx_read_first(path, 0, 0, NULL, out, &full_first);
}

void ls_idx_free(ls_idx *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ---------------------------------------------------------------- data sets */

/* Process-unique data set ids (1, 2, ...): what a trainer finds its device copy of a set by. */
static uint64_t dataset_next_id(void) {
    static uint64_t next_id;
    return __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
}

void ls_dataset_changed(ls_dataset *d) {
    if (d) d->id = dataset_next_id();
}

/* A set of n samples x features, stored as f32 (elem 4) or as bytes (elem 1); elem 0 leaves the
 * samples to the caller (bytes it already has). */
static ls_status dataset_alloc(int64_t n, int64_t features, size_t elem, ls_dataset **out) {
    ls_dataset *d = calloc(1, sizeof *d);
    if (!d) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a data set");
    size_t ni = (size_t)n * (size_t)features, nl = (size_t)n;
    void *samples = elem ? malloc((ni ? ni : 1) * elem) : NULL;
    if (elem == 1)
        d->bytes = samples;
    else
        d->images = samples;
    d->labels = malloc((nl ? nl : 1) * sizeof(int32_t));
    if ((elem && !samples) || !d->labels) {
        ls_dataset_destroy(d);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a data set of %lld samples x %lld features (%.1f MiB)",
                        (long long)n, (long long)features, (double)(ni * elem + nl * sizeof(int32_t)) / 1048576.0);
    }
    d->id = dataset_next_id();
    d->n = n;
    d->features = features;
    d->rows = 1;
    d->cols = features;
    *out = d;
    return LS_OK;
}

void ls_dataset_destroy(ls_dataset *d) {
    if (!d) return;
    free(d->images);
    free(d->bytes);
    free(d->labels);
    free(d);
}

size_t ls_dataset_sample_bytes(const ls_dataset *d) {
    if (!d) return 0;
    return (size_t)d->n * (size_t)d->features * (d->bytes ? 1 : sizeof(float));
}

/* The checks shared by ls_dataset_from_arrays and _from_bytes (fn names the caller). */
static ls_status check_arrays(const char *fn, int64_t n, int64_t features, int32_t num_classes, const void *samples,
                              const int32_t *labels, size_t elem) {
    if (n < 0 || features < 1 || num_classes < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: need n >= 0, features >= 1 and num_classes >= 1, got n=%lld features=%lld num_classes=%d",
                        fn, (long long)n, (long long)features, (int)num_classes);
    if (n > 0 && (!samples || !labels))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s or labels is NULL", fn, elem == 1 ? "bytes" : "images");
    /* gathers write f32 whichever the storage, so the f32 size must not overflow either */
    if (n > 0 && (uint64_t)features > (uint64_t)(SIZE_MAX / sizeof(float)) / (uint64_t)n)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %lld samples x %lld features overflows", fn, (long long)n,
                        (long long)features);
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= num_classes)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: label %d at index %lld is outside [0, %d)", fn,
                            (int)labels[i], (long long)i, (int)num_classes);
    return LS_OK;
}

ls_status ls_dataset_from_arrays(int64_t n, int64_t features, int32_t num_classes, const float *images,
                                 const int32_t *labels, ls_dataset **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_from_arrays: out is NULL");
    *out = NULL;
    LS_CHECK(check_arrays("ls_dataset_from_arrays", n, features, num_classes, images, labels, sizeof(float)));
    /* one NaN or inf in the inputs makes the weights it reaches NaN, yet ReLU (NaN > 0 is false)
     * can keep the loss finite: the model dies without a sign */
    for (int64_t i = 0; i < n * features; i++)
        if (!isfinite(images[i]))
            return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_from_arrays: sample %lld, feature %lld is %g",
                            (long long)(i / features), (long long)(i % features), (double)images[i]);
    ls_dataset *d;
    LS_CHECK(dataset_alloc(n, features, sizeof(float), &d));
    d->num_classes = num_classes;
    if (n > 0) {
        memcpy(d->images, images, (size_t)n * (size_t)features * sizeof(float));
        memcpy(d->labels, labels, (size_t)n * sizeof(int32_t));
    }
    *out = d;
    return LS_OK;
}

ls_status ls_dataset_from_bytes(int64_t n, int64_t features, int32_t num_classes, const uint8_t *bytes,
                                const float lut[256], const int32_t *labels, ls_dataset **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_from_bytes: out is NULL");
    *out = NULL;
    if (!lut) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_from_bytes: lut is NULL");
    for (int i = 0; i < 256; i++)
        if (!isfinite(lut[i]))
            return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_from_bytes: lut[%d] is %g", i, (double)lut[i]);
    LS_CHECK(check_arrays("ls_dataset_from_bytes", n, features, num_classes, bytes, labels, 1));
    ls_dataset *d;
    LS_CHECK(dataset_alloc(n, features, 1, &d));
    d->num_classes = num_classes;
    memcpy(d->lut, lut, sizeof d->lut);
    if (n > 0) {
        memcpy(d->bytes, bytes, (size_t)n * (size_t)features);
        memcpy(d->labels, labels, (size_t)n * sizeof(int32_t));
    }
    *out = d;
    return LS_OK;
}

ls_status ls_dataset_to_f32(ls_dataset *d) {
    if (!d) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_to_f32: the data set is NULL");
    if (!d->bytes) return LS_OK;
    if (d->id == 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_dataset_to_f32: a data set filled by hand (id 0) owns no memory the library may free");
    size_t ni = (size_t)d->n * (size_t)d->features;
    float *images = malloc((ni ? ni : 1) * sizeof(float));
    if (!images)
        return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_dataset_to_f32: no memory for %lld samples x %lld f32 (%.1f MiB)",
                        (long long)d->n, (long long)d->features, (double)(ni * sizeof(float)) / 1048576.0);
    for (size_t i = 0; i < ni; i++) images[i] = d->lut[d->bytes[i]];
    free(d->bytes);
    d->bytes = NULL;
    d->images = images;
    ls_dataset_changed(d);
    return LS_OK;
}

/* dst[c] = lut[src[c]] for c < f. Four values are stored at once (SSE2, x86-64's baseline): 2.2x
 * the speed of one float at a time in a micro-benchmark of 4096 rows (docs/performance.md). */
static void decode_row(const uint8_t *src, float *dst, size_t f, const float *lut) {
    size_t c = 0;
#ifdef __SSE2__
    for (; c + 4 <= f; c += 4)
        _mm_storeu_ps(dst + c, _mm_set_ps(lut[src[c + 3]], lut[src[c + 2]], lut[src[c + 1]], lut[src[c]]));
#endif
    for (; c < f; c++) dst[c] = lut[src[c]];
}

/* The checks of a gather (fn: the function the caller called, which the message names): the
 * indices, and that the set has the samples (samples != 0) and labels (labels != 0) asked for. */
static ls_status gather_check(const char *fn, const ls_dataset *d, const int64_t *idx, int64_t count, int samples,
                              int labels) {
    if (!d || count < 0 || (count > 0 && !idx))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: need a data set, count >= 0 and indices (count=%lld)", fn,
                        (long long)count);
    for (int64_t i = 0; i < count; i++)
        if (idx[i] < 0 || idx[i] >= d->n)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: index %lld at position %lld is outside [0, %lld)", fn,
                            (long long)idx[i], (long long)i, (long long)d->n);
    if (samples && !d->images && !d->bytes)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the data set has neither images nor bytes", fn);
    if (labels && !d->labels) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the data set has no labels", fn);
    return LS_OK;
}

/* ls_dataset_gather's copy, of arguments gather_check has accepted. */
static void gather_rows(const ls_dataset *d, const int64_t *idx, int64_t count, float *images_out,
                        int32_t *labels_out) {
    size_t f = (size_t)d->features;
    const uint8_t *bytes = d->bytes;
    const char *base = bytes ? (const char *)bytes : (const char *)d->images;
    size_t row_bytes = bytes ? f : f * sizeof(float);
    /* Random rows are latency-bound: the rows GATHER_AHEAD ahead are prefetched while a row is
     * copied (4x faster for a batch of 128 Fashion-MNIST rows out of cache: 294 -> 75 us). */
    enum { GATHER_AHEAD = 4 };
    for (int64_t i = 0; i < count + GATHER_AHEAD; i++) {
        if (images_out && i < count) {
            const char *row = base + (size_t)idx[i] * row_bytes;
            for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b);
        }
        int64_t j = i - GATHER_AHEAD; /* the row copied now */
        if (j < 0) continue;
        if (images_out && bytes) {
            decode_row(bytes + (size_t)idx[j] * f, images_out + (size_t)j * f, f, d->lut);
        } else if (images_out) {
            memcpy(images_out + (size_t)j * f, d->images + (size_t)idx[j] * f, f * sizeof(float));
        }
        if (labels_out) labels_out[j] = d->labels[idx[j]];
    }
}

ls_status ls_dataset_gather(const ls_dataset *d, const int64_t *idx, int64_t count, float *images_out,
                            int32_t *labels_out) {
    LS_CHECK(gather_check("ls_dataset_gather", d, idx, count, images_out != NULL, labels_out != NULL));
    gather_rows(d, idx, count, images_out, labels_out);
    return LS_OK;
}

ls_status ls_dataset_gather_bytes(const ls_dataset *d, const int64_t *idx, int64_t count, uint8_t *bytes_out,
                                  int32_t *labels_out) {
    if (d && bytes_out && !d->bytes)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_dataset_gather_bytes: the data set keeps f32 values, not bytes");
    LS_CHECK(gather_check("ls_dataset_gather_bytes", d, idx, count, 0, labels_out != NULL));
    gather_rows(d, idx, count, NULL, labels_out);
    size_t f = (size_t)d->features;
    if (bytes_out)
        for (int64_t i = 0; i < count; i++) memcpy(bytes_out + (size_t)i * f, d->bytes + (size_t)idx[i] * f, f);
    return LS_OK;
}

typedef struct gather_job {
    const ls_dataset *d;
    const int64_t *idx;
    int64_t count;
    float *images_out;
    int32_t *labels_out;
} gather_job;

static void *gather_run(void *arg) {
    gather_job *j = arg;
    gather_rows(j->d, j->idx, j->count, j->images_out, j->labels_out);
    return NULL;
}

/* LOCKSTEP_GATHER_THREADS, else 4 where this process may run on at least 8 CPUs (its affinity:
 * under mpirun --bind-to core a rank has one), else 1: on 2 CPUs a second thread was no faster
 * (bench_gather --threads 2: 0.96x-0.97x at 4096 rows of f32, docs/performance.md). */
ls_status ls_dataset_gather_threads(int *out) {
    LS_CHECK_ARG(out, "ls_dataset_gather_threads: out is NULL");
    const char *e = getenv("LOCKSTEP_GATHER_THREADS");
    if (e && *e) {
        long long v; /* digits only: strtol took a space and a '+' */
        if (!ls_parse_count(e, 64, &v) || v < 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GATHER_THREADS='%s': use a thread count from 1 to 64",
                            e);
        *out = (int)v;
        return LS_OK;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    *out = n >= 8 ? 4 : 1;
    return LS_OK;
}

ls_status ls_dataset_gather_parallel(const ls_dataset *d, const int64_t *idx, int64_t count, float *images_out,
                                     int32_t *labels_out, int threads) {
    enum { MAX_THREADS = 64 };
    if (threads <= 0) LS_CHECK(ls_dataset_gather_threads(&threads));
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    size_t row = d ? (size_t)d->features * sizeof(float) : 0, bytes = row * (size_t)(count > 0 ? count : 0);
    int64_t most = (int64_t)(bytes / (1 << 20)); /* at least 1 MiB a thread */
    if (most < threads) threads = most > 1 ? (int)most : 1;
    if (threads > count) threads = count > 1 ? (int)count : 1;
    /* the indices, and that the set has what is asked for, are checked here, once, so a thread
     * cannot fail (and errors name the position in the whole batch) */
    LS_CHECK(gather_check("ls_dataset_gather_parallel", d, idx, count, images_out != NULL, labels_out != NULL));
    if (threads <= 1) {
        gather_rows(d, idx, count, images_out, labels_out);
        return LS_OK;
    }
    gather_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int64_t per = (count + threads - 1) / threads;
    for (int k = 0; k < threads; k++) {
        int64_t lo = k * per < count ? k * per : count, hi = lo + per < count ? lo + per : count;
        jobs[k] =
            (gather_job){d, idx + lo, hi > lo ? hi - lo : 0, images_out ? images_out + (size_t)lo * d->features : NULL,
                         labels_out ? labels_out + lo : NULL};
        if (k > 0) started[k] = pthread_create(&tid[k], NULL, gather_run, &jobs[k]) == 0;
    }
    gather_run(&jobs[0]);
    for (int k = 1; k < threads; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            gather_run(&jobs[k]); /* no thread to be had: this one does it */
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- Fashion-MNIST */

/* dir/name.gz, or dir/name when only that (un-gzipped, as gunzip leaves it) is there; 0 if too long.
 * *neither: 1 when neither is there (the error names the .gz, and says the other was looked for). */
static int fashion_path(char *out, size_t size, const char *dir, const char *prefix, const char *name, int *neither) {
    *neither = 0;
    int n = snprintf(out, size, "%s/%s-%s.gz", dir, prefix, name);
    if (n < 0 || (size_t)n >= size) return 0;
    if (access(out, F_OK) != 0 && errno == ENOENT) {
        out[n - 3] = '\0';
        if (access(out, F_OK) != 0) {
            *neither = errno == ENOENT;
            out[n - 3] = '.';
        }
    }
    return 1;
}

ls_status ls_fashion_mnist_load(const char *dir, int train, int64_t limit, ls_dataset **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_fashion_mnist_load: out is NULL");
    *out = NULL;
    /* where the directory came from, for the hint of an I/O error: LOCKSTEP_FASHION_DIR is no
     * remedy where the caller gave one (a program's --data-dir overrides it) */
    const char *from = "";
    if (!dir || !dir[0]) {
        dir = getenv("LOCKSTEP_FASHION_DIR");
        from = ", from LOCKSTEP_FASHION_DIR";
    }
    if (!dir || !dir[0]) {
        dir = LS_FASHION_DEFAULT_DIR;
        from = NULL;
    }
    const char *prefix = train ? "train" : "t10k";
    char ipath[4096], lpath[4096];
    int img_neither = 0, lab_neither = 0;
    if (!fashion_path(ipath, sizeof ipath, dir, prefix, "images-idx3-ubyte", &img_neither) ||
        !fashion_path(lpath, sizeof lpath, dir, prefix, "labels-idx1-ubyte", &lab_neither))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the Fashion-MNIST directory '%.64s...'%s is too long: %zu characters, where a file path "
                        "in it must fit in %zu",
                        dir, from && from[0] ? " (LOCKSTEP_FASHION_DIR)" : "", strlen(dir), sizeof ipath - 1);

    ls_status st = LS_OK;
    ls_idx img, lab;
    memset(&img, 0, sizeof img);
    memset(&lab, 0, sizeof lab);
    ls_dataset *d = NULL;
    int64_t n_img = 0, n_lab = 0;

    /* the labels are read whole whatever the limit (60 KB): a gzip stream's checksum is checked at
     * its end only, and a corrupt one read as far as a limit gave labels of garbage without a word;
     * and every label is checked. The images are read as far as the limit: a gzip file's checksum is
     * not checked there (its whole stream is most of a full load's time). */
    const char *reading = lpath; /* the file an I/O error is of */
    int neither = lab_neither;
    LS_CHECK_GOTO(idx_read_first(lpath, 0, 1, "labels [n]", &lab, &n_lab), st, fail);
    reading = ipath;
    neither = img_neither;
    LS_CHECK_GOTO(idx_read_first(ipath, limit, 3, "images [n, rows, cols]", &img, &n_img), st, fail);
    if (n_img != n_lab) {
        st = ls_error(LS_ERR_FORMAT, "'%s' has %lld images but '%s' has %lld labels", ipath, (long long)n_img, lpath,
                      (long long)n_lab);
        goto fail;
    }
    int64_t n = img.dims[0], features = img.dims[1] * img.dims[2];
    for (int64_t i = 0; i < n_lab; i++)
        if (lab.data[i] >= LS_FASHION_CLASSES) {
            st = ls_error(LS_ERR_FORMAT, "'%s': label %d at index %lld is out of range [0, %d)", lpath,
                          (int)lab.data[i], (long long)i, LS_FASHION_CLASSES);
            goto fail;
        }
    LS_CHECK_GOTO(dataset_alloc(n, features, 0, &d), st, fail);
    d->rows = img.dims[1];
    d->cols = img.dims[2];
    d->num_classes = LS_FASHION_CLASSES;
    for (int v = 0; v < 256; v++) d->lut[v] = ((float)v / 255.0f - LS_FASHION_MEAN) / LS_FASHION_STD;
    d->bytes = img.data; /* the file's bytes are the set's: no copy */
    img.data = NULL;
    for (int64_t i = 0; i < n; i++) d->labels[i] = lab.data[i];
    ls_idx_free(&img);
    ls_idx_free(&lab);
    *out = d;
    return LS_OK;

fail:
    if (st == LS_ERR_IO && strlen(ls_last_error()) < 700) {
        char msg[1024];
        /* "x.gz: No such file or directory; 'x' (un-gzipped) is not there either" */
        const char *base = strrchr(reading, '/');
        base = base ? base + 1 : reading;
        if (neither)
            snprintf(msg, sizeof msg, "%s; '%.*s' (un-gzipped) is not there either", ls_last_error(),
                     (int)strlen(base) - 3, base);
        else
            snprintf(msg, sizeof msg, "%s", ls_last_error());
        if (from)
            ls_error(st, "%s (Fashion-MNIST directory '%s'%s)", msg, dir, from);
        else
            ls_error(st, "%s (the default Fashion-MNIST directory '%s': set LOCKSTEP_FASHION_DIR or pass another)", msg,
                     dir);
    }
    ls_dataset_destroy(d);
    ls_idx_free(&img);
    ls_idx_free(&lab);
    return st;
}

/* ---------------------------------------------------------------- sampler */

struct ls_sampler {
    int64_t n;           /* data-set size */
    int64_t total;       /* positions over all ranks: padded (PAD), truncated (DROP_LAST) or n */
    int64_t num_samples; /* this rank's share of total */
    int rank, world;
    uint64_t seed;
    int shuffle;
    ls_sampler_mode mode;
    int64_t epoch;
    int64_t *perm; /* [n]: position p < n holds perm[p]; padded position p >= n holds perm[p % n] */
};

ls_status ls_sampler_create(int64_t dataset_size, int rank, int world, uint64_t seed, int shuffle, ls_sampler_mode mode,
                            ls_sampler **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: out is NULL");
    *out = NULL;
    if (dataset_size < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: dataset size %lld is negative",
                        (long long)dataset_size);
    if (world < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: world size %d must be >= 1", world);
    if (rank < 0 || rank >= world)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: rank %d is out of range [0, %d)", rank, world);
    if (mode != LS_SAMPLER_PAD && mode != LS_SAMPLER_DROP_LAST && mode != LS_SAMPLER_EXACT)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: unknown mode %d", (int)mode);
    if (shuffle && dataset_size > (int64_t)UINT32_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_sampler_create: dataset size %lld is too large to shuffle (max %lld)",
                        (long long)dataset_size, (long long)UINT32_MAX);
    if ((uint64_t)dataset_size > (uint64_t)(SIZE_MAX / sizeof(int64_t)) - 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_create: dataset size %lld is too large",
                        (long long)dataset_size);

    ls_sampler *s = calloc(1, sizeof *s);
    if (!s) return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_sampler_create: cannot allocate a sampler");
    s->perm = malloc(((size_t)dataset_size + 1) * sizeof(int64_t));
    if (!s->perm) {
        free(s);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_sampler_create: cannot allocate a permutation of %lld samples",
                        (long long)dataset_size);
    }
    int64_t n = dataset_size, w = world;
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->seed = seed;
    s->shuffle = shuffle != 0;
    s->mode = mode;
    switch (mode) {
    case LS_SAMPLER_PAD:
        s->num_samples = n / w + (n % w != 0);
        s->total = s->num_samples * w;
        break;
    case LS_SAMPLER_DROP_LAST:
        s->num_samples = n / w;
        s->total = s->num_samples * w;
        break;
    case LS_SAMPLER_EXACT:
        s->total = n;
        s->num_samples = n > rank ? (n - rank + w - 1) / w : 0;
        break;
    }
    s->epoch = -1;
    ls_status st = ls_sampler_set_epoch(s, 0);
    if (st != LS_OK) {
        ls_sampler_destroy(s);
        return st;
    }
    *out = s;
    return LS_OK;
}

void ls_sampler_destroy(ls_sampler *s) {
    if (!s) return;
    free(s->perm);
    free(s);
}

ls_status ls_sampler_set_epoch(ls_sampler *s, int64_t epoch) {
    if (!s) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_set_epoch: sampler is NULL");
    if (epoch < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_set_epoch: epoch %lld is negative", (long long)epoch);
    for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
    if (s->shuffle) {
        ls_rng rng;
        ls_rng_init_stream(&rng, s->seed, (uint64_t)epoch);
        ls_rng_shuffle(&rng, s->perm, s->n);
    }
    s->epoch = epoch;
    return LS_OK;
}

int64_t ls_sampler_epoch(const ls_sampler *s) { return s ? s->epoch : 0; }

int64_t ls_sampler_num_samples(const ls_sampler *s) { return s ? s->num_samples : 0; }

/* world * b, or -1 when it overflows. */
static int64_t sampler_global_batch(const ls_sampler *s, int64_t b) {
    if (b < 1 || b > INT64_MAX / s->world) return -1;
    return b * s->world;
}

int64_t ls_sampler_steps(const ls_sampler *s, int64_t batch_per_rank) {
    if (!s || batch_per_rank < 1) return 0;
    /* total is a multiple of world except in EXACT mode, where rank 0's share decides. */
    int64_t per_rank = s->mode == LS_SAMPLER_EXACT ? s->n / s->world + (s->n % s->world != 0) : s->total / s->world;
    if (s->mode == LS_SAMPLER_DROP_LAST) return per_rank / batch_per_rank;
    return per_rank / batch_per_rank + (per_rank % batch_per_rank != 0);
}

ls_status ls_sampler_batch(const ls_sampler *s, int64_t step, int64_t batch_per_rank, int64_t *idx_out,
                           int64_t *count_out, int64_t *global_count_out) {
    if (!s || !count_out || (batch_per_rank > 0 && !idx_out))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_sampler_batch: NULL sampler or output");
    int64_t B = sampler_global_batch(s, batch_per_rank);
    if (B < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_sampler_batch: batch per rank %lld must be >= 1 (and world x batch fit "
                        "in 64 bits)",
                        (long long)batch_per_rank);
    int64_t steps = ls_sampler_steps(s, batch_per_rank);
    if (step < 0 || step >= steps)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_sampler_batch: step %lld is out of range [0, %lld) for batch %lld per "
                        "rank",
                        (long long)step, (long long)steps, (long long)batch_per_rank);
    /* Rank r's k-th sample is global position r + k*world; step j takes k in [j*b, (j+1)*b),
     * i.e. the positions of [j*B, (j+1)*B) congruent to r. */
    int64_t first = step * batch_per_rank, end = first + batch_per_rank;
    if (end > s->num_samples) end = s->num_samples;
    int64_t c = 0;
    for (int64_t k = first; k < end; k++) {
        int64_t p = (int64_t)s->rank + k * s->world;
        idx_out[c++] = s->perm[p < s->n ? p : p % s->n];
    }
    *count_out = c;
    if (global_count_out) {
        int64_t g = s->total - step * B;
        *global_count_out = g < B ? g : B;
    }
    return LS_OK;
}
