/* test_checkpoint.c: activation checkpointing. A deep MLP with dropout, plain and split by
 * checkpoint_sequential into 4 segments, built from the same seeds: the loss and every gradient
 * must be bitwise equal (recomputation replays dropout's masks), parameter names and order are
 * kept, the output stays valid after backward, and the peak of activation memory (forward +
 * backward, measured by the allocator) drops by at least a third. A shallow MLP (fashion_mlp
 * --hidden 512's shape) in 2 segments, the first a single Linear, needs no more than plain: a
 * segment's output and input gradient are its inner layers' buffers, not copies (the copies took
 * one activation more than no checkpointing), and the last segment is not recomputed (its
 * logits were, beside the kept ones); in 1 segment it is plain (bitwise, the same peak). */
#include "../kernels/gradcheck.h"
#include "cnn.h"
#include "nn.h"

#define DEPTH 12
#define WIDTH 256
#define BATCH 256

static ls_module *build(ls_ctx *c) {
    ls_module *layers[3 * DEPTH];
    int k = 0;
    for (int i = 0; i < DEPTH; i++) {
        LS_REQUIRE_OK(
            ls_linear_create(c, LS_F32, WIDTH, i == DEPTH - 1 ? 10 : WIDTH, 1, 100 + (uint64_t)i, "", &layers[k++]));
        if (i == DEPTH - 1) break;
        LS_REQUIRE_OK(ls_activation_create(c, i % 2 ? LS_ACT_GELU : LS_ACT_RELU, &layers[k++]));
        if (i % 3 == 1) LS_REQUIRE_OK(ls_dropout_create(c, 0.2f, 7 + (uint64_t)i, &layers[k++]));
    }
    ls_module *m;
    LS_REQUIRE_OK(ls_sequential_create(c, k, layers, &m));
    return m;
}

/* two training micro-steps (so dropout draws two different masks); returns the peak bytes of
 * activations above the parameters */
static size_t run(ls_ctx *c, ls_module *m, ls_tensor *x, ls_tensor *lab, double *loss_out) {
    ls_xent *loss;
    LS_REQUIRE_OK(ls_xent_create(c, &loss));
    ls_memory_stats st;
    ls_allocator_stats(c->alloc, &st);
    size_t base = st.live_bytes;
    ls_allocator_reset_peak(c->alloc);
    float *logits = NULL;
    for (int step = 0; step < 2; step++) {
        const ls_tensor *y, *dl;
        LS_REQUIRE_OK(ls_module_forward(m, x, &y));
        if (!logits) LS_REQUIRE(logits = malloc(ls_tensor_nbytes(y)));
        memcpy(logits, y->data, ls_tensor_nbytes(y));
        LS_REQUIRE_OK(ls_xent_forward(loss, y, lab, &loss_out[step]));
        LS_REQUIRE_OK(ls_xent_backward(loss, 1.0 / BATCH, &dl));
        LS_REQUIRE_OK(ls_module_backward(m, dl, 0, NULL));
        /* the output stays valid until the next forward, also the last segment's, whose layers'
         * buffers go after its backward (kept from its forward, not recomputed) */
        LS_EXPECT(memcmp(logits, y->data, ls_tensor_nbytes(y)) == 0);
    }
    free(logits);
    ls_allocator_stats(c->alloc, &st);
    ls_xent_destroy(loss);
    return st.peak_bytes - base;
}

/* Linear, ReLU, Linear in 2 segments ([Linear], [ReLU, Linear]): nothing kept by the first, and
 * the last keeps its activations for its backward (not recomputed, as PyTorch's), so the peak is
 * no more than plain's; in 1 segment (the last: nothing checkpointed) it is plain's. */
