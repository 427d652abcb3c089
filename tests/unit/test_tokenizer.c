/* Unit tests of the byte-level BPE tokenizer (src/data/bpe*.c, pretok.c,
 * tokenizer_json.c): the byte alphabet, pre-tokenizer pieces, merge order
 * against a plain reference, special tokens, exact round trips of any bytes,
 * tokenizer.json errors, save/load, shared use from threads, and training
 * determinism across thread counts. Interoperability with the `tokenizers`
 * library is tested in tests/py/test_tokenizer_interop.py. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe_impl.h"
#include "harness.h"
#include "weft/docs.h"
#include "weft/fileio.h"
#include "weft/rng.h"
#include "weft/shard.h"
#include "weft/tokenize.h"
#include "weft/tokenizer.h"

/* ------------------------------------------------------------ helpers */

static wf_tokenizer *load_json(const char *json) {
    const char *path = wf_test_path("tok.json");
    wf_test_write_file(path, json, strlen(json));
    wf_tokenizer *t = NULL;
    WF_CHECK_OK(wf_tokenizer_load(&t, path));
    return t;
}

static wf_status load_json_status(const char *json) {
    const char *path = wf_test_path("bad.json");
    wf_test_write_file(path, json, strlen(json));
    wf_tokenizer *t = NULL;
    wf_status s = wf_tokenizer_load(&t, path);
    wf_tokenizer_destroy(t);
    return s;
}

/* A tokenizer.json with the 256 byte tokens (ids 0-255 in byte order), the
 * given extra vocabulary entries and merges (JSON fragments), a
 * pre-tokenizer and added tokens. */
static char *make_json(const char *extra_vocab, const char *merges, const char *pretok,
                       const char *added, const char *model_extra) {
    size_t cap = 1 << 16;
    char *buf = malloc(cap), *vocab = malloc(cap);
    size_t v = 0;
    for (int b = 0; b < 256; b++) {
        char s[4];
        uint8_t byte = (uint8_t)b;
        wf__bpe_bytes_to_str(&byte, 1, s);
        const char *esc = strcmp(s, "\"") == 0 ? "\\\"" : strcmp(s, "\\") == 0 ? "\\\\" : s;
        v += (size_t)snprintf(vocab + v, cap - v, "%s\"%s\": %d", b ? ", " : "", esc, b);
    }
    if (extra_vocab && *extra_vocab) v += (size_t)snprintf(vocab + v, cap - v, ", %s", extra_vocab);
    snprintf(buf, cap,
             "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
             "\"added_tokens\": [%s],\n\"normalizer\": null,\n\"pre_tokenizer\": %s,\n"
             "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},\n"
             "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
             "\"fuse_unk\": false, \"byte_fallback\": false%s,\n\"vocab\": {%s},\n\"merges\": [%s]}}\n",
             added ? added : "", pretok, model_extra ? model_extra : "", vocab, merges ? merges : "");
    free(vocab);
    return buf;
}

static const char *PRETOK_LLAMA3_JSON =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
    "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
    "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}";

static const char *PRETOK_GPT2_JSON =
    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
    "\"use_regex\": true}";

static void encode(const wf_tokenizer *t, const char *s, size_t n, int special, wf_ids *out) {
    out->n = 0;
    WF_CHECK_OK(wf_tokenizer_encode(t, s, n, special, out));
}

static void check_ids(const wf_ids *got, const int32_t *want, size_t n) {
    WF_CHECK_EQ(got->n, n);
    for (size_t i = 0; i < n; i++)
        if (got->ids[i] != want[i])
            wf_test_fail(__FILE__, __LINE__, "id %zu is %d, expected %d", i, got->ids[i], want[i]);
}

static void check_roundtrip(const wf_tokenizer *t, const char *s, size_t n, int special) {
    wf_ids ids = {0};
    encode(t, s, n, special, &ids);
    char *back = NULL;
    size_t blen = 0;
    WF_CHECK_OK(wf_tokenizer_decode(t, ids.ids, ids.n, &back, &blen));
    WF_CHECK_EQ(blen, n);
    WF_CHECK_TRUE(memcmp(back, s, n) == 0);
    free(back);
    wf_ids_free(&ids);
}

/* English-like text with some Unicode, from a fixed seed: common words
 * and made-up ones from a lexicon of 3000 (drawn Zipf-like), separated by
 * spaces, commas and newlines. */
