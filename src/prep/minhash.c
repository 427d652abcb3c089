/* MinHash signatures and LSH band keys for near-duplicate documents.
 *
 * A document is the set of its shingles, taken from its text after the
 * dedup normalization (lower case, accents and other marks stripped,
 * punctuation removed, digits as 0, whitespace collapsed):
 *   - word shingles (wf_minhash_signature): n consecutive words, for
 *     languages written with spaces between words;
 *   - character shingles (wf_minhash_signature_chars): n consecutive code
 *     points with the spaces left out, for languages written without them
 *     (Chinese, Japanese, Thai, ...), where a whole paragraph would be one
 *     "word" and one changed sentence would change the only shingle.
 * Each shingle is hashed once (XXH3 of its bytes), then through n_hashes
 * affine maps h_k(x) = a_k x + b_k (mod 2^64, a_k odd) with the high half
 * folded in; the signature keeps each map's minimum. Two documents agree on
 * entry k with probability close to their Jaccard similarity. LSH cuts the
 * signature into `bands` bands of `rows` entries; documents that agree on a
 * whole band share that band's key, which is how the pipeline finds
 * candidates without comparing pairs. With b bands of r rows a pair of
 * similarity s collides with probability 1 - (1 - s^r)^b.
 *
 * Not here: which shingles a document gets (the pipeline chooses by its
 * language, minhash.char_languages) and word segmentation of languages
 * without spaces (no dictionary: characters stand in for words). */
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

/* The n hash functions of a signature (seeded) and its running minima. */
typedef struct {
    uint64_t *a, *b; /* (n) each; a[k] odd */
    uint64_t *sig;   /* (n) the caller's */
    int n;
} mh_fns;

static int fns_init(mh_fns *f, int n_hashes, uint64_t seed, uint64_t *sig) {
    f->a = malloc((size_t)n_hashes * 2 * sizeof *f->a);
    if (!f->a) return 0;
    f->b = f->a + n_hashes;
    f->sig = sig;
    f->n = n_hashes;
    uint64_t st = seed ^ UINT64_C(0x6d696e68617368); /* "minhash" */
    for (int k = 0; k < n_hashes; k++) {
        f->a[k] = splitmix64(&st) | 1;
        f->b[k] = splitmix64(&st);
        sig[k] = UINT64_MAX;
    }
    return 1;
}

/* Adds the shingle s[0, n) to the signature. */
static void fns_add(const mh_fns *f, const char *s, size_t n) {
    uint64_t x = wf_hash64(s, n);
    for (int k = 0; k < f->n; k++) {
        uint64_t h = (x ^ f->b[k]) * f->a[k];
        h ^= h >> 29;
        h *= UINT64_C(0xbf58476d1ce4e5b9);
        h ^= h >> 32;
        if (h < f->sig[k]) f->sig[k] = h;
    }
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
    if (!start) {
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
                    wf_buf_free(&norm);
                    return 0;
                }
                start = ns;
            }
            start[n_words++] = i;
        }
    }
    start[n_words] = norm.len + 1; /* as if a space followed the last word */
    mh_fns f = {0};
    if (!fns_init(&f, n_hashes, seed, sig)) {
        free(start);
        wf_buf_free(&norm);
        return 0;
    }
    size_t n = (size_t)ngram;
    size_t n_shingles = n_words >= n ? n_words - n + 1 : 1;
    for (size_t s = 0; s < n_shingles; s++) {
        size_t last = s + n - 1 < n_words ? s + n - 1 : n_words - 1;
        size_t from = start[s], to = start[last + 1] - 1;
        fns_add(&f, norm.data + from, to - from);
    }
    free(start);
    free(f.a);
    wf_buf_free(&norm);
    return n_shingles;
}

/* Bytes of the UTF-8 sequence at s[0, n) (n >= 1): its lead byte's length,
 * cut to n; a byte that cannot lead one counts alone. The normalized text
 * is valid UTF-8, so this only bounds the walk. */
static size_t cp_bytes(const unsigned char *s, size_t n) {
    size_t k = s[0] < 0x80 ? 1 : s[0] < 0xC0 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : s[0] < 0xF8 ? 4 : 1;
    return k < n ? k : n;
}

size_t wf_minhash_signature_chars(const char *text, size_t len, int ngram, int n_hashes, uint64_t seed,
                                  uint64_t *sig) {
    if (ngram < 1 || ngram > WF_MINHASH_MAX_NGRAM) return 0;
    wf_buf norm = {0};
    if (wf_dedup_normalize(text, len, &norm) != WF_OK) {
        wf_buf_free(&norm);
        return 0;
    }
    /* The normalized text without its spaces (the only whitespace left):
     * shingles run on across words, lines and the punctuation removed. */
    size_t m = 0;
    for (size_t i = 0; i < norm.len; i++)
        if (norm.data[i] != ' ') norm.data[m++] = norm.data[i];
    norm.len = m;
    mh_fns f = {0};
    if (m == 0 || !fns_init(&f, n_hashes, seed, sig)) {
        wf_buf_free(&norm);
        return 0;
    }
    /* Walk the code point boundaries; at boundary j >= n the shingle of
     * code points j - n .. j - 1 ends. at[] keeps the last n + 1
     * boundaries (a ring), so memory does not grow with the text. */
    const unsigned char *u = (const unsigned char *)norm.data;
    size_t n = (size_t)ngram, ring = n + 1, at[WF_MINHASH_MAX_NGRAM + 1];
    size_t j = 0, n_shingles = 0;
    for (size_t i = 0;; j++) {
        at[j % ring] = i;
        if (j >= n) {
            size_t from = at[(j - n) % ring];
            fns_add(&f, norm.data + from, i - from);
            n_shingles++;
        }
        if (i == m) break;
        i += cp_bytes(u + i, m - i);
    }
    if (n_shingles == 0) { /* fewer than n code points: the whole text is one shingle */
        fns_add(&f, norm.data, m);
        n_shingles = 1;
    }
    free(f.a);
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
