/* Inference with a key/value cache, the sampler and the generation loop
 * (include/weft/generate.h).
 *
 * The forward of a chunk of n new positions p0 .. p0+n-1 (batch 1) is the
 * model's forward (src/model/model.c) with two differences: the keys and
 * values go straight into the cache rows of those positions, and attention
 * reads every cached position up to its own instead of the chunk alone.
 * Per block:
 *   xn = rmsnorm(x);  q = xn wq^T;  K[p0:p0+n] = xn wk^T;  V[p0:p0+n] = xn wv^T
 *   rope(q), rope(K rows) at their positions
 *   att = attention(q, K[0:p+1], V[0:p+1]) for the row at position p
 *   x += att wo^T;  xn = rmsnorm(x);  x += swiglu(xn w13^T) w2^T
 * and the final norm and lm_head for the last row only. Everything but the
 * attention over the cache and the one-row products (gen_linear: sgemv) is
 * an op of the model's backend (include/weft/backend.h); those two are
 * still host code on host memory (the generator's arena and the model's
 * weights), which only the cpu and ref backends have. The parameters are found
 * by their Hugging Face names, so this file depends on the model's public
 * layout only (plus the documented adjacency of gate_proj and up_proj,
 * checked at creation).
 *
 * Branches (wf_generator_branches, for scoring an example's choices on
 * one shared context): several short sequences forwarded together on top
 * of the cached prefix, their rows stacked in the cache after it as
 * scratch; a branch row at cache row P + off + j is rotated at position
 * P + j and attends to the prefix [0, P) and then its own rows
 * [P + off, P + off + j], so it sees exactly what it would see as the
 * sequence's next tokens, with the same keys in the same order.
 *
 * This file does not: batch several independent sequences, or touch the
 * model's training buffers (wf_model_plan is not needed). */
#include "weft/generate.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_impl.h"
#include "weft/arena.h"
#include "weft/backend.h"

#ifdef _OPENMP
#include <omp.h>
#define GEN_THREAD_NUM_() omp_get_thread_num()
#else
#define GEN_THREAD_NUM_() 0
#endif

/* Positions per prefill chunk: the rows of one pass through the matmuls. */
#define GEN_CHUNK_ 64
/* Attention work (multiply-adds) below which one thread does it all: a
 * fork-join costs more than a few microseconds of arithmetic. */
#define GEN_ATT_PARALLEL_MIN_ 32768

typedef struct {
    const float *ln1; /* (C) */
    const float *wq;  /* (NH*HD, C) */
    const float *wk;  /* (NKV*HD, C) */
    const float *wv;  /* (NKV*HD, C) */
    const float *wo;  /* (C, NH*HD) */
    const float *ln2; /* (C) */
    const float *w13; /* (2H, C): gate_proj then up_proj */
    const float *w2;  /* (C, H) */
} gen_layer_;

struct wf_generator {
    wf_model *m;
    wf_arena *arena;
    int C, L, NH, NKV, HD, H, V, KVD; /* KVD = NKV*HD */
    int cap, pos, chunk;
    int n_threads;    /* threads of a prefill chunk (and of the attention scratch) */
    int step_threads; /* threads of a one-token step: wf_generator_set_step_threads */
    float eps;

    gen_layer_ *lp;                      /* (L) */
    const float *wte, *norm_f, *lm_head; /* (V, C), (C), (V, C) */

    float *k_cache, *v_cache;   /* (L, cap, NKV, HD) each, keys after RoPE */
    float *rope_cos, *rope_sin; /* (cap, HD/2) */
    int32_t *tokens;            /* (chunk) the chunk's ids, in the backend's memory */
    float *x;                   /* (chunk, C) residual stream */
    float *xn;                  /* (chunk, C) normed input of a sublayer */
    float *rstd;                /* (chunk) */
    float *q;                   /* (chunk, NH*HD) */
    float *att;                 /* (chunk, NH*HD) */
    float *h13;                 /* (chunk, 2H) */
    float *gate;                /* (chunk, H) */
    float *scores;              /* (n_threads, cap) attention rows */
    int32_t *row_pre;           /* (chunk) the keys of a row: cache rows [0, row_pre) */
    int32_t *row_own0;          /* (chunk) and [row_own0, row_own1]: a prefill's row at */
    int32_t *row_own1;          /* position p has (0, 0, p); a branch's, gen_branch_pass */
    float *logits;              /* (V) */
    float *sample_w;            /* (V) wf_sample's scratch for wf_generate */
    int32_t *sample_idx;        /* (V) */
};

/* ------------------------------------------------------------ creation */

