/* Step 2 of a run, dedup (one unit per hash range): the first occurrence
 * of each paragraph hash of the range, in input order, is kept; the
 * others go to per-input drop lists (dedup/NNNNNN.rRRRR) that the filter
 * step applies. Also what a dedup unit of a document is, which extract
 * (to hash them) and filter (to remove them) agree on. */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"

/* ---- a document's dedup units ---- */

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

wf_status wf__prep_dedup_split(const prep_run *r, pdoc *d) {
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

/* ---- the step ---- */

wf_status wf__prep_step_dedup(prep_run *r, size_t range) {
    char path[4400];
    u64set set;
    WF_TRY(wf__prep_u64set_init(&set, (size_t)r->c->dedup_max_mb << 20));
    wf_status s = WF_OK;
    for (size_t in = 0; in < r->n_inputs && s == WF_OK; in++) {
        prep_ir ir;
        wf__prep_run_path(r, path, sizeof path, "extract/%06zu.r%04zu", in, range);
        if ((s = wf__prep_ir_load(&ir, path, PI_HASHES)) != WF_OK) break;
        r->st.step_bytes[PS_DEDUP] += ir.len;
        prep_iw w;
        wf__prep_run_path(r, path, sizeof path, "dedup/%06zu.r%04zu", in, range);
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
        if (s == WF_OK && in + 1 == r->n_inputs) wf__prep_maybe_crash(PS_DEDUP, range);
        if (s == WF_OK) s = wf__prep_iw_commit(&w);
        wf__prep_iw_abort(&w);
        wf__prep_ir_free(&ir);
    }
    wf__prep_u64set_free(&set);
    return s;
}
