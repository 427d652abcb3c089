/* MinHash signatures and LSH band keys for near-duplicate documents.
 *
 * A document is the set of its word n-grams ("shingles"; words of the
 * dedup normalization: lower case, no punctuation, digits as 0). Each
 * shingle is hashed once (XXH3 of its bytes), then through n_hashes affine
 * maps h_k(x) = a_k x + b_k (mod 2^64, a_k odd) with the high half folded
 * in; the signature keeps each map's minimum. Two documents agree on entry
 * k with probability close to their Jaccard similarity. LSH cuts the
 * signature into `bands` bands of `rows` entries; documents that agree on a
 * whole band share that band's key, which is how the pipeline finds
 * candidates without comparing pairs. With b bands of r rows a pair of
 * similarity s collides with probability 1 - (1 - s^r)^b. */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

size_t wf_minhash_signature(const char *text, size_t len, int ngram, int n_hashes, uint64_t seed,
                            uint64_t *sig) {
    wf_buf norm = {0};
    if (wf_dedup_normalize(text, len, &norm) != WF_OK || norm.len == 0) {
        wf_buf_free(&norm);
        return 0;
    }
    /* Word starts; word i is norm[start[i], start[i+1] - 1). */
    size_t n_words = 0, cap = 256;
    size_t *start = malloc(cap * sizeof *start);
    uint64_t *a = malloc((size_t)n_hashes * 2 * sizeof *a);
    if (!start || !a) {
        free(start);
        free(a);
        wf_buf_free(&norm);
        return 0;
    }
    for (size_t i = 0; i < norm.len; i++) {
        if (i == 0 || norm.data[i - 1] == ' ') {
            if (n_words + 2 > cap) {
                cap *= 2;
                size_t *ns = realloc(start, cap * sizeof *ns);
                if (!ns) {
                    free(start);
                    free(a);
                    wf_buf_free(&norm);
                    return 0;
                }
                start = ns;
            }
            start[n_words++] = i;
        }
    }
    start[n_words] = norm.len + 1; /* as if a space followed the last word */
    uint64_t *b = a + n_hashes;
    uint64_t st = seed ^ UINT64_C(0x6d696e68617368); /* "minhash" */
    for (int k = 0; k < n_hashes; k++) {
        a[k] = splitmix64(&st) | 1;
        b[k] = splitmix64(&st);
        sig[k] = UINT64_MAX;
    }
    size_t n = (size_t)ngram;
    size_t n_shingles = n_words >= n ? n_words - n + 1 : 1;
    for (size_t s = 0; s < n_shingles; s++) {
        size_t last = s + n - 1 < n_words ? s + n - 1 : n_words - 1;
        size_t from = start[s], to = start[last + 1] - 1;
        uint64_t x = wf_hash64(norm.data + from, to - from);
        for (int k = 0; k < n_hashes; k++) {
            uint64_t h = (x ^ b[k]) * a[k];
            h ^= h >> 29;
            h *= UINT64_C(0xbf58476d1ce4e5b9);
            h ^= h >> 32;
            if (h < sig[k]) sig[k] = h;
        }
    }
    free(start);
    free(a);
    wf_buf_free(&norm);
    return n_shingles;
}

double wf_minhash_similarity(const uint64_t *x, const uint64_t *y, int n_hashes) {
    int eq = 0;
    for (int k = 0; k < n_hashes; k++) eq += x[k] == y[k];
    return n_hashes ? (double)eq / n_hashes : 0.0;
}

void wf__prep_minhash_bands(const uint64_t *sig, int bands, int rows, uint64_t *keys) {
    for (int b = 0; b < bands; b++) {
        uint64_t salt = (uint64_t)b + 1;
        keys[b] = wf_hash64(sig + (size_t)b * (size_t)rows, (size_t)rows * sizeof *sig) ^ splitmix64(&salt);
    }
}
