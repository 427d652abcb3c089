/* Unit tests for src/model: presets and their sizes, config errors that
 * name the values, the tensor table, seeded init, the plan (no allocation
 * during a step), errors for bad inputs, gradient accumulation and loss
 * scaling, run-to-run determinism, one thread pool, and the tensor-parallel
 * slices and refusals (their numbers: tests/py/test_tp_mpi.py). Numerical agreement with PyTorch is
 * tests/py/test_model_vs_torch.py. */
#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_fixture.h"
#include "weft/kernels.h"
#include "weft/model.h"

/* ------------------------------------------------------------- configs */

WF_TEST(presets_have_the_documented_sizes) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "stories15M"));
    WF_CHECK_OK(wf_model_config_validate(&c));
    WF_CHECK_EQ(c.dim, 288);
    WF_CHECK_EQ(c.n_layers, 6);
    WF_CHECK_EQ(c.n_heads, 6);
    WF_CHECK_EQ(c.vocab_size, 32000);
    WF_CHECK_EQ(c.max_seq_len, 256);
    WF_CHECK_EQ(wf_model_config_hidden_dim(&c), 768);
    /* llama2.c's stories15M: 15,191,712 parameters with the shared classifier. */
    WF_CHECK_EQ(wf_model_config_num_params(&c), 15191712);
    WF_CHECK_OK(wf_model_config_preset(&c, "gpt2-small"));
    WF_CHECK_OK(wf_model_config_validate(&c));
    /* 50304 x 768 + 12 x (4 x 768^2 + 3 x 768 x 2048 + 2 x 768) + 768 */
    WF_CHECK_EQ(wf_model_config_num_params(&c), 123587328);
    WF_CHECK_EQ(c.vocab_size, 50304);
    WF_CHECK_OK(wf_model_config_preset(&c, "gpt2-medium"));
    WF_CHECK_OK(wf_model_config_validate(&c));
    /* 50304 x 1024 + 24 x (4 x 1024^2 + 3 x 1024 x 2752 + 2 x 1024) + 1024 */
    WF_CHECK_EQ(wf_model_config_num_params(&c), 355124224);
    WF_CHECK_EQ(wf_model_config_hidden_dim(&c), 2752);
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    WF_CHECK_OK(wf_model_config_validate(&c));
    /* Llama's rule: 8*64/3 = 170, rounded up to a multiple of 32. */
    WF_CHECK_EQ(wf_model_config_hidden_dim(&c), 192);
    c.ffn_multiplier = 1.5, c.ffn_multiple_of = 64;
    WF_CHECK_EQ(wf_model_config_hidden_dim(&c), 256); /* 255 -> 256 */
    WF_CHECK_ERR(wf_model_config_preset(&c, "llama70B"), WF_ERR_CONFIG, "stories15M");
}

WF_TEST(bad_configs_say_which_values_and_why) {
    wf_model_config c = wf_test_tiny_config();
    c.dim = 100, c.n_heads = 3;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG,
                 "model.dim = 100 is not divisible by model.n_heads = 3");
    c = wf_test_tiny_config();
    c.n_heads = 4, c.n_kv_heads = 3;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG,
                 "model.n_heads = 4 is not divisible by model.n_kv_heads = 3");
    c = wf_test_tiny_config();
    c.dim = 12, c.n_heads = 4, c.n_kv_heads = 4;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG, "head_dim");
    c = wf_test_tiny_config();
    c.n_kv_heads = 8;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG, "model.n_kv_heads = 8");
    c = wf_test_tiny_config();
    c.vocab_size = 0;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG, "model.vocab_size = 0");
    c = wf_test_tiny_config();
    c.norm_eps = 0;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG, "model.norm_eps");
    c = wf_test_tiny_config();
    c.rope_theta = -1;
    WF_CHECK_ERR(wf_model_config_validate(&c), WF_ERR_CONFIG, "model.rope_theta");
    /* wf_model_create validates too. */
    c = wf_test_tiny_config();
    c.n_layers = 0;
    wf_arena *a;
    wf_model *m = (wf_model *)&c;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_ERR(wf_model_create(&m, &c, a), WF_ERR_CONFIG, "model.n_layers = 0");
    WF_CHECK_TRUE(m == NULL);
    wf_arena_destroy(a);
}

