/* Internals of the web-text pipeline (src/prep/): the stages' shared
 * types, the input readers, the hash sets of the dedup stages and the
 * stats counters. Not a public API: tests include it to reach the parts. */
#ifndef WEFT_PREP_IMPL_H
#define WEFT_PREP_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/dirlock.h"
#include "weft/fileio.h"
#include "weft/prep.h"

/* ---- stages and the reasons a document is dropped ---- */

#define PREP_STAGES(X)                 \
    X(ST_READ, "read")                 \
    X(ST_EXTRACT, "extract")           \
    X(ST_NORMALIZE, "normalize")       \
    X(ST_DEDUP, "dedup")               \
    X(ST_LANGID, "langid")             \
    X(ST_QUALITY, "quality")           \
    X(ST_MINHASH, "minhash")           \
    X(ST_PERPLEXITY, "perplexity")     \
    X(ST_OUTPUT, "output")
typedef enum {
#define PREP_STAGE_ENUM_(e, s) e,
    PREP_STAGES(PREP_STAGE_ENUM_)
#undef PREP_STAGE_ENUM_
    ST_COUNT
} prep_stage;

/* X(enum, stage, name): every reason a document can be dropped. The quality
 * rules are in the order they are checked; a document counts under the
 * first rule it fails. */
#define PREP_REASONS(X)                                      \
    X(R_MALFORMED, ST_READ, "malformed_record")              \
    X(R_TOO_LARGE, ST_READ, "too_large")                     \
    X(R_BAD_JSON, ST_READ, "bad_json")                       \
    X(R_NO_FIELD, ST_READ, "missing_field")                  \
    X(R_HTTP_STATUS, ST_EXTRACT, "http_status")              \
    X(R_CONTENT_TYPE, ST_EXTRACT, "content_type")            \
    X(R_BAD_HTTP, ST_EXTRACT, "bad_http")                    \
    X(R_EXTRACT_EMPTY, ST_EXTRACT, "empty")                  \
    X(R_BINARY, ST_NORMALIZE, "binary")                      \
    X(R_INVALID_UTF8, ST_NORMALIZE, "invalid_utf8")          \
    X(R_NORM_EMPTY, ST_NORMALIZE, "empty")                   \
    X(R_ALL_DUP, ST_DEDUP, "all_duplicate")                  \
    X(R_LOW_CONF, ST_LANGID, "low_confidence")               \
    X(R_LANGUAGE, ST_LANGID, "language_not_kept")            \
    X(R_Q_LOREM, ST_QUALITY, "c4_lorem_ipsum")               \
    X(R_Q_CURLY, ST_QUALITY, "c4_curly_bracket")             \
    X(R_Q_LINES_EMPTY, ST_QUALITY, "c4_no_lines_left")       \
    X(R_Q_SENTENCES, ST_QUALITY, "c4_min_sentences")         \
    X(R_Q_MIN_WORDS, ST_QUALITY, "min_words")                \
    X(R_Q_MAX_WORDS, ST_QUALITY, "max_words")                \
    X(R_Q_WORD_LEN, ST_QUALITY, "mean_word_len")             \
    X(R_Q_SYMBOLS, ST_QUALITY, "symbol_word_ratio")          \
    X(R_Q_BULLETS, ST_QUALITY, "bullet_lines")               \
    X(R_Q_ELLIPSIS, ST_QUALITY, "ellipsis_lines")            \
    X(R_Q_ALPHA, ST_QUALITY, "alpha_words")                  \
    X(R_Q_STOP, ST_QUALITY, "stop_words")                    \
    X(R_Q_DIGITS, ST_QUALITY, "digit_ratio")                 \
    X(R_Q_DUP_LINES, ST_QUALITY, "dup_line_frac")            \
    X(R_Q_DUP_PARAS, ST_QUALITY, "dup_para_frac")            \
    X(R_Q_DUP_LINE_CHARS, ST_QUALITY, "dup_line_char_frac")  \
    X(R_Q_DUP_PARA_CHARS, ST_QUALITY, "dup_para_char_frac")  \
    X(R_Q_TOP2, ST_QUALITY, "top_2gram")                     \
    X(R_Q_TOP3, ST_QUALITY, "top_3gram")                     \
    X(R_Q_TOP4, ST_QUALITY, "top_4gram")                     \
    X(R_Q_DUP5, ST_QUALITY, "dup_5gram")                     \
    X(R_Q_DUP6, ST_QUALITY, "dup_6gram")                     \
    X(R_Q_DUP7, ST_QUALITY, "dup_7gram")                     \
    X(R_Q_DUP8, ST_QUALITY, "dup_8gram")                     \
    X(R_Q_DUP9, ST_QUALITY, "dup_9gram")                     \
    X(R_Q_DUP10, ST_QUALITY, "dup_10gram")                   \
    X(R_NEAR_DUP, ST_MINHASH, "near_duplicate")              \
    X(R_TAIL, ST_PERPLEXITY, "tail")
