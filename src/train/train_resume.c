/* Resuming a training run and rolling it back (train_impl.h): the run's
 * latest valid checkpoint (wf_ckpt_open_latest falls back to an older one
 * when the newest does not verify), or ckpt.resume_from, or ckpt.init_from
 * for the weights alone; restoring every bit the next step depends on; and
 * PaLM's recipe for a loss spike: back to the last checkpoint, past the
 * spike's data. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/log.h"

static int is_set(const char *s) { return s && *s; }

/* Where a loader cursor lies in the data order, in micro-batches from the
 * start of the run's first epoch (the loader's global batch is one
 * micro-batch, B samples); a mixture's cursor is {0, the slots served}. */
int64_t wf__train_data_position(const trainer *t, wf_loader_state s) {
    if (t->mix.n) return (int64_t)(s.sample / (uint64_t)t->B);
    return (int64_t)(s.epoch * wf_loader_batches_per_epoch(t->train) + s.sample / (uint64_t)t->B);
}

wf_status wf__train_data_rewind(trainer *t, int64_t pos) {
    if (!t->mix.n) return wf_loader_set_state(t->train, wf__train_data_cursor(t, pos));
    WF_CHECK(t->mix.step_start.slot == (uint64_t)pos * (uint64_t)t->B,
             "the mixture's cursor of the step (slot %llu) is not at micro-batch %lld",
             (unsigned long long)t->mix.step_start.slot, (long long)pos);
    return wf_loader_set_mix(t->train, &t->mix.step_start);
}

/* Moves the data to micro-batch `pos` of the order: a mixture goes on from
 * its cursor (pos is not before it) with the weights it has. */
static wf_status data_skip_to(trainer *t, int64_t pos) {
    if (!t->mix.n) return wf_loader_set_state(t->train, wf__train_data_cursor(t, pos));
    wf_mix_state st;
    WF_TRY(wf_loader_get_mix(t->train, &st));
    uint64_t target = (uint64_t)pos * (uint64_t)t->B;
    if (target > st.slot) WF_TRY(wf_mix_advance(&st, target - st.slot));
    return wf_loader_set_mix(t->train, &st);
}

wf_loader_state wf__train_data_cursor(const trainer *t, int64_t pos) {
    uint64_t per_epoch = wf_loader_batches_per_epoch(t->train);
    return (wf_loader_state){.epoch = (uint64_t)pos / per_epoch,
                             .sample = (uint64_t)pos % per_epoch * (uint64_t)t->B};
}

/* Reads n finite doubles separated by spaces; 0 if the text is not that. */
static int parse_doubles(const char *text, double *out, int n) {
    const char *p = text;
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtod(p, &end);
        if (end == p || !isfinite(out[i])) return 0;
        p = end;
    }
    while (*p == ' ') p++;
    return *p == '\0';
}

/* Puts the checkpoint's spike window into the detector. Returns 1 when it
 * did; 0 when `c` holds none (saved by an older weft, or without the
 * gradient norms this run judges) or an unreadable one, with the reason in
 * `why`: the detector is then left as it is. */
static int spike_state_get(trainer *t, const wf_ckpt *c, char *why, size_t why_size) {
    uint64_t n = 0;
    const char *loss = NULL, *gn = NULL;
    int use_gn = t->spike.cfg.use_grad_norm;
    int found = wf_ckpt_get_u64(c, "spike.n", &n) == WF_OK && wf_ckpt_get_str(c, "spike.loss", &loss) == WF_OK;
    int found_gn = found && wf_ckpt_get_str(c, "spike.grad_norm", &gn) == WF_OK;
    wf_error_clear();
    if (!found) {
        snprintf(why, why_size, "holds no spike detector window (saved by an older weft)");
        return 0;
    }
    if (use_gn && !found_gn) {
        snprintf(why, why_size, "holds a spike detector window without gradient norms (saved with spike.grad_norm "
                 "= false)");
        return 0;
    }
    if (n > (1u << 20)) {
        snprintf(why, why_size, "has spike.n = %" PRIu64 ", more than any spike.window", n);
        return 0;
    }
    double *v = calloc(2 * (size_t)(n ? n : 1), sizeof *v);
    if (!v) {
        snprintf(why, why_size, "has a spike detector window of %" PRIu64 " steps, too large for memory", n);
        return 0;
    }
    int ok = parse_doubles(loss, v, (int)n) && (!use_gn || parse_doubles(gn, v + n, (int)n));
    if (ok) wf_spike_set_window(&t->spike, v, v + n, (int)n);
    else snprintf(why, why_size, "has a spike detector window that is not %" PRIu64 " numbers (spike.loss or "
                  "spike.grad_norm of its manifest)", n);
    free(v);
    return ok;
}

