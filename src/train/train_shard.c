/* ZeRO-2 and FSDP in the trainer (train_impl.h; docs/distributed.md,
 * "ZeRO-2 and FSDP"). Both run on the model's units (wf_model_num_units:
 * the embedding, each block, the final norm + lm_head) through its unit
 * hook:
 *
 *   zero2  the model has its parameters but no gradient buffer: each
 *          unit's backward writes into one of two rotating unit-sized
 *          gradient buffers, reduce-scattered (SUM) as soon as the unit's
 *          backward ends into this rank's part of ZeRO-1's flat shard;
 *          the optimizer updates the shard and the parameters are
 *          all-gathered after the step, as ZeRO-1's.
 *   fsdp   the model has neither: each unit's flat range is split evenly
 *          over the ranks (pieces of ceil(n / W) floats, rounded up to 16;
 *          the last pieces shorter or empty), this rank keeps its piece
 *          of every unit (parameters, gradient, AdamW moments); a unit is
 *          all-gathered into one of two rotating gather buffers just
 *          before its forward and again before its backward, the next
 *          unit's all-gather started when a unit begins (prefetch), and
 *          its gradient reduce-scattered into the pieces when its backward
 *          ends. A tied embedding (unit 0, also the output projection)
 *          has its own gather and gradient buffers, held for the step.
 *
 * Gradients of several micro-batches accumulate in the shard: each
 * micro-batch's reduce-scatter lands in a unit-part-sized receive buffer
 * and is added to the shard once complete. Every rank issues the same
 * collectives in the same order (the model's unit order). */
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/ckpt.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/safetensors.h"
#include "weft/trace.h"

static float *alloc_f(wf_arena *a, size_t n) { return wf_arena_alloc(a, (n ? n : 1) * sizeof(float), 64); }

/* ---- parameter gathers (fsdp) ---- */

/* This rank's piece of unit u goes to its place in buf, and the
 * all-gather of the unit starts. */
static wf_status gather_start(trainer *t, train_units *su, int u, float *buf, wf_comm_request *req) {
    size_t cnt = su->counts[(size_t)u * (size_t)t->world + (size_t)t->rank];
    if (cnt)
        WF_TRY(wf_backend_copy(wf_model_backend(t->model), buf + (size_t)t->rank * su->piece[u],
                               su->pshard + su->loc[u], cnt * sizeof(float)));
    su->gathers++;
    return wf_comm_iall_gather(t->comm, buf, su->counts + (size_t)u * (size_t)t->world, su->ag_tag[u], req);
}

/* The rotating gather slot holding unit u, or -1. */
static int slot_of(const train_units *su, int u) {
    for (int k = 0; k < 2; k++)
        if (su->pholds[k] == u) return k;
    return -1;
}

/* Unit u's gathered parameters, waited for: its own buffer (a tied
 * embedding), or a rotating slot (gathered now if no prefetch started it). */
static wf_status acquire_params(trainer *t, train_units *su, int u, float **out) {
    if (u == 0 && su->tied) {
        if (!su->e_valid) {
            WF_TRY(gather_start(t, su, 0, su->pE, &su->ereq));
            su->e_valid = 1;
        }
        WF_TRY(wf_comm_wait(t->comm, &su->ereq));
        *out = su->pE;
        return WF_OK;
    }
    int k = slot_of(su, u);
    if (k < 0) {
        k = su->in_use == 0 ? 1 : 0;
        WF_TRY(wf_comm_wait(t->comm, &su->preq[k])); /* a prefetch of another unit, not needed after all */
        su->pholds[k] = u;
        WF_TRY(gather_start(t, su, u, su->pbuf[k], &su->preq[k]));
    }
    WF_TRY(wf_comm_wait(t->comm, &su->preq[k]));
    su->in_use = k;
    *out = su->pbuf[k];
    return WF_OK;
}

/* Starts unit u's all-gather into the slot not in use, unless it is held
 * already (or is the tied embedding, which has its own buffer). */
static wf_status prefetch(trainer *t, train_units *su, int u) {
    if (su->no_prefetch || u < 0 || u >= su->n || (u == 0 && su->tied) || slot_of(su, u) >= 0) return WF_OK;
    int k = su->in_use == 0 ? 1 : 0;
    WF_TRY(wf_comm_wait(t->comm, &su->preq[k]));
    su->pholds[k] = u;
    su->prefetched++;
    return gather_start(t, su, u, su->pbuf[k], &su->preq[k]);
}

/* ---- gradient reduce-scatters ---- */

