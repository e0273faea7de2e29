/* checkpoint.c: the safetensors reader and writer, crash-safe file writes (NAME.tmp, fsync,
 * rename, fsync of the directory), checkpoint save/load with a CRC32 manifest (rank 0 does the
 * I/O, the other ranks receive status, state and tensors by broadcast), the resume position at a
 * new world size, and the SIGTERM/SIGINT preemption flag. Files are written as they are produced
 * and read through read-only mappings: rank 0 never holds a whole file in its own memory. */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "cnn.h"
#include "ddp.h"
#include "cpu/cpu.h"
#include "log.h"
#include "timeline.h"

#define LS_CKPT_BUFFER_NAME 160 /* a buffer's name: its BatchNorm's weight name + "running_mean" */

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact integers */

/* The largest manifest.json and state.json a load reads (a manifest lists at most CKPT_MAX_FILES
 * files, a few hundred bytes; state.json is about 100 bytes a parameter tensor): a file of 1 GB
 * was read whole before its size was looked at. A save refuses a larger state. */
#define CKPT_MANIFEST_MAX ((size_t)1 << 20)
#define CKPT_STATE_MAX ((size_t)64 << 20)

/* ---------------------------------------------------------------- small helpers */

static int host_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT_INT) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* The offset of the first byte of s[0..n) that starts no valid UTF-8 sequence; n when all are valid. */
static size_t utf8_bad_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0)
            len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            len = 4, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

static int utf8_valid(const unsigned char *s, size_t n) { return utf8_bad_at(s, n) == n; }

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < ndim && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* s (at most n bytes of it) for a message: control bytes (a newline, a terminal's escape sequence
 * in a tensor's name) as \xNN, cut with "..." past ESC_MAX bytes; into buf, of ESC_MAX. A file's
 * names reached the terminal raw in errors, where the tensors listing escaped them. */
#define ESC_MAX 200
static const char *esc_str(const char *s, size_t n, char *buf) {
    size_t k = 0;
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (k + 8 >= ESC_MAX) {
            memcpy(buf + k, "...", 4);
            return buf;
        }
        if (c < 0x20 || c == 0x7f)
            k += (size_t)snprintf(buf + k, ESC_MAX - k, "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    buf[k] = '\0';
    return buf;
}
/* a name escaped for a message, in a buffer of the enclosing block's (or its first n bytes) */
#define ESC_NAME(s) esc_str((s), SIZE_MAX, (char[ESC_MAX]){0})
#define ESC_NAMEN(s, n) esc_str((s), (n), (char[ESC_MAX]){0})

static uint32_t crc32_of(const void *buf, size_t len) {
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *p = buf;
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
}

/* ---------------------------------------------------------------- safetensors */

typedef struct st_dtype {
    const char *name;
    size_t size;
    int has;
    ls_dtype dt;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F64", 8, 1, LS_F64},  {"F32", 4, 1, LS_F32},     {"F16", 2, 1, LS_F16},     {"BF16", 2, 1, LS_BF16},
    {"I32", 4, 1, LS_I32},  {"U8", 1, 1, LS_U8},       {"I64", 8, 0, LS_F32},     {"I16", 2, 0, LS_F32},
    {"I8", 1, 0, LS_F32},   {"U64", 8, 0, LS_F32},     {"U32", 4, 0, LS_F32},     {"U16", 2, 0, LS_F32},
    {"BOOL", 1, 0, LS_F32}, {"F8_E4M3", 1, 0, LS_F32}, {"F8_E5M2", 1, 0, LS_F32}, {"F8_E8M0", 1, 0, LS_F32},
};
#define N_ST_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

static const st_dtype *st_dtype_by_name(const char *s) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, s) == 0) return &st_dtypes[i];
    return NULL;
}

static const char *st_dtype_name(ls_dtype t) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].has && st_dtypes[i].dt == t) return st_dtypes[i].name;
    return "?";
}

/* A file's bytes: mapped read-only (mapped 1: the page cache's pages, which the kernel reads in as
 * they are touched and may drop again, not this process's memory), or read into malloc'd memory. */
typedef struct file_bytes {
    unsigned char *p;
    size_t len;
    int mapped;
} file_bytes;

static void fb_free(file_bytes *b) {
    if (b->mapped)
        munmap(b->p, b->len);
    else
        free(b->p);
    memset(b, 0, sizeof *b);
}

typedef struct st_entry {
    ls_safetensors_info info;
    uint64_t begin, end;
} st_entry;

typedef struct st_meta {
    char *key, *value;
} st_meta;

struct ls_safetensors {
    char *name;
    file_bytes own; /* the file's contents when we opened it: mapped, or read */
    const unsigned char *buf;
    size_t len;
    int n;
    st_entry *t;        /* sorted by data offset */
    st_entry **by_name; /* the entries sorted by name (ls_safetensors_find bisects) */
    int n_meta;
    st_meta *meta;
};

void ls_safetensors_close(ls_safetensors *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].info.name);
    free(f->by_name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->t);
    free(f->meta);
    fb_free(&f->own);
    free(f->name);
    free(f);
}

static int cmp_entry_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(st_entry *const *)a)->info.name, (*(st_entry *const *)b)->info.name);
}

/* Parse one tensor entry of the header into e (name already set). */
static ls_status st_parse_entry(const char *nm, const cJSON *c, st_entry *e) {
    const char *key = e->info.name;
    char sb[160];
    if (!cJSON_IsObject(c)) return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' is not a JSON object", nm, ESC_NAME(key));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(c, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(c, "data_offsets");
    if (!cJSON_IsString(dtype))
        return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has no \"dtype\" string", nm, ESC_NAME(key));
    const st_dtype *dt = st_dtype_by_name(dtype->valuestring);
    if (!dt)
        return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has unknown dtype '%s'", nm, ESC_NAME(key),
                        ESC_NAMEN(dtype->valuestring, 32));
    if (!cJSON_IsArray(shape))
        return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has no \"shape\" array", nm, ESC_NAME(key));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > LS_SAFETENSORS_MAX_DIMS)
        return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has %d dimensions; at most %d are supported", nm,
                        ESC_NAME(key), ndim, LS_SAFETENSORS_MAX_DIMS);
    uint64_t numel = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (!json_uint(d, &v))
            return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has a shape entry that is not an integer from 0 to 2^53",
                            nm, ESC_NAME(key));
        if (__builtin_mul_overflow(numel, v, &numel) || numel > (uint64_t)INT64_MAX)
            return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' has a shape whose element count overflows", nm,
                            ESC_NAME(key));
        e->info.shape[k++] = (int64_t)v;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &en) || b > en)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': tensor '%s' has invalid \"data_offsets\" (need [begin, end], integers, begin <= end)",
                        nm, ESC_NAME(key));
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)dt->size, &bytes) || bytes != en - b)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] span %llu",
                        nm, ESC_NAME(key), shape_str(ndim, e->info.shape, sb, sizeof sb), dt->name,
                        (unsigned long long)(numel * dt->size), (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)(en - b));
    e->info.dtype_name = dt->name;
    e->info.has_dtype = dt->has;
    e->info.dtype = dt->dt;
    e->info.elem_size = dt->size;
    e->info.ndim = ndim;
    e->info.numel = (int64_t)numel;
    e->info.nbytes = (size_t)bytes;
    e->begin = b;
    e->end = en;
    return LS_OK;
}

static ls_status st_parse_metadata(ls_safetensors *f, const cJSON *c) {
    if (f->meta) return ls_error(LS_ERR_FORMAT, "'%s': \"__metadata__\" appears more than once", f->name);
    if (!cJSON_IsObject(c)) return ls_error(LS_ERR_FORMAT, "'%s': \"__metadata__\" is not an object", f->name);
    int n = cJSON_GetArraySize(c);
    f->meta = calloc((size_t)n + 1, sizeof *f->meta);
    if (!f->meta) return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory for the metadata", f->name);
    const cJSON *m;
    cJSON_ArrayForEach(m, c) {
        if (!m->string || !cJSON_IsString(m))
            return ls_error(LS_ERR_FORMAT, "'%s': \"__metadata__\" value '%.64s' is not a string", f->name,
                            m->string ? ESC_NAMEN(m->string, 64) : "");
        st_meta *e = &f->meta[f->n_meta];
        e->key = strdup(m->string);
        e->value = strdup(m->valuestring);
        if (!e->key || !e->value) {
            free(e->key);
            free(e->value);
            return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory for the metadata", f->name);
        }
        f->n_meta++;
    }
    /* a repeated key, sorted, is its neighbour (a search of the keys before each took 26 s for the
     * 80000 keys of a 1 MB header) */
    if (f->n_meta < 2) return LS_OK;
    const char **keys = malloc((size_t)f->n_meta * sizeof *keys);
    if (!keys) return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to check the metadata's keys", f->name);
    for (int i = 0; i < f->n_meta; i++) keys[i] = f->meta[i].key;
    qsort(keys, (size_t)f->n_meta, sizeof *keys, cmp_str_ptr);
    ls_status s = LS_OK;
    for (int i = 1; i < f->n_meta && s == LS_OK; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            s = ls_error(LS_ERR_FORMAT, "'%s': \"__metadata__\" key '%s' appears twice", f->name,
                         ESC_NAMEN(keys[i], 64));
    free(keys);
    return s;
}

static ls_status st_check_layout(ls_safetensors *f, const unsigned char *data, uint64_t data_len) {
    const char *nm = f->name;
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_entry_offset);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->t[i];
        if (e->begin < pos) { /* both named: either may be the wrong one */
            const st_entry *b = &f->t[i - 1];
            return ls_error(LS_ERR_FORMAT,
                            "'%s': tensors '%s' (data_offsets [%llu, %llu]) and '%s' ([%llu, %llu]) overlap", nm,
                            ESC_NAME(b->info.name), (unsigned long long)b->begin, (unsigned long long)b->end,
                            ESC_NAME(e->info.name), (unsigned long long)e->begin, (unsigned long long)e->end);
        }
        if (e->begin > pos)
            return ls_error(LS_ERR_FORMAT,
                            "'%s': %llu unused bytes before tensor '%s' (data_offsets must tile the data exactly)", nm,
                            (unsigned long long)(e->begin - pos), ESC_NAME(e->info.name));
        if (e->end > data_len)
            return ls_error(LS_ERR_FORMAT,
                            "'%s': tensor '%s' (data_offsets [%llu, %llu]) ends beyond the %llu bytes of data "
                            "(truncated?)",
                            nm, ESC_NAME(e->info.name), (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)data_len);
        pos = e->end;
        e->info.data = data + e->begin;
    }
    if (pos != data_len)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': %llu bytes after the last tensor's data (data_offsets must cover the data exactly)", nm,
                        (unsigned long long)(data_len - pos));
    return LS_OK;
}

/* The first string of a JSON text h (n bytes, parsed already) that holds \u0000: cJSON ends the
 * string it decodes there, so {"a\u0000x": ...} was read as a tensor named "a" (and beside an "a",
 * "a" twice). Its raw text's offset in *at and length in *len (quotes excluded); 0 when none. An
 * escaped backslash (\\u0000, the six characters) is not one. */
static int json_nul_string(const char *h, size_t n, size_t *at, size_t *len) {
    size_t start = 0;
    int in = 0, nul = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in) {
            if (h[i] == '"') in = 1, start = i + 1, nul = 0;
        } else if (h[i] == '\\') {
            if (n - i > 5 && h[i + 1] == 'u' && memcmp(h + i + 2, "0000", 4) == 0) nul = 1;
            i++; /* the escaped character: a quote or backslash there does not end or escape */
        } else if (h[i] == '"') {
            in = 0;
            if (nul) {
                *at = start;
                *len = i - start;
                return 1;
            }
        }
    }
    return 0;
}

/* The first number of a JSON text h (n bytes, parsed already) not written as a whole number in
 * digits alone (no sign, fraction, exponent or leading zero): cJSON keeps no number's text, and took
 * "shape": [2.0] or "data_offsets": [0, 8e0] as 2 and 8, where the reference reader (serde's
 * usize) refuses them. Its offset in *at and length in *len; 0 when none. Outside strings, only
 * numbers start with '-' or a digit (true, false and null do not). */
static int json_non_integer(const char *h, size_t n, size_t *at, size_t *len) {
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = h[i];
        if (in) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in = 0;
        } else if (ch == '"') {
            in = 1;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t j = i;
            int plain = 1;
            while (j < n && strchr("0123456789+-.eE", h[j]) && h[j]) {
                if (h[j] < '0' || h[j] > '9') plain = 0;
                j++;
            }
            if (!plain || (h[i] == '0' && j - i > 1)) {
                *at = i;
                *len = j - i;
                return 1;
            }
            i = j - 1;
        }
    }
    return 0;
}

static ls_status st_parse(ls_safetensors *f) {
    const char *nm = f->name;
    if (!host_little_endian())
        return ls_error(LS_ERR_UNSUPPORTED, "'%s': reading safetensors needs a little-endian host", nm);
    if (f->len < 8)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': %zu bytes is too short for a safetensors file (no 8-byte header length; truncated?)", nm,
                        f->len);
    uint64_t hl = get_le64(f->buf);
    /* a header length past the file: what a file that is not one usually is, said so (rather than a
     * header length of 10^18) */
    const unsigned char *b = f->buf;
    const int bad_len = hl > LS_SAFETENSORS_MAX_HEADER || hl > f->len - 8;
    if (bad_len && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4)
        return ls_error(LS_ERR_FORMAT,
                        "'%s' is not a safetensors file but a zip archive (what torch.save writes: save the "
                        "state_dict with safetensors.torch.save_file instead)",
                        nm);
    if (bad_len && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return ls_error(LS_ERR_FORMAT,
                        "'%s' is not a safetensors file but a Python pickle (an old torch.save or pickle.dump: save "
                        "the state_dict with safetensors.torch.save_file instead)",
                        nm);
    if (bad_len && (b[0] == '{' || b[0] == '['))
        return ls_error(LS_ERR_FORMAT, "'%s' is not a safetensors file but text (JSON?): no 8-byte header length", nm);
    if (hl > LS_SAFETENSORS_MAX_HEADER)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': header length %llu exceeds the format's limit of %llu bytes (not a safetensors file?)",
                        nm, (unsigned long long)hl, LS_SAFETENSORS_MAX_HEADER);
    if (hl > f->len - 8)
        return ls_error(LS_ERR_FORMAT, "'%s': header length %llu exceeds the %zu bytes after it (truncated?)", nm,
                        (unsigned long long)hl, f->len - 8);
    const char *h = (const char *)f->buf + 8;
    if (hl == 0 || h[0] != '{')
        return ls_error(LS_ERR_FORMAT, "'%s': header does not start with '{' (not a safetensors file?)", nm);
    if (!utf8_valid((const unsigned char *)h, (size_t)hl))
        return ls_error(LS_ERR_FORMAT, "'%s': header is not valid UTF-8", nm);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)hl, &end, 0);
    if (!root) {
        size_t at = end && end >= h ? (size_t)(end - h) : 0;
        return ls_error(LS_ERR_FORMAT, "'%s': header is not valid JSON (error at header byte %zu)", nm, at);
    }
    ls_status s = LS_OK;
    for (const char *p = end; p < h + hl; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = ls_error(LS_ERR_FORMAT, "'%s': header has bytes after its JSON object (at header byte %zu)", nm,
                         (size_t)(p - h));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        s = ls_error(LS_ERR_FORMAT, "'%s': header is not a JSON object", nm);
        goto done;
    }
    size_t at, slen;
    if (json_nul_string(h, (size_t)hl, &at, &slen)) {
        s = ls_error(LS_ERR_FORMAT,
                     "'%s': header string \"%s%s\" (at header byte %zu) holds \\u0000, a NUL character, which a tensor "
                     "name or metadata here cannot hold",
                     nm, ESC_NAMEN(h + at, slen > 64 ? 64 : slen), slen > 64 ? "..." : "", at);
        goto done;
    }
    int total = cJSON_GetArraySize(root);
    f->t = calloc((size_t)total + 1, sizeof *f->t);
    if (!f->t) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory for %d header entries", nm, total);
        goto done;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, root) {
        if (!c->string) {
            s = ls_error(LS_ERR_FORMAT, "'%s': header entry without a name", nm);
            goto done;
        }
        if (strcmp(c->string, "__metadata__") == 0) {
            LS_CHECK_GOTO(st_parse_metadata(f, c), s, done);
            continue;
        }
        st_entry *e = &f->t[f->n];
        e->info.name = strdup(c->string);
        if (!e->info.name) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory for tensor names", nm);
            goto done;
        }
        f->n++;
        LS_CHECK_GOTO(st_parse_entry(nm, c, e), s, done);
    }
    if (f->n > 1) {
        const char **names = malloc((size_t)f->n * sizeof *names);
        if (!names) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to check tensor names", nm);
            goto done;
        }
        for (int i = 0; i < f->n; i++) names[i] = f->t[i].info.name;
        qsort(names, (size_t)f->n, sizeof *names, cmp_str_ptr);
        for (int i = 1; i < f->n && s == LS_OK; i++)
            if (strcmp(names[i - 1], names[i]) == 0)
                s = ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' appears more than once in the header", nm,
                             ESC_NAME(names[i]));
        free(names);
        if (s != LS_OK) goto done;
    }
    if (json_non_integer(h, (size_t)hl, &at, &slen)) {
        s = ls_error(LS_ERR_FORMAT,
                     "'%s': header number '%.*s' (at header byte %zu) is not written as a whole number (safetensors' "
                     "shapes and offsets are digits alone: no sign, fraction, exponent or leading zero)",
                     nm, (int)(slen > 32 ? 32 : slen), h + at, at);
        goto done;
    }
    s = st_check_layout(f, f->buf + 8 + hl, (uint64_t)(f->len - 8 - hl));
    if (s != LS_OK) goto done;
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name); /* t is in its final order now */
    if (!f->by_name) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to index tensor names", nm);
        goto done;
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_entry_name);
done:
    cJSON_Delete(root);
    return s;
}

/* own (may be NULL): the bytes the handle takes over, buf's when given. */
static ls_status st_open(file_bytes *own, const void *buf, size_t len, const char *name, ls_safetensors **out) {
    *out = NULL;
    ls_safetensors *f = calloc(1, sizeof *f);
    char *nm = strdup(name ? name : "(memory)");
    if (!f || !nm) {
        free(f);
        free(nm);
        if (own) fb_free(own);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory to open '%s'", name ? name : "(memory)");
    }
    f->name = nm;
    if (own) {
        f->own = *own;
        memset(own, 0, sizeof *own);
    }
    f->buf = buf;
    f->len = len;
    ls_status s = st_parse(f);
    if (s != LS_OK) {
        ls_safetensors_close(f);
        return s;
    }
    *out = f;
    return LS_OK;
}

ls_status ls_safetensors_open_memory(const void *buf, size_t len, const char *name, ls_safetensors **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_open_memory: out is NULL");
    if (!buf && len) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_open_memory: buffer is NULL");
    static const unsigned char empty[1] = {0};
    return st_open(NULL, buf ? buf : empty, len, name, out);
}

/* path opened for reading, a regular file of *size bytes. */
static ls_status open_regular(const char *path, int *fd, size_t *size) {
    /* O_NONBLOCK: a FIFO's open would wait for a writer (forever) before fstat could refuse it */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) return ls_error(LS_ERR_IO, "'%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size >= SIZE_MAX) {
        close(*fd);
        return ls_error(LS_ERR_IO, "'%s': not a regular file", path);
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl != -1) (void)fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (size_t)st.st_size;
    return LS_OK;
}

/* The n bytes of fd (path's) into a malloc'd buffer (NUL-terminated, the terminator not counted);
 * fd is closed. */
static ls_status read_fd(int fd, const char *path, size_t n, unsigned char **out, size_t *len) {
    unsigned char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to read %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return ls_error(LS_ERR_IO, "'%s': read failed after %zu of %zu bytes: %s", path, got, n,
                            r < 0 ? strerror(e) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return LS_OK;
}

/* Read a whole file into a malloc'd buffer (NUL-terminated, the terminator not counted). */
static ls_status read_file(const char *path, unsigned char **out, size_t *len) {
    int fd;
    size_t n;
    *out = NULL;
    *len = 0;
    LS_CHECK(open_regular(path, &fd, &n));
    return read_fd(fd, path, n, out, len);
}

/* path's bytes, mapped (as safetensors' safe_open and torch.load(mmap=True) do): opening a file of
 * any size takes no memory of its own, and a tensor read from it pages in only its bytes. Read whole
 * where the file system cannot map it (and when it is empty, which mmap refuses). */
static ls_status map_file(const char *path, file_bytes *out) {
    int fd;
    size_t n;
    memset(out, 0, sizeof *out);
    LS_CHECK(open_regular(path, &fd, &n));
    void *p = n > 0 ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) return read_fd(fd, path, n, &out->p, &out->len);
    close(fd);
    out->p = p;
    out->len = n;
    out->mapped = 1;
    return LS_OK;
}

ls_status ls_safetensors_open(const char *path, ls_safetensors **out) {
    if (!out || !path) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_open: NULL path or out");
    *out = NULL;
    file_bytes b;
    LS_CHECK(map_file(path, &b));
    static const unsigned char empty[1] = {0};
    return st_open(&b, b.p ? b.p : empty, b.len, path, out);
}

int ls_safetensors_count(const ls_safetensors *f) { return f ? f->n : 0; }

const ls_safetensors_info *ls_safetensors_tensor(const ls_safetensors *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i].info : NULL;
}

const ls_safetensors_info *ls_safetensors_find(const ls_safetensors *f, const char *name) {
    if (!f || !name || !f->by_name) return NULL;
    for (int lo = 0, hi = f->n; lo < hi;) { /* the names are distinct and sorted */
        int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid]->info.name, name);
        if (c == 0) return &f->by_name[mid]->info;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *ls_safetensors_metadata(const ls_safetensors *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* The file's tensor name, found and of dst's dtype and shape (dst's data is not read); out may be NULL. */
static ls_status st_check(const ls_safetensors *f, const char *name, const ls_tensor *dst,
                          const ls_safetensors_info **out) {
    char a[160], b[160];
    const ls_safetensors_info *t = ls_safetensors_find(f, name);
    if (!t) return ls_error(LS_ERR_FORMAT, "'%s': no tensor '%s'", f->name, ESC_NAME(name));
    if (!t->has_dtype || t->dtype != dst->dtype)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': tensor '%s' is %s but %s is expected", f->name, ESC_NAME(name),
                        t->dtype_name, st_dtype_name(dst->dtype));
    int same = t->ndim == dst->ndim;
    for (int k = 0; same && k < t->ndim; k++) same = t->shape[k] == dst->shape[k];
    if (!same)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': tensor '%s' has shape %s but %s is expected", f->name,
                        ESC_NAME(name), shape_str(t->ndim, t->shape, a, sizeof a),
                        shape_str(dst->ndim, dst->shape, b, sizeof b));
    if (out) *out = t;
    return LS_OK;
}

ls_status ls_safetensors_read(const ls_safetensors *f, const char *name, ls_allocator *alloc, ls_tensor *dst) {
    if (!f || !name || !dst) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_read: NULL argument");
    const ls_safetensors_info *t;
    LS_CHECK(st_check(f, name, dst, &t));
    ls_tensor src = ls_tensor_view((void *)(uintptr_t)t->data, t->dtype, ls_device_cpu(), t->ndim, t->shape);
    return ls_tensor_copy(alloc, dst, &src);
}

/* A string the writer puts into the header, which is JSON text: UTF-8, or no reader takes the file
 * (ours refused what it wrote, "header is not valid UTF-8", naming nothing). what: the string's role. */
static ls_status st_utf8(const char *s, const char *what) {
    const size_t n = strlen(s), at = utf8_bad_at((const unsigned char *)s, n);
    if (at == n) return LS_OK;
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "safetensors: %s is not valid UTF-8 (byte %zu is 0x%02x): the header is JSON text, which no "
                    "reader would take",
                    what, at, (unsigned)(unsigned char)s[at]);
}

/* The first key of metadata ("key", "value", ..., NULL) that appears twice, NULL when none; *err set
 * when there is no memory to check. */
static const char *st_meta_twice(const char *const *metadata, ls_status *err) {
    int n = 0;
    *err = LS_OK;
    while (metadata[2 * n]) n++;
    if (n < 2) return NULL;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) {
        *err = ls_error(LS_ERR_OUT_OF_MEMORY, "safetensors: no memory to check %d metadata keys", n);
        return NULL;
    }
    for (int k = 0; k < n; k++) keys[k] = metadata[2 * k];
    qsort(keys, (size_t)n, sizeof *keys, cmp_str_ptr); /* sorted, a repeated key is its neighbour */
    const char *twice = NULL;
    for (int k = 1; k < n && !twice; k++)
        if (strcmp(keys[k - 1], keys[k]) == 0) twice = keys[k];
    free(keys);
    return twice;
}

/* A safetensors file's first bytes (malloc'd): the header length and the header, padded to a
 * multiple of 8; the tensors' data, data_len bytes in the order given, follows it in the file.
 * Their dtypes and shapes are read, not their data (which may be NULL). */