static char *make_corpus(uint64_t seed, size_t n_words, size_t *len) {
    static const char *common[] = {"the", "of", "and", "to", "a", "in", "was", "her", "she", "not",
                                   "Emma", "Harriet", "could", "would", "be", "had", "very", "it's",
                                   "Mr.", "Knightley", "café", "naïve", "Москва", "東京", "1815",
                                   "42", "—", "\"well,\"", "(indeed)", "don't", "I'll", "😀"};
    static const char *syl[] = {"ka", "ro", "mi", "te", "su", "ne", "lo", "ar", "en", "is",
                                "th", "qu", "ve", "ha", "do", "ly", "ng", "st", "or", "un"};
    size_t nc = sizeof common / sizeof *common, cap = n_words * 24 + 16, n = 0;
    char *buf = malloc(cap);
    wf_rng r = wf_rng_make(seed, 7);
    for (size_t i = 0; i < n_words; i++) {
        if (wf_rng_below(&r, 3) == 0) {
            size_t k = (size_t)(wf_rng_below(&r, nc) * wf_rng_below(&r, nc) / nc);
            size_t l = strlen(common[k]);
            memcpy(buf + n, common[k], l);
            n += l;
        } else {
            /* Lexicon word w: its syllables are a function of w alone. */
            uint64_t w = wf_rng_below(&r, 3000) * wf_rng_below(&r, 3000) / 3000;
            uint64_t ns = 1 + w % 4;
            for (uint64_t k = 0; k < ns; k++) {
                const char *sy = syl[wf_rng_at(w, k, 0) % 20];
                memcpy(buf + n, sy, 2);
                n += 2;
            }
        }
        uint64_t sep = wf_rng_below(&r, 20);
        buf[n++] = sep == 0 ? '\n' : sep == 1 ? ',' : ' ';
        if (sep == 0 && wf_rng_below(&r, 3) == 0) buf[n++] = '\n';
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static wf_tokenizer *train_on(const char *const *paths, size_t n_paths, size_t vocab, int threads,
                              const char *pattern, int mode) {
    wf_bpe_train_opts o = {.vocab_size = vocab, .min_frequency = 2, .n_threads = threads,
                           .pattern = pattern, .paths = paths, .n_paths = n_paths,
                           .text_mode = mode};
    wf_tokenizer *t = NULL;
    WF_CHECK_OK(wf_tokenizer_train(&t, &o));
    return t;
}

static wf_tokenizer *train_small(const char *pattern) {
    size_t len;
    char *text = make_corpus(1, 20000, &len);
    const char *path = wf_test_path("corpus.txt");
    wf_test_write_file(path, text, len);
    free(text);
    const char *paths[] = {path};
    return train_on(paths, 1, 600, 2, pattern, WF_TEXT_DOC_LINE);
}

/* -------------------------------------------------------- byte alphabet */

WF_TEST(byte_alphabet_is_gpt2s) {
    /* Printable bytes map to themselves, the rest to U+0100.. in order. */
    WF_CHECK_EQ(wf__bpe_byte_cp('A'), 'A');
    WF_CHECK_EQ(wf__bpe_byte_cp('!'), '!');
    WF_CHECK_EQ(wf__bpe_byte_cp(0xA1), 0xA1);
    WF_CHECK_EQ(wf__bpe_byte_cp(0x00), 0x100);
    WF_CHECK_EQ(wf__bpe_byte_cp(' '), 0x120);  /* "Ġ" */
    WF_CHECK_EQ(wf__bpe_byte_cp('\n'), 0x10A); /* "Ċ" */
    WF_CHECK_EQ(wf__bpe_byte_cp(0x7F), 0x121);
    WF_CHECK_EQ(wf__bpe_byte_cp(0xAD), 0x143);
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = wf__bpe_byte_cp((uint8_t)b);
        WF_CHECK_TRUE(cp < 324);
        WF_CHECK_EQ(seen[cp]++, 0);
        WF_CHECK_EQ(wf__bpe_cp_byte(cp), b);
    }
    uint8_t all[256], back[256];
    char str[513];
    for (int b = 0; b < 256; b++) all[b] = (uint8_t)b;
    size_t sl = wf__bpe_bytes_to_str(all, 256, str);
    WF_CHECK_EQ(wf__bpe_str_to_bytes(str, sl, back), 256);
    WF_CHECK_TRUE(memcmp(all, back, 256) == 0);
    WF_CHECK_EQ(wf__bpe_str_to_bytes("\xE2\x82\xAC", 3, back), -1); /* "€" is not in it */
}

/* -------------------------------------------------------- pre-tokenizer */

static void check_pieces(const char *pattern, const char *text, size_t n, const char *const *want,
                         size_t n_want) {
    wf_regex re;
    wf_regex_state st;
    WF_CHECK_OK(wf__pretok_regex_compile(&re, pattern, 0, "test"));
    WF_CHECK_OK(wf__pretok_regex_state_init(&st, &re));
    wf_split_iter it;
    wf__pretok_split_begin(&it, &re, text, n);
    size_t off, len, k = 0, covered = 0;
    int r;
    while ((r = wf__pretok_split_next(&re, &st, &it, &off, &len)) > 0) {
        WF_CHECK_EQ(off, covered);
        covered += len;
        if (k < n_want && (strlen(want[k]) != len || memcmp(want[k], text + off, len) != 0))
            wf_test_fail(__FILE__, __LINE__, "piece %zu is \"%.*s\", expected \"%s\"", k, (int)len,
                         text + off, want[k]);
        k++;
    }
    WF_CHECK_EQ(r, 0);
    WF_CHECK_EQ(k, n_want);
    WF_CHECK_EQ(covered, n);
    wf__pretok_regex_state_free(&st);
    wf__pretok_regex_free(&re);
}

WF_TEST(pretok_llama3_pieces) {
    const char *text = "Hello, world! It's 1234567 ok\n\n  x  ";
    const char *want[] = {"Hello", ",", " world", "!", " It", "'s", " ", "123", "456", "7",
                          " ok", "\n\n", " ", " x", "  "};
    check_pieces(wf__pretok_llama3, text, strlen(text), want, sizeof want / sizeof *want);
}

WF_TEST(pretok_gpt2_pieces) {
    const char *text = "Hello, world! It's 1234567 ok\n\n  x  ";
    const char *want[] = {"Hello", ",", " world", "!", " It", "'s", " 1234567", " ok", "\n\n ",
                          " x", "  "};
    check_pieces(wf__pretok_gpt2, text, strlen(text), want, sizeof want / sizeof *want);
}

WF_TEST(pretok_invalid_utf8_bytes_are_pieces) {
    /* 0xFF and a lone continuation byte match nothing: they come back as
     * pieces of their own, and every byte is covered. */
    const char text[] = "ab\xff\x80" "cd \xe2\x82";
    const char *want[] = {"ab", "\xff\x80", "cd", " ", "\xe2\x82"};
    check_pieces(wf__pretok_llama3, text, sizeof text - 1, want, sizeof want / sizeof *want);
}

WF_TEST(pretok_classes_are_oniguruma_s) {
    /* U+180E is \s for PCRE2 but not for Oniguruma (which `tokenizers`
     * uses): with the rewrite it is a symbol and goes with the "!"
     * (PCRE2's own \s would make "\u180e" and "!" two pieces). */
    const char *text = "a\xe1\xa0\x8e!";
    const char *want[] = {"a", "\xe1\xa0\x8e!"};
    check_pieces(wf__pretok_llama3, text, strlen(text), want, 2);
    /* U+3000 (ideographic space) is whitespace in both. */
    const char *text2 = "a\xe3\x80\x80\xe3\x80\x80" "b";
    const char *want2[] = {"a", "\xe3\x80\x80", "\xe3\x80\x80\x62"}; /* \x62: "b" */
    check_pieces(wf__pretok_llama3, text2, strlen(text2), want2, 3);
    /* U+1E5D0 is a letter and U+1E5F1 a digit since Unicode 16 (Ol Onal),
     * which Oniguruma knows and PCRE2 10.42's tables do not: "a" + letter
     * is one piece, four digits are pieces of 3 and 1. */
    const char *text3 = "a\xf0\x9e\x97\x90 \xf0\x9e\x97\xb1\xf0\x9e\x97\xb1\xf0\x9e\x97\xb1\xf0\x9e\x97\xb1";
    const char *want3[] = {"a\xf0\x9e\x97\x90", " ", "\xf0\x9e\x97\xb1\xf0\x9e\x97\xb1\xf0\x9e\x97\xb1",
                           "\xf0\x9e\x97\xb1"};
    check_pieces(wf__pretok_llama3, text3, strlen(text3), want3, 4);
}

static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) return (size_t)(o[0] = (char)cp, 1);
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