typedef enum {
    R_NONE = -1,
#define PREP_REASON_ENUM_(e, st, s) e,
    PREP_REASONS(PREP_REASON_ENUM_)
#undef PREP_REASON_ENUM_
    R_COUNT
} prep_reason;

/* X(enum, stage, name): counters other than documents and bytes. */
#define PREP_EXTRAS(X)                                       \
    X(E_INPUTS, ST_READ, "inputs")                           \
    X(E_INPUT_BYTES, ST_READ, "input_bytes")                 \
    X(E_RECORDS, ST_READ, "records")                         \
    X(E_RECORDS_SKIPPED, ST_READ, "records_not_documents")   \
    X(E_INPUTS_DAMAGED, ST_READ, "inputs_damaged")           \
    X(E_REPAIRED, ST_NORMALIZE, "docs_utf8_repaired")        \
    X(E_UNITS, ST_DEDUP, "units")                            \
    X(E_UNITS_REMOVED, ST_DEDUP, "units_removed")            \
    X(E_DEDUP_FULL, ST_DEDUP, "hashes_not_stored_table_full")\
    X(E_Q_SKIPPED, ST_QUALITY, "docs_not_checked_language")  \
    X(E_LINES_REMOVED, ST_QUALITY, "c4_lines_removed")       \
    X(E_MH_NO_WORDS, ST_MINHASH, "docs_without_words")       \
    X(E_MH_CHARS, ST_MINHASH, "docs_char_shingles")          \
    X(E_MH_FULL, ST_MINHASH, "keys_not_stored_table_full")   \
    X(E_HEAD, ST_PERPLEXITY, "head")                         \
    X(E_MIDDLE, ST_PERPLEXITY, "middle")                     \
    X(E_TAILS, ST_PERPLEXITY, "tail")                        \
    X(E_JSON_BYTES, ST_OUTPUT, "jsonl_bytes")                \
    X(E_SHARDS, ST_OUTPUT, "shards")
typedef enum {
#define PREP_EXTRA_ENUM_(e, st, s) e,
    PREP_EXTRAS(PREP_EXTRA_ENUM_)
#undef PREP_EXTRA_ENUM_
    E_COUNT
} prep_extra;

const char *wf__prep_stage_name(int st);
const char *wf__prep_reason_name(int r);
int wf__prep_reason_stage(int r);
const char *wf__prep_extra_name(int e);
int wf__prep_extra_stage(int e);

/* ---- a set of 64-bit hashes with a memory cap ---- */

/* Open addressing, linear probing. 0 is stored as 1 (a 2^-64 collision).
 * The table doubles up to max_bytes; when it is that big and 90% full,
 * inserts are refused (wf__prep_u64set_insert returns -1) and counted by the
 * caller: dedup then only checks against what it already holds. */
typedef struct {
    uint64_t *slots;
    size_t cap, n, max_cap;
} u64set;
wf_status wf__prep_u64set_init(u64set *s, size_t max_bytes);
void wf__prep_u64set_free(u64set *s);
int wf__prep_u64set_contains(const u64set *s, uint64_t h);
/* 1: inserted, 0: already there, -1: table full (not inserted). */
int wf__prep_u64set_insert(u64set *s, uint64_t h);

/* ---- input readers ---- */

typedef enum { REC_TEXT = 0, REC_HTTP, REC_HTML } prep_rec_kind;

/* One record of an input, as the reader gives it. Pointers stay valid
 * until the next wf__prep_reader_next. */
typedef struct {
    int kind;               /* prep_rec_kind: plain text, an HTTP response, bare HTML */
    const char *data;       /* the payload (WARC block, JSONL field, text) */
    size_t len;
    const char *url;        /* NUL-terminated, or NULL */
    uint64_t index;         /* record number in its input, from 0 */
    int drop;               /* R_NONE, or why the reader refuses it (data may be empty) */
} prep_record;

