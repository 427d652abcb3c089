/* Step 5 of a run, cluster (one unit): union-find over every lsh unit's
 * edges; every document of a cluster but its first (lowest id) is a near
 * duplicate, listed in cluster/drops for the output step. */
#include <stdlib.h>

#include "prep/prep_impl.h"
#include "weft/log.h"
#include "weft/sorted.h"

static size_t uf_find(size_t *parent, size_t x) {
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* Reads every lsh unit's edges file, one at a time: pass 0 collects the
 * documents that have an edge into ids (kept sorted and unique as it
 * grows, so it holds about one id a document), pass 1 joins each edge's
 * ends in parent. counts: the edges and the compactions of pass 0. */
static wf_status cluster_pass(prep_run *r, int pass, u64vec *ids, size_t *parent, size_t counts[2]) {
    char path[4400];
    size_t compact_at = 1024; /* then twice the ids kept */
    for (size_t u = 0, n = wf__prep_step_units(r, PS_LSH); u < n; u++) {
        prep_ir ir;
        wf__prep_lsh_edges_path(r, u, path, sizeof path);
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
                    wf__prep_u64vec_sort_unique(ids);
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
    if (pass == 0) wf__prep_u64vec_sort_unique(ids);
    return WF_OK;
}

wf_status wf__prep_step_cluster(prep_run *r, size_t unit) {
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
        wf__prep_run_path(r, path, sizeof path, "cluster/drops");
        s = wf__prep_iw_open(&w, path, PI_CLUSTER);
    }
    for (size_t i = 0; i < n && s == WF_OK; i++)
        if (uf_find(parent, i) != i) s = wf__prep_iw_u64(&w, ids.v[i]);
    if (s == WF_OK) wf__prep_maybe_crash(PS_CLUSTER, 0);
    if (s == WF_OK) s = wf__prep_iw_commit(&w);
    wf__prep_iw_abort(&w);
    free(parent);
    wf__prep_u64vec_free(&ids);
    return s;
}
