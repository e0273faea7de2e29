/* test_reducer.c: the gradient reducer across ranks: ~60 gradients of mixed sizes (empty, single
 * elements, odd sizes, tensors over the cap) in many small buckets, rank-specific values; after
 * finish every gradient equals the average over ranks. Steps mark gradients in backward order,
 * in a per-rank random order (ranks disagree on the order; buckets still launch in bucket order),
 * partly, or not at all. Checks that buckets launch during grad_ready in backward order (overlap)
 * and not before bucket 0 is complete. Run with any number of ranks; optional argument "ctx" uses
 * a CPU ls_ctx (fusion buffers from its allocator) instead of none; "mixed": even ranks keep the
 * gradients as bucket views, odd ones copy them; "owners": each gradient reduced to its owner
 * (ls_reducer_create_to_owners, owners that change within buckets), which then holds the average,
 * while the other ranks keep their own values. Ranks with different bucket caps (or owners) fail to
 * create, and so do all when one runs out of memory for its buckets. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "ops.h"
#include "reducer.h"
#include "testutil.h"

enum { N = 61, STEPS = 5 };

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

/* Rank r's gradient value (exact in f32 sums: multiples of 1/4 below 2^10). */
static float gval(int r, int k, int64_t i, int step) {
    return (float)((int)((r * 31 + k * 7 + i * 3 + step * 11) % 23) - 11) * 0.25f;
}

