/* `weft prep`'s driver: inputs in order, each read in batches that go
 * through the stages, with the order-dependent decisions taken on one
 * thread in input order and everything else on all threads.
 *
 * A batch (up to batch_mb of records) goes through five phases:
 *   1. read (one thread): records from the input, copied into the batch;
 *   2. per document, on all threads: extract (HTTP, charset, HTML), normalize,
 *      and the hashes of its paragraphs;
 *   3. one thread, in order: paragraph dedup against everything before;
 *   4. per document, on all threads: remove the duplicate paragraphs, language
 *      id, quality rules, MinHash signature;
 *   5. one thread, in order: LSH near-duplicate check, perplexity (whose model
 *      uses all threads itself), JSONL output, stats.
 * Documents never wait on each other in phases 2 and 4, and phases 1, 3
 * and 5 see them in input order, so the output is the same for any number
 * of threads.
 *
 * Inputs are read in order and a batch may span several (many small files
 * are processed in parallel too). After the input that brings the input
 * read since the last checkpoint to checkpoint_mb, and after the last one:
 * the open shards' zstd frames are ended and fsynced, the hashes added to
 * the dedup tables since the last checkpoint are logged, and the state file
 * is replaced. A rerun of the same command rolls the output back to that
 * point, replays the logs into the tables and goes on with the next input.
 * Memory: the batch (a few times batch_mb), the two hash tables (capped by
 * dedup.max_mb and minhash.max_mb), the hashes added since the last
 * checkpoint (at most the tables) and the perplexity model. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prep/prep_impl.h"
#include "weft/dirlock.h"
#include "weft/json.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/progress.h"
#include "weft/thread.h"

#define BATCH_MAX_DOCS 8192
/* Per-document buffers above this are freed after a batch, so that one
 * huge document does not pin its memory for the rest of the run. */
#define KEEP_BUF_BYTES ((size_t)1 << 20)

typedef struct {
    /* from the reader */
    int kind, reader_drop;
    size_t input;                  /* which input it came from */
    uint64_t index;
    wf_buf raw, url;
    /* work */
    wf_buf text, tmp, norm;
    int drop, last;                /* drop reason (R_NONE) and the last stage reached */
    uint64_t at[ST_COUNT];         /* bytes entering each stage */
    double t[ST_COUNT];            /* seconds in each stage */
    int repaired, q_skipped, mh_no_words;
    int rule_set;                  /* the rule set that judged it (index in prep_run.rules), -1: none */
    uint64_t lines_removed;
    /* dedup units: text[off, off + len) */
    size_t *unit_off, *unit_len;
    uint64_t *unit_hash;           /* 0: never removed */
    unsigned char *unit_dup;
    size_t n_units, unit_cap, units_removed;
    /* langid */
    char lang[16];
    double lang_conf;
    /* minhash */
    uint64_t *sig, *keys;
    int has_keys;
    /* perplexity */
    double ppl;
    int bucket;                    /* -1 none, 0 head, 1 middle, 2 tail */
} pdoc;

typedef struct {
    const wf_prep_config *c;
    const char *const *inputs;
    size_t n_inputs;
    uint64_t *sizes;
    int threads;
    wf_normalize_opts nopts;
    u64set par, lsh;
    wf_dirlock *lock;              /* the output directory's, for the whole run */
    u64vec par_log, lsh_log;
    prep_output out;
    prep_stats st;
    prep_progress_state ps;
    prep_ppl *ppl;
    prep_rule_sets rules;          /* the quality rule sets */
    pdoc *docs;
    size_t n_docs, docs_cap;
    atomic_size_t next;
    /* reading: inputs are read in order, a batch may span several */
    prep_reader *rd;               /* the open input, or NULL */
    size_t reading;                /* its index */
    size_t next_input;             /* the next one to open */
    uint64_t since_ckpt;           /* input bytes finished since the last checkpoint */
    uint64_t ckpt_bytes;           /* checkpoint when since_ckpt reaches this (0: every input) */
    uint64_t done_bytes;           /* input bytes of finished inputs, for progress */
    wf_buf line;
    int n_hashes;
    size_t max_doc;
} prep_run;

static const char *const bucket_names[] = {"head", "middle", "tail"};

static void drop(pdoc *d, int reason) {
    d->drop = reason;
    d->last = wf__prep_reason_stage(reason);
}

static void swap_bufs(wf_buf *a, wf_buf *b) {
    wf_buf t = *a;
    *a = *b;
    *b = t;
}

static int all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

static int in_list(const wf_strs *l, const char *code) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], code) == 0) return 1;
    return 0;
}

