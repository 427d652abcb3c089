/* Reading checkpoints: the manifest parsed and validated against the
 * format (docs/formats/checkpoint.md) before any data is trusted, data
 * files mapped read-only, pieces checked against their XXH3 checksums the
 * first time they are read, tensors held by one piece viewed in place,
 * row ranges and flat element ranges assembled
 * from whichever pieces hold them (so a checkpoint written by W ranks, with
 * replicated or sharded tensors, loads on any number of ranks),
 * and the search for the newest checkpoint that verifies. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/rundir.h"
#include "weft/store.h"

typedef struct {
    size_t tensor;
    int file;
    int64_t off[WF_CKPT_MAX_DIMS], size[WF_CKPT_MAX_DIMS];
    uint64_t offset, length, sum;
    int verified;
} rpiece;

typedef struct {
    const char *name; /* into the manifest's JSON */
    int ndim;
    int64_t shape[WF_CKPT_MAX_DIMS];
    size_t first, n; /* pieces [first, first + n) */
} rtensor;

typedef struct {
    char *name;
    char *path;
    uint64_t bytes;
    wf_mmap map;
} rfile;

struct wf_ckpt {
    char *dir, *mpath;
    char *text;
    json_t *m, *state;
    uint64_t step, data_bytes;
    int world;
    rfile *files;
    rtensor *tensors;
    size_t n_tensors;
    rpiece *pieces;
    size_t n_pieces;
};

void wf_ckpt_close(wf_ckpt *c) {
    if (!c) return;
    for (int i = 0; c->files && i < c->world; i++) {
        wf_mmap_close(&c->files[i].map);
        free(c->files[i].name);
        free(c->files[i].path);
    }
    free(c->files);
    free(c->tensors);
    free(c->pieces);
    json_decref(c->m);
    free(c->text);
    free(c->dir);
    free(c->mpath);
    free(c);
}

