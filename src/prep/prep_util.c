/* Small pieces the pipeline's stages share: the capped 64-bit hash set of
 * the dedup stages. (The byte buffer and JSON strings are core's:
 * weft/buf.h, weft/json.h.) */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"

/* ---- u64set ---- */

#define U64SET_MIN_CAP ((size_t)1 << 12)

wf_status wf__prep_u64set_init(u64set *s, size_t max_bytes) {
    memset(s, 0, sizeof *s);
    size_t max_cap = U64SET_MIN_CAP;
    while (max_cap * 2 * sizeof(uint64_t) <= max_bytes) max_cap *= 2;
    s->max_cap = max_cap;
    s->cap = U64SET_MIN_CAP;
    s->slots = calloc(s->cap, sizeof *s->slots);
    if (!s->slots) return wf_error(WF_ERR_NOMEM, "out of memory for a hash table");
    return WF_OK;
}

void wf__prep_u64set_free(u64set *s) {
    free(s->slots);
    memset(s, 0, sizeof *s);
}

/* The slot index: the hashes are already uniform, but their low bits may
 * not be (a caller could pass structured values), so mix once. */
static size_t slot_of(uint64_t h, size_t mask) {
    h ^= h >> 31;
    h *= UINT64_C(0x9e3779b97f4a7c15);
    h ^= h >> 29;
    return (size_t)h & mask;
}

int wf__prep_u64set_contains(const u64set *s, uint64_t h) {
    if (h == 0) h = 1;
    size_t mask = s->cap - 1;
    for (size_t i = slot_of(h, mask);; i = (i + 1) & mask) {
        if (s->slots[i] == h) return 1;
        if (s->slots[i] == 0) return 0;
    }
}

static int grow(u64set *s) {
    size_t cap = s->cap * 2;
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    size_t mask = cap - 1;
    for (size_t k = 0; k < s->cap; k++) {
        uint64_t h = s->slots[k];
        if (!h) continue;
        size_t i = slot_of(h, mask);
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = h;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

int wf__prep_u64set_insert(u64set *s, uint64_t h) {
    if (h == 0) h = 1;
    /* Grow at half full while allowed; at the cap, fill up to 90%. A failed
     * allocation also counts as full: dedup degrades, nothing breaks. */
    if (s->n + 1 > s->cap / 2 && s->cap < s->max_cap && grow(s) != 0) s->max_cap = s->cap;
    size_t mask = s->cap - 1;
    size_t i = slot_of(h, mask);
    for (;; i = (i + 1) & mask) {
        if (s->slots[i] == h) return 0;
        if (s->slots[i] == 0) break;
    }
    if (s->n + 1 > s->cap / 10 * 9) return -1;
    s->slots[i] = h;
    s->n++;
    return 1;
}

