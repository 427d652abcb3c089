/* Unit tests for activation recomputation (wf_model_set_recompute): every
 * mode gives the same bits as none (losses, logits' gradients, every
 * parameter gradient, every activation it reports) over several configs,
 * batch shapes and thread counts; the planned memory shrinks as the
 * formulas of docs/model.md say (recomputed here from the sizes, not taken
 * from the model); the mode is fixed by the plan; a step allocates nothing;
 * recomputed ops are timed apart. Agreement with PyTorch in each mode is
 * tests/py/test_model_vs_torch.py. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_fixture.h"
#include "weft/kernels.h"
#include "weft/model.h"

static const wf_model_recompute modes[] = {WF_RECOMPUTE_NONE, WF_RECOMPUTE_BLOCK,
                                           WF_RECOMPUTE_SELECTIVE};
enum { N_MODES = 3 };

/* Every activation `got` reports has the same bits as the one of the same
 * name in `ref` (which reports all); returns how many it reports. */
static int check_activations(const wf_model *got, const wf_model *ref, const char *what) {
    int n = wf_model_num_activations(got), nr = wf_model_num_activations(ref);
    for (int i = 0; i < n; i++) {
        wf_model_activation a, b;
        wf_model_get_activation(got, i, &a);
        int found = 0;
        for (int j = 0; j < nr && !found; j++) {
            wf_model_get_activation(ref, j, &b);
            if (strcmp(a.name, b.name) != 0) continue;
            found = 1;
            if (a.numel != b.numel || (a.numel && memcmp(a.data, b.data, a.numel * sizeof(float))))
                wf_test_fail(__FILE__, __LINE__, "%s: activation %s differs from recompute none",
                             what, a.name);
        }
        if (!found)
            wf_test_fail(__FILE__, __LINE__, "%s: activation %s is not one of none's", what, a.name);
    }
    return n;
}

WF_TEST(every_mode_gives_the_same_bits_as_none) {
    const wf_model_config cfgs[] = {
        wf_test_model_config(64, 2, 4, 2, 512, 0, 64, 1),  /* tiny: GQA, tied */
        wf_test_model_config(48, 2, 3, 3, 97, 80, 16, 0),  /* MHA, untied, odd sizes */
        wf_test_model_config(36, 3, 6, 1, 53, 70, 13, 1),  /* MQA, three layers */
        wf_test_model_config(10, 1, 1, 1, 7, 17, 8, 0),    /* one head, one layer */
    };
    const int shapes[][2] = {{1, 1}, {2, 8}, {3, 13}};
    const int threads[] = {1, 3};
    int cases = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
                const wf_model_config *c = &cfgs[ci];
                int B = shapes[si][0], T = shapes[si][1] < c->max_seq_len ? shapes[si][1] : c->max_seq_len;
                int N = B * T, V = c->vocab_size;
                wf_kern_set_threads(threads[ti]);
                int32_t *tok = malloc(2 * (size_t)N * sizeof *tok);
                int32_t *tgt = malloc(2 * (size_t)N * sizeof *tgt);
                wf_test_random_batch(tok, tgt, 2 * N, V, 100 + ci * 10 + si, 5, 0.1);
                wf_test_model f[N_MODES];
                float loss[N_MODES][2];
                /* Two micro-batches accumulate, the second smaller when it can be. */
                int B2 = B > 1 ? B - 1 : B;
                for (int k = 0; k < N_MODES; k++) {
                    f[k] = wf_test_model_make(c, 77, modes[k], B, T);
                    WF_CHECK_OK(wf_model_forward(f[k].m, tok, tgt, B, T, &loss[k][0]));
                    WF_CHECK_OK(wf_model_backward(f[k].m, 0.5f));
                }
                for (int k = 0; k < N_MODES; k++) {
                    WF_CHECK_OK(wf_model_forward(f[k].m, tok + N, tgt + N, B2, T, &loss[k][1]));
                    if (k > 0) /* after a forward: the last block's intermediates are held */
                        WF_CHECK_EQ(check_activations(f[k].m, f[0].m, "after the forward"),
                                    modes[k] == WF_RECOMPUTE_BLOCK ? 1 + c->n_layers + 7 + 3
                                                                   : 1 + 5 * c->n_layers + 3 + 3);
                }
                for (int k = 0; k < N_MODES; k++) WF_CHECK_OK(wf_model_backward(f[k].m, 0.5f));
                for (int k = 1; k < N_MODES; k++) {
                    char what[128];
                    snprintf(what, sizeof what, "config %zu, B x T = %d x %d, %d threads, %s", ci,
                             B, T, threads[ti], wf_model_recompute_name(modes[k]));
                    if (memcmp(loss[k], loss[0], sizeof loss[0]) != 0)
                        wf_test_fail(__FILE__, __LINE__, "%s: losses %.9g %.9g, none's %.9g %.9g",
                                     what, loss[k][0], loss[k][1], loss[0][0], loss[0][1]);
                    size_t np = wf_model_num_params(f[0].m);
                    const float *g = wf_model_grads(f[k].m), *g0 = wf_model_grads(f[0].m);
                    for (size_t i = 0; i < np; i++)
                        if (memcmp(&g[i], &g0[i], sizeof *g) != 0)
                            wf_test_fail(__FILE__, __LINE__, "%s: grad[%zu] = %.9g, none's %.9g",
                                         what, i, g[i], g0[i]);
                    /* after the backward: block 0's (recomputed) intermediates */
                    int n = check_activations(f[k].m, f[0].m, what);
                    int L = c->n_layers;
                    int expect = modes[k] == WF_RECOMPUTE_BLOCK ? 1 + L + 7 + 3 : 1 + 5 * L + 3 + 3;
                    WF_CHECK_EQ(n, expect);
                    WF_CHECK_EQ(wf_model_num_activations(f[0].m), 1 + 8 * L + 3);
                }
                for (int k = 0; k < N_MODES; k++) wf_test_model_free(&f[k]);
                free(tok), free(tgt);
                cases++;
            }
    WF_CHECK_EQ(cases, 24);
}

