/* The byte-level BPE model: the GPT-2 byte alphabet, the tokenizer's lookup
 * tables, encode and decode.
 *
 * Encoding follows `tokenizers` step by step, so that ids agree with it:
 *   1. added tokens are cut out of the text (leftmost-longest; first those
 *      with normalized=false, then, in what is left, those with
 *      normalized=true; special ones only with parse_special);
 *   2. each remaining segment goes through the pre-tokenizer (Split regex,
 *      then ByteLevel: optional prefix space, optional GPT-2 regex);
 *   3. each piece's bytes become their byte tokens (missing ones become
 *      unk_token, or are dropped when there is none, as `tokenizers` does),
 *      then merges apply lowest rank first, leftmost on ties. With
 *      ignore_merges a piece that is a whole vocabulary entry is that entry.
 *
 * Speed: each thread keeps its own state (regex match data and a cache from
 * piece bytes to ids), found through a pthread key, so encode on a shared
 * tokenizer needs no locks after a thread's first call. Short pieces merge
 * by a linear scan over pair ranks; long ones by a heap over a linked list.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "data/bpe_impl.h"
#include "weft/buf.h"
#include "weft/fileio.h"

const char *const wf__bpe_default_specials[3] = {"<|begin_of_text|>", "<|end_of_text|>",
                                                 "<|pad|>"};

/* --------------------------------------------------------- byte alphabet */

static int byte_is_printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t wf__bpe_byte_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* The k-th non-printable byte (in byte order) maps to U+0100 + k. */
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++) k += !byte_is_printable(x);
    return 256 + k;
}

static int16_t cp_byte_tab[324];
static uint32_t byte_cp_tab[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void) {
    for (size_t i = 0; i < sizeof cp_byte_tab / sizeof *cp_byte_tab; i++) cp_byte_tab[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        byte_cp_tab[b] = wf__bpe_byte_cp((uint8_t)b);
        cp_byte_tab[byte_cp_tab[b]] = (int16_t)b;
    }
}

int wf__bpe_cp_byte(uint32_t cp) {
    pthread_once(&tab_once, tab_init);
    return cp < sizeof cp_byte_tab / sizeof *cp_byte_tab ? cp_byte_tab[cp] : -1;
}

size_t wf__bpe_bytes_to_str(const uint8_t *b, size_t n, char *out) {
    pthread_once(&tab_once, tab_init);
    char *o = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = byte_cp_tab[b[i]];
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xC0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *o = '\0';
    return (size_t)(o - out);
}

long wf__bpe_str_to_bytes(const char *s, size_t n, uint8_t *out) {
    pthread_once(&tab_once, tab_init);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        if (p[i] < 0x80) {
            cp = p[i++];
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* every alphabet character is 1 or 2 UTF-8 bytes */
        }
        int b = cp < sizeof cp_byte_tab / sizeof *cp_byte_tab ? cp_byte_tab[cp] : -1;
        if (b < 0) return -1;
        out[k++] = (uint8_t)b;
    }
    return (long)k;
}

/* -------------------------------------------------------------- strmap */

uint64_t wf__bpe_hash(const void *p, size_t n) { return wf_hash64(p, n); }

wf_status wf__bpe_strmap_init(wf_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return wf_error(WF_ERR_NOMEM, "out of memory for a hash map of %zu keys", expected);
    for (size_t i = 0; i < cap; i++) m->slots[i].len = UINT32_MAX;
    m->cap = cap;
    return WF_OK;
}

void wf__bpe_strmap_free(wf_strmap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

int64_t *wf__bpe_strmap_find(const wf_strmap *m, const void *key, size_t len, uint64_t hash) {
    if (!m->cap) return NULL;
    size_t mask = m->cap - 1, i = (size_t)hash & mask;
    for (;;) {
        wf_strmap_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX) return NULL;
        if (s->hash == hash && s->len == len && memcmp(m->keys + s->off, key, len) == 0)
            return &s->val;
        i = (i + 1) & mask;
    }
}

static int strmap_grow(wf_strmap *m) {
    size_t ncap = m->cap * 2, mask = ncap - 1;
    wf_strmap_slot *ns = malloc(ncap * sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < ncap; i++) ns[i].len = UINT32_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].len == UINT32_MAX) continue;
        size_t j = (size_t)m->slots[i].hash & mask;
        while (ns[j].len != UINT32_MAX) j = (j + 1) & mask;
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int64_t *wf__bpe_strmap_upsert(wf_strmap *m, const void *key, size_t len, uint64_t hash, int64_t def,
                          int *inserted) {
    if (inserted) *inserted = 0;
    if (len >= UINT32_MAX) return NULL;
    int64_t *v = wf__bpe_strmap_find(m, key, len, hash);
    if (v) return v;
    if ((m->n + 1) * 4 > m->cap * 3 && strmap_grow(m) != 0) return NULL;
    if (m->keys_len + len > m->keys_cap) {
        size_t nc = m->keys_cap ? m->keys_cap : 4096;
        while (nc < m->keys_len + len) nc *= 2;
        char *nk = realloc(m->keys, nc);
        if (!nk) return NULL;
        m->keys = nk;
        m->keys_cap = nc;
    }
    if (len) memcpy(m->keys + m->keys_len, key, len); /* an empty first key: m->keys may be NULL */
    size_t mask = m->cap - 1, i = (size_t)hash & mask;
    while (m->slots[i].len != UINT32_MAX) i = (i + 1) & mask;
    m->slots[i] = (wf_strmap_slot){hash, m->keys_len, (uint32_t)len, def};
    m->keys_len += len;
    m->n++;
    if (inserted) *inserted = 1;
    return &m->slots[i].val;
}

/* ---------------------------------------------------------------- ids */

