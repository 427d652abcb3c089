/* `weft sample`: generates text from a trained model. Loads the weights
 * (RUN_DIR/model.safetensors, which records the model config and the
 * tokenizer), encodes the prompt, and streams the generated text to stdout
 * as it is sampled (greedy, temperature, top-k, top-p) with a KV cache. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/ckpt.h"
#include "weft/generate.h"
#include "weft/backend.h"
#include "weft/safetensors.h"
#include "weft/tokenizer.h"
#include "weft/weft.h"

typedef struct {
    char *model;
    char *tokenizer;
    char *prompt;
    char *device;
    int64_t max_tokens, top_k, seed, threads;
    double temperature, top_p;
    int stop_at_eos, ids;
} sample_opts;

static const wf_opt sample_opt_table[] = {
    {"model", NULL, WF_OPT_STR, offsetof(sample_opts, model), NULL, WF_NO_RANGE,
     "model.safetensors written by `weft train`, its run directory, or a Hugging Face Llama directory (required)"},
    {"tokenizer", NULL, WF_OPT_STR, offsetof(sample_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json (default: the one the model records)"},
    {"prompt", NULL, WF_OPT_STR, offsetof(sample_opts, prompt), "", WF_NO_RANGE,
     "text to continue, as the start of a new document (empty: a document from scratch)"},
    {"max_tokens", "max-tokens", WF_OPT_INT, offsetof(sample_opts, max_tokens), "200", 1, 1 << 24,
     "tokens to generate at most (prompt + these must fit the model's max_seq_len)"},
    {"temperature", NULL, WF_OPT_FLOAT, offsetof(sample_opts, temperature), "0.8", 0, 100,
     "divide the logits by this; 0 is greedy decoding"},
    {"top_k", "top-k", WF_OPT_INT, offsetof(sample_opts, top_k), "0", 0, 1 << 24,
     "sample among the k most likely tokens (0: all)"},
    {"top_p", "top-p", WF_OPT_FLOAT, offsetof(sample_opts, top_p), "0.95", 0, 1,
     "nucleus sampling: the smallest set of tokens whose probability reaches p (1: all)"},
    {"seed", NULL, WF_OPT_INT, offsetof(sample_opts, seed), "0", 0, 9.2e18,
     "sampling seed: the same seed gives the same text"},
    {"stop_at_eos", "stop-at-eos", WF_OPT_BOOL, offsetof(sample_opts, stop_at_eos), "true", WF_NO_RANGE,
     "stop when the end-of-text token is sampled"},
    {"ids", NULL, WF_OPT_BOOL, offsetof(sample_opts, ids), "false", WF_NO_RANGE,
     "print token ids instead of text"},
    {"threads", NULL, WF_OPT_INT, offsetof(sample_opts, threads), "0", 0, 4096,
     "compute threads (0: WEFT_THREADS or every CPU)"},
    {"device", NULL, WF_OPT_STR, offsetof(sample_opts, device), "cpu", WF_CHOICES(wf_backend_device_names),
     .help = "the compute backend: cpu, cuda or auto (cuda when it opens, else cpu); docs/gpu.md"},
};

static const wf_cmd_spec sample_spec = {
    "sample",
    "weft sample --model RUN_DIR [--prompt TEXT] [options]",
    "Generates text from a model trained by `weft train` (its run directory or model.safetensors) or a "
    "Hugging Face Llama directory (config.json, model.safetensors, tokenizer.json), continuing --prompt, and "
    "prints it as it is sampled. Greedy with --temperature 0; otherwise temperature, then top-k, then top-p.",
    sample_opt_table,
    sizeof sample_opt_table / sizeof *sample_opt_table,
    0,
    0,
    0,
};

typedef struct {
    const wf_tokenizer *tok;
    int ids, n;
} emit_ctx;

static int emit_token(void *user, int32_t token) {
    emit_ctx *e = user;
    if (e->ids) {
        printf("%s%" PRId32, e->n++ ? " " : "", token);
    } else {
        size_t len = 0;
        const char *b = wf_tokenizer_id_bytes(e->tok, token, &len);
        if (b) fwrite(b, 1, len, stdout);
    }
    fflush(stdout);
    return 0;
}

static wf_status run_sample(const sample_opts *o) {
    char path[WF_PATH_MAX], dir[WF_PATH_MAX] = "", tok_default[WF_PATH_MAX] = "", source[4200];
    if (!o->model)
        return wf_error(WF_ERR_CONFIG,
                        "--model is required (a run directory, its model.safetensors, or a Hugging Face Llama "
                        "directory)");
    if (wf_path_is_dir(o->model)) {
        WF_TRY(wf_path_join(dir, sizeof dir, NULL, o->model, NULL));
        WF_TRY(wf_rundir_path(path, sizeof path, o->model, WF_RUN_MODEL));
        WF_TRY(wf_path_join(tok_default, sizeof tok_default, o->model, "tokenizer.json", NULL));
    } else {
        WF_TRY(wf_path_join(path, sizeof path, NULL, o->model, NULL));
    }
    wf_sampler_config sc = {o->temperature, (int)o->top_k, o->top_p};
    WF_TRY(wf_sampler_config_validate(&sc));
    if (o->threads) wf_kern_set_threads((int)o->threads);
    else wf_kern_set_threads(wf_default_threads());

    /* A model weft wrote records its config; a Hugging Face directory has
     * its config.json (and usually tokenizer.json) beside the weights. */
    wf_model_config mc;
    int hf = 0;
    wf_status s = wf_safetensors_read_config(path, &mc);
    if (s != WF_OK && dir[0]) {
        WF_TRY(wf_hf_read_config(dir, &mc, source, sizeof source));
        hf = 1;
        WF_INFO("model: a Hugging Face Llama directory (architecture from %s)", source);
    } else {
        WF_TRY(s);
    }
    /* The tokenizer: --tokenizer, else the one the weft model records, else
     * the directory's tokenizer.json. */
    char *tok_path = o->tokenizer ? strdup(o->tokenizer) : NULL;
    if (!tok_path && !hf && wf_safetensors_read_meta(path, "weft.tokenizer", &tok_path) == WF_OK && !tok_path[0]) {
        free(tok_path);
        tok_path = NULL;
    }
    wf_error_clear();
    if (!tok_path && tok_default[0] && wf_path_exists(tok_default)) tok_path = strdup(tok_default);
    if (!tok_path)
        return wf_error(WF_ERR_CONFIG, "%s records no tokenizer and %s has no tokenizer.json: give --tokenizer", path,
                        dir[0] ? dir : "its directory");
    wf_tokenizer *tok = NULL;
    s = wf_tokenizer_load(&tok, tok_path);
    free(tok_path);
    WF_TRY(s);
    if (wf_tokenizer_vocab_size(tok) > (size_t)mc.vocab_size) {
        s = wf_error(WF_ERR_CONFIG, "the tokenizer has %zu ids but the model only %d: wrong tokenizer?",
                     wf_tokenizer_vocab_size(tok), mc.vocab_size);
        wf_tokenizer_destroy(tok);
        return s;
    }
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_generator *g = NULL;
    wf_ids prompt = {0};
    s = wf_arena_create(&arena, 0);
    if (s == WF_OK) s = wf_model_create(&m, &mc, arena);
    if (s == WF_OK) s = hf ? wf_hf_import(m, dir) : wf_safetensors_load(m, path);
    if (s == WF_OK) {
        /* Training data has the end-of-text token before every document
         * (after the previous one), so that is how a new text starts. */
        int32_t start = wf_tokenizer_eos(tok);
        if (start < 0) start = wf_tokenizer_bos(tok);
        if (start >= 0) s = wf_ids_push(&prompt, start);
        else if (!o->prompt[0]) s = wf_error(WF_ERR_CONFIG, "the tokenizer has no end-of-text token: give a --prompt");
        if (s == WF_OK && o->prompt[0]) s = wf_tokenizer_encode(tok, o->prompt, strlen(o->prompt), 0, &prompt);
    }
    int cap = (int)prompt.n + (int)o->max_tokens;
    if (s == WF_OK && cap > mc.max_seq_len)
        s = wf_error(WF_ERR_CONFIG,
                     "the prompt (%zu tokens) plus --max-tokens %lld exceeds the model's max_seq_len %d",
                     prompt.n, (long long)o->max_tokens, mc.max_seq_len);
    if (s == WF_OK) s = wf_generator_create(&g, m, cap);
    if (s == WF_OK) {
        emit_ctx e = {tok, o->ids, 0};
        if (!o->ids) fwrite(o->prompt, 1, strlen(o->prompt), stdout);
        int n = 0;
        double t0 = wf_time_now();
        s = wf_generate(g, prompt.ids, (int)prompt.n, (int)o->max_tokens, &sc, (uint64_t)o->seed,
                        o->stop_at_eos ? wf_tokenizer_eos(tok) : -1, emit_token, &e, &n);
        double dt = wf_time_now() - t0;
        printf("\n");
        fflush(stdout); /* the text ends before the log line, also when both go to one file */
        if (s == WF_OK) WF_INFO("sampled %d tokens in %.2f s (%.0f tokens/s)", n, dt, n / (dt > 0 ? dt : 1));
    }
    wf_ids_free(&prompt);
    wf_generator_destroy(g);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    wf_tokenizer_destroy(tok);
    return s;
}

static int sample_main(void *opts, const wf_strs *pos) {
    (void)pos;
    const sample_opts *o = opts;
    return wf_tool_device(o->device) == WF_OK && run_sample(o) == WF_OK ? 0 : wf_tool_fail(sample_spec.name);
}

int wf_cmd_sample(int argc, char **argv) {
    sample_opts o;
    return wf_tool_run(&sample_spec, &o, sizeof o, argc, argv, sample_main);
}