/* ------------------------------------------------------------- tensors */

WF_TEST(tensor_table_uses_hugging_face_names_and_fused_order) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "stories15M"));
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m, &c, a));
    WF_CHECK_EQ(wf_model_num_params(m), wf_model_config_num_params(&c));
    WF_CHECK_EQ(wf_model_num_tensors(m), 1 + 6 * 9 + 1); /* tied: no lm_head */
    WF_CHECK_STREQ(wf_model_tensor(m, 0)->name, "model.embed_tokens.weight");
    WF_CHECK_TRUE(wf_model_find_tensor(m, "lm_head.weight") == NULL);
    const wf_tensor_info *q = wf_model_find_tensor(m, "model.layers.2.self_attn.q_proj.weight");
    const wf_tensor_info *k = wf_model_find_tensor(m, "model.layers.2.self_attn.k_proj.weight");
    const wf_tensor_info *v = wf_model_find_tensor(m, "model.layers.2.self_attn.v_proj.weight");
    const wf_tensor_info *g = wf_model_find_tensor(m, "model.layers.2.mlp.gate_proj.weight");
    const wf_tensor_info *u = wf_model_find_tensor(m, "model.layers.2.mlp.up_proj.weight");
    const wf_tensor_info *d = wf_model_find_tensor(m, "model.layers.5.mlp.down_proj.weight");
    WF_CHECK_TRUE(q && k && v && g && u && d);
    WF_CHECK_EQ(k->offset, q->offset + q->numel); /* fused q|k|v */
    WF_CHECK_EQ(v->offset, k->offset + k->numel);
    WF_CHECK_EQ(u->offset, g->offset + g->numel); /* fused gate|up */
    WF_CHECK_EQ(d->ndim, 2);
    WF_CHECK_EQ(d->shape[0], 288);
    WF_CHECK_EQ(d->shape[1], 768);
    /* The tensors tile the buffer exactly. */
    size_t end = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        WF_CHECK_EQ(wf_model_tensor(m, i)->offset, end);
        end += wf_model_tensor(m, i)->numel;
    }
    WF_CHECK_EQ(end, wf_model_num_params(m));
    WF_CHECK_STREQ(wf_model_tensor(m, wf_model_num_tensors(m) - 1)->name, "model.norm.weight");
    wf_model_destroy(m);

    c.tied_embeddings = 0, c.n_kv_heads = 2;
    WF_CHECK_OK(wf_model_create(&m, &c, a));
    const wf_tensor_info *head = wf_model_find_tensor(m, "lm_head.weight");
    WF_CHECK_TRUE(head != NULL);
    WF_CHECK_EQ(head->shape[0], 32000);
    WF_CHECK_EQ(wf_model_find_tensor(m, "model.layers.0.self_attn.k_proj.weight")->shape[0], 96);
    WF_CHECK_EQ(wf_model_num_params(m), wf_model_config_num_params(&c));
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

static double tensor_std(wf_model *m, const char *name, double *mean_out) {
    const wf_tensor_info *t = wf_model_find_tensor(m, name);
    const float *p = wf_model_params(m) + t->offset;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t->numel; i++) s += p[i], s2 += (double)p[i] * p[i];
    double mean = s / (double)t->numel;
    *mean_out = mean;
    return sqrt(s2 / (double)t->numel - mean * mean);
}

