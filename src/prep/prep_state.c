/* The pipeline's counters: each unit's (OUT/_prep/stats/<step>.<unit>.json),
 * added up into the stats report (OUT/stats.json for programs,
 * OUT/stats.txt for people). Written atomically. Layouts:
 * docs/formats/prep-output.md and prep-intermediate.md. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"

/* Format version of stats.json (docs/formats/prep-output.md). 2: the
 * quality stage per language (stages.quality.by_language) and the rule
 * sets that judged them (quality_rule_sets). */
/* stats.json 3: "tasks" and "steps" (the units of each step and their
 * seconds); the stages' counters are as in 2. 4: the minhash counter
 * docs_char_shingles (the languages of minhash.char_languages are
 * shingled on characters). */
#define PREP_STATS_VERSION 4

void wf__prep_stats_free(prep_stats *s) {
    free(s->langs);
    s->langs = NULL;
    s->n_langs = 0;
    free(s->qlangs);
    s->qlangs = NULL;
    s->n_qlangs = 0;
}

prep_quality_lang *wf__prep_stats_qlang(prep_stats *s, const char *code, const char *rule_set) {
    size_t i = 0;
    while (i < s->n_qlangs && strcmp(s->qlangs[i].lang, code) < 0) i++;
    if (i < s->n_qlangs && strcmp(s->qlangs[i].lang, code) == 0) return &s->qlangs[i];
    prep_quality_lang *nq = realloc(s->qlangs, (s->n_qlangs + 1) * sizeof *nq);
    if (!nq) return NULL;
    s->qlangs = nq;
    memmove(&s->qlangs[i + 1], &s->qlangs[i], (s->n_qlangs - i) * sizeof *nq);
    memset(&s->qlangs[i], 0, sizeof *nq);
    snprintf(s->qlangs[i].lang, sizeof s->qlangs[i].lang, "%s", code);
    snprintf(s->qlangs[i].rule_set, sizeof s->qlangs[i].rule_set, "%s", rule_set);
    s->n_qlangs++;
    return &s->qlangs[i];
}

wf_status wf__prep_stats_add_lang(prep_stats *s, const char *code, uint64_t docs, uint64_t bytes) {
    size_t i = 0;
    while (i < s->n_langs && strcmp(s->langs[i].code, code) < 0) i++;
    if (i < s->n_langs && strcmp(s->langs[i].code, code) == 0) {
        s->langs[i].docs += docs;
        s->langs[i].bytes += bytes;
        return WF_OK;
    }
    prep_lang_count *nl = realloc(s->langs, (s->n_langs + 1) * sizeof *nl);
    if (!nl) return wf_error(WF_ERR_NOMEM, "out of memory");
    s->langs = nl;
    memmove(&s->langs[i + 1], &s->langs[i], (s->n_langs - i) * sizeof *nl);
    memset(&s->langs[i], 0, sizeof *nl);
    snprintf(s->langs[i].code, sizeof s->langs[i].code, "%s", code);
    s->langs[i].docs = docs;
    s->langs[i].bytes = bytes;
    s->n_langs++;
    return WF_OK;
}

static json_t *u64(uint64_t x) { return json_integer((json_int_t)x); }

static const char *const step_names[] = {
#define PREP_STEP_NAME_(e, s) s,
    PREP_STEPS(PREP_STEP_NAME_)
#undef PREP_STEP_NAME_
};

const char *wf__prep_step_name(int step) { return step >= 0 && step < PS_COUNT ? step_names[step] : "?"; }

void wf__prep_stats_account(prep_stats *s, int last, int drop_reason, const uint64_t *at) {
    for (int st = 0; st <= last && st < ST_COUNT; st++) {
        s->docs_in[st]++;
        s->bytes_in[st] += at[st];
        if (st < last) {
            s->docs_out[st]++;
            s->bytes_out[st] += at[st + 1];
        } else if (drop_reason != R_NONE) {
            s->drop_docs[drop_reason]++;
            s->drop_bytes[drop_reason] += at[st];
        } else {
            s->docs_out[st]++;
            s->bytes_out[st] += at[st];
        }
    }
}