static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; k++) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* A non-negative JSON integer, or -1. */
static int64_t jint(const json_t *v) {
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* Reads an array of ndim non-negative integers. */
static int jints(const json_t *a, int ndim, int64_t *out) {
    if (!json_is_array(a) || (int)json_array_size(a) != ndim) return -1;
    for (int d = 0; d < ndim; d++)
        if ((out[d] = jint(json_array_get(a, (size_t)d))) < 0) return -1;
    return 0;
}

static wf_status open_files(wf_ckpt *c, const json_t *files) {
    if (!json_is_array(files) || (int)json_array_size(files) != c->world)
        return wf_error(WF_ERR_FORMAT, "%s: \"files\" must list %d data files (one per writing rank)", c->mpath,
                        c->world);
    c->files = calloc((size_t)c->world, sizeof *c->files);
    if (!c->files) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (int r = 0; r < c->world; r++) {
        const json_t *f = json_array_get(files, (size_t)r);
        const char *name = json_string_value(json_object_get(f, "name"));
        int64_t bytes = jint(json_object_get(f, "bytes"));
        if (!name || !*name || strchr(name, '/') || strcmp(name, "..") == 0 || jint(json_object_get(f, "rank")) != r ||
            bytes < WF_CKPT_HEADER_BYTES)
            return wf_error(WF_ERR_FORMAT, "%s: files[%d] needs a plain file name, rank %d and bytes >= %d", c->mpath,
                            r, r, WF_CKPT_HEADER_BYTES);
        rfile *rf = &c->files[r];
        rf->name = strdup(name);
        size_t n = strlen(c->dir) + strlen(name) + 2;
        rf->path = malloc(n);
        if (!rf->name || !rf->path) return wf_error(WF_ERR_NOMEM, "out of memory");
        snprintf(rf->path, n, "%s/%s", c->dir, name);
        rf->bytes = (uint64_t)bytes;
        wf_status s;
        if (wf_store_is_remote(rf->path)) {
            /* In an object store: mapped from its local copy (the store
             * cache), checked below like a local file. */
            char *local = NULL;
            s = wf_store_local_copy(rf->path, &local);
            if (s == WF_OK) s = wf_mmap_open(&rf->map, local);
            free(local);
        } else {
            s = wf_mmap_open(&rf->map, rf->path);
        }
        if (s == WF_ERR_NOTFOUND)
            return wf_error(WF_ERR_FORMAT, "%s: data file of rank %d is missing (the manifest lists it)", rf->path, r);
        WF_TRY(s);
        if (rf->map.size != rf->bytes) continue; /* reported with the tensor it cuts, by check_sizes */
        const unsigned char *h = rf->map.data;
        if (memcmp(h, WF_CKPT_DATA_MAGIC, 8) != 0)
            return wf_error(WF_ERR_FORMAT, "%s: not a weft checkpoint data file (bad magic)", rf->path);
        if (get_le(h + 8, 4) != WF_CKPT_FORMAT_VERSION || get_le(h + 12, 4) != (uint64_t)r ||
            get_le(h + 16, 4) != (uint64_t)c->world || get_le(h + 20, 4) != WF_CKPT_HEADER_BYTES ||
            get_le(h + 24, 8) != c->step || get_le(h + 32, 8) != rf->bytes)
            return wf_error(WF_ERR_FORMAT,
                            "%s: header says version %" PRIu64 ", rank %" PRIu64 " of %" PRIu64 ", step %" PRIu64
                            ", %" PRIu64 " bytes; the manifest says version %d, rank %d of %d, step %" PRIu64
                            ", %" PRIu64 " bytes (a file from another checkpoint?)",
                            rf->path, get_le(h + 8, 4), get_le(h + 12, 4), get_le(h + 16, 4), get_le(h + 24, 8),
                            get_le(h + 32, 8), WF_CKPT_FORMAT_VERSION, r, c->world, c->step, rf->bytes);
        c->data_bytes += rf->bytes;
    }
    return WF_OK;
}

/* A data file of the wrong size: names the first tensor it cuts short. */
static wf_status check_sizes(const wf_ckpt *c) {
    for (int r = 0; r < c->world; r++) {
        const rfile *f = &c->files[r];
        if (f->map.size == f->bytes) continue;
        if (f->map.size > f->bytes)
            return wf_error(WF_ERR_FORMAT, "%s: %zu bytes, the manifest says %" PRIu64 " (a file from another save?)",
                            f->path, f->map.size, f->bytes);
        const rpiece *cut = NULL;
        for (size_t k = 0; k < c->n_pieces && !cut; k++)
            if (c->pieces[k].file == r && c->pieces[k].offset + c->pieces[k].length > f->map.size) cut = &c->pieces[k];
        if (!cut)
            return wf_error(WF_ERR_FORMAT, "%s: truncated: %zu bytes, the manifest says %" PRIu64, f->path,
                            f->map.size, f->bytes);
        return wf_error(WF_ERR_FORMAT,
                        "%s: truncated: %zu bytes, the manifest says %" PRIu64 "; tensor %s (bytes %" PRIu64
                        "..%" PRIu64 ") is incomplete: use an earlier checkpoint",
                        f->path, f->map.size, f->bytes, c->tensors[cut->tensor].name, cut->offset,
                        cut->offset + cut->length);
    }
    return WF_OK;
}

static int boxes_overlap(const rpiece *a, const rpiece *b, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (a->off[d] + a->size[d] <= b->off[d] || b->off[d] + b->size[d] <= a->off[d]) return 0;
    return 1;
}

static wf_status parse_tensor(wf_ckpt *c, size_t i, const json_t *e) {
    rtensor *t = &c->tensors[i];
    t->name = json_string_value(json_object_get(e, "name"));
    if (!t->name || !*t->name) return wf_error(WF_ERR_FORMAT, "%s: tensors[%zu] has no name", c->mpath, i);
    for (size_t j = 0; j < i; j++)
        if (strcmp(c->tensors[j].name, t->name) == 0)
            return wf_error(WF_ERR_FORMAT, "%s: tensor %s appears twice", c->mpath, t->name);
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    if (!dt || strcmp(dt, "F32") != 0)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; this weft reads F32", c->mpath, t->name,
                        dt ? dt : "(none)");
    const json_t *shape = json_object_get(e, "shape");
    t->ndim = json_is_array(shape) ? (int)json_array_size(shape) : 0;
    if (t->ndim < 1 || t->ndim > WF_CKPT_MAX_DIMS || jints(shape, t->ndim, t->shape) != 0)
        return wf_error(WF_ERR_FORMAT, "%s: tensor %s: shape must be 1 to %d non-negative integers", c->mpath,
                        t->name, WF_CKPT_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 1 || t->shape[d] > ((int64_t)1 << 40))
            return wf_error(WF_ERR_FORMAT, "%s: tensor %s: dimension %d has size %" PRId64, c->mpath, t->name, d,
                            t->shape[d]);
        numel *= (uint64_t)t->shape[d];
    }
    const json_t *pieces = json_object_get(e, "pieces");
    if (!json_is_array(pieces) || json_array_size(pieces) == 0)
        return wf_error(WF_ERR_FORMAT, "%s: tensor %s has no pieces", c->mpath, t->name);
    t->first = c->n_pieces;
    t->n = json_array_size(pieces);
    rpiece *np = realloc(c->pieces, (c->n_pieces + t->n) * sizeof *np);
    if (!np) return wf_error(WF_ERR_NOMEM, "out of memory");
    c->pieces = np;
    uint64_t covered = 0;
    for (size_t k = 0; k < t->n; k++) {
        const json_t *pj = json_array_get(pieces, k);
        rpiece *p = &c->pieces[c->n_pieces + k];
        memset(p, 0, sizeof *p);
        p->tensor = i;
        int64_t file = jint(json_object_get(pj, "file")), off = jint(json_object_get(pj, "offset")),
                len = jint(json_object_get(pj, "length"));
        const char *hex = json_string_value(json_object_get(pj, "xxh3"));
        char *end = NULL;
        if (hex && strlen(hex) == 16) p->sum = strtoull(hex, &end, 16);
        if (file < 0 || file >= c->world || off < 0 || len < 0 || !end || *end ||
            jints(json_object_get(pj, "offsets"), t->ndim, p->off) != 0 ||
            jints(json_object_get(pj, "sizes"), t->ndim, p->size) != 0)
            return wf_error(WF_ERR_FORMAT,
                            "%s: tensor %s, piece %zu: needs file (0..%d), offsets and sizes (%d each), offset, "
                            "length and a 16-digit hex xxh3",
                            c->mpath, t->name, k, c->world - 1, t->ndim);
        p->file = (int)file;
        p->offset = (uint64_t)off;
        p->length = (uint64_t)len;
        uint64_t vol = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (p->size[d] < 1 || p->off[d] + p->size[d] > t->shape[d])
                return wf_error(WF_ERR_FORMAT, "%s: tensor %s, piece %zu: dimension %d [%" PRId64 ", +%" PRId64
                                ") is outside the shape",
                                c->mpath, t->name, k, d, p->off[d], p->size[d]);
            vol *= (uint64_t)p->size[d];
        }
        const rfile *f = &c->files[p->file];
        if (p->length != vol * 4 || p->offset < WF_CKPT_HEADER_BYTES || p->offset > f->bytes ||
            p->length > f->bytes - p->offset)
            return wf_error(WF_ERR_FORMAT, "%s: tensor %s, piece %zu: bytes [%" PRIu64 ", +%" PRIu64
                            ") do not hold %" PRIu64 " floats inside %s (%" PRIu64 " bytes)",
                            c->mpath, t->name, k, p->offset, p->length, vol, f->name, f->bytes);
        for (size_t j = 0; j < k; j++)
            if (boxes_overlap(p, &c->pieces[c->n_pieces + j], t->ndim))
                return wf_error(WF_ERR_FORMAT, "%s: tensor %s: pieces %zu and %zu overlap", c->mpath, t->name, j, k);
        covered += vol;
    }
    if (covered != numel)
        return wf_error(WF_ERR_FORMAT, "%s: tensor %s: the pieces cover %" PRIu64 " of %" PRIu64 " elements",
                        c->mpath, t->name, covered, numel);
    c->n_pieces += t->n;
    return WF_OK;
}

