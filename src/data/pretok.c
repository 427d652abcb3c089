/* The byte-level BPE pre-tokenizer: the regexes that cut text into pieces
 * before merges are applied, compiled with PCRE2 (UTF + UCP, JIT) and
 * iterated so that every byte of the input belongs to exactly one piece.
 *
 * `tokenizers` runs these patterns with Oniguruma. The two engines agree on
 * the patterns weft uses except for two things, which are rewritten before
 * compiling: \s (PCRE2's also matches U+180E, Oniguruma's is the Unicode
 * White_Space set), and the Unicode version behind \p{L} and \p{N}
 * (Debian's PCRE2 10.42 has Unicode 14 tables, the Oniguruma inside
 * `tokenizers` 0.23 Unicode 16: the letters and digits assigned in 15 and
 * 16 are added to the classes when the PCRE2 at hand lacks them).
 *
 * The widened classes cost PCRE2's JIT its fast path for \p{L} (text
 * encodes 30% slower), so such a pattern is compiled twice: as written, and
 * widened. A subject none of whose characters is one of the added code
 * points matches the same with either, and almost all text is like that;
 * wf__pretok_split_begin looks (a byte scan) and picks the fast one when it can.
 *
 * Invalid UTF-8 never breaks matching: PCRE2_MATCH_INVALID_UTF makes an
 * invalid sequence match nothing, and the iterator returns the bytes
 * between matches as pieces of their own.
 *
 * The two built-in patterns are compiled too, but pieces come from a
 * hand-written scanner (below) that cuts exactly what PCRE2 would, several
 * times faster; PCRE2 runs any other pattern.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe_impl.h"

/* The GPT-2 pattern, as `tokenizers`' ByteLevel(use_regex=true) uses it. */
const char wf__pretok_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* The Llama 3 pattern, as in Meta's tokenizer.json. */
const char wf__pretok_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *wf__pretok_named(const char *name) {
    if (!name || strcmp(name, "llama3") == 0) return wf__pretok_llama3;
    if (strcmp(name, "gpt2") == 0) return wf__pretok_gpt2;
    return NULL;
}

const char *wf__pretok_name_of(const char *pattern) {
    if (!pattern) return NULL;
    if (strcmp(pattern, wf__pretok_llama3) == 0) return "llama3";
    if (strcmp(pattern, wf__pretok_gpt2) == 0) return "gpt2";
    return NULL;
}

/* Oniguruma's \s in Unicode mode: the White_Space property. Written as
 * class items so it can go inside a bracket expression. */
static const char ONIG_SPACE_ITEMS[] =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

/* Letters (\p{L}) and digits (\p{N}) of Unicode 15.0 and 16.0 that PCRE2
 * builds with Unicode 14 tables do not know. Found by classifying every
 * code point with both engines (PCRE2 10.42 against the Oniguruma of
 * `tokenizers` 0.23); Oniguruma knew every PCRE2 member, nothing else
 * differed. Sorted, inclusive. */
static const uint32_t EXTRA_L[][2] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
    {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0},
    {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C},
    {0x18CFF, 0x18CFF}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A},
    {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
    {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
static const uint32_t EXTRA_N[][2] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59},
    {0x16130, 0x16139}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}};
#define N_EXTRA_L (sizeof EXTRA_L / sizeof *EXTRA_L)
#define N_EXTRA_N (sizeof EXTRA_N / sizeof *EXTRA_N)

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Whether the text holds one of the added code points. They are all
 * U+1C89.. (3-byte UTF-8 led by E1 or EA) or U+10000.. (4-byte). */
static int has_extra(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned b = p[i];
        uint32_t cp;
        if ((b == 0xE1 || b == 0xEA) && i + 2 < n) {
            cp = (b & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu);
        } else if (b >= 0xF0 && b <= 0xF4 && i + 3 < n) {
            cp = (b & 0x07u) << 18 | (p[i + 1] & 0x3Fu) << 12 | (p[i + 2] & 0x3Fu) << 6 |
                 (p[i + 3] & 0x3Fu);
        } else {
            i++;
            continue;
        }
        /* An invalid sequence decodes to garbage here: at worst the exact
         * pattern is used where the fast one would have done. */
        if (in_ranges(EXTRA_L, N_EXTRA_L, cp) || in_ranges(EXTRA_N, N_EXTRA_N, cp)) return 1;
        i++;
    }
    return 0;
}

