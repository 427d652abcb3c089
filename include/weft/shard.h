/* weft: token shards and datasets (format: docs/formats/token-shard.md).
 *
 * A dataset is a directory written by `weft tokenize`:
 *   DIR/dataset.json            index: tokenizer, vocab size, dtype, shards
 *   DIR/train-00000.wfs ...     token shards of the training split
 *   DIR/val-00000.wfs ...       token shards of the validation split
 * A shard holds a header (magic, version, dtype, counts, checksum), the
 * tokens (uint16 when the vocabulary fits, else uint32, little-endian) and a
 * document index (the start offset of each document). Local shards are
 * read through mmap and verified on open; a shard in an object store
 * (s3://) is read by ranged GETs with read-ahead (docs/storage.md).
 */
#ifndef WEFT_SHARD_H
#define WEFT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "weft/fileio.h"
#include "weft/status.h"

/* ----------------------------------------------------------------- writer */

typedef struct wf_dataset_writer wf_dataset_writer;

typedef struct {
    const char *dir;            /* created if missing */
    uint32_t vocab_size;        /* decides uint16 vs uint32 tokens */
    uint64_t shard_tokens;      /* tokens per shard before a new one starts */
    const char *tokenizer_path; /* recorded in dataset.json (may be NULL) */
    uint64_t tokenizer_fingerprint; /* wf_tokenizer_fingerprint, recorded when has_fingerprint */
    int has_fingerprint;
} wf_dataset_writer_opts;

wf_status wf_dataset_writer_create(wf_dataset_writer **out, const wf_dataset_writer_opts *o);

/* Appends one document's tokens (already ending with the end-of-text token
 * if the caller wants one) to split 0 (train) or 1 (val). A document never
 * straddles two shards. */
wf_status wf_dataset_writer_add(wf_dataset_writer *w, int split, const int32_t *ids, size_t n);

/* Finishes the last shards and writes dataset.json. Every file is written
 * atomically, dataset.json last, so a crashed run leaves no valid dataset. */
wf_status wf_dataset_writer_finish(wf_dataset_writer *w);
void wf_dataset_writer_destroy(wf_dataset_writer *w); /* accepts NULL; removes unfinished files */

/* ----------------------------------------------------------------- reader */

typedef struct wf_shard_remote wf_shard_remote;

typedef struct {
    char *path;
    wf_mmap map;           /* the whole file (a remote shard: empty until wf_shard_load) */
    int token_bytes;       /* 2 or 4 */
    uint32_t vocab_size;
    uint64_t n_tokens;
    uint64_t n_docs;
    uint64_t size, payload_hash, header_hash; /* the file's size and its header's checksums */
    const unsigned char *tokens;     /* n_tokens little-endian tokens (NULL: remote, not loaded) */
    const unsigned char *doc_starts; /* n_docs little-endian uint64 token offsets */
    wf_shard_remote *remote;         /* an s3:// shard read by ranges; NULL when mapped */
} wf_shard;

/* Maps and checks a shard: magic, version, sizes against the file size, and
 * (with verify) the checksum. Errors name the file and what is wrong. An
 * s3:// URL is opened for ranged reads: its header and document index are
 * fetched and checked now, its tokens when read (wf_shard_fetch); with a
 * cache directory (wf_store_cache_path) a copy there that passes the
 * checksums is mapped instead, and one is filled as the shard is read. */
wf_status wf_shard_open(wf_shard *s, const char *path, int verify);
void wf_shard_close(wf_shard *s); /* accepts a zeroed shard */

/* Copies tokens [start, start+n) of the shard into out. The caller keeps
 * the range inside [0, n_tokens); nothing is checked here (the hot path).
 * A mapped shard only (s->tokens != NULL); wf_shard_fetch reads any. */
void wf_shard_read(const wf_shard *s, uint64_t start, size_t n, int32_t *out);
/* The same for any shard: a remote one reads through its blocks (ranged
 * GETs, the next block fetched ahead on a background thread when reading
 * goes forward), which may fail. Thread-safe. */
wf_status wf_shard_fetch(const wf_shard *s, uint64_t start, size_t n, int32_t *out);
/* Brings a remote shard's whole file into memory, so that map, tokens and
 * doc_starts point at it (for views of its bytes); nothing for a mapped
 * shard. The payload checksum is checked. */
wf_status wf_shard_load(wf_shard *s);
/* Token offset where document `doc` starts; doc == n_docs gives n_tokens,
 * so document d spans [doc_start(d), doc_start(d + 1)). */
uint64_t wf_shard_doc_start(const wf_shard *s, uint64_t doc);

/* One split of a dataset: its shards as one virtual token stream. */
typedef struct {
    wf_shard *shards;
    size_t n_shards;
    uint64_t *shard_base;  /* n_shards + 1 prefix sums of n_tokens */
    uint64_t n_tokens;
    uint64_t n_docs;
    uint32_t vocab_size;
} wf_dataset;

/* Opens split "train" or "val" of a dataset directory (via dataset.json). */
wf_status wf_dataset_open(wf_dataset *d, const char *dir, const char *split, int verify);
void wf_dataset_close(wf_dataset *d);

/* Copies tokens [start, start+n) of the virtual stream into out (the range
 * may span shards). Returns WF_ERR_RANGE past the end, and WF_ERR_FORMAT
 * (naming the shard and offset) for a token outside the vocabulary, so a
 * corrupt shard opened without verify still never reaches the model. */
wf_status wf_dataset_read(const wf_dataset *d, uint64_t start, size_t n, int32_t *out);

/* Where document `doc` (0-based, counted over the split's shards in order)
 * lies in the virtual stream: tokens [*start, *start + *n). WF_ERR_RANGE if
 * doc >= n_docs. */
wf_status wf_dataset_doc(const wf_dataset *d, uint64_t doc, uint64_t *start, uint64_t *n);

/* ------------------------------------------------------- dataset.json */

/* dataset.json as parsed and checked, without opening any shard (for
 * `weft data inspect`). Strings and arrays are owned; free with
 * wf_dataset_info_free. */
typedef struct {
    char *file;            /* shard file name inside the dataset directory */
    uint64_t n_tokens, n_docs;
    uint64_t bytes;        /* file size */
    uint64_t payload_hash; /* XXH3-64 of the payload, as in the shard header */
    uint64_t header_hash;
} wf_shard_info;

typedef struct {
    char *name;            /* "train", "val" */
    wf_shard_info *shards;
    size_t n_shards;
    uint64_t n_tokens, n_docs;
} wf_split_info;

typedef struct {
    uint32_t vocab_size;
    int token_bytes;       /* 2 (dtype "uint16") or 4 ("uint32") */
    char *tokenizer;       /* as recorded by the writer; NULL if none */
    uint64_t tokenizer_fingerprint; /* wf_tokenizer_fingerprint of the tokenizer, when has_fingerprint */
    int has_fingerprint;   /* 0: not recorded (a dataset of an older weft, or written without one) */
    wf_split_info *splits;
    size_t n_splits;
} wf_dataset_info;

/* Reads DIR/dataset.json. Missing or malformed files are errors naming the
 * file (and line for JSON syntax). */
wf_status wf_dataset_info_load(wf_dataset_info *info, const char *dir);
void wf_dataset_info_free(wf_dataset_info *info); /* accepts a zeroed info */

#endif
