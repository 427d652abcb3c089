/* DDP's bucketed gradient reducer (contract: include/weft/comm.h; design:
 * docs/distributed.md).
 *
 * Buckets are planned once, over the tensors from the last to the first,
 * because backward finishes the last layers' gradients first: bucket 0
 * holds the last tensors and is the first one ready. As the backward pass
 * reports tensors ready, each complete bucket starts its non-blocking
 * all-reduce, but only in bucket order (bucket b starts after 0..b-1), so
 * that every rank issues the same collectives in the same order even if
 * its tensors became ready in another order: MPI matches collectives by
 * order alone.
 *
 * Overlap needs MPI to make progress while the caller computes. MPI only
 * progresses inside its own calls, so every wf_reducer_ready call also
 * tests all requests in flight (wf_comm_progress); with one call per tensor
 * that is several progress points per layer of backward.
 *
 * The reduction is AVG, or SUM for gradients the caller has already scaled
 * by 1 / world size (wf_reducer_set_op): the trainer folds that scale into
 * its backward, so no pass over the buffer follows the transfer.
 *
 * ZeRO-1's mode (wf_reducer_set_shards) keeps the plan, the order and the
 * hook, and only changes what a bucket starts: a non-blocking
 * reduce-scatter of the bucket's span whose per-rank counts are the span's
 * intersections with the ranks' shards. Shards are contiguous and in rank
 * order, so those parts, laid end to end in rank order, are the span
 * itself: each rank receives its part of the bucket straight into its
 * gradient shard. A bucket inside one rank's shard gives every other rank
 * an empty part (they still join the collective, as MPI requires).
 *
 * Nothing is allocated after create and set_shards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/comm.h"

struct wf_reducer {
    wf_comm *c;
    float *grads;
    int n_tensors, n_buckets;
    int *bucket_of;          /* (n_tensors) */
    int *first, *last;       /* (n_buckets) tensor range [first, last], first <= last */
    wf_comm_span *span;      /* (n_buckets) */
    int *pending;            /* (n_buckets) tensors not ready yet this step */
    unsigned char *ready;    /* (n_tensors) */
    wf_comm_request *req;    /* (n_buckets) */
    int next_start;          /* first bucket not started this step */
    int next_done;           /* first bucket not waited for this step */
    int overlapped, last_overlapped;
    wf_comm_op op;           /* AVG (default) or SUM */
    /* ZeRO-1's mode (shard != NULL): the per-rank counts of each bucket's
     * reduce-scatter and where this rank's part lands in shard. */
    float *shard;
    int world, rank;
    size_t *part_counts;     /* (n_buckets x world) */
    size_t *part_dst;        /* (n_buckets) offset in shard of this rank's part */
};

void wf_reducer_destroy(wf_reducer *r) {
    if (!r) return;
    free(r->bucket_of);
    free(r->first);
    free(r->last);
    free(r->span);
    free(r->pending);
    free(r->ready);
    free(r->req);
    free(r->part_counts);
    free(r->part_dst);
    free(r);
}

static void reset_step(wf_reducer *r) {
    for (int b = 0; b < r->n_buckets; b++) {
        r->pending[b] = r->last[b] - r->first[b] + 1;
        r->req[b] = (wf_comm_request){.slot = -1, .seq = 0};
    }
    memset(r->ready, 0, (size_t)r->n_tensors);
    r->next_start = 0;
    r->next_done = 0;
    r->overlapped = 0;
}

