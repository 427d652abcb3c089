/* The memory and communication planner (weft/plan.h). The memory of a
 * (shard, recompute) pair is measured: the trainer's own allocation code
 * (wf__train_allocate, src/train/train_setup.c, with the strategy's
 * buffers from strategy.c and train_shard.c) runs as rank 0 of W on a
 * plan-only arena (wf_arena_create_plan), which counts every block and
 * allocates none, so the plan and `weft train` cannot drift. The config is
 * read with the trainer's own checks (wf__train_check_keys,
 * wf__train_strategy_of, wf__train_batch_shape), so what it refuses the
 * plan refuses in the same words. The communication is still the ring
 * formulas of docs/distributed.md, "Planning memory".
 * tests/unit/test_plan.c checks the memory against a real arena's
 * counters, tests/py/test_plan.py against `weft train`'s run.json. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/comm.h"
#include "weft/shard.h"
#include "weft/thread.h"
#include "weft/plan.h"

#define SHARD_NAME_(name, str) str,
static const char *const shard_names_[] = {WF_PLAN_SHARDS(SHARD_NAME_)};
static const char *const recompute_names_[] = {WF_PLAN_RECOMPUTES(SHARD_NAME_)};
#undef SHARD_NAME_

const char *wf_plan_shard_name(wf_plan_shard s) {
    return (int)s >= 0 && s < WF_PLAN_N_SHARDS ? shard_names_[s] : NULL;
}
const char *wf_plan_recompute_name(wf_plan_recompute r) {
    return (int)r >= 0 && r < WF_PLAN_N_RECOMPUTES ? recompute_names_[r] : NULL;
}
int wf_plan_shard_parse(const char *name) {
    for (int i = 0; name && i < WF_PLAN_N_SHARDS; i++)
        if (strcmp(name, shard_names_[i]) == 0) return i;
    return -1;
}
int wf_plan_recompute_parse(const char *name) {
    for (int i = 0; name && i < WF_PLAN_N_RECOMPUTES; i++)
        if (strcmp(name, recompute_names_[i]) == 0) return i;
    return -1;
}

/* The model's sizes, as src/model names them. */
typedef struct {
    size_t C, L, NH, NKV, HD, H, V, QKV, KV, P;
} dims_;

static dims_ dims_of(const wf_model_config *c) {
    dims_ d;
    d.C = (size_t)c->dim, d.L = (size_t)c->n_layers, d.NH = (size_t)c->n_heads;
    d.NKV = (size_t)c->n_kv_heads, d.HD = d.C / d.NH, d.H = (size_t)wf_model_config_hidden_dim(c);
    d.V = (size_t)c->vocab_size, d.KV = d.NKV * d.HD, d.QKV = (d.NH + 2 * d.NKV) * d.HD;
    d.P = wf_model_config_num_params(c);
    return d;
}

/* Parameters of one transformer block. */
static size_t layer_params(const dims_ *d) { return 2 * d->C + d->C * d->QKV + d->C * d->C + 3 * d->H * d->C; }

/* The model's recompute mode of a plan's (the same three, by name). */
static wf_model_recompute model_recompute(wf_plan_recompute r) {
    switch (r) {
    case WF_PLAN_RECOMPUTE_BLOCK: return WF_RECOMPUTE_BLOCK;
    case WF_PLAN_RECOMPUTE_SELECTIVE: return WF_RECOMPUTE_SELECTIVE;
    default: return WF_RECOMPUTE_NONE;
    }
}

/* The largest rank's shard of n floats (rank 0's slice, wf_zero1_slice_of). */
static size_t zero1_shard(size_t n, size_t W) { return wf_zero1_slice_of(n, (int)W, 0, 16).count; }

/* The sharding units of FSDP (wf_model_num_units) for its communication:
 * the embedding, each block, the final norm with an untied head (a tied
 * head is the embedding's tensor, unit 0). Per unit: its length and rank
 * 0's piece (wf_zero1_slice_of, the trainer's slice), the largest. */
typedef struct {
    int n, tied;
    size_t *len, *off, *piece, *fsdp_part;
} units_;

static void units_free(units_ *u) {
    free(u->len), free(u->off), free(u->piece), free(u->fsdp_part);
}

