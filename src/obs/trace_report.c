/* Prints a trace analysis: text tables for people, one JSON document for
 * programs (its fields are listed in docs/tracing.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "obs/trace_analyze_impl.h"

static const char *kind_name(int kind) {
    static const char *const names[] = {"COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"};
    return kind >= 0 && kind < 4 ? names[kind] : "OTHER";
}

static double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

/* One op across ranks: its statistics on each rank (NULL where absent). */
typedef struct {
    const char *name;
    int kind;
    double total;
    const wf_trace_opstat **per_rank; /* (n_ranks) */
} op_row;

static int name_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int op_row_cmp(const void *pa, const void *pb) {
    const op_row *a = pa, *b = pb;
    if (a->total != b->total) return a->total > b->total ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Every op name over all ranks, by total time; NULL when out of memory. */
static op_row *op_rows(const wf_trace_analysis *a, int *n_out) {
    *n_out = 0;
    size_t total = 0;
    for (int r = 0; r < a->n_ranks; r++) total += (size_t)a->ranks[r].n_ops;
    const char **names = malloc((total ? total : 1) * sizeof *names);
    if (!names) return NULL;
    size_t k = 0;
    for (int r = 0; r < a->n_ranks; r++)
        for (int j = 0; j < a->ranks[r].n_ops; j++) names[k++] = a->ranks[r].ops[j].name;
    if (k > 1) qsort(names, k, sizeof *names, name_ptr_cmp);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(names[i], names[u - 1]) != 0) names[u++] = names[i];
    op_row *rows = calloc(u ? u : 1, sizeof *rows);
    const wf_trace_opstat **cells = calloc((u ? u : 1) * (size_t)(a->n_ranks ? a->n_ranks : 1), sizeof *cells);
    if (!rows || !cells) {
        free(names);
        free(rows);
        free(cells);
        return NULL;
    }
    for (size_t i = 0; i < u; i++) {
        rows[i].name = names[i];
        rows[i].per_rank = cells + i * (size_t)a->n_ranks;
    }
    for (int r = 0; r < a->n_ranks; r++)
        for (int j = 0; j < a->ranks[r].n_ops; j++) {
            const wf_trace_opstat *o = &a->ranks[r].ops[j];
            const char **hit = bsearch(&o->name, names, u, sizeof *names, name_ptr_cmp);
            op_row *row = &rows[hit - names];
            row->per_rank[r] = o;
            row->kind = o->kind;
            row->total += o->sum;
        }
    free(names);
    if (u > 1) qsort(rows, u, sizeof *rows, op_row_cmp);
    /* the cells block is owned by the row with the lowest per_rank pointer */
    *n_out = (int)u;
    return rows;
}

static void op_rows_free(op_row *rows, int n) {
    if (!rows) return;
    const wf_trace_opstat **base = NULL;
    for (int i = 0; i < n; i++)
        if (!base || rows[i].per_rank < base) base = rows[i].per_rank;
    free((void *)base);
    free(rows);
}

