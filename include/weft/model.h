/* weft: the Llama model on the CPU, fp32.
 *
 * Architecture: token embedding; n_layers blocks of
 *   x = x + attention(rmsnorm(x))   causal, RoPE, grouped-query heads
 *   x = x + swiglu_ffn(rmsnorm(x))  w2(silu(w1 x) * w3 x)
 * a final RMSNorm and the output projection (tied to the embedding or not).
 * No biases, no dropout.
 *
 * Memory is planned: wf_model_create takes the parameters and gradients
 * from an arena, wf_model_plan the activations for the largest batch, and
 * nothing is allocated during forward or backward. The logits buffer is
 * reused for the logits' gradient.
 *
 * Parameters live in one contiguous buffer, as named tensors in Hugging
 * Face's Llama naming ("model.layers.0.self_attn.q_proj.weight") and shapes
 * (linear weights are (out_features, in_features)), so that an export to
 * Hugging Face is a copy. Within a layer q_proj, k_proj, v_proj are
 * adjacent (one fused (QKV, C) matrix) and so are gate_proj and up_proj.
 * RoPE pairs element i of a head with element i + head_dim/2, as Hugging
 * Face's Llama does (see include/weft/kernels.h).
 *
 * Tensor and sequence parallelism: wf_model_create_tp.
 *
 * This module does not do: optimizers, mixed precision, KV caches for
 * sampling, or pipeline parallelism.
 */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/arena.h"
#include "weft/backend.h"
#include "weft/status.h"

typedef struct {
    int dim;                /* C: model width */
    int n_layers;
    int n_heads;            /* query heads; head_dim = dim / n_heads, even */
    int n_kv_heads;         /* key/value heads; divides n_heads (== n_heads: no GQA) */
    int vocab_size;
    int ffn_hidden_dim;     /* H; 0 derives it: see wf_model_config_hidden_dim */
    double ffn_multiplier;  /* used when ffn_hidden_dim is 0; 1.0 = none */
    int ffn_multiple_of;    /* used when ffn_hidden_dim is 0 */
    int max_seq_len;        /* longest sequence T the model accepts */
    double norm_eps;        /* RMSNorm epsilon */
    double rope_theta;      /* RoPE base */
    int tied_embeddings;    /* 1: the output projection is the token embedding */
    double init_std;        /* std of the normal init of weight matrices */
} wf_model_config;

/* Fills `cfg` with a named preset:
 *   "tiny"        dim 64, 2 layers, 4 heads, 2 kv heads, vocab 512, seq 64 (tests)
 *   "stories15M"  llama2.c's stories15M: dim 288, 6 layers, 6 heads, vocab
 *                 32000, seq 256, hidden 768, tied (15.2M parameters)
 *   "gpt2-small"  dim 768, 12 layers, 12 heads, vocab 50304 (GPT-2's
 *                 50257 padded to a multiple of 128), seq 1024, hidden
 *                 2048, tied (123.6M parameters, near GPT-2 small)
 *   "gpt2-medium" dim 1024, 24 layers, 16 heads, vocab 50304, seq 1024,
 *                 hidden 2752, tied (355.1M parameters, near GPT-2 medium)
 * Unknown names fail with WF_ERR_CONFIG and the list of presets. */
wf_status wf_model_config_preset(wf_model_config *cfg, const char *name);

/* Checks every size and says which values are wrong and why (dim not
 * divisible by n_heads, n_heads not divisible by n_kv_heads, odd head_dim,
 * non-positive sizes, ...). WF_ERR_CONFIG on failure. */
wf_status wf_model_config_validate(const wf_model_config *cfg);

/* The feed-forward width: ffn_hidden_dim if set, else Llama's rule
 * H = multiple_of * ceil(floor(multiplier * floor(8 * dim / 3)) / multiple_of). */
int wf_model_config_hidden_dim(const wf_model_config *cfg);

/* Parameter count of a valid config. */
size_t wf_model_config_num_params(const wf_model_config *cfg);

/* One named tensor of the parameter (and gradient) buffer. */
#define WF_TENSOR_NAME_MAX 64
typedef struct {
    char name[WF_TENSOR_NAME_MAX]; /* Hugging Face name */
    size_t offset;                 /* in floats from the start of the buffer */
    size_t numel;
    int ndim;                      /* 1 or 2 */
    int64_t shape[2];              /* this model's (a tensor-parallel rank's slice) */
    /* Tensor parallelism (wf_model_create_tp): which dimension of the
     * global tensor this rank holds a slice of (-1: the whole tensor,
     * replicated; 0: rows; 1: columns), where the slice starts along it,
     * and the global tensor's shape. Without TP: -1, 0 and `shape`. */
    int split_dim;
    int64_t split_offset;
    int64_t global_shape[2];
} wf_tensor_info;