static wf_status parse_manifest(wf_ckpt *c) {
    json_error_t jerr;
    c->m = json_loads(c->text, 0, &jerr);
    if (!json_is_object(c->m))
        return wf_error(WF_ERR_FORMAT, "%s: line %d: malformed manifest: %s", c->mpath, jerr.line, jerr.text);
    const char *fmt = json_string_value(json_object_get(c->m, "format"));
    if (!fmt || strcmp(fmt, "weft-checkpoint") != 0)
        return wf_error(WF_ERR_FORMAT, "%s: not a weft checkpoint manifest (\"format\" is not \"weft-checkpoint\")",
                        c->mpath);
    int64_t version = jint(json_object_get(c->m, "version"));
    if (version != WF_CKPT_FORMAT_VERSION)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: format version %" PRId64 "; this weft reads version %d", c->mpath,
                        version, WF_CKPT_FORMAT_VERSION);
    int64_t step = jint(json_object_get(c->m, "step")), world = jint(json_object_get(c->m, "world_size"));
    const char *bo = json_string_value(json_object_get(c->m, "byte_order"));
    if (step < 0 || world < 1 || world > 100000 || !bo || strcmp(bo, "little") != 0)
        return wf_error(WF_ERR_FORMAT, "%s: needs step >= 0, world_size in [1, 100000] and byte_order \"little\"",
                        c->mpath);
    c->step = (uint64_t)step;
    c->world = (int)world;
    c->state = json_object_get(c->m, "state");
    if (c->state && !json_is_object(c->state))
        return wf_error(WF_ERR_FORMAT, "%s: \"state\" is not an object", c->mpath);
    WF_TRY(open_files(c, json_object_get(c->m, "files")));
    const json_t *tensors = json_object_get(c->m, "tensors");
    if (!json_is_array(tensors)) return wf_error(WF_ERR_FORMAT, "%s: \"tensors\" is not an array", c->mpath);
    c->n_tensors = json_array_size(tensors);
    c->tensors = calloc(c->n_tensors + 1, sizeof *c->tensors);
    if (!c->tensors) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < c->n_tensors; i++) WF_TRY(parse_tensor(c, i, json_array_get(tensors, i)));
    return check_sizes(c);
}

