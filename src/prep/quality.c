/* Quality rules in the style of C4 (Raffel et al. 2020) and Gopher (Rae et
 * al. 2021), with their published thresholds as defaults.
 *
 * C4 first works on lines: a page with "lorem ipsum" (or, if asked, a curly
 * bracket) goes; lines that mention javascript, do not end in terminal
 * punctuation or have too few words are removed; a page left with too few
 * sentences goes. Then Gopher's document rules: word count, mean word
 * length, '#' and ellipsis per word, bullet and ellipsis lines, words with
 * letters, stop words; then the repetition rules: repeated lines and
 * paragraphs (by count and by characters), the share of the most frequent
 * 2-, 3- and 4-gram, and the share of characters in repeated 5- to 10-grams
 * (counted as datatrove counts them). A digit-ratio rule is added.
 *
 * Words are runs of non-space characters; "characters" are bytes except for
 * the mean word length, which counts code points. The rules that count
 * words assume space-separated words: a rule set with word_rules off (the
 * languages written without spaces, and languages with no rule set of
 * their own) skips them and keeps the others (lines, paragraphs, bullets,
 * ellipses, digits, repetition of lines and paragraphs). Stop words are
 * matched in lower case (Unicode simple case mapping) with the
 * punctuation around a word trimmed. Terminal punctuation and sentence ends
 * include the full stops of scripts other than Latin (CJK, Devanagari,
 * Arabic, Ethiopic, Myanmar, Khmer, Tibetan, Armenian) and closing quotes,
 * so that C4's line rule does not empty pages in those scripts. The rule
 * sets themselves are made in quality_langs.c. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"

typedef struct {
    size_t off, len;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, size_t off, size_t len) {
    if (WF_GROW(s->v, s->cap, s->n + 1, 256) != WF_OK) return -1;
    s->v[s->n++] = (span){off, len};
    return 0;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Words of text[0, len) appended to w. */
static int split_words(const char *t, size_t len, size_t base, spans *w) {
    size_t i = 0;
    while (i < len) {
        while (i < len && is_space((unsigned char)t[i])) i++;
        size_t j = i;
        while (j < len && !is_space((unsigned char)t[j])) j++;
        if (j > i && spans_push(w, base + i, j - i) != 0) return -1;
        i = j;
    }
    return 0;
}

static size_t count_words(const char *t, size_t len) {
    size_t n = 0, i = 0;
    while (i < len) {
        while (i < len && is_space((unsigned char)t[i])) i++;
        if (i < len) n++;
        while (i < len && !is_space((unsigned char)t[i])) i++;
    }
    return n;
}

static const char *find_ci(const char *h, size_t hn, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= hn; i++)
        if (tolower((unsigned char)h[i]) == needle[0] && strncasecmp(h + i, needle, n) == 0) return h + i;
    return NULL;
}

