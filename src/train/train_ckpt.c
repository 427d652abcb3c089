/* What a checkpoint of a training run holds, and saving it (train_impl.h):
 * the state (every parameter, then the AdamW moments, each rank its part;
 * ZeRO-1's moments as each rank's shard under DDP's names and shapes), the
 * scalars a step depends on (optimizer steps, the loader's cursor, the
 * tokens trained, seeds, the spike detector's window, the effective
 * config), the writer (synchronous, or asynchronous with a staging copy),
 * and the files a run writes besides: config.toml and the final
 * model.safetensors. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/safetensors.h"
#include "weft/store.h"

/* ---- checkpoints ---- */

static char *config_toml(const wf_train_config *tc) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    wf_opts_write_toml(wf_train_spec(), tc, f);
    fclose(f);
    return buf;
}

/* The state a checkpoint holds: every parameter, then the AdamW moments
 * under "optim.m.<name>" and "optim.v.<name>". With optim.name = muon a
 * Muon matrix has its momentum (AdamW's m slot, train_muon.c) under
 * "optim.momentum.<name>" and no v. */
static wf_status build_state(trainer *t) {
    int nt = wf_model_num_tensors(t->model);
    t->n_state = 3 * (size_t)nt;
    t->state = calloc(t->n_state, sizeof *t->state);
    t->state_names = calloc(t->n_state, sizeof *t->state_names);
    if (!t->state || !t->state_names) return wf_error(WF_ERR_NOMEM, "out of memory");
    float *bufs[3] = {wf_model_params(t->model), wf_adamw_m(t->opt), wf_adamw_v(t->opt)};
    const char *prefix[3] = {"", "optim.m.", "optim.v."};
    size_t shard_lo, shard_hi;
    wf_adamw_range(t->opt, &shard_lo, &shard_hi);
    size_t j = 0;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < nt; i++) {
            const wf_tensor_info *ti = wf_model_tensor(t->model, i);
            int muon = t->muon && wf_muon_takes(ti);
            if (muon && k == 2) continue; /* Muon keeps one buffer */
            const char *pre = muon && k == 1 ? "optim.momentum." : prefix[k];
            size_t n = strlen(pre) + strlen(ti->name) + 1;
            t->state_names[j] = malloc(n);
            if (!t->state_names[j]) return wf_error(WF_ERR_NOMEM, "out of memory");
            snprintf(t->state_names[j], n, "%s%s", pre, ti->name);
            wf_ckpt_tensor *e = &t->state[j];
            e->name = t->state_names[j];
            e->ndim = ti->ndim;
            e->shape[0] = ti->shape[0];
            e->shape[1] = ti->shape[1];
            /* What the strategy keeps of this kind of state: the
             * parameters (k = 0) or the moments. */
            wf__keep keep = k == 0 ? t->strat->params : t->strat->optim;
            /* All of it is the trainer's arena, the model's backend's
             * memory: staged and loaded through that backend. */
            e->be = wf_model_backend(t->model);
            if (keep == WF__KEEP_WHOLE) {
                e->data = bufs[k] ? bufs[k] + ti->offset : NULL;
            } else if (keep == WF__KEEP_PIECES) {
                /* Sharded per unit: rank r holds elements
                 * [r x piece, (r + 1) x piece) of the tensor's unit. */
                const train_units *su = t->units;
                int u = 0;
                while (u + 1 < su->n && su->off[u + 1] <= ti->offset) u++;
                float *base = k == 0 ? su->pshard + su->loc[u]
                                     : k == 1 ? wf_adamw_m(su->opt[u]) : wf_adamw_v(su->opt[u]);
                e->shard_size = (int64_t)su->piece[u];
                e->shard_base = (int64_t)(ti->offset - su->off[u]);
                int64_t b, end;
                wf_ckpt_tensor_range(e, t->rank, &b, &end);
                e->data = b < end ? base + (e->shard_base + b - (int64_t)t->rank * e->shard_size) : base;
            } else {
                /* The flat slice: this rank saves and loads that part of
                 * each tensor (the global names and shapes are DDP's, so
                 * the checkpoints are the same). */
                e->shard_size = (int64_t)t->zplan.shard_size;
                e->shard_base = (int64_t)ti->offset;
                int64_t b, end;
                wf_ckpt_tensor_range(e, t->rank, &b, &end);
                e->data = b < end ? bufs[k] + (ti->offset + (size_t)b - shard_lo) : bufs[k];
            }
            j++;
        }
    }
    t->n_state = j;
    return WF_OK;
}

