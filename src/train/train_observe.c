/* Observation of a training run (train_impl.h): the peak MFU is measured
 * against, run.json, the metrics sinks and the tracer at the start; the
 * plan's lines; each step's record (metrics.jsonl, TensorBoard) and rank
 * 0's console line; a spike's warning. Observation decides nothing: what a
 * spike or the memory watchdog makes the run do is run control's and the
 * step's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/train_impl.h"
#include "weft/fileio.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/trace.h"

static int is_set(const char *s) { return s && *s; }

static void fmt_rate(char *buf, size_t n, double v) {
    if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* Runs after resuming: `start` > 0 marks the restart in the event files. */
wf_status wf__train_setup_obs(trainer *t, int64_t start) {
    const wf_train_config *tc = t->tc;
    wf_peak_options po = {.configured_tflops = tc->metrics_peak_tflops,
                          .refresh = tc->metrics_remeasure_peak ? WF_PEAK_REMEASURE : WF_PEAK_USE_CACHE};
    char line[1536];
    if (wf_peak_get(&t->peak, &po) == WF_OK) {
        wf_peak_describe(&t->peak, line, sizeof line);
        WF_INFO("MFU: %s", line);
    } else {
        WF_WARN("MFU: no peak (%s); set metrics.peak_tflops to get MFU", wf_error_msg());
        wf_error_clear();
        memset(&t->peak, 0, sizeof t->peak);
    }
    t->flops_per_token = wf_model_flops_per_token(&t->mc, t->T);
    size_t np = wf_model_num_params(t->model);
    wf_run_dist dist = {.world_size = t->world,
                        .backend = t->comm ? wf_comm_backend(t->comm) : "single",
                        /* one process keeping everything whole: not distributed at all */
                        .mode = t->world == 1 && t->strat->optim == WF__KEEP_WHOLE ? "single" : t->strat->name,
                        .optim_bytes = (int64_t)(8 * np),
                        .optim_unsharded_bytes = (int64_t)(8 * np)};
    if (t->strat->optim == WF__KEEP_FLAT) {
        wf_zero1_memory zm = wf_zero1_plan_memory(&t->zplan, 0, 2);
        dist.optim_bytes = (int64_t)zm.sharded_bytes;
        dist.optim_unsharded_bytes = (int64_t)zm.unsharded_bytes;
        dist.zero1_shard_floats = (int64_t)t->zplan.shard_size;
    }
    if (t->strat->optim == WF__KEEP_PIECES) dist.optim_bytes = (int64_t)(8 * t->units->local_n);
    wf_run_record rec = {.config_toml = t->config_text,
                         .argc = tc->argc,
                         .argv = tc->argv,
                         .peak = t->peak.tflops > 0 ? &t->peak : NULL,
                         .flops_per_token = t->flops_per_token,
                         .n_params = (int64_t)np,
                         .model_source = t->model_source,
                         .dist = &dist,
                         .arena = &t->arena_use};
    if (t->job_rank == 0) WF_TRY(wf_run_record_write(tc->run_dir, &rec));

    /* Rank 0 records into the run directory; with metrics.all_ranks every
     * other rank too, into RUN_DIR/ranks/rank-NNNNN (its own times and
     * memory, the global loss and norm). */
    char rank_dir[WF_PATH_MAX];
    wf_metrics_options mo = {.dir = tc->run_dir,
                             .jsonl = tc->metrics_jsonl,
                             .tensorboard = tc->metrics_tensorboard,
                             .flush_every_s = tc->metrics_flush_every_s};
    if (t->job_rank > 0) {
        WF_TRY(wf_rundir_path(rank_dir, sizeof rank_dir, tc->run_dir, WF_RUN_RANKS));
        WF_TRY(wf_path_joinf(rank_dir, sizeof rank_dir, rank_dir, "rank-%05d", t->job_rank));
        mo.dir = rank_dir;
    }
    if ((t->job_rank == 0 || tc->metrics_all_ranks) && (mo.jsonl || mo.tensorboard)) {
        if (t->job_rank > 0) WF_TRY(wf_mkdirs(rank_dir));
        WF_TRY(wf_metrics_open(&t->metrics, &mo));
        if (start > 0) WF_TRY(wf_metrics_restart(t->metrics, start + 1));
        const char *tb = wf_metrics_tb_path(t->metrics);
        if (mo.jsonl) WF_INFO("metrics: %s/metrics.jsonl", mo.dir);
        if (tb) WF_INFO("metrics: TensorBoard events %s", tb);
    }

    if (tc->trace_active > 0 || tc->trace_requests) {
        char dir[WF_PATH_MAX];
        if (is_set(tc->trace_dir)) WF_TRY(wf_path_join(dir, sizeof dir, NULL, tc->trace_dir, NULL));
        else WF_TRY(wf_rundir_path(dir, sizeof dir, tc->run_dir, WF_RUN_TRACES));
        wf_trace_config cfg = {
            .dir = dir,
            .request_dir = tc->trace_requests ? tc->run_dir : NULL,
            /* With several ranks rank 0 polls in run control and every rank
             * captures the same steps. */
            .poll_requests = tc->trace_requests && t->job_world == 1,
            .rank = t->job_rank,
            .world_size = t->job_world,
            .backend = t->comm ? wf_comm_backend(t->comm) : "single",
            .schedule = {.skip_first = tc->trace_skip_first,
                         .wait = tc->trace_wait,
                         .warmup = tc->trace_warmup,
                         .active = tc->trace_active,
                         .repeat = tc->trace_repeat},
            .buffer_events = tc->trace_buffer_events,
        };
        if (t->job_world > 1) {
            /* One time base for every rank's trace (cross-rank analyses):
             * rank 0's, rounded down to a second. */
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            cfg.base_unix_ns = (uint64_t)now.tv_sec * 1000000000u;
            WF_TRY(wf_comm_broadcast(t->job, &cfg.base_unix_ns, sizeof cfg.base_unix_ns, 0, "trace time base"));
        }
        WF_TRY(wf_trace_init(&cfg));
        t->tracing = 1;
        if (tc->trace_active > 0)
            WF_INFO("trace: %lld step%s per capture into %s (after %lld steps, then wait %lld, warmup %lld; %s)",
                    (long long)tc->trace_active, tc->trace_active == 1 ? "" : "s", dir, (long long)tc->trace_skip_first,
                    (long long)tc->trace_wait, (long long)tc->trace_warmup,
                    tc->trace_repeat ? "repeated" : "for ever");
    }
    return WF_OK;
}

