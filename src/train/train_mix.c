/* A dataset mixture in training (train_impl.h; docs/loader.md, "Dataset
 * mixing"; the keys: docs/train.md): data.sources and data.weight_schedule
 * read and checked, the sources' one tokenizer checked by fingerprint, the
 * mixture's loader and each source's validation loader, the weights of
 * each step (a change starts a new segment of the schedule exactly at the
 * step's first micro-batch), the per-source sequences and losses of a
 * step, the per-source validation losses, and the mix.* keys of a
 * checkpoint. The schedule itself is the data layer's (weft/mixture.h);
 * nothing here decides which sequence a source gives. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/log.h"
#include "weft/shard.h"

/* ---------------------------------------------------------------- config */

wf_status wf__train_mix_config(trainer *t) {
    const wf_train_config *tc = t->tc;
    train_mix *mx = &t->mix;
    const wf_strs *src = &tc->sources, *ws = &tc->weight_schedule;
    mx->loss_act = -1;
    if (src->n == 0) {
        if (ws->n)
            return wf_error(WF_ERR_CONFIG, "data.weight_schedule is set but data.sources is not: it changes the "
                                           "weights of a mixture; give the mixture in data.sources, or leave "
                                           "data.weight_schedule out");
        return WF_OK;
    }
    if (tc->data_dir && tc->data_dir[0]) /* "" (--data.dir=) is unset: a config's dir can be cleared */
        return wf_error(WF_ERR_CONFIG, "data.dir = %s and data.sources are both set: a run reads one dataset "
                                       "(data.dir) or a mixture (data.sources); leave one out",
                        tc->data_dir);
    WF_TRY(wf_mix_spec_parse(&mx->spec, (const char *const *)src->items, src->n, (const char *const *)ws->items,
                             ws->n, "data.sources", "data.weight_schedule"));
    const int n = mx->spec.n;
    mx->val = calloc((size_t)n, sizeof *mx->val);
    mx->val_loss = calloc((size_t)n, sizeof *mx->val_loss);
    mx->rec = calloc((size_t)n, sizeof *mx->rec);
    if (!mx->val || !mx->val_loss || !mx->rec) return wf_error(WF_ERR_NOMEM, "out of memory");
    mx->n = n;
    for (int k = 0; k < n; k++) mx->val_loss[k] = NAN;
    for (int i = 0; i < mx->spec.n_changes; i++)
        if (mx->spec.change_step[i] > tc->steps)
            WF_WARN("data.weight_schedule item %d: step %lld is after train.steps = %lld: this run never reaches it",
                    i + 1, (long long)mx->spec.change_step[i], (long long)tc->steps);
    mx->cur = mx->spec.weights;
    return WF_OK;
}

void wf__train_mix_free(trainer *t) {
    train_mix *mx = &t->mix;
    for (int k = 0; mx->val && k < mx->n; k++) wf_loader_destroy(mx->val[k]);
    free(mx->val);
    free(mx->val_loss);
    free(mx->rec);
    wf_mix_spec_free(&mx->spec);
    memset(mx, 0, sizeof *mx);
}

/* ------------------------------------------------------------- the data */

wf_status wf__train_mix_check_data(trainer *t, uint32_t *vocab, char **tokenizer) {
    return wf_mix_spec_check_tokenizer(&t->mix.spec, t->tc->tokenizer, "data.sources", "data.tokenizer", vocab,
                                       tokenizer);
}

wf_status wf__train_mix_loaders(trainer *t, const wf_loader_opts *lo, const wf_loader_opts *vo) {
    train_mix *mx = &t->mix;
    wf_loader_opts o = *lo;
    o.dir = NULL;
    o.source_dirs = (const char *const *)mx->spec.dirs;
    o.n_sources = mx->n;
    o.weights = &mx->spec.weights;
    wf_status s = wf_loader_create(&t->train, &o);
    if (s != WF_OK) return wf_error_wrap(s, "data.sources: ");
    if (!vo) return WF_OK;
    for (int k = 0; k < mx->n; k++) {
        wf_dataset_info info;
        WF_TRY(wf_dataset_info_load(&info, mx->spec.dirs[k]));
        uint64_t val_tokens = 0;
        for (size_t i = 0; i < info.n_splits; i++)
            if (strcmp(info.splits[i].name, "val") == 0) val_tokens = info.splits[i].n_tokens;
        wf_dataset_info_free(&info);
        if (val_tokens <= (uint64_t)t->T) {
            WF_INFO("data.sources: source '%s' has no validation split longer than one sequence (%" PRIu64
                    " tokens): no validation loss for it",
                    mx->spec.names[k], val_tokens);
            continue;
        }
        s = wf__train_val_loader(t, vo, mx->spec.dirs[k], val_tokens, &mx->val[k]);
        if (s != WF_OK) return wf_error_wrap(s, "data.sources: source '%s': validation split: ", mx->spec.names[k]);
        mx->n_val++;
    }
    if (mx->n_val == 0)
        WF_WARN("no source of data.sources has a validation split longer than one sequence; no validation loss will "
                "be computed");
    return WF_OK;
}

