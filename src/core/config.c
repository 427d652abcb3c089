/* Configuration: a small TOML reader and the option binder behind every
 * command. The reader turns a file into a flat list of (dotted key, value,
 * line); the binder checks each entry against the command's option table.
 * Nothing here knows about any particular command. */
#include "weft/config.h"

#include "weft/buf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "weft/fileio.h"

/* ------------------------------------------------------------------ values */

typedef enum { TV_STR, TV_INT, TV_FLOAT, TV_BOOL, TV_ARRAY } tv_kind;

typedef struct tvalue {
    tv_kind kind;
    char *s;
    int64_t i;
    double f;
    int b;
    struct tvalue *items;
    size_t n;
} tvalue;

static const char *tv_kind_name(tv_kind k) {
    switch (k) {
    case TV_STR: return "a string";
    case TV_INT: return "an integer";
    case TV_FLOAT: return "a float";
    case TV_BOOL: return "a boolean";
    case TV_ARRAY: return "an array";
    }
    return "a value";
}

static void tv_free(tvalue *v) {
    free(v->s);
    for (size_t i = 0; i < v->n; i++) tv_free(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------------ reader */

typedef struct {
    const char *src; /* whole text, NUL-terminated */
    size_t pos;
    int line;
    const char *where; /* file name for messages */
    int depth;         /* arrays open around the current value */
} tparser;

/* Nested arrays deeper than this are refused: the parser recurses once a
 * level, and a hostile file must not exhaust the stack. */
#define TP_MAX_DEPTH 64

typedef struct {
    char *key;
    tvalue val;
    int line;
} tentry;

typedef struct {
    tentry *e;
    size_t n, cap;
} tentries;

__attribute__((format(printf, 2, 3)))
static wf_status tp_err(tparser *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return wf_error(WF_ERR_CONFIG, "%s:%d: %s", p->where, p->line, msg);
}

static char tp_peek(const tparser *p) { return p->src[p->pos]; }

static void tp_skip_ws(tparser *p) {
    while (tp_peek(p) == ' ' || tp_peek(p) == '\t') p->pos++;
}

static void tp_skip_comment(tparser *p) {
    if (tp_peek(p) == '#')
        while (tp_peek(p) && tp_peek(p) != '\n') p->pos++;
}

/* Skips spaces, comments and newlines (inside arrays). */
static void tp_skip_ws_nl(tparser *p) {
    for (;;) {
        tp_skip_ws(p);
        tp_skip_comment(p);
        if (tp_peek(p) == '\n') {
            p->pos++;
            p->line++;
        } else if (tp_peek(p) == '\r' && p->src[p->pos + 1] == '\n') {
            p->pos += 2;
            p->line++;
        } else {
            return;
        }
    }
}

/* The TOML reader's strings are built in the core byte buffer. */
static int sb_push(wf_buf *b, const char *s, size_t n) { return wf_buf_append(b, s, n) == WF_OK ? 0 : -1; }

static int sb_push_utf8(wf_buf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sb_push(b, u, n);
}

/* Parses a basic ("...") or literal ('...') string, single or multi-line. */
static wf_status tp_string(tparser *p, char **out) {
    char q = tp_peek(p);
    int multi = p->src[p->pos + 1] == q && p->src[p->pos + 2] == q;
    p->pos += multi ? 3 : 1;
    if (multi && tp_peek(p) == '\n') { /* a newline right after the opener is trimmed */
        p->pos++;
        p->line++;
    }
    wf_buf b = {0};
    if (sb_push(&b, "", 0) != 0) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (;;) {
        char c = tp_peek(p);
        if (c == '\0') {
            wf_buf_free(&b);
            return tp_err(p, "unterminated string");
        }
        if (c == '\n') {
            if (!multi) {
                wf_buf_free(&b);
                return tp_err(p, "newline inside a single-line string");
            }
            p->line++;
        }
        if (c == q) {
            if (!multi) {
                p->pos++;
                break;
            }
            if (p->src[p->pos + 1] == q && p->src[p->pos + 2] == q) {
                p->pos += 3;
                break;
            }
        }
        if (c == '\\' && q == '"') {
            char e = p->src[p->pos + 1];
            const char *rep = NULL;
            switch (e) {
            case 'n': rep = "\n"; break;
            case 't': rep = "\t"; break;
            case 'r': rep = "\r"; break;
            case 'b': rep = "\b"; break;
            case 'f': rep = "\f"; break;
            case '"': rep = "\""; break;
            case '\\': rep = "\\"; break;
            default: break;
            }
            if (rep) {
                sb_push(&b, rep, 1);
                p->pos += 2;
                continue;
            }
            if (e == 'u' || e == 'U') {
                int nd = e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                for (int k = 0; k < nd; k++) {
                    char h = p->src[p->pos + 2 + k];
                    if (!isxdigit((unsigned char)h)) {
                        wf_buf_free(&b);
                        return tp_err(p, "bad \\u escape in string");
                    }
                    cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                    wf_buf_free(&b);
                    return tp_err(p, "\\u escape is not a Unicode scalar value");
                }
                sb_push_utf8(&b, cp);
                p->pos += 2 + (size_t)nd;
                continue;
            }
            if (multi && (e == '\n' || e == ' ' || e == '\t' || e == '\r')) {
                /* line-ending backslash: trim whitespace up to the next non-space */
                p->pos++;
                while (isspace((unsigned char)tp_peek(p))) {
                    if (tp_peek(p) == '\n') p->line++;
                    p->pos++;
                }
                continue;
            }
            wf_buf_free(&b);
            return tp_err(p, "unknown escape sequence in string");
        }
        if (sb_push(&b, &c, 1) != 0) {
            wf_buf_free(&b);
            return wf_error(WF_ERR_NOMEM, "out of memory");
        }
        p->pos++;
    }
    *out = b.data;
    return WF_OK;
}

static int is_bare_key_char(char c) {
    return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/* Parses a dotted key into "a.b.c" (quoted parts kept as written). */
static wf_status tp_key(tparser *p, char **out) {
    wf_buf b = {0};
    sb_push(&b, "", 0);
    for (;;) {
        tp_skip_ws(p);
        char c = tp_peek(p);
        if (c == '"' || c == '\'') {
            char *s = NULL;
            wf_status st = tp_string(p, &s);
            if (st != WF_OK) {
                wf_buf_free(&b);
                return st;
            }
            sb_push(&b, s, strlen(s));
            free(s);
        } else if (is_bare_key_char(c)) {
            size_t start = p->pos;
            while (is_bare_key_char(tp_peek(p))) p->pos++;
            sb_push(&b, p->src + start, p->pos - start);
        } else {
            wf_buf_free(&b);
            return tp_err(p, "expected a key");
        }
        tp_skip_ws(p);
        if (tp_peek(p) != '.') break;
        p->pos++;
        sb_push(&b, ".", 1);
    }
    *out = b.data;
    return WF_OK;
}

static wf_status tp_value(tparser *p, tvalue *v);

static wf_status tp_array(tparser *p, tvalue *v) {
    if (p->depth >= TP_MAX_DEPTH) return tp_err(p, "arrays nested more than 64 deep");
    p->pos++; /* '[' */
    v->kind = TV_ARRAY;
    size_t cap = 0;
    for (;;) {
        tp_skip_ws_nl(p);
        if (tp_peek(p) == ']') {
            p->pos++;
            return WF_OK;
        }
        WF_TRY(WF_GROW(v->items, cap, v->n + 1, 4));
        memset(&v->items[v->n], 0, sizeof *v->items);
        p->depth++;
        wf_status s = tp_value(p, &v->items[v->n]);
        p->depth--;
        if (s != WF_OK) {
            tv_free(&v->items[v->n]); /* not counted in v->n yet: free what it holds */
            return s;
        }
        v->n++;
        tp_skip_ws_nl(p);
        if (tp_peek(p) == ',') {
            p->pos++;
            continue;
        }
        if (tp_peek(p) == ']') {
            p->pos++;
            return WF_OK;
        }
        return tp_err(p, "expected ',' or ']' in array");
    }
}

/* Parses a number or boolean token [A-Za-z0-9_+.-]+. */
static wf_status tp_scalar_token(tparser *p, tvalue *v) {
    size_t start = p->pos;
    while (isalnum((unsigned char)tp_peek(p)) || strchr("_+-.", tp_peek(p)) != NULL) {
        if (tp_peek(p) == '\0') break;
        p->pos++;
    }
    size_t n = p->pos - start;
    char tok[128];
    if (n == 0 || n >= sizeof tok) return tp_err(p, "expected a value");
    memcpy(tok, p->src + start, n);
    tok[n] = '\0';
    if (strcmp(tok, "true") == 0 || strcmp(tok, "false") == 0) {
        v->kind = TV_BOOL;
        v->b = tok[0] == 't';
        return WF_OK;
    }
    if (tp_peek(p) == ':' || (n == 10 && tok[4] == '-' && tok[7] == '-'))
        return tp_err(p, "dates and times are not supported (value '%s')", tok);
    /* strip underscores between digits */
    char clean[128];
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (tok[k] == '_') {
            if (k == 0 || k + 1 == n || !isalnum((unsigned char)tok[k - 1]) || !isalnum((unsigned char)tok[k + 1]))
                return tp_err(p, "misplaced '_' in number '%s'", tok);
            continue;
        }
        clean[m++] = tok[k];
    }
    clean[m] = '\0';
    const char *s = clean;
    int neg = 0;
    if (*s == '+' || *s == '-') {
        neg = *s == '-';
        s++;
    }
    if (strcmp(s, "inf") == 0 || strcmp(s, "nan") == 0) {
        v->kind = TV_FLOAT;
        v->f = s[0] == 'i' ? (neg ? -INFINITY : INFINITY) : NAN;
        return WF_OK;
    }
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'o' || s[1] == 'b')) {
        if (clean[0] == '+' || clean[0] == '-') return tp_err(p, "sign not allowed on '%s'", tok);
        int base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
        char *end;
        errno = 0;
        unsigned long long u = strtoull(s + 2, &end, base);
        if (*end || end == s + 2 || errno || u > INT64_MAX) return tp_err(p, "bad integer '%s'", tok);
        v->kind = TV_INT;
        v->i = (int64_t)u;
        return WF_OK;
    }
    if (!isdigit((unsigned char)s[0])) return tp_err(p, "expected a value, found '%s'", tok);
    int is_float = strpbrk(s, ".eE") != NULL;
    char *end;
    errno = 0;
    if (is_float) {
        double d = strtod(clean, &end);
        if (*end || errno == ERANGE) return tp_err(p, "bad float '%s'", tok);
        const char *dot = strchr(s, '.');
        if (dot && (!isdigit((unsigned char)dot[1]) || dot == s))
            return tp_err(p, "bad float '%s' (digits needed on both sides of '.')", tok);
        v->kind = TV_FLOAT;
        v->f = d;
        return WF_OK;
    }
    if (s[0] == '0' && s[1] != '\0') return tp_err(p, "leading zeros are not allowed in '%s'", tok);
    long long ll = strtoll(clean, &end, 10);
    if (*end || errno == ERANGE) return tp_err(p, "bad integer '%s'", tok);
    v->kind = TV_INT;
    v->i = ll;
    return WF_OK;
}