WF_TEST(init_is_seeded_scaled_and_per_tensor) {
    wf_model_config c = wf_test_tiny_config();
    c.tied_embeddings = 0;
    wf_arena *a;
    wf_model *m1, *m2, *m3;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m1, &c, a));
    WF_CHECK_OK(wf_model_create(&m2, &c, a));
    WF_CHECK_OK(wf_model_create(&m3, &c, a));
    wf_model_init(m1, 42);
    wf_model_init(m2, 42);
    wf_model_init(m3, 43);
    size_t n = wf_model_num_params(m1);
    WF_CHECK_TRUE(memcmp(wf_model_params(m1), wf_model_params(m2), n * sizeof(float)) == 0);
    WF_CHECK_TRUE(memcmp(wf_model_params(m1), wf_model_params(m3), n * sizeof(float)) != 0);
    double mean, sd;
    /* 512 x 64 = 32768 draws: the std's standard error is 0.4%. */
    sd = tensor_std(m1, "model.embed_tokens.weight", &mean);
    WF_CHECK_NEAR(sd, 0.02, 0.02 * 0.03);
    WF_CHECK_NEAR(mean, 0.0, 0.001);
    sd = tensor_std(m1, "model.layers.1.mlp.down_proj.weight", &mean); /* 64 x 192 */
    WF_CHECK_NEAR(sd, 0.02 / sqrt(2.0 * c.n_layers), 0.01 / sqrt(2.0 * c.n_layers) * 0.1);
    sd = tensor_std(m1, "model.layers.1.self_attn.o_proj.weight", &mean);
    WF_CHECK_NEAR(sd, 0.02 / 2.0, 0.02 / 2.0 * 0.05);
    sd = tensor_std(m1, "model.layers.0.mlp.up_proj.weight", &mean);
    WF_CHECK_NEAR(sd, 0.02, 0.02 * 0.05);
    const wf_tensor_info *ln = wf_model_find_tensor(m1, "model.layers.0.input_layernorm.weight");
    for (size_t i = 0; i < ln->numel; i++) WF_CHECK_TRUE(wf_model_params(m1)[ln->offset + i] == 1.0f);
    /* A tensor's init depends on its name, not on the rest of the layout:
     * the embedding is the same tied or untied, with 1 or 3 layers. */
    wf_model_config c2 = c;
    c2.tied_embeddings = 1, c2.n_layers = 3;
    wf_model *m4;
    WF_CHECK_OK(wf_model_create(&m4, &c2, a));
    wf_model_init(m4, 42);
    WF_CHECK_TRUE(memcmp(wf_model_params(m1), wf_model_params(m4),
                         wf_model_tensor(m1, 0)->numel * sizeof(float)) == 0);
    /* Thread count does not matter. */
    int nt = wf_kern_threads();
    wf_kern_set_threads(1);
    wf_model_init(m3, 42);
    wf_kern_set_threads(nt);
    WF_CHECK_TRUE(memcmp(wf_model_params(m1), wf_model_params(m3), n * sizeof(float)) == 0);
    wf_model_destroy(m1), wf_model_destroy(m2), wf_model_destroy(m3), wf_model_destroy(m4);
    wf_arena_destroy(a);
}

/* ------------------------------------------------------ plan and inputs */

WF_TEST(sequence_and_input_errors_say_where) {
    wf_model_config c = wf_test_tiny_config();
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m, &c, a));
    int32_t tok[2 * 8], tgt[2 * 8];
    wf_test_random_batch(tok, tgt, 16, c.vocab_size, 1, 3, 0);
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 2, 8, NULL), WF_ERR_INVALID, "wf_model_plan");
    WF_CHECK_ERR(wf_model_plan(m, 2, 65), WF_ERR_CONFIG,
                 "T = 65 is longer than model.max_seq_len = 64");
    WF_CHECK_OK(wf_model_plan(m, 2, 8));
    WF_CHECK_OK(wf_model_plan(m, 1, 8)); /* smaller: fine, nothing new */
    WF_CHECK_ERR(wf_model_plan(m, 4, 8), WF_ERR_INVALID, "planned once");
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 2, 100, NULL), WF_ERR_CONFIG,
                 "model.max_seq_len = 64");
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 3, 4, NULL), WF_ERR_INVALID, "plan 2 x 8");
    WF_CHECK_ERR(wf_model_backward(m, 1.0f), WF_ERR_INVALID, "forward with targets");
    tok[1 * 8 + 2] = 512;
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 2, 8, NULL), WF_ERR_RANGE,
                 "tokens[1][2] = 512 is outside the vocabulary [0, 512)");
    tok[1 * 8 + 2] = -3;
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 2, 8, NULL), WF_ERR_RANGE, "tokens[1][2] = -3");
    tok[1 * 8 + 2] = 7;
    tgt[5] = 600;
    WF_CHECK_ERR(wf_model_forward(m, tok, tgt, 2, 8, NULL), WF_ERR_RANGE, "targets[0][5] = 600");
    tgt[5] = -1; /* ignored: fine */
    float loss;
    WF_CHECK_OK(wf_model_forward(m, tok, tgt, 2, 8, &loss));
    WF_CHECK_OK(wf_model_forward(m, tok, NULL, 2, 8, &loss)); /* logits only */
    WF_CHECK_ERR(wf_model_backward(m, 1.0f), WF_ERR_INVALID, "forward with targets");
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

