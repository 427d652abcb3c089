/* The per-step record and its sinks: metrics.jsonl (one JSON object a
 * line, keys in WF_METRICS_FIELDS order, values that were not measured left
 * out) and the TensorBoard event file. Both are buffered in memory and
 * written at an interval, so a step costs no system call. */
#include "weft/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs_impl.h"
#include "weft/json.h"
#include "weft/fileio.h"
#include "weft/rundir.h"

void wf_metrics_step_init(wf_metrics_step *r) {
#define INIT_D_(f) r->f = NAN;
#define INIT_I_(f) r->f = -1;
#define INIT_B_(f) r->f = 0;
#define INIT_(key, f, type, tag, scale, unit) INIT_##type##_(f)
    WF_METRICS_FIELDS(INIT_)
#undef INIT_
#undef INIT_D_
#undef INIT_I_
#undef INIT_B_
    r->time = 0;
    r->n_sources = 0;
    r->sources = NULL;
    r->n_tasks = 0;
    r->tasks = NULL;
}

void wf_metrics_step_derive(wf_metrics_step *r, double flops_per_token, int n_procs, double peak_tflops) {
    if (r->tokens < 0 || !(r->step_s > 0)) return;
    r->tokens_per_s = (double)r->tokens / r->step_s;
    if (flops_per_token > 0) {
        r->tflops = flops_per_token * (double)r->tokens / r->step_s / 1e12 / (n_procs > 1 ? n_procs : 1);
        if (peak_tflops > 0) r->mfu_pct = 100.0 * r->tflops / peak_tflops;
    }
}

void wf_metrics_step_memory(wf_metrics_step *r, const wf_arena *arena) {
    if (arena) {
        wf_arena_stats st = wf_arena_get_stats(arena);
        r->arena_in_use = (int64_t)st.in_use;
        r->arena_reserved = (int64_t)st.reserved;
        r->arena_peak = (int64_t)st.peak;
    }
    wf_host_mem hm;
    if (wf_host_mem_read(&hm) == WF_OK) {
        r->host_rss = hm.rss;
        r->host_rss_peak = hm.rss_peak;
        r->host_available = hm.mem_available;
    } else {
        wf_error_clear();
    }
}

struct wf_metrics {
    FILE *jsonl;
    char *jsonl_path;
    wf_buf buf;
    wf_tb_writer *tb;
    double flush_every_s, last_flush;
};

static wf_status jsonl_write_out(wf_metrics *m) {
    if (!m->jsonl) return WF_OK;
    if (m->buf.failed) {
        m->buf.len = 0;
        m->buf.failed = 0;
        return wf_error(WF_ERR_NOMEM, "%s: out of memory buffering metrics; records were lost", m->jsonl_path);
    }
    if (m->buf.len && fwrite(m->buf.data, 1, m->buf.len, m->jsonl) != m->buf.len)
        return wf_error(WF_ERR_IO, "%s: write failed: %s (is the disk full?)", m->jsonl_path, strerror(errno));
    m->buf.len = 0;
    if (fflush(m->jsonl) != 0)
        return wf_error(WF_ERR_IO, "%s: write failed: %s (is the disk full?)", m->jsonl_path, strerror(errno));
    return WF_OK;
}

wf_status wf_metrics_open(wf_metrics **out, const wf_metrics_options *opt) {
    *out = NULL;
    if (!opt->dir || !wf_path_is_dir(opt->dir))
        return wf_error(WF_ERR_NOTFOUND, "metrics: run directory %s does not exist; create it first",
                        opt->dir ? opt->dir : "(null)");
    wf_metrics *m = calloc(1, sizeof *m);
    if (!m) return wf_error(WF_ERR_NOMEM, "out of memory");
    m->flush_every_s = opt->flush_every_s > 0 ? opt->flush_every_s : 0;
    m->last_flush = wf__obs_unix_now();
    char path[WF_PATH_MAX];
    wf_status s = WF_OK;
    if (opt->jsonl && (s = wf_rundir_path(path, sizeof path, opt->dir, WF_RUN_METRICS)) == WF_OK) {
        m->jsonl = fopen(path, "ab");
        if (!m->jsonl) s = wf_error(WF_ERR_IO, "%s: cannot open for appending: %s", path, strerror(errno));
        else m->jsonl_path = strdup(path);
        if (m->jsonl && !m->jsonl_path) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK && opt->tensorboard && (s = wf_rundir_path(path, sizeof path, opt->dir, WF_RUN_TB)) == WF_OK)
        s = wf_tb_open(&m->tb, path, m->flush_every_s);
    if (s != WF_OK) {
        wf_metrics_close(m);
        return s;
    }
    *out = m;
    return WF_OK;
}

