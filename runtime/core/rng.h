/* rng.h: counter-based random numbers (Philox4x32-10). A stream is (seed, offset): the same
 * seed gives the same numbers on every rank and machine, and the offset is all the state a
 * checkpoint needs. Deterministic and independent of call order across streams. */
#ifndef LOCKSTEP_RNG_H
#define LOCKSTEP_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_rng {
    uint64_t seed;
    uint64_t offset; /* number of 128-bit blocks consumed */
    uint32_t buf[4];
    int avail; /* unread words left in buf */
} ls_rng;

/* Philox4x32-10 of (counter, key): the pure function underneath. */
void ls_philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]);

void ls_rng_init(ls_rng *r, uint64_t seed);
/* A stream for a sub-purpose (e.g. seed ^ epoch) without touching r. */
void ls_rng_init_stream(ls_rng *r, uint64_t seed, uint64_t stream);
uint32_t ls_rng_u32(ls_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float ls_rng_uniform(ls_rng *r);
/* Standard normal (Box-Muller). */
float ls_rng_normal(ls_rng *r);
/* Uniform integer in [0, n), unbiased. */
uint32_t ls_rng_below(ls_rng *r, uint32_t n);
/* Fisher-Yates shuffle of idx[0..n). */
void ls_rng_shuffle(ls_rng *r, int64_t *idx, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