WF_TEST(a_step_allocates_nothing) {
    wf_model_config c = wf_test_tiny_config();
    wf_test_model f = wf_test_model_make(&c, 1, WF_RECOMPUTE_NONE, 2, 8);
    int32_t tok[16], tgt[16];
    wf_test_random_batch(tok, tgt, 16, c.vocab_size, 2, 3, 0);
    wf_arena_stats before = wf_arena_get_stats(f.arena);
    wf_model_memory mem = wf_model_get_memory(f.m);
    WF_CHECK_TRUE(before.in_use >= mem.param_bytes + mem.grad_bytes + mem.activation_bytes);
    float loss;
    for (int step = 0; step < 2; step++) {
        WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 8, &loss));
        WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
    }
    wf_arena_stats after = wf_arena_get_stats(f.arena);
    WF_CHECK_EQ(after.n_allocs, before.n_allocs);
    WF_CHECK_EQ(after.in_use, before.in_use);
    wf_test_model_free(&f);
}

/* ---------------------------------------------------- forward/backward */

WF_TEST(initial_loss_is_near_log_vocab) {
    wf_model_config c = wf_test_tiny_config();
    wf_test_model f = wf_test_model_make(&c, 3, WF_RECOMPUTE_NONE, 2, 16);
    int32_t tok[32], tgt[32];
    wf_test_random_batch(tok, tgt, 32, c.vocab_size, 4, 3, 0);
    float loss = 0;
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 16, &loss));
    /* Logits of std ~0.02 * |x| leave the softmax nearly uniform. */
    WF_CHECK_NEAR(loss, log(512.0), 0.05);
    wf_test_model_free(&f);
}

/* wf_model_read_logits: the logits through the backend (device memory on
 * a device backend), the same floats as the buffer on the cpu; a range
 * past the planned (B, T, vocab) is refused. */
WF_TEST(logits_are_read_through_the_backend) {
    wf_model_config c = wf_test_tiny_config();
    wf_test_model f = wf_test_model_make(&c, 3, WF_RECOMPUTE_NONE, 2, 16);
    int32_t tok[32], tgt[32];
    wf_test_random_batch(tok, tgt, 32, c.vocab_size, 4, 3, 0);
    WF_CHECK_OK(wf_model_forward(f.m, tok, NULL, 2, 16, NULL));
    float row[512];
    size_t at = (size_t)17 * 512; /* row 1 of sequence 1 */
    WF_CHECK_OK(wf_model_read_logits(f.m, at, 512, row));
    WF_CHECK_TRUE(memcmp(row, wf_model_logits(f.m) + at, sizeof row) == 0);
    WF_CHECK_TRUE(row[0] != 0.0f || row[1] != 0.0f);
    WF_CHECK_ERR(wf_model_read_logits(f.m, 2 * 16 * 512 - 10, 20, row), WF_ERR_RANGE,
                 "model: logits [16374, 16394) are outside the 16384 planned");
    wf_test_model_free(&f);
}

