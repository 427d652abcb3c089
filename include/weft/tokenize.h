/* weft: the tokenize pipeline (`weft tokenize`): documents in, a dataset of
 * token shards out.
 *
 * Documents (plain text or JSONL, optionally .gz/.zst; include/weft/docs.h)
 * are encoded with a tokenizer on every thread and written in input order
 * into DATA_DIR/{train,val}-NNNNN.wfs plus dataset.json
 * (docs/formats/token-shard.md). A document goes to val when a draw that
 * depends only on (seed, document number) falls below val_fraction. The
 * output depends only on the inputs and the options, never on the thread
 * count. An unfinished dataset is removed, so DATA_DIR holds a complete
 * dataset or none. The run holds DATA_DIR's lock (weft/dirlock.h): a second
 * job on the same directory fails at start, naming the first.
 */
#ifndef WEFT_TOKENIZE_H
#define WEFT_TOKENIZE_H

#include <stdint.h>

#include "weft/config.h"
#include "weft/status.h"

/* The options of `weft tokenize` (wf_tokenize_spec gives their keys,
 * defaults and ranges). Strings are owned: wf_tokenize_config_free. */
typedef struct {
    char *tokenizer;     /* tokenizer.json (required) */
    char *output;        /* the dataset directory (required; created if missing) */
    double val_fraction; /* fraction of documents in the validation split */
    int64_t seed;        /* seed of the train/val draw */
    int64_t shard_tokens; /* tokens per shard; 0: about 100 MB of tokens */
    int64_t threads;     /* encoding threads; 0: WEFT_THREADS or every CPU */
    char *text_mode;     /* plain-text inputs: "file", "line" or "paragraph" */
    char *field;         /* JSONL inputs: the string field holding the text */
    int eos;             /* append the end-of-text token after each document */
    int force;           /* replace a dataset already in `output` */
    double lock_stale_s; /* another host's output lock older than this is stale (weft/dirlock.h) */
} wf_tokenize_config;

/* What a run did, by split (index 0 train, 1 val). */
typedef struct {
    uint64_t docs[2], tokens[2], shards[2];
    uint64_t bytes;  /* input bytes read */
    double seconds;  /* wall time of the run */
    int threads;     /* encoding threads used */
} wf_tokenize_summary;

/* The option table of `weft tokenize` (one or more inputs). */
const wf_cmd_spec *wf_tokenize_spec(void);

/* Fills `c` with every default (free with wf_tokenize_config_free). */
wf_status wf_tokenize_config_default(wf_tokenize_config *c);
void wf_tokenize_config_free(wf_tokenize_config *c);

/* Tokenizes `inputs` (in this order) into c->output and fills `sum`.
 * Errors name the input, the option or the directory: a missing
 * --tokenizer or --output, a dataset already there without c->force, a
 * tokenizer without an end-of-text token when c->eos, no documents. Shows
 * a progress bar on a terminal. */
wf_status wf_tokenize_run(const wf_tokenize_config *c, const char *const *inputs, size_t n_inputs,
                          wf_tokenize_summary *sum);

#endif
