/* The model's options of the dump drivers (tool_model.h). */
#include "tool_model.h"

#include "dump_record.h"

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

int tool_model_put_tensors(FILE *f, wf_model *m, const float *buf, const char *prefix) {
    int bad = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        char name[WF_TENSOR_NAME_MAX + 32];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        bad |= dump_put_record(f, name, 0, t->ndim, t->shape, buf + t->offset, 4);
    }
    return bad;
}
