/* Reading and writing Hugging Face `tokenizer.json` for byte-level BPE.
 *
 * The reader accepts what `tokenizers` writes for GPT-2 / Llama 3 style
 * tokenizers and rejects, with the file and the field named, anything whose
 * meaning weft would not reproduce (other models, normalizers, byte
 * fallback, dropout, added-token stripping). The writer mirrors the layout
 * `tokenizers` 0.2x writes itself; docs/formats/tokenizer.md specifies both.
 * The post-processor is kept verbatim for saving but never applied: weft
 * encodes without adding special tokens (the caller adds BOS/EOS).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe_impl.h"
#include "weft/fileio.h"
#include "weft/json.h"
#include "weft/log.h"

/* ---------------------------------------------------------------- reader */

typedef struct {
    const char *path;
} jctx;

static const char *jtype_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* Optional boolean field: absent or null gives `def`. */
static wf_status get_bool(const jctx *c, const json_t *obj, const char *key, const char *field,
                          int def, int *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return WF_OK;
    }
    if (!json_is_boolean(v))
        return wf_error(WF_ERR_FORMAT, "%s: %s.%s must be a boolean, not %s", c->path, field, key,
                        jtype_name(v));
    *out = json_is_true(v);
    return WF_OK;
}

/* Optional string field: absent or null gives NULL. */
static wf_status get_str(const jctx *c, const json_t *obj, const char *key, const char *field,
                         const char **out) {
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return WF_OK;
    if (!json_is_string(v))
        return wf_error(WF_ERR_FORMAT, "%s: %s.%s must be a string, not %s", c->path, field, key,
                        jtype_name(v));
    *out = json_string_value(v);
    return WF_OK;
}

static const char *type_of(const json_t *obj) {
    const json_t *v = json_object_get(obj, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static wf_status parse_bytelevel(const jctx *c, wf_tokenizer *t, const json_t *o, const char *field,
                                 int in_sequence) {
    WF_TRY(get_bool(c, o, "add_prefix_space", field, 1, &t->bl_add_prefix_space));
    WF_TRY(get_bool(c, o, "trim_offsets", field, 1, &t->bl_trim_offsets));
    WF_TRY(get_bool(c, o, "use_regex", field, 1, &t->bl_use_regex));
    t->pretok_is_bl_only = !in_sequence;
    return WF_OK;
}

static wf_status parse_split(const jctx *c, wf_tokenizer *t, const json_t *o, const char *field) {
    const json_t *pat = json_object_get(o, "pattern");
    const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
    if (json_is_string(re)) {
        t->split_literal = 0;
    } else if (json_is_string(lit)) {
        t->split_literal = 1;
        re = lit;
    } else {
        return wf_error(WF_ERR_FORMAT, "%s: %s.pattern must be {\"Regex\": ...} or {\"String\": ...}",
                        c->path, field);
    }
    const char *behavior;
    WF_TRY(get_str(c, o, "behavior", field, &behavior));
    if (!behavior || strcmp(behavior, "Isolated") != 0)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: %s.behavior is \"%s\": weft supports only \"Isolated\" splits", c->path,
                        field, behavior ? behavior : "(missing)");
    int invert;
    WF_TRY(get_bool(c, o, "invert", field, 0, &invert));
    if (invert)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: %s.invert is true: weft supports only invert=false",
                        c->path, field);
    t->split_pattern = strdup(json_string_value(re));
    if (!t->split_pattern) return wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
    return WF_OK;
}