static ls_status st_header(int n, const char *const *names, const ls_tensor *const *tensors,
                           const char *const *metadata, unsigned char **out, size_t *out_len, uint64_t *data_len) {
    *out = NULL;
    *out_len = 0;
    *data_len = 0;
    if (!host_little_endian()) return ls_error(LS_ERR_UNSUPPORTED, "writing safetensors needs a little-endian host");
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_serialize: bad tensor list (n = %d)", n);
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0] || strcmp(names[i], "__metadata__") == 0)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: tensor %d has an empty or reserved name", i);
        char what[64];
        snprintf(what, sizeof what, "the name of tensor %d", i);
        LS_CHECK(st_utf8(names[i], what));
        if (!tensors[i])
            return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: tensor %d ('%s') is NULL", i, ESC_NAME(names[i]));
        if (tensors[i]->ndim < 0 || tensors[i]->ndim > LS_MAX_DIMS)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: tensor '%s' has %d dimensions", ESC_NAME(names[i]),
                            tensors[i]->ndim);
    }
    /* what the reader refuses, refused here rather than written: a key twice, text that is not UTF-8 */
    for (int k = 0; metadata && metadata[k]; k += 2) {
        char what[160];
        snprintf(what, sizeof what, "metadata key %d", k / 2);
        LS_CHECK(st_utf8(metadata[k], what));
        if (!metadata[k + 1])
            return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: metadata key '%s' has no value",
                            ESC_NAME(metadata[k]));
        snprintf(what, sizeof what, "the value of metadata key '%s'", ESC_NAMEN(metadata[k], 64));
        LS_CHECK(st_utf8(metadata[k + 1], what));
    }
    if (metadata) {
        ls_status err;
        const char *twice = st_meta_twice(metadata, &err);
        LS_CHECK(err);
        if (twice)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: metadata key '%s' appears twice", ESC_NAME(twice));
    }
    if (n > 1) { /* sorted, a repeated name is its neighbour */
        const char **sorted = malloc((size_t)n * sizeof *sorted);
        if (!sorted) return ls_error(LS_ERR_OUT_OF_MEMORY, "safetensors: no memory to check %d tensor names", n);
        memcpy(sorted, names, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
        const char *twice = NULL;
        for (int i = 1; i < n && !twice; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0) twice = sorted[i];
        free(sorted);
        if (twice) return ls_error(LS_ERR_INVALID_ARGUMENT, "safetensors: tensor name '%s' appears twice", twice);
    }
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && metadata && metadata[0]) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int k = 0; ok && metadata[k]; k += 2)
            ok = cJSON_AddStringToObject(meta, metadata[k], metadata[k + 1]) != NULL;
    }
    uint64_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        const ls_tensor *t = tensors[i];
        size_t nb = ls_tensor_nbytes(t);
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        cJSON *shape = e ? cJSON_CreateArray() : NULL;
        cJSON *offs = shape ? cJSON_CreateArray() : NULL;
        ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype)) != NULL;
        if (shape && ok)
            cJSON_AddItemToObject(e, "shape", shape);
        else
            cJSON_Delete(shape);
        if (offs && ok)
            cJSON_AddItemToObject(e, "data_offsets", offs);
        else
            cJSON_Delete(offs);
        for (int k = 0; ok && k < t->ndim; k++) {
            cJSON *d = cJSON_CreateNumber((double)t->shape[k]);
            ok = d != NULL;
            if (d) cJSON_AddItemToArray(shape, d);
        }
        cJSON *b = ok ? cJSON_CreateNumber((double)off) : NULL;
        cJSON *en = b ? cJSON_CreateNumber((double)(off + nb)) : NULL;
        ok = b && en;
        if (b) cJSON_AddItemToArray(offs, b);
        if (en) cJSON_AddItemToArray(offs, en);
        off += nb;
    }
    char *hdr = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!hdr) return ls_error(LS_ERR_OUT_OF_MEMORY, "safetensors: no memory for the header");
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    if (padded > LS_SAFETENSORS_MAX_HEADER) { /* a file every reader (this one too) refuses */
        free(hdr);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "safetensors: the header would take %zu bytes, past the format's limit of %llu (long tensor "
                        "names or metadata?)",
                        padded, LS_SAFETENSORS_MAX_HEADER);
    }
    unsigned char *buf = malloc(8 + padded);
    if (!buf) {
        free(hdr);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "safetensors: no memory for the header");
    }
    put_le64(buf, padded);
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    free(hdr);
    *out = buf;
    *out_len = 8 + padded;
    *data_len = off;
    return LS_OK;
}

ls_status ls_safetensors_serialize(int n, const char *const *names, const ls_tensor *const *tensors,
                                   const char *const *metadata, ls_allocator *alloc, void **out, size_t *out_len) {
    if (!out || !out_len) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_serialize: NULL output");
    unsigned char *hdr, *buf;
    size_t pos;
    uint64_t data_len;
    *out = NULL;
    *out_len = 0;
    LS_CHECK(st_header(n, names, tensors, metadata, &hdr, &pos, &data_len));
    if (data_len > SIZE_MAX - pos || !(buf = malloc(pos + (size_t)data_len))) {
        free(hdr);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "safetensors: no memory for a %llu-byte file",
                        (unsigned long long)(pos + data_len));
    }
    memcpy(buf, hdr, pos);
    free(hdr);
    const size_t total = pos + (size_t)data_len;
    for (int i = 0; i < n; i++) {
        const ls_tensor *t = tensors[i];
        ls_tensor dst = ls_tensor_view(buf + pos, t->dtype, ls_device_cpu(), t->ndim, t->shape);
        ls_status s = ls_tensor_copy(alloc, &dst, t);
        if (s != LS_OK) {
            free(buf);
            return ls_error_context(s, "safetensors: tensor '%s'", names[i]);
        }
        pos += ls_tensor_nbytes(t);
    }
    *out = buf;
    *out_len = total;
    return LS_OK;
}

/* ---------------------------------------------------------------- crash-safe files */

/* LOCKSTEP_CKPT_CRASH_AT=<stage>: die here, as a power cut or kill -9 would. */
static void crash_point(const char *stage) {
    const char *want = getenv("LOCKSTEP_CKPT_CRASH_AT");
    if (want && strcmp(want, stage) == 0) {
        fprintf(stderr, "lockstep: LOCKSTEP_CKPT_CRASH_AT=%s: killing this process in the middle of a checkpoint\n",
                stage);
        fflush(NULL);
        raise(SIGKILL);
    }
}

/* A LOCKSTEP_CKPT_CRASH_AT that names no stage would never fire: the test that set it would pass
 * without the crash it meant to cause. */
static ls_status check_crash_stage(void) {
    static const char *const stages[] = {"mid-write",     "tmpfile",           "before-manifest",
                                         "before-rename", "before-remove-old", "before-latest"};
    const char *want = getenv("LOCKSTEP_CKPT_CRASH_AT");
    if (!want || !*want) return LS_OK;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        if (strcmp(want, stages[i]) == 0) return LS_OK;
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "LOCKSTEP_CKPT_CRASH_AT='%s' is not a stage of a save (mid-write, tmpfile, before-manifest, "
                    "before-rename, before-remove-old, before-latest)",
                    want);
}

static void dir_of(const char *path, char *out, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, len, ".");
    else if (slash == path)
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

static ls_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ls_error(LS_ERR_IO, "'%s': cannot open the directory to fsync it: %s", dir, strerror(errno));
    int r = fsync(fd), e = errno;
    close(fd);
    if (r != 0 && e != EINVAL && e != EROFS) /* some file systems cannot fsync directories */
        return ls_error(LS_ERR_IO, "'%s': fsync of the directory failed: %s", dir, strerror(e));
    return LS_OK;
}

/* A file of a checkpoint, as its manifest records it. */
typedef struct ckpt_file {
    char name[64];
    uint64_t size;
    uint32_t crc;
} ckpt_file;

/* A file written crash-safely as it is produced: path.tmp, its bytes as they come (CRC32 computed
 * on the way), fsync, rename to path, fsync of the directory. Host memory: the bytes given, and
 * for tensors on a device one staging buffer of at most LS_CKPT_STAGE_BYTES. inject: honour the
 * file-level crash stages ("mid-write" when half of the expected size is written, "tmpfile"). */
typedef struct file_writer {
    int fd;
    char path[LS_CKPT_PATH_MAX + 80], tmp[LS_CKPT_PATH_MAX + 88];
    uint64_t written, total; /* total: the size the file will have */
    uLong crc;
    int inject;
    ls_allocator *stage_alloc; /* the staging buffer's, for device tensors */
    void *stage;
    size_t stage_cap, stage_want; /* want: the size to allocate (fw_stage_for), 0: the first tensor's */
    int stage_pinned;
} file_writer;

static ls_status fw_open(file_writer *w, const char *path, uint64_t total, int inject) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", path) >= sizeof w->path ||
        (size_t)snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path) >= sizeof w->tmp)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "path '%s' is too long", path);
    w->fd = ls_fd_off_stdio(open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (w->fd < 0) return ls_error(LS_ERR_IO, "'%s': cannot create: %s", w->tmp, strerror(errno));
    w->total = total;
    w->inject = inject;
    w->crc = crc32(0L, Z_NULL, 0);
    return LS_OK;
}

static void fw_free_stage(file_writer *w) {
    if (w->stage) ls_allocator_host_free(w->stage_alloc, w->stage, w->stage_cap, w->stage_pinned);
    w->stage = NULL;
    w->stage_cap = 0;
}

/* Give up: the partial path.tmp is removed, path is untouched. */
static void fw_abort(file_writer *w) {
    fw_free_stage(w);
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp);
    }
    w->fd = -1;
}

static ls_status fw_raw(file_writer *w, const unsigned char *p, size_t n) {
    w->written += n;
    for (size_t left = n; left > 0;) {
        uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        w->crc = crc32(w->crc, p + (n - left), chunk);
        left -= chunk;
    }
    while (n > 0) {
        ssize_t r = write(w->fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return ls_error(LS_ERR_IO, "'%s': write failed: %s", w->tmp, r < 0 ? strerror(errno) : "no progress");
        p += r;
        n -= (size_t)r;
    }
    return LS_OK;
}

static ls_status fw_write(file_writer *w, const void *buf, size_t n) {
    const unsigned char *p = buf;
    const uint64_t half = w->total / 2;
    if (w->inject && w->total > 1 && w->written < half && w->written + n >= half) {
        size_t first = (size_t)(half - w->written);
        LS_CHECK(fw_raw(w, p, first));
        fsync(w->fd);
        crash_point("mid-write");
        p += first;
        n -= first;
    }
    return fw_raw(w, p, n);
}

/* A tensor's bytes: from host memory as they are, from a device through the staging buffer,
 * LS_CKPT_STAGE_BYTES at a time (alloc: the device's allocator; NULL: the tensor's). */
static ls_status fw_tensor(file_writer *w, ls_allocator *alloc, const ls_tensor *t) {
    char desc[64];
    size_t nb = ls_tensor_nbytes(t);
    if (t->device.type == LS_DEVICE_CPU || nb == 0) return fw_write(w, t->data, nb);
    if (!alloc) alloc = t->alloc;
    if (!alloc || ls_allocator_device(alloc).type == LS_DEVICE_CPU)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "writing %s needs its device's allocator, and none was given",
                        ls_tensor_describe(t, desc, (int)sizeof desc));
    size_t want = nb > w->stage_want ? nb : w->stage_want;
    if (want > LS_CKPT_STAGE_BYTES) want = LS_CKPT_STAGE_BYTES;
    if (w->stage && (w->stage_cap < want || w->stage_alloc != alloc)) fw_free_stage(w);
    if (!w->stage) {
        LS_CHECK(ls_allocator_host_alloc(alloc, want, "a checkpoint's staging buffer", &w->stage_pinned, &w->stage));
        w->stage_alloc = alloc;
        w->stage_cap = want;
    }
    for (size_t off = 0; off < nb;) {
        size_t c = nb - off < w->stage_cap ? nb - off : w->stage_cap;
        LS_CHECK(ls_allocator_copy(alloc, w->stage, 0, (const unsigned char *)t->data + off, 1, c));
        LS_CHECK(fw_write(w, w->stage, c));
        off += c;
    }
    return LS_OK;
}

/* The file's tensors, so that one staging buffer, allocated when the first device tensor comes,
 * serves them all (a pinned allocation can cost as much as the copy). */
static void fw_stage_for(file_writer *w, int n, const ls_tensor *const *tensors) {
    for (int i = 0; i < n; i++)
        if (ls_tensor_nbytes(tensors[i]) > w->stage_want) w->stage_want = ls_tensor_nbytes(tensors[i]);
}

/* Complete the file (all of total written): fsync, rename, fsync of the directory. rec (may be
 * NULL): the file's name (path's last component), size and CRC32, for the manifest. */
static ls_status fw_commit(file_writer *w, ckpt_file *rec) {
    char dir[LS_CKPT_PATH_MAX + 80];
    ls_status s = LS_OK;
    fw_free_stage(w);
    if (w->written != w->total)
        s = ls_error(LS_ERR_INTERNAL, "'%s': %llu bytes written, %llu expected", w->tmp, (unsigned long long)w->written,
                     (unsigned long long)w->total);
    if (s == LS_OK && fsync(w->fd) != 0) s = ls_error(LS_ERR_IO, "'%s': fsync failed: %s", w->tmp, strerror(errno));
    if (close(w->fd) != 0 && s == LS_OK) s = ls_error(LS_ERR_IO, "'%s': close failed: %s", w->tmp, strerror(errno));
    w->fd = -1;
    if (s != LS_OK) {
        unlink(w->tmp);
        return s;
    }
    if (w->inject) crash_point("tmpfile");
    if (rename(w->tmp, w->path) != 0) {
        s = ls_error(LS_ERR_IO, "cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(errno));
        unlink(w->tmp);
        return s;
    }
    dir_of(w->path, dir, sizeof dir);
    LS_CHECK(fsync_dir(dir));
    if (rec) {
        const char *base = strrchr(w->path, '/');
        snprintf(rec->name, sizeof rec->name, "%.63s", base ? base + 1 : w->path);
        rec->size = w->written;
        rec->crc = (uint32_t)w->crc;
    }
    return LS_OK;
}

static ls_status write_file_atomic(const char *path, const void *buf, size_t len, int inject, ckpt_file *rec) {
    file_writer w;
    ls_status s = fw_open(&w, path, len, inject);
    if (s == LS_OK) s = fw_write(&w, buf, len);
    if (s == LS_OK) return fw_commit(&w, rec);
    fw_abort(&w);
    return s;
}

/* A safetensors file written as it is produced (st_header, then each tensor): the host holds the
 * header and, for device tensors, the writer's staging buffer, never the file. */
static ls_status st_write(const char *path, int n, const char *const *names, const ls_tensor *const *tensors,
                          const char *const *metadata, ls_allocator *alloc, int inject, ckpt_file *rec) {
    unsigned char *hdr;
    size_t hl;
    uint64_t data_len;
    LS_CHECK(st_header(n, names, tensors, metadata, &hdr, &hl, &data_len));
    file_writer w;
    ls_status s = fw_open(&w, path, hl + data_len, inject);
    if (s == LS_OK) {
        fw_stage_for(&w, n, tensors);
        s = fw_write(&w, hdr, hl);
    }
    free(hdr);
    for (int i = 0; i < n && s == LS_OK; i++)
        if ((s = fw_tensor(&w, alloc, tensors[i])) != LS_OK) ls_error_context(s, "safetensors: tensor '%s'", names[i]);
    if (s == LS_OK) return fw_commit(&w, rec);
    fw_abort(&w);
    return s;
}

ls_status ls_safetensors_write(const char *path, int n, const char *const *names, const ls_tensor *const *tensors,
                               const char *const *metadata, ls_allocator *alloc) {
    if (!path) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_write: path is NULL");
    /* the file was written as PATH.tmp, then "cannot rename '.tmp' to ''" (or "'DIR/.tmp' to 'DIR/'") */
    const size_t len = strlen(path);
    if (!len || path[len - 1] == '/')
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_safetensors_write: the path '%s' names no file (%s)", path,
                        len ? "it ends with '/'" : "it is empty");
    return st_write(path, n, names, tensors, metadata, alloc, 0, NULL);
}

/* path with its slashes normalized into buf (size bytes), returned: runs of '/' as one, none at the
 * end but for "/" itself, so that the paths joined to it and printed are "run/step-00000010" for a
 * --checkpoint-dir given as "run/" (it printed "run//step-00000010"). path itself where it does not
 * fit (the callers then say it is too long), or where it is NULL. */
#define NORM_PATH(p) ls_ckpt_path_normalize((p), (char[LS_CKPT_PATH_MAX]){0}, LS_CKPT_PATH_MAX)
const char *ls_ckpt_path_normalize(const char *path, char *buf, size_t size) {
    if (!path || strlen(path) >= size) return path;
    size_t n = 0;
    for (const char *c = path; *c; c++)
        if (*c != '/' || n == 0 || buf[n - 1] != '/') buf[n++] = *c;
    while (n > 1 && buf[n - 1] == '/') n--;
    buf[n] = '\0';
    return buf;
}

static ls_status make_dirs(const char *dir) {
    char buf[LS_CKPT_PATH_MAX];
    if ((size_t)snprintf(buf, sizeof buf, "%s", dir) >= sizeof buf)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory '%s' is too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return ls_error(LS_ERR_IO, "'%s': cannot create the directory: %s", buf, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return ls_error(LS_ERR_IO, "'%s' is not a directory", dir);
    return LS_OK;
}

uint64_t ls_ckpt_size_estimate(ls_module *model, const ls_optimizer *opt, ls_ema *ema) {
    uint64_t bytes = 64 << 10; /* headers, state.json, the manifest */
    const int np = model ? ls_module_num_params(model) : 0, nb = model ? ls_cnn_num_buffers(model) : 0;
    const uint64_t copies = 1 + (opt ? (uint64_t)ls_optimizer_num_state_slots(opt) : 0) + (ema ? 1 : 0);
    for (int i = 0; i < np; i++) bytes += copies * ls_tensor_nbytes(ls_module_param(model, i));
    for (int i = 0; i < nb; i++) bytes += (ema ? 2 : 1) * ls_tensor_nbytes(ls_cnn_buffer(model, i, NULL, 0));
    return bytes;
}

ls_status ls_ckpt_check_space(const char *dir, uint64_t bytes) {
    LS_CHECK_ARG(dir, "ls_ckpt_check_space: dir is NULL");
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return LS_OK; /* nothing to go by: the save will say */
    const uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    if (avail >= bytes) return LS_OK;
    return ls_error(LS_ERR_IO, "'%s': %.1f MB free on its file system, a checkpoint of this run takes about %.1f MB",
                    dir, (double)avail / 1e6, (double)bytes / 1e6);
}

ls_status ls_ckpt_prepare_dir(const char *dir) {
    if (!dir || !dir[0]) return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    dir = NORM_PATH(dir);
    /* as save_prepare: room for /step-NNNNNNNN.tmp and the files' names */
    if (strlen(dir) + sizeof "/step-00000000" + 10 >= LS_CKPT_PATH_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory '%.64s...' is too long (%zu characters)", dir,
                        strlen(dir));
    LS_CHECK(make_dirs(dir));
    char p[LS_CKPT_PATH_MAX + 80];
    /* each save ends by replacing DIR/latest (a file): anything else there failed the first save,
     * after its checkpoint was written */
    struct stat st;
    snprintf(p, sizeof p, "%s/latest", dir);
    if (lstat(p, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return ls_error(LS_ERR_IO,
                        "'%s' is a %s, not a file: each save writes the newest checkpoint's name there (remove or "
                        "rename it)",
                        p, S_ISDIR(st.st_mode) ? "directory" : "special file");
    snprintf(p, sizeof p, "%s/.write-check.%ld", dir, (long)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return ls_error(LS_ERR_IO, "'%s': cannot write in the directory: %s", dir, strerror(errno));
    close(fd);
    unlink(p);
    return LS_OK;
}

ls_status ls_ckpt_lock_dir(const char *dir, int *fd) {
    if (!dir || !fd) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_lock_dir: NULL argument");
    dir = NORM_PATH(dir);
    *fd = -1;
    char p[LS_CKPT_PATH_MAX + 16];
    if ((size_t)snprintf(p, sizeof p, "%s/.lock", dir) >= sizeof p)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory '%.64s...' is too long", dir);
    int f = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
        const int e = errno;
        struct stat st;
        /* another user's (a file of 644 that this user may not open for writing): the directory is
         * most likely that user's run's, which a bare "Permission denied" did not say */
        if ((e == EACCES || e == EPERM) && stat(p, &st) == 0 && st.st_uid != geteuid()) {
            char buf[1024], name[300] = "";
            struct passwd pw, *pwp = NULL;
            if (getpwuid_r(st.st_uid, &pw, buf, sizeof buf, &pwp) == 0 && pwp && pwp->pw_name)
                snprintf(name, sizeof name, " (%s)", pwp->pw_name);
            return ls_error(LS_ERR_IO,
                            "'%s': cannot open the checkpoint directory's lock: %s: it belongs to another user, uid "
                            "%ld%s, so '%s' is probably that user's run's checkpoint directory: give this run a "
                            "directory of its own, or ask that user",
                            p, strerror(e), (long)st.st_uid, name, dir);
        }
        return ls_error(LS_ERR_IO, "'%s': cannot open the checkpoint directory's lock: %s", p, strerror(e));
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        if (e == EWOULDBLOCK) {
            char who[160] = "";
            ssize_t n = pread(f, who, sizeof who - 1, 0);
            close(f);
            who[n > 0 ? n : 0] = '\0';
            who[strcspn(who, "\n")] = '\0';
            char me[160], host[64] = "?";
            (void)gethostname(host, sizeof host);
            host[sizeof host - 1] = '\0';
            snprintf(me, sizeof me, "pid %ld on %s", (long)getpid(), host);
            if (strcmp(who, me) == 0) /* this process locked it before, on another descriptor */
                return ls_error(LS_ERR_IO,
                                "checkpoint directory '%s' is already locked by this process (%s holds %s): "
                                "ls_ckpt_lock_dir was called for it twice without ls_ckpt_unlock_dir between",
                                dir, who, p);
            return ls_error(LS_ERR_IO,
                            "checkpoint directory '%s' is in use by another run (%s holds %s): two runs saving into "
                            "one directory overwrite and prune each other's checkpoints; give this run a directory "
                            "of its own, or end the other",
                            dir, who[0] ? who : "a process", p);
        }
        close(f);
        LS_LOG_W("'%s': the file system cannot lock it (%s): nothing stops a second run from saving into '%s' too", p,
                 strerror(e), dir);
        return LS_OK;
    }
    /* who holds it, for the message a second run prints */
    char host[64] = "?", who[160];
    (void)gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    int n = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(f, 0) != 0 || pwrite(f, who, (size_t)n, 0) != n) /* the lock holds all the same */
        LS_LOG_I("'%s': could not write its holder into it: %s", p, strerror(errno));
    *fd = f;
    return LS_OK;
}

void ls_ckpt_unlock_dir(int fd) {
    if (fd >= 0) close(fd); /* the lock goes with the descriptor; the file stays for the next run */
}

ls_status ls_ckpt_relock_dir(const char *dir, int *fd) {
    if (!dir || !fd) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_relock_dir: NULL argument");
    dir = NORM_PATH(dir);
    if (*fd < 0) return LS_OK; /* no lock held (a file system that cannot lock): nothing to keep */
    char p[LS_CKPT_PATH_MAX + 16];
    if ((size_t)snprintf(p, sizeof p, "%s/.lock", dir) >= sizeof p)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory '%.64s...' is too long", dir);
    struct stat held, now;
    if (fstat(*fd, &held) == 0 && stat(p, &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino)
        return LS_OK;
    /* the save would make the directory afresh, unlocked: a second run could take it and both
     * would overwrite and prune each other's checkpoints */
    LS_LOG_W("'%s' is no longer the lock this run holds (the checkpoint directory was removed or replaced while it "
             "ran): taking it again",
             p);
    int nfd = -1;
    ls_status s = ls_ckpt_prepare_dir(dir);
    if (s == LS_OK) s = ls_ckpt_lock_dir(dir, &nfd);
    if (s != LS_OK)
        return ls_error_context(s, "checkpoint directory '%s' was removed or replaced while this run held it", dir);
    ls_ckpt_unlock_dir(*fd);
    *fd = nfd;
    return LS_OK;
}

/* Remove a checkpoint directory: its files, then itself. A symbolic link (a checkpoint moved to
 * another disk and linked back) is removed, not followed: what it points to is not ours (the
 * files there were deleted and the link left). Returns 0 on success. */
static int remove_tree(const char *path) {
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        if (unlink(path) == 0) return 0;
        LS_LOG_W("could not remove the symbolic link '%s': %s", path, strerror(errno));
        return -1;
    }
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    char f[LS_CKPT_PATH_MAX + 300];
    int err = 0; /* the first failure's (rmdir's "not empty" hid why a file stayed) */
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        if (unlink(f) != 0 && !err) err = errno;
    }
    closedir(d);
    if (rmdir(path) != 0 && !err) err = errno;
    if (err) LS_LOG_W("could not remove '%s' completely: %s", path, strerror(err));
    return err ? -1 : 0;
}

static int path_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "step-<digits>" (complete) or "step-<anything>.tmp" (debris of an interrupted save). */
static int parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    if (*p != '\0') return 0;
    *step = v;
    return 1;
}

