/* Datasets: a directory of token shards per split plus dataset.json, the
 * index that makes them one dataset (docs/formats/dataset-json.md).
 *
 * The writer rolls shards over at shard_tokens, never splitting a document,
 * and writes dataset.json last: a directory without it is not a dataset, so
 * an interrupted `weft tokenize` can never be mistaken for a finished one.
 * The reader parses dataset.json, opens every shard of one split through
 * mmap, cross-checks each shard's header against the index, and presents
 * the split as one virtual token stream. Nothing here tokenizes or shuffles.
 */
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/buf.h"
#include "data/shard_impl.h"
#include "weft/log.h"
#include "weft/shard.h"
#include "weft/sorted.h"
#include "weft/store.h"

#define DATASET_JSON "dataset.json"
#define DATASET_FORMAT "weft-token-dataset"
#define DATASET_VERSION 1

static const char *const split_names[2] = {"train", "val"};

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ============================================================== writer */

typedef struct {
    wf_shard_out out; /* the shard being written; out.f.path != NULL while open */
    int open;
    wf_shard_info *done; /* committed shards */
    size_t n_done, cap_done;
    uint64_t n_tokens, n_docs;
} split_writer;

struct wf_dataset_writer {
    char *dir;
    char *tokenizer;
    uint64_t fingerprint;
    int has_fingerprint;
    uint32_t vocab_size;
    int token_bytes;
    uint64_t shard_tokens;
    split_writer sp[2];
    int finished;
    int failed; /* a write failed: the writer accepts nothing more */
};

/* Is `name` a file a dataset writer makes: train-NNNNN.wfs, val-NNNNN.wfs,
 * or a temporary of one (…wfs.tmp.PID), or dataset.json's temporary? */
static int is_dataset_file(const char *name) {
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(split_names[i]);
        if (strncmp(name, split_names[i], n) == 0 && name[n] == '-') {
            const char *q = name + n + 1;
            size_t digits = strspn(q, "0123456789");
            if (digits >= 5 && strncmp(q + digits, ".wfs", 4) == 0 &&
                (q[digits + 4] == '\0' || strncmp(q + digits + 4, ".tmp.", 5) == 0))
                return 1;
        }
    }
    return strncmp(name, DATASET_JSON ".tmp.", strlen(DATASET_JSON) + 5) == 0;
}

/* Replacing a dataset: dataset.json goes first, so that from here on the
 * directory is not a dataset until the new one is finished, then the old
 * shards (so none can be mistaken for part of the new one). */
static wf_status clear_old_dataset(const char *dir) {
    char *json = path_join(dir, DATASET_JSON);
    if (!json) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (wf_path_exists(json)) {
        WF_INFO("%s: replacing the dataset there", dir);
        if (unlink(json) != 0) {
            wf_status s = wf_error(WF_ERR_IO, "%s: cannot remove the old index", json);
            free(json);
            return s;
        }
    }
    free(json);
    DIR *dp = opendir(dir);
    if (!dp) return wf_error(WF_ERR_IO, "%s: cannot list the directory", dir);
    struct dirent *e;
    wf_status s = WF_OK;
    while ((e = readdir(dp)) != NULL) {
        if (!is_dataset_file(e->d_name)) continue;
        char *p = path_join(dir, e->d_name);
        if (!p || unlink(p) != 0) s = wf_error(WF_ERR_IO, "%s: cannot remove an old shard", p ? p : dir);
        free(p);
        if (s != WF_OK) break;
    }
    closedir(dp);
    return s;
}