/* The formulas of docs/model.md ("Activation recomputation"), in floats. */
static size_t r16(size_t x) { return (x + 15) / 16 * 16; }

static size_t formula_bytes(const wf_model_config *c, int Bi, int Ti, int threads,
                            wf_model_recompute mode) {
    size_t B = (size_t)Bi, T = (size_t)Ti, N = B * T, C = (size_t)c->dim, L = (size_t)c->n_layers;
    size_t NH = (size_t)c->n_heads, HD = C / NH, QKV = (NH + 2 * (size_t)c->n_kv_heads) * HD;
    size_t H = (size_t)wf_model_config_hidden_dim(c), V = (size_t)c->vocab_size;
    size_t S = wf_kern_attention_scratch(Ti, threads);
    size_t fixed = 2 * r16(T * HD / 2) + r16(S) + (L + 1) * r16(N * C) + r16(N * C) + 5 * r16(N) +
                   r16(N * V) + 3 * r16(N * C) + r16(N * QKV) + r16(2 * N * H) + r16(N * H);
    size_t E = 2 * r16(N * C) + 2 * r16(N) + r16(N * H);
    size_t M = r16(N * QKV) + 2 * r16(N * C) + r16(B * NH * T) + r16(2 * N * H);
    size_t floats = mode == WF_RECOMPUTE_NONE    ? fixed + L * (E + M)
                    : mode == WF_RECOMPUTE_BLOCK ? fixed + E + M
                                                 : fixed + L * M + E;
    return floats * sizeof(float);
}

WF_TEST(memory_shrinks_by_the_documented_formulas) {
    wf_model_config cs[2] = {wf_test_model_config(64, 4, 4, 2, 512, 0, 64, 1),
                             wf_test_model_config(36, 3, 6, 1, 53, 70, 13, 0)};
    for (int ci = 0; ci < 2; ci++) {
        wf_kern_set_threads(2);
        int threads = wf_kern_threads(); /* 1 in a build without OpenMP */
        int B = 3, T = cs[ci].max_seq_len;
        size_t bytes[N_MODES];
        for (int k = 0; k < N_MODES; k++) {
            wf_test_model f = wf_test_model_make(&cs[ci], 77, modes[k], B, T);
            wf_model_memory mem = wf_model_get_memory(f.m);
            bytes[k] = mem.activation_bytes;
            WF_CHECK_EQ(bytes[k], formula_bytes(&cs[ci], B, T, threads, modes[k]));
            size_t planned;
            WF_CHECK_OK(wf_model_plan_bytes(&cs[ci], B, T, threads, modes[k], &planned));
            WF_CHECK_EQ(planned, bytes[k]);
            /* The logits term alone (weft plan reports it apart). */
            size_t logits;
            WF_CHECK_OK(wf_model_plan_logits_bytes(&cs[ci], B, T, &logits));
            WF_CHECK_EQ(logits, r16((size_t)B * (size_t)T * (size_t)cs[ci].vocab_size) * sizeof(float));
            WF_CHECK_TRUE(logits < planned);
            /* The arena holds at least parameters, gradients and activations. */
            wf_arena_stats st = wf_arena_get_stats(f.arena);
            WF_CHECK_TRUE(st.in_use >= mem.param_bytes + mem.grad_bytes + mem.activation_bytes);
            wf_test_model_free(&f);
        }
        WF_CHECK_TRUE(bytes[WF_RECOMPUTE_BLOCK] < bytes[WF_RECOMPUTE_SELECTIVE]);
        WF_CHECK_TRUE(bytes[WF_RECOMPUTE_SELECTIVE] < bytes[WF_RECOMPUTE_NONE]);
    }
    size_t b;
    wf_model_config bad = cs[0];
    WF_CHECK_ERR(wf_model_plan_bytes(&bad, 1, 65, 1, WF_RECOMPUTE_NONE, &b), WF_ERR_INVALID,
                 "max_seq_len 64");
    WF_CHECK_ERR(wf_model_plan_logits_bytes(&bad, 1, 65, &b), WF_ERR_INVALID, "max_seq_len 64");
    WF_CHECK_ERR(wf_model_plan_logits_bytes(&bad, 0, 8, &b), WF_ERR_INVALID, "B x T = 0 x 8");
    bad.n_heads = 3;
    WF_CHECK_ERR(wf_model_plan_bytes(&bad, 1, 8, 1, WF_RECOMPUTE_NONE, &b), WF_ERR_CONFIG,
                 "model.n_heads");
    WF_CHECK_ERR(wf_model_plan_logits_bytes(&bad, 1, 8, &b), WF_ERR_CONFIG, "model.n_heads");
}