static wf_status parse_pretokenizer(const jctx *c, wf_tokenizer *t, const json_t *p) {
    const char *ty = type_of(p);
    if (!p || json_is_null(p))
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: pre_tokenizer is null: weft needs a byte-level tokenizer (ByteLevel, "
                        "or Sequence[Split, ByteLevel])",
                        c->path);
    if (!ty) return wf_error(WF_ERR_FORMAT, "%s: pre_tokenizer has no \"type\"", c->path);
    if (strcmp(ty, "ByteLevel") == 0) return parse_bytelevel(c, t, p, "pre_tokenizer", 0);
    if (strcmp(ty, "Sequence") != 0)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: pre_tokenizer type \"%s\" is not supported: weft reads ByteLevel and "
                        "Sequence[Split(Regex, Isolated), ByteLevel]",
                        c->path, ty);
    const json_t *list = json_object_get(p, "pretokenizers");
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0 || n > 2)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: pre_tokenizer.pretokenizers must hold [Split, ByteLevel] or [ByteLevel]",
                        c->path);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(list, i);
        const char *et = type_of(e);
        char field[64];
        snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%zu]", i);
        if (et && strcmp(et, "Split") == 0 && i == 0 && n == 2) {
            WF_TRY(parse_split(c, t, e, field));
        } else if (et && strcmp(et, "ByteLevel") == 0 && i == n - 1) {
            WF_TRY(parse_bytelevel(c, t, e, field, 1));
        } else {
            return wf_error(WF_ERR_UNSUPPORTED,
                            "%s: %s has type \"%s\": weft reads Sequence[Split, ByteLevel] or "
                            "Sequence[ByteLevel]",
                            c->path, field, et ? et : "(none)");
        }
    }
    return WF_OK;
}

static wf_status parse_normalizer(const jctx *c, const json_t *n) {
    if (!n || json_is_null(n)) return WF_OK;
    const char *ty = type_of(n);
    if (ty && strcmp(ty, "Sequence") == 0 && json_array_size(json_object_get(n, "normalizers")) == 0)
        return WF_OK;
    return wf_error(WF_ERR_UNSUPPORTED,
                    "%s: normalizer \"%s\" is not supported: weft's byte-level tokenizer runs "
                    "without a normalizer (normalize text before tokenizing, e.g. in weft prep)",
                    c->path, ty ? ty : "(no type)");
}

static wf_status parse_added(const jctx *c, wf_tokenizer *t, const json_t *arr) {
    if (!arr || json_is_null(arr)) return WF_OK;
    if (!json_is_array(arr))
        return wf_error(WF_ERR_FORMAT, "%s: added_tokens must be an array, not %s", c->path,
                        jtype_name(arr));
    size_t n = json_array_size(arr);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        char field[48];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        if (!json_is_object(e))
            return wf_error(WF_ERR_FORMAT, "%s: %s must be an object", c->path, field);
        const json_t *id = json_object_get(e, "id");
        const char *content;
        WF_TRY(get_str(c, e, "content", field, &content));
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX)
            return wf_error(WF_ERR_FORMAT, "%s: %s.id must be an integer in [0, 2^31)", c->path,
                            field);
        if (!content || !*content)
            return wf_error(WF_ERR_FORMAT, "%s: %s.content must be a non-empty string", c->path,
                            field);
        wf_added_token *a = &t->added[t->n_added];
        WF_TRY(get_bool(c, e, "special", field, 0, &a->special));
        WF_TRY(get_bool(c, e, "normalized", field, !a->special, &a->normalized));
        WF_TRY(get_bool(c, e, "single_word", field, 0, &a->single_word));
        WF_TRY(get_bool(c, e, "lstrip", field, 0, &a->lstrip));
        WF_TRY(get_bool(c, e, "rstrip", field, 0, &a->rstrip));
        if (a->single_word || a->lstrip || a->rstrip)
            return wf_error(WF_ERR_UNSUPPORTED,
                            "%s: %s (\"%s\") sets single_word, lstrip or rstrip: weft supports "
                            "added tokens only with all three false",
                            c->path, field, content);
        a->content = strdup(content);
        if (!a->content) return wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
        a->len = strlen(content);
        a->id = (int32_t)json_integer_value(id);
        t->n_added++;
    }
    return WF_OK;
}

