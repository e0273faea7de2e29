/* test_cnn_modules.c: the ResNet as modules. Activation checkpointing (checkpoint_sequential over
 * its layers) gives bitwise the same loss, gradients and BatchNorm running statistics as plain
 * training, with a lower peak; bf16 and fp16 activations train close to f32 with half the
 * activation memory; parameter and buffer names; eval mode uses the running statistics;
 * synchronized batch norm over one rank equals plain batch norm. Under mpirun (2 ranks), a
 * synchronized batch norm over two half batches equals one batch norm over the whole batch:
 * outputs, input gradients and running statistics; and a trainer step whose micro-batches hold
 * samples on one rank but none on another (an exact sampler's short last step) is refused on every
 * rank, naming the ranks, instead of pairing the batch norms' all-reduces with other collectives
 * (MPI_ERR_TRUNCATE, or a hang); ranks with different counts in the same micro-batches train. */
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "kernels/gradcheck.h"
#include "train.h"

static ls_ctx *C;

typedef struct net {
    ls_module *m;
    ls_xent *loss;
} net;

static ls_resnet_config small_cfg(ls_dtype act) {
    ls_resnet_config rc = {LS_F32, act, 1, 12, 12, 3, {4, 8, 8}, 2, 5, 11, NULL, 0};
    return rc;
}

static void make(net *n, ls_dtype act, int segments) {
    ls_resnet_config rc = small_cfg(act);
    LS_REQUIRE_OK(ls_resnet_create(C, &rc, &n->m));
    if (segments) LS_REQUIRE_OK(ls_checkpoint_sequential(n->m, segments, &n->m));
    LS_REQUIRE_OK(ls_xent_create(C, &n->loss));
}

static void drop(net *n) {
    ls_module_destroy(n->m);
    ls_xent_destroy(n->loss);
}

/* one forward + backward from released activations; returns the loss, *peak the most memory it
 * held at once beyond what was live before (activations, workspace) */
static double step(net *n, const ls_tensor *x, const ls_tensor *labels, size_t *peak) {
    const ls_tensor *logits, *dl;
    double loss;
    ls_memory_stats st;
    ls_cnn_release_activations(n->m);
    ls_allocator_reset_peak(C->alloc);
    ls_allocator_stats(C->alloc, &st);
    size_t live = st.live_bytes;
    LS_REQUIRE_OK(ls_module_zero_grad(n->m));
    LS_REQUIRE_OK(ls_module_forward(n->m, x, &logits));
    LS_REQUIRE_OK(ls_xent_forward(n->loss, logits, labels, &loss));
    LS_REQUIRE_OK(ls_xent_backward(n->loss, 1.0 / (double)x->shape[0], &dl));
    LS_REQUIRE_OK(ls_module_backward(n->m, dl, 0, NULL));
    ls_allocator_stats(C->alloc, &st);
    if (peak) *peak = st.peak_bytes - live;
    return loss;
}

