/* optim_dump: trains a small random model for a few steps (forward,
 * backward, clip, AdamW under a schedule) on fixed random batches and
 * writes what a reference needs to replay the run, for
 * tests/py/test_optim_vs_torch.py.
 *
 *   optim_dump OUT_FILE [key=value ...]
 *
 * Model keys as model_dump: preset (default tiny), dim, n_layers, n_heads,
 * n_kv_heads, vocab, hidden, max_seq_len, eps, theta, tied, B, T, seed
 * (parameters), data_seed (batches), ignore (a target is -1 with this
 * probability), threads. Optimizer keys: steps (default 10), schedule
 * (0 cosine, 1 wsd, 2 constant), lr, min_lr, warmup, decay_frac, beta1,
 * beta2, adam_eps, wd, decay_emb, clip. The schedule's total is `steps`.
 * per_step=1 also records every step's gradients and updated parameters.
 *
 * OUT_FILE: model_dump's record format (see tests/tools/model_dump.c), with
 * records "init." + every parameter name (before the first step), "tokens"
 * and "targets" (steps, B, T), "loss" (steps: the loss of each step's
 * forward, before its update), "final." + every parameter name (after the
 * last step), and "config" (JSON text: the model and optimizer settings,
 * plus "lrs" and "grad_norms", the learning rate and the gradient norm
 * before clipping of every step, in full double precision). With
 * per_step=1, before "final.": for each step s, "step<s>.grad." + every
 * parameter name (the gradient the step used, before clipping) and
 * "step<s>.param." + every parameter name (the parameters after it).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/rng.h"
#include "lib/dump_record.h"
#include "lib/tool_model.h"

typedef struct {
    wf_model_config model;
    wf_adamw_config adamw;
    wf_lr_schedule sched;
    long long B, T, steps, threads, per_step;
    unsigned long long seed, data_seed;
    double ignore;
} run_cfg;

static int parse_kv(const char *arg, run_cfg *r) {
    const char *eq = strchr(arg, '=');
    if (!eq) return -1;
    size_t klen = (size_t)(eq - arg);
    const char *v = eq + 1;
    int model = tool_model_key(&r->model, arg, klen, v);
    if (model != 0) return model > 0 ? 0 : -1;
#define KEY_(s) (klen == strlen(s) && strncmp(arg, s, klen) == 0)
    char *end;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0') return -1;
    if (KEY_("B")) r->B = (long long)d;
    else if (KEY_("T")) r->T = (long long)d;
    else if (KEY_("seed")) r->seed = strtoull(v, NULL, 10);
    else if (KEY_("data_seed")) r->data_seed = strtoull(v, NULL, 10);
    else if (KEY_("ignore")) r->ignore = d;
    else if (KEY_("threads")) r->threads = (long long)d;
    else if (KEY_("steps")) r->steps = (long long)d;
    else if (KEY_("per_step")) r->per_step = (long long)d;
    else if (KEY_("schedule")) r->sched.kind = (wf_lr_kind)(int)d;
    else if (KEY_("lr")) r->sched.lr = d;
    else if (KEY_("min_lr")) r->sched.min_lr = d;
    else if (KEY_("warmup")) r->sched.warmup = (uint64_t)d;
    else if (KEY_("decay_frac")) r->sched.decay_frac = d;
    else if (KEY_("beta1")) r->adamw.beta1 = d;
    else if (KEY_("beta2")) r->adamw.beta2 = d;
    else if (KEY_("adam_eps")) r->adamw.eps = d;
    else if (KEY_("wd")) r->adamw.weight_decay = d;
    else if (KEY_("decay_emb")) r->adamw.decay_embeddings = (int)d;
    else if (KEY_("clip")) r->adamw.grad_clip = d;
    else return -1;
#undef KEY_
    return 0;
}

/* The config record: settings, then every step's lr and gradient norm. */
static int put_config(FILE *f, const run_cfg *r, const double *lrs, const double *norms) {
    const wf_model_config *c = &r->model;
    const wf_adamw_config *a = &r->adamw;
    size_t cap = 4096 + (size_t)r->steps * 64, len = 0;
    char *json = malloc(cap);
    if (!json) return -1;
    len += (size_t)snprintf(
        json + len, cap - len,
        "{\"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, "
        "\"vocab_size\": %d, \"ffn_hidden_dim\": %d, \"max_seq_len\": %d, "
        "\"norm_eps\": %.17g, \"rope_theta\": %.17g, \"tied_embeddings\": %d, "
        "\"B\": %lld, \"T\": %lld, \"steps\": %lld, \"schedule\": \"%s\", \"lr\": %.17g, "
        "\"min_lr\": %.17g, \"warmup\": %" PRIu64 ", \"decay_frac\": %.17g, \"beta1\": %.17g, "
        "\"beta2\": %.17g, \"adam_eps\": %.17g, \"weight_decay\": %.17g, "
        "\"decay_embeddings\": %d, \"grad_clip\": %.17g",
        c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size,
        wf_model_config_hidden_dim(c), c->max_seq_len, c->norm_eps, c->rope_theta,
        c->tied_embeddings, r->B, r->T, r->steps, wf_lr_kind_name(r->sched.kind), r->sched.lr,
        r->sched.min_lr, r->sched.warmup, r->sched.decay_frac, a->beta1, a->beta2, a->eps,
        a->weight_decay, a->decay_embeddings, a->grad_clip);
    const char *keys[2] = {"lrs", "grad_norms"};
    const double *vals[2] = {lrs, norms};
    for (int k = 0; k < 2; k++) {
        len += (size_t)snprintf(json + len, cap - len, ", \"%s\": [", keys[k]);
        for (long long s = 0; s < r->steps; s++)
            len += (size_t)snprintf(json + len, cap - len, "%s%.17g", s ? ", " : "", vals[k][s]);
        len += (size_t)snprintf(json + len, cap - len, "]");
    }
    len += (size_t)snprintf(json + len, cap - len, "}");
    int64_t shape[1] = {(int64_t)len};
    int bad = len >= cap || dump_put_record(f, "config", 2, 1, shape, json, 1);
    free(json);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: optim_dump OUT_FILE [key=value ...]\n");
        return 2;
    }
    run_cfg r = {.adamw = wf_adamw_config_default(),
                 .sched = {.kind = WF_LR_COSINE, .lr = 1e-3, .min_lr = 1e-4, .warmup = 3,
                           .decay_frac = 0.2},
                 .B = 2, .T = 8, .steps = 10, .seed = 1, .data_seed = 2, .ignore = 0.1};
    wf_model_config_preset(&r.model, "tiny");
    for (int i = 2; i < argc; i++) {
        if (parse_kv(argv[i], &r)) {
            fprintf(stderr, "optim_dump: bad argument '%s' %s\n", argv[i], wf_error_msg());
            return 2;
        }
    }
    if (r.steps < 1) {
        fprintf(stderr, "optim_dump: steps must be >= 1\n");
        return 2;
    }
    r.sched.total = (uint64_t)r.steps;
    if (r.threads > 0) wf_kern_set_threads((int)r.threads);

    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *o = NULL;
    int rc = 1;
    size_t S = (size_t)r.steps, N = (size_t)(r.B * r.T);
    int32_t *tokens = malloc(S * N * sizeof *tokens), *targets = malloc(S * N * sizeof *targets);
    float *losses = malloc(S * sizeof *losses), *init = NULL;
    double *lrs = malloc(S * sizeof *lrs), *norms = malloc(S * sizeof *norms);
    FILE *f = NULL;
    if (!tokens || !targets || !losses || !lrs || !norms) {
        fprintf(stderr, "optim_dump: out of memory\n");
        goto done;
    }
    if (wf_lr_validate(&r.sched) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &r.model, arena) != WF_OK ||
        wf_model_plan(m, (int)r.B, (int)r.T) != WF_OK ||
        wf_adamw_create(&o, &r.adamw, m, arena) != WF_OK) {
        fprintf(stderr, "optim_dump: %s\n", wf_error_msg());
        goto done;
    }
    wf_model_init(m, r.seed);
    size_t P = wf_model_num_params(m);
    init = malloc(P * sizeof *init);
    if (!init) goto done;
    memcpy(init, wf_model_params(m), P * sizeof *init);

    wf_rng rng = wf_rng_make(r.data_seed, 7);
    for (size_t n = 0; n < S * N; n++) {
        tokens[n] = (int32_t)wf_rng_below(&rng, (uint64_t)r.model.vocab_size);
        targets[n] = (int32_t)wf_rng_below(&rng, (uint64_t)r.model.vocab_size);
        if (wf_rng_uniform_double(&rng) < r.ignore) targets[n] = -1;
    }
    f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        goto done;
    }
    int bad = fwrite("WFTD\1\0\0\0", 1, 8, f) != 8;
    bad |= tool_model_put_tensors(f, m, init, "init.");
    int64_t shape[3] = {(int64_t)S, r.B, r.T};
    bad |= dump_put_record(f, "tokens", 1, 3, shape, tokens, 4);
    bad |= dump_put_record(f, "targets", 1, 3, shape, targets, 4);
    for (size_t s = 0; s < S; s++) {
        wf_model_zero_grad(m);
        lrs[s] = wf_lr_at(&r.sched, s);
        if (wf_model_forward(m, tokens + s * N, targets + s * N, (int)r.B, (int)r.T,
                             &losses[s]) != WF_OK ||
            wf_model_backward(m, 1.0f) != WF_OK || wf_adamw_step(o, lrs[s], &norms[s]) != WF_OK) {
            fprintf(stderr, "optim_dump: step %zu: %s\n", s, wf_error_msg());
            goto done;
        }
        if (r.per_step) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "step%zu.grad.", s);
            bad |= tool_model_put_tensors(f, m, wf_model_grads(m), prefix);
            snprintf(prefix, sizeof prefix, "step%zu.param.", s);
            bad |= tool_model_put_tensors(f, m, wf_model_params(m), prefix);
        }
    }
    bad |= dump_put_record(f, "loss", 0, 1, shape, losses, 4);
    bad |= tool_model_put_tensors(f, m, wf_model_params(m), "final.");
    bad |= put_config(f, &r, lrs, norms);
    bad |= fclose(f) != 0;
    f = NULL;
    if (bad) {
        fprintf(stderr, "optim_dump: writing %s failed\n", argv[1]);
        goto done;
    }
    rc = 0;
done:
    if (f) fclose(f);
    free(tokens);
    free(targets);
    free(losses);
    free(lrs);
    free(norms);
    free(init);
    wf_adamw_destroy(o);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return rc;
}
