/* Training a byte-level BPE vocabulary.
 *
 * 1. Count: documents from wf_docs are gathered into batches; threads split
 *    each batch by bytes, cut it into pre-tokenizer pieces and count the
 *    distinct pieces in their own hash maps, which are summed at the end.
 *    Counts are sums, so the result does not depend on the thread count.
 *    Long documents are cut into units at a "\n" followed by an ASCII
 *    letter, a place where both built-in patterns always end a piece, so
 *    cutting changes no piece.
 * 2. Merge: each distinct piece is a word of symbols (initially its bytes)
 *    with a weight. Pair counts, a list per pair of the words it occurs in,
 *    and a max-heap of (count, left, right) with lazy invalidation (a pair's
 *    count only falls until it is merged, so a popped entry whose count is
 *    out of date is pushed back with the current one). Ties go to the
 *    smaller (left id, right id): the run is deterministic.
 *
 * Vocabulary layout: ids 0-255 are the byte tokens in byte order, then one
 * id per learned token in merge order, then the special tokens. When a
 * merge produces a string that is already a token, the merge is recorded
 * with the existing id, as `tokenizers`' trainer does.
 */
#include <stdlib.h>
#include <string.h>

#include "weft/buf.h"
#include "data/bpe_impl.h"
#include "weft/docs.h"
#include "weft/log.h"
#include "weft/progress.h"
#include "weft/thread.h"

#define BATCH_BYTES ((size_t)32 << 20)
#define UNIT_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------- counting */

typedef struct {
    const wf_regex *re;
    wf_regex_state *st; /* [n_threads] */
    wf_strmap *maps;    /* [n_threads] */
    uint64_t *n_pieces; /* [n_threads] */
    const char *buf;
    const size_t *unit_off; /* unit i is buf[unit_off[i], unit_off[i+1]) */
    size_t n_units;
} count_ctx;

static wf_status count_task(void *arg, int tid, int n_threads) {
    count_ctx *c = arg;
    /* Units [lo, hi) hold this thread's share of the batch's bytes. */
    size_t total = c->unit_off[c->n_units];
    size_t lo_b = total * (size_t)tid / (size_t)n_threads;
    size_t hi_b = total * (size_t)(tid + 1) / (size_t)n_threads;
    size_t lo = 0, hi = 0;
    while (lo < c->n_units && c->unit_off[lo] < lo_b) lo++;
    hi = lo;
    while (hi < c->n_units && c->unit_off[hi] < hi_b) hi++;
    wf_strmap *m = &c->maps[tid];
    for (size_t u = lo; u < hi; u++) {
        const char *s = c->buf + c->unit_off[u];
        size_t n = c->unit_off[u + 1] - c->unit_off[u], off, len;
        wf_split_iter it;
        wf__pretok_split_begin(&it, c->re, s, n);
        int r;
        while ((r = wf__pretok_split_next(c->re, &c->st[tid], &it, &off, &len)) > 0) {
            int64_t *v = wf__bpe_strmap_upsert(m, s + off, len, wf__bpe_hash(s + off, len), 0, NULL);
            if (!v) return wf_error(WF_ERR_NOMEM, "tokenizer train: out of memory counting pieces");
            (*v)++;
            c->n_pieces[tid]++;
        }
        if (r < 0) return WF_ERR_INTERNAL;
    }
    return WF_OK;
}

typedef struct {
    char *buf;
    size_t len, cap;
    size_t *off; /* unit starts, plus the end */
    size_t n, off_cap;
} batch;

static wf_status batch_add_unit(batch *b, size_t start) {
    if (WF_GROW(b->off, b->off_cap, b->n + 2, 1024) != WF_OK)
        return wf_error_wrap(WF_ERR_NOMEM, "tokenizer train: ");
    b->off[b->n++] = start;
    return WF_OK;
}

