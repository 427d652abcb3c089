/* Unit tests for src/optim: the learning-rate schedules at their corners,
 * the clip coefficient (with clip_grad_norm_'s 1e-6), which tensors decay,
 * refusal of non-finite gradients with nothing changed, a two-step AdamW
 * checked against values worked out by hand, and the same bits on any
 * thread count. Ten steps of the whole model against torch.optim.AdamW are
 * tests/py/test_optim_vs_torch.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/kernels.h"
#include "weft/optim.h"
#include "weft/rng.h"

typedef struct {
    wf_arena *arena;
    wf_model *m;
    wf_adamw *o;
} fixture;

/* dim 2, one layer, one head, vocab 3, hidden 2: 46 parameters, 40 tied. */
static wf_model_config micro(int tied) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    c.dim = 2, c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.vocab_size = 3;
    c.ffn_hidden_dim = 2, c.max_seq_len = 4, c.tied_embeddings = tied;
    return c;
}

static fixture make(const wf_model_config *mc, const wf_adamw_config *oc, uint64_t seed) {
    fixture f = {0};
    WF_CHECK_OK(wf_arena_create(&f.arena, 1 << 20));
    WF_CHECK_OK(wf_model_create(&f.m, mc, f.arena));
    wf_model_init(f.m, seed);
    WF_CHECK_OK(wf_adamw_create(&f.o, oc, f.m, f.arena));
    return f;
}

static void release(fixture *f) {
    wf_adamw_destroy(f->o);
    wf_model_destroy(f->m);
    wf_arena_destroy(f->arena);
}

static size_t offset_of(wf_model *m, const char *name) {
    const wf_tensor_info *t = wf_model_find_tensor(m, name);
    if (!t) wf_test_fail(__FILE__, __LINE__, "no tensor %s", name);
    return t->offset;
}

static void random_grads(wf_model *m, uint64_t seed, float scale) {
    wf_rng r = wf_rng_make(seed, 11);
    float *g = wf_model_grads(m);
    for (size_t i = 0; i < wf_model_num_params(m); i++)
        g[i] = scale * (float)(2 * wf_rng_uniform_double(&r) - 1);
}

/* ------------------------------------------------------------ schedules */

WF_TEST(lr_warmup_then_cosine_to_the_floor) {
    wf_lr_schedule s = {.kind = WF_LR_COSINE, .lr = 1e-3, .min_lr = 1e-4, .warmup = 10,
                        .total = 110};
    WF_CHECK_NEAR(wf_lr_at(&s, 0), 1e-4, 1e-15);  /* lr * 1/10 */
    WF_CHECK_NEAR(wf_lr_at(&s, 4), 5e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 9), 1e-3, 1e-15);  /* last warmup step is the peak */
    WF_CHECK_NEAR(wf_lr_at(&s, 10), 1e-3, 1e-15); /* p = 0 */
    /* p = 1/4: 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 */
    WF_CHECK_NEAR(wf_lr_at(&s, 35), 1e-4 + 9e-4 * 0.85355339059327373, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 60), 5.5e-4, 1e-15); /* midpoint: halfway */
    WF_CHECK_NEAR(wf_lr_at(&s, 110), 1e-4, 1e-15);  /* the floor at total */
    WF_CHECK_NEAR(wf_lr_at(&s, 5000), 1e-4, 1e-15); /* and past it */
    for (uint64_t t = 10; t < 110; t++) WF_CHECK_TRUE(wf_lr_at(&s, t + 1) <= wf_lr_at(&s, t));
    /* No warmup: the first step runs at the peak. */
    s.warmup = 0;
    WF_CHECK_NEAR(wf_lr_at(&s, 0), 1e-3, 1e-15);
    /* Warmup as long as the run: no decay span, the floor after warmup. */
    s.warmup = 10, s.total = 5;
    WF_CHECK_NEAR(wf_lr_at(&s, 9), 1e-3, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 10), 1e-4, 1e-15);
}