/* Channel k's reduce-scatter complete: its part added into the shard. */
static wf_status rs_finish(trainer *t, train_units *su, int k) {
    if (su->gholds[k] < 0) return WF_OK;
    WF_TRY(wf_comm_wait(t->comm, &su->greq[k]));
    int u = su->gholds[k];
    float *dst = su->gshard + su->dst[u];
    su->gholds[k] = -1;
    return wf_backend_add(wf_model_backend(t->model), wf_f32(dst), wf_f32(dst), wf_f32(su->rtmp[k]), su->rcount[u]);
}

/* The channel for unit u's gradient: the tied embedding's own (2) or the
 * next rotating one (its previous reduce-scatter finished first). */
static wf_status acquire_grads(trainer *t, train_units *su, int u, int *chan) {
    if (u == 0 && su->tied) {
        *chan = 2;
        return WF_OK;
    }
    int k = su->gnext;
    su->gnext ^= 1;
    WF_TRY(rs_finish(t, su, k));
    WF_TRY(wf_backend_fill(wf_model_backend(t->model), su->gbuf[k], 0, su->len[u] * sizeof(float)));
    *chan = k;
    return WF_OK;
}

static wf_status rs_start(trainer *t, train_units *su, int u, int k) {
    su->gholds[k] = u;
    su->scatters++;
    return wf_comm_ireduce_scatter(t->comm, su->gbuf[k], su->rtmp[k], su->counts + (size_t)u * (size_t)t->world,
                                   WF_COMM_SUM, su->rs_tag[u], &su->greq[k]);
}

/* ---- the hook ---- */

static wf_status on_unit(trainer *t, train_units *su, int u, wf_model_unit_event ev) {
    float *p = su->fsdp ? NULL : wf_model_params(t->model) + su->off[u];
    switch (ev) {
    case WF_UNIT_FWD_BEGIN:
        if (su->fsdp) {
            WF_TRY(acquire_params(t, su, u, &p));
            WF_TRY(prefetch(t, su, u + 1));
        }
        wf_model_bind_unit(t->model, u, p, su->gcur[u]);
        break;
    case WF_UNIT_FWD_END:
        /* Unbound: its gather buffer will hold other units (the tied
         * embedding stays, it is the output projection too). */
        su->in_use = -1;
        if (su->fsdp && !(u == 0 && su->tied)) wf_model_bind_unit(t->model, u, NULL, NULL);
        break;
    case WF_UNIT_BWD_BEGIN: {
        if (u == su->n - 1 && su->tied) {
            /* The first unit of the backward also writes the tied
             * embedding's gradient: its buffer (once the last
             * micro-batch's reduce-scatter from it is complete) is zeroed
             * and bound now. */
            WF_TRY(rs_finish(t, su, 2));
            WF_TRY(wf_backend_fill(wf_model_backend(t->model), su->gbuf[2], 0, su->len[0] * sizeof(float)));
            su->gcur[0] = su->gbuf[2];
            float *pe = p;
            if (su->fsdp) WF_TRY(acquire_params(t, su, 0, &pe));
            else pe = wf_model_params(t->model);
            wf_model_bind_unit(t->model, 0, pe, su->gcur[0]);
        }
        if (su->fsdp) {
            WF_TRY(acquire_params(t, su, u, &p));
            WF_TRY(prefetch(t, su, u - 1));
        }
        int k = 0;
        WF_TRY(acquire_grads(t, su, u, &k));
        su->gcur[u] = su->gbuf[k];
        su->gchan[u] = k;
        wf_model_bind_unit(t->model, u, p, su->gcur[u]);
        break;
    }
    case WF_UNIT_BWD_END:
        su->in_use = -1;
        WF_TRY(rs_start(t, su, u, su->gchan[u]));
        su->gcur[u] = NULL;
        wf_model_bind_unit(t->model, u, p, NULL);
        break;
    }
    /* MPI moves non-blocking collectives only inside its calls. */
    return wf_comm_progress(t->comm);
}

static wf_status unit_hook(void *ctx, int u, wf_model_unit_event ev) {
    trainer *t = ctx;
    wf_status s = on_unit(t, t->units, u, ev);
    if (s != WF_OK && t->units->status == WF_OK) t->units->status = s;
    return s;
}

/* ---- the trainer's calls ---- */

void wf__train_units_begin_step(trainer *t) {
    train_units *su = t->units;
    if (!su) return;
    /* the cpu and ref backends cannot fail a fill (host memory) */
    (void)wf_backend_fill(wf_model_backend(t->model), su->gshard, 0, su->gshard_n * sizeof(float));
    wf__train_units_invalidate(t);
    su->status = WF_OK;
}

