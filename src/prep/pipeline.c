/* `weft prep`'s driver: a run is a sequence of steps, each a set of
 * deterministic units that any number of tasks share (docs/prep.md, "Tasks
 * and steps"; the files between steps: docs/formats/prep-intermediate.md):
 *
 *   1. extract (per input): read, extract, normalize, hash the paragraphs;
 *      the documents, and (hash, document, unit) records by hash range;
 *   2. dedup (per hash range): the first occurrence of each hash in input
 *      order is kept; the others go to per-input drop lists;
 *   3. filter (per input): the duplicate paragraphs removed, language id,
 *      quality rules, MinHash signatures; band keys by band;
 *   4. lsh (per band and key range): documents that share a key are joined
 *      (edges);
 *   5. cluster (one unit): union-find over the edges; every document of a
 *      cluster but its first (lowest id) is a near duplicate;
 *   6. output (per input): perplexity and the JSONL of the kept documents,
 *      compressed in pieces;
 *   7. finish (one unit): the counters added up, the pieces joined into
 *      shards in input order, stats.json and stats.txt.
 *
 * A task (--tasks N --task I, a Slurm array task, an MPI rank) does its own
 * share of a step's units first, then any unclaimed ones, then waits for
 * those other tasks hold. A unit is claimed with a lock (link(2), taken
 * over from a task that died), writes its files under temporary names,
 * renames them, and then writes its completion marker; a rerun does only
 * what is not complete. Every decision depends only on the inputs and the
 * config, so the output is the same bytes for any number of tasks and
 * threads. Within a unit, batches of documents go through the per-document
 * work on all threads. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "prep/prep_impl.h"
#include "weft/dirlock.h"
#include "weft/json.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/sorted.h"
#include "weft/store.h"
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
    int repaired, q_skipped, mh_no_words, mh_chars;
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
    uint32_t pos;                  /* its number in the step's input file */
} pdoc;

typedef struct {
    const wf_prep_config *c;
    const char *const *inputs;
    size_t n_inputs;
    uint64_t *sizes;
    int threads;
    wf_normalize_opts nopts;
    prep_ppl *ppl;
    prep_rule_sets rules;          /* the quality rule sets */
    pdoc *docs;
    size_t n_docs, docs_cap;
    atomic_size_t next;
    wf_buf line;
    int n_hashes;
    size_t max_doc;
    int tasks, task;               /* this task: task of tasks */
    long array_id, array_min;      /* SLURM_ARRAY_TASK_ID and _MIN, or -1 when not a Slurm array task */
    int ranges;                    /* units of the dedup step */
    int bands, lsh_ranges;         /* the lsh step's units: bands x lsh_ranges */
    char pdir[4200];               /* OUT/_prep */
    double started;                /* the run's start (run.json), epoch seconds */
    prep_stats st;                 /* the counters of the unit being done */
    wf_dirlock *lock;              /* this task's lock (the output directory's with one task) */
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
 * blocks). */
static wf_status dedup_split(const prep_run *r, pdoc *d) {
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
    return WF_OK;
}

