/* Muon over the model's block matrices (include/weft/optim.h has the
 * formulas; docs/optim.md the story): momentum, then the quintic
 * Newton-Schulz iteration of KellerJordan/Muon's muon.py, then a scaled
 * step with decoupled weight decay, one matrix at a time.
 *
 * Everything goes through the model's backend: the products are its
 * matmul op, the elementwise steps its axpby op and the Frobenius norm its
 * sumsq op, so the iteration runs on any device the model does. A tall
 * matrix (rows > cols) is iterated as its transpose without copying it:
 * with X^T in place of X, A = X^T X and X = a X + X B (B is symmetric), so
 * only the products' transpose flags change. The iteration runs in fp32
 * (the reference runs it in bf16 on GPUs; fp32 is closer to the exact
 * polar factor, and the test compares with an fp32 replay).
 *
 * The sharded modes (the trainer's zero1, zero2, fsdp: train_muon.c) use
 * the same steps one by one: the momentum on whatever range of a matrix a
 * rank holds (wf_muon_momentum), the iteration on a whole matrix at the
 * rank that owns it (wf_muon_orthogonalise), the scaled step on a range
 * again (wf_muon_apply); the exchange between them is the trainer's.
 *
 * Not here: the AdamW group (adamw.c, with skip_muon), the collectives,
 * conv or batched 3-D weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/backend.h"
#include "weft/optim.h"

const char *const wf_muon_scale_names[] = {"reference", "match_adamw_rms", NULL};

typedef struct {
    size_t offset;   /* in floats, in the parameter buffer */
    int rows, cols;
    float scale;     /* the scale rule's factor for this shape */
} muon_matrix_;

struct wf_muon {
    wf_muon_config cfg;
    wf_model *model;
    float *momentum; /* laid out as the parameter buffer (the Muon tensors' parts used) */
    int n;           /* Muon tensors */
    muon_matrix_ *mats;
    size_t numel, max_numel;
    float *x, *y;    /* (max_numel) the iterate and the next one */
    float *a, *b;    /* (side^2, side the largest smaller side) X X^T and b A + c A A */
};

wf_muon_config wf_muon_config_default(void) {
    return (wf_muon_config){.momentum = 0.95,
                            .nesterov = 1,
                            .ns_steps = 5,
                            .ns_a = 3.4445,
                            .ns_b = -4.7750,
                            .ns_c = 2.0315,
                            .weight_decay = 0.0,
                            .scale = WF_MUON_SCALE_REFERENCE,
                            .grad_clip = 1.0};
}

int wf_muon_takes(const wf_tensor_info *t) {
    return t->ndim == 2 && strncmp(t->name, "model.layers.", 13) == 0;
}

static wf_status check_config(const wf_muon_config *c) {
    if (!(c->momentum >= 0 && c->momentum < 1))
        return wf_error(WF_ERR_CONFIG, "optim.muon_momentum = %g: must be in [0, 1) (0.95 is usual)", c->momentum);
    if (c->ns_steps < 1 || c->ns_steps > 100)
        return wf_error(WF_ERR_CONFIG, "optim.muon_ns_steps = %d: must be in [1, 100] (5 is usual)", c->ns_steps);
    if (!isfinite(c->ns_a) || !isfinite(c->ns_b) || !isfinite(c->ns_c))
        return wf_error(WF_ERR_CONFIG, "optim.muon_ns_a, _b, _c = %g, %g, %g: must be finite (3.4445, -4.7750, "
                        "2.0315 are the reference's)", c->ns_a, c->ns_b, c->ns_c);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return wf_error(WF_ERR_CONFIG, "optim.muon_weight_decay = %g: must be >= 0 and finite", c->weight_decay);
    if (c->scale != WF_MUON_SCALE_REFERENCE && c->scale != WF_MUON_SCALE_MATCH_ADAMW_RMS)
        return wf_error(WF_ERR_CONFIG, "optim.muon_scale: unknown rule %d; use reference or match_adamw_rms",
                        (int)c->scale);
    if (isnan(c->grad_clip))
        return wf_error(WF_ERR_CONFIG, "optim.grad_clip is nan: give a max norm, or 0 for none");
    return WF_OK;
}