/* The spike detector's window goes into every checkpoint, so that a
 * resumed run (and a rollback) judges the next steps exactly as the run
 * that saved it would have: `spike.n` values, oldest first, as text of
 * doubles that read back to the same bits ("%.17g", one space apart) in
 * `spike.loss` and, when the norm is judged too, `spike.grad_norm`. */
wf_status wf__train_spike_state_put(const trainer *t, wf_ckpt_meta *m) {
    int n = t->spike.n;
    double *v = malloc(2 * (size_t)(n ? n : 1) * sizeof *v);
    char *text = malloc(25 * (size_t)n + 1);
    wf_status s = v && text ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory for the spike window (%d steps)", n);
    if (s == WF_OK) {
        wf_spike_get_window(&t->spike, v, v + n);
        s = wf_ckpt_meta_set_u64(m, "spike.n", (uint64_t)n);
        for (int k = 0; k < 1 + t->spike.cfg.use_grad_norm && s == WF_OK; k++) {
            size_t len = 0;
            text[0] = '\0';
            for (int i = 0; i < n; i++)
                len += (size_t)snprintf(text + len, 26, "%s%.17g", i ? " " : "", v[(size_t)k * (size_t)n + (size_t)i]);
            s = wf_ckpt_meta_set_str(m, k ? "spike.grad_norm" : "spike.loss", text);
        }
    }
    free(text);
    free(v);
    return s;
}

static wf_status make_meta(trainer *t, wf_ckpt_meta **out) {
    const wf_train_config *tc = t->tc;
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    if (!m) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_loader_state ls = wf_loader_get_state(t->train);
    wf_status s = wf_ckpt_meta_set_str(m, "config", t->config_text);
    if (s == WF_OK) s = wf_ckpt_meta_set_model_config(m, &t->mc);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "optimizer.steps", wf_adamw_steps(t->opt));
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "optimizer.name", wf__train_optim_name(t));
    /* The data's cursor: one dataset's {epoch, sample}, or the mixture's mix.* keys. */
    if (s == WF_OK && !t->mix.n) s = wf_ckpt_meta_set_u64(m, "loader.epoch", ls.epoch);
    if (s == WF_OK && !t->mix.n) s = wf_ckpt_meta_set_u64(m, "loader.sample", ls.sample);
    if (s == WF_OK && !t->mix.n) s = wf_ckpt_meta_set_str(m, "data.dir", tc->data_dir);
    if (s == WF_OK) s = wf__train_mix_put(t, m);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "rng.init_seed", (uint64_t)tc->seed);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "rng.data_seed", (uint64_t)tc->data_seed);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.seq_len", (uint64_t)t->T);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.global_batch", (uint64_t)t->B * (uint64_t)t->accum);
    /* The tokens trained: with the cursor, all a batch-size ramp needs (its
     * sizes are a function of them); the ramp itself, to say when a resume
     * changes it. */
    int ramp = wf_batch_ramp_active(&t->ramp);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.tokens", t->tokens_done);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.batch_ramp_start", ramp ? (uint64_t)t->ramp.start : 0);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.batch_ramp_step", ramp ? (uint64_t)t->ramp.inc : 0);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.batch_ramp_tokens", t->ramp.tokens);
    /* Absolute, so that `weft export` finds it from anywhere. */
    char tok[PATH_MAX] = "";
    if (t->tokenizer_path && !realpath(t->tokenizer_path, tok)) snprintf(tok, sizeof tok, "%s", t->tokenizer_path);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "data.tokenizer", tok);
    if (s == WF_OK) s = wf__train_spike_state_put(t, m);
    if (s != WF_OK) {
        wf_ckpt_meta_destroy(m);
        return s;
    }
    *out = m;
    return WF_OK;
}

