/* test_frozen_prefix.c: the layers before the first one that trains (the frozen prefix) get no
 * gradient in backward, only their per-step state (nn_impl.h's backward_frozen), and a checkpoint
 * segment wholly inside the prefix is not recomputed in backward:
 *  - a probe kind counts its calls: in the prefix its backward is never called, its
 *    backward_frozen once a step; in a checkpoint segment of the prefix its forward runs once a
 *    step (no recompute), in a segment that trains twice, but in the last segment, which keeps
 *    its activations for the backward that follows (never recomputed); a model with nothing that trains goes
 *    the frozen way whole, as does a Residual or a Checkpoint backward with nothing below it to
 *    train;
 *  - a model with every kind of layer (Reshape, Cast, Conv2d, BatchNorm2d, MaxPool2d, a residual
 *    block with a shortcut, AvgPool2d, Dropout, GlobalAvgPool2d, Flatten, Linear, GELU, ReLU) all
 *    frozen but its last Linear, plain and checkpointed in 1, 4 and 18 segments: 3 steps give
 *    bitwise the logits, the last Linear's gradients and the batch norms' running statistics of
 *    the same model with nothing frozen and no checkpointing (its full backward): each batch norm
 *    folded each step's statistics once and each dropout drew each step's own mask. */
#include "cnn.h"
#include "nn.h"
#include "nn_impl.h"
#include "testutil.h"

#define B 16
#define F 36 /* 1 x 6 x 6 images */
#define STEPS 3

static ls_ctx *C;

/* ---- the probe: the identity, counting its calls ---- */
typedef struct probe {
    ls_module base;
    int forwards, backwards, frozen;
} probe;

static ls_status probe_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    ((probe *)m)->forwards++;
    m->x = x;
    *y = x;
    return LS_OK;
}

static ls_status probe_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    ((probe *)m)->backwards++;
    if (!m->x || !ls_tensor_same_shape(m->x, dy))
        return ls_error(LS_ERR_INTERNAL, "probe: a gradient of another shape than its output");
    if (dx) *dx = want_dx ? dy : NULL;
    return LS_OK;
}

static ls_status probe_backward_frozen(ls_module *m) {
    ((probe *)m)->frozen++;
    return LS_OK;
}

static const ls_module_vt probe_vt = {"Probe", probe_forward, probe_backward, NULL, NULL, probe_backward_frozen};

static ls_module *new_probe(void) {
    ls_module *m;
    LS_REQUIRE_OK(ls_module_alloc(C, &probe_vt, 0, sizeof(probe), &m));
    return m;
}

static ls_tensor *X, *Labels;

/* STEPS forwards and backwards (want_dx 0) of m; logits[s] (B x 10 floats) of step s, when not NULL */
static void run(ls_module *m, float (*logits)[B * 10]) {
    ls_xent *loss;
    LS_REQUIRE_OK(ls_xent_create(C, &loss));
    for (int s = 0; s < STEPS; s++) {
        const ls_tensor *y, *dl;
        LS_REQUIRE_OK(ls_module_zero_grad(m));
        LS_REQUIRE_OK(ls_module_forward(m, X, &y));
        if (logits) memcpy(logits[s], y->data, sizeof logits[s]);
        LS_REQUIRE_OK(ls_xent_forward(loss, y, Labels, NULL));
        LS_REQUIRE_OK(ls_xent_backward(loss, 1.0 / B, &dl));
        LS_REQUIRE_OK(ls_module_backward(m, dl, 0, NULL));
    }
    ls_xent_destroy(loss);
}

static void freeze_all_but_last(ls_module *m, int last) {
    for (int i = 0; i < ls_module_num_params(m) - last; i++) LS_REQUIRE_OK(ls_module_set_requires_grad(m, i, 0));
}

/* Linear(F, 16) [probe A], ReLU, Linear(16, 10), probe B: with the first Linear frozen, A is in the
 * frozen prefix; in 2 segments ([Linear, A], [ReLU, Linear, B]) the first is wholly in it. */