wf_status wf_dataset_writer_create(wf_dataset_writer **out, const wf_dataset_writer_opts *o) {
    *out = NULL;
    if (!o->dir || !o->dir[0]) return wf_error(WF_ERR_INVALID, "dataset writer: no output directory given");
    if (o->vocab_size == 0)
        return wf_error(WF_ERR_INVALID, "dataset writer: vocab_size must be positive");
    if (o->shard_tokens == 0)
        return wf_error(WF_ERR_INVALID, "dataset writer: shard_tokens must be positive");
    WF_TRY(wf_mkdirs(o->dir));
    WF_TRY(clear_old_dataset(o->dir));
    wf_dataset_writer *w = calloc(1, sizeof *w);
    if (!w) return wf_error(WF_ERR_NOMEM, "out of memory");
    w->dir = strdup(o->dir);
    w->tokenizer = o->tokenizer_path ? strdup(o->tokenizer_path) : NULL;
    if (!w->dir || (o->tokenizer_path && !w->tokenizer)) {
        wf_dataset_writer_destroy(w);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    w->fingerprint = o->tokenizer_fingerprint;
    w->has_fingerprint = o->has_fingerprint;
    w->vocab_size = o->vocab_size;
    w->token_bytes = o->vocab_size <= 65536 ? 2 : 4;
    w->shard_tokens = o->shard_tokens;
    *out = w;
    return WF_OK;
}

static wf_status split_close_shard(wf_dataset_writer *w, split_writer *sw) {
    wf_shard_summary sum;
    char *file = strdup(strrchr(sw->out.f.path, '/') + 1);
    if (!file) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = wf__shard_out_end(&sw->out, &sum);
    sw->open = 0;
    if (s != WF_OK) {
        free(file);
        wf__shard_out_abort(&sw->out);
        return s;
    }
    if (WF_GROW(sw->done, sw->cap_done, sw->n_done + 1, 16) != WF_OK) {
        {
            /* The file is committed but unrecorded: remove it here, since
             * destroy only knows the recorded ones. */
            char *p = path_join(w->dir, file);
            if (p) unlink(p);
            free(p);
            free(file);
            return wf_error_wrap(WF_ERR_NOMEM, "%s: ", w->dir);
        }
    }
    sw->done[sw->n_done++] =
        (wf_shard_info){file, sum.n_tokens, sum.n_docs, sum.bytes, sum.payload_hash, sum.header_hash};
    return WF_OK;
}

wf_status wf_dataset_writer_add(wf_dataset_writer *w, int split, const int32_t *ids, size_t n) {
    if (w->finished || w->failed)
        return wf_error(WF_ERR_INVALID, "%s: the dataset writer is %s", w->dir,
                        w->finished ? "finished" : "stopped after an earlier error");
    if (split != 0 && split != 1)
        return wf_error(WF_ERR_INVALID, "%s: split must be 0 (train) or 1 (val), not %d", w->dir, split);
    if (n == 0)
        return wf_error(WF_ERR_INVALID, "%s: empty document (a document holds at least one token)", w->dir);
    split_writer *sw = &w->sp[split];
    wf_status s = WF_OK;
    /* Roll over before a document that would not fit, unless the shard is
     * empty: a document longer than shard_tokens gets a shard of its own. */
    if (sw->open && sw->out.n_tokens > 0 && sw->out.n_tokens + n > w->shard_tokens)
        s = split_close_shard(w, sw);
    if (s == WF_OK && !sw->open) {
        char name[64];
        snprintf(name, sizeof name, "%s-%05zu.wfs", split_names[split], sw->n_done);
        char *path = path_join(w->dir, name);
        if (!path) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else s = wf__shard_out_begin(&sw->out, path, w->token_bytes, w->vocab_size, (uint32_t)split,
                                    (uint32_t)sw->n_done);
        free(path);
        if (s == WF_OK) sw->open = 1;
    }
    if (s == WF_OK) s = wf__shard_out_append(&sw->out, ids, n);
    /* A token outside the vocabulary is caught before anything is written:
     * the writer stays usable. Any other failure stops it. */
    if (s == WF_ERR_RANGE) return s;
    if (s != WF_OK) {
        w->failed = 1;
        return s;
    }
    sw->n_tokens += n;
    sw->n_docs++;
    return WF_OK;
}

static json_t *shard_info_json(const wf_shard_info *si) {
    char ph[17], hh[17];
    snprintf(ph, sizeof ph, "%016" PRIx64, si->payload_hash);
    snprintf(hh, sizeof hh, "%016" PRIx64, si->header_hash);
    return json_pack("{s:s, s:I, s:I, s:I, s:s, s:s}", "file", si->file, "n_tokens",
                     (json_int_t)si->n_tokens, "n_docs", (json_int_t)si->n_docs, "bytes",
                     (json_int_t)si->bytes, "payload_xxh3", ph, "header_xxh3", hh);
}

static wf_status write_index(wf_dataset_writer *w) {
    json_t *root = json_object(), *splits = json_object();
    if (!root || !splits) goto nomem;
    json_object_set_new(root, "format", json_string(DATASET_FORMAT));
    json_object_set_new(root, "version", json_integer(DATASET_VERSION));
    json_object_set_new(root, "vocab_size", json_integer(w->vocab_size));
    json_object_set_new(root, "dtype", json_string(w->token_bytes == 2 ? "uint16" : "uint32"));
    json_object_set_new(root, "tokenizer", w->tokenizer ? json_string(w->tokenizer) : json_null());
    if (w->has_fingerprint) {
        char fp[17];
        snprintf(fp, sizeof fp, "%016" PRIx64, w->fingerprint);
        json_object_set_new(root, "tokenizer_fingerprint", json_string(fp));
    }
    json_object_set_new(root, "splits", splits);
    for (int i = 0; i < 2; i++) {
        const split_writer *sw = &w->sp[i];
        json_t *arr = json_array();
        if (!arr) goto nomem;
        for (size_t k = 0; k < sw->n_done; k++) json_array_append_new(arr, shard_info_json(&sw->done[k]));
        json_t *sp = json_pack("{s:I, s:I, s:o}", "n_tokens", (json_int_t)sw->n_tokens, "n_docs",
                               (json_int_t)sw->n_docs, "shards", arr);
        if (!sp) goto nomem;
        json_object_set_new(splits, split_names[i], sp);
    }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory writing %s", DATASET_JSON);
    char *path = path_join(w->dir, DATASET_JSON);
    wf_status s;
    if (!path) {
        s = wf_error(WF_ERR_NOMEM, "out of memory");
    } else {
        size_t len = strlen(text);
        text[len] = '\n'; /* json_dumps' NUL becomes the final newline */
        s = wf_file_write_atomic(path, text, len + 1);
    }
    free(path);
    free(text);
    return s;
nomem:
    json_decref(root);
    return wf_error(WF_ERR_NOMEM, "out of memory writing %s", DATASET_JSON);
}

wf_status wf_dataset_writer_finish(wf_dataset_writer *w) {
    if (w->finished) return WF_OK;
    if (w->failed)
        return wf_error(WF_ERR_INVALID, "%s: the dataset writer stopped after an earlier error", w->dir);
    for (int i = 0; i < 2; i++) {
        split_writer *sw = &w->sp[i];
        if (!sw->open) continue;
        if (sw->out.n_docs == 0) { /* opened, then its first document was refused */
            wf__shard_out_abort(&sw->out);
            sw->open = 0;
            continue;
        }
        wf_status s = split_close_shard(w, sw);
        if (s != WF_OK) {
            w->failed = 1;
            return s;
        }
    }
    if (w->sp[0].n_docs == 0 && w->sp[1].n_docs == 0)
        return wf_error(WF_ERR_EMPTY, "%s: no documents were written: the input holds no text", w->dir);
    if (w->sp[0].n_docs == 0)
        return wf_error(WF_ERR_EMPTY,
                        "%s: every one of the %llu documents went to the validation split, none to train: "
                        "lower the validation fraction or give more documents",
                        w->dir, (unsigned long long)w->sp[1].n_docs);
    wf_status s = write_index(w);
    if (s != WF_OK) {
        w->failed = 1;
        return s;
    }
    w->finished = 1;
    return WF_OK;
}

void wf_dataset_writer_destroy(wf_dataset_writer *w) {
    if (!w) return;
    for (int i = 0; i < 2; i++) {
        split_writer *sw = &w->sp[i];
        if (sw->open) wf__shard_out_abort(&sw->out);
        for (size_t k = 0; k < sw->n_done; k++) {
            if (!w->finished) { /* shards without a dataset.json are garbage */
                char *p = path_join(w->dir, sw->done[k].file);
                if (p) unlink(p);
                free(p);
            }
            free(sw->done[k].file);
        }
        free(sw->done);
    }
    free(w->dir);
    free(w->tokenizer);
    free(w);
}

/* ========================================================= dataset.json */

void wf_dataset_info_free(wf_dataset_info *info) {
    for (size_t i = 0; i < info->n_splits; i++) {
        wf_split_info *sp = &info->splits[i];
        for (size_t k = 0; k < sp->n_shards; k++) free(sp->shards[k].file);
        free(sp->shards);
        free(sp->name);
    }
    free(info->splits);
    free(info->tokenizer);
    memset(info, 0, sizeof *info);
}

/* A non-negative integer member, or -1 with an error naming it. */
static int get_count(json_t *obj, const char *key, uint64_t *out, const char *path, const char *where) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        wf_error(WF_ERR_FORMAT, "%s: %s: '%s' is missing or not a non-negative integer", path, where, key);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_hash(json_t *obj, const char *key, uint64_t *out, const char *path, const char *where) {
    const char *s = json_string_value(json_object_get(obj, key));
    char *end = NULL;
    if (s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16) {
        *out = (uint64_t)strtoull(s, &end, 16);
        return 0;
    }
    wf_error(WF_ERR_FORMAT, "%s: %s: '%s' is missing or not 16 lowercase hex digits", path, where, key);
    return -1;
}

/* A shard name must stay inside the dataset directory. */
static int plain_file_name(const char *s) {
    return s && s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static wf_status parse_split(wf_split_info *sp, json_t *jsp, const char *path) {
    char where[96];
    snprintf(where, sizeof where, "split '%s'", sp->name);
    if (!json_is_object(jsp)) return wf_error(WF_ERR_FORMAT, "%s: %s is not an object", path, where);
    if (get_count(jsp, "n_tokens", &sp->n_tokens, path, where) || get_count(jsp, "n_docs", &sp->n_docs, path, where))
        return WF_ERR_FORMAT;
    json_t *arr = json_object_get(jsp, "shards");
    if (!json_is_array(arr)) return wf_error(WF_ERR_FORMAT, "%s: %s: 'shards' is missing or not an array", path, where);
    sp->n_shards = json_array_size(arr);
    if (sp->n_shards) {
        sp->shards = calloc(sp->n_shards, sizeof *sp->shards);
        if (!sp->shards) return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    uint64_t tok = 0, docs = 0;
    for (size_t k = 0; k < sp->n_shards; k++) {
        json_t *js = json_array_get(arr, k);
        wf_shard_info *si = &sp->shards[k];
        snprintf(where, sizeof where, "split '%s', shard %zu", sp->name, k);
        const char *file = json_string_value(json_object_get(js, "file"));
        if (!json_is_object(js) || !plain_file_name(file))
            return wf_error(WF_ERR_FORMAT, "%s: %s: 'file' is missing or not a file name in the directory", path,
                            where);
        si->file = strdup(file);
        if (!si->file) return wf_error(WF_ERR_NOMEM, "out of memory");
        if (get_count(js, "n_tokens", &si->n_tokens, path, where) ||
            get_count(js, "n_docs", &si->n_docs, path, where) || get_count(js, "bytes", &si->bytes, path, where) ||
            get_hash(js, "payload_xxh3", &si->payload_hash, path, where) ||
            get_hash(js, "header_xxh3", &si->header_hash, path, where))
            return WF_ERR_FORMAT;
        tok += si->n_tokens;
        docs += si->n_docs;
    }
    if (tok != sp->n_tokens || docs != sp->n_docs)
        return wf_error(WF_ERR_FORMAT,
                        "%s: split '%s' says %llu tokens in %llu documents, its shards add up to %llu in %llu",
                        path, sp->name, (unsigned long long)sp->n_tokens, (unsigned long long)sp->n_docs,
                        (unsigned long long)tok, (unsigned long long)docs);
    return WF_OK;
}

static wf_status parse_index(wf_dataset_info *info, json_t *root, const char *path) {
    if (!json_is_object(root)) return wf_error(WF_ERR_FORMAT, "%s: not a JSON object", path);
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, DATASET_FORMAT) != 0)
        return wf_error(WF_ERR_FORMAT, "%s: 'format' is not \"%s\": not a weft dataset index", path, DATASET_FORMAT);
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver))
        return wf_error(WF_ERR_FORMAT, "%s: 'version' is missing or not an integer (this weft reads %d)", path,
                        DATASET_VERSION);
    if (json_integer_value(ver) != DATASET_VERSION)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: dataset version %" JSON_INTEGER_FORMAT
                        " is not supported (this weft reads %d)", path, json_integer_value(ver), DATASET_VERSION);
    uint64_t vocab;
    if (get_count(root, "vocab_size", &vocab, path, "dataset") ) return WF_ERR_FORMAT;
    if (vocab == 0 || vocab > UINT32_MAX)
        return wf_error(WF_ERR_FORMAT, "%s: vocab_size %llu is out of range", path, (unsigned long long)vocab);
    info->vocab_size = (uint32_t)vocab;
    const char *dtype = json_string_value(json_object_get(root, "dtype"));
    if (dtype && strcmp(dtype, "uint16") == 0) info->token_bytes = 2;
    else if (dtype && strcmp(dtype, "uint32") == 0) info->token_bytes = 4;
    else return wf_error(WF_ERR_FORMAT, "%s: 'dtype' is missing or not \"uint16\" or \"uint32\"", path);
    if (info->token_bytes == 2 && vocab > 65536)
        return wf_error(WF_ERR_FORMAT, "%s: vocab_size %llu does not fit dtype uint16", path, (unsigned long long)vocab);
    json_t *tok = json_object_get(root, "tokenizer");
    if (json_is_string(tok)) {
        info->tokenizer = strdup(json_string_value(tok));
        if (!info->tokenizer) return wf_error(WF_ERR_NOMEM, "out of memory");
    } else if (tok && !json_is_null(tok)) {
        return wf_error(WF_ERR_FORMAT, "%s: 'tokenizer' is neither a string nor null", path);
    }
    /* Optional (weft tokenize writes it since mixtures; older datasets lack it). */
    if (json_object_get(root, "tokenizer_fingerprint")) {
        if (get_hash(root, "tokenizer_fingerprint", &info->tokenizer_fingerprint, path, "dataset")) return WF_ERR_FORMAT;
        info->has_fingerprint = 1;
    }
    json_t *splits = json_object_get(root, "splits");
    if (!json_is_object(splits)) return wf_error(WF_ERR_FORMAT, "%s: 'splits' is missing or not an object", path);
    info->splits = calloc(json_object_size(splits) + 1, sizeof *info->splits);
    if (!info->splits) return wf_error(WF_ERR_NOMEM, "out of memory");
    const char *name;
    json_t *jsp;
    json_object_foreach(splits, name, jsp) {
        wf_split_info *sp = &info->splits[info->n_splits++];
        sp->name = strdup(name);
        if (!sp->name) return wf_error(WF_ERR_NOMEM, "out of memory");
        WF_TRY(parse_split(sp, jsp, path));
    }
    return WF_OK;
}

