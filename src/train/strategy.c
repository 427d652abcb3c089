/* dist.shard as strategies (train_impl.h; docs/architecture.md, "Sharding
 * strategies"; docs/distributed.md). One table per mode says what a rank
 * keeps of the parameters, the summed gradient and the optimizer state,
 * how the gradient is summed over the ranks and how the parameters reach
 * the next forward; the trainer's step, setup, checkpoint staging, replica
 * audit and non-finite report ask the table, never the mode's name.
 *
 *   ddp    keeps everything whole; the gradient all-reduced in buckets
 *   zero1  the moments' flat slice; the buckets reduce-scattered into the
 *          gradient's slice, the slice updated, the parameters all-gathered
 *   zero2  zero1 without a whole gradient: each unit's gradient
 *          reduce-scattered into the slice as its backward ends
 *   fsdp   every unit's piece of everything; a unit all-gathered before
 *          its forward and backward (train_shard.c)
 *
 * A rank's slice of n floats is wf_zero1_slice_of's, wherever it is taken.
 * With optim.name = muon the update adds Muon's step (train_muon.c): on
 * the whole gradient under ddp, else split by whole matrices over the
 * ranks, its momentum in the AdamW state's slices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/trace.h"

void wf__train_arena_mark(trainer *t, const char *name) {
    wf_run_arena *a = &t->arena_use;
    wf_arena_stats st = wf_arena_get_stats(t->arena);
    if (a->n < WF_RUN_ARENA_MAX) {
        a->names[a->n] = name;
        a->bytes[a->n++] = (int64_t)st.in_use - a->in_use;
    }
    a->in_use = (int64_t)st.in_use, a->peak = (int64_t)st.peak, a->reserved = (int64_t)st.reserved;
}

/* ---- setup ---- */

/* The gradient buckets over the model's tensors (in buffer order): an
 * all-reduce each, or (flat_slice first) a reduce-scatter each into this
 * rank's gradient slice. */
static wf_status make_reducer(trainer *t) {
    int nt = wf_model_num_tensors(t->model);
    wf_comm_span *spans = calloc((size_t)nt, sizeof *spans);
    if (!spans) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(t->model, i);
        spans[i] = (wf_comm_span){.offset = ti->offset, .numel = ti->numel};
    }
    size_t bucket = (size_t)(t->tc->dist_bucket_mb * 1e6);
    wf_status s = wf_reducer_create(&t->reducer, t->comm, wf_model_grads(t->model), spans, nt, bucket ? bucket : 1);
    free(spans);
    /* The backward scales by 1 / world (wf__train_step): the buckets sum. */
    if (s == WF_OK) s = wf_reducer_set_op(t->reducer, WF_COMM_SUM);
    int scatter = t->strat->reduce == WF__REDUCE_SCATTER;
    if (s == WF_OK && scatter) s = wf_reducer_set_shards(t->reducer, &t->zplan, t->rank, t->gshard);
    if (s == WF_OK && scatter && t->rank == 0)
        WF_INFO("%s: %d reduce-scatter bucket%s of up to %.1f MB of the gradient, each started during the "
                "backward as soon as its tensors are ready",
                t->strat->label, wf_reducer_num_buckets(t->reducer), wf_reducer_num_buckets(t->reducer) == 1 ? "" : "s",
                t->tc->dist_bucket_mb);
    else if (s == WF_OK && !scatter)
        WF_INFO("%s: %d ranks (%s), %d gradient bucket%s of up to %.1f MB", t->strat->label, t->world,
                wf_comm_backend(t->comm), wf_reducer_num_buckets(t->reducer),
                wf_reducer_num_buckets(t->reducer) == 1 ? "" : "s", t->tc->dist_bucket_mb);
    return s;
}

/* The flat slices (16-float aligned), this rank's optimizer of its slice
 * and the buffer the gradient's slice is reduce-scattered into. */
