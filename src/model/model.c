/* The Llama forward and backward over planned memory.
 *
 * Forward, per block (N = B*T rows, every buffer planned by wf_model_plan):
 *   xn1 = rmsnorm(res[l]);  qkv = xn1 @ wqkv^T;  rope(q, k in qkv)
 *   att = attention(qkv);   mid = res[l] + att @ wo^T
 *   xn2 = rmsnorm(mid);     h13 = xn2 @ w13^T;   g = silu(h13.a) * h13.b
 *   res[l+1] = mid + g @ w2^T
 * then xf = rmsnorm(res[L]), logits = xf @ lm_head^T, cross-entropy.
 * The residual adds ride on sgemm (beta = 1 over a copy of the input).
 * The backward walks the same steps in reverse with one set of gradient
 * buffers shared by all blocks; dres carries the residual stream's
 * gradient, to which each RMSNorm backward adds. With recomputation
 * (wf_model_set_recompute) some or all of a block's intermediates live in
 * one set shared by all blocks, which block_recompute refills from the
 * kept ones just before the block's backward (plan_layout has the memory
 * formulas). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "weft/backend.h"
#include "weft/thread.h"
#include "weft/trace.h"

/* The rows of the residual stream this rank holds for N rows: all of
 * them, or with sequence parallelism its N / tp (rounded up for a plan). */
static size_t own_rows(const wf_model *m, size_t N) { return m->sp ? (N + (size_t)m->tp - 1) / (size_t)m->tp : N; }

/* Which buffers of a block's activations a carve assigns. */
enum { ACTS_ELEMENTWISE = 1, ACTS_MATMUL = 2, ACTS_ALL = 3 };

/* The element-wise ones (xn1, rstd1, xn2, rstd2, g: recomputed by
 * selective) and the matmul and attention outputs (qkv, att, lse, mid,
 * h13: kept by selective). */
static void carve_acts(const wf_model *m, wf__model_carver *cv, model_layer_acts_ *a, int which) {
    size_t B = (size_t)m->plan_B, T = (size_t)m->plan_T, N = B * T;
    size_t C = (size_t)m->C, H = (size_t)m->H, QKV = (size_t)m->QKV, R = own_rows(m, N);
    if (which & ACTS_ELEMENTWISE) {
        a->xn1 = wf__model_carve(cv, N * C);
        a->rstd1 = wf__model_carve(cv, R);
        a->xn2 = wf__model_carve(cv, N * C);
        a->rstd2 = wf__model_carve(cv, R);
        a->g = wf__model_carve(cv, N * H);
    }
    if (which & ACTS_MATMUL) {
        a->qkv = wf__model_carve(cv, N * QKV);
        a->att = wf__model_carve(cv, N * (size_t)m->CA);
        a->lse = wf__model_carve(cv, B * (size_t)m->NH * T);
        a->mid = wf__model_carve(cv, R * C);
        a->h13 = wf__model_carve(cv, N * 2 * H);
    }
}

/* The logits (B, T, V) of the planned shape, reused for their gradient:
 * plan_layout's one carve that wf_model_plan_logits_bytes reports apart. */
static size_t logits_numel(const wf_model *m) { return (size_t)m->plan_B * (size_t)m->plan_T * (size_t)m->VL; }

/* The activation memory, in floats (r(x) = x rounded up to a multiple of
 * 16: every buffer starts on a 64-byte boundary); N = B*T, C, H, QKV,
 * L, V, NH, HD as in model_impl.h, S = wf_kern_attention_scratch(T,
 * threads):
 *   fixed = 2 r(T HD/2) + r(S) + (L+1) r(N C) + r(N C) + 5 r(N) + r(N V)
 *           + 3 r(N C) + r(N QKV) + r(2 N H) + r(N H)
 *     (RoPE tables, attention scratch, the residual stream before each
 *      block and after the last, final norm, its 1/rms, the losses, the
 *      cross-entropy's lse, tokens, targets, logits, the backward's dres,
 *      dxn, datt, dqkv, dh13, dg)
 *   E = 2 r(N C) + 2 r(N) + r(N H)                 element-wise: xn1, xn2, rstd1, rstd2, g
 *   M = r(N QKV) + 2 r(N C) + r(B NH T) + r(2 N H)  matmul outputs: qkv, att, mid, lse, h13
 *   none:      fixed + L (E + M)
 *   block:     fixed + (E + M)     one shared set
 *   selective: fixed + L M + E     M per block, E shared
 * docs/model.md has the same formulas; wf_model_plan_bytes evaluates them. */
static void plan_layout(wf_model *m, wf__model_carver *cv) {
    size_t B = (size_t)m->plan_B, T = (size_t)m->plan_T, N = B * T;
    size_t C = (size_t)m->C, H = (size_t)m->H, QKV = (size_t)m->QKV, R = own_rows(m, N);
    m->rope_cos = wf__model_carve(cv, T * (size_t)(m->HD / 2));
    m->rope_sin = wf__model_carve(cv, T * (size_t)(m->HD / 2));
    m->attn_scratch = wf__model_carve(cv, wf_backend_attention_scratch(m->be, m->plan_T, m->n_threads));
    for (int l = 0; l <= m->L; l++)
        m->res[l] = wf__model_carve(cv, R * C);
    model_layer_acts_ shared = {0};
    if (m->recompute == WF_RECOMPUTE_BLOCK) carve_acts(m, cv, &shared, ACTS_ALL);
    if (m->recompute == WF_RECOMPUTE_SELECTIVE) carve_acts(m, cv, &shared, ACTS_ELEMENTWISE);
    for (int l = 0; l < m->L; l++) {
        m->la[l] = shared;
        if (m->recompute == WF_RECOMPUTE_NONE) carve_acts(m, cv, &m->la[l], ACTS_ALL);
        if (m->recompute == WF_RECOMPUTE_SELECTIVE) carve_acts(m, cv, &m->la[l], ACTS_MATMUL);
    }
    m->xf = wf__model_carve(cv, N * C);
    m->rstdf = wf__model_carve(cv, R);
    m->logits = wf__model_carve(cv, logits_numel(m));
    m->losses = wf__model_carve(cv, N);
    m->ce_lse = wf__model_carve(cv, N);
    m->tokens = (int32_t *)(void *)wf__model_carve(cv, N);
    m->targets = (int32_t *)(void *)wf__model_carve(cv, N);
    m->dres = wf__model_carve(cv, R * C);
    m->dxn = wf__model_carve(cv, N * C);
    m->datt = wf__model_carve(cv, N * (size_t)m->CA);
    m->dqkv = wf__model_carve(cv, N * QKV);
    m->dh13 = wf__model_carve(cv, N * 2 * H);
    m->dg = wf__model_carve(cv, N * H);
    if (m->tp > 1) {
        m->tp_tokens = (int32_t *)(void *)wf__model_carve(cv, N);
        m->tp_targets = (int32_t *)(void *)wf__model_carve(cv, N);
        m->tp_rows = wf__model_carve(cv, 2 * N);
    }
    if (m->sp) {
        m->tp_full = wf__model_carve(cv, N * C);
        m->tp_shard = wf__model_carve(cv, R * C);
        m->tp_lnw = wf__model_carve(cv, C);
    }
}

