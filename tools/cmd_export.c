/* `weft export`: writes the model of a checkpoint as a Hugging Face Llama
 * directory (model.safetensors in fp32 or bf16, config.json, and the
 * tokenizer.json the run used), which `transformers` loads with
 * LlamaForCausalLM.from_pretrained and `weft sample --model` reads too. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/arena.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"
#include "weft/weft.h"

typedef struct {
    char *checkpoint, *output, *dtype, *tokenizer;
} export_opts;

static const wf_opt export_opt_table[] = {
    {"checkpoint", NULL, WF_OPT_STR, offsetof(export_opts, checkpoint), NULL, WF_NO_RANGE,
     "checkpoint directory, or a run directory (its newest valid checkpoint) (required)"},
    {"output", NULL, WF_OPT_STR, offsetof(export_opts, output), NULL, WF_NO_RANGE,
     "directory to write model.safetensors, config.json and tokenizer.json into (required)"},
    {"dtype", NULL, WF_OPT_STR, offsetof(export_opts, dtype), "fp32", WF_NO_RANGE,
     "fp32 (exact) or bf16 (rounded to nearest even, half the size)"},
    {"tokenizer", NULL, WF_OPT_STR, offsetof(export_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to copy (default: the one the run recorded, if it still exists)"},
};

static const wf_cmd_spec export_spec = {
    "export",
    "weft export --checkpoint CKPT_DIR|RUN_DIR --output HF_DIR [--dtype fp32|bf16]",
    "Writes the model of a checkpoint in the Hugging Face Llama layout: model.safetensors (weft's tensor "
    "names are Hugging Face's), config.json for LlamaForCausalLM, and the run's tokenizer.json. The "
    "optimizer state is left out. See docs/checkpoints.md.",
    export_opt_table,
    sizeof export_opt_table / sizeof *export_opt_table,
    0,
    0,
    0,
};

static wf_status run_export(const export_opts *o) {
    if (!o->checkpoint || !o->output)
        return wf_error(WF_ERR_CONFIG, "give --checkpoint CKPT_DIR and --output HF_DIR");
    int bf16;
    if (strcmp(o->dtype, "fp32") == 0) bf16 = 0;
    else if (strcmp(o->dtype, "bf16") == 0) bf16 = 1;
    else return wf_error(WF_ERR_CONFIG, "--dtype %s: use fp32 or bf16", o->dtype);
    wf_ckpt *c;
    WF_TRY(wf_ckpt_open_path(&c, o->checkpoint));
    wf_model_config mc;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_status s = wf_ckpt_get_model_config(c, &mc);
    if (s == WF_OK) s = wf_arena_create(&arena, 0);
    if (s == WF_OK) s = wf_model_create(&m, &mc, arena);
    if (s == WF_OK) s = wf_ckpt_load_model(c, m);
    const char *tok = o->tokenizer;
    if (s == WF_OK && !tok) {
        const char *rec;
        if (wf_ckpt_get_str(c, "data.tokenizer", &rec) == WF_OK && *rec) {
            if (wf_path_exists(rec)) tok = rec;
            else fprintf(stderr, "weft export: the run's tokenizer %s is gone; exporting without one\n", rec);
        }
        wf_error_clear();
    }
    if (s == WF_OK) s = wf_hf_export(m, o->output, bf16, tok);
    if (s == WF_OK)
        printf("exported %s (step %llu) to %s: model.safetensors (%s), config.json%s\n", wf_ckpt_path(c),
               (unsigned long long)wf_ckpt_step(c), o->output, bf16 ? "BF16" : "F32", tok ? ", tokenizer.json" : "");
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    wf_ckpt_close(c);
    return s;
}

static int export_main(void *opts, const wf_strs *pos) {
    (void)pos;
    return run_export(opts) == WF_OK ? 0 : wf_tool_fail(export_spec.name);
}

int wf_cmd_export(int argc, char **argv) {
    export_opts o;
    return wf_tool_run(&export_spec, &o, sizeof o, argc, argv, export_main);
}