static void check_checkpointing(const ls_tensor *x, const ls_tensor *labels) {
    net a, b;
    make(&a, LS_F32, 0);
    make(&b, LS_F32, 4);
    int np = ls_module_num_params(a.m);
    LS_EXPECT(np == ls_module_num_params(b.m));
    for (int i = 0; i < np; i++) LS_EXPECT(strcmp(ls_module_param_name(a.m, i), ls_module_param_name(b.m, i)) == 0);
    LS_EXPECT(ls_cnn_num_buffers(a.m) == ls_cnn_num_buffers(b.m));
    size_t pa, pb;
    for (int s = 0; s < 2; s++) {
        double la = step(&a, x, labels, &pa), lb = step(&b, x, labels, &pb);
        LS_EXPECT(la == lb);
        for (int i = 0; i < np; i++)
            LS_EXPECT(memcmp(ls_module_grad(a.m, i)->data, ls_module_grad(b.m, i)->data,
                             ls_tensor_nbytes(ls_module_grad(a.m, i))) == 0);
        /* running statistics folded once per step, recomputation or not */
        for (int i = 0; i < ls_cnn_num_buffers(a.m); i++) {
            char na[64], nb[64];
            ls_tensor *ba = ls_cnn_buffer(a.m, i, na, 64), *bb = ls_cnn_buffer(b.m, i, nb, 64);
            LS_EXPECT(strcmp(na, nb) == 0);
            LS_EXPECT(memcmp(ba->data, bb->data, ls_tensor_nbytes(ba)) == 0);
        }
    }
    printf("checkpointing: step memory %zu bytes plain, %zu with 4 segments\n", pa, pb);
    LS_EXPECT(pb < pa * 3 / 4);
    char name[64];
    ls_cnn_buffer(a.m, 0, name, 64);
    LS_EXPECT(strcmp(name, "2.running_mean") == 0); /* the stem's BatchNorm is layer 2 */
    ls_cnn_buffer(a.m, 3, name, 64);
    LS_EXPECT(strcmp(name, "3.body.1.running_var") == 0);
    LS_EXPECT(strcmp(ls_module_param_name(a.m, 3), "3.body.0.weight") == 0);
    drop(&a);
    drop(&b);
}

static double cosine(net *a, net *b) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < ls_module_num_params(a->m); i++) {
        ls_tensor *x = ls_module_grad(a->m, i), *y = ls_module_grad(b->m, i);
        LS_EXPECT(y->dtype == LS_F32); /* master gradients */
        for (int64_t k = 0; k < ls_tensor_numel(x); k++) {
            double u = ((float *)x->data)[k], v = ((float *)y->data)[k];
            dot += u * v;
            na += u * u;
            nb += v * v;
        }
    }
    return dot / sqrt(na * nb);
}

static void check_precision(const ls_tensor *x, const ls_tensor *labels) {
    net f, h, g;
    make(&f, LS_F32, 0);
    make(&h, LS_BF16, 0);
    make(&g, LS_F16, 0);
    size_t pf, ph, pg;
    double lf = step(&f, x, labels, &pf), lh = step(&h, x, labels, &ph), lg = step(&g, x, labels, &pg);
    printf("precision: loss f32 %.6f bf16 %.6f f16 %.6f; step memory %zu / %zu / %zu bytes\n", lf, lh, lg, pf, ph, pg);
    LS_EXPECT(fabs(lh - lf) < 0.01 * fabs(lf));
    LS_EXPECT(fabs(lg - lf) < 0.002 * fabs(lf));
    LS_EXPECT(ph < pf * 7 / 10 && pg < pf * 7 / 10);
    /* the gradients agree in direction (cosine similarity over all parameters); bf16 keeps 8 bits of
     * mantissa, and batch norm's backward subtracts means, so its gradients are the rougher */
    double ch = cosine(&f, &h), cg = cosine(&f, &g);
    printf("precision: gradient cosine similarity to f32: bf16 %.5f, f16 %.5f\n", ch, cg);
    LS_EXPECT(ch > 0.95);
    LS_EXPECT(cg > 0.995);
    /* the 16-bit models' parameters are named as the f32 model's (and PyTorch's): a cast layer of
     * its own renumbered them ("1.weight" became "2.weight"), so no f32 checkpoint loaded */
    LS_REQUIRE(ls_module_num_params(h.m) == ls_module_num_params(f.m));
    for (int i = 0; i < ls_module_num_params(f.m); i++)
        LS_EXPECT(!strcmp(ls_module_param_name(h.m, i), ls_module_param_name(f.m, i)) &&
                  !strcmp(ls_module_param_name(g.m, i), ls_module_param_name(f.m, i)));
    LS_EXPECT(!strcmp(ls_module_param_name(h.m, 0), "1.weight"));
    drop(&f);
    drop(&h);
    drop(&g);
}