wf_status wf_ckpt_open(wf_ckpt **out, const char *dir) {
    *out = NULL;
    wf_ckpt *c = calloc(1, sizeof *c);
    if (!c) return wf_error(WF_ERR_NOMEM, "out of memory");
    size_t n = strlen(dir) + sizeof(WF_CKPT_MANIFEST) + 2;
    c->dir = strdup(dir);
    c->mpath = malloc(n);
    if (!c->dir || !c->mpath) {
        wf_ckpt_close(c);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    snprintf(c->mpath, n, "%s/%s", dir, WF_CKPT_MANIFEST);
    size_t len;
    wf_status s;
    if (wf_store_is_remote(dir)) {
        if ((s = wf_store_read(c->mpath, &c->text, &len)) == WF_ERR_NOTFOUND)
            s = wf_error(WF_ERR_NOTFOUND, "%s is missing: not a committed checkpoint", c->mpath);
    } else if (!wf_path_is_dir(dir)) s = wf_error(WF_ERR_NOTFOUND, "%s: no such checkpoint directory", dir);
    else if ((s = wf_file_read(c->mpath, &c->text, &len)) == WF_ERR_NOTFOUND)
        s = wf_error(WF_ERR_NOTFOUND, "%s is missing: not a checkpoint directory", c->mpath);
    if (s == WF_OK) s = parse_manifest(c);
    if (s != WF_OK) {
        wf_ckpt_close(c);
        return s;
    }
    *out = c;
    return WF_OK;
}

const char *wf_ckpt_path(const wf_ckpt *c) { return c->dir; }
uint64_t wf_ckpt_step(const wf_ckpt *c) { return c->step; }
int wf_ckpt_world_size(const wf_ckpt *c) { return c->world; }
uint64_t wf_ckpt_data_bytes(const wf_ckpt *c) { return c->data_bytes; }
size_t wf_ckpt_num_tensors(const wf_ckpt *c) { return c->n_tensors; }
const char *wf_ckpt_manifest_text(const wf_ckpt *c) { return c->text; }

void wf_ckpt_tensor_at(const wf_ckpt *c, size_t i, wf_ckpt_tensor_desc *out) {
    const rtensor *t = &c->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = "F32";
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->n_pieces = (int)t->n;
}

long wf_ckpt_find(const wf_ckpt *c, const char *name) {
    for (size_t i = 0; i < c->n_tensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0) return (long)i;
    return -1;
}

/* ---- scalar state ---- */

static const json_t *state_get(const wf_ckpt *c, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return json_object_get(c->state, key);
    char section[128];
    if ((size_t)(dot - key) >= sizeof section) return NULL;
    memcpy(section, key, (size_t)(dot - key));
    section[dot - key] = '\0';
    return json_object_get(json_object_get(c->state, section), dot + 1);
}

wf_status wf_ckpt_get_u64(const wf_ckpt *c, const char *key, uint64_t *v) {
    int64_t x = jint(state_get(c, key));
    if (x < 0) return wf_error(WF_ERR_FORMAT, "%s: state %s is missing or not a non-negative integer", c->mpath, key);
    *v = (uint64_t)x;
    return WF_OK;
}

wf_status wf_ckpt_get_f64(const wf_ckpt *c, const char *key, double *v) {
    const json_t *j = state_get(c, key);
    if (!json_is_number(j)) return wf_error(WF_ERR_FORMAT, "%s: state %s is missing or not a number", c->mpath, key);
    *v = json_number_value(j);
    return WF_OK;
}

wf_status wf_ckpt_get_str(const wf_ckpt *c, const char *key, const char **v) {
    const json_t *j = state_get(c, key);
    if (!json_is_string(j)) return wf_error(WF_ERR_FORMAT, "%s: state %s is missing or not a string", c->mpath, key);
    *v = json_string_value(j);
    return WF_OK;
}

wf_status wf_ckpt_get_model_config(const wf_ckpt *c, wf_model_config *out) {
    wf_model_config m;
    memset(&m, 0, sizeof m);
    static const char *ints[] = {"model.dim", "model.n_layers", "model.n_heads", "model.n_kv_heads",
                                 "model.vocab_size", "model.ffn_hidden_dim", "model.max_seq_len",
                                 "model.tied_embeddings"};
    int *fields[] = {&m.dim, &m.n_layers, &m.n_heads, &m.n_kv_heads, &m.vocab_size, &m.ffn_hidden_dim,
                     &m.max_seq_len, &m.tied_embeddings};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        uint64_t v = 0;
        WF_TRY(wf_ckpt_get_u64(c, ints[i], &v));
        if (v > (1u << 30)) return wf_error(WF_ERR_FORMAT, "%s: state %s = %" PRIu64 " is too large", c->mpath, ints[i], v);
        *fields[i] = (int)v;
    }
    WF_TRY(wf_ckpt_get_f64(c, "model.norm_eps", &m.norm_eps));
    WF_TRY(wf_ckpt_get_f64(c, "model.rope_theta", &m.rope_theta));
    WF_TRY(wf_ckpt_get_f64(c, "model.init_std", &m.init_std));
    m.ffn_multiplier = 1.0;
    m.ffn_multiple_of = 1;
    wf_status s = wf_model_config_validate(&m);
    if (s != WF_OK) return wf_error_wrap(s, "%s: stored model config: ", c->mpath);
    *out = m;
    return WF_OK;
}