void wf_ids_free(wf_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static wf_status ids_reserve(wf_ids *v, size_t extra) {
    if (v->n + extra <= v->cap) return WF_OK;
    size_t nc = v->cap ? v->cap : 256;
    while (nc < v->n + extra) nc *= 2;
    int32_t *p = realloc(v->ids, nc * sizeof *p);
    if (!p) return wf_error(WF_ERR_NOMEM, "out of memory growing an id array to %zu ids", nc);
    v->ids = p;
    v->cap = nc;
    return WF_OK;
}

wf_status wf_ids_push(wf_ids *v, int32_t id) {
    WF_TRY(ids_reserve(v, 1));
    v->ids[v->n++] = id;
    return WF_OK;
}

static inline wf_status ids_append(wf_ids *v, const int32_t *ids, size_t n) {
    if (n == 0) return WF_OK; /* v->ids may still be NULL: no pointer arithmetic on it */
    if (v->n + n > v->cap) WF_TRY(ids_reserve(v, n));
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
    return WF_OK;
}

/* ------------------------------------------------------ per-thread state */

/* Pieces up to this many bytes are cached. */
#define CACHE_MAX_PIECE 64
#define CACHE_SLOTS (1u << 17)
#define CACHE_BYTES (1u << 22)
#define CACHE_IDS (1u << 20)

typedef struct {
    uint64_t hash;
    uint32_t koff, ioff;
    uint16_t klen, nids; /* klen 0: empty */
} cache_slot;

/* Most pieces are short and become few ids: those live in a second cache
 * whose entries hold the key and the ids themselves, one 64-byte line
 * each, in 2-way sets (two adjacent lines), so a lookup reads one set and
 * hashes two words instead of calling XXH3 and visiting three arrays. A
 * piece of at most SHORT_MAX_PIECE bytes is keyed by two overlapping
 * 8-byte loads (or smaller ones) and its length: that determines its
 * bytes. 32K sets (4 MiB) per thread: on text it has not seen, halving
 * them cost 10% in extra merges. */
#define SHORT_MAX_PIECE 16
#define SHORT_MAX_IDS 11
#define SHORT_SETS (1u << 15)

typedef struct {
    uint64_t a, b;
    uint8_t len, nids; /* len 0: empty */
    uint8_t spare[2];
    int32_t ids[SHORT_MAX_IDS];
} short_slot; /* 64 bytes */
#define SHORT_BYTES (2 * SHORT_SETS * sizeof(short_slot))
#define SHORT_ALIGN ((size_t)2 << 20)

typedef struct bpe_tls {
    struct bpe_tls *next;      /* all states of the tokenizer */
    struct bpe_tls *idle_next;   /* states of exited threads, for reuse */
    wf_bpe_registry *reg;
    wf_regex_state split_st, bl_st;
    cache_slot *slots;
    short_slot *short_slots; /* [2 * SHORT_SETS], 64-byte aligned */
    size_t n_cached;
    uint8_t *cbytes;
    size_t cbytes_len;
    int32_t *cids;
    size_t cids_len;
    /* merge scratch */
    int32_t *sym, *rk, *mid, *prv, *nxt;
    size_t scratch_cap;
    struct heap_ent *heap;
    size_t heap_cap;
    char *pbuf; /* prefix-space copy of a segment */
    size_t pbuf_cap;
    wf_piece_fn sink; /* wf_tokenizer_pretokenize: pieces go here, not to merges */
    void *sink_ctx;
} bpe_tls;

/* Every thread's state, and a stack of states whose threads have exited:
 * a new thread takes one of those, warm cache included, so callers that
 * start fresh threads for each batch (wf_parallel_run) do not start cold. */
struct wf_bpe_registry {
    pthread_key_t key;
    pthread_mutex_t mu;
    bpe_tls *head, *idle;
};

typedef struct heap_ent {
    int32_t rank, pos, id;
} heap_ent;

static void tls_free(bpe_tls *s) {
    if (!s) return;
    wf__pretok_regex_state_free(&s->split_st);
    wf__pretok_regex_state_free(&s->bl_st);
    free(s->slots);
    free(s->short_slots);
    free(s->cbytes);
    free(s->cids);
    free(s->sym);
    free(s->rk);
    free(s->mid);
    free(s->prv);
    free(s->nxt);
    free(s->heap);
    free(s->pbuf);
    free(s);
}

/* Runs at thread exit for threads that encoded with a live tokenizer: the
 * state goes to the idle stack (freed by wf_tokenizer_destroy). */
static void tls_exit(void *p) {
    bpe_tls *s = p;
    wf_bpe_registry *r = s->reg;
    pthread_mutex_lock(&r->mu);
    s->idle_next = r->idle;
    r->idle = s;
    pthread_mutex_unlock(&r->mu);
}

static void cache_clear(bpe_tls *s) {
    memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
    s->n_cached = s->cbytes_len = s->cids_len = 0;
}

static bpe_tls *tls_get(const wf_tokenizer *t) {
    bpe_tls *s = pthread_getspecific(t->reg->key);
    if (s) return s;
    pthread_mutex_lock(&t->reg->mu);
    s = t->reg->idle;
    if (s) t->reg->idle = s->idle_next;
    pthread_mutex_unlock(&t->reg->mu);
    if (s) {
        if (pthread_setspecific(t->reg->key, s) == 0) return s;
        tls_exit(s);
        wf_error(WF_ERR_NOMEM, "out of memory setting a thread's tokenizer state");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->reg = t->reg;
    s->slots = calloc(CACHE_SLOTS, sizeof *s->slots);
    s->cbytes = malloc(CACHE_BYTES);
    s->cids = malloc(CACHE_IDS * sizeof *s->cids);
    /* On 2 MiB pages where the kernel has them for the asking: lookups
     * land anywhere in the 4 MiB, which on 4 KiB pages is a TLB miss
     * nearly every time. */
    s->short_slots = aligned_alloc(SHORT_ALIGN, SHORT_BYTES);
    if (!s->slots || !s->cbytes || !s->cids || !s->short_slots) goto nomem;
#ifdef MADV_HUGEPAGE
    madvise(s->short_slots, SHORT_BYTES, MADV_HUGEPAGE);
#endif
    memset(s->short_slots, 0, SHORT_BYTES);
    if (t->split_pattern && wf__pretok_regex_state_init(&s->split_st, &t->split_re) != WF_OK) goto fail;
    if (t->bl_use_regex && wf__pretok_regex_state_init(&s->bl_st, &t->bl_re) != WF_OK) goto fail;
    if (pthread_setspecific(t->reg->key, s) != 0) goto nomem;
    pthread_mutex_lock(&t->reg->mu);
    s->next = t->reg->head;
    t->reg->head = s;
    pthread_mutex_unlock(&t->reg->mu);
    return s;
nomem:
    wf_error(WF_ERR_NOMEM, "out of memory creating a thread's tokenizer state");
fail:
    tls_free(s);
    return NULL;
}

static int scratch_reserve(bpe_tls *s, size_t n) {
    if (n <= s->scratch_cap) return 0;
    size_t nc = s->scratch_cap ? s->scratch_cap : 256;
    while (nc < n) nc *= 2;
    int32_t **arrs[] = {&s->sym, &s->rk, &s->mid, &s->prv, &s->nxt};
    for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++) {
        int32_t *p = realloc(*arrs[i], nc * sizeof *p);
        if (!p) return -1;
        *arrs[i] = p;
    }
    heap_ent *h = realloc(s->heap, nc * 2 * sizeof *h);
    if (!h) return -1;
    s->heap = h;
    s->heap_cap = nc * 2;
    s->scratch_cap = nc;
    return 0;
}

/* ---------------------------------------------------------------- merge */

/* Pieces up to this many symbols merge by linear scans; longer ones by a
 * heap (O(n log n)). Both give the lowest-rank, leftmost order. */
#define MERGE_LINEAR_MAX 16

static inline void pair_lookup(const wf_tokenizer *t, int32_t a, int32_t b, int32_t *rank,
                               int32_t *id) {
    const wf_pair_slot *p = wf_bpe_pair_find(t, a, b);
    *rank = p ? p->rank : INT32_MAX;
    *id = p ? p->id : -1;
}

static size_t merge_linear(const wf_tokenizer *t, int32_t *sym, int32_t *rk, int32_t *mid,
                           size_t n) {
    if (n < 2) return n;
    for (size_t i = 0; i + 1 < n; i++) pair_lookup(t, sym[i], sym[i + 1], &rk[i], &mid[i]);
    while (n > 1) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            if (rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        }
        if (best == INT32_MAX) break;
        sym[bi] = mid[bi];
        /* Symbols after bi+1 and pairs after bi+1 shift left by one. */
        memmove(sym + bi + 1, sym + bi + 2, (n - bi - 2) * sizeof *sym);
        if (bi + 2 < n) {
            memmove(rk + bi + 1, rk + bi + 2, (n - bi - 2) * sizeof *rk);
            memmove(mid + bi + 1, mid + bi + 2, (n - bi - 2) * sizeof *mid);
        }
        n--;
        if (bi + 1 < n) pair_lookup(t, sym[bi], sym[bi + 1], &rk[bi], &mid[bi]);
        if (bi > 0) pair_lookup(t, sym[bi - 1], sym[bi], &rk[bi - 1], &mid[bi - 1]);
    }
    return n;
}