static wf_status make_flat(trainer *t, const wf_adamw_config *ac) {
    size_t np = wf_model_num_params(t->model);
    WF_TRY(wf_zero1_plan_init(&t->zplan, np, t->world, 16));
    size_t lo = t->zplan.offsets[t->rank], count = t->zplan.counts[t->rank];
    WF_TRY(wf_adamw_create_shard(&t->opt, ac, t->model, lo, lo + count, t->arena));
    wf__train_arena_mark(t, "optimizer");
    wf__train_arena_part(t, WF__PART_OPTIMIZER);
    t->gshard = wf_arena_alloc(t->arena, (count ? count : 1) * sizeof(float), 64);
    if (!t->gshard) return wf_error(WF_ERR_NOMEM, "ZeRO-1: out of memory for the gradient shard (%zu floats)", count);
    t->gshard_n = count;
    wf__train_arena_mark(t, "grad_shard");
    wf__train_arena_part(t, WF__PART_GRADS);
    if (t->plan_only) return WF_OK;
    wf_zero1_memory zm = wf_zero1_plan_memory(&t->zplan, 0, 2);
    if (t->rank == 0) {
        WF_INFO("ZeRO-1: %d ranks (%s), shards of %zu of the %zu parameters: gradients reduce-scattered in buckets "
                "during the backward, each rank updates its shard, parameters all-gathered",
                t->world, wf_comm_backend(t->comm), t->zplan.shard_size, np);
        /* Rank 0's shard is a full one, the largest: the per-rank figure.
         * It counts the moments' shard and the gradient shard. */
        WF_INFO("ZeRO-1: optimizer state %.3f MB per rank instead of %.3f MB (saves %.3f MB, %.0f%%)",
                (double)zm.sharded_bytes / 1e6, (double)zm.unsharded_bytes / 1e6, (double)zm.saved_bytes / 1e6,
                zm.unsharded_bytes ? 100.0 * (double)zm.saved_bytes / (double)zm.unsharded_bytes : 0.0);
    }
    WF_INFO("ZeRO-1: this rank updates parameters [%zu, %zu)", lo, lo + count);
    return WF_OK;
}

static wf_status setup_ddp(trainer *t, const wf_adamw_config *ac) {
    WF_TRY(wf_adamw_create(&t->opt, ac, t->model, t->arena));
    WF_TRY(wf__train_muon_setup(t)); /* optim.name = muon: its scratch (the momentum is AdamW's m) */
    wf__train_arena_mark(t, "optimizer");
    wf__train_arena_part(t, WF__PART_OPTIMIZER);
    return t->world > 1 && !t->plan_only ? make_reducer(t) : WF_OK; /* the reducer is not the arena's */
}

/* optim.name = muon sharded (train_muon.c): each matrix's owner and the
 * exchange buffer, counted as optimizer memory (nothing without muon). */
static wf_status setup_muon_split(trainer *t) {
    WF_TRY(wf__train_muon_setup(t));
    if (!t->muon) return WF_OK;
    wf__train_arena_mark(t, "muon");
    wf__train_arena_part(t, WF__PART_OPTIMIZER);
    return WF_OK;
}

static wf_status setup_zero1(trainer *t, const wf_adamw_config *ac) {
    WF_TRY(make_flat(t, ac));
    WF_TRY(setup_muon_split(t));
    return t->plan_only ? WF_OK : make_reducer(t);
}

static wf_status setup_zero2(trainer *t, const wf_adamw_config *ac) {
    WF_TRY(make_flat(t, ac));
    WF_TRY(wf__train_units_setup(t, ac));
    wf__train_arena_mark(t, "units");
    return setup_muon_split(t);
}

static wf_status setup_fsdp(trainer *t, const wf_adamw_config *ac) {
    WF_TRY(wf__train_units_setup(t, ac));
    wf__train_arena_mark(t, "units");
    t->gshard = t->units->gshard;
    t->gshard_n = t->units->gshard_n;
    return setup_muon_split(t);
}

/* ---- the gradient summed over ranks ---- */

/* By units: every reduce-scatter complete and added into the slice (the
 * unit engine started them during the backward). */