WF_TEST(pretok_fast_variant_agrees_without_new_code_points) {
    /* The pattern as written (fast) and widened to Unicode 16 (exact) cut
     * text without Unicode 15-16 letters/digits the same way: random text
     * from many scripts, split with each variant forced. */
    wf_regex re;
    wf_regex_state st;
    WF_CHECK_OK(wf__pretok_regex_compile(&re, wf__pretok_llama3, 0, "test"));
    re.scan = WF_SCAN_REGEX; /* the two PCRE2 variants, not the scanner */
    WF_CHECK_OK(wf__pretok_regex_state_init(&st, &re));
    if (!re.fast) {
        /* PCRE2 already has Unicode 16 tables: one variant only. */
        wf__pretok_regex_state_free(&st);
        wf__pretok_regex_free(&re);
        return;
    }
    static const uint32_t pool[][2] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F}, {0x370, 0x52F},
                                       {0x600, 0x6FF}, {0x900, 0x97F}, {0x1C80, 0x1C88},
                                       {0x3000, 0x30FF}, {0x4E00, 0x4E80}, {0xA700, 0xA7CA},
                                       {0x1F300, 0x1F64F}, {0x20000, 0x20100}, {0x2028, 0x202F}};
    wf_rng r = wf_rng_make(17, 0);
    char text[1024];
    for (int trial = 0; trial < 2000; trial++) {
        size_t n = 0, k = 1 + (size_t)wf_rng_below(&r, 60);
        for (size_t i = 0; i < k; i++) {
            const uint32_t *pr = pool[wf_rng_below(&r, sizeof pool / sizeof *pool)];
            n += utf8_put(text + n, pr[0] + (uint32_t)wf_rng_below(&r, pr[1] - pr[0] + 1));
        }
        wf_split_iter a, b;
        wf__pretok_split_begin(&a, &re, text, n);
        WF_CHECK_TRUE(a.code == re.fast); /* nothing new in this text */
        wf__pretok_split_begin(&b, &re, text, n);
        b.code = re.code;
        b.jit = re.jit;
        size_t ao, al, bo, bl;
        for (;;) {
            int ra = wf__pretok_split_next(&re, &st, &a, &ao, &al);
            int rb = wf__pretok_split_next(&re, &st, &b, &bo, &bl);
            WF_CHECK_EQ(ra, rb);
            if (ra <= 0) break;
            WF_CHECK_EQ(ao, bo);
            WF_CHECK_EQ(al, bl);
        }
    }
    /* With a Unicode 16 letter in it, the exact variant is picked. */
    wf_split_iter c;
    wf__pretok_split_begin(&c, &re, "ab\xf0\x9e\x97\x90", 6);
    WF_CHECK_TRUE(c.code == re.code);
    wf__pretok_regex_state_free(&st);
    wf__pretok_regex_free(&re);
}

/* Random text for the scanner test: characters drawn from pools chosen to
 * hit every branch of the two patterns (letters, digits and spaces of
 * several scripts, Unicode 15-16 letters and digits, CR/LF runs, the
 * apostrophe and what follows it in contractions, U+017F which folds to
 * s) and, with `bad`, invalid UTF-8: stray continuation bytes, truncated
 * sequences, overlong forms, surrogates, code points past U+10FFFF. */
static size_t scan_text(wf_rng *r, char *text, size_t k, int bad) {
    static const uint32_t pool[][2] = {
        {0x20, 0x7E},     {0x20, 0x20},     {0x09, 0x0D},     {0x0A, 0x0A},   {0x27, 0x27},
        {0x41, 0x5A},     {0x61, 0x7A},     {0x30, 0x39},     {0x1C, 0x1F},   {0x80, 0xFF},
        {0x17F, 0x17F},   {0xA0, 0x24F},    {0x370, 0x52F},   {0x600, 0x6FF}, {0x660, 0x669},
        {0x900, 0x97F},   {0x1680, 0x1680}, {0x2000, 0x200F}, {0x2028, 0x2030}, {0x205F, 0x205F},
        {0x3000, 0x30FF}, {0x4E00, 0x4E80}, {0xAC00, 0xAC40}, {0xFF10, 0xFF5A}, {0x1C89, 0x1C8A},
        {0x1E5D0, 0x1E5FA}, {0x10D40, 0x10D49}, {0x1F300, 0x1F64F}, {0x20000, 0x20100},
        {0xFFFD, 0xFFFF}};
    static const char *const words[] = {"'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'ll", "'lL",
                                        "'d", "'\xc5\xbf", "\r\n", " \n ", "  ", "\t\n"};
    static const char *const invalid[] = {"\x80", "\xbf\x80", "\xc3", "\xe2\x82", "\xf0\x9f\x98",
                                          "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe",
                                          "\xe2\x82\x41", "\xf0\x80\x80\x80"};
    size_t n = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t what = wf_rng_below(r, 20);
        if (what == 0) {
            const char *w = words[wf_rng_below(r, sizeof words / sizeof *words)];
            memcpy(text + n, w, strlen(w));
            n += strlen(w);
        } else if (what == 1 && bad) {
            const char *w = invalid[wf_rng_below(r, sizeof invalid / sizeof *invalid)];
            memcpy(text + n, w, strlen(w));
            n += strlen(w);
        } else {
            const uint32_t *pr = pool[wf_rng_below(r, sizeof pool / sizeof *pool)];
            n += utf8_put(text + n, pr[0] + (uint32_t)wf_rng_below(r, pr[1] - pr[0] + 1));
        }
    }
    return n;
}

WF_TEST(pretok_scanner_equals_pcre2) {
    /* The hand-written scanner of the built-in patterns cuts the same
     * pieces as PCRE2 running the pattern (widened to Unicode 16), on
     * random text of many scripts with and without invalid UTF-8. */
    const char *const pats[2] = {wf__pretok_llama3, wf__pretok_gpt2};
    wf_rng r = wf_rng_make(33, 0);
    char text[4096];
    for (int pi = 0; pi < 2; pi++) {
        wf_regex re;
        wf_regex_state st;
        WF_CHECK_OK(wf__pretok_regex_compile(&re, pats[pi], 0, "test"));
        WF_CHECK_EQ(re.scan, pi == 0 ? WF_SCAN_LLAMA3 : WF_SCAN_GPT2);
        WF_CHECK_OK(wf__pretok_regex_state_init(&st, &re));
        for (int trial = 0; trial < 20000; trial++) {
            size_t n = scan_text(&r, text, 1 + (size_t)wf_rng_below(&r, 200), trial & 1);
            wf_split_iter a, b;
            wf__pretok_split_begin(&a, &re, text, n);
            WF_CHECK_EQ(a.scan, re.scan);
            wf__pretok_split_begin(&b, &re, text, n);
            b.scan = WF_SCAN_REGEX;
            b.code = re.code; /* the exact variant */
            b.jit = re.jit;
            size_t ao, al, bo, bl;
            for (;;) {
                int ra = wf__pretok_split_next(&re, &st, &a, &ao, &al);
                int rb = wf__pretok_split_next(&re, &st, &b, &bo, &bl);
                if (ra != rb || (ra > 0 && (ao != bo || al != bl))) {
                    fprintf(stderr, "pattern %d, text of %zu bytes:", pi, n);
                    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", (unsigned char)text[i]);
                    fprintf(stderr, "\n  scanner piece %zu+%zu, PCRE2 %zu+%zu\n", ao, al, bo, bl);
                }
                WF_CHECK_EQ(ra, rb);
                if (ra <= 0) break;
                WF_CHECK_EQ(ao, bo);
                WF_CHECK_EQ(al, bl);
            }
        }
        wf__pretok_regex_state_free(&st);
        wf__pretok_regex_free(&re);
    }
}

/* Threads that cut text of scripts no other test uses at the same time:
 * the scanner's first look at those code points fills their class blocks
 * concurrently (run under ThreadSanitizer by scripts/check.sh). */
typedef struct {
    const wf_regex *re;
    pthread_barrier_t *go;
    uint32_t base;
    int bad; /* pieces that differ from PCRE2's */
} scan_job;