/* Runs one backend call (a wf_status expression), adds its time between
 * two backend marks to m->times.dir[op]; while a trace captures, the same
 * two marks also make it a compute span named "fwd <op>" or "bwd <op>"
 * (docs/tracing.md); then returns the call's error, if any, from the
 * enclosing function. Never inside OpenMP regions: spans are the calling
 * thread's. */
#define TRACE_NAME_FWD_(name, str) "fwd " str,
#define TRACE_NAME_BWD_(name, str) "bwd " str,
#define TRACE_NAME_REC_(name, str) "rec " str,
static const char *const op_span_fwd_[] = {WF_MODEL_OPS(TRACE_NAME_FWD_)};
static const char *const op_span_bwd_[] = {WF_MODEL_OPS(TRACE_NAME_BWD_)};
static const char *const op_span_rec_[] = {WF_MODEL_OPS(TRACE_NAME_REC_)};
/* Forward ops re-run by the backward count as "rec" (m->recomputing). */
#define TIMES_fwd_ (m->recomputing ? m->times.rec : m->times.fwd)
#define TIMES_bwd_ m->times.bwd
#define SPANS_fwd_ (m->recomputing ? op_span_rec_ : op_span_fwd_)
#define SPANS_bwd_ op_span_bwd_
#define TIMED_(dir, op, ...)                                                         \
    do {                                                                             \
        wf_backend_mark t0_ = wf_backend_mark_now(m->be);                            \
        wf_status s_ = (__VA_ARGS__);                                                \
        wf_backend_mark t1_ = wf_backend_mark_now(m->be);                            \
        TIMES_##dir##_[op] += wf_backend_mark_seconds(m->be, t0_, t1_);              \
        if (atomic_load_explicit(&wf_trace_on_, memory_order_relaxed))               \
            wf_trace_record(WF_TRACE_COMPUTE, SPANS_##dir##_[op], t0_.ns, t1_.ns, -1); \
        WF_TRY(s_);                                                                  \
    } while (0)

/* The linear layer out (N, OC) = inp (N, C) @ weight (OC, C)^T, or += with
 * `accumulate`: one matmul descriptor. */
static wf_status mm_fwd(wf_model *m, float *out, const float *inp, const float *weight, int N, int C, int OC,
                        int accumulate) {
    wf_matmul_desc d = {.m = N, .n = OC, .k = C, .trans_b = 1, .a = wf_f32(inp), .b = wf_f32(weight),
                        .c = wf_f32(out), .lda = C, .ldb = C, .ldc = OC, .alpha = 1.0f, .accumulate = accumulate};
    return wf_backend_matmul(m->be, &d);
}

/* Its backward: dinp (N, C) = dout (N, OC) @ weight (skipped when dinp is
 * NULL), then dweight (OC, C) += dout^T @ inp. */
static wf_status mm_bwd(wf_model *m, float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, int N, int C, int OC) {
    if (dinp) {
        wf_matmul_desc d = {.m = N, .n = C, .k = OC, .a = wf_f32(dout), .b = wf_f32(weight), .c = wf_f32(dinp),
                            .lda = OC, .ldb = C, .ldc = C, .alpha = 1.0f};
        WF_TRY(wf_backend_matmul(m->be, &d));
    }
    wf_matmul_desc w = {.m = OC, .n = C, .k = N, .trans_a = 1, .a = wf_f32(dout), .b = wf_f32(inp),
                        .c = wf_f32(dweight), .lda = OC, .ldb = C, .ldc = C, .alpha = 1.0f, .accumulate = 1};
    return wf_backend_matmul(m->be, &w);
}

/* The unit hook (wf_model_set_unit_hook) around unit u's forward or backward. */
#define UNIT_EVENT_(u, ev) \
    WF_TRY(m->unit_hook ? m->unit_hook(m->unit_hook_ctx, (u), (ev)) : WF_OK)

static wf_status check_seq_len(const wf_model *m, int T) {
    if (T > m->cfg.max_seq_len)
        return wf_error(WF_ERR_CONFIG,
                        "model: sequence length T = %d is longer than model.max_seq_len = %d "
                        "(positions past max_seq_len were never planned or trained); use "
                        "sequences of at most %d tokens or raise model.max_seq_len",
                        T, m->cfg.max_seq_len, m->cfg.max_seq_len);
    return WF_OK;
}

const char *const wf_model_recompute_names[] = {"none", "block", "selective", NULL};

const char *wf_model_recompute_name(wf_model_recompute mode) {
    return mode >= WF_RECOMPUTE_NONE && mode <= WF_RECOMPUTE_SELECTIVE ? wf_model_recompute_names[mode] : "?";
}

int wf_model_recompute_parse(const char *name) {
    for (int i = 0; name && i <= (int)WF_RECOMPUTE_SELECTIVE; i++)
        if (strcmp(name, wf_model_recompute_names[i]) == 0) return i;
    return -1;
}

wf_status wf_model_set_recompute(wf_model *m, wf_model_recompute mode) {
    if (mode < WF_RECOMPUTE_NONE || mode > WF_RECOMPUTE_SELECTIVE)
        return wf_error(WF_ERR_INVALID, "model: unknown recompute mode %d", (int)mode);
    if (m->plan_B && mode != m->recompute)
        return wf_error(WF_ERR_INVALID,
                        "model: cannot switch recompute from %s to %s after wf_model_plan (the "
                        "activations are laid out for it): set it before planning",
                        wf_model_recompute_name(m->recompute), wf_model_recompute_name(mode));
    m->recompute = mode;
    return WF_OK;
}

wf_model_recompute wf_model_get_recompute(const wf_model *m) { return m->recompute; }

wf_status wf_model_plan_bytes(const wf_model_config *cfg, int B, int T, int n_threads,
                              wf_model_recompute mode, size_t *bytes) {
    *bytes = 0;
    WF_TRY(wf_model_config_validate(cfg));
    if (B < 1 || T < 1 || T > cfg->max_seq_len || n_threads < 1 ||
        (size_t)B * (size_t)T > (size_t)INT32_MAX / 2)
        return wf_error(WF_ERR_INVALID,
                        "model: cannot size a plan for B x T = %d x %d (max_seq_len %d) on %d "
                        "threads",
                        B, T, cfg->max_seq_len, n_threads);
    if (mode < WF_RECOMPUTE_NONE || mode > WF_RECOMPUTE_SELECTIVE)
        return wf_error(WF_ERR_INVALID, "model: unknown recompute mode %d", (int)mode);
    wf_model m = {.cfg = *cfg, .recompute = mode, .plan_B = B, .plan_T = T, .n_threads = n_threads,
                  .be = wf_backend_cpu()};
    wf__model_set_dims(&m);
    m.res = calloc((size_t)m.L + 1, sizeof *m.res);
    m.la = calloc((size_t)m.L, sizeof *m.la);
    if (!m.res || !m.la) {
        free(m.res);
        free(m.la);
        return wf_error(WF_ERR_NOMEM, "model: cannot allocate the activation table");
    }
    wf__model_carver cv = {NULL, 0};
    plan_layout(&m, &cv);
    free(m.res);
    free(m.la);
    *bytes = cv.used * sizeof(float);
    return WF_OK;
}

wf_status wf_model_plan_logits_bytes(const wf_model_config *cfg, int B, int T, size_t *bytes) {
    *bytes = 0;
    WF_TRY(wf_model_config_validate(cfg));
    if (B < 1 || T < 1 || T > cfg->max_seq_len || (size_t)B * (size_t)T > (size_t)INT32_MAX / 2)
        return wf_error(WF_ERR_INVALID,
                        "model: cannot size the logits for B x T = %d x %d (max_seq_len %d)", B, T,
                        cfg->max_seq_len);
    wf_model m = {.cfg = *cfg, .plan_B = B, .plan_T = T};
    wf__model_set_dims(&m);
    wf__model_carver cv = {NULL, 0};
    wf__model_carve(&cv, logits_numel(&m));
    *bytes = cv.used * sizeof(float);
    return WF_OK;
}

wf_status wf_model_plan(wf_model *m, int B, int T) {
    if (B < 1 || T < 1)
        return wf_error(WF_ERR_INVALID,
                        "model: cannot plan for batch B = %d x T = %d; both must be >= 1", B, T);
    WF_TRY(check_seq_len(m, T));
    if (m->plan_B) {
        if (B <= m->plan_B && T <= m->plan_T)
            return WF_OK;
        return wf_error(WF_ERR_INVALID,
                        "model: already planned for B x T = %d x %d; cannot grow to %d x %d "
                        "(memory is planned once: plan the largest shape first)",
                        m->plan_B, m->plan_T, B, T);
    }
    if ((size_t)B * (size_t)T > (size_t)INT32_MAX / 2)
        return wf_error(WF_ERR_RANGE, "model: B x T = %d x %d rows is too many", B, T);
    m->plan_B = B, m->plan_T = T, m->n_threads = wf_kern_threads();
    free(m->res); /* from an earlier call that failed */
    free(m->la);
    m->res = calloc((size_t)m->L + 1, sizeof *m->res);
    m->la = calloc((size_t)m->L, sizeof *m->la);
    if (!m->res || !m->la) {
        m->plan_B = 0;
        return wf_error(WF_ERR_NOMEM, "model: cannot allocate the activation table");
    }
    wf__model_carver cv = {NULL, 0};
    plan_layout(m, &cv);
    float *base = wf_arena_alloc(m->arena, cv.used * sizeof(float), 64);
    if (!base) {
        m->plan_B = 0;
        return wf_error_wrap(WF_ERR_NOMEM,
                             "model: activations for B x T = %d x %d (%zu bytes): ", B, T,
                             cv.used * sizeof(float));
    }
    if (m->tp > 1) {
        free(m->tp_host);
        m->tp_host = malloc(5 * (size_t)B * (size_t)T * sizeof(float));
        if (!m->tp_host) {
            m->plan_B = 0;
            return wf_error(WF_ERR_NOMEM, "model: cannot allocate the tensor-parallel row scratch");
        }
    }
    m->act_floats = cv.used;
    cv = (wf__model_carver){base, 0};
    plan_layout(m, &cv);
    if (wf_arena_plan_only(m->arena)) return WF_OK; /* a plan (weft plan): no memory to fill */
    return wf_backend_rope_table(m->be, wf_f32(m->rope_cos), wf_f32(m->rope_sin), T, m->HD, m->cfg.rope_theta);
}

static wf_status check_ids(const int32_t *ids, int B, int T, int V, const char *what,
                           int allow_negative) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t id = ids[(size_t)b * T + t];
            if (id >= V || (id < 0 && !allow_negative))
                return wf_error(
                    WF_ERR_RANGE, "model: %s[%d][%d] = %d is outside the vocabulary [0, %d)%s",
                    what, b, t, id, V, allow_negative ? " (negative targets are ignored)" : "");
        }
    return WF_OK;
}