static wf_status find_param(wf_model *m, int layer, const char *name, int64_t rows,
                            int64_t cols, const float **out) {
    char full[WF_TENSOR_NAME_MAX];
    if (layer >= 0)
        snprintf(full, sizeof full, "model.layers.%d.%s", layer, name);
    else
        snprintf(full, sizeof full, "%s", name);
    const wf_tensor_info *t = wf_model_find_tensor(m, full);
    int ok = t && t->shape[0] == rows && (cols ? t->ndim == 2 && t->shape[1] == cols : t->ndim == 1);
    if (!ok)
        return wf_error(WF_ERR_INTERNAL,
                        "generate: the model has no tensor %s of shape (%lld%s%lld) (%s); the "
                        "generator and the model's layout disagree",
                        full, (long long)rows, cols ? ", " : "", (long long)cols,
                        t ? "the shape differs" : "missing");
    *out = wf_model_params(m) + t->offset;
    return WF_OK;
}

static wf_status find_params(wf_generator *g) {
    wf_model *m = g->m;
    const int C = g->C, H = g->H, KVD = g->KVD, QD = g->NH * g->HD;
    WF_TRY(find_param(m, -1, "model.embed_tokens.weight", g->V, C, &g->wte));
    WF_TRY(find_param(m, -1, "model.norm.weight", C, 0, &g->norm_f));
    if (wf_model_get_config(m)->tied_embeddings)
        g->lm_head = g->wte;
    else
        WF_TRY(find_param(m, -1, "lm_head.weight", g->V, C, &g->lm_head));
    for (int l = 0; l < g->L; l++) {
        gen_layer_ *p = &g->lp[l];
        const float *up;
        WF_TRY(find_param(m, l, "input_layernorm.weight", C, 0, &p->ln1));
        WF_TRY(find_param(m, l, "self_attn.q_proj.weight", QD, C, &p->wq));
        WF_TRY(find_param(m, l, "self_attn.k_proj.weight", KVD, C, &p->wk));
        WF_TRY(find_param(m, l, "self_attn.v_proj.weight", KVD, C, &p->wv));
        WF_TRY(find_param(m, l, "self_attn.o_proj.weight", C, QD, &p->wo));
        WF_TRY(find_param(m, l, "post_attention_layernorm.weight", C, 0, &p->ln2));
        WF_TRY(find_param(m, l, "mlp.gate_proj.weight", H, C, &p->w13));
        WF_TRY(find_param(m, l, "mlp.up_proj.weight", H, C, &up));
        WF_TRY(find_param(m, l, "mlp.down_proj.weight", C, H, &p->w2));
        /* SwiGLU reads gate|up rows of one product: the two weights must be
         * one (2H, C) matrix, as include/weft/model.h promises. */
        if (up != p->w13 + (size_t)H * C)
            return wf_error(WF_ERR_INTERNAL,
                            "generate: layer %d: mlp.up_proj.weight does not follow "
                            "mlp.gate_proj.weight in the parameter buffer",
                            l);
    }
    return WF_OK;
}

static void gen_layout(wf_generator *g, wf__model_carver *cv) {
    size_t P = (size_t)g->chunk, C = (size_t)g->C, H = (size_t)g->H, V = (size_t)g->V;
    size_t QD = (size_t)g->NH * (size_t)g->HD, cache = (size_t)g->L * g->cap * g->KVD;
    size_t half = (size_t)g->HD / 2;
    g->k_cache = wf__model_carve(cv, cache);
    g->v_cache = wf__model_carve(cv, cache);
    g->rope_cos = wf__model_carve(cv, (size_t)g->cap * half);
    g->rope_sin = wf__model_carve(cv, (size_t)g->cap * half);
    g->tokens = (int32_t *)(void *)wf__model_carve(cv, P);
    g->x = wf__model_carve(cv, P * C);
    g->xn = wf__model_carve(cv, P * C);
    g->rstd = wf__model_carve(cv, P);
    g->q = wf__model_carve(cv, P * QD);
    g->att = wf__model_carve(cv, P * QD);
    g->h13 = wf__model_carve(cv, P * 2 * H);
    g->gate = wf__model_carve(cv, P * H);
    g->scores = wf__model_carve(cv, (size_t)g->n_threads * g->cap);
    g->row_pre = (int32_t *)(void *)wf__model_carve(cv, P);
    g->row_own0 = (int32_t *)(void *)wf__model_carve(cv, P);
    g->row_own1 = (int32_t *)(void *)wf__model_carve(cv, P);
    g->logits = wf__model_carve(cv, V);
    g->sample_w = wf__model_carve(cv, V);
    g->sample_idx = (int32_t *)(void *)wf__model_carve(cv, V);
}