/* Why a checkpoint does not fit this run's model, or WF_OK. */
static wf_status check_model_config(const char *dir, const wf_model_config *saved, const wf_model_config *now) {
    struct {
        const char *key;
        double a, b;
    } f[] = {
        {"model.dim", saved->dim, now->dim},
        {"model.n_layers", saved->n_layers, now->n_layers},
        {"model.n_heads", saved->n_heads, now->n_heads},
        {"model.n_kv_heads", saved->n_kv_heads, now->n_kv_heads},
        {"model.vocab_size", saved->vocab_size, now->vocab_size},
        {"model.ffn_hidden_dim", wf_model_config_hidden_dim(saved), wf_model_config_hidden_dim(now)},
        {"model.max_seq_len", saved->max_seq_len, now->max_seq_len},
        {"model.norm_eps", saved->norm_eps, now->norm_eps},
        {"model.rope_theta", saved->rope_theta, now->rope_theta},
        {"model.tied", saved->tied_embeddings, now->tied_embeddings},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].a != f[i].b)
            return wf_error(WF_ERR_CONFIG,
                            "%s was saved with %s = %.10g but this run's config has %.10g: resume with the run's "
                            "config (its config.toml), or start over with --no-resume or another train.run_dir",
                            dir, f[i].key, f[i].a, f[i].b);
    return WF_OK;
}

/* The tokens trained before the checkpoint's step (what the batch-size
 * ramp and a schedule in tokens go on from): its data.tokens, or, from a
 * checkpoint saved before weft recorded them (and before ramps), its step
 * times its constant global batch of data.global_batch sequences of
 * data.seq_len tokens (this run's, if it lacks those too). A ramp that
 * differs from the checkpoint's is allowed and said: the sizes from here
 * are this run's ramp of the tokens trained. `seq_len` and `gb` are the
 * checkpoint's, 0 when absent. */
static wf_status restore_tokens(trainer *t, const wf_ckpt *c, uint64_t seq_len, uint64_t gb) {
    const char *dir = wf_ckpt_path(c);
    uint64_t tokens = 0;
    if (wf_ckpt_get_u64(c, "data.tokens", &tokens) != WF_OK) {
        wf_error_clear();
        uint64_t T = seq_len ? seq_len : (uint64_t)t->T, G = gb ? gb : (uint64_t)t->B * (uint64_t)t->accum;
        tokens = wf_ckpt_step(c) * G * T;
        if (wf_batch_ramp_active(&t->ramp))
            WF_INFO("%s does not record the tokens trained (saved by an older weft, without a batch-size ramp): "
                    "%" PRIu64 " steps of %" PRIu64 " x %" PRIu64 " tokens, %" PRIu64 "; the ramp goes on from there",
                    dir, wf_ckpt_step(c), G, T, tokens);
    }
    t->tokens_done = tokens;
    const struct {
        const char *key;
        uint64_t now;
    } ramp[] = {
        {"data.batch_ramp_start", wf_batch_ramp_active(&t->ramp) ? (uint64_t)t->ramp.start : 0},
        {"data.batch_ramp_step", wf_batch_ramp_active(&t->ramp) ? (uint64_t)t->ramp.inc : 0},
        {"data.batch_ramp_tokens", t->ramp.tokens},
    };
    for (size_t i = 0; i < sizeof ramp / sizeof *ramp; i++) {
        uint64_t saved;
        if (wf_ckpt_get_u64(c, ramp[i].key, &saved) == WF_OK && saved != ramp[i].now)
            WF_WARN("%s was saved with %s = %" PRIu64 ", this run has %" PRIu64 ": from its %" PRIu64 " tokens "
                    "trained on, the global batch follows this run's ramp (%lld sequences next)",
                    dir, ramp[i].key, saved, ramp[i].now, tokens, (long long)wf_batch_ramp_seqs(&t->ramp, tokens));
        wf_error_clear();
    }
    return WF_OK;
}