/* ---- Tensor parallelism (wf_model_create_tp; docs/model.md) ----------
 * Every rank holds whole inputs and outputs of each block (the residual
 * stream, the norms: replicated) and a slice of each linear layer. A
 * column-parallel layer (q/k/v, gate/up) needs nothing forward; its input
 * gradient is a partial sum, all-reduced. A row-parallel layer (o_proj,
 * down_proj) gives partial sums, all-reduced forward; its backward needs
 * nothing. Rank 0 alone starts the row-parallel output from the residual,
 * the others from zero, so that the all-reduce adds the residual once.
 * The collectives are bitwise the same on every rank (wf_model_tp_ops), so
 * the replicated activations and the norms' gradients stay identical. */

static wf_status tp_sum(wf_model *m, float *buf, size_t n, const char *tag) {
    if (m->tp <= 1) return WF_OK;
    return m->tp_ops.all_reduce(m->tp_ops.ctx, buf, n, WF_MODEL_TP_SUM, tag);
}

/* The start of a row-parallel layer's output `out` (n floats): the
 * residual `res` on rank 0 (or without TP), zero elsewhere. */
static wf_status tp_residual_start(wf_model *m, float *out, const float *res, size_t n) {
    if (m->tp > 1 && m->tp_rank != 0) return wf_backend_fill(m->be, out, 0, n * sizeof(float));
    return wf_backend_copy(m->be, out, res, n * sizeof(float));
}

