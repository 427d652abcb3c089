/* The byte-level BPE pre-tokenizer: the regexes that cut text into pieces
 * before merges are applied, compiled with PCRE2 (UTF + UCP, JIT) and
 * iterated so that every byte of the input belongs to exactly one piece.
 *
 * `tokenizers` runs these patterns with Oniguruma. The two engines agree on
 * the patterns weft uses except for \s: PCRE2's also matches U+180E and
 * some other code points Oniguruma leaves out, so \s and \S are rewritten
 * to Oniguruma's set (Unicode White_Space) before compiling.
 *
 * Invalid UTF-8 never breaks matching: PCRE2_MATCH_INVALID_UTF makes an
 * invalid sequence match nothing, and the iterator returns the bytes
 * between matches as pieces of their own.
 */
#include <stdlib.h>
#include <string.h>

#include "data/bpe_impl.h"

/* The GPT-2 pattern, as `tokenizers`' ByteLevel(use_regex=true) uses it. */
const char WF_PRETOK_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* The Llama 3 pattern, as in Meta's tokenizer.json. */
const char WF_PRETOK_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *wf_pretok_named(const char *name) {
    if (!name || strcmp(name, "llama3") == 0) return WF_PRETOK_LLAMA3;
    if (strcmp(name, "gpt2") == 0) return WF_PRETOK_GPT2;
    return NULL;
}

const char *wf_pretok_name_of(const char *pattern) {
    if (!pattern) return NULL;
    if (strcmp(pattern, WF_PRETOK_LLAMA3) == 0) return "llama3";
    if (strcmp(pattern, WF_PRETOK_GPT2) == 0) return "gpt2";
    return NULL;
}

/* Oniguruma's \s in Unicode mode: the White_Space property. Written as
 * class items so it can go inside a bracket expression. */
static const char ONIG_SPACE_ITEMS[] =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

/* Rewrites \s (in and out of brackets) and \S (outside brackets) to the
 * Oniguruma set. Returns a malloc'd pattern or NULL when out of memory. */
static char *translate_pattern(const char *p) {
    size_t n = strlen(p), cap = n * (sizeof ONIG_SPACE_ITEMS + 3) + 1;
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            i++;
            if (e == 's') {
                if (!in_class) *o++ = '[';
                memcpy(o, ONIG_SPACE_ITEMS, sizeof ONIG_SPACE_ITEMS - 1);
                o += sizeof ONIG_SPACE_ITEMS - 1;
                if (!in_class) *o++ = ']';
            } else if (e == 'S' && !in_class) {
                *o++ = '[';
                *o++ = '^';
                memcpy(o, ONIG_SPACE_ITEMS, sizeof ONIG_SPACE_ITEMS - 1);
                o += sizeof ONIG_SPACE_ITEMS - 1;
                *o++ = ']';
            } else {
                *o++ = '\\';
                *o++ = e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            *o++ = c;
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && p[i + 1] == '^') *o++ = p[++i];
            if (i + 1 < n && p[i + 1] == ']') *o++ = p[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a bracket expression. */
            const char *end = strstr(p + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end - (p + i)) + 2;
                memcpy(o, p + i, k);
                o += k;
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = 0;
        *o++ = c;
    }
    *o = '\0';
    return out;
}

wf_status wf_regex_compile(wf_regex *r, const char *pattern, int literal, const char *where) {
    memset(r, 0, sizeof *r);
    char *pat = literal ? strdup(pattern) : translate_pattern(pattern);
    if (!pat) return wf_error(WF_ERR_NOMEM, "%s: out of memory compiling a pattern", where);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
    int err = 0;
    PCRE2_SIZE at = 0;
    r->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &at, NULL);
    free(pat);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return wf_error(WF_ERR_FORMAT,
                        "%s: pre-tokenizer pattern does not compile (%s, near offset %zu of the "
                        "rewritten pattern): %s",
                        where, (const char *)msg, (size_t)at, pattern);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return WF_OK;
}

void wf_regex_free(wf_regex *r) {
    if (r->code) pcre2_code_free(r->code);
    memset(r, 0, sizeof *r);
}

wf_status wf_regex_state_init(wf_regex_state *st, const wf_regex *r) {
    memset(st, 0, sizeof *st);
    st->md = pcre2_match_data_create(1, NULL);
    st->mc = pcre2_match_context_create(NULL);
    if (!st->md || !st->mc) goto nomem;
    if (r->jit) {
        /* Backtracking on long runs of one class needs little stack; 1 MiB
         * is far more than the built-in patterns ever use. */
        st->js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (!st->js) goto nomem;
        pcre2_jit_stack_assign(st->mc, NULL, st->js);
    }
    return WF_OK;
nomem:
    wf_regex_state_free(st);
    return wf_error(WF_ERR_NOMEM, "out of memory creating regex match state");
}

void wf_regex_state_free(wf_regex_state *st) {
    if (st->md) pcre2_match_data_free(st->md);
    if (st->mc) pcre2_match_context_free(st->mc);
    if (st->js) pcre2_jit_stack_free(st->js);
    memset(st, 0, sizeof *st);
}

void wf_split_begin(wf_split_iter *it, const char *s, size_t n) {
    it->s = s;
    it->n = n;
    it->pos = 0;
    it->pending = 0;
    it->m_off = it->m_len = 0;
}

int wf_split_next(const wf_regex *r, wf_regex_state *st, wf_split_iter *it, size_t *off,
                  size_t *len) {
    if (it->pending) {
        it->pending = 0;
        *off = it->m_off;
        *len = it->m_len;
        it->pos = it->m_off + it->m_len;
        return 1;
    }
    if (it->pos >= it->n) return 0;
    size_t start = it->pos;
    for (;;) {
        int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)it->s, it->n, start, 0, st->md, st->mc)
                        : pcre2_match(r->code, (PCRE2_SPTR)it->s, it->n, start, 0, st->md, st->mc);
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
