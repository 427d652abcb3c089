/* `weft data batch`: shows what the data loader serves. Prints one rank's
 * part of global batch N (decoded with a tokenizer, or as ids), so a user can
 * see exactly which text a training step reads, and check that a resumed or
 * resharded run reads the same. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/loader.h"
#include "weft/tokenizer.h"
#include "weft/weft.h"

typedef struct {
    char *tokenizer;
    char *split;
    int64_t batch, seq_len, seed, step, rank, world_size;
    int ids;
} batch_opts;

static const wf_opt batch_opt_table[] = {
    {"tokenizer", NULL, WF_OPT_STR, offsetof(batch_opts, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to decode with (without it, or with --ids, ids are printed)"},
    {"split", NULL, WF_OPT_STR, offsetof(batch_opts, split), "train", WF_NO_RANGE,
     "train (shuffled per epoch) or val (in order)"},
    {"batch", NULL, WF_OPT_INT, offsetof(batch_opts, batch), "4", 1, 1 << 20,
     "global batch size in samples (a multiple of --world-size)"},
    {"seq-len", NULL, WF_OPT_INT, offsetof(batch_opts, seq_len), "64", 1, 1 << 24,
     "T: each sample has T+1 tokens"},
    {"seed", NULL, WF_OPT_INT, offsetof(batch_opts, seed), "0", 0, 9.2e18, "data order seed"},
    {"step", NULL, WF_OPT_INT, offsetof(batch_opts, step), "0", 0, 9.2e18,
     "which global batch to show (0 = the first of the run)"},
    {"rank", NULL, WF_OPT_INT, offsetof(batch_opts, rank), "0", 0, 1 << 20, "the rank whose part to show"},
    {"world-size", NULL, WF_OPT_INT, offsetof(batch_opts, world_size), "1", 1, 1 << 20,
     "number of data-parallel ranks"},
    {"ids", NULL, WF_OPT_BOOL, offsetof(batch_opts, ids), "false", WF_NO_RANGE, "print token ids, not text"},
};

static const wf_cmd_spec batch_spec = {
    "data batch",
    "weft data batch [options] DATA_DIR",
    "Prints one rank's samples of global batch --step as the data loader serves them in training "
    "(same seed, batch and sequence length give the same samples), decoded with --tokenizer.",
    batch_opt_table,
    sizeof batch_opt_table / sizeof *batch_opt_table,
    1,
    1,
    0,
};

static wf_status show_batch(const batch_opts *o, const char *dir) {
    wf_tokenizer *tok = NULL;
    if (o->tokenizer && !o->ids) WF_TRY(wf_tokenizer_load(&tok, o->tokenizer));
    wf_loader_opts lo = {
        .dir = dir,
        .split = o->split,
        .seed = (uint64_t)o->seed,
        .seq_len = (int)o->seq_len,
        .global_batch = (int)o->batch,
        .rank = (int)o->rank,
        .world_size = (int)o->world_size,
        .shuffle = strcmp(o->split, "train") == 0,
        .prefetch = 0,
        .verify = 0,
    };
    wf_loader *l = NULL;
    wf_status s = wf_loader_create(&l, &lo);
    if (s != WF_OK) {
        wf_tokenizer_destroy(tok);
        return s;
    }
    uint64_t per_epoch = wf_loader_batches_per_epoch(l);
    wf_loader_state st = {(uint64_t)o->step / per_epoch, ((uint64_t)o->step % per_epoch) * (uint64_t)o->batch};
    s = wf_loader_set_state(l, st);
    const wf_batch *b = NULL;
    if (s == WF_OK) s = wf_loader_next(l, &b);
    if (s == WF_OK) {
        printf("global batch %" PRId64 " (epoch %" PRIu64 ", sample %" PRIu64 " of %" PRIu64
               "), rank %" PRId64 " of %" PRId64 ": %d samples of %d+1 tokens\n",
               o->step, b->state.epoch, b->state.sample, wf_loader_samples_per_epoch(l), o->rank,
               o->world_size, b->batch, b->seq_len);
        size_t row = (size_t)b->seq_len + 1;
        for (int i = 0; i < b->batch && s == WF_OK; i++) {
            const int32_t *toks = b->tokens + (size_t)i * row;
            printf("--- sample %d\n", i);
            if (tok) {
                char *text = NULL;
                size_t len = 0;
                s = wf_tokenizer_decode(tok, toks, row, &text, &len);
                if (s == WF_OK) {
                    fwrite(text, 1, len, stdout);
                    fputc('\n', stdout);
                }
                free(text);
            } else {
                for (size_t k = 0; k < row; k++) printf("%s%" PRId32, k ? " " : "", toks[k]);
                printf("\n");
            }
        }
    }
    wf_loader_destroy(l);
    wf_tokenizer_destroy(tok);
    return s;
}

int wf_cmd_data_batch(int argc, char **argv) {
    batch_opts o = {0};
    wf_strs pos;
    int done, rc = wf_tool_parse(&batch_spec, &o, argc, argv, &pos, &done);
    if (!done) {
        rc = 0;
        if (o.batch % o.world_size != 0 || o.rank >= o.world_size) {
            wf_error(WF_ERR_CONFIG, "--batch %" PRId64 " must be a multiple of --world-size %" PRId64
                                    " and --rank below it (got rank %" PRId64 ")",
                     o.batch, o.world_size, o.rank);
            rc = wf_tool_fail(batch_spec.name);
        } else if (show_batch(&o, pos.items[0]) != WF_OK) {
            rc = wf_tool_fail(batch_spec.name);
        }
    }
    wf_opts_free(&batch_spec, &o);
    wf_opts_free_positional(&pos);
    return rc;
}
