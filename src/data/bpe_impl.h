/* Internal to weft's byte-level BPE tokenizer (src/data/pretok.c, bpe.c,
 * bpe_train.c, tokenizer_json.c). Not a public header: the contract is
 * include/weft/tokenizer.h.
 *
 * Pieces:
 *   - the GPT-2 byte <-> unicode alphabet (every byte is one printable code
 *     point, so a token's bytes can be written as a JSON string);
 *   - the pre-tokenizer: PCRE2 regexes that split text into pieces, with an
 *     iterator that also returns the gaps between matches, so every byte of
 *     the input (invalid UTF-8 included) lands in exactly one piece;
 *   - a byte-string -> int64 hash map (vocabulary lookups, training counts);
 *   - the tokenizer object itself, filled by the JSON loader or the trainer
 *     and finished by wf__bpe_build.
 */
#ifndef WEFT_DATA_BPE_IMPL_H
#define WEFT_DATA_BPE_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"
#include "weft/tokenizer.h"

/* ------------------------------------------------------ byte alphabet */

/* The code point GPT-2 uses for byte b: printable Latin-1 bytes map to
 * themselves, the other 68 to U+0100.. in byte order. */
uint32_t wf__bpe_byte_cp(uint8_t b);
/* The byte of a code point of the alphabet, or -1. */
int wf__bpe_cp_byte(uint32_t cp);
/* Writes the alphabet form of n bytes as UTF-8 to out (room for 2n+1; it
 * is NUL-terminated) and returns its length. */
size_t wf__bpe_bytes_to_str(const uint8_t *b, size_t n, char *out);
/* Decodes a UTF-8 string of alphabet characters to bytes (out has room for
 * n). Returns the number of bytes, or -1 if the string holds a character
 * outside the alphabet or is not valid UTF-8. */
long wf__bpe_str_to_bytes(const char *s, size_t n, uint8_t *out);

/* --------------------------------------------------------- pre-tokenizer */

/* The built-in patterns, as they appear in tokenizer.json. */
extern const char wf__pretok_gpt2[];
extern const char wf__pretok_llama3[];
/* "gpt2" / "llama3" -> pattern; NULL if unknown. */
const char *wf__pretok_named(const char *name);
/* Pattern -> "gpt2" / "llama3", or NULL for any other pattern. */
const char *wf__pretok_name_of(const char *pattern);

/* A compiled pattern; immutable once compiled, shared by threads. `code`
 * is exact; `fast` (or NULL) is the pattern without the Unicode 15-16
 * widening of \p{L}/\p{N}, equal to `code` on text without those code
 * points (see pretok.c). */
typedef struct {
    pcre2_code *code, *fast;
    int jit, fast_jit; /* JIT compiled */
    /* WF_SCAN_LLAMA3 / WF_SCAN_GPT2: the pattern is a built-in one and
     * pieces come from the hand-written scanner (pretok.c), which gives the
     * same pieces as the regex; WF_SCAN_REGEX: from PCRE2. Clearing it
     * forces PCRE2 (the tests compare the two). */
    int scan;
} wf_regex;
enum { WF_SCAN_REGEX = 0, WF_SCAN_LLAMA3 = 1, WF_SCAN_GPT2 = 2 };

/* Compiles a pattern written in the dialect of `tokenizers` (Oniguruma):
 * \s and \S are rewritten to Oniguruma's Unicode White_Space set, which
 * differs from PCRE2's, and \p{L}/\p{N} widened to Unicode 16 when
 * PCRE2's tables are older. `literal` quotes the whole pattern (Split with
 * a String pattern). `where` prefixes error messages. */
wf_status wf__pretok_regex_compile(wf_regex *r, const char *pattern, int literal, const char *where);
void wf__pretok_regex_free(wf_regex *r);

/* One thread's matching state for one regex. */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} wf_regex_state;
wf_status wf__pretok_regex_state_init(wf_regex_state *st, const wf_regex *r);
void wf__pretok_regex_state_free(wf_regex_state *st);

/* Iterates the pieces of a subject: the matches of the regex, and each run
 * of bytes between matches (invalid UTF-8, or characters no alternative
 * matches) as a piece of its own, like `tokenizers`' Split with the
 * "Isolated" behaviour. Empty matches are skipped. */
typedef struct {
    const pcre2_code *code; /* the variant of the regex used for this subject */
    int jit;
    int scan; /* WF_SCAN_*: the scanner used for this subject */
    const char *s;
    size_t n, pos;
    size_t m_off, m_len; /* a match found after a gap, returned next */
    int pending;
} wf_split_iter;
void wf__pretok_split_begin(wf_split_iter *it, const wf_regex *r, const char *s, size_t n);
/* Returns 1 and the next piece, 0 at the end, -1 on a matching error
 * (message set). */
int wf__pretok_split_next(const wf_regex *r, wf_regex_state *st, wf_split_iter *it, size_t *off,
                  size_t *len);

/* The length of the piece that starts at s[pos] (pos < n) under a
 * built-in pattern (WF_SCAN_LLAMA3 or WF_SCAN_GPT2): a match of the
 * pattern, or a run of invalid UTF-8 between matches, exactly as
 * wf__pretok_split_next would cut it with PCRE2. Always at least 1. */
