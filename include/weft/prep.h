/* weft: the web-text pipeline (`weft prep`), after CCNet and RefinedWeb.
 *
 * Crawled pages in, clean documents out:
 *
 *   read ....... WARC (HTML responses), WET (.warc.wet.gz), JSONL, plain text;
 *                gzip or zstd compressed or not; bad records skipped and counted
 *   extract .... HTTP body -> UTF-8 -> text, with a real HTML5 parser (gumbo)
 *   normalize .. UTF-8 repair, binary detection, Unicode NFC/NFKC (utf8proc),
 *                line cleanup
 *   dedup ...... exact paragraph dedup across all inputs (CCNet): hashes of
 *                normalized paragraphs, the first occurrence wins
 *   langid ..... CLD2, per-language outputs, a confidence threshold
 *   quality .... Gopher and C4 rules (words, symbols, repetition, lines),
 *                with a rule set per language (stop words, thresholds)
 *   minhash .... near-duplicate documents by MinHash + LSH, first one kept
 *   perplexity . optional: per-token loss under a weft model, head/middle/tail
 *   output ..... JSONL.zst shards per language (and bucket) + a stats report
 *
 * Every decision that depends on order (dedup, minhash clusters, shards)
 * follows input order, so the output is the same for any thread count and
 * any number of tasks: a run is a sequence of steps whose units any number
 * of processes (--tasks/--task, Slurm arrays, MPI ranks) share through the
 * output directory, and a rerun of the same command does only the units
 * not complete. The formats are in docs/formats/prep-output.md and
 * prep-intermediate.md,
 * the stages and every option in docs/prep.md.
 */
#ifndef WEFT_PREP_H
#define WEFT_PREP_H

#include <stddef.h>
#include <stdint.h>

#include "weft/buf.h"
#include "weft/config.h"
#include "weft/status.h"

/* The settings of the quality rules. [quality] gives them for every
 * language; a language's rule set changes some: the built-in ones (stop
 * words; the rules that count words off for languages written without
 * spaces) and then the user's [quality.<lang>] table (docs/prep.md). */
typedef struct {
    int word_rules;          /* apply the rules that count words (C4's words per line, Gopher's words,
                                word length, '#' and '...' per word, alphabetic words, stop words,
                                n-grams); off: they pass unchecked. Set per rule set (in
                                wf_prep_config.rules: unused) */
    int64_t min_words, max_words;
    double min_mean_word_len, max_mean_word_len;
    double max_symbol_word_ratio, max_bullet_lines, max_ellipsis_lines, min_alpha_words;
    int64_t min_stop_words;
    wf_strs stop_words;      /* lower case; empty: the stop-word rule is off */
    double max_digit_ratio;
    double max_dup_line_frac, max_dup_para_frac, max_dup_line_char_frac, max_dup_para_char_frac;
    double max_top_ngram[3];  /* n = 2, 3, 4 */
    double max_dup_ngram[6];  /* n = 5 .. 10 */
    int c4_terminal_punct, c4_javascript, c4_lorem_ipsum, c4_curly_bracket;
    int64_t c4_min_words_per_line, c4_min_sentences;
} wf_prep_rules;

/* Every key of a prep config (TOML sections [input], [normalize], ...):
 * wf_prep_spec() is the table with defaults, ranges and help. */
typedef struct {
    /* top level */
    char *output;            /* output directory (required) */
    int64_t threads;         /* 0: WEFT_THREADS or every CPU */
    int64_t batch_mb;        /* raw bytes read per batch: bounds memory */
    int64_t read_kb;         /* KiB read at a time from intermediate files */
    double checkpoint_mb;    /* unused (runs resume by unit); kept so that old configs load */
    double lock_stale_s;     /* another host's output lock older than this is stale (include/weft/dirlock.h) */
    int force;               /* discard a previous run's output instead of resuming */
    int64_t tasks;           /* tasks sharing the run (0: from Slurm or MPI's environment, else 1) */
    int64_t task;            /* this task, 0 .. tasks - 1 (-1: from the environment) */
    int json;                /* CLI: print the stats as JSON on stdout */
    /* [input] */
    char *text_mode;         /* plain text: file, paragraph or line */
    int unwrap;              /* plain text: join the lines of a paragraph */
    char *jsonl_field;       /* JSONL: the document's field */
    int64_t max_doc_mb;      /* larger records are dropped (too_large) */
    /* [normalize] */
    int normalize;           /* Unicode form and line cleanup (UTF-8 repair always runs) */
    char *unicode_form;      /* NFC, NFKC or none */
    char *invalid_utf8;      /* replace or drop */
    double max_control_ratio;/* above: binary (NUL bytes always are) */
    /* [dedup] */
    int dedup;
    char *dedup_unit;        /* line or paragraph */
    int64_t dedup_min_chars; /* shorter units (normalized) are never removed */
    int64_t dedup_max_mb;    /* memory of the hash table of one hash range */
    int64_t dedup_ranges;    /* hash ranges: units of the dedup step */
    /* [langid] */
    int langid;
    double lang_min_confidence;
    wf_strs languages;       /* kept languages; empty: all */
    /* [quality] */
    int quality;
    wf_strs quality_languages; /* languages the rules apply to; empty: all */
    wf_prep_rules rules;     /* [quality]: every rule set's base (but word_rules and stop_words, which
                                are set per language only) */
    wf_opt_named_list quality_langs; /* [quality.<lang>]: the values given per language */
    /* [minhash] */
    int minhash;
    int64_t mh_ngram, mh_bands, mh_rows, mh_seed, mh_max_mb;
    int64_t mh_ranges;       /* hash ranges per band: the lsh step's units are bands x ranges */
    int64_t mh_char_ngram;   /* code points per shingle for the languages of mh_char_languages */
    wf_strs mh_char_languages; /* languages shingled on characters (written without spaces); empty:
                                  words for every language */
    /* [perplexity] */
    char *ppl_model;         /* model.safetensors or its run dir; empty: stage off */
    char *ppl_tokenizer;     /* empty: the one recorded in the model file */
    int64_t ppl_max_tokens;
    double ppl_head_max, ppl_middle_max;
    int ppl_drop_tail;
    /* [output] */
    double shard_mb;         /* fractions allowed (tests use small shards) */
    int64_t zstd_level;
} wf_prep_config;

