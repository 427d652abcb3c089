/* `weft report`: one self-contained HTML page from a run directory's
 * metrics.jsonl and run.json. Plots are inline SVG drawn here (no script,
 * no external file, so the page opens anywhere and can be mailed):
 * loss with validation loss and the spikes, learning rate, gradient norm,
 * tokens/s, MFU, memory, and the step time split into its parts, stacked.
 *
 * Reading: one JSON object a line (docs/formats/metrics-jsonl.md). A line
 * that does not parse (a run killed mid-write leaves half a line) is
 * skipped and counted. When a step number goes back (a rollback, or a
 * resume from an earlier checkpoint) the later lines replace the earlier
 * ones from that step on, so the curves stitch; spikes are kept from every
 * line, replaced or not.
 *
 * Ranks: with metrics.all_ranks every rank r > 0 also wrote
 * RUN_DIR/ranks/rank-RRRRR/metrics.jsonl; the page then gets a "Ranks"
 * section (each rank's medians, peak RSS and distance from the fastest
 * rank, read and stitched as rank 0's file) and plots with a line per rank.
 * Without a ranks/ folder the page is the same as for one process.
 *
 * Evaluation: RUN_DIR/eval.jsonl of `weft eval --watch`, when present,
 * adds each dataset's loss as dots on the loss plot and an "Evaluation"
 * section (loss and bits per byte per dataset, and a table).
 *
 * Drawing: long runs are reduced to at most two points per pixel column
 * (the lowest and the highest of the column, so spikes stay visible);
 * stacked areas use the column's mean. */
#include "weft/buf.h"
#include "weft/metrics.h"
#include "weft/report.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obs/obs_impl.h"
#include "weft/fileio.h"
#include "weft/lines.h"
#include "weft/log.h"
#include "weft/weft.h"
#include "weft/rundir.h"

/* Appends a string literal. */
#define PUT(b, lit) wf_buf_append((b), lit, sizeof(lit) - 1)

/* ------------------------------------------------------------ the data */

enum {
#define FIELD_ENUM_(key, f, type, tag, scale, unit) F_##f,
    WF_METRICS_FIELDS(FIELD_ENUM_)
#undef FIELD_ENUM_
    NF
};

/* A mixture's sources (metrics.jsonl's "sources"): three more columns per
 * source after the fields, for the first REPORT_SOURCES names seen. */
#define REPORT_SOURCES 8
enum { S_LOSS, S_SEEN, S_VAL, S_COLS };
#define ROW (NF + REPORT_SOURCES * S_COLS)
#define SRC_COL(k, c) (NF + (k) * S_COLS + (c))
static const char *const field_key[NF] = {
#define FIELD_KEY_(key, f, type, tag, scale, unit) key,
    WF_METRICS_FIELDS(FIELD_KEY_)
#undef FIELD_KEY_
};

typedef struct {
    double *rows;     /* (n, ROW): the stitched records, NaN where absent */
    size_t n, cap;
    double *spikes;   /* (n_spikes, ROW): every record flagged as a spike */
    size_t n_spikes, cap_spikes;
    size_t lines, bad_lines, first_bad_line, rollbacks;
    json_t *run;      /* run.json, or NULL */
    char src_name[REPORT_SOURCES][64]; /* a mixture's sources, in the order first seen */
    int n_src;
} run_data;

static void run_data_free(run_data *d) {
    free(d->rows);
    free(d->spikes);
    json_decref(d->run);
}

static int push_row(double **rows, size_t *n, size_t *cap, const double *row) {
    /* The array's elements are rows of ROW doubles. */
    if (wf_grow_((void **)rows, cap, *n + 1, ROW * sizeof **rows, 256) != WF_OK) return 0;
    memcpy(*rows + *n * ROW, row, ROW * sizeof *row);
    (*n)++;
    return 1;
}

/* A line's "sources" object into the row's source columns. */
static void read_sources(run_data *d, json_t *src, double *row) {
    const char *name;
    json_t *v;
    json_object_foreach(src, name, v) {
        int k = 0;
        while (k < d->n_src && strcmp(d->src_name[k], name) != 0) k++;
        if (k == d->n_src) {
            if (k == REPORT_SOURCES || strlen(name) >= sizeof d->src_name[0]) continue;
            snprintf(d->src_name[k], sizeof d->src_name[k], "%s", name);
            d->n_src++;
        }
        const char *keys[S_COLS] = {"loss", "tokens_seen", "val_loss"};
        for (int c = 0; c < S_COLS; c++) {
            json_t *x = json_object_get(v, keys[c]);
            row[SRC_COL(k, c)] = json_is_number(x) ? json_number_value(x) : NAN;
        }
    }
}

static wf_status read_metrics(run_data *d, const char *path) {
    char *text;
    size_t len;
    WF_TRY(wf_file_read(path, &text, &len));
    wf_status s = WF_OK;
    wf_lines it;
    wf_lines_init(&it, text, len);
    json_t *o;
    while (s == WF_OK && wf_lines_next_json(&it, &o)) {
        size_t lineno = it.lineno;
        d->lines++;
        double row[ROW];
        int ok = json_is_object(o) && json_is_number(json_object_get(o, "step"));
        if (ok) {
            for (int f = 0; f < NF; f++) {
                json_t *v = json_object_get(o, field_key[f]);
                row[f] = json_is_number(v) ? json_number_value(v) : json_is_boolean(v) ? (double)json_is_true(v) : NAN;
            }
            for (int f = NF; f < ROW; f++) row[f] = NAN;
            read_sources(d, json_object_get(o, "sources"), row);
        }
        json_decref(o);
        if (!ok) {
            if (!d->bad_lines) d->first_bad_line = lineno;
            d->bad_lines++;
            continue;
        }
        if (d->n && row[F_step] <= d->rows[(d->n - 1) * ROW + F_step]) {
            d->rollbacks++;
            while (d->n && d->rows[(d->n - 1) * ROW + F_step] >= row[F_step]) d->n--;
        }
        if (!push_row(&d->rows, &d->n, &d->cap, row) ||
            (row[F_spike] == 1 && !push_row(&d->spikes, &d->n_spikes, &d->cap_spikes, row)))
            s = wf_error(WF_ERR_NOMEM, "%s: out of memory at line %zu", path, lineno);
    }
    free(text);
    if (s == WF_OK && d->n == 0)
        s = wf_error(WF_ERR_EMPTY, "%s: no step records (%zu lines, %zu malformed); has the run logged a step yet?",
                     path, d->lines, d->bad_lines);
    return s;
}

/* ------------------------------------------------------------ html text */

/* Text for an element's content or a quoted attribute's value: a name
 * read from a file (a mixture's source in metrics.jsonl) is shown as it
 * is and can never become markup. */
static void html_esc(wf_buf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': PUT(b, "&lt;"); break;
        case '>': PUT(b, "&gt;"); break;
        case '&': PUT(b, "&amp;"); break;
        case '"': PUT(b, "&quot;"); break;
        case '\'': PUT(b, "&#39;"); break;
        default: wf_buf_append(b, s, 1);
        }
    }
}

