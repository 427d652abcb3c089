/* The pipeline's input readers: one input file (plain, gzip or zstd, told
 * apart by magic bytes) as a stream of records. WARC and WET files (WARC
 * 1.0/1.1: a version line, header lines, a blank line, Content-Length bytes
 * of block) give their response, conversion and resource records; JSONL
 * files one record per line (the configured string field); plain text one
 * record per file, paragraph or line.
 *
 * Reading goes through one window that grows to the largest record (capped
 * by input.max_doc_mb; larger records are skipped without being held), so
 * memory does not depend on the input's size. Damage never crashes the
 * reader: a malformed WARC record is skipped by scanning for the next
 * version line, a bad JSON line is a dropped record, and a truncated or
 * corrupt compressed stream ends the input early, counted and logged. Only
 * a file that cannot be opened is an error. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include "prep/prep_impl.h"
#include "weft/log.h"

enum { SRC_PLAIN, SRC_GZ, SRC_ZSTD };
enum { FMT_TEXT, FMT_JSONL, FMT_WARC };

#define READ_CHUNK ((size_t)1 << 18)
#define MAX_HEADER_LINE ((size_t)1 << 16)

struct prep_reader {
    char *path;
    int kind, fmt;
    FILE *fp;
    gzFile gz;
    ZSTD_DCtx *dctx;
    unsigned char *zin;
    ZSTD_inBuffer in;
    int frame_open;
    int src_eof;          /* no more decompressed bytes will come */
    int damaged;
    uint64_t consumed;    /* on-disk bytes (plain and zstd) */
    /* window of decompressed bytes: buf[pos, len) */
    char *buf;
    size_t pos, len, cap;
    uint64_t offset;      /* decompressed offset of buf[pos], for messages */
    /* options */
    size_t max_doc;
    int text_mode;        /* 0 file, 1 paragraph, 2 line */
    int unwrap;
    char *field;
    /* the current record */
    uint64_t index, skipped;
    wf_buf doc, url;
    json_t *json;
    int text_done;        /* file mode: the one record was returned */
};

/* ---- byte source ---- */

static int magic_kind(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    unsigned char m[4] = {0};
    size_t n = fread(m, 1, 4, fp);
    fclose(fp);
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) return SRC_GZ;
    if (n == 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) return SRC_ZSTD;
    return SRC_PLAIN;
}

static void mark_damaged(prep_reader *r, const char *what) {
    if (!r->damaged)
        WF_WARN("%s: %s after byte %llu of its contents; the rest of this input is skipped", r->path,
                what, (unsigned long long)(r->offset + r->len));
    r->damaged = 1;
    r->src_eof = 1;
}

/* Reads up to n decompressed bytes; 0 at the end (or after damage). */
static size_t src_read(prep_reader *r, char *out, size_t n) {
    if (r->src_eof) return 0;
    if (r->kind == SRC_PLAIN) {
        size_t got = fread(out, 1, n, r->fp);
        r->consumed += got;
        if (got == 0) {
            if (ferror(r->fp)) mark_damaged(r, "read error");
            r->src_eof = 1;
        }
        return got;
    }
    if (r->kind == SRC_GZ) {
        if (n > (1u << 30)) n = 1u << 30;
        int got = gzread(r->gz, out, (unsigned)n);
        if (got > 0) return (size_t)got;
        int err = 0;
        const char *msg = gzerror(r->gz, &err);
        if (got < 0 || (err != Z_OK && err != Z_STREAM_END)) {
            char what[160];
            size_t pl = strlen(r->path);
            if (msg && strncmp(msg, r->path, pl) == 0 && msg[pl] == ':') msg += pl + 1;
            while (msg && *msg == ' ') msg++;
            snprintf(what, sizeof what, "damaged gzip data (%s)", msg ? msg : "error");
            mark_damaged(r, what);
        }
        r->src_eof = 1;
        return 0;
    }
    /* zstd: decompress from the input window until some output comes. */
    ZSTD_outBuffer ob = {out, n, 0};
    while (ob.pos == 0) {
        if (r->in.pos == r->in.size) {
            size_t got = fread(r->zin, 1, ZSTD_DStreamInSize(), r->fp);
            r->consumed += got;
            if (got == 0) {
                if (ferror(r->fp)) mark_damaged(r, "read error");
                else if (r->frame_open) mark_damaged(r, "truncated zstd data");
                r->src_eof = 1;
                return 0;
            }
            r->in.src = r->zin;
            r->in.size = got;
            r->in.pos = 0;
        }
        size_t ret = ZSTD_decompressStream(r->dctx, &ob, &r->in);
        if (ZSTD_isError(ret)) {
            char what[160];
            snprintf(what, sizeof what, "damaged zstd data (%s)", ZSTD_getErrorName(ret));
            mark_damaged(r, what);
            return ob.pos;
        }
        r->frame_open = ret != 0;
    }
    return ob.pos;
}