/* Appends one JSON line for `r`: every field in table order, NaN and -1
 * left out, except loss and grad_norm, which are null when not finite (a
 * step that has them always has them). */
static void jsonl_record(wf_buf *b, const wf_metrics_step *r) {
    int first = 1;
#define KEY_(key)                                     \
    do {                                              \
        wf_buf_append(b, first ? "{" : ",", 1);      \
        first = 0;                                    \
        wf_buf_json_str(b, key, strlen(key));                     \
        wf_buf_append(b, ":", 1);                    \
    } while (0)
#define PUT_D_(key, f)                                                      \
    if (isfinite(r->f)) {                                                   \
        KEY_(key);                                                          \
        wf__obs_buf_json_num(b, r->f);                                          \
    } else if (strcmp(key, "loss") == 0 || strcmp(key, "grad_norm") == 0) { \
        KEY_(key);                                                          \
        wf_buf_append(b, "null", 4);                                       \
    }
#define PUT_I_(key, f)                                    \
    if (r->f >= 0) {                                      \
        KEY_(key);                                        \
        wf_buf_printf(b, "%lld", (long long)r->f);       \
    }
#define PUT_B_(key, f)                                    \
    KEY_(key);                                            \
    wf_buf_append(b, r->f ? "1" : "0", 1);
#define PUT_(key, f, type, tag, scale, unit) PUT_##type##_(key, f)
    WF_METRICS_FIELDS(PUT_)
#undef PUT_
#undef PUT_B_
#undef PUT_I_
#undef PUT_D_
    /* A mixture's sources last, as one object: name -> its figures. */
    if (r->n_sources > 0) {
        KEY_("sources");
        wf_buf_append(b, "{", 1);
        for (int k = 0; k < r->n_sources; k++) {
            const wf_metrics_source *s = &r->sources[k];
            if (k) wf_buf_append(b, ",", 1);
            wf_buf_json_str(b, s->name, strlen(s->name));
            wf_buf_printf(b, ":{\"weight\":");
            wf__obs_buf_json_num(b, s->weight);
            wf_buf_printf(b, ",\"tokens\":%lld,\"tokens_seen\":%lld", (long long)s->tokens, (long long)s->tokens_seen);
            if (isfinite(s->loss)) {
                wf_buf_printf(b, ",\"loss\":");
                wf__obs_buf_json_num(b, s->loss);
            }
            if (isfinite(s->val_loss)) {
                wf_buf_printf(b, ",\"val_loss\":");
                wf__obs_buf_json_num(b, s->val_loss);
            }
            wf_buf_append(b, "}", 1);
        }
        wf_buf_append(b, "}", 1);
    }
    /* Downstream tasks, as one object: name -> its figures. */
    if (r->n_tasks > 0) {
        KEY_("tasks_score");
        wf__obs_buf_json_num(b, r->tasks_score);
        KEY_("tasks_s");
        wf__obs_buf_json_num(b, r->tasks_s);
        KEY_("tasks");
        wf_buf_append(b, "{", 1);
        for (int k = 0; k < r->n_tasks; k++) {
            const wf_metrics_task *q = &r->tasks[k];
            if (k) wf_buf_append(b, ",", 1);
            wf_buf_json_str(b, q->name, strlen(q->name));
            wf_buf_printf(b, ":{\"examples\":%.0f,\"acc\":", q->examples);
            wf__obs_buf_json_num(b, q->acc);
            wf_buf_printf(b, ",\"acc_norm\":");
            wf__obs_buf_json_num(b, q->acc_norm);
            wf_buf_printf(b, ",\"centered\":");
            wf__obs_buf_json_num(b, q->centered);
            wf_buf_printf(b, ",\"bpb\":");
            wf__obs_buf_json_num(b, q->bpb);
            wf_buf_append(b, "}", 1);
        }
        wf_buf_append(b, "}", 1);
    }
#undef KEY_
    wf_buf_append(b, "}\n", 2);
}