int main(int argc, char **argv) {
    ls_ctx *ctx = NULL;
    int mixed = 0, to_owners = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "ctx"))
            LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
        else if (!strcmp(argv[i], "mixed"))
            mixed = 1;
        else if (!strcmp(argv[i], "owners"))
            to_owners = 1;
    }
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &c));
    const int R = ls_comm_rank(c), W = ls_comm_world(c);
    ls_allocator *own = NULL, *a = ctx ? ctx->alloc : NULL;
    if (!a) {
        LS_REQUIRE_OK(ls_host_allocator_create(0, &own));
        a = own;
    }

    /* the same sizes on every rank */
    static const int64_t sizes[] = {0, 1, 3, 17, 100, 257, 1000, 4099, 30000};
    rng_state = 12345;
    ls_tensor *g[N];
    for (int k = 0; k < N; k++) {
        int64_t n = sizes[rnd() % (sizeof sizes / sizeof sizes[0])];
        if (k == 7 || k == N - 2) n = 30000; /* over the 64 KiB cap (120 000 B) */
        int64_t shape[1] = {n};
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, shape, "grad", &g[k]));
    }
    ls_reducer_config cfg = {8 << 10, 64 << 10, 0, 0};
    const char *ev = getenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW"); /* the default: gradients as bucket views */
    int want_view = !(ev && !strcmp(ev, "0"));
    if (mixed) { /* odd ranks copy, even ones keep views: the buckets' counts must still agree */
        want_view = R % 2 == 0;
        cfg.bucket_view = want_view ? 1 : -1;
    }
    int owners[N]; /* runs of 1-3 gradients of one owner, so buckets hold several */
    for (int k = 0; k < N; k++) owners[k] = (k / 3 + k % 2) % W;
    ls_reducer *red = NULL;
    LS_REQUIRE_OK(ls_reducer_create_to_owners(c, ctx, N, g, to_owners ? owners : NULL, &cfg, &red));
    const int nb = ls_reducer_num_buckets(red);
    LS_EXPECT(nb > 8);
    /* buckets cover the parameters in reverse order, contiguously, within their caps */
    int expect_hi = N - 1;
    for (int b = 0; b < nb; b++) {
        ls_reducer_bucket_info bi;
        LS_REQUIRE_OK(ls_reducer_bucket(red, b, &bi));
        LS_EXPECT(bi.hi == expect_hi && bi.lo <= bi.hi);
        size_t cap = b == 0 ? cfg.first_bucket_bytes : cfg.bucket_bytes;
        LS_EXPECT(bi.bytes <= cap || bi.lo == bi.hi);
        LS_EXPECT(bi.view == (want_view && bi.fused));
        const char *ec = getenv("LOCKSTEP_GRAD_COMPRESS");
        LS_EXPECT(ls_reducer_get_config(red).compress == (!ec                   ? -1
                                                          : !strcmp(ec, "bf16") ? LS_REDUCER_BF16
                                                          : !strcmp(ec, "fp16") ? LS_REDUCER_F16
                                                                                : -1));
        expect_hi = bi.lo - 1;
    }
    LS_EXPECT(expect_hi == -1);
    if (R == 0) printf("%d gradients in %d buckets on %d rank(s)\n", N, nb, W);

    rng_state = 777 + (uint64_t)R; /* per-rank orders */
    for (int step = 0; step < STEPS; step++) {
        for (int k = 0; k < N; k++)
            for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++) ((float *)g[k]->data)[i] = gval(R, k, i, step);
        const double scale = 1.0 / W;
        LS_REQUIRE_OK(ls_reducer_begin(red, scale));
        const int mode = step % 4;
        if (mode == 0) { /* backward order: launches happen before finish */
            ls_reducer_bucket_info b0;
            LS_REQUIRE_OK(ls_reducer_bucket(red, 0, &b0));
            for (int k = N - 1; k >= 0; k--) {
                LS_REQUIRE_OK(ls_reducer_grad_ready(red, k));
                if (k == b0.lo) LS_EXPECT(ls_reducer_launched(red) >= 1);
            }
            LS_EXPECT(ls_reducer_launched(red) == nb);
        } else if (mode == 1) { /* a random order of its own on each rank */
            int perm[N];
            for (int k = 0; k < N; k++) perm[k] = k;
            for (int k = N - 1; k > 0; k--) {
                int j = (int)(rnd() % (uint32_t)(k + 1)), t = perm[k];
                perm[k] = perm[j];
                perm[j] = t;
            }
            for (int k = 0; k < N; k++) {
                int i = perm[k];
                LS_REQUIRE_OK(ls_reducer_grad_ready(red, i));
                int launched = ls_reducer_launched(red);
                /* bucket b launches only after all of buckets 0..b are complete */
                for (int b = 0; b < launched; b++) {
                    ls_reducer_bucket_info bi;
                    LS_REQUIRE_OK(ls_reducer_bucket(red, b, &bi));
                    for (int p = bi.lo; p <= bi.hi; p++) {
                        int seen = 0;
                        for (int q = 0; q <= k; q++) seen |= perm[q] == p;
                        LS_EXPECT(seen);
                    }
                }
            }
        } else if (mode == 2) { /* some marked, the rest left to finish */
            for (int k = N - 1; k >= 0; k -= 3) LS_REQUIRE_OK(ls_reducer_grad_ready(red, k));
        } else { /* none marked */
            LS_EXPECT(ls_reducer_launched(red) == 0);
        }
        LS_REQUIRE_OK(ls_reducer_finish(red));
        int64_t bad = 0;
        for (int k = 0; k < N; k++)
            for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++) {
                float sum = 0;
                for (int r = 0; r < W; r++) sum += gval(r, k, i, step);
                float want = sum * (float)scale, got = ((float *)g[k]->data)[i];
                if (to_owners && owners[k] != R) want = gval(R, k, i, step); /* not received: its own */
                if (!(fabsf(got - want) <= 1e-6f * (1 + fabsf(want)))) {
                    if (!bad)
                        fprintf(stderr, "rank %d step %d: grad %d[%lld] = %g, expected %g\n", R, step, k, (long long)i,
                                got, want);
                    bad++;
                }
            }
        LS_EXPECT(bad == 0);
    }

    /* zero_grads: every gradient zero (bucket views in one call a bucket), refused during a step */
    for (int k = 0; k < N; k++)
        for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++) ((float *)g[k]->data)[i] = 1.5f + (float)k;
    LS_REQUIRE_OK(ls_reducer_begin(red, 1.0));
    LS_EXPECT_ERR(ls_reducer_zero_grads(red), LS_ERR_INVALID_ARGUMENT, "a step is in progress");
    LS_REQUIRE_OK(ls_reducer_finish(red));
    LS_REQUIRE_OK(ls_reducer_zero_grads(red));
    int64_t nonzero = 0, total = 0;
    for (int k = 0; k < N; k++)
        for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++, total++) nonzero += ((float *)g[k]->data)[i] != 0.0f;
    LS_EXPECT(nonzero == 0 && total > 0);
    LS_EXPECT_ERR(ls_reducer_zero_grads(NULL), LS_ERR_INVALID_ARGUMENT, "reducer is NULL");

    ls_reducer_destroy(red);
    if (W > 1) { /* ranks with different bucket caps: an error on every rank, not an overrun */
        ls_reducer_config other = {8 << 10, R == W - 1 ? 32 << 10 : 64 << 10, 0, 0};
        LS_EXPECT_ERR(ls_reducer_create(c, ctx, N, g, &other, &red), LS_ERR_MISMATCH,
                      "gradient buckets differ between ranks");
        ls_reducer_config mixed16 = {8 << 10, 64 << 10, 0, R == W - 1 ? LS_REDUCER_BF16 : -1};
        LS_EXPECT_ERR(ls_reducer_create(c, ctx, N, g, &mixed16, &red), LS_ERR_MISMATCH,
                      "LOCKSTEP_GRAD_COMPRESS must be the same");
        int other_owners[N]; /* the last rank thinks gradient 5 is another's */
        memcpy(other_owners, owners, sizeof owners);
        if (R == W - 1) other_owners[5] = (owners[5] + 1) % W;
        LS_EXPECT_ERR(ls_reducer_create_to_owners(c, ctx, N, g, other_owners, &cfg, &red), LS_ERR_MISMATCH,
                      "the gradients' owners");
        other_owners[5] = R == W - 1 ? W : owners[5];
        if (R == W - 1)
            LS_EXPECT_ERR(ls_reducer_create_to_owners(c, ctx, N, g, other_owners, &cfg, &red), LS_ERR_INVALID_ARGUMENT,
                          "gradient 5's owner");
        else
            LS_EXPECT_ERR(ls_reducer_create_to_owners(c, ctx, N, g, other_owners, &cfg, &red), LS_ERR_COMM,
                          "another rank could not make its gradient buckets");
        /* one rank out of memory for its bucket: it says so, the others learn of it (no hang) */
        enum { M = 4 };
        ls_allocator *capped = NULL;
        LS_REQUIRE_OK(ls_host_allocator_create(R == W - 1 ? M * 400 : 0, &capped));
        ls_tensor *h[M];
        for (int k = 0; k < M; k++) LS_REQUIRE_OK(ls_tensor_create(capped, LS_F32, 1, (int64_t[]){100}, "grad", &h[k]));
        ls_reducer_config views = {1 << 20, 1 << 20, 1, 0};
        if (R == W - 1)
            LS_EXPECT_ERR(ls_reducer_create(c, ctx, M, h, &views, &red), LS_ERR_OUT_OF_MEMORY, "gradient bucket 0");
        else
            LS_EXPECT_ERR(ls_reducer_create(c, ctx, M, h, &views, &red), LS_ERR_COMM,
                          "another rank could not make its gradient buckets");
        /* one rank refusing its arguments (a NULL gradient): the same */
        ls_tensor *none[M] = {NULL};
        if (R == 0)
            LS_EXPECT_ERR(ls_reducer_create(c, ctx, M, none, &views, &red), LS_ERR_INVALID_ARGUMENT,
                          "gradient 0 is NULL");
        else
            LS_EXPECT_ERR(ls_reducer_create(c, ctx, M, g, &views, &red), LS_ERR_COMM,
                          "another rank could not make its gradient buckets");
        for (int k = 0; k < M; k++) ls_tensor_destroy(h[k]);
        ls_allocator_destroy(capped);
    }
    for (int k = 0; k < N; k++) ls_tensor_destroy(g[k]);
    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(c, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(c);
    if (own) ls_allocator_destroy(own);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
