/* `weft tokenizer train|encode|decode|info`: training a byte-level BPE
 * tokenizer and using it from the shell. Everything here goes through the
 * public API (weft/tokenizer.h); the commands only read options, move bytes
 * between files and the library, and print. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/docs.h"
#include "weft/tokenizer.h"
#include "weft/weft.h"

/* Reads a whole file, or stdin when path is NULL or "-". */
static wf_status read_input(const char *path, char **data, size_t *len) {
    if (path && strcmp(path, "-") != 0) return wf_file_read(path, data, len);
    return wf_stream_read(stdin, "stdin", data, len);
}

/* ------------------------------------------------------------------ train */

typedef struct {
    int64_t vocab_size;
    char *output;
    char *pattern;
    int64_t min_frequency;
    int64_t threads;
    char *text_mode;
    char *field;
    wf_strs specials;
} train_opts;

static const wf_opt train_opt_table[] = {
    {"vocab_size", "vocab-size", WF_OPT_INT, offsetof(train_opts, vocab_size), "8192", 259, 2147483647,
     "total vocabulary: 256 byte tokens + learned tokens + special tokens"},
    {"output", NULL, WF_OPT_STR, offsetof(train_opts, output), "tokenizer.json", WF_NO_RANGE,
     "tokenizer.json to write (Hugging Face format, atomically replaced)"},
    {"pattern", NULL, WF_OPT_STR, offsetof(train_opts, pattern), "llama3", WF_NO_RANGE,
     "pre-tokenizer regex: llama3 or gpt2"},
    {"min_frequency", "min-frequency", WF_OPT_INT, offsetof(train_opts, min_frequency), "2", 1, 9.2e18,
     "a pair must occur at least this often to be merged (training stops earlier otherwise)"},
    {"threads", NULL, WF_OPT_INT, offsetof(train_opts, threads), "0", 0, 4096,
     "counting threads; 0 uses WEFT_THREADS or every CPU (the result does not depend on it)"},
    {"text_mode", "text-mode", WF_OPT_STR, offsetof(train_opts, text_mode), "file", WF_NO_RANGE,
     "plain-text inputs: one document per file, line or paragraph"},
    {"field", NULL, WF_OPT_STR, offsetof(train_opts, field), "text", WF_NO_RANGE,
     "JSONL inputs: the string field holding the document"},
    {"specials", NULL, WF_OPT_STRS, offsetof(train_opts, specials),
     "<|begin_of_text|>,<|end_of_text|>,<|pad|>", WF_NO_RANGE,
     "special tokens (begin of text, end of text, padding, ...), given the last ids"},
};

static const wf_cmd_spec train_spec = {
    "tokenizer train",
    "weft tokenizer train --vocab-size N --output tok.json [options] INPUT...",
    "Learns a byte-level BPE vocabulary (GPT-2 / Llama 3 style) from text or JSONL files "
    "(optionally .gz/.zst) and writes it as a Hugging Face tokenizer.json. Ids 0-255 are the "
    "bytes, then the learned tokens in merge order, then the special tokens. The result is the "
    "same for any thread count.",
    train_opt_table,
    sizeof train_opt_table / sizeof *train_opt_table,
    1,
    -1,
    0,
};

static int train_main(void *opts, const wf_strs *pos) {
    const train_opts *o = opts;
    int mode = wf_docs_parse_mode(o->text_mode);
    if (mode < 0) {
        wf_error(WF_ERR_CONFIG, "--text-mode is \"%s\": use file, line or paragraph", o->text_mode);
        return wf_tool_fail(train_spec.name);
    }
    wf_bpe_train_opts to = {
        .vocab_size = (size_t)o->vocab_size,
        .min_frequency = (uint64_t)o->min_frequency,
        .n_threads = (int)o->threads,
        .pattern = o->pattern,
        .special_tokens = (const char *const *)o->specials.items,
        .n_special = o->specials.n,
        .paths = (const char *const *)pos->items,
        .n_paths = pos->n,
        .text_mode = mode,
        .field = o->field,
    };
    double t0 = wf_time_now();
    wf_tokenizer *t = NULL;
    int rc = 0;
    if (wf_tokenizer_train(&t, &to) != WF_OK || wf_tokenizer_save(t, o->output) != WF_OK)
        rc = wf_tool_fail(train_spec.name);
    else
        WF_INFO("wrote %s: %zu ids in %.2f s", o->output, wf_tokenizer_vocab_size(t), wf_time_now() - t0);
    wf_tokenizer_destroy(t);
    return rc;
}

int wf_cmd_tokenizer_train(int argc, char **argv) {
    train_opts o;
    return wf_tool_run(&train_spec, &o, sizeof o, argc, argv, train_main);
}

/* ----------------------------------------------------------------- encode */

typedef struct {
    char *tokenizer;
    int special;
    int whole;
    int pieces;
} encode_opts;