/* Makes at least `need` bytes available in the window if the input has
 * them; returns how many are. */
static wf_status fill(prep_reader *r, size_t need, size_t *avail) {
    while (r->len - r->pos < need && !r->src_eof) {
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->len - r->pos);
            r->offset += r->pos;
            r->len -= r->pos;
            r->pos = 0;
        }
        size_t want = need > READ_CHUNK ? need : READ_CHUNK;
        /* One byte more than the window, for a terminating NUL. */
        if (r->cap - r->len < want + 1 &&
            WF_GROW(r->buf, r->cap, r->len + want + 1, READ_CHUNK * 2) != WF_OK)
            return wf_error_wrap(WF_ERR_NOMEM, "%s: the read window: ", r->path);
        size_t got = src_read(r, r->buf + r->len, r->cap - r->len);
        r->len += got;
    }
    *avail = r->len - r->pos;
    return WF_OK;
}

static void consume(prep_reader *r, size_t n) { r->pos += n; }

/* Skips n bytes without holding them. Returns how many were there. */
static wf_status skip_bytes(prep_reader *r, uint64_t n, uint64_t *skipped) {
    uint64_t done = 0;
    while (done < n) {
        size_t avail;
        WF_TRY(fill(r, 1, &avail));
        if (!avail) break;
        size_t k = avail < n - done ? avail : (size_t)(n - done);
        consume(r, k);
        done += k;
    }
    *skipped = done;
    return WF_OK;
}

/* The next line (without its LF; a trailing CR is kept) of at most `max`
 * bytes. *line NULL at the end of input. *too_long: the line was longer
 * and has been skipped to its end. */
static wf_status read_line(prep_reader *r, size_t max, const char **line, size_t *len, int *too_long) {
    *line = NULL;
    *len = 0;
    *too_long = 0;
    size_t scanned = 0;
    for (;;) {
        size_t avail = r->len - r->pos;
        char *nl = avail > scanned ? memchr(r->buf + r->pos + scanned, '\n', avail - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - (r->buf + r->pos));
            if (n > max) {
                consume(r, n + 1);
                *too_long = 1;
                return WF_OK;
            }
            *line = r->buf + r->pos;
            *len = n;
            consume(r, n + 1);
            return WF_OK;
        }
        scanned = avail;
        if (avail > max) {
            /* Too long: drop what we have and skip to the next LF. */
            *too_long = 1;
            consume(r, avail);
            for (;;) {
                WF_TRY(fill(r, 1, &avail));
                if (!avail) return WF_OK;
                nl = memchr(r->buf + r->pos, '\n', avail);
                if (nl) {
                    consume(r, (size_t)(nl - (r->buf + r->pos)) + 1);
                    return WF_OK;
                }
                consume(r, avail);
            }
        }
        if (r->src_eof) {
            if (avail == 0) return WF_OK;
            *line = r->buf + r->pos; /* last line without LF */
            *len = avail;
            consume(r, avail);
            return WF_OK;
        }
        WF_TRY(fill(r, avail + 1, &avail));
    }
}

/* ---- open / close ---- */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int name_is_jsonl(const char *p) {
    const char *sfx[] = {".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json", ".json.gz",
                         ".json.zst", ".ndjson", ".ndjson.gz", ".ndjson.zst"};
    for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++)
        if (ends_with(p, sfx[i])) return 1;
    return 0;
}