static wf_status tp_value(tparser *p, tvalue *v) {
    memset(v, 0, sizeof *v);
    char c = tp_peek(p);
    if (c == '"' || c == '\'') {
        v->kind = TV_STR;
        return tp_string(p, &v->s);
    }
    if (c == '[') return tp_array(p, v);
    if (c == '{') return tp_err(p, "inline tables are not supported; use a [table] header");
    return tp_scalar_token(p, v);
}

static void entries_free(tentries *es) {
    for (size_t i = 0; i < es->n; i++) {
        free(es->e[i].key);
        tv_free(&es->e[i].val);
    }
    free(es->e);
    memset(es, 0, sizeof *es);
}

static wf_status toml_parse(const char *src, const char *where, tentries *out) {
    tparser p = {src, 0, 1, where, 0};
    char *table = NULL;
    wf_status st = WF_OK;
    memset(out, 0, sizeof *out);
    while (st == WF_OK) {
        tp_skip_ws_nl(&p);
        if (tp_peek(&p) == '\0') break;
        if (tp_peek(&p) == '[') {
            if (p.src[p.pos + 1] == '[') {
                st = tp_err(&p, "arrays of tables ([[...]]) are not supported");
                break;
            }
            p.pos++;
            free(table);
            table = NULL;
            st = tp_key(&p, &table);
            if (st != WF_OK) break;
            if (tp_peek(&p) != ']') {
                st = tp_err(&p, "expected ']' after table name");
                break;
            }
            p.pos++;
        } else {
            char *key = NULL;
            st = tp_key(&p, &key);
            if (st != WF_OK) break;
            if (tp_peek(&p) != '=') {
                st = tp_err(&p, "expected '=' after key '%s'", key);
                free(key);
                break;
            }
            p.pos++;
            tp_skip_ws(&p);
            int line = p.line;
            tvalue v;
            st = tp_value(&p, &v);
            if (st != WF_OK) {
                tv_free(&v);
                free(key);
                break;
            }
            size_t fl = (table ? strlen(table) + 1 : 0) + strlen(key) + 1;
            char *full = malloc(fl);
            if (!full) {
                tv_free(&v);
                free(key);
                st = wf_error(WF_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(full, fl, "%s%s%s", table ? table : "", table ? "." : "", key);
            free(key);
            for (size_t i = 0; i < out->n; i++) {
                if (strcmp(out->e[i].key, full) == 0) {
                    st = wf_error(WF_ERR_CONFIG, "%s:%d: key '%s' is defined twice (first on line %d)",
                                  where, line, full, out->e[i].line);
                    break;
                }
            }
            if (st == WF_OK) st = WF_GROW(out->e, out->cap, out->n + 1, 16);
            if (st != WF_OK) {
                free(full);
                tv_free(&v);
                break;
            }
            out->e[out->n++] = (tentry){full, v, line};
        }
        tp_skip_ws(&p);
        tp_skip_comment(&p);
        char c = tp_peek(&p);
        if (c != '\0' && c != '\n' && !(c == '\r' && p.src[p.pos + 1] == '\n'))
            st = tp_err(&p, "unexpected text after value");
    }
    free(table);
    if (st != WF_OK) entries_free(out);
    return st;
}

/* ------------------------------------------------------------------ binder */

static const char *opt_type_name(wf_opt_type t) {
    switch (t) {
    case WF_OPT_INT: return "int";
    case WF_OPT_FLOAT: return "float";
    case WF_OPT_BOOL: return "bool";
    case WF_OPT_STR: return "string";
    case WF_OPT_STRS: return "list";
    }
    return "?";
}

static void *opt_field(const wf_opt *o, void *dst) { return (char *)dst + o->offset; }

void wf_strs_free(wf_strs *s) {
    for (size_t i = 0; i < s->n; i++) free(s->items[i]);
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

static int strs_push(wf_strs *s, const char *v, size_t len) {
    char **ni = realloc(s->items, (s->n + 1) * sizeof *ni);
    if (!ni) return -1;
    s->items = ni;
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, v, len);
    c[len] = '\0';
    s->items[s->n++] = c;
    return 0;
}

static size_t edit_distance(const char *a, const char *b);

/* For an enum option (o->choices), whether v is one of its values; if not,
 * the error lists them, with the nearest as a hint when it is close. */
static wf_status check_choice(const wf_opt *o, const char *v, const char *where) {
    const char *best = NULL;
    size_t bd = 3;
    char list[512];
    size_t n = 0, k = 0;
    list[0] = '\0';
    for (const char *const *c = o->choices; *c; c++, k++) {
        if (strcmp(*c, v) == 0) return WF_OK;
        size_t d = edit_distance(v, *c);
        if (d < bd) {
            bd = d;
            best = *c;
        }
    }
    for (size_t i = 0; i < k && n < sizeof list; i++) {
        const char *sep = i == 0 ? "" : i + 1 == k ? " or " : ", ";
        int w = snprintf(list + n, sizeof list - n, "%s%s", sep, o->choices[i]);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (best)
        return wf_error(WF_ERR_CONFIG, "%s: %s = '%s' (did you mean '%s'?): use %s", where, o->key, v, best,
                        list);
    return wf_error(WF_ERR_CONFIG, "%s: %s = '%s': use %s", where, o->key, v, list);
}

/* Stores value v into option o; `where` names the origin for messages. */
static wf_status opt_assign(const wf_opt *o, void *dst, const tvalue *v, const char *where) {
    void *f = opt_field(o, dst);
    switch (o->type) {
    case WF_OPT_INT:
        if (v->kind != TV_INT)
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects an integer, got %s", where, o->key,
                            tv_kind_name(v->kind));
        if (o->min <= o->max && ((double)v->i < o->min || (double)v->i > o->max))
            return wf_error(WF_ERR_RANGE, "%s: key '%s' = %lld is out of range [%.10g, %.10g]", where,
                            o->key, (long long)v->i, o->min, o->max);
        *(int64_t *)f = v->i;
        return WF_OK;
    case WF_OPT_FLOAT: {
        double d;
        if (v->kind == TV_INT) d = (double)v->i;
        else if (v->kind == TV_FLOAT) d = v->f;
        else
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects a number, got %s", where, o->key,
                            tv_kind_name(v->kind));
        if (o->min <= o->max && !(d >= o->min && d <= o->max))
            return wf_error(WF_ERR_RANGE, "%s: key '%s' = %g is out of range [%.10g, %.10g]", where,
                            o->key, d, o->min, o->max);
        *(double *)f = d;
        return WF_OK;
    }
    case WF_OPT_BOOL:
        if (v->kind != TV_BOOL)
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects true or false, got %s", where,
                            o->key, tv_kind_name(v->kind));
        *(int *)f = v->b;
        return WF_OK;
    case WF_OPT_STR: {
        if (v->kind != TV_STR)
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects a string, got %s", where, o->key,
                            tv_kind_name(v->kind));
        if (o->choices) WF_TRY(check_choice(o, v->s, where));
        char *c = strdup(v->s);
        if (!c) return wf_error(WF_ERR_NOMEM, "out of memory");
        free(*(char **)f);
        *(char **)f = c;
        return WF_OK;
    }
    case WF_OPT_STRS: {
        wf_strs tmp = {0};
        if (v->kind == TV_STR) {
            if (strs_push(&tmp, v->s, strlen(v->s)) != 0) return wf_error(WF_ERR_NOMEM, "out of memory");
        } else if (v->kind == TV_ARRAY) {
            for (size_t i = 0; i < v->n; i++) {
                if (v->items[i].kind != TV_STR) {
                    wf_strs_free(&tmp);
                    return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects an array of strings, item %zu is %s",
                                    where, o->key, i, tv_kind_name(v->items[i].kind));
                }
                if (strs_push(&tmp, v->items[i].s, strlen(v->items[i].s)) != 0) {
                    wf_strs_free(&tmp);
                    return wf_error(WF_ERR_NOMEM, "out of memory");
                }
            }
        } else {
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects an array of strings, got %s", where,
                            o->key, tv_kind_name(v->kind));
        }
        wf_strs_free((wf_strs *)f);
        *(wf_strs *)f = tmp;
        return WF_OK;
    }
    }
    return wf_error(WF_ERR_INTERNAL, "bad option type");
}