static wf_status unit_push(pdoc *d, size_t off, size_t len) {
    if (d->n_units == d->unit_cap) {
        /* Four parallel arrays with one capacity. */
        size_t cap = wf_grow_cap(d->unit_cap, d->n_units + 1, 64);
        size_t *no = realloc(d->unit_off, cap * sizeof *no);
        if (no) d->unit_off = no;
        size_t *nl = realloc(d->unit_len, cap * sizeof *nl);
        if (nl) d->unit_len = nl;
        uint64_t *nh = realloc(d->unit_hash, cap * sizeof *nh);
        if (nh) d->unit_hash = nh;
        unsigned char *nd = realloc(d->unit_dup, cap);
        if (nd) d->unit_dup = nd;
        if (!no || !nl || !nh || !nd) return wf_error(WF_ERR_NOMEM, "out of memory");
        d->unit_cap = cap;
    }
    d->unit_off[d->n_units] = off;
    d->unit_len[d->n_units] = len;
    d->unit_hash[d->n_units] = 0;
    d->unit_dup[d->n_units] = 0;
    d->n_units++;
    return WF_OK;
}

/* Splits the text into dedup units (lines, or blank-line separated
 * blocks) and hashes each one's normalized form. */
static wf_status dedup_hash(const prep_run *r, pdoc *d) {
    const char *t = d->text.data;
    size_t n = d->text.len, i = 0;
    int para = strcmp(r->c->dedup_unit, "paragraph") == 0;
    d->n_units = 0;
    while (i < n) {
        size_t e;
        if (para) {
            const char *p = t + i;
            const char *q = NULL;
            for (const char *s = p; (s = memchr(s, '\n', (size_t)(t + n - s))) != NULL; s++)
                if (s + 1 < t + n && s[1] == '\n') {
                    q = s;
                    break;
                }
            e = q ? (size_t)(q - t) : n;
        } else {
            const char *nl = memchr(t + i, '\n', n - i);
            e = nl ? (size_t)(nl - t) : n;
        }
        if (e > i) WF_TRY(unit_push(d, i, e - i));
        i = e + 1;
        while (para && i < n && t[i] == '\n') i++;
    }
    for (size_t u = 0; u < d->n_units; u++) {
        WF_TRY(wf_dedup_normalize(t + d->unit_off[u], d->unit_len[u], &d->norm));
        if (d->norm.len >= (size_t)r->c->dedup_min_chars && d->norm.len > 0)
            d->unit_hash[u] = wf_hash64(d->norm.data, d->norm.len);
    }
    return WF_OK;
}

/* Phase 2 for one document: extract, normalize, hash paragraphs. */
static wf_status phase_extract(prep_run *r, pdoc *d) {
    d->drop = R_NONE;
    d->last = ST_OUTPUT;
    d->at[ST_READ] = d->raw.len;
    if (d->reader_drop != R_NONE) {
        drop(d, d->reader_drop);
        return WF_OK;
    }
    double t0 = wf_time_now();
    d->at[ST_EXTRACT] = d->raw.len;
    const char *body = d->raw.data ? d->raw.data : "";
    size_t blen = d->raw.len;
    int is_html = d->kind == REC_HTML;
    char charset[32] = "";
    if (d->kind == REC_HTTP) {
        int rc = wf__prep_http_parse(body, blen, r->max_doc, &d->tmp, &is_html, charset);
        if (rc != R_NONE) {
            drop(d, rc);
            d->t[ST_EXTRACT] += wf_time_now() - t0;
            return WF_OK;
        }
        body = d->tmp.data ? d->tmp.data : "";
        blen = d->tmp.len;
    }
    if (is_html && !charset[0]) wf__prep_html_sniff_charset(body, blen, charset);
    if (wf__prep_to_utf8(body, blen, charset, &d->norm)) {
        body = d->norm.data ? d->norm.data : "";
        blen = d->norm.len;
    }
    if (is_html) {
        WF_TRY(wf_html_to_text(body, blen, &d->text));
    } else {
        d->text.len = 0;
        WF_TRY(wf_buf_append(&d->text, body, blen));
    }
    double t1 = wf_time_now();
    d->t[ST_EXTRACT] += t1 - t0;
    if (all_space(d->text.data, d->text.len)) {
        drop(d, R_EXTRACT_EMPTY);
        return WF_OK;
    }

    d->at[ST_NORMALIZE] = d->text.len;
    int repaired = 0;
    wf_norm_result nr = wf_text_normalize(d->text.data, d->text.len, &r->nopts, &d->tmp, &repaired);
    d->repaired = repaired;
    double t2 = wf_time_now();
    d->t[ST_NORMALIZE] += t2 - t1;
    if (nr == WF_NORM_BINARY) drop(d, R_BINARY);
    else if (nr == WF_NORM_INVALID) drop(d, R_INVALID_UTF8);
    else if (nr == WF_NORM_EMPTY) drop(d, R_NORM_EMPTY);
    if (nr != WF_NORM_OK) return WF_OK;
    swap_bufs(&d->text, &d->tmp);

    d->at[ST_DEDUP] = d->text.len;
    d->n_units = 0;
    if (r->c->dedup) WF_TRY(dedup_hash(r, d));
    d->t[ST_DEDUP] += wf_time_now() - t2;
    return WF_OK;
}