/* Whether PCRE2's tables lack the Unicode 16 letters and digits. */
static int pcre2_lacks_extra;
static pthread_once_t lacks_once = PTHREAD_ONCE_INIT;

static void probe_pcre2(void) {
    static const char *const probes[][2] = {{"\\p{L}", "\xf0\x9e\x97\x90"},  /* U+1E5D0 */
                                            {"\\p{N}", "\xf0\x9e\x97\xb1"}}; /* U+1E5F1 */
    for (int k = 0; k < 2; k++) {
        int err;
        PCRE2_SIZE at;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)probes[k][0], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
        pcre2_match_data *md = c ? pcre2_match_data_create(1, NULL) : NULL;
        int rc = md ? pcre2_match(c, (PCRE2_SPTR)probes[k][1], 4, 0, 0, md, NULL) : -1;
        if (rc < 0) pcre2_lacks_extra = 1;
        if (md) pcre2_match_data_free(md);
        if (c) pcre2_code_free(c);
    }
}

typedef struct {
    char *o;
} outbuf;

static void put(outbuf *b, const char *s, size_t n) {
    memcpy(b->o, s, n);
    b->o += n;
}

/* Writes class items, bracketed (negated with neg) when outside a class. */
static void put_items(outbuf *b, int in_class, int neg, const char *a, size_t an) {
    if (!in_class) put(b, neg ? "[^" : "[", neg ? 2 : 1);
    put(b, a, an);
    if (!in_class) put(b, "]", 1);
}

/* Writes "\x{A}-\x{B}..." for ranges. */
static void put_ranges(outbuf *b, const uint32_t (*r)[2], size_t n) {
    for (size_t i = 0; i < n; i++) {
        int k = r[i][0] == r[i][1] ? sprintf(b->o, "\\x{%X}", (unsigned)r[i][0])
                                   : sprintf(b->o, "\\x{%X}-\\x{%X}", (unsigned)r[i][0],
                                             (unsigned)r[i][1]);
        b->o += k;
    }
}

/* Rewrites \s (in and out of brackets) and \S (outside brackets) to the
 * Oniguruma set and, with `widen`, \p{L} / \p{N} (also \pL, \pN, and
 * \P{..} outside brackets) to include the Unicode 15-16 additions. Returns
 * a malloc'd pattern or NULL when out of memory. */
static char *translate_pattern(const char *p, int widen) {
    size_t n = strlen(p), item = sizeof ONIG_SPACE_ITEMS + (N_EXTRA_L + N_EXTRA_N) * 24 + 16;
    char *out = malloc(n * item + 1);
    if (!out) return NULL;
    outbuf b = {out};
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            i++;
            if (e == 's' || (e == 'S' && !in_class)) {
                put_items(&b, in_class, e == 'S', ONIG_SPACE_ITEMS, sizeof ONIG_SPACE_ITEMS - 1);
                continue;
            }
            if ((e == 'p' || (e == 'P' && !in_class)) && i + 1 < n) {
                /* \p{L}, \p{N}, \pL, \pN (and \P outside brackets) */
                const char *rest = p + i + 1;
                size_t len = strncmp(rest, "{L}", 3) == 0 || strncmp(rest, "{N}", 3) == 0 ? 3
                             : (rest[0] == 'L' || rest[0] == 'N')                      ? 1
                                                                                        : 0;
                if (len && widen) {
                    int letter = rest[len == 3 ? 1 : 0] == 'L';
                    if (!in_class) put(&b, e == 'P' ? "[^" : "[", e == 'P' ? 2 : 1);
                    put(&b, letter ? "\\p{L}" : "\\p{N}", 5);
                    put_ranges(&b, letter ? EXTRA_L : EXTRA_N, letter ? N_EXTRA_L : N_EXTRA_N);
                    if (!in_class) put(&b, "]", 1);
                    i += len;
                    continue;
                }
            }
            put(&b, p + i - 1, 2);
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            put(&b, &c, 1);
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && p[i + 1] == '^') put(&b, p + ++i, 1);
            if (i + 1 < n && p[i + 1] == ']') put(&b, p + ++i, 1);
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a bracket expression. */
            const char *end = strstr(p + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end - (p + i)) + 2;
                put(&b, p + i, k);
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = 0;
        put(&b, &c, 1);
    }
    *b.o = '\0';
    return out;
}