wf_status wf__prep_stats_merge(prep_stats *dst, const prep_stats *src) {
    for (int st = 0; st < ST_COUNT; st++) {
        dst->docs_in[st] += src->docs_in[st];
        dst->docs_out[st] += src->docs_out[st];
        dst->bytes_in[st] += src->bytes_in[st];
        dst->bytes_out[st] += src->bytes_out[st];
        dst->seconds[st] += src->seconds[st];
    }
    for (int r = 0; r < R_COUNT; r++) {
        dst->drop_docs[r] += src->drop_docs[r];
        dst->drop_bytes[r] += src->drop_bytes[r];
    }
    for (int e = 0; e < E_COUNT; e++) dst->extra[e] += src->extra[e];
    for (int k = 0; k < PREP_PPL_BINS; k++) dst->ppl_hist[k] += src->ppl_hist[k];
    for (int k = 0; k < PS_COUNT; k++) {
        dst->step_seconds[k] += src->step_seconds[k];
        dst->step_units[k] += src->step_units[k];
        dst->step_bytes[k] += src->step_bytes[k];
    }
    for (size_t i = 0; i < src->n_langs; i++)
        WF_TRY(wf__prep_stats_add_lang(dst, src->langs[i].code, src->langs[i].docs, src->langs[i].bytes));
    for (size_t i = 0; i < src->n_qlangs; i++) {
        const prep_quality_lang *q = &src->qlangs[i];
        prep_quality_lang *d = wf__prep_stats_qlang(dst, q->lang, q->rule_set);
        if (!d) return wf_error(WF_ERR_NOMEM, "out of memory");
        d->docs_in += q->docs_in;
        d->docs_out += q->docs_out;
        for (int r = 0; r < R_COUNT; r++) d->drop[r] += q->drop[r];
    }
    return WF_OK;
}

/* Perplexity at a percentile of the histogram (the upper edge of its bin). */
static double ppl_percentile(const prep_stats *s, double q) {
    uint64_t total = 0;
    for (int i = 0; i < PREP_PPL_BINS; i++) total += s->ppl_hist[i];
    if (!total) return 0.0;
    uint64_t want = (uint64_t)ceil(q * (double)total), acc = 0;
    for (int i = 0; i < PREP_PPL_BINS; i++) {
        acc += s->ppl_hist[i];
        if (acc >= want && acc) return pow(10.0, (i + 1) / 100.0);
    }
    return pow(10.0, PREP_PPL_BINS / 100.0);
}

static int stage_enabled(const wf_prep_config *c, int st) {
    if (!c) return 1;
    switch (st) {
    case ST_DEDUP: return c->dedup;
    case ST_LANGID: return c->langid;
    case ST_QUALITY: return c->quality;
    case ST_MINHASH: return c->minhash;
    case ST_PERPLEXITY: return c->ppl_model && c->ppl_model[0];
    default: return 1;
    }
}

/* The quality stage per language: {"de": {"rule_set": "de", "docs_in": 5,
 * "docs_out": 4, "dropped": {"stop_words": 1}}, ...}, drop reasons with
 * documents only. */
static json_t *quality_langs_json(const prep_stats *s) {
    json_t *all = json_object();
    for (size_t i = 0; i < s->n_qlangs; i++) {
        const prep_quality_lang *q = &s->qlangs[i];
        json_t *j = json_object(), *dropped = json_object();
        json_object_set_new(j, "rule_set", json_string(q->rule_set));
        json_object_set_new(j, "docs_in", u64(q->docs_in));
        json_object_set_new(j, "docs_out", u64(q->docs_out));
        for (int r = 0; r < R_COUNT; r++)
            if (q->drop[r]) json_object_set_new(dropped, wf__prep_reason_name(r), u64(q->drop[r]));
        json_object_set_new(j, "dropped", dropped);
        json_object_set_new(all, q->lang, j);
    }
    return all;
}