static int is_tmp_name(const char *name) {
    size_t n = strlen(name);
    return strncmp(name, "step-", 5) == 0 && n > 9 && strcmp(name + n - 4, ".tmp") == 0;
}

typedef struct step_dir {
    int64_t step;
    char name[64];
} step_dir;

static int cmp_step_desc(const void *a, const void *b) {
    const step_dir *x = a, *y = b;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* Complete checkpoint directories in dir, newest first. A missing dir has none. */
static ls_status list_steps(const char *dir, step_dir **out, int *n, int warn_skipped) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return LS_OK;
        return ls_error(LS_ERR_IO, "'%s': cannot list the checkpoint directory: %s", dir, strerror(errno));
    }
    /* listed but not searched (r without x: a chmod -R 644): every step-N was "not a directory", and
     * a resume started afresh beside them without a word */
    if (faccessat(AT_FDCWD, dir, X_OK, AT_EACCESS) != 0 && errno == EACCES) {
        closedir(d);
        return ls_error(LS_ERR_IO,
                        "'%s': cannot look into the checkpoint directory: %s (this user may read its names but not "
                        "search it: no x permission)",
                        dir, strerror(EACCES));
    }
    int cap = 0;
    step_dir *v = NULL;
    struct dirent *e;
    char p[LS_CKPT_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        if (!parse_step_name(e->d_name, &step) || strlen(e->d_name) >= sizeof v->name) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!is_dir(p)) {
            /* a resume that passed over the newest step without a word: a link to a lost mount,
             * a file copied in by hand */
            struct stat st;
            if (warn_skipped)
                LS_LOG_W("skipping '%s': %s (not a checkpoint)", p,
                         lstat(p, &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link to nothing that exists"
                                                                   : "not a directory");
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            step_dir *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory to list '%s'", dir);
            }
            v = nv;
        }
        v[*n].step = step;
        memcpy(v[*n].name, e->d_name, strlen(e->d_name) + 1); /* shorter than name: checked above */
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(v, (size_t)*n, sizeof *v, cmp_step_desc);
    *out = v;
    return LS_OK;
}

/* The first step-*.tmp directory in dir (debris of an interrupted save) into name: 1 when there is one. */
static int stale_tmp_in(const char *dir, char *name, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char p[LS_CKPT_PATH_MAX + 300];
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_tmp_name(e->d_name) && is_dir(p)) found = snprintf(name, len, "%s", e->d_name) > 0;
    }
    closedir(d);
    return found;
}

static void remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[LS_CKPT_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        if (!is_tmp_name(e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!is_dir(p)) continue;
        /* step-S.old.tmp without step-S: a replacing save (on a file system without
         * RENAME_EXCHANGE) stopped between its renames; the old checkpoint goes back */
        size_t n = strlen(p);
        if (n > 8 && strcmp(p + n - 8, ".old.tmp") == 0) {
            char final[sizeof p];
            snprintf(final, sizeof final, "%.*s", (int)(n - 8), p);
            if (!path_exists(final) && rename(p, final) == 0) {
                LS_LOG_W("moved '%s' back to '%s', where an interrupted save had left no checkpoint", p, final);
                continue;
            }
        }
        LS_LOG_I("removing '%s', left by an interrupted save", p);
        remove_tree(p);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- manifest */

#define CKPT_MAX_FILES 8
/* the files a checkpoint must have, then those it may have (an EMA of the weights) */
enum { F_MODEL = 0, F_OPTIM = 1, F_STATE = 2, N_REQUIRED = 3, F_EMA = 3, N_KNOWN = 4 };
static const char *const ckpt_required[N_KNOWN] = {"model.safetensors", "optimizer.safetensors", "state.json",
                                                   "ema.safetensors"};

typedef struct ckpt_manifest {
    int64_t step;
    int n;
    ckpt_file files[CKPT_MAX_FILES];
} ckpt_manifest;

/* A number that reads back to the same double: cJSON prints 15 significant digits whenever they
 * come within an epsilon of the value, which can lose the last bit, also of an integer past 1e15
 * (4880790738079071 became 4.88079073807907e+15: found by the fuzzer); 17 always round-trip.
 * Integers below 1e15 and non-finite values (written as null) stay cJSON's. */
static cJSON *exact_number(double v) {
    if (!isfinite(v) || (v == floor(v) && fabs(v) < 1e15)) return cJSON_CreateNumber(v);
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    return cJSON_CreateRaw(b);
}

static int add(cJSON *obj, const char *key, cJSON *item) {
    if (!item) return 0;
    cJSON_AddItemToObject(obj, key, item);
    return 1;
}

static char *manifest_json(const ckpt_manifest *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON *files = root ? cJSON_CreateArray() : NULL;
    int ok = root && files;
    if (ok) {
        ok = cJSON_AddStringToObject(root, "format", "lockstep-checkpoint") &&
             cJSON_AddNumberToObject(root, "version", 1) && add(root, "step", exact_number((double)m->step));
        cJSON_AddItemToObject(root, "files", files);
    } else {
        cJSON_Delete(files);
    }
    for (int i = 0; ok && i < m->n; i++) {
        cJSON *f = cJSON_CreateObject();
        ok = f && cJSON_AddStringToObject(f, "name", m->files[i].name) &&
             add(f, "size", exact_number((double)m->files[i].size)) &&
             cJSON_AddNumberToObject(f, "crc32", (double)m->files[i].crc);
        if (f) cJSON_AddItemToArray(files, f);
    }
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return s;
}

static ls_status manifest_parse(const char *text, size_t len, const char *name, ckpt_manifest *m) {
    memset(m, 0, sizeof *m);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) return ls_error(LS_ERR_FORMAT, "'%s': not valid JSON (damaged manifest)", name);
    ls_status s = LS_OK;
    for (const char *c = end; c < text + len; c++) /* what cJSON stops before (it verified ok) */
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
            s = ls_error(LS_ERR_FORMAT, "'%s': bytes after its JSON object, at byte %zu (damaged manifest)", name,
                         (size_t)(c - text));
            goto done;
        }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    uint64_t v, step;
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "lockstep-checkpoint") != 0) {
        s = ls_error(LS_ERR_FORMAT, "'%s': not a lockstep checkpoint manifest", name);
        goto done;
    }
    if (!json_uint(ver, &v) || v != 1) {
        s = ls_error(LS_ERR_UNSUPPORTED, "'%s': manifest version is not 1, the only one this build reads", name);
        goto done;
    }
    if (!json_uint(cJSON_GetObjectItemCaseSensitive(root, "step"), &step)) {
        s = ls_error(LS_ERR_FORMAT, "'%s': \"step\" is missing or not an integer from 0 to 2^53", name);
        goto done;
    }
    m->step = (int64_t)step;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1 || cJSON_GetArraySize(files) > CKPT_MAX_FILES) {
        s = ls_error(LS_ERR_FORMAT, "'%s': \"files\" must list 1 to %d files", name, CKPT_MAX_FILES);
        goto done;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "name");
        uint64_t size, crc;
        if (!cJSON_IsString(fn) || !fn->valuestring[0] || strlen(fn->valuestring) >= sizeof m->files[0].name ||
            strchr(fn->valuestring, '/') || fn->valuestring[0] == '.' ||
            !json_uint(cJSON_GetObjectItemCaseSensitive(f, "size"), &size) ||
            !json_uint(cJSON_GetObjectItemCaseSensitive(f, "crc32"), &crc) || crc > 0xffffffffu) {
            s = ls_error(LS_ERR_FORMAT, "'%s': file entry %d needs a plain \"name\", a \"size\" and a 32-bit \"crc32\"",
                         name, m->n);
            goto done;
        }
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->files[i].name, fn->valuestring) == 0) {
                s = ls_error(LS_ERR_FORMAT, "'%s': file '%s' is listed twice", name, ESC_NAME(fn->valuestring));
                goto done;
            }
        snprintf(m->files[m->n].name, sizeof m->files[0].name, "%s", fn->valuestring);
        m->files[m->n].size = size;
        m->files[m->n].crc = (uint32_t)crc;
        m->n++;
    }
    for (int r = 0; r < N_REQUIRED; r++) {
        int have = 0;
        for (int i = 0; i < m->n; i++) have |= strcmp(m->files[i].name, ckpt_required[r]) == 0;
        if (!have) {
            s = ls_error(LS_ERR_FORMAT, "'%s': the manifest does not list %s", name, ckpt_required[r]);
            goto done;
        }
    }
done:
    cJSON_Delete(root);
    return s;
}

/* A checkpoint read and verified: the known files' contents (NULL: an optional one it lacks). */
typedef struct ckpt_bundle {
    char path[LS_CKPT_PATH_MAX];
    int64_t step;
    file_bytes f[N_KNOWN]; /* the safetensors files mapped, state.json read */
} ckpt_bundle;

static void bundle_free(ckpt_bundle *b) {
    for (int i = 0; i < N_KNOWN; i++) {
        fb_free(&b->f[i]);
    }
}

static const char *kind_name(ls_optim_kind k) { return k == LS_OPTIM_ADAMW ? "adamw" : "sgd"; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static const char *param_desc(const char *name, const char *dtype, int ndim, const int64_t *shape, char *buf,
                              size_t len) {
    char sb[160];
    snprintf(buf, len, "'%s' %s %s", ESC_NAME(name), shape_str(ndim, shape, sb, sizeof sb), ESC_NAME(dtype));
    return buf;
}

/* An entry of state.json's model signature ("model": {"name", "dtype", "shape"}): 1 when it is one,
 * its fields in *name, *dtype (pointing into e), *nd and sh. */
static int sig_entry(const cJSON *e, const char **name, const char **dtype, int *nd, int64_t *sh) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    *nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (!cJSON_IsString(n) || !cJSON_IsString(d) || *nd < 0 || *nd > LS_SAFETENSORS_MAX_DIMS) return 0;
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, shape) {
        uint64_t v;
        if (!json_uint(x, &v)) return 0;
        sh[k++] = (int64_t)v;
    }
    *name = n->valuestring;
    *dtype = d->valuestring;
    return 1;
}

/* A tensor a checkpoint's file must hold, by what state.json records: a parameter of its model
 * signature, a BatchNorm's running statistic, an optimizer's state. */
typedef struct want_tensor {
    char *name;        /* malloc'd */
    const char *dtype; /* into the parsed state.json */
    int ndim;
    int64_t shape[LS_SAFETENSORS_MAX_DIMS];
} want_tensor;

typedef struct want_list {
    int n, cap;
    want_tensor *t;
} want_list;

static void want_free(want_list *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    memset(w, 0, sizeof *w);
}

/* name (with its suffix replaced by suffix when cut > 0 bytes of it are to go), of dtype and shape. */
static ls_status want_add(want_list *w, const char *name, size_t cut, const char *suffix, const char *dtype, int nd,
                          const int64_t *sh) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        want_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for a checkpoint's tensor list");
        w->t = t;
        w->cap = cap;
    }
    const size_t keep = strlen(name) - cut, len = keep + strlen(suffix) + 1;
    want_tensor *x = &w->t[w->n];
    if (!(x->name = malloc(len))) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for a checkpoint's tensor list");
    snprintf(x->name, len, "%.*s%s", (int)keep, name, suffix);
    x->dtype = dtype;
    x->ndim = nd;
    memcpy(x->shape, sh, (size_t)nd * sizeof *sh);
    w->n++;
    return LS_OK;
}

/* The tensors a file of the checkpoint holds by state.json's model signature sig (file: the path
 * of state.json): for model.safetensors and ema.safetensors (optim NULL) the parameters, then each
 * BatchNorm's running mean and variance, named from its weight as ls_cnn_buffer names them (a 1-D
 * "<prefix>weight" is a BatchNorm's, the only layer with one); for optimizer.safetensors the states
 * of the optimizer of kind *optim, as opt_list_make names them: "<param>.exp_avg" and ".exp_avg_sq"
 * (AdamW), "<param>.momentum" (SGD, with sgd_momentum 1), none (SGD without momentum). */
static ls_status want_from_signature(const cJSON *sig, const char *file, const ls_optim_kind *optim, int sgd_momentum,
                                     want_list *w) {
    memset(w, 0, sizeof *w);
    if (!cJSON_IsArray(sig)) return ls_error(LS_ERR_FORMAT, "'%s': \"model\" (the model signature) is missing", file);
    const int slots = !optim ? 0 : *optim == LS_OPTIM_ADAMW ? 2 : sgd_momentum ? 1 : 0;
    ls_status s = LS_OK;
    for (int pass = 0; pass < 2 && s == LS_OK; pass++) { /* the parameters, then the buffers */
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, sig) {
            const char *name, *dtype;
            int nd;
            int64_t sh[LS_SAFETENSORS_MAX_DIMS];
            if (!sig_entry(e, &name, &dtype, &nd, sh)) {
                s = ls_error(LS_ERR_FORMAT, "'%s': model signature entry %d is malformed", file, i);
                break;
            }
            i++;
            const int frozen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "frozen"));
            if (optim && pass == 0 && !frozen) {
                for (int slot = 0; slot < slots && s == LS_OK; slot++)
                    s = want_add(w, name, 0,
                                 slot == 0 ? (*optim == LS_OPTIM_ADAMW ? ".exp_avg" : ".momentum") : ".exp_avg_sq",
                                 dtype, nd, sh);
            } else if (optim) {
                continue; /* a frozen parameter: no state */
            } else if (pass == 0) {
                s = want_add(w, name, 0, "", dtype, nd, sh);
            } else if (nd == 1 && ends_with(name, "weight")) {
                s = want_add(w, name, 6, "running_mean", dtype, nd, sh);
                if (s == LS_OK) s = want_add(w, name, 6, "running_var", dtype, nd, sh);
            }
            if (s != LS_OK) break;
        }
    }
    if (s != LS_OK) want_free(w);
    return s;
}

static int cmp_want_name(const void *a, const void *b) {
    return strcmp(((const want_tensor *)a)->name, ((const want_tensor *)b)->name);
}

/* f (the file at p) holds the tensors of w, each of its dtype and shape, and no other: what a resume
 * reads from it for the model and optimizer state.json records (what: they, in words). The first
 * difference is the error. w is sorted by name on the way. */
static ls_status check_file_tensors(const ls_safetensors *f, const char *p, want_list *w, const char *what) {
    char a[160], b[160];
    for (int i = 0; i < w->n; i++) {
        const want_tensor *x = &w->t[i];
        const ls_safetensors_info *t = ls_safetensors_find(f, x->name);
        if (!t) return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' of %s is missing", p, ESC_NAME(x->name), what);
        int same = t->ndim == x->ndim && strcmp(t->dtype_name, x->dtype) == 0;
        for (int k = 0; same && k < t->ndim; k++) same = t->shape[k] == x->shape[k];
        if (!same)
            return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' is %s %s but %s has %s %s", p, ESC_NAME(x->name),
                            shape_str(t->ndim, t->shape, a, sizeof a), t->dtype_name, what,
                            shape_str(x->ndim, x->shape, b, sizeof b), ESC_NAME(x->dtype));
    }
    if (w->n > 1) qsort(w->t, (size_t)w->n, sizeof *w->t, cmp_want_name); /* (t is NULL when n is 0) */
    for (int i = 1; i < w->n; i++)
        if (strcmp(w->t[i - 1].name, w->t[i].name) == 0)
            return ls_error(LS_ERR_FORMAT, "'%s': %s has tensor '%s' twice", p, what, ESC_NAME(w->t[i].name));
    const int n = ls_safetensors_count(f);
    for (int k = 0; k < n && n != w->n; k++) {
        want_tensor key = {(char *)ls_safetensors_tensor(f, k)->name, NULL, 0, {0}};
        if (!w->n || !bsearch(&key, w->t, (size_t)w->n, sizeof *w->t, cmp_want_name))
            return ls_error(LS_ERR_FORMAT, "'%s' holds %d tensors where %s has %d: '%s' is not one of them", p, n, what,
                            w->n, ESC_NAME(key.name));
    }
    return LS_OK;
}

/* optimizer.safetensors (f, at path p) holds the states of the kind state.json names: its
 * "optimizer" metadata that kind, its tensors "<param>.momentum" (SGD) or "<param>.exp_avg" and
 * ".exp_avg_sq" (AdamW). A resume refuses another ("the checkpoint's optimizer is sgd but this
 * run's is adamw", of a run that was AdamW), which verify passed. */
static ls_status check_optim_kind(const ls_safetensors *f, const char *p, ls_optim_kind kind) {
    const char *meta = ls_safetensors_metadata(f, "optimizer");
    if (meta && strcmp(meta, kind_name(kind)) != 0)
        return ls_error(LS_ERR_FORMAT, "'%s' holds the state of %s but state.json names the optimizer %s", p,
                        ESC_NAME(meta), kind_name(kind));
    for (int k = 0; k < ls_safetensors_count(f); k++) {
        const char *name = ls_safetensors_tensor(f, k)->name;
        if (kind == LS_OPTIM_ADAMW ? !ends_with(name, ".exp_avg") && !ends_with(name, ".exp_avg_sq")
                                   : !ends_with(name, ".momentum"))
            return ls_error(LS_ERR_FORMAT, "'%s': tensor '%s' is not a state of %s, the optimizer state.json names", p,
                            ESC_NAME(name), kind_name(kind));
    }
    return LS_OK;
}

/* What a resume reads beyond the bytes the manifest vouches for, without a model: state.json
 * parsed (its format, version, fields, step), every safetensors header, and their tensors against
 * what state.json records (check_file_tensors): model.safetensors and ema.safetensors hold the
 * tensors of its model signature, of their dtypes and shapes, optimizer.safetensors the states of
 * the optimizer it names. A file of the right CRC that a resume then refused passed verify (and
 * stopped --resume auto rather than being skipped): a tensor missing, or transposed. A resume
 * reads its checkpoint through this too (ckpt_read), so the two cannot disagree. */
static ls_status check_contents(const ckpt_bundle *b) {
    char p[LS_CKPT_PATH_MAX + 80], sp[LS_CKPT_PATH_MAX + 80], what[96];
    snprintf(sp, sizeof sp, "%s/%s", b->path, ckpt_required[F_STATE]);
    ls_ckpt_state st;
    LS_CHECK(ls_ckpt_state_parse((const char *)b->f[F_STATE].p, b->f[F_STATE].len, sp, NULL, &st));
    if (st.step != b->step)
        return ls_error(LS_ERR_FORMAT, "'%s': step %lld differs from the manifest's %lld", sp, (long long)st.step,
                        (long long)b->step);
    if (st.has_ema && !b->f[F_EMA].p)
        return ls_error(LS_ERR_FORMAT, "'%s' records an EMA of the weights but the manifest lists no %s", sp,
                        ckpt_required[F_EMA]);
    if (!st.has_ema && b->f[F_EMA].p) /* every save that writes the file records it: a resume ignored it */
        return ls_error(LS_ERR_FORMAT, "'%s' records no EMA of the weights but the manifest lists %s", sp,
                        ckpt_required[F_EMA]);
    /* the signature, which ls_ckpt_state_parse leaves to a model */
    cJSON *root = cJSON_ParseWithLength((const char *)b->f[F_STATE].p, b->f[F_STATE].len);
    if (!root) return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to read it again", sp);
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(root, "model");
    ls_status s = LS_OK;
    for (int i = 0; i < N_KNOWN && s == LS_OK; i++) {
        if (i == F_STATE || (i == F_EMA && !b->f[i].p)) continue;
        snprintf(p, sizeof p, "%s/%s", b->path, ckpt_required[i]);
        ls_safetensors *f;
        s = ls_safetensors_open_memory(b->f[i].p, b->f[i].len, p, &f);
        if (s != LS_OK) break;
        if (i == F_OPTIM) s = check_optim_kind(f, p, st.optim.kind);
        /* SGD's momentum for every parameter, or for none: the state of SGD without momentum, or of
         * a momentum this run starts afresh (load_tensors) */
        want_list w;
        if (s == LS_OK)
            s = want_from_signature(sig, sp, i == F_OPTIM ? &st.optim.kind : NULL, ls_safetensors_count(f) > 0, &w);
        if (s == LS_OK) {
            if (i != F_OPTIM)
                snprintf(what, sizeof what, "state.json's model");
            else if (st.optim.kind == LS_OPTIM_ADAMW)
                snprintf(what, sizeof what, "state.json's optimizer (adamw)");
            else
                snprintf(what, sizeof what, "state.json's optimizer (sgd, momentum %g)", (double)st.optim.momentum);
            s = check_file_tensors(f, p, &w, what);
            want_free(&w);
        }
        ls_safetensors_close(f);
    }
    cJSON_Delete(root);
    return s;
}

/* ckpt_dir exists but is no directory: said so ("no such checkpoint directory" of a file that is
 * there misled), and for DIR/latest, the file naming the newest, what to give instead. */
static ls_status not_a_checkpoint_dir(const char *ckpt_dir) {
    const char *base = strrchr(ckpt_dir, '/');
    base = base ? base + 1 : ckpt_dir;
    char name[64] = "";
    int64_t step;
    FILE *f = strcmp(base, "latest") == 0 ? fopen(ckpt_dir, "r") : NULL;
    if (f) {
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
    }
    if (!f || !parse_step_name(name, &step))
        return ls_error(LS_ERR_IO, "'%s' is a file, not a checkpoint directory (DIR/step-N)", ckpt_dir);
    char dir[LS_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s",
             base > ckpt_dir + 1 ? (int)(base - ckpt_dir - 1)
             : base > ckpt_dir   ? 1
                                 : 0,
             ckpt_dir);
    if (!dir[0]) snprintf(dir, sizeof dir, ".");
    return ls_error(LS_ERR_IO,
                    "'%s' is a file, not a checkpoint directory: it names the newest checkpoint, %s; give %s/%s, or "
                    "%s for its newest valid checkpoint",
                    ckpt_dir, name, dir, name, dir);
}

/* path's last component into buf (at most size), trailing slashes ignored: "DIR/step-9/" is step-9
 * (strrchr's "" after the slash skipped the check of the name against the manifest's step) */
static const char *last_name(const char *path, char *buf, size_t size) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(buf, size, "%.*s", (int)(n - b), path + b);
    return buf;
}