/* ------------------------------------------------- hand-written scanner */

/* The two built-in patterns, matched by hand: PCRE2's JIT spends most of
 * an encode's time finding the pieces, and these patterns need no
 * backtracking beyond one character. Each alternative below is written
 * as the regex engine tries it (leftmost alternative first, greedy
 * repeats, the one-character backtrack of \s+(?!\S)); tests/unit compares
 * the pieces with PCRE2's on random and multilingual text, invalid UTF-8
 * included, and tests/py the ids with `tokenizers`.
 *
 * A character is classified as a letter (\p{L}), digit (\p{N}), space
 * (Oniguruma's \s), CR/LF (also spaces) or other. Invalid UTF-8 (and the
 * end of the text) is C_BAD: it matches no item, not even negated ones, as
 * with PCRE2_MATCH_INVALID_UTF, so a run of such bytes is a gap piece. */
enum { C_OTHER, C_L, C_N, C_WS, C_NL, C_BAD };

/* Classes of code points >= 0x80, filled a block of 256 at a time on
 * first use (by PCRE2 itself, with the widened classes, so the scanner
 * agrees with the exact pattern), under a lock; readers check the block's
 * flag with acquire ordering and need no lock. The table (1.1 MB of
 * zero pages until touched) and the class regex live as long as the
 * process. */
#define CLASS_BLOCKS (0x110000 >> 8)
static uint8_t cp_class[0x110000];
static atomic_uchar block_ready[CLASS_BLOCKS];
static pthread_mutex_t class_mu = PTHREAD_MUTEX_INITIALIZER;
static pcre2_code *class_re;
static pcre2_match_data *class_md;
static pthread_once_t class_once = PTHREAD_ONCE_INIT;
static uint8_t ascii_class[128];

/* ONIG_SPACE_ITEMS as a test. */
static int is_onig_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static void class_init(void) {
    pthread_once(&lacks_once, probe_pcre2);
    char *pat = translate_pattern("(\\p{L})|(\\p{N})", pcre2_lacks_extra);
    int err;
    PCRE2_SIZE at;
    if (pat)
        class_re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &at, NULL);
    free(pat);
    if (class_re) class_md = pcre2_match_data_create_from_pattern(class_re, NULL);
    if (!class_md && class_re) {
        pcre2_code_free(class_re);
        class_re = NULL;
    }
    for (uint32_t c = 0; c < 128; c++) {
        ascii_class[c] = (c == '\r' || c == '\n') ? C_NL
                         : is_onig_space(c)       ? C_WS
                         : (c >= '0' && c <= '9') ? C_N
                         : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? C_L
                                                                   : C_OTHER;
    }
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12);
        o[1] = (char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18);
    o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static void fill_block(uint32_t blk) {
    pthread_mutex_lock(&class_mu);
    if (!atomic_load_explicit(&block_ready[blk], memory_order_relaxed)) {
        for (uint32_t c = blk << 8; c < (blk + 1) << 8; c++) {
            uint8_t k = C_OTHER;
            if (c >= 0xD800 && c <= 0xDFFF) {
                k = C_BAD; /* never asked: the decoder refuses surrogates */
            } else if (is_onig_space(c)) {
                k = (c == '\r' || c == '\n') ? C_NL : C_WS;
            } else {
                char u[4];
                size_t ul = put_utf8(c, u);
                int rc = pcre2_match(class_re, (PCRE2_SPTR)u, ul, 0, 0, class_md, NULL);
                if (rc == 2) k = C_L;
                else if (rc == 3) k = C_N;
            }
            cp_class[c] = k;
        }
        atomic_store_explicit(&block_ready[blk], 1, memory_order_release);
    }
    pthread_mutex_unlock(&class_mu);
}

static inline int class_of(uint32_t c) {
    if (c < 0x80) return ascii_class[c];
    if (!atomic_load_explicit(&block_ready[c >> 8], memory_order_acquire)) fill_block(c >> 8);
    return cp_class[c];
}