void wf_trace_analysis_print(const wf_trace_analysis *a, int top, FILE *out) {
    if (top <= 0) top = 10;
    fprintf(out, "traces: %s (%d rank%s)\n", a->dir, a->n_ranks, a->n_ranks == 1 ? "" : "s");
    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_rank *r = &a->ranks[i];
        if (r->n_steps)
            fprintf(out, "  rank %d: steps %" PRId64 "-%" PRId64 " (%" PRId64 " analysed), step mean %.3f ms, max %.3f ms, "
                    "%" PRId64 " events, %" PRId64 " kernels\n", r->rank, r->first_step, r->last_step, r->n_steps,
                    r->step_mean / 1e3, r->step_max / 1e3, r->events, r->kernels);
        else
            fprintf(out, "  rank %d: no ProfilerStep markers, %" PRId64 " events, %" PRId64 " kernels\n", r->rank,
                    r->events, r->kernels);
    }

    fputs("\nTemporal breakdown (the device timeline from its first kernel to its last; ms, % of that span)\n", out);
    fprintf(out, "%5s %11s %18s %18s %18s %18s %18s\n", "rank", "span", "compute", "communication", "memory+io",
            "data wait", "other idle");
    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_breakdown *t = &a->ranks[i].time;
        fprintf(out, "%5d %11.3f %10.3f %6.2f%% %10.3f %6.2f%% %10.3f %6.2f%% %10.3f %6.2f%% %10.3f %6.2f%%\n",
                a->ranks[i].rank, t->total / 1e3, t->compute / 1e3, pct(t->compute, t->total),
                t->communication / 1e3, pct(t->communication, t->total), t->memory_io / 1e3,
                pct(t->memory_io, t->total), t->data_wait / 1e3, pct(t->data_wait, t->total), t->other_idle / 1e3,
                pct(t->other_idle, t->total));
    }
    fputs("  (HTA's idle = data wait + other idle; non-compute = communication + memory+io)\n", out);

    fputs("\nIdle time by cause (HTA's categories, summed over streams; ms)\n", out);
    fprintf(out, "%5s %8s %12s %12s %12s\n", "rank", "streams", "host wait", "kernel wait", "other");
    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_rank *r = &a->ranks[i];
        fprintf(out, "%5d %8d %12.3f %12.3f %12.3f\n", r->rank, r->n_idle, r->idle_host_wait / 1e3,
                r->idle_kernel_wait / 1e3, r->idle_other / 1e3);
    }

    fputs("\nCommunication/computation overlap (share of communication time under compute)\n", out);
    fprintf(out, "%5s %14s %14s %9s\n", "rank", "comm ms", "overlapped ms", "overlap");
    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_rank *r = &a->ranks[i];
        if (r->overlap_pct < 0)
            fprintf(out, "%5d %14s %14s %9s\n", r->rank, "-", "-", "-");
        else
            fprintf(out, "%5d %14.3f %14.3f %8.2f%%\n", r->rank, r->comm_total / 1e3, r->overlap / 1e3,
                    r->overlap_pct);
    }

    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_rank *r = &a->ranks[i];
        fprintf(out, "\nTop ops by total time, rank %d (us)\n", r->rank);
        fprintf(out, "%12s %6s %8s %12s %10s %10s %10s %14s  %s\n", "total", "share", "count", "mean", "min", "max",
                "std", "kind", "name");
        double all = 0;
        for (int j = 0; j < r->n_ops; j++) all += r->ops[j].sum;
        for (int j = 0; j < r->n_ops && j < top; j++) {
            const wf_trace_opstat *o = &r->ops[j];
            fprintf(out, "%12.1f %5.1f%% %8" PRId64 " %12.2f %10.2f %10.2f %10.2f %14s  %s\n", o->sum,
                    pct(o->sum, all), o->count, o->mean, o->min, o->max, o->std, kind_name(o->kind), o->name);
        }
    }

    int n_rows = 0;
    op_row *rows = op_rows(a, &n_rows);
    if (rows && a->n_ranks > 1) {
        fputs("\nOp durations across ranks (mean us of each rank; the slowest rank and how much slower it is than "
              "the fastest)\n", out);
        fprintf(out, "%12s %12s %12s %8s %9s  %s\n", "fastest", "median", "slowest", "on rank", "spread", "name");
        double *means = malloc((size_t)a->n_ranks * sizeof *means);
        for (int i = 0; means && i < n_rows && i < top; i++) {
            int n = 0, slow = -1;
            double lo = 0, hi = 0;
            for (int r = 0; r < a->n_ranks; r++) {
                const wf_trace_opstat *o = rows[i].per_rank[r];
                if (!o) continue;
                means[n++] = o->mean;
                if (slow < 0 || o->mean > hi) {
                    hi = o->mean;
                    slow = a->ranks[r].rank;
                }
                if (n == 1 || o->mean < lo) lo = o->mean;
            }
            for (int p = 1; p < n; p++) /* insertion sort for the median */
                for (int q = p; q > 0 && means[q - 1] > means[q]; q--) {
                    double t = means[q];
                    means[q] = means[q - 1];
                    means[q - 1] = t;
                }
            double med = n % 2 ? means[n / 2] : (means[n / 2 - 1] + means[n / 2]) / 2;
            fprintf(out, "%12.2f %12.2f %12.2f %8d %8.1f%%  %s\n", lo, med, hi, slow, lo > 0 ? 100 * (hi / lo - 1) : 0,
                    rows[i].name);
        }
        free(means);
    }
    op_rows_free(rows, n_rows);

    fputs("\nStragglers (HTA: the ranks that start the most varying long communication kernel last)\n", out);
    if (a->n_stragglers == 0) {
        fputs("  none found (needs communication kernels in at least two steps on two or more ranks)\n", out);
    } else {
        fputs("  rank", out);
        for (int i = 0; i < a->n_stragglers; i++) fprintf(out, "%s %d", i ? "," : "", a->stragglers[i]);
        fprintf(out, " (by '%s')\n", a->straggler_kernel);
    }
}

static json_t *num(double v) { return json_real(v); }