/* Rebuilds the text without its duplicate units. */
static wf_status remove_dups(prep_run *r, pdoc *d) {
    size_t removed = 0;
    for (size_t u = 0; u < d->n_units; u++) removed += d->unit_dup[u];
    d->units_removed = removed;
    if (!removed) return WF_OK;
    int para = strcmp(r->c->dedup_unit, "paragraph") == 0;
    /* Kept units in order; a blank line that stood before a unit (kept or
     * not) stands before the next kept one. */
    d->tmp.len = 0;
    WF_TRY(wf_buf_reserve(&d->tmp, d->text.len));
    int any = 0, blank = 0;
    for (size_t u = 0; u < d->n_units; u++) {
        size_t off = d->unit_off[u];
        blank |= off >= 2 && d->text.data[off - 1] == '\n' && d->text.data[off - 2] == '\n';
        if (d->unit_dup[u]) continue;
        if (any) WF_TRY(wf_buf_append(&d->tmp, "\n\n", para || blank ? 2 : 1));
        WF_TRY(wf_buf_append(&d->tmp, d->text.data + off, d->unit_len[u]));
        any = 1;
        blank = 0;
    }
    swap_bufs(&d->text, &d->tmp);
    return WF_OK;
}

/* Phase 4 for one document: dedup's removal, langid, quality, MinHash. */
static wf_status phase_filter(prep_run *r, pdoc *d) {
    const wf_prep_config *c = r->c;
    double t0 = wf_time_now();
    if (c->dedup) {
        WF_TRY(remove_dups(r, d));
        if (all_space(d->text.data, d->text.len)) {
            drop(d, R_ALL_DUP);
            d->t[ST_DEDUP] += wf_time_now() - t0;
            return WF_OK;
        }
    }
    double t1 = wf_time_now();
    d->t[ST_DEDUP] += t1 - t0;

    d->at[ST_LANGID] = d->text.len;
    snprintf(d->lang, sizeof d->lang, "und");
    d->lang_conf = 0.0;
    if (c->langid) {
        int reliable;
        wf_langid_detect(d->text.data, d->text.len, d->lang, &d->lang_conf, &reliable);
        double t2 = wf_time_now();
        d->t[ST_LANGID] += t2 - t1;
        t1 = t2;
        if (d->lang_conf < c->lang_min_confidence || strcmp(d->lang, "un") == 0) {
            drop(d, R_LOW_CONF);
            return WF_OK;
        }
        if (c->languages.n && !in_list(&c->languages, d->lang)) {
            drop(d, R_LANGUAGE);
            return WF_OK;
        }
    }

    d->at[ST_QUALITY] = d->text.len;
    d->lines_removed = 0;
    d->q_skipped = 0;
    d->rule_set = -1;
    if (c->quality) {
        if (c->quality_languages.n && !in_list(&c->quality_languages, d->lang)) {
            d->q_skipped = 1;
        } else {
            const prep_rule_set *rs = wf__prep_rules_find(&r->rules, d->lang);
            d->rule_set = (int)(rs - r->rules.v);
            int rc = wf__prep_quality(&rs->r, &d->text, &d->lines_removed);
            double t2 = wf_time_now();
            d->t[ST_QUALITY] += t2 - t1;
            t1 = t2;
            if (rc != R_NONE) {
                drop(d, rc);
                return WF_OK;
            }
        }
    }

    d->at[ST_MINHASH] = d->text.len;
    d->has_keys = 0;
    d->mh_no_words = 0;
    if (c->minhash) {
        size_t n = wf_minhash_signature(d->text.data, d->text.len, (int)c->mh_ngram, r->n_hashes,
                                        (uint64_t)c->mh_seed, d->sig);
        if (n == 0) {
            d->mh_no_words = 1;
        } else {
            wf__prep_minhash_bands(d->sig, (int)c->mh_bands, (int)c->mh_rows, d->keys);
            d->has_keys = 1;
        }
        d->t[ST_MINHASH] += wf_time_now() - t1;
    }
    return WF_OK;
}

/* ---- the parallel phases ---- */

typedef struct {
    prep_run *r;
    int phase;
} phase_ctx;

static wf_status phase_task(void *arg, int tid, int n_threads) {
    (void)tid, (void)n_threads;
    phase_ctx *pc = arg;
    prep_run *r = pc->r;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n_docs) return WF_OK;
        pdoc *d = &r->docs[i];
        if (pc->phase == 2) {
            WF_TRY(phase_extract(r, d));
        } else if (d->drop == R_NONE) {
            WF_TRY(phase_filter(r, d));
        }
    }
}

static wf_status run_phase(prep_run *r, int phase) {
    atomic_store(&r->next, 0);
    phase_ctx pc = {r, phase};
    int n = r->threads;
    if ((size_t)n > r->n_docs) n = r->n_docs ? (int)r->n_docs : 1;
    return wf_parallel_run(n, phase_task, &pc);
}

