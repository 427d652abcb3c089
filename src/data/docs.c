/* Document reader: turns a list of input files (plain text or JSONL, each
 * optionally gzip- or zstd-compressed) into a stream of documents. It reads
 * through a fixed-size window, so memory is bounded by the largest document
 * (for whole-file text documents, by the largest file). It does not decode
 * or validate UTF-8 in plain text: that is the tokenizer's business. */
#include "weft/buf.h"
#include "weft/docs.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

enum { SRC_PLAIN, SRC_GZ, SRC_ZSTD };
enum { FMT_TEXT, FMT_JSONL };

#define DOCS_READ_CHUNK ((size_t)1 << 20)

typedef struct {
    int kind;
    FILE *fp;             /* plain and zstd */
    gzFile gz;
    ZSTD_DCtx *dctx;
    unsigned char *zin;   /* compressed input window */
    ZSTD_inBuffer in;
    int eof;              /* no more decompressed bytes */
    int frame_open;       /* zstd: inside a frame that has not ended */
    uint64_t consumed;    /* on-disk bytes consumed */
} byte_src;

struct wf_docs {
    char **paths;
    uint64_t *sizes;
    size_t n_paths, cur; /* cur: index of the open file, n_paths when done */
    wf_docs_opts opts;
    char *field;
    byte_src src;
    int fmt, open;
    uint64_t line;       /* 1-based number of the last line taken from the file */
    uint64_t done_bytes; /* on-disk bytes of files already finished */
    uint64_t total_bytes;
    uint64_t n_docs;
    /* window of decompressed bytes: valid data is buf[pos, len) */
    char *buf;
    size_t pos, len, cap;
    /* the current document, for modes that assemble or decode one */
    char *doc;
    size_t doc_len, doc_cap;
};

int wf_docs_parse_mode(const char *name) {
    if (strcmp(name, "file") == 0) return WF_TEXT_DOC_FILE;
    if (strcmp(name, "line") == 0) return WF_TEXT_DOC_LINE;
    if (strcmp(name, "paragraph") == 0) return WF_TEXT_DOC_PARAGRAPH;
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int path_format(const char *p) {
    return ends_with(p, ".jsonl") || ends_with(p, ".jsonl.gz") || ends_with(p, ".jsonl.zst") ||
                   ends_with(p, ".json.gz") || ends_with(p, ".jsonl.zstd")
               ? FMT_JSONL
               : FMT_TEXT;
}

static int path_kind(const char *p) {
    if (ends_with(p, ".gz")) return SRC_GZ;
    if (ends_with(p, ".zst") || ends_with(p, ".zstd")) return SRC_ZSTD;
    return SRC_PLAIN;
}

wf_status wf_docs_open(wf_docs **out, const char *const *paths, size_t n_paths, const wf_docs_opts *o) {
    *out = NULL;
    if (n_paths == 0) return wf_error(WF_ERR_EMPTY, "no input files given");
    wf_docs *d = calloc(1, sizeof *d);
    if (!d) return wf_error(WF_ERR_NOMEM, "out of memory");
    d->paths = calloc(n_paths, sizeof *d->paths);
    d->sizes = calloc(n_paths, sizeof *d->sizes);
    d->field = strdup(o && o->field ? o->field : "text");
    if (!d->paths || !d->sizes || !d->field) {
        wf_docs_destroy(d);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (o) d->opts = *o;
    d->opts.field = d->field;
    d->n_paths = n_paths;
    for (size_t i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            wf_status s = wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO, "%s: cannot open input: %s",
                                   paths[i], strerror(errno));
            wf_docs_destroy(d);
            return s;
        }
        if (S_ISDIR(st.st_mode)) {
            wf_docs_destroy(d);
            return wf_error(WF_ERR_INVALID, "%s: is a directory; give the files in it", paths[i]);
        }
        d->paths[i] = strdup(paths[i]);
        if (!d->paths[i]) {
            wf_docs_destroy(d);
            return wf_error(WF_ERR_NOMEM, "out of memory");
        }
        d->sizes[i] = (uint64_t)st.st_size;
        d->total_bytes += (uint64_t)st.st_size;
    }
    *out = d;
    return WF_OK;
}

