/* The model's parameters: the named tensor table over one contiguous
 * buffer (Hugging Face Llama names and order), the gradient buffer with the
 * same layout, and initialisation from a seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "weft/fileio.h"
#include "weft/rng.h"

/* Appends a tensor at the current end of the layout, named
 * "model.layers.<layer>.<name>" for layer >= 0, else "<name>": this
 * model's slice (s0, s1) of a global tensor split along `split` (-1: none,
 * 0: rows, 1: columns) into m->tp equal parts, of which it holds part
 * m->tp_rank. With m->params still NULL (the counting pass) it only sizes
 * the table and the buffer. */
static float *add_tensor(wf_model *m, size_t *cursor, int ndim, int64_t s0, int64_t s1, int split,
                         const char *name, int layer) {
    size_t numel = (size_t)s0 * (size_t)(ndim == 2 ? s1 : 1);
    if (m->tensors) {
        wf_tensor_info *t = &m->tensors[m->n_tensors];
        if (layer >= 0)
            snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, name);
        else
            snprintf(t->name, sizeof t->name, "%s", name);
        t->offset = *cursor;
        t->numel = numel;
        t->ndim = ndim;
        t->shape[0] = s0;
        t->shape[1] = ndim == 2 ? s1 : 0;
        t->split_dim = m->tp > 1 ? split : -1;
        t->global_shape[0] = t->shape[0], t->global_shape[1] = t->shape[1];
        t->split_offset = 0;
        if (t->split_dim >= 0) {
            t->global_shape[split] *= m->tp;
            t->split_offset = (int64_t)m->tp_rank * t->shape[split];
        }
    }
    m->n_tensors++;
    float *p = m->params ? m->params + *cursor : NULL;
    *cursor += numel;
    return p;
}

/* Lays out every tensor; called twice (count, then fill). Column-parallel
 * layers (q/k/v, gate/up) and the vocabulary-parallel ones are split by
 * rows, the row-parallel ones (o_proj, down_proj) by columns. */
static void layout(wf_model *m) {
    size_t cur = 0;
    m->n_tensors = 0;
    int C = m->C, H = m->H, V = m->VL, Q = m->NH * m->HD, KV = m->NKV * m->HD;
    m->wte = add_tensor(m, &cur, 2, V, C, 0, "model.embed_tokens.weight", -1);
    for (int l = 0; l < m->L; l++) {
        model_layer_params_ *lp = m->lp ? &m->lp[l] : &(model_layer_params_){0};
        lp->ln1 = add_tensor(m, &cur, 1, C, 0, -1, "input_layernorm.weight", l);
        lp->wqkv = add_tensor(m, &cur, 2, Q, C, 0, "self_attn.q_proj.weight", l);
        add_tensor(m, &cur, 2, KV, C, 0, "self_attn.k_proj.weight", l);
        add_tensor(m, &cur, 2, KV, C, 0, "self_attn.v_proj.weight", l);
        lp->wo = add_tensor(m, &cur, 2, C, Q, 1, "self_attn.o_proj.weight", l);
        lp->ln2 = add_tensor(m, &cur, 1, C, 0, -1, "post_attention_layernorm.weight", l);
        lp->w13 = add_tensor(m, &cur, 2, H, C, 0, "mlp.gate_proj.weight", l);
        add_tensor(m, &cur, 2, H, C, 0, "mlp.up_proj.weight", l);
        lp->w2 = add_tensor(m, &cur, 2, C, H, 1, "mlp.down_proj.weight", l);
    }
    m->norm_f = add_tensor(m, &cur, 1, C, 0, -1, "model.norm.weight", -1);
    m->lm_head = m->cfg.tied_embeddings ? m->wte : add_tensor(m, &cur, 2, V, C, 0, "lm_head.weight", -1);
    m->n_params = cur;
}

void wf__model_set_dims(wf_model *m) {
    const wf_model_config *c = &m->cfg;
    int tp = m->tp > 1 ? m->tp : 1;
    m->C = c->dim, m->L = c->n_layers, m->NH = c->n_heads / tp, m->NKV = c->n_kv_heads / tp;
    m->HD = c->dim / c->n_heads, m->H = wf_model_config_hidden_dim(c) / tp;
    m->V = c->vocab_size, m->VL = c->vocab_size / tp, m->v0 = m->VL * (m->tp > 1 ? m->tp_rank : 0);
    m->QKV = (m->NH + 2 * m->NKV) * m->HD, m->CA = m->NH * m->HD;
}