/* Interprets command-line text for option o: TOML syntax first; strings may
 * be given bare; lists may be comma-separated. *v is freed by the caller,
 * also on failure. */
static wf_status opt_text_value(const wf_opt *o, const char *text, const char *where, tvalue *out) {
    tvalue v;
    memset(&v, 0, sizeof v);
    memset(out, 0, sizeof *out);
    wf_status st = WF_ERR_CONFIG;
    int parsed_whole = 0;
    if (o->type != WF_OPT_STR && o->type != WF_OPT_STRS) {
        tparser p = {text, 0, 1, where, 0};
        st = tp_value(&p, &v);
        tp_skip_ws(&p);
        parsed_whole = st == WF_OK && tp_peek(&p) == '\0';
        if (!parsed_whole) {
            tv_free(&v);
            return wf_error(WF_ERR_CONFIG, "%s: key '%s' expects %s, got '%s'", where, o->key,
                            o->type == WF_OPT_INT ? "an integer" : o->type == WF_OPT_FLOAT ? "a number" : "true or false",
                            text);
        }
    } else if (o->type == WF_OPT_STR) {
        v.kind = TV_STR;
        v.s = strdup(text);
        if (!v.s) return wf_error(WF_ERR_NOMEM, "out of memory");
    } else {
        if (text[0] == '[') {
            tparser p = {text, 0, 1, where, 0};
            st = tp_value(&p, &v);
            if (st != WF_OK) {
                tv_free(&v);
                return wf_error_wrap(st, "key '%s': ", o->key);
            }
        } else {
            v.kind = TV_ARRAY;
            const char *s = text;
            while (*text) {
                const char *comma = strchr(s, ',');
                size_t len = comma ? (size_t)(comma - s) : strlen(s);
                tvalue *ni = realloc(v.items, (v.n + 1) * sizeof *ni);
                if (!ni) {
                    tv_free(&v);
                    return wf_error(WF_ERR_NOMEM, "out of memory");
                }
                v.items = ni;
                memset(&v.items[v.n], 0, sizeof *v.items);
                v.items[v.n].kind = TV_STR;
                v.items[v.n].s = strndup(s, len);
                v.n++;
                if (!comma) break;
                s = comma + 1;
            }
        }
    }
    *out = v;
    return WF_OK;
}