/* The optimizer state of `c` fits this run: the same optim.name (a
 * checkpoint without optimizer.name is AdamW's). *params_only: load the
 * parameters alone and start the optimizer afresh (optim.reset_state on
 * the job's resume, or on a rollback to a checkpoint of the other
 * optimizer). */
static wf_status check_optimizer(trainer *t, wf_ckpt *c, int resume, int *params_only) {
    const char *saved = NULL, *now = wf__train_optim_name(t);
    if (wf_ckpt_get_str(c, "optimizer.name", &saved) != WF_OK || !saved) saved = "adamw";
    wf_error_clear();
    int differ = strcmp(saved, now) != 0;
    *params_only = t->tc->reset_state && (resume || differ);
    if (differ && !t->tc->reset_state)
        return wf_error(WF_ERR_CONFIG,
                        "%s was saved with optim.name = %s but this run has optim.name = %s: its optimizer state "
                        "does not carry over; set optim.reset_state = true to load the parameters only and start "
                        "%s's state afresh, or keep optim.name = %s",
                        wf_ckpt_path(c), saved, now, now, saved);
    if (*params_only && resume)
        WF_INFO("optim.reset_state = true: loading the parameters of %s only; the %s state starts afresh%s",
                wf_ckpt_path(c), now, differ ? " (the checkpoint's is another optimizer's)" : "");
    return WF_OK;
}

/* The parameters alone (the first entries of t->state, as this rank holds
 * them) from `c`, which also holds another optimizer's state that
 * wf_ckpt_load_rank would refuse as not this run's. */
static wf_status load_params_only(trainer *t, wf_ckpt *c) {
    size_t nt = (size_t)wf_model_num_tensors(t->model);
    for (size_t i = 0; i < nt; i++) {
        const wf_ckpt_tensor *e = &t->state[i];
        int64_t b = 0, end = 0;
        wf_ckpt_tensor_range(e, t->rank, &b, &end);
        if (b >= end) continue;
        size_t count = (size_t)(end - b);
        float *stage = e->be ? malloc(count * sizeof *stage) : e->data;
        if (!stage) return wf_error(WF_ERR_NOMEM, "%s: a staging buffer of %zu floats for %s", wf_ckpt_path(c), count,
                                    e->name);
        wf_status s = wf_ckpt_read_range(c, e->name, b, end, stage);
        if (s == WF_OK && e->be) s = wf_backend_upload(e->be, e->data, stage, count * sizeof *stage);
        if (e->be) free(stage);
        WF_TRY(s);
    }
    return WF_OK;
}

/* Restores everything a step depends on from `c`; *start gets its step.
 * resume: the job's start (1), or a rollback (0). */
