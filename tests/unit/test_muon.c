/* Muon (src/optim/muon.c) on its own: which tensors it takes, refusals that
 * change nothing, config errors naming the key, the same bits on one and
 * two threads, and an orthogonalised update (the numbers against PyTorch
 * are tests/py/test_muon_vs_torch.py). */
#include <math.h>

#include "harness.h"
#include "weft/arena.h"
#include "weft/backend.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/rng.h"

typedef struct {
    wf_arena *arena;
    wf_model *m;
    wf_adamw *rest;
    wf_muon *muon;
} fixture;

static fixture make(const wf_muon_config *uc) {
    fixture f = {0};
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    WF_CHECK_OK(wf_arena_create(&f.arena, 1 << 20));
    WF_CHECK_OK(wf_model_create(&f.m, &c, f.arena));
    wf_model_init(f.m, 5);
    wf_adamw_config ac = wf_adamw_config_default();
    ac.skip_muon = 1;
    WF_CHECK_OK(wf_adamw_create(&f.rest, &ac, f.m, f.arena));
    WF_CHECK_OK(wf_muon_create(&f.muon, uc, f.m, wf_adamw_m(f.rest), f.arena));
    return f;
}

static void release(fixture *f) {
    wf_muon_destroy(f->muon);
    wf_adamw_destroy(f->rest);
    wf_model_destroy(f->m);
    wf_arena_destroy(f->arena);
}

static void random_grads(wf_model *m, uint64_t seed) {
    wf_rng r = wf_rng_make(seed, 3);
    float *g = wf_model_grads(m);
    for (size_t i = 0; i < wf_model_num_params(m); i++) g[i] = wf_rng_normal(&r);
}

WF_TEST(muon_takes_the_block_matrices_only) {
    wf_muon_config uc = wf_muon_config_default();
    fixture f = make(&uc);
    size_t n = 0;
    for (int i = 0; i < wf_model_num_tensors(f.m); i++) {
        const wf_tensor_info *t = wf_model_tensor(f.m, i);
        int proj = strstr(t->name, "_proj.weight") != NULL;
        WF_CHECK_TRUE(wf_muon_takes(t) == proj);
        if (proj) n += t->numel;
    }
    WF_CHECK_TRUE(n > 0 && wf_muon_numel(f.muon) == n);
    release(&f);
}

WF_TEST(muon_refusals_change_nothing) {
    wf_muon_config uc = wf_muon_config_default();
    fixture f = make(&uc);
    random_grads(f.m, 1);
    size_t P = wf_model_num_params(f.m);
    float *before = malloc(P * sizeof *before), *mom = malloc(P * sizeof *mom);
    memcpy(before, wf_model_params(f.m), P * sizeof *before);
    memcpy(mom, wf_adamw_m(f.rest), P * sizeof *mom);
    WF_CHECK_ERR(wf_muon_step(f.muon, 0.02, wf_model_grads(f.m), NAN, NULL), WF_ERR_RANGE, "gradient norm is nan");
    WF_CHECK_ERR(wf_muon_step(f.muon, -1.0, wf_model_grads(f.m), 1.0, NULL), WF_ERR_RANGE, "learning rate");
    WF_CHECK_TRUE(memcmp(before, wf_model_params(f.m), P * sizeof *before) == 0);
    WF_CHECK_TRUE(memcmp(mom, wf_adamw_m(f.rest), P * sizeof *mom) == 0);
    free(before);
    free(mom);
    release(&f);
}

WF_TEST(muon_config_errors_name_the_key) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &c, a));
    wf_muon *o;
    wf_muon_config uc = wf_muon_config_default();
    uc.momentum = 1.0;
    WF_CHECK_ERR(wf_muon_create(&o, &uc, m, wf_model_grads(m), a), WF_ERR_CONFIG, "optim.muon_momentum");
    uc = wf_muon_config_default();
    uc.ns_steps = 0;
    WF_CHECK_ERR(wf_muon_create(&o, &uc, m, wf_model_grads(m), a), WF_ERR_CONFIG, "optim.muon_ns_steps");
    uc = wf_muon_config_default();
    uc.weight_decay = -1;
    WF_CHECK_ERR(wf_muon_create(&o, &uc, m, wf_model_grads(m), a), WF_ERR_CONFIG, "optim.muon_weight_decay");
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

/* One step from zero momentum with Nesterov off, no decay, no clip: the
 * change of a matrix is -lr * s * X, X ~ orthogonal, so X X^T (wide) has
 * its diagonal near 1 (the quintic leaves singular values in ~[0.5, 1.5])
 * and the update RMS is lr * s * sqrt(min / (rows * cols)) within that
 * band. */
