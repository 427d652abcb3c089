/* weft: reproducible counter-based random numbers (Philox4x32-10).
 *
 * A draw is a pure function of (key, counter): the same seed gives the same
 * numbers on any machine, thread count or rank, and any position of a stream
 * can be reached directly without replaying it. This is what lets the data
 * loader, initialisation and dropout be resumed and resharded exactly.
 *
 * wf_rng is a small cursor over one stream: {seed, stream, offset}. Its
 * whole state is those three integers, so it checkpoints trivially.
 */
#ifndef WEFT_RNG_H
#define WEFT_RNG_H

#include <stdint.h>

/* One Philox4x32-10 block: 4 x 32 random bits for a 128-bit counter and a
 * 64-bit key. */
void wf_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Stateless draws: the `index`-th 64-bit value of stream `stream` of `seed`. */
uint64_t wf_rng_at(uint64_t seed, uint64_t stream, uint64_t index);

typedef struct {
    uint64_t seed;
    uint64_t stream;
    uint64_t offset; /* number of 64-bit values consumed so far */
} wf_rng;

wf_rng wf_rng_make(uint64_t seed, uint64_t stream);
uint64_t wf_rng_u64(wf_rng *r);
/* Uniform in [0, n), without modulo bias. n must be > 0. */
uint64_t wf_rng_below(wf_rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float wf_rng_uniform(wf_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double wf_rng_uniform_double(wf_rng *r);
/* Standard normal (Box-Muller; consumes two values per call). */
float wf_rng_normal(wf_rng *r);

/* A bijection of [0, n) chosen by (seed, round_key): element i of a random
 * permutation, computed in O(1) memory by a Feistel network with cycle
 * walking. Used to shuffle sample orders without materialising them. */
uint64_t wf_rng_permute(uint64_t i, uint64_t n, uint64_t seed, uint64_t round_key);

#endif