static int is_ascii_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* Appends a document, cut into units of about UNIT_BYTES. */
static wf_status batch_add(batch *b, const char *text, size_t len) {
    if (b->len + len > b->cap) {
        size_t nc = b->cap ? b->cap : BATCH_BYTES + UNIT_BYTES;
        while (nc < b->len + len) nc *= 2;
        char *p = realloc(b->buf, nc);
        if (!p) return wf_error(WF_ERR_NOMEM, "tokenizer train: out of memory for a %zu-byte document", len);
        b->buf = p;
        b->cap = nc;
    }
    memcpy(b->buf + b->len, text, len);
    size_t base = b->len, start = 0;
    WF_TRY(batch_add_unit(b, base));
    while (len - start > 2 * UNIT_BYTES) {
        size_t i = start + UNIT_BYTES;
        while (i + 1 < len && !(text[i] == '\n' && is_ascii_letter(text[i + 1]))) i++;
        if (i + 1 >= len) break;
        start = i + 1;
        WF_TRY(batch_add_unit(b, base + start));
    }
    b->len += len;
    return WF_OK;
}

typedef struct {
    const char *key;
    uint32_t len;
    int64_t cnt;
} piece;

static int piece_cmp(const void *x, const void *y) {
    const piece *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->key, b->key, n);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

/* Counts the pieces of every document into *counts. */
static wf_status count_pieces(const wf_bpe_train_opts *o, const wf_regex *re, int n_threads,
                              wf_strmap *counts, uint64_t *n_pieces_out, uint64_t *n_docs_out,
                              uint64_t *n_bytes_out) {
    wf_docs_opts dopts = {(wf_text_doc_mode)o->text_mode, o->field};
    wf_docs *docs = NULL;
    WF_TRY(wf_docs_open(&docs, o->paths, o->n_paths, &dopts));
    count_ctx c = {0};
    c.re = re;
    c.st = calloc((size_t)n_threads, sizeof *c.st);
    c.maps = calloc((size_t)n_threads, sizeof *c.maps);
    c.n_pieces = calloc((size_t)n_threads, sizeof *c.n_pieces);
    batch b = {0};
    wf_status st = WF_OK;
    int n_init = 0;
    if (!c.st || !c.maps || !c.n_pieces) {
        st = wf_error(WF_ERR_NOMEM, "tokenizer train: out of memory");
        goto out;
    }
    for (; n_init < n_threads; n_init++) {
        if ((st = wf__pretok_regex_state_init(&c.st[n_init], re)) != WF_OK) goto out;
        if ((st = wf__bpe_strmap_init(&c.maps[n_init], 1 << 16)) != WF_OK) {
            wf__pretok_regex_state_free(&c.st[n_init]);
            goto out;
        }
    }
    wf_progress prog;
    wf_progress_init(&prog, "counting pieces", "B", wf_docs_total(docs));
    uint64_t n_bytes = 0;
    for (int end = 0; !end;) {
        b.len = b.n = 0;
        while (b.len < BATCH_BYTES) {
            const char *text;
            size_t len;
            if ((st = wf_docs_next(docs, &text, &len)) != WF_OK) goto out;
            if (!text) {
                end = 1;
                break;
            }
            if ((st = batch_add(&b, text, len)) != WF_OK) goto out;
        }
        if (b.n == 0) break;
        if ((st = batch_add_unit(&b, b.len)) != WF_OK) goto out;
        b.n--; /* the end offset is not a unit */
        n_bytes += b.len;
        c.buf = b.buf;
        c.unit_off = b.off;
        c.n_units = b.n;
        if ((st = wf_parallel_run(n_threads, count_task, &c)) != WF_OK) goto out;
        wf_progress_update(&prog, wf_docs_progress(docs));
    }
    wf_progress_done(&prog);
    *n_docs_out = wf_docs_count(docs);
    *n_bytes_out = n_bytes;
    /* Sum the threads' maps into the first. */
    *n_pieces_out = c.n_pieces[0];
    for (int t = 1; t < n_threads; t++) {
        *n_pieces_out += c.n_pieces[t];
        const wf_strmap *m = &c.maps[t];
        for (size_t i = 0; i < m->cap; i++) {
            const wf_strmap_slot *s = &m->slots[i];
            if (s->len == UINT32_MAX) continue;
            int64_t *v = wf__bpe_strmap_upsert(&c.maps[0], wf_strmap_key(m, s), s->len, s->hash, 0, NULL);
            if (!v) {
                st = wf_error(WF_ERR_NOMEM, "tokenizer train: out of memory merging counts");
                goto out;
            }
            *v += s->val;
        }
    }
    *counts = c.maps[0];
    memset(&c.maps[0], 0, sizeof c.maps[0]);
out:
    for (int t = 0; t < n_init; t++) {
        wf__pretok_regex_state_free(&c.st[t]);
        wf__bpe_strmap_free(&c.maps[t]);
    }
    free(c.st);
    free(c.maps);
    free(c.n_pieces);
    free(b.buf);
    free(b.off);
    wf_docs_destroy(docs);
    return st;
}