/* ---- the serial phases ---- */

static wf_status dedup_serial(prep_run *r) {
    double t0 = wf_time_now();
    for (size_t i = 0; i < r->n_docs; i++) {
        pdoc *d = &r->docs[i];
        if (d->drop != R_NONE) continue;
        for (size_t u = 0; u < d->n_units; u++) {
            uint64_t h = d->unit_hash[u];
            if (!h) continue;
            int ins = wf__prep_u64set_insert(&r->par, h);
            if (ins == 0) d->unit_dup[u] = 1;
            else if (ins == 1) WF_TRY(wf__prep_u64vec_push(&r->par_log, h));
            else r->st.extra[E_DEDUP_FULL]++;
        }
    }
    r->st.seconds[ST_DEDUP] += wf_time_now() - t0;
    return WF_OK;
}

static wf_status minhash_serial(prep_run *r) {
    double t0 = wf_time_now();
    int bands = (int)r->c->mh_bands;
    for (size_t i = 0; i < r->n_docs; i++) {
        pdoc *d = &r->docs[i];
        if (d->drop != R_NONE || !d->has_keys) continue;
        int dup = 0;
        for (int b = 0; b < bands; b++) dup |= wf__prep_u64set_contains(&r->lsh, d->keys[b]);
        /* Every document's keys go in, duplicates' too, so that a chain of
         * near-duplicates is one cluster whose first document is kept. */
        for (int b = 0; b < bands; b++) {
            int ins = wf__prep_u64set_insert(&r->lsh, d->keys[b]);
            if (ins == 1) WF_TRY(wf__prep_u64vec_push(&r->lsh_log, d->keys[b]));
            else if (ins < 0) r->st.extra[E_MH_FULL]++;
        }
        if (dup) drop(d, R_NEAR_DUP);
    }
    r->st.seconds[ST_MINHASH] += wf_time_now() - t0;
    return WF_OK;
}

static wf_status perplexity_serial(prep_run *r) {
    const wf_prep_config *c = r->c;
    for (size_t i = 0; i < r->n_docs; i++) {
        pdoc *d = &r->docs[i];
        d->bucket = -1;
        if (d->drop != R_NONE) continue;
        d->at[ST_PERPLEXITY] = d->text.len;
        if (!r->ppl) continue;
        double t0 = wf_time_now();
        double loss;
        int64_t n_tok;
        WF_TRY(wf__prep_ppl_score(r->ppl, d->text.data, d->text.len, &loss, &n_tok));
        d->ppl = n_tok ? exp(loss) : 0.0;
        d->bucket = d->ppl <= c->ppl_head_max ? 0 : d->ppl <= c->ppl_middle_max ? 1 : 2;
        double lg = d->ppl > 1.0 ? log10(d->ppl) * 100.0 : 0.0;
        int bin = lg >= PREP_PPL_BINS - 1 ? PREP_PPL_BINS - 1 : (int)lg;
        r->st.ppl_hist[bin]++;
        r->st.extra[E_HEAD + d->bucket]++;
        d->t[ST_PERPLEXITY] += wf_time_now() - t0;
        if (d->bucket == 2 && c->ppl_drop_tail) drop(d, R_TAIL);
    }
    return WF_OK;
}

static wf_status output_serial(prep_run *r) {
    double t0 = wf_time_now();
    char num[64];
    for (size_t i = 0; i < r->n_docs; i++) {
        pdoc *d = &r->docs[i];
        if (d->drop != R_NONE) continue;
        d->at[ST_OUTPUT] = d->text.len;
        wf_buf *l = &r->line;
        l->len = 0;
        WF_TRY(wf_buf_append(l, "{\"text\":", 8));
        WF_TRY(wf_buf_json_str(l, d->text.data, d->text.len));
        WF_TRY(wf_buf_append(l, ",\"id\":", 6));
        char id[4200];
        int n = snprintf(id, sizeof id, "%s#%llu", r->inputs[d->input], (unsigned long long)d->index);
        WF_TRY(wf_buf_json_str(l, id, (size_t)n < sizeof id ? (size_t)n : sizeof id - 1));
        if (d->url.len) {
            WF_TRY(wf_buf_append(l, ",\"url\":", 7));
            WF_TRY(wf_buf_json_str(l, d->url.data, d->url.len));
        }
        WF_TRY(wf_buf_append(l, ",\"lang\":", 8));
        WF_TRY(wf_buf_json_str(l, d->lang, strlen(d->lang)));
        if (r->c->langid) {
            n = snprintf(num, sizeof num, ",\"lang_score\":%.2f", d->lang_conf);
            WF_TRY(wf_buf_append(l, num, (size_t)n));
        }
        if (d->bucket >= 0) {
            n = snprintf(num, sizeof num, ",\"perplexity\":%.2f,\"bucket\":\"%s\"", d->ppl, bucket_names[d->bucket]);
            WF_TRY(wf_buf_append(l, num, (size_t)n));
        }
        WF_TRY(wf_buf_append(l, "}\n", 2));
        const char *bucket = d->bucket >= 0 ? bucket_names[d->bucket] : "all";
        WF_TRY(wf__prep_output_write(&r->out, d->lang, bucket, l->data, l->len, &r->st));
        r->st.extra[E_JSON_BYTES] += l->len;
        WF_TRY(wf__prep_stats_add_lang(&r->st, d->lang, 1, d->text.len));
    }
    r->st.seconds[ST_OUTPUT] += wf_time_now() - t0;
    return WF_OK;
}

