/* model_dump: runs one forward and backward of a small random model and
 * writes everything a reference needs to check it, for
 * tests/py/test_model_vs_torch.py.
 *
 *   model_dump OUT_FILE [key=value ...]
 *
 * Keys: preset (default tiny), dim, n_layers, n_heads, n_kv_heads, vocab,
 * hidden (ffn_hidden_dim), max_seq_len, eps, theta, tied, B, T, seed
 * (parameters), data_seed (tokens and targets), ignore (a target is -1
 * with this probability), loss_scale, threads, recompute (none, block,
 * selective: wf_model_set_recompute).
 *
 * OUT_FILE (a test artifact, little-endian): "WFTD", u32 version = 1, then
 * records until the end of the file:
 *   u32 name_len, name bytes, u32 dtype (0 f32, 1 i32, 2 UTF-8 text),
 *   u32 ndim, i64 shape[ndim], the data (prod(shape) elements; text: bytes).
 * Records: "config" (JSON text), every parameter by its name,
 * "tokens" and "targets" (B, T), "logits" (B, T, V), "loss" (1),
 * and "grad." + every parameter name.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/rng.h"
#include "lib/dump_record.h"
#include "lib/tool_model.h"

static int parse_kv(const char *arg, wf_model_config *c, long long *B, long long *T,
                    unsigned long long *seed, unsigned long long *data_seed, double *ignore,
                    double *loss_scale, long long *threads, int *recompute) {
    const char *eq = strchr(arg, '=');
    if (!eq) return -1;
    size_t klen = (size_t)(eq - arg);
    const char *v = eq + 1;
    int model = tool_model_key(c, arg, klen, v);
    if (model != 0) return model > 0 ? 0 : -1;
#define KEY_(s) (klen == strlen(s) && strncmp(arg, s, klen) == 0)
    if (KEY_("recompute")) return (*recompute = wf_model_recompute_parse(v)) < 0 ? -1 : 0;
    char *end;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0') return -1;
    if (KEY_("B")) *B = (long long)d;
    else if (KEY_("T")) *T = (long long)d;
    else if (KEY_("seed")) *seed = strtoull(v, NULL, 10);
    else if (KEY_("data_seed")) *data_seed = strtoull(v, NULL, 10);
    else if (KEY_("ignore")) *ignore = d;
    else if (KEY_("loss_scale")) *loss_scale = d;
    else if (KEY_("threads")) *threads = (long long)d;
    else return -1;
#undef KEY_
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: model_dump OUT_FILE [key=value ...]\n");
        return 2;
    }
    wf_model_config cfg;
    wf_model_config_preset(&cfg, "tiny");
    long long B = 2, T = 8, threads = 0;
    unsigned long long seed = 1, data_seed = 2;
    double ignore = 0.1, loss_scale = 1.0;
    int recompute = WF_RECOMPUTE_NONE;
    for (int i = 2; i < argc; i++) {
        if (parse_kv(argv[i], &cfg, &B, &T, &seed, &data_seed, &ignore, &loss_scale, &threads, &recompute)) {
            fprintf(stderr, "model_dump: bad argument '%s' %s\n", argv[i], wf_error_msg());
            return 2;
        }
    }
    if (threads > 0) wf_kern_set_threads((int)threads);

    wf_arena *arena = NULL;
    wf_model *m = NULL;
    int rc = 1;
    if (wf_arena_create(&arena, 0) != WF_OK || wf_model_create(&m, &cfg, arena) != WF_OK ||
        wf_model_set_recompute(m, (wf_model_recompute)recompute) != WF_OK ||
        wf_model_plan(m, (int)B, (int)T) != WF_OK) {
        fprintf(stderr, "model_dump: %s\n", wf_error_msg());
        goto done;
    }
    wf_model_init(m, seed);
    size_t N = (size_t)(B * T);
    int32_t *tokens = malloc(N * sizeof *tokens), *targets = malloc(N * sizeof *targets);
    float *logits = malloc(N * (size_t)cfg.vocab_size * sizeof *logits);
    wf_rng r = wf_rng_make(data_seed, 7);
    for (size_t n = 0; n < N; n++) {
        tokens[n] = (int32_t)wf_rng_below(&r, (uint64_t)cfg.vocab_size);
        targets[n] = (int32_t)wf_rng_below(&r, (uint64_t)cfg.vocab_size);
        if (wf_rng_uniform_double(&r) < ignore) targets[n] = -1;
    }
    float loss = 0;
    if (wf_model_forward(m, tokens, targets, (int)B, (int)T, &loss) != WF_OK ||
        (memcpy(logits, wf_model_logits(m), N * (size_t)cfg.vocab_size * sizeof *logits),
         wf_model_backward(m, (float)loss_scale)) != WF_OK) {
        fprintf(stderr, "model_dump: %s\n", wf_error_msg());
        goto done_buffers;
    }

    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        goto done_buffers;
    }
    char json[1024];
    int jl = snprintf(json, sizeof json,
                      "{\"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, "
                      "\"vocab_size\": %d, \"ffn_hidden_dim\": %d, \"max_seq_len\": %d, "
                      "\"norm_eps\": %.17g, \"rope_theta\": %.17g, \"tied_embeddings\": %d, "
                      "\"B\": %lld, \"T\": %lld, \"loss_scale\": %.17g}",
                      cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size,
                      wf_model_config_hidden_dim(&cfg), cfg.max_seq_len, cfg.norm_eps,
                      cfg.rope_theta, cfg.tied_embeddings, B, T, loss_scale);
    int64_t shape[3];
    int bad = fwrite("WFTD\1\0\0\0", 1, 8, f) != 8;
    shape[0] = jl;
    bad |= dump_put_record(f, "config", 2, 1, shape, json, 1);
    const float *params = wf_model_params(m), *grads = wf_model_grads(m);
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        bad |= dump_put_record(f, t->name, 0, t->ndim, t->shape, params + t->offset, 4);
    }
    shape[0] = B, shape[1] = T, shape[2] = cfg.vocab_size;
    bad |= dump_put_record(f, "tokens", 1, 2, shape, tokens, 4);
    bad |= dump_put_record(f, "targets", 1, 2, shape, targets, 4);
    bad |= dump_put_record(f, "logits", 0, 3, shape, logits, 4);
    shape[0] = 1;
    bad |= dump_put_record(f, "loss", 0, 1, shape, &loss, 4);
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        char name[WF_TENSOR_NAME_MAX + 8];
        snprintf(name, sizeof name, "grad.%s", t->name);
        bad |= dump_put_record(f, name, 0, t->ndim, t->shape, grads + t->offset, 4);
    }
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "model_dump: writing %s failed\n", argv[1]);
        goto done_buffers;
    }
    rc = 0;
done_buffers:
    free(tokens);
    free(targets);
    free(logits);
done:
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return rc;
}