static ls_status ckpt_read(const char *ckpt_dir, ckpt_bundle *b) {
    memset(b, 0, sizeof *b);
    char p[LS_CKPT_PATH_MAX + 80];
    if ((size_t)snprintf(b->path, sizeof b->path, "%s", ckpt_dir) >= sizeof b->path)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint path '%s' is too long", ckpt_dir);
    snprintf(p, sizeof p, "%s/manifest.json", ckpt_dir);
    if (!is_dir(ckpt_dir) && !path_exists(ckpt_dir))
        return ls_error(LS_ERR_IO, "'%s': no such checkpoint directory", ckpt_dir);
    if (!is_dir(ckpt_dir)) return not_a_checkpoint_dir(ckpt_dir);
    struct stat msb;
    if (stat(p, &msb) != 0 && errno != ENOENT) /* a symlink loop, a lost mount: not "missing" */
        return ls_error(LS_ERR_IO, "'%s': %s", p, strerror(errno));
    if (!path_exists(p)) {
        /* a run's directory holding only what interrupted saves left, or one of those: said so
         * ("an incomplete checkpoint" sent people looking for a damaged one) */
        char base[256], tmp[256];
        if (is_tmp_name(last_name(ckpt_dir, base, sizeof base)))
            return ls_error(LS_ERR_IO,
                            "'%s' is missing: '%s' was left by a save that was interrupted (or is one in progress), "
                            "not a checkpoint",
                            p, ckpt_dir);
        if (stale_tmp_in(ckpt_dir, tmp, sizeof tmp))
            return ls_error(LS_ERR_IO,
                            "'%s' holds no checkpoint (no manifest.json, no step-N directory): '%s/%s' was left by a "
                            "save that was interrupted, not a checkpoint",
                            ckpt_dir, ckpt_dir, tmp);
        return ls_error(LS_ERR_IO, "'%s' is missing: '%s' is an incomplete checkpoint or not a checkpoint", p,
                        ckpt_dir);
    }
    unsigned char *text;
    size_t len;
    int fd;
    LS_CHECK(open_regular(p, &fd, &len));
    if (len > CKPT_MANIFEST_MAX) {
        close(fd);
        return ls_error(LS_ERR_FORMAT, "'%s': %zu bytes, more than a manifest's limit of %zu (damaged manifest)", p,
                        len, CKPT_MANIFEST_MAX);
    }
    LS_CHECK(read_fd(fd, p, len, &text, &len));
    ckpt_manifest m;
    ls_status s = manifest_parse((const char *)text, len, p, &m);
    free(text);
    LS_CHECK(s);
    char base[256];
    int64_t named;
    if (parse_step_name(last_name(ckpt_dir, base, sizeof base), &named) && named != m.step)
        return ls_error(LS_ERR_FORMAT, "'%s': the manifest says step %lld but the directory is named %s", p,
                        (long long)m.step, base);
    /* step-<digits> past int64: no save writes it and a resume's search passes it over, but named
     * itself it verified "ok" (of the manifest's step), its name left unchecked */
    if (strncmp(base, "step-", 5) == 0 && base[5] && strspn(base + 5, "0123456789") == strlen(base + 5) &&
        !parse_step_name(base, &named))
        return ls_error(LS_ERR_FORMAT,
                        "'%s': the directory is named %s, a step number past int64 (the manifest says step %lld): "
                        "not a checkpoint's name",
                        p, base, (long long)m.step);
    b->step = m.step;
    for (int i = 0; i < m.n; i++) {
        snprintf(p, sizeof p, "%s/%s", ckpt_dir, m.files[i].name);
        if (stat(p, &msb) != 0) {
            s = errno == ENOENT
                    ? ls_error(LS_ERR_IO, "'%s' is missing (listed in the manifest): the checkpoint is incomplete", p)
                    : ls_error(LS_ERR_IO, "'%s': %s", p, strerror(errno));
            break;
        }
        /* the size first: a state.json grown to 1 GB was read whole before it was compared */
        const int is_state = strcmp(m.files[i].name, ckpt_required[F_STATE]) == 0;
        if (S_ISREG(msb.st_mode) && (uint64_t)msb.st_size != m.files[i].size) {
            s = ls_error(LS_ERR_FORMAT, "'%s': %llu bytes but the manifest records %llu (%s)", p,
                         (unsigned long long)msb.st_size, (unsigned long long)m.files[i].size,
                         (uint64_t)msb.st_size < m.files[i].size ? "truncated" : "damaged");
            break;
        }
        if (is_state && m.files[i].size > CKPT_STATE_MAX) {
            s = ls_error(LS_ERR_FORMAT, "'%s': %llu bytes, more than a state.json's limit of %zu (damaged)", p,
                         (unsigned long long)m.files[i].size, CKPT_STATE_MAX);
            break;
        }
        /* the tensors' files mapped (the CRC pages them through the page cache, none is copied), the
         * small JSON read */
        file_bytes fb;
        if (is_state) {
            memset(&fb, 0, sizeof fb);
            LS_CHECK_GOTO(read_file(p, &fb.p, &fb.len), s, fail);
        } else {
            LS_CHECK_GOTO(map_file(p, &fb), s, fail);
        }
        if (fb.len != m.files[i].size) {
            s = ls_error(LS_ERR_FORMAT, "'%s': %zu bytes but the manifest records %llu (%s)", p, fb.len,
                         (unsigned long long)m.files[i].size, fb.len < m.files[i].size ? "truncated" : "damaged");
            fb_free(&fb);
            break;
        }
        uint32_t crc = crc32_of(fb.p, fb.len);
        if (crc != m.files[i].crc) {
            fb_free(&fb);
            s = ls_error(LS_ERR_FORMAT, "'%s': CRC32 %08x does not match the manifest's %08x (the file is damaged)", p,
                         (unsigned)crc, (unsigned)m.files[i].crc);
            break;
        }
        int kept = 0;
        for (int r = 0; r < N_KNOWN && !kept; r++)
            if (strcmp(m.files[i].name, ckpt_required[r]) == 0) {
                b->f[r] = fb;
                kept = 1;
            }
        if (!kept) fb_free(&fb);
    }
    if (s == LS_OK) s = check_contents(b);
fail:
    if (s != LS_OK) bundle_free(b);
    return s;
}

ls_status ls_ckpt_verify(const char *ckpt_dir, int64_t *step) {
    if (!ckpt_dir) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_verify: NULL path");
    ckpt_dir = NORM_PATH(ckpt_dir);
    ckpt_bundle b;
    LS_CHECK(ckpt_read(ckpt_dir, &b));
    if (step) *step = b.step;
    bundle_free(&b);
    return LS_OK;
}

/* (root reads any file, so only other users ever see it) */
int ls_ckpt_unreadable(const char *p) {
    if (!p) return 0;
    if (faccessat(AT_FDCWD, p, R_OK | X_OK, AT_EACCESS) != 0) return errno == EACCES;
    DIR *d = opendir(p);
    if (!d) return errno == EACCES;
    int denied = 0;
    struct dirent *e;
    char f[LS_CKPT_PATH_MAX + 400]; /* p (as find_and_read's) and a name */
    while (!denied && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        denied = faccessat(AT_FDCWD, f, R_OK, AT_EACCESS) != 0 && errno == EACCES;
    }
    closedir(d);
    return denied;
}

/* The newest checkpoint in dir that verifies, read into b. resume: for a resume (the training
 * programs' --resume), else for ls_ckpt_find_latest (lockstep-ckpt info): what to do where the
 * newest is of a newer format. */
static ls_status find_and_read(const char *dir, ckpt_bundle *b, int *found, int resume) {
    *found = 0;
    memset(b, 0, sizeof *b);
    step_dir *v;
    int n;
    LS_CHECK(list_steps(dir, &v, &n, 1));
    if (n == 0) {
        free(v);
        char tmp[256];
        if (stale_tmp_in(dir, tmp, sizeof tmp)) /* why a run killed in its first save starts afresh */
            LS_LOG_W("'%s' holds no checkpoint: '%s/%s' was left by a save that was interrupted, not a checkpoint", dir,
                     dir, tmp);
        return LS_OK;
    }
    char p[LS_CKPT_PATH_MAX + 80], first_err[1024] = "";
    ls_status first = LS_OK;
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        ls_status s = ckpt_read(p, b);
        if (s == LS_OK) {
            *found = 1;
            free(v);
            return LS_OK;
        }
        if (s == LS_ERR_UNSUPPORTED) { /* a newer format: not damaged, and older ones are behind it */
            free(v);
            char why[1024];
            snprintf(why, sizeof why, "%s", ls_last_error());
            if (resume)
                return ls_error(s, "%s (not resuming from an older checkpoint: give one with --resume PATH to do so)",
                                why);
            return ls_error(s, "%s (not falling back to an older checkpoint: name one, %s/step-N, to use it)", why,
                            dir);
        }
        if (s == LS_ERR_IO && ls_ckpt_unreadable(p)) { /* not damaged either: a resume past it lost the work since,
                                                * its save of the same step replacing it */
            free(v);
            char why[1024];
            snprintf(why, sizeof why, "%s", ls_last_error());
            if (resume)
                return ls_error(s,
                                "%s (this user may not read it: not resuming from an older checkpoint; make it "
                                "readable, or give one with --resume PATH)",
                                why);
            return ls_error(s,
                            "%s (this user may not read it: not falling back to an older checkpoint; make it readable, "
                            "or name one, %s/step-N, to use it)",
                            why, dir);
        }
        if (first == LS_OK) {
            first = s;
            snprintf(first_err, sizeof first_err, "%s", ls_last_error());
        }
        LS_LOG_W("skipping damaged checkpoint '%s': %s", p, ls_last_error());
    }
    free(v);
    return ls_error(first, "no valid checkpoint in '%s' (%d damaged; the newest: %s)", dir, n, first_err);
}

ls_status ls_ckpt_find_latest(const char *dir, char *path_out, size_t path_len, int *found) {
    if (!dir || !found) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_find_latest: NULL argument");
    dir = NORM_PATH(dir);
    ckpt_bundle b;
    LS_CHECK(find_and_read(dir, &b, found, 0));
    if (*found && path_out && path_len) snprintf(path_out, path_len, "%s", b.path);
    bundle_free(&b);
    return LS_OK;
}

/* ---------------------------------------------------------------- state.json */

static cJSON *u64_string(uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    return cJSON_CreateString(b);
}

typedef struct tensor_index {
    const ls_tensor *t;
    int k;
} tensor_index;

static int cmp_tensor_index(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const tensor_index *)a)->t, y = (uintptr_t)((const tensor_index *)b)->t;
    return x < y ? -1 : x > y;
}

/* *out: for each of the model's parameters, the optimizer's index of it, -1 where the optimizer
 * leaves it out (frozen); free() it. In O(n) where the optimizer holds the model's parameters in
 * order (the usual case), else O(n log n) through its tensors sorted by address (a search per
 * parameter made a save of many tensors quadratic). A tensor of the optimizer's that is not one of
 * the model's is LS_ERR_INVALID_ARGUMENT: its state would have no name in the checkpoint. */
static ls_status opt_index_map(ls_module *model, const ls_optimizer *opt, int **out) {
    *out = NULL;
    const int np = ls_module_num_params(model), no = ls_optimizer_num_params(opt);
    int *m = malloc((size_t)(np > 0 ? np : 1) * sizeof *m);
    if (!m) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the optimizer's parameter map");
    int same = no == np;
    for (int i = 0; same && i < np; i++) same = ls_optimizer_param(opt, i, NULL) == ls_module_param(model, i);
    if (same) {
        for (int i = 0; i < np; i++) m[i] = i;
        *out = m;
        return LS_OK;
    }
    tensor_index *v = malloc((size_t)(no > 0 ? no : 1) * sizeof *v);
    unsigned char *hit = calloc((size_t)(no > 0 ? no : 1), 1);
    if (!v || !hit) {
        free(v);
        free(hit);
        free(m);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the optimizer's parameter map");
    }
    for (int k = 0; k < no; k++) v[k] = (tensor_index){ls_optimizer_param(opt, k, NULL), k};
    if (no > 1) qsort(v, (size_t)no, sizeof *v, cmp_tensor_index);
    for (int i = 0; i < np; i++) {
        const tensor_index key = {ls_module_param(model, i), 0};
        const tensor_index *f = no > 0 ? bsearch(&key, v, (size_t)no, sizeof *v, cmp_tensor_index) : NULL;
        m[i] = f ? f->k : -1;
        if (f) hit[f->k] = 1;
    }
    free(v);
    for (int k = 0; k < no; k++)
        if (!hit[k]) {
            char d[64];
            free(hit);
            free(m);
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the optimizer's parameter %d (%s) is not one of the model's: its state would have no "
                            "name in the checkpoint",
                            k, ls_tensor_describe(ls_optimizer_param(opt, k, NULL), d, sizeof d));
        }
    free(hit);
    *out = m;
    return LS_OK;
}

/* opt (may be NULL): a parameter it leaves out is marked "frozen": true, and optimizer.safetensors
 * holds no state of it. */
static cJSON *signature_json(ls_module *model, const int *opt_map) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < ls_module_num_params(model); i++) {
        ls_tensor *t = ls_module_param(model, i);
        cJSON *e = cJSON_CreateObject();
        cJSON *shape = cJSON_CreateArray();
        int ok = e && shape && cJSON_AddStringToObject(e, "name", ls_module_param_name(model, i)) &&
                 cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        if (ok && opt_map && opt_map[i] < 0) ok = cJSON_AddBoolToObject(e, "frozen", 1) != NULL;
        for (int k = 0; ok && k < t->ndim; k++) {
            cJSON *d = cJSON_CreateNumber((double)t->shape[k]);
            ok = d != NULL;
            if (d) cJSON_AddItemToArray(shape, d);
        }
        if (!ok) {
            cJSON_Delete(e);
            cJSON_Delete(shape);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToObject(e, "shape", shape);
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

/* The model's layers (ls_module_layers): what the parameters' shapes do not show, an activation
 * or a dropout, compared by a resume. */
static cJSON *layers_json(ls_module *model) {
    const int n = ls_module_layers(model, NULL, 0);
    char(*d)[LS_LAYER_DESC_MAX] = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    cJSON *arr = d ? cJSON_CreateArray() : NULL;
    if (arr) ls_module_layers(model, d, n);
    for (int i = 0; arr && i < n; i++) {
        cJSON *e = cJSON_CreateString(d[i]);
        if (!e) {
            cJSON_Delete(arr);
            arr = NULL;
        } else {
            cJSON_AddItemToArray(arr, e);
        }
    }
    free(d);
    return arr;
}

/* The first difference between a checkpoint's "layers" and the model's, written into buf ("its
 * layers differ: entry 2 is 'Linear' in the checkpoint but 'Dropout(p=0.3)' in this model", or
 * their counts when one is a prefix of the other): 1; 0 when they agree; -1 when arr is not an
 * array of strings. */
static int layers_difference(const cJSON *arr, ls_module *model, char *buf, size_t len) {
    if (!cJSON_IsArray(arr)) return -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (!cJSON_IsString(e)) return -1;
    const int n = ls_module_layers(model, NULL, 0), nc = cJSON_GetArraySize(arr);
    char(*d)[LS_LAYER_DESC_MAX] = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) return 0; /* nothing to say without the memory: the signature still decides */
    ls_module_layers(model, d, n);
    int i = 0, differ = 0;
    cJSON_ArrayForEach(e, arr) {
        if (i >= n) break;
        if (strcmp(e->valuestring, d[i])) {
            snprintf(buf, len, "its layers differ: entry %d is '%s' in the checkpoint but '%s' in this model", i,
                     ESC_NAME(e->valuestring), d[i]);
            differ = 1;
            break;
        }
        i++;
    }
    if (!differ && nc != n) {
        snprintf(buf, len, "its layers differ: the checkpoint's model has %d, this model %d", nc, n);
        differ = 1;
    }
    free(d);
    return differ;
}

static ls_status state_to_json(const ls_ckpt_state *st, ls_module *model, const ls_optimizer *opt, char **out);

ls_status ls_ckpt_state_to_json(const ls_ckpt_state *st, ls_module *model, char **out) {
    return state_to_json(st, model, NULL, out);
}

/* The same, with the parameters opt leaves out marked frozen in the signature. */
static ls_status state_to_json(const ls_ckpt_state *st, ls_module *model, const ls_optimizer *opt, char **out) {
    if (!st || !out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_state_to_json: NULL argument");
    *out = NULL;
    if (st->n_loss_scaler < 0 || st->n_loss_scaler > LS_CKPT_MAX_KV || st->n_rng < 0 || st->n_rng > LS_CKPT_MAX_RNG)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "checkpoint state: %d loss-scaler values / %d RNG streams (max %d / %d)", st->n_loss_scaler,
                        st->n_rng, LS_CKPT_MAX_KV, LS_CKPT_MAX_RNG);
    int *map = NULL; /* the parameters opt leaves out (frozen), marked in the signature */
    if (model && opt) LS_CHECK(opt_index_map(model, opt, &map));
    cJSON *r = cJSON_CreateObject();
    cJSON *lr = cJSON_CreateObject(), *op = cJSON_CreateObject(), *ls = cJSON_CreateObject();
    cJSON *rng = cJSON_CreateArray();
    int ok = r && lr && op && ls && rng;
    if (!ok) {
        cJSON_Delete(r);
        cJSON_Delete(lr);
        cJSON_Delete(op);
        cJSON_Delete(ls);
        cJSON_Delete(rng);
        free(map);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the checkpoint state");
    }
    ok = add(r, "format", cJSON_CreateString("lockstep-state")) && add(r, "version", cJSON_CreateNumber(1)) &&
         add(r, "step", exact_number((double)st->step)) && add(r, "epoch", exact_number((double)st->epoch)) &&
         add(r, "epoch_samples", exact_number((double)st->epoch_samples)) &&
         add(r, "steps_per_epoch", exact_number((double)st->steps_per_epoch)) &&
         add(r, "world_size", exact_number(st->world_size)) &&
         add(r, "batch_per_rank", exact_number((double)st->batch_per_rank)) &&
         add(r, "accum_steps", exact_number(st->accum_steps)) && add(r, "seed", u64_string(st->seed)) &&
         add(r, "label_smoothing", exact_number(st->label_smoothing)) && add(r, "dropout", exact_number(st->dropout));
    if (ok && st->n_settings > 0) {
        cJSON *set = cJSON_CreateObject();
        ok = set != NULL;
        for (int i = 0; ok && i < st->n_settings && i < LS_CKPT_MAX_SETTINGS; i++)
            ok = add(set, st->settings[i].name, cJSON_CreateString(st->settings[i].value));
        if (set) add(r, "settings", set);
    }
    add(r, "lr_schedule", lr);
    add(r, "optimizer", op);
    add(r, "loss_scaler", ls);
    add(r, "rng", rng);
    ok = ok && add(lr, "base_lr", exact_number(st->lr.base_lr)) && add(lr, "min_lr", exact_number(st->lr.min_lr)) &&
         add(lr, "warmup_steps", exact_number((double)st->lr.warmup_steps)) &&
         add(lr, "total_steps", exact_number((double)st->lr.total_steps)) &&
         add(lr, "decay", cJSON_CreateString(ls_lr_kind_name(st->lr.kind)));
    const ls_optim_config *c = &st->optim;
    ok = ok && add(op, "kind", cJSON_CreateString(kind_name(c->kind))) &&
         add(op, "steps", exact_number((double)st->optim_steps)) && add(op, "lr", exact_number(c->lr)) &&
         add(op, "weight_decay", exact_number(c->weight_decay)) && add(op, "momentum", exact_number(c->momentum)) &&
         add(op, "dampening", exact_number(c->dampening)) && add(op, "nesterov", cJSON_CreateBool(c->nesterov)) &&
         add(op, "beta1", exact_number(c->beta1)) && add(op, "beta2", exact_number(c->beta2)) &&
         add(op, "eps", exact_number(c->eps)) && add(op, "no_decay_1d", cJSON_CreateBool(c->no_decay_1d));
    for (int i = 0; ok && i < st->n_loss_scaler; i++)
        ok = add(ls, st->loss_scaler[i].key, exact_number(st->loss_scaler[i].value));
    for (int i = 0; ok && i < st->n_rng; i++) {
        const ls_rng *g = &st->rng[i].rng;
        cJSON *e = cJSON_CreateObject();
        cJSON *buf = cJSON_CreateArray();
        ok = e && buf && add(e, "name", cJSON_CreateString(st->rng[i].name)) && add(e, "seed", u64_string(g->seed)) &&
             add(e, "offset", u64_string(g->offset)) && add(e, "avail", exact_number(g->avail));
        for (int k = 0; ok && k < 4; k++) {
            cJSON *w = exact_number((double)g->buf[k]);
            ok = w != NULL;
            if (w) cJSON_AddItemToArray(buf, w);
        }
        if (e) cJSON_AddItemToArray(rng, e);
        if (buf && e)
            cJSON_AddItemToObject(e, "buf", buf);
        else
            cJSON_Delete(buf);
    }
    if (ok && st->has_ema) {
        cJSON *em = cJSON_CreateObject();
        ok = add(r, "ema", em) && add(em, "decay", exact_number(st->ema_decay)) &&
             add(em, "warmup", cJSON_CreateBool(st->ema_warmup)) &&
             add(em, "updates", exact_number((double)st->ema_updates));
    }
    if (ok && model) ok = add(r, "model", signature_json(model, map)) && add(r, "layers", layers_json(model));
    free(map);
    char *s = ok ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (!s) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the checkpoint state");
    *out = s;
    return LS_OK;
}

static ls_status get_uint(const cJSON *o, const char *key, const char *file, int64_t *out) {
    uint64_t v;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!json_uint(j, &v)) {
        if (cJSON_IsNumber(j)) /* the value named: a negative step said only "missing or not an integer" */
            return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" = %.17g is not an integer from 0 to 2^53", file, key,
                            j->valuedouble);
        return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" is missing or not an integer from 0 to 2^53", file, key);
    }
    *out = (int64_t)v;
    return LS_OK;
}

static ls_status get_num(const cJSON *o, const char *key, const char *file, double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(j) && !isfinite(j->valuedouble)) /* 1e999 */
        return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" = %g is not a finite number", file, key, j->valuedouble);
    if (!cJSON_IsNumber(j)) return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" is missing or not a finite number", file, key);
    *out = j->valuedouble;
    return LS_OK;
}

static ls_status get_float(const cJSON *o, const char *key, const char *file, float *out) {
    double d = 0;
    LS_CHECK(get_num(o, key, file, &d));
    if (fabs(d) > 3.4e38) return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" = %g is past a float's range", file, key, d);
    *out = (float)d;
    return LS_OK;
}

static ls_status get_u64str(const cJSON *o, const char *key, const char *file, uint64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    const char *s = cJSON_IsString(j) ? j->valuestring : NULL;
    int ok = s && *s && strlen(s) <= 20;
    for (const char *p = s; ok && *p; p++) ok = *p >= '0' && *p <= '9';
    if (ok) {
        errno = 0;
        unsigned long long v = strtoull(s, NULL, 10);
        ok = errno == 0;
        *out = (uint64_t)v;
    }
    if (!ok) return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" is missing or not a decimal string", file, key);
    return LS_OK;
}

static ls_status get_int_range(const cJSON *o, const char *key, const char *file, int64_t lo, int64_t hi,
                               int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && (j->valuedouble < (double)lo))
        return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" = %.17g is outside [%lld, %lld]", file, key, j->valuedouble,
                        (long long)lo, (long long)hi); /* a world size of -2: the range, not "from 0" */
    LS_CHECK(get_uint(o, key, file, out));
    if (*out < lo || *out > hi)
        return ls_error(LS_ERR_FORMAT, "'%s': \"%s\" = %lld is outside [%lld, %lld]", file, key, (long long)*out,
                        (long long)lo, (long long)hi);
    return LS_OK;
}

/* hint: how the layers differ (layers_difference), or NULL */
static ls_status check_signature(const cJSON *arr, const char *file, ls_module *model, const char *hint) {
    char a[320], b[320], why[480];
    snprintf(why, sizeof why, "%s%s", hint ? ": " : "?", hint ? hint : "");
    if (!cJSON_IsArray(arr)) return ls_error(LS_ERR_FORMAT, "'%s': \"model\" (the model signature) is missing", file);
    int nc = cJSON_GetArraySize(arr), nm = ls_module_num_params(model);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const char *sname, *sdtype;
        int64_t sh[LS_SAFETENSORS_MAX_DIMS];
        int nd, k;
        if (!sig_entry(e, &sname, &sdtype, &nd, sh))
            return ls_error(LS_ERR_FORMAT, "'%s': model signature entry %d is malformed", file, i);
        if (i >= nm)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "'%s': the checkpoint's model has %d parameters but this model has %d (first extra: %s); "
                            "a different model%s",
                            file, nc, nm, param_desc(sname, sdtype, nd, sh, a, sizeof a), why);
        ls_tensor *t = ls_module_param(model, i);
        const char *mname = ls_module_param_name(model, i);
        int same = strcmp(sname, mname) == 0 && strcmp(sdtype, st_dtype_name(t->dtype)) == 0 && nd == t->ndim;
        for (k = 0; same && k < nd; k++) same = sh[k] == t->shape[k];
        if (!same)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "'%s': parameter %d is %s in the checkpoint but %s in this model (a different model%s)",
                            file, i, param_desc(sname, sdtype, nd, sh, a, sizeof a),
                            param_desc(mname, st_dtype_name(t->dtype), t->ndim, t->shape, b, sizeof b), why);
        i++;
    }
    if (nc < nm) {
        ls_tensor *t = ls_module_param(model, nc);
        return ls_error(
            LS_ERR_INVALID_ARGUMENT,
            "'%s': the checkpoint's model has %d parameters but this model has %d (first missing: %s); a "
            "different model%s",
            file, nc, nm,
            param_desc(ls_module_param_name(model, nc), st_dtype_name(t->dtype), t->ndim, t->shape, a, sizeof a), why);
    }
    return LS_OK;
}