/* The units and the hash of each one's normalized form. */
static wf_status dedup_hash(const prep_run *r, pdoc *d) {
    WF_TRY(dedup_split(r, d));
    const char *t = d->text.data;
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
    d->mh_chars = 0;
    if (c->minhash) {
        /* Languages written without spaces: a paragraph would be one word,
         * so their shingles are characters. Chosen by the language, not by
         * the quality rule set: the quality stage may be off or skip it. */
        int chars = in_list(&c->mh_char_languages, d->lang);
        size_t n = chars ? wf_minhash_signature_chars(d->text.data, d->text.len, (int)c->mh_char_ngram,
                                                      r->n_hashes, (uint64_t)c->mh_seed, d->sig)
                         : wf_minhash_signature(d->text.data, d->text.len, (int)c->mh_ngram, r->n_hashes,
                                                (uint64_t)c->mh_seed, d->sig);
        d->mh_chars = chars && n;
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


static void pdoc_reset(pdoc *d) {
    wf_buf *bufs[] = {&d->raw, &d->url, &d->text, &d->tmp, &d->norm};
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) {
        if (bufs[k]->cap > KEEP_BUF_BYTES) wf_buf_free(bufs[k]);
        bufs[k]->len = 0;
    }
    d->n_units = d->units_removed = 0;
    d->lines_removed = 0;
    d->repaired = d->q_skipped = d->mh_no_words = d->mh_chars = d->has_keys = 0;
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


static double epoch_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- accounting ---- */

/* Adds a document whose life ended (dropped at stage `last` for `drop`, or
 * written: last = ST_OUTPUT, drop = R_NONE) to the stage counters. */
static void account_doc(prep_stats *s, int last, int drop_reason, const uint64_t *at) {
    for (int st = 0; st <= last && st < ST_COUNT; st++) {
        s->docs_in[st]++;
        s->bytes_in[st] += at[st];
        if (st < last) {
            s->docs_out[st]++;
            s->bytes_out[st] += at[st + 1];
        } else if (drop_reason != R_NONE) {
            s->drop_docs[drop_reason]++;
            s->drop_bytes[drop_reason] += at[st];
        } else {
            s->docs_out[st]++;
            s->bytes_out[st] += at[st];
        }
    }
}

static void account_seconds(prep_run *r, pdoc *d) {
    for (int st = 0; st < ST_COUNT; st++) {
        r->st.seconds[st] += d->t[st];
        d->t[st] = 0.0;
    }
}

/* The quality stage per language: which rule set, and how it went. */
static wf_status account_quality(prep_run *r, const pdoc *d) {
    if (!r->c->quality || d->last < ST_QUALITY) return WF_OK;
    const char *set = d->rule_set >= 0 ? r->rules.v[d->rule_set].name : "none";
    prep_quality_lang *q = wf__prep_stats_qlang(&r->st, d->lang, set);
    if (!q) return wf_error(WF_ERR_NOMEM, "out of memory");
    q->docs_in++;
    if (d->last == ST_QUALITY && d->drop != R_NONE) q->drop[d->drop]++;
    else q->docs_out++;
    return WF_OK;
}

/* ---- paths of a run's files (docs/formats/prep-intermediate.md) ---- */

static void rpath(const prep_run *r, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rpath(const prep_run *r, char *out, size_t cap, const char *fmt, ...) {
    int n = snprintf(out, cap, "%s/", r->pdir);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < cap) vsnprintf(out + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
}

/* The test hook behind the killed-task tests: WEFT_PREP_CRASH=STEP:UNIT
 * kills the process with SIGKILL in the middle of that unit (after its
 * first batch, or before its files are renamed into place), as a crash,
 * an OOM kill or a preempted node would. */
static void maybe_crash(int step, size_t unit) {
    const char *env = getenv("WEFT_PREP_CRASH");
    if (!env) return;
    const char *colon = strchr(env, ':');
    if (!colon || (size_t)(colon - env) != strlen(wf__prep_step_name(step)) ||
        strncmp(env, wf__prep_step_name(step), (size_t)(colon - env)) != 0 || (size_t)atol(colon + 1) != unit)
        return;
    fflush(NULL);
    raise(SIGKILL);
}

/* ---- step 1: extract (one unit per input) ---- */

/* Reads up to a batch of records of one input. */
static wf_status fill_batch(prep_run *r, prep_reader *rd, size_t in, int *eof) {
    double t0 = wf_time_now();
    for (size_t i = 0; i < r->n_docs; i++) pdoc_reset(&r->docs[i]);
    r->n_docs = 0;
    size_t bytes = 0, budget = (size_t)r->c->batch_mb << 20;
    wf_status s = WF_OK;
    while (r->n_docs < BATCH_MAX_DOCS && bytes < budget) {
        prep_record rec;
        s = wf__prep_reader_next(rd, &rec, eof);
        if (s != WF_OK) {
            wf_error_wrap(s, "%s: ", r->inputs[in]);
            break;
        }
        if (*eof) break;
        pdoc *d = NULL;
        if ((s = batch_slot(r, &d)) != WF_OK) break;
        r->st.extra[E_RECORDS]++;
        d->kind = rec.kind;
        d->reader_drop = rec.drop;
        d->input = in;
        d->index = rec.index;
        if (rec.data && (s = wf_buf_append(&d->raw, rec.data, rec.len)) != WF_OK) break;
        if (rec.url && (s = wf_buf_append(&d->url, rec.url, strlen(rec.url))) != WF_OK) break;
        bytes += rec.len + 256;
    }
    r->st.seconds[ST_READ] += wf_time_now() - t0;
    return s;
}

static wf_status step_extract(prep_run *r, size_t in) {
    const wf_prep_config *c = r->c;
    char path[4400];
    prep_reader *rd = NULL;
    prep_iw docs = {0};
    int nh = c->dedup ? r->ranges : 0;
    prep_iw *hw = calloc((size_t)nh + 1, sizeof *hw);
    if (!hw) return wf_error(WF_ERR_NOMEM, "out of memory");
    /* An input in an object store is read from its local copy (the store
     * cache, docs/storage.md); its URL stays its name (document ids, the
     * run's fingerprint), so every machine names it alike. */
    char *local = NULL;
    wf_status s = wf_store_local_copy(r->inputs[in], &local);
    if (s == WF_OK) s = wf__prep_reader_open(&rd, local, c);
    free(local);
    if (s == WF_OK) {
        rpath(r, path, sizeof path, "extract/%06zu.docs", in);
        s = wf__prep_iw_open(&docs, path, PI_DOCS);
    }
    for (int k = 0; k < nh && s == WF_OK; k++) {
        rpath(r, path, sizeof path, "extract/%06zu.r%04d", in, k);
        s = wf__prep_iw_open(&hw[k], path, PI_HASHES);
    }
    uint32_t pos = 0;
    int eof = 0;
    while (s == WF_OK && !eof) {
        s = fill_batch(r, rd, in, &eof);
        if (s == WF_OK && r->n_docs) s = run_phase(r, 2);
        for (size_t i = 0; i < r->n_docs && s == WF_OK; i++) {
            pdoc *d = &r->docs[i];
            account_seconds(r, d);
            r->st.extra[E_REPAIRED] += (uint64_t)d->repaired;
            r->st.extra[E_UNITS] += d->n_units;
            if (d->drop != R_NONE) {
                account_doc(&r->st, d->last, d->drop, d->at);
                continue;
            }
            prep_idoc x = {.index = d->index, .lang = "und", .url = d->url.data, .url_len = (uint32_t)d->url.len,
                           .text = d->text.data, .text_len = (uint32_t)d->text.len};
            memcpy(x.at, d->at, sizeof x.at);
            s = wf__prep_iw_doc(&docs, &x);
            for (size_t u = 0; u < d->n_units && s == WF_OK; u++) {
                uint64_t h = d->unit_hash[u];
                if (!h) continue;
                prep_iw *w = &hw[h % (uint64_t)nh];
                s = wf__prep_iw_u64(w, h);
                if (s == WF_OK) s = wf__prep_iw_u32(w, pos);
                if (s == WF_OK) s = wf__prep_iw_u32(w, (uint32_t)u);
            }
            pos++;
        }
        if (s == WF_OK && r->n_docs) maybe_crash(PS_EXTRACT, in);
    }
    if (s == WF_OK) {
        r->st.extra[E_INPUTS]++;
        r->st.extra[E_INPUT_BYTES] += r->sizes[in];
        r->st.extra[E_RECORDS_SKIPPED] += wf__prep_reader_skipped(rd);
        r->st.extra[E_INPUTS_DAMAGED] += (uint64_t)wf__prep_reader_damaged(rd);
        r->st.step_bytes[PS_EXTRACT] += r->sizes[in];
    }
    for (int k = 0; k < nh && s == WF_OK; k++) s = wf__prep_iw_commit(&hw[k]);
    if (s == WF_OK) s = wf__prep_iw_commit(&docs);
    for (int k = 0; k < nh; k++) wf__prep_iw_abort(&hw[k]);
    wf__prep_iw_abort(&docs);
    free(hw);
    wf__prep_reader_close(rd);
    return s;
}

/* ---- step 2: dedup (one unit per hash range) ---- */

static wf_status step_dedup(prep_run *r, size_t range) {
    char path[4400];
    u64set set;
    WF_TRY(wf__prep_u64set_init(&set, (size_t)r->c->dedup_max_mb << 20));
    wf_status s = WF_OK;
    for (size_t in = 0; in < r->n_inputs && s == WF_OK; in++) {
        prep_ir ir;
        rpath(r, path, sizeof path, "extract/%06zu.r%04zu", in, range);
        if ((s = wf__prep_ir_load(&ir, path, PI_HASHES)) != WF_OK) break;
        r->st.step_bytes[PS_DEDUP] += ir.len;
        prep_iw w;
        rpath(r, path, sizeof path, "dedup/%06zu.r%04zu", in, range);
        s = wf__prep_iw_open(&w, path, PI_DROPS);
        while (s == WF_OK && !wf__prep_ir_end(&ir)) {
            uint64_t h;
            uint32_t doc, unit;
            size_t at = ir.pos;
            s = wf__prep_ir_u64(&ir, &h, "hash");
            if (s == WF_OK) s = wf__prep_ir_u32(&ir, &doc, "hash");
            if (s == WF_OK) s = wf__prep_ir_u32(&ir, &unit, "hash");
            if (s != WF_OK) break;
            if (h % (uint64_t)r->ranges != range) {
                s = wf_error(WF_ERR_FORMAT, "%s: the hash at byte %zu belongs to another range; rerun with --force",
                             ir.what, at);
                break;
            }
            int ins = wf__prep_u64set_insert(&set, h);
            if (ins == 0) {
                s = wf__prep_iw_u32(&w, doc);
                if (s == WF_OK) s = wf__prep_iw_u32(&w, unit);
            } else if (ins < 0) {
                r->st.extra[E_DEDUP_FULL]++;
            }
        }
        if (s == WF_OK && in + 1 == r->n_inputs) maybe_crash(PS_DEDUP, range);
        if (s == WF_OK) s = wf__prep_iw_commit(&w);
        wf__prep_iw_abort(&w);
        wf__prep_ir_free(&ir);
    }
    wf__prep_u64set_free(&set);
    return s;
}

/* ---- step 3: filter (one unit per input) ---- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The units of input `in` that dedup removed, as doc << 32 | unit, sorted. */
static wf_status load_drops(prep_run *r, size_t in, u64vec *drops) {
    char path[4400];
    for (int k = 0; k < r->ranges; k++) {
        prep_ir ir;
        rpath(r, path, sizeof path, "dedup/%06zu.r%04d", in, k);
        WF_TRY(wf__prep_ir_load(&ir, path, PI_DROPS));
        r->st.step_bytes[PS_FILTER] += ir.len;
        wf_status s = WF_OK;
        while (s == WF_OK && !wf__prep_ir_end(&ir)) {
            uint32_t doc, unit;
            s = wf__prep_ir_u32(&ir, &doc, "drop");
            if (s == WF_OK) s = wf__prep_ir_u32(&ir, &unit, "drop");
            if (s == WF_OK) s = wf__prep_u64vec_push(drops, (uint64_t)doc << 32 | unit);
        }
        wf__prep_ir_free(&ir);
        WF_TRY(s);
    }
    if (drops->n) qsort(drops->v, drops->n, sizeof *drops->v, cmp_u64);
    return WF_OK;
}

/* The read size of the streamed intermediate files (read_kb). */
static size_t read_chunk(const prep_run *r) {
    return r->c->read_kb > 0 ? (size_t)r->c->read_kb << 10 : (size_t)4 << 20;
}

static wf_status step_filter(prep_run *r, size_t in) {
    const wf_prep_config *c = r->c;
    char path[4400];
    prep_dr ir = {0};
    u64vec drops = {0};
    prep_iw docs = {0};
    int nb = c->minhash ? r->bands : 0;
    prep_iw *bw = calloc((size_t)nb + 1, sizeof *bw);
    if (!bw) return wf_error(WF_ERR_NOMEM, "out of memory");
    rpath(r, path, sizeof path, "extract/%06zu.docs", in);
    wf_status s = wf__prep_dr_open(&ir, path, PI_DOCS, read_chunk(r), 0);
    if (s == WF_OK) r->st.step_bytes[PS_FILTER] += ir.total + 32;
    if (s == WF_OK && c->dedup) s = load_drops(r, in, &drops);
    if (s == WF_OK) {
        rpath(r, path, sizeof path, "filter/%06zu.docs", in);
        s = wf__prep_iw_open(&docs, path, PI_DOCS);
    }
    for (int b = 0; b < nb && s == WF_OK; b++) {
        rpath(r, path, sizeof path, "filter/%06zu.b%04d", in, b);
        s = wf__prep_iw_open(&bw[b], path, PI_BANDS);
    }
    size_t dp = 0;
    uint32_t pos_in = 0, pos_out = 0;
    size_t budget = (size_t)c->batch_mb << 20;
    while (s == WF_OK && !wf__prep_dr_end(&ir)) {
        for (size_t i = 0; i < r->n_docs; i++) pdoc_reset(&r->docs[i]);
        r->n_docs = 0;
        size_t bytes = 0;
        while (s == WF_OK && !wf__prep_dr_end(&ir) && r->n_docs < BATCH_MAX_DOCS && bytes < budget) {
            prep_idoc x;
            pdoc *d = NULL;
            if ((s = wf__prep_dr_doc(&ir, &x)) != WF_OK || (s = batch_slot(r, &d)) != WF_OK) break;
            d->index = x.index;
            d->input = in;
            d->pos = pos_in++;
            memcpy(d->at, x.at, sizeof d->at);
            d->drop = R_NONE;
            d->last = ST_OUTPUT;
            if ((s = wf_buf_append(&d->text, x.text, x.text_len)) != WF_OK) break;
            if ((s = wf_buf_append(&d->url, x.url, x.url_len)) != WF_OK) break;
            bytes += x.text_len + 256;
            if (c->dedup && (s = dedup_split(r, d)) != WF_OK) break;
            for (; dp < drops.n && drops.v[dp] >> 32 == d->pos; dp++) {
                uint32_t unit = (uint32_t)drops.v[dp];
                if (unit >= d->n_units) {
                    s = wf_error(WF_ERR_FORMAT, "%s/dedup: unit %u of document %u of input %zu does not exist; rerun "
                                 "with --force", r->pdir, unit, d->pos, in);
                    break;
                }
                d->unit_dup[unit] = 1;
            }
        }
        if (s == WF_OK && dp < drops.n && drops.v[dp] >> 32 < pos_in)
            s = wf_error(WF_ERR_FORMAT, "%s/dedup: the drop lists of input %zu are out of order; rerun with --force",
                         r->pdir, in);
        if (s == WF_OK && r->n_docs) s = run_phase(r, 4);
        for (size_t i = 0; i < r->n_docs && s == WF_OK; i++) {
            pdoc *d = &r->docs[i];
            account_seconds(r, d);
            r->st.extra[E_UNITS_REMOVED] += d->units_removed;
            r->st.extra[E_LINES_REMOVED] += d->lines_removed;
            r->st.extra[E_Q_SKIPPED] += (uint64_t)d->q_skipped;
            r->st.extra[E_MH_NO_WORDS] += (uint64_t)d->mh_no_words;
            r->st.extra[E_MH_CHARS] += (uint64_t)d->mh_chars;
            if ((s = account_quality(r, d)) != WF_OK) break;
            if (d->drop != R_NONE) {
                account_doc(&r->st, d->last, d->drop, d->at);
                continue;
            }
            prep_idoc x = {.index = d->index, .conf = d->lang_conf, .url = d->url.data,
                           .url_len = (uint32_t)d->url.len, .text = d->text.data, .text_len = (uint32_t)d->text.len};
            memcpy(x.at, d->at, sizeof x.at);
            snprintf(x.lang, sizeof x.lang, "%s", d->lang);
            s = wf__prep_iw_doc(&docs, &x);
            for (int b = 0; b < nb && s == WF_OK && d->has_keys; b++) {
                s = wf__prep_iw_u64(&bw[b], d->keys[b]);
                if (s == WF_OK) s = wf__prep_iw_u32(&bw[b], pos_out);
            }
            pos_out++;
        }
        if (s == WF_OK && r->n_docs) maybe_crash(PS_FILTER, in);
    }
    if (s == WF_OK && dp < drops.n)
        s = wf_error(WF_ERR_FORMAT, "%s/dedup: input %zu has %u documents, its drop lists name document %llu; rerun "
                     "with --force", r->pdir, in, pos_in, (unsigned long long)(drops.v[dp] >> 32));
    for (int b = 0; b < nb && s == WF_OK; b++) s = wf__prep_iw_commit(&bw[b]);
    if (s == WF_OK) s = wf__prep_iw_commit(&docs);
    for (int b = 0; b < nb; b++) wf__prep_iw_abort(&bw[b]);
    wf__prep_iw_abort(&docs);
    free(bw);
    wf__prep_u64vec_free(&drops);
    wf__prep_dr_close(&ir);
    return s;
}

/* How many units a step has. */
static size_t step_units(const prep_run *r, int step) {
    const wf_prep_config *c = r->c;
    switch (step) {
    case PS_DEDUP: return c->dedup ? (size_t)r->ranges : 0;
    case PS_LSH: return c->minhash ? (size_t)r->bands * (size_t)r->lsh_ranges : 0;
    case PS_CLUSTER: return c->minhash ? 1 : 0;
    case PS_FINISH: return 1;
    default: return r->n_inputs;
    }
}

/* ---- step 4: lsh (one unit per band and key range) ---- */

typedef struct {
    uint64_t key, gid;
} band_entry;

static int cmp_band(const void *a, const void *b) {
    const band_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->gid < y->gid ? -1 : x->gid > y->gid;
}

/* A document's global id: its input and its number there. */
#define GID(in, pos) ((uint64_t)(in) << 32 | (uint64_t)(pos))

/* The edges file of lsh unit u: band u / R, key range u % R. */
static void edges_path(const prep_run *r, size_t unit, char *path, size_t size) {
    rpath(r, path, size, "lsh/%04zu.r%04zu.edges", unit / (size_t)r->lsh_ranges, unit % (size_t)r->lsh_ranges);
}

/* Unit u holds the keys k of band u / R with k % R == u % R (R =
 * minhash.ranges): a key's documents are all in one unit, and a unit's
 * memory is 16 bytes a document of its range. Each band file is read by
 * the R units of its band. */
static wf_status step_lsh(prep_run *r, size_t unit) {
    char path[4400];
    size_t band = unit / (size_t)r->lsh_ranges, range = unit % (size_t)r->lsh_ranges;
    band_entry *v = NULL;
    size_t n = 0, cap = 0;
    wf_status s = WF_OK;
    for (size_t in = 0; in < r->n_inputs && s == WF_OK; in++) {
        prep_ir ir;
        rpath(r, path, sizeof path, "filter/%06zu.b%04zu", in, band);
        if ((s = wf__prep_ir_load(&ir, path, PI_BANDS)) != WF_OK) break;
        r->st.step_bytes[PS_LSH] += ir.len;
        while (s == WF_OK && !wf__prep_ir_end(&ir)) {
            uint64_t key;
            uint32_t doc;
            s = wf__prep_ir_u64(&ir, &key, "band key");
            if (s == WF_OK) s = wf__prep_ir_u32(&ir, &doc, "band key");
            if (s != WF_OK || key % (uint64_t)r->lsh_ranges != range) continue;
            s = WF_GROW(v, cap, n + 1, 1024);
            if (s == WF_OK) v[n++] = (band_entry){key, GID(in, doc)};
        }
        wf__prep_ir_free(&ir);
    }
    if (s == WF_OK && n) qsort(v, n, sizeof *v, cmp_band);
    if (s == WF_OK)
        WF_DEBUG("prep: lsh %zu (band %zu, range %zu of %d): %zu keys, %.2f MiB", unit, band, range, r->lsh_ranges,
                 n, (double)(cap * sizeof *v) / 1048576.0);
    prep_iw w = {0};
    if (s == WF_OK) {
        edges_path(r, unit, path, sizeof path);
        s = wf__prep_iw_open(&w, path, PI_EDGES);
    }
    /* Every document of a key's group is joined to the group's first. */
    for (size_t i = 0, first = 0; i < n && s == WF_OK; i++) {
        if (i == 0 || v[i].key != v[i - 1].key) {
            first = i;
            continue;
        }
        s = wf__prep_iw_u64(&w, v[first].gid);
        if (s == WF_OK) s = wf__prep_iw_u64(&w, v[i].gid);
    }
    if (s == WF_OK) maybe_crash(PS_LSH, unit);
    if (s == WF_OK) s = wf__prep_iw_commit(&w);
    wf__prep_iw_abort(&w);
    free(v);
    return s;
}

/* ---- step 5: cluster (one unit) ---- */

static size_t uf_find(size_t *parent, size_t x) {
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* Sorts and dedups v in place. */
static void sort_unique(u64vec *v) {
    if (!v->n) return;
    qsort(v->v, v->n, sizeof *v->v, cmp_u64);
    size_t n = 1;
    for (size_t i = 1; i < v->n; i++)
        if (v->v[i] != v->v[n - 1]) v->v[n++] = v->v[i];
    v->n = n;
}

/* Reads every lsh unit's edges file, one at a time: pass 0 collects the
 * documents that have an edge into ids (kept sorted and unique as it
 * grows, so it holds about one id a document), pass 1 joins each edge's
 * ends in parent. counts: the edges and the compactions of pass 0. */
static wf_status cluster_pass(prep_run *r, int pass, u64vec *ids, size_t *parent, size_t counts[2]) {
    char path[4400];
    size_t compact_at = 1024; /* then twice the ids kept */
    for (size_t u = 0, n = step_units(r, PS_LSH); u < n; u++) {
        prep_ir ir;
        edges_path(r, u, path, sizeof path);
        WF_TRY(wf__prep_ir_load(&ir, path, PI_EDGES));
        r->st.step_bytes[PS_CLUSTER] += ir.len;
        wf_status s = WF_OK;
        while (s == WF_OK && !wf__prep_ir_end(&ir)) {
            uint64_t g[2];
            for (int k = 0; k < 2 && s == WF_OK; k++) {
                s = wf__prep_ir_u64(&ir, &g[k], "edge");
                if (s == WF_OK && (g[k] >> 32) >= r->n_inputs)
                    s = wf_error(WF_ERR_FORMAT, "%s: an edge at byte %zu names input %llu of %zu; rerun with --force",
                                 ir.what, ir.pos - 8, (unsigned long long)(g[k] >> 32), r->n_inputs);
            }
            if (s != WF_OK) break;
            if (pass == 0) {
                counts[0]++;
                s = wf__prep_u64vec_push(ids, g[0]);
                if (s == WF_OK) s = wf__prep_u64vec_push(ids, g[1]);
                if (s == WF_OK && ids->n >= compact_at) {
                    sort_unique(ids);
                    counts[1]++;
                    compact_at = ids->n * 2 > compact_at ? ids->n * 2 : compact_at;
                }
                continue;
            }
            /* Union by the lower index: each cluster's root is its first
             * document (ids are sorted). */
            size_t a = uf_find(parent, wf_sorted_u64_lower_bound(ids->v, ids->n, g[0]));
            size_t b = uf_find(parent, wf_sorted_u64_lower_bound(ids->v, ids->n, g[1]));
            if (a < b) parent[b] = a;
            else if (b < a) parent[a] = b;
        }
        wf__prep_ir_free(&ir);
        WF_TRY(s);
    }
    if (pass == 0) sort_unique(ids);
    return WF_OK;
}

static wf_status step_cluster(prep_run *r, size_t unit) {
    (void)unit;
    char path[4400];
    u64vec ids = {0};
    size_t *parent = NULL;
    size_t counts[2] = {0, 0};
    wf_status s = cluster_pass(r, 0, &ids, NULL, counts);
    size_t n = ids.n;
    if (s == WF_OK && n) {
        parent = malloc(n * sizeof *parent);
        if (!parent) s = wf_error(WF_ERR_NOMEM, "out of memory");
        for (size_t i = 0; s == WF_OK && i < n; i++) parent[i] = i;
        if (s == WF_OK) s = cluster_pass(r, 1, &ids, parent, counts);
    }
    if (s == WF_OK)
        WF_DEBUG("prep: cluster: %zu documents with a near duplicate, %zu edges (their ids compacted %zu times), "
                 "%.2f MiB", n, counts[0], counts[1],
                 (double)(ids.cap * sizeof *ids.v + n * sizeof *parent) / 1048576.0);
    prep_iw w = {0};
    if (s == WF_OK) {
        rpath(r, path, sizeof path, "cluster/drops");
        s = wf__prep_iw_open(&w, path, PI_CLUSTER);
    }
    for (size_t i = 0; i < n && s == WF_OK; i++)
        if (uf_find(parent, i) != i) s = wf__prep_iw_u64(&w, ids.v[i]);
    if (s == WF_OK) maybe_crash(PS_CLUSTER, 0);
    if (s == WF_OK) s = wf__prep_iw_commit(&w);
    wf__prep_iw_abort(&w);
    free(parent);
    wf__prep_u64vec_free(&ids);
    return s;
}

/* ---- step 6: output (one unit per input) ---- */


typedef struct {
    char lang[16], bucket[8];
    wf_buf buf;
} out_stream;

typedef struct {
    out_stream *v;
    size_t n, cap;
    prep_piece *pieces;
    size_t n_pieces, pieces_cap;
    prep_iw blob;
    void *cctx;
    wf_buf z;
} out_unit;

/* Compresses a stream's JSONL into one zstd frame at the end of the blob. */
static wf_status flush_stream(prep_run *r, out_unit *o, out_stream *w) {
    if (!w->buf.len) return WF_OK;
    size_t bound = ZSTD_compressBound(w->buf.len);
    WF_TRY(wf_buf_reserve(&o->z, bound));
    size_t zn = ZSTD_compress2(o->cctx, o->z.data, bound, w->buf.data, w->buf.len);
    if (ZSTD_isError(zn)) return wf_error(WF_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(zn));
    WF_TRY(WF_GROW(o->pieces, o->pieces_cap, o->n_pieces + 1, 16));
    prep_piece *p = &o->pieces[o->n_pieces++];
    memset(p, 0, sizeof *p);
    snprintf(p->lang, sizeof p->lang, "%s", w->lang);
    snprintf(p->bucket, sizeof p->bucket, "%s", w->bucket);
    p->raw = w->buf.len;
    p->off = o->blob.bytes;
    p->len = zn;
    WF_TRY(wf__prep_iw_write(&o->blob, o->z.data, zn));
    (void)r;
    w->buf.len = 0;
    return WF_OK;
}

static wf_status step_output(prep_run *r, size_t in) {
    const wf_prep_config *c = r->c;
    char path[4400];
    prep_ir cl = {0};
    prep_dr ir = {0};
    out_unit o;
    memset(&o, 0, sizeof o);
    uint64_t shard_bytes = (uint64_t)(c->shard_mb * 1048576.0);
    if (shard_bytes == 0) shard_bytes = 1;
    rpath(r, path, sizeof path, "filter/%06zu.docs", in);
    wf_status s = wf__prep_dr_open(&ir, path, PI_DOCS, read_chunk(r), 0);
    if (s == WF_OK) r->st.step_bytes[PS_OUTPUT] += ir.total + 32;
    /* The near duplicates of this input: the cluster list is sorted by id. */
    const char *near = NULL;
    size_t n_near = 0;
    if (s == WF_OK && c->minhash) {
        rpath(r, path, sizeof path, "cluster/drops");
        s = wf__prep_ir_load(&cl, path, PI_CLUSTER);
        if (s == WF_OK && (cl.len - cl.pos) % 8)
            s = wf_error(WF_ERR_FORMAT, "%s: %zu bytes of records, not a multiple of 8; rerun with --force", cl.what,
                         cl.len - cl.pos);
        if (s == WF_OK) {
            size_t total = (cl.len - cl.pos) / 8, lo = 0, hi = total;
            const unsigned char *base = (const unsigned char *)cl.data + cl.pos;
            /* First entry >= GID(in, 0). */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                uint64_t g = 0;
                for (int k = 0; k < 8; k++) g |= (uint64_t)base[mid * 8 + (size_t)k] << (8 * k);
                if (g < GID(in, 0)) lo = mid + 1;
                else hi = mid;
            }
            near = (const char *)base + lo * 8;
            while (lo + n_near < total) {
                uint64_t g = 0;
                for (int k = 0; k < 8; k++) g |= (uint64_t)base[(lo + n_near) * 8 + (size_t)k] << (8 * k);
                if (g >> 32 != in) break;
                n_near++;
            }
        }
    }
    if (s == WF_OK && c->ppl_model && c->ppl_model[0] && !r->ppl)
        s = wf__prep_ppl_open(&r->ppl, c->ppl_model, c->ppl_tokenizer, c->ppl_max_tokens, r->threads);
    if (s == WF_OK) {
        o.cctx = ZSTD_createCCtx();
        if (!o.cctx) s = wf_error(WF_ERR_NOMEM, "out of memory for a zstd context");
        else {
            ZSTD_CCtx_setParameter(o.cctx, ZSTD_c_compressionLevel, (int)c->zstd_level);
            ZSTD_CCtx_setParameter(o.cctx, ZSTD_c_checksumFlag, 1);
        }
    }
    if (s == WF_OK) {
        rpath(r, path, sizeof path, "output/%06zu.blob", in);
        s = wf__prep_iw_open(&o.blob, path, PI_BLOB);
    }
    uint32_t pos = 0;
    size_t np = 0;
    char num[64];
    double t0 = wf_time_now();
    while (s == WF_OK && !wf__prep_dr_end(&ir)) {
        prep_idoc x;
        if ((s = wf__prep_dr_doc(&ir, &x)) != WF_OK) break;
        uint32_t me = pos++;
        int is_near = 0;
        while (np < n_near) {
            uint64_t g = 0;
            for (int k = 0; k < 8; k++) g |= (uint64_t)(unsigned char)near[np * 8 + (size_t)k] << (8 * k);
            if ((uint32_t)g > me) break;
            np++;
            if ((uint32_t)g == me) is_near = 1;
        }
        if (is_near) {
            account_doc(&r->st, ST_MINHASH, R_NEAR_DUP, x.at);
            continue;
        }
        /* perplexity */
        x.at[ST_PERPLEXITY] = x.text_len;
        int bucket = -1;
        double ppl = 0.0;
        if (r->ppl) {
            double t1 = wf_time_now(), loss;
            int64_t n_tok;
            if ((s = wf__prep_ppl_score(r->ppl, x.text, x.text_len, &loss, &n_tok)) != WF_OK) break;
            ppl = n_tok ? exp(loss) : 0.0;
            bucket = ppl <= c->ppl_head_max ? 0 : ppl <= c->ppl_middle_max ? 1 : 2;
            double lg = ppl > 1.0 ? log10(ppl) * 100.0 : 0.0;
            int bin = lg >= PREP_PPL_BINS - 1 ? PREP_PPL_BINS - 1 : (int)lg;
            r->st.ppl_hist[bin]++;
            r->st.extra[E_HEAD + bucket]++;
            r->st.seconds[ST_PERPLEXITY] += wf_time_now() - t1;
            if (bucket == 2 && c->ppl_drop_tail) {
                account_doc(&r->st, ST_PERPLEXITY, R_TAIL, x.at);
                continue;
            }
        }
        /* output */
        double t2 = wf_time_now();
        x.at[ST_OUTPUT] = x.text_len;
        wf_buf *l = &r->line;
        l->len = 0;
        if ((s = wf_buf_append(l, "{\"text\":", 8)) != WF_OK) break;
        if ((s = wf_buf_json_str(l, x.text, x.text_len)) != WF_OK) break;
        if ((s = wf_buf_append(l, ",\"id\":", 6)) != WF_OK) break;
        char id[4200];
        int n = snprintf(id, sizeof id, "%s#%llu", r->inputs[in], (unsigned long long)x.index);
        if ((s = wf_buf_json_str(l, id, (size_t)n < sizeof id ? (size_t)n : sizeof id - 1)) != WF_OK) break;
        if (x.url_len) {
            if ((s = wf_buf_append(l, ",\"url\":", 7)) != WF_OK) break;
            if ((s = wf_buf_json_str(l, x.url, x.url_len)) != WF_OK) break;
        }
        if ((s = wf_buf_append(l, ",\"lang\":", 8)) != WF_OK) break;
        if ((s = wf_buf_json_str(l, x.lang, strlen(x.lang))) != WF_OK) break;
        if (c->langid) {
            n = snprintf(num, sizeof num, ",\"lang_score\":%.2f", x.conf);
            if ((s = wf_buf_append(l, num, (size_t)n)) != WF_OK) break;
        }
        if (bucket >= 0) {
            n = snprintf(num, sizeof num, ",\"perplexity\":%.2f,\"bucket\":\"%s\"", ppl, bucket_names[bucket]);
            if ((s = wf_buf_append(l, num, (size_t)n)) != WF_OK) break;
        }
        if ((s = wf_buf_append(l, "}\n", 2)) != WF_OK) break;
        const char *bname = bucket >= 0 ? bucket_names[bucket] : "all";
        out_stream *w = NULL;
        for (size_t k = 0; k < o.n && !w; k++)
            if (strcmp(o.v[k].lang, x.lang) == 0 && strcmp(o.v[k].bucket, bname) == 0) w = &o.v[k];
        if (!w) {
            if ((s = WF_GROW(o.v, o.cap, o.n + 1, 8)) != WF_OK) break;
            w = &o.v[o.n++];
            memset(w, 0, sizeof *w);
            snprintf(w->lang, sizeof w->lang, "%s", x.lang);
            snprintf(w->bucket, sizeof w->bucket, "%s", bname);
        }
        if ((s = wf_buf_append(&w->buf, l->data, l->len)) != WF_OK) break;
        r->st.extra[E_JSON_BYTES] += l->len;
        if ((s = wf__prep_stats_add_lang(&r->st, x.lang, 1, x.text_len)) != WF_OK) break;
        account_doc(&r->st, ST_OUTPUT, R_NONE, x.at);
        if (w->buf.len >= shard_bytes) s = flush_stream(r, &o, w);
        r->st.seconds[ST_OUTPUT] += wf_time_now() - t2;
    }
    (void)t0;
    for (size_t k = 0; k < o.n && s == WF_OK; k++) s = flush_stream(r, &o, &o.v[k]);
    if (s == WF_OK) maybe_crash(PS_OUTPUT, in);
    if (s == WF_OK) s = wf__prep_iw_commit(&o.blob);
    prep_iw idx = {0};
    if (s == WF_OK) {
        rpath(r, path, sizeof path, "output/%06zu.index", in);
        s = wf__prep_iw_open(&idx, path, PI_INDEX);
    }
    for (size_t k = 0; k < o.n_pieces && s == WF_OK; k++) s = wf__prep_iw_piece(&idx, &o.pieces[k]);
    if (s == WF_OK) s = wf__prep_iw_commit(&idx);
    wf__prep_iw_abort(&idx);
    wf__prep_iw_abort(&o.blob);
    for (size_t k = 0; k < o.n; k++) wf_buf_free(&o.v[k].buf);
    free(o.v);
    free(o.pieces);
    wf_buf_free(&o.z);
    ZSTD_freeCCtx(o.cctx);
    wf__prep_ir_free(&cl);
    wf__prep_dr_close(&ir);
    return s;
}

/* ---- step 7: finish (one unit) ---- */

typedef struct {
    char lang[16], bucket[8];
    int64_t shard;
    uint64_t raw;
    FILE *fp;
    char part[4400];
} shard_stream;

static wf_status shard_close(const wf_prep_config *c, shard_stream *w, prep_stats *st) {
    if (!w->fp) return WF_OK;
    char final[4400];
    snprintf(final, sizeof final, "%s/%s/%s_%05lld.jsonl.zst", c->output, w->lang, w->bucket, (long long)w->shard);
    wf_status s = WF_OK;
    if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->part, strerror(errno));
    if (fclose(w->fp) != 0 && s == WF_OK) s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->part, strerror(errno));
    w->fp = NULL;
    if (s == WF_OK && rename(w->part, final) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot rename to %s: %s", w->part, final, strerror(errno));
    st->extra[E_SHARDS]++;
    w->shard++;
    w->raw = 0;
    return s;
}

/* Adds up the units' counters; joins the output units' pieces into shards
 * (a shard is closed once it holds shard_mb of JSONL); writes the stats. */
static wf_status step_finish(prep_run *r, size_t unit) {
    (void)unit;
    const wf_prep_config *c = r->c;
    double t0 = wf_time_now();
    char path[4400];
    prep_stats total;
    memset(&total, 0, sizeof total);
    wf_status s = WF_OK;
    static const int steps[] = {PS_EXTRACT, PS_DEDUP, PS_FILTER, PS_LSH, PS_CLUSTER, PS_OUTPUT};
    for (size_t k = 0; k < sizeof steps / sizeof *steps && s == WF_OK; k++) {
        for (size_t u = 0, n = step_units(r, steps[k]); u < n && s == WF_OK; u++) {
            prep_stats part;
            memset(&part, 0, sizeof part);
            rpath(r, path, sizeof path, "stats/%s.%06zu.json", wf__prep_step_name(steps[k]), u);
            s = wf__prep_partial_read(path, &part);
            if (s == WF_OK) s = wf__prep_stats_merge(&total, &part);
            wf__prep_stats_free(&part);
        }
    }
    uint64_t shard_bytes = (uint64_t)(c->shard_mb * 1048576.0);
    shard_stream *ws = NULL;
    size_t nw = 0, capw = 0;
    for (size_t in = 0; in < r->n_inputs && s == WF_OK; in++) {
        prep_ir idx;
        prep_dr blob;
        rpath(r, path, sizeof path, "output/%06zu.index", in);
        if ((s = wf__prep_ir_load(&idx, path, PI_INDEX)) != WF_OK) break;
        rpath(r, path, sizeof path, "output/%06zu.blob", in);
        /* Checked whole before use: shards are published before its end. */
        if ((s = wf__prep_dr_open(&blob, path, PI_BLOB, read_chunk(r), 1)) != WF_OK) {
            wf__prep_ir_free(&idx);
            break;
        }
        total.step_bytes[PS_FINISH] += blob.total + 32 + idx.len;
        while (s == WF_OK && !wf__prep_ir_end(&idx)) {
            prep_piece p;
            if ((s = wf__prep_ir_piece(&idx, &p)) != WF_OK) break;
            /* The pieces follow each other in the blob, in the index's order. */
            uint64_t at = wf__prep_dr_offset(&blob);
            if (p.off != at || p.len > blob.total - at) {
                s = wf_error(WF_ERR_FORMAT, "%s: the piece before byte %zu is not where %s continues; rerun with "
                             "--force", idx.what, idx.pos, blob.what);
                break;
            }
            shard_stream *w = NULL;
            for (size_t k = 0; k < nw && !w; k++)
                if (strcmp(ws[k].lang, p.lang) == 0 && strcmp(ws[k].bucket, p.bucket) == 0) w = &ws[k];
            if (!w) {
                if ((s = WF_GROW(ws, capw, nw + 1, 8)) != WF_OK) break;
                w = &ws[nw++];
                memset(w, 0, sizeof *w);
                snprintf(w->lang, sizeof w->lang, "%s", p.lang);
                snprintf(w->bucket, sizeof w->bucket, "%s", p.bucket);
            }
            if (!w->fp) {
                snprintf(path, sizeof path, "%s/%s", c->output, w->lang);
                if ((s = wf_mkdirs(path)) != WF_OK) break;
                snprintf(w->part, sizeof w->part, "%s/%s/%s_%05lld.jsonl.zst.part", c->output, w->lang, w->bucket,
                         (long long)w->shard);
                w->fp = fopen(w->part, "wb");
                if (!w->fp) {
                    s = wf_error(WF_ERR_IO, "%s: cannot create: %s", w->part, strerror(errno));
                    break;
                }
            }
            for (uint64_t left = p.len; left && s == WF_OK;) {
                const char *q = NULL;
                size_t got = 0;
                if ((s = wf__prep_dr_bytes(&blob, &q, &got, left < SIZE_MAX ? (size_t)left : SIZE_MAX)) != WF_OK)
                    break;
                if (!got || fwrite(q, 1, got, w->fp) != got)
                    s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->part, got ? strerror(errno) : "no data");
                left -= got;
            }
            if (s != WF_OK) break;
            w->raw += p.raw;
            if (w->raw >= shard_bytes) s = shard_close(c, w, &total);
        }
        wf__prep_ir_free(&idx);
        wf__prep_dr_close(&blob);
    }
    for (size_t k = 0; k < nw; k++) {
        if (s == WF_OK) s = shard_close(c, &ws[k], &total);
        else if (ws[k].fp) fclose(ws[k].fp);
    }
    free(ws);
    if (s == WF_OK) maybe_crash(PS_FINISH, 0);
    if (s == WF_OK) {
        prep_progress_state ps;
        memset(&ps, 0, sizeof ps);
        ps.n_inputs = ps.inputs_done = r->n_inputs;
        ps.complete = 1;
        ps.tasks = r->tasks;
        total.step_units[PS_FINISH] = 1;
        total.step_seconds[PS_FINISH] += wf_time_now() - t0;
        total.wall_seconds = epoch_now() - r->started;
        s = wf__prep_stats_write(c->output, c, &ps, &total);
    }
    wf__prep_stats_free(&total);
    return s;
}

/* ---- units, claims and the task's loop ---- */

static int unit_done(const prep_run *r, int step, size_t u) {
    char path[4400];
    rpath(r, path, sizeof path, "done/%s.%06zu", wf__prep_step_name(step), u);
    return wf_path_exists(path);
}

typedef wf_status (*step_fn)(prep_run *r, size_t unit);
static const step_fn step_fns[PS_COUNT] = {step_extract, step_dedup, step_filter, step_lsh,
                                           step_cluster, step_output, step_finish};

/* Does one unit whose claim this task holds: its files, its counters, then
 * its completion marker. */
static wf_status run_unit(prep_run *r, int step, size_t u) {
    char path[4400];
    wf__prep_stats_free(&r->st);
    memset(&r->st, 0, sizeof r->st);
    static const char *const dirs[] = {"extract", "dedup", "filter", "lsh", "cluster", "output", "stats", "done"};
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
        rpath(r, path, sizeof path, "%s", dirs[k]);
        WF_TRY(wf_mkdirs(path));
    }
    double t0 = wf_time_now();
    WF_DEBUG("prep: task %d/%d: %s %zu", r->task, r->tasks, wf__prep_step_name(step), u);
    WF_TRY(step_fns[step](r, u));
    r->st.step_seconds[step] += wf_time_now() - t0;
    r->st.step_units[step] = 1;
    if (step != PS_FINISH) {
        rpath(r, path, sizeof path, "stats/%s.%06zu.json", wf__prep_step_name(step), u);
        WF_TRY(wf__prep_partial_write(path, &r->st));
    }
    rpath(r, path, sizeof path, "done/%s.%06zu", wf__prep_step_name(step), u);
    return wf_file_write_atomic(path, "done\n", 5);
}