/* ---- data ---- */

static wf_status check_piece(wf_ckpt *c, rpiece *p) {
    if (p->verified) return WF_OK;
    const rfile *f = &c->files[p->file];
    uint64_t got = wf_hash64(f->map.data + p->offset, p->length);
    if (got != p->sum) {
        const rtensor *t = &c->tensors[p->tensor];
        return wf_error(WF_ERR_CHECKSUM,
                        "%s: tensor %s (rows %" PRId64 "..%" PRId64 ", bytes %" PRIu64 "..%" PRIu64
                        "): checksum mismatch (manifest %016" PRIx64 ", data %016" PRIx64
                        "): the file is corrupt; use an earlier checkpoint",
                        f->path, t->name, p->off[0], p->off[0] + p->size[0], p->offset, p->offset + p->length, p->sum,
                        got);
    }
    p->verified = 1;
    return WF_OK;
}

/* Copies the elements of piece p (its data at `src`, the box row-major)
 * that lie in the flat element range [b, e) of tensor t into dst, which
 * holds [b, e). The box is walked as runs along its last dimension, or as
 * one run when its elements are contiguous in the tensor (whole rows, or a
 * part of one row at every level: what weft writes). */
static void copy_piece_range(const rtensor *t, const rpiece *p, const float *src, int64_t b, int64_t e, float *dst) {
    int nd = t->ndim;
    int64_t stride[WF_CKPT_MAX_DIMS], vol = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = d == nd - 1 ? 1 : stride[d + 1] * t->shape[d + 1];
        vol *= p->size[d];
    }
    /* Contiguous: the dims after the first one with size > 1 are whole. */
    int contiguous = 1, seen = 0;
    for (int d = 0; d < nd; d++) {
        if (seen && p->size[d] != t->shape[d]) contiguous = 0;
        if (p->size[d] > 1) seen = 1;
    }
    int64_t inner = contiguous ? vol : p->size[nd - 1], runs = vol / inner;
    for (int64_t k = 0; k < runs; k++) {
        /* The run's first element in the tensor: its index in the box,
         * shifted by the box's offsets. */
        int64_t rem = k, first = p->off[nd - 1];
        for (int d = nd - 2; d >= 0 && !contiguous; d--) {
            first += (p->off[d] + rem % p->size[d]) * stride[d];
            rem /= p->size[d];
        }
        if (contiguous)
            for (int d = 0; d < nd - 1; d++) first += p->off[d] * stride[d];
        int64_t lo = first > b ? first : b, hi = first + inner < e ? first + inner : e;
        if (lo < hi) memcpy(dst + (lo - b), src + k * inner + (lo - first), (size_t)(hi - lo) * sizeof *dst);
    }
}