static void src_close(byte_src *s) {
    if (s->fp) fclose(s->fp);
    if (s->gz) gzclose(s->gz);
    ZSTD_freeDCtx(s->dctx);
    free(s->zin);
    memset(s, 0, sizeof *s);
}

static wf_status src_open(byte_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->kind = path_kind(path);
    if (s->kind == SRC_GZ) {
        s->gz = gzopen(path, "rb");
        if (!s->gz) return wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        gzbuffer(s->gz, 1 << 17);
        return WF_OK;
    }
    s->fp = fopen(path, "rb");
    if (!s->fp) return wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (s->kind == SRC_ZSTD) {
        s->dctx = ZSTD_createDCtx();
        s->zin = malloc(ZSTD_DStreamInSize());
        if (!s->dctx || !s->zin) {
            src_close(s);
            return wf_error(WF_ERR_NOMEM, "out of memory");
        }
        s->in = (ZSTD_inBuffer){s->zin, 0, 0};
    }
    return WF_OK;
}

/* Reads up to n decompressed bytes; *got == 0 means end of file. */
static wf_status src_read(byte_src *s, const char *path, char *dst, size_t n, size_t *got) {
    *got = 0;
    if (s->eof) return WF_OK;
    if (s->kind == SRC_PLAIN) {
        size_t r = fread(dst, 1, n, s->fp);
        if (r == 0 && ferror(s->fp)) return wf_error(WF_ERR_IO, "%s: read error", path);
        if (r == 0) s->eof = 1;
        s->consumed += r;
        *got = r;
        return WF_OK;
    }
    if (s->kind == SRC_GZ) {
        int r = gzread(s->gz, dst, (unsigned)(n > (1u << 30) ? (1u << 30) : n));
        if (r < 0) {
            int zerr;
            const char *m = gzerror(s->gz, &zerr);
            return wf_error(WF_ERR_FORMAT, "%s: gzip error: %s", path, m);
        }
        if (r == 0) {
            /* gzread returns 0 both at a clean end and on a truncated
             * stream; gzerror tells them apart. */
            int zerr;
            const char *m = gzerror(s->gz, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END)
                return wf_error(WF_ERR_FORMAT, "%s: gzip error: %s", path, m);
            s->eof = 1;
        }
        s->consumed = (uint64_t)gzoffset(s->gz);
        *got = (size_t)r;
        return WF_OK;
    }
    /* zstd */
    ZSTD_outBuffer ob = {dst, n, 0};
    while (ob.pos == 0) {
        if (s->in.pos == s->in.size) {
            size_t r = fread(s->zin, 1, ZSTD_DStreamInSize(), s->fp);
            if (r == 0) {
                if (ferror(s->fp)) return wf_error(WF_ERR_IO, "%s: read error", path);
                if (s->frame_open)
                    return wf_error(WF_ERR_FORMAT, "%s: truncated zstd stream", path);
                s->eof = 1;
                break;
            }
            s->in = (ZSTD_inBuffer){s->zin, r, 0};
            s->consumed += r;
        }
        size_t r = ZSTD_decompressStream(s->dctx, &ob, &s->in);
        if (ZSTD_isError(r))
            return wf_error(WF_ERR_FORMAT, "%s: zstd error: %s", path, ZSTD_getErrorName(r));
        s->frame_open = r != 0;
    }
    *got = ob.pos;
    return WF_OK;
}

