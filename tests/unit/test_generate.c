/* Unit tests for src/model/generate.c: the key/value-cache logits against
 * the model's full forward at every position (GQA or not, tied or not,
 * prompts in one or several chunks), greedy generation against the argmax
 * of full forwards, the sampler's rules (greedy ties, top-k = 1 and a tiny
 * top-p are greedy, excluded tokens never drawn, frequencies matching the
 * softmax), reproducibility from a seed, and the errors; branches
 * (several continuations on one cached prefix) and rewinding against full
 * forwards of prefix + branch.
 * Greedy generation against PyTorch is tests/py/test_generate_vs_torch.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_fixture.h"
#include "weft/generate.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/rng.h"

/* Tolerance of the cache against the full forward, for each position's
 * logits: max |cached - full| / max |full| <= KV_TOL. Both are fp32 runs of
 * the same arithmetic in a different order (sgemm on one row or on T rows,
 * attention summed row by row here, in sgemm blocks there, libm's expf
 * against the kernels' polynomial), so they differ by a few ulps of the
 * logits' scale: measured 7..8 u (u = 2^-24) for the default init and
 * 21 u for init_std 0.1 (larger activations), on 1 and 2 threads. KV_TOL is
 * the tolerance tests/py/test_model_vs_torch.py allows weft's forward
 * against an exact reference (67 u). A wrong position, a missing RoPE on
 * the cached keys, a wrong kv head, or reading a stale row gives errors of
 * 1e-2 and more. */
#define KV_TOL 4e-6

static void random_tokens(int32_t *tokens, int n, int V, uint64_t seed) {
    wf_rng r = wf_rng_make(seed, 11);
    for (int i = 0; i < n; i++) tokens[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
}

static double rel_err(const float *x, const float *ref, int n) {
    double scale = 0.0, err = 0.0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i])) return INFINITY; /* fmax skips NaN */
        scale = fmax(scale, fabs(ref[i]));
        err = fmax(err, fabs((double)x[i] - ref[i]));
    }
    return scale > 0 ? err / scale : err;
}

/* The configs the cache is checked on. */
static wf_model_config kv_config(int which) {
    wf_model_config c = wf_test_tiny_config(); /* dim 64, 4 heads, 2 kv heads (GQA), tied */
    c.max_seq_len = 150;        /* longer than a prefill chunk (64) */
    switch (which) {
    case 0:
        break;
    case 1: /* no GQA, untied, odd sizes */
        c.dim = 48, c.n_heads = 3, c.n_kv_heads = 3, c.vocab_size = 97, c.ffn_hidden_dim = 80;
        c.tied_embeddings = 0, c.n_layers = 3;
        break;
    case 2: /* one kv head for all (MQA), untied, other theta */
        c.dim = 36, c.n_heads = 6, c.n_kv_heads = 1, c.vocab_size = 53, c.ffn_hidden_dim = 70;
        c.tied_embeddings = 0, c.rope_theta = 500.0;
        break;
    default: /* GQA 4:1, tied, larger init: logits far from uniform, so
              * greedy choices have clear margins */
        c.dim = 64, c.n_heads = 8, c.n_kv_heads = 2, c.vocab_size = 131, c.init_std = 0.1;
        break;
    }
    return c;
}

/* Checks the cached logits of every position of `tokens` (T) against row t
 * of the full forward, for a first prefill of `n_first` tokens followed by
 * single steps. Returns the worst relative error. */
static double check_cache(wf_test_model *f, wf_generator *g, const int32_t *tokens, int T, int n_first) {
    int V = wf_model_get_config(f->m)->vocab_size;
    WF_CHECK_OK(wf_model_forward(f->m, tokens, NULL, 1, T, NULL));
    const float *full = wf_model_logits(f->m);
    const float *logits = NULL;
    wf_generator_reset(g);
    WF_CHECK_OK(wf_generator_prefill(g, tokens, n_first, &logits));
    WF_CHECK_EQ(wf_generator_pos(g), n_first);
    double worst = rel_err(logits, full + (size_t)(n_first - 1) * V, V);
    if (!(worst <= KV_TOL))
        wf_test_fail(__FILE__, __LINE__, "position %d (end of a prefill): error %.3g > %.0e",
                     n_first - 1, worst, KV_TOL);
    for (int t = n_first; t < T; t++) {
        WF_CHECK_OK(wf_generator_step(g, tokens[t], &logits));
        double e = rel_err(logits, full + (size_t)t * V, V);
        if (!(e <= KV_TOL))
            wf_test_fail(__FILE__, __LINE__, "position %d (prefill %d): error %.3g > %.0e", t,
                         n_first, e, KV_TOL);
        worst = fmax(worst, e);
    }
    WF_CHECK_EQ(wf_generator_pos(g), T);
    return worst;
}