/* The units over the layout: [0, wte) the embedding, each block's 9
 * tensors, then the final norm and an untied lm_head; each bound to the
 * model's own buffers (NULL where it has none). */
static wf_status make_units(wf_model *m) {
    m->n_units = m->L + 2;
    m->units = calloc((size_t)m->n_units, sizeof *m->units);
    if (!m->units) return wf_error(WF_ERR_NOMEM, "model: cannot allocate the unit table");
    for (int u = 0; u < m->n_units; u++) {
        int first = u == 0 ? 0 : 1 + 9 * (u - 1); /* the unit's first tensor */
        size_t off = m->tensors[first].offset;
        size_t end = u + 1 < m->n_units ? m->tensors[1 + 9 * u].offset : m->n_params;
        m->units[u].off = off;
        m->units[u].n = end - off;
        wf_model_bind_unit(m, u, m->params ? m->params + off : NULL, m->grads ? m->grads + off : NULL);
    }
    return WF_OK;
}

wf_status wf_model_create(wf_model **out, const wf_model_config *cfg, wf_arena *arena) {
    return wf_model_create_ex(out, cfg, arena, 0);
}

wf_status wf_model_create_ex(wf_model **out, const wf_model_config *cfg, wf_arena *arena, int flags) {
    return wf_model_create_tp(out, cfg, arena, flags, NULL);
}

wf_status wf_model_tp_check(const wf_model_config *cfg, int tp) {
    WF_TRY(wf_model_config_validate(cfg));
    if (tp < 1)
        return wf_error(WF_ERR_CONFIG, "model: tensor parallel size %d must be >= 1", tp);
    struct {
        const char *key, *why;
        int v;
    } need[] = {
        {"model.n_heads", "each rank computes whole query heads", cfg->n_heads},
        {"model.n_kv_heads", "each rank holds whole key/value groups", cfg->n_kv_heads},
        {"model.vocab_size", "the embedding and lm_head are split by vocabulary rows", cfg->vocab_size},
        {"the feed-forward width (model.ffn_hidden_dim)", "gate/up are split by rows, down by columns",
         wf_model_config_hidden_dim(cfg)},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].v % tp != 0)
            return wf_error(WF_ERR_CONFIG,
                            "model: %s = %d is not divisible by the tensor parallel size %d (%s): "
                            "%d %% %d = %d",
                            need[i].key, need[i].v, tp, need[i].why, need[i].v, tp, need[i].v % tp);
    return WF_OK;
}

wf_status wf_model_create_tp(wf_model **out, const wf_model_config *cfg, wf_arena *arena, int flags,
                             const wf_model_tp *tp) {
    *out = NULL;
    WF_TRY(wf_model_config_validate(cfg));
    int tp_size = tp ? tp->size : 1;
    WF_TRY(wf_model_tp_check(cfg, tp_size));
    if (tp_size > 1 && (tp->rank < 0 || tp->rank >= tp_size || !tp->ops.all_reduce ||
                        (tp->sequence_parallel && (!tp->ops.all_gather || !tp->ops.reduce_scatter))))
        return wf_error(WF_ERR_INVALID,
                        "model: tensor parallel rank %d of %d: the rank must be in [0, %d) and the "
                        "collectives given (all_reduce; all_gather and reduce_scatter for sequence "
                        "parallelism)",
                        tp->rank, tp_size, tp_size);
    wf_model *m = calloc(1, sizeof *m);
    if (!m) return wf_error(WF_ERR_NOMEM, "model: cannot allocate the model header");
    m->cfg = *cfg;
    m->tp = tp_size;
    if (tp_size > 1) m->tp_rank = tp->rank, m->tp_ops = tp->ops, m->sp = tp->sequence_parallel != 0;
    m->arena = arena;
    m->be = wf_backend_cpu();
    wf__model_set_dims(m);

    layout(m); /* counting pass */
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    m->lp = calloc((size_t)m->L, sizeof *m->lp);
    m->lg = calloc((size_t)m->L, sizeof *m->lg);
    if (!m->tensors || !m->lp || !m->lg) {
        wf_model_destroy(m);
        return wf_error(WF_ERR_NOMEM, "model: cannot allocate the tensor table");
    }
    size_t bytes = m->n_params * sizeof(float);
    if (!(flags & WF_MODEL_NO_PARAMS)) m->params = wf_arena_alloc(arena, bytes, 64);
    if (!(flags & WF_MODEL_NO_GRADS)) m->grads = wf_arena_alloc(arena, bytes, 64);
    if ((!(flags & WF_MODEL_NO_PARAMS) && !m->params) || (!(flags & WF_MODEL_NO_GRADS) && !m->grads)) {
        wf_model_destroy(m);
        return wf_error_wrap(WF_ERR_NOMEM, "model: parameters and gradients (2 x %zu bytes): ",
                             bytes);
    }
    layout(m); /* filling pass (pointers NULL without a parameter buffer) */
    wf_status s = make_units(m);
    if (s != WF_OK) {
        wf_model_destroy(m);
        return s;
    }
    *out = m;
    return WF_OK;
}