/* The flat element range [first, last] a piece's box spans in its tensor. */
static void piece_span(const rtensor *t, const rpiece *p, int64_t *first, int64_t *last) {
    int64_t f = 0, l = 0;
    for (int d = 0; d < t->ndim; d++) {
        f = f * t->shape[d] + p->off[d];
        l = l * t->shape[d] + p->off[d] + p->size[d] - 1;
    }
    *first = f;
    *last = l;
}

static wf_status read_range(wf_ckpt *c, const rtensor *t, int64_t begin, int64_t end, float *dst) {
    for (size_t k = t->first; k < t->first + t->n; k++) {
        rpiece *p = &c->pieces[k];
        int64_t first, last;
        piece_span(t, p, &first, &last);
        if (first >= end || last < begin) continue;
        WF_TRY(check_piece(c, p));
        /* Offsets are multiples of 4 from a page-aligned mapping (checked
         * writer-side; the reader does not rely on it for correctness). */
        const unsigned char *src = c->files[p->file].map.data + p->offset;
        if (p->offset % 4 == 0) {
            copy_piece_range(t, p, (const float *)(const void *)src, begin, end, dst);
        } else {
            float *tmp = malloc(p->length);
            if (!tmp) return wf_error(WF_ERR_NOMEM, "out of memory");
            memcpy(tmp, src, p->length);
            copy_piece_range(t, p, tmp, begin, end, dst);
            free(tmp);
        }
    }
    return WF_OK;
}

wf_status wf_ckpt_read_rows(wf_ckpt *c, const char *name, int64_t row_begin, int64_t row_end, float *dst) {
    long ti = wf_ckpt_find(c, name);
    if (ti < 0) return wf_error(WF_ERR_NOTFOUND, "%s: no tensor %s", c->mpath, name);
    const rtensor *t = &c->tensors[ti];
    if (row_begin < 0 || row_end < row_begin || row_end > t->shape[0])
        return wf_error(WF_ERR_RANGE, "%s: tensor %s: rows [%" PRId64 ", %" PRId64 ") outside its %" PRId64 " rows",
                        c->mpath, name, row_begin, row_end, t->shape[0]);
    int64_t row = 1;
    for (int d = 1; d < t->ndim; d++) row *= t->shape[d];
    return read_range(c, t, row_begin * row, row_end * row, dst);
}

wf_status wf_ckpt_read_range(wf_ckpt *c, const char *name, int64_t begin, int64_t end, float *dst) {
    long ti = wf_ckpt_find(c, name);
    if (ti < 0) return wf_error(WF_ERR_NOTFOUND, "%s: no tensor %s", c->mpath, name);
    const rtensor *t = &c->tensors[ti];
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    if (begin < 0 || end < begin || end > numel)
        return wf_error(WF_ERR_RANGE,
                        "%s: tensor %s: elements [%" PRId64 ", %" PRId64 ") outside its %" PRId64 " elements",
                        c->mpath, name, begin, end, numel);
    return read_range(c, t, begin, end, dst);
}