/* The option table of `weft prep`. */
const wf_cmd_spec *wf_prep_spec(void);

/* Fills `c` with every default (free with wf_prep_config_free). */
wf_status wf_prep_config_default(wf_prep_config *c);
void wf_prep_config_free(wf_prep_config *c);

/* Checks the values the table's ranges cannot (names of modes, bands and
 * rows, thresholds in order, the languages of [quality.<lang>] tables, in
 * each rule set too). WF_ERR_CONFIG naming the key. */
wf_status wf_prep_config_validate(const wf_prep_config *c);

/* Runs this task's part of the pipeline over the input files (in this
 * order) into c->output: task c->task of c->tasks (or from Slurm's or an
 * MPI launcher's environment), which does its own units, then any
 * unclaimed ones, and waits for the others', so that it returns when the
 * whole run is complete. Joins or resumes a run of the same config and
 * inputs found there; refuses (WF_ERR_CONFIG) one of another config or
 * number of tasks unless c->force (one task). When done, the stats are in
 * c->output/stats.json and stats.txt. */
wf_status wf_prep_run(const wf_prep_config *c, const char *const *inputs, size_t n_inputs);

/* ---- Stages on their own (for tests, benchmarks and other tools) ---- */

/* HTML (UTF-8) to text: one line per block element, inline whitespace
 * collapsed, <pre> kept as is; scripts, styles, <head> (but its <title>,
 * which becomes the first line) and other non-text elements left out.
 * Replaces the contents of `out`. */
wf_status wf_html_to_text(const char *html, size_t len, wf_buf *out);

/* Valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF)? */
int wf_utf8_valid(const char *s, size_t len);

/* Normalization options, from [normalize]. */
typedef struct {
    int form;            /* 0 none, 1 NFC, 2 NFKC */
    int cleanup;         /* line cleanup */
    int drop_invalid;    /* invalid UTF-8 drops the document instead of U+FFFD */
    double max_control_ratio;
} wf_normalize_opts;

typedef enum {
    WF_NORM_OK = 0,
    WF_NORM_BINARY,      /* NUL bytes or too many control characters */
    WF_NORM_INVALID,     /* invalid UTF-8 and drop_invalid */
    WF_NORM_EMPTY        /* nothing left */
} wf_norm_result;

/* Normalizes `len` bytes into `out` (replaced): invalid UTF-8 becomes
 * U+FFFD (*repaired set to 1), then the Unicode form, then the line
 * cleanup: CR LF and CR become LF, other control characters and zero-width
 * ones go, Unicode spaces become ' ', runs of spaces and tabs collapse to
 * one, lines are trimmed, more than one blank line in a row becomes one,
 * and blank lines at both ends go. */
wf_norm_result wf_text_normalize(const char *s, size_t len, const wf_normalize_opts *o, wf_buf *out,
                                 int *repaired);

/* CCNet's normalization for hashing a paragraph: lower case, accents
 * stripped, digits -> '0', punctuation removed, whitespace collapsed to
 * single spaces and trimmed. Input must be valid UTF-8. Replaces `out`. */
wf_status wf_dedup_normalize(const char *s, size_t len, wf_buf *out);

/* Language of valid UTF-8 text with CLD2: code[] gets the ISO 639 code
 * ("en", "zh-Hant", "un" when unknown), *confidence the fraction of the
 * text's letters in that language (0..1), *reliable CLD2's own verdict. */
void wf_langid_detect(const char *text, size_t len, char code[16], double *confidence, int *reliable);

/* MinHash signature of valid UTF-8 text: the minimum of n_hashes hash
 * functions (seeded by `seed`) over the hashes of its word n-grams (words
 * of the dedup normalization). Returns the number of n-grams (0: no words,
 * sig untouched). sig: (n_hashes). */
size_t wf_minhash_signature(const char *text, size_t len, int ngram, int n_hashes, uint64_t seed,
                            uint64_t *sig);

/* The longest shingle, in words or code points. */
#define WF_MINHASH_MAX_NGRAM 64

/* The same over character n-grams, for text written without spaces
 * between words: the dedup normalization (so punctuation, marks and
 * digits go as for words), its spaces left out, then every run of `ngram`
 * consecutive code points is a shingle (a text of fewer is one shingle).
 * Invalid UTF-8 is not an error (its bytes are skipped by the
 * normalization). Returns the number of shingles (0: no characters, or
 * ngram not in 1..WF_MINHASH_MAX_NGRAM; sig untouched). The same hash
 * functions as wf_minhash_signature for the same seed, so signatures of
 * both kinds compare, though their shingles rarely agree. */
size_t wf_minhash_signature_chars(const char *text, size_t len, int ngram, int n_hashes, uint64_t seed,
                                  uint64_t *sig);

/* Jaccard similarity estimate of two signatures: the fraction of equal
 * entries. */
double wf_minhash_similarity(const uint64_t *a, const uint64_t *b, int n_hashes);

#endif
