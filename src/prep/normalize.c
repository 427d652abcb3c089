/* Text normalization: the checks every document gets (binary content,
 * UTF-8 validity and repair), Unicode normalization with utf8proc (NFC by
 * default), the line cleanup the later stages rely on (one paragraph per
 * line, no stray spaces, at most one blank line in a row), and CCNet's
 * normalization of a paragraph before it is hashed for dedup.
 *
 * ASCII text skips the Unicode work: it is already in every normal form. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "prep/prep_impl.h"

/* Decodes one UTF-8 sequence at s (n > 0 bytes left): its length, and the
 * code point in *cp; 0 if the bytes there are not valid UTF-8. */
static size_t utf8_decode(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        *cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
        *cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

int wf_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs eight bytes at a time. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & UINT64_C(0x8080808080808080)) break;
            i += 8;
        }
        if (i >= len) break;
        int32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static int is_ascii(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & UINT64_C(0x8080808080808080)) return 0;
    }
    for (; i < len; i++)
        if (s[i] & 0x80) return 0;
    return 1;
}

/* Copies with every invalid byte replaced by U+FFFD. */
static wf_status utf8_repair(const char *str, size_t len, wf_buf *out) {
    const unsigned char *s = (const unsigned char *)str;
    out->len = 0;
    WF_TRY(wf_buf_reserve(out, len + len / 2 + 4));
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (k) {
            WF_TRY(wf_buf_append(out, s + i, k));
            i += k;
        } else {
            WF_TRY(wf_buf_append(out, "\xef\xbf\xbd", 3));
            i++;
        }
    }
    return WF_OK;
}

/* NFC or NFKC of valid UTF-8 into out, touching only what can change.
 *
 * An ASCII character has combining class 0, is its own normal form and is
 * never the second character of a composition, so normalization never
 * reaches across one: the text before an ASCII character normalizes on its
 * own. So only the runs of non-ASCII characters, each with the ASCII
 * character just before it (which may be the base of a combining mark that
 * follows), go through utf8proc; everything else is copied. Mostly-ASCII
 * text (most of the web) then costs little more than a copy. */
static wf_status unicode_form(const char *str, size_t len, int compat, wf_buf *out) {
    const unsigned char *s = (const unsigned char *)str;
    utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    out->len = 0;
    WF_TRY(wf_buf_reserve(out, len + 16));
    utf8proc_int32_t stack_buf[256], *cps = stack_buf;
    utf8proc_ssize_t cps_cap = 256;
    wf_status st = WF_OK;
    size_t i = 0;
    while (i < len && st == WF_OK) {
        size_t p = i;
        while (p < len && s[p] < 0x80) p++;
        if (p == len) {
            st = wf_buf_append(out, s + i, len - i);
            break;
        }
        size_t seg = p > i ? p - 1 : p; /* the ASCII character before the run goes with it */
        size_t e = p;
        while (e < len && s[e] >= 0x80) e++;
        if (seg > i) st = wf_buf_append(out, s + i, seg - i);
        if (st != WF_OK) break;
        utf8proc_ssize_t n = utf8proc_decompose(s + seg, (utf8proc_ssize_t)(e - seg), cps, cps_cap, opt);
        if (n > cps_cap) {
            utf8proc_int32_t *nc = malloc((size_t)n * sizeof *nc);
            if (!nc) {
                st = wf_error(WF_ERR_NOMEM, "out of memory normalizing text");
                break;
            }
            if (cps != stack_buf) free(cps);
            cps = nc;
            cps_cap = n;
            n = utf8proc_decompose(s + seg, (utf8proc_ssize_t)(e - seg), cps, cps_cap, opt);
        }
        if (n < 0) {
            st = wf_buf_append(out, s + seg, e - seg); /* cannot happen on valid UTF-8: keep as is */
        } else {
            utf8proc_ssize_t m = utf8proc_reencode(cps, n, opt);
            st = m < 0 ? wf_buf_append(out, s + seg, e - seg) : wf_buf_append(out, cps, (size_t)m);
        }
        i = e;
    }
    if (cps != stack_buf) free(cps);
    return st;
}

/* What the cleanup does with a code point. */
enum { CH_KEEP, CH_SPACE, CH_NEWLINE, CH_DROP, CH_CR };

static int classify(int32_t cp) {
    if (cp < 0x80) {
        if (cp == '\n') return CH_NEWLINE;
        if (cp == '\r') return CH_CR;
        if (cp == ' ' || cp == '\t' || cp == '\f' || cp == '\v') return CH_SPACE;
        if (cp < 0x20 || cp == 0x7F) return CH_DROP;
        return CH_KEEP;
    }
    if (cp < 0xA0) return CH_DROP; /* C1 controls */
    switch (cp) {
    case 0x00A0: case 0x1680: case 0x202F: case 0x205F: case 0x3000: return CH_SPACE;
    case 0x00AD: case 0x200B: case 0x2060: case 0xFEFF: return CH_DROP; /* soft hyphen, zero width */
    case 0x2028: case 0x2029: return CH_NEWLINE;
    default: break;
    }
    if (cp >= 0x2000 && cp <= 0x200A) return CH_SPACE;
    return CH_KEEP;
}

