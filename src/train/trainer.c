/* The training loop of `weft train` (its parts are listed in
 * train_impl.h): plan everything once (model,
 * optimizer state, batch buffers, loaders, the checkpoint writer), resume
 * from the run's latest valid checkpoint (or initialise, optionally from a
 * safetensors model), then for each step accumulate gradients over the
 * micro-batches of one global batch, clip, update with the scheduled
 * learning rate, report, and save when it is time or when asked (SAVE and
 * STOP files, SIGTERM/SIGUSR1, the memory watchdog). Nothing is allocated
 * inside the step. The same config and seeds give bit-identical losses,
 * across a stop and resume too: the checkpoint holds every bit the next
 * step depends on (parameters, AdamW moments and step count, the loader's
 * cursor and the tokens trained, the spike detector's window; the
 * schedule is a function of the step or the tokens, the batch-size ramp of
 * the tokens, initialisation and data order of the seeds).
 *
 * With several ranks (docs/distributed.md): DDP all-reduces the gradient
 * in buckets during the backward; with dist.zero1, ZeRO-1 reduce-scatters
 * the same buckets during the backward, each rank updates its shard of the parameters with
 * its shard of the AdamW moments, and the parameters are all-gathered.
 *
 * Observability (src/obs): every step becomes one wf_metrics_step record
 * (metrics.jsonl, TensorBoard, the console line with MFU), is judged by the
 * loss-spike detector (warn, skip the update, or roll back to the last
 * checkpoint and skip the data that led to the spike), and host memory is
 * checked against the watchdog's limits. The tracer gets a step marker per
 * step and region spans (forward, backward, optimizer, eval, checkpoint);
 * the model records its own ops, the loader and checkpoint writer threads
 * theirs. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train/train_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/thread.h"
#include "weft/trace.h"

/* Evaluate after this step? */
static int eval_due(const trainer *t, int64_t done) {
    int64_t every = t->tc->eval_every;
    return (t->val || t->mix.n_val) && every > 0 && (done % every == 0 || done == t->tc->steps);
}

/* Save after this step? On schedule, at the end, and when run control
 * asks (between steps, so that a checkpoint always holds a whole step). */
static int save_due(const trainer *t, int64_t done, const run_control *rc) {
    int64_t every = t->tc->ckpt_every;
    return done == t->tc->steps || wf__train_stopping(t, rc, done) || rc->save_file ||
           (every > 0 && done % every == 0);
}

static wf_status save(trainer *t, int64_t done, const run_control *rc) {
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "checkpoint");
    wf_progress_clear(&t->bar);
    if (rc->save_file && t->rank == 0 && unlink(t->save_path) == 0)
        WF_INFO("%s: saving at step %lld", t->save_path, (long long)done);
    wf_status s = wf__train_save(t, done);
    wf_trace_end(span);
    return s;
}

/* The end of a run that reached train.steps. */
static wf_status finish(trainer *t, int64_t start, wf_train_result *res) {
    const wf_train_config *tc = t->tc;
    wf_progress_done(&t->bar);
    wf__train_trace_flush();
    /* The last step's save, unless the loop made it: a spike that could
     * not roll back skipped its update after the save block. */
    WF_TRY(wf__train_save(t, tc->steps));
    WF_TRY(wf__train_finish_saves(t));
    res->save_failures = t->save_failures;
    double el = wf_time_now() - t->t_run;
    WF_INFO("trained %lld steps in %.1f s (%.0f tokens/s)", (long long)(tc->steps - start), el,
            (double)(t->tokens_done - t->tokens_start) / el);
    if (!isnan(t->val_loss)) WF_INFO("final validation loss %.4f", t->val_loss);
    if (res->nonfinite)
        WF_WARN("non-finite steps: %d, their updates skipped (guard.nonfinite = skip; reports in %s/nonfinite/)",
                res->nonfinite, tc->run_dir);
    if (res->spikes)
        WF_INFO("loss spikes: %d (%d update%s skipped, %d rollback%s)", res->spikes, res->skipped,
                res->skipped == 1 ? "" : "s", res->rollbacks, res->rollbacks == 1 ? "" : "s");
    res->finished = 1;
    WF_TRY(wf__train_write_final_model(t, tc->steps));
    if (t->good_step != tc->steps && t->writer) { /* no writer: dist.tp > 1, said at setup */
        /* Training is over, but its end is not in a checkpoint: a rerun
         * would redo the steps since the last good one. */
        char good[4200];
        return wf_error(WF_ERR_IO,
                        "the final checkpoint (step %lld) was not saved: %s; the model is in %s/model.safetensors, "
                        "and the last good checkpoint is %s",
                        (long long)tc->steps, t->save_error, tc->run_dir, wf__train_last_good(t, good, sizeof good));
    }
    return WF_OK;
}