static inline int heap_less(const heap_ent *a, const heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

/* The algorithm of `tokenizers` (word.rs merge_all): a heap of candidate
 * merges ordered by (rank, position), entries checked for staleness when
 * popped. It starts with at most n-1 entries and each merge pops one and
 * pushes at most two, over at most n-1 merges: never more than 2n entries,
 * which the scratch (2 * scratch_cap >= 2(n+1)) holds. */
static size_t merge_heap(const wf_tokenizer *t, bpe_tls *s, size_t n) {
    int32_t *sym = s->sym, *prv = s->prv, *nxt = s->nxt;
    heap_ent *h = s->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prv[i] = (int32_t)i - 1;
        nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const wf_pair_slot *p = wf_bpe_pair_find(t, sym[i], sym[i + 1]);
        if (p) heap_push(h, &hn, (heap_ent){p->rank, (int32_t)i, p->id});
    }
    while (hn) {
        heap_ent e = heap_pop(h, &hn);
        int32_t pos = e.pos, nx = nxt[pos];
        if (sym[pos] < 0 || nx < 0) continue;
        const wf_pair_slot *p = wf_bpe_pair_find(t, sym[pos], sym[nx]);
        if (!p || p->id != e.id) continue;
        sym[pos] = e.id;
        sym[nx] = -1;
        nxt[pos] = nxt[nx];
        if (nxt[nx] >= 0) prv[nxt[nx]] = pos;
        if (hn + 2 > s->heap_cap) {
            /* Not reached (see above); kept so a wrong bound cannot write
             * past the array. */
            if (WF_GROW(s->heap, s->heap_cap, hn + 2, 64) != WF_OK) return (size_t)-1;
            h = s->heap;
        }
        if (prv[pos] >= 0) {
            p = wf_bpe_pair_find(t, sym[prv[pos]], sym[pos]);
            if (p) heap_push(h, &hn, (heap_ent){p->rank, prv[pos], p->id});
        }
        if (nxt[pos] >= 0) {
            p = wf_bpe_pair_find(t, sym[pos], sym[nxt[pos]]);
            if (p) heap_push(h, &hn, (heap_ent){p->rank, pos, p->id});
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i]) sym[k++] = sym[i];
    return k;
}

/* ---------------------------------------------------------------- encode */

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t load32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The key of a short piece (1 <= n <= SHORT_MAX_PIECE): the two words,
 * with n, hold every byte of it, and no byte past it is read. */
