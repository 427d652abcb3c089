/* optim.name = muon in the trainer (train_impl.h): Muon (src/optim/muon.c)
 * for the blocks' 2-D weights, AdamW for the rest, behind a few narrow
 * hooks so that the step and the setup stay one path for every optimizer.
 *
 * The Muon momentum lives in AdamW's first-moment buffer, in the slots of
 * the Muon matrices (AdamW, made with skip_muon, never touches them): one
 * state buffer laid out as the parameters, which checkpoints (under
 * "optim.momentum.<name>", train_ckpt.c), replica repair and rollback
 * already carry.
 *
 * Under DDP every rank holds the whole summed gradient, so every rank runs
 * the same Muon step on every matrix (the same bits everywhere). Not here
 * yet: ZeRO-1 at several ranks, ZeRO-2 and FSDP, whose state is split by
 * flat ranges while Newton-Schulz needs whole matrices (docs/optim.md,
 * "Sharding"): refused with a clear error. */
#include <math.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/log.h"
#include "weft/trace.h"

static int muon_on(const trainer *t) { return t->tc->optim_name && strcmp(t->tc->optim_name, "muon") == 0; }

const char *wf__train_optim_name(const trainer *t) { return muon_on(t) ? "muon" : "adamw"; }

wf_status wf__train_muon_config(trainer *t, wf_adamw_config *ac) {
    const wf_train_config *tc = t->tc;
    t->adamw_lr_ratio = 1.0;
    if (!muon_on(t)) {
        static const char *const keys[] = {"optim.adamw_lr", "optim.muon_momentum", "optim.muon_nesterov",
                                           "optim.muon_ns_steps", "optim.muon_weight_decay", "optim.muon_scale"};
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (wf_opts_given(wf_train_spec(), tc, keys[i]) && t->rank == 0)
                WF_WARN("%s is set but optim.name = adamw: it is Muon's (optim.name = muon), and ignored", keys[i]);
        return WF_OK;
    }
    /* dist.shard other than ddp: refused with the strategy (wf__train_strategy_of), by weft plan too */
    if (tc->adamw_lr > 0) t->adamw_lr_ratio = tc->adamw_lr / tc->lr;
    ac->skip_muon = 1;
    return WF_OK;
}

wf_status wf__train_muon_setup(trainer *t) {
    if (!muon_on(t)) return WF_OK;
    const wf_train_config *tc = t->tc;
    wf_muon_config mc = wf_muon_config_default();
    mc.momentum = tc->muon_momentum;
    mc.nesterov = tc->muon_nesterov;
    mc.ns_steps = (int)tc->muon_ns_steps;
    mc.weight_decay = tc->muon_weight_decay;
    mc.scale = strcmp(tc->muon_scale, "match_adamw_rms") == 0 ? WF_MUON_SCALE_MATCH_ADAMW_RMS
                                                              : WF_MUON_SCALE_REFERENCE;
    mc.grad_clip = tc->grad_clip;
    WF_TRY(wf_muon_create(&t->muon, &mc, t->model, wf_adamw_m(t->opt), t->arena));
    size_t np = wf_model_num_params(t->model), nm = wf_muon_numel(t->muon);
    if (t->rank == 0)
        WF_INFO("optimizer: Muon for %zu of %zu parameters (the blocks' matrices; lr %g, momentum %g%s, %d "
                "Newton-Schulz steps, %s scale, weight decay %g), AdamW for the other %zu (lr %g)",
                nm, np, tc->lr, tc->muon_momentum, tc->muon_nesterov ? " Nesterov" : "", (int)tc->muon_ns_steps,
                tc->muon_scale, tc->muon_weight_decay, np - nm, tc->lr * t->adamw_lr_ratio);
    return WF_OK;
}

wf_status wf__train_muon_step(trainer *t, step_outcome *o, const float *grad) {
    if (!t->muon) return WF_OK;
    wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "muon");
    wf_status s = wf_muon_step(t->muon, o->lr, grad, o->grad_norm, &o->muon_update_rms);
    wf_trace_end(span);
    return s;
}