/* A step ran faster than the peak MFU is measured against: that peak was
 * measured (or cached) while other work loaded the machine. Measures it
 * once more (the cache keeps the higher of the two) and says so. */
static void recheck_peak(trainer *t, int64_t step, double achieved) {
    t->peak_rechecked = 1;
    WF_WARN("MFU above 100%% at step %lld: this process ran %.4g TFLOP/s, more than the %s peak of %.4g TFLOP/s, "
            "which was measured while the machine was busy; measuring the peak again",
            (long long)step, achieved, wf_peak_source_name(t->peak.source), t->peak.tflops);
    wf_peak_options po = {.refresh = WF_PEAK_RECHECK}; /* the cache keeps the higher of the two */
    wf_peak np;
    if (wf_peak_get(&np, &po) != WF_OK) {
        WF_WARN("MFU: %s", wf_error_msg());
        wf_error_clear();
        return;
    }
    if (np.tflops > t->peak.tflops) t->peak = np;
    char line[1536];
    wf_peak_describe(&t->peak, line, sizeof line);
    if (t->peak.tflops < achieved)
        WF_WARN("MFU: %s, still below this run's rate: the machine is too busy for a reliable peak; set "
                "metrics.peak_tflops (MFU figures above 100%% follow)", line);
    else
        WF_INFO("MFU: %s", line);
}

/* The ramp's sizes from the step after `start` on: "8 for 6 steps, 16 for
 * 3, 24 for 2, then 32 from step 12" (the first few sizes, then the
 * step the final one starts). */
static void log_ramp(const trainer *t, int64_t start) {
    const wf_batch_ramp *r = &t->ramp;
    char line[1024];
    size_t len = 0;
    uint64_t done = t->tokens_done;
    int64_t step = start;
    for (int n = 0; n < 8; n++) {
        uint64_t m = wf_batch_ramp_steps_at_size(r, done);
        int64_t seqs = wf_batch_ramp_seqs(r, done);
        if (m == UINT64_MAX) {
            snprintf(line + len, sizeof line - len, "%s%lld from step %lld", n ? "then " : "", (long long)seqs,
                     (long long)step + 1);
            break;
        }
        len += (size_t)snprintf(line + len, sizeof line - len, "%lld for %llu step%s, ", (long long)seqs,
                                (unsigned long long)m, m == 1 ? "" : "s");
        done += m * (uint64_t)seqs * (uint64_t)t->T;
        step += (int64_t)m;
        if (n == 7) {
            uint64_t rest = 0;
            for (; (m = wf_batch_ramp_steps_at_size(r, done)) != UINT64_MAX; rest += m)
                done += m * (uint64_t)wf_batch_ramp_seqs(r, done) * (uint64_t)t->T;
            snprintf(line + len, sizeof line - len, "..., the final %lld from step %lld", (long long)r->final,
                     (long long)(step + (int64_t)rest) + 1);
        }
    }
    WF_INFO("batch ramp: %lld to %lld sequences, +%lld at each of %lld increases over %llu tokens "
            "(data.batch_ramp_*): %s",
            (long long)r->start, (long long)r->final, (long long)r->inc, (long long)r->n_inc,
            (unsigned long long)r->tokens, line);
}

