/* muon_dump: runs Muon (the block matrices) and AdamW (the rest) for a few
 * steps on random gradients and writes what a reference needs to replay
 * them, for tests/py/test_muon_vs_torch.py.
 *
 *   muon_dump OUT_FILE [key=value ...]
 *
 * Model keys as model_dump (preset, dim, n_layers, n_heads, n_kv_heads,
 * vocab, hidden, tied, ...), seed (parameters), grad_seed (gradients),
 * threads. Optimizer keys: steps (default 10), lr (Muon's), adamw_lr,
 * momentum, nesterov, ns_steps, scale (0 reference, 1 match_adamw_rms),
 * muon_wd, beta1, beta2, adam_eps, wd (AdamW's), clip.
 *
 * Each step's gradient is N(0, 1) per element times (1 + step) / 4, so
 * that clipping (when clip is below the norm) acts on some steps only.
 *
 * OUT_FILE: model_dump's record format, with "init." + every parameter
 * name, "step<s>.grad." + every name (the gradient of step s, before
 * clipping), "final." + every name, and "config" (JSON: the settings, the
 * Muon tensors' names, each step's gradient norm and Muon update RMS).
 */
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
    wf_muon_config muon;
    double lr, adamw_lr;
    long long steps, threads;
    unsigned long long seed, grad_seed;
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
    if (KEY_("seed")) r->seed = strtoull(v, NULL, 10);
    else if (KEY_("grad_seed")) r->grad_seed = strtoull(v, NULL, 10);
    else if (KEY_("threads")) r->threads = (long long)d;
    else if (KEY_("steps")) r->steps = (long long)d;
    else if (KEY_("lr")) r->lr = d;
    else if (KEY_("adamw_lr")) r->adamw_lr = d;
    else if (KEY_("momentum")) r->muon.momentum = d;
    else if (KEY_("nesterov")) r->muon.nesterov = (int)d;
    else if (KEY_("ns_steps")) r->muon.ns_steps = (int)d;
    else if (KEY_("scale")) r->muon.scale = (wf_muon_scale)(int)d;
    else if (KEY_("muon_wd")) r->muon.weight_decay = d;
    else if (KEY_("beta1")) r->adamw.beta1 = d;
    else if (KEY_("beta2")) r->adamw.beta2 = d;
    else if (KEY_("adam_eps")) r->adamw.eps = d;
    else if (KEY_("wd")) r->adamw.weight_decay = d;
    else if (KEY_("clip")) r->adamw.grad_clip = r->muon.grad_clip = d;
    else return -1;
#undef KEY_
    return 0;
}

