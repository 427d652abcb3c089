/* `weft data inspect` and `weft data dump`: look into a tokenized dataset.
 * inspect prints dataset.json's summary and every shard (with --verify it
 * also opens every shard with full checks: checksums, token range, header
 * against index); dump prints one document, decoded or as ids. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/shard.h"
#include "weft/tokenizer.h"
#include "weft/json.h"
#include "weft/weft.h"

/* ---------------------------------------------------------------- inspect */

typedef struct {
    int verify;
    int json;
} inspect_opts;

static const wf_opt inspect_opt_table[] = {
    {"verify", NULL, WF_OPT_BOOL, offsetof(inspect_opts, verify), "false", WF_NO_RANGE,
     "open every shard with full checks: both checksums, token range, header against dataset.json"},
    {"json", NULL, WF_OPT_BOOL, offsetof(inspect_opts, json), "false", WF_NO_RANGE,
     "print one JSON object instead of text"},
};

static const wf_cmd_spec inspect_spec = {
    "data inspect",
    "weft data inspect [--verify] [--json] DATA_DIR",
    "Prints a tokenized dataset's vocabulary, splits and shards. With --verify, reads every shard "
    "completely and checks it; exits non-zero on the first problem.",
    inspect_opt_table,
    sizeof inspect_opt_table / sizeof *inspect_opt_table,
    1,
    1,
    0,
};

static wf_status verify_split(const char *dir, const wf_split_info *sp) {
    if (sp->n_tokens == 0) return WF_OK; /* nothing to open; an empty split is legal in the index */
    wf_dataset d;
    WF_TRY(wf_dataset_open(&d, dir, sp->name, 1));
    wf_dataset_close(&d);
    return WF_OK;
}

static void print_inspect_text(const char *dir, const wf_dataset_info *info, int verified) {
    printf("dataset     %s\n", dir);
    printf("vocab size  %" PRIu32 " (%s tokens)\n", info->vocab_size, info->token_bytes == 2 ? "uint16" : "uint32");
    printf("tokenizer   %s\n", info->tokenizer ? info->tokenizer : "(not recorded)");
    if (info->has_fingerprint) printf("fingerprint %016" PRIx64 "\n", info->tokenizer_fingerprint);
    for (size_t i = 0; i < info->n_splits; i++) {
        const wf_split_info *sp = &info->splits[i];
        printf("split %-5s %" PRIu64 " tokens, %" PRIu64 " documents, %zu shard%s%s\n", sp->name, sp->n_tokens,
               sp->n_docs, sp->n_shards, sp->n_shards == 1 ? "" : "s",
               verified ? (sp->n_tokens ? ", verified" : ", empty") : "");
        for (size_t k = 0; k < sp->n_shards; k++) {
            const wf_shard_info *si = &sp->shards[k];
            printf("  %-18s %12" PRIu64 " tokens %9" PRIu64 " docs %12" PRIu64 " bytes  xxh3 %016" PRIx64 "\n",
                   si->file, si->n_tokens, si->n_docs, si->bytes, si->payload_hash);
        }
    }
}

static void print_inspect_json(const char *dir, const wf_dataset_info *info, int verified) {
    printf("{\"dir\": ");
    wf_json_fput_str(stdout, dir);
    printf(", \"vocab_size\": %" PRIu32 ", \"dtype\": \"%s\", \"tokenizer\": ", info->vocab_size,
           info->token_bytes == 2 ? "uint16" : "uint32");
    wf_json_fput_str(stdout, info->tokenizer);
    if (info->has_fingerprint) printf(", \"tokenizer_fingerprint\": \"%016" PRIx64 "\"", info->tokenizer_fingerprint);
    printf(", \"verified\": %s, \"splits\": {", verified ? "true" : "false");
    for (size_t i = 0; i < info->n_splits; i++) {
        const wf_split_info *sp = &info->splits[i];
        printf("%s", i ? ", " : "");
        wf_json_fput_str(stdout, sp->name);
        printf(": {\"n_tokens\": %" PRIu64 ", \"n_docs\": %" PRIu64 ", \"shards\": [", sp->n_tokens, sp->n_docs);
        for (size_t k = 0; k < sp->n_shards; k++) {
            const wf_shard_info *si = &sp->shards[k];
            printf("%s{\"file\": ", k ? ", " : "");
            wf_json_fput_str(stdout, si->file);
            printf(", \"n_tokens\": %" PRIu64 ", \"n_docs\": %" PRIu64 ", \"bytes\": %" PRIu64
                   ", \"payload_xxh3\": \"%016" PRIx64 "\"}",
                   si->n_tokens, si->n_docs, si->bytes, si->payload_hash);
        }
        printf("]}");
    }
    printf("}}\n");
}

