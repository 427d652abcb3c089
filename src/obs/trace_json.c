/* A streaming reader of Chrome trace JSON for the analyzer. It walks the
 * top-level object, reads distributedInfo, and hands out the elements of
 * "traceEvents" one at a time, flattened to the fields the analysis uses;
 * everything else is skipped without being stored. Memory is the read
 * buffer plus the longest string kept (a name), whatever the file size.
 * Reads through zlib, so .json.gz works the same way (gzread passes plain
 * files through).
 *
 * It is a reader for traces, not a general JSON library: it checks the
 * syntax it walks (and reports the line of an error), but keeps only the
 * first 64 KiB of a string and the values listed in trace_jevent. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "obs/trace_analyze_impl.h"
#include "weft/buf.h"

#define RBUF (1 << 18)
#define MAX_STR (1 << 16)

/* Strings are read into core byte buffers, kept to their first MAX_STR bytes. */
typedef wf_buf sbuf;

typedef enum { ST_START = 0, ST_TOP, ST_EVENTS, ST_END } jstate;

struct trace_jreader {
    gzFile gz;
    char *path;
    unsigned char *buf;
    size_t pos, len;
    int eof;
    int64_t line;
    jstate state;
    int events_first;        /* no element of traceEvents read yet */
    int top_first;           /* no top-level key read yet */
    int64_t rank, world_size;
    int saw_events;          /* the top-level "traceEvents" array was met */
    int array_doc;           /* the document is the events array itself */
    sbuf key, name, cat, weft_cat, tmp;
    char num[128];
};

/* ---- bytes ------------------------------------------------------------------- */

static int refill(trace_jreader *r) {
    if (r->eof) return 0;
    int n = gzread(r->gz, r->buf, RBUF);
    if (n <= 0) {
        r->eof = 1;
        return 0;
    }
    r->pos = 0;
    r->len = (size_t)n;
    return 1;
}

/* Next byte, or -1 at the end. */
static inline int get(trace_jreader *r) {
    if (r->pos >= r->len && !refill(r)) return -1;
    return r->buf[r->pos++];
}

static inline int peek(trace_jreader *r) {
    if (r->pos >= r->len && !refill(r)) return -1;
    return r->buf[r->pos];
}

/* Skips whitespace; returns the next byte without consuming it. */
static inline int ws(trace_jreader *r) {
    for (;;) {
        if (r->pos >= r->len && !refill(r)) return -1;
        int c = r->buf[r->pos];
        if (c == ' ' || c == '\t' || c == '\r') {
            r->pos++;
        } else if (c == '\n') {
            r->line++;
            r->pos++;
        } else {
            return c;
        }
    }
}

static wf_status bad(trace_jreader *r, const char *what) {
    return wf_error(WF_ERR_FORMAT, "%s:%" PRId64 ": %s (is it a Chrome trace JSON file, complete?)", r->path,
                    r->line, what);
}

static wf_status expect(trace_jreader *r, int c, const char *what) {
    if (ws(r) != c) return bad(r, what);
    r->pos++;
    return WF_OK;
}

/* ---- strings and numbers ------------------------------------------------------- */

static void sb_put(sbuf *b, char c) {
    if (b->len + 1 >= MAX_STR) return; /* keep the first 64 KiB */
    wf_buf_append(b, &c, 1);            /* a failure drops the byte, as the cap does */
}

/* Empties b, allocating it if needed so that b->data is a valid string. */
static void sb_clear(sbuf *b) {
    b->len = 0;
    if (wf_buf_reserve(b, 0) == WF_OK) b->data[0] = 0;
    else wf_error_clear();
}

