/* The non-finite guard (train_impl.h; docs/robustness.md): a step whose
 * loss or gradient norm is NaN or Inf never updates the weights, and
 * parameters that an update made non-finite are caught after it. Each rank
 * then writes what it holds into RUN_DIR/nonfinite/ (the absolute min and
 * max and the NaN and Inf counts of every activation of the last forward,
 * every weight and every gradient: the seeds' underflow/overflow detector
 * as a report, docs/formats/nonfinite.md), rank 0 says which tensors went
 * non-finite first, and the run skips the step or stops with the last good
 * state saved (guard.nonfinite). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/fileio.h"
#include "weft/json.h"
#include "weft/log.h"

#define NONFINITE_FORMAT_VERSION 2

typedef struct {
    size_t nan, inf;
    double abs_min, abs_max; /* over the finite values; NaN when there are none */
} tensor_stats;

static tensor_stats stats_of(const float *x, size_t n) {
    tensor_stats st = {.abs_min = INFINITY, .abs_max = -1};
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (isnan(v)) {
            st.nan++;
        } else if (isinf(v)) {
            st.inf++;
        } else {
            double a = fabs((double)v);
            if (a < st.abs_min) st.abs_min = a;
            if (a > st.abs_max) st.abs_max = a;
        }
    }
    if (st.abs_max < 0) st.abs_min = st.abs_max = NAN;
    return st;
}

/* The stats of activation i, read through the backend in blocks. */
static tensor_stats act_stats(wf_model *m, int i, size_t numel) {
    float block[4096];
    tensor_stats st = {.abs_min = INFINITY, .abs_max = -1};
    for (size_t j = 0; j < numel; j += 4096) {
        size_t n = numel - j < 4096 ? numel - j : 4096;
        if (wf_model_read_activation(m, i, j, n, block) != WF_OK) break; /* cannot fail on cpu, ref */
        tensor_stats b = stats_of(block, n);
        st.nan += b.nan, st.inf += b.inf;
        if (b.abs_max >= 0) { /* not NaN: the block had finite values */
            if (b.abs_min < st.abs_min) st.abs_min = b.abs_min;
            if (b.abs_max > st.abs_max) st.abs_max = b.abs_max;
        }
    }
    if (st.abs_max < 0) st.abs_min = st.abs_max = NAN;
    return st;
}

static int bad(const tensor_stats *st) { return st->nan || st->inf; }

static void put_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

/* An entry; `range` (may be NULL) is the part [range[0], range[1]) of the
 * tensor's elements this rank holds (version 2: zero2's gradient shard,
 * fsdp's pieces). */
static void put_entry_range(FILE *f, const char *name, size_t numel, const tensor_stats *st, int first,
                            const size_t *range) {
    fputs(first ? "\n    {\"name\": " : ",\n    {\"name\": ", f);
    wf_json_fput_str(f, name);
    if (range) fprintf(f, ", \"range\": [%zu, %zu]", range[0], range[1]);
    fprintf(f, ", \"numel\": %zu, \"nan\": %zu, \"inf\": %zu, \"abs_min\": ", numel, st->nan, st->inf);
    put_num(f, st->abs_min);
    fputs(", \"abs_max\": ", f);
    put_num(f, st->abs_max);
    fputc('}', f);
}

static void put_entry(FILE *f, const char *name, size_t numel, const tensor_stats *st, int first) {
    put_entry_range(f, name, numel, st, first, NULL);
}

/* What this rank holds of a flat buffer (parameters or gradients) when it
 * is not the whole: `n` segments, segment k the flat range [lo[k], lo[k] +
 * cnt[k]) at ptr[k], in flat order. */
typedef struct {
    int n;
    const size_t *lo, *cnt;
    float *const *ptr;
} held;

/* The entries of every tensor's part in `h`, in tensor order; the name of
 * the first (or, with last = 1, the last) non-finite one goes to bad_name.
 * The parts are the trainer's arena, the model's backend's memory: each
 * comes to the host through it into `stage` (room for the largest tensor). */