void wf__train_units_invalidate(trainer *t) {
    train_units *su = t->units;
    if (!su) return;
    /* The gathered parameters are the shards' of before: gather again. */
    su->pholds[0] = su->pholds[1] = -1;
    su->e_valid = 0;
}

wf_status wf__train_units_finish(trainer *t) {
    train_units *su = t->units;
    wf_status s = WF_OK;
    for (int k = 0; k < 3; k++) {
        wf_status sk = rs_finish(t, su, k);
        if (s == WF_OK) s = sk;
    }
    /* Gathers still in flight (none after a whole backward; some after an
     * error): completed, so that no buffer is in use across steps. */
    for (int k = 0; k < 2; k++) {
        wf_status sk = wf_comm_wait(t->comm, &su->preq[k]);
        if (s == WF_OK) s = sk;
    }
    wf_status se = wf_comm_wait(t->comm, &su->ereq);
    if (s == WF_OK) s = se;
    return s;
}

wf_status wf__train_units_update(trainer *t, double lr, double norm) {
    train_units *su = t->units;
    for (int u = 0; u < su->n; u++)
        WF_TRY(wf_adamw_step_shard(su->opt[u], lr, su->gshard + su->loc[u], norm));
    wf__train_units_invalidate(t);
    return WF_OK;
}

void wf__train_units_set_steps(trainer *t, uint64_t steps) {
    for (int u = 0; u < t->units->n; u++) wf_adamw_set_steps(t->units->opt[u], steps);
}

wf_status wf__train_units_export(trainer *t, wf_safetensors_writer *w) {
    train_units *su = t->units;
    wf_status s = WF_OK;
    for (int u = 0; u < su->n; u++) {
        float *buf = u == 0 && su->tied ? su->pE : su->pbuf[0];
        wf_comm_request req;
        WF_TRY(gather_start(t, su, u, buf, &req));
        WF_TRY(wf_comm_wait(t->comm, &req));
        /* A failed write stops the writing, not the gathers. */
        if (w && s == WF_OK) s = wf_safetensors_writer_put(w, buf, su->len[u]);
    }
    /* The buffers now hold other units than the slots say. */
    wf__train_units_invalidate(t);
    return s;
}

wf_status wf__train_units_init(trainer *t, uint64_t seed) {
    train_units *su = t->units;
    if (!su->fsdp) {
        wf_model_init(t->model, seed);
        return WF_OK;
    }
    /* Each unit initialised whole in a gather buffer (the same bits as
     * wf_model_init), this rank's piece kept. */
    for (int u = 0; u < su->n; u++) {
        float *buf = u == 0 && su->tied ? su->pE : su->pbuf[0];
        wf_model_bind_unit(t->model, u, buf, NULL);
        wf_model_init_unit(t->model, u, seed);
        size_t cnt = su->counts[(size_t)u * (size_t)t->world + (size_t)t->rank];
        if (cnt)
            WF_TRY(wf_backend_copy(wf_model_backend(t->model), su->pshard + su->loc[u],
                                   buf + (size_t)t->rank * su->piece[u], cnt * sizeof(float)));
        wf_model_bind_unit(t->model, u, NULL, NULL);
    }
    wf__train_units_invalidate(t);
    return WF_OK;
}

wf_status wf__train_units_import(trainer *t, const char *path) {
    train_units *su = t->units;
    /* Each unit's piece read in place from the file (by its range of the
     * flat parameter order): no rank holds more than its pieces. */
    size_t *first = calloc((size_t)su->n, sizeof *first), *cnt = calloc((size_t)su->n, sizeof *cnt);
    float **dst = calloc((size_t)su->n, sizeof *dst);
    wf_status s = first && cnt && dst ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    for (int u = 0; s == WF_OK && u < su->n; u++) {
        cnt[u] = su->rcount[u];
        first[u] = cnt[u] ? su->off[u] + (size_t)t->rank * su->piece[u] : 0; /* an empty piece: nothing read */
        dst[u] = su->pshard + su->loc[u];
    }
    if (s == WF_OK) s = wf_hf_import_ranges(t->model, path, su->n, first, cnt, dst);
    free(first), free(cnt), free(dst);
    wf__train_units_invalidate(t);
    return s;
}

wf_status wf__train_units_local_sumsq(const trainer *t, double *out) {
    const train_units *su = t->units;
    return wf_backend_sumsq(wf_model_backend(t->model), wf_f32(su->pshard), su->local_n, out);
}