wf_status wf_generator_create(wf_generator **out, wf_model *m, int max_tokens) {
    *out = NULL;
    const wf_model_config *cfg = wf_model_get_config(m);
    if (max_tokens <= 0) max_tokens = cfg->max_seq_len;
    if (max_tokens > cfg->max_seq_len)
        return wf_error(WF_ERR_RANGE,
                        "generate: max_tokens = %d is more than model.max_seq_len = %d (RoPE "
                        "positions past it were never trained); ask for at most %d",
                        max_tokens, cfg->max_seq_len, cfg->max_seq_len);
    if (!wf_model_params(m))
        return wf_error(WF_ERR_INVALID, "generate: the model has no parameter buffer of its own (its units are "
                                        "bound elsewhere); the generator reads the parameters in place");
    wf_arena *arena;
    WF_TRY(wf_arena_create(&arena, 0));
    wf_generator *g = wf_arena_alloc(arena, sizeof *g, 0);
    if (!g) {
        wf_arena_destroy(arena);
        return wf_error_wrap(WF_ERR_NOMEM, "generate: the generator header: ");
    }
    g->m = m;
    g->arena = arena;
    g->C = cfg->dim, g->L = cfg->n_layers, g->NH = cfg->n_heads, g->NKV = cfg->n_kv_heads;
    g->HD = cfg->dim / cfg->n_heads, g->H = wf_model_config_hidden_dim(cfg);
    g->V = cfg->vocab_size, g->KVD = g->NKV * g->HD;
    g->cap = max_tokens;
    g->chunk = max_tokens < GEN_CHUNK_ ? max_tokens : GEN_CHUNK_;
    g->n_threads = wf_kern_threads();
    g->step_threads = g->n_threads;
    g->eps = (float)cfg->norm_eps;
    g->lp = wf_arena_alloc(arena, (size_t)g->L * sizeof *g->lp, 0);
    wf_status s = g->lp ? find_params(g) : wf_error(WF_ERR_NOMEM, "generate: layer table");
    if (s != WF_OK) {
        wf_arena_destroy(arena);
        return s;
    }
    wf__model_carver cv = {NULL, 0};
    gen_layout(g, &cv);
    float *base = wf_arena_alloc(arena, cv.used * sizeof(float), 64);
    if (!base) {
        wf_arena_destroy(arena);
        return wf_error_wrap(WF_ERR_NOMEM, "generate: cache and scratch for %d tokens (%zu bytes): ",
                             max_tokens, cv.used * sizeof(float));
    }
    cv = (wf__model_carver){base, 0};
    gen_layout(g, &cv);
    s = wf_backend_rope_table(wf_model_backend(m), wf_f32(g->rope_cos), wf_f32(g->rope_sin), g->cap, g->HD,
                              cfg->rope_theta);
    if (s != WF_OK) {
        wf_arena_destroy(arena);
        return s;
    }
    *out = g;
    return WF_OK;
}

void wf_generator_destroy(wf_generator *g) {
    if (g) wf_arena_destroy(g->arena); /* the generator lives in its arena */
}

void wf_generator_reset(wf_generator *g) { g->pos = 0; }

void wf_generator_set_step_threads(wf_generator *g, int n) {
    g->step_threads = n < 1 ? 1 : n > g->n_threads ? g->n_threads : n;
}

int wf_generator_step_threads(const wf_generator *g) { return g->step_threads; }
int wf_generator_pos(const wf_generator *g) { return g->pos; }
int wf_generator_capacity(const wf_generator *g) { return g->cap; }

/* ------------------------------------------------------------- forward */

/* att (n, NH*HD) for the n rows of q, against the cached keys and values
 * of layer l that each row sees: cache rows [0, row_pre[i]) and then
 * [row_own0[i], row_own1[i]], in that order (a prefill's row at position p:
 * 0 .. p; a branch's row: the prefix, then its own branch up to itself).
 * Each (row, head) is one task on one thread, its sums in a fixed order,
 * so the result does not depend on the thread count. */