/* Tries to claim a unit: 1 claimed (*lock held), 0 another live task holds
 * it. A claim left by a task that died is taken over (same host: its pid
 * is gone; another host: its heartbeat is older than lock_stale_s). */
static wf_status claim(prep_run *r, int step, size_t u, wf_dirlock **lock, int *got) {
    char dir[4400], what[64];
    rpath(r, dir, sizeof dir, "claims/%s.%06zu", wf__prep_step_name(step), u);
    WF_TRY(wf_mkdirs(dir));
    snprintf(what, sizeof what, "prep unit %s %zu", wf__prep_step_name(step), u);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "weft prep task %d of %d", r->task, r->tasks);
    wf_dirlock_opts lo = {.command = cmd, .what = what, .stale_seconds = r->c->lock_stale_s};
    wf_status s = wf_dirlock_acquire(lock, dir, &lo);
    *got = s == WF_OK;
    if (s == WF_ERR_INVALID) {
        wf_error_clear();
        return WF_OK;
    }
    return s;
}

/* Runs every step: this task's own units first, then any other unclaimed
 * ones, then waits for the step's units other tasks hold (taking over
 * those of tasks that died) before the next step. */
static wf_status run_steps(prep_run *r, int *finished_here) {
    for (int step = 0; step < PS_COUNT; step++) {
        size_t n = step_units(r, step);
        if (!n) continue;
        size_t lo = n * (size_t)r->task / (size_t)r->tasks;
        int told = 0;
        for (int waited = 0;; waited++) {
            size_t left = 0;
            int did = 0;
            for (size_t k = 0; k < n; k++) {
                size_t u = (lo + k) % n;
                if (unit_done(r, step, u)) continue;
                wf_dirlock *lock = NULL;
                int got = 0;
                WF_TRY(claim(r, step, u, &lock, &got));
                if (!got) {
                    left++;
                    continue;
                }
                wf_status s = unit_done(r, step, u) ? WF_OK : run_unit(r, step, u);
                if (s == WF_OK && step == PS_FINISH) *finished_here = 1;
                wf_dirlock_release(lock);
                if (s != WF_OK) return wf_error_wrap(s, "%s %zu: ", wf__prep_step_name(step), u);
                did = 1;
            }
            if (!left) break;
            if (did) waited = -1;
            else {
                if (!told++)
                    WF_INFO("prep: task %d of %d waits for %zu %s unit(s) other tasks hold", r->task, r->tasks, left,
                            wf__prep_step_name(step));
                /* 0.1 s, doubling up to 2 s: a long wait polls the
                 * shared filesystem lightly. */
                long ms = waited < 5 ? 100L << waited : 2000;
                struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
    }
    return WF_OK;
}

/* The intermediate files go once the run is complete (the completion
 * markers, run.json and the units' counters stay). */
static void remove_intermediates(const prep_run *r) {
    static const char *const dirs[] = {"extract", "dedup", "filter", "lsh", "cluster", "output"};
    char path[4400];
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
        rpath(r, path, sizeof path, "%s", dirs[k]);
        if (wf_path_is_dir(path)) wf_remove_tree(path);
    }
}

/* ---- the run ---- */

/* Keys left out of a run's fingerprint: they do not change the output
 * (or, tasks and task, are checked on their own). */
static const char *const fp_ignored[] = {
    "output", "threads", "force", "json", "batch_mb", "read_kb", "tasks", "task", "lock_stale_s",
    "checkpoint_mb", /* unused */
};

/* The key of a TOML line "key = value" (wf_opts_write_toml's), and its
 * length. */
static size_t line_key(const char *line, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if (line[i] == ' ' && line[i + 1] == '=' && line[i + 2] == ' ') return i;
    return n;
}

static int fp_ignored_line(const char *line, size_t n) {
    size_t k = line_key(line, n);
    for (size_t i = 0; i < sizeof fp_ignored / sizeof *fp_ignored; i++)
        if (strlen(fp_ignored[i]) == k && memcmp(fp_ignored[i], line, k) == 0) return 1;
    return 0;
}

/* The effective config as TOML, one key a line, less the keys of
 * fp_ignored; *text is the caller's to free. */
static wf_status config_text(const wf_prep_config *c, char **text, size_t *len) {
    char *all = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&all, &n);
    if (!f) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_opts_write_toml(wf_prep_spec(), c, f);
    if (fclose(f) != 0 || !all) {
        free(all);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(all + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - all) + 1 : n;
        if (!fp_ignored_line(all + i, e - i)) {
            memmove(all + m, all + i, e - i);
            m += e - i;
        }
        i = e;
    }
    all[m] = '\0';
    *text = all;
    *len = m;
    return WF_OK;
}