/* Adds the batch's documents to the counters. */
static wf_status account(prep_run *r) {
    prep_stats *s = &r->st;
    for (size_t i = 0; i < r->n_docs; i++) {
        pdoc *d = &r->docs[i];
        if (r->c->quality && d->last >= ST_QUALITY) {
            /* The quality stage per language: which rule set, and how it went. */
            const char *set = d->rule_set >= 0 ? r->rules.v[d->rule_set].name : "none";
            prep_quality_lang *q = wf__prep_stats_qlang(s, d->lang, set);
            if (!q) return wf_error(WF_ERR_NOMEM, "out of memory");
            q->docs_in++;
            if (d->last == ST_QUALITY && d->drop != R_NONE) q->drop[d->drop]++;
            else q->docs_out++;
        }
        for (int st = 0; st <= d->last && st < ST_COUNT; st++) {
            s->docs_in[st]++;
            s->bytes_in[st] += d->at[st];
            s->seconds[st] += d->t[st];
            if (st < d->last) {
                s->docs_out[st]++;
                s->bytes_out[st] += d->at[st + 1];
            } else if (d->drop != R_NONE) {
                s->drop_docs[d->drop]++;
                s->drop_bytes[d->drop] += d->at[st];
            } else {
                s->docs_out[st]++;
                s->bytes_out[st] += d->at[st];
            }
        }
        s->extra[E_REPAIRED] += (uint64_t)d->repaired;
        s->extra[E_UNITS] += d->n_units;
        s->extra[E_UNITS_REMOVED] += d->units_removed;
        s->extra[E_LINES_REMOVED] += d->lines_removed;
        s->extra[E_Q_SKIPPED] += (uint64_t)d->q_skipped;
        s->extra[E_MH_NO_WORDS] += (uint64_t)d->mh_no_words;
    }
    return WF_OK;
}

static void pdoc_reset(pdoc *d) {
    wf_buf *bufs[] = {&d->raw, &d->url, &d->text, &d->tmp, &d->norm};
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) {
        if (bufs[k]->cap > KEEP_BUF_BYTES) wf_buf_free(bufs[k]);
        bufs[k]->len = 0;
    }
    d->n_units = d->units_removed = 0;
    d->lines_removed = 0;
    d->repaired = d->q_skipped = d->mh_no_words = d->has_keys = 0;
    d->bucket = -1;
    d->ppl = 0.0;
    memset(d->at, 0, sizeof d->at);
    memset(d->t, 0, sizeof d->t);
}

static void pdoc_free(pdoc *d) {
    wf_buf_free(&d->raw);
    wf_buf_free(&d->url);
    wf_buf_free(&d->text);
    wf_buf_free(&d->tmp);
    wf_buf_free(&d->norm);
    free(d->unit_off);
    free(d->unit_len);
    free(d->unit_hash);
    free(d->unit_dup);
    free(d->sig);
    free(d->keys);
}

static wf_status batch_slot(prep_run *r, pdoc **out) {
    if (r->n_docs == r->docs_cap) {
        /* New slots get their signature and key arrays at once. */
        size_t cap = wf_grow_cap(r->docs_cap, r->n_docs + 1, 256);
        pdoc *nd = realloc(r->docs, cap * sizeof *nd);
        if (!nd) return wf_error(WF_ERR_NOMEM, "out of memory");
        memset(nd + r->docs_cap, 0, (cap - r->docs_cap) * sizeof *nd);
        for (size_t i = r->docs_cap; i < cap; i++) {
            nd[i].sig = malloc((size_t)r->n_hashes * sizeof *nd[i].sig);
            nd[i].keys = malloc((size_t)r->c->mh_bands * sizeof *nd[i].keys);
            if (!nd[i].sig || !nd[i].keys) {
                r->docs = nd;
                r->docs_cap = i + 1;
                return wf_error(WF_ERR_NOMEM, "out of memory");
            }
        }
        r->docs = nd;
        r->docs_cap = cap;
    }
    pdoc *d = &r->docs[r->n_docs++];
    pdoc_reset(d);
    *out = d;
    return WF_OK;
}