static void gen_attention(wf_generator *g, int l, int n, int n_threads) {
    const int NH = g->NH, HD = g->HD, KVD = g->KVD, group = g->NH / g->NKV, cap = g->cap;
    const size_t QD = (size_t)NH * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    const float *K = g->k_cache + (size_t)l * cap * KVD; /* (cap, KVD) */
    const float *V = g->v_cache + (size_t)l * cap * KVD; /* (cap, KVD) */
    const int n_tasks = n * NH;
    long long keys = 0;
    for (int i = 0; i < n; i++) keys += g->row_pre[i] + g->row_own1[i] - g->row_own0[i] + 1;
    const long long work = keys * NH * HD;
    (void)work; /* read only by the pragma, which some builds ignore */
#pragma omp parallel for schedule(static) num_threads(n_threads) \
    if (work >= GEN_ATT_PARALLEL_MIN_)
    for (int task = 0; task < n_tasks; task++) {
        int i = task / NH, h = task % NH, kvh = h / group;
        const int pre = g->row_pre[i], own0 = g->row_own0[i];
        const int nk = pre + g->row_own1[i] - own0 + 1; /* keys: [0, pre) then own0 .. own1 */
        float *restrict s = g->scores + (size_t)GEN_THREAD_NUM_() * cap; /* (nk) */
        const float *restrict q_ih = g->q + (size_t)i * QD + (size_t)h * HD;
        float mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            const int row = j < pre ? j : own0 + (j - pre);
            const float *restrict k_j = K + (size_t)row * KVD + (size_t)kvh * HD;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < HD; d++) dot += q_ih[d] * k_j[d];
            s[j] = dot * scale;
            mx = s[j] > mx ? s[j] : mx;
        }
        float sum = 0.0f;
        for (int j = 0; j < nk; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        float *restrict out = g->att + (size_t)i * QD + (size_t)h * HD;
        for (int d = 0; d < HD; d++) out[d] = 0.0f;
        for (int j = 0; j < nk; j++) {
            const int row = j < pre ? j : own0 + (j - pre);
            const float *restrict v_j = V + (size_t)row * KVD + (size_t)kvh * HD;
            float pj = s[j];
#pragma omp simd
            for (int d = 0; d < HD; d++) out[d] += pj * v_j[d];
        }
        float inv = 1.0f / sum;
        for (int d = 0; d < HD; d++) out[d] *= inv;
    }
}

/* out (n, OC) = inp (n, C) @ weight (OC, C)^T, or += with `accumulate`.
 * One row, the decoding step, goes to sgemv: OpenBLAS's sgemm packs the
 * whole weight matrix into its panel layout on every call, which for a
 * single row costs several times the product itself (bench/README.md,
 * "Measurements behind choices in the code"). */
static wf_status gen_linear(wf_backend *be, float *out, const float *inp, const float *weight, int n, int C,
                            int OC, int accumulate) {
    if (n == 1 && C > 0 && OC > 0) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, accumulate ? 1.0f : 0.0f, out, 1);
        return WF_OK;
    }
    wf_matmul_desc d = {.m = n, .n = OC, .k = C, .trans_b = 1, .a = wf_f32(inp), .b = wf_f32(weight),
                        .c = wf_f32(out), .lda = C, .ldb = C, .ldc = OC, .alpha = 1.0f, .accumulate = accumulate};
    return wf_backend_matmul(be, &d);
}

/* Rows of a pass that are consecutive positions: rows [r0, r1) of the
 * pass are at positions pos0 .. pos0 + (r1 - r0) - 1 (RoPE's angles). */
typedef struct {
    int r0, r1, pos0;
} gen_seg_;

/* Runs n <= chunk tokens through every block, their keys and values into
 * cache rows row0 .. row0+n-1, each row attending to the keys that
 * g->row_pre/own0/own1 give it (set by the caller) and rotated at the
 * positions of its segment. With `want_last`, the logits of the last row
 * into g->logits; with `all_logits`, those of every row there (n, V). */
