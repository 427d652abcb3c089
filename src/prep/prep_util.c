/* Small pieces the pipeline's stages share: the growable byte buffer, the
 * capped 64-bit hash set of the dedup stages, and JSON string output. */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"

void wf_buf_free(wf_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

wf_status wf_buf_reserve(wf_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return WF_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return wf_error(WF_ERR_NOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = d;
    b->cap = cap;
    return WF_OK;
}

wf_status wf_buf_append(wf_buf *b, const void *data, size_t len) {
    WF_TRY(wf_buf_reserve(b, len));
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return WF_OK;
}

/* ---- u64set ---- */

#define U64SET_MIN_CAP ((size_t)1 << 12)

wf_status u64set_init(u64set *s, size_t max_bytes) {
    memset(s, 0, sizeof *s);
    size_t max_cap = U64SET_MIN_CAP;
    while (max_cap * 2 * sizeof(uint64_t) <= max_bytes) max_cap *= 2;
    s->max_cap = max_cap;
    s->cap = U64SET_MIN_CAP;
    s->slots = calloc(s->cap, sizeof *s->slots);
    if (!s->slots) return wf_error(WF_ERR_NOMEM, "out of memory for a hash table");
    return WF_OK;
}

void u64set_free(u64set *s) {
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

int u64set_contains(const u64set *s, uint64_t h) {
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

int u64set_insert(u64set *s, uint64_t h) {
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

/* ---- JSON ---- */

wf_status prep_json_string(wf_buf *out, const char *s, size_t len) {
    /* Worst case: every byte a six-byte \u00XX escape. */
    WF_TRY(wf_buf_reserve(out, len * 6 + 2));
    char *o = out->data + out->len;
    *o++ = '"';
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            *o++ = (char)ch;
            continue;
        }
        *o++ = '\\';
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\t': *o++ = 't'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        }
    }
    *o++ = '"';
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
    return WF_OK;
}
