/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11) and what weft builds on it. Constants are the paper's. */
#include "weft/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void wf_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

uint64_t wf_rng_at(uint64_t seed, uint64_t stream, uint64_t index) {
    /* Each block yields two 64-bit values; the counter is (block, stream). */
    uint64_t block = index >> 1;
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    wf_philox4x32(ctr, key, out);
    return (index & 1) ? ((uint64_t)out[3] << 32 | out[2]) : ((uint64_t)out[1] << 32 | out[0]);
}

wf_rng wf_rng_make(uint64_t seed, uint64_t stream) {
    wf_rng r = {seed, stream, 0};
    return r;
}

uint64_t wf_rng_u64(wf_rng *r) { return wf_rng_at(r->seed, r->stream, r->offset++); }

uint64_t wf_rng_below(wf_rng *r, uint64_t n) {
    /* Rejection sampling: draw until the value is below the largest multiple
     * of n that fits, so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t v = wf_rng_u64(r);
        if (v < limit) return v % n;
    }
}

float wf_rng_uniform(wf_rng *r) { return (float)(wf_rng_u64(r) >> 40) * 0x1.0p-24f; }

double wf_rng_uniform_double(wf_rng *r) { return (double)(wf_rng_u64(r) >> 11) * 0x1.0p-53; }

float wf_rng_normal(wf_rng *r) {
    double u1 = ((double)(wf_rng_u64(r) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = wf_rng_uniform_double(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* Feistel permutation over the smallest power-of-four domain >= n, with
 * cycle walking to stay inside [0, n). Four rounds of a Philox-keyed round
 * function give a well-mixed permutation for shuffling purposes. */
uint64_t wf_rng_permute(uint64_t i, uint64_t n, uint64_t seed, uint64_t round_key) {
    if (n <= 1) return 0;
    unsigned bits = 0;
    while (bits < 64 && ((uint64_t)1 << bits) < n) bits++;
    if (bits & 1) bits++; /* even split into two halves */
    unsigned half = bits / 2;
    uint64_t mask = half >= 64 ? UINT64_MAX : (((uint64_t)1 << half) - 1);
    uint64_t x = i;
    do {
        uint64_t l = x >> half, rr = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = wf_rng_at(seed, round_key * 8 + round, rr) & mask;
            uint64_t nl = rr;
            rr = l ^ f;
            l = nl;
        }
        x = (l << half) | rr;
    } while (x >= n);
    return x;
}