static wf_status opt_assign_text(const wf_opt *o, void *dst, const char *text, const char *where) {
    tvalue v;
    wf_status st = opt_text_value(o, text, where, &v);
    if (st == WF_OK) st = opt_assign(o, dst, &v, where);
    tv_free(&v);
    return st;
}

/* ---- options with a named segment ("quality.<lang>.min_words") ---- */

/* The named segment of o's key: [*lt, *gt] are the '<' and '>'. */
static int named_segment(const wf_opt *o, const char **lt, const char **gt) {
    *lt = strchr(o->key, '<');
    *gt = *lt ? strchr(*lt, '>') : NULL;
    return *gt != NULL;
}

/* Whether key[0, len) is o's key with a bare name for its named segment;
 * the name is key[*name_off, *name_off + *name_len). */
static int named_match(const wf_opt *o, const char *key, size_t len, size_t *name_off, size_t *name_len) {
    const char *lt, *gt;
    if (!named_segment(o, &lt, &gt)) return 0;
    size_t pre = (size_t)(lt - o->key), suf = strlen(gt + 1);
    if (len <= pre + suf || strncmp(key, o->key, pre) != 0 || memcmp(key + len - suf, gt + 1, suf) != 0) return 0;
    for (size_t i = pre; i < len - suf; i++)
        if (!is_bare_key_char(key[i])) return 0;
    *name_off = pre;
    *name_len = len - pre - suf;
    return 1;
}