/* -------------------------------------------------------------- merging */

typedef struct {
    int64_t cnt;
    int32_t a, b;
    uint32_t *where; /* words this pair occurred in (may repeat, may be stale) */
    uint32_t n_where, cap_where;
    uint32_t last_word;
    uint32_t pushed; /* step + 1 at which it was last pushed as a new pair */
} pair_info;

typedef struct {
    int64_t cnt;
    int32_t a, b;
} pq_ent;

typedef struct {
    /* words */
    int32_t *sym;   /* all words' symbols, word w at sym[wstart[w]], wlen[w] of them */
    size_t *wstart;
    uint32_t *wlen;
    int64_t *wcnt;
    uint32_t *wstamp;
    size_t n_words;
    /* pairs */
    pair_info *pairs;
    size_t n_pairs, cap_pairs;
    uint64_t *pkeys; /* open addressing: key (a<<32|b) or UINT64_MAX */
    uint32_t *pidx;
    size_t pcap;
    /* heap */
    pq_ent *heap;
    size_t hn, hcap;
    /* pairs created in the current step */
    uint32_t *touched;
    size_t n_touched, cap_touched;
} trainer;

static int pq_better(const pq_ent *x, const pq_ent *y) {
    if (x->cnt != y->cnt) return x->cnt > y->cnt;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int pq_push(trainer *tr, pq_ent e) {
    if (WF_GROW(tr->heap, tr->hcap, tr->hn + 1, 4096) != WF_OK) return -1;
    size_t i = tr->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!pq_better(&e, &tr->heap[p])) break;
        tr->heap[i] = tr->heap[p];
        i = p;
    }
    tr->heap[i] = e;
    return 0;
}

static pq_ent pq_pop(trainer *tr) {
    pq_ent top = tr->heap[0], last = tr->heap[--tr->hn];
    size_t i = 0, n = tr->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pq_better(&tr->heap[c + 1], &tr->heap[c])) c++;
        if (!pq_better(&tr->heap[c], &last)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n) tr->heap[i] = last;
    return top;
}

static inline size_t pslot(const trainer *tr, uint64_t key) {
    size_t mask = tr->pcap - 1, i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
    while (tr->pkeys[i] != key && tr->pkeys[i] != UINT64_MAX) i = (i + 1) & mask;
    return i;
}

static int pairs_grow(trainer *tr) {
    size_t nc = tr->pcap ? tr->pcap * 2 : 1 << 16;
    uint64_t *ok = tr->pkeys;
    uint32_t *oi = tr->pidx;
    size_t ocap = tr->pcap;
    tr->pkeys = malloc(nc * sizeof *tr->pkeys);
    tr->pidx = malloc(nc * sizeof *tr->pidx);
    if (!tr->pkeys || !tr->pidx) {
        free(tr->pkeys);
        free(tr->pidx);
        tr->pkeys = ok;
        tr->pidx = oi;
        return -1;
    }
    tr->pcap = nc;
    for (size_t i = 0; i < nc; i++) tr->pkeys[i] = UINT64_MAX;
    for (size_t i = 0; i < ocap; i++) {
        if (ok[i] == UINT64_MAX) continue;
        size_t j = pslot(tr, ok[i]);
        tr->pkeys[j] = ok[i];
        tr->pidx[j] = oi[i];
    }
    free(ok);
    free(oi);
    return 0;
}

/* Index of pair (a, b), created with count 0 if absent; UINT32_MAX when
 * out of memory. */
static uint32_t pair_get(trainer *tr, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    if ((tr->n_pairs + 1) * 2 > tr->pcap && pairs_grow(tr) != 0) return UINT32_MAX;
    size_t i = pslot(tr, key);
    if (tr->pkeys[i] == key) return tr->pidx[i];
    if (WF_GROW(tr->pairs, tr->cap_pairs, tr->n_pairs + 1, 1 << 14) != WF_OK) return UINT32_MAX;
    uint32_t idx = (uint32_t)tr->n_pairs++;
    tr->pairs[idx] = (pair_info){0, a, b, NULL, 0, 0, UINT32_MAX, 0};
    tr->pkeys[i] = key;
    tr->pidx[i] = idx;
    return idx;
}