WF_TEST(kv_cache_logits_equal_the_full_forward) {
    for (int which = 0; which < 4; which++) {
        wf_model_config cfg = kv_config(which);
        wf_test_model f = wf_test_model_make(&cfg, 100 + (uint64_t)which, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
        const int T = cfg.max_seq_len;
        int32_t *tokens = malloc((size_t)T * sizeof *tokens);
        random_tokens(tokens, T, cfg.vocab_size, 7 + (uint64_t)which);
        wf_generator *g;
        WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
        WF_CHECK_EQ(wf_generator_capacity(g), T);
        /* one token then steps; a prompt in one chunk; in three chunks */
        const int firsts[] = {1, 5, 64, 130, T};
        double worst = 0.0;
        for (size_t i = 0; i < sizeof firsts / sizeof *firsts; i++)
            worst = fmax(worst, check_cache(&f, g, tokens, T, firsts[i]));
        WF_CHECK_TRUE(worst <= KV_TOL);
        printf("config %d: worst relative error %.3g (%.1f u)\n", which, worst,
               worst / ldexp(1.0, -24));
        /* A shorter sequence after a reset reuses the cache from position 0. */
        WF_CHECK_TRUE(check_cache(&f, g, tokens + 3, 20, 4) <= KV_TOL);
        wf_generator_destroy(g);
        free(tokens);
        wf_test_model_free(&f);
    }
}

WF_TEST(cache_of_fewer_positions_than_the_model) {
    wf_model_config cfg = kv_config(1);
    wf_test_model f = wf_test_model_make(&cfg, 5, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    int32_t tokens[12];
    random_tokens(tokens, 12, cfg.vocab_size, 9);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 12));
    WF_CHECK_EQ(wf_generator_capacity(g), 12);
    WF_CHECK_TRUE(check_cache(&f, g, tokens, 12, 3) <= KV_TOL);
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

/* Branches: each branch's logits are those of the full forward of the
 * prefix and that branch alone, at every branch position, whatever the
 * other branches; passes of 64 rows cut branches in the middle; the
 * prefix survives (the position is unchanged and the next step is right). */
WF_TEST(branches_equal_the_full_forward_of_prefix_and_branch) {
    for (int which = 0; which < 4; which++) {
        wf_model_config cfg = kv_config(which);
        const int V = cfg.vocab_size, cap = cfg.max_seq_len;
        wf_test_model f = wf_test_model_make(&cfg, 200 + (uint64_t)which, WF_RECOMPUTE_NONE, 1, cap);
        int32_t *seq = malloc((size_t)cap * sizeof *seq), *br = malloc((size_t)cap * sizeof *br);
        float *logits = malloc((size_t)cap * V * sizeof *logits);
        random_tokens(br, cap, V, 31 + (uint64_t)which);
        wf_generator *g;
        WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
        /* prefix 0 (the branches start the sequence), 5, 70 (two chunks);
         * branches of 1, 3, 70 (across a pass), 2 and 1 tokens */
        const int prefixes[] = {0, 5, 70};
        const int lens[] = {1, 3, 70, 2, 1};
        const int n_br = 5;
        double worst = 0.0;
        for (int pi = 0; pi < 3; pi++) {
            const int P = prefixes[pi];
            random_tokens(seq, cap, V, 50 + (uint64_t)pi);
            wf_generator_reset(g);
            if (P) WF_CHECK_OK(wf_generator_prefill(g, seq, P, NULL));
            WF_CHECK_OK(wf_generator_branches(g, br, lens, n_br, logits));
            WF_CHECK_EQ(wf_generator_pos(g), P);
            for (int b = 0, off = 0; b < n_br; off += lens[b++]) {
                memcpy(seq + P, br + off, (size_t)lens[b] * sizeof *seq);
                WF_CHECK_OK(wf_model_forward(f.m, seq, NULL, 1, P + lens[b], NULL));
                for (int j = 0; j < lens[b]; j++) {
                    double e = rel_err(logits + (size_t)(off + j) * V,
                                       wf_model_logits(f.m) + (size_t)(P + j) * V, V);
                    if (!(e <= KV_TOL))
                        wf_test_fail(__FILE__, __LINE__, "config %d prefix %d branch %d token %d: error %.3g",
                                     which, P, b, j, e);
                    worst = fmax(worst, e);
                }
            }
            /* The prefix is intact: a step after it is the full forward's. */
            if (P) {
                const float *next;
                seq[P] = 7;
                WF_CHECK_OK(wf_generator_step(g, seq[P], &next));
                WF_CHECK_OK(wf_model_forward(f.m, seq, NULL, 1, P + 1, NULL));
                WF_CHECK_TRUE(rel_err(next, wf_model_logits(f.m) + (size_t)P * V, V) <= KV_TOL);
            }
        }
        printf("config %d: branches' worst relative error %.3g (%.1f u)\n", which, worst, worst / ldexp(1.0, -24));
        wf_generator_destroy(g);
        free(logits);
        free(br);
        free(seq);
        wf_test_model_free(&f);
    }
}

/* Rewinding keeps a prefix: a prefill after it continues as if the
 * rewound tokens had never been there. */
WF_TEST(rewinding_keeps_the_prefix) {
    wf_model_config cfg = kv_config(1);
    const int V = cfg.vocab_size;
    wf_test_model f = wf_test_model_make(&cfg, 21, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    int32_t a[40], b[40];
    random_tokens(a, 40, V, 1);
    memcpy(b, a, 25 * sizeof *a);
    random_tokens(b + 25, 15, V, 2);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
    const float *logits;
    WF_CHECK_OK(wf_generator_prefill(g, a, 40, &logits));
    WF_CHECK_ERR(wf_generator_rewind(g, 41), WF_ERR_RANGE, "rewind to position 41");
    WF_CHECK_ERR(wf_generator_rewind(g, -1), WF_ERR_RANGE, "rewind to position -1");
    WF_CHECK_OK(wf_generator_rewind(g, 25));
    WF_CHECK_EQ(wf_generator_pos(g), 25);
    WF_CHECK_OK(wf_generator_prefill(g, b + 25, 15, &logits));
    WF_CHECK_OK(wf_model_forward(f.m, b, NULL, 1, 40, NULL));
    WF_CHECK_TRUE(rel_err(logits, wf_model_logits(f.m) + 39 * (size_t)V, V) <= KV_TOL);
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

WF_TEST(branches_that_do_not_fit_or_hold_bad_tokens_are_refused) {
    wf_model_config cfg = kv_config(0);
    const int V = cfg.vocab_size;
    wf_test_model f = wf_test_model_make(&cfg, 22, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 10));
    int32_t tokens[12];
    random_tokens(tokens, 12, V, 3);
    float *logits = malloc(12 * (size_t)V * sizeof *logits);
    WF_CHECK_OK(wf_generator_prefill(g, tokens, 6, NULL));
    int lens[3] = {2, 3, 0};
    WF_CHECK_ERR(wf_generator_branches(g, tokens, lens, 2, logits), WF_ERR_RANGE,
                 "branches of 5 tokens in all after position 6 would pass the cache's 10 positions");
    WF_CHECK_ERR(wf_generator_branches(g, tokens, lens, 3, logits), WF_ERR_INVALID, "branch 2 has 0 tokens");
    WF_CHECK_ERR(wf_generator_branches(g, tokens, lens, 0, logits), WF_ERR_INVALID, "0 branches");
    int32_t bad[2] = {1, V};
    lens[0] = 2;
    WF_CHECK_ERR(wf_generator_branches(g, bad, lens, 1, logits), WF_ERR_RANGE,
                 "branch token 1 = 512 is outside the vocabulary [0, 512)");
    lens[0] = 4;
    WF_CHECK_OK(wf_generator_branches(g, tokens + 6, lens, 1, logits));
    WF_CHECK_EQ(wf_generator_pos(g), 6);
    free(logits);
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

/* The step's thread count: clamped, restored after each step, and the
 * logits the same to rounding on one thread or all. */
WF_TEST(step_threads_are_clamped_restored_and_change_only_rounding) {
    wf_model_config cfg = kv_config(1);
    wf_test_model f = wf_test_model_make(&cfg, 8, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    int32_t tokens[40];
    random_tokens(tokens, 40, cfg.vocab_size, 10);
    const int all = wf_kern_threads();
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 40));
    WF_CHECK_EQ(wf_generator_step_threads(g), all);
    wf_generator_set_step_threads(g, 0);
    WF_CHECK_EQ(wf_generator_step_threads(g), 1);
    wf_generator_set_step_threads(g, all + 5);
    WF_CHECK_EQ(wf_generator_step_threads(g), all);
    for (int st = 1; st <= all; st++) {
        wf_generator_set_step_threads(g, st);
        WF_CHECK_TRUE(check_cache(&f, g, tokens, 40, 3) <= KV_TOL);
        WF_CHECK_EQ(wf_kern_threads(), all); /* the caller's setting is back */
    }
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

/* Collects generated tokens through wf_generate's callback. */
typedef struct {
    int32_t buf[256];
    int n;
    int stop_after; /* return nonzero after this many; 0: never */
} collector;

static int collect(void *user, int32_t token) {
    collector *c = user;
    if (c->n < 256) c->buf[c->n] = token;
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

static int32_t argmax_ref(const float *x, int n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

/* Greedy generation equals taking the argmax of a full forward over the
 * growing sequence: the definition, without any cache. The comparison is
 * exact because at every step the two best logits of the full forward are
 * further apart than twice the cache's tolerance (checked), so no rounding
 * within KV_TOL can swap them. */
WF_TEST(greedy_generation_follows_the_full_forward_argmax) {
    wf_model_config cfg = kv_config(3);
    wf_test_model f = wf_test_model_make(&cfg, 21, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    int32_t seq[150];
    random_tokens(seq, 4, cfg.vocab_size, 3);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
    wf_sampler_config greedy = {0.0, 0, 1.0};
    collector out = {.n = 0};
    int n_gen = -1;
    WF_CHECK_OK(wf_generate(g, seq, 4, 100, &greedy, 1, -1, collect, &out, &n_gen));
    WF_CHECK_EQ(n_gen, 100);
    WF_CHECK_EQ(out.n, 100);
    WF_CHECK_EQ(wf_generator_pos(g), 4 + 99); /* the last token is not fed */
    int T = 4;
    for (int i = 0; i < 100; i++) {
        WF_CHECK_OK(wf_model_forward(f.m, seq, NULL, 1, T, NULL));
        const float *row = wf_model_logits(f.m) + (size_t)(T - 1) * cfg.vocab_size;
        int32_t best = argmax_ref(row, cfg.vocab_size);
        double scale = 0.0, second = -INFINITY;
        for (int v = 0; v < cfg.vocab_size; v++) {
            scale = fmax(scale, fabs(row[v]));
            if (v != best) second = fmax(second, row[v]);
        }
        if (!(row[best] - second > 2 * KV_TOL * scale))
            wf_test_fail(__FILE__, __LINE__, "step %d: margin %.3g too small to compare greedy "
                         "choices exactly; pick another seed", i, row[best] - second);
        if (out.buf[i] != best)
            wf_test_fail(__FILE__, __LINE__, "token %d: generated %d, full-forward argmax %d", i,
                         out.buf[i], best);
        seq[T++] = best;
    }
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

/* ------------------------------------------------------------- sampler */

static const wf_sampler_config GREEDY = {0.0, 0, 1.0};

WF_TEST(greedy_takes_the_argmax_and_the_lowest_id_on_ties) {
    float scratch[8];
    int32_t idx[8];
    wf_rng r = wf_rng_make(1, 1);
    float a[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
    WF_CHECK_EQ(wf_sample(a, 6, &GREEDY, &r, scratch, idx), 1);
    WF_CHECK_EQ(r.offset, 0); /* greedy draws nothing */
    float b[4] = {NAN, -3.0f, NAN, -2.5f}; /* NaN is never chosen */
    WF_CHECK_EQ(wf_sample(b, 4, &GREEDY, &r, scratch, idx), 3);
    float c[3] = {-INFINITY, -INFINITY, NAN}; /* nothing to choose */
    WF_CHECK_EQ(wf_sample(c, 3, &GREEDY, &r, scratch, idx), -1);
    wf_sampler_config t1 = wf_sampler_config_default();
    WF_CHECK_EQ(wf_sample(c, 3, &t1, &r, scratch, idx), -1);
    float d[4] = {1.0f, INFINITY, 3.0f, INFINITY}; /* +inf wins, lowest id */
    WF_CHECK_EQ(wf_sample(d, 4, &t1, &r, scratch, idx), 1);
    /* A -inf logit is never drawn at any temperature. */
    float e[3] = {0.0f, -INFINITY, 0.0f};
    wf_sampler_config hot = {50.0, 0, 1.0};
    for (int i = 0; i < 1000; i++) WF_CHECK_TRUE(wf_sample(e, 3, &hot, &r, scratch, idx) != 1);
}

static void random_logits(float *x, int n, double scale, wf_rng *r) {
    for (int i = 0; i < n; i++) x[i] = (float)(scale * wf_rng_normal(r));
}

WF_TEST(top_k_one_and_a_tiny_top_p_are_greedy) {
    enum { V = 300 };
    float x[V], scratch[V];
    int32_t idx[V];
    wf_rng data = wf_rng_make(5, 2), r = wf_rng_make(6, 3);
    const double temps[] = {0.3, 1.0, 7.0};
    for (int trial = 0; trial < 200; trial++) {
        random_logits(x, V, 2.0, &data);
        if (trial % 4 == 0) x[trial % V] = x[(trial * 7 + 1) % V] = 50.0f; /* a tie at the top */
        int32_t want = wf_sample(x, V, &GREEDY, &r, scratch, idx);
        for (size_t t = 0; t < 3; t++) {
            wf_sampler_config k1 = {temps[t], 1, 1.0}, p0 = {temps[t], 0, 1e-9},
                              pz = {temps[t], 0, 0.0}, both = {temps[t], 5, 1e-9};
            WF_CHECK_EQ(wf_sample(x, V, &k1, &r, scratch, idx), want);
            WF_CHECK_EQ(wf_sample(x, V, &p0, &r, scratch, idx), want);
            WF_CHECK_EQ(wf_sample(x, V, &pz, &r, scratch, idx), want);
            WF_CHECK_EQ(wf_sample(x, V, &both, &r, scratch, idx), want);
        }
    }
}

/* The kept set by the rules, computed the slow way: rank every token by
 * (logit desc, id asc) into order (V), probabilities in double into prob.
 * keep[v] = 1 if kept; returns how many are, order[0 .. n) in rank. */
static int kept_set_ref_ordered(const float *x, int V, const wf_sampler_config *c, int *keep,
                                double *prob, int32_t *order) {
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++) /* selection sort: obviously right */
        for (int j = i + 1; j < V; j++)
            if (x[order[j]] > x[order[i]] || (x[order[j]] == x[order[i]] && order[j] < order[i])) {
                int32_t t = order[i];
                order[i] = order[j], order[j] = t;
            }
    double mx = x[order[0]], sum = 0.0;
    for (int i = 0; i < V; i++) sum += prob[i] = exp((x[i] - mx) / c->temperature);
    for (int i = 0; i < V; i++) prob[i] /= sum;
    int n = c->top_k > 0 && c->top_k < V ? c->top_k : V;
    double mass = 0.0;
    for (int i = 0; i < n; i++) mass += prob[order[i]];
    if (c->top_p < 1.0) {
        double cum = 0.0;
        int k = 0;
        while (k < n && cum < c->top_p * mass - 1e-12) cum += prob[order[k++]];
        n = k > 0 ? k : 1;
    }
    memset(keep, 0, (size_t)V * sizeof *keep);
    for (int i = 0; i < n; i++) keep[order[i]] = 1;
    return n;
}

static void kept_set_ref(const float *x, int V, const wf_sampler_config *c, int *keep,
                         double *prob) {
    int32_t *order = malloc((size_t)V * sizeof *order);
    kept_set_ref_ordered(x, V, c, keep, prob, order);
    free(order);
}

WF_TEST(top_k_and_top_p_never_draw_an_excluded_token) {
    enum { V = 64 };
    float x[V], scratch[V];
    int32_t idx[V];
    int keep[V], hit[V];
    double prob[V];
    wf_rng data = wf_rng_make(8, 2), r = wf_rng_make(9, 3);
    const wf_sampler_config cfgs[] = {{1.0, 5, 1.0},  {0.7, 0, 0.5},  {2.0, 0, 0.9},
                                      {1.0, 10, 0.6}, {0.5, 63, 0.95}, {3.0, 2, 0.99}};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        const wf_sampler_config *c = &cfgs[ci];
        for (int trial = 0; trial < 20; trial++) {
            random_logits(x, V, 1.5, &data);
            kept_set_ref(x, V, c, keep, prob);
            memset(hit, 0, sizeof hit);
            for (int i = 0; i < 2000; i++) {
                int32_t t = wf_sample(x, V, c, &r, scratch, idx);
                WF_CHECK_TRUE(t >= 0 && t < V);
                if (!keep[t])
                    wf_test_fail(__FILE__, __LINE__,
                                 "config %zu trial %d: drew %d, outside the kept set", ci, trial,
                                 t);
                hit[t]++;
            }
            /* and the kept set is all reachable: every kept token of
             * probability >= 1% (renormalised) shows up in 2000 draws */
            double mass = 0.0;
            for (int v = 0; v < V; v++) mass += keep[v] ? prob[v] : 0.0;
            for (int v = 0; v < V; v++)
                if (keep[v] && prob[v] / mass >= 0.01) WF_CHECK_TRUE(hit[v] > 0);
        }
    }
}

/* Pearson's chi-square of `n` draws against probabilities p (k cells). */
static double chi_square(const int *count, const double *p, int k, int n) {
    double chi = 0.0;
    for (int i = 0; i < k; i++) {
        double e = p[i] * n;
        if (e > 0) chi += (count[i] - e) * (count[i] - e) / e;
        else if (count[i] > 0) return INFINITY;
    }
    return chi;
}

/* The draw itself: with u the draw's uniform, the token is the first at
 * which the running sum of the kept probabilities (id order when top-k and
 * top-p are off, rank order otherwise) passes u times their sum. Checked
 * draw by draw against the reference, skipping the rare u that falls
 * within 1e-6 of a boundary (where fp32 and double may round apart). */
WF_TEST(each_draw_walks_the_kept_tokens_in_the_documented_order) {
    enum { V = 40 };
    float x[V], scratch[V];
    int32_t idx[V], order[V];
    int keep[V];
    double prob[V];
    wf_rng data = wf_rng_make(12, 2), r = wf_rng_make(13, 3);
    const wf_sampler_config cfgs[] = {{1.0, 0, 1.0}, {0.8, 7, 1.0}, {1.3, 0, 0.7},
                                      {1.0, 12, 0.8}};
    int compared = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        const wf_sampler_config *c = &cfgs[ci];
        for (int trial = 0; trial < 10; trial++) {
            random_logits(x, V, 1.5, &data);
            int n = kept_set_ref_ordered(x, V, c, keep, prob, order);
            if (c->top_k == 0 && c->top_p >= 1.0) /* id order */
                for (int i = 0; i < V; i++) order[i] = i;
            double mass = 0.0;
            for (int i = 0; i < n; i++) mass += prob[order[i]];
            for (int i = 0; i < 500; i++) {
                wf_rng peek = r;
                double target = wf_rng_uniform_double(&peek) * mass, cum = 0.0, gap = 1.0;
                int32_t want = -1;
                for (int j = 0; j < n; j++) {
                    cum += prob[order[j]];
                    gap = fmin(gap, fabs(cum - target));
                    if (want < 0 && target < cum) want = order[j];
                }
                int32_t got = wf_sample(x, V, c, &r, scratch, idx);
                if (gap < 1e-6 * mass) continue;
                compared++;
                if (got != want)
                    wf_test_fail(__FILE__, __LINE__, "config %zu trial %d draw %d: %d, expected %d",
                                 ci, trial, i, got, want);
            }
        }
    }
    WF_CHECK_TRUE(compared > 19000); /* of 20000 */
}

/* A nucleus that reaches into a flat tail: one token holds 99% and 63
 * tied ones share the rest. top_p 0.995 needs the big one and the 32
 * lowest-id tail tokens (ties go to the lower id), which the cheap
 * pre-filter of wf_sample must not drop: each of them is only 2x above
 * (1 - p) / vocab. */
WF_TEST(a_nucleus_can_reach_into_a_flat_tail) {
    enum { V = 64, N = 100000 };
    float x[V], scratch[V];
    int32_t idx[V];
    for (int i = 0; i < V; i++) x[i] = 0.0f;
    x[20] = (float)log(0.99 * 63 / 0.01);
    const wf_sampler_config c = {1.0, 0, 0.995};
    int keep[V], count[V] = {0};
    double prob[V];
    kept_set_ref(x, V, &c, keep, prob);
    int n_keep = 0;
    for (int i = 0; i < V; i++) n_keep += keep[i];
    WF_CHECK_EQ(n_keep, 1 + 32);
    WF_CHECK_TRUE(keep[20] && keep[0] && keep[32] && !keep[33]); /* ids 0..32 but 20, and 20 */
    wf_rng r = wf_rng_make(3, 4);
    for (int i = 0; i < N; i++) count[wf_sample(x, V, &c, &r, scratch, idx)]++;
    double mass = 0.0;
    for (int v = 0; v < V; v++) mass += keep[v] ? prob[v] : 0.0;
    for (int v = 0; v < V; v++) prob[v] = keep[v] ? prob[v] / mass : 0.0;
    double chi = chi_square(count, prob, V, N);
    if (!(chi < 120.0)) /* 32 degrees of freedom: P(chi > 120) < 1e-11 */
        wf_test_fail(__FILE__, __LINE__, "chi-square %.1f >= 120", chi);
}


/* Frequencies of 200000 draws match softmax(logits / temperature) (after
 * top-k / top-p, renormalised). With k <= 6 cells (5 degrees of freedom)
 * the chi-square exceeds 40 with probability below 1e-7 for a correct
 * sampler, while a sampler that ignored the temperature, or drew from the
 * wrong cell, gives values in the thousands. The seed is fixed, so the run
 * is deterministic anyway. */
WF_TEST(sampled_frequencies_match_the_softmax) {
    enum { V = 6, N = 200000 };
    const float x[V] = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f, 0.0f};
    const wf_sampler_config cfgs[] = {{1.0, 0, 1.0}, {0.5, 0, 1.0}, {2.5, 0, 1.0},
                                      {1.0, 3, 1.0}, {1.0, 0, 0.8}, {1.5, 4, 0.9}};
    float scratch[V];
    int32_t idx[V];
    int keep[V];
    double prob[V];
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        kept_set_ref(x, V, &cfgs[ci], keep, prob);
        double mass = 0.0;
        for (int v = 0; v < V; v++) mass += keep[v] ? prob[v] : 0.0;
        for (int v = 0; v < V; v++) prob[v] = keep[v] ? prob[v] / mass : 0.0;
        int count[V] = {0};
        wf_rng r = wf_rng_make(1234, ci);
        for (int i = 0; i < N; i++) count[wf_sample(x, V, &cfgs[ci], &r, scratch, idx)]++;
        WF_CHECK_EQ(r.offset, N); /* one draw per sample */
        double chi = chi_square(count, prob, V, N);
        if (!(chi < 40.0))
            wf_test_fail(__FILE__, __LINE__, "config %zu: chi-square %.1f >= 40", ci, chi);
    }
}

WF_TEST(the_same_seed_gives_the_same_text) {
    wf_model_config cfg = kv_config(0);
    wf_test_model f = wf_test_model_make(&cfg, 3, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
    int32_t prompt[3] = {1, 2, 3};
    const wf_sampler_config c = {0.9, 40, 0.95};
    collector a = {.n = 0}, b = {.n = 0}, d = {.n = 0};
    WF_CHECK_OK(wf_generate(g, prompt, 3, 120, &c, 77, -1, collect, &a, NULL));
    WF_CHECK_OK(wf_generate(g, prompt, 3, 120, &c, 77, -1, collect, &b, NULL));
    WF_CHECK_OK(wf_generate(g, prompt, 3, 120, &c, 78, -1, collect, &d, NULL));
    WF_CHECK_EQ(a.n, 120);
    WF_CHECK_TRUE(memcmp(a.buf, b.buf, sizeof(int32_t) * 120) == 0);
    WF_CHECK_TRUE(memcmp(a.buf, d.buf, sizeof(int32_t) * 120) != 0);
    /* The documented stream: wf_sample with wf_rng_make(seed,
     * WF_GENERATE_RNG_STREAM) over the generator's logits gives the same. */
    wf_rng r = wf_rng_make(77, WF_GENERATE_RNG_STREAM);
    float *scratch = malloc((size_t)cfg.vocab_size * sizeof *scratch);
    int32_t *idx = malloc((size_t)cfg.vocab_size * sizeof *idx);
    const float *logits;
    wf_generator_reset(g);
    WF_CHECK_OK(wf_generator_prefill(g, prompt, 3, &logits));
    for (int i = 0; i < 120; i++) {
        int32_t t = wf_sample(logits, cfg.vocab_size, &c, &r, scratch, idx);
        WF_CHECK_EQ(t, a.buf[i]);
        if (i + 1 < 120) WF_CHECK_OK(wf_generator_step(g, t, &logits));
    }
    free(scratch);
    free(idx);
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

WF_TEST(generation_stops_at_the_stop_token_or_when_the_callback_says) {
    wf_model_config cfg = kv_config(3);
    wf_test_model f = wf_test_model_make(&cfg, 21, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    wf_generator *g;
    WF_CHECK_OK(wf_generator_create(&g, f.m, 0));
    int32_t prompt[2] = {5, 6};
    collector all = {.n = 0};
    WF_CHECK_OK(wf_generate(g, prompt, 2, 50, &GREEDY, 0, -1, collect, &all, NULL));
    /* Stop at the 10th token's value: the first occurrence ends it. */
    int32_t stop = all.buf[9];
    int first = 0;
    while (all.buf[first] != stop) first++;
    collector some = {.n = 0};
    int n_gen = -1;
    WF_CHECK_OK(wf_generate(g, prompt, 2, 50, &GREEDY, 0, stop, collect, &some, &n_gen));
    WF_CHECK_EQ(n_gen, first);
    WF_CHECK_EQ(some.n, first);
    WF_CHECK_TRUE(memcmp(some.buf, all.buf, sizeof(int32_t) * (size_t)first) == 0);
    collector three = {.n = 0, .stop_after = 3};
    WF_CHECK_OK(wf_generate(g, prompt, 2, 50, &GREEDY, 0, -1, collect, &three, &n_gen));
    WF_CHECK_EQ(n_gen, 3);
    WF_CHECK_EQ(three.n, 3);
    /* max_new = 0 generates nothing */
    WF_CHECK_OK(wf_generate(g, prompt, 2, 0, &GREEDY, 0, -1, NULL, NULL, &n_gen));
    WF_CHECK_EQ(n_gen, 0);
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

/* -------------------------------------------------------------- errors */

WF_TEST(overflowing_the_cache_is_an_error_that_changes_nothing) {
    wf_model_config cfg = kv_config(0);
    wf_test_model f = wf_test_model_make(&cfg, 3, WF_RECOMPUTE_NONE, 1, cfg.max_seq_len);
    wf_generator *g;
    WF_CHECK_ERR(wf_generator_create(&g, f.m, cfg.max_seq_len + 1), WF_ERR_RANGE,
                 "model.max_seq_len = 150");
    WF_CHECK_OK(wf_generator_create(&g, f.m, 10));
    int32_t tokens[12];
    random_tokens(tokens, 12, cfg.vocab_size, 4);
    const float *logits;
    WF_CHECK_OK(wf_generator_prefill(g, tokens, 8, &logits));
    float saved[512];
    memcpy(saved, logits, sizeof(float) * (size_t)cfg.vocab_size);
    WF_CHECK_ERR(wf_generator_prefill(g, tokens, 3, &logits), WF_ERR_RANGE,
                 "3 more tokens at position 8 would pass the cache's 10 positions");
    WF_CHECK_EQ(wf_generator_pos(g), 8);
    int32_t bad[2] = {1, cfg.vocab_size};
    WF_CHECK_ERR(wf_generator_prefill(g, bad, 2, &logits), WF_ERR_RANGE,
                 "token 1 (position 9) = 512 is outside the vocabulary [0, 512)");
    WF_CHECK_ERR(wf_generator_step(g, -1, &logits), WF_ERR_RANGE, "outside the vocabulary");
    WF_CHECK_ERR(wf_generator_prefill(g, tokens, 0, &logits), WF_ERR_INVALID, "at least one");
    WF_CHECK_EQ(wf_generator_pos(g), 8);
    /* The failed calls left the cache as it was: the next step is right. */
    WF_CHECK_OK(wf_generator_step(g, tokens[8], &logits));
    WF_CHECK_OK(wf_model_forward(f.m, tokens, NULL, 1, 9, NULL));
    WF_CHECK_TRUE(rel_err(logits, wf_model_logits(f.m) + 8 * (size_t)cfg.vocab_size,
                          cfg.vocab_size) <= KV_TOL);
    WF_CHECK_OK(wf_generator_step(g, tokens[9], &logits));
    WF_CHECK_ERR(wf_generator_step(g, tokens[10], &logits), WF_ERR_RANGE,
                 "at position 10 would pass the cache's 10 positions");
    wf_generator_reset(g);
    WF_CHECK_OK(wf_generator_prefill(g, tokens, 10, &logits));
    (void)saved;

    wf_sampler_config c = GREEDY;
    int n_gen = -1;
    WF_CHECK_ERR(wf_generate(g, tokens, 4, 7, &c, 0, -1, NULL, NULL, &n_gen), WF_ERR_RANGE,
                 "ask for at most 6 new tokens");
    WF_CHECK_EQ(n_gen, 0);
    WF_CHECK_OK(wf_generate(g, tokens, 4, 6, &c, 0, -1, NULL, NULL, &n_gen));
    WF_CHECK_EQ(n_gen, 6);
    WF_CHECK_ERR(wf_generate(g, tokens, 0, 6, &c, 0, -1, NULL, NULL, NULL), WF_ERR_INVALID,
                 "prompt is empty");
    WF_CHECK_ERR(wf_generate(g, tokens, 2, 3, &c, 0, 512, NULL, NULL, NULL), WF_ERR_RANGE,
                 "stop_token = 512");
    c.temperature = -1;
    WF_CHECK_ERR(wf_generate(g, tokens, 2, 3, &c, 0, -1, NULL, NULL, NULL), WF_ERR_CONFIG,
                 "temperature = -1");
    wf_generator_destroy(g);
    wf_test_model_free(&f);
}

WF_TEST(sampler_configs_are_checked) {
    wf_sampler_config c = wf_sampler_config_default();
    WF_CHECK_OK(wf_sampler_config_validate(&c));
    c.temperature = NAN;
    WF_CHECK_ERR(wf_sampler_config_validate(&c), WF_ERR_CONFIG, "temperature = nan");
    c = wf_sampler_config_default();
    c.top_k = -2;
    WF_CHECK_ERR(wf_sampler_config_validate(&c), WF_ERR_CONFIG, "top_k = -2");
    c = wf_sampler_config_default();
    c.top_p = 1.5;
    WF_CHECK_ERR(wf_sampler_config_validate(&c), WF_ERR_CONFIG, "top_p = 1.5");
    c.top_p = 0.0;
    WF_CHECK_OK(wf_sampler_config_validate(&c));
}