wf_status wf__prep_reader_open(prep_reader **out, const char *path, const wf_prep_config *c) {
    *out = NULL;
    int kind = magic_kind(path);
    if (kind < 0)
        return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    prep_reader *r = calloc(1, sizeof *r);
    if (!r) return wf_error(WF_ERR_NOMEM, "out of memory");
    r->path = strdup(path);
    r->field = strdup(c->jsonl_field ? c->jsonl_field : "text");
    r->kind = kind;
    r->max_doc = (size_t)c->max_doc_mb << 20;
    r->text_mode = strcmp(c->text_mode, "line") == 0 ? 2 : strcmp(c->text_mode, "paragraph") == 0 ? 1 : 0;
    r->unwrap = c->unwrap;
    if (!r->path || !r->field) {
        wf__prep_reader_close(r);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    wf_status s = WF_OK;
    if (kind == SRC_GZ) {
        r->gz = gzopen(path, "rb");
        if (!r->gz) s = wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        else gzbuffer(r->gz, 1 << 17);
    } else {
        r->fp = fopen(path, "rb");
        if (!r->fp) s = wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        if (s == WF_OK && kind == SRC_ZSTD) {
            r->dctx = ZSTD_createDCtx();
            r->zin = malloc(ZSTD_DStreamInSize());
            if (!r->dctx || !r->zin) s = wf_error(WF_ERR_NOMEM, "out of memory");
        }
    }
    if (s != WF_OK) {
        wf__prep_reader_close(r);
        return s;
    }
    /* Format: WARC by its first bytes, JSONL by name, else text. */
    size_t avail;
    s = fill(r, 8, &avail);
    if (s != WF_OK) {
        wf__prep_reader_close(r);
        return s;
    }
    if (avail >= 5 && memcmp(r->buf + r->pos, "WARC/", 5) == 0) r->fmt = FMT_WARC;
    else if (name_is_jsonl(path)) r->fmt = FMT_JSONL;
    else r->fmt = FMT_TEXT;
    *out = r;
    return WF_OK;
}

void wf__prep_reader_close(prep_reader *r) {
    if (!r) return;
    if (r->fp) fclose(r->fp);
    if (r->gz) gzclose(r->gz);
    ZSTD_freeDCtx(r->dctx);
    free(r->zin);
    free(r->buf);
    free(r->path);
    free(r->field);
    wf_buf_free(&r->doc);
    wf_buf_free(&r->url);
    if (r->json) json_decref(r->json);
    free(r);
}

uint64_t wf__prep_reader_consumed(const prep_reader *r) {
    if (r->kind == SRC_GZ) {
        long off = (long)gzoffset(r->gz);
        return off > 0 ? (uint64_t)off : 0;
    }
    return r->consumed;
}
uint64_t wf__prep_reader_skipped(const prep_reader *r) { return r->skipped; }
int wf__prep_reader_damaged(const prep_reader *r) { return r->damaged; }

/* ---- WARC ---- */

static int header_is(const char *line, size_t len, const char *name, const char **value, size_t *vlen) {
    size_t n = strlen(name);
    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':') return 0;
    const char *v = line + n + 1;
    const char *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) end--;
    *value = v;
    *vlen = (size_t)(end - v);
    return 1;
}

static int is_blank_line(const char *line, size_t len) {
    return len == 0 || (len == 1 && line[0] == '\r');
}

/* Skips lines up to one starting a WARC record ("WARC/"), left unread. */
static wf_status warc_resync(prep_reader *r) {
    for (;;) {
        size_t avail;
        WF_TRY(fill(r, 5, &avail));
        if (avail < 5) {
            consume(r, avail);
            return WF_OK;
        }
        if (memcmp(r->buf + r->pos, "WARC/", 5) == 0) return WF_OK;
        const char *line;
        size_t len;
        int too_long;
        WF_TRY(read_line(r, MAX_HEADER_LINE, &line, &len, &too_long));
        if (!line && !too_long) return WF_OK;
    }
}

