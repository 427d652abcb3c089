/* generate_dump: greedy generation from a small random model, written out
 * for tests/py/test_generate_vs_torch.py.
 *
 *   generate_dump OUT_FILE [key=value ...]
 *
 * Keys: preset (default tiny), dim, n_layers, n_heads, n_kv_heads, vocab,
 * hidden, max_seq_len, eps, theta, tied, init_std, seed (parameters),
 * data_seed (the prompt), prompt (its length), new (tokens to generate),
 * threads.
 *
 * It generates `new` tokens with wf_generate (temperature 0), then replays
 * the same sequence through wf_generator_prefill/step to keep the logits
 * each token was chosen from, and runs wf_model_forward once over the whole
 * sequence (prompt and generated tokens but the last).
 *
 * OUT_FILE has tests/tools/model_dump.c's format ("WFTD", version 1,
 * records). Records: "config" (JSON text), every parameter by its name,
 * "prompt" (P) and "generated" (N) int32, "cached_logits" (N, V): the
 * generator's logits before each generated token, "full_logits" (P+N-1, V):
 * the full forward's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/generate.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/rng.h"
#include "lib/dump_record.h"
#include "lib/tool_model.h"

typedef struct {
    wf_model_config cfg;
    long long prompt, n_new, threads;
    unsigned long long seed, data_seed;
} dump_args;

static int parse_kv(const char *arg, dump_args *a) {
    const char *eq = strchr(arg, '=');
    if (!eq) return -1;
    size_t klen = (size_t)(eq - arg);
    const char *v = eq + 1;
    wf_model_config *c = &a->cfg;
    int model = tool_model_key(c, arg, klen, v);
    if (model != 0) return model > 0 ? 0 : -1;
#define KEY_(s) (klen == strlen(s) && strncmp(arg, s, klen) == 0)
    char *end;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0') return -1;
    if (KEY_("seed")) a->seed = strtoull(v, NULL, 10);
    else if (KEY_("data_seed")) a->data_seed = strtoull(v, NULL, 10);
    else if (KEY_("prompt")) a->prompt = (long long)d;
    else if (KEY_("new")) a->n_new = (long long)d;
    else if (KEY_("threads")) a->threads = (long long)d;
    else return -1;
#undef KEY_
    return 0;
}

typedef struct {
    int32_t *buf;
    int n;
} token_sink;

static int keep_token(void *user, int32_t token) {
    token_sink *s = user;
    s->buf[s->n++] = token;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: generate_dump OUT_FILE [key=value ...]\n");
        return 2;
    }
    dump_args a = {.prompt = 4, .n_new = 16, .seed = 1, .data_seed = 2};
    wf_model_config_preset(&a.cfg, "tiny");
    for (int i = 2; i < argc; i++)
        if (parse_kv(argv[i], &a)) {
            fprintf(stderr, "generate_dump: bad argument '%s' %s\n", argv[i], wf_error_msg());
            return 2;
        }
    if (a.threads > 0) wf_kern_set_threads((int)a.threads);
    const int P = (int)a.prompt, N = (int)a.n_new, V = a.cfg.vocab_size, T = P + N - 1;
    if (P < 1 || N < 1) {
        fprintf(stderr, "generate_dump: prompt and new must be >= 1\n");
        return 2;
    }

    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_generator *g = NULL;
    int32_t *seq = calloc((size_t)(P + N), sizeof *seq);
    float *cached = calloc((size_t)N * (size_t)V, sizeof *cached);
    int rc = 1;
    if (!seq || !cached) goto done;
    if (wf_arena_create(&arena, 0) != WF_OK || wf_model_create(&m, &a.cfg, arena) != WF_OK ||
        wf_model_plan(m, 1, T) != WF_OK || wf_generator_create(&g, m, P + N) != WF_OK)
        goto fail;
    wf_model_init(m, a.seed);
    wf_rng r = wf_rng_make(a.data_seed, 7);
    for (int i = 0; i < P; i++) seq[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);

    wf_sampler_config greedy = {0.0, 0, 1.0};
    token_sink sink = {seq + P, 0};
    int n_gen = 0;
    if (wf_generate(g, seq, P, N, &greedy, 0, -1, keep_token, &sink, &n_gen) != WF_OK) goto fail;
    if (n_gen != N) {
        fprintf(stderr, "generate_dump: generated %d tokens, expected %d\n", n_gen, N);
        goto done;
    }
    /* Replay: the logits each token was chosen from. */
    const float *logits;
    wf_generator_reset(g);
    if (wf_generator_prefill(g, seq, P, &logits) != WF_OK) goto fail;
    for (int i = 0; i < N; i++) {
        memcpy(cached + (size_t)i * V, logits, (size_t)V * sizeof *logits);
        if (i + 1 < N && wf_generator_step(g, seq[P + i], &logits) != WF_OK) goto fail;
    }
    if (wf_model_forward(m, seq, NULL, 1, T, NULL) != WF_OK) goto fail;

    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        goto done;
    }
    const wf_model_config *c = &a.cfg;
    char json[1024];
    int jl = snprintf(json, sizeof json,
                      "{\"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, "
                      "\"vocab_size\": %d, \"ffn_hidden_dim\": %d, \"max_seq_len\": %d, "
                      "\"norm_eps\": %.17g, \"rope_theta\": %.17g, \"tied_embeddings\": %d, "
                      "\"init_std\": %.17g, \"prompt\": %d, \"new\": %d}",
                      c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size,
                      wf_model_config_hidden_dim(c), c->max_seq_len, c->norm_eps, c->rope_theta,
                      c->tied_embeddings, c->init_std, P, N);
    int64_t shape[2] = {jl, 0};
    int bad = fwrite("WFTD\1\0\0\0", 1, 8, f) != 8;
    bad |= dump_put_record(f, "config", 2, 1, shape, json, 1);
    const float *params = wf_model_params(m);
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        bad |= dump_put_record(f, t->name, 0, t->ndim, t->shape, params + t->offset, 4);
    }
    shape[0] = P;
    bad |= dump_put_record(f, "prompt", 1, 1, shape, seq, 4);
    shape[0] = N;
    bad |= dump_put_record(f, "generated", 1, 1, shape, seq + P, 4);
    shape[0] = N, shape[1] = V;
    bad |= dump_put_record(f, "cached_logits", 0, 2, shape, cached, 4);
    shape[0] = T;
    bad |= dump_put_record(f, "full_logits", 0, 2, shape, wf_model_logits(m), 4);
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "generate_dump: writing %s failed\n", argv[1]);
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "generate_dump: %s\n", wf_error_msg());
done:
    wf_generator_destroy(g);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    free(seq);
    free(cached);
    return rc;
}