static const wf_opt *opt_find_named(const wf_cmd_spec *spec, const char *key, size_t len, size_t *name_off,
                                    size_t *name_len) {
    for (size_t i = 0; i < spec->n_opts; i++)
        if (named_match(&spec->opts[i], key, len, name_off, name_len)) return &spec->opts[i];
    return NULL;
}

/* o's key with `name` for its named segment, into buf. */
static void named_key(const wf_opt *o, const char *name, size_t name_len, char *buf, size_t cap) {
    const char *lt, *gt;
    named_segment(o, &lt, &gt);
    snprintf(buf, cap, "%.*s%.*s%s", (int)(lt - o->key), o->key, (int)name_len, name, gt + 1);
}

static void named_value_free(wf_opt_type t, wf_opt_value *v) {
    if (t == WF_OPT_STR) free(v->s);
    else if (t == WF_OPT_STRS) wf_strs_free(&v->l);
    memset(v, 0, sizeof *v);
}

static int name_cmp(const char *a, const char *b, size_t b_len) {
    size_t a_len = strlen(a);
    int c = memcmp(a, b, a_len < b_len ? a_len : b_len);
    return c ? c : (a_len > b_len) - (a_len < b_len);
}

/* Stores v as the value of option o for `name` (replacing an earlier one). */
static wf_status named_assign(const wf_cmd_spec *spec, void *dst, const wf_opt *o, const char *name,
                              size_t name_len, const tvalue *v, const char *where) {
    (void)spec;
    wf_opt_named_list *l = (wf_opt_named_list *)opt_field(o, dst);
    char key[512];
    named_key(o, name, name_len, key, sizeof key);
    wf_opt t = *o; /* checked and messages as for a plain option of this key */
    t.key = key;
    t.offset = 0;
    wf_opt_value val;
    memset(&val, 0, sizeof val);
    WF_TRY(opt_assign(&t, &val, v, where));
    size_t i = 0;
    while (i < l->n) {
        int c = name_cmp(l->items[i].name, name, name_len);
        if (c > 0 || (c == 0 && l->items[i].opt >= o)) break;
        i++;
    }
    if (i < l->n && l->items[i].opt == o && name_cmp(l->items[i].name, name, name_len) == 0) {
        named_value_free(o->type, &l->items[i].v);
        l->items[i].v = val;
        return WF_OK;
    }
    char *nm = strndup(name, name_len);
    wf_status st = nm ? WF_GROW(l->items, l->cap, l->n + 1, 8) : wf_error(WF_ERR_NOMEM, "out of memory");
    if (st != WF_OK) {
        free(nm);
        named_value_free(o->type, &val);
        return st;
    }
    memmove(&l->items[i + 1], &l->items[i], (l->n - i) * sizeof *l->items);
    l->items[i] = (wf_opt_named){o, nm, val};
    l->n++;
    return WF_OK;
}

