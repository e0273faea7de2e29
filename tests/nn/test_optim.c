/* test_optim.c: the optimizer object over tensors (state slots, step count, errors), steps
 * skipped by a flag in device memory (ls_optimizer_step_unless: bitwise the run without the
 * skipped steps, the count kept right across both kinds of step and set_num_steps), the warmup +
 * cosine schedule's values, gradient clipping, and weight decay per parameter (no_decay_1d and
 * ls_optimizer_set_weight_decay: bitwise the optimizers of one decay each, as torch.optim's
 * parameter groups), and sharding (ZeRO stage 1: ZeroRedundancyOptimizer's partition, the state of
 * other ranks' parameters freed, its steps bitwise an unsharded optimizer's on its own parameters and
 * leaving the others alone, held states for checkpoints, errors). */
#include "../kernels/gradcheck.h"
#include "optim.h"

int main(void) {
    ls_ctx *C;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_tensor *p = gc_tensor(C, LS_F32, 1, (int64_t[]){3}), *g = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
    float *pd = p->data, *gd = g->data;
    pd[0] = 1;
    pd[1] = 2;
    pd[2] = 3;
    gd[0] = 1;
    gd[1] = -1;
    gd[2] = 0.5f;
    ls_optim_config cfg = ls_optim_defaults(LS_OPTIM_SGD);
    cfg.momentum = 0.5f;
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &p, &g, &cfg, &o));
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
    /* buf1 = g, buf2 = 0.5 g + g = 1.5 g: p = p0 - 0.1 g - 0.15 g */
    LS_EXPECT_NEAR(pd[0], 1 - 0.25, 1e-6);
    LS_EXPECT_NEAR(pd[2], 3 - 0.125, 1e-6);
    int64_t steps = -1;
    LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &steps));
    LS_EXPECT(steps == 2);
    LS_EXPECT(ls_optimizer_state(o, 0, 0) != NULL && ls_optimizer_state(o, 0, 1) == NULL);
    LS_EXPECT_NEAR(((float *)ls_optimizer_state(o, 0, 0)->data)[0], 1.5, 1e-6);
    ls_optimizer_destroy(o);
    cfg = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &p, &g, &cfg, &o));
    LS_EXPECT(ls_optimizer_state(o, 0, 1) != NULL);
    float before = pd[1];
    LS_REQUIRE_OK(ls_optimizer_step(o, 1e-3f));
    /* first AdamW step moves each weight by about lr against the gradient's sign (plus decay) */
    LS_EXPECT_NEAR(pd[1], before * (1 - 1e-3 * 0.01) + 1e-3, 1e-6);
    ls_optimizer_destroy(o);
    /* AdamW (bias correction) and SGD with momentum (its first step): steps 0, 2, 3 taken and step 1
     * skipped by the flag, against steps 0, 2, 3 taken by a second optimizer; then a plain step
     * and a set count, each continued by a counted step */
    for (int kind = 0; kind < 2; kind++) {
        ls_optim_config oc = ls_optim_defaults(kind ? LS_OPTIM_ADAMW : LS_OPTIM_SGD);
        ls_tensor *pa = gc_tensor(C, LS_F32, 1, (int64_t[]){3}), *pb = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
        ls_tensor *ga = gc_tensor(C, LS_F32, 1, (int64_t[]){3}), *gb = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
        ls_optimizer *oa, *ob;
        LS_REQUIRE_OK(ls_optimizer_create(C, 1, &pa, &ga, &oc, &oa));
        LS_REQUIRE_OK(ls_optimizer_create(C, 1, &pb, &gb, &oc, &ob));
        double *flag = NULL; /* "device" memory: the CPU context's */
        LS_REQUIRE_OK(ls_alloc(C->alloc, sizeof *flag, "skip flag", (void **)&flag));
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < 3; i++) ((float *)ga->data)[i] = ((float *)gb->data)[i] = 0.3f * (float)(k + i) - 0.4f;
            *flag = k == 1;
            LS_REQUIRE_OK(ls_optimizer_step_unless(oa, 0.01f, flag));
            if (k != 1) LS_REQUIRE_OK(ls_optimizer_step(ob, 0.01f));
        }
        int64_t na = -1, nb = -1;
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(oa, &na));
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(ob, &nb));
        LS_EXPECT(na == 3 && nb == 3);
        LS_EXPECT(memcmp(pa->data, pb->data, 3 * sizeof(float)) == 0);
        LS_EXPECT(memcmp(ls_optimizer_state(oa, 0, 0)->data, ls_optimizer_state(ob, 0, 0)->data, 12) == 0);
        LS_REQUIRE_OK(ls_optimizer_step(oa, 0.01f)); /* host counted: 4 */
        *flag = 0;
        LS_REQUIRE_OK(ls_optimizer_step_unless(oa, 0.01f, flag)); /* 5 */
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(oa, &na));
        LS_EXPECT(na == 5);
        ls_optimizer_set_num_steps(oa, 100);
        LS_REQUIRE_OK(ls_optimizer_step_unless(oa, 0.01f, flag));
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(oa, &na));
        LS_EXPECT(na == 101);
        LS_EXPECT_ERR(ls_optimizer_step_unless(oa, 0.01f, NULL), LS_ERR_INVALID_ARGUMENT, "the skip flag is NULL");
        ls_free(C->alloc, flag);
        ls_optimizer_destroy(oa);
        ls_optimizer_destroy(ob);
        ls_tensor_destroy(pa), ls_tensor_destroy(pb), ls_tensor_destroy(ga), ls_tensor_destroy(gb);
    }
    /* weight decay per parameter: a matrix w [2, 3] and a bias b [3] in one optimizer, against one
     * optimizer each with the decay that parameter should get; both kinds, host- and device-counted
     * steps (the latter through ls_optimizer_step_unless) */
    for (int kind = 0; kind < 2; kind++)
        for (int counted = 0; counted < 2; counted++)
            for (int how = 0; how < 3; how++) { /* no_decay_1d; set_weight_decay on b; set back to uniform */
                ls_optim_config oc = ls_optim_defaults(kind ? LS_OPTIM_ADAMW : LS_OPTIM_SGD);
                oc.weight_decay = 0.2f;
                oc.momentum = 0.5f;
                oc.no_decay_1d = how == 0;
                ls_tensor *t[2][2], *gr[2][2]; /* [grouped, alone][w, b] */
                for (int a = 0; a < 2; a++) {
                    t[a][0] = gc_tensor(C, LS_F32, 2, (int64_t[]){2, 3});
                    gr[a][0] = gc_tensor(C, LS_F32, 2, (int64_t[]){2, 3});
                    t[a][1] = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
                    gr[a][1] = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
                    for (int j = 0; j < 2; j++)
                        for (int i = 0; i < (j ? 3 : 6); i++) ((float *)t[a][j]->data)[i] = 0.5f + 0.25f * (float)i;
                }
                ls_optimizer *grouped, *alone[2];
                LS_REQUIRE_OK(ls_optimizer_create(C, 2, t[0], gr[0], &oc, &grouped));
                const float want_b = how == 0 ? 0.0f : how == 1 ? 0.7f : 0.2f;
                if (how >= 1) LS_REQUIRE_OK(ls_optimizer_set_weight_decay(grouped, 1, 0.7f));
                if (how == 2) LS_REQUIRE_OK(ls_optimizer_set_weight_decay(grouped, 1, 0.2f));
                LS_EXPECT(ls_optimizer_weight_decay(grouped, 0) == 0.2f);
                LS_EXPECT(ls_optimizer_weight_decay(grouped, 1) == want_b);
                for (int j = 0; j < 2; j++) {
                    ls_optim_config one = oc;
                    one.no_decay_1d = 0;
                    one.weight_decay = j ? want_b : 0.2f;
                    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &t[1][j], &gr[1][j], &one, &alone[j]));
                }
                double *flag = NULL;
                LS_REQUIRE_OK(ls_alloc(C->alloc, sizeof *flag, "skip flag", (void **)&flag));
                *flag = 0;
                for (int k = 0; k < 3; k++) {
                    for (int a = 0; a < 2; a++)
                        for (int j = 0; j < 2; j++)
                            for (int i = 0; i < (j ? 3 : 6); i++)
                                ((float *)gr[a][j]->data)[i] = 0.1f * (float)(k + i + j) - 0.3f;
                    if (counted) {
                        LS_REQUIRE_OK(ls_optimizer_step_unless(grouped, 0.05f, flag));
                        for (int j = 0; j < 2; j++) LS_REQUIRE_OK(ls_optimizer_step_unless(alone[j], 0.05f, flag));
                    } else {
                        LS_REQUIRE_OK(ls_optimizer_step(grouped, 0.05f));
                        for (int j = 0; j < 2; j++) LS_REQUIRE_OK(ls_optimizer_step(alone[j], 0.05f));
                    }
                }
                for (int j = 0; j < 2; j++) {
                    size_t bytes = (size_t)(j ? 3 : 6) * sizeof(float);
                    if (memcmp(t[0][j]->data, t[1][j]->data, bytes) != 0) {
                        fprintf(stderr, "weight decay per parameter: %s, %s, case %d: %s differs\n",
                                kind ? "adamw" : "sgd", counted ? "counted" : "host", how, j ? "b" : "w");
                        ls_test_failures++;
                    }
                }
                ls_free(C->alloc, flag);
                ls_optimizer_destroy(grouped);
                for (int j = 0; j < 2; j++) ls_optimizer_destroy(alone[j]);
                for (int a = 0; a < 2; a++)
                    for (int j = 0; j < 2; j++) ls_tensor_destroy(t[a][j]), ls_tensor_destroy(gr[a][j]);
            }
    {
        /* torch.optim.SGD, no momentum, lr 0.1, weight decay 0.5, zero gradients, the 1-D
         * parameter left out of the decay: w *= 1 - 0.05 and b stays */
        ls_tensor *tw = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 2}), *tb = gc_tensor(C, LS_F32, 1, (int64_t[]){2});
        ls_tensor *gw = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 2}), *gb = gc_tensor(C, LS_F32, 1, (int64_t[]){2});
        ls_tensor *tl[2] = {tw, tb}, *gl[2] = {gw, gb};
        for (int i = 0; i < 2; i++) {
            ((float *)tw->data)[i] = ((float *)tb->data)[i] = 2.0f;
            ((float *)gw->data)[i] = ((float *)gb->data)[i] = 0.0f;
        }
        ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
        oc.momentum = 0;
        oc.weight_decay = 0.5f;
        oc.no_decay_1d = 1;
        LS_REQUIRE_OK(ls_optimizer_create(C, 2, tl, gl, &oc, &o));
        LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
        LS_EXPECT_NEAR(((float *)tw->data)[1], 2.0 * 0.95, 1e-6);
        LS_EXPECT(((float *)tb->data)[1] == 2.0f);
        LS_EXPECT_ERR(ls_optimizer_set_weight_decay(o, 2, 0.1f), LS_ERR_INVALID_ARGUMENT,
                      "ls_optimizer_set_weight_decay: parameter 2 is not in 0..1");
        LS_EXPECT_ERR(ls_optimizer_set_weight_decay(o, -1, 0.1f), LS_ERR_INVALID_ARGUMENT, "parameter -1 is not in");
        LS_EXPECT_ERR(ls_optimizer_set_weight_decay(o, 0, -0.1f), LS_ERR_INVALID_ARGUMENT,
                      "weight decay -0.1 for parameter 0 must be finite and >= 0");
        LS_EXPECT_ERR(ls_optimizer_set_weight_decay(o, 1, NAN), LS_ERR_INVALID_ARGUMENT, "must be finite");
        LS_EXPECT_ERR(ls_optimizer_set_weight_decay(NULL, 0, 0.1f), LS_ERR_INVALID_ARGUMENT, "the optimizer is NULL");
        LS_EXPECT(isnan(ls_optimizer_weight_decay(o, 2)) && isnan(ls_optimizer_weight_decay(NULL, 0)));
        LS_EXPECT(ls_optimizer_weight_decay(o, 0) == 0.5f && ls_optimizer_weight_decay(o, 1) == 0.0f);
        ls_optimizer_destroy(o);
        ls_tensor_destroy(tw), ls_tensor_destroy(tb), ls_tensor_destroy(gw), ls_tensor_destroy(gb);
    }
    /* sharding: parameters of 3, 10, 10, 4, 1 elements. ZeroRedundancyOptimizer's partition over 2
     * ranks, largest first to the least loaded: 1 -> r0, 2 -> r1, 3 -> r0 (tie: lower), 0 -> r1, 4 -> r1;
     * over 3: 1 -> r0, 2 -> r1, 3 -> r2, 0 -> r2, 4 -> r2 */
    for (int kind = 0; kind < 2; kind++) {
        static const int64_t sz[5] = {3, 10, 10, 4, 1};
        static const int own2[5] = {1, 0, 1, 0, 1}, own3[5] = {2, 0, 1, 2, 2};
        ls_tensor *tp[2][5], *tg[2][5]; /* [unsharded, sharded as rank 0 of 2] */
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < 5; i++) {
                tp[a][i] = gc_tensor(C, LS_F32, 1, &sz[i]);
                tg[a][i] = gc_tensor(C, LS_F32, 1, &sz[i]);
                for (int j = 0; j < sz[i]; j++) ((float *)tp[a][i]->data)[j] = 0.5f + 0.125f * (float)(i + j);
            }
        ls_optim_config oc = ls_optim_defaults(kind ? LS_OPTIM_ADAMW : LS_OPTIM_SGD);
        oc.weight_decay = 0.1f;
        oc.no_decay_1d = 0;
        ls_optimizer *full, *part, *three;
        LS_REQUIRE_OK(ls_optimizer_create(C, 5, tp[0], tg[0], &oc, &full));
        LS_REQUIRE_OK(ls_optimizer_create(C, 5, tp[1], tg[1], &oc, &part));
        LS_REQUIRE_OK(ls_optimizer_create(C, 5, tp[1], tg[1], &oc, &three));
        LS_EXPECT(ls_optimizer_owner(part, 0) == -1 && ls_optimizer_num_state_slots(part) == (kind ? 2 : 1));
        LS_REQUIRE_OK(ls_optimizer_shard(three, 0, 1)); /* one rank: nothing */
        LS_EXPECT(ls_optimizer_owner(three, 0) == -1);
        ls_memory_stats m0, m1;
        ls_allocator_stats(C->alloc, &m0);
        LS_REQUIRE_OK(ls_optimizer_shard(part, 0, 2));
        ls_allocator_stats(C->alloc, &m1);
        LS_REQUIRE_OK(ls_optimizer_shard(three, 2, 3));
        const int slots = kind ? 2 : 1;
        /* the states of parameters 0, 2, 4 (14 elements) freed */
        LS_EXPECT(m1.frees - m0.frees == (uint64_t)(3 * slots));
        LS_EXPECT(m0.live_bytes - m1.live_bytes >= (size_t)(14 * slots) * sizeof(float));
        for (int i = 0; i < 5; i++) {
            LS_EXPECT(ls_optimizer_owner(part, i) == own2[i] && ls_optimizer_owner(three, i) == own3[i]);
            for (int sl = 0; sl < slots; sl++) {
                LS_EXPECT((ls_optimizer_state(part, i, sl) != NULL) == (own2[i] == 0));
                LS_EXPECT((ls_optimizer_state(three, i, sl) != NULL) == (own3[i] == 2));
            }
        }
        ls_optimizer_destroy(three);
        /* sharded from the start (the config): the other ranks' state never allocated */
        ls_optim_config sc = oc;
        sc.shard_rank = 1;
        sc.shard_world = 2;
        ls_optimizer *born;
        ls_allocator_stats(C->alloc, &m0);
        LS_REQUIRE_OK(ls_optimizer_create(C, 5, tp[1], tg[1], &sc, &born));
        ls_allocator_stats(C->alloc, &m1);
        LS_EXPECT(m1.allocs - m0.allocs == (uint64_t)(1 + 3 * slots)); /* its step count, parameters 0, 2, 4 */
        for (int i = 0; i < 5; i++) {
            LS_EXPECT(ls_optimizer_owner(born, i) == own2[i]);
            LS_EXPECT((ls_optimizer_state(born, i, 0) != NULL) == (own2[i] == 1));
        }
        ls_optimizer_destroy(born);
        sc.shard_rank = 2;
        LS_EXPECT_ERR(ls_optimizer_create(C, 5, tp[1], tg[1], &sc, &born), LS_ERR_INVALID_ARGUMENT,
                      "optimizer: shard_rank 2 is not a rank of shard_world 2");
        sc.shard_rank = 0;
        sc.shard_world = -1;
        LS_EXPECT_ERR(ls_optimizer_create(C, 5, tp[1], tg[1], &sc, &born), LS_ERR_INVALID_ARGUMENT,
                      "shard_rank 0 is not a rank of shard_world -1");
        LS_REQUIRE_OK(ls_optimizer_shard(part, 0, 2)); /* again the same: nothing */
        LS_EXPECT_ERR(ls_optimizer_shard(part, 1, 3), LS_ERR_INVALID_ARGUMENT,
                      "ls_optimizer_shard: already sharded as rank 0 of 2, not again as rank 1 of 3");
        LS_EXPECT_ERR(ls_optimizer_shard(part, 2, 2), LS_ERR_INVALID_ARGUMENT, "ls_optimizer_shard: rank 2 of 2 ranks");
        LS_EXPECT_ERR(ls_optimizer_shard(NULL, 0, 2), LS_ERR_INVALID_ARGUMENT, "the optimizer is NULL");
        LS_EXPECT(ls_optimizer_owner(part, 5) == -1 && ls_optimizer_owner(NULL, 0) == -1);
        for (int k = 0; k < 3; k++) {
            if (k == 1) { /* held states: the others' allocated, zero, and still not stepped */
                LS_REQUIRE_OK(ls_optimizer_hold_states(part, 1));
                LS_EXPECT_ERR(ls_optimizer_shard(part, 1, 3), LS_ERR_INVALID_ARGUMENT, "already sharded");
                for (int i = 0; i < 5; i++)
                    for (int sl = 0; sl < slots; sl++) {
                        ls_tensor *st = ls_optimizer_state(part, i, sl);
                        LS_EXPECT(st != NULL);
                        if (st && own2[i] != 0) LS_EXPECT(((float *)st->data)[sz[i] - 1] == 0.0f);
                    }
            }
            if (k == 2) LS_REQUIRE_OK(ls_optimizer_hold_states(part, 0));
            for (int a = 0; a < 2; a++)
                for (int i = 0; i < 5; i++)
                    for (int j = 0; j < sz[i]; j++) ((float *)tg[a][i]->data)[j] = 0.05f * (float)(k + i - j);
            LS_REQUIRE_OK(ls_optimizer_step(full, 0.1f));
            LS_REQUIRE_OK(ls_optimizer_step(part, 0.1f));
        }
        for (int i = 0; i < 5; i++) {
            size_t b = (size_t)sz[i] * sizeof(float);
            LS_EXPECT(ls_optimizer_state(part, i, 0) == NULL || own2[i] == 0);
            if (own2[i] == 0) { /* stepped as by the unsharded optimizer, bit for bit, its state too */
                LS_EXPECT(memcmp(tp[0][i]->data, tp[1][i]->data, b) == 0);
                LS_EXPECT(memcmp(ls_optimizer_state(full, i, 0)->data, ls_optimizer_state(part, i, 0)->data, b) == 0);
            } else { /* another rank's: left as it was */
                LS_EXPECT(((float *)tp[1][i]->data)[0] == 0.5f + 0.125f * (float)i);
                LS_EXPECT(memcmp(tp[0][i]->data, tp[1][i]->data, b) != 0);
            }
        }
        int64_t ns = -1;
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(part, &ns));
        LS_EXPECT(ns == 3);
        ls_optimizer_destroy(full);
        ls_optimizer_destroy(part);
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < 5; i++) ls_tensor_destroy(tp[a][i]), ls_tensor_destroy(tg[a][i]);
    }
    /* each hyperparameter named, infinities refused: an inf weight decay or momentum trained into NaN,
     * an inf eps into updates of 0, a NaN or negative dampening was never looked at */
    const struct {
        ls_optim_kind kind;
        float *field; /* cfg's, set to v */
        float v;
        const char *want;
    } bad_hp[] = {
        {LS_OPTIM_ADAMW, &cfg.beta1, 1.5f, "optimizer: beta1 1.5 must be from 0 to below 1"},
        {LS_OPTIM_SGD, &cfg.weight_decay, INFINITY, "optimizer: weight_decay inf must be finite and >= 0"},
        {LS_OPTIM_SGD, &cfg.momentum, INFINITY, "optimizer: momentum inf must be finite and >= 0"},
        {LS_OPTIM_SGD, &cfg.lr, INFINITY, "optimizer: lr inf must be finite and >= 0"},
        {LS_OPTIM_SGD, &cfg.dampening, NAN, "optimizer: dampening nan must be from 0 to 1"},
        {LS_OPTIM_SGD, &cfg.dampening, -1, "optimizer: dampening -1 must be from 0 to 1"},
        {LS_OPTIM_ADAMW, &cfg.eps, INFINITY, "optimizer: eps inf must be finite and >= 0"},
        {LS_OPTIM_ADAMW, &cfg.beta2, 1, "optimizer: beta2 1 must be from 0 to below 1"},
    };
    for (size_t i = 0; i < sizeof bad_hp / sizeof bad_hp[0]; i++) {
        cfg = ls_optim_defaults(bad_hp[i].kind);
        *bad_hp[i].field = bad_hp[i].v;
        LS_EXPECT_ERR(ls_optimizer_create(C, 1, &p, &g, &cfg, &o), LS_ERR_INVALID_ARGUMENT, bad_hp[i].want);
    }
    cfg = ls_optim_defaults(LS_OPTIM_SGD);
    cfg.dampening = 1;
    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &p, &g, &cfg, &o));
    ls_optimizer_destroy(o);
    ls_tensor *g2 = gc_tensor(C, LS_F32, 1, (int64_t[]){4});
    cfg = ls_optim_defaults(LS_OPTIM_SGD);
    LS_EXPECT_ERR(ls_optimizer_create(C, 1, &p, &g2, &cfg, &o), LS_ERR_INVALID_ARGUMENT,
                  "parameter 0 is [3] f32 cpu but its gradient is [4] f32 cpu");
    ls_optim_kind k;
    LS_EXPECT_ERR(ls_optim_kind_parse("lamb", &k), LS_ERR_INVALID_ARGUMENT, "'lamb' is not one of sgd, adamw");

    ls_lr_schedule s = {1.0f, 0.1f, 10, 110, LS_LR_COSINE};
    LS_EXPECT_NEAR(ls_lr_at(&s, 0), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 9), 1.0, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 10), 1.0, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 60), 0.55, 1e-6);
    LS_EXPECT_NEAR(ls_lr_at(&s, 110), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 500), 0.1, 1e-7);
    /* linear: min + (base - min) (1 - t), t the fraction of the decay's steps done; the same warmup */
    s.kind = LS_LR_LINEAR;
    LS_EXPECT_NEAR(ls_lr_at(&s, 0), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 10), 1.0, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 35), 0.775, 1e-6);
    LS_EXPECT_NEAR(ls_lr_at(&s, 60), 0.55, 1e-6);
    LS_EXPECT_NEAR(ls_lr_at(&s, 85), 0.325, 1e-6);
    LS_EXPECT_NEAR(ls_lr_at(&s, 110), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 500), 0.1, 1e-7);
    /* Hugging Face's get_linear_schedule_with_warmup(opt, 10, 110): lr * max(0, (110 - step) / 100) */
    ls_lr_schedule hf = {2.0f, 0.0f, 10, 110, LS_LR_LINEAR};
    for (int64_t st = 10; st <= 120; st += 7)
        LS_EXPECT_NEAR(ls_lr_at(&hf, st), 2.0 * fmax(0.0, (110.0 - (double)st) / 100.0), 1e-6);
    s.kind = LS_LR_CONSTANT; /* after the warmup: the base lr */
    LS_EXPECT_NEAR(ls_lr_at(&s, 4), 0.5, 1e-7);
    LS_EXPECT(ls_lr_at(&s, 10) == 1.0f && ls_lr_at(&s, 109) == 1.0f && ls_lr_at(&s, 1000) == 1.0f);
    ls_lr_kind lk;
    LS_REQUIRE_OK(ls_lr_kind_parse("linear", &lk));
    LS_EXPECT(lk == LS_LR_LINEAR && strcmp(ls_lr_kind_name(LS_LR_CONSTANT), "constant") == 0);
    LS_EXPECT(ls_lr_kind_name((ls_lr_kind)3) == NULL);
    LS_EXPECT_ERR(ls_lr_kind_parse("step", &lk), LS_ERR_INVALID_ARGUMENT,
                  "learning-rate schedule 'step' is not one of cosine, linear, constant");

    /* clipping: norm of (3, 4) is 5; clip to 1 */
    gd[0] = 3;
    gd[1] = 4;
    gd[2] = 0;
    double norm;
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, 1.0, &norm));
    LS_EXPECT_NEAR(norm, 5, 1e-6);
    LS_EXPECT_NEAR(gd[0], 0.6, 1e-5);
    LS_EXPECT_NEAR(gd[1], 0.8, 1e-5);
    /* max_norm 0 measures only (inf: never clips); a negative or NaN one is refused (it did
     * nothing, silently: PyTorch's would flip or poison the gradients) */
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, 0.0, &norm));
    LS_EXPECT_NEAR(norm, 1, 1e-5);
    LS_EXPECT_NEAR(gd[0], 0.6, 1e-5);
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, INFINITY, &norm));
    LS_EXPECT_NEAR(gd[1], 0.8, 1e-5);
    LS_EXPECT_ERR(ls_clip_grad_norm(C, 1, &g, -1.0, &norm), LS_ERR_INVALID_ARGUMENT,
                  "ls_clip_grad_norm: max_norm -1 must be >= 0 (0: measures the norm only)");
    LS_EXPECT_ERR(ls_clip_grad_norm(C, 1, &g, NAN, &norm), LS_ERR_INVALID_ARGUMENT,
                  "ls_clip_grad_norm: max_norm nan must be >= 0");
    LS_EXPECT_NEAR(gd[0], 0.6, 1e-5);
    gd[2] = NAN;
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, 1.0, &norm));
    LS_EXPECT(isnan(norm));
    ls_tensor_destroy(p);
    ls_tensor_destroy(g);
    ls_tensor_destroy(g2);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
