/* weft: a progress bar for long work. On a terminal it redraws one line on
 * stderr (bar, percent, amount, rate, ETA) at most ten times a second; when
 * stderr is not a terminal it stays silent until wf_progress_done, which
 * logs one summary line. Not thread-safe: update it from one thread. */
#ifndef WEFT_PROGRESS_H
#define WEFT_PROGRESS_H

#include <stdint.h>

typedef struct {
    const char *label;
    const char *unit;   /* "B" formats as bytes (KB, MB, ...), anything else as a count */
    uint64_t total;     /* 0 if unknown */
    uint64_t done;
    double t_start, t_last_draw;
    int tty;
} wf_progress;

void wf_progress_init(wf_progress *p, const char *label, const char *unit, uint64_t total);
void wf_progress_update(wf_progress *p, uint64_t done);
void wf_progress_done(wf_progress *p);
/* Erases the bar from the terminal so that a line can be printed; the next
 * update draws it again below that line. */
void wf_progress_clear(wf_progress *p);

#endif