static void check_eval(const ls_tensor *x) {
    net n;
    make(&n, LS_F32, 0);
    const ls_tensor *y;
    ls_module_set_training(n.m, 0);
    LS_REQUIRE_OK(ls_module_forward(n.m, x, &y));
    /* fresh running statistics (0, 1): eval output does not depend on the rest of the batch */
    ls_tensor one = ls_tensor_view(x->data, x->dtype, x->device, 2, (int64_t[]){1, x->shape[1]});
    float first[5];
    memcpy(first, y->data, sizeof first);
    LS_REQUIRE_OK(ls_module_forward(n.m, &one, &y));
    for (int k = 0; k < 5; k++) LS_EXPECT_NEAR(((float *)y->data)[k], first[k], 1e-6);
    drop(&n);
}

/* --dropout (timm's drop_rate): a Dropout before the classifier, one more layer, the same weights
 * (it takes no init stream) and the same output in eval mode; in training its masks follow the
 * keys (a sample and step draw the same mask again, another step another), and a recomputing
 * model (activation checkpointing) replays them: its gradients are the plain model's, bitwise. */
static void check_dropout(const ls_tensor *x, const ls_tensor *labels) {
    ls_resnet_config rc = small_cfg(LS_F32), rd = rc;
    rd.dropout = 0.5f;
    LS_EXPECT(ls_resnet_num_layers(&rd) == ls_resnet_num_layers(&rc) + 1);
    net a, d, k;
    LS_REQUIRE_OK(ls_resnet_create(C, &rc, &a.m));
    LS_REQUIRE_OK(ls_resnet_create(C, &rd, &d.m));
    LS_REQUIRE_OK(ls_resnet_create(C, &rd, &k.m));
    LS_REQUIRE_OK(ls_checkpoint_sequential(k.m, 4, &k.m));
    LS_REQUIRE_OK(ls_xent_create(C, &a.loss));
    LS_REQUIRE_OK(ls_xent_create(C, &d.loss));
    LS_REQUIRE_OK(ls_xent_create(C, &k.loss));
    LS_EXPECT(ls_module_num_dropouts(d.m) == 1 && ls_module_num_dropouts(k.m) == 1 && ls_module_num_dropouts(a.m) == 0);
    int np = ls_module_num_params(a.m), nl = ls_resnet_num_layers(&rc);
    LS_REQUIRE(np == ls_module_num_params(d.m));
    for (int i = 0; i < np; i++) {
        ls_tensor *u = ls_module_param(a.m, i), *v = ls_module_param(d.m, i);
        LS_EXPECT(memcmp(u->data, v->data, ls_tensor_nbytes(u)) == 0);
        if (i < np - 2) LS_EXPECT(strcmp(ls_module_param_name(a.m, i), ls_module_param_name(d.m, i)) == 0);
    }
    char want[32];
    snprintf(want, sizeof want, "%d.weight", nl); /* the classifier moves up one: nn.Sequential's numbering */
    LS_EXPECT(strcmp(ls_module_param_name(d.m, np - 2), want) == 0);
    snprintf(want, sizeof want, "%d.weight", nl - 1);
    LS_EXPECT(strcmp(ls_module_param_name(a.m, np - 2), want) == 0);

    const int64_t B = x->shape[0];
    int64_t *rows = malloc((size_t)B * sizeof *rows);
    LS_REQUIRE(rows);
    for (int64_t i = 0; i < B; i++) rows[i] = 1000 + 7 * i;
    const ls_tensor *y;
    float plain[5];
    /* eval: the Dropout passes its input through */
    ls_module_set_training(a.m, 0);
    ls_module_set_training(d.m, 0);
    LS_REQUIRE_OK(ls_module_forward(a.m, x, &y));
    memcpy(plain, y->data, sizeof plain);
    LS_REQUIRE_OK(ls_module_forward(d.m, x, &y));
    LS_EXPECT(memcmp(plain, y->data, sizeof plain) == 0);
    ls_module_set_training(a.m, 1);
    ls_module_set_training(d.m, 1);
    /* training: keyed masks */
    double la = step(&a, x, labels, NULL);
    LS_REQUIRE_OK(ls_module_key_dropout(d.m, 3, rows, B));
    double l3 = step(&d, x, labels, NULL);
    double l3b = step(&d, x, labels, NULL);
    LS_REQUIRE_OK(ls_module_key_dropout(d.m, 4, rows, B));
    double l4 = step(&d, x, labels, NULL);
    printf("dropout: loss without %.6f, with (step 3) %.6f, again %.6f, step 4 %.6f\n", la, l3, l3b, l4);
    LS_EXPECT(l3 != la && l3 == l3b && l4 != l3);
    /* recomputed in backward: the same masks, the same gradients */
    LS_REQUIRE_OK(ls_module_key_dropout(d.m, 5, rows, B));
    LS_REQUIRE_OK(ls_module_key_dropout(k.m, 5, rows, B));
    double ld = step(&d, x, labels, NULL), lk = step(&k, x, labels, NULL);
    LS_EXPECT(ld == lk);
    for (int i = 0; i < np; i++)
        LS_EXPECT(memcmp(ls_module_grad(d.m, i)->data, ls_module_grad(k.m, i)->data,
                         ls_tensor_nbytes(ls_module_grad(d.m, i))) == 0);
    free(rows);
    drop(&a);
    drop(&d);
    drop(&k);
    rd.dropout = 1.0f;
    ls_module *bad = NULL;
    LS_EXPECT_ERR(ls_resnet_create(C, &rd, &bad), LS_ERR_INVALID_ARGUMENT, "dropout probability 1 is outside [0, 1)");
}

