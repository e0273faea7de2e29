/* test_safetensors.c: the safetensors writer produces the exact bytes of the format (checked for a
 * tiny tensor byte for byte), round-trips every lockstep dtype with metadata through memory and a
 * file, and the reader rejects each kind of malformed file with LS_ERR_FORMAT and a message naming
 * the file and, where there is one, the tensor. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "testutil.h"

#define NAME "t.safetensors"

/* A file from a header text and raw data, the header length given explicitly when hl_override >= 0. */
static unsigned char *make(const char *hdr, const void *data, size_t dlen, long long hl_override, size_t *len) {
    size_t hl = strlen(hdr);
    *len = 8 + hl + dlen;
    unsigned char *b = malloc(*len + 1);
    uint64_t v = hl_override >= 0 ? (uint64_t)hl_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    memcpy(b + 8, hdr, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    return b;
}

/* Expect opening hdr+data to fail with LS_ERR_FORMAT and a message holding the file name and needle. */
static void expect_bad(const char *hdr, size_t dlen, long long hl, const char *needle) {
    static const unsigned char zeros[64];
    size_t len;
    unsigned char *b = make(hdr, zeros, dlen, hl, &len);
    ls_safetensors *f = NULL;
    ls_status s = ls_safetensors_open_memory(b, len, NAME, &f);
    if (s != LS_ERR_FORMAT || !strstr(ls_last_error(), needle) || !strstr(ls_last_error(), "'" NAME "'") || f) {
        fprintf(stderr, "header %s: got %s '%s', expected format error with '%s'\n", hdr, ls_status_name(s),
                ls_last_error(), needle);
        ls_test_failures++;
    }
    ls_safetensors_close(f);
    free(b);
}

/* Expect opening the n bytes b to fail with LS_ERR_FORMAT and a message holding needle. */
static void expect_bad_bytes(const unsigned char *b, size_t n, const char *needle) {
    ls_safetensors *f = NULL;
    ls_status s = ls_safetensors_open_memory(b, n, NAME, &f);
    if (s != LS_ERR_FORMAT || !strstr(ls_last_error(), needle) || f) {
        fprintf(stderr, "got %s '%s', expected a format error with '%s'\n", ls_status_name(s), ls_last_error(), needle);
        ls_test_failures++;
    }
    ls_safetensors_close(f);
}

static void test_exact_bytes(void) {
    float w[2] = {1.0f, -2.0f};
    ls_tensor t = ls_tensor_view(w, LS_F32, ls_device_cpu(), 1, (int64_t[]){2});
    const ls_tensor *ts[] = {&t};
    const char *names[] = {"w"};
    void *buf;
    size_t len;
    LS_REQUIRE_OK(ls_safetensors_serialize(1, names, ts, NULL, NULL, &buf, &len));
    /* {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} is 54 bytes, padded with 2 spaces to 56. */
    static const unsigned char want[] = {
        56,  0,   0,   0,   0,   0,   0,   0,   '{', '"', 'w',  '"',  ':',  '{',  '"',  'd',  't',  'y',
        'p', 'e', '"', ':', '"', 'F', '3', '2', '"', ',', '"',  's',  'h',  'a',  'p',  'e',  '"',  ':',
        '[', '2', ']', ',', '"', 'd', 'a', 't', 'a', '_', 'o',  'f',  'f',  's',  'e',  't',  's',  '"',
        ':', '[', '0', ',', '8', ']', '}', '}', ' ', ' ', 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    LS_EXPECT(len == sizeof want);
    LS_EXPECT(len == sizeof want && memcmp(buf, want, len) == 0);
    free(buf);

    /* With metadata, "__metadata__" comes first, as Python's safetensors writes it. */
    const char *meta[] = {"format", "pt", NULL};
    LS_REQUIRE_OK(ls_safetensors_serialize(1, names, ts, meta, NULL, &buf, &len));
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    LS_EXPECT(len == 8 + padded + 8);
    LS_EXPECT(((unsigned char *)buf)[0] == padded && memcmp((char *)buf + 8, hdr, hl) == 0);
    for (size_t i = hl; i < padded; i++) LS_EXPECT(((char *)buf)[8 + i] == ' ');
    free(buf);
}

static void test_round_trip(void) {
    float a[6] = {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.0f};
    double b[4] = {1.0 / 3.0, -2.5, 1e300, 0.0};
    int32_t c[1] = {-123456};
    uint8_t d[3] = {0, 127, 255};
    uint16_t h[2] = {0x3c00, 0xc000}, bf[2] = {0x3f80, 0x4049};
    ls_tensor ts[6] = {ls_tensor_view(a, LS_F32, ls_device_cpu(), 2, (int64_t[]){2, 3}),
                       ls_tensor_view(b, LS_F64, ls_device_cpu(), 1, (int64_t[]){4}),
                       ls_tensor_view(c, LS_I32, ls_device_cpu(), 1, (int64_t[]){1}),
                       ls_tensor_view(d, LS_U8, ls_device_cpu(), 3, (int64_t[]){1, 3, 1}),
                       ls_tensor_view(h, LS_F16, ls_device_cpu(), 1, (int64_t[]){2}),
                       ls_tensor_view(bf, LS_BF16, ls_device_cpu(), 1, (int64_t[]){2})};
    const ls_tensor *tp[6] = {&ts[0], &ts[1], &ts[2], &ts[3], &ts[4], &ts[5]};
    const char *names[6] = {"layer.weight", "b", "c", "d", "half", "brain"};
    const char *dtn[6] = {"F32", "F64", "I32", "U8", "F16", "BF16"};
    const char *meta[] = {"format", "pt", "note", "x\"y\\z", NULL};
    char dir[] = "/tmp/ls_st_XXXXXX", path[128], tmp[140];
    LS_REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    LS_REQUIRE_OK(ls_safetensors_write(path, 6, names, tp, meta, NULL));
    LS_EXPECT(access(tmp, F_OK) != 0); /* renamed into place */
    ls_safetensors *f;
    LS_REQUIRE_OK(ls_safetensors_open(path, &f));
    LS_EXPECT(ls_safetensors_count(f) == 6);
    LS_EXPECT(ls_safetensors_metadata(f, "format") && strcmp(ls_safetensors_metadata(f, "format"), "pt") == 0);
    LS_EXPECT(ls_safetensors_metadata(f, "note") && strcmp(ls_safetensors_metadata(f, "note"), "x\"y\\z") == 0);
    LS_EXPECT(ls_safetensors_metadata(f, "absent") == NULL);
    LS_EXPECT(ls_safetensors_find(f, "absent") == NULL);
    for (int i = 0; i < 6; i++) {
        const ls_safetensors_info *in = ls_safetensors_tensor(f, i);
        LS_EXPECT(strcmp(in->name, names[i]) == 0); /* file order = the order written */
        LS_EXPECT(strcmp(in->dtype_name, dtn[i]) == 0 && in->has_dtype && in->dtype == ts[i].dtype);
        LS_EXPECT(in->ndim == ts[i].ndim && in->nbytes == ls_tensor_nbytes(&ts[i]));
        LS_EXPECT(memcmp(in->data, ts[i].data, in->nbytes) == 0);
        unsigned char out[64];
        ls_tensor o = ls_tensor_view(out, ts[i].dtype, ls_device_cpu(), ts[i].ndim, ts[i].shape);
        LS_REQUIRE_OK(ls_safetensors_read(f, names[i], NULL, &o));
        LS_EXPECT(memcmp(out, ts[i].data, in->nbytes) == 0);
    }
    /* Wrong dtype, wrong shape, missing name: errors naming the file and the tensor. */
    double wrong[6];
    ls_tensor o = ls_tensor_view(wrong, LS_F64, ls_device_cpu(), 2, (int64_t[]){2, 3});
    LS_EXPECT_ERR(ls_safetensors_read(f, "layer.weight", NULL, &o), LS_ERR_INVALID_ARGUMENT,
                  "w.safetensors': tensor 'layer.weight' is F32 but F64 is expected");
    float wf[6];
    o = ls_tensor_view(wf, LS_F32, ls_device_cpu(), 2, (int64_t[]){3, 2});
    LS_EXPECT_ERR(ls_safetensors_read(f, "layer.weight", NULL, &o), LS_ERR_INVALID_ARGUMENT,
                  "tensor 'layer.weight' has shape [2, 3] but [3, 2] is expected");
    LS_EXPECT_ERR(ls_safetensors_read(f, "nope", NULL, &o), LS_ERR_FORMAT, "w.safetensors': no tensor 'nope'");
    ls_safetensors_close(f);
    unlink(path);
    rmdir(dir);

    /* Writer input errors. */
    const char *dup[2] = {"x", "x"};
    void *buf;
    size_t len;
    LS_EXPECT_ERR(ls_safetensors_serialize(2, dup, tp, NULL, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "tensor name 'x' appears twice");
    const char *reserved[1] = {"__metadata__"};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, reserved, tp, NULL, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "empty or reserved name");
    /* What the reader refuses is refused by the writer, named (it wrote such files, which its own
     * reader then refused: "header is not valid UTF-8", "key 'k' appears twice"); nothing written */
    const char *bad_name[1] = {"w\xff"};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, bad_name, tp, NULL, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: the name of tensor 0 is not valid UTF-8 (byte 1 is 0xff)");
    const char *bad_key[] = {"ok", "v", "k\xc3", "v", NULL};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, names, tp, bad_key, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: metadata key 1 is not valid UTF-8 (byte 1 is 0xc3)");
    const char *bad_value[] = {"note", "caf\xe9", NULL}; /* Latin-1, not UTF-8 */
    LS_EXPECT_ERR(ls_safetensors_serialize(1, names, tp, bad_value, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: the value of metadata key 'note' is not valid UTF-8 (byte 3 is 0xe9)");
    const char *twice_key[] = {"format", "pt", "note", "a", "format", "np", NULL};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, names, tp, twice_key, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: metadata key 'format' appears twice");
    /* a header past the format's 100 MB: refused (it was written, and every reader refuses it) */
    char *huge = malloc(100000001);
    LS_REQUIRE(huge != NULL);
    memset(huge, 'a', 100000000);
    huge[100000000] = '\0';
    const char *huge_meta[] = {"note", huge, NULL};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, names, tp, huge_meta, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: the header would take 100000096 bytes, past the format's limit of 100000000 (long "
                  "tensor names or metadata?)");
    free(huge);
    const ls_tensor *none[1] = {NULL};
    LS_EXPECT_ERR(ls_safetensors_serialize(1, names, none, NULL, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: tensor 0 ('layer.weight') is NULL");
    char bad_dir[] = "/tmp/ls_st_XXXXXX", bad_path[128];
    LS_REQUIRE(mkdtemp(bad_dir) != NULL);
    snprintf(bad_path, sizeof bad_path, "%s/bad.safetensors", bad_dir);
    LS_EXPECT_ERR(ls_safetensors_write(bad_path, 1, names, tp, twice_key, NULL), LS_ERR_INVALID_ARGUMENT,
                  "metadata key 'format' appears twice");
    LS_EXPECT(access(bad_path, F_OK) != 0);
    /* a path that names no file: refused before anything is written (the file was written as
     * PATH.tmp, then "cannot rename '.tmp' to ''") */
    snprintf(bad_path, sizeof bad_path, "%s/", bad_dir);
    char want_dir[160];
    snprintf(want_dir, sizeof want_dir, "ls_safetensors_write: the path '%s/' names no file (it ends with '/')",
             bad_dir);
    LS_EXPECT_ERR(ls_safetensors_write(bad_path, 1, names, tp, NULL, NULL), LS_ERR_INVALID_ARGUMENT, want_dir);
    LS_EXPECT_ERR(ls_safetensors_write("", 1, names, tp, NULL, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_safetensors_write: the path '' names no file (it is empty)");
    LS_EXPECT(rmdir(bad_dir) == 0); /* nor a .tmp left */
    /* valid UTF-8 of every length is written and read back */
    const char *utf8_name[1] = {"caf\xc3\xa9.\xe2\x82\xac.\xf0\x9f\x98\x80"};
    const char *utf8_meta[] = {"cl\xc3\xa9", "\xe2\x82\xac", NULL};
    LS_REQUIRE_OK(ls_safetensors_serialize(1, utf8_name, tp, utf8_meta, NULL, &buf, &len));
    LS_REQUIRE_OK(ls_safetensors_open_memory(buf, len, NAME, &f));
    LS_EXPECT(ls_safetensors_find(f, utf8_name[0]) != NULL);
    LS_EXPECT(ls_safetensors_metadata(f, utf8_meta[0]) &&
              strcmp(ls_safetensors_metadata(f, utf8_meta[0]), utf8_meta[1]) == 0);
    ls_safetensors_close(f);
    free(buf);
    /* No tensors at all is a valid file: "{}" padded. */
    LS_REQUIRE_OK(ls_safetensors_serialize(0, NULL, NULL, NULL, NULL, &buf, &len));
    LS_EXPECT(len == 16 && memcmp((char *)buf + 8, "{}      ", 8) == 0);
    LS_REQUIRE_OK(ls_safetensors_open_memory(buf, len, NAME, &f));
    LS_EXPECT(ls_safetensors_count(f) == 0);
    ls_safetensors_close(f);
    free(buf);
}

static void test_bad_files(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    /* The valid baseline opens. */
    static const unsigned char zeros[16];
    size_t len;
    unsigned char *b = make(ok, zeros, 8, -1, &len);
    ls_safetensors *f;
    LS_REQUIRE_OK(ls_safetensors_open_memory(b, len, NAME, &f));
    ls_safetensors_close(f);
    /* Truncations at every length: never accepted, never a crash. */
    for (size_t cut = 0; cut < len; cut++) {
        ls_status s = ls_safetensors_open_memory(b, cut, NAME, &f);
        LS_EXPECT(s == LS_ERR_FORMAT && strstr(ls_last_error(), "'" NAME "'"));
    }
    LS_EXPECT_ERR(ls_safetensors_open_memory(b, 5, NAME, &f), LS_ERR_FORMAT, "5 bytes is too short");
    LS_EXPECT_ERR(ls_safetensors_open_memory(b, len - 3, NAME, &f), LS_ERR_FORMAT,
                  "tensor 'a' (data_offsets [0, 8]) ends beyond the 5 bytes of data (truncated?)");
    free(b);

    expect_bad(ok, 8, 1000, "header length 1000 exceeds the 62 bytes after it (truncated?)");
    expect_bad(ok, 8, 200000000, "exceeds the format's limit");
    expect_bad(" {}", 0, -1, "does not start with '{'");
    expect_bad("{\"a\":", 0, -1, "not valid JSON");
    expect_bad("{} x", 0, -1, "bytes after its JSON object");
    expect_bad("{\"\xff\":1}", 0, -1, "not valid UTF-8");
    expect_bad("[]", 0, -1, "does not start with '{'");
    expect_bad("{\"a\":1}", 0, -1, "tensor 'a' is not a JSON object");
    expect_bad("{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1,
               "tensor 'a' has unknown dtype 'F17'");
    expect_bad("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1, "tensor 'a' has no \"dtype\" string");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1,
               "tensor 'a' has a shape entry that is not an integer from 0 to 2^53");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, -1,
               "not an integer from 0 to 2^53");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1,
               "tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8");
    /* numbers not written as digits alone, which the reference reader refuses (cJSON read 2.0 as 2) */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, -1,
               "header number '2.0' (at header byte 29) is not written as a whole number (safetensors' shapes and "
               "offsets are digits alone: no sign, fraction, exponent or leading zero)");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8, -1, "header number '8e0'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,0.8E1]}}", 8, -1, "header number '0.8E1'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-0,8]}}", 8, -1, "header number '-0'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, -1, "header number '02'");
    /* digits inside strings are not numbers: a name "1.5e3" and a metadata value "2.0" are fine */
    b = make("{\"__metadata__\":{\"v\":\"2.0\"},\"1.5e3\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             zeros, 8, -1, &len);
    LS_EXPECT(ls_safetensors_open_memory(b, len, NAME, &f) == LS_OK && f && ls_safetensors_find(f, "1.5e3"));
    ls_safetensors_close(f);
    f = NULL;
    free(b);
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, -1, "invalid \"data_offsets\"");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, -1, "invalid \"data_offsets\"");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, -1,
               "overflows");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, -1, "tensors 'a' (data_offsets [0, 8]) and 'b' ([4, 12]) overlap");
    /* one that starts where another does: both named (it blamed only the one sorted second, here
     * the one whose offsets are right) */
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               16, -1, "tensors 'b' (data_offsets [0, 4]) and 'w' ([0, 16]) overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1,
               "4 unused bytes before tensor 'a'");
    expect_bad(ok, 12, -1, "4 bytes after the last tensor's data");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, -1, "tensor 'a' appears more than once");
    /* \u0000 in a name or metadata: refused (cJSON ended the string there, "a\u0000x" was read as
     * "a", and beside an "a" "appears more than once"); an escaped backslash before "u0000" is not one */
    expect_bad("{\"a\\u0000x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, -1,
               "header string \"a\\u0000x\" (at header byte 2) holds \\u0000, a NUL character, which a tensor name or "
               "metadata here cannot hold");
    expect_bad("{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0, -1, "header string \"v\\u0000w\" (at header byte 22)");
    expect_bad("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, -1, "header string \"k\\u0000\" (at header byte 18)");
    b = make("{\"__metadata__\":{\"k\":\"\\\\u0000\"}}", NULL, 0, -1, &len);
    LS_EXPECT(ls_safetensors_open_memory(b, len, NAME, &f) == LS_OK);
    LS_EXPECT(f && ls_safetensors_metadata(f, "k") && strcmp(ls_safetensors_metadata(f, "k"), "\\u0000") == 0);
    ls_safetensors_close(f);
    free(b);
    /* a name's control bytes escaped in the message, as the tensors listing shows them (an escape
     * sequence in a name reached the terminal) */
    expect_bad("{\"a\\u001b[2J\\u0007\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1,
               "tensor 'a\\x1b[2J\\x07': shape [3] of F32 needs 12 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F\\n2\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1,
               "tensor 'a' has unknown dtype 'F\\x0a2'");
    expect_bad("{\"__metadata__\":{\"k\\r\":1}}", 0, -1, "\"__metadata__\" value 'k\\x0d' is not a string");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, -1, "\"__metadata__\" value 'k' is not a string");
    expect_bad("{\"__metadata__\":[]}", 0, -1, "\"__metadata__\" is not an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, -1,
               "tensor 'a' has 9 dimensions");

    /* A type lockstep lacks (I64) is read and described, but not loaded into an f32 tensor. */
    int64_t v = 5;
    b = make("{\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", &v, 8, -1, &len);
    LS_REQUIRE_OK(ls_safetensors_open_memory(b, len, NAME, &f));
    const ls_safetensors_info *in = ls_safetensors_find(f, "i");
    LS_EXPECT(in && !in->has_dtype && in->ndim == 0 && in->numel == 1 && in->elem_size == 8);
    float x;
    ls_tensor o = ls_tensor_view(&x, LS_F32, ls_device_cpu(), 1, (int64_t[]){1});
    LS_EXPECT_ERR(ls_safetensors_read(f, "i", NULL, &o), LS_ERR_INVALID_ARGUMENT,
                  "tensor 'i' is I64 but F32 is expected");
    ls_safetensors_close(f);
    free(b);

    /* A missing file names itself. */
    LS_EXPECT_ERR(ls_safetensors_open("/nonexistent/x.safetensors", &f), LS_ERR_IO,
                  "'/nonexistent/x.safetensors': cannot open");
}

