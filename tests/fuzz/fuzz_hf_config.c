/* Fuzz target: a Hugging Face config.json (src/ckpt/hf.c), as `weft train
 * --init-from DIR` checks it against the run's model before loading
 * DIR/model.safetensors. Once per process a small model is exported with
 * weft's own exporter (config.json and model.safetensors); each input
 * replaces config.json, the architecture is read from it
 * (wf_hf_read_config, as --init-from and `weft sample` do) and the import
 * runs. With WEFT_FUZZ_SEED_OUT=FILE
 * the exported config.json is also copied to FILE (the seed). */
#include "fuzz.h"
#include "weft/arena.h"
#include "weft/ckpt.h"
#include "weft/model.h"

static wf_model *model_;
static char dir_[4200];

static void setup(void) {
    wf_model_config cfg;
    FZ_CHECK(wf_model_config_preset(&cfg, "tiny") == WF_OK, "%s", wf_error_msg());
    cfg.dim = 16;
    cfg.n_layers = 1;
    cfg.n_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.vocab_size = 32;
    cfg.max_seq_len = 16;
    wf_arena *arena = NULL; /* lives as long as the process */
    FZ_CHECK(wf_arena_create(&arena, 1 << 20) == WF_OK, "%s", wf_error_msg());
    FZ_CHECK(wf_model_create(&model_, &cfg, arena) == WF_OK, "%s", wf_error_msg());
    fz_path(dir_, sizeof dir_, "hf");
    FZ_CHECK(wf_hf_export(model_, dir_, 0, NULL) == WF_OK, "%s", wf_error_msg());
    fz_seed_out(dir_, "config.json");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model_) setup();
    fz_write_in(dir_, "config.json", data, size);
    wf_model_config cfg;
    char source[4400];
    if (wf_hf_read_config(dir_, &cfg, source, sizeof source) == WF_OK)
        FZ_CHECK(wf_model_config_validate(&cfg) == WF_OK, "config.json read as an invalid config: %s", wf_error_msg());
    wf_error_clear();
    (void)wf_hf_import(model_, dir_);
    wf_error_clear();
    return 0;
}