typedef struct prep_reader prep_reader;

/* Opens an input; the format comes from its contents (WARC) and name
 * (.jsonl), compression from its magic bytes (gzip, zstd). */
wf_status wf__prep_reader_open(prep_reader **out, const char *path, const wf_prep_config *c);
/* Next record: *eof set at the end. Records that are not documents (WARC
 * requests, metadata, warcinfo) are skipped and counted in *skipped.
 * A damaged input (truncated compression, read error) ends early with a
 * warning and sets *damaged; only an unreadable file is an error. */
wf_status wf__prep_reader_next(prep_reader *r, prep_record *rec, int *eof);
uint64_t wf__prep_reader_consumed(const prep_reader *r); /* on-disk bytes */
uint64_t wf__prep_reader_skipped(const prep_reader *r);
int wf__prep_reader_damaged(const prep_reader *r);
void wf__prep_reader_close(prep_reader *r);

/* An HTTP response (WARC response block): status, media type, charset and
 * the body, de-chunked and decompressed into `body`. Returns R_NONE or the
 * reason to drop it (R_HTTP_STATUS, R_CONTENT_TYPE, R_BAD_HTTP). *is_html
 * says whether the body is HTML (else plain text). */
int wf__prep_http_parse(const char *data, size_t len, size_t max_body, wf_buf *body, int *is_html,
                    char charset[32]);

/* Converts `*s` from `charset` to UTF-8 in `out` when the charset is known
 * and not UTF-8; returns 1 if it converted. Unknown charsets: 0. */
int wf__prep_to_utf8(const char *s, size_t len, const char *charset, wf_buf *out);
/* The charset an HTML document declares in <meta> in its first bytes. */
void wf__prep_html_sniff_charset(const char *html, size_t len, char charset[32]);

/* ---- quality ---- */

/* Applies the C4 line filters to `text` (in place) and then the document
 * rules, with the settings of one rule set. Returns R_NONE if the document
 * is kept, else the first failed rule. *lines_removed counts the lines the
 * line filters took out. */
int wf__prep_quality(const wf_prep_rules *q, wf_buf *text, uint64_t *lines_removed);

/* The word s[0, n) in lower case (Unicode simple case mapping), into out
 * (NUL-terminated); returns its length, or 0 when it does not fit in cap
 * or is not valid UTF-8. */
size_t wf__prep_word_lower(const char *s, size_t n, char *out, size_t cap);

/* X(key, type, field, default, range, help): the keys of [quality] that a
 * language's table [quality.<lang>] can change too (field: of
 * wf_prep_rules; range: WF_NO_RANGE or PREP_RANGE(min, max)). The option
 * table of prep_config.c and the rule sets of quality_langs.c are made
 * from it. */