/* Counts a finished input and closes it. */
static void finish_input(prep_run *r) {
    prep_reader *rd = r->rd;
    r->st.extra[E_INPUTS]++;
    r->st.extra[E_INPUT_BYTES] += r->sizes[r->reading];
    r->st.extra[E_RECORDS_SKIPPED] += wf__prep_reader_skipped(rd);
    r->st.extra[E_INPUTS_DAMAGED] += (uint64_t)wf__prep_reader_damaged(rd);
    r->done_bytes += r->sizes[r->reading];
    r->since_ckpt += r->sizes[r->reading];
    wf__prep_reader_close(rd);
    r->rd = NULL;
    WF_DEBUG("prep: read input %zu/%zu %s", r->reading + 1, r->n_inputs, r->inputs[r->reading]);
}

/* Phase 1: reads records into the batch, across inputs, in order. Stops at
 * the batch's limits, or after the input that makes a checkpoint due
 * (*checkpoint set: its index + 1 inputs are then finished). Whether a
 * checkpoint follows an input depends only on the inputs' sizes, so a
 * resumed run checkpoints (and ends zstd frames) where a run that never
 * stopped does. */
static wf_status fill_batch(prep_run *r, int *checkpoint) {
    double t0 = wf_time_now();
    for (size_t i = 0; i < r->n_docs; i++) pdoc_reset(&r->docs[i]);
    r->n_docs = 0;
    size_t bytes = 0, budget = (size_t)r->c->batch_mb << 20;
    *checkpoint = 0;
    wf_status s = WF_OK;
    while (r->n_docs < BATCH_MAX_DOCS && bytes < budget) {
        if (!r->rd) {
            if (r->next_input >= r->n_inputs) break;
            r->reading = r->next_input++;
            s = wf__prep_reader_open(&r->rd, r->inputs[r->reading], r->c);
            if (s != WF_OK) break;
        }
        prep_record rec;
        int eof;
        s = wf__prep_reader_next(r->rd, &rec, &eof);
        if (s != WF_OK) {
            wf_error_wrap(s, "%s: ", r->inputs[r->reading]);
            break;
        }
        if (eof) {
            finish_input(r);
            if (r->since_ckpt >= r->ckpt_bytes || r->reading + 1 == r->n_inputs) {
                *checkpoint = 1;
                break;
            }
            continue;
        }
        pdoc *d = NULL;
        if ((s = batch_slot(r, &d)) != WF_OK) break;
        r->st.extra[E_RECORDS]++;
        d->kind = rec.kind;
        d->reader_drop = rec.drop;
        d->input = r->reading;
        d->index = rec.index;
        if (rec.data && (s = wf_buf_append(&d->raw, rec.data, rec.len)) != WF_OK) break;
        if (rec.url && (s = wf_buf_append(&d->url, rec.url, strlen(rec.url))) != WF_OK) break;
        bytes += rec.len + 256;
    }
    r->st.seconds[ST_READ] += wf_time_now() - t0;
    return s;
}

static wf_status process_batch(prep_run *r) {
    WF_TRY(run_phase(r, 2));
    if (r->c->dedup) WF_TRY(dedup_serial(r));
    WF_TRY(run_phase(r, 4));
    if (r->c->minhash) WF_TRY(minhash_serial(r));
    WF_TRY(perplexity_serial(r));
    WF_TRY(output_serial(r));
    return account(r);
}

/* The fingerprint of a run: the config (less what does not change the
 * output) and the inputs with their sizes. */
static wf_status fingerprint(const prep_run *r, char out[32]) {
    wf_prep_config c = *r->c;
    c.output = NULL;
    c.threads = 0;
    c.force = 0;
    c.json = 0;
    c.batch_mb = 0; /* batches do not change the output */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_opts_write_toml(wf_prep_spec(), &c, f);
    for (size_t i = 0; i < r->n_inputs; i++) fprintf(f, "input %s %llu\n", r->inputs[i], (unsigned long long)r->sizes[i]);
    fclose(f);
    snprintf(out, 32, "%016llx", (unsigned long long)wf_hash64(text, len));
    free(text);
    return WF_OK;
}

static wf_status checkpoint(prep_run *r, double t_start, double wall_base) {
    WF_TRY(wf__prep_output_checkpoint(&r->out));
    WF_TRY(wf__prep_hashlog_write(r->c->output, r->ps.inputs_done - 1, &r->par_log, &r->lsh_log));
    WF_TRY(wf__prep_u64vec_push(&r->ps.checkpoints, r->ps.inputs_done));
    r->par_log.n = r->lsh_log.n = 0;
    r->since_ckpt = 0;
    r->st.wall_seconds = wall_base + (wf_time_now() - t_start);
    return wf__prep_state_write(r->c->output, &r->ps, &r->out, &r->st);
}

/* The test hook behind the killed-run tests: WEFT_PREP_CRASH_AFTER=K kills
 * the process with SIGKILL once documents of input K have been written
 * (after the batch that holds them, before any later checkpoint), as a
 * crash or an OOM kill would. */