wf_status wf_trace_analysis_write_json(const wf_trace_analysis *a, int top, FILE *out) {
    json_t *root = json_object(), *ranks = json_array();
    json_object_set_new(root, "dir", json_string(a->dir));
    for (int i = 0; i < a->n_ranks; i++) {
        const wf_trace_rank *r = &a->ranks[i];
        const wf_trace_breakdown *t = &r->time;
        json_t *jr = json_object();
        json_object_set_new(jr, "rank", json_integer(r->rank));
        json_object_set_new(jr, "world_size", json_integer(r->world_size));
        json_object_set_new(jr, "path", json_string(r->path));
        json_object_set_new(jr, "events", json_integer(r->events));
        json_object_set_new(jr, "kernels", json_integer(r->kernels));
        json_t *steps = json_object();
        json_object_set_new(steps, "count", json_integer(r->n_steps));
        json_object_set_new(steps, "first", r->n_steps ? json_integer(r->first_step) : json_null());
        json_object_set_new(steps, "last", r->n_steps ? json_integer(r->last_step) : json_null());
        json_object_set_new(steps, "mean_us", num(r->step_mean));
        json_object_set_new(steps, "max_us", num(r->step_max));
        json_object_set_new(jr, "steps", steps);
        json_t *tb = json_object();
        json_object_set_new(tb, "total_us", num(t->total));
        json_object_set_new(tb, "idle_us", num(t->idle));
        json_object_set_new(tb, "compute_us", num(t->compute));
        json_object_set_new(tb, "non_compute_us", num(t->non_compute));
        json_object_set_new(tb, "communication_us", num(t->communication));
        json_object_set_new(tb, "memory_io_us", num(t->memory_io));
        json_object_set_new(tb, "data_wait_us", num(t->data_wait));
        json_object_set_new(tb, "other_idle_us", num(t->other_idle));
        json_object_set_new(tb, "idle_pct", num(pct(t->idle, t->total)));
        json_object_set_new(tb, "compute_pct", num(pct(t->compute, t->total)));
        json_object_set_new(tb, "non_compute_pct", num(pct(t->non_compute, t->total)));
        json_object_set_new(jr, "temporal_breakdown", tb);
        json_t *ib = json_object(), *streams = json_array();
        json_object_set_new(ib, "host_wait_us", num(r->idle_host_wait));
        json_object_set_new(ib, "kernel_wait_us", num(r->idle_kernel_wait));
        json_object_set_new(ib, "other_us", num(r->idle_other));
        for (int s = 0; s < r->n_idle; s++) {
            json_t *js = json_object();
            json_object_set_new(js, "stream", json_integer(r->idle[s].stream));
            json_object_set_new(js, "host_wait_us", num(r->idle[s].host_wait));
            json_object_set_new(js, "kernel_wait_us", num(r->idle[s].kernel_wait));
            json_object_set_new(js, "other_us", num(r->idle[s].other));
            json_array_append_new(streams, js);
        }
        json_object_set_new(ib, "streams", streams);
        json_object_set_new(jr, "idle_breakdown", ib);
        json_t *ov = json_object();
        json_object_set_new(ov, "comm_us", num(r->comm_total));
        json_object_set_new(ov, "overlap_us", num(r->overlap));
        json_object_set_new(ov, "overlap_pct", r->overlap_pct < 0 ? json_null() : num(r->overlap_pct));
        json_object_set_new(jr, "overlap", ov);
        json_t *ops = json_array();
        for (int j = 0; j < r->n_ops && (top <= 0 || j < top); j++) {
            const wf_trace_opstat *o = &r->ops[j];
            json_t *jo = json_object();
            json_object_set_new(jo, "name", json_string(o->name));
            json_object_set_new(jo, "kind", json_string(kind_name(o->kind)));
            json_object_set_new(jo, "count", json_integer(o->count));
            json_object_set_new(jo, "sum_us", num(o->sum));
            json_object_set_new(jo, "mean_us", num(o->mean));
            json_object_set_new(jo, "min_us", num(o->min));
            json_object_set_new(jo, "max_us", num(o->max));
            json_object_set_new(jo, "std_us", num(o->std));
            json_array_append_new(ops, jo);
        }
        json_object_set_new(jr, "ops", ops);
        json_array_append_new(ranks, jr);
    }
    json_object_set_new(root, "ranks", ranks);

    int n_rows = 0;
    op_row *rows = op_rows(a, &n_rows);
    json_t *dist = json_array();
    for (int i = 0; rows && i < n_rows && (top <= 0 || i < top); i++) {
        json_t *jo = json_object(), *per = json_array();
        json_object_set_new(jo, "name", json_string(rows[i].name));
        json_object_set_new(jo, "kind", json_string(kind_name(rows[i].kind)));
        json_object_set_new(jo, "total_us", num(rows[i].total));
        for (int r = 0; r < a->n_ranks; r++) {
            const wf_trace_opstat *o = rows[i].per_rank[r];
            if (!o) continue;
            json_t *c = json_object();
            json_object_set_new(c, "rank", json_integer(a->ranks[r].rank));
            json_object_set_new(c, "count", json_integer(o->count));
            json_object_set_new(c, "mean_us", num(o->mean));
            json_object_set_new(c, "min_us", num(o->min));
            json_object_set_new(c, "max_us", num(o->max));
            json_object_set_new(c, "std_us", num(o->std));
            json_array_append_new(per, c);
        }
        json_object_set_new(jo, "ranks", per);
        json_array_append_new(dist, jo);
    }
    op_rows_free(rows, n_rows);
    json_object_set_new(root, "op_distribution", dist);
    json_t *st = json_array();
    for (int i = 0; i < a->n_stragglers; i++) json_array_append_new(st, json_integer(a->stragglers[i]));
    json_object_set_new(root, "stragglers", st);
    json_object_set_new(root, "straggler_kernel", a->straggler_kernel[0] ? json_string(a->straggler_kernel) : json_null());
    json_object_set_new(root, "peak_rss_bytes", json_integer((json_int_t)a->peak_rss_bytes));
    int rc = json_dumpf(root, out, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(root);
    fputc('\n', out);
    if (rc != 0) return wf_error(WF_ERR_IO, "trace analyze: cannot write the JSON report");
    return WF_OK;
}