static wf_status gen_rows(wf_generator *g, const int32_t *tokens, int n, int row0, const gen_seg_ *seg, int n_seg,
                          int want_last, float *all_logits, int threads) {
    const int C = g->C, H = g->H, KVD = g->KVD, QD = g->NH * g->HD, half = g->HD / 2;
    wf_backend *be = wf_model_backend(g->m);
    WF_TRY(wf_backend_upload(be, g->tokens, tokens, (size_t)n * sizeof *tokens));
    WF_TRY(wf_backend_embedding_fwd(be, wf_f32(g->x), wf_i32(g->tokens), wf_f32(g->wte), n, C));
    for (int l = 0; l < g->L; l++) {
        const gen_layer_ *p = &g->lp[l];
        float *k_rows = g->k_cache + ((size_t)l * g->cap + row0) * KVD; /* (n, KVD) */
        float *v_rows = g->v_cache + ((size_t)l * g->cap + row0) * KVD; /* (n, KVD) */
        WF_TRY(wf_backend_rmsnorm_fwd(be, wf_f32(g->xn), wf_f32(g->rstd), wf_f32(g->x), wf_f32(p->ln1), n, C, g->eps));
        WF_TRY(gen_linear(be, g->q, g->xn, p->wq, n, C, QD, 0));
        WF_TRY(gen_linear(be, k_rows, g->xn, p->wk, n, C, KVD, 0));
        WF_TRY(gen_linear(be, v_rows, g->xn, p->wv, n, C, KVD, 0));
        for (int i = 0; i < n_seg; i++) { /* tables from the segment's position, T = its rows */
            const gen_seg_ *sg = &seg[i];
            const float *cos_p = g->rope_cos + (size_t)sg->pos0 * half, *sin_p = g->rope_sin + (size_t)sg->pos0 * half;
            WF_TRY(wf_backend_rope_fwd(be, wf_f32(g->q + (size_t)sg->r0 * QD), wf_f32(cos_p), wf_f32(sin_p), 1,
                                       sg->r1 - sg->r0, g->NH, g->HD, QD));
            WF_TRY(wf_backend_rope_fwd(be, wf_f32(k_rows + (size_t)sg->r0 * KVD), wf_f32(cos_p), wf_f32(sin_p), 1,
                                       sg->r1 - sg->r0, g->NKV, g->HD, KVD));
        }
        gen_attention(g, l, n, threads);
        WF_TRY(gen_linear(be, g->x, g->att, p->wo, n, QD, C, 1)); /* x += att wo^T */
        WF_TRY(wf_backend_rmsnorm_fwd(be, wf_f32(g->xn), wf_f32(g->rstd), wf_f32(g->x), wf_f32(p->ln2), n, C, g->eps));
        WF_TRY(gen_linear(be, g->h13, g->xn, p->w13, n, C, 2 * H, 0));
        WF_TRY(wf_backend_swiglu_fwd(be, wf_f32(g->gate), wf_f32(g->h13), n, H));
        WF_TRY(gen_linear(be, g->x, g->gate, p->w2, n, H, C, 1)); /* x += g w2^T */
    }
    if (want_last) {
        const float *x_last = g->x + (size_t)(n - 1) * C;
        WF_TRY(wf_backend_rmsnorm_fwd(be, wf_f32(g->xn), wf_f32(g->rstd), wf_f32(x_last), wf_f32(g->norm_f), 1, C,
                                      g->eps));
        WF_TRY(gen_linear(be, g->logits, g->xn, g->lm_head, 1, C, g->V, 0));
    }
    if (all_logits) {
        WF_TRY(wf_backend_rmsnorm_fwd(be, wf_f32(g->xn), wf_f32(g->rstd), wf_f32(g->x), wf_f32(g->norm_f), n, C,
                                      g->eps));
        WF_TRY(gen_linear(be, all_logits, g->xn, g->lm_head, n, C, g->V, 0));
    }
    return WF_OK;
}

/* Positions p0 .. p0+n-1 (n <= chunk, p0 = g->pos) of the sequence: each
 * row attends to every position up to its own; with `want_logits`, the
 * logits of the last row. */
static wf_status gen_chunk_ops(wf_generator *g, const int32_t *tokens, int n, int want_logits, int threads) {
    const int p0 = g->pos;
    for (int i = 0; i < n; i++) g->row_pre[i] = 0, g->row_own0[i] = 0, g->row_own1[i] = p0 + i;
    const gen_seg_ seg = {0, n, p0};
    WF_TRY(gen_rows(g, tokens, n, p0, &seg, 1, want_logits, NULL, threads));
    g->pos = p0 + n;
    return WF_OK;
}

/* gen_chunk_ops on the thread count of a prefill chunk or a step. */
static wf_status gen_forward_chunk(wf_generator *g, const int32_t *tokens, int n, int want_logits) {
    /* The kernels' OpenMP loops and OpenBLAS (OpenMP build) take their
     * thread count from this thread's OpenMP setting: a step runs on
     * step_threads, restored at the end. */
    const int threads = n == 1 ? g->step_threads : g->n_threads;
#ifdef _OPENMP
    const int saved_threads = omp_get_max_threads();
    if (threads != saved_threads) omp_set_num_threads(threads);
#endif
    wf_status s = gen_chunk_ops(g, tokens, n, want_logits, threads);
#ifdef _OPENMP
    if (threads != saved_threads) omp_set_num_threads(saved_threads);
#endif
    return s;
}

