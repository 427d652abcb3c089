/* A batch of documents, the unit of work inside the extract and filter
 * steps: slots that keep their buffers from batch to batch, the
 * per-document work of a step run over the batch on all threads, and the
 * little that both steps do to a document (drop it, swap its buffers,
 * hand its seconds to the unit's counters). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/thread.h"

/* Per-document buffers above this are freed after a batch, so that one
 * huge document does not pin its memory for the rest of the run. */
#define KEEP_BUF_BYTES ((size_t)1 << 20)

void wf__prep_doc_drop(pdoc *d, int reason) {
    d->drop = reason;
    d->last = wf__prep_reason_stage(reason);
}

void wf__prep_buf_swap(wf_buf *a, wf_buf *b) {
    wf_buf t = *a;
    *a = *b;
    *b = t;
}

int wf__prep_all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

void wf__prep_doc_seconds(prep_run *r, pdoc *d) {
    for (int st = 0; st < ST_COUNT; st++) {
        r->st.seconds[st] += d->t[st];
        d->t[st] = 0.0;
    }
}

/* ---- the slots ---- */

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

wf_status wf__prep_batch_slot(prep_run *r, pdoc **out) {
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

void wf__prep_batch_clear(prep_run *r) {
    for (size_t i = 0; i < r->n_docs; i++) pdoc_reset(&r->docs[i]);
    r->n_docs = 0;
}

void wf__prep_batch_free(prep_run *r) {
    for (size_t i = 0; i < r->docs_cap; i++) pdoc_free(&r->docs[i]);
    free(r->docs);
    r->docs = NULL;
    r->n_docs = r->docs_cap = 0;
}

/* ---- the per-document work, on all threads ---- */

typedef struct {
    prep_run *r;
    prep_doc_fn fn;
} phase_ctx;

static wf_status phase_task(void *arg, int tid, int n_threads) {
    (void)tid, (void)n_threads;
    phase_ctx *pc = arg;
    prep_run *r = pc->r;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n_docs) return WF_OK;
        WF_TRY(pc->fn(r, &r->docs[i]));
    }
}

wf_status wf__prep_batch_run(prep_run *r, prep_doc_fn fn) {
    atomic_store(&r->next, 0);
    phase_ctx pc = {r, fn};
    int n = r->threads;
    if ((size_t)n > r->n_docs) n = r->n_docs ? (int)r->n_docs : 1;
    return wf_parallel_run(n, phase_task, &pc);
}
