/* test_label_smoothing.c: ls_train_config.label_smoothing through the trainer. A features-40-10
 * MLP's logits are computed here in double from its parameters; then a step's loss_sum must be
 * torch.nn.CrossEntropyLoss(label_smoothing=e)'s sum, (1 - e) nll + e mean_j(-log p_j), and the
 * step's update of the last bias must be -lr times the mean of softmax - ((1 - e) onehot + e / 10)
 * (SGD's first step: the momentum buffer is the gradient); ls_trainer_evaluate's loss is the plain
 * cross-entropy, and the next step is smoothed again. A trainer with label smoothing 1 is refused.
 * Args: [cpu|cuda] (cuda: exits 77 where no GPU is usable). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 96
#define F 12
#define B 32
#define H 40
#define K 10

static ls_ctx *C;

/* Per sample of idx: the plain loss, the smoothed loss, and (added over the batch, / B) the
 * gradient of the mean smoothed loss with respect to the last bias; from parameters p. */
static void reference(const float *p, const float *x, const int32_t *y, const int64_t *idx, double eps,
                      double *plain_sum, double *smooth_sum, double db[K]) {
    const float *w1 = p, *b1 = w1 + H * F, *w2 = b1 + H, *b2 = w2 + K * H;
    *plain_sum = *smooth_sum = 0;
    for (int k = 0; k < K; k++) db[k] = 0;
    for (int i = 0; i < B; i++) {
        const float *xi = x + idx[i] * F;
        double h[H], z[K], mx = -INFINITY, se = 0, mean_nlp = 0;
        for (int j = 0; j < H; j++) {
            double a = b1[j];
            for (int f = 0; f < F; f++) a += (double)w1[j * F + f] * xi[f];
            h[j] = a > 0 ? a : 0;
        }
        for (int k = 0; k < K; k++) {
            double a = b2[k];
            for (int j = 0; j < H; j++) a += (double)w2[k * H + j] * h[j];
            z[k] = a;
            mx = a > mx ? a : mx;
        }
        for (int k = 0; k < K; k++) se += exp(z[k] - mx);
        const double lse = mx + log(se);
        for (int k = 0; k < K; k++) mean_nlp += (lse - z[k]) / K;
        const int label = y[idx[i]];
        *plain_sum += lse - z[label];
        *smooth_sum += (1 - eps) * (lse - z[label]) + eps * mean_nlp;
        for (int k = 0; k < K; k++) db[k] += (exp(z[k] - lse) - ((k == label) * (1 - eps) + eps / K)) / B;
    }
}

int main(int argc, char **argv) {
    LS_REQUIRE_OK(ls_ctx_create(mlp_device_arg(argc, argv), NULL, &C));
    int32_t y[N];
    float *x = mlp_points(N, F, 99, y);
    ls_dataset *D;
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, K, x, y, &D));

    const double eps = 0.2;
    const float lr = 0.05f;
    ls_module *m;
    ls_optimizer *o;
    mlp_sgd(C, F, lr, &m, &o);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = 1;
    tc.lr.base_lr = lr;
    tc.label_smoothing = eps;
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(C, NULL, m, o, &tc, &t));

    int64_t idx[B], all[N];
    for (int64_t i = 0; i < N; i++) all[i] = i;
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < B; i++) idx[i] = (step * 41 + i * 7) % N;
        int64_t np;
        float *p0 = params_to_host(C, m, &np);
        LS_REQUIRE(np == H * F + H + K * H + K);
        /* evaluation first: the plain cross-entropy of the whole set */
        double plain_all = 0, smooth_all = 0, db[K], ev_loss = -1;
        for (int64_t lo = 0; lo < N; lo += B) {
            double a, b;
            reference(p0, x, y, all + lo, eps, &a, &b, db);
            plain_all += a;
            smooth_all += b;
        }
        int64_t ev_correct = -1;
        LS_REQUIRE_OK(ls_trainer_evaluate(t, D, all, N, &ev_loss, &ev_correct));
        printf("step %d: evaluate %.6f (plain %.6f, smoothed %.6f)\n", step, ev_loss, plain_all, smooth_all);
        LS_EXPECT_NEAR(ev_loss, plain_all, 1e-5 * plain_all);
        LS_EXPECT(fabs(smooth_all - plain_all) > 1e-4 * plain_all);
        /* the step: the smoothed loss, and the last bias moved by -lr times its gradient */
        double plain, smooth;
        reference(p0, x, y, idx, eps, &plain, &smooth, db);
        ls_step_stats st;
        LS_REQUIRE_OK(ls_trainer_step(t, D, idx, B, B, &st));
        printf("step %d: loss_sum %.6f (smoothed %.6f, plain %.6f)\n", step, st.loss_sum, smooth, plain);
        LS_EXPECT_NEAR(st.loss_sum, smooth, 1e-5 * smooth);
        LS_EXPECT(fabs(smooth - plain) > 1e-4 * plain); /* 10 x the tolerance: the check above can tell */
        float *p1 = params_to_host(C, m, &np);
        const int64_t b2 = H * F + H + K * H;
        double worst = 0, scale = 0;
        for (int k = 0; k < K; k++) {
            /* step 0: p -= lr g (the buffer starts as the gradient); step 1 has momentum: only the loss */
            if (step > 0) break;
            double moved = (double)p1[b2 + k] - (double)p0[b2 + k], want = -(double)lr * db[k];
            worst = fmax(worst, fabs(moved - want));
            scale = fmax(scale, fabs(want));
        }
        if (step == 0) {
            printf("step 0: last bias update off by %.3g (largest %.3g)\n", worst, scale);
            LS_EXPECT(scale > 1e-4 && worst < 1e-3 * scale + 1e-7);
        }
        free(p0);
        free(p1);
    }
    ls_trainer_destroy(t);

    tc.label_smoothing = 1.0;
    LS_EXPECT_ERR(ls_trainer_create(C, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "label_smoothing 1 must be in [0, 1)");
    tc.label_smoothing = NAN;
    LS_EXPECT_ERR(ls_trainer_create(C, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT, "label_smoothing nan");
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(D);
    free(x);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