/* Assigns the command line's text to option o, or, when name_len > 0, to
 * o's value for the named segment name[0, name_len) (`--key.NAME=text`):
 * the text is read with the messages of a plain option of that full key. */
static wf_status assign_text(const wf_cmd_spec *spec, void *dst, const wf_opt *o, const char *name,
                             size_t name_len, const char *text, const char *where) {
    if (!name_len) return opt_assign_text(o, dst, text, where);
    char key[512];
    named_key(o, name, name_len, key, sizeof key);
    wf_opt t = *o;
    t.key = key;
    tvalue v;
    wf_status st = opt_text_value(&t, text, where, &v);
    if (st == WF_OK) st = named_assign(spec, dst, o, name, name_len, &v, where);
    tv_free(&v);
    return st;
}


static const wf_opt *opt_find_key(const wf_cmd_spec *spec, const char *key, size_t keylen) {
    for (size_t i = 0; i < spec->n_opts; i++)
        if (strlen(spec->opts[i].key) == keylen && strncmp(spec->opts[i].key, key, keylen) == 0)
            return &spec->opts[i];
    return NULL;
}

static const wf_opt *opt_find_flag(const wf_cmd_spec *spec, const char *flag, size_t len) {
    for (size_t i = 0; i < spec->n_opts; i++) {
        const char *f = spec->opts[i].flag;
        if (f && strlen(f) == len && strncmp(f, flag, len) == 0) return &spec->opts[i];
    }
    return opt_find_key(spec, flag, len);
}

const wf_opt_value *wf_opts_named_get(const wf_cmd_spec *spec, const void *dst, const char *key,
                                      const char *name) {
    const wf_opt *o = opt_find_key(spec, key, strlen(key));
    if (!o || !strchr(key, '<')) return NULL;
    const wf_opt_named_list *l = (const void *)((const char *)dst + o->offset);
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i].opt == o && strcmp(l->items[i].name, name) == 0) return &l->items[i].v;
    return NULL;
}

/* Edit distance, for "did you mean" hints on unknown keys. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    size_t d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static wf_status unknown_key(const wf_cmd_spec *spec, const char *where, const char *key) {
    const char *best = NULL;
    char best_buf[512];
    size_t bd = 4;
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        size_t d = edit_distance(key, o->key);
        if (d < bd) {
            bd = d;
            best = o->key;
        }
        const char *lt, *gt;
        if (!named_segment(o, &lt, &gt)) continue;
        /* "quality.min_wrds" for "quality.<lang>.min_words": the key without
         * its named segment; "quality.de.min_wrds": the key with that name. */
        char cand[512];
        size_t pre = (size_t)(lt - o->key);
        if (gt[1] == '.') snprintf(cand, sizeof cand, "%.*s%s", (int)pre, o->key, gt + 2);
        else snprintf(cand, sizeof cand, "%.*s", pre ? (int)pre - 1 : 0, o->key);
        if ((d = edit_distance(key, cand)) < bd) {
            bd = d;
            best = o->key;
        }
        if (strncmp(key, o->key, pre) == 0) {
            size_t n = 0;
            while (is_bare_key_char(key[pre + n])) n++;
            if (n) {
                named_key(o, key + pre, n, cand, sizeof cand);
                if ((d = edit_distance(key, cand)) < bd) {
                    bd = d;
                    snprintf(best_buf, sizeof best_buf, "%s", cand);
                    best = best_buf;
                }
            }
        }
    }
    if (best)
        return wf_error(WF_ERR_CONFIG, "%s: unknown key '%s' (did you mean '%s'?); see 'weft %s --help'",
                        where, key, best, spec->name);
    return wf_error(WF_ERR_CONFIG, "%s: unknown key '%s'; see 'weft %s --help'", where, key, spec->name);
}

/* Records that the user gave option `o` (see wf_cmd_spec.given_offset). */
static void mark_given(const wf_cmd_spec *spec, void *dst, const wf_opt *o) {
    if (spec->given_offset) ((unsigned char *)dst + spec->given_offset)[o - spec->opts] = 1;
}

int wf_opts_given(const wf_cmd_spec *spec, const void *dst, const char *key) {
    if (!spec->given_offset) return 0;
    for (size_t i = 0; i < spec->n_opts; i++)
        if (strcmp(spec->opts[i].key, key) == 0) return ((const unsigned char *)dst + spec->given_offset)[i];
    return 0;
}