/* Sequence parallelism (m->sp): rank r holds rows [r R, (r+1) R) of the
 * residual stream, R = N / tp, and the norms' 1/rms for them. */
static wf_status sp_gather(wf_model *m, float *buf, size_t n, const char *tag) {
    return m->tp_ops.all_gather(m->tp_ops.ctx, buf, n, tag);
}
static wf_status sp_scatter(wf_model *m, const float *send, float *recv, size_t n, const char *tag) {
    return m->tp_ops.reduce_scatter(m->tp_ops.ctx, send, recv, n, tag);
}

/* A norm before a column-parallel layer: out (N, C) whole on every rank
 * from inp, this rank's rows of the residual stream (all N without SP;
 * with SP R rows, normed into this rank's part of out, then gathered). */
static wf_status norm_fwd(wf_model *m, float *out, float *rstd, const float *inp, const float *w, int N,
                          const char *tag) {
    const int C = m->C, R = m->sp ? N / m->tp : N;
    const size_t off = m->sp ? (size_t)m->tp_rank * (size_t)R * (size_t)C : 0;
    TIMED_(fwd, WF_OP_RMSNORM,
           wf_backend_rmsnorm_fwd(m->be, wf_f32(out + off), wf_f32(rstd), wf_f32(inp), wf_f32(w), R, C,
                                  (float)m->cfg.norm_eps));
    return m->sp ? sp_gather(m, out, (size_t)R * C, tag) : WF_OK;
}

/* A row-parallel layer with the residual add: out (this rank's rows of
 * the stream) = res + the sum over the ranks of inp (N, K) @ w (C, K)^T. */
static wf_status row_parallel_fwd(wf_model *m, float *out, const float *res, const float *inp, const float *w,
                                  int N, int K, const char *tag) {
    const int C = m->C;
    if (!m->sp) {
        TIMED_(fwd, WF_OP_COPY, tp_residual_start(m, out, res, (size_t)N * C));
        TIMED_(fwd, WF_OP_MATMUL, mm_fwd(m, out, inp, w, N, K, C, 1));
        return tp_sum(m, out, (size_t)N * C, tag);
    }
    const size_t R = (size_t)(N / m->tp);
    TIMED_(fwd, WF_OP_MATMUL, mm_fwd(m, m->tp_full, inp, w, N, K, C, 0));
    WF_TRY(sp_scatter(m, m->tp_full, out, R * C, tag));
    TIMED_(fwd, WF_OP_COPY, wf_backend_add(m->be, wf_f32(out), wf_f32(out), wf_f32(res), R * C));
    return WF_OK;
}

/* The whole (N, C) gradient of the residual stream for a row-parallel
 * layer's backward: dres itself, or with SP every rank's rows of it
 * gathered into tp_full. */
static wf_status dres_whole(wf_model *m, int N, const float **out, const char *tag) {
    *out = m->dres;
    if (!m->sp) return WF_OK;
    const size_t R = (size_t)(N / m->tp), C = (size_t)m->C;
    WF_TRY(wf_backend_copy(m->be, m->tp_full + (size_t)m->tp_rank * R * C, m->dres, R * C * sizeof(float)));
    WF_TRY(sp_gather(m, m->tp_full, R * C, tag));
    *out = m->tp_full;
    return WF_OK;
}

/* A norm's backward from dxn (N, C), this rank's partial input gradient
 * of the column-parallel layer after it: summed over the ranks (SP: only
 * this rank's rows, reduce-scattered), then the RMSNorm backward adds to
 * dres and to dw. With SP each rank's dw is over its rows only: it is
 * summed over the ranks apart (tp_lnw) and added, so dw stays the same
 * bits on every rank and earlier micro-batches' sums are not re-reduced. */
static wf_status norm_bwd(wf_model *m, float *dw, float *dxn, const float *inp, const float *w,
                          const float *rstd, int N, const char *tag) {
    const int C = m->C;
    if (!m->sp) {
        WF_TRY(tp_sum(m, dxn, (size_t)N * C, tag));
        TIMED_(bwd, WF_OP_RMSNORM,
               wf_backend_rmsnorm_bwd(m->be, wf_f32(m->dres), wf_f32(dw), wf_f32(dxn), wf_f32(inp), wf_f32(w),
                                      wf_f32(rstd), N, C));
        return WF_OK;
    }
    const int R = N / m->tp;
    WF_TRY(sp_scatter(m, dxn, m->tp_shard, (size_t)R * C, tag));
    WF_TRY(wf_backend_fill(m->be, m->tp_lnw, 0, (size_t)C * sizeof(float)));
    TIMED_(bwd, WF_OP_RMSNORM,
           wf_backend_rmsnorm_bwd(m->be, wf_f32(m->dres), wf_f32(m->tp_lnw), wf_f32(m->tp_shard), wf_f32(inp),
                                  wf_f32(w), wf_f32(rstd), R, C));
    WF_TRY(tp_sum(m, m->tp_lnw, (size_t)C, "sp norm weight grad"));
    return wf_backend_add(m->be, wf_f32(dw), wf_f32(dw), wf_f32(m->tp_lnw), (size_t)C);
}

/* Vocabulary parallelism: rank r holds vocabulary rows [v0, v0 + VL) of
 * the embedding and of lm_head. The embedding of a token that is not this
 * rank's is zero here (its owner's row after the all-reduce); its
 * gradient rows are dropped. The cross-entropy combines each rank's row
 * log-sum-exp: an all-reduce MAX of them, then one SUM of exp(lse_r - max)
 * and of the target's logit (from the rank that holds it, 0 elsewhere).
 * The per-row vectors (N floats) are combined on the host, as the loss
 * sum already is. Host scratch m->tp_host: the last forward's tokens and
 * targets (int32, N each), then three float vectors (N each). */
static int tp_owns(const wf_model *m, int32_t v) { return v >= m->v0 && v < m->v0 + m->VL; }

/* Zeroes the rows of x (N, C) whose token is not this rank's, runs of
 * consecutive rows in one fill. */