static void put_held(FILE *fp, wf_model *m, const held *h, int last, float *stage, char *bad_name,
                     size_t bad_size) {
    int nt = wf_model_num_tensors(m), any = 0;
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        for (int k = 0; k < h->n; k++) {
            size_t a = ti->offset > h->lo[k] ? ti->offset : h->lo[k];
            size_t b = ti->offset + ti->numel < h->lo[k] + h->cnt[k] ? ti->offset + ti->numel : h->lo[k] + h->cnt[k];
            if (a >= b) continue;
            wf_status s = wf_backend_download(wf_model_backend(m), stage, h->ptr[k] + (a - h->lo[k]),
                                              (b - a) * sizeof *stage);
            tensor_stats st = stats_of(stage, s == WF_OK ? b - a : 0);
            size_t range[2] = {a - ti->offset, b - ti->offset};
            put_entry_range(fp, ti->name, b - a, &st, !any++, range);
            if (bad(&st) && (last || !bad_name[0])) snprintf(bad_name, bad_size, "%s", ti->name);
        }
    }
}

/* "3 NaN and 5 Inf of 24576" */
static void describe(char *buf, size_t size, size_t numel, const tensor_stats *st) {
    snprintf(buf, size, "%zu NaN and %zu Inf of %zu; finite |x| from %.3g to %.3g", st->nan, st->inf, numel,
             st->abs_min, st->abs_max);
}

/* What went non-finite, for messages: "the loss and the gradient norm". */
static const char *found_in(int what) {
    static const char *const text[8] = {"nothing",
                                        "the loss",
                                        "the gradient norm",
                                        "the loss and the gradient norm",
                                        "the parameters after the update",
                                        "the loss and the parameters",
                                        "the gradient norm and the parameters",
                                        "the loss, the gradient norm and the parameters"};
    return text[what & 7];
}

/* The report of this rank; *first gets "activation X, gradient Y, ..." for
 * the messages. The file is written whole or not at all. */