#define PREP_RANGE(lo, hi) lo, hi
#define PREP_RULE_KEYS(X)                                                                                  \
    X("min_words", WF_OPT_INT, min_words, "50", PREP_RANGE(0, 1e12),                                      \
      "Gopher: fewest words (that are not only punctuation)")                                              \
    X("max_words", WF_OPT_INT, max_words, "100000", PREP_RANGE(0, 1e12), "Gopher: most words")            \
    X("min_mean_word_len", WF_OPT_FLOAT, min_mean_word_len, "3", PREP_RANGE(0, 1e6),                      \
      "Gopher: shortest mean word length (characters)")                                                    \
    X("max_mean_word_len", WF_OPT_FLOAT, max_mean_word_len, "10", PREP_RANGE(0, 1e6),                     \
      "Gopher: longest mean word length")                                                                  \
    X("max_symbol_word_ratio", WF_OPT_FLOAT, max_symbol_word_ratio, "0.1", PREP_RANGE(0, 1e6),            \
      "Gopher: most '#' and '...' per word (each counted separately)")                                     \
    X("max_bullet_lines", WF_OPT_FLOAT, max_bullet_lines, "0.9", PREP_RANGE(0, 1),                        \
      "Gopher: largest fraction of lines starting with a bullet")                                          \
    X("max_ellipsis_lines", WF_OPT_FLOAT, max_ellipsis_lines, "0.3", PREP_RANGE(0, 1),                    \
      "Gopher: largest fraction of lines ending with an ellipsis")                                         \
    X("min_alpha_words", WF_OPT_FLOAT, min_alpha_words, "0.8", PREP_RANGE(0, 1),                          \
      "Gopher: smallest fraction of words with a letter")                                                  \
    X("min_stop_words", WF_OPT_INT, min_stop_words, "2", PREP_RANGE(0, 1e9),                              \
      "Gopher: fewest stop words (from the language's stop_words, matched in lower case)")                 \
    X("max_digit_ratio", WF_OPT_FLOAT, max_digit_ratio, "0.25", PREP_RANGE(0, 1),                         \
      "largest fraction of non-space characters that are digits")                                          \
    X("max_dup_line_frac", WF_OPT_FLOAT, max_dup_line_frac, "0.3", PREP_RANGE(0, 1),                      \
      "Gopher: largest fraction of lines that repeat an earlier line")                                     \
    X("max_dup_para_frac", WF_OPT_FLOAT, max_dup_para_frac, "0.3", PREP_RANGE(0, 1),                      \
      "Gopher: largest fraction of paragraphs that repeat an earlier one")                                 \
    X("max_dup_line_char_frac", WF_OPT_FLOAT, max_dup_line_char_frac, "0.2", PREP_RANGE(0, 1),            \
      "Gopher: largest fraction of characters in repeated lines")                                          \
    X("max_dup_para_char_frac", WF_OPT_FLOAT, max_dup_para_char_frac, "0.2", PREP_RANGE(0, 1),            \
      "Gopher: largest fraction of characters in repeated paragraphs")                                     \
    X("max_top_2gram", WF_OPT_FLOAT, max_top_ngram[0], "0.2", PREP_RANGE(0, 1),                           \
      "Gopher: largest fraction of word characters in the most frequent word 2-gram")                      \
    X("max_top_3gram", WF_OPT_FLOAT, max_top_ngram[1], "0.18", PREP_RANGE(0, 1),                          \
      "Gopher: the same for 3-grams")                                                                      \
    X("max_top_4gram", WF_OPT_FLOAT, max_top_ngram[2], "0.16", PREP_RANGE(0, 1),                          \
      "Gopher: the same for 4-grams")                                                                      \
    X("max_dup_5gram", WF_OPT_FLOAT, max_dup_ngram[0], "0.15", PREP_RANGE(0, 1),                          \
      "Gopher: largest fraction of word characters in repeated word 5-grams")                              \
    X("max_dup_6gram", WF_OPT_FLOAT, max_dup_ngram[1], "0.14", PREP_RANGE(0, 1), "Gopher: 6-grams")       \
    X("max_dup_7gram", WF_OPT_FLOAT, max_dup_ngram[2], "0.13", PREP_RANGE(0, 1), "Gopher: 7-grams")       \
    X("max_dup_8gram", WF_OPT_FLOAT, max_dup_ngram[3], "0.12", PREP_RANGE(0, 1), "Gopher: 8-grams")       \
    X("max_dup_9gram", WF_OPT_FLOAT, max_dup_ngram[4], "0.11", PREP_RANGE(0, 1), "Gopher: 9-grams")       \
    X("max_dup_10gram", WF_OPT_FLOAT, max_dup_ngram[5], "0.10", PREP_RANGE(0, 1), "Gopher: 10-grams")     \
    X("c4_terminal_punct", WF_OPT_BOOL, c4_terminal_punct, "true", WF_NO_RANGE,                           \
      "C4: remove lines that do not end in terminal punctuation (. ! ? \" ' an ellipsis, closing "       \
      "quotes, and the full stops of other scripts: CJK, Devanagari, Arabic, ...)")                        \
    X("c4_min_words_per_line", WF_OPT_INT, c4_min_words_per_line, "3", PREP_RANGE(0, 1e9),                \
      "C4: remove lines with fewer words (0: off)")                                                        \
    X("c4_javascript", WF_OPT_BOOL, c4_javascript, "true", WF_NO_RANGE,                                   \
      "C4: remove lines that mention javascript")                                                          \
    X("c4_min_sentences", WF_OPT_INT, c4_min_sentences, "5", PREP_RANGE(0, 1e9),                          \
      "C4: drop documents with fewer sentences left (0: off)")                                             \
    X("c4_lorem_ipsum", WF_OPT_BOOL, c4_lorem_ipsum, "true", WF_NO_RANGE,                                 \
      "C4: drop documents containing \"lorem ipsum\"")                                                     \
    X("c4_curly_bracket", WF_OPT_BOOL, c4_curly_bracket, "false", WF_NO_RANGE,                            \
      "C4: drop documents containing '{' (C4 did; off by default as it drops all pages about code)")

