/* `weft trace analyze`: HTA's analyses of a directory of per-rank Chrome
 * traces, computed from streamed files.
 *
 * What HTA (HolisticTraceAnalysis 0.5) does, and so what this file does:
 *  - an event counts when it has "dur" and "cat" and cat is not "Trace";
 *    with default rounding, ts is rounded up and ts + dur down to whole
 *    microseconds (hta/common/trace_parser.py round_down_time_stamps);
 *  - a kernel is an event with args.stream >= 0 and args.correlation >= 0;
 *    everything else is a CPU event;
 *  - when the traces name at least two ProfilerStep#N, each rank keeps the
 *    CPU events that start before the start of its last ProfilerStep (or,
 *    with include_last_profiler_step, no later than its end), and the
 *    kernels whose correlated CPU event it keeps (hta/common/trace.py
 *    _filter_irrelevant_gpu_kernels);
 *  - the device timeline is every kept event with a stream other than -1;
 *    kernels are COMMUNICATION, MEMORY, COMPUTATION or OTHER by name
 *    (hta/utils/utils.py get_kernel_type);
 *  - temporal breakdown, idle time per stream, communication/computation
 *    overlap, kernel statistics and stragglers as in hta/analyzers/.
 * weft adds the split of idle time by host data waits and of non-compute
 * time into communication and memory/I/O.
 *
 * Memory: each file is read twice as a stream (first its ProfilerStep
 * markers, then everything); one rank's device events are held at a time,
 * 40 bytes each, and CPU events are not held at all. */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "weft/buf.h"
#include "obs/trace_analyze_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/rundir.h"

#define NO_TS INT64_MIN

/* ---- small containers ----------------------------------------------------------- */

/* Interned strings: id -> string, with an open-addressing index. */
typedef struct {
    char **s;
    uint32_t n;
    size_t cap;
    uint32_t *slot; /* id + 1, 0 empty */
    uint32_t nslot;
} strtab;

