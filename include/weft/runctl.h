/* weft: run control decisions of the trainer that look at numbers: the
 * loss-spike detector and the host-memory watchdog. They decide; the
 * trainer carries out what they decide (warn, skip the update, roll back,
 * save and stop). Host memory itself is read by wf_host_mem_read
 * (weft/metrics.h). */
#ifndef WEFT_RUNCTL_H
#define WEFT_RUNCTL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/metrics.h"
#include "weft/status.h"

/* --------------------------------------------------------- memory watchdog */

/* The watchdog's thresholds; 0 turns one off. */
typedef struct {
    double max_used_frac;   /* machine: 1 - MemAvailable/MemTotal above this trips (e.g. 0.95) */
    double max_rss_frac;    /* process: VmRSS / MemTotal above this trips */
    int64_t max_rss_bytes;  /* process: VmRSS above this trips */
} wf_mem_limits;

/* 1 when a threshold is passed, with the reason and advice in msg (the
 * trainer then saves and stops); 0 otherwise. Unknown values never trip. */
int wf_mem_watchdog_check(const wf_mem_limits *lim, const wf_host_mem *mem, char *msg, size_t size);

/* ------------------------------------------------------------ loss spikes
 * A step is a spike when its loss or its gradient norm lies more than
 * `z` standard deviations above the mean of the last `window` steps that
 * were not spikes, or is not finite. Only rises count. Spikes are kept out
 * of the window, so one bad step does not raise the bar for the next. The
 * first `warmup` steps only fill the window (a non-finite value is still a
 * spike). The standard deviation is floored at `min_rel_std` times the
 * mean's magnitude, so a flat series does not make noise a spike. */
typedef enum { WF_SPIKE_WARN, WF_SPIKE_SKIP, WF_SPIKE_ROLLBACK } wf_spike_action;

typedef struct {
    int window;          /* steps in the rolling statistics (>= 2) */
    double z;            /* threshold in standard deviations (> 0) */
    int warmup;          /* steps before any check, >= 2 and <= window; 0: window */
    int use_grad_norm;   /* 1: the gradient norm can also make a spike */
    double min_rel_std;  /* floor of the std relative to |mean|; 0: 1e-3 */
} wf_spike_config;

typedef struct {
    wf_spike_config cfg;
    double *loss_win, *gn_win; /* (window) ring buffers */
    int n, head;               /* values held, next slot */
} wf_spike_detector;

typedef struct {
    int spike;              /* 1: this step is a spike */
    int by_loss, by_grad_norm, nonfinite;
    double loss_z, grad_norm_z;       /* NaN during warmup */
    double loss_mean, loss_std;       /* of the window before this step */
    double grad_norm_mean, grad_norm_std;
    int n;                  /* values the statistics came from */
} wf_spike_result;

wf_status wf_spike_init(wf_spike_detector *d, const wf_spike_config *cfg);
void wf_spike_deinit(wf_spike_detector *d); /* accepts a zeroed detector */
/* Judges one step's loss and gradient norm, then (if it is not a spike)
 * adds them to the window. */
wf_spike_result wf_spike_check(wf_spike_detector *d, double loss, double grad_norm);
/* Forgets the window (a new run starts with it empty). */
void wf_spike_reset(wf_spike_detector *d);
/* The window as a checkpoint keeps it: its d->n values, oldest first, into
 * loss[] and grad_norm[] (room for d->n each; grad_norm gets zeros when
 * the detector ignores the norm). The statistics are summed oldest first,
 * so the list alone (not where the ring starts) fixes every later result. */
void wf_spike_get_window(const wf_spike_detector *d, double *loss, double *grad_norm);
/* Replaces the window by n values, oldest first (a checkpoint's); with n
 * above cfg.window only the newest cfg.window are kept. A detector given
 * another's window then judges every step exactly as that one would. */
void wf_spike_set_window(wf_spike_detector *d, const double *loss, const double *grad_norm, int n);
/* "warn", "skip", "rollback" <-> the enum; parse returns -1 if unknown. */
int wf_spike_action_parse(const char *name);
/* The actions' names, in wf_spike_action order, NULL-terminated. */
extern const char *const wf_spike_action_names[];
const char *wf_spike_action_name(wf_spike_action a);
/* The log line of a spike: step, the batch's place in the data order,
 * values, z-scores, window statistics and the action. */
void wf_spike_describe(const wf_spike_result *r, int64_t step, int64_t data_pos, double loss,
                       double grad_norm, wf_spike_action action, char *buf, size_t size);

#endif