WF_TEST(gradients_accumulate_and_scale) {
    wf_model_config c = wf_test_tiny_config();
    c.tied_embeddings = 0;
    wf_test_model f = wf_test_model_make(&c, 5, WF_RECOMPUTE_NONE, 2, 8);
    int32_t tok[16], tgt[16];
    wf_test_random_batch(tok, tgt, 16, c.vocab_size, 6, 3, 0);
    tgt[3] = -1;
    size_t n = wf_model_num_params(f.m);
    float *once = malloc(n * sizeof *once);
    float loss1, loss2;
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 8, &loss1));
    WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
    memcpy(once, wf_model_grads(f.m), n * sizeof *once);
    double norm = 0;
    for (size_t i = 0; i < n; i++) norm += (double)once[i] * once[i];
    WF_CHECK_TRUE(norm > 0);
    /* A second backward of the same batch adds the same gradient. */
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 8, &loss2));
    WF_CHECK_TRUE(loss1 == loss2);
    WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
    const float *g = wf_model_grads(f.m);
    for (size_t i = 0; i < n; i++)
        if (g[i] != 2.0f * once[i])
            wf_test_fail(__FILE__, __LINE__, "grad[%zu] = %.9g after two backwards, expected 2 x %.9g",
                         i, g[i], once[i]);
    /* loss_scale multiplies the gradient (by 0.25: exactly). */
    wf_model_zero_grad(f.m);
    for (size_t i = 0; i < n; i++) WF_CHECK_TRUE(g[i] == 0.0f);
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 8, &loss2));
    WF_CHECK_OK(wf_model_backward(f.m, 0.25f));
    for (size_t i = 0; i < n; i++)
        if (g[i] != 0.25f * once[i])
            wf_test_fail(__FILE__, __LINE__, "grad[%zu] = %.9g with loss_scale 0.25, expected %.9g",
                         i, g[i], 0.25f * once[i]);
    /* After backward the logits buffer holds dlogits: rows sum to 0, the
     * ignored row is 0. */
    const float *dl = wf_model_logits(f.m);
    double row = 0;
    for (int v = 0; v < c.vocab_size; v++) row += dl[v];
    WF_CHECK_NEAR(row, 0.0, 1e-7);
    for (int v = 0; v < c.vocab_size; v++) WF_CHECK_TRUE(dl[3 * c.vocab_size + v] == 0.0f);
    free(once);
    wf_test_model_free(&f);
}

WF_TEST(all_targets_ignored_gives_zero_loss_and_gradient) {
    wf_model_config c = wf_test_tiny_config();
    wf_test_model f = wf_test_model_make(&c, 5, WF_RECOMPUTE_NONE, 1, 4);
    int32_t tok[4] = {1, 2, 3, 4}, tgt[4] = {-1, -1, -1, -1};
    float loss = 1;
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 1, 4, &loss));
    WF_CHECK_NEAR(loss, 0.0, 0);
    WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
    for (size_t i = 0; i < wf_model_num_params(f.m); i++) WF_CHECK_TRUE(wf_model_grads(f.m)[i] == 0.0f);
    wf_test_model_free(&f);
}

WF_TEST(same_seed_same_bits_and_smaller_batches) {
    wf_model_config c = wf_test_tiny_config();
    wf_test_model a = wf_test_model_make(&c, 9, WF_RECOMPUTE_NONE, 2, 8);
    wf_test_model b = wf_test_model_make(&c, 9, WF_RECOMPUTE_NONE, 2, 8);
    int32_t tok[16], tgt[16];
    wf_test_random_batch(tok, tgt, 16, c.vocab_size, 10, 3, 0);
    float la, lb;
    WF_CHECK_OK(wf_model_forward(a.m, tok, tgt, 2, 8, &la));
    WF_CHECK_OK(wf_model_backward(a.m, 1.0f));
    WF_CHECK_OK(wf_model_forward(b.m, tok, tgt, 2, 8, &lb));
    WF_CHECK_OK(wf_model_backward(b.m, 1.0f));
    WF_CHECK_TRUE(la == lb);
    size_t n = wf_model_num_params(a.m);
    WF_CHECK_TRUE(memcmp(wf_model_grads(a.m), wf_model_grads(b.m), n * sizeof(float)) == 0);
    /* A 1 x 5 batch through the 2 x 8 plan equals the same batch through a
     * model planned for exactly 1 x 5 (to fp32 rounding: sgemm may block a
     * different row count differently). */
    wf_test_model s = wf_test_model_make(&c, 9, WF_RECOMPUTE_NONE, 1, 5);
    float l1, l2;
    WF_CHECK_OK(wf_model_forward(a.m, tok, tgt, 1, 5, &l1));
    WF_CHECK_OK(wf_model_forward(s.m, tok, tgt, 1, 5, &l2));
    WF_CHECK_NEAR(l1, l2, 1e-6 * fabs(l2));
    const float *x = wf_model_logits(a.m), *y = wf_model_logits(s.m);
    for (int i = 0; i < 5 * c.vocab_size; i++) WF_CHECK_NEAR(x[i], y[i], 1e-6);
    wf_test_model_free(&a), wf_test_model_free(&b), wf_test_model_free(&s);
}