/* SyncBatchNorm: each rank holds half of the batch; rank 0 also runs plain BN over all of it. */
static void check_sync_bn(ls_comm *comm) {
    int rank = ls_comm_rank(comm), world = ls_comm_world(comm);
    int64_t Ch = 3, B = 4 * world, half = B / world;
    ls_rng r;
    ls_rng_init(&r, 77); /* the same data on every rank */
    ls_tensor *x = gc_tensor(C, LS_F64, 4, (int64_t[]){B, Ch, 3, 3}),
              *dy = gc_tensor(C, LS_F64, 4, (int64_t[]){B, Ch, 3, 3});
    gc_fill(&r, x, 0);
    gc_fill(&r, dy, 0);
    ls_batchnorm_config cfg = ls_batchnorm_defaults();
    cfg.relu = 1;
    ls_module *plain, *synced;
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F64, Ch, &cfg, "bn", &plain));
    cfg.sync = comm;
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F64, Ch, &cfg, "bn", &synced));
    int64_t per = Ch * 9;
    ls_tensor xs =
        ls_tensor_view((double *)x->data + rank * half * per, LS_F64, x->device, 4, (int64_t[]){half, Ch, 3, 3});
    ls_tensor dys =
        ls_tensor_view((double *)dy->data + rank * half * per, LS_F64, x->device, 4, (int64_t[]){half, Ch, 3, 3});
    const ls_tensor *yp, *ys, *dxp, *dxs;
    LS_REQUIRE_OK(ls_module_forward(plain, x, &yp));
    LS_REQUIRE_OK(ls_module_forward(synced, &xs, &ys));
    LS_REQUIRE_OK(ls_module_backward(plain, dy, 1, &dxp));
    LS_REQUIRE_OK(ls_module_backward(synced, &dys, 1, &dxs));
    double ey = 0, ex = 0;
    for (int64_t i = 0; i < half * per; i++) {
        ey = fmax(ey, fabs(((double *)ys->data)[i] - ((double *)yp->data)[rank * half * per + i]));
        ex = fmax(ex, fabs(((double *)dxs->data)[i] - ((double *)dxp->data)[rank * half * per + i]));
    }
    LS_EXPECT(ey < 1e-12);
    LS_EXPECT(ex < 1e-12);
    for (int i = 0; i < 2; i++) {
        ls_tensor *a = ls_cnn_buffer(plain, i, NULL, 0), *b = ls_cnn_buffer(synced, i, NULL, 0);
        for (int c = 0; c < Ch; c++) LS_EXPECT_NEAR(((double *)a->data)[c], ((double *)b->data)[c], 1e-12);
    }
    /* parameter gradients are this rank's share: summed over ranks they equal the plain ones */
    for (int p = 0; p < 2; p++) {
        ls_tensor *g = ls_module_grad(synced, p);
        double sum[3];
        memcpy(sum, g->data, sizeof sum);
        LS_REQUIRE_OK(ls_comm_allreduce_host(comm, sum, Ch, LS_F64, LS_REDUCE_SUM));
        for (int c = 0; c < Ch; c++) LS_EXPECT_NEAR(sum[c], ((double *)ls_module_grad(plain, p)->data)[c], 1e-12);
    }
    ls_module_destroy(plain);
    ls_module_destroy(synced);
    ls_tensor_destroy(x);
    ls_tensor_destroy(dy);
}