static wf_status load_config_file(const wf_cmd_spec *spec, void *dst, const char *path) {
    char *text = NULL;
    size_t len = 0;
    wf_status st = wf_file_read(path, &text, &len);
    if (st != WF_OK) return wf_error_wrap(WF_ERR_CONFIG, "config: ");
    if (strlen(text) != len) {
        free(text);
        return wf_error(WF_ERR_CONFIG, "%s: config file contains a NUL byte", path);
    }
    tentries es;
    st = toml_parse(text, path, &es);
    free(text);
    if (st != WF_OK) return st;
    for (size_t i = 0; i < es.n && st == WF_OK; i++) {
        char where[1100];
        snprintf(where, sizeof where, "%s:%d", path, es.e[i].line);
        const char *key = es.e[i].key;
        size_t name_off, name_len;
        const wf_opt *o = opt_find_key(spec, key, strlen(key));
        if (o) {
            st = opt_assign(o, dst, &es.e[i].val, where);
        } else if ((o = opt_find_named(spec, key, strlen(key), &name_off, &name_len)) != NULL) {
            st = named_assign(spec, dst, o, key + name_off, name_len, &es.e[i].val, where);
        } else {
            st = unknown_key(spec, where, key);
        }
        if (st == WF_OK) mark_given(spec, dst, o);
    }
    entries_free(&es);
    return st;
}

wf_status wf_opts_parse(const wf_cmd_spec *spec, void *dst, int argc, char **argv,
                        wf_strs *positional, int *help) {
    *help = 0;
    memset(positional, 0, sizeof *positional);
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        if (!o->def) continue;
        char where[256];
        snprintf(where, sizeof where, "default of %s", o->key);
        WF_TRY(opt_assign_text(o, dst, o->def, where));
    }
    /* First pass: help and --config, so that the file sits under the
     * command-line overrides whatever their order. */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            *help = 1;
            return WF_OK;
        }
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        const char *path = NULL;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return wf_error(WF_ERR_CONFIG, "command line: --config needs a file name");
            path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        }
        if (path) WF_TRY(load_config_file(spec, dst, path));
    }
    int only_positional = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || strcmp(a, "-") == 0) {
            char **ni = realloc(positional->items, (positional->n + 1) * sizeof *ni);
            if (!ni) return wf_error(WF_ERR_NOMEM, "out of memory");
            positional->items = ni;
            positional->items[positional->n++] = (char *)a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positional = 1;
            continue;
        }
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0) continue;
        if (a[1] != '-') return wf_error(WF_ERR_CONFIG, "command line: unknown option '%s'; see 'weft %s --help'", a, spec->name);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        char where[300];
        snprintf(where, sizeof where, "command line '%s'", a);
        /* The option: a short alias or a key, else a key with a named
         * segment (name = name[name_off, name_off + name_len)). */
        size_t name_off = 0, name_len = 0;
        const wf_opt *o = opt_find_flag(spec, name, nlen);
        if (!o) o = opt_find_named(spec, name, nlen, &name_off, &name_len);
        tvalue bv;
        memset(&bv, 0, sizeof bv);
        bv.kind = TV_BOOL;
        if (!o && !eq && strncmp(name, "no-", 3) == 0) {
            const wf_opt *neg = opt_find_flag(spec, name + 3, nlen - 3);
            if (!neg && (neg = opt_find_named(spec, name + 3, nlen - 3, &name_off, &name_len)) != NULL)
                name_off += 3;
            if (neg && neg->type == WF_OPT_BOOL) {
                bv.b = 0;
                if (name_len) WF_TRY(named_assign(spec, dst, neg, name + name_off, name_len, &bv, where));
                else *(int *)opt_field(neg, dst) = 0;
                mark_given(spec, dst, neg);
                continue;
            }
        }
        if (!o) {
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)nlen, name);
            return unknown_key(spec, "command line", key);
        }
        if (eq) {
            WF_TRY(assign_text(spec, dst, o, name + name_off, name_len, eq + 1, where));
        } else if (o->type == WF_OPT_BOOL) {
            /* `--flag`, and `--flag true|false` as users also write it (a
             * following word that is neither stays a positional argument). */
            bv.b = 1;
            if (i + 1 < argc && (strcmp(argv[i + 1], "true") == 0 || strcmp(argv[i + 1], "false") == 0))
                bv.b = strcmp(argv[++i], "true") == 0;
            if (name_len) WF_TRY(named_assign(spec, dst, o, name + name_off, name_len, &bv, where));
            else *(int *)opt_field(o, dst) = bv.b;
        } else {
            if (i + 1 >= argc)
                return wf_error(WF_ERR_CONFIG, "%s: option needs a value (%s)", where, opt_type_name(o->type));
            i++;
            WF_TRY(assign_text(spec, dst, o, name + name_off, name_len, argv[i], where));
        }
        mark_given(spec, dst, o);
    }
    int np = (int)positional->n;
    if (np < spec->min_positional)
        return wf_error(WF_ERR_CONFIG, "command line: %s needs %d argument%s, got %d; usage: %s",
                        spec->name, spec->min_positional, spec->min_positional == 1 ? "" : "s", np, spec->usage);
    if (spec->max_positional >= 0 && np > spec->max_positional)
        return wf_error(WF_ERR_CONFIG, "command line: unexpected argument '%s'; usage: %s",
                        positional->items[spec->max_positional], spec->usage);
    return WF_OK;
}