static int ends_with_bytes(const char *s, size_t n, const char *suffix) {
    size_t m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Full stops (and question and exclamation marks) of other scripts, which
 * end a sentence whatever follows: 。 ｡ ！ ？ ． (CJK), । ॥ (Devanagari), ؟ ۔
 * (Arabic, Urdu), ። ፧ (Ethiopic), ။ (Myanmar), ។ ៕ (Khmer), ། (Tibetan),
 * ։ (Armenian). */
static const char *const full_stops[] = {
    "\xe3\x80\x82", "\xef\xbd\xa1", "\xef\xbc\x81", "\xef\xbc\x9f", "\xef\xbc\x8e", "\xe0\xa5\xa4",
    "\xe0\xa5\xa5", "\xd8\x9f",     "\xdb\x94",     "\xe1\x8d\xa2", "\xe1\x8d\xa7", "\xe1\x81\x8b",
    "\xe1\x9f\x94", "\xe1\x9f\x95", "\xe0\xbc\x8d", "\xd6\x89"};
/* Other characters a line may end with: … ” ’ “ » « 」 』 (closing quotes
 * of several languages: „...“ and »...« in German, «...» in French). */
static const char *const closers[] = {"\xe2\x80\xa6", "\xe2\x80\x9d", "\xe2\x80\x99", "\xe2\x80\x9c",
                                      "\xc2\xbb",     "\xc2\xab",     "\xe3\x80\x8d", "\xe3\x80\x8f"};

/* The length of the full stop of another script at t[i], or 0. */
static size_t full_stop_at(const char *t, size_t n, size_t i) {
    if ((unsigned char)t[i] < 0xC2) return 0;
    for (size_t k = 0; k < sizeof full_stops / sizeof *full_stops; k++) {
        size_t m = strlen(full_stops[k]);
        if (n - i >= m && memcmp(t + i, full_stops[k], m) == 0) return m;
    }
    return 0;
}

/* C4's terminal punctuation: . ! ? " ' and the ellipsis character, and
 * (weft's addition) closing quotes and the full stops of other scripts. */
static int terminal_punct(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    if (!n) return 0;
    char c = s[n - 1];
    if (c == '.' || c == '!' || c == '?' || c == '"' || c == '\'') return 1;
    if ((unsigned char)c < 0x80) return 0;
    for (size_t k = 0; k < sizeof closers / sizeof *closers; k++)
        if (ends_with_bytes(s, n, closers[k])) return 1;
    for (size_t k = 0; k < sizeof full_stops / sizeof *full_stops; k++)
        if (ends_with_bytes(s, n, full_stops[k])) return 1;
    return 0;
}

/* Sentences: runs of . ! ? (or an ellipsis) followed by a space, a line end
 * or the end, possibly after closing quotes or brackets; and runs of the
 * full stops of other scripts, wherever they are. */
static size_t count_sentences(const char *t, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t m = full_stop_at(t, n, i);
        if (m) {
            count++;
            i += m;
            while (i < n && (m = full_stop_at(t, n, i)) != 0) i += m;
            i--;
            continue;
        }
        char c = t[i];
        if (c != '.' && c != '!' && c != '?') continue;
        size_t j = i + 1;
        while (j < n && (t[j] == '.' || t[j] == '!' || t[j] == '?')) j++;
        size_t k = j;
        while (k < n && (t[k] == '"' || t[k] == '\'' || t[k] == ')' || t[k] == ']')) k++;
        if (k == n || is_space((unsigned char)t[k])) count++;
        i = j - 1;
    }
    return count;
}

/* ---- C4 line filters ---- */

static int line_kept(const wf_prep_rules *q, const char *s, size_t n) {
    if (q->c4_javascript && find_ci(s, n, "javascript")) return 0;
    if (q->c4_terminal_punct && !terminal_punct(s, n)) return 0;
    if (q->word_rules && q->c4_min_words_per_line > 0 && count_words(s, n) < (size_t)q->c4_min_words_per_line)
        return 0;
    return 1;
}

/* Rewrites text keeping the lines that pass (blank lines separate
 * paragraphs and are kept, one at most in a row). */
static wf_status c4_lines(const wf_prep_rules *q, wf_buf *text, uint64_t *removed) {
    char *t = text->data;
    size_t n = text->len, o = 0, i = 0;
    int blank_pending = 0;
    while (i < n) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - t) : n;
        size_t len = e - i;
        if (len == 0) {
            blank_pending = o > 0;
        } else if (line_kept(q, t + i, len)) {
            if (o) t[o++] = '\n';
            if (blank_pending) t[o++] = '\n';
            blank_pending = 0;
            memmove(t + o, t + i, len);
            o += len;
        } else {
            (*removed)++;
        }
        i = e + 1;
    }
    text->len = o;
    if (text->data) text->data[o] = '\0';
    return WF_OK;
}

/* ---- counting tables for n-grams ---- */

typedef struct {
    uint64_t key;
    uint32_t count;
} kc;

typedef struct {
    kc *slots;
    size_t cap;
} kctable;

static int kct_init(kctable *t, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap > t->cap) {
        free(t->slots);
        t->slots = malloc(cap * sizeof *t->slots);
        if (!t->slots) {
            t->cap = 0;
            return -1;
        }
        t->cap = cap;
    }
    memset(t->slots, 0, t->cap * sizeof *t->slots);
    return 0;
}

