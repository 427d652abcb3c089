/* `weft data batch`: shows what the data loader serves. Prints one rank's
 * part of global batch N (decoded with a tokenizer, or as ids), so a user can
 * see exactly which text a training step reads, and check that a resumed or
 * resharded run reads the same. A mixture (--sources, as data.sources) says
 * which source each sample came from and where in that source's order. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/loader.h"
#include "weft/mixture.h"
#include "weft/tokenizer.h"
#include "weft/weft.h"

typedef struct {
    char *tokenizer;
    char *split;
    int64_t batch, seq_len, seed, step, rank, world_size;
    int ids;
    wf_strs sources, weight_schedule;
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
    {"sources", NULL, WF_OPT_STRS, offsetof(batch_opts, sources), "", WF_NO_RANGE,
     "a mixture instead of DATA_DIR, as weft train's data.sources: [NAME=]DIR:WEIGHT,..."},
    {"weight-schedule", NULL, WF_OPT_STRS, offsetof(batch_opts, weight_schedule), "", WF_NO_RANGE,
     "the mixture's weight changes, as data.weight_schedule (\"STEP: W1 W2 ...\"; global batch N is step N+1)"},
};

static const wf_cmd_spec batch_spec = {
    "data batch",
    "weft data batch [options] DATA_DIR | weft data batch [options] --sources NAME=DIR:W,...",
    "Prints one rank's samples of global batch --step as the data loader serves them in training "
    "(same seed, batch and sequence length give the same samples), decoded with --tokenizer. With "
    "--sources, the batch of a mixture (data.sources), each sample with the source it came from.",
    batch_opt_table,
    sizeof batch_opt_table / sizeof *batch_opt_table,
    0,
    1,
    0,
};

/* The mixture's cursor at global batch `step`: the weights of each step
 * from the start, every change where it happens (step k is global batch
 * k - 1), then to the batch. */
static wf_status mix_cursor(const batch_opts *o, const wf_mix_spec *spec, wf_mix_state *st) {
    const uint64_t gb = (uint64_t)o->batch;
    wf_mix_state_init(st, wf_mix_spec_weights_at(spec, 1));
    for (int i = 0; i < spec->n_changes && spec->change_step[i] <= o->step + 1; i++) {
        uint64_t at = (uint64_t)(spec->change_step[i] - 1) * gb;
        if (at > st->slot) WF_TRY(wf_mix_advance(st, at - st->slot));
        if (!wf_mix_weights_equal(&spec->change_w[i], &st->weights)) wf_mix_set_weights(st, &spec->change_w[i]);
    }
    return wf_mix_advance(st, (uint64_t)o->step * gb - st->slot);
}

static void print_row(const wf_tokenizer *tok, const int32_t *toks, size_t row, wf_status *s) {
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        *s = wf_tokenizer_decode(tok, toks, row, &text, &len);
        if (*s == WF_OK) {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
        }
        free(text);
    } else {
        for (size_t k = 0; k < row; k++) printf("%s%" PRId32, k ? " " : "", toks[k]);
        printf("\n");
    }
}

/* The loader options `weft data batch` shows a batch with, one source or
 * a mixture alike: no prefetch, no verification. */
static wf_loader_opts batch_loader_opts(const batch_opts *o) {
    return (wf_loader_opts){
        .split = o->split,
        .seed = (uint64_t)o->seed,
        .seq_len = (int)o->seq_len,
        .global_batch = (int)o->batch,
        .rank = (int)o->rank,
        .world_size = (int)o->world_size,
        .shuffle = strcmp(o->split, "train") == 0,
        .prefetch = 0,
    };
}