wf_status wf_opts_defaults(const wf_cmd_spec *spec, void *dst) {
    wf_cmd_spec defaults_only = *spec;
    defaults_only.min_positional = 0;
    wf_strs pos = {0};
    int help = 0;
    wf_status s = wf_opts_parse(&defaults_only, dst, 0, NULL, &pos, &help);
    wf_opts_free_positional(&pos);
    return s;
}

wf_status wf_opts_check_choices(const wf_cmd_spec *spec, const void *dst) {
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        if (!o->choices || o->type != WF_OPT_STR || strchr(o->key, '<')) continue;
        const char *v;
        memcpy(&v, (const char *)dst + o->offset, sizeof v);
        WF_TRY(check_choice(o, v ? v : "", "config"));
    }
    return WF_OK;
}

void wf_opts_free(const wf_cmd_spec *spec, void *dst) {
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        if (strchr(o->key, '<')) { /* its list (which other options may share: emptied once) */
            wf_opt_named_list *l = opt_field(o, dst);
            for (size_t k = 0; k < l->n; k++) {
                named_value_free(l->items[k].opt->type, &l->items[k].v);
                free(l->items[k].name);
            }
            free(l->items);
            memset(l, 0, sizeof *l);
        } else if (o->type == WF_OPT_STR) {
            free(*(char **)opt_field(o, dst));
            *(char **)opt_field(o, dst) = NULL;
        } else if (o->type == WF_OPT_STRS) {
            wf_strs_free((wf_strs *)opt_field(o, dst));
        }
    }
}

void wf_opts_free_positional(wf_strs *positional) {
    free(positional->items);
    positional->items = NULL;
    positional->n = 0;
}

void wf_opts_print_help(const wf_cmd_spec *spec, FILE *out) {
    fprintf(out, "usage: %s\n\n%s\n\noptions (--config FILE loads TOML; command-line values override it):\n",
            spec->usage, spec->summary);
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        char names[160];
        if (o->flag) snprintf(names, sizeof names, "--%s, --%s", o->flag, o->key);
        else snprintf(names, sizeof names, "--%s", o->key);
        fprintf(out, "  %s <%s>\n      %s", names, opt_type_name(o->type), o->help);
        /* A key with a named segment has no default of its own: unset
         * until given for a name. */
        if (strchr(o->key, '<')) fprintf(out, " (default: unset");
        else fprintf(out, " (default: %s", o->def ? (o->def[0] ? o->def : "\"\"") : "none");
        if (o->min <= o->max) fprintf(out, "; range %.10g..%.10g", o->min, o->max);
        if (o->choices) {
            fprintf(out, "; one of");
            for (const char *const *c = o->choices; *c; c++) fprintf(out, " %s", *c);
        }
        fprintf(out, ")\n");
    }
    fprintf(out, "  --config <file>\n      TOML file with the options above, as [section] key = value\n");
    fprintf(out, "  -h, --help\n      show this help\n");
}

static void toml_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20 || c == 0x7F) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static void toml_write_value(FILE *out, wf_opt_type type, const void *f) {
    switch (type) {
    case WF_OPT_INT: fprintf(out, "%lld", (long long)*(const int64_t *)f); break;
    case WF_OPT_FLOAT: {
        double d = *(const double *)f;
        if (isnan(d)) fputs("nan", out);
        else if (isinf(d)) fputs(d > 0 ? "inf" : "-inf", out);
        else {
            char buf[64];
            snprintf(buf, sizeof buf, "%.17g", d);
            fputs(buf, out);
            if (!strpbrk(buf, ".eE")) fputs(".0", out);
        }
        break;
    }
    case WF_OPT_BOOL: fputs(*(const int *)f ? "true" : "false", out); break;
    case WF_OPT_STR: {
        const char *s = *(char *const *)f;
        toml_write_string(out, s ? s : "");
        break;
    }
    case WF_OPT_STRS: {
        const wf_strs *l = f;
        fputc('[', out);
        for (size_t k = 0; k < l->n; k++) {
            if (k) fputs(", ", out);
            toml_write_string(out, l->items[k]);
        }
        fputc(']', out);
        break;
    }
    }
}

void wf_opts_write_toml(const wf_cmd_spec *spec, const void *dst, FILE *out) {
    /* Dotted keys at top level are valid TOML and keep this order-free. */
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        if (strchr(o->key, '<')) continue;
        fprintf(out, "%s = ", o->key);
        toml_write_value(out, o->type, (const char *)dst + o->offset);
        fputc('\n', out);
    }
    /* Then each named list, once (the first option that uses it writes it). */
    for (size_t i = 0; i < spec->n_opts; i++) {
        const wf_opt *o = &spec->opts[i];
        if (!strchr(o->key, '<')) continue;
        int first = 1;
        for (size_t j = 0; j < i && first; j++)
            first = !(strchr(spec->opts[j].key, '<') && spec->opts[j].offset == o->offset);
        if (!first) continue;
        const wf_opt_named_list *l = (const void *)((const char *)dst + o->offset);
        for (size_t k = 0; k < l->n; k++) {
            char key[512];
            named_key(l->items[k].opt, l->items[k].name, strlen(l->items[k].name), key, sizeof key);
            fprintf(out, "%s = ", key);
            toml_write_value(out, l->items[k].opt->type, &l->items[k].v);
            fputc('\n', out);
        }
    }
}