static void check_shallow(void) {
    enum { HIDDEN = 512, CLASSES = 10 };
    ls_allocator *h[3];
    ls_ctx *c[3];
    ls_module *m[3];
    size_t peak[3];
    double loss[3][2];
    for (int k = 0; k < 3; k++) {
        LS_REQUIRE_OK(ls_host_allocator_create(0, &h[k]));
        LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h[k], &c[k]));
        ls_module *layers[3];
        LS_REQUIRE_OK(ls_linear_create(c[k], LS_F32, WIDTH, HIDDEN, 1, 11, "", &layers[0]));
        LS_REQUIRE_OK(ls_activation_create(c[k], LS_ACT_RELU, &layers[1]));
        LS_REQUIRE_OK(ls_linear_create(c[k], LS_F32, HIDDEN, CLASSES, 1, 12, "", &layers[2]));
        LS_REQUIRE_OK(ls_sequential_create(c[k], 3, layers, &m[k]));
        if (k) LS_REQUIRE_OK(ls_checkpoint_sequential(m[k], 3 - k, &m[k]));
        ls_rng r;
        ls_rng_init(&r, 5);
        ls_tensor *x = gc_tensor(c[k], LS_F32, 2, (int64_t[]){BATCH, WIDTH});
        ls_tensor *lab = gc_tensor(c[k], LS_I32, 1, (int64_t[]){BATCH});
        for (int64_t i = 0; i < BATCH * WIDTH; i++) ((float *)x->data)[i] = ls_rng_normal(&r);
        for (int64_t i = 0; i < BATCH; i++) ((int32_t *)lab->data)[i] = (int32_t)(i % CLASSES);
        peak[k] = run(c[k], m[k], x, lab, loss[k]);
        ls_tensor_destroy(x);
        ls_tensor_destroy(lab);
    }
    int equal = 1;
    for (int k = 1; k < 3; k++) {
        LS_EXPECT(loss[0][0] == loss[k][0] && loss[0][1] == loss[k][1]);
        for (int i = 0; i < ls_module_num_params(m[0]); i++) {
            ls_tensor *g1 = ls_module_grad(m[0], i), *g2 = ls_module_grad(m[k], i);
            equal &= memcmp(g1->data, g2->data, ls_tensor_nbytes(g1)) == 0;
        }
    }
    LS_EXPECT(equal);
    printf("shallow MLP: activation peak plain %zu bytes, 2 segments %zu bytes, 1 segment %zu bytes\n", peak[0],
           peak[1], peak[2]);
    LS_EXPECT(peak[1] <= peak[0]);
    LS_EXPECT(peak[2] == peak[0]);
    for (int k = 0; k < 3; k++) {
        ls_module_destroy(m[k]);
        ls_ctx_destroy(c[k]);
        ls_allocator_destroy(h[k]);
    }
}

/* fashion_mlp's layers (Linear 512, ReLU, Linear 256, ReLU, Linear 10) plain and in 2 to 5
 * segments: bitwise the same losses and gradients, and every split peaks below plain. A recompute
 * writes the segment's output into the buffer the segment keeps (given back to its layer), not a
 * second one beside it: with 5 segments (one layer each) the peak was one output above plain.
 * A segment's input gradient is freed once the segment before it has consumed it (it was kept
 * to the next step, each segment's beside the next: 3 to 5 segments only reached plain's peak). */
static void check_mlp5(void) {
    enum { H1 = 512, H2 = 256, CLASSES = 10, SPLITS = 6 };
    size_t peak[SPLITS];
    double loss[SPLITS][2];
    float *grads[SPLITS] = {0};
    size_t gbytes = 0;
    for (int k = 0; k < SPLITS; k++) {
        if (k == 1) continue; /* 1 segment is plain (check_shallow) */
        ls_allocator *h;
        ls_ctx *c;
        ls_module *layers[5], *m;
        LS_REQUIRE_OK(ls_host_allocator_create(0, &h));
        LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h, &c));
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, WIDTH, H1, 1, 21, "", &layers[0]));
        LS_REQUIRE_OK(ls_activation_create(c, LS_ACT_RELU, &layers[1]));
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, H1, H2, 1, 22, "", &layers[2]));
        LS_REQUIRE_OK(ls_activation_create(c, LS_ACT_RELU, &layers[3]));
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, H2, CLASSES, 1, 23, "", &layers[4]));
        LS_REQUIRE_OK(ls_sequential_create(c, 5, layers, &m));
        if (k) LS_REQUIRE_OK(ls_checkpoint_sequential(m, k, &m));
        ls_rng r;
        ls_rng_init(&r, 9);
        ls_tensor *x = gc_tensor(c, LS_F32, 2, (int64_t[]){BATCH, WIDTH});
        ls_tensor *lab = gc_tensor(c, LS_I32, 1, (int64_t[]){BATCH});
        for (int64_t i = 0; i < BATCH * WIDTH; i++) ((float *)x->data)[i] = ls_rng_normal(&r);
        for (int64_t i = 0; i < BATCH; i++) ((int32_t *)lab->data)[i] = (int32_t)(i % CLASSES);
        peak[k] = run(c, m, x, lab, loss[k]);
        gbytes = 0;
        for (int i = 0; i < ls_module_num_params(m); i++) gbytes += ls_tensor_nbytes(ls_module_grad(m, i));
        LS_REQUIRE(grads[k] = malloc(gbytes));
        for (int i = 0, off = 0; i < ls_module_num_params(m); i++) {
            memcpy((char *)grads[k] + off, ls_module_grad(m, i)->data, ls_tensor_nbytes(ls_module_grad(m, i)));
            off += (int)ls_tensor_nbytes(ls_module_grad(m, i));
        }
        ls_tensor_destroy(x);
        ls_tensor_destroy(lab);
        ls_module_destroy(m);
        ls_ctx_destroy(c);
        ls_allocator_destroy(h);
    }
    printf("fashion_mlp's layers: activation peak plain %zu bytes", peak[0]);
    for (int k = 2; k < SPLITS; k++) printf(", %d segments %zu", k, peak[k]);
    printf("\n");
    for (int k = 2; k < SPLITS; k++) {
        LS_EXPECT(loss[k][0] == loss[0][0] && loss[k][1] == loss[0][1]);
        LS_EXPECT(memcmp(grads[k], grads[0], gbytes) == 0);
        LS_EXPECT(peak[k] < peak[0]);
    }
    for (int k = 0; k < SPLITS; k++) free(grads[k]);
}