static wf_status units_make(const dims_ *d, int tied, size_t W, units_ *u) {
    memset(u, 0, sizeof *u);
    u->n = (int)d->L + 2, u->tied = tied;
    size_t n = (size_t)u->n;
    u->len = calloc(n, sizeof *u->len), u->off = calloc(n, sizeof *u->off);
    u->piece = calloc(n, sizeof *u->piece), u->fsdp_part = calloc(n, sizeof *u->fsdp_part);
    if (!u->len || !u->off || !u->piece || !u->fsdp_part) {
        units_free(u);
        return wf_error(WF_ERR_NOMEM, "plan: out of memory for %zu units", n);
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        u->len[i] = i == 0 ? d->V * d->C : i + 1 < n ? layer_params(d) : d->C + (tied ? 0 : d->V * d->C);
        u->off[i] = off;
        wf_zero1_slice sl = wf_zero1_slice_of(u->len[i], (int)W, 0, 16);
        u->piece[i] = sl.size;
        u->fsdp_part[i] = sl.count;
        off += u->len[i];
    }
    return WF_OK;
}

/* FSDP's all-gathers in one optimizer step of `accum` micro-batches, as
 * the trainer's two rotating gather buffers serve them (src/train/
 * train_shard.c): a unit is gathered before its forward and its backward
 * unless one of the two buffers still holds it; at each unit the next one
 * (forward) or the previous one (backward) is prefetched into the other
 * buffer; a tied embedding has a buffer of its own, gathered once a step.
 * Adds to *bytes rank 0's sent bytes (W - 1 times its piece, per gather)
 * and returns the number of gathers. */
static int fsdp_gathers(const units_ *u, size_t W, int accum, double *bytes) {
    int holds[2] = {-1, -1}, in_use = -1, e_valid = 0, gathers = 0;
#define GATHER_(x) (gathers++, *bytes += 4.0 * (double)(W - 1) * (double)u->fsdp_part[x])
#define SLOT_(x) (holds[0] == (x) ? 0 : holds[1] == (x) ? 1 : -1)
#define ACQUIRE_(x)                                                 \
    do {                                                            \
        if ((x) == 0 && u->tied) {                                  \
            if (!e_valid) GATHER_(0), e_valid = 1;                  \
            break;                                                  \
        }                                                           \
        int k_ = SLOT_(x);                                          \
        if (k_ < 0) k_ = in_use == 0 ? 1 : 0, holds[k_] = (x), GATHER_(x); \
        in_use = k_;                                                \
    } while (0)
#define PREFETCH_(x)                                                                        \
    do {                                                                                    \
        if ((x) < 0 || (x) >= u->n || ((x) == 0 && u->tied) || SLOT_(x) >= 0) break;        \
        int k_ = in_use == 0 ? 1 : 0;                                                       \
        holds[k_] = (x), GATHER_(x);                                                        \
    } while (0)
    for (int a = 0; a < accum; a++) {
        for (int i = 0; i < u->n; i++) {
            ACQUIRE_(i);
            PREFETCH_(i + 1);
            in_use = -1;
        }
        for (int i = u->n - 1; i >= 0; i--) {
            if (i == u->n - 1 && u->tied) ACQUIRE_(0);
            ACQUIRE_(i);
            PREFETCH_(i - 1);
            in_use = -1;
        }
    }
#undef GATHER_
#undef SLOT_
#undef ACQUIRE_
#undef PREFETCH_
    return gathers;
}

static wf_status check_input(const wf_plan_input *in) {
    WF_TRY(wf_model_config_validate(&in->model));
    if (in->world < 1) return wf_error(WF_ERR_INVALID, "plan: world size %d, need at least 1 rank", in->world);
    if (in->micro_batch < 1)
        return wf_error(WF_ERR_INVALID, "plan: %d sequences per rank, need at least 1", in->micro_batch);
    if (in->seq_len < 1 || in->seq_len > in->model.max_seq_len)
        return wf_error(WF_ERR_INVALID, "plan: sequence length %d is outside 1..model.max_seq_len = %d", in->seq_len,
                        in->model.max_seq_len);
    if (in->accum < 1) return wf_error(WF_ERR_INVALID, "plan: %d micro-batches per step, need at least 1", in->accum);
    if (in->tp > 1) {
        if (in->world % in->tp != 0)
            return wf_error(WF_ERR_CONFIG, "plan: dist.tp = %d does not divide the %d ranks (%d %% %d = %d)", in->tp,
                            in->world, in->world, in->tp, in->world % in->tp);
        WF_TRY(wf_model_tp_check(&in->model, in->tp));
    }
    if (in->threads < 1) return wf_error(WF_ERR_INVALID, "plan: %d threads, need at least 1", in->threads);
    if ((size_t)in->micro_batch * (size_t)in->seq_len > (size_t)INT32_MAX / 2)
        return wf_error(WF_ERR_RANGE, "plan: %d x %d rows per rank is more than the model plans", in->micro_batch,
                        in->seq_len);
    return WF_OK;
}