wf_status wf_dataset_info_load(wf_dataset_info *info, const char *dir) {
    memset(info, 0, sizeof *info);
    char *path = path_join(dir, DATASET_JSON);
    if (!path) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s;
    char *text = NULL;
    size_t len = 0;
    if (wf_store_is_remote(dir)) {
        /* A dataset in an object store: its index read whole (checked
         * against the XXH3 it was written with; weft/store.h). */
        s = wf_store_read(path, &text, &len);
        if (s == WF_ERR_NOTFOUND)
            wf_error_wrap(s, "%s is not a dataset written by `weft tokenize`, or its writing did not finish: ", dir);
    } else if (!wf_path_is_dir(dir)) {
        s = wf_error(WF_ERR_NOTFOUND, "%s: no such dataset directory", dir);
    } else if (!wf_path_exists(path)) {
        s = wf_error(WF_ERR_NOTFOUND,
                     "%s: missing: %s is not a dataset written by `weft tokenize`, or its writing did not finish",
                     path, dir);
    } else {
        s = WF_OK;
    }
    if (s == WF_OK) {
        json_error_t jerr;
        json_t *root = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr)
                            : json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
            s = wf_error(WF_ERR_FORMAT, "%s:%d:%d: malformed JSON: %s", path, jerr.line, jerr.column, jerr.text);
        } else {
            s = parse_index(info, root, path);
            json_decref(root);
        }
    }
    free(path);
    free(text);
    if (s != WF_OK) wf_dataset_info_free(info);
    return s;
}