wf_status wf_ckpt_view(wf_ckpt *c, const char *name, const float **data) {
    *data = NULL;
    long ti = wf_ckpt_find(c, name);
    if (ti < 0) return wf_error(WF_ERR_NOTFOUND, "%s: no tensor %s", c->mpath, name);
    const rtensor *t = &c->tensors[ti];
    /* The pieces tile the tensor (checked at open), so a single piece is
     * the whole tensor, stored row-major as the tensor is. */
    if (t->n != 1) return WF_OK;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    rpiece *p = &c->pieces[t->first];
    if (p->offset % sizeof(float) != 0) return WF_OK;
    WF_TRY(check_piece(c, p));
    *data = (const float *)(const void *)(c->files[p->file].map.data + p->offset);
#endif
    return WF_OK;
}

static void fmt_shape(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(buf + o, n - o, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

wf_status wf_ckpt_load(wf_ckpt *c, const wf_ckpt_tensor *tensors, size_t n) {
    return wf_ckpt_load_rank(c, tensors, n, 0);
}

wf_status wf_ckpt_load_rank(wf_ckpt *c, const wf_ckpt_tensor *tensors, size_t n, int rank) {
    for (size_t i = 0; i < n; i++) {
        const wf_ckpt_tensor *t = &tensors[i];
        long k = wf_ckpt_find(c, t->name);
        if (k < 0)
            return wf_error(WF_ERR_CONFIG, "%s: has no tensor %s: it was saved from a different model or optimizer",
                            c->dir, t->name);
        const rtensor *rt = &c->tensors[k];
        int same = rt->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = rt->shape[d] == t->shape[d];
        if (!same) {
            char a[96], b[96];
            fmt_shape(a, sizeof a, rt->shape, rt->ndim);
            fmt_shape(b, sizeof b, t->shape, t->ndim);
            return wf_error(WF_ERR_CONFIG, "%s: tensor %s has shape %s, this run needs %s", c->dir, t->name, a, b);
        }
    }
    if (c->n_tensors != n) {
        for (size_t k = 0; k < c->n_tensors; k++) {
            size_t i = 0;
            while (i < n && strcmp(tensors[i].name, c->tensors[k].name) != 0) i++;
            if (i == n)
                return wf_error(WF_ERR_CONFIG, "%s: holds tensor %s, which this run does not have (a different model?)",
                                c->dir, c->tensors[k].name);
        }
    }
    for (size_t i = 0; i < n; i++) {
        int64_t b, e;
        wf_ckpt_tensor_range(&tensors[i], rank, &b, &e);
        if (b >= e) continue;
        if (!tensors[i].be) {
            WF_TRY(wf_ckpt_read_range(c, tensors[i].name, b, e, tensors[i].data));
            continue;
        }
        /* A backend's memory: through a host buffer and an upload. */
        size_t count = (size_t)(e - b);
        float *stage = malloc(count * sizeof *stage);
        if (!stage)
            return wf_error(WF_ERR_NOMEM, "%s: a staging buffer of %zu floats for %s", c->dir, count, tensors[i].name);
        wf_status s = wf_ckpt_read_range(c, tensors[i].name, b, e, stage);
        if (s == WF_OK) s = wf_backend_upload(tensors[i].be, tensors[i].data, stage, count * sizeof *stage);
        free(stage);
        WF_TRY(s);
    }
    return WF_OK;
}

wf_status wf_ckpt_verify(wf_ckpt *c, void (*report)(void *ctx, const char *problem), void *ctx) {
    /* Every piece is checked (and reported); the first problem is the
     * error returned. */
    wf_error_keep first = WF_ERROR_KEEP_INIT;
    for (size_t k = 0; k < c->n_pieces; k++) {
        wf_status s = check_piece(c, &c->pieces[k]);
        if (s == WF_OK) continue;
        if (report) report(ctx, wf_error_msg());
        wf_error_keep_note(&first, s);
    }
    return wf_error_keep_restore(&first);
}

wf_status wf_ckpt_open_latest(const char *root, wf_ckpt **out) {
    *out = NULL;
    uint64_t *steps;
    size_t n;
    WF_TRY(wf_ckpt_list(root, &steps, &n));
    char first_bad[4096] = "";
    for (size_t i = n; i-- > 0;) {
        char dir[4096];
        wf_ckpt_step_dir(dir, sizeof dir, root, steps[i]);
        wf_ckpt *c;
        wf_status s = wf_ckpt_open(&c, dir);
        if (s == WF_OK) {
            s = wf_ckpt_verify(c, NULL, NULL);
            if (s != WF_OK) wf_ckpt_close(c);
        }
        if (s == WF_ERR_NOMEM) {
            free(steps);
            return s;
        }
        if (wf_store_is_remote(dir) && (s == WF_ERR_IO || s == WF_ERR_CONFIG)) {
            /* The store did not answer (or refused us): that says nothing
             * about the checkpoint, so falling back past it (or starting
             * over) would be wrong. */
            free(steps);
            return wf_error_wrap(s, "checkpoint %s could not be read (the store failed, not the checkpoint; run again "
                                    "once the store answers): ", dir);
        }
        if (s != WF_OK) {
            WF_WARN("checkpoint %s is not usable: %s", dir, wf_error_msg());
            if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s", dir);
            continue;
        }
        if (first_bad[0]) WF_WARN("falling back to the previous valid checkpoint %s (instead of %s)", dir, first_bad);
        *out = c;
        break;
    }
    if (!*out && first_bad[0]) WF_WARN("no checkpoint in %s is usable", root);
    free(steps);
    return WF_OK;
}

static wf_status ckpt_load_tensors(wf_ckpt *c, wf_model *m, float *stage);

/* Tensor by tensor into a host buffer, then into the model's memory (its
 * backend's) through wf_model_write. */
wf_status wf_ckpt_load_model(wf_ckpt *c, wf_model *m) {
    size_t largest = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++)
        if (wf_model_tensor(m, i)->numel > largest) largest = wf_model_tensor(m, i)->numel;
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    if (!stage) return wf_error(WF_ERR_NOMEM, "%s: a staging buffer of %zu floats", c->dir, largest);
    wf_status s = ckpt_load_tensors(c, m, stage);
    free(stage);
    return s;
}

static wf_status ckpt_load_tensors(wf_ckpt *c, wf_model *m, float *stage) {
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        long k = wf_ckpt_find(c, ti->name);
        if (k < 0) return wf_error(WF_ERR_FORMAT, "%s: has no tensor %s", c->dir, ti->name);
        const rtensor *rt = &c->tensors[k];
        if (rt->ndim != ti->ndim || rt->shape[0] != ti->shape[0] || (ti->ndim == 2 && rt->shape[1] != ti->shape[1]))
            return wf_error(WF_ERR_FORMAT, "%s: tensor %s does not have the shape of the model it records", c->dir,
                            ti->name);
        WF_TRY(wf_ckpt_read_rows(c, ti->name, 0, ti->shape[0], stage));
        WF_TRY(wf_model_write(m, WF_MODEL_PARAMS, i, 0, ti->numel, stage));
    }
    return WF_OK;
}

