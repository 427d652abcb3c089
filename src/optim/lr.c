/* Learning-rate schedules: a pure function of the step (or of the tokens
 * trained, or any unit the caller counts), so that a resumed run gets the
 * same rate at the same point with no state to save. Warmup is
 * shared by every kind; cosine and WSD (warmup-stable-decay) then fall to
 * min_lr at `total` and stay there past it. Formulas in docs/optim.md. */
#include <math.h>
#include <string.h>

#include "weft/optim.h"

const char *const wf_lr_kind_names[] = {"cosine", "wsd", "constant", NULL};

int wf_lr_parse_kind(const char *name) {
    for (int i = 0; name && wf_lr_kind_names[i]; i++)
        if (strcmp(name, wf_lr_kind_names[i]) == 0) return i;
    return -1;
}

const char *wf_lr_kind_name(wf_lr_kind kind) {
    switch (kind) {
    case WF_LR_COSINE: return "cosine";
    case WF_LR_WSD: return "wsd";
    case WF_LR_CONSTANT: return "constant";
    }
    return "unknown";
}

wf_status wf_lr_validate(const wf_lr_schedule *s) {
    if (s->kind != WF_LR_COSINE && s->kind != WF_LR_WSD && s->kind != WF_LR_CONSTANT)
        return wf_error(WF_ERR_CONFIG, "optim.schedule: unknown kind %d; use cosine, wsd or constant",
                        (int)s->kind);
    if (!(s->lr > 0) || !isfinite(s->lr))
        return wf_error(WF_ERR_CONFIG, "optim.lr = %g: the learning rate must be positive and finite",
                        s->lr);
    if (!(s->min_lr >= 0) || !(s->min_lr <= s->lr))
        return wf_error(WF_ERR_CONFIG,
                        "optim.min_lr = %g: must be in [0, optim.lr = %g] (the floor of the decay)",
                        s->min_lr, s->lr);
    if (s->kind == WF_LR_WSD && !(s->decay_frac >= 0 && s->decay_frac <= 1))
        return wf_error(WF_ERR_CONFIG,
                        "optim.decay_frac = %g: must be in [0, 1] (the share of the steps spent "
                        "decaying)",
                        s->decay_frac);
    return WF_OK;
}

double wf_lr_at(const wf_lr_schedule *s, uint64_t step) { return wf_lr_at_units(s, step, 1); }

double wf_lr_at_units(const wf_lr_schedule *s, uint64_t done, uint64_t len) {
    /* The step's end, capped at warmup: a step in tokens may cross it, and
     * the rate never passes the peak. In steps (len 1) done + 1 <= warmup
     * here, so this is the same rate as lr * (step + 1) / warmup. */
    if (done < s->warmup) {
        uint64_t end = len > s->warmup - done ? s->warmup : done + len;
        return s->lr * (double)end / (double)s->warmup;
    }
    const uint64_t step = done; /* the position, in the schedule's unit */
    switch (s->kind) {
    case WF_LR_COSINE: {
        /* Progress through the decay; a schedule whose warmup reaches total
         * has no decay span and sits on the floor after warmup. */
        double span = (double)s->total - (double)s->warmup;
        double p = span > 0 ? ((double)step - (double)s->warmup) / span : 1.0;
        if (p > 1) p = 1;
        return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    }
    case WF_LR_WSD: {
        double total = (double)s->total;
        double start = total - s->decay_frac * total; /* first step of the decay */
        double t = (double)step;
        if (t >= total) return s->min_lr;
        if (t <= start) return s->lr;
        return s->lr + (s->min_lr - s->lr) * (t - start) / (total - start);
    }
    case WF_LR_CONSTANT: return s->lr;
    }
    return s->lr;
}