/* The fingerprint of a run: the config (less what does not change the
 * output) and the inputs with their sizes. */
static wf_status fingerprint(const prep_run *r, char out[32]) {
    char *text = NULL;
    size_t len = 0;
    WF_TRY(config_text(r->c, &text, &len));
    wf_buf b = {0};
    wf_status s = wf_buf_append(&b, text, len);
    free(text);
    for (size_t i = 0; i < r->n_inputs && s == WF_OK; i++) {
        char line[64];
        s = wf_buf_append(&b, "input ", 6);
        if (s == WF_OK) s = wf_buf_append(&b, r->inputs[i], strlen(r->inputs[i]));
        int k = snprintf(line, sizeof line, " %llu\n", (unsigned long long)r->sizes[i]);
        if (s == WF_OK) s = wf_buf_append(&b, line, (size_t)k);
    }
    if (s == WF_OK) snprintf(out, 32, "%016llx", (unsigned long long)wf_hash64(b.data, b.len));
    wf_buf_free(&b);
    return s;
}

/* Finds the line of `key` (k bytes) in text[0, n); NULL if none. *ln: its
 * length without the newline. */
static const char *find_key_line(const char *text, size_t n, const char *key, size_t k, size_t *ln) {
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n;
        if (line_key(text + i, e - i) == k && memcmp(text + i, key, k) == 0) {
            *ln = e - i;
            return text + i;
        }
        i = e + 1;
    }
    return NULL;
}

