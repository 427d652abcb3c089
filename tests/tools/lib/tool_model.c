/* The model's options of the dump drivers (tool_model.h). */
#include "tool_model.h"

#include <stdlib.h>
#include <string.h>

static int is_key(const char *key, size_t klen, const char *name) {
    return klen == strlen(name) && strncmp(key, name, klen) == 0;
}

/* v as a number into *d; -1 if it is not one. */
static int number(const char *v, double *d) {
    char *end;
    *d = strtod(v, &end);
    return *v == '\0' || *end != '\0' ? -1 : 0;
}

int tool_model_key(wf_model_config *c, const char *key, size_t klen, const char *v) {
    if (is_key(key, klen, "preset")) return wf_model_config_preset(c, v) == WF_OK ? 1 : -1;
    const struct {
        const char *name;
        int *field;
    } ints[] = {
        {"dim", &c->dim},
        {"n_layers", &c->n_layers},
        {"n_heads", &c->n_heads},
        {"n_kv_heads", &c->n_kv_heads},
        {"vocab", &c->vocab_size},
        {"hidden", &c->ffn_hidden_dim},
        {"max_seq_len", &c->max_seq_len},
        {"tied", &c->tied_embeddings},
    };
    const struct {
        const char *name;
        double *field;
    } reals[] = {{"eps", &c->norm_eps}, {"theta", &c->rope_theta}, {"init_std", &c->init_std}};
    double d;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (is_key(key, klen, ints[i].name)) {
            if (number(v, &d) != 0) return -1;
            *ints[i].field = (int)d;
            return 1;
        }
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        if (is_key(key, klen, reals[i].name)) {
            if (number(v, &d) != 0) return -1;
            *reals[i].field = d;
            return 1;
        }
    return 0;
}