static void maybe_crash(const prep_run *r) {
    const char *env = getenv("WEFT_PREP_CRASH_AFTER");
    if (!env || !r->n_docs || r->docs[r->n_docs - 1].input < (size_t)atol(env)) return;
    for (size_t i = 0; i < r->out.n; i++)
        if (r->out.w[i].fp) fflush(r->out.w[i].fp);
    raise(SIGKILL);
}

static void run_free(prep_run *r) {
    wf__prep_reader_close(r->rd);
    wf__prep_u64vec_free(&r->ps.checkpoints);
    for (size_t i = 0; i < r->docs_cap; i++) pdoc_free(&r->docs[i]);
    free(r->docs);
    free(r->sizes);
    wf__prep_u64set_free(&r->par);
    wf__prep_u64set_free(&r->lsh);
    wf__prep_u64vec_free(&r->par_log);
    wf__prep_u64vec_free(&r->lsh_log);
    wf__prep_output_close(&r->out);
    wf__prep_stats_free(&r->st);
    wf__prep_ppl_close(r->ppl);
    wf__prep_rules_free(&r->rules);
    wf_buf_free(&r->line);
    wf_dirlock_release(r->lock);
}

/* Replays the hash logs of the finished inputs into the tables. */
static wf_status replay(prep_run *r) {
    u64vec par = {0}, lsh = {0};
    wf_status s = WF_OK;
    for (size_t ck = 0; ck < r->ps.checkpoints.n && s == WF_OK; ck++) {
        par.n = lsh.n = 0;
        s = wf__prep_hashlog_read(r->c->output, (size_t)r->ps.checkpoints.v[ck] - 1, &par, &lsh);
        for (size_t k = 0; s == WF_OK && k < par.n; k++) wf__prep_u64set_insert(&r->par, par.v[k]);
        for (size_t k = 0; s == WF_OK && k < lsh.n; k++) wf__prep_u64set_insert(&r->lsh, lsh.v[k]);
    }
    wf__prep_u64vec_free(&par);
    wf__prep_u64vec_free(&lsh);
    return s;
}