/* A plan allocates and never runs: the tensor-parallel model's collectives
 * must exist (wf_model_create_tp checks) and are never called. */
static wf_status plan_no_all_reduce(void *ctx, float *buf, size_t n, wf_model_tp_op op, const char *tag) {
    (void)ctx, (void)buf, (void)n, (void)op;
    return wf_error(WF_ERR_INTERNAL, "plan: %s: a plan runs no collective", tag);
}
static wf_status plan_no_all_gather(void *ctx, float *buf, size_t n, const char *tag) {
    return plan_no_all_reduce(ctx, buf, n, WF_MODEL_TP_SUM, tag);
}
static wf_status plan_no_reduce_scatter(void *ctx, const float *send, float *recv, size_t n, const char *tag) {
    (void)send;
    return plan_no_all_reduce(ctx, recv, n, WF_MODEL_TP_SUM, tag);
}

wf_status wf_plan_memory_of(const wf_plan_input *in, wf_plan_shard s, wf_plan_recompute r, wf_plan_memory *out) {
    memset(out, 0, sizeof *out);
    WF_TRY(check_input(in));
    if (!wf_plan_shard_name(s) || !wf_plan_recompute_name(r))
        return wf_error(WF_ERR_INVALID, "plan: unknown mode %d/%d", (int)s, (int)r);
    /* Rank 0 (it holds the largest slices) of a trainer that only
     * allocates: the trainer's own code (wf__train_allocate: the model,
     * its activations, the strategy's buffers, the token buffers) on a
     * plan-only arena, which counts every block and allocates none. */
    trainer t = {.mc = in->model, .world = in->world, .rank = 0, .Bl = in->micro_batch, .T = in->seq_len,
                 .plan_only = 1};
    /* What the allocation reads of a config: the mode, and Muon's
     * settings when it plans Muon (its buffers do not depend on them). */
    wf_train_config tc = {.dist_shard = (char *)wf_plan_shard_name(s), .optim_name = (char *)(in->muon ? "muon" : "adamw"),
                          .lr = 1, .muon_momentum = 0.95, .muon_nesterov = 1, .muon_ns_steps = 5,
                          .muon_scale = (char *)"reference", .grad_clip = 1};
    t.tc = &tc;
    int tp = in->tp > 1 ? in->tp : 1;
    if (tp > 1 && s != WF_PLAN_DDP)
        return wf_error(WF_ERR_CONFIG, "plan: dist.tp = %d composes with ddp only (not %s)", tp, wf_plan_shard_name(s));
    t.world = in->world / tp; /* the dp axis: the trainer's world */
    if (tp > 1)
        t.tp = (wf_model_tp){.size = tp, .rank = 0, .ops = {plan_no_all_reduce, NULL, plan_no_all_gather,
                                                            plan_no_reduce_scatter},
                             .sequence_parallel = in->sequence_parallel};
    WF_TRY(wf__train_strategy_of(&tc, t.world, 0, &t.strat));
    /* the activations' scratch is per thread: the plan's threads */
    int threads = wf_kern_threads();
    wf_kern_set_threads(in->threads);
    wf_adamw_config ac = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .skip_muon = in->muon};
    wf_status st = wf_arena_create_plan(&t.arena, 0);
    if (st == WF_OK) st = wf__train_allocate(&t, &ac, (int)model_recompute(r));
    wf_kern_set_threads(threads);
    size_t logits = 0;
    wf_model_config lc = in->model;
    lc.vocab_size /= tp; /* a tp rank's logits are its vocabulary slice's (divisible: checked) */
    if (st == WF_OK) st = wf_model_plan_logits_bytes(&lc, in->micro_batch, in->seq_len, &logits);
    if (st == WF_OK) {
        out->params = t.part[WF__PART_PARAMS];
        out->grads = t.part[WF__PART_GRADS];
        out->optimizer = t.part[WF__PART_OPTIMIZER];
        out->buckets = t.part[WF__PART_BUCKETS];
        out->gather = t.part[WF__PART_GATHER];
        out->logits = logits;
        out->activations = t.part[WF__PART_ACTIVATIONS] - logits;
        out->batch = t.part[WF__PART_BATCH];
        out->total = wf_arena_get_stats(t.arena).in_use;
    }
    wf__train_free(&t);
    return st;
}