static void strtab_free(strtab *t) {
    for (uint32_t i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

static int strtab_grow(strtab *t) {
    uint32_t ns = t->nslot ? t->nslot * 2 : 1024;
    uint32_t *slot = calloc(ns, sizeof *slot);
    if (!slot) return 0;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t h = wf_hash64(t->s[i], strlen(t->s[i]));
        uint32_t j = (uint32_t)h & (ns - 1);
        while (slot[j]) j = (j + 1) & (ns - 1);
        slot[j] = i + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->nslot = ns;
    return 1;
}

/* Returns the id of s, adding it; UINT32_MAX when out of memory. */
static uint32_t strtab_id(strtab *t, const char *s) {
    if ((uint64_t)(t->n + 1) * 2 > t->nslot && !strtab_grow(t)) return UINT32_MAX;
    size_t len = strlen(s);
    uint32_t j = (uint32_t)wf_hash64(s, len) & (t->nslot - 1);
    while (t->slot[j]) {
        uint32_t id = t->slot[j] - 1;
        if (strcmp(t->s[id], s) == 0) return id;
        j = (j + 1) & (t->nslot - 1);
    }
    if (WF_GROW(t->s, t->cap, (size_t)t->n + 1, 256) != WF_OK) return UINT32_MAX;
    char *copy = strdup(s);
    if (!copy) return UINT32_MAX;
    t->s[t->n] = copy;
    t->slot[j] = t->n + 1;
    return t->n++;
}

/* int64 -> int64 map with deletion (linear probing, backward shift). */
typedef struct {
    int64_t *key, *val;
    uint8_t *used;
    size_t n, cap;
} i64map;

static void i64map_free(i64map *m) {
    free(m->key);
    free(m->val);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static size_t i64_slot(int64_t k, size_t cap) {
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

static int i64map_put(i64map *m, int64_t k, int64_t v);

static int i64map_grow(i64map *m) {
    i64map g = {0};
    g.cap = m->cap ? m->cap * 2 : 1024;
    g.key = malloc(g.cap * sizeof *g.key);
    g.val = malloc(g.cap * sizeof *g.val);
    g.used = calloc(g.cap, 1);
    if (!g.key || !g.val || !g.used) {
        i64map_free(&g);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) i64map_put(&g, m->key[i], m->val[i]);
    i64map_free(m);
    *m = g;
    return 1;
}

/* Inserts k (keeps an existing value). Returns 0 when out of memory. */
static int i64map_put(i64map *m, int64_t k, int64_t v) {
    if ((m->n + 1) * 2 > m->cap && !i64map_grow(m)) return 0;
    size_t j = i64_slot(k, m->cap);
    while (m->used[j]) {
        if (m->key[j] == k) return 1;
        j = (j + 1) & (m->cap - 1);
    }
    m->used[j] = 1;
    m->key[j] = k;
    m->val[j] = v;
    m->n++;
    return 1;
}

/* Finds and removes k; returns 1 with *v if it was there. */
static int i64map_take(i64map *m, int64_t k, int64_t *v) {
    if (!m->cap) return 0;
    size_t j = i64_slot(k, m->cap);
    while (m->used[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
    if (!m->used[j]) return 0;
    *v = m->val[j];
    m->used[j] = 0;
    m->n--;
    /* shift back the entries of the run after j */
    size_t i = j;
    for (;;) {
        i = (i + 1) & (m->cap - 1);
        if (!m->used[i]) break;
        size_t home = i64_slot(m->key[i], m->cap);
        /* can the entry at i move to j? (is j cyclically in [home, i)) */
        int movable = (i > j) ? (home <= j || home > i) : (home <= j && home > i);
        if (movable) {
            m->key[j] = m->key[i];
            m->val[j] = m->val[i];
            m->used[j] = 1;
            m->used[i] = 0;
            j = i;
        }
    }
    return 1;
}

/* ---- HTA's kernel classes ------------------------------------------------------- */

enum { K_COMP = 0, K_COMM = 1, K_MEM = 2, K_OTHER = 3 };

/* Python's re.match with '.' stopping at a newline: search the first line. */
static int first_line_has(const char *s, const char *needle) {
    const char *nl = strchr(s, '\n');
    const char *hit = strstr(s, needle);
    return hit && (!nl || hit + strlen(needle) <= nl);
}

static int kernel_kind(const char *name) {
    int comm = strncmp(name, "nccl", 4) == 0 && first_line_has(name + 4, "Kernel");
    if (comm) return K_COMM;
    if (strncmp(name, "Memcpy", 6) == 0 || strncmp(name, "Memset", 6) == 0 || strncmp(name, "dma", 3) == 0)
        return K_MEM;
    if (first_line_has(name, "Memcpy") || first_line_has(name, "Sync")) return K_OTHER;
    return K_COMP;
}

static int is_kernel_cat(const char *cat) {
    static const char *const cats[] = {"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy",
                                       "mtia_ccp_events"};
    for (size_t i = 0; i < sizeof cats / sizeof *cats; i++)
        if (strcmp(cat, cats[i]) == 0) return 1;
    return 0;
}

/* "ProfilerStep#N" (HTA's regex ProfilerStep\s*#\s*(\d+) at the start). */
static int step_number(const char *name, int64_t *iter) {
    if (strncmp(name, "ProfilerStep", 12) != 0) return 0;
    const char *p = name + 12;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if (*p++ != '#') return 0;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (*p - '0');
    *iter = v;
    return 1;
}

static int is_data_wait(const trace_jevent *ev) {
    return (ev->weft_cat && strcmp(ev->weft_cat, "data_wait") == 0) ||
           strncmp(ev->name, "enumerate(DataLoader)", 21) == 0;
}

/* ---- per file --------------------------------------------------------------------- */

typedef struct {
    int64_t ts, end, iter;
} step_rec;

typedef struct {
    char *path;
    int64_t rank, world_size;
    step_rec *steps; /* ProfilerStep#N events, sorted by ts */
    int n_steps;
    size_t cap_steps;
    int has_marker;               /* some CPU event's name contains "ProfilerStep" */
    int64_t last_start, last_end; /* over those events */
    int64_t events;
    int not_trace;                /* no traceEvents: some other JSON file */
} file_info;

typedef struct {
    int64_t ts, dur;
    int64_t rts;     /* ts of the correlated CPU event (NO_TS: none) */
    uint32_t name;   /* id in the rank's strtab */
    int32_t stream;
    uint32_t idx;    /* order in the file */
    uint8_t kind, kcat, gpu, keep;
} dev_rec;

typedef struct {
    int rank;
    int32_t stream;
    int64_t iter;
    uint32_t gname;  /* id in the global strtab */
    int64_t ts, dur;
    uint32_t idx;
} comm_rec;

typedef struct {
    const wf_trace_analyze_opts *o;
    int filter;                   /* at least two ProfilerStep names across the traces */
    int64_t *valid;               /* iterations kept on some rank, sorted */
    int n_valid;
    int64_t sel_min, sel_max;     /* over rows of valid iterations (stragglers) */
    strtab gnames;
    comm_rec *comm;
    size_t n_comm, cap_comm;
} ctx;

/* HTA's default rounding: start up, end down, to whole microseconds. */
static void round_event(const ctx *c, int64_t *ts, int64_t *dur) {
    if (!c->o->hta_rounding) return;
    int64_t end = *ts + *dur;
    int64_t t = *ts >= 0 ? (*ts + 999) / 1000 * 1000 : -((-*ts) / 1000 * 1000);
    int64_t e = end >= 0 ? end / 1000 * 1000 : -((-end + 999) / 1000 * 1000);
    *ts = t;
    *dur = e - t;
}

static int counted(const trace_jevent *ev) {
    return ev->has_dur && ev->has_ts && ev->cat && strcmp(ev->cat, "Trace") != 0;
}

static int step_cmp(const void *a, const void *b) {
    const step_rec *x = a, *y = b;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Pass 1: rank, world size and the ProfilerStep markers. */
static wf_status read_steps(ctx *c, file_info *f, strtab *step_names) {
    trace_jreader *r;
    WF_TRY(wf__trace_jreader_open(f->path, &r));
    trace_jevent ev;
    int got;
    wf_status st;
    f->last_start = f->last_end = NO_TS;
    while ((st = wf__trace_jreader_next(r, &ev, &got)) == WF_OK && got) {
        f->events++;
        if (!counted(&ev) || !strstr(ev.name, "ProfilerStep")) continue;
        if (ev.stream >= 0 && ev.correlation >= 0) continue; /* a kernel */
        int64_t ts = ev.ts_ns, dur = ev.dur_ns;
        round_event(c, &ts, &dur);
        if (strtab_id(step_names, ev.name) == UINT32_MAX) {
            st = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        f->has_marker = 1;
        if (f->last_start == NO_TS || ts > f->last_start) f->last_start = ts;
        if (f->last_end == NO_TS || ts + dur > f->last_end) f->last_end = ts + dur;
        int64_t iter;
        if (!step_number(ev.name, &iter)) continue;
        st = WF_GROW(f->steps, f->cap_steps, (size_t)f->n_steps + 1, 64);
        if (st != WF_OK) break;
        f->steps[f->n_steps++] = (step_rec){ts, ts + dur, iter};
    }
    f->rank = wf__trace_jreader_rank(r);
    f->world_size = wf__trace_jreader_world_size(r);
    f->not_trace = !wf__trace_jreader_saw_events(r);
    wf__trace_jreader_close(r);
    if (st == WF_OK && f->n_steps) qsort(f->steps, (size_t)f->n_steps, sizeof *f->steps, step_cmp);
    return st;
}

/* Does the rank keep a CPU event starting at ts? */
static int cpu_kept(const ctx *c, const file_info *f, int64_t ts) {
    if (!c->filter) return 1;
    if (!f->has_marker) return 0;
    return c->o->skip_last_step ? ts < f->last_start : ts <= f->last_end;
}

/* The ProfilerStep whose [ts, end) holds t, or -1. */
static int64_t iter_of(const file_info *f, int64_t t) {
    int lo = 0, hi = f->n_steps; /* first step with ts > t */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (f->steps[mid].ts <= t) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo - 1; i >= 0 && i >= lo - 4; i--)
        if (f->steps[i].ts <= t && t < f->steps[i].end) return f->steps[i].iter;
    return -1;
}

static int is_valid_iter(const ctx *c, int64_t it) {
    int lo = 0, hi = c->n_valid;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->valid[mid] < it) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->n_valid && c->valid[lo] == it;
}

static void select_row(ctx *c, const file_info *f, int64_t ts, int64_t end, int64_t iter) {
    (void)f;
    if (iter < 0 || !is_valid_iter(c, iter)) return;
    if (c->sel_min == NO_TS || ts < c->sel_min) c->sel_min = ts;
    if (c->sel_max == NO_TS || end > c->sel_max) c->sel_max = end;
}

typedef struct {
    dev_rec *d;
    size_t n, cap;
    int64_t (*dw)[2]; /* data waits [ts, end) */
    size_t n_dw, cap_dw;
    strtab names;
    i64map cpu_corr;  /* correlation -> ts of CPU events no kernel has claimed yet */
    i64map waiting;   /* correlation -> index of a kernel waiting for its CPU event */
} rank_data;

static void rank_data_free(rank_data *rd) {
    free(rd->d);
    free(rd->dw);
    strtab_free(&rd->names);
    i64map_free(&rd->cpu_corr);
    i64map_free(&rd->waiting);
    memset(rd, 0, sizeof *rd);
}

/* Pass 2: the device events of one rank, their CPU correlations, data waits. */
static wf_status read_events(ctx *c, const file_info *f, rank_data *rd) {
    trace_jreader *r;
    WF_TRY(wf__trace_jreader_open(f->path, &r));
    trace_jevent ev;
    int got;
    wf_status st;
    uint32_t idx = 0;
    while ((st = wf__trace_jreader_next(r, &ev, &got)) == WF_OK && got) {
        idx++;
        if (!counted(&ev)) continue;
        int64_t ts = ev.ts_ns, dur = ev.dur_ns;
        round_event(c, &ts, &dur);
        int gpu = ev.stream >= 0 && ev.correlation >= 0;
        int dev = ev.stream != -1;
        if (!gpu) {
            if (ev.correlation >= 0) {
                int64_t k;
                if (i64map_take(&rd->waiting, ev.correlation, &k)) {
                    if (rd->d[k].rts == NO_TS) rd->d[k].rts = ts;
                } else if (!i64map_put(&rd->cpu_corr, ev.correlation, ts)) {
                    st = wf_error(WF_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            if (!cpu_kept(c, f, ts)) continue;
            select_row(c, f, ts, ts + dur, iter_of(f, ts));
            if (is_data_wait(&ev)) {
                st = WF_GROW(rd->dw, rd->cap_dw, rd->n_dw + 1, 256);
                if (st != WF_OK) break;
                rd->dw[rd->n_dw][0] = ts;
                rd->dw[rd->n_dw][1] = ts + dur;
                rd->n_dw++;
            }
            if (!dev) continue;
        }
        if (rd->n == rd->cap) {
            size_t nc = rd->cap ? rd->cap + rd->cap / 2 : 4096; /* 1.5x: less slack than doubling */
            dev_rec *nd = realloc(rd->d, nc * sizeof *nd);
            if (!nd) {
                st = wf_error(WF_ERR_NOMEM, "%s: out of memory holding %zu device events", f->path, rd->n);
                break;
            }
            rd->d = nd;
            rd->cap = nc;
        }
        uint32_t name = strtab_id(&rd->names, ev.name);
        if (name == UINT32_MAX) {
            st = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        dev_rec *d = &rd->d[rd->n];
        *d = (dev_rec){.ts = ts, .dur = dur, .rts = NO_TS, .name = name,
                       .stream = (int32_t)ev.stream, .idx = idx, .kind = (uint8_t)kernel_kind(ev.name),
                       .kcat = (uint8_t)is_kernel_cat(ev.cat), .gpu = (uint8_t)gpu, .keep = 1};
        if (gpu) {
            int64_t cts;
            if (i64map_take(&rd->cpu_corr, ev.correlation, &cts)) d->rts = cts;
            else if (!i64map_put(&rd->waiting, ev.correlation, (int64_t)rd->n)) {
                st = wf_error(WF_ERR_NOMEM, "out of memory");
                break;
            }
        }
        rd->n++;
    }
    wf__trace_jreader_close(r);
    i64map_free(&rd->cpu_corr);
    i64map_free(&rd->waiting);
    return st;
}

/* ---- interval arithmetic over events sorted by ts ------------------------------- */

static int dev_ts_cmp(const void *pa, const void *pb) {
    const dev_rec *a = pa, *b = pb;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int dev_stream_cmp(const void *pa, const void *pb) {
    const dev_rec *a = pa, *b = pb;
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    return dev_ts_cmp(pa, pb);
}

/* Length of the union of the events whose kind is in `mask` (bits), plus
 * the data waits [lo, hi]-clipped when with_dw. */
static int64_t union_len(const rank_data *rd, unsigned mask, int with_dw, const int64_t (*dw)[2], size_t n_dw,
                         int64_t lo, int64_t hi) {
    int64_t total = 0, cs = 0, ce = 0;
    int open = 0;
    size_t i = 0, j = 0;
    for (;;) {
        while (i < rd->n && !(mask >> rd->d[i].kind & 1)) i++;
        while (with_dw && j < n_dw && (dw[j][1] <= lo || dw[j][0] >= hi)) j++;
        int take_dw = with_dw && j < n_dw && (i >= rd->n || (dw[j][0] > lo ? dw[j][0] : lo) < rd->d[i].ts);
        int64_t s, e;
        if (take_dw) {
            s = dw[j][0] > lo ? dw[j][0] : lo;
            e = dw[j][1] < hi ? dw[j][1] : hi;
            j++;
        } else if (i < rd->n) {
            s = rd->d[i].ts;
            e = rd->d[i].ts + rd->d[i].dur;
            i++;
        } else {
            break;
        }
        if (!open) {
            cs = s;
            ce = e;
            open = 1;
        } else if (s > ce) {
            total += ce - cs;
            cs = s;
            ce = e;
        } else if (e > ce) {
            ce = e;
        }
    }
    if (open) total += ce - cs;
    return total;
}

static int dw_cmp(const void *pa, const void *pb) {
    const int64_t *a = pa, *b = pb;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

static int op_cmp(const void *pa, const void *pb) {
    const wf_trace_opstat *a = pa, *b = pb;
    if (a->sum != b->sum) return a->sum > b->sum ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Everything for one rank once its events are read. */
static wf_status analyse_rank(ctx *c, const file_info *f, rank_data *rd, wf_trace_rank *out) {
    /* which device events HTA keeps */
    size_t k = 0;
    for (size_t i = 0; i < rd->n; i++) {
        dev_rec *d = &rd->d[i];
        int keep;
        int64_t iter = -1;
        if (d->gpu) {
            keep = !c->filter || (d->rts != NO_TS && cpu_kept(c, f, d->rts));
            if (d->rts != NO_TS) iter = iter_of(f, d->rts);
        } else {
            keep = 1; /* a CPU event with a stream: kept by read_events already */
            iter = iter_of(f, d->ts);
        }
        if (!keep) continue;
        select_row(c, f, d->ts, d->ts + d->dur, iter);
        const char *name = rd->names.s[d->name];
        if (d->gpu && d->stream > 0 && iter > 0 && is_valid_iter(c, iter) && strncmp(name, "ncclKernel", 10) == 0) {
            WF_TRY(WF_GROW(c->comm, c->cap_comm, c->n_comm + 1, 256));
            uint32_t g = strtab_id(&c->gnames, name);
            if (g == UINT32_MAX) return wf_error(WF_ERR_NOMEM, "out of memory");
            c->comm[c->n_comm++] = (comm_rec){(int)f->rank, d->stream, iter, g, d->ts, d->dur, d->idx};
        }
        rd->d[k++] = *d;
    }
    rd->n = k;
    out->kernels = (int64_t)k;

    /* op statistics (HTA get_gpu_kernel_breakdown, per name) */
    uint32_t nn = rd->names.n;
    double *sum = calloc(nn ? nn : 1, sizeof *sum), *mean = calloc(nn ? nn : 1, sizeof *mean);
    double *m2 = calloc(nn ? nn : 1, sizeof *m2), *mn = calloc(nn ? nn : 1, sizeof *mn);
    double *mx = calloc(nn ? nn : 1, sizeof *mx);
    int64_t *cnt = calloc(nn ? nn : 1, sizeof *cnt);
    uint8_t *kind = calloc(nn ? nn : 1, 1);
    wf_status st = WF_OK;
    if (!sum || !mean || !m2 || !mn || !mx || !cnt || !kind) st = wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == WF_OK && i < rd->n; i++) {
        const dev_rec *d = &rd->d[i];
        double x = (double)d->dur / 1000.0;
        uint32_t id = d->name;
        if (cnt[id] == 0 || x < mn[id]) mn[id] = x;
        if (cnt[id] == 0 || x > mx[id]) mx[id] = x;
        cnt[id]++;
        sum[id] += x;
        double delta = x - mean[id];
        mean[id] += delta / (double)cnt[id];
        m2[id] += delta * (x - mean[id]);
        kind[id] = d->kind;
    }
    int n_ops = 0;
    for (uint32_t i = 0; st == WF_OK && i < nn; i++) n_ops += cnt[i] > 0;
    if (st == WF_OK) {
        out->ops = calloc((size_t)(n_ops ? n_ops : 1), sizeof *out->ops);
        if (!out->ops) st = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    for (uint32_t i = 0, j = 0; st == WF_OK && i < nn; i++) {
        if (!cnt[i]) continue;
        wf_trace_opstat *o = &out->ops[j++];
        o->name = strdup(rd->names.s[i]);
        if (!o->name) {
            st = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        o->kind = kind[i];
        o->count = cnt[i];
        o->sum = sum[i];
        o->mean = sum[i] / (double)cnt[i];
        o->min = mn[i];
        o->max = mx[i];
        o->std = cnt[i] > 1 ? sqrt(m2[i] / (double)(cnt[i] - 1)) : 0.0;
        out->n_ops = (int)j;
    }
    free(sum);
    free(mean);
    free(m2);
    free(mn);
    free(mx);
    free(cnt);
    free(kind);
    WF_TRY(st);
    if (out->n_ops > 1) qsort(out->ops, (size_t)out->n_ops, sizeof *out->ops, op_cmp);

    /* temporal breakdown, overlap, data waits: events sorted by start */
    qsort(rd->d, rd->n, sizeof *rd->d, dev_ts_cmp);
    if (rd->n_dw > 1) qsort(rd->dw, rd->n_dw, sizeof *rd->dw, dw_cmp);
    wf_trace_breakdown *tb = &out->time;
    out->overlap_pct = -1;
    if (rd->n > 0) {
        int64_t first = rd->d[0].ts, last = rd->d[0].ts + rd->d[0].dur;
        for (size_t i = 0; i < rd->n; i++)
            if (rd->d[i].ts + rd->d[i].dur > last) last = rd->d[i].ts + rd->d[i].dur;
        /* HTA takes the end of the last merged interval: the largest end
         * reached by the running merge, which is `last` */
        int64_t all = union_len(rd, 0xF, 0, NULL, 0, 0, 0);
        int64_t comp = union_len(rd, 1u << K_COMP, 0, NULL, 0, 0, 0);
        int64_t comm = union_len(rd, 1u << K_COMM, 0, NULL, 0, 0, 0);
        int64_t comp_comm = union_len(rd, 1u << K_COMP | 1u << K_COMM, 0, NULL, 0, 0, 0);
        int64_t total = last - first, idle = total - all;
        tb->total = (double)total / 1000.0;
        tb->idle = (double)idle / 1000.0;
        tb->compute = (double)comp / 1000.0;
        tb->non_compute = (double)(total - comp - idle) / 1000.0;
        tb->communication = (double)(comp_comm - comp) / 1000.0;
        tb->memory_io = (double)(all - comp_comm) / 1000.0;
        int64_t with_dw = union_len(rd, 0xF, 1, (const int64_t(*)[2])rd->dw, rd->n_dw, first, last);
        tb->data_wait = (double)(with_dw - all) / 1000.0;
        tb->other_idle = (double)(idle - (with_dw - all)) / 1000.0;
        out->comm_total = (double)comm / 1000.0;
        out->overlap = (double)(comp + comm - comp_comm) / 1000.0;
        if (comm > 0) out->overlap_pct = 100.0 * (double)(comp + comm - comp_comm) / (double)comm;
    }

    /* idle time per stream (HTA get_idle_time_breakdown) */
    qsort(rd->d, rd->n, sizeof *rd->d, dev_stream_cmp);
    int n_streams = 0;
    for (size_t i = 0; i < rd->n; i++)
        if (rd->d[i].kcat && (i == 0 || !rd->d[i - 1].kcat || rd->d[i].stream != rd->d[i - 1].stream)) n_streams++;
    out->idle = calloc((size_t)(n_streams ? n_streams : 1), sizeof *out->idle);
    if (!out->idle) return wf_error(WF_ERR_NOMEM, "out of memory");
    int64_t delay = (int64_t)llround(c->o->kernel_wait_us * 1000.0);
    int s = -1;
    int32_t cur_stream = 0;
    int64_t prev_end = NO_TS;
    for (size_t i = 0; i < rd->n; i++) {
        const dev_rec *d = &rd->d[i];
        if (!d->kcat) continue;
        if (s < 0 || d->stream != cur_stream) {
            s++;
            cur_stream = d->stream;
            out->idle[s].stream = d->stream;
            prev_end = NO_TS;
        }
        if (prev_end != NO_TS) {
            double gap = (double)(d->ts - prev_end) / 1000.0;
            if (d->rts != NO_TS && d->rts > prev_end) out->idle[s].host_wait += gap;
            else if (d->ts - prev_end < delay) out->idle[s].kernel_wait += gap;
            else out->idle[s].other += gap;
        }
        prev_end = d->ts + d->dur;
    }
    out->n_idle = s + 1;
    for (int i = 0; i < out->n_idle; i++) {
        out->idle_host_wait += out->idle[i].host_wait;
        out->idle_kernel_wait += out->idle[i].kernel_wait;
        out->idle_other += out->idle[i].other;
    }

    /* steps */
    out->first_step = out->last_step = -1;
    double ssum = 0;
    for (int i = 0; i < f->n_steps; i++) {
        const step_rec *sr = &f->steps[i];
        if (!cpu_kept(c, f, sr->ts)) continue;
        double d = (double)(sr->end - sr->ts) / 1000.0;
        if (out->n_steps == 0 || sr->iter < out->first_step) out->first_step = sr->iter;
        if (out->n_steps == 0 || sr->iter > out->last_step) out->last_step = sr->iter;
        if (d > out->step_max) out->step_max = d;
        ssum += d;
        out->n_steps++;
    }
    out->step_mean = out->n_steps ? ssum / (double)out->n_steps : 0;
    return WF_OK;
}

/* ---- stragglers (hta/analyzers/straggler.py) ------------------------------------ */

typedef struct {
    int32_t stream;
    uint32_t gname;
    int64_t iter;
    int rank;
    int64_t ts, dur;
    uint32_t idx;
} last_rec;

static int comm_group_cmp(const void *pa, const void *pb) {
    const comm_rec *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    if (a->iter != b->iter) return a->iter < b->iter ? -1 : 1;
    if (a->gname != b->gname) return a->gname < b->gname ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int last_cmp(const void *pa, const void *pb) { /* (stream, name, iter, rank) */
    const last_rec *a = pa, *b = pb;
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    if (a->gname != b->gname) return a->gname < b->gname ? -1 : 1;
    if (a->iter != b->iter) return a->iter < b->iter ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

typedef struct {
    double v;
    int rank;
} rank_val;

static int rank_val_desc(const void *pa, const void *pb) {
    const rank_val *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static wf_status find_stragglers(ctx *c, wf_trace_analysis *a) {
    int k = c->o->stragglers > 0 ? c->o->stragglers : 1;
    if (c->n_comm == 0 || c->n_valid == 0 || c->sel_min == NO_TS) return WF_OK;
    double mean_iter = (double)(c->sel_max - c->sel_min) / (double)c->n_valid;
    double min_dur = mean_iter * 0.01;
    /* the last long communication kernel of each (rank, stream, iteration, name) */
    qsort(c->comm, c->n_comm, sizeof *c->comm, comm_group_cmp);
    last_rec *last = malloc(c->n_comm * sizeof *last);
    if (!last) return wf_error(WF_ERR_NOMEM, "out of memory");
    size_t nl = 0;
    for (size_t i = 0; i < c->n_comm; i++) {
        const comm_rec *r = &c->comm[i];
        if ((double)r->dur < min_dur) continue;
        last_rec lr = {r->stream, r->gname, r->iter, r->rank, r->ts, r->dur, r->idx};
        if (nl > 0 && last[nl - 1].rank == r->rank && last[nl - 1].stream == r->stream &&
            last[nl - 1].iter == r->iter && last[nl - 1].gname == r->gname)
            last[nl - 1] = lr; /* sorted by file order within a group: keep the last */
        else
            last[nl++] = lr;
    }
    if (nl == 0) {
        free(last);
        return WF_OK;
    }
    qsort(last, nl, sizeof *last, last_cmp);
    /* per (stream, name): the mean over iterations of the std across ranks of
     * the normalised duration; pick the largest */
    double best = -1;
    int found = 0;
    int32_t best_stream = 0;
    uint32_t best_name = 0;
    for (size_t i = 0; i < nl;) {
        size_t j = i;
        double acc = 0;
        int n_it = 0;
        while (j < nl && last[j].stream == last[i].stream && last[j].gname == last[i].gname) {
            size_t g = j;
            double m = 0, m2 = 0;
            int n = 0;
            while (g < nl && last[g].stream == last[j].stream && last[g].gname == last[j].gname &&
                   last[g].iter == last[j].iter) {
                double x = (double)last[g].dur / mean_iter;
                n++;
                double d = x - m;
                m += d / n;
                m2 += d * (x - m);
                g++;
            }
            if (n > 1) {
                acc += sqrt(m2 / (n - 1));
                n_it++;
            }
            j = g;
        }
        if (n_it > 0) {
            double mean_std = acc / n_it;
            if (!found || mean_std > best ||
                (mean_std == best && strcmp(c->gnames.s[last[i].gname], c->gnames.s[best_name]) < 0)) {
                best = mean_std;
                best_stream = last[i].stream;
                best_name = last[i].gname;
                found = 1;
            }
        }
        i = j;
    }
    if (!found) {
        free(last);
        return WF_OK;
    }
    snprintf(a->straggler_kernel, sizeof a->straggler_kernel, "%s", c->gnames.s[best_name]);
    /* the candidates: per iteration, the k ranks with the latest start */
    int max_rank = 0;
    for (int i = 0; i < a->n_ranks; i++)
        if (a->ranks[i].rank > max_rank) max_rank = a->ranks[i].rank;
    int *count = calloc((size_t)max_rank + 1, sizeof *count);
    rank_val *rv = malloc(nl * sizeof *rv);
    if (!count || !rv) {
        free(count);
        free(rv);
        free(last);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    size_t first = 0;
    while (first < nl && !(last[first].stream == best_stream && last[first].gname == best_name)) first++;
    size_t end = first;
    while (end < nl && last[end].stream == best_stream && last[end].gname == best_name) end++;
    int n_iters = 0;
    for (size_t i = first; i < end; i++) n_iters += i == first || last[i].iter != last[i - 1].iter;
    wf_status st = WF_OK;
    for (size_t i = first; i < end;) {
        size_t g = i, n = 0;
        while (g < end && (n_iters == 1 || last[g].iter == last[i].iter)) {
            rv[n].v = (double)(last[g].ts - c->sel_min) / mean_iter;
            rv[n].rank = last[g].rank;
            n++;
            g++;
        }
        if (last[i].iter >= 0 || n_iters == 1) {
            if ((int)n < k) {
                st = wf_error(WF_ERR_INVALID, "trace analyze: %d straggler candidates asked, but only %zu ranks "
                              "ran '%s' in step %" PRId64, k, n, c->gnames.s[best_name], last[i].iter);
                break;
            }
            qsort(rv, n, sizeof *rv, rank_val_desc);
            double thr = rv[k - 1].v;
            for (size_t q = 0; q < n; q++)
                if (rv[q].v >= thr) count[rv[q].rank]++;
        }
        i = g;
    }
    if (st == WF_OK) {
        /* the k ranks flagged most often (ties: lower rank first) */
        int nr = 0;
        rank_val *byc = malloc((size_t)(max_rank + 1) * sizeof *byc);
        if (!byc) st = wf_error(WF_ERR_NOMEM, "out of memory");
        for (size_t i = first; byc && i < end; i++) {
            int seen = 0;
            for (int q = 0; q < nr; q++) seen |= byc[q].rank == last[i].rank;
            if (!seen) byc[nr++] = (rank_val){(double)count[last[i].rank], last[i].rank};
        }
        if (byc) {
            qsort(byc, (size_t)nr, sizeof *byc, rank_val_desc);
            int m = nr < k ? nr : k;
            a->stragglers = malloc((size_t)(m ? m : 1) * sizeof *a->stragglers);
            if (!a->stragglers) st = wf_error(WF_ERR_NOMEM, "out of memory");
            for (int q = 0; a->stragglers && q < m; q++) a->stragglers[q] = byc[q].rank;
            if (a->stragglers) a->n_stragglers = m;
            free(byc);
        }
    }
    free(count);
    free(rv);
    free(last);
    return st;
}

/* ---- the directory ---------------------------------------------------------------- */

static int is_trace_name(const char *n) {
    size_t len = strlen(n);
    return (len > 5 && strcmp(n + len - 5, ".json") == 0) || (len > 3 && strcmp(n + len - 3, ".gz") == 0);
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The trace files directly in dir (sorted), or NULL/0. */
static wf_status list_traces(const char *dir, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return wf_error(WF_ERR_NOTFOUND, "%s: cannot open the directory", dir);
    char **v = NULL;
    int n = 0;
    size_t cap = 0;
    wf_status st = WF_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !is_trace_name(e->d_name)) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p || WF_GROW(v, cap, (size_t)n + 1, 16) != WF_OK) {
            free(p);
            st = wf_error(WF_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        if (!wf_path_is_dir(p)) v[n++] = p;
        else free(p);
    }
    closedir(d);
    if (st != WF_OK) {
        for (int i = 0; i < n; i++) free(v[i]);
        free(v);
        return st;
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, str_cmp);
    *out = v;
    *n_out = n;
    return WF_OK;
}

/* The newest subdirectory of dir that holds traces (RUN_DIR/traces/step-N). */
static wf_status newest_capture(const char *dir, char **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return wf_error(WF_ERR_NOTFOUND, "%s: cannot open the directory", dir);
    struct dirent *e;
    struct timespec best = {0, 0};
    wf_status st = WF_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p) {
            st = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat sb;
        char **files = NULL;
        int nf = 0;
        if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && list_traces(p, &files, &nf) == WF_OK && nf > 0 &&
            (!*out || sb.st_mtim.tv_sec > best.tv_sec ||
             (sb.st_mtim.tv_sec == best.tv_sec && sb.st_mtim.tv_nsec > best.tv_nsec) ||
             (sb.st_mtim.tv_sec == best.tv_sec && sb.st_mtim.tv_nsec == best.tv_nsec && strcmp(p, *out) > 0))) {
            free(*out);
            *out = p;
            p = NULL;
            best = sb.st_mtim;
        }
        for (int i = 0; i < nf; i++) free(files[i]);
        free(files);
        free(p);
    }
    closedir(d);
    return st;
}

static size_t peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = (size_t)strtoull(line + 6, NULL, 10);
    fclose(f);
    return kb * 1024;
}

static int rank_cmp(const void *pa, const void *pb) {
    const file_info *a = pa, *b = pb;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int i64_cmp(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

wf_status wf_trace_analyze(const char *dir, const wf_trace_analyze_opts *opts, wf_trace_analysis *a) {
    memset(a, 0, sizeof *a);
    wf_trace_analyze_opts o = opts ? *opts : (wf_trace_analyze_opts){0};
    if (o.kernel_wait_us <= 0) o.kernel_wait_us = 30;
    if (!wf_path_is_dir(dir)) return wf_error(WF_ERR_NOTFOUND, "trace analyze: %s is not a directory", dir);
    /* RUN_DIR: its traces/ folder; a folder of traces; or a folder of captures */
    char **files = NULL;
    int nf = 0;
    char *used_dir = NULL, *sub = NULL;
    char *tdir = malloc(WF_PATH_MAX);
    if (!tdir) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = wf_rundir_path(tdir, WF_PATH_MAX, dir, WF_RUN_TRACES);
    if (s == WF_OK && wf_path_is_dir(tdir)) s = newest_capture(tdir, &sub);
    free(tdir);
    if (s == WF_OK && !sub) {
        s = list_traces(dir, &files, &nf);
        if (s == WF_OK && nf == 0) s = newest_capture(dir, &sub);
    }
    if (s == WF_OK && sub) {
        WF_INFO("trace analyze: analysing the newest capture under %s: %s", dir, sub);
        used_dir = sub;
        s = list_traces(used_dir, &files, &nf);
    } else if (s == WF_OK) {
        used_dir = strdup(dir);
        if (!used_dir) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK && nf == 0)
        s = wf_error(WF_ERR_NOTFOUND, "trace analyze: %s holds no trace files (*.json, *.json.gz) and no "
                     "capture directories with some", dir);
    if (s != WF_OK) {
        for (int i = 0; i < nf; i++) free(files[i]);
        free(files);
        free(used_dir);
        return s;
    }
    a->dir = used_dir;

    ctx c = {.o = &o, .sel_min = NO_TS, .sel_max = NO_TS};
    int n_files = nf;
    file_info *fi = calloc((size_t)nf, sizeof *fi);
    strtab step_names = {0};
    wf_status st = fi ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    for (int i = 0; st == WF_OK && i < nf; i++) {
        fi[i].path = files[i];
        files[i] = NULL;
        st = read_steps(&c, &fi[i], &step_names);
        if (st == WF_OK && fi[i].not_trace) {
            WF_WARN("trace analyze: %s has no traceEvents; not a trace, skipped", fi[i].path);
            continue;
        }
        if (st == WF_OK && fi[i].rank < 0) {
            WF_WARN("%s has no distributedInfo.rank; taking it as rank 0 (as HTA does)", fi[i].path);
            fi[i].rank = 0;
        }
    }
    if (st == WF_OK) { /* drop the files that are not traces */
        int k = 0;
        for (int i = 0; i < nf; i++) {
            if (fi[i].not_trace) {
                free(fi[i].path);
                free(fi[i].steps);
            } else {
                fi[k++] = fi[i];
            }
        }
        nf = k;
        if (nf == 0)
            st = wf_error(WF_ERR_NOTFOUND, "trace analyze: %s holds no trace files (JSON with traceEvents)", used_dir);
    }
    if (st == WF_OK) qsort(fi, (size_t)nf, sizeof *fi, rank_cmp);
    for (int i = 1; st == WF_OK && i < nf; i++)
        if (fi[i].rank == fi[i - 1].rank)
            st = wf_error(WF_ERR_FORMAT, "trace analyze: %s and %s are both rank %" PRId64
                          " (a directory holds one capture: one file per rank)", fi[i - 1].path, fi[i].path,
                          fi[i].rank);
    c.filter = step_names.n >= 2;
    strtab_free(&step_names);

    /* the iterations some rank keeps */
    for (int i = 0; st == WF_OK && i < nf; i++)
        for (int j = 0; j < fi[i].n_steps; j++)
            if (cpu_kept(&c, &fi[i], fi[i].steps[j].ts)) {
                int64_t *nv = realloc(c.valid, (size_t)(c.n_valid + 1) * sizeof *nv);
                if (!nv) {
                    st = wf_error(WF_ERR_NOMEM, "out of memory");
                    break;
                }
                c.valid = nv;
                c.valid[c.n_valid++] = fi[i].steps[j].iter;
            }
    if (c.n_valid > 1) {
        qsort(c.valid, (size_t)c.n_valid, sizeof *c.valid, i64_cmp);
        int u = 1;
        for (int i = 1; i < c.n_valid; i++)
            if (c.valid[i] != c.valid[u - 1]) c.valid[u++] = c.valid[i];
        c.n_valid = u;
    }

    if (st == WF_OK) {
        a->ranks = calloc((size_t)nf, sizeof *a->ranks);
        if (!a->ranks) st = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == WF_OK && i < nf; i++) {
        wf_trace_rank *r = &a->ranks[i];
        a->n_ranks = i + 1;
        r->rank = (int)fi[i].rank;
        r->world_size = (int)fi[i].world_size;
        r->path = strdup(fi[i].path);
        r->events = fi[i].events;
        rank_data rd = {0};
        st = r->path ? read_events(&c, &fi[i], &rd) : wf_error(WF_ERR_NOMEM, "out of memory");
        if (st == WF_OK) st = analyse_rank(&c, &fi[i], &rd, r);
        rank_data_free(&rd);
    }
    if (st == WF_OK) st = find_stragglers(&c, a);

    for (int i = 0; fi && i < nf; i++) {
        free(fi[i].path);
        free(fi[i].steps);
    }
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(fi);
    free(files);
    free(c.valid);
    free(c.comm);
    strtab_free(&c.gnames);
    a->peak_rss_bytes = peak_rss();
    if (st != WF_OK) wf_trace_analysis_free(a);
    return st;
}

void wf_trace_analysis_free(wf_trace_analysis *a) {
    if (!a) return;
    for (int i = 0; i < a->n_ranks; i++) {
        wf_trace_rank *r = &a->ranks[i];
        free(r->path);
        free(r->idle);
        for (int j = 0; j < r->n_ops; j++) free(r->ops[j].name);
        free(r->ops);
    }
    free(a->ranks);
    free(a->stragglers);
    free(a->dir);
    memset(a, 0, sizeof *a);
}