WF_TEST(lr_wsd_plateau_then_linear_decay) {
    wf_lr_schedule s = {.kind = WF_LR_WSD, .lr = 1e-3, .min_lr = 0, .warmup = 10, .total = 100,
                        .decay_frac = 0.2};
    WF_CHECK_NEAR(wf_lr_at(&s, 0), 1e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 10), 1e-3, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 50), 1e-3, 1e-15); /* plateau */
    WF_CHECK_NEAR(wf_lr_at(&s, 80), 1e-3, 1e-15); /* decay starts at 100 - 0.2 * 100 */
    WF_CHECK_NEAR(wf_lr_at(&s, 85), 7.5e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 90), 5e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 100), 0, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 101), 0, 1e-15);
    s.min_lr = 1e-4;
    WF_CHECK_NEAR(wf_lr_at(&s, 90), 5.5e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 1000), 1e-4, 1e-15);
    s.decay_frac = 0; /* no decay: the peak until total, then the floor */
    WF_CHECK_NEAR(wf_lr_at(&s, 99), 1e-3, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 100), 1e-4, 1e-15);
}

WF_TEST(lr_constant_and_parsing) {
    wf_lr_schedule s = {.kind = WF_LR_CONSTANT, .lr = 2e-3, .min_lr = 1e-5, .warmup = 5,
                        .total = 10};
    WF_CHECK_NEAR(wf_lr_at(&s, 0), 4e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 4), 2e-3, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 7), 2e-3, 1e-15);
    WF_CHECK_NEAR(wf_lr_at(&s, 1000000000), 2e-3, 1e-15);
    WF_CHECK_EQ(wf_lr_parse_kind("cosine"), WF_LR_COSINE);
    WF_CHECK_EQ(wf_lr_parse_kind("wsd"), WF_LR_WSD);
    WF_CHECK_EQ(wf_lr_parse_kind("constant"), WF_LR_CONSTANT);
    WF_CHECK_EQ(wf_lr_parse_kind("linear"), -1);
    WF_CHECK_EQ(wf_lr_parse_kind(NULL), -1);
    WF_CHECK_STREQ(wf_lr_kind_name(WF_LR_WSD), "wsd");
    WF_CHECK_OK(wf_lr_validate(&s));
    s.min_lr = 1;
    WF_CHECK_ERR(wf_lr_validate(&s), WF_ERR_CONFIG, "optim.min_lr = 1");
    s.min_lr = 0, s.lr = 0;
    WF_CHECK_ERR(wf_lr_validate(&s), WF_ERR_CONFIG, "optim.lr = 0");
    s.lr = 1e-3, s.kind = WF_LR_WSD, s.decay_frac = 1.5;
    WF_CHECK_ERR(wf_lr_validate(&s), WF_ERR_CONFIG, "optim.decay_frac = 1.5");
}

WF_TEST(lr_in_tokens) {
    /* Steps: wf_lr_at_units(s, step, 1) is wf_lr_at(s, step), bit for bit. */
    wf_lr_kind kinds[3] = {WF_LR_COSINE, WF_LR_WSD, WF_LR_CONSTANT};
    for (int k = 0; k < 3; k++) {
        wf_lr_schedule s = {.kind = kinds[k], .lr = 1e-3, .min_lr = 1e-4, .warmup = 7, .total = 53,
                            .decay_frac = 0.3};
        for (uint64_t t = 0; t < 70; t++) WF_CHECK_TRUE(wf_lr_at_units(&s, t, 1) == wf_lr_at(&s, t));
    }
    /* Tokens, with a batch of 256 tokens every step: the same rates as in
     * steps (to rounding), warmup and total scaled by 256. */
    wf_lr_schedule st = {.kind = WF_LR_COSINE, .lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .total = 110};
    wf_lr_schedule tk = st;
    tk.warmup *= 256, tk.total *= 256;
    for (uint64_t t = 0; t < 120; t++) WF_CHECK_NEAR(wf_lr_at_units(&tk, t * 256, 256), wf_lr_at(&st, t), 1e-18);
    /* A step that crosses the end of warmup runs at the peak, not above it;
     * one that ends before it at its end's fraction. */
    tk.warmup = 1000;
    WF_CHECK_NEAR(wf_lr_at_units(&tk, 0, 250), 2.5e-4, 1e-18);
    WF_CHECK_NEAR(wf_lr_at_units(&tk, 900, 250), 1e-3, 1e-18);
    WF_CHECK_NEAR(wf_lr_at_units(&tk, 1000, 250), 1e-3, 1e-18); /* p = 0 of the decay */
    /* The decay counts the tokens before the step: halfway at the middle. */
    WF_CHECK_NEAR(wf_lr_at_units(&tk, 1000 + (28160 - 1000) / 2, 9999), 5.5e-4, 1e-15);
    WF_CHECK_NEAR(wf_lr_at_units(&tk, 28160, 1), 1e-4, 1e-15);
}