static wf_status tp_zero_foreign_rows(wf_model *m, float *x, int N) {
    const int32_t *tok = (const int32_t *)(const void *)m->tp_host;
    const size_t C = (size_t)m->C;
    for (int n = 0; n < N;) {
        if (tp_owns(m, tok[n])) {
            n++;
            continue;
        }
        int e = n;
        while (e < N && !tp_owns(m, tok[e])) e++;
        WF_TRY(wf_backend_fill(m->be, x + (size_t)n * C, 0, (size_t)(e - n) * C * sizeof(float)));
        n = e;
    }
    return WF_OK;
}

static wf_status tp_embedding_fwd(wf_model *m, const int32_t *tokens, int N) {
    int32_t *tok = (int32_t *)(void *)m->tp_host, *loc = (int32_t *)(void *)(m->tp_host + 2 * (size_t)N);
    memcpy(tok, tokens, (size_t)N * sizeof *tok);
    for (int n = 0; n < N; n++) loc[n] = tp_owns(m, tok[n]) ? tok[n] - m->v0 : 0;
    WF_TRY(wf_backend_upload(m->be, m->tp_tokens, loc, (size_t)N * sizeof *loc));
    float *out = m->sp ? m->tp_full : m->res[0];
    TIMED_(fwd, WF_OP_EMBEDDING,
           wf_backend_embedding_fwd(m->be, wf_f32(out), wf_i32(m->tp_tokens), wf_f32(m->wte), N, m->C));
    WF_TRY(tp_zero_foreign_rows(m, out, N));
    if (m->sp) return sp_scatter(m, out, m->res[0], (size_t)(N / m->tp) * m->C, "sp embedding");
    return tp_sum(m, m->res[0], (size_t)N * m->C, "tp embedding");
}

/* losses and ce_lse of the global vocabulary from this rank's logits
 * (N, VL). The local targets are the target's row here, -1 for an ignored
 * row, 0 (a placeholder, fixed in the backward) for a row another rank
 * holds. */
static wf_status tp_crossentropy_fwd(wf_model *m, const int32_t *targets, int N) {
    const size_t n_ = (size_t)N, VL = (size_t)m->VL;
    int32_t *tgt = (int32_t *)(void *)(m->tp_host + n_), *loc = (int32_t *)(void *)(m->tp_host + 2 * n_);
    float *fa = m->tp_host + 2 * n_, *fb = m->tp_host + 3 * n_, *fc = m->tp_host + 4 * n_;
    wf_backend *be = m->be;
    memcpy(tgt, targets, n_ * sizeof *tgt);
    for (size_t n = 0; n < n_; n++) loc[n] = tgt[n] < 0 ? -1 : tp_owns(m, tgt[n]) ? tgt[n] - m->v0 : 0;
    WF_TRY(wf_backend_upload(be, m->tp_targets, loc, n_ * sizeof *loc));
    TIMED_(fwd, WF_OP_CROSSENTROPY,
           wf_backend_crossentropy_fwd(be, wf_f32(m->losses), wf_f32(m->ce_lse), wf_f32(m->logits),
                                       wf_i32(m->tp_targets), N, m->VL));
    /* the row maxima of the ranks' log-sum-exps */
    WF_TRY(wf_backend_copy(be, m->tp_rows, m->ce_lse, n_ * sizeof(float)));
    WF_TRY(m->tp_ops.all_reduce(m->tp_ops.ctx, m->tp_rows, n_, WF_MODEL_TP_MAX, "tp ce max"));
    WF_TRY(wf_backend_download(be, fb, m->tp_rows, n_ * sizeof *fb));
    WF_TRY(wf_backend_download(be, fa, m->ce_lse, n_ * sizeof *fa));
    for (size_t n = 0; n < n_; n++) {
        fa[n] = (float)exp((double)fa[n] - (double)fb[n]);
        fc[n] = 0.0f;
        if (tgt[n] >= 0 && tp_owns(m, tgt[n]))
            WF_TRY(wf_backend_download(be, &fc[n], m->logits + n * VL + (size_t)(tgt[n] - m->v0), sizeof *fc));
    }
    WF_TRY(wf_backend_upload(be, m->tp_rows, fa, n_ * sizeof *fa));
    WF_TRY(wf_backend_upload(be, m->tp_rows + n_, fc, n_ * sizeof *fc));
    WF_TRY(tp_sum(m, m->tp_rows, 2 * n_, "tp ce sum"));
    WF_TRY(wf_backend_download(be, fa, m->tp_rows, n_ * sizeof *fa));
    WF_TRY(wf_backend_download(be, fc, m->tp_rows + n_, n_ * sizeof *fc));
    for (size_t n = 0; n < n_; n++) {
        double lse = (double)fb[n] + log((double)fa[n]);
        fa[n] = (float)lse;
        fc[n] = tgt[n] < 0 ? 0.0f : (float)(lse - (double)fc[n]);
    }
    WF_TRY(wf_backend_upload(be, m->ce_lse, fa, n_ * sizeof *fa));
    return wf_backend_upload(be, m->losses, fc, n_ * sizeof *fc);
}

/* The logits' gradient dloss * (softmax - onehot) over this rank's
 * columns, with the global log-sum-exp: the kernel's, except in rows whose
 * target another rank holds, where column 0 (the placeholder target) gets
 * its softmax back without the onehot. */
static wf_status tp_crossentropy_bwd(wf_model *m, int N, float dloss) {
    const size_t n_ = (size_t)N, VL = (size_t)m->VL;
    const int32_t *tgt = (const int32_t *)(const void *)(m->tp_host + n_);
    float *z0 = m->tp_host + 2 * n_, *lse = m->tp_host + 3 * n_;
    wf_backend *be = m->be;
    for (size_t n = 0; n < n_; n++)
        if (tgt[n] >= 0 && !tp_owns(m, tgt[n]))
            WF_TRY(wf_backend_download(be, &z0[n], m->logits + n * VL, sizeof *z0));
    WF_TRY(wf_backend_download(be, lse, m->ce_lse, n_ * sizeof *lse));
    TIMED_(bwd, WF_OP_CROSSENTROPY,
           wf_backend_crossentropy_bwd(be, wf_f32(m->logits), wf_f32(m->ce_lse), wf_i32(m->tp_targets), N,
                                       m->VL, dloss));
    for (size_t n = 0; n < n_; n++)
        if (tgt[n] >= 0 && !tp_owns(m, tgt[n])) {
            float g = (float)((double)dloss * exp((double)z0[n] - (double)lse[n]));
            WF_TRY(wf_backend_upload(be, m->logits + n * VL, &g, sizeof g));
        }
    return WF_OK;
}

/* Block l's intermediates `a` from its input res[l], on the last forward's
 * B x T rows: everything of its forward but the output. */