typedef struct wf_model wf_model;

/* Validates `cfg` and creates a model whose parameters and gradients (both
 * zero) come from `arena`, which must outlive the model. Free the model
 * with wf_model_destroy; the arena's memory goes with the arena. */
wf_status wf_model_create(wf_model **out, const wf_model_config *cfg, wf_arena *arena);
void wf_model_destroy(wf_model *m); /* accepts NULL */

/* wf_model_create without the model's own parameter buffer
 * (WF_MODEL_NO_PARAMS), gradient buffer (WF_MODEL_NO_GRADS), or both: the
 * caller binds each unit's floats (wf_model_bind_unit) before the unit's
 * forward or backward needs them (ZeRO-2: no gradient buffer; FSDP:
 * neither). wf_model_params / wf_model_grads are then NULL. */
enum { WF_MODEL_NO_PARAMS = 1, WF_MODEL_NO_GRADS = 2 };
wf_status wf_model_create_ex(wf_model **out, const wf_model_config *cfg, wf_arena *arena, int flags);

/* ---- Tensor parallelism (docs/model.md, "Tensor parallelism (model level)")
 * A model of which this process holds one rank's slice, of `size` ranks
 * that run the same forward and backward on the same batch: q/k/v and
 * gate/up split by rows (column-parallel; q/k/v by whole heads, so that
 * each rank holds whole KV groups), o_proj and down_proj by columns
 * (row-parallel, partial sums all-reduced), the embedding and lm_head by
 * vocabulary rows (vocab-parallel; the cross-entropy never gathers the
 * logits), the RMSNorm weights replicated. The model knows no
 * communicator: the caller passes the collectives over the ranks of its
 * "tp" axis. Every rank calls every model function in the same order. */
typedef enum { WF_MODEL_TP_SUM = 0, WF_MODEL_TP_MAX } wf_model_tp_op;
typedef struct {
    /* buf (n floats, the model's memory) becomes the op over the tp
     * ranks, bitwise the same on every rank; `tag` names the call. */
    wf_status (*all_reduce)(void *ctx, float *buf, size_t n, wf_model_tp_op op, const char *tag);
    void *ctx;
    /* Sequence parallelism only. In place: buf holds size * n floats,
     * this rank's n at rank * n are sent, the others' parts filled in. */
    wf_status (*all_gather)(void *ctx, float *buf, size_t n, const char *tag);
    /* send (size * n floats) summed over the ranks; recv (n, not
     * overlapping send) gets this rank's part, the one at rank * n. */
    wf_status (*reduce_scatter)(void *ctx, const float *send, float *recv, size_t n, const char *tag);
} wf_model_tp_ops;
typedef struct {
    int size; /* ranks; 1: no tensor parallelism */
    int rank; /* this process's, in [0, size) */
    wf_model_tp_ops ops;
    /* Sequence parallelism: the residual stream and the RMSNorms between
     * the tensor-parallel regions split by rows, rank r holding rows
     * [r N/size, (r+1) N/size) of the N = B*T: all-gather before the
     * column-parallel layers, reduce-scatter after the row-parallel ones.
     * Needs all_gather and reduce_scatter, and B*T divisible by size at
     * every forward. */
    int sequence_parallel;
} wf_model_tp;

/* Whether `cfg` splits over `tp` ranks: n_heads, n_kv_heads, vocab_size
 * and the feed-forward width divisible by tp; WF_ERR_CONFIG naming the
 * numbers otherwise (and for tp < 1). Validates cfg first. */
wf_status wf_model_tp_check(const wf_model_config *cfg, int tp);

/* wf_model_create_ex for rank tp->rank of tp->size; tp NULL or size 1 is
 * wf_model_create_ex. Refused (WF_ERR_CONFIG) as wf_model_tp_check, or
 * WF_ERR_INVALID for a bad rank or a missing collective, before anything
 * is allocated. Tensor names are the global ones; wf_tensor_info says
 * which slice each is. wf_model_init gives every rank exactly its slice
 * of the global model's values. wf_model_plan_bytes does not know TP. */
wf_status wf_model_create_tp(wf_model **out, const wf_model_config *cfg, wf_arena *arena, int flags,
                             const wf_model_tp *tp);