wf_status wf_reducer_create(wf_reducer **out, wf_comm *c, float *grads,
                            const wf_comm_span *tensors, int n_tensors, size_t bucket_bytes) {
    *out = NULL;
    if (!c || !tensors || n_tensors < 1)
        return wf_error(WF_ERR_INVALID, "dist: reducer needs a communicator and at least one tensor");
    for (int i = 0; i < n_tensors; i++) {
        if (tensors[i].numel && !grads)
            return wf_error(WF_ERR_INVALID, "dist: reducer: NULL gradient buffer");
        if (i > 0 && tensors[i].offset < tensors[i - 1].offset + tensors[i - 1].numel)
            return wf_error(WF_ERR_INVALID,
                            "dist: reducer: tensor %d (offset %zu) starts before tensor %d ends "
                            "(offset %zu + %zu floats): tensors must be sorted by offset and "
                            "must not overlap",
                            i, tensors[i].offset, i - 1, tensors[i - 1].offset, tensors[i - 1].numel);
    }
    wf_reducer *r = calloc(1, sizeof *r);
    if (!r) return wf_error(WF_ERR_NOMEM, "dist: out of memory for the reducer");
    r->c = c;
    r->grads = grads;
    r->op = WF_COMM_AVG;
    r->n_tensors = n_tensors;
    size_t nt = (size_t)n_tensors;
    r->bucket_of = calloc(nt, sizeof *r->bucket_of);
    r->first = calloc(nt, sizeof *r->first);
    r->last = calloc(nt, sizeof *r->last);
    r->span = calloc(nt, sizeof *r->span);
    r->pending = calloc(nt, sizeof *r->pending);
    r->ready = calloc(nt, 1);
    r->req = calloc(nt, sizeof *r->req);
    if (!r->bucket_of || !r->first || !r->last || !r->span || !r->pending || !r->ready || !r->req) {
        wf_reducer_destroy(r);
        return wf_error(WF_ERR_NOMEM, "dist: out of memory for the reducer's %d tensors", n_tensors);
    }
    /* Walk from the last tensor to the first, closing a bucket once it
     * holds bucket_bytes. */
    int nb = 0;
    size_t bytes = 0;
    for (int i = n_tensors - 1; i >= 0; i--) {
        if (bytes == 0) r->last[nb] = i;
        r->first[nb] = i;
        r->bucket_of[i] = nb;
        bytes += tensors[i].numel * sizeof(float);
        if (bytes >= bucket_bytes || i == 0) {
            size_t lo = tensors[r->first[nb]].offset;
            size_t hi = tensors[r->last[nb]].offset + tensors[r->last[nb]].numel;
            r->span[nb] = (wf_comm_span){lo, hi - lo};
            nb++;
            bytes = 0;
        }
    }
    r->n_buckets = nb;
    reset_step(r);
    *out = r;
    return WF_OK;
}

wf_status wf_reducer_set_op(wf_reducer *r, wf_comm_op op) {
    if (op != WF_COMM_AVG && op != WF_COMM_SUM)
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: op %d is neither AVG nor SUM (gradients are averaged, or "
                        "summed after the caller scaled them by 1 / world size)",
                        (int)op);
    if (r->next_start > 0)
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: cannot change the op while %d bucket(s) of this step have "
                        "started; call wf_reducer_finish first",
                        r->next_start);
    r->op = op;
    return WF_OK;
}

wf_status wf_reducer_set_shards(wf_reducer *r, const wf_zero1_plan *p, int rank, float *shard) {
    int w = wf_comm_size(r->c);
    if (!p || !shard || p->world != w || rank != wf_comm_rank(r->c))
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: set_shards needs this rank's plan (%d ranks) and shard "
                        "buffer (got %s plan of %d ranks for rank %d, shard %s)",
                        w, p ? "a" : "no", p ? p->world : 0, rank, shard ? "set" : "NULL");
    if (r->next_start > 0)
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: cannot switch to shards while %d bucket(s) of this step "
                        "have started; call wf_reducer_finish first",
                        r->next_start);
    /* The buckets must tile the plan's buffer, or some shard floats would
     * never be written. Bucket 0 holds the last tensors. */
    size_t end = 0;
    for (int b = r->n_buckets - 1; b >= 0; b--) {
        if (r->span[b].offset != end)
            return wf_error(WF_ERR_INVALID,
                            "dist: reducer: bucket %d starts at float %zu, not at %zu where the "
                            "previous one ends: ZeRO-1's buckets must cover the gradient buffer "
                            "without gaps (tensors from offset 0, back to back)",
                            b, r->span[b].offset, end);
        end += r->span[b].numel;
    }
    if (end != p->n)
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: the buckets cover %zu floats, the ZeRO-1 plan %zu: plan "
                        "the shards over the same gradient buffer",
                        end, p->n);
    size_t nb = (size_t)r->n_buckets, nw = (size_t)w;
    size_t *counts = calloc(nb * nw, sizeof *counts), *dst = calloc(nb, sizeof *dst);
    if (!counts || !dst) {
        free(counts);
        free(dst);
        return wf_error(WF_ERR_NOMEM, "dist: out of memory for the reducer's %d bucket parts",
                        r->n_buckets);
    }
    for (size_t b = 0; b < nb; b++) {
        size_t a = r->span[b].offset, e = a + r->span[b].numel;
        for (size_t q = 0; q < nw; q++) {
            size_t lo = p->offsets[q], hi = lo + p->counts[q];
            lo = lo > a ? lo : a;
            hi = hi < e ? hi : e;
            counts[b * nw + q] = hi > lo ? hi - lo : 0;
        }
        size_t mine = p->offsets[rank];
        dst[b] = a > mine ? a - mine : 0;
    }
    free(r->part_counts);
    free(r->part_dst);
    r->part_counts = counts;
    r->part_dst = dst;
    r->shard = shard;
    r->world = w;
    r->rank = rank;
    return WF_OK;
}