static wf_status parse_model(const jctx *c, wf_tokenizer *t, const json_t *m) {
    if (!json_is_object(m))
        return wf_error(WF_ERR_FORMAT, "%s: \"model\" must be an object%s", c->path,
                        m ? "" : " (it is missing)");
    const char *ty = type_of(m);
    if (ty && strcmp(ty, "BPE") != 0)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: model.type is \"%s\": weft supports only byte-level BPE models",
                        c->path, ty);
    const json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab))
        return wf_error(WF_ERR_FORMAT, "%s: model.vocab must be an object of token -> id", c->path);
    if (!json_is_array(merges))
        return wf_error(WF_ERR_FORMAT, "%s: model.merges must be an array", c->path);
    const json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: model.dropout is set: BPE dropout is random, weft encodes "
                        "deterministically (set it to null)",
                        c->path);
    const char *s;
    WF_TRY(get_str(c, m, "continuing_subword_prefix", "model", &s));
    if (s && *s)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: model.continuing_subword_prefix \"%s\" is not supported by weft", c->path, s);
    WF_TRY(get_str(c, m, "end_of_word_suffix", "model", &s));
    if (s && *s)
        return wf_error(WF_ERR_UNSUPPORTED, "%s: model.end_of_word_suffix \"%s\" is not supported by weft",
                        c->path, s);
    int byte_fallback;
    WF_TRY(get_bool(c, m, "byte_fallback", "model", 0, &byte_fallback));
    if (byte_fallback)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: model.byte_fallback is true: that is the SentencePiece-style <0xNN> "
                        "scheme, weft supports byte-level BPE only",
                        c->path);
    WF_TRY(get_bool(c, m, "fuse_unk", "model", 0, &t->fuse_unk));
    WF_TRY(get_bool(c, m, "ignore_merges", "model", 0, &t->ignore_merges));
    WF_TRY(get_str(c, m, "unk_token", "model", &s));
    if (s && !(t->unk_token = strdup(s))) return wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);

    /* Ids: one past the largest of the vocabulary and the added tokens. */
    int64_t max_id = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= INT32_MAX)
            return wf_error(WF_ERR_FORMAT, "%s: model.vocab[\"%s\"] must be an integer id in [0, 2^31)",
                            c->path, key);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id > max_id) max_id = t->added[i].id;
    t->n_ids = (size_t)(max_id + 1);
    t->vocab_str = calloc(t->n_ids ? t->n_ids : 1, sizeof *t->vocab_str);
    if (!t->vocab_str) return wf_error(WF_ERR_NOMEM, "%s: out of memory for %zu ids", c->path, t->n_ids);
    wf_strmap ids;
    WF_TRY(wf__bpe_strmap_init(&ids, json_object_size(vocab)));
    wf_status st = WF_OK;
    json_object_foreach((json_t *)vocab, key, val) {
        size_t id = (size_t)json_integer_value(val);
        if (t->vocab_str[id]) {
            st = wf_error(WF_ERR_FORMAT, "%s: model.vocab gives id %zu to both \"%s\" and \"%s\"",
                          c->path, id, t->vocab_str[id], key);
            goto done;
        }
        size_t kl = strlen(key);
        if (!(t->vocab_str[id] = strdup(key)) ||
            !wf__bpe_strmap_upsert(&ids, key, kl, wf__bpe_hash(key, kl), (int64_t)id, NULL)) {
            st = wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
            goto done;
        }
        t->n_vocab++;
    }
    size_t nm = json_array_size(merges);
    t->merges = malloc((nm ? nm : 1) * sizeof *t->merges);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->merges) {
        st = wf_error(WF_ERR_NOMEM, "%s: out of memory for %zu merges", c->path, nm);
        goto done;
    }
    for (size_t r = 0; r < nm; r++) {
        const json_t *e = json_array_get(merges, r);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(e)) {
            /* Older format: "left right". */
            a = json_string_value(e);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = wf_error(WF_ERR_FORMAT,
                              "%s: model.merges[%zu] is \"%s\": a merge must be two tokens "
                              "separated by one space",
                              c->path, r, a);
                goto done_cat;
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            al = strlen(a);
            bl = strlen(b);
        } else {
            st = wf_error(WF_ERR_FORMAT,
                          "%s: model.merges[%zu] must be a string \"a b\" or an array [\"a\", \"b\"]",
                          c->path, r);
            goto done_cat;
        }
        if (al + bl + 1 > cat_cap) {
            cat_cap = (al + bl + 1) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                st = wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
                goto done_cat;
            }
            cat = nc;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        const char *parts[3] = {a, b, cat};
        size_t lens[3] = {al, bl, al + bl};
        for (int k = 0; k < 3; k++) {
            int64_t *v = wf__bpe_strmap_find(&ids, parts[k], lens[k], wf__bpe_hash(parts[k], lens[k]));
            if (!v) {
                st = wf_error(WF_ERR_FORMAT,
                              "%s: model.merges[%zu] (\"%.*s\" + \"%.*s\"): %s \"%.*s\" is not in "
                              "model.vocab",
                              c->path, r, (int)al, a, (int)bl, b,
                              k == 2 ? "the merged token" : "the token", (int)lens[k], parts[k]);
                goto done_cat;
            }
            t->merges[r][k] = (int32_t)*v;
        }
        t->n_merges++;
    }
