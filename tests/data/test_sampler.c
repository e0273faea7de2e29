/* test_sampler.c: the distributed sampler. Shard sizes in PAD, DROP_LAST and EXACT modes,
 * disjoint shards, DistributedSampler's padding, the union property (all ranks' step j together
 * are the single-rank step j), global counts, seeds and epochs, and argument errors. */
#include <stdint.h>

#include "data.h"
#include "rng.h"
#include "testutil.h"

#define MAXN 256

static ls_sampler *make(int64_t n, int rank, int world, uint64_t seed, int shuffle, ls_sampler_mode mode) {
    ls_sampler *s = NULL;
    LS_REQUIRE_OK(ls_sampler_create(n, rank, world, seed, shuffle, mode, &s));
    return s;
}

/* All of a rank's indices in the epoch, in order, via batches of b; returns how many. */
static int64_t epoch_indices(const ls_sampler *s, int64_t b, int64_t *out) {
    int64_t total = 0, count = 0, global = 0, steps = ls_sampler_steps(s, b);
    for (int64_t j = 0; j < steps; j++) {
        LS_REQUIRE_OK(ls_sampler_batch(s, j, b, out + total, &count, &global));
        LS_EXPECT(count >= 0 && count <= b);
        total += count;
    }
    return total;
}

static void sort_i64(int64_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && a[j - 1] > a[j]; j--) {
            int64_t t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

static void check_sizes(void) {
    /* N = 10, world 4: PAD 3 each (2 padded), DROP_LAST 2 each, EXACT 3,3,2,2. */
    static const int64_t exact10w4[4] = {3, 3, 2, 2};
    for (int r = 0; r < 4; r++) {
        ls_sampler *p = make(10, r, 4, 1, 1, LS_SAMPLER_PAD);
        ls_sampler *d = make(10, r, 4, 1, 1, LS_SAMPLER_DROP_LAST);
        ls_sampler *e = make(10, r, 4, 1, 1, LS_SAMPLER_EXACT);
        LS_EXPECT(ls_sampler_num_samples(p) == 3);
        LS_EXPECT(ls_sampler_num_samples(d) == 2);
        LS_EXPECT(ls_sampler_num_samples(e) == exact10w4[r]);
        LS_EXPECT(ls_sampler_steps(p, 2) == 2 && ls_sampler_steps(d, 2) == 1);
        LS_EXPECT(ls_sampler_steps(e, 2) == 2 && ls_sampler_steps(d, 3) == 0);
        LS_EXPECT(ls_sampler_steps(p, 0) == 0);
        ls_sampler_destroy(p);
        ls_sampler_destroy(d);
        ls_sampler_destroy(e);
    }
    for (int64_t n = 10; n <= 11; n++)
        for (int w = 1; w <= 4; w++) {
            int64_t sum_exact = 0, min_exact = n, max_exact = 0;
            for (int r = 0; r < w; r++) {
                ls_sampler *p = make(n, r, w, 5, 1, LS_SAMPLER_PAD);
                ls_sampler *d = make(n, r, w, 5, 1, LS_SAMPLER_DROP_LAST);
                ls_sampler *e = make(n, r, w, 5, 1, LS_SAMPLER_EXACT);
                LS_EXPECT(ls_sampler_num_samples(p) == (n + w - 1) / w);
                LS_EXPECT(ls_sampler_num_samples(d) == n / w);
                int64_t ne = ls_sampler_num_samples(e);
                sum_exact += ne;
                min_exact = ne < min_exact ? ne : min_exact;
                max_exact = ne > max_exact ? ne : max_exact;
                for (int64_t b = 1; b <= 5; b++) {
                    int64_t sp = ls_sampler_steps(p, b), sd = ls_sampler_steps(d, b);
                    int64_t se = ls_sampler_steps(e, b);
                    int64_t tp = (n + w - 1) / w * w, td = n / w * w;
                    LS_EXPECT(sp == (tp + w * b - 1) / (w * b));
                    LS_EXPECT(sd == td / (w * b));
                    LS_EXPECT(se == (n + w * b - 1) / (w * b));
                }
                ls_sampler_destroy(p);
                ls_sampler_destroy(d);
                ls_sampler_destroy(e);
            }
            LS_EXPECT(sum_exact == n);
            LS_EXPECT(max_exact - min_exact <= 1);
        }
}

/* Every mode, N = 10 and 11, worlds 1..4: what the ranks see together over an epoch. */
static void check_shards(void) {
    for (int64_t n = 10; n <= 11; n++)
        for (int w = 1; w <= 4; w++)
            for (int mode = 0; mode < 3; mode++) {
                int64_t all[MAXN], seen[MAXN] = {0}, total = 0;
                int64_t perm[MAXN];
                { /* the epoch's permutation, as documented */
                    ls_rng rng;
                    ls_rng_init_stream(&rng, 9, 0);
                    for (int64_t i = 0; i < n; i++) perm[i] = i;
                    ls_rng_shuffle(&rng, perm, n);
                }
                for (int r = 0; r < w; r++) {
                    ls_sampler *s = make(n, r, w, 9, 1, (ls_sampler_mode)mode);
                    int64_t got = epoch_indices(s, 1, all + total);
                    LS_EXPECT(got == ls_sampler_num_samples(s));
                    /* strided ownership: rank r's k-th sample is position r + k*world */
                    for (int64_t k = 0; k < got; k++) LS_EXPECT(all[total + k] == perm[(r + k * w) % n]);
                    total += got;
                    ls_sampler_destroy(s);
                }
                for (int64_t i = 0; i < total; i++) {
                    LS_REQUIRE(all[i] >= 0 && all[i] < n);
                    seen[all[i]]++;
                }
                int64_t dup = 0, missing = 0;
                for (int64_t i = 0; i < n; i++) {
                    if (seen[i] > 1) dup += seen[i] - 1;
                    if (seen[i] == 0) missing++;
                }
                if (mode == LS_SAMPLER_EXACT) {
                    LS_EXPECT(total == n && dup == 0 && missing == 0);
                } else if (mode == LS_SAMPLER_DROP_LAST) {
                    LS_EXPECT(total == n / w * w && dup == 0 && missing == n % w);
                } else {
                    int64_t pad = (n + w - 1) / w * w - n;
                    LS_EXPECT(total == n + pad && dup == pad && missing == 0);
                    for (int64_t i = 0; i < pad; i++) LS_EXPECT(seen[perm[i]] == 2);
                }
            }
    /* DistributedSampler's padding without shuffling: N=10, world 4 -> 0..9, 0, 1. */
    static const int64_t want[4][3] = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
    for (int r = 0; r < 4; r++) {
        ls_sampler *s = make(10, r, 4, 123, 0, LS_SAMPLER_PAD);
        int64_t idx[3], count = 0, global = 0;
        LS_REQUIRE_OK(ls_sampler_batch(s, 0, 3, idx, &count, &global));
        LS_EXPECT(count == 3 && global == 12);
        for (int k = 0; k < 3; k++) LS_EXPECT(idx[k] == want[r][k]);
        ls_sampler_destroy(s);
    }
}

/* The union over ranks of step j (world x b = B) equals the single-rank batch-B step j. */
static void check_union(int64_t n, ls_sampler_mode mode, int64_t b, uint64_t seed, int64_t epoch) {
    for (int w = 1; w <= 4; w++) {
        int64_t B = w * b;
        ls_sampler *ref = make(n, 0, 1, seed, 1, mode);
        LS_REQUIRE_OK(ls_sampler_set_epoch(ref, epoch));
        ls_sampler *rank[4];
        for (int r = 0; r < w; r++) {
            rank[r] = make(n, r, w, seed, 1, mode);
            LS_REQUIRE_OK(ls_sampler_set_epoch(rank[r], epoch));
        }
        int64_t steps = ls_sampler_steps(ref, B);
        for (int r = 0; r < w; r++) LS_EXPECT(ls_sampler_steps(rank[r], b) == steps);
        int64_t covered = 0;
        for (int64_t j = 0; j < steps; j++) {
            int64_t want[MAXN], got[MAXN], nwant = 0, nref_global = 0, ngot = 0;
            LS_REQUIRE_OK(ls_sampler_batch(ref, j, B, want, &nwant, &nref_global));
            LS_EXPECT(nref_global == nwant);
            for (int r = 0; r < w; r++) {
                int64_t count = 0, global = 0;
                LS_REQUIRE_OK(ls_sampler_batch(rank[r], j, b, got + ngot, &count, &global));
                LS_EXPECT(global == nwant);
                ngot += count;
            }
            LS_EXPECT(ngot == nwant);
            if (ngot != nwant) break;
            sort_i64(want, nwant);
            sort_i64(got, ngot);
            int same = 1;
            for (int64_t i = 0; i < ngot; i++) same &= got[i] == want[i];
            if (!same)
                fprintf(stderr, "n=%lld mode=%d world=%d step %lld: union differs\n", (long long)n, (int)mode, w,
                        (long long)j);
            LS_EXPECT(same);
            covered += nwant;
        }
        LS_EXPECT(covered == (mode == LS_SAMPLER_DROP_LAST ? n / B * B : n));
        for (int r = 0; r < w; r++) ls_sampler_destroy(rank[r]);
        ls_sampler_destroy(ref);
    }
}

/* Seeds, epochs and the documented permutation. */
static void check_seeds(void) {
    enum { N = 103 };
    int64_t a[N], b[N], c[N], perm[N];
    ls_sampler *s1 = make(N, 0, 1, 42, 1, LS_SAMPLER_EXACT);
    ls_sampler *s2 = make(N, 0, 1, 42, 1, LS_SAMPLER_EXACT);
    ls_sampler *s3 = make(N, 0, 1, 43, 1, LS_SAMPLER_EXACT);
    LS_EXPECT(ls_sampler_epoch(s1) == 0);
    LS_EXPECT(epoch_indices(s1, N, a) == N);
    LS_EXPECT(epoch_indices(s2, N, b) == N);
    LS_EXPECT(epoch_indices(s3, N, c) == N);
    LS_EXPECT(memcmp(a, b, sizeof a) == 0);
    LS_EXPECT(memcmp(a, c, sizeof a) != 0);
    ls_rng rng;
    for (int64_t e = 0; e < 3; e++) {
        LS_REQUIRE_OK(ls_sampler_set_epoch(s1, e));
        LS_EXPECT(ls_sampler_epoch(s1) == e);
        LS_EXPECT(epoch_indices(s1, 10, b) == N);
        ls_rng_init_stream(&rng, 42, (uint64_t)e);
        for (int64_t i = 0; i < N; i++) perm[i] = i;
        ls_rng_shuffle(&rng, perm, N);
        LS_EXPECT(memcmp(b, perm, sizeof b) == 0);
        if (e > 0) LS_EXPECT(memcmp(a, b, sizeof a) != 0); /* a new epoch, a new order */
        int64_t sorted[N];
        memcpy(sorted, b, sizeof sorted);
        sort_i64(sorted, N);
        for (int64_t i = 0; i < N; i++) LS_EXPECT(sorted[i] == i);
    }
    LS_REQUIRE_OK(ls_sampler_set_epoch(s1, 0)); /* back to epoch 0: the same order again */
    LS_EXPECT(epoch_indices(s1, 7, b) == N);
    LS_EXPECT(memcmp(a, b, sizeof a) == 0);
    /* no shuffle: identity in every epoch */
    ls_sampler *id = make(N, 0, 1, 42, 0, LS_SAMPLER_PAD);
    LS_REQUIRE_OK(ls_sampler_set_epoch(id, 5));
    LS_EXPECT(epoch_indices(id, 8, b) == N);
    for (int64_t i = 0; i < N; i++) LS_EXPECT(b[i] == i);
    ls_sampler_destroy(id);
    ls_sampler_destroy(s3);
    ls_sampler_destroy(s2);
    ls_sampler_destroy(s1);
}

static void check_errors(void) {
    ls_sampler *s = (ls_sampler *)1;
    LS_EXPECT_ERR(ls_sampler_create(10, 0, 0, 1, 1, LS_SAMPLER_PAD, &s), LS_ERR_INVALID_ARGUMENT,
                  "world size 0 must be >= 1");
    LS_EXPECT(s == NULL);
    LS_EXPECT_ERR(ls_sampler_create(10, 4, 4, 1, 1, LS_SAMPLER_PAD, &s), LS_ERR_INVALID_ARGUMENT,
                  "rank 4 is out of range [0, 4)");
    LS_EXPECT_ERR(ls_sampler_create(10, -1, 4, 1, 1, LS_SAMPLER_PAD, &s), LS_ERR_INVALID_ARGUMENT,
                  "rank -1 is out of range");
    LS_EXPECT_ERR(ls_sampler_create(-1, 0, 1, 1, 1, LS_SAMPLER_PAD, &s), LS_ERR_INVALID_ARGUMENT,
                  "dataset size -1 is negative");
    LS_EXPECT_ERR(ls_sampler_create(10, 0, 1, 1, 1, (ls_sampler_mode)7, &s), LS_ERR_INVALID_ARGUMENT, "unknown mode 7");
    LS_EXPECT_ERR(ls_sampler_create(10, 0, 1, 1, 1, LS_SAMPLER_PAD, NULL), LS_ERR_INVALID_ARGUMENT, "out is NULL");

    s = make(10, 1, 2, 1, 1, LS_SAMPLER_PAD);
    int64_t idx[8], count = -1, global = -1;
    LS_EXPECT_ERR(ls_sampler_batch(s, 2, 3, idx, &count, &global), LS_ERR_INVALID_ARGUMENT,
                  "step 2 is out of range [0, 2)");
    LS_EXPECT_ERR(ls_sampler_batch(s, -1, 3, idx, &count, &global), LS_ERR_INVALID_ARGUMENT, "step -1");
    LS_EXPECT_ERR(ls_sampler_batch(s, 0, 0, idx, &count, &global), LS_ERR_INVALID_ARGUMENT, "batch per rank 0");
    LS_EXPECT_ERR(ls_sampler_set_epoch(s, -3), LS_ERR_INVALID_ARGUMENT, "epoch -3 is negative");
    LS_EXPECT(ls_sampler_epoch(s) == 0);
    LS_REQUIRE_OK(ls_sampler_batch(s, 1, 3, idx, &count, NULL)); /* global count is optional */
    LS_EXPECT(count == 2);
    ls_sampler_destroy(s);
    ls_sampler_destroy(NULL);

    /* An empty data set: no samples, no steps. */
    s = make(0, 2, 3, 1, 1, LS_SAMPLER_PAD);
    LS_EXPECT(ls_sampler_num_samples(s) == 0 && ls_sampler_steps(s, 4) == 0);
    ls_sampler_destroy(s);
    /* EXACT with fewer samples than ranks: the last ranks get empty batches. */
    s = make(2, 3, 4, 1, 1, LS_SAMPLER_EXACT);
    LS_EXPECT(ls_sampler_num_samples(s) == 0 && ls_sampler_steps(s, 1) == 1);
    LS_REQUIRE_OK(ls_sampler_batch(s, 0, 1, idx, &count, &global));
    LS_EXPECT(count == 0 && global == 2);
    ls_sampler_destroy(s);
}

int main(void) {
    check_sizes();
    check_shards();
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        check_union(103, LS_SAMPLER_EXACT, 4, 42, epoch);
        check_union(103, LS_SAMPLER_EXACT, 5, 7, epoch);
        check_union(96, LS_SAMPLER_PAD, 4, 42, epoch);
        check_union(96, LS_SAMPLER_DROP_LAST, 4, 42, epoch);
        /* an uneven set (the README: N ranks of B/N train as 1 of B with drop-last too) */
        check_union(103, LS_SAMPLER_DROP_LAST, 4, 42, epoch);
        check_union(103, LS_SAMPLER_DROP_LAST, 5, 7, epoch);
    }
    check_seeds();
    check_errors();
    LS_TEST_END();
}
