/* A small Llama for the unit tests of src/model and the layers above it:
 * a config (the "tiny" preset, or tiny with other sizes), a model in an
 * arena of its own, seeded and planned for one batch shape, and random
 * batches for it. Linked into every unit-test binary with the harness
 * (Makefile, TEST_LIB). A failed call fails the test, as the harness's
 * checks do. */
#ifndef WEFT_TESTS_MODEL_FIXTURE_H
#define WEFT_TESTS_MODEL_FIXTURE_H

#include <stdint.h>

#include "weft/arena.h"
#include "weft/model.h"

typedef struct {
    wf_arena *arena; /* owns the model's memory */
    wf_model *m;
} wf_test_model;

/* The "tiny" preset (dim 64, 2 layers, 4 heads, 2 kv heads, vocab 512,
 * sequence 64, tied embeddings). */
wf_model_config wf_test_tiny_config(void);
/* tiny with these sizes; hidden 0 takes Llama's rule (ffn_multiplier). */
wf_model_config wf_test_model_config(int dim, int layers, int heads, int kv_heads, int vocab, int hidden,
                                     int seq, int tied);

/* A model of cfg, initialised from `seed`, in recompute `mode`, planned for
 * batches of B x T. Free it with wf_test_model_free. */
wf_test_model wf_test_model_make(const wf_model_config *cfg, uint64_t seed, wf_model_recompute mode, int B,
                                 int T);
void wf_test_model_free(wf_test_model *f);

/* n random tokens below V into tok and their targets into tgt, drawn from
 * (seed, stream); each target is -1 (ignored by the loss) with probability
 * `ignored`. */
void wf_test_random_batch(int32_t *tok, int32_t *tgt, int n, int V, uint64_t seed, uint64_t stream,
                          double ignored);

#endif
