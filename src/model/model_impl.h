/* Internal layout of wf_model, shared by the files of src/model. */
#ifndef WEFT_MODEL_IMPL_H
#define WEFT_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/model.h"

/* Pointers into the parameter buffer (or, at the same offsets, the gradient
 * buffer) for one block. */
typedef struct {
    float *ln1;  /* (C)       input_layernorm */
    float *wqkv; /* (QKV, C)  q_proj, k_proj, v_proj stacked */
    float *wo;   /* (C, C)    o_proj */
    float *ln2;  /* (C)       post_attention_layernorm */
    float *w13;  /* (2H, C)   gate_proj (w1), up_proj (w3) stacked */
    float *w2;   /* (C, H)    down_proj */
} model_layer_params_;

/* Saved activations of one block, for up to the planned N = B*T rows
 * (with sequence parallelism rstd1, mid, rstd2 only this rank's N/tp).
 * With recomputation some or all of them point into one set shared by all
 * blocks (model.c, plan_layout). */
typedef struct {
    float *xn1;   /* (N, C)        rmsnorm(input) */
    float *rstd1; /* (N) */
    float *qkv;   /* (N, QKV)      projections, q and k after RoPE */
    float *att;   /* (N, C)        attention output, before o_proj */
    float *lse;   /* (B, NH, T)    attention log-sum-exp */
    float *mid;   /* (N, C)        input + o_proj(att) */
    float *xn2;   /* (N, C)        rmsnorm(mid) */
    float *rstd2; /* (N) */
    float *h13;   /* (N, 2H)       w1 x | w3 x */
    float *g;     /* (N, H)        silu(w1 x) * w3 x */
} model_layer_acts_;

/* One sharding unit (wf_model_num_units): its range of the flat layout and
 * where its parameters and gradients are bound now (NULL: nowhere). */
typedef struct {
    size_t off, n;
    float *p, *g;
} model_unit_;

struct wf_model {
    wf_model_config cfg;
    /* NH, NKV, H, QKV are this rank's (tensor parallelism: the global
     * ones / tp); V is the global vocabulary, VL this rank's rows of it,
     * from vocabulary id v0; CA = NH * HD the attention output's width. */
    int C, L, NH, NKV, HD, H, V, QKV, VL, v0, CA;
    int tp, tp_rank; /* 1, 0 without tensor parallelism */
    int sp;          /* sequence parallelism (wf_model_tp.sequence_parallel) */
    wf_model_tp_ops tp_ops;
    wf_arena *arena;
    wf_backend *be; /* every op and copy on the model's memory goes through it */

    size_t n_params;
    float *params, *grads;
    wf_tensor_info *tensors;
    int n_tensors;
    float *wte;     /* (V, C) */
    float *norm_f;  /* (C) */
    float *lm_head; /* (V, C); == wte when tied */
    model_layer_params_ *lp; /* (L) */
    /* Their gradients, bound with them (wf_model_bind_unit): each at the
     * same offset in its unit's gradients as the parameter in its unit's
     * parameters, fixed when the model is created (the tensor table). */
    float *d_wte, *d_norm_f, *d_lm_head;
    model_layer_params_ *lg; /* (L) */

    /* The plan (wf_model_plan). */
    wf_model_recompute recompute; /* wf_model_set_recompute */
    int plan_B, plan_T, n_threads;
    size_t act_floats;
    float *rope_cos, *rope_sin; /* (plan_T, HD/2) */
    float *attn_scratch;        /* wf_backend_attention_scratch(be, plan_T, n_threads) */
    float **res;                /* (L+1) of (N, C): residual stream before each block, and after the last */
    model_layer_acts_ *la;      /* (L) */
    float *xf, *rstdf;          /* (N, C), (N): final norm */
    float *logits;              /* (N, V); dlogits after backward */
    float *losses, *ce_lse;     /* (N), (N) */
    int32_t *tokens, *targets;  /* (N) copies of the last forward's inputs */
    float *dres, *dxn, *datt, *dqkv, *dh13, *dg; /* backward scratch, shared by all blocks */
    /* Tensor parallelism only (NULL otherwise): the last forward's token
     * ids and targets as this rank's vocabulary rows (model.c, "Vocabulary
     * parallelism"), two row vectors for the cross-entropy's reductions,
     * and host scratch for them: (N) int32, (N) int32, (2N), 5N floats. */
    int32_t *tp_tokens, *tp_targets;
    float *tp_rows;
    float *tp_host;
    /* Sequence parallelism only: a whole (N, C) for the row-parallel
     * layers' partial sums and the gathered residual gradient, this
     * rank's rows (N/tp, C) of a norm's input gradient, and (C) for a
     * norm weight's gradient before its all-reduce. */
    float *tp_full, *tp_shard, *tp_lnw;

    wf_model_op_times times; /* see wf_model_get_op_times */

    /* The last forward. */
    int B, T, has_targets, logits_are_grads;
    int held_layer;  /* with recompute: the block whose intermediates the shared set holds (-1: none) */
    int recomputing; /* 1 while the backward re-runs forward ops: they count as times.rec */
    size_t n_valid;

    /* Units: the embedding, each block, the final norm (+ untied lm_head). */
    model_unit_ *units;
    int n_units;
    wf_model_unit_hook unit_hook;
    void *unit_hook_ctx;

    /* wf_model_set_grad_hook */
    wf_model_grad_hook grad_hook;
    void *grad_hook_ctx;
};

/* Carves float buffers out of one block (the model's activations, the
 * generator's caches): a first pass with base NULL counts, a second
 * assigns. Every buffer starts on a 64-byte boundary. */
typedef struct {
    float *base;
    size_t used; /* floats counted or assigned so far */
} wf__model_carver;

static inline float *wf__model_carve(wf__model_carver *cv, size_t n) {
    float *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (n + 15) & ~(size_t)15;
    return p;
}

/* Sets the sizes C, L, NH, NKV, HD, H, V, QKV, VL, v0, CA from m->cfg
 * (valid) and m->tp, m->tp_rank (0 counts as 1). */
void wf__model_set_dims(struct wf_model *m);

#endif
