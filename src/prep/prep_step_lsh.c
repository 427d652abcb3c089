/* Step 4 of a run, lsh (one unit per band and key range): the documents
 * whose band keys are equal are joined, each to the first of its group;
 * the unit writes these edges (lsh/BBBB.rRRRR.edges), which the cluster
 * step reads. */
#include <stdlib.h>

#include "prep/prep_impl.h"
#include "weft/log.h"

typedef struct {
    uint64_t key, gid;
} band_entry;

static int cmp_band(const void *a, const void *b) {
    const band_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->gid < y->gid ? -1 : x->gid > y->gid;
}

void wf__prep_lsh_edges_path(const prep_run *r, size_t unit, char *path, size_t size) {
    wf__prep_run_path(r, path, size, "lsh/%04zu.r%04zu.edges", unit / (size_t)r->lsh_ranges,
                      unit % (size_t)r->lsh_ranges);
}

/* Unit u holds the keys k of band u / R with k % R == u % R (R =
 * minhash.ranges): a key's documents are all in one unit, and a unit's
 * memory is 16 bytes a document of its range. Each band file is read by
 * the R units of its band. */
wf_status wf__prep_step_lsh(prep_run *r, size_t unit) {
    char path[4400];
    size_t band = unit / (size_t)r->lsh_ranges, range = unit % (size_t)r->lsh_ranges;
    band_entry *v = NULL;
    size_t n = 0, cap = 0;
    wf_status s = WF_OK;
    for (size_t in = 0; in < r->n_inputs && s == WF_OK; in++) {
        prep_ir ir;
        wf__prep_run_path(r, path, sizeof path, "filter/%06zu.b%04zu", in, band);
        if ((s = wf__prep_ir_load(&ir, path, PI_BANDS)) != WF_OK) break;
        r->st.step_bytes[PS_LSH] += ir.len;
        while (s == WF_OK && !wf__prep_ir_end(&ir)) {
            uint64_t key;
            uint32_t doc;
            s = wf__prep_ir_u64(&ir, &key, "band key");
            if (s == WF_OK) s = wf__prep_ir_u32(&ir, &doc, "band key");
            if (s != WF_OK || key % (uint64_t)r->lsh_ranges != range) continue;
            s = WF_GROW(v, cap, n + 1, 1024);
            if (s == WF_OK) v[n++] = (band_entry){key, PREP_GID(in, doc)};
        }
        wf__prep_ir_free(&ir);
    }
    if (s == WF_OK && n) qsort(v, n, sizeof *v, cmp_band);
    if (s == WF_OK)
        WF_DEBUG("prep: lsh %zu (band %zu, range %zu of %d): %zu keys, %.2f MiB", unit, band, range, r->lsh_ranges,
                 n, (double)(cap * sizeof *v) / 1048576.0);
    prep_iw w = {0};
    if (s == WF_OK) {
        wf__prep_lsh_edges_path(r, unit, path, sizeof path);
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
    if (s == WF_OK) wf__prep_maybe_crash(PS_LSH, unit);
    if (s == WF_OK) s = wf__prep_iw_commit(&w);
    wf__prep_iw_abort(&w);
    free(v);
    return s;
}