/* The settings a [quality.<lang>] table can give: every key of
 * PREP_RULE_KEYS, then stop_words and word_rules; offset: in
 * wf_prep_rules. */
typedef struct {
    const char *key;
    wf_opt_type type;
    size_t offset;
} prep_rule_field;
const prep_rule_field *wf__prep_rule_fields(size_t *n);

/* A rule set: the settings that judge the documents of one language. */
typedef struct {
    char lang[16];     /* the language it judges; "default": every language without its own */
    char name[16];     /* its name in the stats: the language, "no_spaces" or "default" */
    wf_prep_rules r;   /* stop words owned */
} prep_rule_set;

typedef struct {
    prep_rule_set *v;  /* sorted by lang */
    size_t n;
} prep_rule_sets;

/* The rule set of every language that has settings of its own (built in,
 * or a [quality.<lang>] table) and "default": [quality]'s values, then
 * the built-in ones of the language, then its table's. */
wf_status wf__prep_rules_build(const wf_prep_config *c, prep_rule_sets *out);
/* The rule set that judges `lang`: its own, else "default". */
const prep_rule_set *wf__prep_rules_find(const prep_rule_sets *s, const char *lang);
void wf__prep_rules_free(prep_rule_sets *s);

/* The default of minhash.char_languages: the languages written without
 * spaces between words, whose documents MinHash shingles on characters
 * (docs/prep.md). The same languages as the built-in rule sets no_spaces,
 * th and lo of quality_langs.c (a unit test checks that they agree). */
#define PREP_CHAR_SHINGLE_LANGS "zh,zh-Hant,ja,th,km,my,lo,bo,dz"

/* ---- language id ---- */

/* Whether `code` is a language code CLD2 can give (wf_langid_detect). */
int wf__prep_langid_known(const char *code);

/* ---- MinHash LSH ---- */

/* The band keys of a signature (n_bands of them): each the hash of its
 * `rows` entries, salted by the band's number. */
void wf__prep_minhash_bands(const uint64_t *sig, int bands, int rows, uint64_t *keys);

/* ---- perplexity ---- */

typedef struct prep_ppl prep_ppl;
wf_status wf__prep_ppl_open(prep_ppl **out, const char *model_path, const char *tokenizer_path,
                        int64_t max_tokens, int threads);
/* Mean per-token loss (nats) of a document under the model: its tokens
 * after an end-of-text token, at most max_tokens of them, in windows of the
 * model's max_seq_len. *n_tokens: how many were scored (0: empty). */
wf_status wf__prep_ppl_score(prep_ppl *p, const char *text, size_t len, double *loss, int64_t *n_tokens);
void wf__prep_ppl_close(prep_ppl *p);

/* ---- stats ---- */

/* The steps of a run (pipeline.c, prep_step_*.c, docs/prep.md "Tasks and
 * steps"): each a set of units that any task may do. */
#define PREP_STEPS(X)            \
    X(PS_EXTRACT, "extract")     \
    X(PS_DEDUP, "dedup")         \
    X(PS_FILTER, "filter")       \
    X(PS_LSH, "lsh")             \
    X(PS_CLUSTER, "cluster")     \
    X(PS_OUTPUT, "output")       \
    X(PS_FINISH, "finish")
typedef enum {
#define PREP_STEP_ENUM_(e, s) e,
    PREP_STEPS(PREP_STEP_ENUM_)
#undef PREP_STEP_ENUM_
    PS_COUNT
} prep_step;
const char *wf__prep_step_name(int step);

typedef struct {
    char code[16];
    uint64_t docs, bytes;
} prep_lang_count;

/* Perplexity histogram: log10(perplexity) in [0, 8) by 0.01. */
#define PREP_PPL_BINS 800

/* The quality stage's documents of one language: which rule set judged
 * them ("none": not checked, quality.languages), how many came in, went
 * on, and were dropped by each rule. */
typedef struct {
    char lang[16], rule_set[16];
    uint64_t docs_in, docs_out;
    uint64_t drop[R_COUNT];
} prep_quality_lang;

