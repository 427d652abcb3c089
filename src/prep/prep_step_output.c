/* Step 6 of a run, output (one unit per input): the documents that are not
 * near duplicates are scored by the perplexity model (when there is one)
 * and written as JSONL, one stream per language and bucket, compressed in
 * pieces of about shard_mb (output/NNNNNN.blob, listed in
 * output/NNNNNN.index) that the finish step joins into shards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "prep/prep_impl.h"
#include "weft/json.h"
#include "weft/thread.h"

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

static const char *const bucket_names[] = {"head", "middle", "tail"};

wf_status wf__prep_step_output(prep_run *r, size_t in) {
    const wf_prep_config *c = r->c;
    char path[4400];
    prep_ir cl = {0};
    prep_dr ir = {0};
    out_unit o;
    memset(&o, 0, sizeof o);
    uint64_t shard_bytes = (uint64_t)(c->shard_mb * 1048576.0);
    if (shard_bytes == 0) shard_bytes = 1;
    wf__prep_run_path(r, path, sizeof path, "filter/%06zu.docs", in);
    wf_status s = wf__prep_dr_open(&ir, path, PI_DOCS, wf__prep_read_chunk(r), 0);
    if (s == WF_OK) r->st.step_bytes[PS_OUTPUT] += ir.total + 32;
    /* The near duplicates of this input: the cluster list is sorted by id. */
    const char *near = NULL;
    size_t n_near = 0;
    if (s == WF_OK && c->minhash) {
        wf__prep_run_path(r, path, sizeof path, "cluster/drops");
        s = wf__prep_ir_load(&cl, path, PI_CLUSTER);
        if (s == WF_OK && (cl.len - cl.pos) % 8)
            s = wf_error(WF_ERR_FORMAT, "%s: %zu bytes of records, not a multiple of 8; rerun with --force", cl.what,
                         cl.len - cl.pos);
        if (s == WF_OK) {
            size_t total = (cl.len - cl.pos) / 8, lo = 0, hi = total;
            const unsigned char *base = (const unsigned char *)cl.data + cl.pos;
            /* First entry >= PREP_GID(in, 0). */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                uint64_t g = 0;
                for (int k = 0; k < 8; k++) g |= (uint64_t)base[mid * 8 + (size_t)k] << (8 * k);
                if (g < PREP_GID(in, 0)) lo = mid + 1;
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
        wf__prep_run_path(r, path, sizeof path, "output/%06zu.blob", in);
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
            wf__prep_stats_account(&r->st, ST_MINHASH, R_NEAR_DUP, x.at);
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
                wf__prep_stats_account(&r->st, ST_PERPLEXITY, R_TAIL, x.at);
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
        wf__prep_stats_account(&r->st, ST_OUTPUT, R_NONE, x.at);
        if (w->buf.len >= shard_bytes) s = flush_stream(r, &o, w);
        r->st.seconds[ST_OUTPUT] += wf_time_now() - t2;
    }
    (void)t0;
    for (size_t k = 0; k < o.n && s == WF_OK; k++) s = flush_stream(r, &o, &o.v[k]);
    if (s == WF_OK) wf__prep_maybe_crash(PS_OUTPUT, in);
    if (s == WF_OK) s = wf__prep_iw_commit(&o.blob);
    prep_iw idx = {0};
    if (s == WF_OK) {
        wf__prep_run_path(r, path, sizeof path, "output/%06zu.index", in);
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
