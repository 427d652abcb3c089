/* One optimizer step of the trainer (train_impl.h), and the validation
 * loss. A step is: the micro-batches' forward and backward, the gradient
 * summed over ranks (during the backward, by buckets or by units: the
 * strategy's, strategy.c), then the same three stages in every mode (any
 * dist.shard, any spike.action): the global gradient norm, the judgement,
 * and the strategy's update or none. Judging before the update is what lets a spike's update be
 * dropped; with spike.action = warn the step is judged the same way and
 * updated anyway. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/trace.h"

/* The model's backward hook (last micro-batch of a step): the tensors in
 * floats [offset, offset + numel) have their final gradient, so their
 * buckets may start their all-reduce while backward goes on. */
static void grad_ready(void *ctx, size_t offset, size_t numel) {
    trainer *t = ctx;
    int nt = wf_model_num_tensors(t->model);
    /* The first tensor at or after offset (tensors are in buffer order). */
    int lo = 0, hi = nt;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (wf_model_tensor(t->model, mid)->offset < offset) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < nt && t->hook_status == WF_OK; i++) {
        if (wf_model_tensor(t->model, i)->offset >= offset + numel) break;
        t->hook_status = wf_reducer_ready(t->reducer, i);
    }
}

/* WEFT_TEST_DATA_DUMP's line for one micro-batch (train_setup.c). */
static void dump_batch(trainer *t, int64_t step, int k, const wf_batch *b) {
    FILE *f = t->data_dump;
    fprintf(f, "%lld %d %llu %llu", (long long)step + 1, k, (unsigned long long)b->state.epoch,
            (unsigned long long)b->state.sample);
    size_t row = (size_t)b->seq_len + 1;
    for (int i = 0; i < b->batch; i++)
        for (int j = 0; j < b->seq_len; j++) fprintf(f, " %d", (int)b->tokens[(size_t)i * row + (size_t)j]);
    fputc('\n', f);
    fflush(f);
}

/* Forward and backward over the step's o->accum micro-batches: the
 * gradients of this rank's part of the global batch, scaled by
 * 1 / (micro-batches x world). */
static wf_status forward_backward(trainer *t, int64_t step, step_outcome *o) {
    wf_model_zero_grad(t->model);
    wf__train_units_begin_step(t); /* zero2, fsdp: the gradient shard, where micro-batches accumulate */
    /* The mean over the global batch is the sum over ranks of each rank's
     * gradient scaled by 1 / world: the scale goes into the backward's (it
     * costs nothing there) and the ranks' gradients are summed, as PyTorch
     * DDP divides before its all-reduce. No pass over the gradient follows
     * the transfer, as AVG's division would. For a world size that is a
     * power of two the bits are those of summing and then dividing (scaling
     * by 2^-k commutes with every rounding, barring underflow); for others
     * 1 / (accum x world) is rounded once, so the result may differ from
     * that mean in the last bit (docs/distributed.md). */
    const float grad_scale = 1.0f / (float)(o->accum * t->world);
    for (int k = 0; k < o->accum; k++) {
        double ta = wf_time_now();
        const wf_batch *b;
        wf_trace_span span = wf_trace_begin(WF_TRACE_DATA_WAIT, "data wait");
        wf_status s = wf_loader_next(t->train, &b);
        wf_trace_end(span);
        WF_TRY(s);
        wf__train_split_batch(b, t->inputs, t->targets);
        if (t->data_dump) dump_batch(t, step, k, b);
        if (k == 0) o->data_pos = wf__train_data_position(t, b->state);
        if (k == 0 && t->mix.n) t->mix.step_start = *b->mix; /* for a rewind (nonfinite.c) */
        double tb = wf_time_now();
        o->data_s += tb - ta;
        float l = 0;
        span = wf_trace_begin(WF_TRACE_REGION, "forward");
        s = wf_model_forward(t->model, t->inputs, t->targets, t->Bl, t->T, &l);
        wf_trace_end(span);
        WF_TRY(s);
        WF_TRY(wf__train_mix_account(t, b, o)); /* a mixture: the rows' sources and losses */
        span = wf_trace_begin(WF_TRACE_REGION, "backward");
        /* The last micro-batch's backward finishes the gradients: buckets
         * start reducing as it goes (DDP's overlap). */
        int hook = t->reducer && k == o->accum - 1;
        if (hook) {
            t->hook_status = WF_OK;
            wf_model_set_grad_hook(t->model, grad_ready, t);
        }
        s = wf_model_backward(t->model, grad_scale);
        if (hook) {
            wf_model_set_grad_hook(t->model, NULL, NULL);
            if (s == WF_OK) s = t->hook_status;
        }
        wf_trace_end(span);
        WF_TRY(s);
        o->loss += (double)l / o->accum;
        o->fwd_bwd_s += wf_time_now() - tb;
    }
    return WF_OK;
}

