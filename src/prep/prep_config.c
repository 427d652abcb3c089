/* The configuration of `weft prep`: every key, its default (Gopher's and
 * C4's published values for the quality rules, CCNet's for language id),
 * range and meaning; the checks a range cannot express; and the names of
 * the stages, drop reasons and counters the stats report uses. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "prep/prep_impl.h"

#define O(field) offsetof(wf_prep_config, field)

static const wf_opt prep_opts[] = {
    {"output", NULL, WF_OPT_STR, O(output), NULL, WF_NO_RANGE,
     "output directory: <lang>/*.jsonl.zst shards, stats.json, stats.txt, _prep/ (resume state) (required)"},
    {"threads", NULL, WF_OPT_INT, O(threads), "0", 0, 4096,
     "worker threads (0: WEFT_THREADS or every CPU); the output does not depend on it"},
    {"batch_mb", NULL, WF_OPT_INT, O(batch_mb), "16", 1, 1 << 20,
     "MB of records read and processed together; with the two hash tables this bounds memory"},
    {"checkpoint_mb", NULL, WF_OPT_FLOAT, O(checkpoint_mb), "64", 0, 1e9,
     "checkpoint for resuming after the input that brings the input read since the last checkpoint "
     "to this many MB (0: after every input); a crash redoes at most the inputs since then"},
    {"force", NULL, WF_OPT_BOOL, O(force), "false", WF_NO_RANGE,
     "start over: delete the output of a previous run in the output directory instead of resuming"},
    {"json", NULL, WF_OPT_BOOL, O(json), "false", WF_NO_RANGE, "print the stats as JSON on stdout"},
    {"lock_stale_s", "lock-stale-s", WF_OPT_FLOAT, O(lock_stale_s), "600", 1, 1e9,
     "another host's lock on the output directory whose heartbeat is older than this many seconds "
     "belongs to a job that died and is taken over (on this host a dead pid is enough)"},
    /* [input] */
    {"input.text_mode", "text-mode", WF_OPT_STR, O(text_mode), "file", WF_NO_RANGE,
     "plain-text inputs: one document per file, paragraph (blank-line separated) or line"},
    {"input.unwrap", NULL, WF_OPT_BOOL, O(unwrap), "false", WF_NO_RANGE,
     "plain-text inputs: join the lines of each paragraph with spaces (hard-wrapped prose, so that "
     "lines are paragraphs as in web text)"},
    {"input.jsonl_field", "field", WF_OPT_STR, O(jsonl_field), "text", WF_NO_RANGE,
     "JSONL inputs: the string field holding the document (a \"url\" field is carried along)"},
    {"input.max_doc_mb", NULL, WF_OPT_INT, O(max_doc_mb), "16", 1, 4096,
     "records larger than this are dropped (too_large)"},
    /* [normalize] */
    {"normalize.enabled", NULL, WF_OPT_BOOL, O(normalize), "true", WF_NO_RANGE,
     "Unicode normalization and line cleanup (UTF-8 repair and binary detection always run)"},
    {"normalize.unicode_form", NULL, WF_OPT_STR, O(unicode_form), "NFC", WF_NO_RANGE,
     "Unicode normalization form: NFC, NFKC or none"},
    {"normalize.invalid_utf8", NULL, WF_OPT_STR, O(invalid_utf8), "replace", WF_NO_RANGE,
     "invalid UTF-8: replace (with U+FFFD, counted) or drop the document"},
    {"normalize.max_control_ratio", NULL, WF_OPT_FLOAT, O(max_control_ratio), "0.01", 0, 1,
     "documents with more control characters than this fraction of bytes are binary (any NUL byte is)"},
    /* [dedup] */
    {"dedup.enabled", NULL, WF_OPT_BOOL, O(dedup), "true", WF_NO_RANGE,
     "exact paragraph dedup across all inputs (CCNet): the first occurrence is kept"},
    {"dedup.unit", NULL, WF_OPT_STR, O(dedup_unit), "line", WF_NO_RANGE,
     "what is a paragraph: a line (as in WET files and CCNet) or a blank-line separated block"},
    {"dedup.min_chars", NULL, WF_OPT_INT, O(dedup_min_chars), "1", 0, 1e9,
     "units shorter than this after normalization (lower case, no digits or punctuation) are never "
     "removed"},
    {"dedup.max_mb", NULL, WF_OPT_INT, O(dedup_max_mb), "256", 1, 1 << 20,
     "memory cap of the paragraph hash table (8 bytes a hash); when full, new hashes are not stored"},
    /* [langid] */
    {"langid.enabled", NULL, WF_OPT_BOOL, O(langid), "true", WF_NO_RANGE,
     "language identification with CLD2 (off: every document is language \"und\")"},
    {"langid.min_confidence", NULL, WF_OPT_FLOAT, O(lang_min_confidence), "0.5", 0, 1,
     "drop documents whose top language covers less than this fraction of the text (CCNet: 0.5)"},
    {"langid.languages", NULL, WF_OPT_STRS, O(languages), "", WF_NO_RANGE,
     "languages to keep, as ISO 639 codes (en, fr, zh, zh-Hant, ...); empty: all"},
    /* [quality] */
    {"quality.enabled", NULL, WF_OPT_BOOL, O(quality), "true", WF_NO_RANGE,
     "Gopher and C4 quality rules"},
    {"quality.languages", NULL, WF_OPT_STRS, O(quality_languages), "", WF_NO_RANGE,
     "languages the rules apply to (others pass unchecked); empty: all. The word rules assume "
     "space-separated words"},
    {"quality.min_words", NULL, WF_OPT_INT, O(min_words), "50", 0, 1e12,
     "Gopher: fewest words (that are not only punctuation)"},
    {"quality.max_words", NULL, WF_OPT_INT, O(max_words), "100000", 0, 1e12, "Gopher: most words"},
    {"quality.min_mean_word_len", NULL, WF_OPT_FLOAT, O(min_mean_word_len), "3", 0, 1e6,
     "Gopher: shortest mean word length (characters)"},
    {"quality.max_mean_word_len", NULL, WF_OPT_FLOAT, O(max_mean_word_len), "10", 0, 1e6,
     "Gopher: longest mean word length"},
    {"quality.max_symbol_word_ratio", NULL, WF_OPT_FLOAT, O(max_symbol_word_ratio), "0.1", 0, 1e6,
     "Gopher: most '#' and '...' per word (each counted separately)"},
    {"quality.max_bullet_lines", NULL, WF_OPT_FLOAT, O(max_bullet_lines), "0.9", 0, 1,
     "Gopher: largest fraction of lines starting with a bullet"},
    {"quality.max_ellipsis_lines", NULL, WF_OPT_FLOAT, O(max_ellipsis_lines), "0.3", 0, 1,
     "Gopher: largest fraction of lines ending with an ellipsis"},
    {"quality.min_alpha_words", NULL, WF_OPT_FLOAT, O(min_alpha_words), "0.8", 0, 1,
     "Gopher: smallest fraction of words with a letter"},
    {"quality.min_stop_words", NULL, WF_OPT_INT, O(min_stop_words), "2", 0, 1e9,
     "Gopher: fewest stop words (from quality.stop_words, lower-cased match)"},
    {"quality.stop_words", NULL, WF_OPT_STRS, O(stop_words), "the,be,to,of,and,that,have,with",
     WF_NO_RANGE, "Gopher's stop words (English); empty turns the rule off"},
    {"quality.max_digit_ratio", NULL, WF_OPT_FLOAT, O(max_digit_ratio), "0.25", 0, 1,
     "largest fraction of non-space characters that are digits"},
    {"quality.max_dup_line_frac", NULL, WF_OPT_FLOAT, O(max_dup_line_frac), "0.3", 0, 1,
     "Gopher: largest fraction of lines that repeat an earlier line"},
    {"quality.max_dup_para_frac", NULL, WF_OPT_FLOAT, O(max_dup_para_frac), "0.3", 0, 1,
     "Gopher: largest fraction of paragraphs that repeat an earlier one"},
    {"quality.max_dup_line_char_frac", NULL, WF_OPT_FLOAT, O(max_dup_line_char_frac), "0.2", 0, 1,
     "Gopher: largest fraction of characters in repeated lines"},
    {"quality.max_dup_para_char_frac", NULL, WF_OPT_FLOAT, O(max_dup_para_char_frac), "0.2", 0, 1,
     "Gopher: largest fraction of characters in repeated paragraphs"},
    {"quality.max_top_2gram", NULL, WF_OPT_FLOAT, O(max_top_ngram[0]), "0.2", 0, 1,
     "Gopher: largest fraction of word characters in the most frequent word 2-gram"},
    {"quality.max_top_3gram", NULL, WF_OPT_FLOAT, O(max_top_ngram[1]), "0.18", 0, 1,
     "Gopher: the same for 3-grams"},
    {"quality.max_top_4gram", NULL, WF_OPT_FLOAT, O(max_top_ngram[2]), "0.16", 0, 1,
     "Gopher: the same for 4-grams"},
    {"quality.max_dup_5gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[0]), "0.15", 0, 1,
     "Gopher: largest fraction of word characters in repeated word 5-grams"},
    {"quality.max_dup_6gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[1]), "0.14", 0, 1, "Gopher: 6-grams"},
    {"quality.max_dup_7gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[2]), "0.13", 0, 1, "Gopher: 7-grams"},
    {"quality.max_dup_8gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[3]), "0.12", 0, 1, "Gopher: 8-grams"},
    {"quality.max_dup_9gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[4]), "0.11", 0, 1, "Gopher: 9-grams"},
    {"quality.max_dup_10gram", NULL, WF_OPT_FLOAT, O(max_dup_ngram[5]), "0.10", 0, 1, "Gopher: 10-grams"},
    {"quality.c4_terminal_punct", NULL, WF_OPT_BOOL, O(c4_terminal_punct), "true", WF_NO_RANGE,
     "C4: remove lines that do not end in . ! ? \" ' or an ellipsis"},
    {"quality.c4_min_words_per_line", NULL, WF_OPT_INT, O(c4_min_words_per_line), "3", 0, 1e9,
     "C4: remove lines with fewer words (0: off)"},
    {"quality.c4_javascript", NULL, WF_OPT_BOOL, O(c4_javascript), "true", WF_NO_RANGE,
     "C4: remove lines that mention javascript"},
    {"quality.c4_min_sentences", NULL, WF_OPT_INT, O(c4_min_sentences), "5", 0, 1e9,
     "C4: drop documents with fewer sentences left (0: off)"},
    {"quality.c4_lorem_ipsum", NULL, WF_OPT_BOOL, O(c4_lorem_ipsum), "true", WF_NO_RANGE,
     "C4: drop documents containing \"lorem ipsum\""},
    {"quality.c4_curly_bracket", NULL, WF_OPT_BOOL, O(c4_curly_bracket), "false", WF_NO_RANGE,
     "C4: drop documents containing '{' (C4 did; off by default as it drops all pages about code)"},
    /* [minhash] */
    {"minhash.enabled", NULL, WF_OPT_BOOL, O(minhash), "true", WF_NO_RANGE,
     "near-duplicate removal with MinHash and LSH: the first document of a cluster is kept"},
    {"minhash.ngram", NULL, WF_OPT_INT, O(mh_ngram), "5", 1, 64, "words per shingle"},
    {"minhash.bands", NULL, WF_OPT_INT, O(mh_bands), "14", 1, 512,
     "LSH bands: two documents collide when all rows of one band agree"},
    {"minhash.rows", NULL, WF_OPT_INT, O(mh_rows), "8", 1, 64,
     "hashes per band; bands x rows hash functions (14 x 8 flags ~50% at Jaccard 0.72, ~99% at 0.85)"},
    {"minhash.seed", NULL, WF_OPT_INT, O(mh_seed), "1", 0, 9.2e18, "seed of the hash functions"},
    {"minhash.max_mb", NULL, WF_OPT_INT, O(mh_max_mb), "128", 1, 1 << 20,
     "memory cap of the band-key table (8 bytes a key, bands keys a document)"},
    /* [perplexity] */
    {"perplexity.model", NULL, WF_OPT_STR, O(ppl_model), "", WF_NO_RANGE,
     "a weft model (model.safetensors or its run directory) to score documents with; empty: stage off"},
    {"perplexity.tokenizer", NULL, WF_OPT_STR, O(ppl_tokenizer), "", WF_NO_RANGE,
     "its tokenizer.json (empty: the one recorded in the model file)"},
    {"perplexity.max_tokens", NULL, WF_OPT_INT, O(ppl_max_tokens), "1024", 1, 1e9,
     "score at most the first N tokens of a document"},
    {"perplexity.head_max", NULL, WF_OPT_FLOAT, O(ppl_head_max), "100", 0, 1e300,
     "perplexity up to this: bucket head (set from stats.json's percentiles, as CCNet uses the 30th)"},
    {"perplexity.middle_max", NULL, WF_OPT_FLOAT, O(ppl_middle_max), "1000", 0, 1e300,
     "perplexity up to this: middle; above: tail (CCNet: the 60th percentile)"},
    {"perplexity.drop_tail", NULL, WF_OPT_BOOL, O(ppl_drop_tail), "false", WF_NO_RANGE,
     "drop the tail instead of writing it"},
    /* [output] */
    {"output.shard_mb", NULL, WF_OPT_FLOAT, O(shard_mb), "128", 0.001, 1 << 20,
     "start a new shard after this many MB of JSONL (uncompressed)"},
    {"output.zstd_level", NULL, WF_OPT_INT, O(zstd_level), "3", 1, 19, "zstd compression level"},
};

static const wf_cmd_spec prep_spec = {
    "prep",
    "weft prep [--config prep.toml] --output OUT_DIR [--section.key=value ...] INPUT...",
    "Turns crawled pages into clean documents: reads WARC/WET (.warc.gz, .warc.wet.gz), JSONL and "
    "plain text (gzip or zstd), extracts text from HTML, normalizes Unicode, removes duplicate "
    "paragraphs and near-duplicate documents, identifies languages and applies Gopher/C4 quality "
    "rules, optionally buckets by perplexity under a weft model. Writes OUT_DIR/<lang>/*.jsonl.zst "
    "and a stats report. A directory INPUT means every file under it, sorted. Rerunning the same "
    "command after a crash resumes. See docs/prep.md.",
    prep_opts,
    sizeof prep_opts / sizeof *prep_opts,
    1,
    -1,
    0,
};

const wf_cmd_spec *wf_prep_spec(void) { return &prep_spec; }

wf_status wf_prep_config_default(wf_prep_config *c) {
    memset(c, 0, sizeof *c);
    return wf_opts_defaults(&prep_spec, c);
}

void wf_prep_config_free(wf_prep_config *c) { wf_opts_free(&prep_spec, c); }

static int one_of(const char *v, const char *a, const char *b, const char *c3) {
    return v && (strcmp(v, a) == 0 || strcmp(v, b) == 0 || (c3 && strcmp(v, c3) == 0));
}

wf_status wf_prep_config_validate(const wf_prep_config *c) {
    if (!c->output || !c->output[0])
        return wf_error(WF_ERR_CONFIG, "output: an output directory is required (--output OUT_DIR)");
    if (!one_of(c->text_mode, "file", "paragraph", "line"))
        return wf_error(WF_ERR_CONFIG, "input.text_mode = '%s': expected file, paragraph or line",
                        c->text_mode ? c->text_mode : "");
    if (!c->jsonl_field || !c->jsonl_field[0])
        return wf_error(WF_ERR_CONFIG, "input.jsonl_field must name a field");
    if (!one_of(c->unicode_form, "NFC", "NFKC", "none"))
        return wf_error(WF_ERR_CONFIG, "normalize.unicode_form = '%s': expected NFC, NFKC or none",
                        c->unicode_form ? c->unicode_form : "");
    if (!one_of(c->invalid_utf8, "replace", "drop", NULL))
        return wf_error(WF_ERR_CONFIG, "normalize.invalid_utf8 = '%s': expected replace or drop",
                        c->invalid_utf8 ? c->invalid_utf8 : "");
    if (!one_of(c->dedup_unit, "line", "paragraph", NULL))
        return wf_error(WF_ERR_CONFIG, "dedup.unit = '%s': expected line or paragraph",
                        c->dedup_unit ? c->dedup_unit : "");
    if (c->min_words > c->max_words)
        return wf_error(WF_ERR_CONFIG, "quality.min_words = %lld is above quality.max_words = %lld",
                        (long long)c->min_words, (long long)c->max_words);
    if (c->min_mean_word_len > c->max_mean_word_len)
        return wf_error(WF_ERR_CONFIG, "quality.min_mean_word_len is above quality.max_mean_word_len");
    if (c->mh_bands * c->mh_rows > 4096)
        return wf_error(WF_ERR_CONFIG, "minhash.bands x minhash.rows = %lld: at most 4096 hash functions",
                        (long long)(c->mh_bands * c->mh_rows));
    if (c->ppl_head_max > c->ppl_middle_max)
        return wf_error(WF_ERR_CONFIG, "perplexity.head_max = %g is above perplexity.middle_max = %g",
                        c->ppl_head_max, c->ppl_middle_max);
    for (size_t i = 0; i < c->languages.n; i++)
        if (!c->languages.items[i][0] || strpbrk(c->languages.items[i], "/\\. "))
            return wf_error(WF_ERR_CONFIG, "langid.languages: '%s' is not a language code",
                            c->languages.items[i]);
    return WF_OK;
}

static const char *const stage_names[] = {
#define PREP_STAGE_NAME_(e, s) s,
    PREP_STAGES(PREP_STAGE_NAME_)
#undef PREP_STAGE_NAME_
};
static const char *const reason_names[] = {
#define PREP_REASON_NAME_(e, st, s) s,
    PREP_REASONS(PREP_REASON_NAME_)
#undef PREP_REASON_NAME_
};
static const int reason_stages[] = {
#define PREP_REASON_STAGE_(e, st, s) st,
    PREP_REASONS(PREP_REASON_STAGE_)
#undef PREP_REASON_STAGE_
};
static const char *const extra_names[] = {
#define PREP_EXTRA_NAME_(e, st, s) s,
    PREP_EXTRAS(PREP_EXTRA_NAME_)
#undef PREP_EXTRA_NAME_
};
static const int extra_stages[] = {
#define PREP_EXTRA_STAGE_(e, st, s) st,
    PREP_EXTRAS(PREP_EXTRA_STAGE_)
#undef PREP_EXTRA_STAGE_
};

const char *wf__prep_stage_name(int st) { return st >= 0 && st < ST_COUNT ? stage_names[st] : "?"; }
const char *wf__prep_reason_name(int r) { return r >= 0 && r < R_COUNT ? reason_names[r] : "?"; }
int wf__prep_reason_stage(int r) { return r >= 0 && r < R_COUNT ? reason_stages[r] : -1; }
const char *wf__prep_extra_name(int e) { return e >= 0 && e < E_COUNT ? extra_names[e] : "?"; }
int wf__prep_extra_stage(int e) { return e >= 0 && e < E_COUNT ? extra_stages[e] : -1; }
