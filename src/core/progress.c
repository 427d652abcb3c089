/* Progress bar drawing. */
#include "weft/progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "weft/log.h"
#include "weft/thread.h"

void wf_progress_init(wf_progress *p, const char *label, const char *unit, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t_start = wf_time_now();
    p->tty = isatty(STDERR_FILENO) && wf_log_get_level() <= WF_LOG_INFO;
}

static void fmt_amount(char *buf, size_t n, double v, const char *unit) {
    static const char *sfx[] = {"", "K", "M", "G", "T"};
    int i = 0;
    double base = strcmp(unit, "B") == 0 ? 1024.0 : 1000.0;
    while (v >= base && i < 4) {
        v /= base;
        i++;
    }
    int bytes = strcmp(unit, "B") == 0;
    snprintf(buf, n, i ? "%.1f%s%s%s" : "%.0f%s%s%s", v, sfx[i], bytes ? "" : " ", unit);
}

static void progress_draw(wf_progress *p, int final) {
    double now = wf_time_now(), el = now - p->t_start;
    double rate = el > 0 ? (double)p->done / el : 0;
    char done[32], total[32], rt[32];
    fmt_amount(done, sizeof done, (double)p->done, p->unit);
    fmt_amount(total, sizeof total, (double)p->total, p->unit);
    fmt_amount(rt, sizeof rt, rate, p->unit);
    if (p->total) {
        double frac = (double)p->done / (double)p->total;
        if (frac > 1) frac = 1;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        double eta = rate > 0 ? (double)(p->total - (p->done < p->total ? p->done : p->total)) / rate : 0;
        fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s/s %s %02d:%02d%s", p->label, bar, frac * 100,
                done, total, rt, final ? "took" : "eta", (int)(final ? el : eta) / 60,
                (int)(final ? el : eta) % 60, final ? "\n" : "  ");
    } else {
        fprintf(stderr, "\r%s %s %s/s %02d:%02d%s", p->label, done, rt, (int)el / 60, (int)el % 60,
                final ? "\n" : "  ");
    }
    fflush(stderr);
    p->t_last_draw = now;
}

void wf_progress_update(wf_progress *p, uint64_t done) {
    p->done = done;
    if (!p->tty) return;
    if (wf_time_now() - p->t_last_draw >= 0.1) progress_draw(p, 0);
}

void wf_progress_done(wf_progress *p) {
    if (p->tty) {
        progress_draw(p, 1);
        return;
    }
    char done[32];
    fmt_amount(done, sizeof done, (double)p->done, p->unit);
    WF_INFO("%s: %s in %.1f s", p->label, done, wf_time_now() - p->t_start);
}

void wf_progress_clear(wf_progress *p) {
    if (!p->tty) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->t_last_draw = 0;
}
