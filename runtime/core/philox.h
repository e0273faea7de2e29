/* philox.h: Philox4x32-10 (Salmon et al., SC'11), inline for host and device code: rng.c's
 * ls_philox4x32 and the dropout masks of the CPU and CUDA backends draw the same numbers from it. */
#ifndef LOCKSTEP_PHILOX_H
#define LOCKSTEP_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define LS_PHILOX_FN __host__ __device__ static inline
#else
#define LS_PHILOX_FN static inline
#endif

/* The four 32-bit words of block counter under key. */
LS_PHILOX_FN void ls_philox4x32_10(uint64_t counter, uint64_t key, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int i = 0; i < 10; i++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#endif