WF_TEST(the_mode_is_fixed_by_the_plan_and_named) {
    wf_model_config c = wf_test_model_config(64, 2, 4, 2, 512, 0, 64, 1);
    wf_test_model f = wf_test_model_make(&c, 77, WF_RECOMPUTE_SELECTIVE, 1, 8);
    WF_CHECK_EQ(wf_model_get_recompute(f.m), WF_RECOMPUTE_SELECTIVE);
    WF_CHECK_OK(wf_model_set_recompute(f.m, WF_RECOMPUTE_SELECTIVE));
    WF_CHECK_ERR(wf_model_set_recompute(f.m, WF_RECOMPUTE_BLOCK), WF_ERR_INVALID,
                 "from selective to block after wf_model_plan");
    WF_CHECK_ERR(wf_model_set_recompute(f.m, (wf_model_recompute)7), WF_ERR_INVALID,
                 "unknown recompute mode 7");
    wf_test_model_free(&f);
    for (int k = 0; k < N_MODES; k++)
        WF_CHECK_EQ(wf_model_recompute_parse(wf_model_recompute_name(modes[k])), (int)modes[k]);
    WF_CHECK_STREQ(wf_model_recompute_name(WF_RECOMPUTE_BLOCK), "block");
    WF_CHECK_EQ(wf_model_recompute_parse("full"), -1);
    WF_CHECK_EQ(wf_model_recompute_parse(NULL), -1);
}

WF_TEST(a_recomputing_step_allocates_nothing_and_times_its_reruns) {
    wf_model_config c = wf_test_model_config(64, 3, 4, 2, 512, 0, 64, 1);
    int32_t tok[32], tgt[32];
    wf_test_random_batch(tok, tgt, 32, c.vocab_size, 9, 5, 0.1);
    for (int k = 0; k < N_MODES; k++) {
        wf_test_model f = wf_test_model_make(&c, 77, modes[k], 2, 16);
        wf_arena_stats before = wf_arena_get_stats(f.arena);
        float loss;
        for (int step = 0; step < 2; step++) {
            WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 16, &loss));
            WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
        }
        wf_arena_stats after = wf_arena_get_stats(f.arena);
        WF_CHECK_EQ(after.n_allocs, before.n_allocs);
        WF_CHECK_EQ(after.in_use, before.in_use);
        wf_model_op_times t = wf_model_get_op_times(f.m);
        double rec = 0;
        for (int op = 0; op < WF_OP_COUNT; op++) rec += t.rec[op];
        /* block re-runs every kernel of the block (matmuls too), selective
         * only norms and SwiGLU, none nothing */
        if (modes[k] == WF_RECOMPUTE_NONE) WF_CHECK_TRUE(rec == 0);
        else WF_CHECK_TRUE(t.rec[WF_OP_RMSNORM] > 0 && t.rec[WF_OP_SWIGLU] > 0);
        WF_CHECK_TRUE((t.rec[WF_OP_MATMUL] > 0) == (modes[k] == WF_RECOMPUTE_BLOCK));
        WF_CHECK_TRUE((t.rec[WF_OP_ATTENTION] > 0) == (modes[k] == WF_RECOMPUTE_BLOCK));
        wf_test_model_free(&f);
    }
}