static const wf_opt encode_opt_table[] = {
    {"tokenizer", NULL, WF_OPT_STR, offsetof(encode_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to encode with (required)"},
    {"special", NULL, WF_OPT_BOOL, offsetof(encode_opts, special), "false", WF_NO_RANGE,
     "turn the text of special tokens (\"<|end_of_text|>\") into their ids"},
    {"whole", NULL, WF_OPT_BOOL, offsetof(encode_opts, whole), "false", WF_NO_RANGE,
     "encode the whole input as one text (newlines included) and print one line of ids"},
    {"pieces", NULL, WF_OPT_BOOL, offsetof(encode_opts, pieces), "false", WF_NO_RANGE,
     "print the pre-tokenizer's pieces instead of ids (space-separated, in the tokenizer.json "
     "alphabet where \" \" is \"\u0120\"; no added tokens, no merges)"},
};

static const wf_cmd_spec encode_spec = {
    "tokenizer encode",
    "weft tokenizer encode --tokenizer tok.json [--special] [--whole] [--pieces] [INPUT]",
    "Encodes INPUT (or stdin) and prints token ids: by default one line of space-separated ids "
    "for each input line (the newline itself is not encoded); with --whole, the ids of the "
    "entire input on one line.",
    encode_opt_table,
    sizeof encode_opt_table / sizeof *encode_opt_table,
    0,
    1,
    0,
};

static void print_ids(FILE *out, const int32_t *ids, size_t n) {
    char buf[16];
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(buf, sizeof buf, i ? " %d" : "%d", ids[i]);
        fwrite(buf, 1, (size_t)len, out);
    }
    fputc('\n', out);
}

typedef struct {
    FILE *out;
    int first;
    char *buf;
    size_t cap;
} piece_printer;

static wf_status print_piece(void *ctx, const char *piece, size_t len) {
    piece_printer *pp = ctx;
    if (2 * len + 1 > pp->cap) {
        size_t nc = 2 * len + 1 + 256;
        char *nb = realloc(pp->buf, nc);
        if (!nb) return wf_error(WF_ERR_NOMEM, "out of memory printing a %zu-byte piece", len);
        pp->buf = nb;
        pp->cap = nc;
    }
    size_t l = wf_tokenizer_bytes_to_str(piece, len, pp->buf);
    if (!pp->first) fputc(' ', pp->out);
    fwrite(pp->buf, 1, l, pp->out);
    pp->first = 0;
    return WF_OK;
}

/* Encodes (or with --pieces, pre-tokenizes) one text and prints a line. */
static wf_status encode_one(const wf_tokenizer *t, const encode_opts *o, const char *text,
                            size_t len, wf_ids *ids, piece_printer *pp) {
    if (o->pieces) {
        pp->first = 1;
        WF_TRY(wf_tokenizer_pretokenize(t, text, len, print_piece, pp));
        fputc('\n', stdout);
        return WF_OK;
    }
    ids->n = 0;
    WF_TRY(wf_tokenizer_encode(t, text, len, o->special, ids));
    print_ids(stdout, ids->ids, ids->n);
    return WF_OK;
}

static wf_status load_tokenizer(wf_tokenizer **t, const char *path) {
    if (!path)
        return wf_error(WF_ERR_CONFIG, "--tokenizer is required (a tokenizer.json file)");
    return wf_tokenizer_load(t, path);
}

static int encode_main(void *opts, const wf_strs *pos) {
    const encode_opts *o = opts;
    wf_tokenizer *t = NULL;
    char *text = NULL;
    size_t len = 0;
    wf_ids ids = {0};
    piece_printer pp = {stdout, 1, NULL, 0};
    wf_status s = load_tokenizer(&t, o->tokenizer);
    if (s == WF_OK) s = read_input(pos->n ? pos->items[0] : NULL, &text, &len);
    for (size_t at = 0; s == WF_OK && (at < len || (o->whole && at == 0));) {
        const char *nl = o->whole ? NULL : memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        s = encode_one(t, o, text + at, end - at, &ids, &pp);
        at = end + 1;
    }
    if (s == WF_OK && fflush(stdout) != 0) s = wf_error(WF_ERR_IO, "<stdout>: write failed");
    free(pp.buf);
    wf_ids_free(&ids);
    free(text);
    wf_tokenizer_destroy(t);
    return s == WF_OK ? 0 : wf_tool_fail(encode_spec.name);
}

int wf_cmd_tokenizer_encode(int argc, char **argv) {
    encode_opts o;
    return wf_tool_run(&encode_spec, &o, sizeof o, argc, argv, encode_main);
}

/* ----------------------------------------------------------------- decode */

typedef struct {
    char *tokenizer;
    int whole;
} decode_opts;

static const wf_opt decode_opt_table[] = {
    {"tokenizer", NULL, WF_OPT_STR, offsetof(decode_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to decode with (required)"},
    {"whole", NULL, WF_OPT_BOOL, offsetof(decode_opts, whole), "false", WF_NO_RANGE,
     "decode all ids as one text and add no newlines (the inverse of encode --whole)"},
};

static const wf_cmd_spec decode_spec = {
    "tokenizer decode",
    "weft tokenizer decode --tokenizer tok.json [--whole] [INPUT]",
    "Reads whitespace-separated token ids from INPUT (or stdin) and writes the bytes they stand "
    "for: by default each input line of ids becomes one output line (the inverse of `weft "
    "tokenizer encode`); with --whole the bytes are written with nothing added.",
    decode_opt_table,
    sizeof decode_opt_table / sizeof *decode_opt_table,
    0,
    1,
    0,
};

/* The ids of text[at, end), line line_no of `where`, into ids (emptied
 * first). */
static wf_status parse_ids(const char *text, size_t at, size_t end, const char *where, size_t line_no, wf_ids *ids) {
    ids->n = 0;
    for (size_t i = at; i < end;) {
        if (strchr(" \t\r\n", text[i])) {
            i++;
            continue;
        }
        char *stop;
        long v = strtol(text + i, &stop, 10);
        if (stop == text + i || (size_t)(stop - text) > end || v < 0 || v > INT32_MAX || !strchr(" \t\r\n", *stop))
            return wf_error(WF_ERR_FORMAT, "%s:%zu: \"%.20s\" is not a token id", where, line_no, text + i);
        WF_TRY(wf_ids_push(ids, (int32_t)v));
        i = (size_t)(stop - text);
    }
    return WF_OK;
}

static int decode_main(void *opts, const wf_strs *pos) {
    const decode_opts *o = opts;
    wf_tokenizer *t = NULL;
    char *text = NULL, *bytes = NULL;
    size_t len = 0, line_no = 1;
    wf_ids ids = {0};
    const char *where = pos->n ? pos->items[0] : "<stdin>";
    wf_status s = load_tokenizer(&t, o->tokenizer);
    if (s == WF_OK) s = read_input(pos->n ? pos->items[0] : NULL, &text, &len);
    for (size_t at = 0; s == WF_OK && at < len;) {
        const char *nl = o->whole ? NULL : memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        s = parse_ids(text, at, end, where, line_no, &ids);
        size_t blen;
        if (s == WF_OK && wf_tokenizer_decode(t, ids.ids, ids.n, &bytes, &blen) != WF_OK)
            s = wf_error_wrap(WF_ERR_RANGE, "%s:%zu: ", where, line_no);
        if (s == WF_OK) {
            fwrite(bytes, 1, blen, stdout);
            if (!o->whole) fputc('\n', stdout);
        }
        free(bytes);
        bytes = NULL;
        at = end + 1;
        line_no++;
    }
    if (s == WF_OK && fflush(stdout) != 0) s = wf_error(WF_ERR_IO, "<stdout>: write failed");
    wf_ids_free(&ids);
    free(text);
    wf_tokenizer_destroy(t);
    return s == WF_OK ? 0 : wf_tool_fail(decode_spec.name);
}

int wf_cmd_tokenizer_decode(int argc, char **argv) {
    decode_opts o;
    return wf_tool_run(&decode_spec, &o, sizeof o, argc, argv, decode_main);
}

/* ------------------------------------------------------------------- info */

typedef struct {
    char *tokenizer;
} info_opts;

static const wf_opt info_opt_table[] = {
    {"tokenizer", NULL, WF_OPT_STR, offsetof(info_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to describe (required)"},
};

static const wf_cmd_spec info_spec = {
    "tokenizer info",
    "weft tokenizer info --tokenizer tok.json",
    "Prints a tokenizer's vocabulary size, merges, special tokens and pre-tokenizer.",
    info_opt_table,
    sizeof info_opt_table / sizeof *info_opt_table,
    0,
    0,
    0,
};

static int info_main(void *opts, const wf_strs *pos) {
    (void)pos;
    const info_opts *o = opts;
    wf_tokenizer *t = NULL;
    if (load_tokenizer(&t, o->tokenizer) != WF_OK) return wf_tool_fail(info_spec.name);
    wf_tokenizer_info in;
    wf_tokenizer_get_info(t, &in);
    printf("tokenizer:      %s\n", o->tokenizer);
    printf("vocab size:     %zu (ids 0..%zu)\n", in.vocab_size, in.vocab_size - 1);
    printf("model tokens:   %zu\n", in.n_model_tokens);
    printf("merges:         %zu\n", in.n_merges);
    printf("pre-tokenizer:  %s\n", in.pretokenizer);
    printf("pattern:        %s\n", in.pattern_name ? in.pattern_name : in.pattern ? "custom" : "none");
    if (in.pattern && !in.pattern_name) printf("regex:          %s\n", in.pattern);
    printf("ignore_merges:  %s\n", in.ignore_merges ? "true" : "false");
    printf("added tokens:   %zu\n", in.n_added);
    for (size_t i = 0; i < in.n_added; i++) {
        const char *s;
        int32_t id;
        int special;
        wf_tokenizer_added(t, i, &s, &id, &special);
        printf("  %-8d %s%s\n", id, s, special ? "  (special)" : "");
    }
    int32_t b = wf_tokenizer_bos(t), e = wf_tokenizer_eos(t), p = wf_tokenizer_pad(t);
    printf("bos / eos / pad: %d / %d / %d\n", b, e, p);
    wf_tokenizer_destroy(t);
    return 0;
}

int wf_cmd_tokenizer_info(int argc, char **argv) {
    info_opts o;
    return wf_tool_run(&info_spec, &o, sizeof o, argc, argv, info_main);
}