wf_status wf_generator_prefill(wf_generator *g, const int32_t *tokens, int n,
                               const float **logits) {
    if (n < 1)
        return wf_error(WF_ERR_INVALID, "generate: prefill of %d tokens; give at least one", n);
    if (n > g->cap - g->pos) {
        const wf_model_config *cfg = wf_model_get_config(g->m);
        return wf_error(WF_ERR_RANGE,
                        "generate: %d more tokens at position %d would pass the cache's %d "
                        "positions (max_tokens; model.max_seq_len = %d); reset the generator, "
                        "shorten the text, or create it with a larger max_tokens",
                        n, g->pos, g->cap, cfg->max_seq_len);
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->V)
            return wf_error(WF_ERR_RANGE,
                            "generate: token %d (position %d) = %d is outside the vocabulary "
                            "[0, %d)",
                            i, g->pos + i, tokens[i], g->V);
    for (int i = 0; i < n; i += g->chunk) {
        int len = n - i < g->chunk ? n - i : g->chunk;
        WF_TRY(gen_forward_chunk(g, tokens + i, len, i + len == n));
    }
    if (logits) *logits = g->logits;
    return WF_OK;
}

wf_status wf_generator_step(wf_generator *g, int32_t token, const float **logits) {
    return wf_generator_prefill(g, &token, 1, logits);
}

wf_status wf_generator_rewind(wf_generator *g, int pos) {
    if (pos < 0 || pos > g->pos)
        return wf_error(WF_ERR_RANGE, "generate: rewind to position %d, but the cache holds %d positions", pos,
                        g->pos);
    g->pos = pos;
    return WF_OK;
}

/* One pass of wf_generator_branches: rows [r_first, r_first + n) of the
 * branches' concatenation, the first in branch *b, which starts at row
 * *off; *b and *off are left at the branch of the pass's last row. On the
 * prefill's threads. */
static wf_status gen_branch_pass(wf_generator *g, const int32_t *tokens, const int *lens, int *b, int *off,
                                 int r_first, int n, float *logits) {
    const int P = g->pos;
    gen_seg_ seg[GEN_CHUNK_];
    int n_seg = 0;
    for (int i = 0; i < n; i++) {
        const int r = r_first + i;
        if (r >= *off + lens[*b]) *off += lens[(*b)++];
        if (i == 0 || r == *off) seg[n_seg++] = (gen_seg_){i, i, P + (r - *off)};
        seg[n_seg - 1].r1 = i + 1;
        g->row_pre[i] = P, g->row_own0[i] = P + *off, g->row_own1[i] = P + r;
    }
#ifdef _OPENMP
    const int saved_threads = omp_get_max_threads();
    if (g->n_threads != saved_threads) omp_set_num_threads(g->n_threads);
#endif
    wf_status s = gen_rows(g, tokens + r_first, n, P + r_first, seg, n_seg, 0, logits + (size_t)r_first * g->V,
                           g->n_threads);
#ifdef _OPENMP
    if (g->n_threads != saved_threads) omp_set_num_threads(saved_threads);
#endif
    return s;
}

wf_status wf_generator_branches(wf_generator *g, const int32_t *tokens, const int *lens, int n_branch,
                                float *logits) {
    if (n_branch < 1)
        return wf_error(WF_ERR_INVALID, "generate: %d branches; give at least one", n_branch);
    long long total = 0;
    for (int b = 0; b < n_branch; b++) {
        if (lens[b] < 1)
            return wf_error(WF_ERR_INVALID, "generate: branch %d has %d tokens; give at least one", b, lens[b]);
        total += lens[b];
    }
    if (total > g->cap - g->pos)
        return wf_error(WF_ERR_RANGE,
                        "generate: branches of %lld tokens in all after position %d would pass the cache's %d "
                        "positions; give fewer branches at a time",
                        total, g->pos, g->cap);
    for (long long i = 0; i < total; i++)
        if (tokens[i] < 0 || tokens[i] >= g->V)
            return wf_error(WF_ERR_RANGE, "generate: branch token %lld = %d is outside the vocabulary [0, %d)", i,
                            tokens[i], g->V);
    int b = 0, off = 0;
    for (int r = 0; r < (int)total; r += g->chunk) {
        const int n = (int)total - r < g->chunk ? (int)total - r : g->chunk;
        WF_TRY(gen_branch_pass(g, tokens, lens, &b, &off, r, n, logits));
    }
    return WF_OK;
}

/* ------------------------------------------------------------ sampling */

wf_sampler_config wf_sampler_config_default(void) {
    return (wf_sampler_config){.temperature = 1.0, .top_k = 0, .top_p = 1.0};
}

wf_status wf_sampler_config_validate(const wf_sampler_config *c) {
    if (!(isfinite(c->temperature) && c->temperature >= 0))
        return wf_error(WF_ERR_CONFIG,
                        "sampler: temperature = %g; it must be a finite number >= 0 (0 is "
                        "greedy)",
                        c->temperature);
    if (c->top_k < 0)
        return wf_error(WF_ERR_CONFIG, "sampler: top_k = %d; it must be >= 0 (0 is off)",
                        c->top_k);
    if (!(c->top_p >= 0 && c->top_p <= 1))
        return wf_error(WF_ERR_CONFIG, "sampler: top_p = %g; it must be in [0, 1] (1 is off)",
                        c->top_p);
    return WF_OK;
}