/* ------------------------------------------------------------- threads */

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) wf_test_fail(__FILE__, __LINE__, "cannot open /proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void *idle_thread(void *arg) { return arg; }

WF_TEST(a_step_uses_one_thread_pool) {
    /* The kernels' OpenMP loops and OpenBLAS share one pool: after a step
     * the process has at most (pool size - 1) threads more than it started
     * with. A second pool, e.g. the pthreads build of OpenBLAS (Debian's
     * libopenblas0-pthread, which the libopenblas.so.0 alternative may
     * select) beside the kernels' libgomp, adds its own workers and fails
     * this. One thread is started and joined
     * first, so that helpers that start with the first pthread_create
     * (ThreadSanitizer's) are counted in `before`. */
    pthread_t th;
    WF_CHECK_TRUE(pthread_create(&th, NULL, idle_thread, NULL) == 0);
    WF_CHECK_TRUE(pthread_join(th, NULL) == 0);
    int before = count_threads();
    wf_model_config c = wf_test_tiny_config();
    wf_test_model f = wf_test_model_make(&c, 1, WF_RECOMPUTE_NONE, 2, 32);
    int32_t tok[64], tgt[64];
    wf_test_random_batch(tok, tgt, 64, c.vocab_size, 2, 3, 0);
    float loss;
    for (int step = 0; step < 2; step++) {
        WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 32, &loss));
        WF_CHECK_OK(wf_model_backward(f.m, 1.0f));
    }
    int pool = wf_kern_threads();
    if (openblas_get_num_threads() > pool) pool = openblas_get_num_threads();
    int extra = count_threads() - before;
    if (extra > pool - 1)
        wf_test_fail(__FILE__, __LINE__, "a step added %d threads; one pool of %d adds at most %d",
                     extra, pool, pool - 1);
    wf_test_model_free(&f);
}

/* ---------------------------------------------------------------- units */

typedef struct {
    wf_model *m;
    int events[64][2];
    int n;
    float *p[8], *g[8]; /* each unit's own copies (a model without buffers) */
} unit_log;

static wf_status log_unit(void *ctx, int unit, wf_model_unit_event ev) {
    unit_log *L = ctx;
    if (L->n < 64) L->events[L->n][0] = unit, L->events[L->n][1] = (int)ev;
    L->n++;
    if (ev == WF_UNIT_FWD_BEGIN || ev == WF_UNIT_BWD_BEGIN) wf_model_bind_unit(L->m, unit, L->p[unit], L->g[unit]);
    return WF_OK;
}

static wf_status fail_unit(void *ctx, int unit, wf_model_unit_event ev) {
    (void)ctx;
    return unit == 2 && ev == WF_UNIT_BWD_BEGIN ? wf_error(WF_ERR_IO, "unit hook: gather failed") : WF_OK;
}

/* A model without its own buffers, every unit bound to separate copies
 * by the unit hook, computes the same loss and gradients bit for bit as
 * the usual model; the hook sees every unit's forward in order and its
 * backward in reverse; units tile the layout; init by unit is init. */