/* The counters as JSON (the part that a unit's counters and stats.json share). */
static json_t *stats_json(const prep_stats *s, const wf_prep_config *c) {
    json_t *root = json_object();
    json_t *stages = json_object();
    for (int st = 0; st < ST_COUNT; st++) {
        json_t *j = json_object();
        if (c) json_object_set_new(j, "enabled", json_boolean(stage_enabled(c, st)));
        json_object_set_new(j, "docs_in", u64(s->docs_in[st]));
        json_object_set_new(j, "docs_out", u64(s->docs_out[st]));
        json_object_set_new(j, "bytes_in", u64(s->bytes_in[st]));
        json_object_set_new(j, "bytes_out", u64(s->bytes_out[st]));
        json_t *dropped = json_object();
        for (int r = 0; r < R_COUNT; r++) {
            if (wf__prep_reason_stage(r) != st) continue;
            json_t *d = json_object();
            json_object_set_new(d, "docs", u64(s->drop_docs[r]));
            json_object_set_new(d, "bytes", u64(s->drop_bytes[r]));
            json_object_set_new(dropped, wf__prep_reason_name(r), d);
        }
        json_object_set_new(j, "dropped", dropped);
        json_t *counters = json_object();
        for (int e = 0; e < E_COUNT; e++)
            if (wf__prep_extra_stage(e) == st) json_object_set_new(counters, wf__prep_extra_name(e), u64(s->extra[e]));
        json_object_set_new(j, "counters", counters);
        if (st == ST_QUALITY) json_object_set_new(j, "by_language", quality_langs_json(s));
        json_object_set_new(j, "seconds", json_real(s->seconds[st]));
        json_object_set_new(j, "mb_per_s",
                            json_real(s->seconds[st] > 0 ? s->bytes_in[st] / 1e6 / s->seconds[st] : 0.0));
        json_object_set_new(stages, wf__prep_stage_name(st), j);
    }
    json_object_set_new(root, "stages", stages);
    json_t *langs = json_object();
    for (size_t i = 0; i < s->n_langs; i++) {
        json_t *l = json_object();
        json_object_set_new(l, "docs", u64(s->langs[i].docs));
        json_object_set_new(l, "bytes", u64(s->langs[i].bytes));
        json_object_set_new(langs, s->langs[i].code, l);
    }
    json_object_set_new(root, "languages", langs);
    return root;
}

static uint64_t get_u64(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* Version 1 states have no "by_language": nothing to read. */
static wf_status quality_langs_from_json(json_t *all, prep_stats *s) {
    const char *code;
    json_t *j;
    json_object_foreach(all, code, j) {
        const char *set = json_string_value(json_object_get(j, "rule_set"));
        if (!set || strlen(code) >= sizeof s->qlangs->lang || strlen(set) >= sizeof s->qlangs->rule_set)
            return wf_error(WF_ERR_FORMAT, "stages.quality.by_language.%s is malformed", code);
        prep_quality_lang *q = wf__prep_stats_qlang(s, code, set);
        if (!q) return wf_error(WF_ERR_NOMEM, "out of memory");
        q->docs_in = get_u64(j, "docs_in");
        q->docs_out = get_u64(j, "docs_out");
        json_t *dropped = json_object_get(j, "dropped");
        for (int r = 0; r < R_COUNT; r++)
            if (wf__prep_reason_stage(r) == ST_QUALITY) q->drop[r] = get_u64(dropped, wf__prep_reason_name(r));
    }
    return WF_OK;
}

static wf_status stats_from_json(json_t *root, prep_stats *s) {
    json_t *stages = json_object_get(root, "stages");
    for (int st = 0; st < ST_COUNT; st++) {
        json_t *j = json_object_get(stages, wf__prep_stage_name(st));
        if (!json_is_object(j)) continue;
        s->docs_in[st] = get_u64(j, "docs_in");
        s->docs_out[st] = get_u64(j, "docs_out");
        s->bytes_in[st] = get_u64(j, "bytes_in");
        s->bytes_out[st] = get_u64(j, "bytes_out");
        json_t *sec = json_object_get(j, "seconds");
        s->seconds[st] = json_is_number(sec) ? json_number_value(sec) : 0.0;
        json_t *dropped = json_object_get(j, "dropped"), *counters = json_object_get(j, "counters");
        for (int r = 0; r < R_COUNT; r++) {
            if (wf__prep_reason_stage(r) != st) continue;
            json_t *d = json_object_get(dropped, wf__prep_reason_name(r));
            s->drop_docs[r] = get_u64(d, "docs");
            s->drop_bytes[r] = get_u64(d, "bytes");
        }
        for (int e = 0; e < E_COUNT; e++)
            if (wf__prep_extra_stage(e) == st) s->extra[e] = get_u64(counters, wf__prep_extra_name(e));
        if (st == ST_QUALITY) WF_TRY(quality_langs_from_json(json_object_get(j, "by_language"), s));
    }
    json_t *langs = json_object_get(root, "languages");
    const char *code;
    json_t *l;
    json_object_foreach(langs, code, l) WF_TRY(wf__prep_stats_add_lang(s, code, get_u64(l, "docs"), get_u64(l, "bytes")));
    return WF_OK;
}

static wf_status write_json(const char *path, json_t *root) {
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* the terminating NUL becomes the final newline */
    wf_status s = wf_file_write_atomic(path, text, n + 1);
    free(text);
    return s;
}

static json_t *steps_json(const prep_stats *st) {
    json_t *steps = json_object();
    for (int k = 0; k < PS_COUNT; k++) {
        json_t *j = json_object();
        json_object_set_new(j, "units", u64(st->step_units[k]));
        json_object_set_new(j, "bytes_in", u64(st->step_bytes[k]));
        json_object_set_new(j, "seconds", json_real(st->step_seconds[k]));
        json_object_set_new(steps, step_names[k], j);
    }
    return steps;
}

wf_status wf__prep_partial_write(const char *path, const prep_stats *st) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("weft-prep-unit-stats"));
    json_object_set_new(root, "version", json_integer(1));
    json_t *sj = stats_json(st, NULL);
    json_object_set_new(sj, "steps", steps_json(st));
    int bins = 0;
    for (int i = 0; i < PREP_PPL_BINS; i++) bins |= st->ppl_hist[i] != 0;
    if (bins) {
        json_t *h = json_array();
        for (int i = 0; i < PREP_PPL_BINS; i++) json_array_append_new(h, u64(st->ppl_hist[i]));
        json_object_set_new(sj, "ppl_hist", h);
    }
    json_object_set_new(root, "stats", sj);
    wf_status s = write_json(path, root);
    json_decref(root);
    return s;
}