/* The line cleanup, from `s` (valid UTF-8) into `out`. */
static wf_status cleanup(const char *str, size_t len, wf_buf *out) {
    const unsigned char *s = (const unsigned char *)str;
    out->len = 0;
    WF_TRY(wf_buf_reserve(out, len + 1));
    char *o = out->data;
    size_t n = 0;
    int space = 0, line_text = 0, newlines = 0;
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        size_t k;
        if (s[i] < 0x80) {
            cp = s[i];
            k = 1;
        } else {
            k = utf8_decode(s + i, len - i, &cp);
            if (!k) { /* cannot happen on repaired input; be safe */
                i++;
                continue;
            }
        }
        int cls = classify(cp);
        if (cls == CH_CR) {
            if (i + 1 < len && s[i + 1] == '\n') {
                i++;
                continue;
            }
            cls = CH_NEWLINE;
        }
        switch (cls) {
        case CH_KEEP:
            if (newlines && n) {
                o[n++] = '\n';
                if (newlines > 1) o[n++] = '\n';
            }
            newlines = 0;
            if (space && line_text) o[n++] = ' ';
            space = 0;
            memcpy(o + n, s + i, k);
            n += k;
            line_text = 1;
            break;
        case CH_SPACE: space = 1; break;
        case CH_NEWLINE:
            if (line_text) newlines = 1;
            else if (n) newlines++;
            line_text = 0;
            space = 0;
            break;
        default: break;
        }
        i += k;
    }
    /* Output never exceeds input: each kept byte, space or newline replaces
     * at least one input byte (a blank line needs two newlines in). */
    out->len = n;
    o[n] = '\0';
    return WF_OK;
}

wf_norm_result wf_text_normalize(const char *s, size_t len, const wf_normalize_opts *o, wf_buf *out,
                                 int *repaired) {
    *repaired = 0;
    /* Binary: any NUL, or too many control characters. */
    size_t ctrl = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = u[i];
        if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != '\v') {
            if (c == 0) return WF_NORM_BINARY;
            ctrl++;
        }
    }
    if (len && (double)ctrl > o->max_control_ratio * (double)len) return WF_NORM_BINARY;

    wf_buf tmp = {0};
    const char *cur = s;
    size_t cur_len = len;
    int ascii = is_ascii(s, len);
    if (!ascii && !wf_utf8_valid(s, len)) {
        if (o->drop_invalid) return WF_NORM_INVALID;
        if (utf8_repair(s, len, &tmp) != WF_OK) {
            wf_buf_free(&tmp);
            return WF_NORM_INVALID;
        }
        *repaired = 1;
        cur = tmp.data;
        cur_len = tmp.len;
    }
    wf_buf mapped = {0};
    if (!ascii && o->form && cur_len) {
        if (unicode_form(cur, cur_len, o->form == 2, &mapped) == WF_OK) {
            cur = mapped.data;
            cur_len = mapped.len;
        } /* else (out of memory): keep the text as it is */
    }
    wf_status st;
    if (o->cleanup) {
        st = cleanup(cur, cur_len, out);
    } else {
        out->len = 0;
        st = wf_buf_append(out, cur, cur_len);
    }
    wf_buf_free(&mapped);
    wf_buf_free(&tmp);
    if (st != WF_OK) return WF_NORM_INVALID;
    size_t k = 0;
    while (k < out->len && (out->data[k] == ' ' || out->data[k] == '\n' || out->data[k] == '\t' ||
                            out->data[k] == '\r'))
        k++;
    return k == out->len ? WF_NORM_EMPTY : WF_NORM_OK;
}

/* ---- CCNet's normalization for hashing ---- */

static void put_cp(wf_buf *out, int32_t cp) {
    utf8proc_uint8_t b[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, b);
    memcpy(out->data + out->len, b, (size_t)k);
    out->len += (size_t)k;
}

wf_status wf_dedup_normalize(const char *str, size_t len, wf_buf *out) {
    const unsigned char *s = (const unsigned char *)str;
    out->len = 0;
    WF_TRY(wf_buf_reserve(out, len + 64));
    int space = 0;
    size_t i = 0;
    while (i < len) {
        /* Room for the most one input code point can become (a space and
         * eight four-byte code points). */
        if (out->len + 40 >= out->cap) WF_TRY(wf_buf_reserve(out, 40));
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
            else if (c >= '0' && c <= '9') c = '0';
            else if (c <= ' ' || c == 0x7F) {
                space = 1;
                continue;
            } else if (!(c >= 'a' && c <= 'z')) {
                continue; /* ASCII punctuation and symbols */
            }
            if (space && out->len) out->data[out->len++] = ' ';
            space = 0;
            out->data[out->len++] = (char)c;
            continue;
        }
        int32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (!k) {
            i++;
            continue;
        }
        i += k;
        utf8proc_category_t cat = utf8proc_category(cp);
        switch (cat) {
        case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
        case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
        case UTF8PROC_CATEGORY_PO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CC:
            continue;
        case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
            space = 1;
            continue;
        default: break;
        }
        if (space && out->len) out->data[out->len++] = ' ';
        space = 0;
        if (cat == UTF8PROC_CATEGORY_ND) {
            out->data[out->len++] = '0';
            continue;
        }
        int32_t dec[8];
        int bound = 0;
        utf8proc_ssize_t nd = utf8proc_decompose_char(
            cp, dec, 8, UTF8PROC_DECOMPOSE | UTF8PROC_STRIPMARK | UTF8PROC_CASEFOLD, &bound);
        if (nd < 0 || nd > 8) {
            put_cp(out, cp);
            continue;
        }
        for (utf8proc_ssize_t j = 0; j < nd; j++) put_cp(out, dec[j]);
    }
    out->data[out->len] = '\0';
    return WF_OK;
}