static wf_status write_report(trainer *t, int64_t done, const step_outcome *o, const char *action, char *path,
                              size_t path_size, char *first, size_t first_size) {
    wf_model *m = t->model;
    char dir[WF_PATH_MAX];
    WF_TRY(wf_rundir_path(dir, sizeof dir, t->tc->run_dir, WF_RUN_NONFINITE));
    WF_TRY(wf_mkdirs(dir));
    WF_TRY(wf_path_joinf(path, path_size, dir, "step-%08lld.rank-%05d.json", (long long)done, t->job_rank));
    wf_afile f;
    WF_TRY(wf_afile_open(&f, path));
    FILE *fp = f.fp;
    fprintf(fp, "{\"format\": \"weft.nonfinite\", \"version\": %d, \"step\": %lld, \"rank\": %d, \"world_size\": %d,\n",
            NONFINITE_FORMAT_VERSION, (long long)done, t->job_rank, t->job_world); /* the job's: every tp rank writes */
    fprintf(fp, " \"data_position\": %lld, \"micro_batches\": %d, \"action\": \"%s\", \"loss\": ",
            (long long)o->data_pos, o->accum, action);
    put_num(fp, o->loss);
    fputs(", \"grad_norm\": ", fp);
    put_num(fp, o->grad_norm);
    fprintf(fp, ",\n \"found_in\": [");
    const char *kinds[3] = {"loss", "gradients", "parameters"};
    for (int k = 0, n = 0; k < 3; k++)
        if (o->nonfinite & (1 << k)) fprintf(fp, "%s\"%s\"", n++ ? ", " : "", kinds[k]);
    fputs("],\n", fp);

    /* Activations in forward order: the first non-finite one is where the
     * numbers broke. */
    char first_act[128] = "", first_param[128] = "", first_grad[128] = "", what[160];
    char act_note[256] = "";
    fputs(" \"activations\": [", fp);
    int na = wf_model_num_activations(m);
    for (int i = 0; i < na; i++) {
        wf_model_activation a;
        wf_model_get_activation(m, i, &a);
        tensor_stats st = act_stats(m, i, a.numel);
        put_entry(fp, a.name, a.numel, &st, i == 0);
        if (bad(&st) && !first_act[0]) {
            snprintf(first_act, sizeof first_act, "%s", a.name);
            describe(what, sizeof what, a.numel, &st);
            snprintf(act_note, sizeof act_note, "%s", what);
        }
    }
    fputs("],\n \"parameters\": [", fp);
    int nt = wf_model_num_tensors(m);
    /* The model's own buffers (when it has them) are the backend's memory:
     * each tensor comes to the host through wf_model_read, into `stage`
     * (room for the largest). */
    int has_p = wf_model_params(m) != NULL, has_g = wf_model_grads(m) != NULL;
    size_t largest = 0;
    for (int i = 0; i < nt; i++)
        if (wf_model_tensor(m, i)->numel > largest) largest = wf_model_tensor(m, i)->numel;
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    /* Where the strategy keeps no whole buffer (zero2's gradient, fsdp's
     * parameters and gradient) the lists hold this rank's parts, each
     * entry with its range: room for a part per unit. */
    int nu = wf_model_num_units(m);
    size_t *lo = calloc((size_t)nu, sizeof *lo), *cnt = calloc((size_t)nu, sizeof *cnt);
    float **ptr = calloc((size_t)nu, sizeof *ptr);
    if (!lo || !cnt || !ptr || !stage) {
        free(lo), free(cnt), free(ptr), free(stage);
        wf_afile_abort(&f);
        return wf_error(WF_ERR_NOMEM, "out of memory for the non-finite report");
    }
    held h = {.lo = lo, .cnt = cnt, .ptr = ptr};
    wf_status s = WF_OK;
    h.n = wf__train_held(t, 0, lo, cnt, ptr);
    if (h.n) {
        put_held(fp, m, &h, 0, stage, first_param, sizeof first_param);
    } else {
        for (int i = 0; has_p && i < nt && s == WF_OK; i++) {
            const wf_tensor_info *ti = wf_model_tensor(m, i);
            s = wf_model_read(m, WF_MODEL_PARAMS, i, 0, ti->numel, stage);
            tensor_stats st = stats_of(stage, s == WF_OK ? ti->numel : 0);
            put_entry(fp, ti->name, ti->numel, &st, i == 0);
            if (bad(&st) && !first_param[0]) snprintf(first_param, sizeof first_param, "%s", ti->name);
        }
    }
    /* Gradients: the first to go non-finite in the backward is the last
     * tensor of the forward that has one. */
    fputs("],\n \"gradients\": [", fp);
    h.n = wf__train_held(t, 1, lo, cnt, ptr);
    if (h.n) {
        put_held(fp, m, &h, 1, stage, first_grad, sizeof first_grad);
    } else {
        for (int i = 0; has_g && i < nt && s == WF_OK; i++) {
            const wf_tensor_info *ti = wf_model_tensor(m, i);
            s = wf_model_read(m, WF_MODEL_GRADS, i, 0, ti->numel, stage);
            tensor_stats st = stats_of(stage, s == WF_OK ? ti->numel : 0);
            put_entry(fp, ti->name, ti->numel, &st, i == 0);
            if (bad(&st)) snprintf(first_grad, sizeof first_grad, "%s", ti->name);
        }
    }
    free(lo), free(cnt), free(ptr), free(stage);
    if (s != WF_OK) {
        wf_afile_abort(&f);
        return s;
    }
    fputs("],\n \"first_nonfinite\": {\"activation\": ", fp);
    wf_json_fput_str(fp, first_act[0] ? first_act : NULL);
    fputs(", \"parameter\": ", fp);
    wf_json_fput_str(fp, first_param[0] ? first_param : NULL);
    fputs(", \"gradient\": ", fp);
    wf_json_fput_str(fp, first_grad[0] ? first_grad : NULL);
    fputs("}}\n", fp);
    WF_TRY(wf_afile_commit(&f));
    snprintf(first, first_size, "first non-finite activation: %s%s%s; parameter: %s; gradient (in backward order): %s",
             first_act[0] ? first_act : "none", act_note[0] ? " (" : "", act_note[0] ? act_note : "",
             first_param[0] ? first_param : "none", first_grad[0] ? first_grad : "none");
    if (act_note[0]) strncat(first, ")", first_size - strlen(first) - 1);
    return WF_OK;
}

/* Rank 0 shows the activations up to the first non-finite one (the last
 * few before it, whose growth usually tells the story). */
