/* Internal to the shard module (shard.c, dataset.c): the on-disk constants
 * of a token shard and a streaming writer for one shard file. The format
 * itself is specified in docs/formats/token-shard.md; keep the two in step.
 *
 * Header (128 bytes, every integer little-endian):
 *
 *   off size field
 *     0    8 magic          "WEFTSHRD"
 *     8    4 version        1
 *    12    4 header_size    128
 *    16    4 token_bytes    2 (uint16 tokens) or 4 (uint32 tokens)
 *    20    4 vocab_size     every token is < vocab_size
 *    24    8 n_tokens       >= 1
 *    32    8 n_docs         >= 1
 *    40    8 tokens_offset  multiple of 64 and >= 128 (the writer uses 4096)
 *    48    8 index_offset   align64(tokens_offset + n_tokens * token_bytes)
 *    56    8 file_size      index_offset + n_docs * 8
 *    64    8 payload_hash   XXH3-64 of bytes [tokens_offset, file_size)
 *    72    4 split          0 train, 1 val (informational)
 *    76    4 shard_index    position in its split (informational)
 *    80   40 reserved       zero
 *   120    8 header_hash    XXH3-64 of bytes [0, 120)
 */
#ifndef WEFT_DATA_SHARD_INTERNAL_H
#define WEFT_DATA_SHARD_INTERNAL_H

#include <stdint.h>

#include "weft/fileio.h"
#include "weft/shard.h"
#include "weft/status.h"

#define WF_SHARD_MAGIC "WEFTSHRD"
#define WF_SHARD_VERSION 1u
#define WF_SHARD_HEADER_SIZE 128u
#define WF_SHARD_HASHED_HEADER 120u   /* header bytes covered by header_hash */
#define WF_SHARD_SECTION_ALIGN 64u    /* minimum alignment of the sections */
#define WF_SHARD_TOKENS_OFFSET 4096u  /* where the writer puts the tokens: one page */

static inline uint64_t wf_shard_align64_(uint64_t x) {
    return (x + WF_SHARD_SECTION_ALIGN - 1) / WF_SHARD_SECTION_ALIGN * WF_SHARD_SECTION_ALIGN;
}

/* Little-endian stores and loads, independent of the host's byte order
 * (compilers turn them into single moves on little-endian machines). */
static inline void wf_le16_put_(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void wf_le32_put_(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void wf_le64_put_(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t wf_le16_get_(const unsigned char *p) {
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}
static inline uint32_t wf_le32_get_(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t wf_le64_get_(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Streams one shard file to disk: a zero header placeholder, the tokens as
 * they come, then on end the index, the header, and an atomic commit. The
 * document index is kept in memory (8 bytes a document). */
typedef struct {
    wf_afile f;
    wf_hasher *hash;
    int token_bytes;
    uint32_t vocab_size;
    uint32_t split, shard_index;
    uint64_t n_tokens;
    uint64_t *doc_starts;
    size_t n_docs, cap_docs;
    unsigned char *buf; /* conversion buffer for wf__shard_out_append */
    size_t buf_cap;
} wf_shard_out;

/* What the finished shard's header says, for dataset.json. */
typedef struct {
    uint64_t n_tokens, n_docs, bytes, payload_hash, header_hash;
} wf_shard_summary;

wf_status wf__shard_out_begin(wf_shard_out *o, const char *path, int token_bytes, uint32_t vocab_size,
                             uint32_t split, uint32_t shard_index);
/* Appends one whole document (n >= 1 ids, each in [0, vocab_size)). */
wf_status wf__shard_out_append(wf_shard_out *o, const int32_t *ids, size_t n);
/* Writes index and header and commits the file; *sum describes it. */
wf_status wf__shard_out_end(wf_shard_out *o, wf_shard_summary *sum);
/* Removes the temporary file; safe after end or on a zeroed writer. */
void wf__shard_out_abort(wf_shard_out *o);

/* ---- reading (shard.c, shard_remote.c) ---- */

/* Checks the header bytes h of a shard of `size` bytes (named s->path in
 * errors); fills s's counts, size and checksums and the section offsets. */
wf_status wf__shard_check_header(wf_shard *s, const unsigned char *h, uint64_t size, uint64_t *tokens_offset,
                                 uint64_t *index_offset);
/* Checks s->doc_starts: from 0, strictly increasing, below n_tokens. */
wf_status wf__shard_check_index(const wf_shard *s);
/* Checks that tokens [first, first + n), whose bytes are at p, are in the vocabulary. */
wf_status wf__shard_check_tokens(const wf_shard *s, const unsigned char *p, uint64_t first, uint64_t n);
/* Maps and checks a local file as shard s (s->path already set). */
wf_status wf__shard_open_mapped(wf_shard *s, const char *path, int verify);

/* shard_remote.c: s->path is an s3:// URL. */
wf_status wf__shard_open_remote(wf_shard *s, int verify);
wf_status wf__shard_fetch_remote(const wf_shard *s, uint64_t start, size_t n, int32_t *out);
void wf__shard_close_remote(wf_shard *s); /* nothing for a mapped shard */

#endif
