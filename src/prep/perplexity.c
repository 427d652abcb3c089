/* The perplexity stage's scorer, as in CCNet (which used a KenLM model
 * trained on Wikipedia): a weft model trained on clean text scores each
 * document by its mean per-token loss; low perplexity means the document
 * reads like that text. The document is tokenized after an end-of-text
 * token (how training data starts a document), cut to max_tokens, and run
 * through the model in windows of its max_seq_len, each window starting
 * a fresh context. The model's kernels use their own threads (OpenMP), so
 * the pipeline calls this from one thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/arena.h"
#include "weft/fileio.h"
#include "weft/backend.h"
#include "weft/model.h"
#include "weft/rundir.h"
#include "weft/safetensors.h"
#include "weft/tokenizer.h"

struct prep_ppl {
    wf_arena *arena;
    wf_model *model;
    wf_tokenizer *tok;
    int T;
    int64_t max_tokens;
    int32_t start;
    wf_ids ids;
    int32_t *targets;
};

void wf__prep_ppl_close(prep_ppl *p) {
    if (!p) return;
    wf_model_destroy(p->model);
    wf_arena_destroy(p->arena);
    wf_tokenizer_destroy(p->tok);
    wf_ids_free(&p->ids);
    free(p->targets);
    free(p);
}

wf_status wf__prep_ppl_open(prep_ppl **out, const char *model_path, const char *tokenizer_path,
                        int64_t max_tokens, int threads) {
    *out = NULL;
    char path[WF_PATH_MAX];
    wf_status ps = wf_path_is_dir(model_path) ? wf_rundir_path(path, sizeof path, model_path, WF_RUN_MODEL)
                                              : wf_path_join(path, sizeof path, NULL, model_path, NULL);
    if (ps != WF_OK) return wf_error_wrap(ps, "perplexity.model: ");
    wf_model_config mc;
    wf_status rs = wf_safetensors_read_config(path, &mc);
    if (rs != WF_OK) return wf_error_wrap(rs, "perplexity.model: ");
    prep_ppl *p = calloc(1, sizeof *p);
    if (!p) return wf_error(WF_ERR_NOMEM, "out of memory");
    char *tok_path = NULL;
    wf_status s = WF_OK;
    if (tokenizer_path && tokenizer_path[0]) {
        tok_path = strdup(tokenizer_path);
        if (!tok_path) s = wf_error(WF_ERR_NOMEM, "out of memory");
    } else if (wf_safetensors_read_meta(path, "weft.tokenizer", &tok_path) != WF_OK || !tok_path[0]) {
        s = wf_error(WF_ERR_CONFIG, "%s records no tokenizer: set perplexity.tokenizer", path);
    }
    if (s == WF_OK) s = wf_tokenizer_load(&p->tok, tok_path);
    free(tok_path);
    if (s == WF_OK && wf_tokenizer_vocab_size(p->tok) > (size_t)mc.vocab_size)
        s = wf_error(WF_ERR_CONFIG, "perplexity: the tokenizer has %zu ids but the model %s only %d: wrong tokenizer?",
                     wf_tokenizer_vocab_size(p->tok), path, mc.vocab_size);
    if (s == WF_OK) {
        p->start = wf_tokenizer_eos(p->tok);
        if (p->start < 0) p->start = wf_tokenizer_bos(p->tok);
        p->T = mc.max_seq_len;
        p->max_tokens = max_tokens;
        p->targets = malloc((size_t)p->T * sizeof *p->targets);
        if (!p->targets) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK) s = wf_arena_create(&p->arena, 0);
    if (s == WF_OK) s = wf_model_create(&p->model, &mc, p->arena);
    if (s == WF_OK) s = wf_safetensors_load(p->model, path);
    if (s == WF_OK) s = wf_model_plan(p->model, 1, p->T);
    if (s != WF_OK) {
        wf__prep_ppl_close(p);
        return s;
    }
    wf_kern_set_threads(threads);
    *out = p;
    return WF_OK;
}

wf_status wf__prep_ppl_score(prep_ppl *p, const char *text, size_t len, double *loss, int64_t *n_tokens) {
    *loss = 0.0;
    *n_tokens = 0;
    p->ids.n = 0;
    if (p->start >= 0) WF_TRY(wf_ids_push(&p->ids, p->start));
    WF_TRY(wf_tokenizer_encode(p->tok, text, len, 0, &p->ids));
    size_t n = p->ids.n;
    if ((int64_t)n > p->max_tokens + 1) n = (size_t)p->max_tokens + 1;
    if (n < 2) return WF_OK;
    double total = 0.0;
    int64_t scored = 0;
    /* Window w covers inputs ids[at, at + L) and targets ids[at + 1, at + L]. */
    for (size_t at = 0; at + 1 < n; at += (size_t)p->T) {
        int L = (int)(n - 1 - at < (size_t)p->T ? n - 1 - at : (size_t)p->T);
        memcpy(p->targets, p->ids.ids + at + 1, (size_t)L * sizeof *p->targets);
        float l = 0.0f;
        WF_TRY(wf_model_forward(p->model, p->ids.ids + at, p->targets, 1, L, &l));
        total += (double)l * L;
        scored += L;
    }
    *loss = total / (double)scored;
    *n_tokens = scored;
    return WF_OK;
}