static wf_status tb_record(wf_tb_writer *tb, const wf_metrics_step *r) {
    WF_TRY(wf_tb_begin(tb, r->step, r->time));
#define TB_D_(tag, f, scale) \
    if (isfinite(r->f) || strcmp(tag, "train/loss") == 0 || strcmp(tag, "train/grad_norm") == 0) \
        WF_TRY(wf_tb_add(tb, tag, (float)(r->f * (scale))));
#define TB_I_(tag, f, scale) \
    if (r->f >= 0) WF_TRY(wf_tb_add(tb, tag, (float)((double)r->f * (scale))));
#define TB_B_(tag, f, scale) WF_TRY(wf_tb_add(tb, tag, (float)r->f));
#define TB_(key, f, type, tag, scale, unit) \
    if (tag[0]) {                           \
        TB_##type##_(tag, f, scale)         \
    }
    WF_METRICS_FIELDS(TB_)
#undef TB_
#undef TB_B_
#undef TB_I_
#undef TB_D_
    for (int k = 0; k < r->n_sources; k++) {
        const wf_metrics_source *s = &r->sources[k];
        char tag[160];
#define TB_SRC_(what, v)                                                       \
    do {                                                                       \
        snprintf(tag, sizeof tag, "sources/%s/%s", s->name, what);             \
        WF_TRY(wf_tb_add(tb, tag, (float)(v)));                                \
    } while (0)
        TB_SRC_("weight", s->weight);
        TB_SRC_("tokens", (double)s->tokens);
        TB_SRC_("tokens_seen", (double)s->tokens_seen);
        if (isfinite(s->loss)) TB_SRC_("loss", s->loss);
        if (isfinite(s->val_loss)) TB_SRC_("val_loss", s->val_loss);
#undef TB_SRC_
    }
    if (r->n_tasks > 0) {
        WF_TRY(wf_tb_add(tb, "tasks/score", (float)r->tasks_score));
        WF_TRY(wf_tb_add(tb, "time/tasks_s", (float)r->tasks_s));
    }
    for (int k = 0; k < r->n_tasks; k++) {
        const wf_metrics_task *q = &r->tasks[k];
        char tag[160];
#define TB_TASK_(what, v)                                                      \
    do {                                                                       \
        snprintf(tag, sizeof tag, "tasks/%s/%s", q->name, what);               \
        WF_TRY(wf_tb_add(tb, tag, (float)(v)));                                \
    } while (0)
        TB_TASK_("acc", q->acc);
        TB_TASK_("acc_norm", q->acc_norm);
        TB_TASK_("centered", q->centered);
        TB_TASK_("bpb", q->bpb);
#undef TB_TASK_
    }
    return WF_OK;
}

wf_status wf_metrics_log(wf_metrics *m, const wf_metrics_step *rec) {
    wf_metrics_step r = *rec;
    double now = wf__obs_unix_now();
    if (r.time == 0) r.time = now;
    if (m->jsonl) jsonl_record(&m->buf, &r);
    if (m->tb) WF_TRY(tb_record(m->tb, &r));
    if (m->buf.len >= (1u << 20) || now - m->last_flush >= m->flush_every_s) return wf_metrics_flush(m);
    return WF_OK;
}

wf_status wf_metrics_restart(wf_metrics *m, int64_t step) {
    return m->tb ? wf_tb_restart(m->tb, step) : WF_OK;
}

wf_status wf_metrics_scalar(wf_metrics *m, const char *tag, double value, int64_t step) {
    if (!m->tb) return WF_OK;
    return wf_tb_add_scalar(m->tb, tag, value, step);
}

wf_status wf_metrics_flush(wf_metrics *m) {
    m->last_flush = wf__obs_unix_now();
    wf_status s = jsonl_write_out(m);
    if (m->tb) {
        wf_status s2 = wf_tb_flush(m->tb);
        if (s == WF_OK) s = s2;
    }
    return s;
}

wf_status wf_metrics_close(wf_metrics *m) {
    if (!m) return WF_OK;
    wf_status s = jsonl_write_out(m);
    if (m->jsonl) {
        if (s == WF_OK && fsync(fileno(m->jsonl)) != 0 && errno != EINVAL)
            s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", m->jsonl_path, strerror(errno));
        if (fclose(m->jsonl) != 0 && s == WF_OK)
            s = wf_error(WF_ERR_IO, "%s: close failed: %s", m->jsonl_path, strerror(errno));
    }
    wf_status s2 = wf_tb_close(m->tb);
    if (s == WF_OK) s = s2;
    wf_buf_free(&m->buf);
    free(m->jsonl_path);
    free(m);
    return s;
}

const char *wf_metrics_tb_path(const wf_metrics *m) {
    return m ? wf_tb_path(m->tb) : NULL;
}