static int put_config(FILE *f, const run_cfg *r, wf_model *m, const double *norms, const double *rms) {
    const wf_muon_config *u = &r->muon;
    const wf_adamw_config *a = &r->adamw;
    size_t cap = 8192 + (size_t)r->steps * 64 + (size_t)wf_model_num_tensors(m) * (WF_TENSOR_NAME_MAX + 4), len = 0;
    char *json = malloc(cap);
    if (!json) return -1;
    len += (size_t)snprintf(json + len, cap - len,
                            "{\"steps\": %lld, \"lr\": %.17g, \"adamw_lr\": %.17g, \"momentum\": %.17g, "
                            "\"nesterov\": %d, \"ns_steps\": %d, \"ns_a\": %.17g, \"ns_b\": %.17g, \"ns_c\": %.17g, "
                            "\"scale\": \"%s\", \"muon_weight_decay\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, "
                            "\"adam_eps\": %.17g, \"weight_decay\": %.17g, \"grad_clip\": %.17g, \"muon\": [",
                            r->steps, r->lr, r->adamw_lr, u->momentum, u->nesterov, u->ns_steps, u->ns_a, u->ns_b,
                            u->ns_c, wf_muon_scale_names[u->scale], u->weight_decay, a->beta1, a->beta2, a->eps,
                            a->weight_decay, a->grad_clip);
    int first = 1;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        if (!wf_muon_takes(t)) continue;
        len += (size_t)snprintf(json + len, cap - len, "%s\"%s\"", first ? "" : ", ", t->name);
        first = 0;
    }
    const char *keys[2] = {"grad_norms", "update_rms"};
    const double *vals[2] = {norms, rms};
    for (int k = 0; k < 2; k++) {
        len += (size_t)snprintf(json + len, cap - len, "], \"%s\": [", keys[k]);
        for (long long s = 0; s < r->steps; s++)
            len += (size_t)snprintf(json + len, cap - len, "%s%.17g", s ? ", " : "", vals[k][s]);
    }
    len += (size_t)snprintf(json + len, cap - len, "]}");
    int64_t shape[1] = {(int64_t)len};
    int bad = len >= cap || dump_put_record(f, "config", 2, 1, shape, json, 1);
    free(json);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: muon_dump OUT_FILE [key=value ...]\n");
        return 2;
    }
    run_cfg r = {.adamw = wf_adamw_config_default(), .muon = wf_muon_config_default(), .lr = 0.02,
                 .adamw_lr = 3e-3, .steps = 10, .seed = 1, .grad_seed = 2};
    r.adamw.skip_muon = 1;
    wf_model_config_preset(&r.model, "tiny");
    for (int i = 2; i < argc; i++) {
        if (parse_kv(argv[i], &r)) {
            fprintf(stderr, "muon_dump: bad argument '%s' %s\n", argv[i], wf_error_msg());
            return 2;
        }
    }
    if (r.steps < 1) {
        fprintf(stderr, "muon_dump: steps must be >= 1\n");
        return 2;
    }
    if (r.threads > 0) wf_kern_set_threads((int)r.threads);
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *adamw = NULL;
    wf_muon *muon = NULL;
    FILE *f = NULL;
    int rc = 1;
    double *norms = calloc((size_t)r.steps, sizeof *norms), *rms = calloc((size_t)r.steps, sizeof *rms);
    if (!norms || !rms || wf_arena_create(&arena, 0) != WF_OK || wf_model_create(&m, &r.model, arena) != WF_OK ||
        wf_adamw_create(&adamw, &r.adamw, m, arena) != WF_OK ||
        wf_muon_create(&muon, &r.muon, m, wf_adamw_m(adamw), arena) != WF_OK) {
        fprintf(stderr, "muon_dump: %s\n", wf_error_msg());
        goto done;
    }
    wf_model_init(m, r.seed);
    f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        goto done;
    }
    int bad = fwrite("WFTD\1\0\0\0", 1, 8, f) != 8;
    bad |= tool_model_put_tensors(f, m, wf_model_params(m), "init.");
    size_t P = wf_model_num_params(m);
    float *g = wf_model_grads(m);
    wf_rng rng = wf_rng_make(r.grad_seed, 11);
    for (long long s = 0; s < r.steps; s++) {
        float k = (float)(1 + s) / 4.0f;
        for (size_t i = 0; i < P; i++) g[i] = wf_rng_normal(&rng) * k;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "step%lld.grad.", s);
        bad |= tool_model_put_tensors(f, m, g, prefix);
        norms[s] = wf_grad_norm(m);
        /* Muon first: AdamW's step leaves the gradient alone, but the order
         * must not matter (disjoint tensors); the trainer runs AdamW first. */
        if (wf_muon_step(muon, r.lr, g, norms[s], &rms[s]) != WF_OK ||
            wf_adamw_step_shard(adamw, r.adamw_lr, g, norms[s]) != WF_OK) {
            fprintf(stderr, "muon_dump: step %lld: %s\n", s, wf_error_msg());
            goto done;
        }
    }
    bad |= tool_model_put_tensors(f, m, wf_model_params(m), "final.");
    bad |= put_config(f, &r, m, norms, rms);
    bad |= fclose(f) != 0;
    f = NULL;
    if (bad) {
        fprintf(stderr, "muon_dump: writing %s failed\n", argv[1]);
        goto done;
    }
    rc = 0;
done:
    if (f) fclose(f);
    free(norms);
    free(rms);
    wf_muon_destroy(muon);
    wf_adamw_destroy(adamw);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return rc;
}
