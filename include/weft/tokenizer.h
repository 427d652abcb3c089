/* weft: byte-level BPE tokenizer (GPT-2 / Llama 3 style), compatible with
 * Hugging Face `tokenizer.json`.
 *
 * Text is split by a pre-tokenizer regex (PCRE2, Unicode-aware), each piece's
 * bytes are mapped to the GPT-2 byte-to-unicode alphabet, and merges are
 * applied by rank. Any byte sequence, invalid UTF-8 included, encodes, and
 * decoding the ids gives back the exact bytes. Special tokens (begin/end of
 * text, padding) are added tokens that the pre-tokenizer never produces.
 *
 * A loaded tokenizer is immutable: encode and decode are safe to call from
 * several threads at once on the same tokenizer.
 */
#ifndef WEFT_TOKENIZER_H
#define WEFT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

typedef struct wf_tokenizer wf_tokenizer;

/* A growable array of token ids. Zero-initialise; free with wf_ids_free. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} wf_ids;
void wf_ids_free(wf_ids *v);
wf_status wf_ids_push(wf_ids *v, int32_t id);

/* Loads a Hugging Face tokenizer.json holding a byte-level BPE model (as
 * written by weft or by the `tokenizers` library). Anything else (WordPiece,
 * Unigram, normalizers weft does not implement) is WF_ERR_UNSUPPORTED with a
 * message naming the file and the part. */
wf_status wf_tokenizer_load(wf_tokenizer **out, const char *path);

/* Writes tokenizer.json atomically, loadable by `tokenizers`. */
wf_status wf_tokenizer_save(const wf_tokenizer *t, const char *path);

void wf_tokenizer_destroy(wf_tokenizer *t); /* accepts NULL */

/* Number of ids (regular vocabulary plus added/special tokens): every id
 * the tokenizer can produce is below this. */
size_t wf_tokenizer_vocab_size(const wf_tokenizer *t);

/* Special token ids, or -1 if the tokenizer has none. */
int32_t wf_tokenizer_bos(const wf_tokenizer *t); /* begin of text */
int32_t wf_tokenizer_eos(const wf_tokenizer *t); /* end of text, between documents */
int32_t wf_tokenizer_pad(const wf_tokenizer *t);

/* Id of a token given as its string form (as in tokenizer.json), or -1. */
int32_t wf_tokenizer_token_id(const wf_tokenizer *t, const char *token);

/* Encodes `len` bytes of text, appending ids to `out`. With
 * `parse_special` the text of special tokens ("<|endoftext|>") becomes their
 * id, as `tokenizers` does; without it (the default for training data) such
 * text is encoded as ordinary bytes. Added tokens that are not special
 * (weft never makes any; some `tokenizers` files have them) are always
 * matched, as in `tokenizers`. No special tokens are added around the text:
 * the post-processor of a loaded file is not applied. */
wf_status wf_tokenizer_encode(const wf_tokenizer *t, const char *text, size_t len, int parse_special,
                              wf_ids *out);

/* Runs only the pre-tokenizer (no added tokens, no merges) and calls fn
 * for each piece with its bytes (a prefix space included, if the
 * tokenizer adds one). For seeing how text is split (`weft tokenizer
 * encode --pieces`); `tokenizers`' pre_tokenize_str gives the same pieces.
 * Stops at the first status other than WF_OK that fn returns. */
typedef wf_status (*wf_piece_fn)(void *ctx, const char *piece, size_t len);
wf_status wf_tokenizer_pretokenize(const wf_tokenizer *t, const char *text, size_t len,
                                   wf_piece_fn fn, void *ctx);

/* Writes the tokenizer.json string form of n bytes (the GPT-2 byte
 * alphabet: " the" -> "Ġthe") to out, which has room for 2n+1 bytes, NUL
 * included; returns its length. */
size_t wf_tokenizer_bytes_to_str(const void *bytes, size_t n, char *out);

/* Decodes ids to bytes: *out is malloc'd (NUL-terminated, *len excludes the
 * NUL); the caller frees it. An id outside the vocabulary is an error. */
wf_status wf_tokenizer_decode(const wf_tokenizer *t, const int32_t *ids, size_t n, char **out,
                              size_t *len);

/* The bytes of one id (for streaming decode); NULL if out of range. */
const char *wf_tokenizer_id_bytes(const wf_tokenizer *t, int32_t id, size_t *len);

/* A fingerprint of what the tokenizer does (not of its file's bytes): an
 * XXH3-64 over every id's kind and bytes, the merges in rank order, the
 * added tokens with their flags and the pre-tokenizer's settings. Two
 * tokenizers with the same fingerprint turn the same text into the same
 * ids and back; a file saved again (another formatting, key order) keeps
 * it. Datasets record it (dataset.json's tokenizer_fingerprint), so that a
 * mixture can check its sources share one tokenizer. */
wf_status wf_tokenizer_fingerprint(const wf_tokenizer *t, uint64_t *out);
/* The same of the tokenizer.json at `path` (loaded, then freed). */
wf_status wf_tokenizer_file_fingerprint(const char *path, uint64_t *out);

/* A description of a tokenizer, for `weft tokenizer info` and logs. The
 * strings point into the tokenizer (or the struct) and live as long as
 * both. */
typedef struct {
    size_t vocab_size;     /* as wf_tokenizer_vocab_size */
    size_t n_model_tokens; /* entries of the BPE model's vocabulary */
    size_t n_merges;
    size_t n_added;        /* added tokens (special or not) */
    const char *pattern;      /* the pre-tokenizer regex, NULL if none */
    const char *pattern_name; /* "llama3", "gpt2", or NULL for another pattern */
    int ignore_merges;        /* whole-vocabulary pieces skip the merges */
    char pretokenizer[160];   /* e.g. "Sequence[Split(Regex), ByteLevel(add_prefix_space=false)]" */
} wf_tokenizer_info;
void wf_tokenizer_get_info(const wf_tokenizer *t, wf_tokenizer_info *out);

/* The i-th added token (i < n_added) in file order: its text, id and
 * whether it is special. */
void wf_tokenizer_added(const wf_tokenizer *t, size_t i, const char **content, int32_t *id,
                        int *special);

typedef struct {
    size_t vocab_size;      /* total, including the 256 byte tokens and specials */
    uint64_t min_frequency; /* a pair must occur at least this often to merge (>= 1) */
    int n_threads;          /* for counting; the result does not depend on it */
    const char *pattern;    /* pre-tokenizer: "llama3" (default) or "gpt2" */
    const char *const *special_tokens; /* NULL: "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>" */
    size_t n_special;
    const char *const *paths; /* inputs read with wf_docs (see docs.h) */
    size_t n_paths;
    int text_mode;            /* wf_text_doc_mode for plain-text inputs */
    const char *field;        /* JSONL field, NULL for "text" */
} wf_bpe_train_opts;

/* Learns a byte-level BPE vocabulary from the inputs. Deterministic: the
 * same inputs and options give the same tokenizer for any thread count. */
wf_status wf_tokenizer_train(wf_tokenizer **out, const wf_bpe_train_opts *o);

#endif