/* DDP's buckets (wf_reducer_create): the tensors from the last to the
 * first, a bucket closed once it holds >= bucket_bytes. */
static int count_buckets(const dims_ *d, int tied, size_t bucket_bytes) {
    size_t sizes[9] = {d->H * d->C, d->H * d->C, d->H * d->C, d->C, d->C * d->C, d->KV * d->C, d->KV * d->C,
                       d->C * d->C, d->C}; /* one block, last tensor first */
    size_t cap = bucket_bytes ? bucket_bytes : 1, fill = 0;
    int n = 0;
#define ADD_(numel)                        \
    do {                                   \
        fill += 4 * (numel);               \
        if (fill >= cap) n++, fill = 0;    \
    } while (0)
    if (!tied) ADD_(d->V * d->C);
    ADD_(d->C);
    for (size_t l = 0; l < d->L; l++)
        for (int i = 0; i < 9; i++) ADD_(sizes[i]);
    ADD_(d->V * d->C);
#undef ADD_
    return n + (fill > 0);
}

/* The most floats of Muon matrices one rank owns under the trainer's
 * assignment (wf__train_muon_assign), over the blocks' matrices in their
 * buffer order: q, k, v, o, gate, up, down. */
static wf_status muon_most_owned(const dims_ *d, int world, size_t *most) {
    *most = 0;
    size_t n = 7 * d->L;
    int *rows = calloc(n ? n : 1, sizeof *rows), *cols = calloc(n ? n : 1, sizeof *cols);
    int *owner = calloc(n ? n : 1, sizeof *owner);
    size_t *per = calloc((size_t)world, sizeof *per);
    wf_status s = rows && cols && owner && per ? WF_OK : wf_error(WF_ERR_NOMEM, "plan: out of memory");
    int C = (int)d->C, KV = (int)d->KV, H = (int)d->H;
    const int shapes[7][2] = {{C, C}, {KV, C}, {KV, C}, {C, C}, {H, C}, {H, C}, {C, H}};
    for (size_t i = 0; s == WF_OK && i < n; i++) rows[i] = shapes[i % 7][0], cols[i] = shapes[i % 7][1];
    if (s == WF_OK) s = wf__train_muon_assign((int)n, rows, cols, world, owner, NULL);
    for (size_t i = 0; s == WF_OK && i < n; i++) per[owner[i]] += (size_t)rows[i] * (size_t)cols[i];
    for (int q = 0; s == WF_OK && q < world; q++)
        if (per[q] > *most) *most = per[q];
    free(rows), free(cols), free(owner), free(per);
    return s;
}