/* Why the run in OUT is of another config, for the message that refuses
 * it: the first key whose value differs between its _prep/config.toml and
 * this config, or that only one of them has (a key this weft added: the
 * run was made by an earlier weft). Empty when the keys agree or that file
 * cannot be read. */
static void config_difference(const prep_run *r, char *why, size_t cap) {
    why[0] = '\0';
    char path[4400];
    rpath(r, path, sizeof path, "config.toml");
    char *old = NULL, *cur = NULL;
    size_t n_old = 0, n_cur = 0;
    if (wf_file_read(path, &old, &n_old) != WF_OK || config_text(r->c, &cur, &n_cur) != WF_OK) {
        wf_error_clear();
        free(old);
        free(cur);
        return;
    }
    const char *texts[2] = {cur, old};
    size_t lens[2] = {n_cur, n_old};
    for (int side = 0; side < 2 && !why[0]; side++) {
        const char *t = texts[side], *o = texts[1 - side];
        for (size_t i = 0; i < lens[side] && !why[0];) {
            const char *nl = memchr(t + i, '\n', lens[side] - i);
            size_t e = nl ? (size_t)(nl - t) : lens[side], ln = e - i, k = line_key(t + i, ln), oln = 0;
            const char *line = t + i;
            i = e + 1;
            if (k == ln || fp_ignored_line(line, ln)) continue;
            const char *other = find_key_line(o, lens[1 - side], line, k, &oln);
            if (side == 0 && !other)
                snprintf(why, cap,
                         "%.*s is not in the run's %s: a run of an earlier weft, from before that setting, "
                         "whose output this weft would not continue",
                         (int)k, line, path);
            else if (side == 0 && (oln != ln || memcmp(other, line, ln) != 0))
                snprintf(why, cap, "%.*s here, %.*s in the run's %s", (int)ln, line, (int)oln, other, path);
            else if (side == 1 && !other)
                snprintf(why, cap, "the run's %s has %.*s, which this weft does not know", path, (int)k, line);
        }
    }
    free(old);
    free(cur);
}