static ls_status parse_state_obj(const cJSON *r, const char *file, ls_module *model, ls_ckpt_state *st) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r, "format");
    if (!cJSON_IsObject(r) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "lockstep-state") != 0)
        return ls_error(LS_ERR_FORMAT, "'%s': not a lockstep checkpoint state", file);
    int64_t v = 0;
    LS_CHECK(get_uint(r, "version", file, &v));
    if (v != 1)
        return ls_error(LS_ERR_UNSUPPORTED, "'%s': state version %lld is not 1, the only one this build reads", file,
                        (long long)v);
    LS_CHECK(get_uint(r, "step", file, &st->step));
    LS_CHECK(get_uint(r, "epoch", file, &st->epoch));
    LS_CHECK(get_uint(r, "epoch_samples", file, &st->epoch_samples));
    LS_CHECK(get_uint(r, "steps_per_epoch", file, &st->steps_per_epoch));
    LS_CHECK(get_int_range(r, "world_size", file, 1, INT_MAX, &v));
    st->world_size = (int)v;
    LS_CHECK(get_int_range(r, "batch_per_rank", file, 1, INT64_MAX, &st->batch_per_rank));
    LS_CHECK(get_int_range(r, "accum_steps", file, 1, INT_MAX, &v));
    st->accum_steps = (int)v;
    LS_CHECK(get_u64str(r, "seed", file, &st->seed));
    st->label_smoothing = 0; /* absent from checkpoints written before it existed */
    if (cJSON_GetObjectItemCaseSensitive(r, "label_smoothing")) {
        LS_CHECK(get_num(r, "label_smoothing", file, &st->label_smoothing));
        if (!(st->label_smoothing >= 0 && st->label_smoothing < 1))
            return ls_error(LS_ERR_FORMAT, "'%s': \"label_smoothing\" %g is not in [0, 1)", file, st->label_smoothing);
    }
    st->dropout = 0; /* the same */
    if (cJSON_GetObjectItemCaseSensitive(r, "dropout")) {
        LS_CHECK(get_num(r, "dropout", file, &st->dropout));
        if (!(st->dropout >= 0 && st->dropout < 1))
            return ls_error(LS_ERR_FORMAT, "'%s': \"dropout\" %g is not in [0, 1)", file, st->dropout);
    }
    st->n_settings = 0; /* absent from checkpoints written before them */
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(r, "settings"), *se;
    if (set && !cJSON_IsObject(set)) return ls_error(LS_ERR_FORMAT, "'%s': \"settings\" is not an object", file);
    if (set) cJSON_ArrayForEach(se, set) {
            if (!cJSON_IsString(se) || !se->string)
                return ls_error(LS_ERR_FORMAT, "'%s': setting '%s' is not a string", file,
                                se->string ? ESC_NAMEN(se->string, 64) : "");
            if (st->n_settings == LS_CKPT_MAX_SETTINGS) break; /* more than this build records: not compared */
            ls_ckpt_setting *x = &st->settings[st->n_settings++];
            snprintf(x->name, sizeof x->name, "%s", se->string);
            snprintf(x->value, sizeof x->value, "%s", se->valuestring);
        }
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(r, "lr_schedule");
    if (!cJSON_IsObject(lr)) return ls_error(LS_ERR_FORMAT, "'%s': \"lr_schedule\" is missing", file);
    LS_CHECK(get_float(lr, "base_lr", file, &st->lr.base_lr));
    LS_CHECK(get_float(lr, "min_lr", file, &st->lr.min_lr));
    LS_CHECK(get_uint(lr, "warmup_steps", file, &st->lr.warmup_steps));
    LS_CHECK(get_uint(lr, "total_steps", file, &st->lr.total_steps));
    st->lr.kind = LS_LR_COSINE; /* absent from checkpoints written before there was a choice */
    const cJSON *lk = cJSON_GetObjectItemCaseSensitive(lr, "decay");
    if (lk && (!cJSON_IsString(lk) || ls_lr_kind_parse(lk->valuestring, &st->lr.kind) != LS_OK))
        return ls_error(LS_ERR_FORMAT, "'%s': lr_schedule \"decay\" is not cosine, linear or constant", file);
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(r, "optimizer");
    if (!cJSON_IsObject(op)) return ls_error(LS_ERR_FORMAT, "'%s': \"optimizer\" is missing", file);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(op, "kind");
    if (!cJSON_IsString(kind) || ls_optim_kind_parse(kind->valuestring, &st->optim.kind) != LS_OK)
        return ls_error(LS_ERR_FORMAT, "'%s': optimizer \"kind\" is missing or not sgd/adamw", file);
    LS_CHECK(get_uint(op, "steps", file, &st->optim_steps));
    LS_CHECK(get_float(op, "lr", file, &st->optim.lr));
    LS_CHECK(get_float(op, "weight_decay", file, &st->optim.weight_decay));
    LS_CHECK(get_float(op, "momentum", file, &st->optim.momentum));
    LS_CHECK(get_float(op, "dampening", file, &st->optim.dampening));
    LS_CHECK(get_float(op, "beta1", file, &st->optim.beta1));
    LS_CHECK(get_float(op, "beta2", file, &st->optim.beta2));
    LS_CHECK(get_float(op, "eps", file, &st->optim.eps));
    /* the ranges the optimizer and the schedule take (ls_optimizer_create's), each named with its
     * value: a negative learning rate was resumed and trained away from the minimum */
    const struct {
        const char *in, *key;
        float v, max;
        int below;
        const char *range;
    } hp[] = {{"lr_schedule", "base_lr", st->lr.base_lr, FLT_MAX, 0, "finite and >= 0"},
              {"lr_schedule", "min_lr", st->lr.min_lr, FLT_MAX, 0, "finite and >= 0"},
              {"optimizer", "lr", st->optim.lr, FLT_MAX, 0, "finite and >= 0"},
              {"optimizer", "weight_decay", st->optim.weight_decay, FLT_MAX, 0, "finite and >= 0"},
              {"optimizer", "momentum", st->optim.momentum, FLT_MAX, 0, "finite and >= 0"},
              {"optimizer", "dampening", st->optim.dampening, 1, 0, "from 0 to 1"},
              {"optimizer", "beta1", st->optim.beta1, 1, 1, "from 0 to below 1"},
              {"optimizer", "beta2", st->optim.beta2, 1, 1, "from 0 to below 1"},
              {"optimizer", "eps", st->optim.eps, FLT_MAX, 0, "finite and >= 0"}};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        if (!(hp[i].v >= 0 && (hp[i].below ? hp[i].v < hp[i].max : hp[i].v <= hp[i].max)))
            return ls_error(LS_ERR_FORMAT, "'%s': %s \"%s\" = %g is not %s", file, hp[i].in, hp[i].key, (double)hp[i].v,
                            hp[i].range);
    /* where the next step starts in its epoch: within the epoch's data, steps_per_epoch global
     * batches (0: not recorded); one past it was taken as the next epoch's start without a word */
    const double epoch_data =
        (double)st->steps_per_epoch * st->world_size * (double)st->batch_per_rank * st->accum_steps;
    if (st->steps_per_epoch > 0 && (double)st->epoch_samples > epoch_data)
        return ls_error(LS_ERR_FORMAT,
                        "'%s': \"epoch_samples\" = %lld is past the epoch's data: %lld steps of %d ranks x batch "
                        "%lld x %d accumulation steps are %.17g samples",
                        file, (long long)st->epoch_samples, (long long)st->steps_per_epoch, st->world_size,
                        (long long)st->batch_per_rank, st->accum_steps, epoch_data);
    const cJSON *nes = cJSON_GetObjectItemCaseSensitive(op, "nesterov");
    if (!cJSON_IsBool(nes)) return ls_error(LS_ERR_FORMAT, "'%s': optimizer \"nesterov\" is not true/false", file);
    st->optim.nesterov = cJSON_IsTrue(nes);
    /* absent from checkpoints written before it existed: every parameter decayed then */
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(op, "no_decay_1d");
    if (nd && !cJSON_IsBool(nd))
        return ls_error(LS_ERR_FORMAT, "'%s': optimizer \"no_decay_1d\" is not true/false", file);
    st->optim.no_decay_1d = cJSON_IsTrue(nd);
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(r, "loss_scaler");
    if (!cJSON_IsObject(ls) || cJSON_GetArraySize(ls) > LS_CKPT_MAX_KV)
        return ls_error(LS_ERR_FORMAT, "'%s': \"loss_scaler\" must be an object of at most %d numbers", file,
                        LS_CKPT_MAX_KV);
    const cJSON *e;
    cJSON_ArrayForEach(e, ls) {
        ls_ckpt_kv *kv = &st->loss_scaler[st->n_loss_scaler];
        if (!e->string || strlen(e->string) >= sizeof kv->key)
            return ls_error(LS_ERR_FORMAT, "'%s': loss-scaler key is empty or too long", file);
        for (int i = 0; i < st->n_loss_scaler; i++)
            if (strcmp(st->loss_scaler[i].key, e->string) == 0)
                return ls_error(LS_ERR_FORMAT, "'%s': loss-scaler key '%s' appears twice", file, ESC_NAME(e->string));
        snprintf(kv->key, sizeof kv->key, "%s", e->string);
        LS_CHECK(get_num(ls, e->string, file, &kv->value));
        /* the keys GradScaler's state has (the examples' save): a scale of -1 or a growth tracker
         * of 2.5 verified ok, and was found only by an fp16 resume */
        const double val = kv->value;
        if (strcmp(kv->key, "scale") == 0 && !(val > 0))
            return ls_error(LS_ERR_FORMAT, "'%s': loss_scaler \"scale\" = %g is not a number > 0", file, val);
        if ((strcmp(kv->key, "growth_tracker") == 0 || strcmp(kv->key, "skipped") == 0) &&
            !(val >= 0 && val == floor(val) && val <= MAX_EXACT_INT))
            return ls_error(LS_ERR_FORMAT, "'%s': loss_scaler \"%s\" = %g is not a whole number from 0 to 2^53", file,
                            kv->key, val);
        st->n_loss_scaler++;
    }
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(r, "rng");
    if (!cJSON_IsArray(rng) || cJSON_GetArraySize(rng) > LS_CKPT_MAX_RNG)
        return ls_error(LS_ERR_FORMAT, "'%s': \"rng\" must be a list of at most %d streams", file, LS_CKPT_MAX_RNG);
    cJSON_ArrayForEach(e, rng) {
        ls_ckpt_rng *g = &st->rng[st->n_rng];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *buf = cJSON_GetObjectItemCaseSensitive(e, "buf");
        if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof g->name || !cJSON_IsArray(buf) ||
            cJSON_GetArraySize(buf) != 4)
            return ls_error(LS_ERR_FORMAT, "'%s': RNG stream %d needs a \"name\" and a 4-word \"buf\"", file,
                            st->n_rng);
        snprintf(g->name, sizeof g->name, "%s", name->valuestring);
        LS_CHECK(get_u64str(e, "seed", file, &g->rng.seed));
        LS_CHECK(get_u64str(e, "offset", file, &g->rng.offset));
        LS_CHECK(get_int_range(e, "avail", file, 0, 4, &v));
        g->rng.avail = (int)v;
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            if (!json_uint(cJSON_GetArrayItem(buf, k), &w) || w > 0xffffffffu)
                return ls_error(LS_ERR_FORMAT, "'%s': RNG stream '%s' has a \"buf\" word that is not 32-bit", file,
                                ESC_NAME(g->name));
            g->rng.buf[k] = (uint32_t)w;
        }
        st->n_rng++;
    }
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(r, "ema"); /* only with an EMA of the weights */
    if (em) {
        const cJSON *wu = cJSON_GetObjectItemCaseSensitive(em, "warmup");
        if (!cJSON_IsObject(em) || !cJSON_IsBool(wu))
            return ls_error(LS_ERR_FORMAT, "'%s': \"ema\" needs a \"decay\", a true/false \"warmup\" and \"updates\"",
                            file);
        LS_CHECK(get_num(em, "decay", file, &st->ema_decay));
        if (!(st->ema_decay >= 0 && st->ema_decay < 1))
            return ls_error(LS_ERR_FORMAT, "'%s': ema \"decay\" %g is not in [0, 1)", file, st->ema_decay);
        LS_CHECK(get_uint(em, "updates", file, &st->ema_updates));
        st->ema_warmup = cJSON_IsTrue(wu);
        st->has_ema = 1;
    }
    if (model) {
        /* the layers, in checkpoints since 6 December 2026: a difference explains a signature that
         * differs (a dropout renumbers the layers after it), or is said where the parameters agree
         * (another activation) */
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(r, "layers");
        char diff[sizeof st->layers_changed] = "";
        const int differ = layers ? layers_difference(layers, model, diff, sizeof diff) : 0;
        if (differ < 0) return ls_error(LS_ERR_FORMAT, "'%s': \"layers\" is not an array of strings", file);
        LS_CHECK(check_signature(cJSON_GetObjectItemCaseSensitive(r, "model"), file, model, differ ? diff : NULL));
        snprintf(st->layers_changed, sizeof st->layers_changed, "%s", diff);
    }
    return LS_OK;
}

ls_status ls_ckpt_state_parse(const char *text, size_t len, const char *name, ls_module *model, ls_ckpt_state *out) {
    if (!out || (!text && len)) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_state_parse: NULL argument");
    memset(out, 0, sizeof *out);
    if (!name) name = "state.json";
    const char *t = text ? text : "", *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(t, len, &end, 0);
    if (!r) return ls_error(LS_ERR_FORMAT, "'%s': not valid JSON (damaged state)", name);
    /* what cJSON stops before: a state with more after its object ("{...}}", two states one after
     * the other) was taken as its first object, where the manifest's parse refuses it */
    for (const char *c = end; c < t + len; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
            cJSON_Delete(r);
            return ls_error(LS_ERR_FORMAT, "'%s': bytes after its JSON object, at byte %zu (damaged state)", name,
                            (size_t)(c - t));
        }
    ls_status s = parse_state_obj(r, name, model, out);
    cJSON_Delete(r);
    return s;
}

/* Appends "what" (printf) to d, after ", " when d holds some already. */
static void diff_str(char *d, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void diff_str(char *d, size_t size, const char *fmt, ...) {
    size_t n = strlen(d);
    if (n && n + 2 < size) {
        memcpy(d + n, ", ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    if (n < size) vsnprintf(d + n, size - n, fmt, ap);
    va_end(ap);
}

int ls_ckpt_warn_changes(const ls_ckpt_state *a, const ls_ckpt_state *b) {
    int n = 0;
    if (!a || !b) return 0;
    if (a->world_size != b->world_size || a->batch_per_rank != b->batch_per_rank || a->accum_steps != b->accum_steps) {
        LS_LOG_W(
            "the checkpoint was written by %d rank(s) x batch %lld x %d accumulation, this run has %d x %lld x %d: "
            "training continues, but not bitwise as an uninterrupted run would",
            a->world_size, (long long)a->batch_per_rank, a->accum_steps, b->world_size, (long long)b->batch_per_rank,
            b->accum_steps);
        n++;
    }
    if (a->seed != b->seed) {
        LS_LOG_W("the checkpoint's seed is %llu, this run's %llu: the sample order differs from the saved run's",
                 (unsigned long long)a->seed, (unsigned long long)b->seed);
        n++;
    }
    /* (a run with nothing to train, --epochs 0, has no schedule to compare) */
    if (b->lr.total_steps > 0 &&
        (a->lr.base_lr != b->lr.base_lr || a->lr.min_lr != b->lr.min_lr || a->lr.warmup_steps != b->lr.warmup_steps ||
         a->lr.total_steps != b->lr.total_steps || a->lr.kind != b->lr.kind)) {
        char d[512] = "";
        if (a->lr.kind != b->lr.kind)
            diff_str(d, sizeof d, "kind %s -> %s", ls_lr_kind_name(a->lr.kind), ls_lr_kind_name(b->lr.kind));
        if (a->lr.base_lr != b->lr.base_lr) diff_str(d, sizeof d, "base %g -> %g", a->lr.base_lr, b->lr.base_lr);
        if (a->lr.min_lr != b->lr.min_lr) diff_str(d, sizeof d, "min %g -> %g", a->lr.min_lr, b->lr.min_lr);
        if (a->lr.warmup_steps != b->lr.warmup_steps)
            diff_str(d, sizeof d, "warmup %lld -> %lld", (long long)a->lr.warmup_steps, (long long)b->lr.warmup_steps);
        if (a->lr.total_steps != b->lr.total_steps)
            diff_str(d, sizeof d, "total steps %lld -> %lld", (long long)a->lr.total_steps,
                     (long long)b->lr.total_steps);
        LS_LOG_W("learning-rate schedule changed since the checkpoint (saved %s base %g min %g warmup %lld total %lld; "
                 "changed: %s); this run's applies",
                 ls_lr_kind_name(a->lr.kind), a->lr.base_lr, a->lr.min_lr, (long long)a->lr.warmup_steps,
                 (long long)a->lr.total_steps, d);
        n++;
    }
    if (a->label_smoothing != b->label_smoothing) {
        LS_LOG_W("label smoothing changed since the checkpoint: saved %g, now %g; this run's applies",
                 a->label_smoothing, b->label_smoothing);
        n++;
    }
    if (a->dropout != b->dropout) {
        LS_LOG_W("dropout changed since the checkpoint: saved %g, now %g; this run's applies", a->dropout, b->dropout);
        n++;
    }
    for (int i = 0; i < a->n_settings; i++)
        for (int k = 0; k < b->n_settings; k++)
            if (strcmp(a->settings[i].name, b->settings[k].name) == 0 &&
                strcmp(a->settings[i].value, b->settings[k].value) != 0) {
                LS_LOG_W("%s changed since the checkpoint: saved %s, now %s; this run's applies", a->settings[i].name,
                         ESC_NAME(a->settings[i].value), b->settings[k].value);
                n++;
            }
    if (a->layers_changed[0]) {
        LS_LOG_W("the model is not the checkpoint's, though its parameters are: %s; this model's apply",
                 a->layers_changed);
        n++;
    }
    const ls_optim_config *x = &a->optim, *y = &b->optim;
    char d[512] = "";
    if (x->kind != y->kind) diff_str(d, sizeof d, "optimizer %s -> %s", kind_name(x->kind), kind_name(y->kind));
    if (x->lr != y->lr) diff_str(d, sizeof d, "lr %g -> %g", x->lr, y->lr);
    if (x->weight_decay != y->weight_decay)
        diff_str(d, sizeof d, "weight decay %g -> %g", x->weight_decay, y->weight_decay);
    if (!x->no_decay_1d != !y->no_decay_1d)
        diff_str(d, sizeof d, "no decay on 1-D %s -> %s", x->no_decay_1d ? "on" : "off", y->no_decay_1d ? "on" : "off");
    if (x->momentum != y->momentum) diff_str(d, sizeof d, "momentum %g -> %g", x->momentum, y->momentum);
    if (x->dampening != y->dampening) diff_str(d, sizeof d, "dampening %g -> %g", x->dampening, y->dampening);
    if (!x->nesterov != !y->nesterov)
        diff_str(d, sizeof d, "nesterov %s -> %s", x->nesterov ? "on" : "off", y->nesterov ? "on" : "off");
    if (x->beta1 != y->beta1) diff_str(d, sizeof d, "beta1 %g -> %g", x->beta1, y->beta1);
    if (x->beta2 != y->beta2) diff_str(d, sizeof d, "beta2 %g -> %g", x->beta2, y->beta2);
    if (x->eps != y->eps) diff_str(d, sizeof d, "eps %g -> %g", x->eps, y->eps);
    if (d[0]) {
        LS_LOG_W("optimizer settings changed since the checkpoint (%s); this run's apply", d);
        n++;
    }
    if (a->has_ema && !b->has_ema) {
        LS_LOG_W("the checkpoint holds an EMA of the weights (decay %g) that this run does not keep", a->ema_decay);
        n++;
    } else if (!a->has_ema && b->has_ema) {
        LS_LOG_W("the checkpoint holds no EMA of the weights: this run's starts from the resumed weights");
        n++;
    } else if (a->has_ema && (a->ema_decay != b->ema_decay || !a->ema_warmup != !b->ema_warmup)) {
        /* the warmup named on both sides where it changed (it said "with warmup, now 0.9" of a run
         * that turned it off, as if only the decay had changed) */
        const char *wa = a->ema_warmup ? " with warmup" : !b->ema_warmup ? "" : " without warmup";
        const char *wb = b->ema_warmup ? " with warmup" : !a->ema_warmup ? "" : " without warmup";
        LS_LOG_W("EMA settings changed since the checkpoint (saved decay %g%s, now %g%s); this run's apply",
                 a->ema_decay, wa, b->ema_decay, wb);
        n++;
    }
    return n;
}

void ls_ckpt_resume_position(const ls_ckpt_state *st, int64_t global_batch, int64_t steps_per_epoch, int64_t *epoch,
                             int64_t *step_in_epoch, int *exact) {
    const ls_ckpt_state none = {0};
    if (!st) st = &none; /* the start */
    int64_t e = st->epoch, s = st->epoch_samples, j = 0;
    int ex = 1;
    if (global_batch > 0) {
        j = s / global_batch + (s % global_batch != 0);
        ex = s % global_batch == 0;
    }
    if (steps_per_epoch > 0 && j >= steps_per_epoch) {
        e++;
        j = 0;
    }
    if (epoch) *epoch = e;
    if (step_in_epoch) *step_in_epoch = j;
    if (exact) *exact = ex;
}

/* ---------------------------------------------------------------- save / load */

static const char *slot_name(ls_optim_kind k, int slot) {
    return slot == 0 ? (k == LS_OPTIM_ADAMW ? "exp_avg" : "momentum") : "exp_avg_sq";
}

/* The optimizer's state tensors with their checkpoint names (name storage malloc'd in *names).
 * all 0: the states this rank holds, owner -1. all 1 (a sharded optimizer over the communicator's
 * ranks): every parameter's, each with the rank that keeps it (owner); one another rank keeps is
 * its dtype and shape only (t points into desc, data NULL). The same list, in the same order, on
 * every rank. */
typedef struct opt_list {
    int n;
    ls_tensor **t;
    ls_tensor *desc;
    int *owner;
    char **names;
} opt_list;

static void opt_list_free(opt_list *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->t);
    free(l->desc);
    free(l->owner);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static ls_status opt_list_make(ls_module *model, ls_optimizer *opt, ls_optim_kind kind, int all, opt_list *l) {
    memset(l, 0, sizeof *l);
    int np = ls_module_num_params(model), slots = ls_optimizer_num_state_slots(opt);
    if (!opt) return LS_OK;
    size_t cap = (size_t)np * 2 + 1;
    l->t = calloc(cap, sizeof *l->t);
    l->desc = calloc(cap, sizeof *l->desc);
    l->owner = calloc(cap, sizeof *l->owner);
    l->names = calloc(cap, sizeof *l->names);
    if (!l->t || !l->desc || !l->owner || !l->names) {
        opt_list_free(l);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the optimizer state list");
    }
    /* every tensor the optimizer steps is one of the model's: its states are named after it */
    int *map;
    ls_status ms = opt_index_map(model, opt, &map);
    if (ms != LS_OK) {
        opt_list_free(l);
        return ms;
    }
    /* in the model's order, each under its parameter's name; a parameter the optimizer leaves out
     * (frozen) has none */
    for (int i = 0; i < np; i++) {
        const int k = map[i];
        if (k < 0) continue;
        for (int slot = 0; slot < 2; slot++) {
            ls_tensor *t = ls_optimizer_state(opt, k, slot);
            if (all ? slot >= slots : !t) continue;
            if (!t) {
                ls_tensor *p = ls_optimizer_param(opt, k, NULL);
                l->desc[l->n] = ls_tensor_view(NULL, p->dtype, p->device, p->ndim, p->shape);
                t = &l->desc[l->n];
            }
            const char *pn = ls_module_param_name(model, i);
            size_t len = strlen(pn) + 16;
            char *nm = malloc(len);
            if (!nm) {
                free(map);
                opt_list_free(l);
                return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the optimizer state list");
            }
            snprintf(nm, len, "%s.%s", pn, slot_name(kind, slot));
            l->t[l->n] = t;
            l->owner[l->n] = all ? ls_optimizer_owner(opt, k) : -1;
            l->names[l->n] = nm;
            l->n++;
        }
    }
    free(map);
    return LS_OK;
}

static ls_status write_text(const char *dir, const char *file, const char *text, ckpt_file *rec) {
    char p[LS_CKPT_PATH_MAX + 80];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return write_file_atomic(p, text, strlen(text), 0, rec);
}

/* The checkpoint directories (device, inode) whose checkpoints of later steps, an earlier run's,
 * this process has warned of: once a run (a process), not at every save (20 times in a run of 20
 * saves). A process-wide record, as the preemption flags are: saves reach it from any thread (an
 * asynchronous saver's writer); past its size every save warns again, as before. */
static pthread_mutex_t g_newer_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    dev_t dev;
    ino_t ino;
} g_newer_warned[64];
static int g_newer_n;

/* 1 the first time for dir in this process (recorded), 0 after. */
static int first_newer_warning(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return 1;
    int first = 1;
    pthread_mutex_lock(&g_newer_mu);
    for (int i = 0; i < g_newer_n && first; i++)
        first = !(g_newer_warned[i].dev == st.st_dev && g_newer_warned[i].ino == st.st_ino);
    if (first && g_newer_n < (int)(sizeof g_newer_warned / sizeof g_newer_warned[0])) {
        g_newer_warned[g_newer_n].dev = st.st_dev;
        g_newer_warned[g_newer_n].ino = st.st_ino;
        g_newer_n++;
    }
    pthread_mutex_unlock(&g_newer_mu);
    return first;
}

/* --keep-last's pruning after the save of step just_written; checkpoints of later steps, left by
 * an earlier run, are kept and said (once a process: first_newer_warning). */
static void prune(const char *dir, int keep_last, int64_t just_written) {
    step_dir *v;
    int n;
    if (list_steps(dir, &v, &n, 0) != LS_OK) {
        LS_LOG_W("--keep-last: %s", ls_last_error());
        return;
    }
    char p[LS_CKPT_PATH_MAX + 80];
    int kept = 0, newer = 0, first = -1;
    for (int i = 0; i < n; i++) {
        /* newer than this run's, left by an earlier one: kept, and not counted among the K (it took
         * the place of one of this run's, which were removed for it) */
        if (v[i].step > just_written) {
            if (first < 0 || v[i].step > v[first].step) first = i;
            newer++;
            continue;
        }
        if (v[i].step == just_written || (keep_last <= 0) || kept < keep_last) {
            kept++;
            continue;
        }
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        LS_LOG_I("--keep-last %d: removing '%s'", keep_last, p);
        /* renamed first: a removal cut short leaves debris that the next save clears, not a
         * step-S that verify calls damaged and a resume skips with a warning */
        char gone[sizeof p + 16];
        snprintf(gone, sizeof gone, "%s.prune.tmp", p);
        remove_tree(rename(p, gone) == 0 ? gone : p);
    }
    if (newer && first_newer_warning(dir)) {
        const char *it = newer > 1 ? "them" : "it";
        char more[64] = "";
        if (newer > 1) snprintf(more, sizeof more, " and %d more checkpoints", newer - 1);
        LS_LOG_W("'%s/%s'%s %s newer than the checkpoint just written (step %lld): an earlier run saved %s into "
                 "'%s'. --resume auto would pick '%s/%s' over this run's checkpoints, and --keep-last neither counts "
                 "nor removes %s: remove %s if this run replaces that one, or give this run a directory of its own "
                 "(said once: this run's later saves keep %s too)",
                 dir, v[first].name, more, newer > 1 ? "are" : "is", (long long)just_written, it, dir, dir,
                 v[first].name, it, it, it);
    }
    free(v);
}

/* The EMA's averages have the model's tensors' dtypes and shapes (parameters, then buffers). */
static ls_status ema_of_model(ls_module *model, ls_ema *ema) {
    int np = ls_module_num_params(model), nb = ls_cnn_num_buffers(model);
    if (ls_ema_num_tensors(ema) != np + nb)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the EMA holds %d tensors but the model has %d parameters and %d buffers: not an EMA of this "
                        "model",
                        ls_ema_num_tensors(ema), np, nb);
    for (int i = 0; i < np + nb; i++) {
        char bname[LS_CKPT_BUFFER_NAME], x[96], y[96];
        ls_tensor *t = i < np ? ls_module_param(model, i) : ls_cnn_buffer(model, i - np, bname, sizeof bname);
        ls_tensor *e = ls_ema_tensor(ema, i);
        if (e->dtype != t->dtype || !ls_tensor_same_shape(e, t))
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the EMA's '%s' is %s but the model's is %s: not an EMA of this model",
                            i < np ? ls_module_param_name(model, i) : bname, ls_tensor_describe(e, x, sizeof x),
                            ls_tensor_describe(t, y, sizeof y));
    }
    return LS_OK;
}