/* Many tensors, written in an order that is not the names' order: every one is found by name (the
 * reader bisects a sorted index), names between, before and after them are not, and a repeated
 * name among them is refused by the writer, named. */
static void test_many_names(void) {
    enum { N = 5000 };
    static char names[N][24];
    static const char *np[N];
    static float v[N];
    static ls_tensor ts[N];
    static const ls_tensor *tp[N];
    for (int i = 0; i < N; i++) {
        int k = (int)(((long long)i * 2654435761LL) % N); /* a permutation of 0..N-1 (N and the factor coprime) */
        snprintf(names[i], sizeof names[i], "layer.%05d.w", 2 * k + 1); /* odd numbers: evens are absent */
        np[i] = names[i];
        v[i] = (float)k;
        ts[i] = ls_tensor_view(&v[i], LS_F32, ls_device_cpu(), 1, (int64_t[]){1});
        tp[i] = &ts[i];
    }
    void *buf;
    size_t len;
    LS_REQUIRE_OK(ls_safetensors_serialize(N, np, tp, NULL, NULL, &buf, &len));
    ls_safetensors *f;
    LS_REQUIRE_OK(ls_safetensors_open_memory(buf, len, NAME, &f));
    LS_EXPECT(ls_safetensors_count(f) == N);
    char q[24];
    int found = 0, wrong = 0, stray = 0;
    for (int k = 0; k < N; k++) {
        snprintf(q, sizeof q, "layer.%05d.w", 2 * k + 1);
        const ls_safetensors_info *t = ls_safetensors_find(f, q);
        found += t != NULL;
        wrong += t && (strcmp(t->name, q) != 0 || *(const float *)t->data != (float)k);
        snprintf(q, sizeof q, "layer.%05d.w", 2 * k);
        stray += ls_safetensors_find(f, q) != NULL;
    }
    LS_EXPECT(found == N && wrong == 0 && stray == 0);
    LS_EXPECT(ls_safetensors_find(f, "") == NULL && ls_safetensors_find(f, "a") == NULL &&
              ls_safetensors_find(f, "zzz") == NULL && ls_safetensors_find(f, "layer.00001.w.") == NULL);
    ls_safetensors_close(f);
    free(buf);
    np[N - 1] = np[N / 3];
    LS_EXPECT_ERR(ls_safetensors_serialize(N, np, tp, NULL, NULL, &buf, &len), LS_ERR_INVALID_ARGUMENT,
                  "safetensors: tensor name '");
    char want[64];
    snprintf(want, sizeof want, "'%s' appears twice", names[N / 3]);
    LS_EXPECT(strstr(ls_last_error(), want) != NULL);
}