static int pair_add_word(pair_info *p, uint32_t w) {
    if (p->last_word == w) return 0;
    /* Not WF_GROW: there is one pair_info per pair, and 32-bit counts
     * keep it small. */
    if (p->n_where == p->cap_where) {
        uint32_t nc = p->cap_where ? p->cap_where * 2 : 4;
        uint32_t *nw = realloc(p->where, nc * sizeof *nw);
        if (!nw) return -1;
        p->where = nw;
        p->cap_where = nc;
    }
    p->where[p->n_where++] = w;
    p->last_word = w;
    return 0;
}

/* Adds `delta` occurrences of (a, b) in word w. */
static int pair_update(trainer *tr, int32_t a, int32_t b, int64_t delta, uint32_t w, uint32_t step,
                       int is_new) {
    uint32_t idx = pair_get(tr, a, b);
    if (idx == UINT32_MAX) return -1;
    pair_info *p = &tr->pairs[idx];
    p->cnt += delta;
    if (delta > 0 && pair_add_word(p, w) != 0) return -1;
    if (is_new && p->pushed != step + 1) {
        p->pushed = step + 1;
        if (WF_GROW(tr->touched, tr->cap_touched, tr->n_touched + 1, 1024) != WF_OK) return -1;
        tr->touched[tr->n_touched++] = idx;
    }
    return 0;
}

static void trainer_free(trainer *tr) {
    free(tr->sym);
    free(tr->wstart);
    free(tr->wlen);
    free(tr->wcnt);
    free(tr->wstamp);
    for (size_t i = 0; i < tr->n_pairs; i++) free(tr->pairs[i].where);
    free(tr->pairs);
    free(tr->pkeys);
    free(tr->pidx);
    free(tr->heap);
    free(tr->touched);
}

/* Token byte strings, grown as merges are learned. */
typedef struct {
    char *bytes;
    size_t len, cap;
    size_t *off; /* [n + 1] */
    size_t n, cap_off;
    wf_strmap ids; /* bytes -> id */
} tokstore;

static int tok_add(tokstore *ts, const char *a, size_t al, const char *b, size_t bl) {
    if (WF_GROW(ts->bytes, ts->cap, ts->len + al + bl, 1 << 16) != WF_OK ||
        WF_GROW(ts->off, ts->cap_off, ts->n + 2, 1024) != WF_OK)
        return -1;
    memcpy(ts->bytes + ts->len, a, al);
    memcpy(ts->bytes + ts->len + al, b, bl);
    size_t l = al + bl;
    if (!wf__bpe_strmap_upsert(&ts->ids, ts->bytes + ts->len, l, wf__bpe_hash(ts->bytes + ts->len, l),
                          (int64_t)ts->n, NULL))
        return -1;
    ts->off[ts->n] = ts->len;
    ts->len += l;
    ts->off[++ts->n] = ts->len;
    return 0;
}

static wf_status nomem(void) { return wf_error(WF_ERR_NOMEM, "tokenizer train: out of memory"); }

/* Runs merges until the vocabulary (without specials) has `target` tokens
 * or no pair occurs min_frequency times. Appends merges to *merges. */