/* Makes room for more bytes in the window, compacting it first. */
static wf_status window_fill(wf_docs *d, int *eof) {
    if (d->pos > 0) {
        memmove(d->buf, d->buf + d->pos, d->len - d->pos);
        d->len -= d->pos;
        d->pos = 0;
    }
    if (WF_GROW(d->buf, d->cap, d->len + DOCS_READ_CHUNK, 2 * DOCS_READ_CHUNK) != WF_OK)
        return wf_error_wrap(WF_ERR_NOMEM, "%s: reading a line of %zu bytes: ", d->paths[d->cur], d->len);
    size_t got = 0;
    WF_TRY(src_read(&d->src, d->paths[d->cur], d->buf + d->len, d->cap - d->len, &got));
    d->len += got;
    *eof = got == 0;
    return WF_OK;
}

/* Next line of the open file without its '\n' (and a trailing '\r').
 * *line == NULL at end of file. */
static wf_status next_line(wf_docs *d, const char **line, size_t *n) {
    size_t scan = d->pos;
    for (;;) {
        char *nl = d->len > scan ? memchr(d->buf + scan, '\n', d->len - scan) : NULL;
        if (nl) {
            *line = d->buf + d->pos;
            *n = (size_t)(nl - (d->buf + d->pos));
            d->pos = (size_t)(nl - d->buf) + 1;
            break;
        }
        size_t scanned = d->len - d->pos;
        int eof = 0;
        WF_TRY(window_fill(d, &eof));
        scan = scanned; /* window_fill moved the data to the front */
        if (eof) {
            if (d->len == d->pos) {
                *line = NULL;
                *n = 0;
                return WF_OK;
            }
            *line = d->buf + d->pos;
            *n = d->len - d->pos;
            d->pos = d->len;
            break;
        }
    }
    d->line++;
    if (*n && (*line)[*n - 1] == '\r') (*n)--;
    return WF_OK;
}