/* The sampler's order on tokens: a before b when its logit is larger, or
 * equal with the lower id; NaN counts as -inf. A total order, so every sort
 * and selection below has one answer. */
static float sample_key(const float *logits, int32_t i) {
    float x = logits[i];
    return isnan(x) ? -INFINITY : x;
}

static int sample_before(const float *logits, int32_t a, int32_t b) {
    float ka = sample_key(logits, a), kb = sample_key(logits, b);
    return ka > kb || (ka == kb && a < b);
}

/* Restores the heap property below `root`. With best_on_top the root is
 * the token that comes first in the sampler's order; without, the one that
 * comes last (a heap that keeps the best ones and evicts its root). */
static void sample_sift(int32_t *heap, int n, int root, const float *logits, int best_on_top) {
    for (;;) {
        int top = root, c1 = 2 * root + 1, c2 = c1 + 1;
        for (int c = c1; c <= c2 && c < n; c++)
            if (best_on_top ? sample_before(logits, heap[c], heap[top])
                            : sample_before(logits, heap[top], heap[c]))
                top = c;
        if (top == root) return;
        int32_t tmp = heap[root];
        heap[root] = heap[top], heap[top] = tmp;
        root = top;
    }
}

/* The k best tokens of `vocab`, sorted, into idx; returns k. A heap of the
 * best k seen so far, whose root is the worst of them: O(vocab log k); then
 * heap sort, popping the worst to the back. */
