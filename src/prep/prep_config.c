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
    {"read_kb", NULL, WF_OPT_INT, O(read_kb), "4096", 1, 1 << 30,
     "KiB read at a time from a step's intermediate files (documents, output pieces); bounds the memory of "
     "the filter, output and finish steps whatever an input's size; the output does not depend on it"},
    {"checkpoint_mb", NULL, WF_OPT_FLOAT, O(checkpoint_mb), "64", 0, 1e9,
     "unused (kept so that old configs load): a run resumes by unit (docs/prep.md)"},
    {"tasks", NULL, WF_OPT_INT, O(tasks), "0", 0, 1e6,
     "tasks sharing the run, each its own process or machine on a shared output directory (0: from "
     "SLURM_ARRAY_TASK_COUNT, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_STEP_NUM_TASKS, else 1); the "
     "output does not depend on it"},
    {"task", NULL, WF_OPT_INT, O(task), "-1", -1, 1e6,
     "this task's number, 0 to tasks - 1 (-1: from SLURM_ARRAY_TASK_ID, OMPI_COMM_WORLD_RANK, PMI_RANK "
     "or SLURM_PROCID)"},
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
     "memory cap of the paragraph hash table of one hash range (8 bytes a hash); when full, new hashes "
     "of that range are not stored"},
    {"dedup.ranges", NULL, WF_OPT_INT, O(dedup_ranges), "16", 1, 4096,
     "hash ranges the paragraph hashes are split into: the units of the dedup step, each one table"},
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
     "languages the rules apply to (others pass unchecked); empty: all. Each language is judged by "
     "its rule set: [quality] below, changed per language (built in, and [quality.<lang>])"},
#define PREP_RULE_OPT_(key, type, field, def, range, help) \
    {"quality." key, NULL, type, O(rules.field), def, range, help},
    PREP_RULE_KEYS(PREP_RULE_OPT_)
#undef PREP_RULE_OPT_
    /* [quality.<lang>]: the same keys for one language, and two that are
     * only set per language. Their values are collected in quality_langs
     * and applied by wf__prep_rules_build. */
    {"quality.<lang>.stop_words", NULL, WF_OPT_STRS, O(quality_langs), NULL, WF_NO_RANGE,
     "the stop words of language <lang> (replacing its built-in list; empty: no stop-word rule); "
     "<lang> is a CLD2 code (de, zh-Hant, ...), und (langid off) or default (every language "
     "without a rule set of its own)"},
    {"quality.<lang>.word_rules", NULL, WF_OPT_BOOL, O(quality_langs), NULL, WF_NO_RANGE,
     "apply the rules that count words to <lang> (built in: on for languages with stop words, off "
     "for those written without spaces and for default; on for any other language given a table)"},
#define PREP_RULE_LANG_OPT_(key, type, field, def, range, help) \
    {"quality.<lang>." key, NULL, type, O(quality_langs), NULL, range, "quality." key " for one language"},
    PREP_RULE_KEYS(PREP_RULE_LANG_OPT_)
#undef PREP_RULE_LANG_OPT_
    /* [minhash] */
    {"minhash.enabled", NULL, WF_OPT_BOOL, O(minhash), "true", WF_NO_RANGE,
     "near-duplicate removal with MinHash and LSH: the first document of a cluster is kept"},
    {"minhash.ngram", NULL, WF_OPT_INT, O(mh_ngram), "5", 1, WF_MINHASH_MAX_NGRAM,
     "words per shingle (languages written with spaces)"},
    {"minhash.char_ngram", NULL, WF_OPT_INT, O(mh_char_ngram), "5", 1, WF_MINHASH_MAX_NGRAM,
     "characters (Unicode code points, spaces and punctuation left out) per shingle for the languages "
     "of minhash.char_languages"},
    {"minhash.char_languages", NULL, WF_OPT_STRS, O(mh_char_languages), PREP_CHAR_SHINGLE_LANGS, WF_NO_RANGE,
     "languages (as language id gives them; und: langid off) whose documents are shingled on characters "
     "instead of words: those written without spaces between words; empty: words for every language"},
    {"minhash.bands", NULL, WF_OPT_INT, O(mh_bands), "14", 1, 512,
     "LSH bands: two documents collide when all rows of one band agree"},
    {"minhash.rows", NULL, WF_OPT_INT, O(mh_rows), "8", 1, 64,
     "hashes per band; bands x rows hash functions (14 x 8 flags ~50% at Jaccard 0.72, ~99% at 0.85)"},
    {"minhash.seed", NULL, WF_OPT_INT, O(mh_seed), "1", 0, 9.2e18, "seed of the hash functions"},
    {"minhash.ranges", NULL, WF_OPT_INT, O(mh_ranges), "1", 1, 4096,
     "hash ranges each band's keys are split into: the lsh step has bands x ranges units, each holding "
     "the keys of one range of one band (16 bytes a document of that range)"},
    {"minhash.max_mb", NULL, WF_OPT_INT, O(mh_max_mb), "128", 1, 1 << 20,
     "unused (kept so that old configs load): an lsh unit's memory is set by minhash.ranges"},
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

/* The thresholds of one rule set in order; `where`: its table. */
static wf_status check_rules(const wf_prep_rules *r, const char *where) {
    if (r->min_words > r->max_words)
        return wf_error(WF_ERR_CONFIG, "%s: min_words = %lld is above max_words = %lld", where,
                        (long long)r->min_words, (long long)r->max_words);
    if (r->min_mean_word_len > r->max_mean_word_len)
        return wf_error(WF_ERR_CONFIG, "%s: min_mean_word_len = %g is above max_mean_word_len = %g", where,
                        r->min_mean_word_len, r->max_mean_word_len);
    return WF_OK;
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
    WF_TRY(check_rules(&c->rules, "quality"));
    for (size_t i = 0; i < c->quality_langs.n; i++) {
        const char *lang = c->quality_langs.items[i].name;
        if (strcmp(lang, "default") != 0 && strcmp(lang, "und") != 0 && !wf__prep_langid_known(lang))
            return wf_error(WF_ERR_CONFIG,
                            "quality.%s: '%s' is not a language code of CLD2 (en, de, zh-Hant, ...), und or "
                            "default",
                            lang, lang);
    }
    prep_rule_sets rs;
    WF_TRY(wf__prep_rules_build(c, &rs));
    wf_status st = WF_OK;
    for (size_t i = 0; i < rs.n && st == WF_OK; i++) {
        char where[64];
        snprintf(where, sizeof where, "quality.%s", rs.v[i].lang);
        st = check_rules(&rs.v[i].r, where);
    }
    wf__prep_rules_free(&rs);
    WF_TRY(st);
    if (c->mh_bands * c->mh_rows > 4096)
        return wf_error(WF_ERR_CONFIG, "minhash.bands x minhash.rows = %lld: at most 4096 hash functions",
                        (long long)(c->mh_bands * c->mh_rows));
    for (size_t i = 0; i < c->mh_char_languages.n; i++) {
        const char *lang = c->mh_char_languages.items[i];
        if (strcmp(lang, "und") != 0 && !wf__prep_langid_known(lang))
            return wf_error(WF_ERR_CONFIG,
                            "minhash.char_languages: '%s' is not a language code of CLD2 (zh, zh-Hant, ja, th, ...) "
                            "or und",
                            lang);
    }
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