static void check_probe(int segments, int frozen) {
    ls_module *l[5];
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, F, 16, 1, 1, "", &l[0]));
    l[1] = new_probe();
    LS_REQUIRE_OK(ls_activation_create(C, LS_ACT_RELU, &l[2]));
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 16, 10, 1, 2, "", &l[3]));
    l[4] = new_probe();
    probe *a = (probe *)l[1], *b = (probe *)l[4];
    ls_module *m;
    LS_REQUIRE_OK(ls_sequential_create(C, 5, l, &m));
    for (int i = 0; i < 2 && frozen; i++) LS_REQUIRE_OK(ls_module_set_requires_grad(m, i, 0));
    if (segments) LS_REQUIRE_OK(ls_checkpoint_sequential(m, segments, &m));
    run(m, NULL);
    /* forwards: once a step, twice in a segment recomputed (one that trains and is not the last:
     * the last segment's backward follows its forward at once, so it keeps its activations and is
     * not recomputed, as in PyTorch's checkpoint_sequential) */
    const int a_fwd = STEPS * (segments > 1 && !frozen ? 2 : 1), b_fwd = STEPS;
    printf("%s, %d segments: probe in the prefix %d forwards, %d backwards, %d frozen; after the last Linear %d "
           "forwards, %d backwards, %d frozen\n",
           frozen ? "first Linear frozen" : "nothing frozen", segments, a->forwards, a->backwards, a->frozen,
           b->forwards, b->backwards, b->frozen);
    LS_EXPECT(a->forwards == a_fwd);
    LS_EXPECT(a->backwards == (frozen ? 0 : STEPS));
    LS_EXPECT(a->frozen == (frozen ? STEPS : 0));
    LS_EXPECT(b->forwards == b_fwd && b->backwards == STEPS && b->frozen == 0);
    /* everything frozen: the whole model the frozen way, checkpointed or not, none recomputed */
    LS_REQUIRE_OK(ls_module_set_requires_grad(m, -1, 0));
    a->forwards = a->backwards = a->frozen = b->forwards = b->backwards = b->frozen = 0;
    run(m, NULL);
    LS_EXPECT(a->forwards == STEPS && a->backwards == 0 && a->frozen == STEPS);
    LS_EXPECT(b->forwards == STEPS && b->backwards == 0 && b->frozen == STEPS);
    ls_module_destroy(m);
}

/* A Residual (body: Linear, probe; shortcut: probe) and a Checkpoint of one such, called with
 * want_dx 0 and nothing trainable below them: neither branch gets a gradient, none is recomputed. */
static void check_containers(void) {
    for (int ck = 0; ck < 2; ck++) {
        ls_module *body[2], *bseq, *sc = new_probe(), *m;
        LS_REQUIRE_OK(ls_linear_create(C, LS_F32, F, F, 1, 3, "", &body[0]));
        body[1] = new_probe();
        probe *pb = (probe *)body[1], *ps = (probe *)sc;
        LS_REQUIRE_OK(ls_sequential_create(C, 2, body, &bseq));
        LS_REQUIRE_OK(ls_residual_create(C, bseq, sc, 1, &m));
        if (ck) LS_REQUIRE_OK(ls_checkpoint_create(C, m, &m));
        LS_REQUIRE_OK(ls_module_set_requires_grad(m, -1, 0));
        const ls_tensor *y, *dx = X;
        for (int s = 0; s < STEPS; s++) {
            LS_REQUIRE_OK(ls_module_forward(m, X, &y));
            LS_REQUIRE_OK(ls_module_backward(m, y, 0, &dx));
            LS_EXPECT(dx == NULL);
        }
        printf("%s, all frozen: body probe %d forwards, %d backwards, %d frozen; shortcut probe %d, %d, %d\n",
               ck ? "Checkpoint(Residual)" : "Residual", pb->forwards, pb->backwards, pb->frozen, ps->forwards,
               ps->backwards, ps->frozen);
        LS_EXPECT(pb->forwards == STEPS && pb->backwards == 0 && pb->frozen == STEPS);
        LS_EXPECT(ps->forwards == STEPS && ps->backwards == 0 && ps->frozen == STEPS);
        ls_module_destroy(m);
    }
}

/* every kind of layer, then a probe and the Linear that trains (layer 17) */
#define KINDS_LAYERS 18
static ls_module *every_kind(probe **p) {
    ls_batchnorm_config relu = ls_batchnorm_defaults();
    relu.relu = 1;
    ls_module *l[KINDS_LAYERS], *m;
    int k = 0;
    LS_REQUIRE_OK(ls_reshape_create(C, 3, (int64_t[]){1, 6, 6}, &l[k++]));
    LS_REQUIRE_OK(ls_cast_create(C, LS_F32, &l[k++]));
    LS_REQUIRE_OK(ls_conv2d_create(C, LS_F32, 1, 4, 3, 1, 1, 1, 1, 11, "", &l[k++]));
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F32, 4, &relu, "", &l[k++]));
    LS_REQUIRE_OK(ls_pool2d_create(C, LS_POOL_MAX, 2, 2, 0, &l[k++])); /* 3 x 3 */
    LS_REQUIRE_OK(ls_basic_block_create(C, LS_F32, 4, 8, 1, 12, NULL, &l[k++]));
    LS_REQUIRE_OK(ls_pool2d_create(C, LS_POOL_AVG, 3, 1, 1, &l[k++]));
    LS_REQUIRE_OK(ls_dropout_create(C, 0.3f, 13, &l[k++]));
    LS_REQUIRE_OK(ls_global_avgpool_create(C, &l[k++]));
    LS_REQUIRE_OK(ls_flatten_create(C, &l[k++]));
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 8, 16, 1, 14, "", &l[k++]));
    LS_REQUIRE_OK(ls_activation_create(C, LS_ACT_GELU, &l[k++]));
    LS_REQUIRE_OK(ls_dropout_create(C, 0.2f, 15, &l[k++]));
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 16, 16, 1, 16, "", &l[k++]));
    LS_REQUIRE_OK(ls_activation_create(C, LS_ACT_RELU, &l[k++]));
    LS_REQUIRE_OK(ls_dropout_create(C, 0.1f, 17, &l[k++]));
    l[k] = new_probe();
    *p = (probe *)l[k++];
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 16, 10, 1, 18, "", &l[k++]));
    LS_REQUIRE(k == KINDS_LAYERS);
    LS_REQUIRE_OK(ls_sequential_create(C, k, l, &m));
    return m;
}