/* Checkpoint segments beside a plain Flatten (whose input gradient is a view of the gradient it is
 * given): Sequential(Checkpoint(Linear, ReLU), Flatten, Checkpoint(Linear)) with want_dx, two steps,
 * bitwise the input gradient and weight gradients of the same layers plain. The second segment's
 * input gradient is not freed under the Flatten's view of it (ASan: no freed memory read). */
static void check_beside_view(void) {
    enum { H = 64, CLASSES = 10 };
    ls_allocator *h;
    ls_ctx *c;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &h));
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h, &c));
    ls_module *m[2];
    for (int k = 0; k < 2; k++) {
        ls_module *a[2], *b, *seg1, *seg2, *flat, *top[3];
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, WIDTH, H, 1, 31, "", &a[0]));
        LS_REQUIRE_OK(ls_activation_create(c, LS_ACT_RELU, &a[1]));
        LS_REQUIRE_OK(ls_sequential_create(c, 2, a, &seg1));
        LS_REQUIRE_OK(ls_flatten_create(c, &flat));
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, H, CLASSES, 1, 32, "", &b));
        seg2 = b;
        if (k) {
            LS_REQUIRE_OK(ls_checkpoint_create(c, seg1, &seg1));
            LS_REQUIRE_OK(ls_checkpoint_create(c, seg2, &seg2));
        }
        top[0] = seg1, top[1] = flat, top[2] = seg2;
        LS_REQUIRE_OK(ls_sequential_create(c, 3, top, &m[k]));
    }
    ls_rng r;
    ls_rng_init(&r, 4);
    ls_tensor *x = gc_tensor(c, LS_F32, 2, (int64_t[]){BATCH, WIDTH});
    ls_tensor *lab = gc_tensor(c, LS_I32, 1, (int64_t[]){BATCH});
    for (int64_t i = 0; i < BATCH * WIDTH; i++) ((float *)x->data)[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < BATCH; i++) ((int32_t *)lab->data)[i] = (int32_t)(i % CLASSES);
    float *dx[2];
    for (int k = 0; k < 2; k++) {
        ls_xent *loss;
        LS_REQUIRE_OK(ls_xent_create(c, &loss));
        const ls_tensor *y, *dl, *g = NULL;
        for (int step = 0; step < 2; step++) {
            LS_REQUIRE_OK(ls_module_forward(m[k], x, &y));
            LS_REQUIRE_OK(ls_xent_forward(loss, y, lab, NULL));
            LS_REQUIRE_OK(ls_xent_backward(loss, 1.0 / BATCH, &dl));
            LS_REQUIRE_OK(ls_module_backward(m[k], dl, 1, &g));
        }
        LS_REQUIRE(g && (dx[k] = malloc(ls_tensor_nbytes(g))));
        memcpy(dx[k], g->data, ls_tensor_nbytes(g));
        ls_xent_destroy(loss);
    }
    LS_EXPECT(memcmp(dx[0], dx[1], (size_t)BATCH * WIDTH * sizeof(float)) == 0);
    int equal = 1;
    for (int i = 0; i < ls_module_num_params(m[0]); i++) {
        ls_tensor *g1 = ls_module_grad(m[0], i), *g2 = ls_module_grad(m[1], i);
        equal &= memcmp(g1->data, g2->data, ls_tensor_nbytes(g1)) == 0;
    }
    LS_EXPECT(equal);
    for (int k = 0; k < 2; k++) {
        free(dx[k]);
        ls_module_destroy(m[k]);
    }
    ls_tensor_destroy(x);
    ls_tensor_destroy(lab);
    ls_ctx_destroy(c);
    ls_allocator_destroy(h);
}