static int inspect_main(void *opts, const wf_strs *pos) {
    const inspect_opts *o = opts;
    const char *dir = pos->items[0];
    wf_dataset_info info;
    wf_status s = wf_dataset_info_load(&info, dir);
    if (s == WF_OK && o->verify)
        for (size_t i = 0; i < info.n_splits && s == WF_OK; i++) s = verify_split(dir, &info.splits[i]);
    int rc = 0;
    if (s != WF_OK) {
        rc = wf_tool_fail(inspect_spec.name);
    } else {
        if (o->json) print_inspect_json(dir, &info, o->verify);
        else print_inspect_text(dir, &info, o->verify);
    }
    wf_dataset_info_free(&info);
    return rc;
}

int wf_cmd_data_inspect(int argc, char **argv) {
    inspect_opts o;
    return wf_tool_run(&inspect_spec, &o, sizeof o, argc, argv, inspect_main);
}

/* ------------------------------------------------------------------- dump */

typedef struct {
    int64_t doc;
    char *split;
    char *tokenizer;
    int ids;
} dump_opts;

static const wf_opt dump_opt_table[] = {
    {"doc", NULL, WF_OPT_INT, offsetof(dump_opts, doc), "0", 0, 9.2e18, "document number in the split (0-based)"},
    {"split", NULL, WF_OPT_STR, offsetof(dump_opts, split), "train", WF_NO_RANGE, "train or val"},
    {"tokenizer", NULL, WF_OPT_STR, offsetof(dump_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to decode with (default: the one recorded in dataset.json)"},
    {"ids", NULL, WF_OPT_BOOL, offsetof(dump_opts, ids), "false", WF_NO_RANGE,
     "print the token ids, one line, instead of the decoded text"},
};

static const wf_cmd_spec dump_spec = {
    "data dump",
    "weft data dump [--doc N] [--split train|val] [--tokenizer tok.json] [--ids] DATA_DIR",
    "Prints one document of a tokenized dataset: its decoded bytes (end-of-text token included), "
    "or with --ids its token ids.",
    dump_opt_table,
    sizeof dump_opt_table / sizeof *dump_opt_table,
    1,
    1,
    0,
};

static wf_status run_dump(const dump_opts *o, const char *dir) {
    wf_dataset d;
    WF_TRY(wf_dataset_open(&d, dir, o->split, 0));
    wf_tokenizer *tok = NULL;
    wf_dataset_info info;
    memset(&info, 0, sizeof info);
    int32_t *ids = NULL;
    char *text = NULL;
    uint64_t start, n;
    wf_status s = wf_dataset_doc(&d, (uint64_t)o->doc, &start, &n);
    if (s == WF_OK) {
        ids = malloc((size_t)n * sizeof *ids);
        s = ids ? wf_dataset_read(&d, start, (size_t)n, ids) : wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK && o->ids) {
        for (uint64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    } else if (s == WF_OK) {
        const char *tpath = o->tokenizer;
        if (!tpath) {
            s = wf_dataset_info_load(&info, dir);
            tpath = info.tokenizer;
            if (s == WF_OK && !tpath)
                s = wf_error(WF_ERR_CONFIG, "%s records no tokenizer: pass --tokenizer", dir);
        }
        if (s == WF_OK) s = wf_tokenizer_load(&tok, tpath);
        if (s == WF_OK && wf_tokenizer_vocab_size(tok) != d.vocab_size)
            s = wf_error(WF_ERR_INVALID, "%s has %zu tokens, the dataset was written with %u: wrong tokenizer",
                         tpath, wf_tokenizer_vocab_size(tok), d.vocab_size);
        size_t len = 0;
        if (s == WF_OK) s = wf_tokenizer_decode(tok, ids, (size_t)n, &text, &len);
        if (s == WF_OK && fwrite(text, 1, len, stdout) != len)
            s = wf_error(WF_ERR_IO, "cannot write to standard output");
    }
    free(text);
    free(ids);
    wf_tokenizer_destroy(tok);
    wf_dataset_info_free(&info);
    wf_dataset_close(&d);
    return s;
}

static int dump_main(void *opts, const wf_strs *pos) {
    return run_dump(opts, pos->items[0]) == WF_OK ? 0 : wf_tool_fail(dump_spec.name);
}

int wf_cmd_data_dump(int argc, char **argv) {
    dump_opts o;
    return wf_tool_run(&dump_spec, &o, sizeof o, argc, argv, dump_main);
}