static wf_status block_fwd_acts(wf_model *m, int l, const model_layer_acts_ *a) {
    const int B = m->B, T = m->T, N = B * T, C = m->C, H = m->H, QKV = m->QKV;
    const model_layer_params_ *p = &m->lp[l];
    wf_backend *be = m->be;
    WF_TRY(norm_fwd(m, a->xn1, a->rstd1, m->res[l], p->ln1, N, "sp input_layernorm"));
    TIMED_(fwd, WF_OP_MATMUL, mm_fwd(m, a->qkv, a->xn1, p->wqkv, N, C, QKV, 0));
    TIMED_(fwd, WF_OP_ROPE,
           wf_backend_rope_fwd(be, wf_f32(a->qkv), wf_f32(m->rope_cos), wf_f32(m->rope_sin), B, T,
                               m->NH + m->NKV, m->HD, QKV));
    TIMED_(fwd, WF_OP_ATTENTION,
           wf_backend_attention_fwd(be, wf_f32(a->att), wf_f32(a->lse), wf_f32(a->qkv), B, T, m->NH, m->NKV,
                                    m->HD, wf_f32(m->attn_scratch), m->n_threads));
    WF_TRY(row_parallel_fwd(m, a->mid, m->res[l], a->att, p->wo, N, m->CA, "tp o_proj"));
    WF_TRY(norm_fwd(m, a->xn2, a->rstd2, a->mid, p->ln2, N, "sp post_attention_layernorm"));
    TIMED_(fwd, WF_OP_MATMUL, mm_fwd(m, a->h13, a->xn2, p->w13, N, C, 2 * H, 0));
    TIMED_(fwd, WF_OP_SWIGLU, wf_backend_swiglu_fwd(be, wf_f32(a->g), wf_f32(a->h13), N, H));
    return WF_OK;
}

/* Block l's forward: res[l] -> res[l+1], keeping its intermediates in `a`. */
static wf_status block_fwd(wf_model *m, int l, const model_layer_acts_ *a) {
    const int N = m->B * m->T, H = m->H;
    const model_layer_params_ *p = &m->lp[l];
    WF_TRY(block_fwd_acts(m, l, a));
    m->held_layer = l;
    return row_parallel_fwd(m, m->res[l + 1], a->mid, a->g, p->w2, N, H, "tp down_proj");
}

wf_status wf_model_forward(wf_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                           float *loss) {
    if (!m->plan_B)
        return wf_error(WF_ERR_INVALID, "model: forward before wf_model_plan");
    WF_TRY(check_seq_len(m, T));
    if (B < 1 || T < 1 || B > m->plan_B || T > m->plan_T)
        return wf_error(WF_ERR_INVALID,
                        "model: batch B x T = %d x %d does not fit the plan %d x %d", B, T,
                        m->plan_B, m->plan_T);
    if (m->sp && (B * T) % m->tp != 0)
        return wf_error(WF_ERR_INVALID,
                        "model: sequence parallelism splits the B x T = %d x %d = %d rows over %d "
                        "ranks: %d is not divisible by %d",
                        B, T, B * T, m->tp, B * T, m->tp);
    WF_TRY(check_ids(tokens, B, T, m->V, "tokens", 0));
    if (targets)
        WF_TRY(check_ids(targets, B, T, m->V, "targets", 1));

    const int N = B * T, C = m->C;
    m->B = B, m->T = T;
    m->has_targets = 0;
    m->logits_are_grads = 0;
    wf_backend *be = m->be;
    WF_TRY(wf_backend_upload(be, m->tokens, tokens, (size_t)N * sizeof *tokens));

    UNIT_EVENT_(0, WF_UNIT_FWD_BEGIN);
    if (m->tp > 1)
        WF_TRY(tp_embedding_fwd(m, tokens, N));
    else
        TIMED_(fwd, WF_OP_EMBEDDING,
               wf_backend_embedding_fwd(be, wf_f32(m->res[0]), wf_i32(m->tokens), wf_f32(m->wte), N, C));
    UNIT_EVENT_(0, WF_UNIT_FWD_END);
    for (int l = 0; l < m->L; l++) {
        UNIT_EVENT_(1 + l, WF_UNIT_FWD_BEGIN);
        WF_TRY(block_fwd(m, l, &m->la[l]));
        UNIT_EVENT_(1 + l, WF_UNIT_FWD_END);
    }
    UNIT_EVENT_(m->L + 1, WF_UNIT_FWD_BEGIN);
    WF_TRY(norm_fwd(m, m->xf, m->rstdf, m->res[m->L], m->norm_f, N, "sp norm"));
    TIMED_(fwd, WF_OP_MATMUL, mm_fwd(m, m->logits, m->xf, m->lm_head, N, C, m->VL, 0));
    UNIT_EVENT_(m->L + 1, WF_UNIT_FWD_END);

    if (!targets) {
        if (loss)
            *loss = 0.0f;
        return WF_OK;
    }
    WF_TRY(wf_backend_upload(be, m->targets, targets, (size_t)N * sizeof *targets));
    if (m->tp > 1)
        WF_TRY(tp_crossentropy_fwd(m, targets, N));
    else
        TIMED_(fwd, WF_OP_CROSSENTROPY,
               wf_backend_crossentropy_fwd(be, wf_f32(m->losses), wf_f32(m->ce_lse), wf_f32(m->logits),
                                           wf_i32(m->targets), N, m->V));
    /* The mean, summed in row order in double: the same on any thread count. */
    double sum = 0.0;
    size_t n_valid = 0;
    WF_TRY(wf_backend_loss_sum(be, wf_f32(m->losses), wf_i32(m->targets), (size_t)N, &sum, &n_valid));
    m->n_valid = n_valid;
    m->has_targets = 1;
    if (loss)
        *loss = n_valid ? (float)(sum / (double)n_valid) : 0.0f;
    return WF_OK;
}

const float *wf_model_logits(const wf_model *m) { return m->logits; }

wf_status wf_model_read_logits(wf_model *m, size_t offset, size_t count, float *dst) {
    size_t n = m->logits ? logits_numel(m) : 0;
    if (offset > n || count > n - offset)
        return wf_error(WF_ERR_RANGE, "model: logits [%zu, %zu) are outside the %zu planned", offset, offset + count, n);
    return wf_backend_download(m->be, dst, m->logits + offset, count * sizeof *dst);
}