int wf_reducer_num_buckets(const wf_reducer *r) { return r->n_buckets; }

wf_comm_span wf_reducer_bucket(const wf_reducer *r, int b, int *first_tensor, int *last_tensor) {
    if (b < 0 || b >= r->n_buckets) {
        if (first_tensor) *first_tensor = -1;
        if (last_tensor) *last_tensor = -1;
        return (wf_comm_span){0, 0};
    }
    if (first_tensor) *first_tensor = r->first[b];
    if (last_tensor) *last_tensor = r->last[b];
    return r->span[b];
}

int wf_reducer_bucket_of(const wf_reducer *r, int tensor) {
    return tensor >= 0 && tensor < r->n_tensors ? r->bucket_of[tensor] : -1;
}

int wf_reducer_overlapped(const wf_reducer *r) { return r->last_overlapped; }

static wf_status start_bucket(wf_reducer *r, int b) {
    /* MPI matches collectives by order alone: a bucket started out of turn
     * on one rank would be summed with another bucket of another rank. */
    WF_CHECK(b == r->next_start && b >= r->next_done && b < r->n_buckets,
             "dist: reducer: bucket %d started while bucket %d is next (of %d, %d done)", b, r->next_start,
             r->n_buckets, r->next_done);
    char tag[48];
    snprintf(tag, sizeof tag, "grad bucket %d/%d", b, r->n_buckets);
    /* Keep within the communicator's request pool: buckets complete in
     * order, so wait for the oldest. */
    if (b - r->next_done >= WF_COMM_MAX_REQUESTS) {
        WF_TRY(wf_comm_wait(r->c, &r->req[r->next_done]));
        r->next_done++;
    }
    const wf_comm_span *s = &r->span[b];
    if (r->shard) {
        const size_t *counts = r->part_counts + (size_t)b * (size_t)r->world;
        float *dst = counts[r->rank] ? r->shard + r->part_dst[b] : NULL;
        return wf_comm_ireduce_scatter(r->c, r->grads + s->offset, dst, counts, r->op, tag, &r->req[b]);
    }
    return wf_comm_iall_reduce(r->c, r->grads + s->offset, s->numel, r->op, tag, &r->req[b]);
}

wf_status wf_reducer_ready(wf_reducer *r, int tensor) {
    if (tensor < 0 || tensor >= r->n_tensors)
        return wf_error(WF_ERR_INVALID, "dist: reducer: tensor %d is not in 0..%d", tensor,
                        r->n_tensors - 1);
    if (r->ready[tensor])
        return wf_error(WF_ERR_INVALID,
                        "dist: reducer: tensor %d was reported ready twice in one step (bucket "
                        "%d); report each tensor once per step, after its last gradient",
                        tensor, r->bucket_of[tensor]);
    r->ready[tensor] = 1;
    r->pending[r->bucket_of[tensor]]--;
    while (r->next_start < r->n_buckets && r->pending[r->next_start] == 0) {
        WF_TRY(start_bucket(r, r->next_start));
        r->next_start++;
        r->overlapped++;
    }
    return wf_comm_progress(r->c);
}

wf_status wf_reducer_finish(wf_reducer *r) {
    /* Every bucket is started and waited for even after a failure, so that
     * no request is left in flight; the first failure is the error. */
    wf_error_keep first = WF_ERROR_KEEP_INIT;
    while (r->next_start < r->n_buckets) {
        wf_error_keep_note(&first, start_bucket(r, r->next_start));
        r->next_start++;
    }
    for (int b = r->next_done; b < r->n_buckets; b++) wf_error_keep_note(&first, wf_comm_wait(r->c, &r->req[b]));
    r->last_overlapped = r->overlapped;
    reset_step(r);
    return wf_error_keep_restore(&first);
}