static void log_save(const trainer *t, const wf_ckpt_save_stats *st) {
    char dir[4096];
    wf_ckpt_step_dir(dir, sizeof dir, t->root, st->step);
    double gbs = st->write_seconds > 0 ? (double)st->bytes / st->write_seconds / 1e9 : 0;
    char pruned[48] = "";
    if (st->pruned) snprintf(pruned, sizeof pruned, "; removed %d old", st->pruned);
    if (wf_ckpt_writer_staging_bytes(t->writer))
        WF_INFO("saved %s: %.1f MB written in %.1f ms (%.2f GB/s) by the writer thread; training blocked %.1f ms "
                "(copy %.1f ms)%s",
                dir, (double)st->bytes / 1e6, st->write_seconds * 1e3, gbs, st->blocked_seconds * 1e3,
                st->copy_seconds * 1e3, pruned);
    else
        WF_INFO("saved %s: %.1f MB written in %.1f ms (%.2f GB/s); training blocked %.1f ms%s", dir,
                (double)st->bytes / 1e6, st->write_seconds * 1e3, gbs, st->blocked_seconds * 1e3, pruned);
}

const char *wf__train_last_good(const trainer *t, char *buf, size_t size) {
    if (t->good_step < 0) snprintf(buf, size, "none");
    else snprintf(buf, size, "%s (step %lld)", t->rollback_dir, (long long)t->good_step);
    return buf;
}

/* A save that failed, or was not started: a warning, and the run goes on. */
static void save_failed(trainer *t, int64_t step, const char *why) {
    t->save_failures++;
    snprintf(t->save_error, sizeof t->save_error, "%s", why);
    if (t->rank != 0) return;
    char good[4200];
    WF_WARN("the checkpoint of step %lld was not saved: %s; training goes on and the next save tries again; the "
            "last good checkpoint is %s",
            (long long)step, why, wf__train_last_good(t, good, sizeof good));
}

/* A completed save: a committed one is the last good checkpoint. */
static void note_save(trainer *t, const wf_ckpt_save_stats *st) {
    if (st->status != WF_OK) {
        save_failed(t, (int64_t)st->step, st->error[0] ? st->error : "the write failed");
        return;
    }
    log_save(t, st);
    wf_ckpt_step_dir(t->rollback_dir, sizeof t->rollback_dir, t->root, st->step);
    t->good_step = (int64_t)st->step;
}

wf_status wf__train_report_saves(trainer *t) {
    wf_ckpt_save_stats st;
    if (!t->writer) return WF_OK; /* dist.tp > 1: no checkpoints yet */
    while (wf_ckpt_writer_poll(t->writer, &st)) note_save(t, &st);
    return WF_OK;
}

/* The save in flight, waited for (with several ranks, committed: a
 * collective) and reported. Its failure is in its figures, which the poll
 * reports; what the wait returns is the same failure. */
static void settle(trainer *t) {
    if (!t->writer) return;
    (void)wf_ckpt_writer_wait(t->writer, NULL);
    wf__train_report_saves(t);
}

static double mb(double bytes) { return bytes / 1e6; }

/* ckpt.disk_check: does the save fit on the checkpoint filesystem? The
 * checkpoint's bytes (every rank's) times 1 + ckpt.disk_margin, and its
 * files, must be free; with several ranks every rank looks and the least
 * free space decides (the same verdict on every rank). Warns when there
 * is room for fewer than ckpt.disk_warn_saves more. */