/* ------------------------------------------------------------- the step */

WF_TEST(two_steps_match_hand_computed_adamw) {
    /* lr 0.1, betas (0.9, 0.99), eps 1e-8, weight decay 0.1, no clipping.
     * Three parameters, worked out by hand (in double) from
     *   p -= lr wd p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
     *   p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps):
     * a norm weight (no decay): p 1, g 0.5 then -0.25;
     *   step 1: m .05, v .0025, p = 1 - .1 * .5 / (.5 + 1e-8) = 0.900000002
     *   step 2: m .02, v .0031, p = 0.87333005977
     * a q_proj weight (decay): p -0.5, g -2 then 1;
     *   step 1: p = -.5 * .99 + .1 = -0.3950000005;  step 2: -0.36438005776
     * a down_proj weight (decay): p .25, g 0 then 3;
     *   step 1: decay only, .2475;  step 2: 0.17077902151 */
    wf_model_config mc = micro(0);
    wf_adamw_config oc = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    fixture f = make(&mc, &oc, 1);
    float *p = wf_model_params(f.m), *g = wf_model_grads(f.m);
    size_t a = offset_of(f.m, "model.norm.weight") + 1;
    size_t b = offset_of(f.m, "model.layers.0.self_attn.q_proj.weight") + 2;
    size_t c = offset_of(f.m, "model.layers.0.mlp.down_proj.weight") + 3;
    p[a] = 1.0f, p[b] = -0.5f, p[c] = 0.25f;
    float before[64];
    size_t n = wf_model_num_params(f.m);
    WF_CHECK_TRUE(n <= 64);
    memcpy(before, p, n * sizeof *p);

    wf_model_zero_grad(f.m);
    g[a] = 0.5f, g[b] = -2.0f, g[c] = 0.0f;
    double norm = 0;
    WF_CHECK_OK(wf_adamw_step(f.o, 0.1, &norm));
    WF_CHECK_NEAR(norm, sqrt(0.25 + 4.0), 1e-12);
    WF_CHECK_EQ(wf_adamw_steps(f.o), 1);
    WF_CHECK_NEAR(p[a], 0.900000002, 1e-7);
    WF_CHECK_NEAR(p[b], -0.3950000005, 1e-7);
    WF_CHECK_NEAR(p[c], 0.2475, 1e-7);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[a], 0.05, 1e-8);
    WF_CHECK_NEAR(wf_adamw_v(f.o)[b], 0.04, 1e-8);

    g[a] = -0.25f, g[b] = 1.0f, g[c] = 3.0f;
    WF_CHECK_OK(wf_adamw_step(f.o, 0.1, NULL));
    WF_CHECK_EQ(wf_adamw_steps(f.o), 2);
    WF_CHECK_NEAR(p[a], 0.87333005977, 1e-6);
    WF_CHECK_NEAR(p[b], -0.36438005776, 1e-6);
    WF_CHECK_NEAR(p[c], 0.17077902151, 1e-6);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[a], 0.02, 1e-8);
    WF_CHECK_NEAR(wf_adamw_v(f.o)[a], 0.0031, 1e-8);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[b], -0.08, 1e-8);
    WF_CHECK_NEAR(wf_adamw_v(f.o)[b], 0.0496, 1e-8);
    /* Parameters with zero gradients only decay: two steps of * 0.99 for
     * matrices; a norm or an embedding stays as it was. */
    for (int i = 0; i < wf_model_num_tensors(f.m); i++) {
        const wf_tensor_info *t = wf_model_tensor(f.m, i);
        for (size_t j = t->offset; j < t->offset + t->numel; j++) {
            if (j == a || j == b || j == c) continue;
            double want = wf_adamw_decays(&oc, t) ? before[j] * 0.99 * 0.99 : before[j];
            WF_CHECK_NEAR(p[j], want, 1e-7);
        }
    }
    release(&f);
}