static float scale_of(wf_muon_scale rule, int rows, int cols) {
    if (rule == WF_MUON_SCALE_MATCH_ADAMW_RMS) return (float)(0.2 * sqrt((double)(rows > cols ? rows : cols)));
    double r = (double)rows / (double)cols;
    return (float)sqrt(r > 1 ? r : 1);
}

/* The largest Muon tensor's elements and the largest smaller side. */
static void sizes(const wf_model *m, size_t *max_numel, size_t *max_side) {
    *max_numel = 0, *max_side = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        if (!wf_muon_takes(t)) continue;
        size_t side = (size_t)(t->shape[0] < t->shape[1] ? t->shape[0] : t->shape[1]);
        if (t->numel > *max_numel) *max_numel = t->numel;
        if (side > *max_side) *max_side = side;
    }
}

size_t wf_muon_scratch_floats(const wf_model *m) {
    size_t mn, side;
    sizes(m, &mn, &side);
    return 2 * mn + 2 * side * side;
}

double wf_muon_ns_flops(const wf_model *m, int ns_steps) {
    double f = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        if (!wf_muon_takes(t)) continue;
        double s = (double)(t->shape[0] < t->shape[1] ? t->shape[0] : t->shape[1]);
        double l = (double)(t->shape[0] < t->shape[1] ? t->shape[1] : t->shape[0]);
        /* A = X X^T (2 s s l), A A (2 s^3), B X (2 s s l) */
        f += (4.0 * s * s * l + 2.0 * s * s * s) * ns_steps;
    }
    return f;
}

wf_status wf_muon_create(wf_muon **out, const wf_muon_config *cfg, wf_model *m, float *momentum, wf_arena *arena) {
    *out = NULL;
    WF_TRY(check_config(cfg));
    int nt = wf_model_num_tensors(m);
    wf_muon *o = calloc(1, sizeof *o);
    muon_matrix_ *mats = calloc((size_t)(nt > 0 ? nt : 1), sizeof *mats);
    if (!o || !mats) {
        free(o);
        free(mats);
        return wf_error(WF_ERR_NOMEM, "muon: cannot allocate the optimizer header");
    }
    o->cfg = *cfg;
    o->model = m;
    o->momentum = momentum;
    o->mats = mats;
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        if (!wf_muon_takes(t)) continue;
        int r = (int)t->shape[0], c = (int)t->shape[1];
        mats[o->n++] = (muon_matrix_){t->offset, r, c, scale_of(cfg->scale, r, c)};
        o->numel += t->numel;
    }
    size_t side;
    sizes(m, &o->max_numel, &side);
    size_t xb = (o->max_numel ? o->max_numel : 1) * sizeof(float), ab = (side ? side * side : 1) * sizeof(float);
    o->x = wf_arena_alloc(arena, xb, 64);
    o->y = o->x ? wf_arena_alloc(arena, xb, 64) : NULL;
    o->a = o->y ? wf_arena_alloc(arena, ab, 64) : NULL;
    o->b = o->a ? wf_arena_alloc(arena, ab, 64) : NULL;
    if (!o->b) {
        wf_muon_destroy(o);
        return wf_error_wrap(WF_ERR_NOMEM, "muon: Newton-Schulz scratch (2 x %zu + 2 x %zu bytes): ", xb, ab);
    }
    *out = o;
    return WF_OK;
}

void wf_muon_destroy(wf_muon *o) {
    if (!o) return;
    free(o->mats);
    free(o);
}

size_t wf_muon_numel(const wf_muon *o) { return o->numel; }

/* C = alpha * op(A) op(B) (+ C when acc), all row-major and contiguous. */
static wf_status mm(wf_backend *be, float *c, const float *a, const float *b, int m, int n, int k, int ta, int tb,
                    float alpha, int acc) {
    wf_matmul_desc d = {.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb,
                        .a = wf_f32(a), .b = wf_f32(b), .c = wf_f32(c),
                        .lda = ta ? m : k, .ldb = tb ? k : n, .ldc = n, .alpha = alpha, .accumulate = acc};
    return wf_backend_matmul(be, &d);
}