static void units_match(int tied) {
    wf_model_config c = wf_test_tiny_config();
    c.tied_embeddings = tied;
    wf_test_model f = wf_test_model_make(&c, 9, WF_RECOMPUTE_NONE, 2, 8);
    wf_arena *a;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    wf_model *m;
    WF_CHECK_OK(wf_model_create_ex(&m, &c, a, WF_MODEL_NO_PARAMS | WF_MODEL_NO_GRADS));
    WF_CHECK_OK(wf_model_plan(m, 2, 8));
    WF_CHECK_TRUE(wf_model_params(m) == NULL && wf_model_grads(m) == NULL);
    int U = wf_model_num_units(m);
    WF_CHECK_EQ(U, c.n_layers + 2);
    unit_log L = {.m = m};
    size_t end = 0;
    for (int u = 0; u < U; u++) {
        size_t off, n;
        wf_model_unit_range(m, u, &off, &n);
        WF_CHECK_EQ(off, end);
        end = off + n;
        L.p[u] = calloc(n, sizeof(float));
        L.g[u] = calloc(n, sizeof(float));
        wf_model_bind_unit(m, u, L.p[u], NULL);
        wf_model_init_unit(m, u, 9);
        WF_CHECK_TRUE(memcmp(L.p[u], wf_model_params(f.m) + off, n * sizeof(float)) == 0);
    }
    WF_CHECK_EQ(end, wf_model_num_params(m));
    wf_model_set_unit_hook(m, log_unit, &L);
    int32_t tok[16], tgt[16];
    wf_test_random_batch(tok, tgt, 16, c.vocab_size, 10, 3, 0);
    float l1, l2;
    WF_CHECK_OK(wf_model_forward(f.m, tok, tgt, 2, 8, &l1));
    WF_CHECK_OK(wf_model_backward(f.m, 0.5f));
    WF_CHECK_OK(wf_model_forward(m, tok, tgt, 2, 8, &l2));
    WF_CHECK_TRUE(l1 == l2);
    WF_CHECK_OK(wf_model_backward(m, 0.5f));
    for (int u = 0; u < U; u++) {
        size_t off, n;
        wf_model_unit_range(m, u, &off, &n);
        WF_CHECK_TRUE(memcmp(L.g[u], wf_model_grads(f.m) + off, n * sizeof(float)) == 0);
    }
    WF_CHECK_EQ(L.n, 4 * U);
    for (int u = 0; u < U; u++) {
        WF_CHECK_TRUE(L.events[2 * u][0] == u && L.events[2 * u][1] == WF_UNIT_FWD_BEGIN);
        WF_CHECK_TRUE(L.events[2 * u + 1][0] == u && L.events[2 * u + 1][1] == WF_UNIT_FWD_END);
        int b = 2 * U + 2 * (U - 1 - u);
        WF_CHECK_TRUE(L.events[b][0] == u && L.events[b][1] == WF_UNIT_BWD_BEGIN);
        WF_CHECK_TRUE(L.events[b + 1][0] == u && L.events[b + 1][1] == WF_UNIT_BWD_END);
    }
    /* A hook's error ends the backward with it. */
    WF_CHECK_OK(wf_model_forward(m, tok, tgt, 2, 8, &l2));
    wf_model_set_unit_hook(m, fail_unit, NULL);
    WF_CHECK_ERR(wf_model_backward(m, 0.5f), WF_ERR_IO, "gather failed");
    for (int u = 0; u < U; u++) free(L.p[u]), free(L.g[u]);
    wf_model_destroy(m);
    wf_arena_destroy(a);
    wf_test_model_free(&f);
}

WF_TEST(units_bound_elsewhere_compute_the_same_bits) {
    units_match(1);
    units_match(0);
}

/* ------------------------------------------------- tensor parallelism */

static wf_status no_all_reduce(void *ctx, float *buf, size_t n, wf_model_tp_op op, const char *tag) {
    (void)ctx, (void)buf, (void)n, (void)op, (void)tag;
    return wf_error(WF_ERR_INTERNAL, "not called in these tests");
}

/* The slices a rank's tensor table names (the values and the numbers
 * under MPI: tests/py/test_tp_mpi.py), and the refusals, without a
 * communicator: creating a TP model calls no collective. */