static wf_status disk_fits(trainer *t, int64_t step, int *fits) {
    const wf_train_config *tc = t->tc;
    *fits = 1;
    uint64_t need, files, fb = 0, fi = 0;
    wf_ckpt_writer_save_need(t->writer, &need, &files);
    if (wf_store_is_remote(t->root)) return WF_OK; /* an object store has no free space to ask about */
    wf_status s = wf_fs_free(t->root, &fb, &fi);
    double v[3] = {(double)fb, (double)fi, s == WF_OK ? 0.0 : 1.0};
    if (s != WF_OK && t->rank == 0) WF_WARN("ckpt.disk_check: %s; saving without the check", wf_error_msg());
    if (t->world > 1) {
        double unknown = v[2];
        WF_TRY(wf_comm_all_reduce_f64(t->comm, v, 2, WF_COMM_MIN, "ckpt disk check"));
        WF_TRY(wf_comm_all_reduce_f64(t->comm, &unknown, 1, WF_COMM_MAX, "ckpt disk check"));
        v[2] = unknown;
    }
    if (v[2] != 0) return WF_OK;
    double want = (double)need * (1.0 + tc->ckpt_disk_margin);
    double want_files = (double)files + 1;
    double room = v[0] / want;
    if (v[1] / want_files < room) room = v[1] / want_files;
    char where[4200];
    snprintf(where, sizeof where, "%s has %.1f MB and %.0f inodes free", t->root, mb(v[0]), v[1]);
    if (room < 1) {
        *fits = 0;
        char why[4600];
        snprintf(why, sizeof why,
                 "not started: it needs %.1f MB (%.1f MB of data and manifest plus ckpt.disk_margin = %g) and "
                 "%.0f inodes, and %s",
                 mb(want), mb((double)need), tc->ckpt_disk_margin, want_files, where);
        save_failed(t, step, why);
        return WF_OK;
    }
    if (tc->ckpt_disk_warn_saves > 0 && room < (double)tc->ckpt_disk_warn_saves && t->rank == 0)
        WF_WARN("%s: room for %d more checkpoint%s of %.1f MB (ckpt.disk_warn_saves = %lld); old checkpoints are "
                "removed only after a newer one is committed (ckpt.keep_last = %lld)",
                where, (int)room, (int)room == 1 ? "" : "s", mb(want), (long long)tc->ckpt_disk_warn_saves,
                (long long)tc->ckpt_keep_last);
    return WF_OK;
}

wf_status wf__train_save(trainer *t, int64_t step) {
    if (t->last_saved == step || t->tried_step == step) return WF_OK; /* once a step, failed or not */
    if (!t->writer) return WF_OK; /* dist.tp > 1: said at setup */
    t->tried_step = step;
    /* The previous save first: it must be over before this one is staged,
     * and its failure is reported as a warning, not taken for this one's. */
    settle(t);
    if (t->tc->ckpt_disk_check) {
        int fits;
        WF_TRY(disk_fits(t, step, &fits));
        if (!fits) return WF_OK;
    }
    wf_ckpt_meta *meta = NULL;
    WF_TRY(make_meta(t, &meta));
    char dir[4096];
    wf_ckpt_step_dir(dir, sizeof dir, t->root, (uint64_t)step);
    int failures = t->save_failures;
    wf_status s = wf_ckpt_save(t->writer, dir, (uint64_t)step, meta, NULL);
    wf_ckpt_meta_destroy(meta);
    wf__train_report_saves(t); /* a synchronous save is over: its outcome */
    if (s != WF_OK) {
        /* A save that failed before the writer reported it (staging). */
        if (t->save_failures == failures) save_failed(t, step, wf_error_msg());
        return WF_OK;
    }
    t->last_saved = step;
    return WF_OK;
}

/* With several ranks this is collective (an asynchronous save still
 * pending is committed) and ends with a barrier, so that all ranks leave
 * together. */
wf_status wf__train_finish_saves(trainer *t) {
    settle(t);
    if (t->world > 1) return wf_comm_barrier(t->comm, "checkpoint done");
    return WF_OK;
}

