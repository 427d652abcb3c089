/* weft: the optimizer and learning-rate schedules.
 *
 * AdamW with decoupled weight decay (Loshchilov & Hutter), as
 * torch.optim.AdamW computes it:
 *   p -= lr * wd * p                    (only for tensors with decay)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * Weight decay applies to matrices (2-D tensors) only; norms and, unless
 * asked, embeddings are not decayed. Gradients are clipped to a global L2
 * norm before the update.
 *
 * The optimizer state (m, v: two floats per parameter, plus the step) comes
 * from an arena at create; a step allocates nothing.
 *
 * ZeRO-1 (docs/distributed.md): wf_adamw_create_shard makes an optimizer
 * that holds the moments of one flat element range of the parameter buffer
 * (a rank's shard) and updates that range only, from the range's gradient
 * and a global norm the caller computes over all shards (wf_kern_sumsq of each
 * shard, summed over ranks).
 */
#ifndef WEFT_OPTIM_H
#define WEFT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "weft/arena.h"
#include "weft/model.h"
#include "weft/status.h"

typedef struct {
    double beta1, beta2, eps;
    double weight_decay;
    int decay_embeddings;  /* 1: also decay the token embedding (and an untied lm_head) */
    double grad_clip;      /* max global L2 norm; <= 0 disables clipping */
    int skip_muon;         /* 1: leave out the matrices Muon updates (wf_muon_takes): optim.name = muon */
} wf_adamw_config;

typedef struct wf_adamw wf_adamw;

/* The usual pre-training values: beta1 0.9, beta2 0.95, eps 1e-8,
 * weight_decay 0.1, no decay of embeddings, grad_clip 1.0. */
wf_adamw_config wf_adamw_config_default(void);

/* 1 if `t` gets weight decay under `cfg`: a 2-D tensor that is not the
 * token embedding ("model.embed_tokens.weight") or an untied output
 * projection ("lm_head.weight"), or is one of those with decay_embeddings. */
int wf_adamw_decays(const wf_adamw_config *cfg, const wf_tensor_info *t);

/* State for every parameter of `m`, from `arena` (zeroed); `m` and `arena`
 * must outlive the optimizer. Out-of-range values in `cfg` (a beta outside
 * [0, 1), eps <= 0, negative weight_decay) are WF_ERR_CONFIG naming the
 * optim.* key. */
wf_status wf_adamw_create(wf_adamw **out, const wf_adamw_config *cfg, wf_model *m, wf_arena *arena);
void wf_adamw_destroy(wf_adamw *o); /* accepts NULL */

/* Global L2 norm of the model's gradients (computed in double):
 * sqrt(wf_kern_sumsq(grads, num_params)) (weft/kernels.h). */
double wf_grad_norm(wf_model *m);


/* Clips (if configured) and applies one update with learning rate `lr` to
 * the model's parameters from its gradients (an optimizer of the whole
 * buffer; a shard's is WF_ERR_INVALID: use wf_adamw_step_shard). Returns the gradient norm
 * before clipping in *grad_norm (may be NULL). A non-finite gradient norm
 * is WF_ERR_RANGE (naming the first tensor with a non-finite gradient) and
 * leaves parameters and state untouched; so does a negative or non-finite
 * lr. Clipping scales the gradients as they are read: the gradient buffer
 * itself is not modified. The result does not depend on the thread count. */
wf_status wf_adamw_step(wf_adamw *o, double lr, double *grad_norm);

/* ---- ZeRO-1: the optimizer state of one shard ----
 *
 * An optimizer of the flat element range [begin, end) of the parameter
 * buffer of `m` (begin <= end <= num_params; may be empty): its moments are
 * 2 x (end - begin) floats from `arena` (zeroed), and a step updates
 * params[begin, end) only. The range may start and end inside tensors:
 * every element gets its own tensor's weight decay (wf_adamw_decays). The
 * whole buffer, [0, num_params), is wf_adamw_create. */
wf_status wf_adamw_create_shard(wf_adamw **out, const wf_adamw_config *cfg, wf_model *m, size_t begin,
                                size_t end, wf_arena *arena);

/* One update of params[begin, end) from `grad` (end - begin floats: the
 * range's gradient, e.g. this rank's shard of the averaged gradient),
 * clipped as wf_adamw_step clips but with `grad_norm`, the GLOBAL norm the
 * caller computed over every shard. The update is elementwise: shards
 * stepped with the same norm give, together, the bits of one wf_adamw_step
 * (whatever the split). A non-finite grad_norm or lr is WF_ERR_RANGE (naming
 * the first tensor of this range with a non-finite gradient, if any) and
 * changes nothing. */