/* Adds key; returns its count after the add. */
static uint32_t kct_add(kctable *t, uint64_t key) {
    if (key == 0) key = 1;
    size_t mask = t->cap - 1;
    size_t i = (size_t)(key ^ (key >> 29)) & mask;
    while (t->slots[i].key && t->slots[i].key != key) i = (i + 1) & mask;
    t->slots[i].key = key;
    return ++t->slots[i].count;
}

static uint64_t gram_hash(const uint64_t *wh, size_t i, size_t n) {
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ n;
    for (size_t j = 0; j < n; j++) {
        h ^= wh[i + j];
        h *= UINT64_C(0x100000001b3);
        h ^= h >> 32;
    }
    return h;
}

/* Repeated lines or paragraphs: how many, and how many bytes they hold. */
static void dup_units(const spans *u, const char *t, kctable *kt, size_t *dup_n, size_t *dup_bytes) {
    *dup_n = *dup_bytes = 0;
    for (size_t i = 0; i < u->n; i++) {
        uint64_t h = wf_hash64(t + u->v[i].off, u->v[i].len);
        if (kct_add(kt, h) > 1) {
            (*dup_n)++;
            *dup_bytes += u->v[i].len;
        }
    }
}

static int is_bullet_start(const char *s, size_t n) {
    static const char *const bullets[] = {"-", "*", "\xe2\x80\xa2", "\xe2\x80\xa3", "\xe2\x81\x83",
                                          "\xe2\x97\xa6", "\xe2\x97\x8f", "\xe2\x96\xaa", "\xc2\xb7"};
    for (size_t k = 0; k < sizeof bullets / sizeof *bullets; k++) {
        size_t m = strlen(bullets[k]);
        if (n >= m && memcmp(s, bullets[k], m) == 0) return 1;
    }
    return 0;
}

static int has_letter(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            if (isalpha(u[i])) return 1;
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(u + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) {
            i++;
            continue;
        }
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) return 1;
        i += (size_t)k;
    }
    return 0;
}

/* A word that is only punctuation or symbols (ASCII ones, and … – —). */
static int symbol_only(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        if (u[i] >= 0x80) {
            if (n - i >= 3 && u[i] == 0xE2 && u[i + 1] == 0x80 &&
                (u[i + 2] == 0xA6 || u[i + 2] == 0x93 || u[i + 2] == 0x94)) {
                i += 2;
                continue;
            }
            return 0;
        }
        if (isalnum(u[i])) return 0;
    }
    return 1;
}

static size_t count_sub(const char *t, size_t n, const char *needle) {
    size_t m = strlen(needle), k = 0;
    for (size_t i = 0; i + m <= n;) {
        const char *p = memchr(t + i, needle[0], n - i - m + 1);
        if (!p) break;
        i = (size_t)(p - t);
        if (memcmp(p, needle, m) == 0) {
            k++;
            i += m;
        } else {
            i++;
        }
    }
    return k;
}

/* Punctuation: ASCII's, and Unicode's categories P* (quotes, dashes,
 * brackets, ¿ ¡ « »). The length of the one at s[0, n), or 0. */
static size_t punct_at(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return ispunct(s[0]) ? 1 : 0;
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) return 0;
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO ? (size_t)k : 0;
}

size_t wf__prep_word_lower(const char *s, size_t n, char *out, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            if (o + 2 > cap) return 0;
            out[o++] = (char)tolower(u[i++]);
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(u + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower(cp), enc);
        if (m <= 0 || o + (size_t)m + 1 > cap) return 0;
        memcpy(out + o, enc, (size_t)m);
        o += (size_t)m;
        i += (size_t)k;
    }
    if (o + 1 > cap) return 0;
    out[o] = '\0';
    return o;
}