WF_TEST(tp_slices_are_named_and_bad_splits_refused) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny")); /* dim 64, 4 heads, 2 kv heads, vocab 512 */
    c.tied_embeddings = 0;
    int H = wf_model_config_hidden_dim(&c);
    wf_arena *a;
    wf_model *m, *whole;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&whole, &c, a));
    for (int i = 0; i < wf_model_num_tensors(whole); i++) {
        const wf_tensor_info *t = wf_model_tensor(whole, i);
        WF_CHECK_EQ(t->split_dim, -1);
        WF_CHECK_TRUE(t->global_shape[0] == t->shape[0] && t->global_shape[1] == t->shape[1]);
    }
    wf_model_tp tp = {.size = 2, .rank = 1, .ops = {.all_reduce = no_all_reduce}};
    WF_CHECK_OK(wf_model_create_tp(&m, &c, a, 0, &tp));
    struct {
        const char *name;
        int dim;
        int64_t s0, s1, off;
    } want[] = {
        {"model.embed_tokens.weight", 0, 256, 64, 256},
        {"model.layers.1.self_attn.q_proj.weight", 0, 32, 64, 32},
        {"model.layers.1.self_attn.k_proj.weight", 0, 16, 64, 16},
        {"model.layers.1.self_attn.o_proj.weight", 1, 64, 32, 32},
        {"model.layers.1.mlp.up_proj.weight", 0, H / 2, 64, H / 2},
        {"model.layers.1.mlp.down_proj.weight", 1, 64, H / 2, H / 2},
        {"model.layers.1.input_layernorm.weight", -1, 64, 0, 0},
        {"lm_head.weight", 0, 256, 64, 256},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const wf_tensor_info *t = wf_model_find_tensor(m, want[i].name), *g = wf_model_find_tensor(whole, want[i].name);
        WF_CHECK_TRUE(t != NULL && g != NULL);
        WF_CHECK_EQ(t->split_dim, want[i].dim);
        WF_CHECK_EQ(t->shape[0], want[i].s0);
        WF_CHECK_EQ(t->shape[1], want[i].s1);
        WF_CHECK_EQ(t->split_offset, want[i].off);
        WF_CHECK_TRUE(t->global_shape[0] == g->shape[0] && t->global_shape[1] == g->shape[1]);
    }
    /* every split tensor is half the whole one; the norms (2 per layer and the final one) whole */
    size_t norms = (size_t)(2 * c.n_layers + 1) * (size_t)c.dim;
    WF_CHECK_EQ(2 * (wf_model_num_params(m) - norms), wf_model_num_params(whole) - norms);
    /* rank 1's init is the whole model's second half of the embedding's rows */
    wf_model_init(whole, 5);
    wf_model_init(m, 5);
    const wf_tensor_info *t = wf_model_find_tensor(m, "model.embed_tokens.weight");
    WF_CHECK_TRUE(memcmp(wf_model_params(m) + t->offset, wf_model_params(whole) + (size_t)256 * 64,
                         t->numel * sizeof(float)) == 0);
    wf_model_destroy(m);
    wf_model_destroy(whole);

    tp.size = 3, tp.rank = 0;
    WF_CHECK_ERR(wf_model_create_tp(&m, &c, a, 0, &tp), WF_ERR_CONFIG,
                 "model.n_heads = 4 is not divisible by the tensor parallel size 3");
    tp.size = 4;
    WF_CHECK_ERR(wf_model_create_tp(&m, &c, a, 0, &tp), WF_ERR_CONFIG,
                 "model.n_kv_heads = 2 is not divisible by the tensor parallel size 4");
    tp.size = 2, tp.rank = 2;
    WF_CHECK_ERR(wf_model_create_tp(&m, &c, a, 0, &tp), WF_ERR_INVALID, "rank 2 of 2");
    tp.rank = 0, tp.sequence_parallel = 1; /* without all_gather and reduce_scatter */
    WF_CHECK_ERR(wf_model_create_tp(&m, &c, a, 0, &tp), WF_ERR_INVALID, "sequence parallelism");
    WF_CHECK_TRUE(m == NULL);
    wf_arena_destroy(a);
}