static void *scan_thread(void *arg) {
    scan_job *j = arg;
    wf_regex_state st;
    if (wf__pretok_regex_state_init(&st, j->re) != WF_OK) {
        j->bad = -1;
        return NULL;
    }
    char text[2048];
    size_t n = 0;
    for (uint32_t k = 0; k < 300 && n + 8 < sizeof text; k++) {
        n += utf8_put(text + n, j->base + k * 7 % 0x300);
        if (k % 5 == 4) text[n++] = ' ';
    }
    pthread_barrier_wait(j->go);
    wf_split_iter a, b;
    wf__pretok_split_begin(&a, j->re, text, n);
    wf__pretok_split_begin(&b, j->re, text, n);
    b.scan = WF_SCAN_REGEX;
    b.code = j->re->code;
    b.jit = j->re->jit;
    size_t ao, al, bo, bl;
    for (;;) {
        int ra = wf__pretok_split_next(j->re, &st, &a, &ao, &al);
        int rb = wf__pretok_split_next(j->re, &st, &b, &bo, &bl);
        if (ra != rb || (ra > 0 && (ao != bo || al != bl))) j->bad++;
        if (ra <= 0 || ra != rb) break;
    }
    wf__pretok_regex_state_free(&st);
    return NULL;
}

WF_TEST(pretok_scanner_classes_fill_from_threads) {
    wf_regex re;
    WF_CHECK_OK(wf__pretok_regex_compile(&re, wf__pretok_llama3, 0, "test"));
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    /* Ethiopic, Cherokee and Canadian syllabics (U+1200..U+14FF), Yi
     * (U+A000..U+A2FF): two threads on each, so that two fill the same
     * blocks at once. */
    static const uint32_t bases[4] = {0x1200, 0xA000, 0x1200, 0xA000};
    scan_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (scan_job){&re, &go, bases[i], 0};
        WF_CHECK_EQ(pthread_create(&th[i], NULL, scan_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) WF_CHECK_EQ(jobs[i].bad, 0);
    pthread_barrier_destroy(&go);
    wf__pretok_regex_free(&re);
}

WF_TEST(pretok_long_runs) {
    /* A megabyte of spaces and one of letters: one piece each (the JIT
     * stack must cope with the backtracking of \s+(?!\S)). */
    size_t n = 1 << 20;
    char *text = malloc(2 * n + 1);
    memset(text, ' ', n);
    memset(text + n, 'a', n);
    text[2 * n] = '\0';
    wf_regex re;
    wf_regex_state st;
    WF_CHECK_OK(wf__pretok_regex_compile(&re, wf__pretok_llama3, 0, "test"));
    WF_CHECK_OK(wf__pretok_regex_state_init(&st, &re));
    wf_split_iter it;
    wf__pretok_split_begin(&it, &re, text, 2 * n);
    size_t off, len;
    WF_CHECK_EQ(wf__pretok_split_next(&re, &st, &it, &off, &len), 1);
    WF_CHECK_EQ(len, n - 1); /* the last space goes with the letters */
    WF_CHECK_EQ(wf__pretok_split_next(&re, &st, &it, &off, &len), 1);
    WF_CHECK_EQ(len, n + 1);
    WF_CHECK_EQ(wf__pretok_split_next(&re, &st, &it, &off, &len), 0);
    wf__pretok_regex_state_free(&st);
    wf__pretok_regex_free(&re);
    free(text);
}

/* ------------------------------------------------------------- merges */

WF_TEST(merges_apply_by_rank) {
    /* (b,c) has the lowest rank, so "abc" is a + bc -> abc; without the
     * (a,bc) merge it would stay [a, bc] even though "ab" exists. */
    char *json = make_json("\"bc\": 256, \"ab\": 257, \"abc\": 258",
                           "[\"b\", \"c\"], [\"a\", \"b\"], [\"a\", \"bc\"]", PRETOK_LLAMA3_JSON, NULL,
                           NULL);
    wf_tokenizer *t = load_json(json);
    wf_ids ids = {0};
    encode(t, "abc", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){258}, 1);
    encode(t, "abab", 4, 0, &ids);
    check_ids(&ids, (int32_t[]){257, 257}, 2);
    wf_tokenizer_destroy(t);
    free(json);
    /* Same vocabulary, (a,b) first: "abc" -> ab + c, and no (ab,c) merge. */
    json = make_json("\"bc\": 256, \"ab\": 257, \"abc\": 258", "[\"a\", \"b\"], [\"b\", \"c\"]",
                     PRETOK_LLAMA3_JSON, NULL, NULL);
    t = load_json(json);
    encode(t, "abc", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){257, 'c'}, 2);
    /* "bcbc" holds two (b,c) pairs: both merge. */
    encode(t, "bcbc", 4, 0, &ids);
    check_ids(&ids, (int32_t[]){256, 256}, 2);
    wf_tokenizer_destroy(t);
    free(json);
    wf_ids_free(&ids);
}

WF_TEST(merges_tie_goes_left) {
    char *json = make_json("\"aa\": 256", "[\"a\", \"a\"]", PRETOK_LLAMA3_JSON, NULL, NULL);
    wf_tokenizer *t = load_json(json);
    wf_ids ids = {0};
    encode(t, "aaa", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){256, 'a'}, 2);
    wf_tokenizer_destroy(t);
    wf_ids_free(&ids);
    free(json);
}

/* The plain reference: symbols are strings; repeatedly merge the adjacent
 * pair of lowest rank (leftmost on ties). */
static size_t ref_bpe(char syms[][64], size_t n, const char *const (*merges)[2], size_t n_merges) {
    for (;;) {
        size_t best = n_merges, at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            for (size_t r = 0; r < best; r++)
                if (strcmp(syms[i], merges[r][0]) == 0 && strcmp(syms[i + 1], merges[r][1]) == 0) {
                    best = r;
                    at = i;
                    break;
                }
        if (best == n_merges) return n;
        size_t la = strlen(syms[at]), lb = strlen(syms[at + 1]);
        memcpy(syms[at] + la, syms[at + 1], lb + 1);
        memmove(syms[at + 1], syms[at + 2], (n - at - 2) * sizeof syms[0]);
        n--;
    }
}