static wf_status doc_append(wf_docs *d, const char *s, size_t n) {
    if (n == 0) return WF_OK;
    if (WF_GROW(d->doc, d->doc_cap, d->doc_len + n + 1, 1 << 16) != WF_OK)
        return wf_error_wrap(WF_ERR_NOMEM, "%s: assembling a document of %zu bytes: ", d->paths[d->cur],
                             d->doc_len + n);
    memcpy(d->doc + d->doc_len, s, n);
    d->doc_len += n;
    return WF_OK;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

/* Reads the rest of the open file as one document. */
static wf_status read_whole(wf_docs *d) {
    d->doc_len = 0;
    if (d->len > d->pos) WF_TRY(doc_append(d, d->buf + d->pos, d->len - d->pos));
    d->pos = d->len;
    for (;;) {
        if (d->doc_cap - d->doc_len < DOCS_READ_CHUNK) {
            size_t cap = (d->doc_len + DOCS_READ_CHUNK) * 2;
            char *nd = realloc(d->doc, cap);
            if (!nd) return wf_error(WF_ERR_NOMEM, "%s: out of memory", d->paths[d->cur]);
            d->doc = nd;
            d->doc_cap = cap;
        }
        size_t got = 0;
        WF_TRY(src_read(&d->src, d->paths[d->cur], d->doc + d->doc_len, d->doc_cap - d->doc_len, &got));
        if (got == 0) break;
        d->doc_len += got;
    }
    return WF_OK;
}

static wf_status jsonl_doc(wf_docs *d, const char *line, size_t n, const char **text, size_t *len) {
    json_error_t jerr;
    json_t *obj = json_loadb(line, n, JSON_ALLOW_NUL, &jerr);
    const char *path = d->paths[d->cur];
    if (!obj)
        return wf_error(WF_ERR_FORMAT, "%s:%llu: malformed JSON at column %d: %s", path,
                        (unsigned long long)d->line, jerr.column, jerr.text);
    wf_status s = WF_OK;
    json_t *f = json_is_object(obj) ? json_object_get(obj, d->field) : NULL;
    if (!json_is_object(obj))
        s = wf_error(WF_ERR_FORMAT, "%s:%llu: expected a JSON object per line", path, (unsigned long long)d->line);
    else if (!f)
        s = wf_error(WF_ERR_FORMAT, "%s:%llu: no field \"%s\" (set the field name with --field)", path,
                     (unsigned long long)d->line, d->field);
    else if (!json_is_string(f))
        s = wf_error(WF_ERR_FORMAT, "%s:%llu: field \"%s\" is not a string", path, (unsigned long long)d->line,
                     d->field);
    if (s == WF_OK) {
        d->doc_len = 0;
        s = doc_append(d, json_string_value(f), json_string_length(f));
        *text = d->doc;
        *len = d->doc_len;
    }
    json_decref(obj);
    return s;
}

static wf_status open_next_file(wf_docs *d) {
    if (d->open) {
        d->done_bytes += d->sizes[d->cur];
        src_close(&d->src);
        d->open = 0;
        d->cur++;
    }
    if (d->cur >= d->n_paths) return WF_OK;
    WF_TRY(src_open(&d->src, d->paths[d->cur]));
    d->open = 1;
    d->fmt = path_format(d->paths[d->cur]);
    d->line = 0;
    d->pos = d->len = 0;
    return WF_OK;
}

wf_status wf_docs_next(wf_docs *d, const char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    for (;;) {
        if (!d->open) {
            if (d->cur >= d->n_paths) return WF_OK;
            WF_TRY(open_next_file(d));
            continue;
        }
        if (d->fmt == FMT_TEXT && d->opts.text_mode == WF_TEXT_DOC_FILE) {
            if (d->src.eof && d->pos == d->len) {
                WF_TRY(open_next_file(d));
                continue;
            }
            WF_TRY(read_whole(d));
            if (d->doc_len == 0) continue; /* empty file: src is at eof now */
            *text = d->doc;
            *len = d->doc_len;
            d->n_docs++;
            return WF_OK;
        }
        const char *line;
        size_t n;
        if (d->fmt == FMT_JSONL || d->opts.text_mode == WF_TEXT_DOC_LINE) {
            WF_TRY(next_line(d, &line, &n));
            if (!line) {
                WF_TRY(open_next_file(d));
                continue;
            }
            if (is_blank(line, n)) continue;
            if (d->fmt == FMT_JSONL) {
                WF_TRY(jsonl_doc(d, line, n, text, len));
                /* An empty document is skipped; *text goes back to NULL so
                 * that an input ending with one still ends with NULL. */
                if (*len == 0) {
                    *text = NULL;
                    continue;
                }
            } else {
                *text = line;
                *len = n;
            }
            d->n_docs++;
            return WF_OK;
        }
        /* paragraphs: lines up to a blank line, joined with '\n' */
        d->doc_len = 0;
        int at_eof = 0;
        for (;;) {
            WF_TRY(next_line(d, &line, &n));
            if (!line) {
                at_eof = 1;
                break;
            }
            if (is_blank(line, n)) {
                if (d->doc_len) break;
                continue;
            }
            if (d->doc_len) WF_TRY(doc_append(d, "\n", 1));
            WF_TRY(doc_append(d, line, n));
        }
        if (d->doc_len) {
            *text = d->doc;
            *len = d->doc_len;
            d->n_docs++;
            return WF_OK;
        }
        if (at_eof) WF_TRY(open_next_file(d));
    }
}

uint64_t wf_docs_progress(const wf_docs *d) {
    return d->done_bytes + (d->open ? d->src.consumed : 0);
}

uint64_t wf_docs_total(const wf_docs *d) { return d->total_bytes; }

uint64_t wf_docs_count(const wf_docs *d) { return d->n_docs; }

void wf_docs_destroy(wf_docs *d) {
    if (!d) return;
    if (d->open) src_close(&d->src);
    for (size_t i = 0; i < d->n_paths; i++) free(d->paths ? d->paths[i] : NULL);
    free(d->paths);
    free(d->sizes);
    free(d->field);
    free(d->buf);
    free(d->doc);
    free(d);
}