/* char_at for a byte >= 0x80 (out of line: ASCII is the common case). */
static int char_at_multi(const uint8_t *s, size_t n, size_t i, size_t *len) {
    unsigned b = s[i];
    *len = 1;
    size_t left = n - i;
    if (b >= 0xC2 && b <= 0xDF) {
        if (left < 2 || (s[i + 1] & 0xC0) != 0x80) return C_BAD;
        *len = 2;
        return class_of((b & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu));
    }
    if (b >= 0xE0 && b <= 0xEF) {
        if (left < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return C_BAD;
        uint32_t c = (b & 0x0Fu) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu);
        if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return C_BAD;
        *len = 3;
        return class_of(c);
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (left < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
            (s[i + 3] & 0xC0) != 0x80)
            return C_BAD;
        uint32_t c = (b & 0x07u) << 18 | (s[i + 1] & 0x3Fu) << 12 | (s[i + 2] & 0x3Fu) << 6 |
                     (s[i + 3] & 0x3Fu);
        if (c < 0x10000 || c > 0x10FFFF) return C_BAD;
        *len = 4;
        return class_of(c);
    }
    return C_BAD;
}

/* The class of the character at s[i] and its length in bytes (1 for an
 * invalid byte; 0 at the end). Strict UTF-8 (RFC 3629): no overlong
 * forms, surrogates or code points past U+10FFFF, as PCRE2 checks. */
static inline int char_at(const uint8_t *s, size_t n, size_t i, size_t *len) {
    if (i >= n) {
        *len = 0;
        return C_BAD;
    }
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
    }
    return char_at_multi(s, n, i, len);
}

/* The end of the run of characters of class k that starts at i. */
static inline size_t run_of(const uint8_t *s, size_t n, size_t i, int k) {
    for (;;) {
        while (i < n && s[i] < 0x80 && ascii_class[s[i]] == k) i++;
        if (i >= n || s[i] < 0x80) return i;
        size_t l;
        if (char_at(s, n, i, &l) != k) return i;
        i += l;
    }
}

/* 's 't 're 've 'm 'll 'd after the apostrophe at i-1 (caseless: with
 * Unicode case folding, s also matches U+017F LONG S); the end, or 0. */
static size_t contraction(const uint8_t *s, size_t n, size_t i, int caseless) {
    if (i >= n) return 0;
    unsigned a = s[i], f = caseless ? a | 0x20 : a;
    if (f == 's' || f == 't' || f == 'm' || f == 'd') return i + 1;
    if (caseless && a == 0xC5 && i + 1 < n && s[i + 1] == 0xBF) return i + 2;
    if (i + 1 >= n) return 0;
    unsigned b = caseless ? s[i + 1] | 0x20 : s[i + 1];
    if ((f == 'r' && b == 'e') || (f == 'v' && b == 'e') || (f == 'l' && b == 'l')) return i + 2;
    return 0;
}

/* A run of spaces from i (s[i] is one): the end of its last CR/LF (0 if
 * none), the start of its last character, its end and its length in
 * characters. */
typedef struct {
    size_t last_nl_end, last_start, end, count;
} space_run;

static space_run spaces_at(const uint8_t *s, size_t n, size_t i) {
    space_run r = {0, i, i, 0};
    for (;;) {
        size_t l;
        int k = char_at(s, n, r.end, &l);
        if (k != C_WS && k != C_NL) return r;
        r.last_start = r.end;
        r.end += l;
        r.count++;
        if (k == C_NL) r.last_nl_end = r.end;
    }
}

/* \s+(?!\S)|\s+ on a run of spaces: all of it when no character follows
 * (end of text or invalid UTF-8, which \S does not match), else all but
 * its last character, unless that leaves nothing. */
static size_t spaces_end(const uint8_t *s, size_t n, const space_run *r) {
    size_t l;
    if (char_at(s, n, r->end, &l) == C_BAD || r->count < 2) return r->end;
    return r->last_start;
}

