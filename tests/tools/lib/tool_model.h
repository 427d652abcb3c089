/* The model's `key=value` options of the dump drivers in tests/tools/
 * (model_dump, optim_dump, generate_dump), which the Python tests pass to
 * build the same model as their PyTorch reference. One list, so that a key
 * means the same in every driver. */
#ifndef WEFT_TESTS_TOOL_MODEL_H
#define WEFT_TESTS_TOOL_MODEL_H

#include <stddef.h>
#include <stdio.h>

#include "weft/model.h"

/* Applies the option whose key is key[0, klen) and whose value is v to c:
 * preset (a name), dim, n_layers, n_heads, n_kv_heads, vocab, hidden,
 * max_seq_len, tied (integers), eps, theta, init_std (numbers). Returns 1
 * when the key is one of these and was applied, 0 when it is none of them
 * (c unchanged: the driver's own keys), -1 when the value is bad. */
int tool_model_key(wf_model_config *c, const char *key, size_t klen, const char *v);

/* Writes every tensor of `buf` (a buffer in m's parameter layout: the
 * parameters, gradients or a moment) as a dump record named prefix + the
 * tensor's name (lib/dump_record.h). Nonzero if a write failed. */
int tool_model_put_tensors(FILE *f, wf_model *m, const float *buf, const char *prefix);

#endif
