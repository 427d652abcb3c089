/* The splitmix64 finaliser: the hash the MPI test drivers in tests/tools/
 * make their synthetic data from (exact float32 values that the Python
 * tests recompute). Shared by dist_check and reduce_sum_check. */
#ifndef WEFT_TESTS_TOOL_HASH_H
#define WEFT_TESTS_TOOL_HASH_H

#include <stdint.h>

static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