wf_status wf_adamw_step_shard(wf_adamw *o, double lr, const float *grad, double grad_norm);

/* The range's parameters live at `params` ((end - begin) floats, element
 * i is parameter begin + i) instead of in the model's buffer: FSDP's local
 * shard, for a model created without parameters. NULL: the model's. */
void wf_adamw_set_params(wf_adamw *o, float *params);
/* The element range [*begin, *end) of the parameter buffer it updates. */
void wf_adamw_range(const wf_adamw *o, size_t *begin, size_t *end);

/* Steps taken so far (the t of bias correction). */
uint64_t wf_adamw_steps(const wf_adamw *o);

/* The moments (end - begin floats each: num_params for the whole buffer;
 * element i is parameter begin + i), for checkpoints. */
float *wf_adamw_m(wf_adamw *o);
float *wf_adamw_v(wf_adamw *o);
void wf_adamw_set_steps(wf_adamw *o, uint64_t t);

/* ---- Muon: momentum orthogonalised by a Newton-Schulz iteration ----
 *
 * For every 2-D weight inside the blocks (wf_muon_takes: the attention
 * and MLP projections), as KellerJordan/Muon's muon.py computes it, in
 * fp32 (docs/optim.md has the algorithm):
 *   g' = g * clip                         (the global-norm clip, as AdamW's)
 *   buf = mu * buf + (1 - mu) * g'        (momentum.lerp_(grad, 1 - mu))
 *   u = nesterov ? (1 - mu) * g' + mu * buf : buf
 *   X = u / (||u||_F + 1e-7); ns_steps times, with X wide (rows <= cols;
 *   a tall matrix is iterated as its transpose):
 *     A = X X^T;  B = b A + c A A;  X = a X + B X
 *   p = p * (1 - lr * wd) - lr * scale * X
 * scale: reference max(1, rows / cols)^0.5; match_adamw_rms (Moonlight)
 * 0.2 * sqrt(max(rows, cols)), which gives the update about AdamW's RMS so
 * that AdamW's learning rate carries over. Every product is the backend's
 * matmul op and every elementwise step its axpby op, so the iteration runs
 * wherever the model's backend runs. The embedding, the head and the norms
 * are AdamW's (wf_adamw_config.skip_muon leaves the matrices out of it). */
typedef enum { WF_MUON_SCALE_REFERENCE = 0, WF_MUON_SCALE_MATCH_ADAMW_RMS } wf_muon_scale;

/* The scale rules' names, in wf_muon_scale order, NULL-terminated. */
extern const char *const wf_muon_scale_names[];

typedef struct {
    double momentum;       /* mu, 0.95 */
    int nesterov;          /* 1 */
    int ns_steps;          /* 5 */
    double ns_a, ns_b, ns_c; /* the quintic's coefficients: 3.4445, -4.7750, 2.0315 */
    double weight_decay;   /* decoupled, as AdamW's: 0 (the reference's default) */
    wf_muon_scale scale;
    double grad_clip;      /* max global L2 norm (the same as AdamW's); <= 0: none */
} wf_muon_config;

typedef struct wf_muon wf_muon;

wf_muon_config wf_muon_config_default(void);

/* 1 if Muon updates `t`: a 2-D tensor of a block ("model.layers.*"). */
int wf_muon_takes(const wf_tensor_info *t);

/* Muon for every tensor of `m` that wf_muon_takes, with its momentum in
 * `momentum`: a buffer laid out as the parameter buffer (num_params floats,
 * in the model's backend's memory, or NULL when only the three parts
 * below are used; only the Muon tensors' elements are used, the rest is left alone: the trainer lends AdamW's first-moment
 * buffer, whose Muon part AdamW leaves unused under skip_muon). The
 * iteration's scratch (two matrices of the largest Muon tensor, two square
 * ones of its smaller side) comes from `arena`. Bad values in `cfg` are
 * WF_ERR_CONFIG naming the optim.* key. `m`, `momentum` and `arena` must
 * outlive the optimizer. */
wf_status wf_muon_create(wf_muon **out, const wf_muon_config *cfg, wf_model *m, float *momentum, wf_arena *arena);
void wf_muon_destroy(wf_muon *o); /* accepts NULL */

/* One update of every Muon tensor from `grad` (laid out as the parameter
 * buffer: the model's gradients, or DDP's summed copy), clipped with
 * `grad_norm`, the global norm over all parameters. A non-finite norm or a
 * negative or non-finite lr is WF_ERR_RANGE and changes nothing.
 * *update_rms (may be NULL) gets the RMS of the parameters' change over
 * the Muon tensors. The result does not depend on the thread count. */
