/* optim.name = muon in the trainer (train_impl.h): Muon (src/optim/muon.c)
 * for the blocks' 2-D weights, AdamW for the rest, behind a few narrow
 * hooks so that the step and the setup stay one path for every optimizer.
 *
 * The Muon momentum lives in AdamW's first-moment buffer, in the slots of
 * the Muon matrices (AdamW, made with skip_muon, never touches them): one
 * state buffer laid out as the parameters, or as the strategy's slices of
 * them, which checkpoints (under "optim.momentum.<name>", train_ckpt.c),
 * replica repair and rollback already carry.
 *
 * Under DDP every rank holds the whole summed gradient, so every rank runs
 * the same Muon step on every matrix (the same bits everywhere). Under
 * zero1 (several ranks), zero2 and fsdp a rank holds flat ranges of the
 * summed gradient, the momentum and (fsdp) the parameters, which cut
 * matrices anywhere, while Newton-Schulz needs each whole matrix. So the
 * work is split by whole matrices (docs/optim.md, "Sharding"):
 *   1. each matrix has an owner (wf__train_muon_assign: by Newton-Schulz
 *      flops, largest first, each to the least loaded rank); an exchange
 *      buffer holds every Muon matrix, laid out by owner (rank 0's, then
 *      rank 1's, ...);
 *   2. each rank runs the momentum on the parts of the matrices it holds,
 *      writing the iteration's input u into its place in the buffer (zero
 *      elsewhere);
 *   3. a reduce-scatter (sum) brings each owner its matrices' u whole:
 *      every element has exactly one holder, so the sum is exact;
 *   4. each owner iterates its matrices; an all-gather brings every X to
 *      every rank, which steps the parameters it holds.
 * The bits are those of the one-process step for the same summed
 * gradient: the same elementwise steps on every element and the same
 * iteration on each whole matrix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/trace.h"

static int muon_on(const trainer *t) { return t->tc && t->tc->optim_name && strcmp(t->tc->optim_name, "muon") == 0; }

const char *wf__train_optim_name(const trainer *t) { return muon_on(t) ? "muon" : "adamw"; }

wf_status wf__train_muon_config(trainer *t, wf_adamw_config *ac) {
    const wf_train_config *tc = t->tc;
    t->adamw_lr_ratio = 1.0;
    if (!muon_on(t)) {
        static const char *const keys[] = {"optim.adamw_lr", "optim.muon_momentum", "optim.muon_nesterov",
                                           "optim.muon_ns_steps", "optim.muon_weight_decay", "optim.muon_scale"};
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (wf_opts_given(wf_train_spec(), tc, keys[i]) && t->rank == 0)
                WF_WARN("%s is set but optim.name = adamw: it is Muon's (optim.name = muon), and ignored", keys[i]);
        return WF_OK;
    }
    if (tc->adamw_lr > 0) t->adamw_lr_ratio = tc->adamw_lr / tc->lr;
    ac->skip_muon = 1;
    return WF_OK;
}

/* The sharded split: each matrix's owner; the exchange buffer laid out by
 * owner (rank 0's matrices, in buffer order, then rank 1's, ...), so that
 * a reduce-scatter brings each owner its matrices and an all-gather brings
 * everyone every result. */
struct train_muon_split {
    int *owner;      /* (matrices) the rank that orthogonalises matrix i */
    size_t *pos;     /* (matrices) where matrix i is in the exchange buffer */
    size_t *counts;  /* (W) the floats each rank owns */
    size_t n, most;  /* the Muon floats; the most any rank owns */
    float *x;        /* (n) the exchange buffer, from the arena */
    float *r;        /* (most) this rank's matrices, whole, from the arena */
};

void wf__train_muon_free(trainer *t) {
    if (!t->muon_split) return;
    free(t->muon_split->owner);
    free(t->muon_split->pos);
    free(t->muon_split->counts);
    free(t->muon_split);
    t->muon_split = NULL;
}

static double ns_cost(int rows, int cols) {
    double s = rows < cols ? rows : cols, l = rows < cols ? cols : rows;
    return 4.0 * s * s * l + 2.0 * s * s * s;
}