/* A short number for axes and tables: 0.0008, 2e-05, 12345 -> 12.3k. */
static void fmt_num(char *buf, size_t size, double v) {
    double a = fabs(v);
    if (!isfinite(v)) snprintf(buf, size, "-");
    else if (a == 0) snprintf(buf, size, "0");
    else if (a >= 1e9) snprintf(buf, size, "%.3gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, size, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, size, "%.3gk", v / 1e3);
    else snprintf(buf, size, "%.4g", v);
}

static void fmt_bytes(char *buf, size_t size, double v) {
    if (!isfinite(v) || v < 0) snprintf(buf, size, "-");
    else if (v >= 0x1p30) snprintf(buf, size, "%.2f GiB", v / 0x1p30);
    else snprintf(buf, size, "%.1f MiB", v / 0x1p20);
}

/* ------------------------------------------------------------ plots */

#define PLOT_W 640.0
#define PLOT_H 250.0
#define M_LEFT 62.0
#define M_RIGHT 14.0
#define M_TOP 30.0
#define M_BOTTOM 34.0
#define MAX_SERIES 8

typedef struct {
    const char *name;
    const char *color;
    double *y;   /* (n) NaN: no value at that step */
    int dots;    /* draw a dot at every value (sparse series) */
} series;

typedef struct {
    const char *id, *title, *unit;
    const double *x;  /* (n) steps, ascending */
    size_t n;
    series s[MAX_SERIES];
    int ns;
    int stacked;      /* series are parts of a whole, drawn as stacked areas */
    int logy;
    const double *mark_x, *mark_y; /* spikes: (n_marks), mark_y NaN: a vertical line only */
    size_t n_marks;
    const char *note; /* shown under the plot, or NULL */
} plot;

typedef struct {
    double x0, x1, y0, y1;
    int logy;
} frame;

static double px_x(const frame *f, double x) {
    double w = PLOT_W - M_LEFT - M_RIGHT;
    return M_LEFT + (f->x1 > f->x0 ? (x - f->x0) / (f->x1 - f->x0) : 0.5) * w;
}

static double px_y(const frame *f, double y) {
    double h = PLOT_H - M_TOP - M_BOTTOM;
    if (f->logy) y = log10(y);
    return PLOT_H - M_BOTTOM - (f->y1 > f->y0 ? (y - f->y0) / (f->y1 - f->y0) : 0.5) * h;
}

static double nice_step(double range, int target) {
    double raw = range / target;
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void axes(wf_buf *b, const frame *f) {
    char t[48];
    /* y grid and labels */
    if (f->logy) {
        for (double e = ceil(f->y0); e <= f->y1 + 1e-9; e += 1) {
            double py = px_y(f, pow(10, e));
            fmt_num(t, sizeof t, pow(10, e));
            wf_buf_printf(b, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", M_LEFT,
                           PLOT_W - M_RIGHT, py, py);
            wf_buf_printf(b, "<text class=\"ylab\" x=\"%.1f\" y=\"%.1f\">%s</text>", M_LEFT - 6, py + 4, t);
        }
    } else {
        double st = nice_step(f->y1 - f->y0, 5);
        for (double v = ceil(f->y0 / st) * st; v <= f->y1 + st * 1e-6; v += st) {
            double vr = fabs(v) < st * 1e-6 ? 0 : v;
            double py = px_y(f, vr);
            fmt_num(t, sizeof t, vr);
            wf_buf_printf(b, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", M_LEFT,
                           PLOT_W - M_RIGHT, py, py);
            wf_buf_printf(b, "<text class=\"ylab\" x=\"%.1f\" y=\"%.1f\">%s</text>", M_LEFT - 6, py + 4, t);
        }
    }
    /* x ticks: whole steps */
    double st = f->x1 > f->x0 ? nice_step(f->x1 - f->x0, 6) : 1;
    if (st < 1) st = 1;
    for (double v = ceil(f->x0 / st) * st; v <= f->x1 + 1e-9; v += st) {
        double px = px_x(f, v);
        fmt_num(t, sizeof t, v);
        wf_buf_printf(b, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", px, px,
                       PLOT_H - M_BOTTOM, PLOT_H - M_BOTTOM + 4);
        wf_buf_printf(b, "<text class=\"xlab\" x=\"%.1f\" y=\"%.1f\">%s</text>", px, PLOT_H - M_BOTTOM + 16, t);
    }
    wf_buf_printf(b, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", M_LEFT, M_TOP,
                   PLOT_W - M_LEFT - M_RIGHT, PLOT_H - M_TOP - M_BOTTOM);
    wf_buf_printf(b, "<text class=\"xlab\" x=\"%.1f\" y=\"%.1f\">step</text>", (M_LEFT + PLOT_W - M_RIGHT) / 2,
                   PLOT_H - 4);
}

/* One polyline per run of finite values; at most two points per pixel
 * column: the column's lowest and highest, in step order. Returns the
 * number of points drawn. */
static size_t draw_line(wf_buf *b, const frame *f, const double *x, const double *y, size_t n, const char *name,
                        const char *color, int dots) {
    size_t drawn = 0;
    int open = 0;
    long col = -1;
    size_t lo = 0, hi = 0;
    int have = 0;
#define FLUSH_COL_()                                                             \
    do {                                                                         \
        if (have) {                                                              \
            size_t a_ = lo < hi ? lo : hi, b_ = lo < hi ? hi : lo;               \
            wf_buf_printf(b, "%.1f,%.1f ", px_x(f, x[a_]), px_y(f, y[a_]));     \
            drawn++;                                                             \
            if (b_ != a_) {                                                      \
                wf_buf_printf(b, "%.1f,%.1f ", px_x(f, x[b_]), px_y(f, y[b_])); \
                drawn++;                                                         \
            }                                                                    \
            have = 0;                                                            \
        }                                                                        \
    } while (0)
    for (size_t i = 0; i <= n; i++) {
        int ok = i < n && isfinite(y[i]) && (!f->logy || y[i] > 0);
        if (!ok) {
            if (open) {
                FLUSH_COL_();
                PUT(b, "\"/>");
                open = 0;
            }
            continue;
        }
        if (!open) {
            PUT(b, "<polyline class=\"series\" data-series=\"");
            html_esc(b, name);
            wf_buf_printf(b, "\" stroke=\"%s\" points=\"", color);
            open = 1;
            col = -1;
        }
        long c = (long)(px_x(f, x[i]) - M_LEFT); /* pixel column */
        if (c != col) {
            FLUSH_COL_();
            col = c;
            lo = hi = i;
            have = 1;
        } else {
            if (y[i] < y[lo]) lo = i;
            if (y[i] > y[hi]) hi = i;
        }
    }
#undef FLUSH_COL_
    if (dots) {
        for (size_t i = 0; i < n; i++)
            if (isfinite(y[i]) && (!f->logy || y[i] > 0)) {
                PUT(b, "<circle class=\"dot\" data-series=\"");
                html_esc(b, name);
                wf_buf_printf(b, "\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", px_x(f, x[i]), px_y(f, y[i]),
                              color);
            }
    }
    return drawn;
}

/* Stacked areas: per pixel column the mean of each part, summed upwards. */
static size_t draw_stacked(wf_buf *b, const frame *f, const plot *p, double **cum, double *cx, size_t nc) {
    (void)f;
    for (int k = p->ns - 1; k >= 0; k--) {
        PUT(b, "<path class=\"area\" data-series=\"");
        html_esc(b, p->s[k].name);
        wf_buf_printf(b, "\" fill=\"%s\" d=\"", p->s[k].color);
        for (size_t i = 0; i < nc; i++)
            wf_buf_printf(b, "%s%.1f,%.1f ", i ? "L" : "M", px_x(f, cx[i]), px_y(f, cum[k][i]));
        for (size_t i = nc; i-- > 0;)
            wf_buf_printf(b, "L%.1f,%.1f ", px_x(f, cx[i]), px_y(f, k ? cum[k - 1][i] : 0));
        PUT(b, "Z\"/>");
    }
    return nc;
}

/* Column means of the parts of a stacked plot, accumulated: cum[k][i] is
 * the sum of parts 0..k in column i. Returns the number of columns. */
static size_t stack_columns(const plot *p, double **cum, double *cx) {
    const int cols = (int)(PLOT_W - M_LEFT - M_RIGHT);
    double x0 = p->x[0], x1 = p->x[p->n - 1];
    size_t nc = 0, i = 0;
    while (i < p->n) {
        long c = x1 > x0 ? (long)((p->x[i] - x0) / (x1 - x0) * (cols - 1)) : 0;
        double sx = 0, sum[MAX_SERIES] = {0};
        size_t cnt = 0;
        while (i < p->n && (x1 > x0 ? (long)((p->x[i] - x0) / (x1 - x0) * (cols - 1)) : 0) == c) {
            sx += p->x[i];
            for (int k = 0; k < p->ns; k++)
                if (isfinite(p->s[k].y[i]) && p->s[k].y[i] > 0) sum[k] += p->s[k].y[i];
            cnt++;
            i++;
        }
        cx[nc] = sx / (double)cnt;
        double acc = 0;
        for (int k = 0; k < p->ns; k++) {
            acc += sum[k] / (double)cnt;
            cum[k][nc] = acc;
        }
        nc++;
    }
    return nc;
}

static void svg_plot(wf_buf *b, const plot *p) {
    wf_buf_printf(b, "<figure class=\"plot-box\" id=\"plot-%s\">", p->id);
    /* the range of the values */
    double lo = INFINITY, hi = -INFINITY;
    double **cum = NULL, *cx = NULL;
    size_t nc = 0;
    size_t n_values = 0;
    if (p->stacked && p->n) {
        cum = calloc((size_t)p->ns, sizeof *cum);
        cx = malloc(p->n * sizeof *cx);
        int ok = cum && cx;
        for (int k = 0; ok && k < p->ns; k++) ok = (cum[k] = malloc(p->n * sizeof **cum)) != NULL;
        if (ok) {
            nc = stack_columns(p, cum, cx);
            lo = 0;
            for (size_t i = 0; i < nc; i++)
                if (cum[p->ns - 1][i] > hi) hi = cum[p->ns - 1][i];
            for (size_t i = 0; i < p->n; i++)
                for (int k = 0; k < p->ns; k++) n_values += isfinite(p->s[k].y[i]);
        }
    } else {
        for (int k = 0; k < p->ns; k++)
            for (size_t i = 0; i < p->n; i++) {
                double v = p->s[k].y[i];
                if (!isfinite(v) || (p->logy && v <= 0)) continue;
                n_values++;
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
        for (size_t i = 0; i < p->n_marks; i++) {
            double v = p->mark_y ? p->mark_y[i] : NAN;
            if (!isfinite(v) || (p->logy && v <= 0)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    }
    wf_buf_printf(b, "<svg class=\"plot\" data-plot=\"%s\" data-values=\"%zu\" viewBox=\"0 0 %.0f %.0f\" "
                      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"",
                   p->id, n_values, PLOT_W, PLOT_H);
    html_esc(b, p->title);
    PUT(b, "\">");
    wf_buf_printf(b, "<text class=\"title\" x=\"%.1f\" y=\"18\">", M_LEFT);
    html_esc(b, p->title);
    if (p->unit && p->unit[0]) {
        PUT(b, "<tspan class=\"unit\"> (");
        html_esc(b, p->unit);
        PUT(b, ")</tspan>");
    }
    PUT(b, "</text>");
    /* legend, right-aligned in the title row */
    double lx = PLOT_W - M_RIGHT;
    for (int k = p->ns - 1; k >= 0; k--) {
        double w = 14 + 6.8 * (double)strlen(p->s[k].name);
        lx -= w;
        wf_buf_printf(b, "<rect x=\"%.1f\" y=\"9\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                          "<text class=\"legend\" x=\"%.1f\" y=\"18\">",
                       lx, p->s[k].color, lx + 13);
        html_esc(b, p->s[k].name);
        PUT(b, "</text>");
        lx -= 8;
    }
    if (n_values == 0 || !(hi >= lo)) {
        wf_buf_printf(b, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>"
                          "<text class=\"empty\" x=\"%.1f\" y=\"%.1f\">no data in this run</text></svg>",
                       M_LEFT, M_TOP, PLOT_W - M_LEFT - M_RIGHT, PLOT_H - M_TOP - M_BOTTOM, PLOT_W / 2, PLOT_H / 2);
    } else {
        frame f = {p->x[0], p->x[p->n - 1], lo, hi, p->logy};
        if (f.logy) {
            f.y0 = floor(log10(lo));
            f.y1 = ceil(log10(hi));
            if (f.y1 <= f.y0) f.y1 = f.y0 + 1;
        } else {
            double pad = (hi - lo) * 0.05;
            if (pad == 0) pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;
            f.y0 = p->stacked || (lo >= 0 && lo - pad < 0) ? (lo >= 0 ? 0 : lo - pad) : lo - pad;
            f.y1 = hi + pad;
        }
        if (f.x1 <= f.x0) {
            f.x0 -= 1;
            f.x1 += 1;
        }
        axes(b, &f);
        wf_buf_printf(b, "<g class=\"data\" clip-path=\"none\">");
        if (p->stacked) {
            draw_stacked(b, &f, p, cum, cx, nc);
        } else {
            for (int k = 0; k < p->ns; k++)
                draw_line(b, &f, p->x, p->s[k].y, p->n, p->s[k].name, p->s[k].color, p->s[k].dots);
        }
        for (size_t i = 0; i < p->n_marks; i++) {
            double mx = px_x(&f, p->mark_x[i]);
            double my = p->mark_y ? p->mark_y[i] : NAN;
            wf_buf_printf(b, "<g class=\"spike\"><title>spike at step %.0f</title>", p->mark_x[i]);
            wf_buf_printf(b, "<line class=\"spike-line\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", mx, mx,
                           M_TOP, PLOT_H - M_BOTTOM);
            if (isfinite(my) && (!f.logy || my > 0))
                wf_buf_printf(b, "<circle class=\"spike-dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\"/>", mx, px_y(&f, my));
            PUT(b, "</g>");
        }
        PUT(b, "</g></svg>");
    }
    if (p->note) {
        PUT(b, "<figcaption>");
        html_esc(b, p->note);
        PUT(b, "</figcaption>");
    }
    PUT(b, "</figure>\n");
    if (cum)
        for (int k = 0; k < p->ns; k++) free(cum[k]);
    free(cum);
    free(cx);
}

/* ------------------------------------------------------------ the page */

static const char *CSS =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1360px;"
    "padding:0 16px;color:#1d232a;background:#fff}"
    "h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2e8;"
    "padding-bottom:4px}.sub{color:#5b6670;margin:0 0 16px}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px}"
    "figure{margin:0;border:1px solid #e3e7ec;border-radius:6px;padding:6px 8px 8px;background:#fcfdfe}"
    "figcaption{color:#5b6670;font-size:12px;margin:2px 6px 0}"
    "svg.plot{width:100%;height:auto;display:block}"
    "svg .title{font-weight:600;font-size:14px;fill:#1d232a}svg .legend{font-size:11.5px;fill:#39424b}"
    "svg .ylab{font-size:11px;fill:#5b6670;text-anchor:end}svg .xlab{font-size:11px;fill:#5b6670;"
    "text-anchor:middle}svg .unit{font-weight:400;font-size:12px;fill:#5b6670}"
    "svg .grid{stroke:#e8ecf0;stroke-width:1}svg .tick{stroke:#9aa5b1}"
    "svg .frame{fill:none;stroke:#c5ccd4}svg .series{fill:none;stroke-width:1.6;stroke-linejoin:round}"
    "svg .area{stroke:none;opacity:.9}svg .empty{font-size:13px;fill:#8a949e;text-anchor:middle}"
    "svg .spike-line{stroke:#d62728;stroke-width:1;stroke-dasharray:3 3;opacity:.7}"
    "svg .spike-dot{fill:none;stroke:#d62728;stroke-width:2}"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 12px 3px 0;text-align:left;"
    "vertical-align:top}th{color:#5b6670;font-weight:500}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "table.kv td:first-child{color:#5b6670;white-space:nowrap}"
    "pre{background:#f5f7f9;border:1px solid #e3e7ec;border-radius:4px;padding:8px;overflow:auto;font-size:12px}"
    ".warn{color:#a4510b}details{margin:6px 0}summary{cursor:pointer;color:#2b5d8a}"
    ".cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #e3e7ec;border-radius:6px;"
    "padding:8px 14px;min-width:120px;background:#fcfdfe}.card b{display:block;font-size:18px}"
    ".card span{color:#5b6670;font-size:12px}"
    "tr.slowest td{background:#fdf1e6}.straggler{color:#a4510b}#rank-table{margin-bottom:12px}";

static double *column(const run_data *d, int f, double scale) {
    double *y = malloc((d->n ? d->n : 1) * sizeof *y);
    if (!y) return NULL;
    for (size_t i = 0; i < d->n; i++) y[i] = d->rows[i * ROW + f] * scale;
    return y;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const run_data *d, int f, size_t from) {
    size_t m = 0;
    double *v = malloc((d->n ? d->n : 1) * sizeof *v);
    if (!v) return NAN;
    for (size_t i = from; i < d->n; i++)
        if (isfinite(d->rows[i * ROW + f])) v[m++] = d->rows[i * ROW + f];
    double r = NAN;
    if (m) {
        qsort(v, m, sizeof *v, cmp_double);
        r = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    }
    free(v);
    return r;
}

static double max_of(const run_data *d, int f) {
    double m = NAN;
    for (size_t i = 0; i < d->n; i++) {
        double v = d->rows[i * ROW + f];
        if (isfinite(v) && !(v <= m)) m = v;
    }
    return m;
}

static void card(wf_buf *b, const char *value, const char *label) {
    PUT(b, "<div class=\"card\"><b>");
    html_esc(b, value);
    PUT(b, "</b><span>");
    html_esc(b, label);
    PUT(b, "</span></div>");
}

static const char *jstr(json_t *o, const char *a, const char *bkey) {
    json_t *v = json_object_get(o, a);
    if (bkey) v = json_object_get(v, bkey);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void kv_row(wf_buf *b, const char *k, const char *v) {
    if (!v) return;
    PUT(b, "<tr><td>");
    html_esc(b, k);
    PUT(b, "</td><td>");
    html_esc(b, v);
    PUT(b, "</td></tr>");
}

static void summary(wf_buf *b, const run_data *d) {
    char v[64], l[96];
    const double *last = d->rows + (d->n - 1) * ROW;
    PUT(b, "<section id=\"summary\"><div class=\"cards\">");
    snprintf(v, sizeof v, "%.0f", last[F_step]);
    snprintf(l, sizeof l, "last step (%zu logged)", d->n);
    card(b, v, l);
    snprintf(v, sizeof v, "%.4f", last[F_loss]);
    card(b, v, "last loss");
    double best_val = NAN;
    for (size_t i = 0; i < d->n; i++) {
        double x = d->rows[i * ROW + F_val_loss];
        if (isfinite(x) && !(x >= best_val)) best_val = x;
    }
    if (isfinite(best_val)) {
        snprintf(v, sizeof v, "%.4f", best_val);
        card(b, v, "best validation loss");
    }
    size_t from = d->n > 1 ? 1 : 0;
    fmt_num(v, sizeof v, median_of(d, F_tokens_per_s, from));
    card(b, v, "tokens/s (median)");
    double tf = median_of(d, F_tflops, from), mfu = median_of(d, F_mfu_pct, from);
    if (isfinite(mfu)) {
        snprintf(v, sizeof v, "%.1f%%", mfu);
        card(b, v, "MFU (median)");
    }
    if (isfinite(tf)) {
        snprintf(v, sizeof v, "%.3g", tf);
        card(b, v, "TFLOP/s (median)");
    }
    double st = median_of(d, F_step_s, from);
    if (isfinite(st)) {
        snprintf(v, sizeof v, "%.0f ms", st * 1e3);
        card(b, v, "step time (median)");
    }
    fmt_bytes(v, sizeof v, max_of(d, F_host_rss_peak) > 0 ? max_of(d, F_host_rss_peak) : max_of(d, F_host_rss));
    card(b, v, "peak host RSS");
    fmt_bytes(v, sizeof v, max_of(d, F_arena_peak));
    card(b, v, "peak arena in use");
    snprintf(v, sizeof v, "%zu", d->n_spikes);
    card(b, v, "loss spikes");
    if (d->rollbacks) {
        snprintf(v, sizeof v, "%zu", d->rollbacks);
        card(b, v, "rollbacks / resumes");
    }
    if (isfinite(last[F_elapsed_s])) {
        snprintf(v, sizeof v, "%.1f min", last[F_elapsed_s] / 60);
        card(b, v, "elapsed");
    }
    PUT(b, "</div>");
    if (d->bad_lines)
        wf_buf_printf(b, "<p class=\"warn\">%zu line%s of metrics.jsonl could not be read and %s skipped "
                          "(the first: line %zu), e.g. the last line of a run that was killed mid-write.</p>",
                       d->bad_lines, d->bad_lines == 1 ? "" : "s", d->bad_lines == 1 ? "was" : "were",
                       d->first_bad_line);
    PUT(b, "</section>\n");
}

static void spikes_table(wf_buf *b, const run_data *d) {
    PUT(b, "<section id=\"spikes\"><h2>Loss spikes</h2>");
    if (!d->n_spikes) {
        PUT(b, "<p>None detected.</p></section>\n");
        return;
    }
    PUT(b, "<table><tr><th>step</th><th>data position (micro-batch)</th><th>loss</th><th>loss z</th>"
           "<th>grad norm</th><th>grad norm z</th></tr>");
    for (size_t i = 0; i < d->n_spikes; i++) {
        const double *r = d->spikes + i * ROW;
        char a[32], c[32], e[32], f[32], g[32];
        fmt_num(a, sizeof a, r[F_data_pos]);
        snprintf(c, sizeof c, "%.4f", r[F_loss]);
        snprintf(e, sizeof e, isfinite(r[F_loss_z]) ? "%.1f" : "-", r[F_loss_z]);
        fmt_num(f, sizeof f, r[F_grad_norm]);
        snprintf(g, sizeof g, isfinite(r[F_grad_norm_z]) ? "%.1f" : "-", r[F_grad_norm_z]);
        if (!isfinite(r[F_data_pos])) snprintf(a, sizeof a, "-");
        else snprintf(a, sizeof a, "%.0f", r[F_data_pos]);
        wf_buf_printf(b, "<tr><td class=\"num\">%.0f</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
                          "<td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td></tr>",
                       r[F_step], a, c, e, f, g);
    }
    PUT(b, "</table></section>\n");
}

static void run_section(wf_buf *b, const run_data *d) {
    PUT(b, "<section id=\"run\"><h2>Run</h2>");
    json_t *r = d->run;
    if (!r) {
        PUT(b, "<p>No run.json in this directory.</p></section>\n");
        return;
    }
    PUT(b, "<table class=\"kv\">");
    kv_row(b, "started", jstr(r, "started_at", NULL));
    kv_row(b, "weft", jstr(r, "weft_version", NULL));
    json_t *git = json_object_get(r, "git");
    if (json_is_object(git)) {
        char g[256];
        json_t *dirty = json_object_get(git, "dirty");
        snprintf(g, sizeof g, "%s (%s)%s", jstr(git, "commit", NULL) ? jstr(git, "commit", NULL) : "?",
                 jstr(git, "branch", NULL) ? jstr(git, "branch", NULL) : "?",
                 json_is_true(dirty) ? ", with uncommitted changes (git.diff)" : json_is_false(dirty) ? ", clean" : "");
        kv_row(b, "git", g);
    }
    json_t *h = json_object_get(r, "host");
    if (json_is_object(h)) {
        char hs[512];
        json_t *mt = json_object_get(h, "mem_total");
        snprintf(hs, sizeof hs, "%s: %s, %lld logical CPUs, %.1f GiB", jstr(h, "hostname", NULL) ? jstr(h, "hostname", NULL) : "?",
                 jstr(h, "cpu", NULL) ? jstr(h, "cpu", NULL) : "?",
                 (long long)json_integer_value(json_object_get(h, "logical_cpus")),
                 json_is_number(mt) ? json_number_value(mt) / 0x1p30 : 0.0);
        kv_row(b, "host", hs);
        char os[512];
        snprintf(os, sizeof os, "%s %s %s", jstr(h, "os", NULL) ? jstr(h, "os", NULL) : "",
                 jstr(h, "kernel", NULL) ? jstr(h, "kernel", NULL) : "", jstr(h, "machine", NULL) ? jstr(h, "machine", NULL) : "");
        kv_row(b, "system", os);
    }
    json_t *th = json_object_get(r, "threads");
    if (json_is_object(th)) {
        char ts[64];
        snprintf(ts, sizeof ts, "%lld", (long long)json_integer_value(json_object_get(th, "kernels")));
        kv_row(b, "threads", ts);
    }
    kv_row(b, "compiler", jstr(r, "build", "compiler_version"));
    kv_row(b, "flags", jstr(r, "build", "cflags"));
    kv_row(b, "OpenBLAS", jstr(r, "libraries", "openblas"));
    kv_row(b, "BLAS kernels", jstr(r, "libraries", "openblas_core"));
    kv_row(b, "MFU peak", jstr(r, "mfu", "peak_description"));
    kv_row(b, "FLOPs", jstr(r, "mfu", "formula"));
    PUT(b, "</table>");
    json_t *cmd = json_object_get(r, "command");
    if (json_array_size(cmd)) {
        PUT(b, "<details><summary>Command line</summary><pre>");
        for (size_t i = 0; i < json_array_size(cmd); i++) {
            if (i) PUT(b, " ");
            html_esc(b, json_string_value(json_array_get(cmd, i)));
        }
        PUT(b, "</pre></details>");
    }
    const char *cfg = jstr(r, "config_toml", NULL);
    if (cfg) {
        PUT(b, "<details><summary>Configuration</summary><pre>");
        html_esc(b, cfg);
        PUT(b, "</pre></details>");
    }
    json_t *env = json_object_get(r, "env");
    json_t *libs = json_object_get(r, "libraries");
    PUT(b, "<details><summary>Libraries and environment</summary><table class=\"kv\">");
    const char *k;
    json_t *v;
    json_object_foreach(libs, k, v) kv_row(b, k, json_string_value(v));
    json_object_foreach(env, k, v) kv_row(b, k, json_string_value(v));
    PUT(b, "</table></details></section>\n");
}

/* ------------------------------------------------------------ ranks */

/* One rank's file and what the Ranks section shows of it. */
typedef struct {
    int rank;
    run_data own;        /* ranks > 0: the rank's records */
    const run_data *d;   /* its records (rank 0: the run's), NULL when unreadable */
    char *error;         /* why there are none */
    size_t missing;      /* rank 0's steps this rank has no record of */
    double step_s, data_s, fwd_bwd_s, comm_s, rss_peak; /* medians after the first step; the peak */
} rank_info;

typedef struct {
    rank_info *r;        /* (n) rank 0 first, then by rank; n == 0: no ranks/ folder */
    size_t n;
} ranks_data;

static void ranks_free(ranks_data *rd) {
    for (size_t i = 0; i < rd->n; i++) {
        run_data_free(&rd->r[i].own);
        free(rd->r[i].error);
    }
    free(rd->r);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static double peak_rss(const run_data *d) {
    return max_of(d, F_host_rss_peak) > 0 ? max_of(d, F_host_rss_peak) : max_of(d, F_host_rss);
}

/* The rank numbers of dir/ranks/rank-RRRRR folders (canonical names only,
 * r > 0), sorted; *n = 0 when there is no such folder. */
static wf_status list_ranks(const char *ranks_dir, int **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *dp = opendir(ranks_dir);
    if (!dp) return WF_OK;
    size_t cap = 0;
    wf_status s = WF_OK;
    struct dirent *e;
    while (s == WF_OK && (e = readdir(dp))) {
        const char *nm = e->d_name;
        if (strncmp(nm, "rank-", 5) || !nm[5] || strspn(nm + 5, "0123456789") != strlen(nm + 5) ||
            strlen(nm + 5) > 9)
            continue;
        int r = atoi(nm + 5);
        char canon[32];
        snprintf(canon, sizeof canon, "rank-%05d", r);
        if (r <= 0 || strcmp(canon, nm)) continue;
        s = WF_GROW(*out, cap, *n + 1, 16);
        if (s != WF_OK) {
            s = wf_error_wrap(s, "listing %s: ", ranks_dir);
            break;
        }
        (*out)[(*n)++] = r;
    }
    closedir(dp);
    if (s == WF_OK && *n) qsort(*out, *n, sizeof **out, cmp_int);
    return s;
}

/* Steps of `ref` with no record in `d` (both ascending after stitching). */
static size_t missing_steps(const run_data *ref, const run_data *d) {
    size_t miss = 0, j = 0;
    for (size_t i = 0; i < ref->n; i++) {
        double st = ref->rows[i * ROW + F_step];
        while (j < d->n && d->rows[j * ROW + F_step] < st) j++;
        if (j == d->n || d->rows[j * ROW + F_step] != st) miss++;
    }
    return miss;
}

/* Reads every rank's metrics.jsonl beside rank 0's `main`. A rank file
 * that cannot be read or has no records is kept with the reason (shown on
 * the page); only running out of memory fails. */
static wf_status read_ranks(ranks_data *rd, const char *dir, const run_data *main_d) {
    memset(rd, 0, sizeof *rd);
    char ranks[WF_PATH_MAX];
    WF_TRY(wf_rundir_path(ranks, sizeof ranks, dir, WF_RUN_RANKS));
    size_t plen = WF_PATH_MAX;
    char *path = malloc(plen);
    if (!path) return wf_error(WF_ERR_NOMEM, "out of memory");
    int *nums = NULL;
    size_t nr = 0;
    wf_status s = list_ranks(ranks, &nums, &nr);
    if (s == WF_OK && nr) {
        rd->r = calloc(nr + 1, sizeof *rd->r);
        if (!rd->r) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK && nr) {
        rd->n = nr + 1;
        rd->r[0].d = main_d;
        for (size_t i = 0; i < nr && s == WF_OK; i++) {
            rank_info *ri = &rd->r[i + 1];
            ri->rank = nums[i];
            wf_status rs = wf_path_joinf(path, plen, ranks, "rank-%05d/%s", nums[i], wf_rundir_name(WF_RUN_METRICS));
            if (rs == WF_OK)
                rs = wf_path_exists(path) ? read_metrics(&ri->own, path)
                                          : wf_error(WF_ERR_NOTFOUND, "%s: no such file", path);
            if (rs == WF_ERR_NOMEM) {
                s = rs;
            } else if (rs != WF_OK) {
                ri->error = strdup(wf_error_msg());
                wf_error_clear();
                if (!ri->error) s = wf_error(WF_ERR_NOMEM, "out of memory");
            } else {
                ri->d = &ri->own;
            }
        }
    }
    for (size_t i = 0; s == WF_OK && i < rd->n; i++) {
        rank_info *ri = &rd->r[i];
        ri->step_s = ri->data_s = ri->fwd_bwd_s = ri->comm_s = ri->rss_peak = NAN;
        if (!ri->d) continue;
        size_t from = ri->d->n > 1 ? 1 : 0;
        ri->step_s = median_of(ri->d, F_step_s, from);
        ri->data_s = median_of(ri->d, F_data_s, from);
        ri->fwd_bwd_s = median_of(ri->d, F_fwd_bwd_s, from);
        ri->comm_s = median_of(ri->d, F_comm_s, from);
        ri->rss_peak = peak_rss(ri->d);
        ri->missing = missing_steps(main_d, ri->d);
    }
    free(nums);
    free(path);
    return s;
}

/* A time for the table: "2.41 s", "12.3 ms", "8.39 µs"; the exact seconds go into
 * data-v for readers of the page. */
static void time_cell(wf_buf *b, double v) {
    if (!isfinite(v)) {
        PUT(b, "<td class=\"num\">-</td>");
        return;
    }
    const char *unit = v >= 1 ? "s" : v >= 1e-3 || v == 0 ? "ms" : "\xc2\xb5" "s"; /* µs */
    double shown = v >= 1 ? v : v >= 1e-3 || v == 0 ? v * 1e3 : v * 1e6;
    wf_buf_printf(b, "<td class=\"num\" data-v=\"%.17g\">%.3g %s</td>", v, shown, unit);
}

static void ranks_table(wf_buf *b, const ranks_data *rd) {
    double fastest = INFINITY, slowest = -INFINITY;
    size_t n_timed = 0, i_slow = 0;
    for (size_t i = 0; i < rd->n; i++) {
        double v = rd->r[i].step_s;
        if (!isfinite(v)) continue;
        n_timed++;
        if (v < fastest) fastest = v;
        if (v > slowest) slowest = v, i_slow = i;
    }
    PUT(b, "<p>Each rank's own measurements (<code>metrics.all_ranks</code>): rank 0's from "
           "<code>metrics.jsonl</code>, rank r's from <code>ranks/rank-RRRRR/metrics.jsonl</code>. "
           "Medians over the logged steps after the first; communication is the time blocked in the "
           "gradient's collectives (part of forward+backward and optimizer), which includes waiting for "
           "slower ranks. The straggler is the rank whose median step is slowest.</p>");
    PUT(b, "<table id=\"rank-table\"><tr><th>rank</th><th>steps</th><th>step time</th><th>data wait</th>"
           "<th>forward+backward</th><th>communication</th><th>peak host RSS</th><th>step vs fastest</th></tr>");
    for (size_t i = 0; i < rd->n; i++) {
        const rank_info *ri = &rd->r[i];
        int slow = n_timed > 1 && i == i_slow;
        wf_buf_printf(b, "<tr data-rank=\"%d\"%s><td class=\"num\">%d</td>", ri->rank,
                       slow ? " class=\"slowest\"" : "", ri->rank);
        if (!ri->d) {
            PUT(b, "<td colspan=\"7\" class=\"warn\">");
            html_esc(b, ri->error);
            PUT(b, "</td></tr>");
            continue;
        }
        wf_buf_printf(b, "<td class=\"num\">%zu</td>", ri->d->n);
        time_cell(b, ri->step_s);
        time_cell(b, ri->data_s);
        time_cell(b, ri->fwd_bwd_s);
        time_cell(b, ri->comm_s);
        char v[48];
        fmt_bytes(v, sizeof v, ri->rss_peak);
        if (isfinite(ri->rss_peak)) wf_buf_printf(b, "<td class=\"num\" data-v=\"%.17g\">%s</td>", ri->rss_peak, v);
        else wf_buf_printf(b, "<td class=\"num\">%s</td>", v);
        if (!isfinite(ri->step_s)) {
            PUT(b, "<td class=\"num\">-</td>");
        } else {
            double pct = fastest > 0 ? 100 * (ri->step_s - fastest) / fastest : 0;
            wf_buf_printf(b, "<td class=\"num\" data-v=\"%.17g\">%s%.1f%%%s</td>", pct, pct > 0 ? "+" : "", pct,
                           slow ? " <b class=\"straggler\">slowest</b>" : ri->step_s == fastest ? " fastest" : "");
        }
        PUT(b, "</tr>");
    }
    PUT(b, "</table>");
    for (size_t i = 0; i < rd->n; i++) {
        const rank_info *ri = &rd->r[i];
        if (!ri->d) continue;
        if (ri->d->bad_lines && i > 0)
            wf_buf_printf(b, "<p class=\"warn\">rank %d: %zu line%s of ranks/rank-%05d/metrics.jsonl could not be "
                              "read and %s skipped (the first: line %zu), e.g. the last line of a run that was "
                              "killed mid-write.</p>",
                           ri->rank, ri->d->bad_lines, ri->d->bad_lines == 1 ? "" : "s", ri->rank,
                           ri->d->bad_lines == 1 ? "was" : "were", ri->d->first_bad_line);
        if (ri->missing)
            wf_buf_printf(b, "<p class=\"warn\">rank %d has no record of %zu of rank 0's %zu steps; its "
                              "medians and lines cover the steps it has.</p>",
                           ri->rank, ri->missing, rd->r[0].d->n);
    }
}

/* The ranks drawn as lines (indices into rd->r, in rank order): all with
 * records when they fit, else the slowest MAX_SERIES - 1 and the fastest. */
static size_t pick_ranks(const ranks_data *rd, size_t *sel) {
    size_t m = 0;
    size_t *all = malloc(rd->n * sizeof *all);
    if (!all) return 0;
    for (size_t i = 0; i < rd->n; i++)
        if (rd->r[i].d) all[m++] = i;
    if (m > MAX_SERIES) {
        /* insertion sort by median step time, slowest first (NaN last) */
        for (size_t i = 1; i < m; i++)
            for (size_t j = i; j > 0; j--) {
                double x = rd->r[all[j]].step_s, y = rd->r[all[j - 1]].step_s;
                if (!(isfinite(x) && (!isfinite(y) || x > y))) break;
                size_t t = all[j];
                all[j] = all[j - 1];
                all[j - 1] = t;
            }
        size_t last = m - 1; /* the fastest timed one */
        while (last > 0 && !isfinite(rd->r[all[last]].step_s)) last--;
        all[MAX_SERIES - 1] = all[last];
        m = MAX_SERIES;
        for (size_t i = 1; i < m; i++) /* back to rank order */
            for (size_t j = i; j > 0 && all[j] < all[j - 1]; j--) {
                size_t t = all[j];
                all[j] = all[j - 1];
                all[j - 1] = t;
            }
    }
    memcpy(sel, all, m * sizeof *sel);
    free(all);
    return m;
}

static const char *const rank_color[MAX_SERIES] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

static wf_status ranks_plots(wf_buf *b, const ranks_data *rd) {
    size_t sel[MAX_SERIES];
    size_t ns = pick_ranks(rd, sel);
    if (!ns) return WF_OK;
    size_t cap = 0;
    for (size_t k = 0; k < ns; k++) cap += rd->r[sel[k]].d->n;
    double *x = malloc(cap * sizeof *x);
    double *y = malloc(3 * ns * (cap ? cap : 1) * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        return wf_error(WF_ERR_NOMEM, "out of memory drawing the report");
    }
    /* the steps of every drawn rank, ascending, once */
    size_t nx = 0;
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < rd->r[sel[k]].d->n; i++) x[nx++] = rd->r[sel[k]].d->rows[i * ROW + F_step];
    qsort(x, nx, sizeof *x, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < nx; i++)
        if (!u || x[i] != x[u - 1]) x[u++] = x[i];
    nx = u;
    double step_max = 0, rss_max = 0;
    int any_comm = 0;
    for (size_t k = 0; k < ns; k++) {
        const rank_info *ri = &rd->r[sel[k]];
        if (ri->step_s > step_max) step_max = ri->step_s;
        if (peak_rss(ri->d) > rss_max) rss_max = peak_rss(ri->d);
        any_comm |= isfinite(ri->comm_s);
    }
    double t_scale = step_max >= 2 ? 1 : 1e3, m_scale = rss_max >= 0x1p30 ? 0x1p-30 : 0x1p-20;
    const int fields[3] = {F_step_s, F_comm_s, F_host_rss};
    const double scale[3] = {t_scale, t_scale, m_scale};
    char names[MAX_SERIES][24];
    plot p[3];
    memset(p, 0, sizeof p);
    for (int g = 0; g < 3; g++) {
        p[g].x = x;
        p[g].n = nx;
        p[g].ns = (int)ns;
        for (size_t k = 0; k < ns; k++) {
            const run_data *d = rd->r[sel[k]].d;
            double *yy = y + ((size_t)g * ns + k) * nx;
            size_t j = 0;
            for (size_t i = 0; i < nx; i++) {
                while (j < d->n && d->rows[j * ROW + F_step] < x[i]) j++;
                yy[i] = j < d->n && d->rows[j * ROW + F_step] == x[i] ? d->rows[j * ROW + fields[g]] * scale[g] : NAN;
            }
            snprintf(names[k], sizeof names[k], ns <= 4 ? "rank %d" : "r%d", rd->r[sel[k]].rank);
            p[g].s[k] = (series){names[k], rank_color[k], yy, 0};
        }
    }
    char note[160] = "One line per rank.";
    if (ns < rd->n)
        snprintf(note, sizeof note, "The %zu slowest of %zu ranks (by median step time) and the fastest; rN is rank N.",
                 ns - 1, rd->n);
    else if (ns > 4)
        snprintf(note, sizeof note, "One line per rank; rN is rank N.");
    p[0].id = "rank_step_s", p[0].title = "Step time per rank", p[0].unit = t_scale == 1 ? "s" : "ms";
    p[0].note = note;
    p[1].id = "rank_comm_s", p[1].title = "Communication per rank", p[1].unit = t_scale == 1 ? "s" : "ms";
    p[1].note = "Time blocked in the gradient's collectives, waiting for slower ranks included.";
    p[2].id = "rank_host_rss", p[2].title = "Host RSS per rank", p[2].unit = m_scale == 0x1p-30 ? "GiB" : "MiB";
    PUT(b, "<div class=\"grid\">\n");
    svg_plot(b, &p[0]);
    if (any_comm) svg_plot(b, &p[1]);
    svg_plot(b, &p[2]);
    PUT(b, "</div>");
    free(x);
    free(y);
    return WF_OK;
}

/* The Ranks section; nothing when the run has no ranks/ folder. */
static wf_status ranks_section(wf_buf *b, const ranks_data *rd) {
    if (!rd->n) return WF_OK;
    PUT(b, "<section id=\"ranks\"><h2>Ranks</h2>");
    ranks_table(b, rd);
    wf_status s = ranks_plots(b, rd);
    PUT(b, "</section>\n");
    return s;
}

/* ------------------------------------------------------------ evaluation */

/* RUN_DIR/eval.jsonl (docs/formats/eval-jsonl.md), written by `weft eval
 * --watch`: one line per checkpoint and dataset. Stitched per dataset by
 * step, a later line for the same step replacing the earlier one. */
#define MAX_EVAL_SETS 16
/* The eval.jsonl versions this reader takes: 1 (lines without `version`)
 * and 2 (the key last; WF_EVAL_JSONL_VERSION of weft/eval.h, whose layer
 * is above this one). */
#define EVAL_JSONL_VERSION_MAX 2

typedef struct {
    char name[72];    /* the dataset's name in eval.jsonl */
    char split[16];
    char label[96];   /* "eval NAME", for the loss plot's legend */
    double *step, *loss, *bpb; /* (n) ascending steps */
    size_t n, cap;
} eval_set;

typedef struct {
    eval_set set[MAX_EVAL_SETS];
    size_t n_sets;
    size_t lines, bad_lines, first_bad_line, dropped; /* dropped: lines of datasets past MAX_EVAL_SETS */
    size_t newer_lines, first_newer_line;             /* of a version this weft does not read */
    long long newer_version;                          /* the first such line's (-1: not an integer) */
    int present;
} eval_data;

static void eval_data_free(eval_data *ev) {
    for (size_t i = 0; i < ev->n_sets; i++) {
        free(ev->set[i].step);
        free(ev->set[i].loss);
        free(ev->set[i].bpb);
    }
}

static int eval_put(eval_set *e, double step, double loss, double bpb) {
    size_t i = e->n;
    while (i && e->step[i - 1] > step) i--;
    if (i && e->step[i - 1] == step) {
        e->loss[i - 1] = loss;
        e->bpb[i - 1] = bpb;
        return 1;
    }
    if (e->n == e->cap) {
        size_t nc = e->cap ? 2 * e->cap : 64;
        double *a = realloc(e->step, nc * sizeof *a);
        if (a) e->step = a;
        double *l = a ? realloc(e->loss, nc * sizeof *l) : NULL;
        if (l) e->loss = l;
        double *c = l ? realloc(e->bpb, nc * sizeof *c) : NULL;
        if (!c) return 0;
        e->bpb = c;
        e->cap = nc;
    }
    memmove(e->step + i + 1, e->step + i, (e->n - i) * sizeof *e->step);
    memmove(e->loss + i + 1, e->loss + i, (e->n - i) * sizeof *e->loss);
    memmove(e->bpb + i + 1, e->bpb + i, (e->n - i) * sizeof *e->bpb);
    e->step[i] = step, e->loss[i] = loss, e->bpb[i] = bpb;
    e->n++;
    return 1;
}

static double jnum(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Reads DIR/eval.jsonl when there is one; lines that do not parse are
 * counted, never fatal. */
static wf_status read_eval(eval_data *ev, const char *path) {
    if (!wf_path_exists(path)) return WF_OK;
    char *text;
    size_t len;
    WF_TRY(wf_file_read(path, &text, &len));
    ev->present = 1;
    wf_status s = WF_OK;
    wf_lines it;
    wf_lines_init(&it, text, len);
    json_t *o;
    while (s == WF_OK && wf_lines_next_json(&it, &o)) {
        size_t lineno = it.lineno;
        json_t *ver = json_object_get(o, "version"); /* none: version 1 */
        if (ver && !(json_is_integer(ver) && json_integer_value(ver) >= 1 &&
                     json_integer_value(ver) <= EVAL_JSONL_VERSION_MAX)) {
            if (!ev->newer_lines++) {
                ev->first_newer_line = lineno;
                ev->newer_version = json_is_integer(ver) ? (long long)json_integer_value(ver) : -1;
            }
            json_decref(o);
            continue;
        }
        if (json_is_string(json_object_get(o, "task"))) { /* a downstream task's line (weft eval --tasks) */
            json_decref(o);
            continue;
        }
        ev->lines++;
        const char *name = json_string_value(json_object_get(o, "dataset"));
        const char *split = json_string_value(json_object_get(o, "split"));
        double step = jnum(o, "step");
        if (!name || !split || !isfinite(step)) {
            if (!ev->bad_lines++) ev->first_bad_line = lineno;
            json_decref(o);
            continue;
        }
        /* weft writes names of these characters only; the page shows
         * anything else as '_' (names go into SVG attributes) */
        char safe[72];
        snprintf(safe, sizeof safe, "%s", name);
        for (char *c = safe; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
                  *c == '_' || *c == '-'))
                *c = '_';
        eval_set *e = NULL;
        for (size_t i = 0; i < ev->n_sets && !e; i++)
            if (strcmp(ev->set[i].name, safe) == 0 && strcmp(ev->set[i].split, split) == 0) e = &ev->set[i];
        if (!e && ev->n_sets < MAX_EVAL_SETS) {
            e = &ev->set[ev->n_sets++];
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", safe);
            snprintf(e->split, sizeof e->split, "%s", split);
            snprintf(e->label, sizeof e->label, "eval %s", safe);
        }
        if (!e) ev->dropped++;
        else if (!eval_put(e, step, jnum(o, "loss"), jnum(o, "bpb")))
            s = wf_error(WF_ERR_NOMEM, "%s: out of memory at line %zu", path, lineno);
        json_decref(o);
    }
    free(text);
    return s;
}

static const char *const eval_color[MAX_SERIES] = {"#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                                   "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

/* y[i] = the set's value at step x[i], NaN where it has none (x ascending). */
static void eval_align(const eval_set *e, const double *vals, const double *x, size_t n, double *y) {
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        while (j < e->n && e->step[j] < x[i]) j++;
        y[i] = j < e->n && e->step[j] == x[i] ? vals[j] : NAN;
    }
}

/* The lines of a later eval.jsonl version, refused: said, not shown. */
static void eval_newer_note(wf_buf *b, const eval_data *ev) {
    if (!ev->newer_lines) return;
    char v[32];
    if (ev->newer_version >= 0) snprintf(v, sizeof v, "%lld", ev->newer_version);
    else snprintf(v, sizeof v, "that is not an integer");
    wf_buf_printf(b, "<p class=\"warn\">%zu line%s of eval.jsonl (the first: line %zu, version %s) %s of a format "
                     "version this weft does not read (it reads versions 1 to %d); they are not shown: use the weft "
                     "that wrote them.</p>",
                  ev->newer_lines, ev->newer_lines == 1 ? "" : "s", ev->first_newer_line, v,
                  ev->newer_lines == 1 ? "is" : "are", EVAL_JSONL_VERSION_MAX);
}

/* The Evaluation section: loss and bits per byte per dataset against the
 * checkpoint's step, and a table of each dataset's last and best. */
static wf_status eval_section(wf_buf *b, const eval_data *ev) {
    if (!ev->present) return WF_OK;
    PUT(b, "<section id=\"eval\"><h2>Evaluation</h2>");
    size_t cap = 0;
    for (size_t k = 0; k < ev->n_sets; k++) cap += ev->set[k].n;
    if (!cap) {
        wf_buf_printf(b, "<p>eval.jsonl holds no results yet (%zu line%s).</p>", ev->lines,
                      ev->lines == 1 ? "" : "s");
        eval_newer_note(b, ev);
        PUT(b, "</section>\n");
        return WF_OK;
    }
    size_t ns = ev->n_sets < MAX_SERIES ? ev->n_sets : MAX_SERIES;
    double *x = malloc(cap * sizeof *x);
    double *y = malloc(2 * ns * cap * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        return wf_error(WF_ERR_NOMEM, "out of memory drawing the report");
    }
    size_t nx = 0;
    for (size_t k = 0; k < ev->n_sets; k++)
        for (size_t i = 0; i < ev->set[k].n; i++) x[nx++] = ev->set[k].step[i];
    qsort(x, nx, sizeof *x, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < nx; i++)
        if (!u || x[i] != x[u - 1]) x[u++] = x[i];
    nx = u;
    plot pl = {"eval_loss", "Evaluation loss", "nats/token", x, nx, {{0}}, (int)ns, 0, 0, NULL, NULL, 0,
               "One line per dataset; a point per evaluated checkpoint (weft eval --watch)."};
    plot pb = {"eval_bpb", "Evaluation bits per byte", "bits/byte", x, nx, {{0}}, (int)ns, 0, 0, NULL, NULL, 0,
               "Loss x tokens / (UTF-8 bytes of the tokens x ln 2): comparable across tokenizers."};
    for (size_t k = 0; k < ns; k++) {
        const eval_set *e = &ev->set[k];
        double *yl = y + 2 * k * nx, *yb = yl + nx;
        eval_align(e, e->loss, x, nx, yl);
        eval_align(e, e->bpb, x, nx, yb);
        pl.s[k] = (series){e->name, eval_color[k], yl, 1};
        pb.s[k] = (series){e->name, eval_color[k], yb, 1};
    }
    PUT(b, "<div class=\"grid\">\n");
    svg_plot(b, &pl);
    svg_plot(b, &pb);
    PUT(b, "</div>\n<table id=\"eval-table\"><tr><th>dataset</th><th>split</th><th>checkpoints</th>"
           "<th>last step</th><th>loss</th><th>bits per byte</th><th>best bits per byte</th><th>at step</th></tr>");
    for (size_t k = 0; k < ev->n_sets; k++) {
        const eval_set *e = &ev->set[k];
        if (!e->n) continue;
        size_t best = 0;
        for (size_t i = 1; i < e->n; i++)
            if (isfinite(e->bpb[i]) && !(e->bpb[i] >= e->bpb[best])) best = i;
        PUT(b, "<tr><td>");
        html_esc(b, e->name);
        PUT(b, "</td><td>");
        html_esc(b, e->split);
        wf_buf_printf(b, "</td><td class=\"num\">%zu</td><td class=\"num\">%.0f</td><td class=\"num\">%.4f</td>"
                          "<td class=\"num\">%.4f</td><td class=\"num\">%.4f</td><td class=\"num\">%.0f</td></tr>",
                      e->n, e->step[e->n - 1], e->loss[e->n - 1], e->bpb[e->n - 1], e->bpb[best], e->step[best]);
    }
    PUT(b, "</table>");
    if (ev->n_sets > ns)
        wf_buf_printf(b, "<p>The plots show the first %zu of %zu datasets.</p>", ns, ev->n_sets);
    if (ev->bad_lines || ev->dropped)
        wf_buf_printf(b, "<p class=\"warn\">%zu line%s of eval.jsonl could not be read (the first: line %zu) and %zu "
                          "belong%s to datasets past the first %d; they are not shown.</p>",
                      ev->bad_lines, ev->bad_lines == 1 ? "" : "s", ev->first_bad_line, ev->dropped,
                      ev->dropped == 1 ? "s" : "", MAX_EVAL_SETS);
    eval_newer_note(b, ev);
    PUT(b, "</section>\n");
    free(x);
    free(y);
    return WF_OK;
}

/* A mixture's sources: each one's training loss (its validation loss as
 * dots) and the tokens read from it. */
static wf_status source_plots(wf_buf *b, const run_data *d, const double *x) {
    static const char *const color[REPORT_SOURCES] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
    double *col[REPORT_SOURCES * S_COLS] = {0};
    char label[REPORT_SOURCES][80];
    wf_status s = WF_OK;
    for (int k = 0; k < d->n_src * S_COLS && s == WF_OK; k++)
        if (!(col[k] = column(d, NF + k, 1))) s = wf_error(WF_ERR_NOMEM, "out of memory drawing the report");
    if (s == WF_OK) {
        plot pl = {"source_loss", "Training loss per source", "nats/token", x, d->n, {{0}}, 0, 0, 0, NULL, NULL, 0,
                   "A dataset mixture (data.sources): each source's mean loss over its sequences of the step; dots: "
                   "its validation loss."};
        plot pt = {"source_tokens", "Tokens per source", "tokens", x, d->n, {{0}}, 0, 0, 0, NULL, NULL, 0,
                   "Tokens read from each source so far; the slopes follow the weights (data.weight_schedule)."};
        for (int k = 0; k < d->n_src; k++) {
            pl.s[pl.ns++] = (series){d->src_name[k], color[k], col[k * S_COLS + S_LOSS], 0};
            pt.s[pt.ns++] = (series){d->src_name[k], color[k], col[k * S_COLS + S_SEEN], 0};
        }
        for (int k = 0; k < d->n_src && pl.ns < MAX_SERIES; k++) {
            snprintf(label[k], sizeof label[k], "%s validation", d->src_name[k]);
            pl.s[pl.ns++] = (series){label[k], color[k], col[k * S_COLS + S_VAL], 1};
        }
        svg_plot(b, &pl);
        svg_plot(b, &pt);
    }
    for (int k = 0; k < d->n_src * S_COLS; k++) free(col[k]);
    return s;
}

/* Downstream tasks scored in the loop (train.eval_tasks): a table with a
 * row per step that scored them (the later line of a step wins), the
 * mean centred accuracy and each task's; nothing when the run has none. */
static wf_status tasks_section(wf_buf *b, const char *dir) {
    size_t plen = strlen(dir) + 32;
    char *path = malloc(plen);
    if (!path) return wf_error(WF_ERR_NOMEM, "out of memory");
    snprintf(path, plen, "%s/metrics.jsonl", dir);
    char *text = NULL;
    size_t len = 0;
    wf_status s = wf_path_exists(path) ? wf_file_read(path, &text, &len) : WF_OK;
    free(path);
    if (s != WF_OK || !text) return s;
    json_t *rows = json_array();
    wf_lines it;
    wf_lines_init(&it, text, len);
    json_t *o;
    while (rows && wf_lines_next_json(&it, &o)) {
        if (json_is_object(json_object_get(o, "tasks")) && json_is_integer(json_object_get(o, "step"))) {
            json_int_t step = json_integer_value(json_object_get(o, "step"));
            while (json_array_size(rows) &&
                   json_integer_value(json_object_get(json_array_get(rows, json_array_size(rows) - 1), "step")) >= step)
                json_array_remove(rows, json_array_size(rows) - 1); /* a rolled-back stretch: the later lines win */
            json_array_append(rows, o);
        }
        json_decref(o);
    }
    free(text);
    if (!rows) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (json_array_size(rows)) {
        json_t *first = json_object_get(json_array_get(rows, 0), "tasks");
        PUT(b, "<section id=\"tasks\"><h2>Downstream tasks</h2><p>Centred accuracy ((acc - chance) / (1 - chance)) "
               "of each task scored in the loop (train.eval_tasks; docs/eval.md), all ranks' examples.</p>"
               "<table id=\"tasks-table\"><tr><th>step</th><th>mean</th>");
        const char *key;
        json_t *v;
        json_object_foreach(first, key, v) {
            PUT(b, "<th>");
            html_esc(b, key);
            PUT(b, "</th>");
        }
        PUT(b, "</tr>");
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *r = json_array_get(rows, i);
            json_t *tasks = json_object_get(r, "tasks");
            wf_buf_printf(b, "<tr><td class=\"num\">%lld</td><td class=\"num\">%.4f</td>",
                          (long long)json_integer_value(json_object_get(r, "step")),
                          json_number_value(json_object_get(r, "tasks_score")));
            json_object_foreach(first, key, v) {
                json_t *c = json_object_get(json_object_get(tasks, key), "centered");
                if (json_is_number(c)) wf_buf_printf(b, "<td class=\"num\">%.4f</td>", json_number_value(c));
                else PUT(b, "<td></td>");
            }
            PUT(b, "</tr>");
        }
        PUT(b, "</table></section>\n");
    }
    json_decref(rows);
    return WF_OK;
}

/* ------------------------------------------------------ the comparison */

/* Other runs beside this one (`weft report DIR OTHER ...`): their loss and
 * validation loss on this run's plots' axes, step against step, and a
 * table of when each reached the first run's final validation loss (the
 * question an optimizer or schedule comparison asks). */
typedef struct {
    const char *dir;
    run_data d;
} compare_run;

static const char *const cmp_color[MAX_SERIES] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                                  "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/* The last finite value of field f in d, and its step (NaN if none). */
static double last_of(const run_data *d, int f, double *step) {
    *step = NAN;
    for (size_t i = d->n; i-- > 0;)
        if (isfinite(d->rows[i * ROW + f])) {
            *step = d->rows[i * ROW + F_step];
            return d->rows[i * ROW + f];
        }
    return NAN;
}

/* The first step at which d's validation loss is at or below `target`. */
static double first_reaching(const run_data *d, double target) {
    for (size_t i = 0; i < d->n; i++)
        if (d->rows[i * ROW + F_val_loss] <= target) return d->rows[i * ROW + F_step];
    return NAN;
}

static wf_status compare_section(wf_buf *b, const compare_run *runs, int n_runs) {
    if (n_runs < 2) return WF_OK;
    /* x: every step any run logged, in order, without repeats */
    size_t total = 0;
    for (int r = 0; r < n_runs; r++) total += runs[r].d.n;
    double *x = malloc((total ? total : 1) * sizeof *x);
    double *ys = malloc((size_t)n_runs * 2 * (total ? total : 1) * sizeof *ys);
    if (!x || !ys) {
        free(x), free(ys);
        return wf_error(WF_ERR_NOMEM, "out of memory drawing the comparison");
    }
    size_t n = 0;
    for (int r = 0; r < n_runs; r++)
        for (size_t i = 0; i < runs[r].d.n; i++) x[n++] = runs[r].d.rows[i * ROW + F_step];
    qsort(x, n, sizeof *x, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || x[i] != x[u - 1]) x[u++] = x[i];
    n = u;
    for (int r = 0; r < n_runs; r++) {
        double *yl = ys + (size_t)r * 2 * (n ? n : 1), *yv = yl + (n ? n : 1);
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            while (j < runs[r].d.n && runs[r].d.rows[j * ROW + F_step] < x[i]) j++;
            int at = j < runs[r].d.n && runs[r].d.rows[j * ROW + F_step] == x[i];
            yl[i] = at ? runs[r].d.rows[j * ROW + F_loss] : NAN;
            yv[i] = at ? runs[r].d.rows[j * ROW + F_val_loss] : NAN;
        }
    }
    PUT(b, "<section id=\"compare\"><h2>Comparison</h2><p class=\"sub\">These runs' losses by step; the first run is "
           "this report's.</p><div class=\"grid\">");
    plot pl = {.id = "compare-loss", .title = "training loss", .unit = "", .x = x, .n = n};
    plot pv = {.id = "compare-val", .title = "validation loss", .unit = "", .x = x, .n = n};
    for (int r = 0; r < n_runs && r < MAX_SERIES; r++) {
        double *yl = ys + (size_t)r * 2 * (n ? n : 1);
        pl.s[pl.ns++] = (series){runs[r].dir, cmp_color[r], yl, 0};
        pv.s[pv.ns++] = (series){runs[r].dir, cmp_color[r], yl + (n ? n : 1), 1};
    }
    svg_plot(b, &pl);
    svg_plot(b, &pv);
    PUT(b, "</div>");
    double s0, target = last_of(&runs[0].d, F_val_loss, &s0);
    PUT(b, "<table><tr><th>run</th><th>steps</th><th>final loss</th><th>final validation loss</th><th>at step</th>"
           "<th>first step at or below the first run's final validation loss</th></tr>");
    for (int r = 0; r < n_runs; r++) {
        double st, sv, fl = last_of(&runs[r].d, F_loss, &st), fv = last_of(&runs[r].d, F_val_loss, &sv);
        double reach = isfinite(target) ? first_reaching(&runs[r].d, target) : NAN;
        char c[5][32];
        snprintf(c[0], 32, "%.0f", st);
        snprintf(c[1], 32, isfinite(fl) ? "%.4f" : "-", fl);
        snprintf(c[2], 32, isfinite(fv) ? "%.4f" : "-", fv);
        snprintf(c[3], 32, isfinite(sv) ? "%.0f" : "-", sv);
        snprintf(c[4], 32, isfinite(reach) ? "%.0f" : "not reached", reach);
        PUT(b, "<tr><td>");
        html_esc(b, runs[r].dir);
        wf_buf_printf(b, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>", c[0], c[1], c[2], c[3],
                      c[4]);
    }
    PUT(b, "</table></section>\n");
    free(x);
    free(ys);
    return WF_OK;
}

static wf_status render(wf_buf *b, const char *dir, const run_data *d, const ranks_data *rd,
                        const eval_data *ev, const compare_run *cmp, int n_cmp) {
    PUT(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">");
    PUT(b, "<meta name=\"generator\" content=\"weft " WF_VERSION "\"><title>weft report: ");
    html_esc(b, dir);
    wf_buf_printf(b, "</title><style>%s</style></head><body>\n<h1>weft run report</h1><p class=\"sub\">", CSS);
    html_esc(b, dir);
    const char *started = d->run ? jstr(d->run, "started_at", NULL) : NULL;
    if (started) {
        PUT(b, " &middot; started ");
        html_esc(b, started);
    }
    PUT(b, "</p>\n");
    summary(b, d);

    size_t n = d->n;
    double *x = column(d, F_step, 1);
    double *loss = column(d, F_loss, 1), *val = column(d, F_val_loss, 1), *lr = column(d, F_lr, 1);
    double *gn = column(d, F_grad_norm, 1), *tps = column(d, F_tokens_per_s, 1), *mfu = column(d, F_mfu_pct, 1);
    double *tfl = column(d, F_tflops, 1), *bseq = column(d, F_batch_seqs, 1);
    /* The global batch gets a plot when it changed (a batch-size ramp). */
    double bmin = INFINITY, bmax = -INFINITY;
    for (size_t i = 0; bseq && i < d->n; i++)
        if (isfinite(bseq[i])) {
            if (bseq[i] < bmin) bmin = bseq[i];
            if (bseq[i] > bmax) bmax = bseq[i];
        }
    double mem_max = 0;
    const int mem_f[] = {F_host_rss, F_arena_reserved, F_arena_in_use, F_arena_peak};
    for (size_t i = 0; i < sizeof mem_f / sizeof *mem_f; i++) {
        double m = max_of(d, mem_f[i]);
        if (m > mem_max) mem_max = m;
    }
    double mem_scale = mem_max >= 0x1p30 ? 0x1p-30 : 0x1p-20;
    const char *mem_unit = mem_max >= 0x1p30 ? "GiB" : "MiB";
    double *rss = column(d, F_host_rss, mem_scale), *ares = column(d, F_arena_reserved, mem_scale);
    double *ause = column(d, F_arena_in_use, mem_scale), *apeak = column(d, F_arena_peak, mem_scale);
    double step_med = median_of(d, F_step_s, 0);
    double t_scale = isfinite(step_med) && step_med >= 2 ? 1 : 1e3;
    const char *t_unit = t_scale == 1 ? "s" : "ms";
    double *td = column(d, F_data_s, t_scale), *tfb = column(d, F_fwd_bwd_s, t_scale);
    double *to = column(d, F_optim_s, t_scale), *tc = column(d, F_ckpt_s, t_scale);
    double *tother = column(d, F_step_s, t_scale);
    double *mk_x = malloc((d->n_spikes ? d->n_spikes : 1) * sizeof *mk_x);
    double *mk_loss = malloc((d->n_spikes ? d->n_spikes : 1) * sizeof *mk_loss);
    double *mk_gn = malloc((d->n_spikes ? d->n_spikes : 1) * sizeof *mk_gn);
    double *eval_y = ev->n_sets ? malloc(ev->n_sets * (n ? n : 1) * sizeof *eval_y) : NULL;
    wf_status s = WF_OK;
    if (ev->n_sets && !eval_y) {
        s = wf_error(WF_ERR_NOMEM, "out of memory drawing the report");
        goto done;
    }
    if (!x || !loss || !val || !lr || !gn || !tps || !mfu || !tfl || !bseq || !rss || !ares || !ause || !apeak || !td || !tfb ||
        !to || !tc || !tother || !mk_x || !mk_loss || !mk_gn) {
        s = wf_error(WF_ERR_NOMEM, "out of memory drawing the report");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        double rest = tother[i];
        const double *parts[] = {td, tfb, to, tc};
        for (int k = 0; k < 4; k++)
            if (isfinite(parts[k][i])) rest -= parts[k][i];
        tother[i] = isfinite(rest) && rest > 0 ? rest : 0;
    }
    for (size_t i = 0; i < d->n_spikes; i++) {
        mk_x[i] = d->spikes[i * ROW + F_step];
        mk_loss[i] = d->spikes[i * ROW + F_loss];
        mk_gn[i] = d->spikes[i * ROW + F_grad_norm];
    }
    /* A gradient norm spanning decades reads better on a log axis. */
    double gmin = INFINITY, gmax = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(gn[i]) && gn[i] > 0) {
            if (gn[i] < gmin) gmin = gn[i];
            if (gn[i] > gmax) gmax = gn[i];
        }
    int glog = gmax > 0 && gmax / gmin > 1e3;

    char peak_note[600] = "MFU = model FLOPs (docs/train.md) / step time / peak.";
    const char *pdesc = d->run ? jstr(d->run, "mfu", "peak_description") : NULL;
    if (pdesc) snprintf(peak_note, sizeof peak_note, "MFU against the %s.", pdesc);
    double tf_med = median_of(d, F_tflops, n > 1 ? 1 : 0);
    if (isfinite(tf_med)) {
        size_t l = strlen(peak_note);
        snprintf(peak_note + l, sizeof peak_note - l, " Median achieved: %.3g TFLOP/s.", tf_med);
    }

    PUT(b, "<section id=\"plots\"><h2>Training</h2><div class=\"grid\">\n");
    plot p_loss = {"loss", "Loss", "nats/token", x, n, {{"train", "#1f77b4", loss, 0}, {"validation", "#ff7f0e", val, 1}},
                   2, 0, 0, mk_x, mk_loss, d->n_spikes, d->n_spikes ? "Red circles: loss spikes." : NULL};
    /* The evaluations of `weft eval --watch` beside the training curves, at
     * the steps the run logged. */
    char loss_note[160];
    for (size_t k = 0; eval_y && k < ev->n_sets && p_loss.ns < MAX_SERIES; k++) {
        double *yk = eval_y + k * (n ? n : 1);
        eval_align(&ev->set[k], ev->set[k].loss, x, n, yk);
        p_loss.s[p_loss.ns++] = (series){ev->set[k].label, eval_color[k], yk, 1};
    }
    if (ev->n_sets) {
        snprintf(loss_note, sizeof loss_note, "%sDots \"eval NAME\": weft eval on dataset NAME (the Evaluation "
                 "section below).", d->n_spikes ? "Red circles: loss spikes. " : "");
        p_loss.note = loss_note;
    }
    svg_plot(b, &p_loss);
    if (d->n_src) {
        s = source_plots(b, d, x);
        if (s != WF_OK) goto done;
    }
    plot p_lr = {"lr", "Learning rate", "", x, n, {{"lr", "#2ca02c", lr, 0}}, 1, 0, 0, NULL, NULL, 0, NULL};
    svg_plot(b, &p_lr);
    plot p_gn = {"grad_norm", "Gradient norm (before clipping)", glog ? "log scale" : "", x, n,
                 {{"grad norm", "#9467bd", gn, 0}}, 1, 0, glog, mk_x, mk_gn, d->n_spikes, NULL};
    svg_plot(b, &p_gn);
    plot p_tps = {"tokens_per_s", "Throughput", "tokens/s", x, n, {{"tokens/s", "#17becf", tps, 0}}, 1, 0, 0,
                  NULL, NULL, 0, NULL};
    svg_plot(b, &p_tps);
    if (bmax > bmin) {
        plot p_batch = {"batch", "Global batch", "sequences", x, n, {{"sequences", "#8c564b", bseq, 0}}, 1, 0, 0,
                        NULL, NULL, 0, "The batch-size ramp (data.batch_ramp_*): sequences per step over all ranks."};
        svg_plot(b, &p_batch);
    }
    plot p_mfu = {"mfu", "Model FLOPs utilisation", "%", x, n, {{"MFU", "#e377c2", mfu, 0}}, 1, 0, 0,
                  NULL, NULL, 0, peak_note};
    svg_plot(b, &p_mfu);
    plot p_mem = {"memory", "Memory", mem_unit, x, n,
                  {{"host RSS", "#d62728", rss, 0}, {"arena reserved", "#7f7f7f", ares, 0},
                   {"arena peak", "#bcbd22", apeak, 0}, {"arena in use", "#1f77b4", ause, 0}},
                  4, 0, 0, NULL, NULL, 0, NULL};
    svg_plot(b, &p_mem);
    plot p_time = {"step_time", "Step time split", t_unit, x, n,
                   {{"data", "#ff7f0e", td, 0}, {"fwd+bwd", "#1f77b4", tfb, 0}, {"optimizer", "#2ca02c", to, 0},
                    {"checkpoint", "#d62728", tc, 0}, {"other", "#c7c7c7", tother, 0}},
                   5, 1, 0, NULL, NULL, 0, "Stacked: waiting for data, forward+backward, optimizer, blocked on checkpoints, the rest."};
    svg_plot(b, &p_time);
    PUT(b, "</div></section>\n");
    s = compare_section(b, cmp, n_cmp);
    if (s != WF_OK) goto done;
    s = eval_section(b, ev);
    if (s != WF_OK) goto done;
    s = tasks_section(b, dir);
    if (s != WF_OK) goto done;
    s = ranks_section(b, rd);
    if (s != WF_OK) goto done;
    spikes_table(b, d);
    run_section(b, d);
    PUT(b, "</body></html>\n");
done:
    free(x), free(loss), free(val), free(lr), free(gn), free(tps), free(mfu), free(tfl), free(bseq);
    free(rss), free(ares), free(ause), free(apeak), free(td), free(tfb), free(to), free(tc), free(tother);
    free(mk_x), free(mk_loss), free(mk_gn), free(eval_y);
    return s;
}

wf_status wf_report_write(const char *dir, const char *out_path) {
    return wf_report_write_compare(dir, NULL, 0, out_path);
}

wf_status wf_report_write_compare(const char *dir, const char *const *others, int n_others, const char *out_path) {
    if (n_others < 0 || n_others > MAX_SERIES - 1)
        return wf_error(WF_ERR_INVALID, "report: %d runs to compare with: at most %d", n_others, MAX_SERIES - 1);
    run_data d;
    memset(&d, 0, sizeof d);
    ranks_data rd;
    memset(&rd, 0, sizeof rd);
    char *path = malloc(WF_PATH_MAX);
    if (!path) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = wf_rundir_path(path, WF_PATH_MAX, dir, WF_RUN_METRICS);
    if (s == WF_OK) s = read_metrics(&d, path);
    if (s == WF_OK && (s = wf_rundir_path(path, WF_PATH_MAX, dir, WF_RUN_RECORD)) == WF_OK) {
        if (wf_path_exists(path)) {
            json_error_t err;
            d.run = json_load_file(path, 0, &err);
            if (!d.run) WF_WARN("%s:%d: %s; the report goes on without it", path, err.line, err.text);
        }
    }
    free(path);
    if (s == WF_OK) s = read_ranks(&rd, dir, &d);
    eval_data ev;
    memset(&ev, 0, sizeof ev);
    if (s == WF_OK) {
        char *epath = malloc(WF_PATH_MAX);
        if (!epath) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else s = wf_rundir_path(epath, WF_PATH_MAX, dir, WF_RUN_EVAL_JSONL);
        if (s == WF_OK) s = read_eval(&ev, epath);
        free(epath);
    }
    /* the other runs: their metrics only */
    compare_run cmp[MAX_SERIES];
    memset(cmp, 0, sizeof cmp);
    int n_cmp = 0;
    if (s == WF_OK && n_others) {
        cmp[n_cmp++] = (compare_run){.dir = dir, .d = d};
        char *cpath = malloc(WF_PATH_MAX);
        if (!cpath) s = wf_error(WF_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n_others && s == WF_OK; i++) {
            cmp[n_cmp].dir = others[i];
            s = wf_rundir_path(cpath, WF_PATH_MAX, others[i], WF_RUN_METRICS);
            if (s == WF_OK) s = read_metrics(&cmp[n_cmp].d, cpath);
            n_cmp++;
        }
        free(cpath);
    }
    wf_buf b = {0};
    if (s == WF_OK) s = render(&b, dir, &d, &rd, &ev, cmp, n_cmp);
    if (s == WF_OK && b.failed) s = wf_error(WF_ERR_NOMEM, "out of memory writing the report");
    if (s == WF_OK) s = wf_file_write_atomic(out_path, b.data, b.len);
    wf_buf_free(&b);
    eval_data_free(&ev);
    ranks_free(&rd);
    for (int i = 1; i < n_cmp; i++) run_data_free(&cmp[i].d); /* cmp[0].d is d */
    run_data_free(&d);
    return s;
}