wf_status wf_muon_step(wf_muon *o, double lr, const float *grad, double grad_norm, double *update_rms);

/* The same update in three parts, for a caller that splits the matrices
 * over processes (the trainer's sharded modes, docs/optim.md "Sharding").
 * The step's lr and grad_norm checked once (as wf_muon_step does), then:
 *   wf_muon_momentum   on n elements of one matrix, wherever they are held:
 *                      buf (its momentum) and g (its summed gradient) in
 *                      place, x gets the iteration's input u
 *   wf_muon_orthogonalise  matrix i's whole u (rows x cols at x) replaced
 *                      by X; *sum_sq (may be NULL) += the squared norm of
 *                      its change lr * scale * X
 *   wf_muon_apply      n parameters of matrix i at p from X's n values at x
 * With every element passed through each, the bits of wf_muon_step. */
wf_status wf_muon_check_step(double lr, double grad_norm);
wf_status wf_muon_momentum(wf_muon *o, float *buf, const float *g, float *x, size_t n, double grad_norm);
wf_status wf_muon_orthogonalise(wf_muon *o, int i, float *x, double lr, double *sum_sq);
wf_status wf_muon_apply(wf_muon *o, int i, float *p, const float *x, size_t n, double lr);
/* The Muon matrices, in buffer order: matrix i is rows x cols at `offset`
 * of the parameter buffer. */
int wf_muon_num_matrices(const wf_muon *o);
void wf_muon_matrix(const wf_muon *o, int i, size_t *offset, int *rows, int *cols);

/* Elements Muon updates, and the largest tensor's. */
size_t wf_muon_numel(const wf_muon *o);

/* Floats of Newton-Schulz scratch wf_muon_create takes for `m` (for plans),
 * and the floating-point operations of one step's iterations. */
size_t wf_muon_scratch_floats(const wf_model *m);
double wf_muon_ns_flops(const wf_model *m, int ns_steps);

/* Learning-rate schedules, as a pure function of the position in the run:
 * in steps (0-based), or in any other unit counted from 0 (the trainer's
 * optim.schedule_unit = tokens counts tokens trained). */
typedef enum { WF_LR_COSINE = 0, WF_LR_WSD, WF_LR_CONSTANT } wf_lr_kind;

typedef struct {
    wf_lr_kind kind;
    double lr;            /* peak learning rate */
    double min_lr;        /* floor reached at the end of the decay */
    uint64_t warmup;      /* linear warmup steps (or units) from lr/warmup to lr */
    uint64_t total;       /* total steps (or units) of the run */
    double decay_frac;    /* WSD: fraction of `total` spent in the final decay */
} wf_lr_schedule;

/* Parses "cosine", "wsd" or "constant"; -1 otherwise. */
int wf_lr_parse_kind(const char *name);
/* The schedules' names, in wf_lr_kind order, NULL-terminated. */
extern const char *const wf_lr_kind_names[];
const char *wf_lr_kind_name(wf_lr_kind kind);
/* WF_ERR_CONFIG, naming the optim.* key, unless lr > 0, 0 <= min_lr <= lr
 * and (for wsd) decay_frac in [0, 1]. */
wf_status wf_lr_validate(const wf_lr_schedule *s);
/* Learning rate at `step`:
 *   warmup (all kinds): lr * (step + 1) / warmup for step < warmup;
 *   cosine: min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2 with p the
 *           progress from the end of warmup to `total`, clamped to [0, 1]
 *           (p = 1 after warmup when warmup >= total);
 *   wsd:    lr until total - decay_frac * total, then linear to min_lr at total;
 *   constant: lr.
 * Past `total`, cosine and wsd stay at min_lr. Formulas: docs/optim.md.
 * Equal to wf_lr_at_units(s, step, 1), bit for bit. */
double wf_lr_at(const wf_lr_schedule *s, uint64_t step);

/* Learning rate of the step that trains units [done, done + len) when
 * warmup and total count another unit than steps (tokens: `done` is the
 * tokens trained before the step, `len` the step's tokens):
 *   warmup: lr * min(done + len, warmup) / warmup for done < warmup;
 *   cosine and wsd: the formulas above with `done` for `step`.
 * With len 1 it is wf_lr_at(s, done). */
double wf_lr_at_units(const wf_lr_schedule *s, uint64_t done, uint64_t len);

#endif