wf_status wf__train_setup_checkpoints(trainer *t) {
    const wf_train_config *tc = t->tc;
    if (tc->ckpt_dir && *tc->ckpt_dir) {
        size_t n = strlen(tc->ckpt_dir);
        while (n > 1 && tc->ckpt_dir[n - 1] == '/') n--; /* s3://b/run/ and s3://b/run are one root */
        if (n > WF_RUNDIR_MAX)
            return wf_error(WF_ERR_CONFIG, "ckpt.dir: too long (%zu characters; at most %d)", n, WF_RUNDIR_MAX);
        memcpy(t->root, tc->ckpt_dir, n);
        t->root[n] = '\0';
    } else {
        WF_TRY(wf_rundir_path(t->root, sizeof t->root, tc->run_dir, WF_RUN_CHECKPOINTS));
    }
    WF_TRY(wf_rundir_path(t->save_path, sizeof t->save_path, tc->run_dir, WF_RUN_SAVE));
    WF_TRY(wf_rundir_path(t->stop_path, sizeof t->stop_path, tc->run_dir, WF_RUN_STOP));
    t->last_saved = t->tried_step = -1;
    t->good_step = -1;
    t->config_text = config_toml(tc);
    if (!t->config_text) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (t->tp.size > 1) {
        /* Each tp rank holds slices under the global names: saving them
         * needs pieces of global shapes, not written yet. */
        if (t->job_rank == 0)
            WF_WARN("dist.tp = %d: checkpoints are not written yet with tensor parallelism (the final model "
                    "file is); a stopped run starts over",
                    t->tp.size);
        return WF_OK;
    }
    WF_TRY(build_state(t));
    if (t->rank == 0) {
        /* Rank 0 alone tidies the folder; the caller's barrier follows. */
        if (!wf_store_is_remote(t->root)) WF_TRY(wf_mkdirs(t->root));
        int removed = 0;
        WF_TRY(wf_ckpt_cleanup(t->root, &removed));
        if (removed)
            WF_INFO("removed %d unfinished checkpoint save%s from %s", removed, removed == 1 ? "" : "s", t->root);
    }
    /* Several ranks: each writes its part of every tensor; an asynchronous
     * save is committed later, collectively, on this thread (run control:
     * when the step's agreement says no rank's write is busy). */
    int async = tc->ckpt_async;
    wf_ckpt_writer_opts wo = {.rank = t->rank,
                              .world_size = t->world,
                              .async = async,
                              .keep_last = (int)tc->ckpt_keep_last,
                              .keep_every = (uint64_t)tc->ckpt_keep_every};
    WF_TRY(wf_ckpt_writer_create_ranks(&t->writer, t->state, t->n_state, &wo, t->comm));
    if (async)
        WF_INFO("checkpoints: %s, asynchronous (staging buffer %.1f MB)", t->root,
                (double)wf_ckpt_writer_staging_bytes(t->writer) / 1e6);
    return WF_OK;
}

wf_status wf__train_write_final_model(trainer *t, int64_t steps) {
    int pieces = t->strat->params == WF__KEEP_PIECES;
    if (t->rank != 0 && !pieces) return WF_OK; /* pieces: every rank gathers; tp: dp rank 0's tp group */
    char path[WF_PATH_MAX];
    WF_TRY(wf_rundir_path(path, sizeof path, t->tc->run_dir, WF_RUN_MODEL));
    char steps_s[32];
    snprintf(steps_s, sizeof steps_s, "%lld", (long long)steps);
    wf_kv meta[2] = {{.key = "weft.step", .value = steps_s},
                     {.key = "weft.tokenizer", .value = t->tokenizer_path ? t->tokenizer_path : ""}};
    if (t->tp.size > 1) return wf__train_tp_write_model(t, path, meta, t->tokenizer_path ? 2 : 1);
    if (!pieces) {
        WF_TRY(wf_safetensors_save(t->model, path, meta, t->tokenizer_path ? 2 : 1));
        WF_INFO("wrote %s", path);
        return WF_OK;
    }
    /* Pieces (fsdp): streamed, unit by unit, through one of the step's gather
     * buffers: every rank takes part in each unit's all-gather, rank 0
     * appends the unit to the file (the units are the model's flat
     * parameter order). No rank ever holds more than one unit. */
    wf_safetensors_writer *w = NULL;
    wf_status s = WF_OK;
    if (t->rank == 0) s = wf_safetensors_writer_open(&w, t->model, path, meta, t->tokenizer_path ? 2 : 1, 0);
    /* Every rank runs every gather, whatever rank 0's file did, so that
     * the collectives stay matched; rank 0 reports its error after. */
    wf_status g = wf__train_units_export(t, w);
    if (t->rank == 0) {
        if (s == WF_OK && g == WF_OK) s = wf_safetensors_writer_commit(w);
        else wf_safetensors_writer_abort(w);
        if (s == WF_OK) s = g;
        if (s == WF_OK) WF_INFO("wrote %s (streamed unit by unit from the ranks' pieces)", path);
    } else {
        s = g;
    }
    return s;
}

wf_status wf__train_write_run_config(const wf_train_config *tc) {
    char path[WF_PATH_MAX];
    WF_TRY(wf_rundir_path(path, sizeof path, tc->run_dir, WF_RUN_CONFIG));
    wf_afile f;
    WF_TRY(wf_afile_open(&f, path));
    fprintf(f.fp, "# effective configuration of this run (weft train --config %s reproduces it)\n", path);
    wf_opts_write_toml(wf_train_spec(), tc, f.fp);
    return wf_afile_commit(&f);
}