typedef struct {
    uint64_t docs_in[ST_COUNT], docs_out[ST_COUNT], bytes_in[ST_COUNT], bytes_out[ST_COUNT];
    uint64_t drop_docs[R_COUNT], drop_bytes[R_COUNT];
    uint64_t extra[E_COUNT];
    double seconds[ST_COUNT]; /* thread-seconds spent in each stage */
    double wall_seconds;
    prep_lang_count *langs;   /* documents written per language, sorted by code */
    size_t n_langs;
    prep_quality_lang *qlangs; /* the quality stage per language, sorted by code */
    size_t n_qlangs;
    uint64_t ppl_hist[PREP_PPL_BINS];
    double step_seconds[PS_COUNT]; /* wall seconds of the units of each step, summed */
    uint64_t step_units[PS_COUNT]; /* units of each step done (by every task) */
    uint64_t step_bytes[PS_COUNT]; /* bytes each step read: inputs, intermediate files */
} prep_stats;

/* Adds a document whose life ended (dropped at stage `last` for
 * `drop_reason`, or written: last = ST_OUTPUT, drop_reason = R_NONE) to
 * the stage counters, with at[st] the bytes that entered stage st. */
void wf__prep_stats_account(prep_stats *s, int last, int drop_reason, const uint64_t *at);
/* Adds src's counters to dst (languages matched by code). */
wf_status wf__prep_stats_merge(prep_stats *dst, const prep_stats *src);
/* One unit's counters: OUT/_prep/stats/<step>.<unit>.json. */
wf_status wf__prep_partial_write(const char *path, const prep_stats *st);
wf_status wf__prep_partial_read(const char *path, prep_stats *st);

void wf__prep_stats_free(prep_stats *s);
wf_status wf__prep_stats_add_lang(prep_stats *s, const char *code, uint64_t docs, uint64_t bytes);
/* The quality counters of language `code` (added, with `rule_set`, if new);
 * NULL when out of memory. */
prep_quality_lang *wf__prep_stats_qlang(prep_stats *s, const char *code, const char *rule_set);

/* ---- vectors and reports ---- */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} u64vec;
wf_status wf__prep_u64vec_push(u64vec *v, uint64_t x);
void wf__prep_u64vec_free(u64vec *v);
/* Sorts v in place, ascending; _unique also drops repeats. */
void wf__prep_u64vec_sort(u64vec *v);
void wf__prep_u64vec_sort_unique(u64vec *v);

/* Deletes what a prep run writes in dir (and nothing else). */
wf_status wf__prep_output_wipe(const char *dir);

typedef struct {
    size_t n_inputs, inputs_done;
    int complete;
    int tasks;          /* how many tasks the run was split into */
} prep_progress_state;

/* stats.json and stats.txt. */
wf_status wf__prep_stats_write(const char *dir, const wf_prep_config *c, const prep_progress_state *ps,
                           const prep_stats *st);


/* ---- intermediate files of a run's steps (prep_inter.c) ----
 * Format: docs/formats/prep-intermediate.md. A 32-byte header (magic,
 * version, kind, payload bytes, XXH3-64 of the payload), then records,
 * little-endian. */

#define PREP_INTER_MAGIC "weftprep"
#define PREP_INTER_VERSION 1
enum { PI_DOCS = 1, PI_HASHES, PI_DROPS, PI_BANDS, PI_EDGES, PI_CLUSTER, PI_INDEX, PI_BLOB, PI_KIND_COUNT };
const char *wf__prep_inter_kind_name(int kind);

/* Writer: a temporary file renamed to `path` by commit. */
typedef struct {
    FILE *fp;
    char *path, *tmp;
    void *h;             /* wf_hasher */
    uint64_t bytes;
    int kind;
} prep_iw;
wf_status wf__prep_iw_open(prep_iw *w, const char *path, int kind);
wf_status wf__prep_iw_write(prep_iw *w, const void *p, size_t n);
wf_status wf__prep_iw_u32(prep_iw *w, uint32_t x);
wf_status wf__prep_iw_u64(prep_iw *w, uint64_t x);
wf_status wf__prep_iw_commit(prep_iw *w);
void wf__prep_iw_abort(prep_iw *w); /* accepts a zeroed or committed writer */

