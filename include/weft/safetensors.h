/* weft: model weights as safetensors (docs/formats/model-safetensors.md).
 *
 * The file is the safetensors format (an 8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data), so the `safetensors` library and
 * Hugging Face tools read it directly. weft stores its model config in the
 * header's __metadata__ ("weft.model_config", a JSON object as a string), so
 * a file is enough to rebuild the model it came from.
 */
#ifndef WEFT_SAFETENSORS_H
#define WEFT_SAFETENSORS_H

#include "weft/model.h"
#include "weft/status.h"

/* The version of weft's metadata in model.safetensors (the
 * weft.format_version key; absent means 1). docs/formats/model-safetensors.md */
#define WF_SAFETENSORS_FORMAT_VERSION 1
#define WF_SAFETENSORS_FORMAT_VERSION_STR "1"

typedef struct {
    const char *key;
    const char *value;
} wf_kv;

/* Writes every parameter of `m` as F32 in the model's tensor order,
 * atomically, with the model config and `n_meta` extra string pairs in
 * __metadata__. */
wf_status wf_safetensors_save(const wf_model *m, const char *path, const wf_kv *meta, size_t n_meta);
/* The same with the tensors stored as BF16 (round to nearest even) when
 * bf16 is 1 (weft export --dtype bf16). */
wf_status wf_safetensors_save_as(const wf_model *m, const char *path, const wf_kv *meta, size_t n_meta, int bf16);

/* A streaming writer, for a model whose parameters are never in memory at
 * once (dist.shard = fsdp's export): open writes the header (every shape
 * is known from `m`, whose parameter buffer is not read), put appends the
 * next `n` floats of the model's flat parameter order (wf_model_params'
 * order: the tensors back to back), commit checks that all of them came and
 * renames the file into place (tmp + fsync + rename, as wf_safetensors_save);
 * abort removes it. The bytes are those wf_safetensors_save_as writes (it
 * is this writer with the whole buffer in one put). Exactly one of commit
 * or abort ends a writer. */
typedef struct wf_safetensors_writer wf_safetensors_writer;
wf_status wf_safetensors_writer_open(wf_safetensors_writer **w, const wf_model *m, const char *path,
                                     const wf_kv *meta, size_t n_meta, int bf16);
wf_status wf_safetensors_writer_put(wf_safetensors_writer *w, const float *data, size_t n);
wf_status wf_safetensors_writer_commit(wf_safetensors_writer *w);
void wf_safetensors_writer_abort(wf_safetensors_writer *w);

/* *has = 1 if the file holds a tensor `name`. */
wf_status wf_safetensors_has_tensor(const char *path, const char *name, int *has);

/* Reads the model config stored in a weft safetensors file. Files without
 * "weft.model_config" are WF_ERR_FORMAT naming the file. */
wf_status wf_safetensors_read_config(const char *path, wf_model_config *cfg);

/* Loads the tensors of `path` into the parameters of `m`: every tensor of
 * the model must be present with the same shape (F32, or BF16 widened), and
 * nothing else may be. Errors name the file and the tensor. */
wf_status wf_safetensors_load(wf_model *m, const char *path);
/* The same checks of every tensor, but only the values [first, first + n)
 * of the model's flat parameter order are read, into dst (n floats); `m`'s
 * parameter buffer is not used (dist.shard = fsdp's ckpt.init_from: each
 * rank reads its pieces). The file is mapped: only the pages of the range
 * are read. */
wf_status wf_safetensors_load_range(const wf_model *m, const char *path, size_t first, size_t n, float *dst);

/* The value of a __metadata__ key as a malloc'd string (caller frees), or
 * NULL with WF_ERR_NOTFOUND. */
wf_status wf_safetensors_read_meta(const char *path, const char *key, char **value);

#endif