wf_status wf__train_muon_assign(int n, const int *rows, const int *cols, int world, int *owner, double *busiest) {
    int *order = calloc((size_t)(n ? n : 1), sizeof *order);
    double *load = calloc((size_t)world, sizeof *load), *cost = calloc((size_t)(n ? n : 1), sizeof *cost);
    wf_status s = order && load && cost ? WF_OK : wf_error(WF_ERR_NOMEM, "muon: out of memory");
    for (int i = 0; s == WF_OK && i < n; i++) {
        cost[i] = ns_cost(rows[i], cols[i]);
        /* insertion by cost, largest first; equal costs keep buffer order */
        int j = i;
        while (j > 0 && cost[order[j - 1]] < cost[i]) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    for (int k = 0; s == WF_OK && k < n; k++) {
        int best = 0;
        for (int q = 1; q < world; q++)
            if (load[q] < load[best]) best = q;
        owner[order[k]] = best;
        load[best] += cost[order[k]];
    }
    if (s == WF_OK && busiest) {
        double most = 0, all = 0;
        for (int q = 0; q < world; q++) all += load[q], most = load[q] > most ? load[q] : most;
        *busiest = all > 0 ? most * world / all : 1.0;
    }
    free(order), free(load), free(cost);
    return s;
}

static wf_status make_split(trainer *t) {
    int nm = wf_muon_num_matrices(t->muon), W = t->world;
    size_t cap = (size_t)(nm ? nm : 1);
    struct train_muon_split *sp = calloc(1, sizeof *sp);
    t->muon_split = sp;
    int *rows = calloc(cap, sizeof *rows), *cols = calloc(cap, sizeof *cols);
    if (sp) {
        sp->owner = calloc(cap, sizeof *sp->owner);
        sp->pos = calloc(cap, sizeof *sp->pos);
        sp->counts = calloc((size_t)W, sizeof *sp->counts);
    }
    wf_status s = sp && sp->owner && sp->pos && sp->counts && rows && cols
                      ? WF_OK
                      : wf_error(WF_ERR_NOMEM, "muon: out of memory");
    for (int i = 0; s == WF_OK && i < nm; i++) {
        size_t off;
        wf_muon_matrix(t->muon, i, &off, &rows[i], &cols[i]);
    }
    double busiest = 1;
    if (s == WF_OK) s = wf__train_muon_assign(nm, rows, cols, W, sp->owner, &busiest);
    if (s == WF_OK) {
        for (int i = 0; i < nm; i++) sp->counts[sp->owner[i]] += (size_t)rows[i] * (size_t)cols[i];
        size_t at = 0;
        for (int q = 0; q < W; q++) {
            for (int i = 0; i < nm; i++)
                if (sp->owner[i] == q) sp->pos[i] = at, at += (size_t)rows[i] * (size_t)cols[i];
            if (sp->counts[q] > sp->most) sp->most = sp->counts[q];
        }
        sp->n = at;
        sp->x = wf_arena_alloc(t->arena, (sp->n ? sp->n : 1) * sizeof(float), 64);
        sp->r = sp->x ? wf_arena_alloc(t->arena, (sp->most ? sp->most : 1) * sizeof(float), 64) : NULL;
        if (!sp->r)
            s = wf_error(WF_ERR_NOMEM, "muon: out of memory for the exchange buffers (%zu + %zu floats)", sp->n,
                         sp->most);
    }
    if (s == WF_OK && t->rank == 0 && !t->plan_only)
        WF_INFO("muon, %s: the %d matrices split over %d ranks by Newton-Schulz flops (the busiest rank %.0f%% "
                "of the even share); the momentum is kept with the AdamW state's slices; a step reduce-scatters "
                "and all-gathers %zu floats, at most %zu a rank",
                t->strat->label, nm, W, 100.0 * busiest, sp->n, sp->most);
    free(rows), free(cols);
    return s;
}

wf_status wf__train_muon_setup(trainer *t) {
    if (!muon_on(t)) return WF_OK;
    const wf_train_config *tc = t->tc;
    wf_muon_config mc = wf_muon_config_default();
    mc.momentum = tc->muon_momentum;
    mc.nesterov = tc->muon_nesterov;
    mc.ns_steps = (int)tc->muon_ns_steps;
    mc.weight_decay = tc->muon_weight_decay;
    mc.scale = strcmp(tc->muon_scale, "match_adamw_rms") == 0 ? WF_MUON_SCALE_MATCH_ADAMW_RMS
                                                              : WF_MUON_SCALE_REFERENCE;
    mc.grad_clip = tc->grad_clip;
    int whole = t->strat->optim == WF__KEEP_WHOLE;
    WF_TRY(wf_muon_create(&t->muon, &mc, t->model, whole ? wf_adamw_m(t->opt) : NULL, t->arena));
    if (!whole) WF_TRY(make_split(t));
    size_t np = wf_model_num_params(t->model), nm = wf_muon_numel(t->muon);
    if (t->rank == 0 && !t->plan_only)
        WF_INFO("optimizer: Muon for %zu of %zu parameters (the blocks' matrices; lr %g, momentum %g%s, %d "
                "Newton-Schulz steps, %s scale, weight decay %g), AdamW for the other %zu (lr %g)",
                nm, np, tc->lr, tc->muon_momentum, tc->muon_nesterov ? " Nesterov" : "", (int)tc->muon_ns_steps,
                tc->muon_scale, tc->muon_weight_decay, np - nm, tc->lr * t->adamw_lr_ratio);
    return WF_OK;
}

/* What this rank holds of the parameters' flat order with the summed
 * gradient and the momentum: the flat slice (zero1, zero2) or each unit's
 * piece (fsdp); p, g and m point at element lo. */
typedef struct {
    size_t lo, n;
    float *p, *g, *m;
} held_range;

static int held(trainer *t, held_range *h) {
    if (t->strat->optim == WF__KEEP_FLAT) {
        size_t lo = t->zplan.offsets[t->rank];
        h[0] = (held_range){lo, t->zplan.counts[t->rank], wf_model_params(t->model) + lo, t->gshard,
                            wf_adamw_m(t->opt)};
        return 1;
    }
    const train_units *su = t->units;
    int n = 0;
    for (int u = 0; u < su->n; u++)
        if (su->rcount[u])
            h[n++] = (held_range){su->off[u] + (size_t)t->rank * su->piece[u], su->rcount[u],
                                  su->pshard + su->loc[u], su->gshard + su->loc[u], wf_adamw_m(su->opt[u])};
    return n;
}

/* Calls fn on every part of a Muon matrix that a held range has:
 * matrix i's elements [a, b) of the flat order. */
typedef wf_status (*part_fn)(trainer *t, const held_range *h, int i, size_t a, size_t b, step_outcome *o);

static wf_status each_part(trainer *t, const held_range *h, int nh, part_fn fn, step_outcome *o) {
    for (int k = 0; k < nh; k++)
        for (int i = 0; i < wf_muon_num_matrices(t->muon); i++) {
            size_t off;
            int r, c;
            wf_muon_matrix(t->muon, i, &off, &r, &c);
            size_t a = off > h[k].lo ? off : h[k].lo, end = off + (size_t)r * (size_t)c;
            size_t b = end < h[k].lo + h[k].n ? end : h[k].lo + h[k].n;
            if (a < b) WF_TRY(fn(t, &h[k], i, a, b, o));
        }
    return WF_OK;
}

/* Where element a of matrix i is in the exchange buffer. */
static float *slot(trainer *t, int i, size_t a) {
    size_t off;
    int r, c;
    wf_muon_matrix(t->muon, i, &off, &r, &c);
    return t->muon_split->x + t->muon_split->pos[i] + (a - off);
}

static wf_status part_momentum(trainer *t, const held_range *h, int i, size_t a, size_t b, step_outcome *o) {
    size_t at = a - h->lo;
    return wf_muon_momentum(t->muon, h->m + at, h->g + at, slot(t, i, a), b - a, o->grad_norm);
}

static wf_status part_apply(trainer *t, const held_range *h, int i, size_t a, size_t b, step_outcome *o) {
    return wf_muon_apply(t->muon, i, h->p + (a - h->lo), slot(t, i, a), b - a, o->lr);
}

static wf_status step_split(trainer *t, step_outcome *o) {
    struct train_muon_split *sp = t->muon_split;
    wf_backend *be = wf_model_backend(t->model);
    int nu = wf_model_num_units(t->model);
    held_range *h = calloc((size_t)(nu > 1 ? nu : 1), sizeof *h);
    if (!h) return wf_error(WF_ERR_NOMEM, "muon: out of memory");
    int nh = held(t, h);
    size_t mine = 0; /* where this rank's matrices start in the exchange buffer */
    for (int q = 0; q < t->rank; q++) mine += sp->counts[q];
    /* With one rank the buffer is this rank's part: iterated in place. */
    float *own = t->world > 1 ? sp->r : sp->x;
    double sum_sq = 0, t0;
    wf_status s = wf_muon_check_step(o->lr, o->grad_norm);
    /* 1, 2: the momentum on the held parts, every u whole at its owner */
    if (s == WF_OK) s = wf_backend_fill(be, sp->x, 0, sp->n * sizeof(float));
    if (s == WF_OK) s = each_part(t, h, nh, part_momentum, o);
    t0 = wf_time_now();
    if (s == WF_OK && t->world > 1) s = wf_comm_reduce_scatter(t->comm, sp->x, own, sp->counts, WF_COMM_SUM, "muon u");
    o->comm_s += wf_time_now() - t0;
    /* 3: the owned matrices' iteration */
    for (int i = 0; s == WF_OK && i < wf_muon_num_matrices(t->muon); i++)
        if (sp->owner[i] == t->rank) s = wf_muon_orthogonalise(t->muon, i, own + (sp->pos[i] - mine), o->lr, &sum_sq);
    /* 4: every X to every rank; the held parameters stepped */
    t0 = wf_time_now();
    if (s == WF_OK && t->world > 1) s = wf_backend_copy(be, sp->x + mine, own, sp->counts[t->rank] * sizeof(float));
    if (s == WF_OK && t->world > 1) s = wf_comm_all_gather(t->comm, sp->x, sp->counts, "muon X");
    if (s == WF_OK && t->world > 1) s = wf_comm_all_reduce_f64(t->comm, &sum_sq, 1, WF_COMM_SUM, "muon rms");
    o->comm_s += wf_time_now() - t0;
    if (s == WF_OK) s = each_part(t, h, nh, part_apply, o);
    size_t nm = wf_muon_numel(t->muon);
    if (s == WF_OK) o->muon_update_rms = nm ? sqrt(sum_sq / (double)nm) : 0;
    free(h);
    return s;
}

wf_status wf__train_muon_step(trainer *t, step_outcome *o, const float *grad) {
    if (!t->muon) return WF_OK;
    wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "muon");
    wf_status s = t->muon_split ? step_split(t, o)
                                : wf_muon_step(t->muon, o->lr, grad, o->grad_norm, &o->muon_update_rms);
    wf_trace_end(span);
    return s;
}