static wf_status learn_merges(trainer *tr, tokstore *ts, size_t target, uint64_t min_freq,
                              int32_t (**merges)[3], size_t *n_merges) {
    size_t cap_m = 1024;
    *merges = malloc(cap_m * sizeof **merges);
    *n_merges = 0;
    if (!*merges) return nomem();
    for (size_t i = 0; i < tr->n_pairs; i++)
        if (tr->pairs[i].cnt > 0 &&
            pq_push(tr, (pq_ent){tr->pairs[i].cnt, tr->pairs[i].a, tr->pairs[i].b}) != 0)
            return nomem();
    wf_progress prog;
    wf_progress_init(&prog, "learning merges", " merges", target > ts->n ? target - ts->n : 0);
    size_t start_n = ts->n;
    for (uint32_t step = 0; ts->n < target; step++) {
        /* The best pair whose count is current. */
        pq_ent top;
        uint32_t pidx = 0;
        int found = 0;
        while (tr->hn) {
            top = pq_pop(tr);
            pidx = tr->pidx[pslot(tr, (uint64_t)(uint32_t)top.a << 32 | (uint32_t)top.b)];
            int64_t cur = tr->pairs[pidx].cnt;
            if (cur == top.cnt) {
                found = 1;
                break;
            }
            if (cur > 0 && pq_push(tr, (pq_ent){cur, top.a, top.b}) != 0) return nomem();
        }
        if (!found || top.cnt < (int64_t)min_freq || top.cnt <= 0) break;
        int32_t a = top.a, b = top.b;
        /* The merged token, or the existing token with the same bytes. */
        size_t al = ts->off[a + 1] - ts->off[a], bl = ts->off[b + 1] - ts->off[b];
        char small[256], *cat = al + bl <= sizeof small ? small : malloc(al + bl);
        if (!cat) return nomem();
        memcpy(cat, ts->bytes + ts->off[a], al);
        memcpy(cat + al, ts->bytes + ts->off[b], bl);
        int64_t *have = wf__bpe_strmap_find(&ts->ids, cat, al + bl, wf__bpe_hash(cat, al + bl));
        int32_t nid = have ? (int32_t)*have : (int32_t)ts->n;
        int r = have ? 0 : tok_add(ts, cat, al + bl, cat, 0);
        if (cat != small) free(cat);
        if (r != 0) return nomem();
        if (*n_merges == cap_m) {
            cap_m *= 2;
            int32_t(*nm)[3] = realloc(*merges, cap_m * sizeof **merges);
            if (!nm) return nomem();
            *merges = nm;
        }
        (*merges)[*n_merges][0] = a;
        (*merges)[*n_merges][1] = b;
        (*merges)[*n_merges][2] = nid;
        (*n_merges)++;

        /* Rewrite every word holding (a, b). The where list is not appended
         * to during the step: only pairs with nid are. */
        uint32_t *where = tr->pairs[pidx].where, n_where = tr->pairs[pidx].n_where;
        tr->n_touched = 0;
        for (uint32_t k = 0; k < n_where; k++) {
            uint32_t w = where[k];
            if (tr->wstamp[w] == step) continue;
            tr->wstamp[w] = step;
            int32_t *s = tr->sym + tr->wstart[w];
            uint32_t n = tr->wlen[w];
            int64_t c = tr->wcnt[w];
            for (uint32_t i = 0; i + 1 < n; i++) {
                if (s[i] != a || s[i + 1] != b) continue;
                if (pair_update(tr, a, b, -c, w, step, 0) != 0) return nomem();
                if (i > 0) {
                    if (pair_update(tr, s[i - 1], a, -c, w, step, 0) != 0 ||
                        pair_update(tr, s[i - 1], nid, c, w, step, 1) != 0)
                        return nomem();
                }
                if (i + 2 < n) {
                    if (pair_update(tr, b, s[i + 2], -c, w, step, 0) != 0 ||
                        pair_update(tr, nid, s[i + 2], c, w, step, 1) != 0)
                        return nomem();
                }
                s[i] = nid;
                memmove(s + i + 1, s + i + 2, (n - i - 2) * sizeof *s);
                n--;
            }
            tr->wlen[w] = n;
        }
        /* pair_update may have moved tr->pairs; the where array itself is
         * untouched. Free it: (a, b) no longer occurs anywhere. */
        pair_info *pp = &tr->pairs[pidx];
        free(pp->where);
        pp->where = NULL;
        pp->n_where = pp->cap_where = 0;
        pp->last_word = UINT32_MAX;
        for (size_t k = 0; k < tr->n_touched; k++) {
            const pair_info *p = &tr->pairs[tr->touched[k]];
            if (p->cnt > 0 && pq_push(tr, (pq_ent){p->cnt, p->a, p->b}) != 0) return nomem();
        }
        wf_progress_update(&prog, ts->n - start_n);
    }
    wf_progress_done(&prog);
    return WF_OK;
}

/* ------------------------------------------------------------- driver */

/* Special tokens go into JSON strings: they must be valid UTF-8. */
static int utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0 || (n == 1 && *p < 0xC2)) return 0;
        p++;
        for (int k = 0; k < n; k++, p++)
            if ((*p & 0xC0) != 0x80) return 0;
    }
    return 1;
}