static inline void short_key(const uint8_t *p, size_t n, uint64_t *a, uint64_t *b) {
    if (n >= 8) {
        *a = load64(p);
        *b = load64(p + n - 8);
    } else if (n >= 4) {
        *a = load32(p) | load32(p + n - 4) << 32;
        *b = 0;
    } else {
        *a = (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
        *b = 0;
    }
}

static inline size_t short_set_of(uint64_t a, uint64_t b, size_t n) {
    uint64_t h = (a ^ (b << 23 | b >> 41) ^ (uint64_t)n << 56) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return (size_t)(h >> 17) & (SHORT_SETS - 1);
}

static inline wf_status ids_append_few(wf_ids *v, const int32_t *ids, size_t n) {
    if (v->n + n > v->cap) WF_TRY(ids_reserve(v, n));
    for (size_t i = 0; i < n; i++) v->ids[v->n + i] = ids[i];
    v->n += n;
    return WF_OK;
}

static wf_status encode_piece_long(const wf_tokenizer *t, bpe_tls *s, const uint8_t *p, size_t n,
                                   wf_ids *out, short_slot *short_set, uint64_t ka, uint64_t kb);

/* nids of a short entry whose ids are in the general cache. */
#define SHORT_IN_GENERAL 0xFF

static wf_status encode_piece(const wf_tokenizer *t, bpe_tls *s, const uint8_t *p, size_t n,
                              wf_ids *out) {
    if (n == 0 || n > SHORT_MAX_PIECE) return encode_piece_long(t, s, p, n, out, NULL, 0, 0);
    uint64_t a, b;
    short_key(p, n, &a, &b);
    short_slot *set = s->short_slots + 2 * short_set_of(a, b, n);
    for (int w = 0; w < 2; w++) {
        if (set[w].a == a && set[w].b == b && set[w].len == n) {
            if (set[w].nids == SHORT_IN_GENERAL) return encode_piece_long(t, s, p, n, out, NULL, 0, 0);
            return ids_append_few(out, set[w].ids, set[w].nids);
        }
    }
    return encode_piece_long(t, s, p, n, out, set, a, b);
}

/* The general cache's entry for a piece (n <= CACHE_MAX_PIECE, hash h), or
 * NULL and in *empty the free slot where it would go. */
static cache_slot *general_find(bpe_tls *s, const uint8_t *p, size_t n, uint64_t h,
                                cache_slot **empty) {
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        cache_slot *c = &s->slots[i];
        if (c->klen == 0) {
            *empty = c;
            return NULL;
        }
        if (c->hash == h && c->klen == n && memcmp(s->cbytes + c->koff, p, n) == 0) return c;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

/* A piece the short cache does not hold (short_set: the set it belongs
 * in, NULL if it is too long or its ids are in the general cache): looked
 * up in the general cache (pieces up to CACHE_MAX_PIECE bytes, when not
 * short), else merged and cached, a short piece of few ids in way 0 of
 * its short set (the older entry moving to way 1). */
static wf_status encode_piece_long(const wf_tokenizer *t, bpe_tls *s, const uint8_t *p, size_t n,
                                   wf_ids *out, short_slot *short_set, uint64_t ka, uint64_t kb) {
    uint64_t h = 0;
    cache_slot *slot = NULL;
    if (n <= CACHE_MAX_PIECE && !short_set) {
        h = wf_hash64(p, n);
        cache_slot *c = general_find(s, p, n, h, &slot);
        if (c) return ids_append(out, s->cids + c->ioff, c->nids);
    }
    if (scratch_reserve(s, n + 1) != 0)
        return wf_error(WF_ERR_NOMEM, "out of memory encoding a piece of %zu bytes", n);
    int32_t *sym = s->sym;
    size_t k = 0;
    int64_t *whole = t->ignore_merges ? wf__bpe_strmap_find(&t->byte_ids, p, n, wf_hash64(p, n)) : NULL;
    if (whole) {
        sym[k++] = (int32_t)*whole;
    } else {
        int prev_unk = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[p[i]];
            if (id >= 0) {
                sym[k++] = id;
                prev_unk = 0;
            } else if (t->unk_id >= 0) {
                if (!(t->fuse_unk && prev_unk)) sym[k++] = t->unk_id;
                prev_unk = 1;
            }
            /* else: dropped, as `tokenizers` does without an unk_token */
        }
        if (k <= MERGE_LINEAR_MAX) {
            k = merge_linear(t, sym, s->rk, s->mid, k);
        } else {
            k = merge_heap(t, s, k);
            if (k == (size_t)-1)
                return wf_error(WF_ERR_NOMEM, "out of memory merging a piece of %zu bytes", n);
        }
    }
    if (short_set) {
        short_set[1] = short_set[0];
        short_slot *e = &short_set[0];
        e->a = ka;
        e->b = kb;
        e->len = (uint8_t)n;
        e->nids = k <= SHORT_MAX_IDS ? (uint8_t)k : SHORT_IN_GENERAL;
        for (size_t i = 0; i < k && i < SHORT_MAX_IDS; i++) e->ids[i] = sym[i];
        if (k > SHORT_MAX_IDS) {
            /* Too many ids to hold here: they go to the general cache
             * (unless it still has them from before). */
            h = wf_hash64(p, n);
            if (general_find(s, p, n, h, &slot)) slot = NULL;
        }
    }
    if (slot) {
        if (s->n_cached * 2 >= CACHE_SLOTS || s->cbytes_len + n > CACHE_BYTES ||
            s->cids_len + k > CACHE_IDS) {
            cache_clear(s);
            size_t i = (size_t)h & (CACHE_SLOTS - 1);
            slot = &s->slots[i];
        }
        memcpy(s->cbytes + s->cbytes_len, p, n);
        memcpy(s->cids + s->cids_len, sym, k * sizeof *sym);
        *slot = (cache_slot){h, (uint32_t)s->cbytes_len, (uint32_t)s->cids_len, (uint16_t)n,
                             (uint16_t)k};
        s->cbytes_len += n;
        s->cids_len += k;
        s->n_cached++;
    }
    return ids_append(out, sym, k);
}

/* ByteLevel stage: optional prefix space, optional GPT-2 split. */
static wf_status encode_bytelevel(const wf_tokenizer *t, bpe_tls *s, const char *p, size_t n,
                                  wf_ids *out) {
    if (t->bl_add_prefix_space && p[0] != ' ') {
        if (n + 1 > s->pbuf_cap) {
            size_t nc = s->pbuf_cap ? s->pbuf_cap : 1024;
            while (nc < n + 1) nc *= 2;
            char *nb = malloc(nc);
            if (!nb) return wf_error(WF_ERR_NOMEM, "out of memory for a %zu-byte segment", n);
            free(s->pbuf);
            s->pbuf = nb;
            s->pbuf_cap = nc;
        }
        s->pbuf[0] = ' ';
        memcpy(s->pbuf + 1, p, n);
        p = s->pbuf;
        n++;
    }
    if (!t->bl_use_regex) {
        if (s->sink) return s->sink(s->sink_ctx, p, n);
        return encode_piece(t, s, (const uint8_t *)p, n, out);
    }
    wf_split_iter it;
    wf__pretok_split_begin(&it, &t->bl_re, p, n);
    size_t off, len;
    int r;
    while ((r = wf__pretok_split_next(&t->bl_re, &s->bl_st, &it, &off, &len)) > 0) {
        if (s->sink) WF_TRY(s->sink(s->sink_ctx, p + off, len));
        else WF_TRY(encode_piece(t, s, (const uint8_t *)p + off, len, out));
    }
    return r < 0 ? WF_ERR_INTERNAL : WF_OK;
}

/* Pieces looked up together: their cache sets are prefetched while the
 * next ones are scanned, so the memory latency of one lookup overlaps the
 * work of the others instead of stalling each piece in turn. */
#define SCAN_BATCH 16

/* The whole pre-tokenizer is one built-in pattern run by the scanner and
 * each of its pieces goes to the merges as it is: the Split of a llama3
 * tokenizer with a plain ByteLevel, or a GPT-2 ByteLevel without a prefix
 * space. */
static wf_status encode_scanned(const wf_tokenizer *t, bpe_tls *s, int scan, const char *text,
                                size_t n, wf_ids *out) {
    const uint8_t *p = (const uint8_t *)text;
    struct {
        size_t off, len;
        uint64_t a, b;
        short_slot *set;
    } q[SCAN_BATCH];
    size_t pos = 0;
    while (pos < n) {
        int m = 0;
        for (; m < SCAN_BATCH && pos < n; m++) {
            size_t len = wf__pretok_scan_piece(scan, p, n, pos);
            q[m].off = pos;
            q[m].len = len;
            q[m].set = NULL;
            if (len <= SHORT_MAX_PIECE) {
                short_key(p + pos, len, &q[m].a, &q[m].b);
                q[m].set = s->short_slots + 2 * short_set_of(q[m].a, q[m].b, len);
                __builtin_prefetch(q[m].set);
                __builtin_prefetch(q[m].set + 1);
            }
            pos += len;
        }
        for (int i = 0; i < m; i++) {
            short_slot *set = q[i].set;
            const uint8_t *pp = p + q[i].off;
            size_t len = q[i].len;
            if (!set) {
                WF_TRY(encode_piece_long(t, s, pp, len, out, NULL, 0, 0));
                continue;
            }
            int w = set[0].a == q[i].a && set[0].b == q[i].b && set[0].len == len   ? 0
                    : set[1].a == q[i].a && set[1].b == q[i].b && set[1].len == len ? 1
                                                                                    : -1;
            if (w < 0) WF_TRY(encode_piece_long(t, s, pp, len, out, set, q[i].a, q[i].b));
            else if (set[w].nids == SHORT_IN_GENERAL)
                WF_TRY(encode_piece_long(t, s, pp, len, out, NULL, 0, 0));
            else WF_TRY(ids_append_few(out, set[w].ids, set[w].nids));
        }
    }
    return WF_OK;
}

/* A segment of text with no added tokens in it. */
static wf_status encode_segment(const wf_tokenizer *t, bpe_tls *s, const char *p, size_t n,
                                wf_ids *out) {
    if (n == 0) return WF_OK;
    if (!s->sink && !t->bl_add_prefix_space) {
        if (t->split_pattern && t->split_re.scan && !t->bl_use_regex)
            return encode_scanned(t, s, t->split_re.scan, p, n, out);
        if (!t->split_pattern && t->bl_use_regex && t->bl_re.scan)
            return encode_scanned(t, s, t->bl_re.scan, p, n, out);
    }
    if (!t->split_pattern) return encode_bytelevel(t, s, p, n, out);
    wf_split_iter it;
    wf__pretok_split_begin(&it, &t->split_re, p, n);
    size_t off, len;
    int r;
    while ((r = wf__pretok_split_next(&t->split_re, &s->split_st, &it, &off, &len)) > 0) {
        /* With a prefix space the ByteLevel stage copies into pbuf, which
         * the split iterator does not read from: p is the caller's text. */
        WF_TRY(encode_bytelevel(t, s, p + off, len, out));
    }
    return r < 0 ? WF_ERR_INTERNAL : WF_OK;
}

static int added_active(const wf_added_token *a, int pass, int parse_special) {
    return (a->normalized ? 1 : 0) == pass && (parse_special || !a->special);
}

/* Cuts the added tokens of `pass` (0: normalized=false, 1: normalized=true)
 * out of [p, p+n), leftmost-longest, and encodes the rest. */
static wf_status encode_added(const wf_tokenizer *t, bpe_tls *s, const char *p, size_t n, int pass,
                              int parse_special, wf_ids *out) {
    if (pass > 1) return encode_segment(t, s, p, n, out);
    size_t gap = 0;
    int single = t->added_single_first[pass];
    for (size_t i = 0; i < n; i++) {
        if (single >= 0) {
            /* All tokens of this pass start with one byte: jump to it. */
            const char *q = memchr(p + i, single, n - i);
            if (!q) break;
            i = (size_t)(q - p);
        } else if (!(t->added_first[(unsigned char)p[i]] & (1u << pass))) {
            continue;
        }
        size_t best_len = 0;
        int32_t best_id = -1;
        for (size_t a = 0; a < t->n_added; a++) {
            const wf_added_token *tok = &t->added[a];
            if (tok->len > best_len && tok->len <= n - i && (unsigned char)tok->content[0] ==
                (unsigned char)p[i] && added_active(tok, pass, parse_special) &&
                memcmp(tok->content, p + i, tok->len) == 0) {
                best_len = tok->len;
                best_id = tok->id;
            }
        }
        if (!best_len) continue;
        WF_TRY(encode_added(t, s, p + gap, i - gap, pass + 1, parse_special, out));
        WF_TRY(wf_ids_push(out, best_id));
        i += best_len - 1;
        gap = i + 1;
    }
    return encode_added(t, s, p + gap, n - gap, pass + 1, parse_special, out);
}

wf_status wf_tokenizer_encode(const wf_tokenizer *t, const char *text, size_t len, int parse_special,
                              wf_ids *out) {
    if (!t || (!text && len)) return wf_error(WF_ERR_INVALID, "wf_tokenizer_encode: NULL argument");
    bpe_tls *s = tls_get(t);
    if (!s) return WF_ERR_NOMEM;
    /* Special tokens only, and not parsed: no added token can match. */
    if (!t->has_added || (!parse_special && !t->has_plain_added))
        return encode_segment(t, s, text, len, out);
    return encode_added(t, s, text, len, 0, parse_special, out);
}

wf_status wf_tokenizer_pretokenize(const wf_tokenizer *t, const char *text, size_t len,
                                   wf_piece_fn fn, void *ctx) {
    if (!t || !fn || (!text && len))
        return wf_error(WF_ERR_INVALID, "wf_tokenizer_pretokenize: NULL argument");
    bpe_tls *s = tls_get(t);
    if (!s) return WF_ERR_NOMEM;
    s->sink = fn;
    s->sink_ctx = ctx;
    wf_status st = encode_segment(t, s, text, len, NULL);
    s->sink = NULL;
    return st;
}

size_t wf_tokenizer_bytes_to_str(const void *bytes, size_t n, char *out) {
    return wf__bpe_bytes_to_str(bytes, n, out);
}

/* ---------------------------------------------------------------- decode */

const char *wf_tokenizer_id_bytes(const wf_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (size_t)id >= t->n_ids || t->kind[id] == WF_ID_HOLE) return NULL;
    *len = (size_t)(t->dec_off[id + 1] - t->dec_off[id]);
    return t->dec + t->dec_off[id];
}