static size_t piece_llama3(const uint8_t *s, size_t n, size_t i) {
    size_t l0, l1;
    int c0 = char_at(s, n, i, &l0);
    size_t j = i + l0, e;
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (s[i] == '\'' && (e = contraction(s, n, j, 1)) != 0) return e - i;
    int c1 = char_at(s, n, j, &l1);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 == C_L) return run_of(s, n, j, C_L) - i;
    if ((c0 == C_OTHER || c0 == C_WS) && c1 == C_L) return run_of(s, n, j + l1, C_L) - i;
    /* \p{N}{1,3} */
    if (c0 == C_N) {
        e = j;
        for (int k = 1; k < 3 && char_at(s, n, e, &l1) == C_N; k++) e += l1;
        return e - i;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if ((c0 == C_OTHER) || (s[i] == ' ' && c1 == C_OTHER)) {
        e = run_of(s, n, c0 == C_OTHER ? j : j + l1, C_OTHER);
        while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
        return e - i;
    }
    /* \s*[\r\n]+|\s+(?!\S)|\s+ */
    space_run r = spaces_at(s, n, i);
    if (r.last_nl_end) return r.last_nl_end - i;
    return spaces_end(s, n, &r) - i;
}

static size_t piece_gpt2(const uint8_t *s, size_t n, size_t i) {
    size_t l0, l1;
    int c0 = char_at(s, n, i, &l0);
    size_t j = i + l0, e;
    /* 's|'t|'re|'ve|'m|'ll|'d */
    if (s[i] == '\'' && (e = contraction(s, n, j, 0)) != 0) return e - i;
    /*  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+ */
    if (c0 == C_L || c0 == C_N || c0 == C_OTHER) return run_of(s, n, j, c0) - i;
    int c1 = char_at(s, n, j, &l1);
    if (s[i] == ' ' && (c1 == C_L || c1 == C_N || c1 == C_OTHER))
        return run_of(s, n, j + l1, c1) - i;
    /* \s+(?!\S)|\s+ */
    space_run r = spaces_at(s, n, i);
    return spaces_end(s, n, &r) - i;
}

size_t wf__pretok_scan_piece(int scan, const uint8_t *s, size_t n, size_t pos) {
    /* The commonest pieces first: a word, or a space and a word, in
     * ASCII (the first alternatives that can match them in both patterns
     * are \p{L}+ and [^\r\n\p{L}\p{N}]?\p{L}+ / ?\p{L}+). */
    unsigned b = s[pos];
    if (b < 0x80) {
        if (ascii_class[b] == C_L) return run_of(s, n, pos + 1, C_L) - pos;
        if (b == ' ' && pos + 1 < n && s[pos + 1] < 0x80 && ascii_class[s[pos + 1]] == C_L)
            return run_of(s, n, pos + 2, C_L) - pos;
    }
    size_t l;
    if (char_at(s, n, pos, &l) == C_BAD) {
        /* A gap: every valid character starts a match of either pattern. */
        size_t e = pos + 1;
        while (e < n && char_at(s, n, e, &l) == C_BAD) e++;
        return e - pos;
    }
    return scan == WF_SCAN_LLAMA3 ? piece_llama3(s, n, pos) : piece_gpt2(s, n, pos);
}

static wf_status compile_one(pcre2_code **code, int *jit, const char *pat, int literal,
                             const char *pattern, const char *where) {
    /* PCRE2_LITERAL allows no UCP (nor needs it). */
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int err = 0;
    PCRE2_SIZE at = 0;
    *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &at, NULL);
    if (!*code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return wf_error(WF_ERR_FORMAT,
                        "%s: pre-tokenizer pattern does not compile (%s, near offset %zu of the "
                        "rewritten pattern): %s",
                        where, (const char *)msg, (size_t)at, pattern);
    }
    *jit = pcre2_jit_compile(*code, PCRE2_JIT_COMPLETE) == 0;
    return WF_OK;
}

wf_status wf__pretok_regex_compile(wf_regex *r, const char *pattern, int literal, const char *where) {
    memset(r, 0, sizeof *r);
    pthread_once(&lacks_once, probe_pcre2);
    if (literal) return compile_one(&r->code, &r->jit, pattern, 1, pattern, where);
    pthread_once(&class_once, class_init);
    if (class_re) {
        /* The regex is compiled all the same: the tests compare the two. */
        if (strcmp(pattern, wf__pretok_llama3) == 0) r->scan = WF_SCAN_LLAMA3;
        else if (strcmp(pattern, wf__pretok_gpt2) == 0) r->scan = WF_SCAN_GPT2;
    }
    char *exact = translate_pattern(pattern, pcre2_lacks_extra);
    char *fast = pcre2_lacks_extra ? translate_pattern(pattern, 0) : NULL;
    wf_status st = WF_OK;
    if (!exact || (pcre2_lacks_extra && !fast)) {
        st = wf_error(WF_ERR_NOMEM, "%s: out of memory compiling a pattern", where);
    } else {
        st = compile_one(&r->code, &r->jit, exact, 0, pattern, where);
        if (st == WF_OK && fast && strcmp(fast, exact) != 0)
            st = compile_one(&r->fast, &r->fast_jit, fast, 0, pattern, where);
    }
    free(exact);
    free(fast);
    if (st != WF_OK) wf__pretok_regex_free(r);
    return st;
}