static wf_status warc_next(prep_reader *r, prep_record *rec, int *eof) {
    for (;;) {
        const char *line;
        size_t len;
        int too_long;
        /* Records are separated by blank lines. */
        do {
            WF_TRY(read_line(r, MAX_HEADER_LINE, &line, &len, &too_long));
        } while (line && is_blank_line(line, len));
        if (!line && !too_long) {
            *eof = 1;
            return WF_OK;
        }
        uint64_t index = r->index++;
        int malformed = too_long || len < 5 || memcmp(line, "WARC/", 5) != 0;
        char type[32] = "";
        int64_t clen = -1;
        int http = 0, html = 0, textual = 0;
        r->url.len = 0;
        while (!malformed) {
            WF_TRY(read_line(r, MAX_HEADER_LINE, &line, &len, &too_long));
            if (too_long || !line) {
                malformed = 1;
                break;
            }
            if (is_blank_line(line, len)) break;
            const char *v;
            size_t vl;
            if (header_is(line, len, "WARC-Type", &v, &vl)) {
                snprintf(type, sizeof type, "%.*s", (int)(vl < 31 ? vl : 31), v);
            } else if (header_is(line, len, "Content-Length", &v, &vl)) {
                clen = 0;
                if (vl == 0 || vl > 15) malformed = 1;
                for (size_t i = 0; i < vl && !malformed; i++) {
                    if (v[i] < '0' || v[i] > '9') malformed = 1;
                    else clen = clen * 10 + (v[i] - '0');
                }
            } else if (header_is(line, len, "WARC-Target-URI", &v, &vl)) {
                /* Some writers wrap the URI in <>. */
                if (vl >= 2 && v[0] == '<' && v[vl - 1] == '>') v++, vl -= 2;
                r->url.len = 0;
                WF_TRY(wf_buf_append(&r->url, v, vl));
            } else if (header_is(line, len, "Content-Type", &v, &vl)) {
                if (vl >= 16 && strncasecmp(v, "application/http", 16) == 0) http = 1;
                else if (vl >= 9 && strncasecmp(v, "text/html", 9) == 0) html = 1;
                else if (vl >= 21 && strncasecmp(v, "application/xhtml+xml", 21) == 0) html = 1;
                else if (vl >= 10 && strncasecmp(v, "text/plain", 10) == 0) textual = 1;
            }
        }
        if (!malformed && clen < 0) malformed = 1;
        memset(rec, 0, sizeof *rec);
        rec->index = index;
        rec->drop = R_NONE;
        rec->url = r->url.len ? r->url.data : NULL;
        if (malformed) {
            /* Count it once, then look for the next record. */
            WF_TRY(warc_resync(r));
            rec->drop = R_MALFORMED;
            return WF_OK;
        }
        /* Which records are documents: responses (HTTP), WET conversions
         * (text), and resources fetched from the web (not wget's logs). */
        int is_doc = 0;
        if (strcasecmp(type, "response") == 0 && http) is_doc = 1, rec->kind = REC_HTTP;
        else if (strcasecmp(type, "conversion") == 0) is_doc = 1, rec->kind = html ? REC_HTML : REC_TEXT;
        else if (strcasecmp(type, "resource") == 0 && (html || textual) && rec->url &&
                 (strncasecmp(rec->url, "http:", 5) == 0 || strncasecmp(rec->url, "https:", 6) == 0))
            is_doc = 1, rec->kind = html ? REC_HTML : REC_TEXT;
        if (!is_doc || (uint64_t)clen > r->max_doc) {
            uint64_t got = 0;
            WF_TRY(skip_bytes(r, (uint64_t)clen, &got));
            if (got < (uint64_t)clen && !r->damaged) mark_damaged(r, "a truncated WARC record");
            if (!is_doc) {
                r->skipped++;
                if (got < (uint64_t)clen) {
                    *eof = 1;
                    return WF_OK;
                }
                continue;
            }
            rec->drop = got < (uint64_t)clen ? R_MALFORMED : R_TOO_LARGE;
            return WF_OK;
        }
        size_t avail;
        WF_TRY(fill(r, (size_t)clen, &avail));
        if (avail < (size_t)clen) {
            consume(r, avail);
            if (!r->damaged) mark_damaged(r, "a truncated WARC record");
            rec->drop = R_MALFORMED;
            return WF_OK;
        }
        rec->data = r->buf + r->pos;
        rec->len = (size_t)clen;
        consume(r, (size_t)clen);
        return WF_OK;
    }
}

