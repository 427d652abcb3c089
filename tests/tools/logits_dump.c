/* logits_dump: weft's logits for a token sequence, from a safetensors model
 * file weft can read (its own, or `weft export`'s, F32 or BF16), for
 * tests/py/test_ckpt_export.py to compare with `transformers` and the
 * PyTorch reference.
 *
 *   logits_dump MODEL.safetensors OUT_FILE ID...
 *
 * OUT_FILE: the logits (T, vocab) as raw little-endian float32. */
#include <stdio.h>
#include <stdlib.h>

#include "weft/arena.h"
#include "weft/model.h"
#include "weft/safetensors.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: logits_dump MODEL.safetensors OUT_FILE ID...\n");
        return 2;
    }
    int T = argc - 3;
    int32_t *tokens = malloc((size_t)T * sizeof *tokens);
    if (!tokens) return 1;
    for (int i = 0; i < T; i++) tokens[i] = (int32_t)strtol(argv[3 + i], NULL, 10);
    wf_model_config cfg;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_status s = wf_safetensors_read_config(argv[1], &cfg);
    if (s == WF_OK) s = wf_arena_create(&arena, 0);
    if (s == WF_OK) s = wf_model_create(&m, &cfg, arena);
    if (s == WF_OK) s = wf_safetensors_load(m, argv[1]);
    if (s == WF_OK) s = wf_model_plan(m, 1, T);
    if (s == WF_OK) s = wf_model_forward(m, tokens, NULL, 1, T, NULL);
    int rc = 0;
    if (s != WF_OK) {
        fprintf(stderr, "logits_dump: %s\n", wf_error_msg());
        rc = 1;
    } else {
        FILE *f = fopen(argv[2], "wb");
        size_t n = (size_t)T * (size_t)cfg.vocab_size;
        if (!f || fwrite(wf_model_logits(m), sizeof(float), n, f) != n) rc = 1;
        if (f && fclose(f) != 0) rc = 1;
        if (rc) fprintf(stderr, "logits_dump: cannot write %s\n", argv[2]);
    }
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    free(tokens);
    return rc;
}