wf_status wf__prep_partial_read(const char *path, prep_stats *st) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root)
        return wf_error(WF_ERR_FORMAT, "%s:%d: %s: a unit's counters are damaged; rerun with --force", path,
                        err.line, err.text);
    json_t *fmt = json_object_get(root, "format"), *sj = json_object_get(root, "stats");
    wf_status s = WF_OK;
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "weft-prep-unit-stats") != 0 ||
        json_integer_value(json_object_get(root, "version")) != 1 || !json_is_object(sj)) {
        s = wf_error(WF_ERR_FORMAT, "%s: not a weft prep unit's counters (version 1); rerun with --force", path);
    } else if ((s = stats_from_json(sj, st)) != WF_OK) {
        s = wf_error_wrap(s, "%s: ", path);
    } else {
        json_t *steps = json_object_get(sj, "steps");
        for (int k = 0; k < PS_COUNT; k++) {
            json_t *j = json_object_get(steps, step_names[k]);
            st->step_units[k] = get_u64(j, "units");
            st->step_bytes[k] = get_u64(j, "bytes_in");
            json_t *sec = json_object_get(j, "seconds");
            st->step_seconds[k] = json_is_number(sec) ? json_number_value(sec) : 0.0;
        }
        json_t *h = json_object_get(sj, "ppl_hist");
        if (json_is_array(h) && json_array_size(h) == PREP_PPL_BINS)
            for (int k = 0; k < PREP_PPL_BINS; k++)
                st->ppl_hist[k] = (uint64_t)json_integer_value(json_array_get(h, (size_t)k));
    }
    json_decref(root);
    return s;
}

static json_t *rule_value_json(wf_opt_type type, const void *v) {
    switch (type) {
    case WF_OPT_INT: return json_integer((json_int_t) * (const int64_t *)v);
    case WF_OPT_FLOAT: return json_real(*(const double *)v);
    case WF_OPT_BOOL: return json_boolean(*(const int *)v);
    case WF_OPT_STRS: {
        const wf_strs *l = v;
        json_t *a = json_array();
        for (size_t i = 0; i < l->n; i++) json_array_append_new(a, json_string(l->items[i]));
        return a;
    }
    case WF_OPT_STR: break;
    }
    return json_null();
}

/* The rule sets that judged documents of the run: {"de": {"languages":
 * ["de"], "word_rules": true, "stop_words": [...], "settings": {the keys
 * whose value is not [quality]'s}}}. */