wf_status wf_tokenizer_decode(const wf_tokenizer *t, const int32_t *ids, size_t n, char **out,
                              size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_ids || t->kind[id] == WF_ID_HOLE)
            return wf_error(WF_ERR_RANGE,
                            "decode: id %d at position %zu is not in the vocabulary (size %zu)",
                            id, i, t->n_ids);
        total += (size_t)(t->dec_off[id + 1] - t->dec_off[id]);
    }
    char *buf = malloc(total + 1);
    if (!buf) return wf_error(WF_ERR_NOMEM, "decode: out of memory for %zu bytes", total);
    char *o = buf;
    for (size_t i = 0; i < n; i++) {
        size_t l = (size_t)(t->dec_off[ids[i] + 1] - t->dec_off[ids[i]]);
        memcpy(o, t->dec + t->dec_off[ids[i]], l);
        o += l;
    }
    *o = '\0';
    *out = buf;
    *len = total;
    return WF_OK;
}

/* ------------------------------------------------------------ accessors */

size_t wf_tokenizer_vocab_size(const wf_tokenizer *t) { return t->n_ids; }
int32_t wf_tokenizer_bos(const wf_tokenizer *t) { return t->bos; }
int32_t wf_tokenizer_eos(const wf_tokenizer *t) { return t->eos; }
int32_t wf_tokenizer_pad(const wf_tokenizer *t) { return t->pad; }