wf_status wf_plan_comm_of(const wf_plan_input *in, wf_plan_shard s, wf_plan_comm *out) {
    memset(out, 0, sizeof *out);
    WF_TRY(check_input(in));
    if (!wf_plan_shard_name(s)) return wf_error(WF_ERR_INVALID, "plan: unknown mode %d", (int)s);
    if (in->world == 1) return WF_OK;
    dims_ d = dims_of(&in->model);
    if (in->tp > 1) {
        /* DDP over the dp axis of each rank's slice: the RMSNorm weights
         * whole, every other tensor 1/tp. The tp axis's activations are
         * not planned yet (docs/distributed.md). */
        if (s != WF_PLAN_DDP)
            return wf_error(WF_ERR_CONFIG, "plan: dist.tp = %d composes with ddp only (not %s)", in->tp,
                            wf_plan_shard_name(s));
        double dp = in->world / in->tp, norms = (double)((2 * d.L + 1) * d.C);
        double local = norms + ((double)d.P - norms) / in->tp;
        out->all_reduce = dp > 1 ? 2.0 * (dp - 1) / dp * 4.0 * local : 0;
        out->total = out->all_reduce;
        /* tp axis, per micro-batch of N = B T rows (docs/model.md): 4L + 2
         * exchanges of the (N, C) activations (each block two forward, two
         * backward; the embedding's forward, the final norm's input
         * gradient backward), the loss's MAX of N floats and SUM of 2N.
         * With SP each exchange is an all-gather plus a reduce-scatter
         * (ring: (tp-1)/tp of the buffer each) and the norm weights'
         * gradients add 2L + 1 all-reduces of C floats; without, an
         * all-reduce (ring: 2 (tp-1)/tp). */
        double P = in->tp, A = in->accum, N = (double)in->micro_batch * in->seq_len;
        double act = 4.0 * N * (double)d.C, ring = (P - 1) / P, ex = 4.0 * (double)d.L + 2;
        double ar = 4.0 * N + 8.0 * N;
        int calls = 2;
        if (in->sequence_parallel) {
            out->tp_all_gather = A * ex * ring * act;
            out->tp_reduce_scatter = A * ex * ring * act;
            ar += (2.0 * (double)d.L + 1) * 4.0 * (double)d.C;
            calls += 2 * (int)ex + 2 * (int)d.L + 1;
        } else {
            ar += ex * act;
            calls += (int)ex;
        }
        out->tp_all_reduce = A * 2.0 * ring * ar;
        out->tp_total = out->tp_all_reduce + out->tp_all_gather + out->tp_reduce_scatter;
        out->tp_collectives_per_step = (int)A * calls;
        return WF_OK;
    }
    double W = in->world, A = in->accum;
    int buckets = count_buckets(&d, in->model.tied_embeddings, in->bucket_bytes);
    /* A ring reduce-scatter or all-gather: W - 1 rounds, each sending one
     * rank's part; with padded shards the largest part is the shard. */
    double shard_bytes = 4.0 * (double)zero1_shard(d.P, (size_t)in->world);
    switch (s) {
    case WF_PLAN_DDP:
        out->all_reduce = 2.0 * (W - 1) / W * 4.0 * (double)d.P;
        out->collectives_per_step = buckets;
        break;
    case WF_PLAN_ZERO1:
        out->reduce_scatter = (W - 1) * shard_bytes;
        out->all_gather = (W - 1) * shard_bytes;
        out->collectives_per_step = buckets + 1;
        break;
    case WF_PLAN_ZERO2:
        /* no full gradient to accumulate into: every micro-batch
         * reduce-scatters each unit's gradient into the shards */
        out->reduce_scatter = A * (W - 1) * shard_bytes;
        out->all_gather = (W - 1) * shard_bytes;
        out->collectives_per_step = (int)A * ((int)d.L + 2) + 1;
        break;
    case WF_PLAN_FSDP: {
        /* per micro-batch each unit's gradient reduce-scattered; the
         * units all-gathered for the forward and again for the backward
         * (fsdp_gathers: what the two buffers still hold is not) */
        units_ u;
        WF_TRY(units_make(&d, in->model.tied_embeddings, (size_t)in->world, &u));
        double pieces = 0;
        for (int i = 0; i < u.n; i++) pieces += 4.0 * (double)u.fsdp_part[i];
        out->reduce_scatter = A * (W - 1) * pieces;
        int gathers = fsdp_gathers(&u, (size_t)in->world, in->accum, &out->all_gather);
        out->collectives_per_step = (int)A * u.n + gathers;
        units_free(&u);
        break;
    }
    default:
        break;
    }
    if (in->muon && s != WF_PLAN_DDP) {
        /* Muon's split (train_muon.c): a reduce-scatter of every u to its
         * owner and an all-gather of the results, each (W - 1) times the
         * most floats a rank owns */
        size_t most;
        WF_TRY(muon_most_owned(&d, in->world, &most));
        out->reduce_scatter += (W - 1) * 4.0 * (double)most;
        out->all_gather += (W - 1) * 4.0 * (double)most;
        out->collectives_per_step += 2;
    }
    out->total = out->all_reduce + out->reduce_scatter + out->all_gather;
    return WF_OK;
}

wf_status wf_plan_max_micro_batch(const wf_plan_input *in, wf_plan_shard s, wf_plan_recompute r, size_t budget,
                                  int max_micro, int *out) {
    *out = 0;
    wf_plan_input x = *in;
    x.micro_batch = 1;
    wf_plan_memory m;
    WF_TRY(wf_plan_memory_of(&x, s, r, &m));
    if (m.total > budget || max_micro < 1) return WF_OK;
    /* The total grows with the batch: the largest fitting one by bisection
     * over [lo fits, hi does not]. */
    int lo = 1, hi = max_micro + 1;
    int64_t rows_cap = (int64_t)INT32_MAX / 2 / x.seq_len;
    if (hi > rows_cap + 1) hi = (int)rows_cap + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        x.micro_batch = mid;
        WF_TRY(wf_plan_memory_of(&x, s, r, &m));
        if (m.total <= budget) lo = mid;
        else hi = mid;
    }
    *out = lo;
    return WF_OK;
}