void wf__train_log_plan(const trainer *t, int64_t start) {
    const wf_train_config *tc = t->tc;
    size_t np = wf_model_config_num_params(&t->mc); /* the whole model's, with tensor parallelism too */
    wf_model_memory mem = wf_model_get_memory(t->model);
    char held[64] = "";
    if (t->tp.size > 1)
        snprintf(held, sizeof held, "; this tp rank holds %zu of them", wf_model_num_params(t->model));
    WF_INFO("model: %zu parameters (%.2fM), dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d, %s%s",
            np, (double)np / 1e6, t->mc.dim, t->mc.n_layers, t->mc.n_heads, t->mc.n_kv_heads,
            wf_model_config_hidden_dim(&t->mc), t->mc.vocab_size, t->mc.tied_embeddings ? "tied" : "untied", held);
    WF_INFO("batch: %d x %d tokens, %d micro-batch%s per step (%lld tokens)%s; %lld steps on %d threads",
            t->B, t->T, t->accum, t->accum == 1 ? "" : "es", (long long)t->accum * t->B * t->T,
            wf_batch_ramp_active(&t->ramp) ? " after the ramp" : "", (long long)tc->steps, wf_kern_threads());
    if (wf_batch_ramp_active(&t->ramp)) log_ramp(t, start);
    wf__train_mix_log_plan(t);
    if (t->sched_tokens)
        WF_INFO("learning rate: counted in tokens (optim.schedule_unit): warmup %llu tokens, %s to %llu tokens",
                (unsigned long long)t->sched.warmup, wf_lr_kind_name(t->sched.kind),
                (unsigned long long)t->sched.total);
    if (t->world > 1)
        WF_INFO("data parallel: %d ranks, %d of the %d sequences of each micro-batch on this rank (rank %d)",
                t->world, t->Bl, t->B, t->rank);
    size_t opt_lo, opt_hi;
    wf_adamw_range(t->opt, &opt_lo, &opt_hi);
    double opt_mb = 8.0 * (double)(opt_hi - opt_lo) / 1e6;
    char acts[96];
    snprintf(acts, sizeof acts, "activations %.1f MB (%zu bytes, train.recompute = %s)",
             mem.activation_bytes / 1e6, mem.activation_bytes,
             wf_model_recompute_name(wf_model_get_recompute(t->model)));
    if (t->strat->params == WF__KEEP_PIECES) {
        const train_units *su = t->units;
        WF_INFO("memory (fsdp, this rank): parameter pieces %.1f MB, gradient pieces %.1f MB, optimizer %.1f MB, "
                "gather and gradient buffers %.1f MB in all (unit buffers), %s",
                4.0 * (double)su->local_n / 1e6, 4.0 * (double)su->local_n / 1e6, 8.0 * (double)su->local_n / 1e6,
                (double)su->buffer_bytes / 1e6, acts);
    } else {
        WF_INFO("memory: parameters %.1f MB, gradients %.1f MB%s, optimizer %.1f MB%s, %s",
                mem.param_bytes / 1e6, t->units ? 4.0 * (double)t->units->gshard_n / 1e6 : mem.grad_bytes / 1e6,
                t->units ? " (this rank's shard; plus the unit buffers)" : "", opt_mb,
                t->strat->optim == WF__KEEP_FLAT ? " (this rank's shard)" : "", acts);
    }
    WF_INFO("FLOPs: %.4g per token (docs/train.md), %.4g per step%s", t->flops_per_token,
            t->flops_per_token * (double)t->accum * t->B * t->T,
            wf_batch_ramp_active(&t->ramp) ? " at the final batch" : "");
}

void wf__train_mark_step(trainer *t, int64_t step) {
    /* The tracer's step marker comes first, outside the step's time. */
    if (wf_trace_step(step + 1) != WF_OK) {
        WF_WARN("trace: %s (training goes on)", wf_error_msg());
        wf_error_clear();
    }
    if (t->comm) wf_comm_set_step(t->comm, step);
}