int32_t wf_tokenizer_token_id(const wf_tokenizer *t, const char *token) {
    size_t n = strlen(token);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, token, n) == 0) return t->added[i].id;
    int64_t *v = wf__bpe_strmap_find(&t->str_ids, token, n, wf_hash64(token, n));
    return v ? (int32_t)*v : -1;
}

void wf_tokenizer_get_info(const wf_tokenizer *t, wf_tokenizer_info *out) {
    memset(out, 0, sizeof *out);
    out->vocab_size = t->n_ids;
    out->n_model_tokens = t->n_vocab;
    out->n_merges = t->n_merges;
    out->n_added = t->n_added;
    out->pattern = t->split_pattern ? t->split_pattern : t->bl_use_regex ? wf__pretok_gpt2 : NULL;
    out->pattern_name = t->split_literal ? NULL : wf__pretok_name_of(out->pattern);
    out->ignore_merges = t->ignore_merges;
    char bl[96];
    snprintf(bl, sizeof bl, "ByteLevel(add_prefix_space=%s, use_regex=%s)",
             t->bl_add_prefix_space ? "true" : "false", t->bl_use_regex ? "true" : "false");
    if (t->pretok_is_bl_only)
        snprintf(out->pretokenizer, sizeof out->pretokenizer, "%s", bl);
    else
        snprintf(out->pretokenizer, sizeof out->pretokenizer, "Sequence[%s%s]",
                 t->split_pattern ? (t->split_literal ? "Split(String), " : "Split(Regex), ") : "", bl);
}

void wf_tokenizer_added(const wf_tokenizer *t, size_t i, const char **content, int32_t *id,
                        int *special) {
    *content = t->added[i].content;
    *id = t->added[i].id;
    *special = t->added[i].special;
}

/* ------------------------------------------------------- build / destroy */