/* Reader: the whole file in memory, header and checksum checked. */
typedef struct {
    const char *data;
    size_t len, pos;
    const char *what;    /* the file, for messages */
    char *owned, *path;
} prep_ir;
wf_status wf__prep_ir_load(prep_ir *r, const char *path, int kind);
/* Checks the header of `len` bytes of `kind` (fuzz target, tests). */
wf_status wf__prep_ir_parse(prep_ir *r, const char *what, const char *data, size_t len, int kind);
void wf__prep_ir_free(prep_ir *r);
int wf__prep_ir_end(const prep_ir *r);
wf_status wf__prep_ir_bytes(prep_ir *r, const char **p, size_t n, const char *what);
wf_status wf__prep_ir_u32(prep_ir *r, uint32_t *x, const char *what);
wf_status wf__prep_ir_u64(prep_ir *r, uint64_t *x, const char *what);

/* A document between steps: text and url point into the reader's data. */
typedef struct {
    uint64_t index;           /* record number in its input */
    uint64_t at[ST_COUNT];    /* bytes entering each stage so far */
    double conf;              /* language confidence */
    char lang[16];            /* "" before langid (written as "und") */
    const char *url, *text;
    uint32_t url_len, text_len;
} prep_idoc;
wf_status wf__prep_iw_doc(prep_iw *w, const prep_idoc *d);
wf_status wf__prep_ir_doc(prep_ir *r, prep_idoc *d);

/* Streaming reader: a file of any size read `chunk` bytes at a time, so a
 * step's memory does not grow with its input. The header and size are
 * checked at open; the checksum when the last byte is read (before the
 * records of that read are returned), or, with verify_first, over the
 * whole file at open (for steps that publish what they read before the
 * end). Records point into the reader's buffer until the next call. */
typedef struct {
    FILE *fp;
    int own_fp, verified;
    char *what;                 /* the file, for messages */
    void *h;                    /* wf_hasher */
    uint64_t total, left, sum;  /* payload bytes; not read yet; checksum */
    size_t chunk, pos;          /* read size; next unread byte of buf */
    wf_buf buf;
} prep_dr;
wf_status wf__prep_dr_open(prep_dr *r, const char *path, int kind, size_t chunk, int verify_first);
/* On an open stream positioned at the header (fuzz target, tests). */
wf_status wf__prep_dr_open_fp(prep_dr *r, FILE *fp, const char *what, int kind, size_t chunk, int verify_first);
void wf__prep_dr_close(prep_dr *r);
int wf__prep_dr_end(const prep_dr *r);
uint64_t wf__prep_dr_offset(const prep_dr *r); /* payload bytes returned so far */
wf_status wf__prep_dr_doc(prep_dr *r, prep_idoc *d);
/* Up to `max` (> 0) of the next bytes, at least one unless at the end. */
wf_status wf__prep_dr_bytes(prep_dr *r, const char **p, size_t *got, size_t max);

/* One compressed piece of an output unit's JSONL for (lang, bucket): bytes
 * [off, off + len) of the unit's blob, `raw` bytes of JSONL. */
typedef struct {
    char lang[16], bucket[8];
    uint64_t raw, off, len;
} prep_piece;
wf_status wf__prep_iw_piece(prep_iw *w, const prep_piece *p);
wf_status wf__prep_ir_piece(prep_ir *r, prep_piece *p);

/* ---- a run and its steps (pipeline.c, prep_step_<name>.c, prep_batch.c) ----
 * pipeline.c runs the steps of PREP_STEPS over their units (claims, the
 * completion markers, run.json); each step is one function in its own
 * file, called from pipeline.c's table with the unit to do. */

/* A document's global id: its input and its number there. */
#define PREP_GID(in, pos) ((uint64_t)(in) << 32 | (uint64_t)(pos))

/* Most documents in one batch (and at most batch_mb of them). */
#define PREP_BATCH_MAX_DOCS 8192

typedef struct {
    /* from the reader */
    int kind, reader_drop;
    size_t input;                  /* which input it came from */
    uint64_t index;
    wf_buf raw, url;
    /* work */
    wf_buf text, tmp, norm;
    int drop, last;                /* drop reason (R_NONE) and the last stage reached */
    uint64_t at[ST_COUNT];         /* bytes entering each stage */
    double t[ST_COUNT];            /* seconds in each stage */
    int repaired, q_skipped, mh_no_words, mh_chars;
    int rule_set;                  /* the rule set that judged it (index in prep_run.rules), -1: none */
    uint64_t lines_removed;
    /* dedup units: text[off, off + len) */
    size_t *unit_off, *unit_len;
    uint64_t *unit_hash;           /* 0: never removed */
    unsigned char *unit_dup;
    size_t n_units, unit_cap, units_removed;
    /* langid */
    char lang[16];
    double lang_conf;
    /* minhash */
    uint64_t *sig, *keys;
    int has_keys;
    /* perplexity */
    double ppl;
    int bucket;                    /* -1 none, 0 head, 1 middle, 2 tail */
    uint32_t pos;                  /* its number in the step's input file */
} pdoc;