static int stop_word(const wf_prep_rules *q, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k;
    while (n && (k = punct_at(u, n)) != 0) u += k, n -= k;
    while (n) { /* the last character: back to its first byte */
        size_t at = n - 1;
        while (at > 0 && (u[at] & 0xC0) == 0x80) at--;
        if (!punct_at(u + at, n - at)) break;
        n = at;
    }
    char low[128];
    size_t len = n ? wf__prep_word_lower((const char *)u, n, low, sizeof low) : 0;
    if (!len) return 0;
    for (size_t i = 0; i < q->stop_words.n; i++) {
        const char *w = q->stop_words.items[i];
        if (strlen(w) == len && memcmp(w, low, len) == 0) return 1;
    }
    return 0;
}

static int gopher(const wf_prep_rules *c, const char *t, size_t n, spans *words, spans *lines,
                  spans *paras, uint64_t *wh, kctable *kt) {
    /* Words that are not only punctuation count (none without word rules:
     * words is empty then). */
    size_t n_words = 0, word_cps = 0, alpha = 0, stops = 0;
    for (size_t i = 0; i < words->n; i++) {
        const char *w = t + words->v[i].off;
        size_t wl = words->v[i].len;
        if (has_letter(w, wl)) alpha++;
        if (symbol_only(w, wl)) continue;
        n_words++;
        for (size_t k = 0; k < wl; k++) word_cps += ((unsigned char)w[k] & 0xC0) != 0x80;
        if (c->min_stop_words > 0 && c->stop_words.n && stops < (size_t)c->min_stop_words &&
            stop_word(c, w, wl))
            stops++;
    }
    int wr = c->word_rules;
    if (wr && n_words < (size_t)c->min_words) return R_Q_MIN_WORDS;
    if (wr && n_words > (size_t)c->max_words) return R_Q_MAX_WORDS;
    double mean_len = n_words ? (double)word_cps / (double)n_words : 0.0;
    if (n_words && (mean_len < c->min_mean_word_len || mean_len > c->max_mean_word_len)) return R_Q_WORD_LEN;
    if (n_words) {
        size_t hashes = count_sub(t, n, "#");
        size_t ellipses = count_sub(t, n, "...") + count_sub(t, n, "\xe2\x80\xa6");
        if ((double)hashes / (double)n_words > c->max_symbol_word_ratio ||
            (double)ellipses / (double)n_words > c->max_symbol_word_ratio)
            return R_Q_SYMBOLS;
    }
    size_t bullets = 0, ell_lines = 0;
    for (size_t i = 0; i < lines->n; i++) {
        const char *l = t + lines->v[i].off;
        size_t ll = lines->v[i].len;
        if (is_bullet_start(l, ll)) bullets++;
        if (ends_with_bytes(l, ll, "...") || ends_with_bytes(l, ll, "\xe2\x80\xa6")) ell_lines++;
    }
    if (lines->n && (double)bullets / (double)lines->n > c->max_bullet_lines) return R_Q_BULLETS;
    if (lines->n && (double)ell_lines / (double)lines->n > c->max_ellipsis_lines) return R_Q_ELLIPSIS;
    if (wr && words->n && (double)alpha / (double)words->n < c->min_alpha_words) return R_Q_ALPHA;
    if (wr && c->min_stop_words > 0 && c->stop_words.n && stops < (size_t)c->min_stop_words) return R_Q_STOP;
    size_t digits = 0, non_space = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        if (is_space(ch) || (ch & 0xC0) == 0x80) continue;
        non_space++;
        digits += ch >= '0' && ch <= '9';
    }
    if (non_space && (double)digits / (double)non_space > c->max_digit_ratio) return R_Q_DIGITS;

    /* Repetition. */
    size_t dn, db;
    if (kct_init(kt, lines->n) != 0) return R_NONE;
    dup_units(lines, t, kt, &dn, &db);
    if (lines->n && (double)dn / (double)lines->n > c->max_dup_line_frac) return R_Q_DUP_LINES;
    size_t line_dup_bytes = db;
    if (kct_init(kt, paras->n) != 0) return R_NONE;
    dup_units(paras, t, kt, &dn, &db);
    if (paras->n && (double)dn / (double)paras->n > c->max_dup_para_frac) return R_Q_DUP_PARAS;
    if (n && (double)line_dup_bytes / (double)n > c->max_dup_line_char_frac) return R_Q_DUP_LINE_CHARS;
    if (n && (double)db / (double)n > c->max_dup_para_char_frac) return R_Q_DUP_PARA_CHARS;

    if (!wr) return R_NONE;
    size_t W = words->n;
    for (size_t i = 0; i < W; i++) wh[i] = wf_hash64(t + words->v[i].off, words->v[i].len);
    for (int g = 0; g < 3; g++) {
        size_t ng = (size_t)g + 2;
        if (W < ng) break;
        if (kct_init(kt, W) != 0) return R_NONE;
        uint32_t best = 0;
        size_t best_at = 0;
        for (size_t i = 0; i + ng <= W; i++) {
            uint32_t cnt = kct_add(kt, gram_hash(wh, i, ng));
            if (cnt > best) best = cnt, best_at = i;
        }
        size_t gram_bytes = ng - 1;
        for (size_t j = 0; j < ng; j++) gram_bytes += words->v[best_at + j].len;
        if (best > 1 && (double)gram_bytes * best / (double)n > c->max_top_ngram[g]) return R_Q_TOP2 + g;
    }
    for (int g = 0; g < 6; g++) {
        size_t ng = (size_t)g + 5;
        if (W < ng) break;
        if (kct_init(kt, W) != 0) return R_NONE;
        size_t rep = 0, i = 0;
        while (i + ng <= W) {
            if (kct_add(kt, gram_hash(wh, i, ng)) > 1) {
                for (size_t j = 0; j < ng; j++) rep += words->v[i + j].len;
                i += ng;
            } else {
                i++;
            }
        }
        if ((double)rep / (double)n > c->max_dup_ngram[g]) return R_Q_DUP5 + g;
    }
    return R_NONE;
}