/* A header of 200000 metadata keys opens at once, and one key given twice among them is named: the
 * keys were checked each against all before it, 26 s for 80000 (this test hits ctest's timeout
 * then, minutes for 200000). */
static void test_many_metadata_keys(void) {
    enum { N = 200000 };
    const size_t cap = (size_t)N * 32 + 256;
    char *hdr = malloc(cap);
    LS_REQUIRE(hdr);
    for (int dup = 0; dup < 2; dup++) {
        size_t n = (size_t)snprintf(hdr, cap, "{\"__metadata__\":{");
        for (int i = 0; i < N; i++) /* in an order that is not the keys' */
            n += (size_t)snprintf(hdr + n, cap - n, "%s\"key.%06d\":\"v%d\"", i ? "," : "",
                                  dup && i == N - 1 ? 4321 : (int)(((long long)i * 2654435761LL) % N), i);
        n += (size_t)snprintf(hdr + n, cap - n, "},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
        LS_REQUIRE(n < cap);
        if (dup) {
            expect_bad(hdr, 4, -1, "\"__metadata__\" key 'key.004321' appears twice");
            continue;
        }
        static const float one = 1.0f;
        size_t len;
        unsigned char *b = make(hdr, &one, 4, -1, &len);
        ls_safetensors *f = NULL;
        LS_EXPECT(ls_safetensors_open_memory(b, len, NAME, &f) == LS_OK);
        LS_EXPECT(f && ls_safetensors_count(f) == 1 && ls_safetensors_metadata(f, "key.000007") &&
                  ls_safetensors_metadata(f, "key.200000") == NULL);
        ls_safetensors_close(f);
        free(b);
    }
    free(hdr);
}

/* A header 123 bytes long starts the file with '{' (0x7b), 256 + 0x80 with 0x80 and 0x02 (as a
 * pickle): valid files, read as such (not taken for text or a pickle). */
static void test_lookalike_lengths(void) {
    static const char *tensor = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const size_t lens[2] = {123, 640};
    for (int k = 0; k < 2; k++) {
        char hdr[700];
        size_t n = strlen(tensor);
        memcpy(hdr, tensor, n);
        memset(hdr + n, ' ', lens[k] - n);
        hdr[lens[k]] = '\0';
        static const float one = 1.0f;
        size_t len;
        unsigned char *b = make(hdr, &one, 4, -1, &len);
        LS_EXPECT(b[0] == (k == 0 ? '{' : 0x80) && (k == 0 || b[1] == 0x02));
        ls_safetensors *f = NULL;
        LS_EXPECT(ls_safetensors_open_memory(b, len, NAME, &f) == LS_OK);
        LS_EXPECT(f && ls_safetensors_count(f) == 1 && ls_safetensors_find(f, "a") != NULL);
        ls_safetensors_close(f);
        free(b);
    }
    /* and the same first bytes with a length past the file: named for what they are */
    expect_bad_bytes((const unsigned char *)"PK\3\4\24\0\0\0\0\0", 10, "is not a safetensors file but a zip archive");
    expect_bad_bytes((const unsigned char *)"\x80\x02}q\0(X\1\0\0\0", 12,
                     "is not a safetensors file but a Python pickle");
    expect_bad_bytes((const unsigned char *)"{\"format\": 1}", 13, "is not a safetensors file but text (JSON?)");
}

int main(void) {
    test_exact_bytes();
    test_round_trip();
    test_bad_files();
    test_many_names();
    test_lookalike_lengths();
    test_many_metadata_keys();
    LS_TEST_END();
}