WF_TEST(merges_match_reference_short_and_long_pieces) {
    /* Letters a-c only, so a piece is the whole string (one \p{L}+ match);
     * lengths up to 200 cover the linear scan and the heap. */
    static const char *const merges[][2] = {
        {"a", "b"}, {"b", "c"}, {"c", "a"}, {"ab", "c"}, {"a", "bc"}, {"a", "a"}, {"b", "b"},
        {"ca", "b"}, {"aa", "aa"}, {"ab", "ab"}, {"c", "c"}, {"bb", "c"}, {"abc", "abc"},
        {"cc", "cc"}, {"aa", "b"}, {"cab", "c"}, {"aaaa", "aaaa"}};
    size_t nm = sizeof merges / sizeof *merges;
    const char *tokens[] = {"ab", "bc", "ca", "abc", "aa", "bb", "cab", "aaaa", "abab", "cc",
                            "bbc", "abcabc", "cccc", "aab", "cabc", "aaaaaaaa"};
    char vocab[2048] = "", merges_json[2048] = "";
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++)
        snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "%s\"%s\": %zu", i ? ", " : "",
                 tokens[i], 256 + i);
    for (size_t i = 0; i < nm; i++)
        snprintf(merges_json + strlen(merges_json), sizeof merges_json - strlen(merges_json),
                 "%s[\"%s\", \"%s\"]", i ? ", " : "", merges[i][0], merges[i][1]);
    char *json = make_json(vocab, merges_json, PRETOK_LLAMA3_JSON, NULL, NULL);
    wf_tokenizer *t = load_json(json);
    free(json);
    wf_rng r = wf_rng_make(3, 0);
    static char syms[256][64];
    char text[256];
    wf_ids ids = {0};
    for (int trial = 0; trial < 400; trial++) {
        size_t n = 1 + (size_t)wf_rng_below(&r, trial < 200 ? 40 : 200);
        for (size_t i = 0; i < n; i++) {
            /* Runs of one letter, so the long merges fire too. */
            text[i] = i && wf_rng_below(&r, 2) ? text[i - 1] : (char)('a' + wf_rng_below(&r, 3));
            syms[i][0] = text[i];
            syms[i][1] = '\0';
        }
        size_t k = ref_bpe(syms, n, merges, nm);
        encode(t, text, n, 0, &ids);
        WF_CHECK_EQ(ids.n, k);
        for (size_t i = 0; i < k; i++) WF_CHECK_EQ(ids.ids[i], wf_tokenizer_token_id(t, syms[i]));
    }
    wf_ids_free(&ids);
    wf_tokenizer_destroy(t);
}

WF_TEST(ignore_merges_takes_whole_vocab_pieces) {
    /* "abc" is in the vocabulary but no merge makes it. */
    const char *vocab = "\"ab\": 256, \"abc\": 257";
    char *json = make_json(vocab, "[\"a\", \"b\"]", PRETOK_LLAMA3_JSON, NULL, NULL);
    wf_tokenizer *t = load_json(json);
    wf_ids ids = {0};
    encode(t, "abc", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){256, 'c'}, 2);
    wf_tokenizer_destroy(t);
    free(json);
    json = make_json(vocab, "[\"a\", \"b\"]", PRETOK_LLAMA3_JSON, NULL, ", \"ignore_merges\": true");
    t = load_json(json);
    encode(t, "abc", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){257}, 1);
    encode(t, "abcab", 5, 0, &ids); /* not whole: merges as usual */
    check_ids(&ids, (int32_t[]){256, 'c', 256}, 3);
    wf_tokenizer_destroy(t);
    free(json);
    wf_ids_free(&ids);
}

WF_TEST(missing_byte_tokens_are_dropped) {
    /* A vocabulary without "z": `tokenizers` drops the character when there
     * is no unk_token, and so does weft. */
    char vocab[8192] = "";
    for (int b = 0; b < 256; b++) {
        if (b == 'z') continue;
        char s[4];
        uint8_t byte = (uint8_t)b;
        wf__bpe_bytes_to_str(&byte, 1, s);
        const char *esc = strcmp(s, "\"") == 0 ? "\\\"" : strcmp(s, "\\") == 0 ? "\\\\" : s;
        snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "%s\"%s\": %d",
                 *vocab ? ", " : "", esc, b);
    }
    char json[16384];
    snprintf(json, sizeof json,
             "{\"added_tokens\": [], \"normalizer\": null, \"pre_tokenizer\": %s, \"decoder\": null, "
             "\"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": []}}",
             PRETOK_GPT2_JSON, vocab);
    wf_tokenizer *t = load_json(json);
    wf_ids ids = {0};
    encode(t, "azb", 3, 0, &ids);
    check_ids(&ids, (int32_t[]){'a', 'b'}, 2);
    wf_tokenizer_destroy(t);
    wf_ids_free(&ids);
}

/* ------------------------------------------------------- special tokens */

WF_TEST(special_tokens_with_and_without_parse_special) {
    wf_tokenizer *t = train_small("llama3");
    int32_t bos = wf_tokenizer_bos(t), eos = wf_tokenizer_eos(t), pad = wf_tokenizer_pad(t);
    size_t v = wf_tokenizer_vocab_size(t);
    /* Specials are the last ids, in the default order. */
    WF_CHECK_EQ(bos, (int32_t)v - 3);
    WF_CHECK_EQ(eos, (int32_t)v - 2);
    WF_CHECK_EQ(pad, (int32_t)v - 1);
    WF_CHECK_EQ(wf_tokenizer_token_id(t, "<|end_of_text|>"), eos);
    const char *s = "the<|end_of_text|>of<|begin_of_text|>";
    wf_ids ids = {0}, the = {0}, of = {0};
    encode(t, "the", 3, 1, &the);
    encode(t, "of", 2, 1, &of);
    encode(t, s, strlen(s), 1, &ids);
    WF_CHECK_EQ(ids.n, the.n + of.n + 2);
    WF_CHECK_TRUE(memcmp(ids.ids, the.ids, the.n * sizeof *the.ids) == 0);
    WF_CHECK_EQ(ids.ids[the.n], eos);
    WF_CHECK_TRUE(memcmp(ids.ids + the.n + 1, of.ids, of.n * sizeof *of.ids) == 0);
    WF_CHECK_EQ(ids.ids[ids.n - 1], bos);
    wf_ids_free(&the);
    wf_ids_free(&of);
    encode(t, s, strlen(s), 0, &ids);
    WF_CHECK_TRUE(ids.n > 4);
    for (size_t i = 0; i < ids.n; i++) WF_CHECK_TRUE(ids.ids[i] < bos);
    check_roundtrip(t, s, strlen(s), 0);
    check_roundtrip(t, s, strlen(s), 1);
    size_t l;
    const char *b = wf_tokenizer_id_bytes(t, eos, &l);
    WF_CHECK_TRUE(b && l == strlen("<|end_of_text|>") && memcmp(b, "<|end_of_text|>", l) == 0);
    wf_ids_free(&ids);
    wf_tokenizer_destroy(t);
}

WF_TEST(added_tokens_leftmost_longest) {
    /* "<x>" and "<x>y" overlap: the longest at the leftmost start wins;
     * the non-special token is matched even without parse_special. */
    const char *added =
        "{\"id\": 300, \"content\": \"<x>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": "
        "false, \"normalized\": false, \"special\": true}, {\"id\": 301, \"content\": \"<x>y\", "
        "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
        "\"special\": true}, {\"id\": 302, \"content\": \"hey\", \"single_word\": false, \"lstrip\": "
        "false, \"rstrip\": false, \"normalized\": true, \"special\": false}";
    char *json = make_json("", "", PRETOK_LLAMA3_JSON, added, NULL);
    wf_tokenizer *t = load_json(json);
    free(json);
    WF_CHECK_EQ(wf_tokenizer_vocab_size(t), 303);
    wf_ids ids = {0};
    encode(t, "a<x>yb<x>hey", 12, 1, &ids);
    check_ids(&ids, (int32_t[]){'a', 301, 'b', 300, 302}, 5);
    encode(t, "a<x>hey", 7, 0, &ids);
    check_ids(&ids, (int32_t[]){'a', '<', 'x', '>', 302}, 5);
    wf_ids_free(&ids);
    wf_tokenizer_destroy(t);
}