WF_TEST(bias_correction_follows_set_steps) {
    /* After set_steps(4) the next step is t = 5: m = .1 g, m_hat = m / (1 - .9^5),
     * v_hat = .01 g^2 / (1 - .99^5); for g = 2, p moves by
     * lr * (.2 / .40951) / sqrt(.04 / .0490099501) = lr * 0.540602. */
    wf_model_config mc = micro(1);
    wf_adamw_config oc = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0};
    fixture f = make(&mc, &oc, 1);
    wf_adamw_set_steps(f.o, 4);
    size_t a = offset_of(f.m, "model.norm.weight");
    float *p = wf_model_params(f.m);
    p[a] = 0;
    wf_model_grads(f.m)[a] = 2.0f;
    WF_CHECK_OK(wf_adamw_step(f.o, 0.01, NULL));
    double want = -0.01 * (0.2 / (1 - pow(0.9, 5))) / sqrt(0.04 / (1 - pow(0.99, 5)));
    WF_CHECK_NEAR(want, -0.01 * 0.540602, 1e-9);
    WF_CHECK_NEAR(p[a], want, 1e-8);
    WF_CHECK_EQ(wf_adamw_steps(f.o), 5);
    release(&f);
}

WF_TEST(clip_coefficient_is_max_over_norm_plus_1e6) {
    /* Gradients (6e-6, 8e-6) have norm 1e-5. With max norm 1e-5 the
     * coefficient is 1e-5 / (1e-5 + 1e-6) = 1/1.1, not 1: the 1e-6 of
     * clip_grad_norm_ shows. The first moment after one step is
     * (1 - b1) * coef * g; the gradient buffer itself is left alone. */
    wf_model_config mc = micro(0);
    wf_adamw_config oc = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .grad_clip = 1e-5};
    fixture f = make(&mc, &oc, 1);
    float *g = wf_model_grads(f.m);
    size_t a = offset_of(f.m, "model.embed_tokens.weight"), b = offset_of(f.m, "lm_head.weight");
    wf_model_zero_grad(f.m);
    g[a] = 6e-6f, g[b] = 8e-6f;
    double norm = 0;
    WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, &norm));
    WF_CHECK_NEAR(norm, 1e-5, 1e-12);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[a], 0.1 * 6e-6 / 1.1, 1e-13);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[b], 0.1 * 8e-6 / 1.1, 1e-13);
    WF_CHECK_TRUE(g[a] == 6e-6f && g[b] == 8e-6f);
    release(&f);

    /* Norm 5 with max norm 1: coefficient 1 / (5 + 1e-6). */
    oc.grad_clip = 1.0;
    f = make(&mc, &oc, 1);
    g = wf_model_grads(f.m);
    wf_model_zero_grad(f.m);
    g[a] = 3.0f, g[b] = -4.0f;
    WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, &norm));
    WF_CHECK_NEAR(norm, 5.0, 1e-12);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[a], 0.1 * 3.0 / (5 + 1e-6), 1e-8);
    WF_CHECK_NEAR(wf_adamw_m(f.o)[b], -0.1 * 4.0 / (5 + 1e-6), 1e-8);
    release(&f);

    /* Below the max norm (and with clipping off) nothing is scaled. */
    for (int off = 0; off < 2; off++) {
        oc.grad_clip = off ? 0.0 : 5.5;
        f = make(&mc, &oc, 1);
        g = wf_model_grads(f.m);
        wf_model_zero_grad(f.m);
        g[a] = 3.0f, g[b] = -4.0f;
        WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, &norm));
        WF_CHECK_TRUE(wf_adamw_m(f.o)[a] == 0.1f * 3.0f);
        WF_CHECK_TRUE(wf_adamw_m(f.o)[b] == 0.1f * -4.0f);
        release(&f);
    }
}