done_cat:
    free(cat);
done:
    wf__bpe_strmap_free(&ids);
    return st;
}

static wf_status parse_root(const jctx *c, wf_tokenizer *t, json_t *root) {
    if (!json_is_object(root))
        return wf_error(WF_ERR_FORMAT, "%s: the top level must be a JSON object", c->path);
    /* The Hugging Face tokenizers format version: "1.0" in every file it
     * and weft write. A later major version may mean things this reader
     * does not know (docs/formats/README.md). */
    const json_t *ver = json_object_get(root, "version");
    if (ver && (!json_is_string(ver) || strncmp(json_string_value(ver), "1.", 2) != 0))
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: tokenizer.json format version %s is not supported (this weft reads version 1.x of the "
                        "Hugging Face tokenizers format)",
                        c->path, json_is_string(ver) ? json_string_value(ver) : "(not a string)");
    WF_TRY(parse_normalizer(c, json_object_get(root, "normalizer")));
    WF_TRY(parse_added(c, t, json_object_get(root, "added_tokens")));
    WF_TRY(parse_model(c, t, json_object_get(root, "model")));
    WF_TRY(parse_pretokenizer(c, t, json_object_get(root, "pre_tokenizer")));
    const json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec)) {
        t->decoder_null = 1;
    } else if (!type_of(dec) || strcmp(type_of(dec), "ByteLevel") != 0) {
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: decoder type \"%s\" is not supported: weft decodes byte-level "
                        "(ByteLevel or null)",
                        c->path, type_of(dec) ? type_of(dec) : "(none)");
    }
    const json_t *pp = json_object_get(root, "post_processor");
    if (pp && !json_is_null(pp)) {
        const char *ty = type_of(pp);
        if (!ty || strcmp(ty, "ByteLevel") != 0)
            WF_WARN("%s: post_processor %s is kept but not applied: weft encodes without adding "
                    "special tokens",
                    c->path, ty ? ty : "(no type)");
        t->post_processor_json = json_dumps(pp, JSON_COMPACT);
        if (!t->post_processor_json) return wf_error(WF_ERR_NOMEM, "%s: out of memory", c->path);
    }
    static const char *const ignored[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(root, ignored[i]);
        if (v && !json_is_null(v))
            WF_WARN("%s: \"%s\" is ignored: weft encodes whole documents and batches on its own",
                    c->path, ignored[i]);
    }
    /* Added tokens must fit in the id range and not clash with each other. */
    for (size_t i = 0; i < t->n_added; i++)
        for (size_t j = 0; j < i; j++)
            if (t->added[i].id == t->added[j].id)
                return wf_error(WF_ERR_FORMAT, "%s: added_tokens[%zu] and [%zu] share id %d", c->path,
                                j, i, t->added[i].id);
    return WF_OK;
}