int main(void) {
    check_shallow();
    check_mlp5();
    check_beside_view();
    ls_allocator *h1, *h2;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &h1));
    LS_REQUIRE_OK(ls_host_allocator_create(0, &h2));
    ls_ctx *c1, *c2;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h1, &c1));
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h2, &c2));
    ls_module *plain = build(c1), *seq = build(c2), *ck;
    LS_REQUIRE_OK(ls_checkpoint_sequential(seq, 4, &ck));
    LS_EXPECT(ls_module_num_params(ck) == ls_module_num_params(plain));
    for (int i = 0; i < ls_module_num_params(ck); i++)
        LS_EXPECT(strcmp(ls_module_param_name(ck, i), ls_module_param_name(plain, i)) == 0);
    LS_EXPECT(strcmp(ls_module_param_name(ck, 2), "2.weight") == 0);

    ls_rng r;
    ls_rng_init(&r, 3);
    ls_tensor *x1 = gc_tensor(c1, LS_F32, 2, (int64_t[]){BATCH, WIDTH}),
              *x2 = gc_tensor(c2, LS_F32, 2, (int64_t[]){BATCH, WIDTH});
    ls_tensor *l1 = gc_tensor(c1, LS_I32, 1, (int64_t[]){BATCH}), *l2 = gc_tensor(c2, LS_I32, 1, (int64_t[]){BATCH});
    for (int64_t i = 0; i < BATCH * WIDTH; i++) ((float *)x1->data)[i] = ((float *)x2->data)[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < BATCH; i++) ((int32_t *)l1->data)[i] = ((int32_t *)l2->data)[i] = (int32_t)(i % 10);
    double loss1[2], loss2[2];
    size_t peak_plain = run(c1, plain, x1, l1, loss1);
    size_t peak_ck = run(c2, ck, x2, l2, loss2);
    LS_EXPECT(loss1[0] == loss2[0] && loss1[1] == loss2[1]);
    LS_EXPECT(loss1[0] != loss1[1]); /* the second micro-step saw different dropout masks */
    int equal = 1;
    for (int i = 0; i < ls_module_num_params(ck); i++) {
        ls_tensor *g1 = ls_module_grad(plain, i), *g2 = ls_module_grad(ck, i);
        equal &= memcmp(g1->data, g2->data, ls_tensor_nbytes(g1)) == 0;
    }
    LS_EXPECT(equal);
    printf("activation peak: plain %zu bytes, checkpointed %zu bytes (%.0f%%)\n", peak_plain, peak_ck,
           100.0 * (double)peak_ck / (double)peak_plain);
    LS_EXPECT(peak_ck * 3 < peak_plain * 2);
    ls_tensor_destroy(x1);
    ls_tensor_destroy(x2);
    ls_tensor_destroy(l1);
    ls_tensor_destroy(l2);
    ls_module_destroy(plain);
    ls_module_destroy(ck);
    ls_module *tmp = build(c1);
    LS_EXPECT_ERR(ls_checkpoint_sequential(tmp, 40, &ck), LS_ERR_INVALID_ARGUMENT, "into 40 checkpoint segments");
    ls_module_destroy(tmp); /* left untouched on error */
    /* a layer whose parameter names are as long as a name can be: the wrapped model keeps them as
     * they are (it failed, composing "0.0.<name>" for a container in between whose names it then
     * replaced, and with docs/guide.md's ls_checkpoint_sequential(model, k, &model) the failure
     * set model to NULL, the layers lost) */
    char longname[119];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ls_module *two[2], *model;
    LS_REQUIRE_OK(ls_linear_create(c1, LS_F32, 4, 4, 1, 1, longname, &two[0]));
    LS_REQUIRE_OK(ls_activation_create(c1, LS_ACT_RELU, &two[1]));
    LS_REQUIRE_OK(ls_sequential_create(c1, 2, two, &model));
    char want[160];
    snprintf(want, sizeof want, "0.%s.weight", longname);
    LS_EXPECT(strcmp(ls_module_param_name(model, 0), want) == 0);
    ls_module *before = model;
    ls_status s = ls_checkpoint_sequential(model, 2, &model);
    if (s != LS_OK) fprintf(stderr, "ls_checkpoint_sequential: %s\n", ls_last_error());
    LS_EXPECT(s == LS_OK);
    LS_REQUIRE(model != NULL); /* the model itself, or its wrapped form */
    LS_EXPECT(s == LS_OK ? model != before : model == before);
    LS_EXPECT(ls_module_num_params(model) == 2 && strcmp(ls_module_param_name(model, 0), want) == 0);
    LS_EXPECT(s != LS_OK || strcmp(ls_module_kind(ls_module_child(model, 1)), "Checkpoint") == 0);
    ls_module_destroy(model);
    ls_ctx_destroy(c1);
    ls_ctx_destroy(c2);
    ls_allocator_destroy(h1);
    ls_allocator_destroy(h2);
    LS_TEST_END();
}