/* The loop reads like llm.c's: mark the step, one optimizer step (next
 * batch, forward/backward, judge, update), then the once-in-a-while
 * blocks: evaluate, ask run control (files, signals, memory, the other
 * ranks), checkpoint, record and print, roll back or stop. */
static wf_status train_loop(trainer *t, int64_t start, wf_train_result *res) {
    const wf_train_config *tc = t->tc;
    WF_TRY(wf__train_schedule(t, start));
    t->tokens_start = t->tokens_done;
    wf__train_log_plan(t, start);
    res->step = start;
    if (start >= tc->steps) {
        WF_INFO("the checkpoint is at step %lld of train.steps = %lld: nothing left to train", (long long)start,
                (long long)tc->steps);
        res->finished = 1;
        return wf__train_write_final_model(t, start);
    }
    wf_progress_init(&t->bar, "train", "steps", (uint64_t)tc->steps);
    if (t->job_rank != 0) t->bar.tty = 0; /* one bar: rank 0's */
    wf_progress_update(&t->bar, (uint64_t)start);
    t->t_run = wf_time_now();
    t->val_loss = NAN;
    t->rb_step = -1;
    for (int64_t step = start; step < tc->steps; step++) {
        wf__train_mark_step(t, step);
        step_times st = {.t0 = wf_time_now(), .eval_s = NAN, .tasks_s = NAN};
        step_outcome o;
        WF_TRY(wf__train_step(t, step, &o));
        int64_t done = step + 1;
        int roll = o.spike.spike && t->spike_action == WF_SPIKE_ROLLBACK;
        char spike_note[48] = "";
        if (o.nonfinite) {
            int stop;
            res->nonfinite++;
            WF_TRY(wf__train_nonfinite(t, done, &o, &stop, spike_note, sizeof spike_note));
            if (stop) {
                st.t_end = wf_time_now();
                WF_TRY(wf__train_observe(t, done, &o, &st, spike_note));
                wf_progress_clear(&t->bar);
                return wf__train_nonfinite_stop(t, done, &o);
            }
        } else {
            t->nf_streak = 0;
        }
        if (!roll) WF_TRY(wf__train_check_replicas(t, done));
        if (o.spike.spike) {
            res->spikes++;
            wf__train_log_spike(t, &o, done, roll, spike_note, sizeof spike_note);
        }

        /* Once in a while. Nothing of a step that is rolled back is kept. */
        if (!roll && eval_due(t, done)) {
            double te = wf_time_now();
            WF_TRY(wf__train_evaluate(t, &t->val_loss));
            st.eval_s = wf_time_now() - te;
        }
        if (!roll && wf__train_tasks_due(t, done)) {
            double te = wf_time_now();
            WF_TRY(wf__train_tasks_run(t));
            st.tasks_s = wf_time_now() - te;
        }
        run_control rc;
        WF_TRY(wf__train_control(t, done, roll, &rc));
        double tc0 = wf_time_now();
        if (!roll && save_due(t, done, &rc)) WF_TRY(save(t, done, &rc));
        else WF_TRY(wf__train_report_saves(t));
        st.t_end = wf_time_now();
        st.ckpt_s = st.t_end - tc0;
        WF_TRY(wf__train_observe(t, done, &o, &st, spike_note));

        if (o.skipped && !roll && !o.nonfinite) res->skipped++;
        if (roll) {
            int64_t back;
            WF_TRY(wf__train_rollback(t, done, o.data_pos, o.accum, &back));
            if (back >= 0) {
                res->rollbacks++;
                if (t->metrics) WF_TRY(wf_metrics_restart(t->metrics, back + 1));
                wf_progress_update(&t->bar, (uint64_t)back);
                res->step = back;
                step = back - 1; /* the loop's step++ makes it `back`: step back+1 runs next */
                continue;
            }
            res->skipped++; /* nothing to go back to: the update stays skipped, the step counts */
        }
        wf_progress_update(&t->bar, (uint64_t)done);
        res->step = done;
        if (wf__train_stopping(t, &rc, done)) {
            wf_progress_clear(&t->bar);
            wf__train_trace_flush();
            WF_TRY(wf__train_save(t, done)); /* made already unless the step was a spike that could not roll back */
            WF_TRY(wf__train_finish_saves(t));
            res->save_failures = t->save_failures;
            wf__train_stopped(t, &rc, done, res);
            return WF_OK;
        }
    }
    return finish(t, start, res);
}