static json_t *rule_sets_json(const wf_prep_config *c, const prep_rule_sets *rules, const prep_stats *st) {
    json_t *all = json_object();
    size_t n_fields;
    const prep_rule_field *fields = wf__prep_rule_fields(&n_fields);
    for (size_t i = 0; i < st->n_qlangs; i++) {
        const prep_quality_lang *q = &st->qlangs[i];
        if (strcmp(q->rule_set, "none") == 0) continue;
        json_t *j = json_object_get(all, q->rule_set);
        if (!j) {
            const prep_rule_set *rs = wf__prep_rules_find(rules, q->lang);
            j = json_object();
            json_object_set_new(j, "languages", json_array());
            if (rs && strcmp(rs->name, q->rule_set) == 0) {
                json_object_set_new(j, "word_rules", json_boolean(rs->r.word_rules));
                json_object_set_new(j, "stop_words", rule_value_json(WF_OPT_STRS, &rs->r.stop_words));
                json_t *set = json_object();
                for (size_t k = 0; k < n_fields; k++) {
                    const prep_rule_field *f = &fields[k];
                    if (f->type == WF_OPT_STRS || strcmp(f->key, "word_rules") == 0) continue;
                    const char *a = (const char *)&rs->r + f->offset, *b = (const char *)&c->rules + f->offset;
                    size_t size = f->type == WF_OPT_INT ? sizeof(int64_t) : f->type == WF_OPT_FLOAT ? sizeof(double)
                                                                                                      : sizeof(int);
                    if (memcmp(a, b, size) != 0) json_object_set_new(set, f->key, rule_value_json(f->type, a));
                }
                json_object_set_new(j, "settings", set);
            }
            json_object_set_new(all, q->rule_set, j);
        }
        json_array_append_new(json_object_get(j, "languages"), json_string(q->lang));
    }
    return all;
}

static void fmt_bytes(uint64_t b, char *out, size_t cap) {
    if (b >= (uint64_t)1 << 30) snprintf(out, cap, "%.2f GB", b / 1e9);
    else if (b >= (uint64_t)1 << 20) snprintf(out, cap, "%.2f MB", b / 1e6);
    else if (b >= 1024) snprintf(out, cap, "%.1f KB", b / 1e3);
    else snprintf(out, cap, "%llu B", (unsigned long long)b);
}

