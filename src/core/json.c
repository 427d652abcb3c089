/* JSON string output (include/weft/json.h): one escaper, three sinks. */
#include "weft/json.h"

#include <string.h>

/* The escape of byte c: its length (1: the byte itself) and, when named,
 * its letter. */
static size_t escape_of(unsigned char c, char *letter) {
    *letter = 0;
    switch (c) {
    case '"': *letter = '"'; return 2;
    case '\\': *letter = '\\'; return 2;
    case '\b': *letter = 'b'; return 2;
    case '\f': *letter = 'f'; return 2;
    case '\n': *letter = 'n'; return 2;
    case '\r': *letter = 'r'; return 2;
    case '\t': *letter = 't'; return 2;
    default: return c < 0x20 ? 6 : 1;
    }
}

size_t wf_json_escaped_len(const char *s, size_t len) {
    size_t n = 0;
    char letter;
    for (size_t i = 0; i < len; i++) n += escape_of((unsigned char)s[i], &letter);
    return n;
}

size_t wf_json_escape(char *dst, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    char *o = dst;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char letter;
        size_t n = escape_of(c, &letter);
        if (n == 1) {
            *o++ = (char)c;
        } else if (letter) {
            *o++ = '\\';
            *o++ = letter;
        } else {
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
    }
    return (size_t)(o - dst);
}

wf_status wf_buf_json_str(wf_buf *b, const char *s, size_t len) {
    WF_TRY(wf_buf_reserve(b, wf_json_escaped_len(s, len) + 2));
    char *o = b->data + b->len;
    *o++ = '"';
    o += wf_json_escape(o, s, len);
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return WF_OK;
}

void wf_json_fput_body(FILE *f, const char *s) {
    /* In chunks, so that a long string needs no allocation. */
    char out[6 * 256];
    size_t len = strlen(s);
    for (size_t i = 0; i < len; i += 256) {
        size_t n = len - i < 256 ? len - i : 256;
        fwrite(out, 1, wf_json_escape(out, s + i, n), f);
    }
}

void wf_json_fput_str(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    wf_json_fput_body(f, s);
    fputc('"', f);
}
