/* Step 1 of a run, extract (one unit per input; pipeline.c runs the
 * steps): the input's records are read in batches; each document is
 * extracted (HTTP, HTML, charset), normalized and split into dedup units
 * whose normalized forms are hashed. The unit writes the documents
 * (extract/NNNNNN.docs) and each hash with its document and unit to the
 * file of its hash range (extract/NNNNNN.rRRRR), which the dedup step
 * reads (docs/formats/prep-intermediate.md). */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"
#include "weft/store.h"
#include "weft/thread.h"

/* The units and the hash of each one's normalized form. */
static wf_status dedup_hash(const prep_run *r, pdoc *d) {
    WF_TRY(wf__prep_dedup_split(r, d));
    const char *t = d->text.data;
    for (size_t u = 0; u < d->n_units; u++) {
        WF_TRY(wf_dedup_normalize(t + d->unit_off[u], d->unit_len[u], &d->norm));
        if (d->norm.len >= (size_t)r->c->dedup_min_chars && d->norm.len > 0)
            d->unit_hash[u] = wf_hash64(d->norm.data, d->norm.len);
    }
    return WF_OK;
}

/* Extract's work on one document (on all threads, wf__prep_batch_run):
 * extract, normalize, hash paragraphs. */
static wf_status phase_extract(prep_run *r, pdoc *d) {
    d->drop = R_NONE;
    d->last = ST_OUTPUT;
    d->at[ST_READ] = d->raw.len;
    if (d->reader_drop != R_NONE) {
        wf__prep_doc_drop(d, d->reader_drop);
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
            wf__prep_doc_drop(d, rc);
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
    if (wf__prep_all_space(d->text.data, d->text.len)) {
        wf__prep_doc_drop(d, R_EXTRACT_EMPTY);
        return WF_OK;
    }

    d->at[ST_NORMALIZE] = d->text.len;
    int repaired = 0;
    wf_norm_result nr = wf_text_normalize(d->text.data, d->text.len, &r->nopts, &d->tmp, &repaired);
    d->repaired = repaired;
    double t2 = wf_time_now();
    d->t[ST_NORMALIZE] += t2 - t1;
    if (nr == WF_NORM_BINARY) wf__prep_doc_drop(d, R_BINARY);
    else if (nr == WF_NORM_INVALID) wf__prep_doc_drop(d, R_INVALID_UTF8);
    else if (nr == WF_NORM_EMPTY) wf__prep_doc_drop(d, R_NORM_EMPTY);
    if (nr != WF_NORM_OK) return WF_OK;
    wf__prep_buf_swap(&d->text, &d->tmp);

    d->at[ST_DEDUP] = d->text.len;
    d->n_units = 0;
    if (r->c->dedup) WF_TRY(dedup_hash(r, d));
    d->t[ST_DEDUP] += wf_time_now() - t2;
    return WF_OK;
}

/* Reads up to a batch of records of one input. */
static wf_status fill_batch(prep_run *r, prep_reader *rd, size_t in, int *eof) {
    double t0 = wf_time_now();
    wf__prep_batch_clear(r);
    size_t bytes = 0, budget = (size_t)r->c->batch_mb << 20;
    wf_status s = WF_OK;
    while (r->n_docs < PREP_BATCH_MAX_DOCS && bytes < budget) {
        prep_record rec;
        s = wf__prep_reader_next(rd, &rec, eof);
        if (s != WF_OK) {
            wf_error_wrap(s, "%s: ", r->inputs[in]);
            break;
        }
        if (*eof) break;
        pdoc *d = NULL;
        if ((s = wf__prep_batch_slot(r, &d)) != WF_OK) break;
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

wf_status wf__prep_step_extract(prep_run *r, size_t in) {
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
        wf__prep_run_path(r, path, sizeof path, "extract/%06zu.docs", in);
        s = wf__prep_iw_open(&docs, path, PI_DOCS);
    }
    for (int k = 0; k < nh && s == WF_OK; k++) {
        wf__prep_run_path(r, path, sizeof path, "extract/%06zu.r%04d", in, k);
        s = wf__prep_iw_open(&hw[k], path, PI_HASHES);
    }
    uint32_t pos = 0;
    int eof = 0;
    while (s == WF_OK && !eof) {
        s = fill_batch(r, rd, in, &eof);
        if (s == WF_OK && r->n_docs) s = wf__prep_batch_run(r, phase_extract);
        for (size_t i = 0; i < r->n_docs && s == WF_OK; i++) {
            pdoc *d = &r->docs[i];
            wf__prep_doc_seconds(r, d);
            r->st.extra[E_REPAIRED] += (uint64_t)d->repaired;
            r->st.extra[E_UNITS] += d->n_units;
            if (d->drop != R_NONE) {
                wf__prep_stats_account(&r->st, d->last, d->drop, d->at);
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
        if (s == WF_OK && r->n_docs) wf__prep_maybe_crash(PS_EXTRACT, in);
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