const wf_model_config *wf_model_get_config(const wf_model *m);
size_t wf_model_num_params(const wf_model *m);
int wf_model_num_tensors(const wf_model *m);
const wf_tensor_info *wf_model_tensor(const wf_model *m, int i); /* i in [0, num_tensors) */
const wf_tensor_info *wf_model_find_tensor(const wf_model *m, const char *name); /* or NULL */
float *wf_model_params(wf_model *m); /* (num_params), owned by the model */
float *wf_model_grads(wf_model *m);  /* (num_params), same layout */

/* Initialises the parameters from `seed`: RMSNorm weights 1; every other
 * weight normal(0, init_std), except the projections into the residual
 * stream (o_proj, down_proj), whose std is divided by sqrt(2 * n_layers).
 * Each tensor draws from its own Philox stream (the hash of its name),
 * element i from counter 2i, so the result depends only on seed, name and
 * shape: not on thread count or on the other tensors. */
void wf_model_init(wf_model *m, uint64_t seed);

/* Initialises one unit's parameters (where it is bound) as wf_model_init
 * would: the same bits, unit by unit. */
void wf_model_init_unit(wf_model *m, int unit, uint64_t seed);

/* The backend the model computes on (wf_backend_cpu unless
 * wf_model_set_backend chose another); its parameters, gradients and
 * activations are that backend's memory. */
wf_backend *wf_model_backend(const wf_model *m);
/* Chooses the backend; before the model has memory of its own (create it
 * with WF_MODEL_NO_PARAMS | WF_MODEL_NO_GRADS, or before wf_model_plan)
 * when the backend's memory is not host memory. */
void wf_model_set_backend(wf_model *m, wf_backend *be);

/* The sum of squares of the model's own parameters (WF_MODEL_PARAMS) or
 * gradients (WF_MODEL_GRADS), through the backend's sumsq: fixed blocks in
 * a fixed order, the same bits on any thread count. 0 without the buffer. */
enum { WF_MODEL_PARAMS = 0, WF_MODEL_GRADS = 1 };
wf_status wf_model_sumsq(wf_model *m, int which, double *out);

/* Copies `count` floats of the model's own parameters (WF_MODEL_PARAMS) or
 * gradients (WF_MODEL_GRADS) into host memory `dst`, starting at element
 * `offset` of tensor `tensor` (an index of wf_model_tensor), or of the
 * whole flat buffer with tensor -1. The way for code above the model to
 * see its memory, which is the backend's (device memory on a device
 * backend). WF_ERR_RANGE for a span outside the tensor, WF_ERR_INVALID
 * for a model without that buffer (bound unit by unit instead). */
wf_status wf_model_read(wf_model *m, int which, int tensor, size_t offset, size_t count, float *dst);
/* The other way: host `src` into the model's memory. */
wf_status wf_model_write(wf_model *m, int which, int tensor, size_t offset, size_t count, const float *src);

/* Sets every gradient to zero (nothing without a gradient buffer). */
void wf_model_zero_grad(wf_model *m);

/* ---- Units: the sharding units of FSDP (docs/distributed.md) ----------
 * The flat layout is n_layers + 2 contiguous units, in order: unit 0 the
 * token embedding, unit 1 + l block l (its 9 tensors), unit n_layers + 1
 * the final norm and, untied, lm_head (tied, the output projection is
 * unit 0's tensor). A unit's parameters and gradients can be bound
 * anywhere (by default into the model's buffers); the unit hook is called
 * before and after each unit's forward and backward, so that a caller can
 * gather a unit's parameters just in time and reduce its gradients as soon
 * as they are final. Backward calls its BWD events in reverse order
 * (n_layers + 1 first, 0 last); the final unit's backward also writes the
 * tied embedding's gradient (unit 0's, which must then stay bound).
 * With recomputation (wf_model_set_recompute) a block's re-run forward
 * happens inside its backward's BEGIN..END: after BWD_BEGIN, so the
 * block's parameters must be bound from then on, as for the backward. */
int wf_model_num_units(const wf_model *m);
void wf_model_unit_range(const wf_model *m, int unit, size_t *offset, size_t *numel);
/* Unit `unit`'s parameters are at params, its gradients at grads (numel
 * floats each, same layout as the flat buffer's range; either may be
 * NULL: unbound). */