/* the batch norms' running statistics, concatenated into out (at most max floats): how many */
static int buffers(ls_module *m, float *out, int max) {
    int n = 0;
    for (int i = 0; i < ls_cnn_num_buffers(m); i++) {
        const ls_tensor *t = ls_cnn_buffer(m, i, NULL, 0);
        LS_REQUIRE(n + ls_tensor_numel(t) <= max);
        memcpy(out + n, t->data, ls_tensor_nbytes(t));
        n += (int)ls_tensor_numel(t);
    }
    return n;
}

static void check_every_kind(void) {
    static float ref_logits[STEPS][B * 10], logits[STEPS][B * 10], ref_buf[256], buf[256];
    float ref_grad[170];
    probe *p;
    ls_module *ref = every_kind(&p);
    const int np = ls_module_num_params(ref);
    run(ref, ref_logits);
    const int nb = buffers(ref, ref_buf, 256);
    memcpy(ref_grad, ls_module_grad(ref, np - 2)->data, sizeof(float) * 160);
    memcpy(ref_grad + 160, ls_module_grad(ref, np - 1)->data, sizeof(float) * 10);
    LS_EXPECT(p->backwards == STEPS && p->frozen == 0);
    LS_EXPECT(memcmp(ref_logits[0], ref_logits[1], sizeof ref_logits[0]) != 0); /* new masks, new statistics */
    ls_module_destroy(ref);
    const int segs[4] = {0, 1, 4, KINDS_LAYERS}; /* 18: each layer a segment */
    for (int k = 0; k < 4; k++) {
        ls_module *m = every_kind(&p);
        freeze_all_but_last(m, 2);
        if (segs[k]) LS_REQUIRE_OK(ls_checkpoint_sequential(m, segs[k], &m));
        run(m, logits);
        const int same_logits = memcmp(logits, ref_logits, sizeof logits) == 0;
        const int same_grad = memcmp(ls_module_grad(m, np - 2)->data, ref_grad, sizeof(float) * 160) == 0 &&
                              memcmp(ls_module_grad(m, np - 1)->data, ref_grad + 160, sizeof(float) * 10) == 0;
        const int same_buf = buffers(m, buf, 256) == nb && memcmp(buf, ref_buf, sizeof(float) * (size_t)nb) == 0;
        printf("every kind frozen but the last Linear, %d segments: logits %s, its gradients %s, batch-norm "
               "statistics %s; probe %d forwards, %d backwards, %d frozen\n",
               segs[k], same_logits ? "equal" : "DIFFER", same_grad ? "equal" : "DIFFER", same_buf ? "equal" : "DIFFER",
               p->forwards, p->backwards, p->frozen);
        LS_EXPECT(same_logits);
        LS_EXPECT(same_grad);
        LS_EXPECT(same_buf);
        /* never recomputed: its segment is in the frozen prefix, or (1 and 4 segments) is the last,
         * with the Linear that trains, whose activations are kept for the backward that follows */
        LS_EXPECT(p->forwards == STEPS);
        LS_EXPECT(p->backwards == 0 && p->frozen == STEPS);
        ls_module_destroy(m);
    }
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    LS_REQUIRE_OK(ls_tensor_create(C->alloc, LS_F32, 2, (int64_t[]){B, F}, "input", &X));
    LS_REQUIRE_OK(ls_tensor_create(C->alloc, LS_I32, 1, (int64_t[]){B}, "labels", &Labels));
    ls_rng r;
    ls_rng_init(&r, 5);
    for (int i = 0; i < B * F; i++) ((float *)X->data)[i] = ls_rng_normal(&r);
    for (int i = 0; i < B; i++) ((int32_t *)Labels->data)[i] = i % 10;
    for (int segments = 0; segments <= 2; segments += 2) {
        check_probe(segments, 0);
        check_probe(segments, 1);
    }
    check_containers();
    check_every_kind();
    ls_tensor_destroy(X);
    ls_tensor_destroy(Labels);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