/* A save on rank 0: its directory and files, the tensors they are written from, and what the
 * manifest will list. ls_ckpt_save_ema points ts and ema_ts at the model's and the EMA's own
 * tensors and writes optimizer.safetensors itself (optim_file); ls_ckpt_save_async points them, and
 * opt_ts, at its host snapshot, which its writer thread writes from. */
typedef struct save_job {
    char dir[LS_CKPT_PATH_MAX], final[LS_CKPT_PATH_MAX], tmpdir[LS_CKPT_PATH_MAX + 16], stepbuf[32];
    int made; /* tmpdir created (a failure removes it) */
    int keep_last;
    int64_t step;
    ls_optim_kind kind;
    ls_allocator *alloc; /* the device's: the staging of device tensors */
    int np, nb;
    const char **names; /* copies (pnames, bnames): the model may go before the writer is done */
    char **pnames;
    const ls_tensor **ts;     /* the model's parameters, then its buffers */
    const ls_tensor **ema_ts; /* the EMA's averages, named as the model's tensors; NULL: no EMA */
    char (*bnames)[LS_CKPT_BUFFER_NAME];
    char *state_text; /* state.json */
    opt_list ol;      /* an asynchronous save's optimizer states: names, and opt_ts their snapshots */
    const ls_tensor **opt_ts;
    ls_tensor *views; /* an asynchronous save's snapshot tensors */
    ckpt_manifest m;
} save_job;

/* failed: the partial step-S.tmp is removed. */
static void save_job_free(save_job *j, int failed) {
    if (failed && j->made && path_exists(j->tmpdir)) remove_tree(j->tmpdir);
    j->made = 0;
    for (int i = 0; j->pnames && i < j->np; i++) free(j->pnames[i]);
    free(j->pnames);
    j->pnames = NULL;
    free(j->names);
    free(j->ts);
    free(j->ema_ts);
    free(j->bnames);
    free(j->state_text);
    free(j->opt_ts);
    free(j->views);
    opt_list_free(&j->ol);
    j->names = NULL;
    j->ts = j->ema_ts = j->opt_ts = NULL;
    j->bnames = NULL;
    j->state_text = NULL;
    j->views = NULL;
}

/* Everything of a save that touches no file: the paths, the tensors and their names, the EMA
 * checked against the model, state.json's text (with the optimizer's step count and the EMA's
 * figures). */