void wf_model_set_grad_hook(wf_model *m, wf_model_grad_hook fn, void *ctx) {
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

/* The gradient of parameters [p, p + numel) of unit u is final: tell the
 * hook where it is in the flat layout. */
static void grad_done_(const wf_model *m, int u, const float *p, size_t numel) {
    if (!m->grad_hook) return;
    m->grad_hook(m->grad_hook_ctx, m->units[u].off + (size_t)(p - m->units[u].p), numel);
}

/* Selective recomputation's part of block_recompute: the element-wise
 * intermediates from the kept ones. */
static wf_status recompute_selective(wf_model *m, wf_backend *be, const model_layer_params_ *p,
                                     const model_layer_acts_ *a, int l, int N, int H) {
    WF_TRY(norm_fwd(m, a->xn1, a->rstd1, m->res[l], p->ln1, N, "sp input_layernorm"));
    WF_TRY(norm_fwd(m, a->xn2, a->rstd2, a->mid, p->ln2, N, "sp post_attention_layernorm"));
    TIMED_(fwd, WF_OP_SWIGLU, wf_backend_swiglu_fwd(be, wf_f32(a->g), wf_f32(a->h13), N, H));
    return WF_OK;
}

/* Recomputation (wf_model_set_recompute): refills the shared buffers of
 * block l's intermediates for its backward, with the forward's own kernels
 * on the same inputs, so bit for bit what the forward had. Nothing to do
 * when they still hold block l's (the last block, right after the
 * forward). Runs after anything that must precede block l's backward
 * (it reads block l's parameters). */
static wf_status block_recompute(wf_model *m, int l) {
    if (m->recompute == WF_RECOMPUTE_NONE || m->held_layer == l) return WF_OK;
    const int N = m->B * m->T, H = m->H;
    const model_layer_params_ *p = &m->lp[l];
    const model_layer_acts_ *a = &m->la[l];
    wf_backend *be = m->be;
    m->recomputing = 1;
    wf_status s = WF_OK;
    if (m->recompute == WF_RECOMPUTE_BLOCK) {
        s = block_fwd_acts(m, l, a);
    } else { /* selective: mid and h13 are kept */
        s = recompute_selective(m, be, p, a, l, N, H);
    }
    m->recomputing = 0;
    WF_TRY(s);
    m->held_layer = l;
    return WF_OK;
}

/* Block l's backward from its intermediates `a`: takes the gradient of
 * res[l+1] in dres and leaves that of res[l] there; adds to the block's
 * parameter gradients and reports each to the grad hook. */
static wf_status block_bwd(wf_model *m, int l, const model_layer_acts_ *a) {
    const int B = m->B, T = m->T, N = B * T, C = m->C, H = m->H, QKV = m->QKV;
    const model_layer_params_ *p = &m->lp[l], *d = &m->lg[l];
    const int u = 1 + l; /* the block's unit */
    wf_backend *be = m->be;
    /* res[l+1] = mid + g @ w2^T: dres reaches mid unchanged and g through w2. */
    const float *dout = NULL;
    WF_TRY(dres_whole(m, N, &dout, "sp down_proj grad"));
    TIMED_(bwd, WF_OP_MATMUL, mm_bwd(m, m->dg, d->w2, dout, a->g, p->w2, N, H, C));
    grad_done_(m, u, p->w2, (size_t)C * H);
    TIMED_(bwd, WF_OP_SWIGLU, wf_backend_swiglu_bwd(be, wf_f32(m->dh13), wf_f32(m->dg), wf_f32(a->h13), N, H));
    TIMED_(bwd, WF_OP_MATMUL, mm_bwd(m, m->dxn, d->w13, m->dh13, a->xn2, p->w13, N, C, 2 * H));
    grad_done_(m, u, p->w13, (size_t)2 * H * C);
    WF_TRY(norm_bwd(m, d->ln2, m->dxn, a->mid, p->ln2, a->rstd2, N, "tp gate_up grad"));
    grad_done_(m, u, p->ln2, (size_t)C);
    /* mid = res[l] + att @ wo^T */
    WF_TRY(dres_whole(m, N, &dout, "sp o_proj grad"));
    TIMED_(bwd, WF_OP_MATMUL, mm_bwd(m, m->datt, d->wo, dout, a->att, p->wo, N, m->CA, C));
    grad_done_(m, u, p->wo, (size_t)C * m->CA);
    TIMED_(bwd, WF_OP_ATTENTION,
           wf_backend_attention_bwd(be, wf_f32(m->dqkv), wf_f32(m->datt), wf_f32(a->qkv), wf_f32(a->att),
                                    wf_f32(a->lse), B, T, m->NH, m->NKV, m->HD, wf_f32(m->attn_scratch),
                                    m->n_threads));
    TIMED_(bwd, WF_OP_ROPE,
           wf_backend_rope_bwd(be, wf_f32(m->dqkv), wf_f32(m->rope_cos), wf_f32(m->rope_sin), B, T,
                               m->NH + m->NKV, m->HD, QKV));
    TIMED_(bwd, WF_OP_MATMUL,
           mm_bwd(m, m->dxn, d->wqkv, m->dqkv, a->xn1, p->wqkv, N, C, QKV));
    grad_done_(m, u, p->wqkv, (size_t)QKV * C);
    WF_TRY(norm_bwd(m, d->ln1, m->dxn, m->res[l], p->ln1, a->rstd1, N, "tp qkv grad"));
    grad_done_(m, u, p->ln1, (size_t)C);
    return WF_OK;
}

wf_status wf_model_backward(wf_model *m, float loss_scale) {
    if (!m->has_targets)
        return wf_error(WF_ERR_INVALID,
                        "model: backward needs a forward with targets just before it%s",
                        m->logits_are_grads ? " (this forward's backward already ran)" : "");
    const int N = m->B * m->T, C = m->C;
    float dloss = m->n_valid ? loss_scale / (float)m->n_valid : 0.0f;

    wf_backend *be = m->be;
    if (m->tp > 1)
        WF_TRY(tp_crossentropy_bwd(m, N, dloss));
    else
        TIMED_(bwd, WF_OP_CROSSENTROPY,
               wf_backend_crossentropy_bwd(be, wf_f32(m->logits), wf_f32(m->ce_lse), wf_i32(m->targets), N,
                                           m->V, dloss));
    m->has_targets = 0;
    m->logits_are_grads = 1;
    UNIT_EVENT_(m->L + 1, WF_UNIT_BWD_BEGIN);
    TIMED_(bwd, WF_OP_MATMUL,
           mm_bwd(m, m->dxn, m->d_lm_head, m->logits, m->xf, m->lm_head, N, C, m->VL));
    if (m->lm_head != m->wte) grad_done_(m, m->L + 1, m->lm_head, (size_t)m->VL * C);
    TIMED_(bwd, WF_OP_COPY, wf_backend_fill(be, m->dres, 0, own_rows(m, (size_t)N) * C * sizeof(float)));
    WF_TRY(norm_bwd(m, m->d_norm_f, m->dxn, m->res[m->L], m->norm_f, m->rstdf, N, "tp lm_head grad"));
    grad_done_(m, m->L + 1, m->norm_f, (size_t)C);
    UNIT_EVENT_(m->L + 1, WF_UNIT_BWD_END);
    for (int l = m->L - 1; l >= 0; l--) {
        UNIT_EVENT_(1 + l, WF_UNIT_BWD_BEGIN); /* FSDP gathers block l's parameters */
        WF_TRY(block_recompute(m, l));         /* which the recompute reads */
        WF_TRY(block_bwd(m, l, &m->la[l]));
        UNIT_EVENT_(1 + l, WF_UNIT_BWD_END);
    }
    UNIT_EVENT_(0, WF_UNIT_BWD_BEGIN);
    const float *demb = m->dres;
    WF_TRY(dres_whole(m, N, &demb, "sp embedding grad"));
    if (m->tp > 1) WF_TRY(tp_zero_foreign_rows(m, (float *)(uintptr_t)demb, N)); /* another rank's tokens */
    TIMED_(bwd, WF_OP_EMBEDDING,
           wf_backend_embedding_bwd(be, wf_f32(m->d_wte), wf_f32(demb),
                                    wf_i32(m->tp > 1 ? m->tp_tokens : m->tokens), N, C));
    grad_done_(m, 0, m->wte, (size_t)m->VL * C);
    UNIT_EVENT_(0, WF_UNIT_BWD_END);
    return WF_OK;
}

wf_model_memory wf_model_get_memory(const wf_model *m) {
    wf_model_memory r;
    r.param_bytes = m->params ? m->n_params * sizeof(float) : 0;
    r.grad_bytes = m->grads ? m->n_params * sizeof(float) : 0;
    r.activation_bytes = m->act_floats * sizeof(float);
    return r;
}

/* The activations per block, after the embedding's one. */
enum { ACTS_PER_LAYER = 8 };

/* Walks the activations the model holds (wf_model_num_activations), in
 * forward order; fills *out with the one numbered `want` (if any) and
 * returns how many there are. A block's intermediates are held when they
 * are its own buffers, or when the shared set holds that block's; with
 * selective recompute the kept matmul outputs are always there. */
static int activations_walk(const wf_model *m, int want, wf_model_activation *out) {
    if (m->B <= 0) return 0;
    size_t N = (size_t)m->B * (size_t)m->T, C = (size_t)m->C;
    size_t R = m->sp ? N / (size_t)m->tp : N; /* rows of the residual stream held here */
    int n = 0;
#define ACT_(cond, data_, numel_, ...)                                       \
    do {                                                                     \
        if (!(cond)) break;                                                  \
        if (n++ != want) break;                                              \
        snprintf(out->name, sizeof out->name, __VA_ARGS__);                  \
        out->data = (data_);                                                 \
        out->numel = (numel_);                                               \
    } while (0)
    ACT_(1, m->res[0], R * C, "model.embed_tokens");
    static const char *const names[ACTS_PER_LAYER] = {
        "input_layernorm", "self_attn.qkv_proj", "self_attn.attn", "self_attn.residual",
        "post_attention_layernorm", "mlp.gate_up_proj", "mlp.act", "output"};
    for (int l = 0; l < m->L; l++) {
        const model_layer_acts_ *a = &m->la[l];
        const float *data[ACTS_PER_LAYER] = {a->xn1, a->qkv, a->att, a->mid,
                                             a->xn2, a->h13, a->g,   m->res[l + 1]};
        size_t width[ACTS_PER_LAYER] = {C, (size_t)m->QKV, (size_t)m->CA, C, C, 2 * (size_t)m->H, (size_t)m->H, C};
        size_t rows[ACTS_PER_LAYER] = {N, N, N, R, N, N, N, R};
        /* which entries survive without the shared set: bit j for entry j */
        unsigned kept = m->recompute == WF_RECOMPUTE_NONE        ? 0xffu
                        : m->recompute == WF_RECOMPUTE_SELECTIVE ? 0xaeu /* qkv att mid h13 out */
                                                                 : 0x80u; /* the output */
        if (m->held_layer == l) kept = 0xffu;
        for (int j = 0; j < ACTS_PER_LAYER; j++)
            ACT_(kept >> j & 1u, data[j], rows[j] * width[j], "model.layers.%d.%s", l, names[j]);
    }
    ACT_(1, m->xf, N * C, "model.norm");
    ACT_(1, m->logits, N * (size_t)m->VL, "%s", m->logits_are_grads ? "lm_head.grad" : "lm_head");
    ACT_(1, m->losses, m->has_targets ? N : 0, "loss_per_token");
#undef ACT_
    return n;
}

int wf_model_num_activations(const wf_model *m) { return activations_walk(m, -1, NULL); }

void wf_model_get_activation(const wf_model *m, int i, wf_model_activation *out) {
    memset(out, 0, sizeof *out);
    activations_walk(m, i, out);
}

wf_status wf_model_read_activation(wf_model *m, int i, size_t offset, size_t count, float *dst) {
    wf_model_activation a;
    memset(&a, 0, sizeof a);
    if (i < 0 || i >= activations_walk(m, i, &a) || offset > a.numel || count > a.numel - offset)
        return wf_error(WF_ERR_RANGE, "model: activation %d has no values [%zu, %zu)", i, offset, offset + count);
    return wf_backend_download(m->be, dst, a.data + offset, count * sizeof *dst);
}

static const char *const model_op_names_[] = {
#define WF_MODEL_OP_NAME_(name, str) str,
    WF_MODEL_OPS(WF_MODEL_OP_NAME_)
#undef WF_MODEL_OP_NAME_
};

const char *wf_model_op_name(wf_model_op op) {
    return op >= 0 && op < WF_OP_COUNT ? model_op_names_[op] : "?";
}

wf_model_op_times wf_model_get_op_times(const wf_model *m) { return m->times; }

void wf_model_reset_op_times(wf_model *m) { memset(&m->times, 0, sizeof m->times); }