void wf_model_destroy(wf_model *m) {
    if (!m) return;
    free(m->tensors);
    free(m->lp);
    free(m->lg);
    free(m->units);
    free(m->res);
    free(m->la);
    free(m->tp_host);
    free(m);
}

const wf_model_config *wf_model_get_config(const wf_model *m) { return &m->cfg; }
size_t wf_model_num_params(const wf_model *m) { return m->n_params; }
int wf_model_num_tensors(const wf_model *m) { return m->n_tensors; }
const wf_tensor_info *wf_model_tensor(const wf_model *m, int i) {
    return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}
const wf_tensor_info *wf_model_find_tensor(const wf_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}
float *wf_model_params(wf_model *m) { return m->params; }
float *wf_model_grads(wf_model *m) { return m->grads; }

wf_backend *wf_model_backend(const wf_model *m) { return m->be; }
void wf_model_set_backend(wf_model *m, wf_backend *be) { m->be = be; }

wf_status wf_model_sumsq(wf_model *m, int which, double *out) {
    float *x = which == WF_MODEL_GRADS ? m->grads : m->params;
    *out = 0;
    return x ? wf_backend_sumsq(m->be, wf_f32(x), m->n_params, out) : WF_OK;
}

/* Where [offset, offset + count) of tensor `tensor` (-1: the flat buffer)
 * lies in the model's own parameters or gradients. */
static wf_status model_span(wf_model *m, int which, int tensor, size_t offset, size_t count, float **at) {
    float *base = which == WF_MODEL_GRADS ? m->grads : m->params;
    const char *what = which == WF_MODEL_GRADS ? "gradients" : "parameters";
    if (!base)
        return wf_error(WF_ERR_INVALID, "model: no %s buffer of its own (bound unit by unit): nothing to read or write",
                        what);
    if (tensor < -1 || tensor >= m->n_tensors)
        return wf_error(WF_ERR_RANGE, "model: no tensor %d (the model has %d)", tensor, m->n_tensors);
    size_t start = tensor < 0 ? 0 : m->tensors[tensor].offset, numel = tensor < 0 ? m->n_params : m->tensors[tensor].numel;
    if (offset > numel || count > numel - offset)
        return wf_error(WF_ERR_RANGE, "model: %s [%zu, %zu) of %s are outside its %zu values", what, offset,
                        offset + count, tensor < 0 ? "the flat buffer" : m->tensors[tensor].name, numel);
    *at = base + start + offset;
    return WF_OK;
}

wf_status wf_model_read(wf_model *m, int which, int tensor, size_t offset, size_t count, float *dst) {
    float *at = NULL;
    WF_TRY(model_span(m, which, tensor, offset, count, &at));
    return wf_backend_download(m->be, dst, at, count * sizeof *dst);
}

wf_status wf_model_write(wf_model *m, int which, int tensor, size_t offset, size_t count, const float *src) {
    float *at = NULL;
    WF_TRY(model_span(m, which, tensor, offset, count, &at));
    return wf_backend_upload(m->be, at, src, count * sizeof *src);
}

void wf_model_zero_grad(wf_model *m) {
    /* cpu and ref cannot fail a fill; a device backend's error shows at
     * its next op */
    if (m->grads) (void)wf_backend_fill(m->be, m->grads, 0, m->n_params * sizeof *m->grads);
}

int wf_model_num_units(const wf_model *m) { return m->n_units; }

void wf_model_unit_range(const wf_model *m, int unit, size_t *offset, size_t *numel) {
    *offset = m->units[unit].off;
    *numel = m->units[unit].n;
}

void wf_model_set_unit_hook(wf_model *m, wf_model_unit_hook fn, void *ctx) {
    m->unit_hook = fn;
    m->unit_hook_ctx = ctx;
}