WF_TEST(grad_norm_is_the_global_l2_norm) {
    wf_model_config mc;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    wf_adamw_config oc = wf_adamw_config_default();
    fixture f = make(&mc, &oc, 1);
    random_grads(f.m, 5, 1e-2f);
    const float *g = wf_model_grads(f.m);
    long double ss = 0;
    for (size_t i = 0; i < wf_model_num_params(f.m); i++) ss += (long double)g[i] * g[i];
    double want = (double)sqrtl(ss);
    WF_CHECK_NEAR(wf_grad_norm(f.m), want, want * 1e-14);
    release(&f);
}

WF_TEST(matrices_decay_norms_and_embeddings_do_not) {
    /* Zero gradients leave only the decay: p *= 1 - lr * wd = 0.9. */
    for (int tied = 0; tied < 2; tied++) {
        for (int emb = 0; emb < 2; emb++) {
            wf_model_config mc = micro(tied);
            wf_adamw_config oc = wf_adamw_config_default();
            oc.weight_decay = 0.2, oc.decay_embeddings = emb;
            fixture f = make(&mc, &oc, 3);
            size_t n = wf_model_num_params(f.m);
            float before[64];
            WF_CHECK_TRUE(n <= 64);
            memcpy(before, wf_model_params(f.m), n * sizeof(float));
            wf_model_zero_grad(f.m);
            WF_CHECK_OK(wf_adamw_step(f.o, 0.5, NULL));
            const float *p = wf_model_params(f.m);
            int n_decayed = 0, n_kept = 0;
            for (int i = 0; i < wf_model_num_tensors(f.m); i++) {
                const wf_tensor_info *t = wf_model_tensor(f.m, i);
                int embedding = strcmp(t->name, "model.embed_tokens.weight") == 0 ||
                                strcmp(t->name, "lm_head.weight") == 0;
                int want = t->ndim == 2 && (!embedding || emb);
                WF_CHECK_EQ(wf_adamw_decays(&oc, t), want);
                want ? n_decayed++ : n_kept++;
                for (size_t j = t->offset; j < t->offset + t->numel; j++) {
                    if (want) WF_CHECK_TRUE(p[j] == before[j] * 0.9f);
                    else WF_CHECK_TRUE(p[j] == before[j]);
                }
            }
            /* q, k, v, o, gate, up, down (+ embed, lm_head) vs 3 norms. */
            WF_CHECK_EQ(n_decayed, 7 + (emb ? 2 - tied : 0));
            WF_CHECK_EQ(n_kept, 3 + (emb ? 0 : 2 - tied));
            release(&f);
        }
    }
}

WF_TEST(nonfinite_gradients_are_refused_and_change_nothing) {
    wf_model_config mc;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    mc.n_layers = 1, mc.vocab_size = 32;
    wf_adamw_config oc = wf_adamw_config_default();
    fixture f = make(&mc, &oc, 1);
    size_t n = wf_model_num_params(f.m);
    random_grads(f.m, 1, 0.1f);
    WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, NULL)); /* moments are non-zero now */
    float *saved = malloc(3 * n * sizeof *saved);
    memcpy(saved, wf_model_params(f.m), n * sizeof *saved);
    memcpy(saved + n, wf_adamw_m(f.o), n * sizeof *saved);
    memcpy(saved + 2 * n, wf_adamw_v(f.o), n * sizeof *saved);
    size_t at = offset_of(f.m, "model.layers.0.mlp.down_proj.weight") + 7;
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        random_grads(f.m, 2, 0.1f);
        wf_model_grads(f.m)[at] = bad[k];
        double norm = 0;
        WF_CHECK_ERR(wf_adamw_step(f.o, 1e-3, &norm), WF_ERR_RANGE,
                     "model.layers.0.mlp.down_proj.weight has gradient");
        WF_CHECK_TRUE(strstr(wf_error_msg(), "element 7") != NULL);
        WF_CHECK_TRUE(strstr(wf_error_msg(), "adamw step 2") != NULL);
        WF_CHECK_TRUE(!isfinite(norm));
        WF_CHECK_EQ(wf_adamw_steps(f.o), 1);
        WF_CHECK_TRUE(memcmp(saved, wf_model_params(f.m), n * sizeof *saved) == 0);
        WF_CHECK_TRUE(memcmp(saved + n, wf_adamw_m(f.o), n * sizeof *saved) == 0);
        WF_CHECK_TRUE(memcmp(saved + 2 * n, wf_adamw_v(f.o), n * sizeof *saved) == 0);
    }
    /* A bad learning rate is refused the same way. */
    random_grads(f.m, 2, 0.1f);
    WF_CHECK_ERR(wf_adamw_step(f.o, NAN, NULL), WF_ERR_RANGE, "learning rate");
    WF_CHECK_TRUE(memcmp(saved, wf_model_params(f.m), n * sizeof *saved) == 0);
    WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, NULL));
    WF_CHECK_EQ(wf_adamw_steps(f.o), 2);
    free(saved);
    release(&f);
}