wf_status wf_prep_run(const wf_prep_config *c, const char *const *inputs, size_t n_inputs) {
    WF_TRY(wf_prep_config_validate(c));
    if (n_inputs == 0) return wf_error(WF_ERR_CONFIG, "no inputs: give WARC, WET, JSONL or text files");
    double t_start = wf_time_now();
    prep_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.inputs = inputs;
    r.n_inputs = n_inputs;
    r.threads = c->threads ? (int)c->threads : wf_default_threads();
    r.n_hashes = (int)(c->mh_bands * c->mh_rows);
    r.max_doc = (size_t)c->max_doc_mb << 20;
    r.nopts.form = strcmp(c->unicode_form, "NFKC") == 0 ? 2 : strcmp(c->unicode_form, "NFC") == 0 ? 1 : 0;
    if (!c->normalize) r.nopts.form = 0;
    r.nopts.cleanup = c->normalize;
    r.nopts.drop_invalid = strcmp(c->invalid_utf8, "drop") == 0;
    r.nopts.max_control_ratio = c->max_control_ratio;
    wf_status s = WF_OK;
    uint64_t total_bytes = 0;
    r.sizes = calloc(n_inputs, sizeof *r.sizes);
    if (!r.sizes) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_inputs && s == WF_OK; i++) {
        struct stat stt;
        if (stat(inputs[i], &stt) != 0) s = wf_error(WF_ERR_NOTFOUND, "input %s: cannot read it: %s", inputs[i], strerror(errno));
        else if (!S_ISREG(stt.st_mode)) s = wf_error(WF_ERR_INVALID, "input %s is not a regular file", inputs[i]);
        else r.sizes[i] = (uint64_t)stt.st_size, total_bytes += (uint64_t)stt.st_size;
    }
    if (s == WF_OK) s = wf__prep_rules_build(c, &r.rules);
    if (s == WF_OK) s = wf_mkdirs(c->output);
    /* One prep job per output directory: before anything there is read. */
    wf_dirlock_opts lo = {.command = "weft prep", .what = "output directory",
                          .stale_seconds = c->lock_stale_s};
    if (s == WF_OK) s = wf_dirlock_acquire(&r.lock, c->output, &lo);
    if (s == WF_OK) s = wf__prep_u64set_init(&r.par, (size_t)c->dedup_max_mb << 20);
    if (s == WF_OK) s = wf__prep_u64set_init(&r.lsh, (size_t)c->mh_max_mb << 20);
    if (s == WF_OK) s = wf__prep_output_init(&r.out, c->output, (uint64_t)(c->shard_mb * 1048576.0), (int)c->zstd_level);
    char fp[32];
    if (s == WF_OK) s = fingerprint(&r, fp);
    if (s != WF_OK) {
        run_free(&r);
        return s;
    }

    /* Resume, refuse, or start over. */
    prep_progress_state old;
    memset(&old, 0, sizeof old);
    wf_status rs = wf__prep_state_read(c->output, &old, &r.out, &r.st);
    double wall_base = 0.0;
    if (rs == WF_OK && !c->force && strcmp(old.fingerprint, fp) != 0) {
        s = wf_error(WF_ERR_CONFIG,
                     "%s holds a prep run of another config or other inputs: give a new --output, or "
                     "--force to delete that run and start over",
                     c->output);
    } else if (rs == WF_OK && !c->force) {
        r.ps = old;
        wall_base = r.st.wall_seconds;
        if (old.complete) {
            WF_INFO("prep: %s is already complete (%zu inputs); --force starts over", c->output, old.n_inputs);
            run_free(&r);
            return WF_OK;
        }
        s = wf__prep_output_rollback(&r.out);
        if (s == WF_OK) s = replay(&r);
        if (s == WF_OK)
            WF_INFO("prep: resuming %s after %zu of %zu inputs", c->output, old.inputs_done, n_inputs);
    } else if (rs == WF_OK || rs == WF_ERR_NOTFOUND || c->force) {
        char stats[4200];
        snprintf(stats, sizeof stats, "%s/stats.json", c->output);
        if (rs == WF_ERR_NOTFOUND && !c->force && wf_path_exists(stats)) {
            s = wf_error(WF_ERR_CONFIG,
                         "%s holds the output of a prep run without its resume state (_prep/): give a new "
                         "--output, or --force to delete it",
                         c->output);
        } else {
            /* Fresh start: clear what a previous run may have left. */
            wf__prep_output_close(&r.out);
            wf__prep_stats_free(&r.st);
            memset(&r.st, 0, sizeof r.st);
            s = wf__prep_output_init(&r.out, c->output, (uint64_t)(c->shard_mb * 1048576.0), (int)c->zstd_level);
            if (s == WF_OK) s = wf__prep_output_wipe(c->output);
            snprintf(r.ps.fingerprint, sizeof r.ps.fingerprint, "%s", fp);
            r.ps.n_inputs = n_inputs;
            if (s == WF_OK) s = wf__prep_state_write(c->output, &r.ps, &r.out, &r.st);
            if (s == WF_OK) {
                char cfg[4200];
                snprintf(cfg, sizeof cfg, "%s/_prep/config.toml", c->output);
                wf_afile af;
                s = wf_afile_open(&af, cfg);
                if (s == WF_OK) {
                    wf_opts_write_toml(wf_prep_spec(), c, af.fp);
                    s = wf_afile_commit(&af);
                }
            }
        }
    } else {
        s = rs; /* a damaged state file: its message says what to do */
    }
    if (r.ps.checkpoints.v != old.checkpoints.v) wf__prep_u64vec_free(&old.checkpoints);
    if (s == WF_OK && c->ppl_model && c->ppl_model[0])
        s = wf__prep_ppl_open(&r.ppl, c->ppl_model, c->ppl_tokenizer, c->ppl_max_tokens, r.threads);
    if (s != WF_OK) {
        run_free(&r);
        return s;
    }

    wf_progress prog;
    r.next_input = r.ps.inputs_done;
    for (size_t i = 0; i < r.ps.inputs_done; i++) r.done_bytes += r.sizes[i];
    r.ckpt_bytes = (uint64_t)(c->checkpoint_mb * 1048576.0);
    wf_progress_init(&prog, "prep", "B", total_bytes);
    wf_progress_update(&prog, r.done_bytes);
    while (s == WF_OK && r.ps.inputs_done < n_inputs) {
        int ckpt;
        s = fill_batch(&r, &ckpt);
        if (s == WF_OK && r.n_docs) s = process_batch(&r);
        if (s != WF_OK) break;
        wf_progress_update(&prog, r.done_bytes + (r.rd ? wf__prep_reader_consumed(r.rd) : 0));
        maybe_crash(&r);
        if (ckpt) {
            r.ps.inputs_done = r.reading + 1;
            s = checkpoint(&r, t_start, wall_base);
        } else if (!r.n_docs && !r.rd && r.next_input >= n_inputs) {
            s = wf_error(WF_ERR_INTERNAL, "prep: inputs ended without a checkpoint");
        }
    }
    if (s == WF_OK) s = wf__prep_output_finish(&r.out, &r.st);
    if (s == WF_OK) {
        r.ps.complete = 1;
        r.st.wall_seconds = wall_base + (wf_time_now() - t_start);
        s = wf__prep_stats_write(c->output, c, &r.ps, &r.st);
        if (s == WF_OK) s = wf__prep_state_write(c->output, &r.ps, &r.out, &r.st);
    }
    wf_progress_done(&prog);
    run_free(&r);
    return s;
}