static ls_status save_prepare(save_job *j, ls_ctx *ctx, const char *dir, int keep_last, ls_module *model,
                              ls_optimizer *opt, ls_ema *ema, const ls_ckpt_state *state) {
    memset(j, 0, sizeof *j);
    if (!dir || !dir[0]) return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    dir = NORM_PATH(dir);
    if (state->step < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint step %lld is negative", (long long)state->step);
    if ((size_t)snprintf(j->final, sizeof j->final, "%s/step-%08lld", dir, (long long)state->step) >= sizeof j->final ||
        strlen(j->final) + 10 >= LS_CKPT_PATH_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint directory '%s' is too long", dir);
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    snprintf(j->tmpdir, sizeof j->tmpdir, "%s.tmp", j->final);
    snprintf(j->stepbuf, sizeof j->stepbuf, "%lld", (long long)state->step);
    j->keep_last = keep_last;
    j->step = state->step;
    j->kind = state->optim.kind;
    j->alloc = ctx->alloc;
    j->m.step = state->step;
    j->m.n = N_REQUIRED;
    int np = j->np = ls_module_num_params(model), nb = j->nb = ls_cnn_num_buffers(model);
    j->names = calloc((size_t)(np + nb) + 1, sizeof *j->names);
    j->ts = calloc((size_t)(np + nb) + 1, sizeof *j->ts);
    j->bnames = calloc((size_t)nb + 1, sizeof *j->bnames);
    j->pnames = calloc((size_t)np + 1, sizeof *j->pnames);
    if (!j->names || !j->ts || !j->bnames || !j->pnames)
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the parameter list");
    for (int i = 0; i < np; i++) {
        if (!(j->pnames[i] = strdup(ls_module_param_name(model, i))))
            return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the parameter list");
        j->names[i] = j->pnames[i];
        j->ts[i] = ls_module_param(model, i);
    }
    for (int i = 0; i < nb; i++) { /* buffers (BatchNorm's running statistics) after the parameters */
        j->ts[np + i] = ls_cnn_buffer(model, i, j->bnames[i], LS_CKPT_BUFFER_NAME);
        j->names[np + i] = j->bnames[i];
    }
    ls_ckpt_state st = *state;
    st.has_ema = ema != NULL;
    if (ema) { /* the averages, named as the model's tensors */
        LS_CHECK(ema_of_model(model, ema));
        if (!(j->ema_ts = calloc((size_t)(np + nb) + 1, sizeof *j->ema_ts)))
            return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the EMA's tensor list");
        for (int i = 0; i < np + nb; i++) j->ema_ts[i] = ls_ema_tensor(ema, i);
        st.ema_decay = ls_ema_decay(ema);
        st.ema_warmup = ls_ema_warmup(ema);
        st.ema_updates = ls_ema_num_updates(ema);
    }
    if (opt) LS_CHECK(ls_optimizer_get_num_steps(opt, &st.optim_steps));
    LS_CHECK(state_to_json(&st, model, opt, &j->state_text));
    if (strlen(j->state_text) > CKPT_STATE_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_ckpt_save: state.json would be %zu bytes, more than a load reads (%zu): the model has %d "
                        "parameter tensors",
                        strlen(j->state_text), CKPT_STATE_MAX, np);
    return LS_OK;
}

/* The save's first files: DIR/step-S.tmp created, model.safetensors written into it. */
static ls_status save_open(save_job *j) {
    LS_CHECK(make_dirs(j->dir));
    remove_stale_tmp(j->dir);
    if (mkdir(j->tmpdir, 0755) != 0) return ls_error(LS_ERR_IO, "'%s': cannot create: %s", j->tmpdir, strerror(errno));
    j->made = 1;
    char p[LS_CKPT_PATH_MAX + 80];
    snprintf(p, sizeof p, "%s/%s", j->tmpdir, ckpt_required[F_MODEL]);
    const char *mmeta[] = {"format", "pt", "lockstep", "model", "step", j->stepbuf, NULL};
    return st_write(p, j->np + j->nb, j->names, j->ts, mmeta, j->alloc, 1, &j->m.files[F_MODEL]);
}

/* optimizer.safetensors' path and metadata. */
static void optim_file_names(const save_job *j, char *path, size_t len, const char *meta[9]) {
    const char *m[] = {"format",           "pt",   "lockstep", "optimizer", "optimizer",
                       kind_name(j->kind), "step", j->stepbuf, NULL};
    memcpy(meta, m, sizeof m);
    snprintf(path, len, "%s/%s", j->tmpdir, ckpt_required[F_OPTIM]);
}

/* The rest, after optimizer.safetensors: ema.safetensors, state.json, the manifest, the rename of
 * step-S.tmp to step-S, latest, and --keep-last's pruning. */
static ls_status save_close(save_job *j) {
    char old[LS_CKPT_PATH_MAX + 16], latest[LS_CKPT_PATH_MAX + 16], p[LS_CKPT_PATH_MAX + 80];
    snprintf(old, sizeof old, "%s.old.tmp", j->final);
    snprintf(latest, sizeof latest, "%s/latest", j->dir);
    ckpt_manifest *m = &j->m;
    if (j->ema_ts) {
        const char *emeta[] = {"format", "pt", "lockstep", "ema", "step", j->stepbuf, NULL};
        snprintf(p, sizeof p, "%s/%s", j->tmpdir, ckpt_required[F_EMA]);
        LS_CHECK(st_write(p, j->np + j->nb, j->names, j->ema_ts, emeta, j->alloc, 0, &m->files[m->n]));
        m->n++;
    }
    LS_CHECK(write_text(j->tmpdir, ckpt_required[F_STATE], j->state_text, &m->files[F_STATE]));
    crash_point("before-manifest");
    char *mtext = manifest_json(m);
    if (!mtext) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the manifest");
    ls_status s = write_text(j->tmpdir, "manifest.json", mtext, NULL);
    free(mtext);
    LS_CHECK(s);
    crash_point("before-rename");
    int replaced = 0, exchanged = 0;
    if (path_exists(j->final)) {
        LS_LOG_W("replacing the existing checkpoint '%s'", j->final);
        /* one step: step-S is the old checkpoint or the new one at every instant, the other in
         * step-S.tmp (moved aside first, a crash between the renames left neither as step-S) */
        if (renameat2(AT_FDCWD, j->tmpdir, AT_FDCWD, j->final, RENAME_EXCHANGE) == 0) {
            exchanged = 1;
        } else if (errno == EINVAL || errno == ENOSYS) { /* a file system without it: aside, then in */
            if (rename(j->final, old) != 0)
                return ls_error(LS_ERR_IO, "cannot move the existing '%s' aside: %s", j->final, strerror(errno));
            replaced = 1;
        } else {
            return ls_error(LS_ERR_IO, "cannot exchange '%s' with the existing '%s': %s", j->tmpdir, j->final,
                            strerror(errno));
        }
    }
    if (!exchanged && rename(j->tmpdir, j->final) != 0) {
        s = ls_error(LS_ERR_IO, "cannot rename '%s' to '%s': %s", j->tmpdir, j->final, strerror(errno));
        if (replaced && rename(old, j->final) != 0) LS_LOG_W("could not move '%s' back to '%s'", old, j->final);
        return s;
    }
    j->made = 0;
    LS_CHECK(fsync_dir(j->dir));
    crash_point("before-remove-old");
    if (exchanged) remove_tree(j->tmpdir); /* the old checkpoint, now there */
    if (replaced) remove_tree(old);
    crash_point("before-latest");
    char line[80];
    const char *base = strrchr(j->final, '/');
    snprintf(line, sizeof line, "%.70s\n", base ? base + 1 : j->final);
    if (write_file_atomic(latest, line, strlen(line), 0, NULL) != LS_OK) {
        /* the checkpoint is whole and is what a resume reads; latest is for people and scripts. A
         * full disk here failed a save whose checkpoint was complete (a SIGTERM's run exited 1, not
         * 143, saying nothing of it). latest goes rather than name an older one, maybe pruned. */
        char why[1024];
        snprintf(why, sizeof why, "%s", ls_last_error());
        const int gone = unlink(latest) == 0;
        LS_LOG_W("the checkpoint '%s' is complete, but '%s' could not be updated to name it%s: %s", j->final, latest,
                 gone ? " (removed rather than left naming an older one)" : "", why);
    }
    prune(j->dir, j->keep_last, j->step);
    return LS_OK;
}

/* What rank 0 tells the others after a save or a load (exchanged as bytes). */
typedef struct ckpt_result {
    int32_t status;
    int32_t found;
    int32_t fresh_momentum; /* a load: SGD's momentum, which the checkpoint lacks, starts afresh */
    int64_t text_len;
    double seconds; /* an asynchronous save's: the writer's time */
    char path[LS_CKPT_PATH_MAX];
    char msg[1024];
} ckpt_result;

static int comm_world(ls_comm *comm) { return comm ? ls_comm_world(comm) : 1; }
static int comm_rank(ls_comm *comm) { return comm ? ls_comm_rank(comm) : 0; }

/* Broadcast rank 0's status and message; other ranks adopt them. */
static ls_status share_result(ls_comm *comm, ckpt_result *r, ls_status s) {
    if (comm_rank(comm) == 0) {
        r->status = (int32_t)s;
        if (s != LS_OK) snprintf(r->msg, sizeof r->msg, "%s", ls_last_error());
    }
    LS_CHECK(ls_comm_broadcast_host(comm, r, (int64_t)sizeof *r, LS_U8, 0));
    r->path[sizeof r->path - 1] = r->msg[sizeof r->msg - 1] = '\0';
    if (comm_rank(comm) != 0 && r->status != LS_OK) return ls_error((ls_status)r->status, "%s (on rank 0)", r->msg);
    return (ls_status)r->status;
}

/* What parse_state_obj will demand of the state when it is loaded: a checkpoint that its own load
 * refuses is lost work, found out only at the resume (and --resume auto skips it as damaged, back
 * to an older one). The fields' ranges are named here; the rest (a NaN loss scale, a key twice, an
 * RNG stream's avail past 4) by the parse of the state's own text. opt: the optimizer saved, whose
 * kind state.optim must name (a zeroed state said sgd beside AdamW's moments: a checkpoint whose
 * resume refused it, and lockstep-ckpt verify passed). */
static ls_status check_state(const char *fn, const ls_ckpt_state *st, const ls_optimizer *opt) {
    const struct {
        const char *name;
        int64_t v, lo;
    } f[] = {{"step", st->step, 0},
             {"epoch", st->epoch, 0},
             {"epoch_samples", st->epoch_samples, 0},
             {"steps_per_epoch", st->steps_per_epoch, 0},
             {"world_size", st->world_size, 1},
             {"batch_per_rank", st->batch_per_rank, 1},
             {"accum_steps", st->accum_steps, 1},
             {"lr.warmup_steps", st->lr.warmup_steps, 0},
             {"lr.total_steps", st->lr.total_steps, 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || (double)f[i].v > MAX_EXACT_INT)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "%s: state.%s = %lld is outside [%lld, 2^53] (a load would refuse it)", fn, f[i].name,
                            (long long)f[i].v, (long long)f[i].lo);
    if (!isfinite(st->lr.base_lr) || !isfinite(st->lr.min_lr))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: state.lr's base_lr or min_lr is not finite", fn);
    if (!ls_lr_kind_name(st->lr.kind))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: state.lr's kind %d is not a schedule", fn, (int)st->lr.kind);
    if (!(st->label_smoothing >= 0 && st->label_smoothing < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: state.label_smoothing %g is not in [0, 1)", fn,
                        st->label_smoothing);
    if (!(st->dropout >= 0 && st->dropout < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: state.dropout %g is not in [0, 1)", fn, st->dropout);
    if (st->n_settings < 0 || st->n_settings > LS_CKPT_MAX_SETTINGS)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: state.n_settings %d is outside [0, %d]", fn, st->n_settings,
                        LS_CKPT_MAX_SETTINGS);
    const ls_optim_kind kind = ls_optimizer_config(opt).kind;
    if (st->optim.kind != kind)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: state.optim.kind is %d (%s) but the optimizer is %s: fill state.optim from "
                        "ls_optimizer_config",
                        fn, (int)st->optim.kind,
                        st->optim.kind == LS_OPTIM_SGD     ? "sgd"
                        : st->optim.kind == LS_OPTIM_ADAMW ? "adamw"
                                                           : "no optimizer",
                        kind_name(kind));
    char *text = NULL;
    LS_CHECK(ls_ckpt_state_to_json(st, NULL, &text));
    ls_ckpt_state back;
    ls_status s = ls_ckpt_state_parse(text, strlen(text), "state.json", NULL, &back);
    free(text);
    if (s == LS_OK) return LS_OK;
    char why[512]; /* ls_error writes where ls_last_error points */
    snprintf(why, sizeof why, "%s", ls_last_error());
    return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the state would not load back: %s", fn, why);
}

/* A sharded optimizer (ls_optimizer_shard) over several ranks: its state is split between them. */
static int sharded(ls_comm *comm, const ls_optimizer *opt) {
    return opt && comm_world(comm) > 1 && ls_optimizer_owner(opt, 0) >= 0;
}

/* The bytes of the buffer through which the states other ranks keep travel (0: none needed here):
 * on rank 0 each comes from (a save) or goes to (a load) its owner, one tensor at a time; a rank
 * that is neither end receives it too (a broadcast). */
static size_t transit_bytes(const opt_list *ol, int rank) {
    size_t most = 0;
    for (int k = 0; k < ol->n; k++)
        if (ol->owner[k] > 0 && ol->owner[k] != rank && ls_tensor_nbytes(ol->t[k]) > most)
            most = ls_tensor_nbytes(ol->t[k]);
    return most;
}

/* Rank 0 gets the tensors of ol in order, and put(arg, k, tensor) takes each (rank 0 only): its
 * own from where they are; with shard (collective), a state another rank keeps from its owner
 * through the transit buffer, so rank 0's device holds no more of the others' state than its
 * largest tensor (ZeroRedundancyOptimizer's consolidate_state_dict gathers all of it on one rank).
 * s: rank 0's status so far (the ranks agree on it before any state travels). An error of put:
 * the others still send theirs, and it is returned after. */
typedef ls_status (*state_sink)(void *arg, int k, const ls_tensor *t);
static ls_status states_to_rank0(ls_comm *comm, ls_ctx *ctx, const opt_list *ol, int shard, ls_status s, state_sink put,
                                 void *arg) {
    int rank = comm_rank(comm);
    size_t most = transit_bytes(ol, rank);
    void *scratch = NULL;
    ls_status err = LS_OK;
    if (s == LS_OK && most) s = ls_alloc(ctx->alloc, most, "optimizer state in transit (checkpoint)", &scratch);
    if (shard) s = ls_comm_agree(comm, s);
    for (int k = 0; s == LS_OK && k < ol->n; k++) {
        ls_tensor *t = ol->t[k], from = *t;
        if (ol->owner[k] > 0) {
            s = ls_comm_broadcast(comm, rank == ol->owner[k] ? t->data : scratch, ls_tensor_numel(t), t->dtype,
                                  ol->owner[k]);
            if (s != LS_OK) {
                ls_error_context(s, "sending the optimizer state '%s' from rank %d to rank 0", ol->names[k],
                                 ol->owner[k]);
                break;
            }
            from = ls_tensor_view(scratch, t->dtype, ls_allocator_device(ctx->alloc), t->ndim, t->shape);
        }
        if (rank == 0 && err == LS_OK) {
            err = put(arg, k, &from);
            if (err != LS_OK) ls_error_context(err, "optimizer state '%s'", ol->names[k]);
        }
    }
    if (scratch) ls_free(ctx->alloc, scratch);
    return s == LS_OK ? err : s;
}

typedef struct file_sink {
    file_writer *w;
    ls_allocator *alloc;
} file_sink;

static ls_status put_in_file(void *arg, int k, const ls_tensor *t) {
    (void)k;
    file_sink *f = arg;
    return fw_tensor(f->w, f->alloc, t);
}

/* optimizer.safetensors written by rank 0 into its save's directory (j: rank 0's save, unused on
 * the other ranks): the optimizer's state in opt_list's order, each tensor written as it comes
 * (states_to_rank0), so that its host holds no more than the writer's staging buffer. shard:
 * collective. */
static ls_status optim_file(ls_comm *comm, ls_ctx *ctx, ls_module *model, ls_optimizer *opt, ls_optim_kind kind,
                            int shard, save_job *j) {
    int rank = comm_rank(comm);
    file_writer w;
    int open = 0;
    opt_list ol;
    ls_status s = opt_list_make(model, opt, kind, shard, &ol);
    if (s == LS_OK && rank == 0) {
        char p[LS_CKPT_PATH_MAX + 80];
        const char *meta[9];
        unsigned char *hdr;
        size_t hl;
        uint64_t data_len;
        optim_file_names(j, p, sizeof p, meta);
        s = st_header(ol.n, (const char *const *)ol.names, (const ls_tensor *const *)ol.t, meta, &hdr, &hl, &data_len);
        if (s == LS_OK) {
            s = fw_open(&w, p, hl + data_len, 0);
            open = s == LS_OK;
            if (open) fw_stage_for(&w, ol.n, (const ls_tensor *const *)ol.t);
            if (open) s = fw_write(&w, hdr, hl);
            free(hdr);
        }
    }
    file_sink fs = {&w, ctx->alloc};
    s = states_to_rank0(comm, ctx, &ol, shard, s, put_in_file, &fs);
    if (open && s == LS_OK)
        s = fw_commit(&w, &j->m.files[F_OPTIM]);
    else if (open)
        fw_abort(&w);
    if (shard) s = ls_comm_agree(comm, s);
    opt_list_free(&ol);
    return s;
}

/* A sharded optimizer's states from optimizer.safetensors' bytes on rank 0 (checked there by
 * load_tensors, which read rank 0's own) to their owners. Collective: one tensor at a time through
 * the transit buffer, as optim_file. */
static ls_status states_from_file(ls_comm *comm, ls_ctx *ctx, ls_module *model, ls_optimizer *opt, ls_optim_kind kind,
                                  const unsigned char *bytes, size_t len, const char *ckpt_path, int fresh) {
    int rank = comm_rank(comm);
    char p[LS_CKPT_PATH_MAX + 80];
    snprintf(p, sizeof p, "%s/%s", ckpt_path, ckpt_required[F_OPTIM]);
    ls_safetensors *f = NULL;
    void *scratch = NULL;
    opt_list ol;
    ls_status s = opt_list_make(model, opt, kind, 1, &ol), err = LS_OK;
    size_t most = s == LS_OK ? transit_bytes(&ol, rank) : 0;
    if (s == LS_OK && rank == 0) s = ls_safetensors_open_memory(bytes, len, p, &f);
    if (s == LS_OK && most) s = ls_alloc(ctx->alloc, most, "optimizer state in transit (checkpoint)", &scratch);
    s = ls_comm_agree(comm, s);
    for (int k = 0; s == LS_OK && k < ol.n; k++) {
        ls_tensor *t = ol.t[k];
        if (ol.owner[k] <= 0) continue;
        if (rank == 0 && err == LS_OK && fresh) { /* not in the file: zeros (restarted after) */
            err = ls_allocator_set_zero(ctx->alloc, scratch, ls_tensor_nbytes(t));
        } else if (rank == 0 && err == LS_OK) { /* an error here: the broadcasts go on, every rank fails after */
            ls_tensor to = ls_tensor_view(scratch, t->dtype, ls_allocator_device(ctx->alloc), t->ndim, t->shape);
            err = ls_safetensors_read(f, ol.names[k], ctx->alloc, &to);
        }
        s = ls_comm_broadcast(comm, rank == ol.owner[k] ? t->data : scratch, ls_tensor_numel(t), t->dtype, 0);
        if (s != LS_OK)
            ls_error_context(s, "sending the optimizer state '%s' from rank 0 to rank %d", ol.names[k], ol.owner[k]);
    }
    ls_safetensors_close(f);
    if (scratch) ls_free(ctx->alloc, scratch);
    if (s == LS_OK) s = err;
    s = ls_comm_agree(comm, s);
    opt_list_free(&ol);
    return s;
}

ls_status ls_ckpt_save(ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last, ls_module *model, ls_optimizer *opt,
                       const ls_ckpt_state *state, char *path_out, size_t path_len) {
    return ls_ckpt_save_ema(comm, ctx, dir, keep_last, model, opt, NULL, state, path_out, path_len);
}

ls_status ls_ckpt_save_ema(ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last, ls_module *model,
                           ls_optimizer *opt, ls_ema *ema, const ls_ckpt_state *state, char *path_out,
                           size_t path_len) {
    LS_CHECK_ARG(ctx && model && state, "ls_ckpt_save: %s is NULL",
                 !ctx     ? "the context"
                 : !model ? "the model"
                          : "the state");
    /* it wrote an empty optimizer.safetensors beside a state.json naming the optimizer: a
     * checkpoint its own resume refused, with a message about missing momentum */
    LS_CHECK_ARG(opt, "ls_ckpt_save: the optimizer is NULL: a checkpoint holds its state, to resume from (the "
                      "weights alone: ls_safetensors_write)");
    LS_CHECK_ARG(keep_last >= 0, "ls_ckpt_save: keep_last %d is negative (0 keeps every checkpoint)", keep_last);
    /* a path_out too small for the path was filled with its first bytes, the save reported done */
    const int need = snprintf(NULL, 0, "%s/step-%08lld", dir ? dir : "", (long long)state->step);
    ls_status pre = !path_out || !path_len || need < 0 || (size_t)need < path_len
                        ? check_state("ls_ckpt_save", state, opt)
                        : ls_error(LS_ERR_INVALID_ARGUMENT,
                                   "ls_ckpt_save: path_out holds %zu bytes, and the checkpoint's path "
                                   "'%s/step-%08lld' needs %d (LS_CKPT_PATH_MAX always suffices)",
                                   path_len, dir ? dir : "", (long long)state->step, need + 1);
    LS_CHECK(ls_comm_agree(comm, pre)); /* every rank's, one failure stops all */
    ckpt_result r;
    memset(&r, 0, sizeof r);
    const int rank = comm_rank(comm), shard = sharded(comm, opt);
    save_job j;
    memset(&j, 0, sizeof j);
    ls_status s = LS_OK;
    int agreed = 0; /* a failure every rank knows already */
    LS_TL_T0(t0);
    /* rank 0 writes, so its LOCKSTEP_CKPT_CRASH_AT is the one that counts; its error reaches every rank */
    if (rank == 0) {
        s = check_crash_stage();
        if (s == LS_OK) s = save_prepare(&j, ctx, dir, keep_last, model, opt, ema, state);
        if (s == LS_OK) s = save_open(&j);
    }
    if (shard) { /* every rank sends rank 0 the states it keeps */
        s = ls_comm_agree(comm, s);
        if (s == LS_OK) s = optim_file(comm, ctx, model, opt, state->optim.kind, 1, &j);
        agreed = s != LS_OK;
    } else if (rank == 0 && s == LS_OK) {
        s = optim_file(NULL, ctx, model, opt, state->optim.kind, 0, &j);
    }
    if (rank == 0) {
        if (s == LS_OK) s = save_close(&j);
        if (s == LS_OK) snprintf(r.path, sizeof r.path, "%s", j.final);
        save_job_free(&j, s != LS_OK);
    }
    if (comm_world(comm) > 1 && !agreed) s = share_result(comm, &r, s);
    LS_TL_SPAN(t0, "checkpoint save", "io");
    if (s == LS_OK && path_out && path_len) snprintf(path_out, path_len, "%s", r.path);
    return s;
}

/* ---------------------------------------------------------------- asynchronous saves */

struct ls_ckpt_async {
    int pending;     /* every rank: a save was started and not yet waited for */
    int64_t step;    /* its step */
    double snapshot; /* the seconds its ls_ckpt_save_async took */
    /* rank 0 */
    int running; /* the writer thread is to be joined */
    pthread_t tid;
    save_job j; /* the save it writes */
    ls_status status;
    char msg[1024]; /* its result, and the error's message */
    double write_s;
    /* the snapshot: host memory kept from one save to the next */
    ls_allocator *alloc;
    unsigned char *buf;
    size_t cap, used;
    int pinned, mapped; /* mapped: an anonymous mapping of our own (host tensors) */
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

ls_status ls_ckpt_async_create(ls_ckpt_async **out) {
    LS_CHECK_ARG(out, "ls_ckpt_async_create: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? LS_OK : ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for an asynchronous checkpoint saver");
}

/* A tensor's room in the snapshot: 64-byte aligned. */
static size_t snap_bytes(const ls_tensor *t) { return (ls_tensor_nbytes(t) + 63) & ~(size_t)63; }

static void snap_free(ls_ckpt_async *a) {
    if (a->buf && a->mapped)
        munmap(a->buf, a->cap);
    else if (a->buf)
        ls_allocator_host_free(a->alloc, a->buf, a->cap, a->pinned);
    a->buf = NULL;
    a->cap = 0;
    a->mapped = 0;
}

/* Room for bytes in the snapshot: the last save's buffer when it is large enough and from the
 * same allocator (the first copy into new memory pays its page faults; a pinned buffer is costly
 * to make), otherwise a new one: from the device's allocator, pinned, for device tensors; for host
 * tensors an anonymous mapping in transparent huge pages where the kernel gives them on request
 * (docs/performance.md: the first snapshot of a 441 MB checkpoint in less than half the time of
 * 4 KiB pages). */
static ls_status snap_reserve(ls_ckpt_async *a, ls_allocator *alloc, size_t bytes) {
    char b1[32];
    a->used = 0;
    if (a->buf && a->cap >= bytes && a->alloc == alloc) return LS_OK;
    snap_free(a);
    a->alloc = alloc;
    if (ls_allocator_device(alloc).type == LS_DEVICE_CPU) {
        size_t len = bytes ? bytes : 1;
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return ls_error(LS_ERR_OUT_OF_MEMORY,
                            "out of host memory: cannot map %s for an asynchronous checkpoint's snapshot: %s",
                            ls_memory_format(bytes, b1, (int)sizeof b1), strerror(errno));
#ifdef MADV_HUGEPAGE
        madvise(p, len, MADV_HUGEPAGE); /* a hint: where the kernel declines, 4 KiB pages */
#endif
        a->buf = p;
        a->cap = len;
        a->mapped = 1;
        return LS_OK;
    }
    LS_CHECK(
        ls_allocator_host_alloc(alloc, bytes, "an asynchronous checkpoint's snapshot", &a->pinned, (void **)&a->buf));
    a->cap = bytes;
    return LS_OK;
}

/* t copied into the snapshot, view its copy there. */
static ls_status snap_put(ls_ckpt_async *a, const ls_tensor *t, ls_tensor *view) {
    size_t nb = ls_tensor_nbytes(t);
    unsigned char *dst = a->buf + a->used;
    if (a->used + nb > a->cap) return ls_error(LS_ERR_INTERNAL, "the checkpoint's snapshot is too small");
    if (nb && t->device.type == LS_DEVICE_CPU)
        memcpy(dst, t->data, nb);
    else if (nb)
        LS_CHECK(ls_allocator_copy(a->alloc, dst, 0, t->data, 1, nb));
    *view = ls_tensor_view(dst, t->dtype, ls_device_cpu(), t->ndim, t->shape);
    a->used += snap_bytes(t);
    return LS_OK;
}

static ls_status put_in_snapshot(void *arg, int k, const ls_tensor *t) {
    ls_ckpt_async *a = arg;
    save_job *j = &a->j;
    ls_tensor *v = &j->views[(j->ema_ts ? 2 : 1) * (j->np + j->nb) + k];
    LS_CHECK(snap_put(a, t, v));
    j->opt_ts[k] = v;
    return LS_OK;
}

/* Rank 0: the model's and the EMA's tensors into the snapshot (sized for them and ol's states),
 * j's tensors pointed at their copies. */
static ls_status snapshot_weights(ls_ckpt_async *a, ls_ctx *ctx, const opt_list *ol) {
    save_job *j = &a->j;
    int n = j->np + j->nb, nv = (j->ema_ts ? 2 : 1) * n + ol->n;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += snap_bytes(j->ts[i]) + (j->ema_ts ? snap_bytes(j->ema_ts[i]) : 0);
    for (int k = 0; k < ol->n; k++) bytes += snap_bytes(ol->t[k]);
    j->views = calloc((size_t)nv + 1, sizeof *j->views);
    j->opt_ts = calloc((size_t)ol->n + 1, sizeof *j->opt_ts);
    if (!j->views || !j->opt_ts) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the snapshot's tensor list");
    LS_CHECK(snap_reserve(a, ctx->alloc, bytes));
    for (int i = 0; i < n; i++) {
        LS_CHECK(snap_put(a, j->ts[i], &j->views[i]));
        j->ts[i] = &j->views[i];
        if (!j->ema_ts) continue;
        LS_CHECK(snap_put(a, j->ema_ts[i], &j->views[n + i]));
        j->ema_ts[i] = &j->views[n + i];
    }
    return LS_OK;
}

/* The writer thread: the files from the snapshot, as ls_ckpt_save_ema writes them. */
static void *writer_main(void *arg) {
    ls_ckpt_async *a = arg;
    save_job *j = &a->j;
    ls_timeline_thread_name("checkpoint writer");
    LS_TL_T0(tl);
    double t0 = now_s();
    ls_status s = save_open(j);
    if (s == LS_OK) {
        char p[LS_CKPT_PATH_MAX + 80];
        const char *meta[9];
        optim_file_names(j, p, sizeof p, meta);
        s = st_write(p, j->ol.n, (const char *const *)j->ol.names, j->opt_ts, meta, NULL, 0, &j->m.files[F_OPTIM]);
    }
    if (s == LS_OK) s = save_close(j);
    a->status = s;
    if (s != LS_OK) snprintf(a->msg, sizeof a->msg, "%s", ls_last_error());
    save_job_free(j, s != LS_OK);
    a->write_s = now_s() - t0;
    LS_TL_SPAN(tl, "checkpoint write", "io");
    return NULL;
}

/* Rank 0: join the writer, its status as this thread's error. */
static ls_status join_writer(ls_ckpt_async *a) {
    if (!a->running) return LS_OK;
    pthread_join(a->tid, NULL);
    a->running = 0;
    return a->status == LS_OK ? LS_OK : ls_error(a->status, "%s", a->msg);
}

ls_status ls_ckpt_async_wait(ls_ckpt_async *a, ls_comm *comm, ls_ckpt_saved *done) {
    if (done) {
        memset(done, 0, sizeof *done);
        done->step = -1;
    }
    LS_CHECK_ARG(a, "ls_ckpt_async_wait: the saver is NULL");
    if (!a->pending) return LS_OK;
    a->pending = 0;
    ckpt_result r;
    memset(&r, 0, sizeof r);
    double t0 = now_s();
    ls_status s = LS_OK;
    if (comm_rank(comm) == 0) {
        s = join_writer(a);
        if (s == LS_OK) snprintf(r.path, sizeof r.path, "%s", a->j.final);
        r.seconds = a->write_s;
    }
    if (comm_world(comm) > 1) s = share_result(comm, &r, s);
    if (s != LS_OK)
        return ls_error_context(s, "the checkpoint of step %lld, written in the background", (long long)a->step);
    if (done) {
        done->step = a->step;
        snprintf(done->path, sizeof done->path, "%s", r.path);
        done->snapshot_s = a->snapshot;
        done->write_s = r.seconds;
        done->wait_s = now_s() - t0;
    }
    return LS_OK;
}

ls_status ls_ckpt_save_async(ls_ckpt_async *a, ls_comm *comm, ls_ctx *ctx, const char *dir, int keep_last,
                             ls_module *model, ls_optimizer *opt, ls_ema *ema, const ls_ckpt_state *state) {
    LS_CHECK_ARG(a && ctx && model && state, "ls_ckpt_save_async: %s is NULL",
                 !a       ? "the saver"
                 : !ctx   ? "the context"
                 : !model ? "the model"
                          : "the state");
    LS_CHECK_ARG(opt, "ls_ckpt_save_async: the optimizer is NULL: a checkpoint holds its state, to resume from (the "
                      "weights alone: ls_safetensors_write)");
    LS_CHECK_ARG(keep_last >= 0, "ls_ckpt_save_async: keep_last %d is negative (0 keeps every checkpoint)", keep_last);
    LS_CHECK(ls_comm_agree(comm, check_state("ls_ckpt_save_async", state, opt)));
    LS_CHECK(ls_ckpt_async_wait(a, comm, NULL));
    double t0 = now_s();
    LS_TL_T0(tl);
    ckpt_result r;
    memset(&r, 0, sizeof r);
    const int rank = comm_rank(comm), shard = sharded(comm, opt);
    opt_list ol;
    memset(&ol, 0, sizeof ol);
    ls_status s = LS_OK;
    int agreed = 0;
    if (rank == 0) {
        s = check_crash_stage();
        if (s == LS_OK) s = save_prepare(&a->j, ctx, dir, keep_last, model, opt, ema, state);
    }
    if ((rank == 0 || shard) && s == LS_OK) s = opt_list_make(model, opt, state->optim.kind, shard, &ol);
    if (rank == 0 && s == LS_OK) s = snapshot_weights(a, ctx, &ol);
    if (shard) { /* every rank sends rank 0 the states it keeps */
        s = states_to_rank0(comm, ctx, &ol, 1, s, put_in_snapshot, a);
        s = ls_comm_agree(comm, s);
        agreed = 1;
    } else if (rank == 0 && s == LS_OK) {
        s = states_to_rank0(NULL, ctx, &ol, 0, s, put_in_snapshot, a);
    }
    LS_TL_SPAN(tl, "checkpoint snapshot", "io");
    if (rank == 0) {
        a->j.ol = ol; /* its names, for the writer */
        memset(&ol, 0, sizeof ol);
        if (s == LS_OK) {
            /* the writer ignores SIGTERM and SIGINT: the training thread's handler takes them */
            sigset_t block, old;
            sigemptyset(&block);
            sigaddset(&block, SIGTERM);
            sigaddset(&block, SIGINT);
            pthread_sigmask(SIG_BLOCK, &block, &old);
            int e = pthread_create(&a->tid, NULL, writer_main, a);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (e != 0) s = ls_error(LS_ERR_IO, "cannot start the checkpoint's writer thread: %s", strerror(e));
            a->running = e == 0;
        }
        if (s != LS_OK) save_job_free(&a->j, 0);
    }
    opt_list_free(&ol);
    if (comm_world(comm) > 1 && !agreed) s = share_result(comm, &r, s);
    if (s != LS_OK) return s;
    a->pending = 1;
    a->step = state->step;
    a->snapshot = now_s() - t0;
    return LS_OK;
}

void ls_ckpt_async_destroy(ls_ckpt_async *a) {
    if (!a) return;
    if (a->running) { /* rank 0, a save not waited for: it is completed */
        if (join_writer(a) != LS_OK)
            LS_LOG_E("the checkpoint of step %lld, written in the background: %s", (long long)a->step, a->msg);
        else
            LS_LOG_I("the checkpoint of step %lld, written in the background: '%s'", (long long)a->step, a->j.final);
    }
    save_job_free(&a->j, 0);
    snap_free(a);
    free(a);
}

/* A safetensors file of the checkpoint for the model's tensors, or (ema) for the averages (the file
 * is there: load_rank0 has checked that state.json's EMA is in the manifest): with write 0 every
 * tensor is only checked (there, of its tensor's dtype and shape, and nothing more in the file),
 * with write 1 (after every file of the load passed its checks) copied. */
static ls_status load_weights(ls_ctx *ctx, const ckpt_bundle *b, int file, ls_module *model, ls_ema *ema, int write) {
    char p[LS_CKPT_PATH_MAX + 80];
    ls_safetensors *f = NULL;
    snprintf(p, sizeof p, "%s/%s", b->path, ckpt_required[file]);
    LS_CHECK(ls_safetensors_open_memory(b->f[file].p, b->f[file].len, p, &f));
    ls_status s = LS_OK;
    int np = ls_module_num_params(model), nb = ls_cnn_num_buffers(model);
    if (ema && !write) s = ema_of_model(model, ema);
    for (int i = 0; i < np + nb && s == LS_OK; i++) {
        char bname[LS_CKPT_BUFFER_NAME];
        ls_tensor *t = i < np ? ls_module_param(model, i) : ls_cnn_buffer(model, i - np, bname, sizeof bname);
        const char *name = i < np ? ls_module_param_name(model, i) : bname;
        if (ema) t = ls_ema_tensor(ema, i);
        s = write ? ls_safetensors_read(f, name, ctx->alloc, t) : st_check(f, name, t, NULL);
    }
    if (s == LS_OK && ls_safetensors_count(f) != np + nb)
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "'%s' holds %d tensors but the model has %d parameters and %d buffers", p,
                     ls_safetensors_count(f), np, nb);
    ls_safetensors_close(f);
    return s;
}

/* Load tensors of a verified checkpoint into rank 0's model, optimizer and EMA; with shard (a
 * sharded optimizer) the states other ranks keep are only checked (states_from_file sends them).
 * Every file is checked before any tensor is written: a checkpoint refused (an optimizer of another
 * kind, a state this run's optimizer needs and the file lacks, a tensor of another shape) leaves
 * the model, the optimizer and the EMA as they were (the model's weights were loaded before the
 * optimizer's file was looked at).
 * *fresh: 1 where this run's SGD keeps a momentum that the checkpoint, saved without, lacks: it
 * starts as a fresh optimizer's (ls_optimizer_restart_momentum, on every rank after the load), as
 * torch.optim.SGD's for a parameter without a buffer. It was an error, where momentum 0.9 to 0
 * only warned. */
static ls_status load_tensors(ls_ctx *ctx, const ckpt_bundle *b, ls_module *model, ls_optimizer *opt, ls_ema *ema,
                              const ls_ckpt_state *st, int shard, int32_t *fresh) {
    char p[LS_CKPT_PATH_MAX + 80];
    ls_safetensors *f = NULL;
    const int with_ema = ema && st->has_ema;
    ls_status s = load_weights(ctx, b, F_MODEL, model, NULL, 0);
    if (s == LS_OK && with_ema) s = load_weights(ctx, b, F_EMA, model, ema, 0);
    if (s != LS_OK) return s;
    if (!opt) {
        s = load_weights(ctx, b, F_MODEL, model, NULL, 1);
        return s == LS_OK && with_ema ? load_weights(ctx, b, F_EMA, model, ema, 1) : s;
    }

    snprintf(p, sizeof p, "%s/%s", b->path, ckpt_required[F_OPTIM]);
    LS_CHECK(ls_safetensors_open_memory(b->f[F_OPTIM].p, b->f[F_OPTIM].len, p, &f));
    int this_adamw = ls_optimizer_num_state_slots(opt) == 2;
    if (this_adamw != (st->optim.kind == LS_OPTIM_ADAMW)) {
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': the checkpoint's optimizer is %s but this run's is %s", p,
                     kind_name(st->optim.kind), this_adamw ? "adamw" : "sgd");
        ls_safetensors_close(f);
        return s;
    }
    opt_list ol;
    s = opt_list_make(model, opt, st->optim.kind, shard, &ol);
    /* check_contents: SGD's file holds a momentum for every parameter or for none */
    *fresh = s == LS_OK && ol.n > 0 && !this_adamw && ls_safetensors_count(f) == 0;
    /* the file holds a state for each parameter its signature does not mark frozen
     * (check_contents): one this run's optimizer steps but the file lacks was frozen when saved */
    int missing = 0, first = -1;
    for (int i = 0; i < ol.n && s == LS_OK && !*fresh; i++)
        if (!ls_safetensors_find(f, ol.names[i]) && missing++ == 0) first = i;
    if (missing) {
        char more[64] = "";
        if (missing > 1) snprintf(more, sizeof more, " (and %d more state tensors)", missing - 1);
        s = ls_error(LS_ERR_INVALID_ARGUMENT,
                     "'%s': no tensor '%s'%s for this run's optimizer: the run that saved it had those parameters "
                     "frozen (left out of its optimizer), and this run trains them; resume with them frozen",
                     p, ol.names[first], more);
    }
    for (int i = 0; i < ol.n && s == LS_OK && !*fresh; i++) s = st_check(f, ol.names[i], ol.t[i], NULL);
    /* every file checked: now the copies */
    if (s == LS_OK) s = load_weights(ctx, b, F_MODEL, model, NULL, 1);
    if (s == LS_OK && with_ema) s = load_weights(ctx, b, F_EMA, model, ema, 1);
    if (s == LS_OK && *fresh)
        LS_LOG_W("'%s' holds no momentum (the checkpoint's sgd kept none): this run's momentum, %g, starts afresh "
                 "as a new optimizer's (each buffer the gradient of its first step)",
                 p, (double)ls_optimizer_config(opt).momentum);
    for (int i = 0; i < ol.n && s == LS_OK && !*fresh; i++)
        if (ol.owner[i] <= 0) s = ls_safetensors_read(f, ol.names[i], ctx->alloc, ol.t[i]);
    if (s == LS_OK && ls_safetensors_count(f) > ol.n)
        LS_LOG_W("'%s': %d optimizer state tensors that this run's optimizer does not keep are ignored", p,
                 ls_safetensors_count(f) - ol.n);
    opt_list_free(&ol);
    ls_safetensors_close(f);
    if (s == LS_OK) ls_optimizer_set_num_steps(opt, st->optim_steps);
    return s;
}

/* A which that is no path but a name for a checkpoint in dir ("latest", a step number, "step-N"):
 * which is a path of its own (from the working directory), so each was "no such checkpoint
 * directory" alone, though dir held what was meant. The error, with what to give (the words fit
 * --resume's too); LS_OK where which exists or is none of those. */
static ls_status which_is_a_name(const char *dir, const char *which) {
    if (path_exists(which) || !dir || !dir[0] || strchr(which, '/')) return LS_OK;
    char p[LS_CKPT_PATH_MAX + 80];
    int64_t step = 0;
    size_t digits = strspn(which, "0123456789");
    if (strcmp(which, "latest") == 0)
        return ls_error(LS_ERR_IO,
                        "'%s': no such checkpoint directory (\"auto\" takes the newest valid checkpoint in '%s')",
                        which, dir);
    if (digits > 0 && digits < 19 && which[digits] == '\0') {
        step = strtoll(which, NULL, 10);
        snprintf(p, sizeof p, "%s/step-%08lld", dir, (long long)step);
    } else if (parse_step_name(which, &step)) {
        snprintf(p, sizeof p, "%s/%s", dir, which);
    } else {
        return LS_OK;
    }
    if (!is_dir(p)) return ls_error(LS_ERR_IO, "'%s': no such checkpoint directory (nor is there a '%s')", which, p);
    return ls_error(LS_ERR_IO, "'%s': no such checkpoint directory: the checkpoint of step %lld in '%s' is '%s'", which,
                    (long long)step, dir, p);
}

/* obytes non-NULL (a sharded optimizer): optimizer.safetensors' bytes are left there, for
 * states_from_file. */
static ls_status load_rank0(ls_ctx *ctx, const char *dir, const char *which, ls_module *model, ls_optimizer *opt,
                            ls_ema *ema, ls_ckpt_state *st, ckpt_result *r, char **text, file_bytes *obytes) {
    ckpt_bundle b;
    int found = 1;
    int is_auto = !which || !which[0] || strcmp(which, "auto") == 0;
    if (is_auto) {
        if (!dir || !dir[0]) return ls_error(LS_ERR_INVALID_ARGUMENT, "resume auto needs a checkpoint directory");
        LS_CHECK(find_and_read(dir, &b, &found, 1));
    } else {
        LS_CHECK(which_is_a_name(dir, which));
        char mp[LS_CKPT_PATH_MAX + 80];
        snprintf(mp, sizeof mp, "%s/manifest.json", which);
        step_dir *v = NULL;
        int n = 0;
        if (is_dir(which) && !path_exists(mp) && list_steps(which, &v, &n, 0) == LS_OK && n > 0) {
            free(v);
            LS_CHECK(find_and_read(which, &b, &found, 1));
        } else {
            free(v);
            LS_CHECK(ckpt_read(which, &b));
        }
    }
    r->found = found;
    if (!found) return LS_OK;
    char sp[LS_CKPT_PATH_MAX + 80];
    snprintf(sp, sizeof sp, "%s/%s", b.path, ckpt_required[F_STATE]);
    /* read with the model now (its signature, its layers): the step and the files were checked
     * (check_contents) */
    ls_status s = ls_ckpt_state_parse((const char *)b.f[F_STATE].p, b.f[F_STATE].len, sp, model, st);
    if (s == LS_OK) s = load_tensors(ctx, &b, model, opt, ema, st, obytes != NULL, &r->fresh_momentum);
    if (s == LS_OK) {
        snprintf(r->path, sizeof r->path, "%s", b.path);
        r->text_len = (int64_t)b.f[F_STATE].len;
        *text = (char *)b.f[F_STATE].p; /* read (malloc'd), not mapped */
        memset(&b.f[F_STATE], 0, sizeof b.f[F_STATE]);
        if (obytes) {
            *obytes = b.f[F_OPTIM];
            memset(&b.f[F_OPTIM], 0, sizeof b.f[F_OPTIM]);
        }
    }
    bundle_free(&b);
    return s;
}

/* Ranks other than 0 receive what rank 0 loaded: the state text, parameters, optimizer state. */
static ls_status load_share(ls_comm *comm, ls_ctx *ctx, ls_module *model, ls_optimizer *opt, ls_ema *ema,
                            ls_ckpt_state *state, const ckpt_result *r, char **text, const file_bytes *obytes) {
    int rank = comm_rank(comm);
    ls_status s = LS_OK;
    if (r->text_len < 0 || r->text_len > (int64_t)1 << 30)
        return ls_error(LS_ERR_INTERNAL, "checkpoint state of %lld bytes from rank 0", (long long)r->text_len);
    if (rank != 0) {
        *text = malloc((size_t)r->text_len + 1);
        if (!*text) s = ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the checkpoint state");
    }
    LS_CHECK(ls_comm_agree(comm, s));
    LS_CHECK(ls_comm_broadcast_host(comm, *text, r->text_len, LS_U8, 0));
    if (rank != 0) s = ls_ckpt_state_parse(*text, (size_t)r->text_len, "state.json (from rank 0)", model, state);
    opt_list ol;
    memset(&ol, 0, sizeof ol);
    int np = ls_module_num_params(model);
    ls_tensor **params = malloc(((size_t)np + 1) * sizeof *params);
    if (s == LS_OK && !params) s = ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the parameter list");
    for (int i = 0; params && i < np; i++) params[i] = ls_module_param(model, i);
    const int shard = sharded(comm, opt);
    if (s == LS_OK && !shard) s = opt_list_make(model, opt, state->optim.kind, 0, &ol);
    s = ls_comm_agree(comm, s);
    /* a sharded optimizer's state is split between the ranks, a whole one is on every rank */
    int32_t v[4] = {shard ? -1 : ol.n, shard ? 1 : -ol.n, ema != NULL, -(ema != NULL)};
    if (s == LS_OK) s = ls_comm_allreduce_host(comm, v, 4, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && v[0] != -v[1])
        s = ls_error(LS_ERR_MISMATCH, "ranks keep different numbers of optimizer state tensors (%d to %d)", (int)v[0],
                     (int)-v[1]);
    if (s == LS_OK && v[2] != -v[3])
        s = ls_error(LS_ERR_MISMATCH, "some ranks load an EMA of the weights from the checkpoint, others do not");
    if (s == LS_OK) s = ls_ddp_broadcast_params(comm, np, params);
    if (s == LS_OK) s = ls_cnn_broadcast_buffers(comm, model);
    if (s == LS_OK && shard)
        s = states_from_file(comm, ctx, model, opt, state->optim.kind, obytes->p, obytes->len, r->path,
                             r->fresh_momentum);
    if (s == LS_OK && ol.n > 0) s = ls_ddp_broadcast_params(comm, ol.n, ol.t);
    if (s == LS_OK && ema && state->has_ema) { /* the averages: the same tensors as the model's */
        int ne = ls_ema_num_tensors(ema);
        ls_tensor **et = malloc(((size_t)ne + 1) * sizeof *et);
        s = et ? LS_OK : ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the EMA's list");
        for (int i = 0; et && i < ne; i++) et[i] = ls_ema_tensor(ema, i);
        if (s == LS_OK) s = ls_ddp_broadcast_params(comm, ne, et);
        free(et);
    }
    if (s == LS_OK && rank != 0 && opt) ls_optimizer_set_num_steps(opt, state->optim_steps);
    free(params);
    opt_list_free(&ol);
    return s;
}

ls_status ls_ckpt_load(ls_comm *comm, ls_ctx *ctx, const char *dir, const char *which, ls_module *model,
                       ls_optimizer *opt, ls_ckpt_state *state, int *found, char *path_out, size_t path_len) {
    return ls_ckpt_load_ema(comm, ctx, dir, which, model, opt, NULL, state, found, path_out, path_len);
}

ls_status ls_ckpt_load_ema(ls_comm *comm, ls_ctx *ctx, const char *dir, const char *which, ls_module *model,
                           ls_optimizer *opt, ls_ema *ema, ls_ckpt_state *state, int *found, char *path_out,
                           size_t path_len) {
    if (!ctx || !model || !state || !found) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_ckpt_load: NULL argument");
    dir = NORM_PATH(dir);
    which = which && strcmp(which, "auto") != 0 ? NORM_PATH(which) : which;
    *found = 0;
    memset(state, 0, sizeof *state);
    ckpt_result r;
    memset(&r, 0, sizeof r);
    char *text = NULL;
    ls_status s = LS_OK;
    /* a sharded optimizer's state: rank 0 reads its own, then sends each other from the file */
    const int shard = sharded(comm, opt);
    file_bytes obytes;
    memset(&obytes, 0, sizeof obytes);
    if (comm_rank(comm) == 0)
        s = load_rank0(ctx, dir, which, model, opt, ema, state, &r, &text, shard ? &obytes : NULL);
    if (comm_world(comm) > 1) {
        s = share_result(comm, &r, s);
        if (s == LS_OK && r.found) s = load_share(comm, ctx, model, opt, ema, state, &r, &text, &obytes);
    }
    fb_free(&obytes);
    free(text);
    if (s != LS_OK || !r.found) return s;
    if (r.fresh_momentum && opt) LS_CHECK(ls_optimizer_restart_momentum(opt));
    if (ema && state->has_ema)
        ls_ema_set_num_updates(ema, state->ema_updates);
    else if (ema) /* none saved: the average starts from the weights loaded */
        LS_CHECK(ls_ema_reset(ema));
    *found = 1;
    if (path_out && path_len) snprintf(path_out, path_len, "%s", r.path);
    return LS_OK;
}

/* One tensor of the file into dst: the same dtype as it is; another float dtype converted on the
 * host (from an aligned copy: the file's data need not be aligned). */
/* The first element of n f32 or f64 values (not necessarily aligned) that is NaN or infinite (or,
 * with nonneg, negative), or -1. */
static int64_t first_nonfinite(ls_dtype dtype, const void *data, int64_t n, int nonneg, double *value) {
    const unsigned char *p = data;
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (dtype == LS_F32) {
            float x;
            memcpy(&x, p + (size_t)i * sizeof x, sizeof x);
            v = x;
        } else {
            memcpy(&v, p + (size_t)i * sizeof v, sizeof v);
        }
        if (!isfinite(v) || (nonneg && v < 0)) {
            *value = v;
            return i;
        }
    }
    return -1;
}

/* Weights to start from must be finite: one NaN spreads to the whole model in a step or two, and
 * the run trained on to its end with a NaN loss (exit 0). values: the tensor in dst's dtype. */
static ls_status check_finite(const char *path, const char *name, ls_dtype dtype, const void *values, int64_t n,
                              int nonneg, const ls_safetensors_info *t) {
    double v = 0;
    int64_t at = first_nonfinite(dtype, values, n, nonneg, &v);
    if (at < 0) return LS_OK;
    if (isfinite(v)) /* negative, where it must not be: a variance (NaN test losses, exit 0) */
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s': tensor '%s' holds %g at element %lld of %lld: a variance cannot be negative", path, name,
                        v, (long long)at, (long long)n);
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "'%s': tensor '%s' holds %s at element %lld of %lld%s: not weights to train from", path, name,
                    isnan(v) ? "NaN"
                    : v > 0  ? "inf"
                             : "-inf",
                    (long long)at, (long long)n, t->dtype != dtype ? " (as the model's dtype)" : "");
}