static int env_int(const char *name, long *v) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *end;
    errno = 0;
    long x = strtol(e, &end, 10);
    if (errno || *end) return 0;
    *v = x;
    return 1;
}

/* This task's place: --tasks/--task, a Slurm array, an MPI launcher's rank
 * and size (Open MPI, MPICH/Hydra, srun), or one task. */
static wf_status resolve_task(const wf_prep_config *c, int *tasks, int *task, const char **from, long *array_id,
                              long *array_min) {
    long n = 1, i = 0, lo = 0;
    *from = "a single task";
    *array_id = *array_min = -1;
    if (c->tasks > 0) {
        n = c->tasks;
        i = c->task < 0 ? 0 : c->task;
        if (c->task < 0 && n > 1)
            return wf_error(WF_ERR_CONFIG, "tasks = %ld: give this task's number too (--task 0 to %ld)", n, n - 1);
        *from = "--tasks/--task";
    } else if (c->task >= 0) {
        return wf_error(WF_ERR_CONFIG, "task = %lld: give the number of tasks too (--tasks N)", (long long)c->task);
    } else if (env_int("SLURM_ARRAY_TASK_ID", &i) && env_int("SLURM_ARRAY_TASK_COUNT", &n)) {
        if (env_int("SLURM_ARRAY_TASK_MIN", &lo)) i -= lo;
        *array_id = i + lo;
        *array_min = lo;
        *from = "SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (less SLURM_ARRAY_TASK_MIN)";
    } else if (env_int("OMPI_COMM_WORLD_RANK", &i) && env_int("OMPI_COMM_WORLD_SIZE", &n)) {
        *from = "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE";
    } else if (env_int("PMI_RANK", &i) && env_int("PMI_SIZE", &n)) {
        *from = "PMI_RANK and PMI_SIZE";
    } else if (env_int("SLURM_PROCID", &i) && env_int("SLURM_STEP_NUM_TASKS", &n)) {
        *from = "SLURM_PROCID and SLURM_STEP_NUM_TASKS";
    } else {
        n = 1, i = 0;
    }
    if (n < 1 || n > 1000000 || i < 0 || i >= n)
        return wf_error(WF_ERR_CONFIG, "task %ld of %ld (from %s): a task's number must be 0 to tasks - 1", i, n,
                        *from);
    *tasks = (int)n;
    *task = (int)i;
    return WF_OK;
}