/* ---- JSONL ---- */

static wf_status jsonl_next(prep_reader *r, prep_record *rec, int *eof) {
    if (r->json) {
        json_decref(r->json);
        r->json = NULL;
    }
    const char *line;
    size_t len;
    int too_long;
    do {
        WF_TRY(read_line(r, r->max_doc + 1024, &line, &len, &too_long));
        if (too_long) break;
        if (!line) {
            *eof = 1;
            return WF_OK;
        }
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
    } while (len == 0);
    memset(rec, 0, sizeof *rec);
    rec->index = r->index++;
    rec->drop = R_NONE;
    rec->kind = REC_TEXT;
    if (too_long) {
        rec->drop = R_TOO_LARGE;
        return WF_OK;
    }
    json_error_t err;
    r->json = json_loadb(line, len, JSON_ALLOW_NUL, &err);
    if (!r->json || !json_is_object(r->json)) {
        rec->drop = R_BAD_JSON;
        return WF_OK;
    }
    json_t *t = json_object_get(r->json, r->field);
    if (!json_is_string(t)) {
        rec->drop = R_NO_FIELD;
        return WF_OK;
    }
    rec->data = json_string_value(t);
    rec->len = json_string_length(t);
    json_t *u = json_object_get(r->json, "url");
    if (json_is_string(u)) rec->url = json_string_value(u);
    return WF_OK;
}

/* ---- plain text ---- */

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

/* Adds a line to the document being built; with unwrap, lines of one
 * paragraph are joined by spaces and paragraphs by one LF. */
static wf_status doc_add_line(prep_reader *r, const char *line, size_t len, int *para_break,
                              int *too_large) {
    if (*too_large) return WF_OK;
    if (r->doc.len + len + 1 > r->max_doc) {
        *too_large = 1;
        return WF_OK;
    }
    if (r->unwrap) {
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
        if (r->doc.len) WF_TRY(wf_buf_append(&r->doc, *para_break ? "\n" : " ", 1));
        *para_break = 0;
        return wf_buf_append(&r->doc, line, len);
    }
    if (*para_break && r->doc.len) WF_TRY(wf_buf_append(&r->doc, "\n", 1));
    *para_break = 0;
    WF_TRY(wf_buf_append(&r->doc, line, len));
    return wf_buf_append(&r->doc, "\n", 1);
}

static wf_status text_next(prep_reader *r, prep_record *rec, int *eof) {
    memset(rec, 0, sizeof *rec);
    rec->drop = R_NONE;
    rec->kind = REC_TEXT;
    r->doc.len = 0;
    int too_large = 0, para_break = 0;
    for (;;) {
        const char *line;
        size_t len;
        int too_long;
        WF_TRY(read_line(r, r->max_doc, &line, &len, &too_long));
        if (too_long) {
            too_large = 1;
            if (r->text_mode == 2) break;
            continue;
        }
        if (!line) break;
        int is_blank = blank(line, len);
        if (r->text_mode == 2) { /* line */
            if (is_blank) continue;
            WF_TRY(doc_add_line(r, line, len, &para_break, &too_large));
            break;
        }
        if (is_blank) {
            if (r->text_mode == 1 && (r->doc.len || too_large)) break; /* paragraph ends */
            para_break = 1;
            continue;
        }
        WF_TRY(doc_add_line(r, line, len, &para_break, &too_large));
    }
    if (!r->doc.len && !too_large) {
        *eof = 1;
        return WF_OK;
    }
    rec->index = r->index++;
    if (too_large) {
        rec->drop = R_TOO_LARGE;
        return WF_OK;
    }
    rec->data = r->doc.data;
    rec->len = r->doc.len;
    return WF_OK;
}

wf_status wf__prep_reader_next(prep_reader *r, prep_record *rec, int *eof) {
    *eof = 0;
    memset(rec, 0, sizeof *rec);
    rec->drop = R_NONE;
    switch (r->fmt) {
    case FMT_WARC: return warc_next(r, rec, eof);
    case FMT_JSONL: return jsonl_next(r, rec, eof);
    default: return text_next(r, rec, eof);
    }
}