static wf_status check_opts(const wf_bpe_train_opts *o, const char *const **specials,
                            size_t *n_special) {
    *specials = o->special_tokens ? o->special_tokens : wf__bpe_default_specials;
    *n_special = o->special_tokens ? o->n_special : 3;
    if (!wf__pretok_named(o->pattern))
        return wf_error(WF_ERR_INVALID, "tokenizer train: unknown pattern \"%s\" (use llama3 or gpt2)",
                        o->pattern);
    if (o->n_paths == 0) return wf_error(WF_ERR_INVALID, "tokenizer train: no input files");
    if (o->vocab_size < 256 + *n_special || o->vocab_size > INT32_MAX)
        return wf_error(WF_ERR_INVALID,
                        "tokenizer train: vocab_size %zu is too small: it must hold the 256 byte "
                        "tokens and the %zu special tokens",
                        o->vocab_size, *n_special);
    for (size_t i = 0; i < *n_special; i++) {
        const char *s = (*specials)[i];
        if (!s || !*s) return wf_error(WF_ERR_INVALID, "tokenizer train: special token %zu is empty", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(s, (*specials)[j]) == 0)
                return wf_error(WF_ERR_INVALID, "tokenizer train: special token \"%s\" is given twice", s);
    }
    return WF_OK;
}

/* Builds words from the piece counts (sorted by bytes, so the layout of
 * everything below is the same whatever the thread count). */
static wf_status make_words(trainer *tr, const wf_strmap *counts) {
    piece *ps = malloc((counts->n ? counts->n : 1) * sizeof *ps);
    if (!ps) return nomem();
    size_t np = 0, total = 0;
    for (size_t i = 0; i < counts->cap; i++) {
        const wf_strmap_slot *s = &counts->slots[i];
        if (s->len == UINT32_MAX || s->len < 2) continue; /* one byte: no pairs */
        ps[np++] = (piece){wf_strmap_key(counts, s), s->len, s->val};
        total += s->len;
    }
    qsort(ps, np, sizeof *ps, piece_cmp);
    tr->sym = malloc((total ? total : 1) * sizeof *tr->sym);
    tr->wstart = malloc((np ? np : 1) * sizeof *tr->wstart);
    tr->wlen = malloc((np ? np : 1) * sizeof *tr->wlen);
    tr->wcnt = malloc((np ? np : 1) * sizeof *tr->wcnt);
    tr->wstamp = malloc((np ? np : 1) * sizeof *tr->wstamp);
    if (!tr->sym || !tr->wstart || !tr->wlen || !tr->wcnt || !tr->wstamp) {
        free(ps);
        return nomem();
    }
    size_t pos = 0;
    for (size_t w = 0; w < np; w++) {
        tr->wstart[w] = pos;
        tr->wlen[w] = ps[w].len;
        tr->wcnt[w] = ps[w].cnt;
        tr->wstamp[w] = UINT32_MAX;
        for (uint32_t i = 0; i < ps[w].len; i++) tr->sym[pos + i] = (uint8_t)ps[w].key[i];
        for (uint32_t i = 0; i + 1 < ps[w].len; i++) {
            uint32_t idx = pair_get(tr, tr->sym[pos + i], tr->sym[pos + i + 1]);
            if (idx == UINT32_MAX) {
                free(ps);
                return nomem();
            }
            tr->pairs[idx].cnt += ps[w].cnt;
            if (pair_add_word(&tr->pairs[idx], (uint32_t)w) != 0) {
                free(ps);
                return nomem();
            }
        }
        pos += ps[w].len;
    }
    tr->n_words = np;
    free(ps);
    return WF_OK;
}

