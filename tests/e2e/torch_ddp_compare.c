/* torch_ddp_compare.c: lockstep's side of torch_ddp_compare.py (a manual cross-check against
 * PyTorch DDP, not a CTest: it needs torch). Under mpirun, trains an MLP or a small ResNet on 97
 * synthetic samples with the given optimizer, accumulation, clipping and steps, each rank on the
 * indices written to OUT/idx.txt, and writes OUT/init.safetensors (the weights after the trainer's
 * broadcast), OUT/data.safetensors, then per rank OUT/own_rankR.safetensors (parameters, batch-norm
 * buffers and the eval-mode logits of samples 0..15) and OUT/bcast_rankR.safetensors (the same
 * after ls_cnn_broadcast_buffers). PROBE_NESTEROV, PROBE_DAMP, PROBE_LS, PROBE_SHARD set nesterov,
 * dampening, label smoothing and a sharded optimizer with that shard_reduce. */
#include <stdio.h>
#include <stdlib.h>

#include "cnn.h"
#include "checkpoint.h"
#include "comm.h"
#include "data.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"
#include "mlp_run.h"

static void save_all(const char *path, ls_module *m, int n_extra, const ls_tensor *extra, const char **extra_names) {
    int np = ls_module_num_params(m), nb = ls_cnn_num_buffers(m);
    const char *names[256];
    const ls_tensor *ts[256];
    static char bn[256][128];
    int k = 0;
    for (int i = 0; i < np; i++) {
        names[k] = ls_module_param_name(m, i);
        ts[k++] = ls_module_param(m, i);
    }
    for (int i = 0; i < nb; i++) {
        ts[k] = ls_cnn_buffer(m, i, bn[i], 128);
        names[k] = bn[i];
        k++;
    }
    for (int i = 0; i < n_extra; i++) {
        names[k] = extra_names[i];
        ts[k++] = &extra[i];
    }
    LS_REQUIRE_OK(ls_safetensors_write(path, k, names, ts, NULL, NULL));
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "torch_ddp_compare OUT mlp|resnet|resnetsync sgd|mom|adamw ACCUM CLIP STEPS B equal|unequal\n");
        return 2;
    }
    const char *out = argv[1], *model = argv[2], *opt = argv[3];
    int accum = atoi(argv[4]);
    double clip = atof(argv[5]);
    int steps = atoi(argv[6]);
    int64_t B = atoll(argv[7]);
    int unequal = !strcmp(argv[8], "unequal");
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    ls_ctx *C;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_comm *W;
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &W));
    int rank = ls_comm_rank(W), world = ls_comm_world(W);
    int64_t N = 97, F = 64;
    int32_t *y = malloc(sizeof(int32_t) * N);
    float *x = mlp_points(N, F, 5, y);
    ls_dataset *D;
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &D));
    ls_module *m;
    if (!strcmp(model, "mlp")) {
        int64_t sizes[3] = {F, 16, 10};
        LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 3, sizes, LS_ACT_RELU, 100 + rank, &m));
    } else {
        ls_resnet_config rc;
        memset(&rc, 0, sizeof rc);
        rc.param_dtype = rc.act_dtype = LS_F32;
        rc.in_channels = 1;
        rc.in_h = 8;
        rc.in_w = 8;
        rc.n_stages = 2;
        rc.widths[0] = 4;
        rc.widths[1] = 8;
        rc.blocks = 1;
        rc.num_classes = 10;
        rc.seed = 100 + rank;
        rc.sync_bn = !strcmp(model, "resnetsync") ? W : NULL;
        LS_REQUIRE_OK(ls_resnet_create(C, &rc, &m));
    }
    int np = ls_module_num_params(m);
    ls_tensor *pa[256], *ga[256];
    for (int i = 0; i < np; i++) {
        pa[i] = ls_module_param(m, i);
        ga[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(!strcmp(opt, "adamw") ? LS_OPTIM_ADAMW : LS_OPTIM_SGD);
    if (!strcmp(opt, "sgd")) {
        oc.momentum = 0;
        oc.lr = 0.1f;
        oc.weight_decay = 0;
    } else if (!strcmp(opt, "mom")) {
        oc.momentum = 0.9f;
        oc.lr = 0.05f;
        oc.weight_decay = 1e-3f;
    } else {
        oc.lr = 1e-2f;
        oc.weight_decay = 0.05f;
    }
    if (getenv("PROBE_NESTEROV")) oc.nesterov = 1;
    if (getenv("PROBE_DAMP")) oc.dampening = (float)atof(getenv("PROBE_DAMP"));
    if (getenv("PROBE_SHARD")) {
        oc.shard_rank = rank;
        oc.shard_world = world;
    }
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(C, np, pa, ga, &oc, &o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = accum;
    tc.lr = (ls_lr_schedule){oc.lr, 0, 0, 0, LS_LR_CONSTANT};
    tc.clip_grad_norm = clip;
    if (getenv("PROBE_SHARD")) tc.shard_reduce = atoi(getenv("PROBE_SHARD"));
    if (getenv("PROBE_LS")) tc.label_smoothing = atof(getenv("PROBE_LS"));
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(C, W, m, o, &tc, &t));
    char path[512];
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/init.safetensors", out);
        save_all(path, m, 0, NULL, NULL);
        int64_t xs[2] = {N, F}, ys[1] = {N};
        ls_tensor dt[2] = {ls_tensor_view(x, LS_F32, ls_device_cpu(), 2, xs),
                           ls_tensor_view(y, LS_I32, ls_device_cpu(), 1, ys)};
        const char *dn[2] = {"x", "y"};
        const ls_tensor *dp[2] = {&dt[0], &dt[1]};
        snprintf(path, sizeof path, "%s/data.safetensors", out);
        LS_REQUIRE_OK(ls_safetensors_write(path, 2, dn, dp, NULL, NULL));
    }
    FILE *fi = NULL;
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/idx.txt", out);
        fi = fopen(path, "w");
    }
    int64_t per = B * accum, idx[4096];
    for (int s = 0; s < steps; s++) {
        int64_t counts[16], global = 0;
        for (int r = 0; r < world; r++) {
            counts[r] = per;
            if (unequal && s == steps - 1 && r == world - 1) counts[r] = per / 2 - 1;
            if (unequal && s == steps - 1 && r == world - 1 && accum > 1) counts[r] = B + 1;
            global += counts[r];
        }
        int64_t base = 0;
        for (int r = 0; r < world; r++) {
            if (fi) {
                fprintf(fi, "%d %d %lld", s, r, (long long)counts[r]);
                for (int64_t j = 0; j < counts[r]; j++)
                    fprintf(fi, " %lld", (long long)(((s * 31 + base + j) * 7) % N));
                fprintf(fi, "\n");
            }
            if (r == rank)
                for (int64_t j = 0; j < counts[r]; j++) idx[j] = ((s * 31 + base + j) * 7) % N;
            base += counts[r];
        }
        ls_step_stats st;
        LS_REQUIRE_OK(ls_trainer_step(t, D, idx, counts[rank], global, &st));
        if (rank == 0) printf("step %d loss_sum %.9g grad_norm %.9g\n", s, st.loss_sum, st.grad_norm);
    }
    if (fi) fclose(fi);
    /* eval-mode logits of the first 16 samples, own buffers then rank 0's */
    int64_t xs[2] = {16, F}, lsh[2] = {16, 10};
    ls_tensor xin = ls_tensor_view(x, LS_F32, ls_device_cpu(), 2, xs);
    double lsum = 0;
    int64_t corr = 0, all[16];
    for (int i = 0; i < 16; i++) all[i] = i;
    LS_REQUIRE_OK(ls_trainer_evaluate(t, D, all, 16, &lsum, &corr));
    printf("rank %d evaluate own buffers: loss_sum %.9g correct %lld\n", rank, lsum, (long long)corr);
    ls_module_set_training(m, 0);
    const ls_tensor *yo;
    LS_REQUIRE_OK(ls_module_forward(m, &xin, &yo));
    ls_tensor ex = ls_tensor_view(yo->data, LS_F32, ls_device_cpu(), 2, lsh);
    const char *en[1] = {"eval"};
    snprintf(path, sizeof path, "%s/own_rank%d.safetensors", out, rank);
    save_all(path, m, 1, &ex, en);
    LS_REQUIRE_OK(ls_cnn_broadcast_buffers(W, m));
    LS_REQUIRE_OK(ls_module_forward(m, &xin, &yo));
    ex = ls_tensor_view(yo->data, LS_F32, ls_device_cpu(), 2, lsh);
    snprintf(path, sizeof path, "%s/bcast_rank%d.safetensors", out, rank);
    save_all(path, m, 1, &ex, en);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(D);
    ls_comm_destroy(W);
    ls_ctx_destroy(C);
    return 0;
}
