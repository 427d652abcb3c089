/* AdamW over the model's one parameter buffer, computed as
 * torch.optim.AdamW (single-tensor path) computes it, in fp32 with the
 * scalars rounded to fp32 where PyTorch rounds them; gradient clipping to a
 * global L2 norm as torch.nn.utils.clip_grad_norm_ does it.
 *
 * The parameter buffer is walked as a few ranges of adjacent tensors that
 * share a weight-decay setting (per layer: the norm, then the attention and
 * MLP matrices). The moments come from the caller's arena at create; the
 * step allocates nothing. The sum of squares and the update are the model's
 * backend's ops (weft/backend.h); results do not depend on the thread count
 * (the gradient norm sums fixed blocks in a fixed order, the update is
 * elementwise).
 *
 * ZeRO-1 (docs/distributed.md): an optimizer made by wf_adamw_create_shard
 * holds the moments of one flat element range [begin, end) of the buffer
 * and updates only that range, from a gradient of the range alone and a
 * global norm the caller computes over all shards. The ranges of adjacent
 * tensors are clipped to the shard, so a shard may cut a tensor anywhere;
 * the update is elementwise, so shards updated with the same norm give the
 * bits of the whole update. The whole-buffer optimizer is the range
 * [0, n) of the same code.
 *
 * Not here: other optimizers, fp16/bf16 state, the collectives of ZeRO-1
 * (the trainer does them; this layer knows no communicator). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/backend.h"
#include "weft/optim.h"

/* Adjacent tensors with the same decay setting, clipped to the
 * optimizer's element range. */
typedef struct {
    size_t offset, numel; /* in floats, in the parameter buffer */
    int decay;
} adamw_range_;

struct wf_adamw {
    wf_adamw_config cfg;
    wf_model *model;
    size_t begin, end; /* the elements of the parameter buffer this optimizer updates */
    size_t n;          /* end - begin */
    float *m, *v;      /* (n) first and second moments of elements begin.., from the arena */
    float *params;     /* NULL: the model's buffer; else the range's own (n) parameters (FSDP) */
    uint64_t t;   /* steps taken */
    int n_ranges;
    adamw_range_ *ranges;
    wf_adamw_span *spans; /* the ranges as the adamw op takes them: offsets from begin */
};

wf_adamw_config wf_adamw_config_default(void) {
    return (wf_adamw_config){.beta1 = 0.9,
                             .beta2 = 0.95,
                             .eps = 1e-8,
                             .weight_decay = 0.1,
                             .decay_embeddings = 0,
                             .grad_clip = 1.0};
}

static wf_status check_config(const wf_adamw_config *c) {
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return wf_error(WF_ERR_CONFIG, "optim.beta1 = %g: must be in [0, 1) (0.9 is usual)",
                        c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return wf_error(WF_ERR_CONFIG, "optim.beta2 = %g: must be in [0, 1) (0.95 or 0.999 are usual)",
                        c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps))
        return wf_error(WF_ERR_CONFIG, "optim.eps = %g: must be positive and finite (1e-8 is usual)",
                        c->eps);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return wf_error(WF_ERR_CONFIG, "optim.weight_decay = %g: must be >= 0 and finite",
                        c->weight_decay);
    if (isnan(c->grad_clip))
        return wf_error(WF_ERR_CONFIG, "optim.grad_clip is nan: give a max norm, or 0 for none");
    return WF_OK;
}

int wf_adamw_decays(const wf_adamw_config *cfg, const wf_tensor_info *t) {
    if (t->ndim != 2) return 0;
    int embedding = strcmp(t->name, "model.embed_tokens.weight") == 0 ||
                    strcmp(t->name, "lm_head.weight") == 0;
    return !embedding || cfg->decay_embeddings;
}