static wf_status make_tokenizer(wf_tokenizer **out, const tokstore *ts, int32_t (*merges)[3],
                                size_t n_merges, const char *pattern, const char *const *specials,
                                size_t n_special) {
    wf_tokenizer *t = wf__bpe_alloc();
    if (!t) {
        free(merges);
        return nomem();
    }
    t->n_ids = ts->n + n_special;
    t->n_vocab = ts->n;
    t->vocab_str = calloc(t->n_ids, sizeof *t->vocab_str);
    t->added = calloc(n_special ? n_special : 1, sizeof *t->added);
    t->split_pattern = strdup(pattern);
    if (!t->vocab_str || !t->added || !t->split_pattern) goto nomem;
    for (size_t i = 0; i < ts->n; i++) {
        size_t l = ts->off[i + 1] - ts->off[i];
        if (!(t->vocab_str[i] = malloc(2 * l + 1))) goto nomem;
        wf__bpe_bytes_to_str((const uint8_t *)ts->bytes + ts->off[i], l, t->vocab_str[i]);
    }
    for (size_t i = 0; i < n_special; i++) {
        wf_added_token *a = &t->added[i];
        if (!(a->content = strdup(specials[i]))) goto nomem;
        a->len = strlen(a->content);
        a->id = (int32_t)(ts->n + i);
        a->special = 1;
        t->n_added++;
    }
    t->merges = merges;
    t->n_merges = n_merges;
    t->bl_trim_offsets = 1;
    wf_status st = wf__bpe_build(t, "trained tokenizer");
    if (st != WF_OK) {
        wf_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return WF_OK;
nomem:
    t->merges = merges; /* freed with t */
    wf_tokenizer_destroy(t);
    return nomem();
}

wf_status wf_tokenizer_train(wf_tokenizer **out, const wf_bpe_train_opts *o) {
    *out = NULL;
    const char *const *specials;
    size_t n_special;
    WF_TRY(check_opts(o, &specials, &n_special));
    for (size_t i = 0; i < n_special; i++)
        if (!utf8_valid(specials[i]))
            return wf_error(WF_ERR_INVALID, "tokenizer train: special token %zu is not valid UTF-8", i);
    const char *pattern = wf__pretok_named(o->pattern);
    int n_threads = o->n_threads > 0 ? o->n_threads : wf_default_threads();
    wf_regex re;
    WF_TRY(wf__pretok_regex_compile(&re, pattern, 0, "tokenizer train"));

    double t0 = wf_time_now();
    wf_strmap counts = {0};
    uint64_t n_pieces = 0, n_docs = 0, n_bytes = 0;
    wf_status st = count_pieces(o, &re, n_threads, &counts, &n_pieces, &n_docs, &n_bytes);
    wf__pretok_regex_free(&re);
    if (st != WF_OK) return st;
    double t1 = wf_time_now();
    WF_INFO("tokenizer train: %llu documents, %.1f MB, %llu pieces (%zu distinct) counted in %.2f s "
            "on %d threads",
            (unsigned long long)n_docs, (double)n_bytes / 1e6, (unsigned long long)n_pieces, counts.n,
            t1 - t0, n_threads);
    if (n_bytes == 0) {
        wf__bpe_strmap_free(&counts);
        return wf_error(WF_ERR_EMPTY, "tokenizer train: the inputs hold no text");
    }

    trainer tr = {0};
    tokstore ts = {0};
    int32_t(*merges)[3] = NULL;
    size_t n_merges = 0;
    st = make_words(&tr, &counts);
    wf__bpe_strmap_free(&counts);
    if (st != WF_OK) goto out;
    if ((st = wf__bpe_strmap_init(&ts.ids, o->vocab_size)) != WF_OK) goto out;
    for (int b = 0; b < 256; b++) {
        char byte = (char)b;
        if (tok_add(&ts, &byte, 1, &byte, 0) != 0) {
            st = nomem();
            goto out;
        }
    }
    st = learn_merges(&tr, &ts, o->vocab_size - n_special, o->min_frequency ? o->min_frequency : 1,
                      &merges, &n_merges);
    if (st != WF_OK) goto out;
    double t2 = wf_time_now();
    if (ts.n + n_special < o->vocab_size)
        WF_WARN("tokenizer train: stopped at %zu tokens (asked for %zu): no pair occurs %llu times "
                "or more",
                ts.n + n_special, o->vocab_size,
                (unsigned long long)(o->min_frequency ? o->min_frequency : 1));
    WF_INFO("tokenizer train: %zu merges learned in %.2f s; vocabulary %zu (256 bytes + %zu learned + "
            "%zu special)",
            n_merges, t2 - t1, ts.n + n_special, ts.n - 256, n_special);
    st = make_tokenizer(out, &ts, merges, n_merges, pattern, specials, n_special);
    merges = NULL;
out:
    free(merges);
    trainer_free(&tr);
    free(ts.bytes);
    free(ts.off);
    wf__bpe_strmap_free(&ts.ids);
    return st;
}