/* The parameter pointer of tensor i when its unit's floats are at p. */
static float *at_(const wf_model *m, int unit, float *p, int i) {
    return p ? p + (m->tensors[i].offset - m->units[unit].off) : NULL;
}

/* A block's tensors, from the unit's floats at p (its parameters or its
 * gradients): tensor i of the table is the block's first. */
static void bind_block_(const wf_model *m, int unit, float *p, model_layer_params_ *out) {
    int i = 1 + 9 * (unit - 1);
    out->ln1 = at_(m, unit, p, i);
    out->wqkv = at_(m, unit, p, i + 1);
    out->wo = at_(m, unit, p, i + 4);
    out->ln2 = at_(m, unit, p, i + 5);
    out->w13 = at_(m, unit, p, i + 6);
    out->w2 = at_(m, unit, p, i + 8);
}

void wf_model_bind_unit(wf_model *m, int unit, float *params, float *grads) {
    model_unit_ *u = &m->units[unit];
    u->p = params;
    u->g = grads;
    if (unit == 0) {
        m->wte = params;
        m->d_wte = grads;
        if (m->cfg.tied_embeddings) m->lm_head = params, m->d_lm_head = grads;
    } else if (unit <= m->L) {
        bind_block_(m, unit, params, &m->lp[unit - 1]);
        bind_block_(m, unit, grads, &m->lg[unit - 1]);
    } else {
        int i = 1 + 9 * m->L;
        m->norm_f = at_(m, unit, params, i);
        m->d_norm_f = at_(m, unit, grads, i);
        if (!m->cfg.tied_embeddings) {
            m->lm_head = at_(m, unit, params, i + 1);
            m->d_lm_head = at_(m, unit, grads, i + 1);
        }
    }
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void wf_model_init(wf_model *m, uint64_t seed) {
    for (int u = 0; u < m->n_units; u++) wf_model_init_unit(m, u, seed);
}

/* Values are drawn into a host block of INIT_BLOCK_ floats and uploaded
 * to the unit's memory (the backend's) block by block: element j of a
 * tensor still comes from counter 2j of its stream, so the bits do not
 * depend on the blocking or the threads. */
#define INIT_BLOCK_ 8192

void wf_model_init_unit(wf_model *m, int unit, uint64_t seed) {
    const model_unit_ *un = &m->units[unit];
    float block[INIT_BLOCK_];
    for (int i = 0; i < m->n_tensors; i++) {
        const wf_tensor_info *t = &m->tensors[i];
        if (t->offset < un->off || t->offset >= un->off + un->n) continue;
        float *p = un->p + (t->offset - un->off);
        double std = m->cfg.init_std;
        if (ends_with(t->name, "o_proj.weight") || ends_with(t->name, "down_proj.weight"))
            std /= sqrt(2.0 * m->L);
        uint64_t stream = wf_hash64(t->name, strlen(t->name));
        float fstd = (float)std;
        /* A tensor-parallel slice draws the global tensor's elements:
         * local element j (row j / cols, column j % cols) is global
         * element (row + r0) * gcols + column + c0. */
        uint64_t cols = (uint64_t)(t->ndim == 2 ? t->shape[1] : t->shape[0]);
        uint64_t gcols = (uint64_t)(t->ndim == 2 ? t->global_shape[1] : t->global_shape[0]);
        uint64_t r0 = t->split_dim == 0 ? (uint64_t)t->split_offset : 0;
        uint64_t c0 = t->split_dim == 1 ? (uint64_t)t->split_offset : 0;
        for (size_t j0 = 0; j0 < t->numel; j0 += INIT_BLOCK_) {
            long long n = (long long)(t->numel - j0 < INIT_BLOCK_ ? t->numel - j0 : INIT_BLOCK_);
            if (t->ndim == 1) { /* RMSNorm weights */
                for (long long j = 0; j < n; j++) block[j] = 1.0f;
            } else {
#pragma omp parallel for schedule(static) if (n >= 4096)
                for (long long j = 0; j < n; j++) {
                    uint64_t lj = (uint64_t)j0 + (uint64_t)j;
                    uint64_t gj = (lj / cols + r0) * gcols + lj % cols + c0;
                    wf_rng r = {seed, stream, 2 * gj};
                    block[j] = fstd * wf_rng_normal(&r);
                }
            }
            /* cpu and ref cannot fail an upload (host memory) */
            (void)wf_backend_upload(m->be, p + j0, block, (size_t)n * sizeof *block);
        }
    }
}