/* X (rows x cols, in o->x) orthogonalised in place: normalised to
 * Frobenius norm 1 (+1e-7), then ns_steps quintic steps. A wide X (rows <=
 * cols) is X <- a X + (b A + c A A) X with A = X X^T (rows x rows); a tall
 * one is X <- a X + X (b A + c A A) with A = X^T X (cols x cols): the same
 * iteration on X^T, transposed back. */
static wf_status orthogonalise(wf_muon *o, wf_backend *be, int rows, int cols) {
    const wf_muon_config *c = &o->cfg;
    size_t n = (size_t)rows * (size_t)cols;
    double ss = 0;
    WF_TRY(wf_backend_sumsq(be, wf_f32(o->x), n, &ss));
    WF_TRY(wf_backend_axpby(be, wf_f32(o->x), wf_f32(o->x), (float)(1.0 / (sqrt(ss) + 1e-7)), 0.0f, n));
    int tall = rows > cols, s = tall ? cols : rows;
    size_t s2 = (size_t)s * (size_t)s;
    for (int k = 0; k < c->ns_steps; k++) {
        float *x = o->x, *y = o->y;
        if (tall) WF_TRY(mm(be, o->a, x, x, s, s, rows, 1, 0, 1.0f, 0));  /* A = X^T X */
        else WF_TRY(mm(be, o->a, x, x, s, s, cols, 0, 1, 1.0f, 0));       /* A = X X^T */
        WF_TRY(mm(be, o->b, o->a, o->a, s, s, s, 0, 0, (float)c->ns_c, 0)); /* B = c A A */
        WF_TRY(wf_backend_axpby(be, wf_f32(o->b), wf_f32(o->a), (float)c->ns_b, 1.0f, s2)); /* B += b A */
        WF_TRY(wf_backend_axpby(be, wf_f32(y), wf_f32(x), (float)c->ns_a, 0.0f, n));        /* Y = a X */
        if (tall) WF_TRY(mm(be, y, x, o->b, rows, cols, cols, 0, 0, 1.0f, 1)); /* Y += X B */
        else WF_TRY(mm(be, y, o->b, x, rows, cols, rows, 0, 0, 1.0f, 1));      /* Y += B X */
        o->x = y, o->y = x;
    }
    return WF_OK;
}

wf_status wf_muon_check_step(double lr, double grad_norm) {
    if (!isfinite(grad_norm))
        return wf_error(WF_ERR_RANGE, "muon: gradient norm is %g; parameters and optimizer state are unchanged",
                        grad_norm);
    if (!(lr >= 0) || !isfinite(lr))
        return wf_error(WF_ERR_RANGE,
                        "muon: learning rate %g must be >= 0 and finite; parameters and optimizer state are "
                        "unchanged",
                        lr);
    return WF_OK;
}

int wf_muon_num_matrices(const wf_muon *o) { return o->n; }

void wf_muon_matrix(const wf_muon *o, int i, size_t *offset, int *rows, int *cols) {
    *offset = o->mats[i].offset, *rows = o->mats[i].rows, *cols = o->mats[i].cols;
}

/* clip_grad_norm_'s coefficient, as AdamW's (adamw.c) */
static double clip_of(const wf_muon_config *c, double grad_norm) {
    double clip = 1.0;
    if (c->grad_clip > 0) {
        double coef = c->grad_clip / (grad_norm + 1e-6);
        if (coef < 1) clip = coef;
    }
    return clip;
}