size_t wf__pretok_scan_piece(int scan, const uint8_t *s, size_t n, size_t pos);

/* ------------------------------------------------------------- hash map */

/* Byte strings (copied in) -> int64. Open addressing, grows by doubling. */
typedef struct {
    uint64_t hash;
    uint64_t off;  /* key offset in keys */
    uint32_t len;  /* UINT32_MAX: empty slot */
    int64_t val;
} wf_strmap_slot;
typedef struct {
    wf_strmap_slot *slots;
    size_t cap, n; /* cap is a power of two */
    char *keys;
    size_t keys_len, keys_cap;
} wf_strmap;
wf_status wf__bpe_strmap_init(wf_strmap *m, size_t expected);
void wf__bpe_strmap_free(wf_strmap *m);
/* Returns the value slot of key, inserting it with value `def` if absent
 * (*inserted says which). NULL when out of memory. The pointer is valid
 * until the next insertion. */
int64_t *wf__bpe_strmap_upsert(wf_strmap *m, const void *key, size_t len, uint64_t hash, int64_t def,
                          int *inserted);
/* Returns the value slot of key, or NULL. */
int64_t *wf__bpe_strmap_find(const wf_strmap *m, const void *key, size_t len, uint64_t hash);
static inline const char *wf_strmap_key(const wf_strmap *m, const wf_strmap_slot *s) {
    return m->keys + s->off;
}
uint64_t wf__bpe_hash(const void *p, size_t n);

/* ------------------------------------------------------------ tokenizer */

typedef struct {
    char *content; /* UTF-8 (NUL-terminated), matched verbatim in the text */
    size_t len;
    int32_t id;
    int special, normalized, single_word, lstrip, rstrip;
} wf_added_token;

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    int32_t rank, id;
} wf_pair_slot;

typedef struct wf_bpe_registry wf_bpe_registry;

enum { WF_ID_HOLE = 0, WF_ID_MODEL = 1, WF_ID_ADDED = 2 };

struct wf_tokenizer {
    /* Model vocabulary: id -> string form (NULL: id not in the model). */
    size_t n_ids;       /* one past the largest id (model or added) */
    char **vocab_str;   /* [n_ids] */
    size_t n_vocab;     /* entries of the model vocabulary */
    /* Merges in rank order, as (left id, right id) -> merged id. */
    int32_t (*merges)[3];
    size_t n_merges;

    int32_t unk_id;     /* -1: none */
    char *unk_token;
    int fuse_unk;
    int ignore_merges;

    wf_added_token *added;
    size_t n_added;

    /* Pre-tokenizer: an optional Split(regex) and then ByteLevel, which may
     * prefix a space and split again with the GPT-2 pattern. */
    char *split_pattern; /* NULL: no Split */
    int split_literal;   /* Split pattern is a String, not a Regex */
    int bl_use_regex;
    int bl_add_prefix_space;
    int bl_trim_offsets;
    int pretok_is_bl_only; /* pre_tokenizer is a bare ByteLevel, not a Sequence */
    char *post_processor_json; /* kept verbatim for saving; NULL = null */
    int decoder_null;

    /* ---- derived by wf__bpe_build ---- */
    int32_t bos, eos, pad;
    int32_t byte_id[256];       /* id of each byte's token, -1 if missing */
    wf_pair_slot *pairs;        /* merge lookup */
    size_t pairs_cap;
    /* One bit per merge, at a hash of its pair: most pairs a piece holds
     * are not merges, and this small bitmap (it stays in cache, unlike the
     * table) turns those lookups away without touching the table. */
    uint64_t *pair_filter;
    unsigned filter_shift;      /* 64 - log2(bits) */
    wf_strmap str_ids;          /* string form -> id (model vocabulary) */
    wf_strmap byte_ids;         /* token bytes -> id (model vocabulary) */
    uint64_t *dec_off;          /* [n_ids + 1] offsets of each id's bytes in dec */
    char *dec;
    uint8_t *kind;              /* [n_ids]: WF_ID_* */
    int has_added;
    int has_plain_added;        /* an added token is not special (always matched) */
    uint8_t added_first[256];   /* bit p: an added token of pass p starts with this byte */
    int added_single_first[2];  /* the one first byte of pass p's tokens, or -1 */
    wf_regex split_re, bl_re;
    wf_bpe_registry *reg;       /* per-thread scratch states */
};

/* Allocates an empty tokenizer (all ids -1, nothing derived). */
wf_tokenizer *wf__bpe_alloc(void);
/* Builds the derived tables from the model/added/pre-tokenizer fields.
 * `where` prefixes error messages (the file name). */
wf_status wf__bpe_build(wf_tokenizer *t, const char *where);

/* Looks up a merge. */
static inline const wf_pair_slot *wf_bpe_pair_find(const wf_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint64_t bit = h >> t->filter_shift;
    if (!(t->pair_filter[bit >> 6] >> (bit & 63) & 1)) return NULL;
    size_t mask = t->pairs_cap - 1, i = (size_t)(h >> 32) & mask;
    for (;;) {
        const wf_pair_slot *s = &t->pairs[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & mask;
    }
}

/* Default special tokens, in id order after the merges. */
extern const char *const wf__bpe_default_specials[3];

#endif