void wf_model_bind_unit(wf_model *m, int unit, float *params, float *grads);
typedef enum {
    WF_UNIT_FWD_BEGIN = 0,
    WF_UNIT_FWD_END,
    WF_UNIT_BWD_BEGIN,
    WF_UNIT_BWD_END
} wf_model_unit_event;
/* An error from the hook ends the forward or backward with it. */
typedef wf_status (*wf_model_unit_hook)(void *ctx, int unit, wf_model_unit_event ev);
void wf_model_set_unit_hook(wf_model *m, wf_model_unit_hook fn, void *ctx);
/* Activation recomputation: what the forward keeps for the backward and
 * what the backward recomputes (docs/model.md, "Activation recomputation",
 * has the memory formulas).
 *   NONE       every block's intermediates are kept (the default).
 *   BLOCK      only each block's input (the residual stream) is kept, plus
 *              one set of intermediates shared by all blocks; the backward
 *              re-runs block l's forward (without its output) from its
 *              input just before block l's backward (the last block's is
 *              still there from the forward and is not re-run).
 *   SELECTIVE  the matmul and attention outputs are kept per block (q/k/v
 *              after RoPE, the attention output and its log-sum-exp, the
 *              residual after attention, gate|up); the element-wise
 *              results (both RMSNorm outputs and their 1/rms, the SwiGLU
 *              product) are shared by all blocks and recomputed in the
 *              backward. RoPE is applied in place to the kept q/k, so it is
 *              not recomputed (keeping q/k before RoPE would cost as much).
 * Recomputation repeats the same kernels on the same inputs with the same
 * thread count, so gradients, losses and logits are bit-identical to NONE. */
typedef enum {
    WF_RECOMPUTE_NONE = 0,
    WF_RECOMPUTE_BLOCK,
    WF_RECOMPUTE_SELECTIVE,
} wf_model_recompute;

/* "none", "block", "selective"; parse returns -1 for any other name. */
const char *wf_model_recompute_name(wf_model_recompute mode);
int wf_model_recompute_parse(const char *name);
/* The recompute modes' names, in wf_model_recompute order, NULL-terminated. */
extern const char *const wf_model_recompute_names[];
/* The presets' names (wf_model_config_preset), NULL-terminated. */
extern const char *const wf_model_presets[];

/* Chooses the recompute mode; call before wf_model_plan (afterwards the
 * memory is laid out: WF_ERR_INVALID, unless `mode` is the planned one). */
wf_status wf_model_set_recompute(wf_model *m, wf_model_recompute mode);
wf_model_recompute wf_model_get_recompute(const wf_model *m);

/* Plans the activations for batches of up to B x T tokens (T <= max_seq_len)
 * from the model's arena, once, for the model's recompute mode and the
 * kernels' current thread count (attention's scratch is per thread). A
 * second call with a larger shape fails. */
wf_status wf_model_plan(wf_model *m, int B, int T);

/* The bytes wf_model_plan(B, T) would take from the arena for a model of
 * `cfg` in `mode` with `n_threads` kernel threads (the arena may add up to
 * 63 bytes of alignment): wf_model_get_memory's activation_bytes, without
 * creating the model. For memory planners. WF_ERR_CONFIG for an invalid
 * cfg, WF_ERR_INVALID for a bad shape or thread count. */
wf_status wf_model_plan_bytes(const wf_model_config *cfg, int B, int T, int n_threads,
                              wf_model_recompute mode, size_t *bytes);

/* The part of wf_model_plan_bytes(cfg, B, T, ...) that is the logits
 * buffer (B, T, vocab), reused for their gradient: the same in every
 * recompute mode and for every thread count. For planners that report the
 * logits apart from the other activations (weft plan). Errors as
 * wf_model_plan_bytes's. */
wf_status wf_model_plan_logits_bytes(const wf_model_config *cfg, int B, int T, size_t *bytes);

/* Forward pass on tokens (B, T), with B and T at most the planned shape.
 * With targets (B, T) it also computes the mean cross-entropy over the
 * targets >= 0 into *loss (0 when all are ignored; loss may be NULL);
 * targets may be NULL for logits only. Token ids outside [0, vocab) and
 * targets >= vocab are errors that say where they are. */
wf_status wf_model_forward(wf_model *m, const int32_t *tokens, const int32_t *targets, int B,
                           int T, float *loss);

/* The logits (B, T, vocab) of the last forward; after wf_model_backward the
 * same buffer holds their gradient. With tensor parallelism, this rank's
 * columns only: (B, T, vocab / tp), vocabulary ids from rank * vocab / tp. */
const float *wf_model_logits(const wf_model *m);
/* Copies floats [offset, offset + count) of those logits (the layout
 * above) into host memory `dst` through the model's backend: the way to
 * read them on a device backend, where the pointer is device memory.
 * WF_ERR_RANGE outside the planned buffer. */
wf_status wf_model_read_logits(wf_model *m, size_t offset, size_t count, float *dst);