static wf_status restore(trainer *t, wf_ckpt *c, int64_t *start, int resume) {
    const wf_train_config *tc = t->tc;
    const char *dir = wf_ckpt_path(c);
    wf_model_config saved;
    WF_TRY(wf_ckpt_get_model_config(c, &saved));
    WF_TRY(check_model_config(dir, &saved, &t->mc));
    uint64_t opt_steps, epoch, sample, seq_len = 0, gb = 0, data_seed = 0, init_seed = 0;
    WF_TRY(wf_ckpt_get_u64(c, "optimizer.steps", &opt_steps));
    /* One dataset's cursor; a checkpoint of a mixture has mix.* instead. */
    int has_cursor = !t->mix.n;
    if (has_cursor && wf_ckpt_get_u64(c, "loader.epoch", &epoch) != WF_OK) {
        const char *mix;
        if (wf_ckpt_get_str(c, "mix.sources", &mix) != WF_OK) return wf_ckpt_get_u64(c, "loader.epoch", &epoch);
        has_cursor = 0; /* wf__train_mix_restore says so */
    }
    if (has_cursor) WF_TRY(wf_ckpt_get_u64(c, "loader.sample", &sample));
    int params_only = 0;
    WF_TRY(check_optimizer(t, c, resume, &params_only));
    if (params_only) {
        /* the parameters are the first entries; the optimizer's state zeroed */
        size_t nt = (size_t)wf_model_num_tensors(t->model);
        WF_TRY(load_params_only(t, c));
        for (size_t i = nt; i < t->n_state; i++) {
            int64_t b = 0, e = 0;
            wf_ckpt_tensor_range(&t->state[i], t->rank, &b, &e);
            /* the backend's memory: zeroed through it */
            if (t->state[i].data && e > b)
                WF_TRY(wf_backend_fill(t->state[i].be ? t->state[i].be : wf_backend_cpu(), t->state[i].data, 0,
                                       (size_t)(e - b) * sizeof(float)));
        }
        opt_steps = 0;
    } else {
        WF_TRY(wf_ckpt_load_rank(c, t->state, t->n_state, t->rank));
    }
    wf_adamw_set_steps(t->opt, opt_steps);
    if (t->strat->optim == WF__KEEP_PIECES) wf__train_units_set_steps(t, opt_steps); /* an optimizer per unit */
    wf__train_units_invalidate(t); /* fsdp: the pieces changed */
    wf_status s = has_cursor ? wf_loader_set_state(t->train, (wf_loader_state){.epoch = epoch, .sample = sample})
                             : wf__train_mix_restore(t, c, (int64_t)wf_ckpt_step(c));
    if (s != WF_OK) return wf_error_wrap(s, "%s: ", dir);
    if (!has_cursor && !t->mix.n) WF_TRY(wf_loader_set_state(t->train, (wf_loader_state){0, 0}));
    /* What changes the data the resumed run reads: warn, it is allowed. */
    if (wf_ckpt_get_u64(c, "data.seq_len", &seq_len) == WF_OK && seq_len != (uint64_t)t->T)
        WF_WARN("%s was saved with data.seq_len = %" PRIu64 ", this run uses %d: the data order changes", dir,
                seq_len, t->T);
    if (wf_ckpt_get_u64(c, "data.global_batch", &gb) == WF_OK && gb != (uint64_t)t->B * (uint64_t)t->accum)
        WF_WARN("%s was saved with a global batch of %" PRIu64 " sequences, this run uses %lld", dir, gb,
                (long long)t->B * t->accum);
    wf_error_clear();
    WF_TRY(restore_tokens(t, c, seq_len, gb));
    if (wf_ckpt_get_u64(c, "rng.data_seed", &data_seed) == WF_OK && data_seed != (uint64_t)tc->data_seed)
        WF_WARN("%s was saved with data.seed = %" PRIu64 ", this run uses %lld: the data order changes", dir,
                data_seed, (long long)tc->data_seed);
    if (wf_ckpt_get_u64(c, "rng.init_seed", &init_seed) == WF_OK && init_seed != (uint64_t)tc->seed)
        WF_INFO("%s was saved with train.seed = %" PRIu64 " (this run's %lld does not matter when resuming)", dir,
                init_seed, (long long)tc->seed);
    wf_error_clear();
    *start = (int64_t)wf_ckpt_step(c);
    return WF_OK;
}

/* *start is the step to continue after (0 for a new run). */
wf_status wf__train_resume_or_init(trainer *t, int64_t *start) {
    const wf_train_config *tc = t->tc;
    *start = 0;
    wf_ckpt *c = NULL;
    if (t->tp.size > 1) {
        /* Slices cannot be read from a checkpoint yet (train_ckpt.c). */
        uint64_t *steps;
        size_t n;
        WF_TRY(wf_ckpt_list(t->root, &steps, &n));
        free(steps);
        if (n || is_set(tc->ckpt_resume_from) || is_set(tc->ckpt_init_from))
            return wf_error(WF_ERR_UNSUPPORTED,
                            "dist.tp = %d: resuming or initialising from a checkpoint or model file is not "
                            "implemented for tensor parallelism yet (%s%s); use a new run directory, or dist.tp = 1",
                            t->tp.size, n ? "checkpoints in " : "ckpt.resume_from or ckpt.init_from is set",
                            n ? t->root : "");
        return WF_OK;
    }
    if (is_set(tc->ckpt_resume_from)) {
        WF_TRY(wf_ckpt_open(&c, tc->ckpt_resume_from));
        wf_status s = wf_ckpt_verify(c, NULL, NULL);
        if (s != WF_OK) {
            wf_ckpt_close(c);
            return wf_error_wrap(s, "ckpt.resume_from: ");
        }
    } else if (tc->ckpt_resume) {
        WF_TRY(wf_ckpt_open_latest(t->root, &c));
    } else {
        uint64_t *steps;
        size_t n;
        WF_TRY(wf_ckpt_list(t->root, &steps, &n));
        free(steps);
        if (n)
            WF_WARN("--no-resume: starting over; the %zu checkpoint%s in %s will be replaced as new ones are saved", n,
                    n == 1 ? "" : "s", t->root);
    }
    if (c) {
        if (is_set(tc->ckpt_init_from)) WF_INFO("resuming, so ckpt.init_from = %s is not used", tc->ckpt_init_from);
        wf_status s = restore(t, c, start, 1);
        if (s == WF_OK) {
            WF_INFO("resumed from %s (step %" PRId64 ")", wf_ckpt_path(c), *start);
            snprintf(t->rollback_dir, sizeof t->rollback_dir, "%s", wf_ckpt_path(c));
            t->good_step = *start;
            char why[256];
            if (spike_state_get(t, c, why, sizeof why))
                WF_INFO("spike detector: the window of the last %d steps restored from the checkpoint", t->spike.n);
            else
                WF_INFO("%s %s: the spike detector starts empty, and its first %d steps (spike.warmup) only fill "
                        "the window", wf_ckpt_path(c), why, t->spike.cfg.warmup);
        }
        wf_ckpt_close(c);
        return s;
    }
    if (is_set(tc->ckpt_init_from)) {
        if (t->strat->params == WF__KEEP_PIECES) WF_TRY(wf__train_units_import(t, tc->ckpt_init_from));
        else WF_TRY(wf_hf_import(t->model, tc->ckpt_init_from));
        WF_INFO("initialised the weights from %s", tc->ckpt_init_from);
    }
    return WF_OK;
}