/* OUT/_prep/run.json: what the run is (fingerprint, tasks, start).
 * Version 2 names the lsh edges by band and key range; a version 1 run
 * (edges by band) is read so that the config check can say which key its
 * weft lacked (minhash.ranges) instead of a bare version error. */
static wf_status run_read(const char *path, char fp[32], int *tasks, double *started, long *array_min) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return wf_error(WF_ERR_FORMAT, "%s:%d: %s: the run's description is damaged; rerun with --force",
                               path, err.line, err.text);
    json_t *f = json_object_get(root, "format"), *p = json_object_get(root, "fingerprint");
    json_t *t = json_object_get(root, "tasks"), *st = json_object_get(root, "started");
    json_int_t version = json_integer_value(json_object_get(root, "version"));
    wf_status s = WF_OK;
    if (!json_is_string(f) || strcmp(json_string_value(f), "weft-prep-run") != 0 || !json_is_string(p) ||
        !json_is_integer(t) || !json_is_number(st) || version < 1 || version > 2) {
        s = wf_error(WF_ERR_FORMAT, "%s: not a weft prep run description (version 1 or 2); rerun with --force", path);
    } else {
        snprintf(fp, 32, "%s", json_string_value(p));
        *tasks = (int)json_integer_value(t);
        *started = json_number_value(st);
        json_t *am = json_object_get(root, "slurm_array_min");
        if (array_min) *array_min = json_is_integer(am) ? (long)json_integer_value(am) : 0;
    }
    json_decref(root);
    return s;
}

/* Creates run.json unless another task got there first (link(2) of a
 * complete file: *created says which). */
static wf_status run_create(const prep_run *r, const char *path, const char *fp, int *created) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("weft-prep-run"));
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "fingerprint", json_string(fp));
    json_object_set_new(root, "tasks", json_integer(r->tasks));
    json_object_set_new(root, "inputs", json_integer((json_int_t)r->n_inputs));
    json_object_set_new(root, "started", json_real(epoch_now()));
    if (r->array_id >= 0) json_object_set_new(root, "slurm_array_min", json_integer(r->array_min));
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory");
    char tmp[4500];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    size_t n = strlen(text);
    text[n] = '\n';
    wf_status s = wf_file_write_atomic(tmp, text, n + 1);
    free(text);
    WF_TRY(s);
    *created = link(tmp, path) == 0;
    int e = errno;
    unlink(tmp);
    if (!*created && e != EEXIST) return wf_error(WF_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    return WF_OK;
}

static void run_free(prep_run *r) {
    for (size_t i = 0; i < r->docs_cap; i++) pdoc_free(&r->docs[i]);
    free(r->docs);
    free(r->sizes);
    wf__prep_stats_free(&r->st);
    wf__prep_ppl_close(r->ppl);
    wf__prep_rules_free(&r->rules);
    wf_buf_free(&r->line);
    wf_dirlock_release(r->lock);
}

/* A Slurm array task joins a run started with another number of tasks
 * (the failed task of an array resubmitted alone: --array=2 after
 * --array=0-3): the run's count stays and the task takes the slice of its
 * SLURM_ARRAY_TASK_ID (less the first run's SLURM_ARRAY_TASK_MIN) first.
 * Decided before the task's lock is taken, which depends on the slice;
 * open_run checks the rest (fingerprint, count) under that lock. */
static wf_status join_array(prep_run *r) {
    char runjson[4400], ofp[32];
    rpath(r, runjson, sizeof runjson, "run.json");
    if (r->array_id < 0 || r->c->force || !wf_path_exists(runjson)) return WF_OK;
    int otasks;
    long omin;
    double started;
    WF_TRY(run_read(runjson, ofp, &otasks, &started, &omin));
    if (otasks == r->tasks) return WF_OK;
    long i = r->array_id - omin;
    if (i < 0 || i >= otasks)
        return wf_error(WF_ERR_CONFIG,
                        "%s holds a prep run of %d task(s) (Slurm array ids %ld to %ld); this task's "
                        "SLURM_ARRAY_TASK_ID is %ld: resubmit ids of that range only (they join the run), or "
                        "--force (one task) to start over",
                        r->c->output, otasks, omin, omin + otasks - 1, r->array_id);
    WF_INFO("prep: Slurm array task %ld joins the run in %s as task %ld of %d (its array had %d task(s))",
            r->array_id, r->c->output, i, otasks, r->tasks);
    r->tasks = otasks;
    r->task = (int)i;
    return WF_OK;
}

/* Sets up the run in OUT (or joins it): *complete when there is nothing
 * left to do. */