/* Backward of the last forward (which must have had targets): ADDS
 * loss_scale * d(mean loss)/d(parameter) to every gradient, so gradients of
 * several micro-batches accumulate (use loss_scale = 1/n_micro for their
 * mean). Overwrites the logits with their gradient. */
wf_status wf_model_backward(wf_model *m, float loss_scale);

/* Called by wf_model_backward, on the calling thread, as soon as the
 * gradient of a block of parameters is final for that backward: floats
 * [offset, offset + numel) of the gradient buffer, one or several whole
 * tensors (a layer's fused q/k/v projections come as one block; tied
 * embeddings only after the embedding's backward). Every parameter is
 * reported exactly once per backward. For overlapping DDP's gradient
 * all-reduce with the backward. fn NULL: none (the default). */
typedef void (*wf_model_grad_hook)(void *ctx, size_t offset, size_t numel);
void wf_model_set_grad_hook(wf_model *m, wf_model_grad_hook fn, void *ctx);

/* Where a step's time goes: seconds spent in each kind of op, forward and
 * backward, summed since the model was created or the last reset. Kept by
 * every forward and backward (two backend marks per op: the clock on cpu); for
 * benchmarks and profiles. "copy" is the residual copies and the clearing
 * of gradient buffers. With recomputation, the forward ops the backward
 * re-runs are counted in `rec` (trace spans "rec <op>"), not in `bwd`. */
#define WF_MODEL_OPS(X)                   \
    X(WF_OP_EMBEDDING, "embedding")       \
    X(WF_OP_RMSNORM, "rmsnorm")           \
    X(WF_OP_MATMUL, "matmul")             \
    X(WF_OP_ROPE, "rope")                 \
    X(WF_OP_ATTENTION, "attention")       \
    X(WF_OP_SWIGLU, "swiglu")             \
    X(WF_OP_CROSSENTROPY, "crossentropy") \
    X(WF_OP_COPY, "copy")
typedef enum {
#define WF_MODEL_OP_ENUM_(name, str) name,
    WF_MODEL_OPS(WF_MODEL_OP_ENUM_)
#undef WF_MODEL_OP_ENUM_
    WF_OP_COUNT
} wf_model_op;
const char *wf_model_op_name(wf_model_op op);
typedef struct {
    double fwd[WF_OP_COUNT], bwd[WF_OP_COUNT]; /* seconds */
    double rec[WF_OP_COUNT]; /* forward ops re-run by the backward (recompute) */
} wf_model_op_times;
wf_model_op_times wf_model_get_op_times(const wf_model *m);
void wf_model_reset_op_times(wf_model *m);

/* The activations of the last forward that the model holds, in the order
 * the forward makes them, for diagnostics (the trainer's non-finite guard):
 * the embedding output; per block its input norm, q/k/v (q and k after
 * RoPE), the attention output before o_proj, the residual after attention,
 * the second norm, gate|up, the SwiGLU product and the block's output; the
 * final norm, the logits and the per-token losses. Each covers the last
 * forward's B*T rows (with sequence parallelism the embedding output, the
 * residual after attention and the block outputs only this rank's B*T/tp;
 * with tensor parallelism q/k/v, the attention output, gate|up and the
 * SwiGLU product are this rank's heads' and columns'). After wf_model_backward the logits' buffer holds
 * their gradient: it is named "lm_head.grad" then. 0 before any forward.
 * With recomputation only what is held is listed: every block's output,
 * and (SELECTIVE) every block's kept matmul outputs; the shared
 * intermediates belong to one block, whose entries are listed complete:
 * the last block after a forward, block 0 after a backward (which
 * recomputed them last). The values are the same as without recompute. */
typedef struct {
    char name[96];    /* e.g. "model.layers.3.mlp.gate_up_proj" */
    const float *data;
    size_t numel;
} wf_model_activation;
int wf_model_num_activations(const wf_model *m);
void wf_model_get_activation(const wf_model *m, int i, wf_model_activation *out); /* i in [0, num) */
/* Copies floats [offset, offset + count) of activation i into host memory
 * `dst` (the data is the backend's memory: read it so, not through .data).
 * WF_ERR_RANGE outside the activation or for an unknown i. */
wf_status wf_model_read_activation(wf_model *m, int i, size_t offset, size_t count, float *dst);

/* Bytes of the model's planned buffers: parameters, gradients, activations
 * (with the backward's scratch; smaller with recomputation). */
typedef struct {
    size_t param_bytes, grad_bytes, activation_bytes;
} wf_model_memory;
wf_model_memory wf_model_get_memory(const wf_model *m);

#endif