wf_status wf_adamw_create_shard(wf_adamw **out, const wf_adamw_config *cfg, wf_model *m, size_t begin,
                                size_t end, wf_arena *arena) {
    *out = NULL;
    WF_TRY(check_config(cfg));
    size_t total = wf_model_num_params(m);
    if (begin > end || end > total)
        return wf_error(WF_ERR_INVALID, "adamw: shard [%zu, %zu) is not a range of the %zu parameters", begin, end,
                        total);
    int nt = wf_model_num_tensors(m);
    wf_adamw *o = calloc(1, sizeof *o);
    adamw_range_ *ranges = calloc((size_t)(nt > 0 ? nt : 1), sizeof *ranges);
    if (!o || !ranges) {
        free(o);
        free(ranges);
        return wf_error(WF_ERR_NOMEM, "adamw: cannot allocate the optimizer header");
    }
    o->cfg = *cfg;
    o->model = m;
    o->begin = begin;
    o->end = end;
    o->n = end - begin;
    o->ranges = ranges;
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        /* The part of the tensor inside [begin, end): a shard can cut it
         * anywhere, each element keeps its tensor's decay. */
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (lo >= hi) continue;
        if (cfg->skip_muon && wf_muon_takes(t)) continue; /* Muon's (muon.c) */
        int decay = wf_adamw_decays(cfg, t);
        adamw_range_ *last = o->n_ranges ? &ranges[o->n_ranges - 1] : NULL;
        if (last && last->decay == decay && last->offset + last->numel == lo)
            last->numel += hi - lo;
        else
            ranges[o->n_ranges++] = (adamw_range_){lo, hi - lo, decay};
    }
    o->spans = calloc((size_t)(o->n_ranges > 0 ? o->n_ranges : 1), sizeof *o->spans);
    if (!o->spans) {
        wf_adamw_destroy(o);
        return wf_error(WF_ERR_NOMEM, "adamw: cannot allocate the optimizer header");
    }
    for (int i = 0; i < o->n_ranges; i++)
        o->spans[i] = (wf_adamw_span){ranges[i].offset - begin, ranges[i].numel, ranges[i].decay};
    size_t bytes = o->n * sizeof(float);
    o->m = wf_arena_alloc(arena, bytes ? bytes : 1, 64);
    o->v = o->m ? wf_arena_alloc(arena, bytes ? bytes : 1, 64) : NULL;
    if (!o->m || !o->v) {
        wf_adamw_destroy(o);
        return wf_error_wrap(WF_ERR_NOMEM, "adamw: moments (2 x %zu bytes): ", bytes);
    }
    *out = o;
    return WF_OK;
}

wf_status wf_adamw_create(wf_adamw **out, const wf_adamw_config *cfg, wf_model *m, wf_arena *arena) {
    return wf_adamw_create_shard(out, cfg, m, 0, wf_model_num_params(m), arena);
}

void wf_adamw_destroy(wf_adamw *o) {
    if (!o) return;
    free(o->ranges);
    free(o->spans);
    free(o);
}

double wf_grad_norm(wf_model *m) {
    double ss = NAN; /* a failed sum refuses the step as a non-finite norm would */
    if (wf_model_sumsq(m, WF_MODEL_GRADS, &ss) != WF_OK) return NAN;
    return sqrt(ss);
}

/* Names the first tensor with a non-finite gradient in the optimizer's
 * range (`g` holds the range, in the backend's memory; the error path
 * only): the backend's first_nonfinite op per tensor, and the value
 * downloaded. */
static wf_status refuse_nonfinite(wf_adamw *o, const float *g, double norm) {
    wf_backend *be = wf_model_backend(o->model);
    for (int i = 0; i < wf_model_num_tensors(o->model); i++) {
        const wf_tensor_info *t = wf_model_tensor(o->model, i);
        size_t lo = t->offset > o->begin ? t->offset : o->begin;
        size_t hi = t->offset + t->numel < o->end ? t->offset + t->numel : o->end;
        if (lo >= hi) continue;
        size_t at = hi - lo;
        float v = 0;
        WF_TRY(wf_backend_first_nonfinite(be, wf_f32(g + (lo - o->begin)), hi - lo, &at));
        if (at == hi - lo) continue;
        WF_TRY(wf_backend_download(be, &v, g + (lo - o->begin) + at, sizeof v));
        return wf_error(WF_ERR_RANGE,
                        "adamw step %llu: gradient norm is %g: %s has gradient %g at element "
                        "%zu; parameters and optimizer state are unchanged (skip this batch, "
                        "or lower optim.lr)",
                        (unsigned long long)o->t + 1, norm, t->name, (double)v, lo + at - t->offset);
    }
    return wf_error(WF_ERR_RANGE,
                    "adamw step %llu: gradient norm is %g; parameters and optimizer state are "
                    "unchanged (skip this batch, or lower optim.lr)",
                    (unsigned long long)o->t + 1, norm);
}