static wf_status open_run(prep_run *r, int *complete) {
    const wf_prep_config *c = r->c;
    char fp[32], path[4400];
    WF_TRY(fingerprint(r, fp));
    char runjson[4400];
    rpath(r, runjson, sizeof runjson, "run.json");
    if (c->force) {
        if (r->tasks > 1)
            return wf_error(WF_ERR_CONFIG, "--force deletes the run in %s: give it to one task (--tasks 1), not to "
                            "each of %d", c->output, r->tasks);
        WF_TRY(wf__prep_output_wipe(c->output));
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (wf_path_exists(runjson)) {
            char ofp[32];
            int otasks;
            WF_TRY(run_read(runjson, ofp, &otasks, &r->started, NULL));
            if (strcmp(ofp, fp) != 0) {
                char why[9000];
                config_difference(r, why, sizeof why);
                if (why[0])
                    return wf_error(WF_ERR_CONFIG,
                                    "%s holds a prep run of another config (%s): give a new --output, or --force to "
                                    "delete that run and start over",
                                    c->output, why);
                return wf_error(WF_ERR_CONFIG,
                                "%s holds a prep run of another config or other inputs (their paths or sizes): give "
                                "a new --output, or --force to delete that run and start over",
                                c->output);
            }
            if (otasks != r->tasks)
                return wf_error(WF_ERR_CONFIG,
                                "%s holds a prep run of %d task(s); this is task %d of %d: run every task with the "
                                "same number of tasks, or --force (one task) to start over",
                                c->output, otasks, r->task, r->tasks);
            if (unit_done(r, PS_FINISH, 0)) {
                *complete = 1;
                return WF_OK;
            }
            size_t done = 0, total = 0;
            for (int st = 0; st < PS_COUNT; st++)
                for (size_t u = 0, n = step_units(r, st); u < n; u++) total++, done += (size_t)unit_done(r, st, u);
            WF_INFO("prep: task %d of %d joins the run in %s (%zu of %zu units done)", r->task, r->tasks, c->output,
                    done, total);
            return WF_OK;
        }
        rpath(r, path, sizeof path, "state.json");
        if (wf_path_exists(path))
            return wf_error(WF_ERR_CONFIG,
                            "%s holds a prep run of an earlier weft (%s, resumed by input): give a new --output, or "
                            "--force to delete it and start over",
                            c->output, path);
        snprintf(path, sizeof path, "%s/stats.json", c->output);
        if (wf_path_exists(path))
            return wf_error(WF_ERR_CONFIG,
                            "%s holds the output of a prep run without its resume state (_prep/): give a new "
                            "--output, or --force to delete it",
                            c->output);
        WF_TRY(wf_mkdirs(r->pdir));
        int created = 0;
        WF_TRY(run_create(r, runjson, fp, &created));
        if (created) {
            rpath(r, path, sizeof path, "config.toml");
            wf_afile af;
            WF_TRY(wf_afile_open(&af, path));
            wf_opts_write_toml(wf_prep_spec(), c, af.fp);
            WF_TRY(wf_afile_commit(&af));
            WF_TRY(run_read(runjson, fp, &r->tasks, &r->started, NULL));
            return WF_OK;
        }
    }
    return wf_error(WF_ERR_INTERNAL, "%s: the run's description appeared and vanished", runjson);
}

static wf_status prep_run_local(const wf_prep_config *c, const char *const *inputs, size_t n_inputs) {
    WF_TRY(wf_prep_config_validate(c));
    if (n_inputs == 0) return wf_error(WF_ERR_CONFIG, "no inputs: give WARC, WET, JSONL or text files");
    if (n_inputs >= ((size_t)1 << 31)) return wf_error(WF_ERR_CONFIG, "%zu inputs: at most 2^31 - 1", n_inputs);
    prep_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.inputs = inputs;
    r.n_inputs = n_inputs;
    r.threads = c->threads ? (int)c->threads : wf_default_threads();
    r.n_hashes = (int)(c->mh_bands * c->mh_rows);
    r.max_doc = (size_t)c->max_doc_mb << 20;
    r.ranges = (int)c->dedup_ranges;
    r.bands = (int)c->mh_bands;
    r.lsh_ranges = (int)c->mh_ranges;
    r.nopts.form = strcmp(c->unicode_form, "NFKC") == 0 ? 2 : strcmp(c->unicode_form, "NFC") == 0 ? 1 : 0;
    if (!c->normalize) r.nopts.form = 0;
    r.nopts.cleanup = c->normalize;
    r.nopts.drop_invalid = strcmp(c->invalid_utf8, "drop") == 0;
    r.nopts.max_control_ratio = c->max_control_ratio;
    snprintf(r.pdir, sizeof r.pdir, "%s/_prep", c->output);
    const char *from;
    wf_status s = resolve_task(c, &r.tasks, &r.task, &from, &r.array_id, &r.array_min);
    if (s == WF_OK) s = join_array(&r);
    r.sizes = calloc(n_inputs, sizeof *r.sizes);
    if (s == WF_OK && !r.sizes) s = wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_inputs && s == WF_OK; i++) {
        struct stat stt;
        wf_store_stat ost;
        if (wf_store_is_remote(inputs[i])) {
            s = wf_store_head(inputs[i], &ost);
            if (s == WF_OK) r.sizes[i] = ost.size;
            else wf_error_wrap(s, "input %s: ", inputs[i]);
        } else if (stat(inputs[i], &stt) != 0) s = wf_error(WF_ERR_NOTFOUND, "input %s: cannot read it: %s", inputs[i], strerror(errno));
        else if (!S_ISREG(stt.st_mode)) s = wf_error(WF_ERR_INVALID, "input %s is not a regular file", inputs[i]);
        else r.sizes[i] = (uint64_t)stt.st_size;
    }
    if (s == WF_OK) s = wf__prep_rules_build(c, &r.rules);
    if (s == WF_OK) s = wf_mkdirs(c->output);
    /* One job per output directory, or with several tasks one job per task,
     * before anything there is read. */
    char lockdir[4400];
    snprintf(lockdir, sizeof lockdir, "%s", c->output);
    if (s == WF_OK && r.tasks > 1) {
        snprintf(lockdir, sizeof lockdir, "%s/tasks/%06d", r.pdir, r.task);
        s = wf_mkdirs(lockdir);
    }
    char what[64];
    snprintf(what, sizeof what, r.tasks > 1 ? "prep task %d's directory" : "output directory", r.task);
    wf_dirlock_opts lo = {.command = "weft prep", .what = what, .stale_seconds = c->lock_stale_s};
    if (s == WF_OK) s = wf_dirlock_acquire(&r.lock, lockdir, &lo);
    int complete = 0;
    if (s == WF_OK) s = open_run(&r, &complete);
    if (s == WF_OK && complete) {
        WF_INFO("prep: %s is already complete (%zu inputs); --force starts over", c->output, n_inputs);
        remove_intermediates(&r);
        run_free(&r);
        return WF_OK;
    }
    if (s == WF_OK && r.tasks > 1) WF_INFO("prep: task %d of %d (from %s)", r.task, r.tasks, from);
    int finished_here = 0;
    if (s == WF_OK) s = run_steps(&r, &finished_here);
    if (s == WF_OK && finished_here) remove_intermediates(&r);
    if (s == WF_OK && !finished_here) WF_INFO("prep: task %d of %d: the run in %s is complete", r.task, r.tasks, c->output);
    run_free(&r);
    return s;
}

/* --output s3://...: the run goes into a local staging folder named after
 * the URL (so that a killed run resumes from it), then its outputs are
 * uploaded, stats.json last: as on disk, where stats.json is written when
 * the run is complete, its presence says the output is whole. The run's own
 * files (_prep/, the lock) stay local and the folder is removed once
 * uploaded. One task only: tasks on several machines share a run through
 * its folder, which must then be a shared one (docs/storage.md). */
wf_status wf_prep_run(const wf_prep_config *c, const char *const *inputs, size_t n_inputs) {
    if (!c->output || !wf_store_is_remote(c->output)) return prep_run_local(c, inputs, n_inputs);
    if (c->tasks > 1)
        return wf_error(WF_ERR_CONFIG, "--output %s: a run split into tasks shares its folder, which must be a local "
                                       "or shared one (an object store output takes one task)", c->output);
    size_t olen = strlen(c->output);
    while (olen > 5 && c->output[olen - 1] == '/') olen--;
    wf_buf url = {0};
    wf_buf_printf(&url, "%.*s/stats.json", (int)olen, c->output);
    if (url.failed) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_store_stat st;
    wf_status s = wf_store_head(url.data, &st);
    if (s == WF_OK && !c->force) {
        WF_INFO("prep: %s is already complete (it has stats.json); --force starts over", c->output);
        wf_buf_free(&url);
        return WF_OK;
    }
    if (s == WF_ERR_NOTFOUND || s == WF_OK) wf_error_clear(), s = WF_OK;
    char stage[4200] = "";
    if (s == WF_OK) {
        const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(stage, sizeof stage, "%s/weft-prep-%016llx", tmp,
                 (unsigned long long)wf_hash64(c->output, olen));
        wf_prep_config lc = *c; /* shallow: only the output differs */
        lc.output = stage;
        s = prep_run_local(&lc, inputs, n_inputs);
    }
    wf_store_entry *files = NULL;
    size_t n_files = 0;
    if (s == WF_OK) s = wf_store_list(stage, &files, &n_files);
    for (int last = 0; s == WF_OK && last < 2; last++)
        for (size_t i = 0; s == WF_OK && i < n_files; i++) {
            const char *name = files[i].url + strlen(stage) + 1;
            if (strncmp(name, "_prep/", 6) == 0 || name[0] == '.') continue; /* the run's own files, the lock */
            if ((strcmp(name, "stats.json") == 0) != last) continue;
            wf_buf dst = {0};
            wf_buf_printf(&dst, "%.*s/%s", (int)olen, c->output, name);
            s = dst.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : wf_store_upload(files[i].url, dst.data);
            wf_buf_free(&dst);
        }
    wf_store_list_free(files, n_files);
    if (s == WF_OK) s = wf_remove_tree(stage);
    wf_buf_free(&url);
    return s;
}