wf_tokenizer *wf__bpe_alloc(void) {
    wf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->unk_id = t->bos = t->eos = t->pad = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

static int32_t find_special(const wf_tokenizer *t, const char *const *names, size_t n) {
    for (size_t k = 0; k < n; k++) {
        int32_t id = wf_tokenizer_token_id(t, names[k]);
        if (id >= 0) return id;
    }
    return -1;
}

wf_status wf__bpe_build(wf_tokenizer *t, const char *where) {
    size_t n = t->n_ids;
    /* string -> id, and bytes -> id, over the model vocabulary */
    WF_TRY(wf__bpe_strmap_init(&t->str_ids, t->n_vocab));
    WF_TRY(wf__bpe_strmap_init(&t->byte_ids, t->n_vocab));
    t->kind = calloc(n ? n : 1, 1);
    t->dec_off = calloc(n + 1, sizeof *t->dec_off);
    if (!t->kind || !t->dec_off) return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
    size_t dec_cap = 0;
    for (size_t i = 0; i < n; i++)
        if (t->vocab_str[i]) dec_cap += strlen(t->vocab_str[i]);
    for (size_t i = 0; i < t->n_added; i++) dec_cap += t->added[i].len;
    t->dec = malloc(dec_cap + 1);
    uint8_t *tmp = malloc(4096);
    if (!t->dec || !tmp) {
        free(tmp);
        return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
    }
    for (size_t i = 0; i < t->n_added; i++) t->kind[t->added[i].id] = WF_ID_ADDED;
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t->dec_off[i] = off;
        const char *str = t->vocab_str[i];
        if (t->kind[i] == WF_ID_ADDED) {
            for (size_t a = 0; a < t->n_added; a++) {
                if (t->added[a].id != (int32_t)i) continue;
                memcpy(t->dec + off, t->added[a].content, t->added[a].len);
                off += t->added[a].len;
                break;
            }
        }
        if (!str) continue;
        size_t sl = strlen(str);
        int ins = 0;
        int64_t *v = wf__bpe_strmap_upsert(&t->str_ids, str, sl, wf_hash64(str, sl), (int64_t)i, &ins);
        if (!v) {
            free(tmp);
            return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
        }
        if (!ins) {
            free(tmp);
            return wf_error(WF_ERR_FORMAT, "%s: model.vocab has the token \"%s\" twice (ids %lld and %zu)",
                            where, str, (long long)*v, i);
        }
        if (sl > 4096) {
            uint8_t *nt = realloc(tmp, sl);
            if (!nt) {
                free(tmp);
                return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
            }
            tmp = nt;
        }
        long bl = wf__bpe_str_to_bytes(str, sl, tmp);
        if (bl > 0) {
            v = wf__bpe_strmap_upsert(&t->byte_ids, tmp, (size_t)bl, wf_hash64(tmp, (size_t)bl),
                                 (int64_t)i, NULL);
            if (!v) {
                free(tmp);
                return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
            }
        }
        if (t->kind[i] == WF_ID_ADDED) continue;
        t->kind[i] = WF_ID_MODEL;
        /* As the ByteLevel decoder does: alphabet strings decode to their
         * bytes, anything else to its own UTF-8. */
        if (bl >= 0) {
            memcpy(t->dec + off, tmp, (size_t)bl);
            off += (size_t)bl;
        } else {
            memcpy(t->dec + off, str, sl);
            off += sl;
        }
    }
    t->dec_off[n] = off;
    free(tmp);
    t->has_added = t->n_added > 0;
    for (size_t a = 0; a < t->n_added; a++) t->has_plain_added |= !t->added[a].special;
    for (size_t a = 0; a < t->n_added; a++)
        t->added_first[(unsigned char)t->added[a].content[0]] |= (uint8_t)(1u << (t->added[a].normalized ? 1 : 0));
    for (int pass = 0; pass < 2; pass++) {
        int n_first = 0, first = -1;
        for (int b = 0; b < 256; b++)
            if (t->added_first[b] & (1u << pass)) {
                n_first++;
                first = b;
            }
        t->added_single_first[pass] = n_first == 1 ? first : -1;
    }

    for (int b = 0; b < 256; b++) {
        char s[4];
        uint8_t byte = (uint8_t)b;
        size_t sl = wf__bpe_bytes_to_str(&byte, 1, s);
        int64_t *v = wf__bpe_strmap_find(&t->str_ids, s, sl, wf_hash64(s, sl));
        t->byte_id[b] = v ? (int32_t)*v : -1;
    }
    if (t->unk_token) {
        size_t sl = strlen(t->unk_token);
        int64_t *v = wf__bpe_strmap_find(&t->str_ids, t->unk_token, sl, wf_hash64(t->unk_token, sl));
        if (!v)
            return wf_error(WF_ERR_FORMAT, "%s: model.unk_token \"%s\" is not in model.vocab", where,
                            t->unk_token);
        t->unk_id = (int32_t)*v;
    }

    /* Merge table: open addressing over (left, right). A pair listed twice
     * keeps its last rank, as `tokenizers` (a HashMap built in order) does. */
    size_t cap = 16;
    while (cap < t->n_merges * 2 + 2) cap *= 2;
    t->pairs = malloc(cap * sizeof *t->pairs);
    if (!t->pairs) return wf_error(WF_ERR_NOMEM, "%s: out of memory for %zu merges", where, t->n_merges);
    for (size_t i = 0; i < cap; i++) t->pairs[i].key = UINT64_MAX;
    t->pairs_cap = cap;
    /* About 16 bits per merge (a few percent of false positives), at least
     * 2^16 bits. */
    unsigned log2_bits = 16;
    while (log2_bits < 30 && ((size_t)1 << log2_bits) < t->n_merges * 16) log2_bits++;
    t->filter_shift = 64 - log2_bits;
    t->pair_filter = calloc(((size_t)1 << log2_bits) / 64, sizeof *t->pair_filter);
    if (!t->pair_filter) return wf_error(WF_ERR_NOMEM, "%s: out of memory for %zu merges", where, t->n_merges);
    for (size_t r = 0; r < t->n_merges; r++) {
        uint64_t key = (uint64_t)(uint32_t)t->merges[r][0] << 32 | (uint32_t)t->merges[r][1];
        uint64_t h = key * 0x9E3779B97F4A7C15ull, bit = h >> t->filter_shift;
        t->pair_filter[bit >> 6] |= (uint64_t)1 << (bit & 63);
        size_t i = (size_t)(h >> 32) & (cap - 1);
        while (t->pairs[i].key != UINT64_MAX && t->pairs[i].key != key) i = (i + 1) & (cap - 1);
        t->pairs[i] = (wf_pair_slot){key, (int32_t)r, t->merges[r][2]};
    }

    static const char *const bos[] = {"<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>"};
    static const char *const eos[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"};
    static const char *const pad[] = {"<|pad|>", "<pad>", "<|padding|>", "[PAD]"};
    t->bos = find_special(t, bos, 4);
    t->eos = find_special(t, eos, 4);
    t->pad = find_special(t, pad, 4);

    if (t->split_pattern) WF_TRY(wf__pretok_regex_compile(&t->split_re, t->split_pattern, t->split_literal, where));
    if (t->bl_use_regex) WF_TRY(wf__pretok_regex_compile(&t->bl_re, wf__pretok_gpt2, 0, where));

    t->reg = calloc(1, sizeof *t->reg);
    if (!t->reg) return wf_error(WF_ERR_NOMEM, "%s: out of memory", where);
    if (pthread_key_create(&t->reg->key, tls_exit) != 0) {
        free(t->reg);
        t->reg = NULL;
        return wf_error(WF_ERR_INTERNAL, "%s: no thread-local key left for the tokenizer", where);
    }
    pthread_mutex_init(&t->reg->mu, NULL);
    return WF_OK;
}

void wf_tokenizer_destroy(wf_tokenizer *t) {
    if (!t) return;
    if (t->reg) {
        pthread_mutex_lock(&t->reg->mu);
        bpe_tls *s = t->reg->head;
        while (s) {
            bpe_tls *nx = s->next;
            tls_free(s);
            s = nx;
        }
        t->reg->head = t->reg->idle = NULL;
        pthread_mutex_unlock(&t->reg->mu);
        /* This thread's value would otherwise dangle until the key is
         * reused; other threads' values are unreachable once it is gone. */
        pthread_setspecific(t->reg->key, NULL);
        pthread_key_delete(t->reg->key);
        pthread_mutex_destroy(&t->reg->mu);
        free(t->reg);
    }
    if (t->vocab_str)
        for (size_t i = 0; i < t->n_ids; i++) free(t->vocab_str[i]);
    free(t->vocab_str);
    free(t->merges);
    free(t->unk_token);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->split_pattern);
    free(t->post_processor_json);
    wf__bpe_strmap_free(&t->str_ids);
    wf__bpe_strmap_free(&t->byte_ids);
    free(t->pairs);
    free(t->pair_filter);
    free(t->kind);
    free(t->dec_off);
    free(t->dec);
    wf__pretok_regex_free(&t->split_re);
    wf__pretok_regex_free(&t->bl_re);
    free(t);
}