/* One tensor of the file for dst: with write 0 only checked (present, a float type, dst's shape, every
 * value finite in dst's dtype), with write 1 (after every tensor passed its check) copied into dst.
 * ls_model_load checks them all before it writes one, so that a file it refuses leaves the model as
 * it was (it had filled the parameters before the one in error). */
static ls_status model_tensor(ls_ctx *ctx, const ls_safetensors *f, const char *path, const char *name,
                              const char *what, int nonneg, ls_tensor *dst, int write) {
    char a[160], b[160];
    const ls_safetensors_info *t = ls_safetensors_find(f, name);
    if (!t) return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': no tensor '%s' (the model's %s)", path, name, what);
    const int fl =
        t->has_dtype && (t->dtype == LS_F32 || t->dtype == LS_F64 || t->dtype == LS_F16 || t->dtype == LS_BF16);
    if (!fl)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': tensor '%s' is %s, not a floating-point type", path, name,
                        t->dtype_name);
    int same = t->ndim == dst->ndim;
    for (int k = 0; same && k < t->ndim; k++) same = t->shape[k] == dst->shape[k];
    if (!same)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': tensor '%s' has shape %s but the model's %s is %s", path, name,
                        shape_str(t->ndim, t->shape, a, sizeof a), what, shape_str(dst->ndim, dst->shape, b, sizeof b));
    if (dst->dtype != LS_F32 && dst->dtype != LS_F64)
        return ls_error(LS_ERR_UNSUPPORTED, "'%s': the model's %s is %s, not f32 or f64", path, what,
                        ls_dtype_name(dst->dtype));
    if (t->dtype == dst->dtype)
        return write ? ls_safetensors_read(f, name, ctx->alloc, dst)
                     : check_finite(path, name, dst->dtype, t->data, t->numel, nonneg, t);
    /* the CPU backend's conversion, from an aligned copy of the file's bytes */
    const int64_t n = t->numel;
    void *raw = malloc(t->nbytes ? t->nbytes : 1), *conv = malloc((size_t)n * ls_dtype_size(dst->dtype) + 1);
    ls_status s = raw && conv ? LS_OK : ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to convert '%s'", path, name);
    if (s == LS_OK) {
        memcpy(raw, t->data, t->nbytes);
        s = ls_cpu_convert(n, t->dtype, raw, dst->dtype, conv);
    }
    if (s == LS_OK && !write) s = check_finite(path, name, dst->dtype, conv, n, nonneg, t);
    if (s == LS_OK && write) {
        ls_tensor src = ls_tensor_view(conv, dst->dtype, ls_device_cpu(), dst->ndim, dst->shape);
        s = ls_tensor_copy(ctx->alloc, dst, &src);
    }
    free(raw);
    free(conv);
    return s;
}

/* ---- a file of another model: what each side has that the other lacks ---- */

/* Natural order: runs of digits compared as numbers ('2.weight' before '10.weight'), so that the
 * names of a model and of a file pair up layer by layer. */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            while (*a == '0') a++;
            while (*b == '0') b++;
            size_t la = 0, lb = 0;
            while (isdigit((unsigned char)a[la])) la++;
            while (isdigit((unsigned char)b[lb])) lb++;
            if (la != lb) return la < lb ? -1 : 1;
            int c = strncmp(a, b, la);
            if (c) return c;
            a += la;
            b += lb;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++;
            b++;
        }
    }
    return (unsigned char)*a - (unsigned char)*b;
}

/* Whether a and b are one name but for the numbers in it ('2.weight', '3.weight'). */
static int same_but_indices(const char *a, const char *b) {
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            while (isdigit((unsigned char)*a)) a++;
            while (isdigit((unsigned char)*b)) b++;
        } else if (*a++ != *b++) {
            return 0;
        }
    }
    return !*a && !*b;
}

typedef struct named_shape {
    const char *name;
    int ndim;
    const int64_t *shape;
} named_shape;

static int cmp_named_shape(const void *a, const void *b) {
    return natural_cmp(((const named_shape *)a)->name, ((const named_shape *)b)->name);
}

/* The first LS_MISMATCH_SHOWN of l (n of them) for a message, "'2.weight' [256, 512], '2.bias' [256],
 * ... and 3 more"; each name cut to 48 bytes: a bounded line however many tensors differ. */
#define LS_MISMATCH_SHOWN 3
static const char *some_names(const named_shape *l, int n, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && i < LS_MISMATCH_SHOWN && at < len; i++) {
        char sh[160];
        const size_t nl = strlen(l[i].name);
        at += (size_t)snprintf(buf + at, len - at, "%s'%s%s' %s", i ? ", " : "", ESC_NAMEN(l[i].name, 48),
                               nl > 48 ? "..." : "", shape_str(l[i].ndim, l[i].shape, sh, sizeof sh));
    }
    if (n > LS_MISMATCH_SHOWN && at < len) snprintf(buf + at, len - at, " and %d more", n - LS_MISMATCH_SHOWN);
    return buf;
}

/* The names of f the model lacks (*lacks, *nl: the file's shapes) and the model's that f lacks
 * (*wants, *nw: the model's shapes), each in natural order; *shifted: whether they pair up one to
 * one with the same shapes and names that differ only in their numbers, as where a layer without
 * tensors (a Dropout) was added or removed before them. ours/dst: the model's n names and tensors;
 * sorted: its names sorted. The caller frees both lists (also on failure). */
static ls_status mismatch_lists(const ls_safetensors *f, const char *path, const char **ours, ls_tensor **dst,
                                const char **sorted, int n, named_shape **lacks, int *nl, named_shape **wants, int *nw,
                                int *shifted) {
    *nl = *nw = *shifted = 0;
    *lacks = calloc((size_t)ls_safetensors_count(f) + 1, sizeof **lacks);
    *wants = calloc((size_t)n + 1, sizeof **wants);
    if (!*lacks || !*wants)
        return ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory to compare %d tensor names", path,
                        n + ls_safetensors_count(f));
    for (int j = 0; j < ls_safetensors_count(f); j++) {
        const ls_safetensors_info *t = ls_safetensors_tensor(f, j);
        if (!bsearch(&t->name, sorted, (size_t)n, sizeof *sorted, cmp_str_ptr) &&
            !ends_with(t->name, ".num_batches_tracked"))
            (*lacks)[(*nl)++] = (named_shape){t->name, t->ndim, t->shape};
    }
    for (int i = 0; i < n; i++)
        if (!ls_safetensors_find(f, ours[i]))
            (*wants)[(*nw)++] = (named_shape){ours[i], dst[i] ? dst[i]->ndim : 0, dst[i] ? dst[i]->shape : NULL};
    qsort(*lacks, (size_t)*nl, sizeof **lacks, cmp_named_shape);
    qsort(*wants, (size_t)*nw, sizeof **wants, cmp_named_shape);
    int same = *nl > 0 && *nl == *nw;
    for (int i = 0; same && i < *nl; i++) {
        const named_shape *a = &(*lacks)[i], *b = &(*wants)[i];
        same = a->ndim == b->ndim && same_but_indices(a->name, b->name);
        for (int k = 0; same && k < a->ndim; k++) same = a->shape[k] == b->shape[k];
    }
    *shifted = same;
    return LS_OK;
}

/* The model's tensor name (its what) is not in f: said with what the file holds instead, as
 * load_state_dict lists the unexpected keys beside the missing ones. It said only "no tensor
 * '0.weight'" where the file held 'module.0.weight' (a DDP or torch.compile wrapper's state_dict),
 * or a checkpoint's optimizer state; then only the first name the model lacks, where fashion_resnet
 * with --dropout numbers its classifier one further than without. ours/dst: the model's n names
 * and tensors; sorted: its names, sorted. */
static ls_status missing_tensor(const ls_safetensors *f, const char *path, const char *name, const char *what,
                                const char **ours, ls_tensor **dst, const char **sorted, int n) {
    const char *kind = ls_safetensors_metadata(f, "lockstep");
    if (kind && strcmp(kind, "model") != 0 && strcmp(kind, "ema") != 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s': no tensor '%s' (the model's %s): the file is a checkpoint's %s state (its metadata "
                        "\"lockstep\" is \"%s\"), not weights; a checkpoint's weights are its model.safetensors",
                        path, name, what, ESC_NAMEN(kind, 64), ESC_NAMEN(kind, 64));
    /* the name under a prefix that ends in '.': the shortest such */
    const size_t len = strlen(name);
    const char *under = NULL;
    for (int j = 0; j < ls_safetensors_count(f); j++) {
        const char *fn = ls_safetensors_tensor(f, j)->name;
        size_t fl = strlen(fn);
        if (fl > len + 1 && fn[fl - len - 1] == '.' && strcmp(fn + fl - len, name) == 0 &&
            (!under || fl < strlen(under)))
            under = fn;
    }
    /* a prefix of every name (DDP's, torch.compile's), not a block's own '3.body.' before '1.weight' */
    const size_t pl = under ? strlen(under) - len : 0;
    for (int j = 0; under && j < ls_safetensors_count(f); j++)
        if (strncmp(ls_safetensors_tensor(f, j)->name, under, pl) != 0) under = NULL;
    if (under)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s': no tensor '%s' (the model's %s), but '%s': the file's names are under a prefix "
                        "'%s' (DDP's 'module.', torch.compile's '_orig_mod.'?): save the unwrapped model's "
                        "state_dict, or strip the prefix",
                        path, name, what, ESC_NAME(under), ESC_NAMEN(under, pl));
    named_shape *lacks = NULL, *wants = NULL;
    int nl, nw, shifted;
    ls_status s = mismatch_lists(f, path, ours, dst, sorted, n, &lacks, &nl, &wants, &nw, &shifted);
    if (s == LS_OK && nl == 0)
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "'%s': no tensor '%s' (the model's %s)", path, name, what);
    else if (s == LS_OK) {
        char a[400], b[400];
        s = ls_error(LS_ERR_INVALID_ARGUMENT,
                     "'%s': no tensor '%s' (the model's %s); the file has %d tensor%s the model lacks (%s) and "
                     "lacks %d of the model's (%s): %s",
                     path, name, what, nl, nl == 1 ? "" : "s", some_names(lacks, nl, a, sizeof a), nw,
                     some_names(wants, nw, b, sizeof b),
                     shifted ? "the same shapes under other numbers, as where a layer without weights (a Dropout?) "
                               "was added or removed before them: build the model as the file's was"
                             : "a different architecture, or names of another scheme?");
    }
    free(lacks);
    free(wants);
    return s;
}

static ls_status model_load_rank0(ls_ctx *ctx, const char *path, ls_module *model) {
    /* a directory: a checkpoint's weights are a file in it (it said "not a regular file") */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char m[LS_CKPT_PATH_MAX + 32];
        snprintf(m, sizeof m, "%s/manifest.json", path);
        if (path_exists(m))
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "'%s' is a checkpoint (a directory), not a safetensors file: its weights are "
                            "'%s/model.safetensors'",
                            path, path);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "'%s' is a directory, not a safetensors file (a checkpoint's weights are "
                        "DIR/step-N/model.safetensors)",
                        path);
    }
    ls_safetensors *f = NULL;
    LS_CHECK(ls_safetensors_open(path, &f));
    ls_status s = LS_OK;
    int np = ls_module_num_params(model), nb = ls_cnn_num_buffers(model);
    char what[64];
    const char **ours = calloc((size_t)(np + nb) + 1, sizeof *ours); /* the model's names */
    const char **sorted = calloc((size_t)(np + nb) + 1, sizeof *sorted);
    ls_tensor **dst = calloc((size_t)(np + nb) + 1, sizeof *dst);
    char(*bnames)[LS_CKPT_BUFFER_NAME] = calloc((size_t)nb + 1, sizeof *bnames);
    if (!ours || !sorted || !dst || !bnames)
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "'%s': no memory for %d tensor names", path, np + nb);
    for (int i = 0; i < np && s == LS_OK; i++) {
        ours[i] = ls_module_param_name(model, i);
        dst[i] = ls_module_param(model, i);
    }
    for (int i = 0; i < nb && s == LS_OK; i++) {
        dst[np + i] = ls_cnn_buffer(model, i, bnames[i], sizeof bnames[i]);
        ours[np + i] = bnames[i];
    }
    if (s == LS_OK) {
        memcpy(sorted, ours, (size_t)(np + nb) * sizeof *sorted);
        qsort(sorted, (size_t)(np + nb), sizeof *sorted, cmp_str_ptr);
    }
    for (int i = 0; i < np + nb && s == LS_OK; i++) {
        if (i < np)
            snprintf(what, sizeof what, "parameter %d", i);
        else
            snprintf(what, sizeof what, "buffer %d", i - np);
        if (!ls_safetensors_find(f, ours[i]))
            s = missing_tensor(f, path, ours[i], what, ours, dst, sorted, np + nb);
        else
            s = model_tensor(ctx, f, path, ours[i], what, i >= np && ends_with(ours[i], "running_var"), dst[i], 0);
    }
    /* strict: a tensor of the file that the model lacks is a mismatch (a wrong architecture, or
     * names of another scheme), not something to drop silently */
    if (s == LS_OK) {
        named_shape *lacks = NULL, *wants = NULL;
        int nl, nw, shifted;
        s = mismatch_lists(f, path, ours, dst, sorted, np + nb, &lacks, &nl, &wants, &nw, &shifted);
        if (s == LS_OK && nl > 0) {
            char a[400];
            s = ls_error(LS_ERR_INVALID_ARGUMENT,
                         "'%s': the file has %d tensor%s the model lacks (%s), beside all the model's %d parameters "
                         "and %d buffers: a different architecture?",
                         path, nl, nl == 1 ? "" : "s", some_names(lacks, nl, a, sizeof a), np, nb);
        }
        free(lacks);
        free(wants);
    }
    /* every tensor checked, nothing written yet: now the copies */
    for (int i = 0; i < np + nb && s == LS_OK; i++) {
        snprintf(what, sizeof what, "%s %d", i < np ? "parameter" : "buffer", i < np ? i : i - np);
        s = model_tensor(ctx, f, path, ours[i], what, 0, dst[i], 1);
    }
    free(ours);
    free(sorted);
    free(dst);
    free(bnames);
    ls_safetensors_close(f);
    return s;
}

ls_status ls_model_load(ls_comm *comm, ls_ctx *ctx, const char *path, ls_module *model) {
    if (!ctx || !model || !path)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_model_load: %s is NULL",
                        !ctx     ? "the context"
                        : !model ? "the model"
                                 : "the path");
    if (comm_world(comm) <= 1) return model_load_rank0(ctx, path, model);
    /* every rank's model must be rank 0's, tensor for tensor, before rank 0's weights are sent: a
     * different one would be filled in part, fail on one rank only, or wait for a broadcast that
     * never comes */
    int np = ls_module_num_params(model), nb = ls_cnn_num_buffers(model);
    ls_tensor **all = malloc(((size_t)(np + nb) + 1) * sizeof *all);
    const char **names = malloc(((size_t)(np + nb) + 1) * sizeof *names);
    char(*bnames)[LS_CKPT_BUFFER_NAME] = calloc((size_t)nb + 1, sizeof *bnames);
    ls_status s = all && names && bnames ? LS_OK : ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the tensor list");
    for (int i = 0; s == LS_OK && i < np; i++) {
        all[i] = ls_module_param(model, i);
        names[i] = ls_module_param_name(model, i);
    }
    for (int i = 0; s == LS_OK && i < nb; i++) {
        all[np + i] = ls_cnn_buffer(model, i, bnames[i], sizeof bnames[i]);
        names[np + i] = bnames[i];
    }
    s = ls_comm_agree(comm, s);
    if (s == LS_OK) s = ls_ddp_check_signature(comm, np + nb, all, names);
    if (s == LS_OK) {
        s = comm_rank(comm) == 0 ? model_load_rank0(ctx, path, model) : LS_OK;
        s = ls_comm_agree(comm, s);
    }
    if (s == LS_OK) s = ls_ddp_broadcast_params(comm, np + nb, all);
    free(all);
    free(names);
    free(bnames);
    return s;
}

/* ---------------------------------------------------------------- preemption */

/* Lock-free atomics, not volatile sig_atomic_t: the handler runs on whichever thread the kernel
 * picks (the MPI progress thread, the GPU monitor's), and volatile orders nothing between threads
 * (a data race with the training thread's reads; ThreadSanitizer reported it). */
static atomic_int g_preempt_signal;
/* each kind's first arrival, apart: the last signal alone ("asked twice" when it was this one) let
 * SIGTERM, SIGINT, SIGTERM by turns go on forever, each taken for a first */
static atomic_int g_preempt_seen_term, g_preempt_seen_int;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the preemption flags are set in a signal handler: lock-free atomics");
static struct sigaction g_old_term, g_old_int;
static int g_preempt_installed;
static int g_preempt_held;

static void preempt_handler(int sig) {
    atomic_int *seen = sig == SIGTERM ? &g_preempt_seen_term : &g_preempt_seen_int;
    if (atomic_exchange(seen, 1)) { /* asked twice: stop now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    atomic_store(&g_preempt_signal, sig);
}

static void preempt_clear(void) {
    atomic_store(&g_preempt_signal, 0);
    atomic_store(&g_preempt_seen_term, 0);
    atomic_store(&g_preempt_seen_int, 0);
}

ls_status ls_preempt_install(void) {
    if (g_preempt_installed) return LS_OK;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = preempt_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    preempt_clear(); /* before: one that comes at once counts */
    if (sigaction(SIGTERM, &sa, &g_old_term) != 0 || sigaction(SIGINT, &sa, &g_old_int) != 0)
        return ls_error(LS_ERR_INTERNAL, "cannot install the SIGTERM/SIGINT handlers: %s", strerror(errno));
    g_preempt_installed = 1;
    g_preempt_held = 0;
    return LS_OK;
}

void ls_preempt_hold(void) {
    if (!g_preempt_installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    g_preempt_held = 1;
}

void ls_preempt_uninstall(void) {
    if (!g_preempt_installed) return;
    if (!g_preempt_held) {
        sigaction(SIGTERM, &g_old_term, NULL);
        sigaction(SIGINT, &g_old_int, NULL);
    }
    g_preempt_installed = 0;
    preempt_clear();
}

int ls_preempt_pending(void) { return atomic_load(&g_preempt_signal); }

ls_status ls_preempt_agree(ls_comm *comm, int *signum) {
    int32_t v = (int32_t)atomic_load(&g_preempt_signal);
    if (comm_world(comm) > 1) LS_CHECK(ls_comm_allreduce_host(comm, &v, 1, LS_I32, LS_REDUCE_MAX));
    if (signum) *signum = (int)v;
    return LS_OK;
}