/* ------------------------------------------------------------ round trip */

WF_TEST(roundtrip_random_bytes) {
    const char *patterns[] = {"llama3", "gpt2"};
    for (int p = 0; p < 2; p++) {
        wf_tokenizer *t = train_small(patterns[p]);
        wf_rng r = wf_rng_make(11, (uint64_t)p);
        char buf[600];
        for (int trial = 0; trial < 300; trial++) {
            size_t n = (size_t)wf_rng_below(&r, sizeof buf);
            int kind = trial % 3;
            for (size_t i = 0; i < n; i++) {
                uint64_t x = wf_rng_u64(&r);
                /* all bytes; mostly ASCII with some high bytes; UTF-8 pieces cut anywhere */
                buf[i] = kind == 0 ? (char)x
                         : kind == 1 ? (char)(x % 5 ? 0x20 + x % 95 : 0x80 + (x >> 8) % 128)
                                     : "\xe6\x9d\xb1\xf0\x9f\x98\x80 a\n\r\t\xff"[x % 14];
            }
            check_roundtrip(t, buf, n, 0);
            check_roundtrip(t, buf, n, 1);
        }
        wf_tokenizer_destroy(t);
    }
}

WF_TEST(roundtrip_prefix_space_tokenizer) {
    /* ByteLevel(add_prefix_space=true) adds a space `tokenizers`-style: the
     * ids then decode to " " + text. */
    const char *pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
                      "\"use_regex\": true}";
    char *json = make_json("\"\xc4\xa0h\": 256", "[\"\xc4\xa0\", \"h\"]", pre, NULL, NULL);
    wf_tokenizer *t = load_json(json);
    free(json);
    wf_ids ids = {0};
    encode(t, "hi", 2, 0, &ids);
    check_ids(&ids, (int32_t[]){256, 'i'}, 2);
    encode(t, " hi", 3, 0, &ids); /* already starts with a space: none added */
    check_ids(&ids, (int32_t[]){256, 'i'}, 2);
    wf_ids_free(&ids);
    wf_tokenizer_destroy(t);
}

WF_TEST(decode_rejects_unknown_ids) {
    wf_tokenizer *t = train_small("llama3");
    int32_t bad[] = {1, (int32_t)wf_tokenizer_vocab_size(t)};
    char *out = NULL;
    size_t len;
    WF_CHECK_ERR(wf_tokenizer_decode(t, bad, 2, &out, &len), WF_ERR_RANGE, "position 1");
    int32_t neg[] = {-1};
    WF_CHECK_ERR(wf_tokenizer_decode(t, neg, 1, &out, &len), WF_ERR_RANGE, "id -1");
    WF_CHECK_TRUE(wf_tokenizer_id_bytes(t, -5, &len) == NULL);
    wf_tokenizer_destroy(t);
}

/* ------------------------------------------------------------ load errors */

WF_TEST(load_malformed_json_names_line_and_column) {
    const char *json = "{\n  \"model\": {\n    \"type\": \"BPE\",,\n  }\n}\n";
    WF_CHECK_ERR(load_json_status(json), WF_ERR_FORMAT, "bad.json:3:");
    wf_tokenizer *t = NULL;
    WF_CHECK_ERR(wf_tokenizer_load(&t, wf_test_path("missing.json")), WF_ERR_NOTFOUND, "missing.json");
}

WF_TEST(load_rejects_unsupported_parts) {
    const char *wordpiece = "{\"normalizer\": null, \"pre_tokenizer\": null, \"model\": {\"type\": "
                            "\"WordPiece\", \"vocab\": {\"a\": 0}}}";
    WF_CHECK_ERR(load_json_status(wordpiece), WF_ERR_UNSUPPORTED, "model.type is \"WordPiece\"");
    const char *fallback = "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
                           "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": "
                           "{}, \"merges\": []}}";
    WF_CHECK_ERR(load_json_status(fallback), WF_ERR_UNSUPPORTED, "model.byte_fallback");
    const char *nfc = "{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": "
                      "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    WF_CHECK_ERR(load_json_status(nfc), WF_ERR_UNSUPPORTED, "normalizer \"NFC\"");
    const char *meta = "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\"}, "
                       "\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    WF_CHECK_ERR(load_json_status(meta), WF_ERR_UNSUPPORTED, "pre_tokenizer type \"Metaspace\"");
    const char *strip = "{\"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"lstrip\": true}], "
                        "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                        "\"vocab\": {}, \"merges\": []}}";
    WF_CHECK_ERR(load_json_status(strip), WF_ERR_UNSUPPORTED, "added_tokens[0]");
    const char *merged = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
                         "\"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    WF_CHECK_ERR(load_json_status(merged), WF_ERR_FORMAT, "model.merges[0]");
    const char *missing = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
                          "\"BPE\", \"vocab\": {\"a\": 0, \"ab\": 1}, \"merges\": [[\"a\", \"b\"]]}}";
    WF_CHECK_ERR(load_json_status(missing), WF_ERR_FORMAT, "the token \"b\" is not in model.vocab");
    const char *dup = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
                      "\"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}";
    WF_CHECK_ERR(load_json_status(dup), WF_ERR_FORMAT, "id 0");
    const char *split = "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                        "\"Split\", \"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"Removed\"}, "
                        "{\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, "
                        "\"merges\": []}}";
    WF_CHECK_ERR(load_json_status(split), WF_ERR_UNSUPPORTED, "behavior");
    const char *badre = "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                        "\"Split\", \"pattern\": {\"Regex\": \"(x\"}, \"behavior\": \"Isolated\"}, "
                        "{\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, "
                        "\"merges\": []}}";
    WF_CHECK_ERR(load_json_status(badre), WF_ERR_FORMAT, "does not compile");
    WF_CHECK_ERR(load_json_status("[1, 2]"), WF_ERR_FORMAT, "top level");
}

/* ------------------------------------------------------ save and reload */