/* -------------------------------------------------------------- the steps */

static const wf_mix_weights *weights_at(const trainer *t, int64_t step1) {
    return wf_mix_spec_weights_at(&t->mix.spec, step1);
}

/* "pp 0.7, emma 0.3" */
static void describe_weights(const trainer *t, const wf_mix_weights *w, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < t->mix.n && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s %.6g", k ? ", " : "", t->mix.spec.names[k],
                                wf_mix_weight_share(w, k));
}

wf_status wf__train_mix_begin_step(trainer *t, int64_t step) {
    train_mix *mx = &t->mix;
    if (!mx->n) return WF_OK;
    const wf_mix_weights *w = weights_at(t, step + 1);
    if (wf_mix_weights_equal(w, &mx->cur)) return WF_OK;
    wf_mix_state st;
    WF_TRY(wf_loader_get_mix(t->train, &st));
    wf_mix_set_weights(&st, w);
    WF_TRY(wf_loader_set_mix(t->train, &st));
    if (t->rank == 0) {
        char now[1024], was[1024];
        describe_weights(t, w, now, sizeof now);
        describe_weights(t, &mx->cur, was, sizeof was);
        WF_INFO("step %lld: the mixture's weights are now %s (were %s), from sequence %" PRIu64
                " of the run on (data.weight_schedule)",
                (long long)step + 1, now, was, st.slot);
    }
    mx->cur = *w;
    mx->seg_step = step + 1;
    return WF_OK;
}

wf_status wf__train_mix_account(trainer *t, const wf_batch *b, step_outcome *o) {
    train_mix *mx = &t->mix;
    if (!mx->n) return WF_OK;
    for (int k = 0; k < mx->n; k++) o->src_seqs[k] += b->counts[k];
    wf_model_activation a;
    if (mx->loss_act < 0) {
        for (int i = wf_model_num_activations(t->model) - 1; i >= 0 && mx->loss_act < 0; i--) {
            wf_model_get_activation(t->model, i, &a);
            if (strcmp(a.name, "loss_per_token") == 0) mx->loss_act = i;
        }
    }
    if (mx->loss_act < 0) return WF_OK; /* never: the forward had targets */
    wf_model_get_activation(t->model, mx->loss_act, &a);
    const size_t T = (size_t)b->seq_len;
    float block[1024]; /* the losses come through the backend, a block at a time */
    for (int i = 0; i < b->batch && (size_t)(i + 1) * T <= a.numel; i++) {
        double sum = 0; /* in row order, in double: the same on any thread count */
        for (size_t j0 = 0; j0 < T; j0 += 1024) {
            size_t n = T - j0 < 1024 ? T - j0 : 1024;
            WF_TRY(wf_model_read_activation(t->model, mx->loss_act, (size_t)i * T + j0, n, block));
            for (size_t j = 0; j < n; j++) sum += block[j];
        }
        o->src_loss[b->source[i]] += sum;
    }
    return WF_OK;
}

wf_status wf__train_mix_finish_step(trainer *t, step_outcome *o) {
    train_mix *mx = &t->mix;
    if (!mx->n) return WF_OK;
    if (t->world > 1)
        WF_TRY(wf_comm_all_reduce_f64(t->comm, o->src_loss, (size_t)mx->n, WF_COMM_SUM, "mixture losses"));
    for (int k = 0; k < mx->n; k++)
        o->src_loss[k] = o->src_seqs[k] ? o->src_loss[k] / ((double)o->src_seqs[k] * t->T) : NAN;
    return WF_OK;
}

wf_status wf__train_mix_evaluate(trainer *t, double *loss) {
    train_mix *mx = &t->mix;
    double sum = 0;
    int n = 0;
    for (int k = 0; k < mx->n; k++) {
        if (!mx->val[k]) continue;
        WF_TRY(wf__train_eval_loader(t, mx->val[k], &mx->val_loss[k]));
        sum += mx->val_loss[k];
        n++;
    }
    *loss = n ? sum / n : NAN;
    return WF_OK;
}

void wf__train_mix_record(trainer *t, const step_outcome *o, int eval, wf_metrics_step *r) {
    train_mix *mx = &t->mix;
    if (!mx->n) return;
    wf_mix_state st;
    int have = wf_loader_get_mix(t->train, &st) == WF_OK;
    for (int k = 0; k < mx->n; k++)
        mx->rec[k] = (wf_metrics_source){.name = mx->spec.names[k],
                                         .weight = wf_mix_weight_share(&mx->cur, k),
                                         .tokens = o->src_seqs[k] * t->T,
                                         .tokens_seen = have ? (int64_t)st.taken[k] * t->T : -1,
                                         .loss = o->src_loss[k],
                                         .val_loss = eval && mx->val[k] ? mx->val_loss[k] : NAN};
    r->n_sources = mx->n;
    r->sources = mx->rec;
}