static int sample_top_k(int32_t *idx, int k, const float *logits, int vocab) {
    for (int i = 0; i < k; i++) idx[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sample_sift(idx, k, i, logits, 0);
    for (int32_t i = k; i < vocab; i++)
        if (sample_before(logits, i, idx[0])) {
            idx[0] = i;
            sample_sift(idx, k, 0, logits, 0);
        }
    for (int end = k - 1; end > 0; end--) {
        int32_t tmp = idx[0];
        idx[0] = idx[end], idx[end] = tmp;
        sample_sift(idx, end, 0, logits, 0);
    }
    return k;
}

/* The nucleus of the candidates idx (n): pops them best first from a heap
 * whose root is the best until their weights w sum to `need` (or all are
 * popped), and moves the popped ones, best first, to the front of idx.
 * Returns their count and their sum in *sum. O(n + m log n) for a nucleus
 * of m tokens, which for a trained model is a few dozen of the vocabulary:
 * no full sort. */
static int sample_nucleus(int32_t *idx, int n, const float *logits, const float *w, double need,
                          double *sum) {
    for (int i = n / 2 - 1; i >= 0; i--) sample_sift(idx, n, i, logits, 1);
    int end = n;
    double cum = 0.0;
    while (end > 0) {
        int32_t best = idx[0];
        idx[0] = idx[end - 1], idx[end - 1] = best; /* popped ones collect at the back */
        end--;
        sample_sift(idx, end, 0, logits, 1);
        cum += w[best];
        if (cum >= need) break;
    }
    int m = n - end;
    for (int i = 0; i < m / 2; i++) { /* idx[end..n) is worst first: reverse */
        int32_t tmp = idx[end + i];
        idx[end + i] = idx[n - 1 - i], idx[n - 1 - i] = tmp;
    }
    memmove(idx, idx + end, (size_t)m * sizeof *idx);
    *sum = cum;
    return m;
}

int32_t wf_sample(const float *logits, int vocab, const wf_sampler_config *c, wf_rng *rng,
                  float *scratch, int32_t *scratch_idx) {
    /* The best token in the sampler's order: greedy's answer, and the
     * softmax's shift. */
    int32_t best = -1;
    for (int32_t i = 0; i < vocab; i++)
        if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    if (best < 0 || logits[best] == -INFINITY) return -1;
    if (c->temperature <= 0 || logits[best] == INFINITY) return best;

    /* w = exp((logit - max) / temperature): softmax without its sum,
     * computed for the tokens that can still be drawn. */
    const double inv_t = 1.0 / c->temperature, mx = logits[best];
    float *w = scratch;
#define SAMPLE_W_(i) (isnan(logits[i]) ? 0.0f : expf((float)(((double)logits[i] - mx) * inv_t)))
    const int top_k = c->top_k > 0 && c->top_k < vocab ? c->top_k : 0;
    const int top_p = c->top_p < 1.0;
    const double u = wf_rng_uniform_double(rng); /* exactly one draw per call */
    double total = 0.0;
    int32_t *idx = scratch_idx; /* the kept set, in the sampler's order */
    int n;
    if (top_k) {
        n = sample_top_k(idx, top_k, logits, vocab);
        for (int i = 0; i < n; i++) total += w[idx[i]] = SAMPLE_W_(idx[i]);
    } else {
        for (int32_t i = 0; i < vocab; i++) total += w[i] = SAMPLE_W_(i);
        if (!top_p) {
            /* Everything is kept: walk in id order up to u * total. */
            double target = u * total, cum = 0.0;
            int32_t last = best;
            for (int32_t i = 0; i < vocab; i++) {
                if (w[i] <= 0.0f) continue;
                cum += w[i];
                last = i;
                if (target < cum) return i;
            }
            return last; /* u * total rounded up to the sum */
        }
        /* Only tokens with w >= (1 - p) total / vocab can be in the nucleus:
         * if token j is in it, the tokens from j on (each at most w_j, at
         * most vocab of them) hold more than 1 - p of the total. Half that
         * bound is the cutoff, as margin for rounding; the tokens below it
         * stay out of the heap. */
        double cutoff = 0.5 * (1.0 - c->top_p) * total / vocab;
        n = 0;
        for (int32_t i = 0; i < vocab; i++)
            if (w[i] > 0.0f && w[i] >= cutoff) idx[n++] = i;
        n = sample_nucleus(idx, n, logits, w, c->top_p * total, &total);
    }
#undef SAMPLE_W_
    if (top_k && top_p) {
        /* The shortest prefix of the sorted top k whose share of their sum
         * reaches top_p (all k if rounding keeps the sum just short). */
        double need = c->top_p * total, cum = 0.0;
        int keep = 0;
        while (keep < n) {
            cum += w[idx[keep++]];
            if (cum >= need) break;
        }
        n = keep, total = cum;
    }
    double target = u * total, cum = 0.0;
    int32_t last = idx[0];
    for (int i = 0; i < n; i++) {
        if (w[idx[i]] <= 0.0f) continue;
        cum += w[idx[i]];
        last = idx[i];
        if (target < cum) return idx[i];
    }
    return last;
}

/* ---------------------------------------------------------- generation */

wf_status wf_generate(wf_generator *g, const int32_t *prompt, int n_prompt, int max_new,
                      const wf_sampler_config *cfg, uint64_t seed, int32_t stop_token,
                      wf_generate_fn on_token, void *user, int *n_generated) {
    if (n_generated) *n_generated = 0;
    WF_TRY(wf_sampler_config_validate(cfg));
    if (n_prompt < 1)
        return wf_error(WF_ERR_INVALID,
                        "generate: the prompt is empty; give at least one token (e.g. the "
                        "tokenizer's beginning-of-text token)");
    if (max_new < 0)
        return wf_error(WF_ERR_INVALID, "generate: max_new = %d; it must be >= 0", max_new);
    if (stop_token < -1 || stop_token >= g->V)
        return wf_error(WF_ERR_RANGE,
                        "generate: stop_token = %d is outside the vocabulary [0, %d) (-1 is "
                        "none)",
                        stop_token, g->V);
    if ((long long)n_prompt + max_new > g->cap)
        return wf_error(WF_ERR_RANGE,
                        "generate: %d prompt tokens + %d new ones = %lld is more than the %d "
                        "positions of the generator (at most model.max_seq_len = %d); ask for "
                        "at most %d new tokens",
                        n_prompt, max_new, (long long)n_prompt + max_new, g->cap,
                        wf_model_get_config(g->m)->max_seq_len,
                        g->cap - n_prompt > 0 ? g->cap - n_prompt : 0);
    wf_generator_reset(g);
    const float *logits;
    WF_TRY(wf_generator_prefill(g, prompt, n_prompt, &logits));
    wf_rng rng = wf_rng_make(seed, WF_GENERATE_RNG_STREAM);
    for (int i = 0; i < max_new; i++) {
        int32_t tok = wf_sample(logits, g->V, cfg, &rng, g->sample_w, g->sample_idx);
        if (tok < 0)
            return wf_error(WF_ERR_RANGE,
                            "generate: no logit at position %d is a number above -inf (the "
                            "model produced NaN or -inf everywhere; check its parameters)",
                            g->pos - 1);
        if (tok == stop_token) break;
        if (n_generated) *n_generated = i + 1;
        if (on_token && on_token(user, tok)) break;
        if (i + 1 < max_new) WF_TRY(wf_generator_step(g, tok, &logits));
    }
    return WF_OK;
}