wf_status wf_muon_momentum(wf_muon *o, float *buf, const float *g, float *x, size_t n, double grad_norm) {
    const wf_muon_config *c = &o->cfg;
    wf_backend *be = wf_model_backend(o->model);
    const float mu = (float)c->momentum, a1 = (float)((1.0 - c->momentum) * clip_of(c, grad_norm));
    /* wf_muon_step's operations, in its order */
    WF_TRY(wf_backend_axpby(be, wf_f32(buf), wf_f32(g), a1, mu, n));
    if (!c->nesterov) return wf_backend_copy(be, x, buf, n * sizeof(float));
    WF_TRY(wf_backend_axpby(be, wf_f32(x), wf_f32(g), a1, 0.0f, n));
    return wf_backend_axpby(be, wf_f32(x), wf_f32(buf), mu, 1.0f, n);
}

wf_status wf_muon_orthogonalise(wf_muon *o, int i, float *x, double lr, double *sum_sq) {
    const muon_matrix_ *mt = &o->mats[i];
    wf_backend *be = wf_model_backend(o->model);
    size_t bytes = (size_t)mt->rows * (size_t)mt->cols * sizeof(float);
    WF_TRY(wf_backend_copy(be, o->x, x, bytes));
    WF_TRY(orthogonalise(o, be, mt->rows, mt->cols));
    WF_TRY(wf_backend_copy(be, x, o->x, bytes));
    if (sum_sq) {
        double ss = 0;
        float step = (float)(-lr * (double)mt->scale);
        WF_TRY(wf_backend_sumsq(be, wf_f32(x), bytes / sizeof(float), &ss));
        *sum_sq += (double)step * (double)step * ss;
    }
    return WF_OK;
}

wf_status wf_muon_apply(wf_muon *o, int i, float *p, const float *x, size_t n, double lr) {
    const float decay = (float)(1.0 - lr * o->cfg.weight_decay);
    float step = (float)(-lr * (double)o->mats[i].scale);
    return wf_backend_axpby(wf_model_backend(o->model), wf_f32(p), wf_f32(x), step, decay, n);
}

wf_status wf_muon_step(wf_muon *o, double lr, const float *grad, double grad_norm, double *update_rms) {
    if (update_rms) *update_rms = 0;
    WF_TRY(wf_muon_check_step(lr, grad_norm));
    const wf_muon_config *c = &o->cfg;
    wf_backend *be = wf_model_backend(o->model);
    float *params = wf_model_params(o->model);
    double clip = clip_of(c, grad_norm);
    const float mu = (float)c->momentum, a1 = (float)((1.0 - c->momentum) * clip);
    const float decay = (float)(1.0 - lr * c->weight_decay);
    double sum_sq = 0;
    for (int i = 0; i < o->n; i++) {
        const muon_matrix_ *mt = &o->mats[i];
        size_t n = (size_t)mt->rows * (size_t)mt->cols;
        float *buf = o->momentum + mt->offset, *p = params + mt->offset;
        const float *g = grad + mt->offset;
        WF_TRY(wf_backend_axpby(be, wf_f32(buf), wf_f32(g), a1, mu, n)); /* buf = mu buf + (1 - mu) g' */
        if (c->nesterov) {
            WF_TRY(wf_backend_axpby(be, wf_f32(o->x), wf_f32(g), a1, 0.0f, n));  /* X = (1 - mu) g' */
            WF_TRY(wf_backend_axpby(be, wf_f32(o->x), wf_f32(buf), mu, 1.0f, n)); /* X += mu buf */
        } else {
            WF_TRY(wf_backend_copy(be, o->x, buf, n * sizeof(float)));
        }
        WF_TRY(orthogonalise(o, be, mt->rows, mt->cols));
        float step = (float)(-lr * (double)mt->scale);
        WF_TRY(wf_backend_axpby(be, wf_f32(p), wf_f32(o->x), step, decay, n)); /* p = decay p - lr s X */
        if (update_rms) {
            /* the change without the decay: lr s ||X|| */
            double ss = 0;
            WF_TRY(wf_backend_sumsq(be, wf_f32(o->x), n, &ss));
            sum_sq += (double)step * (double)step * ss;
        }
    }
    if (update_rms && o->numel) *update_rms = sqrt(sum_sq / (double)o->numel);
    return WF_OK;
}