/* The update is the backend's adamw op (src/kernels/kern_adamw.c on the
 * cpu backend). Every float expression is the one PyTorch's kernels
 * evaluate, in the same order:
 *   p *= decay                          param.mul_(1 - lr * wd)
 *   m = m * b1 + a1 * g                 exp_avg.mul_(b1).add_(g, alpha=1 - b1)
 *   v = v * b2 + a2 * g * g             exp_avg_sq.mul_(b2).addcmul_(g, g, value=1 - b2)
 *   p += step * m / (sqrt(v) / bc2 + eps)   param.addcdiv_(m, denom, value=-lr / bc1)
 * with g the clipped gradient (grad * clip, as clip_grad_norm_ scales it).
 * PyTorch's vector kernels may fuse a multiply-add where this does not:
 * last-bit differences, no more. */

/* The update of the optimizer's range from `g` (its gradient, n floats),
 * clipped with the global norm `norm`. */
static wf_status apply_step(wf_adamw *o, double lr, const float *g, double norm) {
    if (!isfinite(norm)) return refuse_nonfinite(o, g, norm);
    if (!(lr >= 0) || !isfinite(lr))
        return wf_error(WF_ERR_RANGE,
                        "adamw step %llu: learning rate %g must be >= 0 and finite; parameters "
                        "and optimizer state are unchanged",
                        (unsigned long long)o->t + 1, lr);

    const wf_adamw_config *c = &o->cfg;
    /* clip_grad_norm_: coef = max_norm / (norm + 1e-6), used when below 1
     * (multiplying by 1 changes nothing). */
    double clip = 1.0;
    if (c->grad_clip > 0) {
        double coef = c->grad_clip / (norm + 1e-6);
        if (coef < 1) clip = coef;
    }
    uint64_t t = o->t + 1;
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    wf_adamw_coef k = {.decay = (float)(1.0 - lr * c->weight_decay),
                     .clip = (float)clip,
                     .b1 = (float)c->beta1,
                     .a1 = (float)(1.0 - c->beta1),
                     .b2 = (float)c->beta2,
                     .a2 = (float)(1.0 - c->beta2),
                     .bc2_sqrt = (float)sqrt(bc2),
                     .eps = (float)c->eps,
                     .step = (float)(-lr / bc1)};

    /* p + i is element begin + i's parameter: in the model's buffer, or in
     * the range's own array; the spans are offsets from begin. */
    float *p = o->params ? o->params : wf_model_params(o->model) + o->begin;
    WF_TRY(wf_backend_adamw(wf_model_backend(o->model), wf_f32(p), wf_f32(g), wf_f32(o->m), wf_f32(o->v),
                            o->spans, o->n_ranges, o->n, k));
    o->t = t;
    return WF_OK;
}

wf_status wf_adamw_step(wf_adamw *o, double lr, double *grad_norm) {
    if (o->begin != 0 || o->end != wf_model_num_params(o->model))
        return wf_error(WF_ERR_INVALID,
                        "adamw: this optimizer holds the shard [%zu, %zu) of %zu parameters: step it with "
                        "wf_adamw_step_shard and the shard's gradient",
                        o->begin, o->end, wf_model_num_params(o->model));
    double norm = wf_grad_norm(o->model);
    if (grad_norm) *grad_norm = norm;
    return apply_step(o, lr, wf_model_grads(o->model), norm);
}

wf_status wf_adamw_step_shard(wf_adamw *o, double lr, const float *grad, double grad_norm) {
    return apply_step(o, lr, grad, grad_norm);
}

void wf_adamw_set_params(wf_adamw *o, float *params) { o->params = params; }

void wf_adamw_range(const wf_adamw *o, size_t *begin, size_t *end) {
    *begin = o->begin;
    *end = o->end;
}

uint64_t wf_adamw_steps(const wf_adamw *o) { return o->t; }
float *wf_adamw_m(wf_adamw *o) { return o->m; }
float *wf_adamw_v(wf_adamw *o) { return o->v; }
void wf_adamw_set_steps(wf_adamw *o, uint64_t t) { o->t = t; }