static wf_status reduce_units(trainer *t, int64_t step, step_outcome *o) {
    double tr = wf_time_now();
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "grad reduce-scatter");
    wf_status s = wf__train_units_finish(t);
    if (t->world > 1) o->comm_s += wf_time_now() - tr;
    if (s == WF_OK && t->world > 1) s = wf_comm_all_reduce_f64(t->comm, &o->loss, 1, WF_COMM_AVG, "loss");
    if (s == WF_OK && step == 0 && t->rank == 0) {
        const train_units *su = t->units;
        WF_INFO("%s: %llu unit reduce-scatters, every one started as its unit's backward ended; %llu parameter "
                "all-gathers, %llu of them prefetched",
                t->strat->label, (unsigned long long)su->scatters, (unsigned long long)su->gathers,
                (unsigned long long)su->prefetched);
    }
    wf_trace_end(span);
    WF_TRY(s);
    o->fwd_bwd_s += wf_time_now() - tr;
    return WF_OK;
}

/* By buckets (nothing with one process): every rank's gradients become the
 * sum over ranks of each rank's mean over its equal part of the batch
 * scaled by 1 / world: the mean over the global batch. The logged loss
 * becomes the average. All-reduce: the whole gradient, on every rank;
 * reduce-scatter: this rank's slice of it, by the same buckets. Both
 * started during the backward. */
static wf_status reduce_buckets(trainer *t, int64_t step, step_outcome *o) {
    if (t->world == 1) return WF_OK;
    int scatter = t->strat->reduce == WF__REDUCE_SCATTER;
    double tr = wf_time_now();
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, scatter ? "grad reduce-scatter" : "grad all-reduce");
    wf_status s = wf_reducer_finish(t->reducer);
    /* What the buckets did not hide behind the backward, waiting for
     * the slowest rank included. */
    o->comm_s += wf_time_now() - tr;
    if (s == WF_OK) s = wf_comm_all_reduce_f64(t->comm, &o->loss, 1, WF_COMM_AVG, "loss");
    if (s == WF_OK && step == 0 && t->rank == 0)
        WF_INFO("%s: %d of %d %s buckets started during the backward", t->strat->label,
                wf_reducer_overlapped(t->reducer), wf_reducer_num_buckets(t->reducer),
                scatter ? "reduce-scatter" : "gradient");
    wf_trace_end(span);
    WF_TRY(s);
    o->fwd_bwd_s += wf_time_now() - tr;
    return WF_OK;
}

/* ---- the update ---- */

/* AdamW on the flat buffer's slice the optimizer was made for (all of it,
 * or the flat slice, then all-gathered), clipped with the global norm. */
static wf_status update_flat(trainer *t, int64_t step, step_outcome *o) {
    const float *grad = t->strat->grads == WF__KEEP_WHOLE ? wf_model_grads(t->model) : t->gshard;
    wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "adamw");
    wf_status s = wf_adamw_step_shard(t->opt, o->lr_adamw, grad, o->grad_norm);
    wf_trace_end(span);
    if (s == WF_OK) s = wf__train_muon_step(t, o, grad); /* optim.name = muon: the block matrices */
    if (s != WF_OK) return wf_error_wrap(s, "step %lld: ", (long long)step + 1);
    if (t->strat->gather == WF__GATHER_AFTER_UPDATE) {
        double tg = wf_time_now();
        span = wf_trace_begin(WF_TRACE_REGION, "param all-gather");
        s = wf_comm_all_gather(t->comm, wf_model_params(t->model), t->zplan.counts, "param all-gather");
        wf_trace_end(span);
        o->comm_s += wf_time_now() - tg;
    }
    return s;
}

/* Each unit's piece (Muon's matrices first, then AdamW's rest); the next
 * forward gathers the new values. */
static wf_status update_pieces(trainer *t, int64_t step, step_outcome *o) {
    wf_status s = wf__train_muon_step(t, o, NULL);
    if (s != WF_OK) return wf_error_wrap(s, "step %lld: ", (long long)step + 1);
    wf_trace_span sp = wf_trace_begin(WF_TRACE_COMPUTE, "adamw");
    s = wf__train_units_update(t, o->lr_adamw, o->grad_norm);
    wf_trace_end(sp);
    return s == WF_OK ? WF_OK : wf_error_wrap(s, "step %lld: ", (long long)step + 1);
}

/* ---- the table ---- */