void wf__train_mix_log_plan(const trainer *t) {
    const train_mix *mx = &t->mix;
    if (!mx->n || t->rank != 0) return;
    char line[4096];
    size_t len = 0;
    line[0] = '\0';
    for (int k = 0; k < mx->n && len < sizeof line; k++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%s %.6g (%s, %" PRIu64 " sequences an epoch%s)",
                                k ? ", " : "", mx->spec.names[k], wf_mix_weight_share(&mx->cur, k), mx->spec.dirs[k],
                                wf_loader_source_samples(t->train, k), mx->val[k] ? ", validation split" : "");
    const int active = wf_mix_weights_active(&mx->cur);
    const double d = wf_mix_bound(active);
    WF_INFO("data: a mixture of %d sources (data.sources): %s; every global batch is drawn by the mixture schedule: "
            "each source within %.4g sequences of its share after any number of sequences, and within %.4g over any "
            "window of them under one set of weights (docs/loader.md)",
            mx->n, line, d, 2 * d);
    for (int i = 0; i < mx->spec.n_changes; i++) {
        char w[2048];
        describe_weights(t, &mx->spec.change_w[i], w, sizeof w);
        WF_INFO("data.weight_schedule: from step %lld: %s", (long long)mx->spec.change_step[i], w);
    }
}

/* ------------------------------------------------------------ checkpoints */

static char *u64_list(const uint64_t *v, const uint32_t *v32, int n) {
    char *s = malloc((size_t)n * 21 + 1);
    if (!s) return NULL;
    size_t len = 0;
    s[0] = '\0';
    for (int k = 0; k < n; k++)
        len += (size_t)sprintf(s + len, "%s%" PRIu64, k ? " " : "", v ? v[k] : (uint64_t)v32[k]);
    return s;
}

wf_status wf__train_mix_put(const trainer *t, wf_ckpt_meta *m) {
    const train_mix *mx = &t->mix;
    if (!mx->n) return WF_OK;
    wf_mix_state st;
    WF_TRY(wf_loader_get_mix(t->train, &st));
    size_t nl = 1;
    for (int k = 0; k < mx->n; k++) nl += strlen(mx->spec.names[k]) + 1;
    char *names = malloc(nl);
    char *taken = u64_list(st.taken, NULL, mx->n), *seg = u64_list(st.seg_taken, NULL, mx->n);
    char *w = u64_list(NULL, st.weights.w, mx->n);
    wf_status s = names && taken && seg && w ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK) {
        size_t len = 0;
        names[0] = '\0';
        for (int k = 0; k < mx->n; k++) len += (size_t)sprintf(names + len, "%s%s", k ? " " : "", mx->spec.names[k]);
        s = wf_ckpt_meta_set_str(m, "mix.sources", names);
    }
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "mix.slot", st.slot);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "mix.taken", taken);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "mix.weights", w);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "mix.segment_slot", st.seg_slot);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "mix.segment_taken", seg);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "mix.segment_step", (uint64_t)mx->seg_step);
    /* NAME=DIR, a line each: what `weft eval --checkpoint` evaluates by default. */
    char *dirs = NULL;
    size_t dlen = 0;
    FILE *f = s == WF_OK ? open_memstream(&dirs, &dlen) : NULL;
    if (s == WF_OK && !f) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (f) {
        for (int k = 0; k < mx->n; k++) fprintf(f, "%s%s=%s", k ? "\n" : "", mx->spec.names[k], mx->spec.dirs[k]);
        fclose(f);
        s = dirs ? wf_ckpt_meta_set_str(m, "mix.dirs", dirs) : wf_error(WF_ERR_NOMEM, "out of memory");
    }
    free(dirs);
    free(names);
    free(taken);
    free(seg);
    free(w);
    return s;
}

/* n integers separated by spaces; 0 when the text is not that. */
static int parse_u64s(const char *text, uint64_t *out, int n) {
    const char *p = text;
    for (int k = 0; k < n; k++) {
        while (*p == ' ') p++;
        if (*p < '0' || *p > '9') return 0;
        char *end;
        out[k] = strtoull(p, &end, 10);
        p = end;
    }
    while (*p == ' ') p++;
    return *p == '\0';
}

/* A fresh mixture for the steps after `start`: every source from its
 * beginning (or, `keep`, from the counts given), one segment from here. */