wf_status wf__prep_stats_write(const char *dir, const wf_prep_config *c, const prep_progress_state *ps,
                           const prep_stats *st) {
    char path[WF_PATH_MAX];
    /* JSON */
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("weft-prep-stats"));
    json_object_set_new(root, "version", json_integer(PREP_STATS_VERSION));
    json_object_set_new(root, "complete", json_boolean(ps->complete));
    json_object_set_new(root, "inputs", u64(ps->n_inputs));
    json_object_set_new(root, "inputs_done", u64(ps->inputs_done));
    json_object_set_new(root, "tasks", u64((uint64_t)ps->tasks));
    json_object_set_new(root, "steps", steps_json(st));
    json_t *sj = stats_json(st, c);
    const char *k;
    json_t *v;
    json_object_foreach(sj, k, v) json_object_set(root, k, v);
    json_decref(sj);
    if (c->ppl_model && c->ppl_model[0]) {
        json_t *p = json_object();
        static const double qs[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};
        for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
            char key[8];
            snprintf(key, sizeof key, "p%d", (int)(qs[i] * 100 + 0.5));
            json_object_set_new(p, key, json_real(ppl_percentile(st, qs[i])));
        }
        json_t *pj = json_object();
        json_object_set_new(pj, "percentiles", p);
        json_object_set_new(pj, "head_max", json_real(c->ppl_head_max));
        json_object_set_new(pj, "middle_max", json_real(c->ppl_middle_max));
        json_object_set_new(root, "perplexity", pj);
    }
    json_t *out = json_object();
    json_object_set_new(out, "docs", u64(st->docs_out[ST_OUTPUT]));
    json_object_set_new(out, "text_bytes", u64(st->bytes_out[ST_OUTPUT]));
    json_object_set_new(out, "jsonl_bytes", u64(st->extra[E_JSON_BYTES]));
    json_object_set_new(out, "shards", u64(st->extra[E_SHARDS]));
    json_object_set_new(root, "output", out);
    json_object_set_new(root, "wall_seconds", json_real(st->wall_seconds));
    prep_rule_sets rules = {0};
    wf_status s = c->quality ? wf__prep_rules_build(c, &rules) : WF_OK;
    if (s == WF_OK && c->quality)
        json_object_set_new(json_object_get(json_object_get(root, "stages"), "quality"), "rule_sets",
                            rule_sets_json(c, &rules, st));
    wf__prep_rules_free(&rules);
    if (s == WF_OK) s = wf_path_join(path, sizeof path, dir, "stats.json", NULL);
    if (s == WF_OK) s = write_json(path, root);
    json_decref(root);
    WF_TRY(s);

    /* Text */
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f) return wf_error(WF_ERR_NOMEM, "out of memory");
    char a[32], b[32];
    fmt_bytes(st->extra[E_INPUT_BYTES], a, sizeof a);
    fmt_bytes(st->bytes_out[ST_OUTPUT], b, sizeof b);
    fprintf(f, "weft prep: %zu of %zu inputs (%s), %llu records -> %llu documents (%s of text) in %llu shards, "
               "%.1f s\n\n",
            ps->inputs_done, ps->n_inputs, a, (unsigned long long)st->extra[E_RECORDS],
            (unsigned long long)st->docs_out[ST_OUTPUT], b, (unsigned long long)st->extra[E_SHARDS],
            st->wall_seconds);
    fprintf(f, "%-11s %10s %10s %11s %11s %9s\n", "stage", "docs in", "docs out", "MB in", "MB out", "MB/s");
    for (int stg = 0; stg < ST_COUNT; stg++) {
        int on = stage_enabled(c, stg);
        fprintf(f, "%-11s %10llu %10llu %11.2f %11.2f ", wf__prep_stage_name(stg),
                (unsigned long long)st->docs_in[stg], (unsigned long long)st->docs_out[stg],
                st->bytes_in[stg] / 1e6, st->bytes_out[stg] / 1e6);
        if (!on) fprintf(f, "%9s\n", "off");
        else if (st->seconds[stg] > 0) fprintf(f, "%9.1f\n", st->bytes_in[stg] / 1e6 / st->seconds[stg]);
        else fprintf(f, "%9s\n", "-");
        for (int r = 0; r < R_COUNT; r++)
            if (wf__prep_reason_stage(r) == stg && st->drop_docs[r])
                fprintf(f, "  dropped %-26s %10llu docs %11.2f MB\n", wf__prep_reason_name(r),
                        (unsigned long long)st->drop_docs[r], st->drop_bytes[r] / 1e6);
        for (int e = 0; e < E_COUNT; e++)
            if (wf__prep_extra_stage(e) == stg && st->extra[e])
                fprintf(f, "  %-34s %10llu\n", wf__prep_extra_name(e), (unsigned long long)st->extra[e]);
    }
    if (st->n_langs) {
        fprintf(f, "\nlanguages written:\n");
        for (size_t i = 0; i < st->n_langs; i++) {
            fmt_bytes(st->langs[i].bytes, a, sizeof a);
            fprintf(f, "  %-10s %10llu docs %12s\n", st->langs[i].code, (unsigned long long)st->langs[i].docs, a);
        }
    }
    if (st->n_qlangs) {
        fprintf(f, "\nquality by language:\n  %-10s %-12s %10s %10s  dropped (most)\n", "language", "rule set",
                "docs in", "docs out");
        for (size_t i = 0; i < st->n_qlangs; i++) {
            const prep_quality_lang *q = &st->qlangs[i];
            fprintf(f, "  %-10s %-12s %10llu %10llu", q->lang, q->rule_set, (unsigned long long)q->docs_in,
                    (unsigned long long)q->docs_out);
            /* The three rules that dropped most of its documents (ties in
             * the order the rules are checked). */
            int shown[3] = {-1, -1, -1};
            for (int nth = 0; nth < 3; nth++) {
                int best = -1;
                for (int r = 0; r < R_COUNT; r++) {
                    if (!q->drop[r] || r == shown[0] || r == shown[1]) continue;
                    if (best < 0 || q->drop[r] > q->drop[best]) best = r;
                }
                if (best < 0) break;
                shown[nth] = best;
                fprintf(f, "%s%s %llu", nth ? ", " : "  ", wf__prep_reason_name(best), (unsigned long long)q->drop[best]);
            }
            fprintf(f, "\n");
        }
    }
    if (c->ppl_model && c->ppl_model[0]) {
        fprintf(f, "\nperplexity: p30 %.1f  p60 %.1f (head <= %g, middle <= %g)\n", ppl_percentile(st, 0.3),
                ppl_percentile(st, 0.6), c->ppl_head_max, c->ppl_middle_max);
    }
    fclose(f);
    s = wf_path_join(path, sizeof path, dir, "stats.txt", NULL);
    if (s == WF_OK) s = wf_file_write_atomic(path, text, tlen);
    free(text);
    return s;
}