void wf__train_log_spike(trainer *t, const step_outcome *o, int64_t done, int roll, char *note, size_t size) {
    char msg[1024];
    wf_spike_describe(&o->spike, done, o->data_pos, o->loss, o->grad_norm, t->spike_action, msg, sizeof msg);
    wf_progress_clear(&t->bar);
    WF_WARN("%s", msg);
    snprintf(note, size, " | spike (%s)",
             t->spike_action == WF_SPIKE_WARN ? "warned" : roll ? "rolled back" : "skipped");
}

wf_status wf__train_observe(trainer *t, int64_t done, const step_outcome *o, const step_times *st,
                            const char *spike_note) {
    const wf_train_config *tc = t->tc;
    int eval = !isnan(st->eval_s);
    wf_metrics_step r;
    wf_metrics_step_init(&r);
    r.step = done;
    r.elapsed_s = st->t_end - t->t_run;
    r.loss = o->loss;
    r.val_loss = eval ? t->val_loss : NAN;
    r.lr = o->lr;
    r.grad_norm = o->grad_norm;
    if (t->muon) r.lr_adamw = o->lr_adamw, r.muon_update_rms = o->muon_update_rms;
    r.tokens = o->tokens;
    r.batch_seqs = o->batch_seqs;
    r.tokens_seen = (int64_t)(o->tokens_before + (uint64_t)o->tokens);
    int tasks = !isnan(st->tasks_s);
    r.step_s = st->t_end - st->t0 - (eval ? st->eval_s : 0) - (tasks ? st->tasks_s : 0);
    if (tasks) {
        r.tasks_s = st->tasks_s;
        r.tasks_score = t->task_score;
        r.n_tasks = (int)t->n_tasks;
        r.tasks = t->task_rec;
    }
    r.data_s = o->data_s;
    r.fwd_bwd_s = o->fwd_bwd_s;
    r.optim_s = o->optim_s;
    r.ckpt_s = st->ckpt_s;
    r.eval_s = st->eval_s;
    r.loss_z = o->spike.loss_z;
    r.grad_norm_z = o->spike.grad_norm_z;
    r.spike = o->spike.spike;
    r.data_pos = o->data_pos;
    r.comm_s = o->comm_s;
    wf__train_mix_record(t, o, eval, &r);
    wf_metrics_step_derive(&r, t->flops_per_token, t->job_world, t->peak.tflops);
    if (r.mfu_pct > 100 && t->peak.source != WF_PEAK_CONFIG && !t->peak_rechecked) {
        recheck_peak(t, done, r.tflops);
        wf_metrics_step_derive(&r, t->flops_per_token, t->job_world, t->peak.tflops);
    }
    wf_metrics_step_memory(&r, t->arena);
    if (t->metrics) WF_TRY(wf_metrics_log(t->metrics, &r));

    if (t->job_rank == 0 && (done % tc->log_every == 0 || done == tc->steps || eval || tasks || o->spike.spike)) {
        char rate[32], vbuf[48] = "", mbuf[32] = "", bbuf[64] = "", tbuf[96] = "";
        int step_width = (int)snprintf(NULL, 0, "%lld", (long long)tc->steps);
        fmt_rate(rate, sizeof rate, r.tokens_per_s);
        if (isfinite(r.mfu_pct)) snprintf(mbuf, sizeof mbuf, " | mfu %.1f%%", r.mfu_pct);
        if (eval) snprintf(vbuf, sizeof vbuf, " | val loss %.4f", t->val_loss);
        if (tasks)
            snprintf(tbuf, sizeof tbuf, " | %s %.4f (%zu task%s, %.1f s)", t->task_label, t->task_score, t->n_tasks,
                     t->n_tasks == 1 ? "" : "s", st->tasks_s);
        /* Under a ramp the batch changes: the line says which it was. */
        if (wf_batch_ramp_active(&t->ramp))
            snprintf(bbuf, sizeof bbuf, " | batch %lld (%lld tokens)", (long long)o->batch_seqs, (long long)o->tokens);
        wf_progress_clear(&t->bar);
        printf("step %*lld/%lld | loss %.4f | lr %.2e | grad norm %.3f%s | %s tok/s | %.0f ms (data %.1f ms)%s%s%s%s\n",
               step_width, (long long)done, (long long)tc->steps, o->loss, o->lr, o->grad_norm, bbuf, rate,
               r.step_s * 1e3, o->data_s * 1e3, mbuf, vbuf, tbuf, spike_note);
        fflush(stdout);
    }
    return WF_OK;
}

void wf__train_trace_flush(void) {
    if (wf_trace_flush() != WF_OK) {
        WF_WARN("trace: %s", wf_error_msg());
        wf_error_clear();
    }
}