/* ---------------------------------------------------------- fingerprint */

static void fp_u64(wf_hasher *h, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    wf_hasher_update(h, b, 8);
}

static void fp_bytes(wf_hasher *h, const void *p, size_t n) {
    fp_u64(h, n);
    if (n) wf_hasher_update(h, p, n);
}

wf_status wf_tokenizer_fingerprint(const wf_tokenizer *t, uint64_t *out) {
    wf_hasher *h = wf_hasher_create();
    if (!h) return wf_error(WF_ERR_NOMEM, "tokenizer fingerprint: out of memory");
    static const char tag[] = "weft-tokenizer-fingerprint/1";
    wf_hasher_update(h, tag, sizeof tag);
    /* What every id means: its kind and its bytes. */
    fp_u64(h, t->n_ids);
    for (size_t id = 0; id < t->n_ids; id++) {
        fp_u64(h, t->kind[id]);
        fp_bytes(h, t->dec + t->dec_off[id], (size_t)(t->dec_off[id + 1] - t->dec_off[id]));
    }
    /* How text becomes ids: the merges in rank order, the added tokens
     * and their matching flags, the pre-tokenizer. */
    fp_u64(h, t->n_merges);
    for (size_t i = 0; i < t->n_merges; i++)
        for (int j = 0; j < 3; j++) fp_u64(h, (uint64_t)(uint32_t)t->merges[i][j]);
    fp_u64(h, t->n_added);
    for (size_t i = 0; i < t->n_added; i++) {
        const wf_added_token *a = &t->added[i];
        fp_bytes(h, a->content, a->len);
        const int flags[6] = {a->id, a->special, a->normalized, a->single_word, a->lstrip, a->rstrip};
        for (int j = 0; j < 6; j++) fp_u64(h, (uint64_t)(uint32_t)flags[j]);
    }
    fp_u64(h, t->split_pattern != NULL);
    if (t->split_pattern) fp_bytes(h, t->split_pattern, strlen(t->split_pattern));
    const int pre[7] = {t->split_literal, t->bl_use_regex,  t->bl_add_prefix_space, t->pretok_is_bl_only,
                        t->ignore_merges, t->unk_id,        t->fuse_unk};
    for (int j = 0; j < 7; j++) fp_u64(h, (uint64_t)(uint32_t)pre[j]);
    *out = wf_hasher_digest(h);
    wf_hasher_destroy(h);
    return WF_OK;
}

wf_status wf_tokenizer_file_fingerprint(const char *path, uint64_t *out) {
    wf_tokenizer *t = NULL;
    WF_TRY(wf_tokenizer_load(&t, path));
    wf_status s = wf_tokenizer_fingerprint(t, out);
    wf_tokenizer_destroy(t);
    return s;
}
