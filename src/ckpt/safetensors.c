/* safetensors writer and reader for weft models. The header is JSON (made
 * and parsed with jansson); the data section is the tensors back to back in
 * the model's own order, little-endian F32. The reader checks what the
 * format's own library checks (header size, offsets inside the file,
 * contiguous non-overlapping ranges, dtype and shape) and names the file and
 * tensor on any problem. */
#include "weft/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "weft/fileio.h"

#define ST_MAX_HEADER ((uint64_t)100 << 20)

/* The config as a JSON object. Integers as integers, doubles with full
 * precision so that a round trip is exact. */
static json_t *config_to_json(const wf_model_config *c) {
    json_t *o = json_object();
    json_object_set_new(o, "dim", json_integer(c->dim));
    json_object_set_new(o, "n_layers", json_integer(c->n_layers));
    json_object_set_new(o, "n_heads", json_integer(c->n_heads));
    json_object_set_new(o, "n_kv_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "ffn_hidden_dim", json_integer(wf_model_config_hidden_dim(c)));
    json_object_set_new(o, "max_seq_len", json_integer(c->max_seq_len));
    json_object_set_new(o, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "tied_embeddings", json_boolean(c->tied_embeddings));
    json_object_set_new(o, "init_std", json_real(c->init_std));
    return o;
}

static wf_status config_from_json(const char *path, const char *text, wf_model_config *c) {
    json_error_t jerr;
    json_t *o = json_loads(text, 0, &jerr);
    if (!json_is_object(o)) {
        json_decref(o);
        return wf_error(WF_ERR_FORMAT, "%s: weft.model_config is not a JSON object", path);
    }
    memset(c, 0, sizeof *c);
    static const char *ints[] = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_hidden_dim",
                                 "max_seq_len"};
    int *int_fields[] = {&c->dim, &c->n_layers, &c->n_heads, &c->n_kv_heads, &c->vocab_size,
                         &c->ffn_hidden_dim, &c->max_seq_len};
    wf_status s = WF_OK;
    for (size_t i = 0; i < sizeof ints / sizeof *ints && s == WF_OK; i++) {
        json_t *v = json_object_get(o, ints[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
            s = wf_error(WF_ERR_FORMAT, "%s: weft.model_config.%s is missing or not a valid integer", path, ints[i]);
        else
            *int_fields[i] = (int)json_integer_value(v);
    }
    static const char *reals[] = {"norm_eps", "rope_theta", "init_std"};
    double *real_fields[] = {&c->norm_eps, &c->rope_theta, &c->init_std};
    for (size_t i = 0; i < sizeof reals / sizeof *reals && s == WF_OK; i++) {
        json_t *v = json_object_get(o, reals[i]);
        if (!json_is_number(v)) s = wf_error(WF_ERR_FORMAT, "%s: weft.model_config.%s is missing", path, reals[i]);
        else *real_fields[i] = json_number_value(v);
    }
    json_t *t = json_object_get(o, "tied_embeddings");
    if (s == WF_OK && !json_is_boolean(t))
        s = wf_error(WF_ERR_FORMAT, "%s: weft.model_config.tied_embeddings is missing", path);
    if (s == WF_OK) {
        c->tied_embeddings = json_is_true(t);
        c->ffn_multiplier = 1.0;
        c->ffn_multiple_of = 1;
    }
    json_decref(o);
    if (s == WF_OK) {
        s = wf_model_config_validate(c);
        if (s != WF_OK) wf_error_wrap(s, "%s: stored model config: ", path);
    }
    return s;
}

/* bf16 by rounding to nearest even (what torch's .to(torch.bfloat16)
 * does); NaN stays a quiet NaN. */
static uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* The streaming writer: the header goes out at open (every shape is known
 * from the model), then the data in the model's flat parameter order,
 * which is the tensors' order back to back (model_params.c lays them out
 * so; checked at open). */
struct wf_safetensors_writer {
    wf_afile f;
    int bf16;
    size_t total; /* floats the model has */
    size_t done;  /* floats written so far */
    int failed;
    char path[4096];
};

wf_status wf_safetensors_writer_open(wf_safetensors_writer **out, const wf_model *m, const char *path,
                                     const wf_kv *meta, size_t n_meta, int bf16) {
    *out = NULL;
    const uint64_t esize = bf16 ? 2 : 4;
    int nt = wf_model_num_tensors(m);
    size_t flat = 0;
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        if (ti->offset != flat)
            return wf_error(WF_ERR_INTERNAL, "%s: tensor %s is not next in the parameter order", path, ti->name);
        flat += ti->numel;
    }
    wf_safetensors_writer *w = calloc(1, sizeof *w);
    if (!w) return wf_error(WF_ERR_NOMEM, "out of memory");
    w->bf16 = bf16;
    w->total = flat;
    snprintf(w->path, sizeof w->path, "%s", path);
    json_t *hdr = json_object();
    json_t *md = json_object();
    json_t *cfg = config_to_json(wf_model_get_config(m));
    char *cfg_text = json_dumps(cfg, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(cfg);
    json_object_set_new(md, "format", json_string("pt"));
    json_object_set_new(md, "weft.format_version", json_string(WF_SAFETENSORS_FORMAT_VERSION_STR));
    json_object_set_new(md, "weft.model_config", json_string(cfg_text));
    free(cfg_text);
    for (size_t i = 0; i < n_meta; i++) json_object_set_new(md, meta[i].key, json_string(meta[i].value));
    json_object_set_new(hdr, "__metadata__", md);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        json_t *e = json_object();
        json_t *shape = json_array();
        for (int d = 0; d < ti->ndim; d++) json_array_append_new(shape, json_integer(ti->shape[d]));
        json_object_set_new(e, "dtype", json_string(bf16 ? "BF16" : "F32"));
        json_object_set_new(e, "shape", shape);
        json_t *range = json_array();
        json_array_append_new(range, json_integer((json_int_t)off));
        json_array_append_new(range, json_integer((json_int_t)(off + ti->numel * esize)));
        json_object_set_new(e, "data_offsets", range);
        json_object_set_new(hdr, ti->name, e);
        off += ti->numel * esize;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    if (!text) {
        free(w);
        return wf_error(WF_ERR_NOMEM, "%s: cannot build the safetensors header", path);
    }
    size_t hl = strlen(text), padded = (hl + 7) & ~(size_t)7; /* data starts 8-byte aligned */
    wf_status s = wf_afile_open(&w->f, path);
    if (s != WF_OK) {
        free(text);
        free(w);
        return s;
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    int ok = fwrite(len8, 1, 8, w->f.fp) == 8 && fwrite(text, 1, hl, w->f.fp) == hl;
    for (size_t k = hl; k < padded && ok; k++) ok = fputc(' ', w->f.fp) != EOF;
    free(text);
    if (!ok) {
        wf_afile_abort(&w->f);
        free(w);
        return wf_error(WF_ERR_IO, "%s: write failed", path);
    }
    *out = w;
    return WF_OK;
}

wf_status wf_safetensors_writer_put(wf_safetensors_writer *w, const float *data, size_t n) {
    if (w->failed) return wf_error(WF_ERR_IO, "%s: an earlier write failed", w->path);
    if (n > w->total - w->done)
        return wf_error(WF_ERR_INTERNAL, "%s: %zu more values than the model's %zu", w->path,
                        n - (w->total - w->done), w->total);
    /* The host is little-endian (checked at build time below), so the
     * floats are written as they are in memory. */
    int ok = 1;
    if (!w->bf16) {
        ok = fwrite(data, 4, n, w->f.fp) == n;
    } else {
        uint16_t buf[4096];
        for (size_t k = 0; k < n && ok; k += 4096) {
            size_t c = n - k < 4096 ? n - k : 4096;
            for (size_t j = 0; j < c; j++) buf[j] = f32_to_bf16(data[k + j]);
            ok = fwrite(buf, 2, c, w->f.fp) == c;
        }
    }
    if (!ok) {
        w->failed = 1;
        return wf_error(WF_ERR_IO, "%s: write failed", w->path);
    }
    w->done += n;
    return WF_OK;
}

wf_status wf_safetensors_writer_commit(wf_safetensors_writer *w) {
    wf_status s;
    if (w->failed) {
        wf_afile_abort(&w->f);
        s = wf_error(WF_ERR_IO, "%s: write failed", w->path);
    } else if (w->done != w->total) {
        wf_afile_abort(&w->f);
        s = wf_error(WF_ERR_INTERNAL, "%s: %zu of the model's %zu values were written; the file is not kept",
                     w->path, w->done, w->total);
    } else {
        s = wf_afile_commit(&w->f);
    }
    free(w);
    return s;
}

void wf_safetensors_writer_abort(wf_safetensors_writer *w) {
    if (!w) return;
    wf_afile_abort(&w->f);
    free(w);
}

wf_status wf_safetensors_save(const wf_model *m, const char *path, const wf_kv *meta, size_t n_meta) {
    return wf_safetensors_save_as(m, path, meta, n_meta, 0);
}

wf_status wf_safetensors_save_as(const wf_model *m, const char *path, const wf_kv *meta, size_t n_meta, int bf16) {
    wf_safetensors_writer *w;
    WF_TRY(wf_safetensors_writer_open(&w, m, path, meta, n_meta, bf16));
    /* The model's memory is its backend's: each tensor comes to the host
     * through wf_model_read, then goes to the file. */
    wf_model *mm = (wf_model *)(uintptr_t)m;
    size_t largest = 0;
    for (int i = 0; i < wf_model_num_tensors(mm); i++)
        if (wf_model_tensor(mm, i)->numel > largest) largest = wf_model_tensor(mm, i)->numel;
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    wf_status s = stage ? WF_OK : wf_error(WF_ERR_NOMEM, "%s: a staging buffer of %zu floats", path, largest);
    for (int i = 0; i < wf_model_num_tensors(mm) && s == WF_OK; i++) {
        const wf_tensor_info *ti = wf_model_tensor(mm, i);
        s = wf_model_read(mm, WF_MODEL_PARAMS, i, 0, ti->numel, stage);
        if (s == WF_OK) s = wf_safetensors_writer_put(w, stage, ti->numel);
    }
    free(stage);
    if (s != WF_OK) {
        wf_safetensors_writer_abort(w);
        return s;
    }
    return wf_safetensors_writer_commit(w);
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

/* Maps the file and parses its header. */
typedef struct {
    wf_mmap map;
    json_t *hdr;
    const unsigned char *data;
    uint64_t data_len;
} st_file;

static void st_close(st_file *f) {
    json_decref(f->hdr);
    wf_mmap_close(&f->map);
}

static wf_status st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    WF_TRY(wf_mmap_open(&f->map, path));
    if (f->map.size < 8) {
        st_close(f);
        return wf_error(WF_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", path, f->map.size);
    }
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)f->map.data[k] << (8 * k);
    if (hl > ST_MAX_HEADER || hl > f->map.size - 8) {
        st_close(f);
        return wf_error(WF_ERR_FORMAT, "%s: header length %" PRIu64 " does not fit in the file (%zu bytes)", path,
                        hl, f->map.size);
    }
    json_error_t jerr;
    f->hdr = json_loadb((const char *)f->map.data + 8, (size_t)hl, 0, &jerr);
    if (!json_is_object(f->hdr)) {
        st_close(f);
        return wf_error(WF_ERR_FORMAT, "%s: malformed safetensors header: %s", path, jerr.text);
    }
    f->data = f->map.data + 8 + hl;
    f->data_len = f->map.size - 8 - hl;
    return WF_OK;
}

wf_status wf_safetensors_read_meta(const char *path, const char *key, char **value) {
    st_file f;
    *value = NULL;
    WF_TRY(st_open(&f, path));
    json_t *v = json_object_get(json_object_get(f.hdr, "__metadata__"), key);
    wf_status s = WF_OK;
    if (!json_is_string(v)) s = wf_error(WF_ERR_NOTFOUND, "%s: no __metadata__ key \"%s\"", path, key);
    else if (!(*value = strdup(json_string_value(v)))) s = wf_error(WF_ERR_NOMEM, "out of memory");
    st_close(&f);
    return s;
}

wf_status wf_safetensors_read_config(const char *path, wf_model_config *cfg) {
    char *text = NULL;
    /* weft.format_version: absent in the first files (version 1). */
    wf_status s = wf_safetensors_read_meta(path, "weft.format_version", &text);
    if (s == WF_OK) {
        char *end;
        long v = strtol(text, &end, 10);
        if (end == text || *end || v < 1 || v > WF_SAFETENSORS_FORMAT_VERSION) {
            s = wf_error(WF_ERR_UNSUPPORTED,
                         "%s: weft model format version %s is not supported (this weft reads versions 1 to %d; "
                         "see docs/formats/model-safetensors.md)",
                         path, text, WF_SAFETENSORS_FORMAT_VERSION);
            free(text);
            return s;
        }
        free(text);
        text = NULL;
    } else if (s != WF_ERR_NOTFOUND) {
        return s;
    }
    s = wf_safetensors_read_meta(path, "weft.model_config", &text);
    if (s == WF_ERR_NOTFOUND)
        return wf_error(WF_ERR_FORMAT, "%s: not written by weft (no weft.model_config in __metadata__)", path);
    WF_TRY(s);
    s = config_from_json(path, text, cfg);
    free(text);
    return s;
}

wf_status wf_safetensors_has_tensor(const char *path, const char *name, int *has) {
    st_file f;
    *has = 0;
    WF_TRY(st_open(&f, path));
    *has = strcmp(name, "__metadata__") != 0 && json_object_get(f.hdr, name) != NULL;
    st_close(&f);
    return WF_OK;
}

static float bf16_to_f32(const unsigned char *p) {
    uint32_t bits = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Loads tensor by tensor into a host buffer, then into the model's memory
 * (its backend's) through wf_model_write. */
wf_status wf_safetensors_load(wf_model *m, const char *path) {
    size_t largest = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++)
        if (wf_model_tensor(m, i)->numel > largest) largest = wf_model_tensor(m, i)->numel;
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    if (!stage) return wf_error(WF_ERR_NOMEM, "%s: a staging buffer of %zu floats", path, largest);
    wf_status s = WF_OK;
    for (int i = 0; i < wf_model_num_tensors(m) && s == WF_OK; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        s = wf_safetensors_load_range(m, path, ti->offset, ti->numel, stage);
        if (s == WF_OK) s = wf_model_write(m, WF_MODEL_PARAMS, i, 0, ti->numel, stage);
    }
    free(stage);
    return s;
}

wf_status wf_safetensors_load_range(const wf_model *m, const char *path, size_t first, size_t n, float *dst) {
    if (first > wf_model_num_params(m) || n > wf_model_num_params(m) - first)
        return wf_error(WF_ERR_RANGE, "%s: values [%zu, %zu) are outside the model's %zu", path, first, first + n,
                        wf_model_num_params(m));
    st_file f;
    WF_TRY(st_open(&f, path));
    wf_status s = WF_OK;
    int nt = wf_model_num_tensors(m);
    for (int i = 0; i < nt && s == WF_OK; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        json_t *e = json_object_get(f.hdr, ti->name);
        if (!e) {
            s = wf_error(WF_ERR_FORMAT, "%s: tensor %s is missing", path, ti->name);
            break;
        }
        const char *dt = json_string_value(json_object_get(e, "dtype"));
        json_t *shape = json_object_get(e, "shape"), *range = json_object_get(e, "data_offsets");
        int esize = dt && strcmp(dt, "F32") == 0 ? 4 : dt && strcmp(dt, "BF16") == 0 ? 2 : 0;
        if (!esize) {
            s = wf_error(WF_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; weft reads F32 and BF16", path, ti->name,
                         dt ? dt : "(none)");
            break;
        }
        int same = json_is_array(shape) && (int)json_array_size(shape) == ti->ndim;
        for (int d = 0; same && d < ti->ndim; d++)
            same = json_integer_value(json_array_get(shape, (size_t)d)) == ti->shape[d];
        if (!same) {
            char *got = json_dumps(shape, JSON_COMPACT | JSON_ENCODE_ANY), want[64];
            if (ti->ndim == 2) snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", ti->shape[0], ti->shape[1]);
            else snprintf(want, sizeof want, "[%" PRId64 "]", ti->shape[0]);
            s = wf_error(WF_ERR_FORMAT, "%s: tensor %s has shape %s, the model needs %s", path, ti->name,
                         got ? got : "?", want);
            free(got);
            break;
        }
        json_int_t b = json_integer_value(json_array_get(range, 0)), e2 = json_integer_value(json_array_get(range, 1));
        if (!json_is_array(range) || b < 0 || e2 < b || (uint64_t)e2 > f.data_len ||
            (uint64_t)(e2 - b) != ti->numel * (uint64_t)esize) {
            s = wf_error(WF_ERR_FORMAT, "%s: tensor %s: data_offsets [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                         "] do not hold %zu values inside %" PRIu64 " data bytes (truncated file?)",
                         path, ti->name, b, e2, ti->numel, f.data_len);
            break;
        }
        /* Only the part of the tensor inside [first, first + n) is read
         * (the mapping's other pages are never touched). */
        size_t lo = ti->offset > first ? ti->offset : first;
        size_t hi = ti->offset + ti->numel < first + n ? ti->offset + ti->numel : first + n;
        if (lo >= hi) continue;
        float *out = dst + (lo - first);
        const unsigned char *src = f.data + b + (lo - ti->offset) * (size_t)esize;
        if (esize == 4) memcpy(out, src, (hi - lo) * 4);
        else
            for (size_t k = 0; k < hi - lo; k++) out[k] = bf16_to_f32(src + 2 * k);
    }
    if (s == WF_OK) {
        /* Nothing but the model's tensors (and the metadata) may be there. */
        const char *key;
        json_t *v;
        json_object_foreach(f.hdr, key, v) {
            if (strcmp(key, "__metadata__") == 0) continue;
            if (!wf_model_find_tensor(m, key)) {
                s = wf_error(WF_ERR_FORMAT, "%s: tensor %s is not part of this model (a different config?)", path, key);
                break;
            }
        }
    }
    st_close(&f);
    return s;
}