static wf_status show_mix_batch(const batch_opts *o, wf_tokenizer *tok) {
    wf_mix_spec spec;
    wf_status s = wf_mix_spec_parse(&spec, (const char *const *)o->sources.items, o->sources.n,
                                    (const char *const *)o->weight_schedule.items, o->weight_schedule.n, "--sources",
                                    "--weight-schedule");
    wf_loader_opts lo = batch_loader_opts(o);
    lo.source_dirs = (const char *const *)spec.dirs;
    lo.n_sources = spec.n;
    lo.weights = &spec.weights;
    wf_loader *l = NULL;
    wf_mix_state st;
    /* One tokenizer for all sources, as weft train checks it. */
    if (s == WF_OK) s = wf_mix_spec_check_tokenizer(&spec, NULL, "--sources", NULL, NULL, NULL);
    if (s == WF_OK) s = wf_loader_create(&l, &lo);
    if (s == WF_OK) s = mix_cursor(o, &spec, &st);
    if (s == WF_OK) s = wf_loader_set_mix(l, &st);
    const wf_batch *b = NULL;
    if (s == WF_OK) s = wf_loader_next(l, &b);
    if (s == WF_OK) {
        printf("global batch %" PRId64 " of a mixture of %d sources (sequences %" PRIu64 " to %" PRIu64
               " of the run), rank %" PRId64 " of %" PRId64 ": %d samples of %d+1 tokens\n",
               o->step, spec.n, b->mix->slot, b->mix->slot + (uint64_t)o->batch - 1, o->rank, o->world_size,
               b->batch, b->seq_len);
        printf("weights:");
        for (int k = 0; k < spec.n; k++)
            printf("%s %s %.6g", k ? "," : "", spec.names[k], wf_mix_weight_share(&b->mix->weights, k));
        printf("\nglobal batch:");
        for (int k = 0; k < spec.n; k++) printf("%s %s %" PRIu32, k ? "," : "", spec.names[k], b->counts[k]);
        printf(" samples\n");
        size_t row = (size_t)b->seq_len + 1;
        for (int i = 0; i < b->batch && s == WF_OK; i++) {
            const int k = b->source[i];
            const uint64_t n = wf_loader_source_samples(l, k), pos = b->source_pos[i];
            printf("--- sample %d: source %s, position %" PRIu64 " of its epoch %" PRIu64 " (%" PRIu64
                   " samples an epoch)\n",
                   i, spec.names[k], pos % n, pos / n, n);
            print_row(tok, b->tokens + (size_t)i * row, row, &s);
        }
    }
    wf_loader_destroy(l);
    wf_mix_spec_free(&spec);
    return s;
}

static wf_status show_batch(const batch_opts *o, const char *dir) {
    wf_tokenizer *tok = NULL;
    if (o->tokenizer && !o->ids) WF_TRY(wf_tokenizer_load(&tok, o->tokenizer));
    if (!dir) {
        wf_status s = show_mix_batch(o, tok);
        wf_tokenizer_destroy(tok);
        return s;
    }
    wf_loader_opts lo = batch_loader_opts(o);
    lo.dir = dir;
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
            printf("--- sample %d\n", i);
            print_row(tok, b->tokens + (size_t)i * row, row, &s);
        }
    }
    wf_loader_destroy(l);
    wf_tokenizer_destroy(tok);
    return s;
}

static int batch_main(void *opts, const wf_strs *pos) {
    const batch_opts *o = opts;
    if (o->batch % o->world_size != 0 || o->rank >= o->world_size) {
        wf_error(WF_ERR_CONFIG, "--batch %" PRId64 " must be a multiple of --world-size %" PRId64
                                " and --rank below it (got rank %" PRId64 ")",
                 o->batch, o->world_size, o->rank);
        return wf_tool_fail(batch_spec.name);
    }
    if ((pos->n == 1) == (o->sources.n > 0)) {
        wf_error(WF_ERR_CONFIG, "give a dataset directory or a mixture (--sources), not %s",
                 pos->n ? "both" : "neither");
        return wf_tool_fail(batch_spec.name);
    }
    if (o->weight_schedule.n && !o->sources.n) {
        wf_error(WF_ERR_CONFIG, "--weight-schedule changes the weights of a mixture: give --sources");
        return wf_tool_fail(batch_spec.name);
    }
    return show_batch(o, pos->n ? pos->items[0] : NULL) == WF_OK ? 0 : wf_tool_fail(batch_spec.name);
}

int wf_cmd_data_batch(int argc, char **argv) {
    batch_opts o;
    return wf_tool_run(&batch_spec, &o, sizeof o, argc, argv, batch_main);
}