typedef struct {
    const wf_prep_config *c;
    const char *const *inputs;
    size_t n_inputs;
    uint64_t *sizes;
    int threads;
    wf_normalize_opts nopts;
    prep_ppl *ppl;
    prep_rule_sets rules;          /* the quality rule sets */
    pdoc *docs;
    size_t n_docs, docs_cap;
    atomic_size_t next;
    wf_buf line;
    int n_hashes;
    size_t max_doc;
    int tasks, task;               /* this task: task of tasks */
    long array_id, array_min;      /* SLURM_ARRAY_TASK_ID and _MIN, or -1 when not a Slurm array task */
    int ranges;                    /* units of the dedup step */
    int bands, lsh_ranges;         /* the lsh step's units: bands x lsh_ranges */
    char pdir[WF_PATH_MAX];        /* OUT/_prep */
    double started;                /* the run's start (run.json), epoch seconds */
    prep_stats st;                 /* the counters of the unit being done */
    wf_dirlock *lock;              /* this task's lock (the output directory's with one task) */
} prep_run;

/* Does unit `unit` of a step: reads the files of the steps before it,
 * writes its own (under temporary names, renamed at the end) and counts
 * into r->st. */
typedef wf_status (*prep_step_fn)(prep_run *r, size_t unit);
wf_status wf__prep_step_extract(prep_run *r, size_t in);
wf_status wf__prep_step_dedup(prep_run *r, size_t range);
wf_status wf__prep_step_filter(prep_run *r, size_t in);
wf_status wf__prep_step_lsh(prep_run *r, size_t unit);
wf_status wf__prep_step_cluster(prep_run *r, size_t unit);
wf_status wf__prep_step_output(prep_run *r, size_t in);
wf_status wf__prep_step_finish(prep_run *r, size_t unit);

/* How many units a step has. */
size_t wf__prep_step_units(const prep_run *r, int step);
/* The path of a run's file: OUT/_prep/ followed by fmt
 * (docs/formats/prep-intermediate.md). */
void wf__prep_run_path(const prep_run *r, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The edges file of lsh unit u: band u / R, key range u % R. */
void wf__prep_lsh_edges_path(const prep_run *r, size_t unit, char *path, size_t size);
/* The read size of the streamed intermediate files (read_kb). */
size_t wf__prep_read_chunk(const prep_run *r);
/* The wall clock, epoch seconds (run.json's start, the run's wall time). */
double wf__prep_epoch_now(void);
/* The test hook of the killed-task tests (WEFT_PREP_CRASH, pipeline.c). */
void wf__prep_maybe_crash(int step, size_t unit);

/* Splits d's text into dedup units (lines, or blank-line separated
 * blocks): what the dedup step's records number. */
wf_status wf__prep_dedup_split(const prep_run *r, pdoc *d);

/* A batch of documents (prep_batch.c). A slot keeps its buffers from batch
 * to batch: wf__prep_batch_slot gives the next one, reset;
 * wf__prep_batch_clear empties the batch; wf__prep_batch_free frees every
 * slot (the run's end). */
wf_status wf__prep_batch_slot(prep_run *r, pdoc **out);
void wf__prep_batch_clear(prep_run *r);
void wf__prep_batch_free(prep_run *r);
/* Calls fn on every document of the batch, on r->threads threads. */
typedef wf_status (*prep_doc_fn)(prep_run *r, pdoc *d);
wf_status wf__prep_batch_run(prep_run *r, prep_doc_fn fn);
/* d is dropped for `reason` (at the reason's stage). */
void wf__prep_doc_drop(pdoc *d, int reason);
/* Moves d's seconds per stage into the unit's counters. */
void wf__prep_doc_seconds(prep_run *r, pdoc *d);
void wf__prep_buf_swap(wf_buf *a, wf_buf *b);
/* Whether s[0, n) is only ASCII white space (or empty). */
int wf__prep_all_space(const char *s, size_t n);
#endif
