/* Step 3 of a run, filter (one unit per input): each document of the
 * extract step's file loses the units dedup dropped, then goes through
 * language id, the quality rules and MinHash. The unit writes the kept
 * documents (filter/NNNNNN.docs) and their band keys, one file a band
 * (filter/NNNNNN.bBBBB), which the lsh step reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/thread.h"

static int in_list(const wf_strs *l, const char *code) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], code) == 0) return 1;
    return 0;
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
    wf__prep_buf_swap(&d->text, &d->tmp);
    return WF_OK;
}

/* Filter's work on one document (on all threads, wf__prep_batch_run):
 * dedup's removal, langid, quality, MinHash. */
static wf_status phase_filter(prep_run *r, pdoc *d) {
    const wf_prep_config *c = r->c;
    double t0 = wf_time_now();
    if (c->dedup) {
        WF_TRY(remove_dups(r, d));
        if (wf__prep_all_space(d->text.data, d->text.len)) {
            wf__prep_doc_drop(d, R_ALL_DUP);
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
            wf__prep_doc_drop(d, R_LOW_CONF);
            return WF_OK;
        }
        if (c->languages.n && !in_list(&c->languages, d->lang)) {
            wf__prep_doc_drop(d, R_LANGUAGE);
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
                wf__prep_doc_drop(d, rc);
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

/* The units of input `in` that dedup removed, as doc << 32 | unit, sorted. */
static wf_status load_drops(prep_run *r, size_t in, u64vec *drops) {
    char path[4400];
    for (int k = 0; k < r->ranges; k++) {
        prep_ir ir;
        wf__prep_run_path(r, path, sizeof path, "dedup/%06zu.r%04d", in, k);
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
    wf__prep_u64vec_sort(drops);
    return WF_OK;
}

wf_status wf__prep_step_filter(prep_run *r, size_t in) {
    const wf_prep_config *c = r->c;
    char path[4400];
    prep_dr ir = {0};
    u64vec drops = {0};
    prep_iw docs = {0};
    int nb = c->minhash ? r->bands : 0;
    prep_iw *bw = calloc((size_t)nb + 1, sizeof *bw);
    if (!bw) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf__prep_run_path(r, path, sizeof path, "extract/%06zu.docs", in);
    wf_status s = wf__prep_dr_open(&ir, path, PI_DOCS, wf__prep_read_chunk(r), 0);
    if (s == WF_OK) r->st.step_bytes[PS_FILTER] += ir.total + 32;
    if (s == WF_OK && c->dedup) s = load_drops(r, in, &drops);
    if (s == WF_OK) {
        wf__prep_run_path(r, path, sizeof path, "filter/%06zu.docs", in);
        s = wf__prep_iw_open(&docs, path, PI_DOCS);
    }
    for (int b = 0; b < nb && s == WF_OK; b++) {
        wf__prep_run_path(r, path, sizeof path, "filter/%06zu.b%04d", in, b);
        s = wf__prep_iw_open(&bw[b], path, PI_BANDS);
    }
    size_t dp = 0;
    uint32_t pos_in = 0, pos_out = 0;
    size_t budget = (size_t)c->batch_mb << 20;
    while (s == WF_OK && !wf__prep_dr_end(&ir)) {
        wf__prep_batch_clear(r);
        size_t bytes = 0;
        while (s == WF_OK && !wf__prep_dr_end(&ir) && r->n_docs < PREP_BATCH_MAX_DOCS && bytes < budget) {
            prep_idoc x;
            pdoc *d = NULL;
            if ((s = wf__prep_dr_doc(&ir, &x)) != WF_OK || (s = wf__prep_batch_slot(r, &d)) != WF_OK) break;
            d->index = x.index;
            d->input = in;
            d->pos = pos_in++;
            memcpy(d->at, x.at, sizeof d->at);
            d->drop = R_NONE;
            d->last = ST_OUTPUT;
            if ((s = wf_buf_append(&d->text, x.text, x.text_len)) != WF_OK) break;
            if ((s = wf_buf_append(&d->url, x.url, x.url_len)) != WF_OK) break;
            bytes += x.text_len + 256;
            if (c->dedup && (s = wf__prep_dedup_split(r, d)) != WF_OK) break;
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
        if (s == WF_OK && r->n_docs) s = wf__prep_batch_run(r, phase_filter);
        for (size_t i = 0; i < r->n_docs && s == WF_OK; i++) {
            pdoc *d = &r->docs[i];
            wf__prep_doc_seconds(r, d);
            r->st.extra[E_UNITS_REMOVED] += d->units_removed;
            r->st.extra[E_LINES_REMOVED] += d->lines_removed;
            r->st.extra[E_Q_SKIPPED] += (uint64_t)d->q_skipped;
            r->st.extra[E_MH_NO_WORDS] += (uint64_t)d->mh_no_words;
            r->st.extra[E_MH_CHARS] += (uint64_t)d->mh_chars;
            if ((s = account_quality(r, d)) != WF_OK) break;
            if (d->drop != R_NONE) {
                wf__prep_stats_account(&r->st, d->last, d->drop, d->at);
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
        if (s == WF_OK && r->n_docs) wf__prep_maybe_crash(PS_FILTER, in);
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