wf_status wf_train_comm_create(const wf_train_config *tc, wf_comm **out) {
    *out = NULL;
    wf_comm_options co = wf_comm_options_default();
    co.timeout_first_s = tc->dist_timeout_first_s;
    co.timeout_s = tc->dist_timeout_s;
    co.timeout_first_name = "dist.timeout_first_s";
    co.timeout_name = "dist.timeout_s";
    co.first_steps = tc->dist_first_steps;
    co.report_dir = tc->run_dir;
    if (tc->run_dir) {
        WF_TRY(wf_rundir_check(tc->run_dir, "train.run_dir"));
        WF_TRY(wf_mkdirs(tc->run_dir));
    }
    return wf_comm_create(out, &co);
}

wf_status wf_train_execute(const wf_train_config *tc, wf_comm *comm, wf_train_result *result) {
    memset(result, 0, sizeof *result);
    if (tc->run_dir) {
        WF_TRY(wf_rundir_check(tc->run_dir, "train.run_dir"));
        /* The kill switch is polled first, so that a queue of jobs for a
         * stopped run exits at once. */
        char stop[WF_PATH_MAX];
        WF_TRY(wf_rundir_path(stop, sizeof stop, tc->run_dir, WF_RUN_STOP));
        if (wf_path_exists(stop)) {
            WF_INFO("%s exists: not training (remove it to continue the run)", stop);
            result->stop_file = 1;
            return WF_OK;
        }
    }
    wf__train_signals_install(tc, wf_comm_rank(comm), wf_comm_size(comm));
    trainer t;
    memset(&t, 0, sizeof t);
    int64_t start = 0;
    /* The caller made the communicator first (wf_train_comm_create),
     * before the loader's and the checkpoint writer's threads start. */
    t.tc = tc;
    int setup_failed = 0;
    /* dist.tp: the {dp, tp} mesh; comm, rank and world become dp's. Its
     * refusals are the config's, the same on every rank. */
    wf_status s = wf__train_tp_mesh(&t, comm);
    if (s != WF_OK && !t.mesh) setup_failed = 1;
    if (s == WF_OK && t.job_rank == 0 && tc->run_dir) {
        /* One job per run directory (a requeued job whose predecessor is
         * still alive must not write beside it): rank 0 holds the lock. */
        wf_dirlock_opts lo = {.command = "weft train", .what = "run directory", .stale_seconds = tc->lock_stale_s};
        s = wf_mkdirs(tc->run_dir);
        if (s == WF_OK) s = wf_dirlock_acquire(&t.lock, tc->run_dir, &lo);
    }
    if (s == WF_OK) s = wf__train_setup(&t, tc);
    if (s == WF_OK && t.job_rank == 0) s = wf__train_write_run_config(tc);
    if (s == WF_OK) s = wf__train_setup_checkpoints(&t);
    if (!setup_failed) s = wf__train_agree_setup(&t, s, &setup_failed);
    if (s == WF_OK) s = wf__train_resume_or_init(&t, &start);
    /* The replicas must start equal (same seed, or the same checkpoint);
     * from here identical averaged gradients keep them so. */
    if (s == WF_OK && t.world > 1 && t.strat->params == WF__KEEP_WHOLE)
        s = wf_comm_check_replicas(t.comm, wf_model_params(t.model), wf_model_num_params(t.model) * sizeof(float),
                                   "the model's parameters after initialisation");
    if (s == WF_OK) s = wf__train_setup_obs(&t, start);
    if (s == WF_OK) s = train_loop(&t, start, result);
    if (s == WF_OK) {
        s = wf_metrics_close(t.metrics); /* reported: the last records must reach the disk */
        t.metrics = NULL;
    }
    /* Cleanup keeps the first error's message. */
    wf_error_keep first = WF_ERROR_KEEP_INIT;
    wf_error_keep_note(&first, s);
    if (s != WF_OK) {
        /* Let a save in flight finish (it is consistent) before exiting, and
         * drop a trace capture of the step that failed. */
        if (t.writer && t.world == 1) wf_ckpt_writer_wait(t.writer, NULL); /* W > 1: collective; destroy waits for this rank's write */
        wf_trace_discard();
        /* The other ranks may be blocked in a collective this rank will
         * never join: the caller ends the whole job (main(), with
         * wf_comm_abort). */
        result->abort_job = t.job_world > 1 && !setup_failed && !t.agreed_error;
    }
    wf__train_free(&t); /* closes the metrics (writing what is buffered), stops the threads */
    wf__train_tp_free(&t); /* after the model, whose collectives it served */
    if (t.tracing && wf_trace_shutdown() != WF_OK) /* after the threads that record spans have stopped */
        WF_WARN("trace: %s", wf_error_msg());
    wf__train_signals_restore();
    return wf_error_keep_restore(&first);
}