WF_TEST(bad_configs_name_the_key) {
    wf_model_config mc = micro(1);
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_adamw *o = (wf_adamw *)&mc;
    wf_adamw_config c = wf_adamw_config_default();
    c.beta1 = 1.0;
    WF_CHECK_ERR(wf_adamw_create(&o, &c, m, a), WF_ERR_CONFIG, "optim.beta1 = 1");
    WF_CHECK_TRUE(o == NULL);
    c = wf_adamw_config_default(), c.beta2 = -0.1;
    WF_CHECK_ERR(wf_adamw_create(&o, &c, m, a), WF_ERR_CONFIG, "optim.beta2 = -0.1");
    c = wf_adamw_config_default(), c.eps = 0;
    WF_CHECK_ERR(wf_adamw_create(&o, &c, m, a), WF_ERR_CONFIG, "optim.eps = 0");
    c = wf_adamw_config_default(), c.weight_decay = -1;
    WF_CHECK_ERR(wf_adamw_create(&o, &c, m, a), WF_ERR_CONFIG, "optim.weight_decay = -1");
    c = wf_adamw_config_default();
    WF_CHECK_TRUE(c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 && c.weight_decay == 0.1 &&
                  c.grad_clip == 1.0 && !c.decay_embeddings);
    wf_adamw_destroy(NULL);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

WF_TEST(same_bits_on_one_and_two_threads_and_no_allocation) {
    /* The tiny preset is large enough that the norm and the update run in
     * parallel; the result must not depend on how the work is split. */
    wf_model_config mc;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    wf_adamw_config oc = wf_adamw_config_default();
    oc.grad_clip = 0.5;
    float *out[2];
    double norms[2][3];
    size_t n = 0;
    for (int th = 0; th < 2; th++) {
        wf_kern_set_threads(th + 1);
        fixture f = make(&mc, &oc, 7);
        n = wf_model_num_params(f.m);
        WF_CHECK_TRUE(n > 100000);
        wf_arena_stats before = wf_arena_get_stats(f.arena);
        for (int s = 0; s < 3; s++) {
            random_grads(f.m, 100 + (uint64_t)s, 0.01f);
            WF_CHECK_OK(wf_adamw_step(f.o, 1e-3, &norms[th][s]));
        }
        wf_arena_stats after = wf_arena_get_stats(f.arena);
        WF_CHECK_EQ(after.n_allocs, before.n_allocs);
        out[th] = malloc(3 * n * sizeof(float));
        memcpy(out[th], wf_model_params(f.m), n * sizeof(float));
        memcpy(out[th] + n, wf_adamw_m(f.o), n * sizeof(float));
        memcpy(out[th] + 2 * n, wf_adamw_v(f.o), n * sizeof(float));
        release(&f);
    }
    WF_CHECK_TRUE(memcmp(out[0], out[1], 3 * n * sizeof(float)) == 0);
    WF_CHECK_TRUE(memcmp(norms[0], norms[1], sizeof norms[0]) == 0);
    free(out[0]);
    free(out[1]);
}