wf_status wf_plan_from_train_config(const wf_train_config *tc, int world, wf_plan_input *out, int *shard,
                                    int *recompute) {
    memset(out, 0, sizeof *out);
    if (world < 1) return wf_error(WF_ERR_INVALID, "plan: --world-size %d, need at least 1", world);
    /* The trainer's own checks, in its words (train_setup.c): what it
     * refuses, the plan refuses the same way. */
    WF_TRY(wf__train_check_keys(tc, NULL));
    uint32_t vocab = 0;
    int have_data = tc->data_dir && tc->data_dir[0];
    if (have_data) {
        wf_dataset_info info;
        wf_status s = wf_dataset_info_load(&info, tc->data_dir);
        if (s != WF_OK) return wf_error_wrap(s, "plan: data.dir: ");
        vocab = info.vocab_size;
        wf_dataset_info_free(&info);
    } else if (!tc->vocab_size && !(tc->ckpt_init_from && *tc->ckpt_init_from)) {
        return wf_error(WF_ERR_CONFIG, "plan: the vocabulary is unknown: give model.vocab_size, or data.dir (the "
                                       "dataset's vocabulary, as weft train takes it)");
    }
    WF_TRY(wf_train_model_config(tc, vocab, &out->model, NULL, 0));
    int tp = tc->dist_tp > 1 ? (int)tc->dist_tp : 1;
    if (world % tp != 0)
        return wf_error(WF_ERR_CONFIG, "plan: dist.tp = %d does not divide --world-size %d (%d %% %d = %d)", tp, world,
                        world, tp, world % tp);
    train_batch b;
    WF_TRY(wf__train_batch_shape(tc, world / tp, out->model.max_seq_len, &b)); /* split over dp */
    out->world = world;
    out->tp = tp;
    out->sequence_parallel = tp > 1 && tc->dist_sequence_parallel;
    out->micro_batch = b.Bl;
    out->seq_len = b.T;
    out->accum = b.accum;
    /* The trainer's threads: the attention scratch is per thread. */
    int threads = tc->threads ? (int)tc->threads : wf_default_threads();
    wf_kern_set_threads(threads);
    out->threads = wf_kern_threads();
    out->bucket_bytes = (size_t)(tc->dist_bucket_mb * 1e6);
    if (!out->bucket_bytes) out->bucket_bytes = 1;
    out->muon = tc->optim_name && strcmp(tc->optim_name, "muon") == 0;
    const train_strategy *st;
    WF_TRY(wf__train_strategy_of(tc, world / tp, 0, &st));
    if (tp > 1 && strcmp(st->name, "ddp") != 0)
        return wf_error(WF_ERR_CONFIG, "plan: dist.tp = %d with dist.shard = %s: tensor parallelism composes with ddp "
                                       "only for now",
                        tp, st->name);
    if (shard) *shard = wf_plan_shard_parse(st->name);
    if (recompute) *recompute = wf_plan_recompute_parse(tc->recompute ? tc->recompute : "none");
    return WF_OK;
}

wf_status wf_plan_parse_bytes(const char *text, size_t *bytes) {
    *bytes = 0;
    if (!text || !*text) return wf_error(WF_ERR_CONFIG, "a size is empty: give bytes, e.g. 8GiB or 512MB");
    char *end;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    double unit = 1;
    const char *u = end;
    static const char prefixes[] = "KMGT";
    const char *p = *u ? strchr(prefixes, toupper((unsigned char)*u)) : NULL;
    if (p && *u) {
        int k = (int)(p - prefixes) + 1;
        if (u[1] == 'i' && (u[2] == 'B' || u[2] == 'b') && !u[3]) unit = pow(1024.0, k);
        else if ((u[1] == 'B' || u[1] == 'b') && !u[2]) unit = pow(1000.0, k);
        else if (!u[1]) unit = pow(1024.0, k); /* "8G": GiB, as most tools read it */
        else u = NULL;
    } else if (*u && !((*u == 'B' || *u == 'b') && !u[1])) {
        u = NULL;
    }
    if (end == text || !u || !(v >= 0) || v * unit > 1.8e19)
        return wf_error(WF_ERR_CONFIG, "'%s' is not a size: give bytes with an optional unit, e.g. 8GiB, 512MiB, 1.5GB",
                        text);
    *bytes = (size_t)(v * unit);
    return WF_OK;
}
