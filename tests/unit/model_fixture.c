/* The unit tests' small model (model_fixture.h). */
#include "model_fixture.h"

#include "harness.h"
#include "weft/rng.h"

wf_model_config wf_test_tiny_config(void) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    return c;
}

wf_model_config wf_test_model_config(int dim, int layers, int heads, int kv_heads, int vocab, int hidden,
                                     int seq, int tied) {
    wf_model_config c = wf_test_tiny_config();
    c.dim = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads;
    c.vocab_size = vocab, c.ffn_hidden_dim = hidden, c.max_seq_len = seq;
    c.tied_embeddings = tied;
    return c;
}

wf_test_model wf_test_model_make(const wf_model_config *cfg, uint64_t seed, wf_model_recompute mode, int B,
                                 int T) {
    wf_test_model f = {0};
    WF_CHECK_OK(wf_arena_create(&f.arena, 1 << 20));
    WF_CHECK_OK(wf_model_create(&f.m, cfg, f.arena));
    WF_CHECK_OK(wf_model_set_recompute(f.m, mode));
    wf_model_init(f.m, seed);
    WF_CHECK_OK(wf_model_plan(f.m, B, T));
    return f;
}

void wf_test_model_free(wf_test_model *f) {
    wf_model_destroy(f->m);
    wf_arena_destroy(f->arena);
    f->m = NULL;
    f->arena = NULL;
}

void wf_test_random_batch(int32_t *tok, int32_t *tgt, int n, int V, uint64_t seed, uint64_t stream,
                          double ignored) {
    wf_rng r = wf_rng_make(seed, stream);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
        int skip = ignored > 0 && wf_rng_uniform_double(&r) < ignored;
        tgt[i] = skip ? -1 : (int32_t)wf_rng_below(&r, (uint64_t)V);
    }
}