wf_status wf_tokenizer_load(wf_tokenizer **out, const char *path) {
    *out = NULL;
    if (!wf_path_exists(path))
        return wf_error(WF_ERR_NOTFOUND, "%s: no such tokenizer file (train one with `weft tokenizer "
                                         "train`)", path);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (je.line < 1)
            return wf_error(WF_ERR_IO, "%s: cannot read: %s", path, je.text);
        return wf_error(WF_ERR_FORMAT, "%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
    }
    wf_tokenizer *t = wf__bpe_alloc();
    if (!t) {
        json_decref(root);
        return wf_error(WF_ERR_NOMEM, "%s: out of memory", path);
    }
    jctx c = {path};
    wf_status st = parse_root(&c, t, root);
    json_decref(root);
    if (st == WF_OK) st = wf__bpe_build(t, path);
    if (st != WF_OK) {
        wf_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return WF_OK;
}

/* ---------------------------------------------------------------- writer */

static const char *jbool(int b) { return b ? "true" : "false"; }

static void put_bytelevel(FILE *f, const wf_tokenizer *t, const char *ind, int aps, int use_regex) {
    fprintf(f,
            "{\n%s  \"type\": \"ByteLevel\",\n%s  \"add_prefix_space\": %s,\n%s  \"trim_offsets\": "
            "%s,\n%s  \"use_regex\": %s\n%s}",
            ind, ind, jbool(aps), ind, jbool(t->bl_trim_offsets), ind, jbool(use_regex), ind);
}

static void write_json(FILE *f, const wf_tokenizer *t) {
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    fputs("  \"added_tokens\": [", f);
    for (size_t i = 0; i < t->n_added; i++) {
        const wf_added_token *a = &t->added[i];
        fprintf(f, "%s\n    {\n      \"id\": %d,\n      \"content\": ", i ? "," : "", a->id);
        wf_json_fput_str(f, a->content);
        fprintf(f,
                ",\n      \"single_word\": %s,\n      \"lstrip\": %s,\n      \"rstrip\": %s,\n"
                "      \"normalized\": %s,\n      \"special\": %s\n    }",
                jbool(a->single_word), jbool(a->lstrip), jbool(a->rstrip), jbool(a->normalized),
                jbool(a->special));
    }
    fputs(t->n_added ? "\n  ],\n" : "],\n", f);
    fputs("  \"normalizer\": null,\n  \"pre_tokenizer\": ", f);
    if (t->pretok_is_bl_only) {
        put_bytelevel(f, t, "  ", t->bl_add_prefix_space, t->bl_use_regex);
    } else {
        fputs("{\n    \"type\": \"Sequence\",\n    \"pretokenizers\": [\n", f);
        if (t->split_pattern) {
            fprintf(f, "      {\n        \"type\": \"Split\",\n        \"pattern\": {\n          \"%s\": ",
                    t->split_literal ? "String" : "Regex");
            wf_json_fput_str(f, t->split_pattern);
            fputs("\n        },\n        \"behavior\": \"Isolated\",\n        \"invert\": false\n"
                  "      },\n      ",
                  f);
        } else {
            fputs("      ", f);
        }
        put_bytelevel(f, t, "      ", t->bl_add_prefix_space, t->bl_use_regex);
        fputs("\n    ]\n  }", f);
    }
    fputs(",\n  \"post_processor\": ", f);
    fputs(t->post_processor_json ? t->post_processor_json : "null", f);
    fputs(",\n  \"decoder\": ", f);
    if (t->decoder_null) fputs("null", f);
    else fputs("{\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": true,\n    \"trim_offsets\": "
               "true,\n    \"use_regex\": true\n  }",
               f);
    fputs(",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": ", f);
    if (t->unk_token) wf_json_fput_str(f, t->unk_token);
    else fputs("null", f);
    fprintf(f,
            ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
            "    \"fuse_unk\": %s,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %s,\n"
            "    \"vocab\": {",
            jbool(t->fuse_unk), jbool(t->ignore_merges));
    int first = 1;
    for (size_t i = 0; i < t->n_ids; i++) {
        if (!t->vocab_str[i]) continue;
        fputs(first ? "\n      " : ",\n      ", f);
        wf_json_fput_str(f, t->vocab_str[i]);
        fprintf(f, ": %zu", i);
        first = 0;
    }
    fputs(first ? "},\n" : "\n    },\n", f);
    fputs("    \"merges\": [", f);
    for (size_t r = 0; r < t->n_merges; r++) {
        fputs(r ? ",\n      [" : "\n      [", f);
        wf_json_fput_str(f, t->vocab_str[t->merges[r][0]]);
        fputs(", ", f);
        wf_json_fput_str(f, t->vocab_str[t->merges[r][1]]);
        fputc(']', f);
    }
    fputs(t->n_merges ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n", f);
}

wf_status wf_tokenizer_save(const wf_tokenizer *t, const char *path) {
    wf_afile af;
    WF_TRY(wf_afile_open(&af, path));
    write_json(af.fp, t);
    if (ferror(af.fp)) {
        wf_afile_abort(&af);
        return wf_error(WF_ERR_IO, "%s: write failed (disk full?)", path);
    }
    return wf_afile_commit(&af);
}