static wf_status fresh_state(trainer *t, int64_t start, uint64_t slot, const uint64_t *keep) {
    train_mix *mx = &t->mix;
    const wf_mix_weights *w = weights_at(t, start + 1);
    wf_mix_state st;
    wf_mix_state_init(&st, w);
    st.slot = st.seg_slot = slot;
    for (int k = 0; k < mx->n; k++) st.taken[k] = st.seg_taken[k] = keep ? keep[k] : 0;
    WF_TRY(wf_loader_set_mix(t->train, &st));
    mx->cur = *w;
    mx->seg_step = start + 1;
    return WF_OK;
}

wf_status wf__train_mix_restore(trainer *t, const wf_ckpt *c, int64_t start) {
    train_mix *mx = &t->mix;
    const char *dir = wf_ckpt_path(c);
    const char *names = NULL;
    int has = wf_ckpt_get_str(c, "mix.sources", &names) == WF_OK;
    wf_error_clear();
    if (!mx->n) {
        if (has)
            WF_WARN("%s was saved reading a mixture (data.sources = %s); this run reads data.dir = %s from its "
                    "beginning",
                    dir, names, t->tc->data_dir);
        return WF_OK;
    }
    if (!has) {
        WF_INFO("%s was saved reading one dataset (data.dir): the mixture starts at the beginning of each of its %d "
                "sources",
                dir, mx->n);
        return fresh_state(t, start, 0, NULL);
    }
    /* The saved sources' names, in order. */
    char saved[WF_MIX_MAX_SOURCES][WF_MIX_NAME_MAX + 1];
    int n = 0;
    for (const char *p = names; *p;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, " ");
        if (!len) break;
        if (n == WF_MIX_MAX_SOURCES || len > WF_MIX_NAME_MAX)
            return wf_error(WF_ERR_FORMAT, "%s: mix.sources '%s' is not up to %d names", dir, names,
                            WF_MIX_MAX_SOURCES);
        memcpy(saved[n], p, len);
        saved[n][len] = '\0';
        n++;
        p += len;
    }
    uint64_t slot, seg_slot, seg_step = 0, taken[WF_MIX_MAX_SOURCES], seg_taken[WF_MIX_MAX_SOURCES],
                                  w[WF_MIX_MAX_SOURCES];
    const char *tk, *sk, *wk;
    WF_TRY(wf_ckpt_get_u64(c, "mix.slot", &slot));
    WF_TRY(wf_ckpt_get_u64(c, "mix.segment_slot", &seg_slot));
    WF_TRY(wf_ckpt_get_str(c, "mix.taken", &tk));
    WF_TRY(wf_ckpt_get_str(c, "mix.segment_taken", &sk));
    WF_TRY(wf_ckpt_get_str(c, "mix.weights", &wk));
    if (wf_ckpt_get_u64(c, "mix.segment_step", &seg_step) != WF_OK) wf_error_clear();
    if (n == 0 || !parse_u64s(tk, taken, n) || !parse_u64s(sk, seg_taken, n) || !parse_u64s(wk, w, n))
        return wf_error(WF_ERR_FORMAT, "%s: mix.taken, mix.segment_taken and mix.weights must each hold one integer "
                                       "per source of mix.sources (%d)",
                        dir, n);
    int same = n == mx->n;
    for (int k = 0; same && k < n; k++) same = strcmp(saved[k], mx->spec.names[k]) == 0;
    if (!same) {
        /* Another list of sources: those of both keep their cursors by name. */
        uint64_t keep[WF_MIX_MAX_SOURCES];
        for (int k = 0; k < mx->n; k++) {
            keep[k] = 0;
            for (int j = 0; j < n; j++)
                if (strcmp(saved[j], mx->spec.names[k]) == 0) keep[k] = taken[j];
        }
        WF_WARN("%s was saved with the mixture sources '%s', this run's data.sources has others: the sources of both "
                "(by name) go on where they were, the others start at their beginning, and the schedule starts "
                "again at this step with its weights",
                dir, names);
        return fresh_state(t, start, slot, keep);
    }
    wf_mix_state st;
    memset(&st, 0, sizeof st);
    if (wf_mix_weights_from_ints(&st.weights, w, n, dir) != WF_OK)
        return wf_error(WF_ERR_FORMAT, "%s: mix.weights '%s' are not weights of a mixture", dir, wk);
    st.slot = slot;
    st.seg_slot = seg_slot;
    memcpy(st.taken, taken, (size_t)n * sizeof *taken);
    memcpy(st.seg_taken, seg_taken, (size_t)n * sizeof *seg_taken);
    WF_TRY(wf_mix_state_check(&st, dir));
    WF_TRY(wf_loader_set_mix(t->train, &st));
    mx->cur = st.weights;
    mx->seg_step = (int64_t)seg_step;
    return WF_OK;
}