static const train_strategy strategies[] = {
    {.name = "ddp", .label = "DDP",
     .params = WF__KEEP_WHOLE, .grads = WF__KEEP_WHOLE, .full_grad = 1, .optim = WF__KEEP_WHOLE,
     .reduce = WF__REDUCE_ALL_REDUCE, .gather = WF__GATHER_NONE,
     .setup = setup_ddp, .reduce_grads = reduce_buckets, .update = update_flat},
    {.name = "zero1", .label = "ZeRO-1",
     .params = WF__KEEP_WHOLE, .grads = WF__KEEP_FLAT, .full_grad = 1, .optim = WF__KEEP_FLAT,
     .reduce = WF__REDUCE_SCATTER, .gather = WF__GATHER_AFTER_UPDATE, .one_rank = "ddp",
     .setup = setup_zero1, .reduce_grads = reduce_buckets, .update = update_flat},
    {.name = "zero2", .label = "ZeRO-2",
     .params = WF__KEEP_WHOLE, .grads = WF__KEEP_FLAT, .full_grad = 0, .optim = WF__KEEP_FLAT,
     .reduce = WF__REDUCE_UNITS, .gather = WF__GATHER_AFTER_UPDATE,
     .setup = setup_zero2, .reduce_grads = reduce_units, .update = update_flat},
    {.name = "fsdp", .label = "FSDP",
     .params = WF__KEEP_PIECES, .grads = WF__KEEP_PIECES, .full_grad = 0, .optim = WF__KEEP_PIECES,
     .reduce = WF__REDUCE_UNITS, .gather = WF__GATHER_UNITS,
     .setup = setup_fsdp, .reduce_grads = reduce_units, .update = update_pieces},
};

const train_strategy *wf__train_strategy(const char *name) {
    for (size_t i = 0; name && i < sizeof strategies / sizeof strategies[0]; i++)
        if (strcmp(strategies[i].name, name) == 0) return &strategies[i];
    return NULL;
}

/* ---- questions the trainer asks ---- */

wf_status wf__train_grad_norm(trainer *t, double *norm) {
    if (t->tp.size > 1) return wf__train_tp_grad_norm(t, norm);
    if (t->strat->grads == WF__KEEP_WHOLE) {
        *norm = wf_grad_norm(t->model);
        return WF_OK;
    }
    /* the slices' sums of squares (the model's backend's fixed blocks: at
     * one rank wf_grad_norm's sum, bit for bit), summed over ranks */
    double ss = 0;
    WF_TRY(wf_backend_sumsq(wf_model_backend(t->model), wf_f32(t->gshard), t->gshard_n, &ss));
    WF_TRY(wf_comm_all_reduce_f64(t->comm, &ss, 1, WF_COMM_SUM, "zero1 grad norm"));
    *norm = sqrt(ss);
    return WF_OK;
}

wf_status wf__train_param_sumsq(trainer *t, double *ss) {
    if (t->tp.size > 1) return wf__train_tp_param_sumsq(t, ss);
    if (t->strat->params == WF__KEEP_WHOLE) return wf_model_sumsq(t->model, WF_MODEL_PARAMS, ss);
    /* each rank's pieces, summed over ranks: the same verdict everywhere */
    WF_TRY(wf__train_units_local_sumsq(t, ss));
    return wf_comm_all_reduce_f64(t->comm, ss, 1, WF_COMM_SUM, "param check");
}

int wf__train_held(const trainer *t, int grads, size_t *lo, size_t *cnt, float **ptr) {
    wf__keep k = grads ? t->strat->grads : t->strat->params;
    if (k == WF__KEEP_WHOLE || (grads && t->strat->full_grad)) return 0;
    if (k == WF__KEEP_FLAT) { /* only a gradient is kept so (the parameters are whole or in pieces) */
        lo[0] = t->zplan.offsets[t->rank], cnt[0] = t->zplan.counts[t->rank], ptr[0] = t->gshard;
        return 1;
    }
    const train_units *su = t->units;
    int n = 0;
    for (int u = 0; u < su->n; u++) {
        if (!su->rcount[u]) continue;
        lo[n] = su->off[u] + (size_t)t->rank * su->piece[u];
        cnt[n] = su->rcount[u];
        ptr[n] = (grads ? su->gshard : su->pshard) + su->loc[u];
        n++;
    }
    return n;
}