void wf__pretok_regex_free(wf_regex *r) {
    if (r->code) pcre2_code_free(r->code);
    if (r->fast) pcre2_code_free(r->fast);
    memset(r, 0, sizeof *r);
}

wf_status wf__pretok_regex_state_init(wf_regex_state *st, const wf_regex *r) {
    memset(st, 0, sizeof *st);
    st->md = pcre2_match_data_create(1, NULL);
    st->mc = pcre2_match_context_create(NULL);
    if (!st->md || !st->mc) goto nomem;
    if (r->jit || r->fast_jit) {
        /* Backtracking on long runs of one class needs little stack; 1 MiB
         * is far more than the built-in patterns ever use. */
        st->js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (!st->js) goto nomem;
        pcre2_jit_stack_assign(st->mc, NULL, st->js);
    }
    return WF_OK;
nomem:
    wf__pretok_regex_state_free(st);
    return wf_error(WF_ERR_NOMEM, "out of memory creating regex match state");
}

void wf__pretok_regex_state_free(wf_regex_state *st) {
    if (st->md) pcre2_match_data_free(st->md);
    if (st->mc) pcre2_match_context_free(st->mc);
    if (st->js) pcre2_jit_stack_free(st->js);
    memset(st, 0, sizeof *st);
}

void wf__pretok_split_begin(wf_split_iter *it, const wf_regex *r, const char *s, size_t n) {
    it->scan = r->scan;
    int fast = r->fast && !r->scan && !has_extra(s, n);
    it->code = fast ? r->fast : r->code;
    it->jit = fast ? r->fast_jit : r->jit;
    it->s = s;
    it->n = n;
    it->pos = 0;
    it->pending = 0;
    it->m_off = it->m_len = 0;
}

int wf__pretok_split_next(const wf_regex *r, wf_regex_state *st, wf_split_iter *it, size_t *off,
                  size_t *len) {
    if (it->pending) {
        it->pending = 0;
        *off = it->m_off;
        *len = it->m_len;
        it->pos = it->m_off + it->m_len;
        return 1;
    }
    if (it->pos >= it->n) return 0;
    if (it->scan) {
        *off = it->pos;
        *len = wf__pretok_scan_piece(it->scan, (const uint8_t *)it->s, it->n, it->pos);
        it->pos += *len;
        return 1;
    }
    size_t start = it->pos;
    for (;;) {
        int rc = it->jit ? pcre2_jit_match(it->code, (PCRE2_SPTR)it->s, it->n, start, 0, st->md, st->mc)
                         : pcre2_match(it->code, (PCRE2_SPTR)it->s, it->n, start, 0, st->md, st->mc);
        if (rc == PCRE2_ERROR_NOMATCH) {
            *off = it->pos;
            *len = it->n - it->pos;
            it->pos = it->n;
            return 1;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            wf_error(WF_ERR_INTERNAL, "pre-tokenizer regex failed at byte %zu: %s", start,
                     (const char *)msg);
            return -1;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* Empty match: search again from the next character. */
            start = ms + 1;
            while (start < it->n && ((unsigned char)it->s[start] & 0xC0) == 0x80) start++;
            if (start >= it->n) {
                *off = it->pos;
                *len = it->n - it->pos;
                it->pos = it->n;
                return 1;
            }
            continue;
        }
        if (ms > it->pos) {
            /* The gap before the match is a piece; the match comes next. */
            *off = it->pos;
            *len = ms - it->pos;
            it->m_off = ms;
            it->m_len = me - ms;
            it->pending = 1;
            it->pos = ms;
            return 1;
        }
        *off = ms;
        *len = me - ms;
        it->pos = me;
        return 1;
    }
}
