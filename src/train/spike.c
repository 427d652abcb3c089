/* Loss-spike detection: a rolling z-score of the loss and of the gradient
 * norm over the last `window` steps that were not spikes. The trainer
 * carries out the action (warn, skip the update, or PaLM's recipe: roll
 * back to the last checkpoint and skip the data window that led to the
 * spike); this file only decides and describes. */
#include "weft/runctl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

wf_status wf_spike_init(wf_spike_detector *d, const wf_spike_config *cfg) {
    memset(d, 0, sizeof *d);
    if (cfg->window < 2 || cfg->window > (1 << 20))
        return wf_error(WF_ERR_CONFIG, "spike.window = %d: must be in [2, 1048576] steps", cfg->window);
    if (!(cfg->z > 0))
        return wf_error(WF_ERR_CONFIG, "spike.z = %g: the threshold must be a positive number of standard deviations",
                        cfg->z);
    if (cfg->warmup != 0 && (cfg->warmup < 2 || cfg->warmup > cfg->window))
        return wf_error(WF_ERR_CONFIG, "spike.warmup = %d: must be 0 (the window) or in [2, spike.window = %d]",
                        cfg->warmup, cfg->window);
    if (cfg->min_rel_std < 0)
        return wf_error(WF_ERR_CONFIG, "spike.min_rel_std = %g: must be >= 0", cfg->min_rel_std);
    d->cfg = *cfg;
    if (d->cfg.warmup == 0) d->cfg.warmup = d->cfg.window;
    if (d->cfg.min_rel_std == 0) d->cfg.min_rel_std = 1e-3;
    d->loss_win = malloc((size_t)cfg->window * sizeof *d->loss_win);
    d->gn_win = malloc((size_t)cfg->window * sizeof *d->gn_win);
    if (!d->loss_win || !d->gn_win) {
        wf_spike_deinit(d);
        return wf_error(WF_ERR_NOMEM, "out of memory for a spike window of %d steps", cfg->window);
    }
    return WF_OK;
}

void wf_spike_deinit(wf_spike_detector *d) {
    free(d->loss_win);
    free(d->gn_win);
    d->loss_win = d->gn_win = NULL;
    d->n = d->head = 0;
}

void wf_spike_reset(wf_spike_detector *d) {
    d->n = d->head = 0;
}

void wf_spike_get_window(const wf_spike_detector *d, double *loss, double *grad_norm) {
    int w = d->cfg.window, first = (d->head - d->n + w) % w;
    for (int i = 0; i < d->n; i++) {
        loss[i] = d->loss_win[(first + i) % w];
        grad_norm[i] = d->gn_win[(first + i) % w];
    }
}

void wf_spike_set_window(wf_spike_detector *d, const double *loss, const double *grad_norm, int n) {
    int w = d->cfg.window, skip = n > w ? n - w : 0;
    d->n = n - skip;
    for (int i = 0; i < d->n; i++) {
        d->loss_win[i] = loss[skip + i];
        d->gn_win[i] = d->cfg.use_grad_norm ? grad_norm[skip + i] : 0;
    }
    d->head = d->n % w;
}

/* Mean and (population) standard deviation of the n values of a ring of
 * w slots whose oldest is at `first`, two passes in double, oldest first:
 * the window is small and this is exact enough, and the order makes the
 * result a function of the values alone (a restored window gives the same
 * bits wherever its ring starts). */
static void window_stats(const double *v, int w, int first, int n, double *mean, double *std) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[(first + i) % w];
    double m = s / n, q = 0;
    for (int i = 0; i < n; i++) {
        double e = v[(first + i) % w] - m;
        q += e * e;
    }
    *mean = m;
    *std = sqrt(q / n);
}

static double zscore(double x, double mean, double std, double min_rel) {
    double floor = min_rel * fabs(mean);
    if (floor < 1e-12) floor = 1e-12;
    return (x - mean) / (std > floor ? std : floor);
}