static void sb_utf8(sbuf *b, uint32_t cp) {
    if (cp < 0x80) {
        sb_put(b, (char)cp);
    } else if (cp < 0x800) {
        sb_put(b, (char)(0xc0 | (cp >> 6)));
        sb_put(b, (char)(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        sb_put(b, (char)(0xe0 | (cp >> 12)));
        sb_put(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
        sb_put(b, (char)(0x80 | (cp & 0x3f)));
    } else {
        sb_put(b, (char)(0xf0 | (cp >> 18)));
        sb_put(b, (char)(0x80 | ((cp >> 12) & 0x3f)));
        sb_put(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
        sb_put(b, (char)(0x80 | (cp & 0x3f)));
    }
}

static int hex4(trace_jreader *r, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = get(r);
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Reads a string (the opening quote is next) into b, or skips it (b NULL). */
static wf_status read_string(trace_jreader *r, sbuf *b) {
    if (ws(r) != '"') return bad(r, "expected a string");
    r->pos++;
    if (b) sb_clear(b);
    for (;;) {
        /* fast path: a run of plain bytes inside the buffer */
        size_t p = r->pos;
        while (p < r->len) {
            unsigned char c = r->buf[p];
            if (c == '"' || c == '\\' || c < 0x20) break;
            p++;
        }
        if (b)
            for (size_t i = r->pos; i < p; i++) sb_put(b, (char)r->buf[i]);
        r->pos = p;
        int c = get(r);
        if (c < 0) return bad(r, "unterminated string");
        if (c == '"') return WF_OK;
        if (c < 0x20) {
            if (c == '\n') r->line++;
            return bad(r, "control character inside a string");
        }
        if (c != '\\') { /* the buffer ended inside a plain run */
            if (b) sb_put(b, (char)c);
            continue;
        }
        int e = get(r);
        uint32_t cp;
        switch (e) {
        case '"': case '\\': case '/': if (b) sb_put(b, (char)e); break;
        case 'b': if (b) sb_put(b, '\b'); break;
        case 'f': if (b) sb_put(b, '\f'); break;
        case 'n': if (b) sb_put(b, '\n'); break;
        case 'r': if (b) sb_put(b, '\r'); break;
        case 't': if (b) sb_put(b, '\t'); break;
        case 'u':
            if (!hex4(r, &cp)) return bad(r, "bad \\u escape");
            if (cp >= 0xd800 && cp < 0xdc00 && peek(r) == '\\') {
                r->pos++;
                uint32_t lo;
                if (get(r) != 'u' || !hex4(r, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return bad(r, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (b) sb_utf8(b, cp);
            break;
        default: return bad(r, "bad escape in a string");
        }
    }
}

/* Reads a number's text into r->num. */
static wf_status read_number(trace_jreader *r, size_t *len) {
    size_t n = 0;
    for (;;) {
        int c = peek(r);
        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E')) break;
        if (n + 1 < sizeof r->num) r->num[n++] = (char)c;
        r->pos++;
    }
    r->num[n] = 0;
    if (n == 0) return bad(r, "expected a value");
    *len = n;
    return WF_OK;
}

int wf__trace_us_text_to_ns(const char *s, size_t len, int64_t *ns) {
    size_t i = 0;
    int neg = 0;
    if (i < len && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    uint64_t mant = 0;
    int digits = 0, any = 0, scale = 0; /* value = mant * 10^scale microseconds */
    int round_up = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, any = 1) {
        if (digits < 19) {
            mant = mant * 10 + (uint64_t)(s[i] - '0');
            if (mant) digits++;
        } else {
            if (digits == 19 && !round_up) round_up = s[i] >= '5';
            digits++;
            scale++;
        }
    }
    if (i < len && s[i] == '.') {
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, any = 1) {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(s[i] - '0');
                if (mant) digits++;
                scale--;
            } else if (digits == 19) {
                round_up = s[i] >= '5';
                digits++;
            }
        }
    }
    if (!any) return 0;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0, e = 0, edig = 0;
        if (i < len && (s[i] == '-' || s[i] == '+')) eneg = s[i++] == '-';
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, edig++)
            if (e < 10000) e = e * 10 + (s[i] - '0');
        if (!edig) return 0;
        scale += eneg ? -e : e;
    }
    if (i != len) return 0;
    if (round_up) mant++;
    scale += 3; /* microseconds to nanoseconds */
    while (scale > 0) {
        if (mant > (uint64_t)INT64_MAX / 10) return 0;
        mant *= 10;
        scale--;
    }
    while (scale < 0) {
        if (scale == -1) {
            mant = (mant + 5) / 10;
        } else {
            mant /= 10;
        }
        scale++;
        if (mant == 0) break;
    }
    if (mant > (uint64_t)INT64_MAX) return 0;
    *ns = neg ? -(int64_t)mant : (int64_t)mant;
    return 1;
}

/* Parses an integer value (number, or a string of digits as HTA's int()
 * accepts for "stream"). Returns 0 if it is neither. */
static int int_value(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno) return 0;
    if (d != d || d > 9.2e18 || d < -9.2e18) return 0;
    *out = (int64_t)d;
    return 1;
}

/* Skips any value. */
static wf_status skip_value(trace_jreader *r) {
    int c = ws(r);
    if (c == '"') return read_string(r, NULL);
    if (c == '{' || c == '[') {
        int depth = 0;
        for (;;) {
            c = ws(r);
            if (c < 0) return bad(r, "unexpected end inside an object or array");
            if (c == '"') {
                WF_TRY(read_string(r, NULL));
                continue;
            }
            r->pos++;
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return WF_OK;
            }
        }
    }
    if (c == 't' || c == 'f' || c == 'n') {
        const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
        for (const char *p = w; *p; p++)
            if (get(r) != *p) return bad(r, "bad literal");
        return WF_OK;
    }
    size_t len;
    return read_number(r, &len);
}

/* Reads a scalar value as text into r->num (numbers) or r->tmp (strings).
 * Returns in *kind 'n' for a number, 's' for a string, 'o' for anything
 * else (skipped). */
static wf_status read_scalar(trace_jreader *r, int *kind) {
    int c = ws(r);
    if (c == '"') {
        *kind = 's';
        return read_string(r, &r->tmp);
    }
    if ((c >= '0' && c <= '9') || c == '-') {
        *kind = 'n';
        size_t len;
        return read_number(r, &len);
    }
    *kind = 'o';
    return skip_value(r);
}

/* Walks an object's members: calls fn for each key with the value next. */
typedef wf_status (*member_fn)(trace_jreader *r, void *ctx, const char *key);

static wf_status walk_object(trace_jreader *r, member_fn fn, void *ctx) {
    WF_TRY(expect(r, '{', "expected an object"));
    if (ws(r) == '}') {
        r->pos++;
        return WF_OK;
    }
    for (;;) {
        WF_TRY(read_string(r, &r->key));
        WF_TRY(expect(r, ':', "expected ':' after a key"));
        WF_TRY(fn(r, ctx, r->key.data ? r->key.data : ""));
        int c = ws(r);
        r->pos++;
        if (c == '}') return WF_OK;
        if (c != ',') return bad(r, "expected ',' or '}' in an object");
    }
}

static wf_status dist_member(trace_jreader *r, void *ctx, const char *key) {
    (void)ctx;
    int64_t *dst = strcmp(key, "rank") == 0 ? &r->rank : strcmp(key, "world_size") == 0 ? &r->world_size : NULL;
    if (!dst) return skip_value(r);
    int kind;
    WF_TRY(read_scalar(r, &kind));
    int64_t v;
    if (kind == 'n' && int_value(r->num, &v)) *dst = v;
    return WF_OK;
}

static void copy_to(sbuf *dst, const sbuf *src) {
    sb_clear(dst);
    for (size_t i = 0; i < src->len; i++) sb_put(dst, src->data[i]);
}

static wf_status args_member(trace_jreader *r, void *ctx, const char *key) {
    trace_jevent *ev = ctx;
    int is_stream = strcmp(key, "stream") == 0, is_corr = strcmp(key, "correlation") == 0;
    int is_wcat = strcmp(key, "weft_cat") == 0;
    if (!is_stream && !is_corr && !is_wcat) return skip_value(r);
    int kind;
    WF_TRY(read_scalar(r, &kind));
    int64_t v;
    if (is_wcat) {
        if (kind == 's') {
            copy_to(&r->weft_cat, &r->tmp);
            ev->weft_cat = r->weft_cat.data ? r->weft_cat.data : "";
        }
    } else if (is_stream) {
        ev->stream = ((kind == 'n' && int_value(r->num, &v)) || (kind == 's' && r->tmp.data && int_value(r->tmp.data, &v)))
                         ? v : -1;
    } else if (kind == 'n' && int_value(r->num, &v)) {
        ev->correlation = v;
    }
    return WF_OK;
}

static wf_status event_member(trace_jreader *r, void *ctx, const char *key) {
    trace_jevent *ev = ctx;
    switch (key[0]) {
    case 'p':
        if (strcmp(key, "ph") == 0) {
            int kind;
            WF_TRY(read_scalar(r, &kind));
            ev->ph = kind == 's' && r->tmp.data ? r->tmp.data[0] : 0;
            return WF_OK;
        }
        break;
    case 'n':
        if (strcmp(key, "name") == 0) {
            if (ws(r) != '"') return skip_value(r);
            WF_TRY(read_string(r, &r->name));
            ev->name = r->name.data ? r->name.data : "";
            return WF_OK;
        }
        break;
    case 'c':
        if (strcmp(key, "cat") == 0) {
            if (ws(r) != '"') return skip_value(r);
            WF_TRY(read_string(r, &r->cat));
            ev->cat = r->cat.data ? r->cat.data : "";
            return WF_OK;
        }
        break;
    case 't':
    case 'd':
        if (strcmp(key, "ts") == 0 || strcmp(key, "dur") == 0) {
            int kind;
            WF_TRY(read_scalar(r, &kind));
            int64_t ns;
            if (kind == 'n' && wf__trace_us_text_to_ns(r->num, strlen(r->num), &ns)) {
                if (key[0] == 't') {
                    ev->ts_ns = ns;
                    ev->has_ts = 1;
                } else {
                    ev->dur_ns = ns;
                    ev->has_dur = 1;
                }
            }
            return WF_OK;
        }
        break;
    case 'a':
        if (strcmp(key, "args") == 0) {
            if (ws(r) != '{') return skip_value(r);
            return walk_object(r, args_member, ev);
        }
        break;
    default: break;
    }
    return skip_value(r);
}

/* ---- the document ----------------------------------------------------------------- */

wf_status wf__trace_jreader_open(const char *path, trace_jreader **out) {
    *out = NULL;
    trace_jreader *r = calloc(1, sizeof *r);
    if (!r) return wf_error(WF_ERR_NOMEM, "out of memory");
    r->path = strdup(path);
    r->buf = malloc(RBUF);
    if (!r->path || !r->buf) {
        wf__trace_jreader_close(r);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    r->gz = gzopen(path, "rb");
    if (!r->gz) {
        wf_status s = wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        wf__trace_jreader_close(r);
        return s;
    }
    gzbuffer(r->gz, RBUF);
    r->line = 1;
    r->rank = r->world_size = -1;
    r->state = ST_START;
    *out = r;
    return WF_OK;
}

void wf__trace_jreader_close(trace_jreader *r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz);
    free(r->path);
    free(r->buf);
    wf_buf_free(&r->key);
    wf_buf_free(&r->name);
    wf_buf_free(&r->cat);
    wf_buf_free(&r->weft_cat);
    wf_buf_free(&r->tmp);
    free(r);
}

int64_t wf__trace_jreader_rank(const trace_jreader *r) { return r->rank; }
int64_t wf__trace_jreader_world_size(const trace_jreader *r) { return r->world_size; }
int wf__trace_jreader_saw_events(const trace_jreader *r) { return r->saw_events; }

wf_status wf__trace_jreader_next(trace_jreader *r, trace_jevent *ev, int *got) {
    *got = 0;
    for (;;) {
        switch (r->state) {
        case ST_START:
            if (ws(r) == '[') { /* the JSON Array Format: just the events */
                r->pos++;
                r->array_doc = r->saw_events = 1;
                r->state = ST_EVENTS;
                r->events_first = 1;
                break;
            }
            WF_TRY(expect(r, '{', "expected '{' or '[' at the start of the file"));
            r->state = ST_TOP;
            r->top_first = 1;
            break;
        case ST_TOP: {
            int c = ws(r);
            if (c == '}') {
                r->pos++;
                r->state = ST_END;
                break;
            }
            if (!r->top_first) {
                if (c != ',') return bad(r, "expected ',' or '}' between top-level keys");
                r->pos++;
            }
            r->top_first = 0;
            WF_TRY(read_string(r, &r->key));
            WF_TRY(expect(r, ':', "expected ':' after a key"));
            const char *k = r->key.data ? r->key.data : "";
            if (strcmp(k, "traceEvents") == 0 && ws(r) == '[') {
                r->pos++;
                r->saw_events = 1;
                r->state = ST_EVENTS;
                r->events_first = 1;
            } else if (strcmp(k, "distributedInfo") == 0 && ws(r) == '{') {
                WF_TRY(walk_object(r, dist_member, NULL));
            } else {
                WF_TRY(skip_value(r));
            }
            break;
        }
        case ST_EVENTS: {
            int c = ws(r);
            if (c == ']') {
                r->pos++;
                r->state = r->array_doc ? ST_END : ST_TOP;
                break;
            }
            if (!r->events_first) {
                if (c != ',') return bad(r, "expected ',' or ']' between trace events");
                r->pos++;
            }
            r->events_first = 0;
            memset(ev, 0, sizeof *ev);
            ev->name = "";
            ev->stream = -1;
            ev->correlation = -1;
            if (ws(r) != '{') { /* not an event object: skip it */
                WF_TRY(skip_value(r));
                break;
            }
            WF_TRY(walk_object(r, event_member, ev));
            *got = 1;
            return WF_OK;
        }
        case ST_END:
            if (ws(r) >= 0) return bad(r, "data after the end of the JSON document");
            return WF_OK;
        }
    }
}
