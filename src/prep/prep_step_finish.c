/* Step 7 of a run, finish (one unit): the units' counters added up, the
 * output units' pieces joined into shards in input order
 * (OUT/<lang>/<bucket>_NNNNN.jsonl.zst), stats.json and stats.txt
 * (docs/formats/prep-output.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"
#include "weft/thread.h"

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
wf_status wf__prep_step_finish(prep_run *r, size_t unit) {
    (void)unit;
    const wf_prep_config *c = r->c;
    double t0 = wf_time_now();
    char path[4400];
    prep_stats total;
    memset(&total, 0, sizeof total);
    wf_status s = WF_OK;
    static const int steps[] = {PS_EXTRACT, PS_DEDUP, PS_FILTER, PS_LSH, PS_CLUSTER, PS_OUTPUT};
    for (size_t k = 0; k < sizeof steps / sizeof *steps && s == WF_OK; k++) {
        for (size_t u = 0, n = wf__prep_step_units(r, steps[k]); u < n && s == WF_OK; u++) {
            prep_stats part;
            memset(&part, 0, sizeof part);
            wf__prep_run_path(r, path, sizeof path, "stats/%s.%06zu.json", wf__prep_step_name(steps[k]), u);
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
        wf__prep_run_path(r, path, sizeof path, "output/%06zu.index", in);
        if ((s = wf__prep_ir_load(&idx, path, PI_INDEX)) != WF_OK) break;
        wf__prep_run_path(r, path, sizeof path, "output/%06zu.blob", in);
        /* Checked whole before use: shards are published before its end. */
        if ((s = wf__prep_dr_open(&blob, path, PI_BLOB, wf__prep_read_chunk(r), 1)) != WF_OK) {
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
    if (s == WF_OK) wf__prep_maybe_crash(PS_FINISH, 0);
    if (s == WF_OK) {
        prep_progress_state ps;
        memset(&ps, 0, sizeof ps);
        ps.n_inputs = ps.inputs_done = r->n_inputs;
        ps.complete = 1;
        ps.tasks = r->tasks;
        total.step_units[PS_FINISH] = 1;
        total.step_seconds[PS_FINISH] += wf_time_now() - t0;
        total.wall_seconds = wf__prep_epoch_now() - r->started;
        s = wf__prep_stats_write(c->output, c, &ps, &total);
    }
    wf__prep_stats_free(&total);
    return s;
}