wf_spike_result wf_spike_check(wf_spike_detector *d, double loss, double grad_norm) {
    wf_spike_result r;
    memset(&r, 0, sizeof r);
    r.loss_z = r.grad_norm_z = NAN;
    r.loss_mean = r.loss_std = r.grad_norm_mean = r.grad_norm_std = NAN;
    r.n = d->n;
    if (!isfinite(loss) || (d->cfg.use_grad_norm && !isfinite(grad_norm))) {
        r.spike = r.nonfinite = 1;
        r.by_loss = !isfinite(loss);
        r.by_grad_norm = !r.by_loss;
        return r;
    }
    if (d->n >= d->cfg.warmup) {
        int w = d->cfg.window, first = (d->head - d->n + w) % w;
        window_stats(d->loss_win, w, first, d->n, &r.loss_mean, &r.loss_std);
        r.loss_z = zscore(loss, r.loss_mean, r.loss_std, d->cfg.min_rel_std);
        r.by_loss = r.loss_z > d->cfg.z;
        if (d->cfg.use_grad_norm) {
            window_stats(d->gn_win, w, first, d->n, &r.grad_norm_mean, &r.grad_norm_std);
            r.grad_norm_z = zscore(grad_norm, r.grad_norm_mean, r.grad_norm_std, d->cfg.min_rel_std);
            r.by_grad_norm = r.grad_norm_z > d->cfg.z;
        }
        r.spike = r.by_loss || r.by_grad_norm;
    }
    if (!r.spike) {
        d->loss_win[d->head] = loss;
        d->gn_win[d->head] = d->cfg.use_grad_norm ? grad_norm : 0;
        d->head = (d->head + 1) % d->cfg.window;
        if (d->n < d->cfg.window) d->n++;
    }
    return r;
}

const char *const wf_spike_action_names[] = {"warn", "skip", "rollback", NULL};

int wf_spike_action_parse(const char *name) {
    for (int i = 0; name && wf_spike_action_names[i]; i++)
        if (strcmp(name, wf_spike_action_names[i]) == 0) return i;
    return -1;
}

const char *wf_spike_action_name(wf_spike_action a) {
    return (unsigned)a < 3 ? wf_spike_action_names[a] : "unknown";
}

void wf_spike_describe(const wf_spike_result *r, int64_t step, int64_t data_pos, double loss,
                       double grad_norm, wf_spike_action action, char *buf, size_t size) {
    static const char *const what[] = {"the step goes on (spike.action = warn)",
                                       "its update is skipped (spike.action = skip)",
                                       ("rolling back to the last checkpoint and skipping this data window "
                                        "(spike.action = rollback)")};
    char where[64] = "";
    if (data_pos >= 0) snprintf(where, sizeof where, " (micro-batch %lld of the data order)", (long long)data_pos);
    const char *act = (unsigned)action < 3 ? what[action] : "no action";
    if (r->nonfinite) {
        snprintf(buf, size, "loss spike at step %lld%s: %s is not finite (loss %g, grad norm %g); %s",
                 (long long)step, where, r->by_loss ? "the loss" : "the gradient norm", loss, grad_norm, act);
        return;
    }
    char gn[160] = "";
    if (!isnan(r->grad_norm_z))
        snprintf(gn, sizeof gn, "; grad norm %.4g, z %.1f against %.4g +- %.2g", grad_norm, r->grad_norm_z,
                 r->grad_norm_mean, r->grad_norm_std);
    snprintf(buf, size, "loss spike at step %lld%s by %s: loss %.4f, z %.1f against %.4f +- %.2g over %d steps%s; %s",
             (long long)step, where,
             r->by_loss && r->by_grad_norm ? "loss and grad norm" : r->by_loss ? "loss" : "grad norm", loss,
             r->loss_z, r->loss_mean, r->loss_std, r->n, gn, act);
}