/* The judgement. A non-finite loss or gradient norm is the non-finite
 * guard's (nonfinite.c): no update, and the spike detector does not see
 * it. Otherwise the spike detector sees the step's loss and norm (the same
 * on every rank, so every rank decides the same); a spike's update is
 * dropped with spike.action = skip and rollback. */
static void judge(trainer *t, step_outcome *o) {
    if (!isfinite(o->loss)) o->nonfinite |= WF__NONFINITE_LOSS;
    if (!isfinite(o->grad_norm)) o->nonfinite |= WF__NONFINITE_GRADS;
    if (o->nonfinite) {
        o->skipped = 1;
        return;
    }
    o->spike = wf_spike_check(&t->spike, o->loss, o->grad_norm);
    o->skipped = o->spike.spike && t->spike_action != WF_SPIKE_WARN;
}

wf_status wf__train_step(trainer *t, int64_t step, step_outcome *o) {
    memset(o, 0, sizeof *o);
    o->data_pos = -1;
    o->comm_s = t->world > 1 ? 0 : NAN;
    /* The step's size: the ramp's for the tokens trained so far (the same
     * on every rank), whole micro-batches of B sequences. */
    o->tokens_before = t->tokens_done;
    o->batch_seqs = wf_batch_ramp_seqs(&t->ramp, t->tokens_done);
    o->accum = (int)(o->batch_seqs / t->B);
    o->tokens = o->batch_seqs * t->T;
    WF_TRY(wf__train_mix_begin_step(t, step)); /* a mixture: this step's weights */
    WF_TRY(forward_backward(t, step, o));
    t->tokens_done += (uint64_t)o->tokens; /* read: they count, whatever the judgement */
    WF_TRY(t->strat->reduce_grads(t, step, o));
    WF_TRY(wf__train_mix_finish_step(t, o));
    double t0 = wf_time_now();
    o->lr = t->sched_tokens ? wf_lr_at_units(&t->sched, o->tokens_before, (uint64_t)o->tokens)
                            : wf_lr_at(&t->sched, (uint64_t)step);
    o->lr_adamw = o->lr * t->adamw_lr_ratio; /* muon: the AdamW group's, on the same schedule */
    o->muon_update_rms = NAN;
    wf_trace_span region = wf_trace_begin(WF_TRACE_REGION, "optimizer");
    /* The global L2 norm of the summed gradient, wherever the strategy keeps it. */
    wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "grad norm");
    wf_status s = wf__train_grad_norm(t, &o->grad_norm);
    wf_trace_end(span);
    if (s == WF_OK) judge(t, o);
    if (s == WF_OK && !o->skipped) {
        s = t->strat->update(t, step, o);
        /* The guard's last line: parameters the update made non-finite
         * (finite gradients make that all but impossible; a fault can).
         * The same bits on every rank, so the same verdict. */
        double ss = 0;
        if (s == WF_OK) s = wf__train_param_sumsq(t, &ss);
        if (s == WF_OK && !isfinite(ss)) o->nonfinite |= WF__NONFINITE_PARAMS;
    }
    wf_trace_end(region);
    o->optim_s = wf_time_now() - t0;
    return s;
}

/* Always the same batches, so that evaluations are comparable. */
wf_status wf__train_eval_loader(trainer *t, wf_loader *val, double *loss) {
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "eval");
    double sum = 0;
    int n = 0;
    uint64_t per_epoch = wf_loader_batches_per_epoch(val);
    wf_status s = wf_loader_set_state(val, (wf_loader_state){.epoch = 0, .sample = 0});
    for (int64_t i = 0; s == WF_OK && i < t->tc->eval_batches && (uint64_t)i < per_epoch; i++) {
        const wf_batch *b;
        s = wf_loader_next(val, &b);
        if (s != WF_OK) break;
        wf__train_split_batch(b, t->inputs, t->targets);
        float l;
        s = wf_model_forward(t->model, t->inputs, t->targets, b->batch, b->seq_len, &l);
        sum += l;
        n++;
    }
    wf_trace_end(span);
    *loss = n ? sum / n : NAN;
    /* Each rank's mean over equal parts: their average is the global mean. */
    if (s == WF_OK && t->world > 1) s = wf_comm_all_reduce_f64(t->comm, loss, 1, WF_COMM_AVG, "val loss");
    return s;
}

wf_status wf__train_evaluate(trainer *t, double *loss) {
    if (t->mix.n) return wf__train_mix_evaluate(t, loss);
    return wf__train_eval_loader(t, t->val, loss);
}