/* A trainer over a ResNet with synchronized batch norm: every rank must have samples in the same
 * micro-batches, or its batch norms' all-reduces meet another collective. */
static void check_sync_bn_uneven(ls_comm *comm) {
    int rank = ls_comm_rank(comm);
    enum { N = 8, F = 144 };
    static float x[N * F];
    int32_t y[N];
    for (int i = 0; i < N * F; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < N; i++) y[i] = i % 5;
    ls_dataset *d;
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 5, x, y, &d));
    ls_resnet_config rc = small_cfg(LS_F32);
    rc.sync_bn = comm;
    ls_module *m;
    LS_REQUIRE_OK(ls_resnet_create(C, &rc, &m));
    int np = ls_module_num_params(m);
    ls_tensor **p = calloc((size_t)np, sizeof *p), **g = calloc((size_t)np, sizeof *g);
    LS_REQUIRE(p && g);
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(C, np, p, g, &oc, &o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 2;
    tc.accum_steps = 2;
    tc.lr.base_lr = oc.lr;
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(C, comm, m, o, &tc, &t));
    int64_t idx[4] = {0, 1, 2, 3};
    /* counts 3 and 4: two micro-batches with samples on each rank, a short one on rank 0 */
    LS_REQUIRE_OK(ls_trainer_step(t, d, idx, rank == 0 ? 3 : 4, 7, NULL));
    /* counts 3 and 2: rank 1's second micro-batch is empty */
    LS_EXPECT_ERR(ls_trainer_step(t, d, idx, rank == 0 ? 3 : 2, 5, NULL), LS_ERR_INVALID_ARGUMENT,
                  "synchronized batch norm needs samples on every rank in the same micro-batches, but at step 2 "
                  "rank 1 has 2 samples (1 micro-batch of 2) and rank 0 has 3 (2)");
    /* one rank without samples, the other with one: refused too */
    LS_EXPECT_ERR(ls_trainer_step(t, d, idx, rank == 0 ? 1 : 0, 1, NULL), LS_ERR_INVALID_ARGUMENT,
                  "rank 1 has 0 samples (0 micro-batches of 2) and rank 0 has 1 (1)");
    /* the ranks are still paired: a full step trains */
    LS_REQUIRE_OK(ls_trainer_step(t, d, idx, 4, 8, NULL));
    LS_EXPECT(ls_trainer_num_steps(t) == 2);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(d);
    free(p);
    free(g);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_comm *comm;
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &comm));
    check_sync_bn(comm);
    if (ls_comm_world(comm) == 2) check_sync_bn_uneven(comm);
    if (ls_comm_world(comm) == 1) {
        ls_rng r;
        ls_rng_init(&r, 21);
        int64_t B = 16;
        ls_tensor *x = gc_tensor(C, LS_F32, 2, (int64_t[]){B, 144}), *labels = gc_tensor(C, LS_I32, 1, (int64_t[]){B});
        gc_fill(&r, x, 0);
        for (int64_t i = 0; i < B; i++) ((int32_t *)labels->data)[i] = (int32_t)(i % 5);
        check_checkpointing(x, labels);
        check_precision(x, labels);
        check_eval(x);
        check_dropout(x, labels);
        ls_tensor_destroy(x);
        ls_tensor_destroy(labels);
    }
    ls_comm_destroy(comm);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