wf_status wf__train_units_setup(trainer *t, const wf_adamw_config *ac) {
    int W = t->world, r = t->rank, fsdp = t->strat->params == WF__KEEP_PIECES;
    train_units *su = calloc(1, sizeof *su);
    if (!su) return wf_error(WF_ERR_NOMEM, "out of memory");
    t->units = su;
    int n = wf_model_num_units(t->model);
    su->n = n;
    su->fsdp = fsdp;
    su->tied = t->mc.tied_embeddings;
    su->off = calloc((size_t)n, sizeof *su->off);
    su->len = calloc((size_t)n, sizeof *su->len);
    su->piece = calloc((size_t)n, sizeof *su->piece);
    su->loc = calloc((size_t)n, sizeof *su->loc);
    su->dst = calloc((size_t)n, sizeof *su->dst);
    su->rcount = calloc((size_t)n, sizeof *su->rcount);
    su->counts = calloc((size_t)n * (size_t)W, sizeof *su->counts);
    su->gcur = calloc((size_t)n, sizeof *su->gcur);
    su->gchan = calloc((size_t)n, sizeof *su->gchan);
    su->opt = calloc((size_t)n, sizeof *su->opt);
    su->ag_tag = calloc((size_t)n, sizeof *su->ag_tag);
    su->rs_tag = calloc((size_t)n, sizeof *su->rs_tag);
    if (!su->off || !su->len || !su->piece || !su->loc || !su->dst || !su->rcount || !su->counts || !su->gcur ||
        !su->gchan || !su->opt || !su->ag_tag || !su->rs_tag)
        return wf_error(WF_ERR_NOMEM, "out of memory for the unit table");
    /* WEFT_TEST_NO_PREFETCH=1: every gather started only when its unit
     * needs it (the benchmark's measure of what prefetching hides). */
    const char *np = getenv("WEFT_TEST_NO_PREFETCH");
    su->no_prefetch = np && *np && strcmp(np, "0") != 0;
    if (su->no_prefetch && r == 0 && !t->plan_only) WF_WARN("WEFT_TEST_NO_PREFETCH: FSDP gathers are not prefetched");
    su->pholds[0] = su->pholds[1] = -1;
    su->gholds[0] = su->gholds[1] = su->gholds[2] = -1;
    su->in_use = -1;
    for (int k = 0; k < 2; k++) su->preq[k].slot = -1;
    for (int k = 0; k < 3; k++) su->greq[k].slot = -1;
    su->ereq.slot = -1;
    size_t max_len = 0, max_part = 0;
    for (int u = 0; u < n; u++) {
        wf_model_unit_range(t->model, u, &su->off[u], &su->len[u]);
        size_t *cu = su->counts + (size_t)u * (size_t)W;
        if (fsdp) {
            for (int q = 0; q < W; q++) {
                wf_zero1_slice sl = wf_zero1_slice_of(su->len[u], W, q, 16);
                su->piece[u] = sl.size;
                cu[q] = sl.count;
            }
            su->loc[u] = su->local_n;
            su->dst[u] = su->loc[u];
            su->local_n += su->piece[u];
        } else {
            /* ZeRO-1's flat shards: rank q's part of the unit is the unit's
             * range within its shard (contiguous, in rank order). */
            for (int q = 0; q < W; q++) {
                size_t a = su->off[u], b = su->off[u] + su->len[u];
                size_t lo = t->zplan.offsets[q], hi = lo + t->zplan.counts[q];
                if (a < lo) a = lo;
                if (b > hi) b = hi;
                cu[q] = a < b ? b - a : 0;
                if (q == r) su->dst[u] = a < b ? a - lo : 0;
            }
        }
        su->rcount[u] = cu[r];
        if (cu[r] > max_part) max_part = cu[r];
        if (!(u == 0 && su->tied) && su->len[u] > max_len) max_len = su->len[u];
        char tag[48];
        snprintf(tag, sizeof tag, "unit %d/%d all-gather", u, n);
        su->ag_tag[u] = strdup(tag);
        snprintf(tag, sizeof tag, "unit %d/%d reduce-scatter", u, n);
        su->rs_tag[u] = strdup(tag);
        if (!su->ag_tag[u] || !su->rs_tag[u]) return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    su->max_len = max_len;
    wf_arena *a = t->arena;
    size_t before = wf_arena_get_stats(a).in_use;
    /* The buffers, planned once: gradient buffers (2 rotating + the tied
     * embedding's) and their receive buffers; fsdp: the parameter pieces,
     * the gradient pieces, 2 rotating gather buffers (+ the tied
     * embedding's), and one optimizer per unit piece. */
    for (int k = 0; k < 2; k++) {
        su->gbuf[k] = alloc_f(a, max_len);
        su->rtmp[k] = alloc_f(a, max_part);
        if (!su->gbuf[k] || !su->rtmp[k]) return wf_error(WF_ERR_NOMEM, "out of memory for the gradient buffers");
    }
    if (su->tied) {
        su->gbuf[2] = alloc_f(a, su->len[0]);
        su->rtmp[2] = alloc_f(a, max_part);
        if (!su->gbuf[2] || !su->rtmp[2]) return wf_error(WF_ERR_NOMEM, "out of memory for the gradient buffers");
    }
    wf__train_arena_part(t, WF__PART_BUCKETS);
    if (fsdp) {
        su->pshard = alloc_f(a, su->local_n);
        wf__train_arena_part(t, WF__PART_PARAMS);
        su->gshard = alloc_f(a, su->local_n);
        su->gshard_n = su->local_n;
        wf__train_arena_part(t, WF__PART_GRADS);
        for (int k = 0; k < 2; k++) su->pbuf[k] = alloc_f(a, max_len);
        if (su->tied) su->pE = alloc_f(a, su->len[0]);
        wf__train_arena_part(t, WF__PART_GATHER);
        if (!su->pshard || !su->gshard || !su->pbuf[0] || !su->pbuf[1] || (su->tied && !su->pE))
            return wf_error(WF_ERR_NOMEM, "out of memory for the shards and gather buffers");
        for (int u = 0; u < n; u++) {
            size_t lo = su->off[u] + (size_t)r * su->piece[u], cnt = su->rcount[u];
            WF_TRY(wf_adamw_create_shard(&su->opt[u], ac, t->model, cnt ? lo : su->off[u], cnt ? lo + cnt : su->off[u],
                                         a));
            wf_adamw_set_params(su->opt[u], su->pshard + su->loc[u]);
        }
        t->opt = su->opt[0]; /* the step count, for checkpoints */
        wf__train_arena_part(t, WF__PART_OPTIMIZER);
    } else {
        su->gshard = t->gshard;
        su->gshard_n = t->gshard_n;
    }
    su->buffer_bytes = wf_arena_get_stats(a).in_use - before;
    wf_model_set_unit_hook(t->model, unit_hook, t);
    if (r == 0 && !t->plan_only) {
        if (fsdp)
            WF_INFO("FSDP: %d ranks (%s), %d units (the embedding, %d blocks, the final norm%s), each split in %d "
                    "pieces; this rank holds %zu of the %zu parameters; gather buffers 2 x %zu floats%s",
                    W, wf_comm_backend(t->comm), n, n - 2, su->tied ? "; the tied embedding is also the output "
                                                                         "projection, held for the step" : " + lm_head",
                    W, su->local_n, wf_model_num_params(t->model), max_len,
                    su->tied ? " + the tied embedding's" : "");
        else
            WF_INFO("ZeRO-2: %d ranks (%s), %d units; each unit's gradient reduce-scattered into the shards as soon "
                    "as its backward ends (2 gradient buffers of %zu floats%s, no full gradient)",
                    W, wf_comm_backend(t->comm), n, max_len, su->tied ? " + the tied embedding's" : "");
        WF_INFO("%s: unit buffers %.3f MB per rank", fsdp ? "FSDP" : "ZeRO-2", (double)su->buffer_bytes / 1e6);
        if (fsdp && W > 1)
            WF_INFO("FSDP: the replica check (guard.replica_every) is off: no rank holds a copy of another's "
                    "pieces, so there is nothing replicated to compare");
    }
    return WF_OK;
}

void wf__train_units_free(trainer *t) {
    train_units *su = t->units;
    if (!su) return;
    if (su->fsdp) {
        for (int u = 0; u < su->n; u++) wf_adamw_destroy(su->opt[u]);
        t->opt = NULL;
    }
    for (int u = 0; su->ag_tag && u < su->n; u++) free(su->ag_tag[u]);
    for (int u = 0; su->rs_tag && u < su->n; u++) free(su->rs_tag[u]);
    free(su->ag_tag), free(su->rs_tag);
    free(su->off), free(su->len), free(su->piece), free(su->loc), free(su->dst), free(su->rcount);
    free(su->counts), free(su->gcur), free(su->gchan), free(su->opt);
    free(su);
    t->units = NULL;
}

const char *const wf_train_shard_names[] = {"ddp", "zero1", "zero2", "fsdp", NULL};