wf_status wf_ckpt_open_path(wf_ckpt **out, const char *path) {
    *out = NULL;
    char buf[WF_PATH_MAX];
    WF_TRY(wf_path_join(buf, sizeof buf, path, WF_CKPT_MANIFEST, NULL));
    if (wf_store_is_remote(path)) {
        /* In an object store: a checkpoint (its manifest is there), else a
         * prefix of checkpoints (ckpt.dir), whose newest valid one opens. */
        wf_store_stat st;
        wf_status s = wf_store_head(buf, &st);
        if (s == WF_OK) return wf_ckpt_open(out, path);
        if (s != WF_ERR_NOTFOUND) return s;
        wf_error_clear();
        size_t n = strlen(path);
        while (n > 5 && path[n - 1] == '/') n--;
        snprintf(buf, sizeof buf, "%.*s", (int)n, path);
        WF_TRY(wf_ckpt_open_latest(buf, out));
        if (!*out)
            return wf_error(WF_ERR_NOTFOUND, "%s: no committed checkpoint (looked for %s/manifest.json and %s/step-*)",
                            path, buf, buf);
        return WF_OK;
    }
    if (wf_path_exists(buf)) return wf_ckpt_open(out, path);
    WF_TRY(wf_rundir_path(buf, sizeof buf, path, WF_RUN_CHECKPOINTS));
    const char *root = wf_path_is_dir(buf) ? buf : path;
    if (!wf_path_is_dir(root)) return wf_error(WF_ERR_NOTFOUND, "%s: no such directory", path);
    WF_TRY(wf_ckpt_open_latest(root, out));
    if (!*out)
        return wf_error(WF_ERR_NOTFOUND, "%s: no valid checkpoint (looked for %s/manifest.json and %s/step-*)", path,
                        path, root);
    return WF_OK;
}