WF_TEST(save_load_roundtrip) {
    wf_tokenizer *t = train_small("gpt2");
    const char *path = wf_test_path("saved.json");
    WF_CHECK_OK(wf_tokenizer_save(t, path));
    wf_tokenizer *u = NULL;
    WF_CHECK_OK(wf_tokenizer_load(&u, path));
    WF_CHECK_EQ(wf_tokenizer_vocab_size(u), wf_tokenizer_vocab_size(t));
    WF_CHECK_EQ(wf_tokenizer_eos(u), wf_tokenizer_eos(t));
    wf_tokenizer_info a, b;
    wf_tokenizer_get_info(t, &a);
    wf_tokenizer_get_info(u, &b);
    WF_CHECK_EQ(a.n_merges, b.n_merges);
    WF_CHECK_STREQ(b.pattern_name, "gpt2");
    size_t len;
    char *text = make_corpus(99, 3000, &len);
    wf_ids x = {0}, y = {0};
    encode(t, text, len, 1, &x);
    encode(u, text, len, 1, &y);
    WF_CHECK_EQ(x.n, y.n);
    WF_CHECK_TRUE(memcmp(x.ids, y.ids, x.n * sizeof *x.ids) == 0);
    /* Saving the loaded one gives the same file. */
    const char *path2 = wf_test_path("saved2.json");
    WF_CHECK_OK(wf_tokenizer_save(u, path2));
    char *f1, *f2;
    size_t l1, l2;
    WF_CHECK_OK(wf_file_read(path, &f1, &l1));
    WF_CHECK_OK(wf_file_read(path2, &f2, &l2));
    WF_CHECK_TRUE(l1 == l2 && memcmp(f1, f2, l1) == 0);
    free(f1);
    free(f2);
    free(text);
    wf_ids_free(&x);
    wf_ids_free(&y);
    wf_tokenizer_destroy(t);
    wf_tokenizer_destroy(u);
}

/* --------------------------------------------------------------- threads */

typedef struct {
    const wf_tokenizer *t;
    const char *text;
    size_t len;
    wf_ids out;
    wf_status st;
} enc_job;

static void *enc_thread(void *arg) {
    enc_job *j = arg;
    for (int rep = 0; rep < 3 && j->st == WF_OK; rep++) {
        j->out.n = 0;
        j->st = wf_tokenizer_encode(j->t, j->text, j->len, 0, &j->out);
    }
    return NULL;
}

