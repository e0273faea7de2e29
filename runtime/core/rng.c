/* rng.c: Philox4x32-10 (Salmon et al., SC'11) and the draws built on it. */
#include "rng.h"

#include "philox.h"

#include <math.h>

void ls_philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]) { ls_philox4x32_10(counter, key, out); }

void ls_rng_init(ls_rng *r, uint64_t seed) {
    r->seed = seed;
    r->offset = 0;
    r->avail = 0;
}

void ls_rng_init_stream(ls_rng *r, uint64_t seed, uint64_t stream) {
    uint32_t h[4];
    ls_philox4x32(stream, seed ^ 0x5DEECE66DULL, h);
    ls_rng_init(r, ((uint64_t)h[0] << 32) | h[1]);
}

uint32_t ls_rng_u32(ls_rng *r) {
    if (r->avail == 0) {
        ls_philox4x32(r->offset++, r->seed, r->buf);
        r->avail = 4;
    }
    return r->buf[4 - r->avail--];
}

float ls_rng_uniform(ls_rng *r) { return (float)(ls_rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

float ls_rng_normal(ls_rng *r) {
    float u1 = ((float)(ls_rng_u32(r) >> 8) + 1.0f) * (1.0f / 16777217.0f); /* (0, 1] */
    float u2 = ls_rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

uint32_t ls_rng_below(ls_rng *r, uint32_t n) {
    if (n <= 1) return 0;
    uint32_t limit = UINT32_MAX - UINT32_MAX % n;
    uint32_t x;
    do x = ls_rng_u32(r);
    while (x >= limit);
    return x % n;
}

void ls_rng_shuffle(ls_rng *r, int64_t *idx, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ls_rng_below(r, (uint32_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