/* PaLM's recipe for a spike at `step` whose first micro-batch is at
 * `spike_pos` of the data order: reload the last checkpoint this job saved
 * (or resumed from) and continue the data past the spike's batches plus
 * spike.skip_batches, so the steps after the checkpoint see other data.
 * *back gets the checkpoint's step, or -1 when there is none to go back to
 * (or it was used spike.max_rollbacks times already): the caller skips the
 * update instead. */
wf_status wf__train_rollback(trainer *t, int64_t step, int64_t spike_pos, int micro_batches, int64_t *back) {
    *back = -1;
    WF_TRY(wf__train_finish_saves(t)); /* the save in flight may be the one to go back to */
    if (!t->rollback_dir[0]) {
        WF_WARN("spike at step %lld: no checkpoint of this run to roll back to yet; its update is skipped instead",
                (long long)step);
        return WF_OK;
    }
    wf_ckpt *c;
    WF_TRY(wf_ckpt_open(&c, t->rollback_dir));
    int64_t to = (int64_t)wf_ckpt_step(c);
    if (to == t->rb_step && t->rb_count >= t->tc->spike_max_rollbacks) {
        wf_ckpt_close(c);
        WF_WARN("spike at step %lld: already rolled back to %s %d time%s (spike.max_rollbacks); its update is "
                "skipped instead",
                (long long)step, t->rollback_dir, t->rb_count, t->rb_count == 1 ? "" : "s");
        return WF_OK;
    }
    wf_status s = wf_ckpt_verify(c, NULL, NULL);
    int64_t got = 0;
    if (s == WF_OK) s = restore(t, c, &got, 0);
    /* The detector goes back with the model: the steps run again are
     * judged against the window the checkpoint's step left, as they were
     * the first time; the abandoned steps leave it. */
    char why[256];
    if (s == WF_OK && !spike_state_get(t, c, why, sizeof why))
        WF_INFO("%s %s: the spike detector keeps its current window", t->rollback_dir, why);
    wf_ckpt_close(c);
    if (s != WF_OK) return wf_error_wrap(s, "rolling back for the spike at step %lld: ", (long long)step);
    int64_t from = wf__train_data_position(t, wf_loader_get_state(t->train));
    int64_t resume_at = spike_pos + micro_batches + t->tc->spike_skip_batches;
    WF_TRY(data_skip_to(t, resume_at));
    t->rb_count = to == t->rb_step ? t->rb_count + 1 : 1;
    t->rb_step = to;
    t->last_saved = to;
    WF_WARN("rolled back to %s (step %lld) for the spike at step %lld; the data continues at micro-batch %lld, "
            "skipping micro-batches %lld to %lld (spike.skip_batches = %lld after the spike's)",
            t->rollback_dir, (long long)to, (long long)step, (long long)resume_at, (long long)from,
            (long long)resume_at - 1, (long long)t->tc->spike_skip_batches);
    *back = to;
    return WF_OK;
}
