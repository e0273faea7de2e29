/* fuzz_safetensors.c: libFuzzer target for lockstep's checkpoint readers. The first input byte
 * picks the reader (mod 3): 0 the safetensors reader (then every tensor is read back), 1 the
 * state.json parser (a parsed state must survive a write/parse round trip unchanged), 2 the
 * manifest parser. checkpoint.c is included so its static manifest parser is reachable; the nn,
 * optimizer and communicator functions it calls outside the readers are stubbed below (they abort
 * if reached). Built with clang -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt. */
#include "checkpoint.c"

#include <stdint.h>
#include <stdlib.h>

static void read_all_tensors(const ls_safetensors *f) {
    for (int i = 0; i < ls_safetensors_count(f); i++) {
        const ls_safetensors_info *t = ls_safetensors_tensor(f, i);
        if (ls_safetensors_find(f, t->name) == NULL) abort();
        if (!t->has_dtype || t->ndim > LS_MAX_DIMS || t->nbytes > (1u << 20)) continue;
        void *buf = malloc(t->nbytes + 1);
        if (!buf) continue;
        ls_tensor dst = ls_tensor_view(buf, t->dtype, ls_device_cpu(), t->ndim, t->shape);
        if (ls_safetensors_read(f, t->name, NULL, &dst) != LS_OK || memcmp(buf, t->data, t->nbytes) != 0) abort();
        free(buf);
    }
    (void)ls_safetensors_metadata(f, "format");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        ls_safetensors *f = NULL;
        if (ls_safetensors_open_memory(p, n, "fuzz.safetensors", &f) == LS_OK) read_all_tensors(f);
        ls_safetensors_close(f);
        break;
    }
    case 1: {
        ls_ckpt_state a, b;
        if (ls_ckpt_state_parse((const char *)p, n, "fuzz.json", NULL, &a) != LS_OK) break;
        char *text = NULL;
        if (ls_ckpt_state_to_json(&a, NULL, &text) != LS_OK) abort();
        if (ls_ckpt_state_parse(text, strlen(text), "fuzz.json", NULL, &b) != LS_OK) abort();
        if (memcmp(&a, &b, sizeof a) != 0) abort();
        free(text);
        break;
    }
    default: {
        ckpt_manifest m;
        if (manifest_parse((const char *)p, n, "fuzz.json", &m) == LS_OK) {
            char *text = manifest_json(&m);
            ckpt_manifest m2;
            if (!text || manifest_parse(text, strlen(text), "fuzz.json", &m2) != LS_OK ||
                memcmp(&m, &m2, sizeof m) != 0)
                abort();
            free(text);
        }
        break;
    }
    }
    ls_error_clear();
    return 0;
}

/* ---- stubs: the readers never reach these (the rest in ckpt_stubs.h) ---- */
int ls_module_num_params(const ls_module *m) {
    (void)m;
    abort();
}
ls_tensor *ls_module_param(ls_module *m, int i) {
    (void)m;
    (void)i;
    abort();
}
const char *ls_module_param_name(const ls_module *m, int i) {
    (void)m;
    (void)i;
    abort();
}
int ls_module_layers(const ls_module *m, char (*out)[LS_LAYER_DESC_MAX], int max) {
    (void)m;
    (void)out;
    (void)max;
    abort();
}
#include "ckpt_stubs.h"