/* ============================================================== reader */

void wf_dataset_close(wf_dataset *d) {
    for (size_t i = 0; i < d->n_shards; i++) wf_shard_close(&d->shards[i]);
    free(d->shards);
    free(d->shard_base);
    memset(d, 0, sizeof *d);
}

/* Checks that an opened shard is the one dataset.json lists. Only header
 * fields are compared, so this costs nothing even without verify. */
static wf_status check_listed(const wf_shard *s, const wf_shard_info *si, const wf_dataset_info *info,
                              const char *json_path) {
    const char *what = NULL;
    if (s->token_bytes != info->token_bytes) what = "token dtype";
    else if (s->vocab_size != info->vocab_size) what = "vocab_size";
    else if (s->n_tokens != si->n_tokens) what = "n_tokens";
    else if (s->n_docs != si->n_docs) what = "n_docs";
    else if (s->size != si->bytes) what = "size in bytes";
    else if (s->payload_hash != si->payload_hash || s->header_hash != si->header_hash) what = "checksums";
    if (!what) return WF_OK;
    return wf_error(WF_ERR_FORMAT,
                    "%s: its %s differs from what %s lists: the shard belongs to another dataset or was "
                    "replaced; re-run `weft tokenize`",
                    s->path, what, json_path);
}

wf_status wf_dataset_open(wf_dataset *d, const char *dir, const char *split, int verify) {
    memset(d, 0, sizeof *d);
    wf_dataset_info info;
    WF_TRY(wf_dataset_info_load(&info, dir));
    char *json_path = path_join(dir, DATASET_JSON);
    char *shard_path = NULL;
    wf_status s = WF_OK;
    const wf_split_info *sp = NULL;
    for (size_t i = 0; i < info.n_splits; i++)
        if (strcmp(info.splits[i].name, split) == 0) sp = &info.splits[i];
    if (!json_path) {
        s = wf_error(WF_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!sp) {
        char names[256] = "";
        for (size_t i = 0; i < info.n_splits; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     info.splits[i].name);
        s = wf_error(WF_ERR_NOTFOUND, "%s: no split '%s' (it has: %s)", json_path, split, names);
        goto done;
    }
    if (sp->n_tokens == 0 || sp->n_shards == 0) {
        s = wf_error(WF_ERR_EMPTY,
                     "%s: split '%s' is empty (0 tokens)%s", json_path, split,
                     strcmp(split, "val") == 0 ? ": tokenize with a positive --val-fraction to get one" : "");
        goto done;
    }
    d->shards = calloc(sp->n_shards, sizeof *d->shards);
    d->shard_base = calloc(sp->n_shards + 1, sizeof *d->shard_base);
    if (!d->shards || !d->shard_base) {
        s = wf_error(WF_ERR_NOMEM, "out of memory");
        goto done;
    }
    d->vocab_size = info.vocab_size;
    for (size_t k = 0; k < sp->n_shards; k++) {
        free(shard_path);
        shard_path = path_join(dir, sp->shards[k].file);
        if (!shard_path) {
            s = wf_error(WF_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (!wf_store_is_remote(shard_path) && !wf_path_exists(shard_path)) {
            s = wf_error(WF_ERR_NOTFOUND, "%s: missing (listed in %s): the dataset is incomplete", shard_path,
                         json_path);
            goto done;
        }
        /* A shard in an object store is opened for ranged reads. */
        s = wf_shard_open(&d->shards[k], shard_path, verify);
        if (s == WF_ERR_NOTFOUND && wf_store_is_remote(shard_path))
            wf_error_wrap(s, "listed in %s: the dataset is incomplete: ", json_path);
        if (s != WF_OK) goto done;
        d->n_shards = k + 1;
        s = check_listed(&d->shards[k], &sp->shards[k], &info, json_path);
        if (s != WF_OK) goto done;
        d->shard_base[k + 1] = d->shard_base[k] + d->shards[k].n_tokens;
        d->n_docs += d->shards[k].n_docs;
    }
    d->n_tokens = d->shard_base[sp->n_shards];
done:
    free(shard_path);
    free(json_path);
    wf_dataset_info_free(&info);
    if (s != WF_OK) wf_dataset_close(d);
    return s;
}

/* The shard holding stream position `pos` (< n_tokens): the last k with
 * shard_base[k] <= pos (an empty shard has the same base as the next one
 * and is passed over). shard_base[0] is 0, so there is one. */
static size_t find_shard(const wf_dataset *d, uint64_t pos) {
    return wf_sorted_u64_upper_bound(d->shard_base, d->n_shards, pos) - 1;
}

wf_status wf_dataset_read(const wf_dataset *d, uint64_t start, size_t n, int32_t *out) {
    if (start > d->n_tokens || n > d->n_tokens - start)
        return wf_error(WF_ERR_RANGE, "tokens [%llu, %llu) are past the end of the split (%llu tokens)",
                        (unsigned long long)start, (unsigned long long)start + n,
                        (unsigned long long)d->n_tokens);
    size_t done = 0;
    size_t k = n ? find_shard(d, start) : 0;
    while (done < n) {
        const wf_shard *s = &d->shards[k];
        uint64_t off = start + done - d->shard_base[k];
        uint64_t avail = s->n_tokens - off;
        size_t m = n - done < avail ? n - done : (size_t)avail;
        WF_TRY(wf_shard_fetch(s, off, m, out + done));
        /* A corrupt shard opened without verify must not feed the model an
         * id past the embedding table; the check rides on the copy. */
        uint32_t bad = 0;
        for (size_t i = 0; i < m; i++) bad |= (uint32_t)out[done + i] >= d->vocab_size;
        if (bad) {
            for (size_t i = 0; i < m; i++)
                if ((uint32_t)out[done + i] >= d->vocab_size)
                    return wf_error(WF_ERR_FORMAT,
                                    "%s: token %llu is %u, outside the vocabulary [0, %u): the shard is corrupt "
                                    "(check it with `weft data inspect --verify`)",
                                    s->path, (unsigned long long)(off + i), (uint32_t)out[done + i], d->vocab_size);
        }
        done += m;
        k++;
    }
    return WF_OK;
}

wf_status wf_dataset_doc(const wf_dataset *d, uint64_t doc, uint64_t *start, uint64_t *n) {
    if (doc >= d->n_docs)
        return wf_error(WF_ERR_RANGE, "document %llu is past the end of the split (%llu documents)",
                        (unsigned long long)doc, (unsigned long long)d->n_docs);
    uint64_t first = 0;
    for (size_t k = 0; k < d->n_shards; k++) {
        const wf_shard *s = &d->shards[k];
        if (doc < first + s->n_docs) {
            uint64_t local = doc - first;
            uint64_t a = wf_shard_doc_start(s, local), b = wf_shard_doc_start(s, local + 1);
            *start = d->shard_base[k] + a;
            *n = b - a;
            return WF_OK;
        }
        first += s->n_docs;
    }
    return wf_error(WF_ERR_INTERNAL, "document %llu not found in %zu shards", (unsigned long long)doc, d->n_shards);
}