WF_TEST(muon_update_is_nearly_orthogonal) {
    wf_muon_config uc = wf_muon_config_default();
    uc.nesterov = 0;
    uc.grad_clip = 0;
    fixture f = make(&uc);
    random_grads(f.m, 2);
    size_t P = wf_model_num_params(f.m);
    float *before = malloc(P * sizeof *before);
    memcpy(before, wf_model_params(f.m), P * sizeof *before);
    const double lr = 0.5;
    double rms = 0;
    WF_CHECK_OK(wf_muon_step(f.muon, lr, wf_model_grads(f.m), 1.0, &rms));
    WF_CHECK_TRUE(rms > 0);
    const wf_tensor_info *t = wf_model_find_tensor(f.m, "model.layers.0.mlp.gate_proj.weight"); /* tall */
    int R = (int)t->shape[0], C = (int)t->shape[1];
    WF_CHECK_TRUE(R > C);
    double s = sqrt((double)R / C);
    /* X = (before - after) / (lr s); X^T X (C x C) near the identity */
    double diag_min = 1e9, diag_max = 0, off = 0;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double d = 0;
            for (int r = 0; r < R; r++) {
                size_t a = t->offset + (size_t)r * C;
                double xi = (before[a + i] - wf_model_params(f.m)[a + i]) / (lr * s);
                double xj = (before[a + j] - wf_model_params(f.m)[a + j]) / (lr * s);
                d += xi * xj;
            }
            if (i == j) diag_min = fmin(diag_min, d), diag_max = fmax(diag_max, d);
            else off = fmax(off, fabs(d));
        }
    WF_CHECK_TRUE(diag_min > 0.25 && diag_max < 2.25); /* singular values^2 in (0.5^2, 1.5^2) */
    WF_CHECK_TRUE(off < 0.5);
    /* and the AdamW part (the embedding) is not Muon's to touch */
    const wf_tensor_info *e = wf_model_find_tensor(f.m, "model.embed_tokens.weight");
    WF_CHECK_TRUE(memcmp(before + e->offset, wf_model_params(f.m) + e->offset, e->numel * sizeof(float)) == 0);
    free(before);
    release(&f);
}

WF_TEST(muon_same_bits_on_one_and_two_threads) {
    float *out[2];
    for (int k = 0; k < 2; k++) {
        wf_kern_set_threads(k + 1);
        wf_muon_config uc = wf_muon_config_default();
        uc.weight_decay = 0.1;
        fixture f = make(&uc);
        for (int step = 0; step < 3; step++) {
            random_grads(f.m, 10 + (uint64_t)step);
            WF_CHECK_OK(wf_muon_step(f.muon, 0.02, wf_model_grads(f.m), wf_grad_norm(f.m), NULL));
        }
        size_t P = wf_model_num_params(f.m);
        out[k] = malloc(P * sizeof(float));
        memcpy(out[k], wf_model_params(f.m), P * sizeof(float));
        if (k == 1) WF_CHECK_TRUE(memcmp(out[0], out[1], P * sizeof(float)) == 0);
        release(&f);
    }
    free(out[0]);
    free(out[1]);
}

/* The three parts the sharded trainer uses (the momentum on ranges cut
 * anywhere, here every 37 elements across the matrices' boundaries, the
 * iteration on a whole copy, the step on ranges again): wf_muon_step's
 * bits and update RMS, Nesterov on and off. */
WF_TEST(muon_parts_on_cut_ranges_give_the_whole_step) {
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        wf_muon_config uc = wf_muon_config_default();
        uc.nesterov = nesterov;
        uc.weight_decay = 0.1;
        fixture a = make(&uc), b = make(&uc);
        size_t P = wf_model_num_params(a.m);
        float *x = calloc(P, sizeof(float));
        WF_CHECK_TRUE(x != NULL);
        for (int step = 0; step < 3; step++) {
            random_grads(a.m, 20 + (uint64_t)step);
            random_grads(b.m, 20 + (uint64_t)step);
            double norm = wf_grad_norm(a.m), rms_a = 0, sum_sq = 0, lr = 0.02;
            WF_CHECK_OK(wf_muon_step(a.muon, lr, wf_model_grads(a.m), norm, &rms_a));
            WF_CHECK_OK(wf_muon_check_step(lr, norm));
            float *m = wf_adamw_m(b.rest), *g = wf_model_grads(b.m), *p = wf_model_params(b.m);
            int nm = wf_muon_num_matrices(b.muon);
            for (int pass = 0; pass < 3; pass++)
                for (int i = 0; i < nm; i++) {
                    size_t off;
                    int r, c;
                    wf_muon_matrix(b.muon, i, &off, &r, &c);
                    size_t n = (size_t)r * (size_t)c;
                    if (pass == 1) {
                        WF_CHECK_OK(wf_muon_orthogonalise(b.muon, i, x + off, lr, &sum_sq));
                        continue;
                    }
                    /* cut at the multiples of 37 of the flat order */
                    for (size_t lo = off; lo < off + n;) {
                        size_t hi = (lo / 37 + 1) * 37;
                        if (hi > off + n) hi = off + n;
                        if (pass == 0) WF_CHECK_OK(wf_muon_momentum(b.muon, m + lo, g + lo, x + lo, hi - lo, norm));
                        else WF_CHECK_OK(wf_muon_apply(b.muon, i, p + lo, x + lo, hi - lo, lr));
                        lo = hi;
                    }
                }
            WF_CHECK_TRUE(memcmp(wf_model_params(a.m), p, P * sizeof(float)) == 0);
            WF_CHECK_TRUE(memcmp(wf_adamw_m(a.rest), m, P * sizeof(float)) == 0);
            WF_CHECK_TRUE(fabs(sqrt(sum_sq / (double)wf_muon_numel(b.muon)) - rms_a) <= 1e-12 * rms_a);
        }
        WF_CHECK_TRUE(wf_muon_check_step(NAN, 1.0) == WF_ERR_RANGE);
        WF_CHECK_TRUE(wf_muon_check_step(0.02, INFINITY) == WF_ERR_RANGE);
        free(x);
        release(&a);
        release(&b);
    }
}