WF_TEST(encode_shared_from_threads) {
    wf_tokenizer *t = train_small("llama3");
    size_t len;
    char *text = make_corpus(5, 20000, &len);
    wf_ids ref = {0};
    encode(t, text, len, 0, &ref);
    enc_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (enc_job){t, text, len, {0}, WF_OK};
        WF_CHECK_EQ(pthread_create(&th[i], NULL, enc_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    /* Threads that exited left their states for reuse: a second round. */
    for (int i = 0; i < 2; i++) WF_CHECK_EQ(pthread_create(&th[i], NULL, enc_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        WF_CHECK_OK(jobs[i].st);
        WF_CHECK_EQ(jobs[i].out.n, ref.n);
        WF_CHECK_TRUE(memcmp(jobs[i].out.ids, ref.ids, ref.n * sizeof *ref.ids) == 0);
        wf_ids_free(&jobs[i].out);
    }
    wf_ids_free(&ref);
    free(text);
    wf_tokenizer_destroy(t);
}

/* -------------------------------------------------------------- training */

WF_TEST(train_is_deterministic_across_threads) {
    /* Several files, one of them a single document over 2 MB (cut into
     * units for counting). */
    const char *paths[3] = {wf_test_path("c1.txt"), wf_test_path("c2.txt"), wf_test_path("c3.txt")};
    size_t lens[3] = {2000, 30000, 400000};
    for (int i = 0; i < 3; i++) {
        size_t len;
        char *text = make_corpus(20 + (uint64_t)i, lens[i], &len);
        wf_test_write_file(paths[i], text, len);
        free(text);
    }
    char *files[3];
    size_t flen[3];
    for (int k = 0; k < 3; k++) {
        int threads = k + 1;
        wf_tokenizer *t = train_on(paths, 3, 1000, threads, "llama3", WF_TEXT_DOC_FILE);
        WF_CHECK_EQ(wf_tokenizer_vocab_size(t), 1000);
        char name[32];
        snprintf(name, sizeof name, "t%d.json", threads);
        WF_CHECK_OK(wf_tokenizer_save(t, wf_test_path(name)));
        WF_CHECK_OK(wf_file_read(wf_test_path(name), &files[k], &flen[k]));
        wf_tokenizer_destroy(t);
    }
    for (int k = 1; k < 3; k++) {
        WF_CHECK_EQ(flen[k], flen[0]);
        WF_CHECK_TRUE(memcmp(files[k], files[0], flen[0]) == 0);
    }
    for (int k = 0; k < 3; k++) free(files[k]);
}

WF_TEST(train_learns_frequent_words_and_layout) {
    wf_tokenizer *t = train_small("llama3");
    WF_CHECK_EQ(wf_tokenizer_vocab_size(t), 600);
    /* Bytes first, in byte order. */
    for (int b = 0; b < 256; b++) {
        size_t l;
        const char *s = wf_tokenizer_id_bytes(t, b, &l);
        WF_CHECK_TRUE(s && l == 1 && (uint8_t)s[0] == b);
    }
    /* The most frequent word of the corpus is one token, and the first
     * merge is the most frequent pair. */
    WF_CHECK_TRUE(wf_tokenizer_token_id(t, "the") >= 256);
    WF_CHECK_TRUE(wf_tokenizer_token_id(t, "\xc4\xa0the") >= 256); /* " the" */
    wf_tokenizer_info in;
    wf_tokenizer_get_info(t, &in);
    WF_CHECK_EQ(in.n_added, 3);
    WF_CHECK_STREQ(in.pattern_name, "llama3");
    wf_tokenizer_destroy(t);
}

WF_TEST(train_min_frequency_stops_early) {
    const char *path = wf_test_path("tiny.txt");
    wf_test_write_file(path, "abab abab xyz", 13);
    const char *paths[] = {path};
    wf_bpe_train_opts o = {.vocab_size = 5000, .min_frequency = 2, .n_threads = 1,
                           .pattern = "llama3", .paths = paths, .n_paths = 1};
    wf_tokenizer *t = NULL;
    WF_CHECK_OK(wf_tokenizer_train(&t, &o));
    /* Only pairs seen twice: "ab" (4x), then "abab" (2x), " abab"? (" " + "abab" once: no). */
    WF_CHECK_TRUE(wf_tokenizer_token_id(t, "ab") == 256);
    WF_CHECK_TRUE(wf_tokenizer_token_id(t, "abab") >= 256);
    WF_CHECK_EQ(wf_tokenizer_token_id(t, "xy"), -1);
    WF_CHECK_TRUE(wf_tokenizer_vocab_size(t) < 300);
    WF_CHECK_EQ(wf_tokenizer_eos(t), (int32_t)wf_tokenizer_vocab_size(t) - 2);
    wf_tokenizer_destroy(t);
}

WF_TEST(train_rejects_bad_options) {
    const char *path = wf_test_path("x.txt");
    wf_test_write_file(path, "hello", 5);
    const char *paths[] = {path};
    wf_bpe_train_opts o = {.vocab_size = 200, .n_threads = 1, .paths = paths, .n_paths = 1};
    wf_tokenizer *t = NULL;
    WF_CHECK_ERR(wf_tokenizer_train(&t, &o), WF_ERR_INVALID, "vocab_size 200");
    o.vocab_size = 1000;
    o.pattern = "bert";
    WF_CHECK_ERR(wf_tokenizer_train(&t, &o), WF_ERR_INVALID, "unknown pattern");
    o.pattern = NULL;
    const char *dups[] = {"<a>", "<a>"};
    o.special_tokens = dups;
    o.n_special = 2;
    WF_CHECK_ERR(wf_tokenizer_train(&t, &o), WF_ERR_INVALID, "twice");
    o.special_tokens = NULL;
    const char *none[] = {wf_test_path("nope.txt")};
    o.paths = none;
    WF_CHECK_TRUE(wf_tokenizer_train(&t, &o) != WF_OK);
    WF_CHECK_TRUE(t == NULL);
}

/* ------------------------------------------- other accepted file shapes */

typedef struct {
    char pieces[16][32];
    size_t n;
} piece_list;

static wf_status collect_piece(void *ctx, const char *piece, size_t len) {
    piece_list *l = ctx;
    if (l->n < 16 && len < 32) {
        memcpy(l->pieces[l->n], piece, len);
        l->pieces[l->n][len] = '\0';
    }
    l->n++;
    return WF_OK;
}

WF_TEST(split_with_string_pattern_and_kept_post_processor) {
    /* Split on a literal "ab" (a String pattern, regex characters quoted),
     * then ByteLevel with the GPT-2 regex; a TemplateProcessing
     * post-processor is kept for saving but not applied. */
    const char *pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                      "\"pattern\": {\"String\": \"a.\"}, \"behavior\": \"Isolated\", \"invert\": "
                      "false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                      "\"use_regex\": true}]}";
    char *json = make_json("", "", pre, NULL, NULL);
    const char *tp = "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [], "
                     "\"pair\": [], \"special_tokens\": {}}";
    char *at = strstr(json, "\"post_processor\": null");
    WF_CHECK_TRUE(at != NULL);
    size_t head = (size_t)(at - json), tail = strlen(at + strlen("\"post_processor\": null"));
    char *json2 = malloc(head + strlen(tp) + tail + 1);
    memcpy(json2, json, head);
    strcpy(json2 + head, tp);
    strcat(json2, at + strlen("\"post_processor\": null"));
    wf_tokenizer *t = load_json(json2);
    piece_list l = {0};
    WF_CHECK_OK(wf_tokenizer_pretokenize(t, "xa.y ab a.", 10, collect_piece, &l));
    /* Split: "x" | "a." | "y ab " | "a." (the "." is not "any character");
     * then the GPT-2 regex on each, as `tokenizers` gives:
     * ['x', 'a', '.', 'y', 'Ġab', 'Ġ', 'a', '.'] */
    WF_CHECK_EQ(l.n, 8);
    const char *want[] = {"x", "a", ".", "y", " ab", " ", "a", "."};
    for (size_t i = 0; i < 8; i++) WF_CHECK_STREQ(l.pieces[i], want[i]);
    wf_ids ids = {0};
    encode(t, "ab", 2, 1, &ids);
    check_ids(&ids, (int32_t[]){'a', 'b'}, 2); /* nothing added around the text */
    const char *path = wf_test_path("resaved.json");
    WF_CHECK_OK(wf_tokenizer_save(t, path));
    char *saved;
    size_t sl;
    WF_CHECK_OK(wf_file_read(path, &saved, &sl));
    WF_CHECK_TRUE(strstr(saved, "\"TemplateProcessing\"") != NULL);
    WF_CHECK_TRUE(strstr(saved, "\"String\": \"a.\"") != NULL);
    wf_tokenizer *u = NULL;
    WF_CHECK_OK(wf_tokenizer_load(&u, path));
    wf_tokenizer_info in;
    wf_tokenizer_get_info(u, &in);
    WF_CHECK_STREQ(in.pretokenizer, "Sequence[Split(String), ByteLevel(add_prefix_space=false, use_regex=true)]");
    free(saved);
    free(json);
    free(json2);
    wf_ids_free(&ids);
    wf_tokenizer_destroy(t);
    wf_tokenizer_destroy(u);
}

/* ------------------------------------------------ the tokenize pipeline */

/* wf_tokenize_run, the library call behind `weft tokenize`: every
 * document's tokens land in the dataset (the splits add up to the
 * tokenizer's own count plus one end-of-text per document), the thread
 * count does not change the files, and the errors name what is wrong. */
WF_TEST(tokenize_run_writes_the_dataset_for_any_thread_count) {
    wf_tokenizer *t = train_small("gpt2");
    const char *tok_path = wf_test_path("tok.json");
    WF_CHECK_OK(wf_tokenizer_save(t, tok_path));
    size_t len;
    char *text = make_corpus(7, 5000, &len);
    const char *in = wf_test_path("docs.txt");
    wf_test_write_file(in, text, len);
    uint64_t want_tokens = 0, want_docs = 0;
    for (size_t b = 0; b < len;) {
        size_t e = b;
        while (e < len && text[e] != '\n') e++;
        if (e > b) {
            wf_ids ids = {0};
            encode(t, text + b, e - b, 1, &ids);
            want_tokens += ids.n + 1;
            want_docs++;
            wf_ids_free(&ids);
        }
        b = e + 1;
    }
    const char *inputs[] = {in};
    char *first = NULL;
    size_t first_len = 0;
    for (int threads = 1; threads <= 3; threads += 2) {
        wf_tokenize_config c;
        WF_CHECK_OK(wf_tokenize_config_default(&c));
        free(c.tokenizer);
        free(c.output);
        free(c.text_mode);
        c.tokenizer = strdup(tok_path);
        c.output = strdup(wf_test_path("ds"));
        c.text_mode = strdup("line");
        c.threads = threads;
        c.val_fraction = 0.2;
        c.force = 1;
        wf_tokenize_summary sum;
        WF_CHECK_OK(wf_tokenize_run(&c, inputs, 1, &sum));
        WF_CHECK_EQ(sum.threads, threads);
        WF_CHECK_EQ(sum.docs[0] + sum.docs[1], want_docs);
        WF_CHECK_EQ(sum.tokens[0] + sum.tokens[1], want_tokens);
        WF_CHECK_TRUE(sum.docs[1] > 0 && sum.docs[0] > sum.docs[1]);
        char path[700];
        snprintf(path, sizeof path, "%s/train-00000.wfs", c.output);
        char *data;
        size_t n;
        WF_CHECK_OK(wf_file_read(path, &data, &n));
        if (!first) {
            first = data;
            first_len = n;
        } else {
            WF_CHECK_TRUE(n == first_len && memcmp(data, first, n) == 0);
            free(data);
        }
        /* Without force an existing dataset is kept, and the error says so. */
        c.force = 0;
        WF_CHECK_ERR(wf_tokenize_run(&c, inputs, 1, &sum), WF_ERR_INVALID, "pass --force");
        wf_tokenize_config_free(&c);
    }
    wf_tokenize_config c;
    WF_CHECK_OK(wf_tokenize_config_default(&c));
    WF_CHECK_ERR(wf_tokenize_run(&c, inputs, 1, &(wf_tokenize_summary){0}), WF_ERR_CONFIG,
                 "--tokenizer is required");
    wf_tokenize_config_free(&c);
    free(first);
    free(text);
    wf_tokenizer_destroy(t);
}