static void log_activations(trainer *t) {
    wf_model *m = t->model;
    int na = wf_model_num_activations(m), stop = na - 1;
    for (int i = 0; i < na; i++) {
        wf_model_activation a;
        wf_model_get_activation(m, i, &a);
        tensor_stats st = act_stats(m, i, a.numel);
        if (bad(&st)) {
            stop = i;
            break;
        }
    }
    int from = stop - 7 > 0 ? stop - 7 : 0;
    WF_WARN("activations of the step's last micro-batch (abs min, abs max of the finite values; NaN, Inf):");
    for (int i = from; i <= stop; i++) {
        wf_model_activation a;
        wf_model_get_activation(m, i, &a);
        tensor_stats st = act_stats(m, i, a.numel);
        WF_WARN("  %-40s %10.3g %10.3g   %zu NaN, %zu Inf", a.name, st.abs_min, st.abs_max, st.nan, st.inf);
    }
}

wf_status wf__train_nonfinite(trainer *t, int64_t done, const step_outcome *o, int *stop, char *note,
                              size_t note_size) {
    const wf_train_config *tc = t->tc;
    int params = (o->nonfinite & WF__NONFINITE_PARAMS) != 0;
    t->nf_streak++;
    *stop = params || t->nonfinite_stop || t->nf_streak > tc->guard_nonfinite_max_skips;
    const char *action = *stop ? "stop" : "skip";
    char path[4400], first[600];
    WF_TRY(write_report(t, done, o, action, path, sizeof path, first, sizeof first));
    snprintf(t->nf_first, sizeof t->nf_first, "%s", first);
    snprintf(t->nf_report, sizeof t->nf_report, "%s", path);
    snprintf(note, note_size, " | non-finite (%s)", *stop ? "stopped" : "skipped");
    if (t->job_rank != 0) return WF_OK;
    WF_WARN("step %lld: %s went non-finite (loss %g, gradient norm %g) at micro-batch %lld of the data order; %s; "
            "report: %s%s",
            (long long)done, found_in(o->nonfinite), o->loss, o->grad_norm, (long long)o->data_pos, first, path,
            t->job_world > 1 ? " (each rank writes its own)" : "");
    log_activations(t);
    if (!*stop)
        WF_WARN("step %lld: its update is skipped (guard.nonfinite = skip; %d non-finite step%s in a row, at most "
                "%lld)",
                (long long)done, t->nf_streak, t->nf_streak == 1 ? "" : "s",
                (long long)tc->guard_nonfinite_max_skips);
    return WF_OK;
}

wf_status wf__train_nonfinite_stop(trainer *t, int64_t done, const step_outcome *o) {
    const wf_train_config *tc = t->tc;
    int params = (o->nonfinite & WF__NONFINITE_PARAMS) != 0;
    char why[160];
    if (params)
        snprintf(why, sizeof why, "the update made parameters non-finite, which cannot be undone");
    else if (t->nonfinite_stop)
        snprintf(why, sizeof why, "guard.nonfinite = stop");
    else
        snprintf(why, sizeof why, "%d non-finite steps in a row (guard.nonfinite_max_skips = %lld)", t->nf_streak,
                 (long long)tc->guard_nonfinite_max_skips);
    if (!params) {
        /* The weights and the optimizer are those after step done - 1 (this
         * step's update was not applied); the data goes back to this step's
         * first micro-batch and the tokens trained to before it, so that
         * the checkpoint is exactly the state before it: a resume with
         * another config reads the same batch. */
        WF_TRY(wf__train_data_rewind(t, o->data_pos));
        t->tokens_done = o->tokens_before;
        WF_TRY(wf__train_save(t, done - 1));
    }
    WF_TRY(wf__train_finish_saves(t));
    t->agreed_error = 1; /* every rank stops here, at the same step, with the same message */
    char good[4200];
    wf__train_last_good(t, good, sizeof good);
    const char *saved = !params && t->good_step == done - 1 ? "saved the state before it as " : "the last good "
                                                                                              "checkpoint is ";
    return wf_error(WF_ERR_RANGE,
                    "step %lld: %s went non-finite (%s); stopped (%s); %s%s; report: %s; lower optim.lr, check the "
                    "data at micro-batch %lld, or set guard.nonfinite = skip",
                    (long long)done, found_in(o->nonfinite), t->nf_first, why, saved, good, t->nf_report,
                    (long long)o->data_pos);
}
