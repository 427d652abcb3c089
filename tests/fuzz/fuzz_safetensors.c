/* Fuzz target: safetensors files (src/ckpt/safetensors.c): the 8-byte
 * header length, the JSON header and its __metadata__ (weft's model config
 * and format version), as `weft sample --model`, `--init-from` and export
 * read them. A file whose recorded config is small is then loaded into a
 * model of that config (tensor names, dtypes, shapes and offsets checked
 * against the data). */
#include "fuzz.h"
#include "weft/arena.h"
#include "weft/model.h"
#include "weft/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4200];
    fz_write(fz_path(path, sizeof path, "model.safetensors"), data, size);
    char *v = NULL;
    if (wf_safetensors_read_meta(path, "weft.model_config", &v) == WF_OK) free(v);
    int has;
    (void)wf_safetensors_has_tensor(path, "lm_head.weight", &has);
    wf_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (wf_safetensors_read_config(path, &cfg) == WF_OK && wf_model_config_validate(&cfg) == WF_OK &&
        wf_model_config_num_params(&cfg) <= (1u << 20) && cfg.max_seq_len <= 4096) {
        wf_arena *arena = NULL;
        wf_model *m = NULL;
        if (wf_arena_create(&arena, 1 << 20) == WF_OK && wf_model_create(&m, &cfg, arena) == WF_OK)
            (void)wf_safetensors_load(m, path);
        wf_model_destroy(m);
        wf_arena_destroy(arena);
    }
    wf_error_clear();
    return 0;
}