int wf__prep_quality(const wf_prep_rules *c, wf_buf *text, uint64_t *lines_removed) {
    *lines_removed = 0;
    if (c->c4_lorem_ipsum && find_ci(text->data, text->len, "lorem ipsum")) return R_Q_LOREM;
    if (c->c4_curly_bracket && memchr(text->data, '{', text->len)) return R_Q_CURLY;
    if (c->c4_javascript || c->c4_terminal_punct || (c->word_rules && c->c4_min_words_per_line > 0)) {
        if (c4_lines(c, text, lines_removed) != WF_OK) return R_NONE;
        if (text->len == 0) return R_Q_LINES_EMPTY;
    }
    if (c->c4_min_sentences > 0 && count_sentences(text->data, text->len) < (size_t)c->c4_min_sentences)
        return R_Q_SENTENCES;

    const char *t = text->data;
    size_t n = text->len;
    spans words = {0}, lines = {0}, paras = {0};
    kctable kt = {0};
    uint64_t *wh = NULL;
    int rc = R_NONE;
    /* Lines (non-empty) and paragraphs (blocks between blank lines). */
    size_t i = 0, para_start = 0, para_end = 0;
    int in_para = 0, fail = 0;
    while (i <= n && !fail) {
        const char *nl = i < n ? memchr(t + i, '\n', n - i) : NULL;
        size_t e = nl ? (size_t)(nl - t) : n;
        size_t len = e - i;
        if (len) {
            fail |= spans_push(&lines, i, len);
            if (!in_para) para_start = i, in_para = 1;
            para_end = e;
        } else if (in_para) {
            fail |= spans_push(&paras, para_start, para_end - para_start);
            in_para = 0;
        }
        i = e + 1;
    }
    if (in_para && !fail) fail |= spans_push(&paras, para_start, para_end - para_start);
    if (!fail && c->word_rules) fail |= split_words(t, n, 0, &words);
    if (!fail) {
        wh = malloc((words.n + 1) * sizeof *wh);
        fail = !wh;
    }
    if (!fail) rc = gopher(c, t, n, &words, &lines, &paras, wh, &kt);
    free(wh);
    free(kt.slots);
    free(words.v);
    free(lines.v);
    free(paras.v);
    return rc;
}
