/* The intermediate files of a prep run (OUT/_prep/<step>/...): a fixed
 * header (magic, version, kind, payload size, XXH3 of the payload) and
 * little-endian records. Written to a temporary name and renamed, so a
 * file that exists is complete. Read whole and checked before any record
 * is used (prep_ir), or streamed a chunk at a time (prep_dr, for the files
 * that grow with an input: documents and output blobs) with the checksum
 * checked before the reading unit publishes anything, so a damaged file is
 * an error naming it, never a wrong output.
 * Format: docs/formats/prep-intermediate.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"

#define HEADER_BYTES 32

static const char *const kind_names[] = {"", "docs", "hashes", "drops", "bands", "edges", "cluster", "index", "blob"};

const char *wf__prep_inter_kind_name(int kind) {
    return kind > 0 && kind < PI_KIND_COUNT ? kind_names[kind] : "unknown";
}

static void put_u32(unsigned char *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) x |= (uint32_t)p[i] << (8 * i);
    return x;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

wf_status wf__prep_iw_open(prep_iw *w, const char *path, int kind) {
    memset(w, 0, sizeof *w);
    w->kind = kind;
    size_t n = strlen(path);
    w->path = malloc(n + 1);
    w->tmp = malloc(n + 32);
    w->h = wf_hasher_create();
    if (!w->path || !w->tmp || !w->h) {
        wf__prep_iw_abort(w);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    memcpy(w->path, path, n + 1);
    snprintf(w->tmp, n + 32, "%s.tmp%ld", path, (long)getpid());
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        wf_status s = wf_error(WF_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        wf__prep_iw_abort(w);
        return s;
    }
    unsigned char hdr[HEADER_BYTES] = {0};
    if (fwrite(hdr, 1, sizeof hdr, w->fp) != sizeof hdr) {
        wf_status s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
        wf__prep_iw_abort(w);
        return s;
    }
    return WF_OK;
}

wf_status wf__prep_iw_write(prep_iw *w, const void *p, size_t n) {
    if (!n) return WF_OK;
    if (fwrite(p, 1, n, w->fp) != n) return wf_error(WF_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    wf_hasher_update(w->h, p, n);
    w->bytes += n;
    return WF_OK;
}

wf_status wf__prep_iw_u32(prep_iw *w, uint32_t x) {
    unsigned char b[4];
    put_u32(b, x);
    return wf__prep_iw_write(w, b, 4);
}

wf_status wf__prep_iw_u64(prep_iw *w, uint64_t x) {
    unsigned char b[8];
    put_u64(b, x);
    return wf__prep_iw_write(w, b, 8);
}

wf_status wf__prep_iw_commit(prep_iw *w) {
    unsigned char hdr[HEADER_BYTES];
    memcpy(hdr, PREP_INTER_MAGIC, 8);
    put_u32(hdr + 8, PREP_INTER_VERSION);
    put_u32(hdr + 12, (uint32_t)w->kind);
    put_u64(hdr + 16, w->bytes);
    put_u64(hdr + 24, wf_hasher_digest(w->h));
    wf_status s = WF_OK;
    if (fseek(w->fp, 0, SEEK_SET) != 0 || fwrite(hdr, 1, sizeof hdr, w->fp) != sizeof hdr || fflush(w->fp) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    if (fclose(w->fp) != 0 && s == WF_OK) s = wf_error(WF_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    w->fp = NULL;
    if (s == WF_OK && rename(w->tmp, w->path) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
    wf__prep_iw_abort(w);
    return s;
}

void wf__prep_iw_abort(prep_iw *w) {
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    if (w->h) wf_hasher_destroy(w->h);
    memset(w, 0, sizeof *w);
}

/* The header's version, kind and records' size (the file holds `have`
 * bytes after the header), shared by both readers; *sum is its checksum. */
static wf_status check_header(const unsigned char *h, uint64_t have, const char *what, int kind, uint64_t *sum) {
    uint32_t ver = get_u32(h + 8), k = get_u32(h + 12);
    uint64_t n = get_u64(h + 16);
    *sum = get_u64(h + 24);
    if (ver != PREP_INTER_VERSION)
        return wf_error(WF_ERR_FORMAT, "%s: intermediate file version %u (this weft reads version %d)", what, ver,
                        PREP_INTER_VERSION);
    if ((int)k != kind)
        return wf_error(WF_ERR_FORMAT, "%s: holds %s records where %s records were expected", what,
                        wf__prep_inter_kind_name((int)k), wf__prep_inter_kind_name(kind));
    if (n != have)
        return wf_error(WF_ERR_FORMAT, "%s: the header says %llu bytes of records, the file has %llu", what,
                        (unsigned long long)n, (unsigned long long)have);
    return WF_OK;
}

wf_status wf__prep_ir_parse(prep_ir *r, const char *what, const char *data, size_t len, int kind) {
    r->what = what;
    r->data = data;
    r->len = len;
    r->pos = 0;
    if (len < HEADER_BYTES || memcmp(data, PREP_INTER_MAGIC, 8) != 0)
        return wf_error(WF_ERR_FORMAT, "%s: not a weft prep intermediate file (%zu bytes, no header)", what, len);
    uint64_t n = len - HEADER_BYTES, sum;
    WF_TRY(check_header((const unsigned char *)data, n, what, kind, &sum));
    if (wf_hash64(data + HEADER_BYTES, (size_t)n) != sum)
        return wf_error(WF_ERR_FORMAT, "%s: checksum mismatch: the file is damaged", what);
    r->pos = HEADER_BYTES;
    return WF_OK;
}

/* A file that fails to open or parse: its error gets how to get past it. */
static void force_hint(wf_status s) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_error_msg());
    wf_error(s, "%s; rerun with --force to start over", msg);
}

wf_status wf__prep_ir_load(prep_ir *r, const char *path, int kind) {
    memset(r, 0, sizeof *r);
    char *data = NULL;
    size_t len = 0;
    wf_status s = wf_file_read(path, &data, &len);
    if (s != WF_OK) return s;
    r->owned = data;
    size_t n = strlen(path) + 1;
    r->path = malloc(n);
    if (!r->path) {
        free(data);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    memcpy(r->path, path, n);
    s = wf__prep_ir_parse(r, r->path, data, len, kind);
    if (s != WF_OK) {
        force_hint(s);
        wf__prep_ir_free(r);
    }
    return s;
}

void wf__prep_ir_free(prep_ir *r) {
    free(r->owned);
    free(r->path);
    memset(r, 0, sizeof *r);
}

int wf__prep_ir_end(const prep_ir *r) { return r->pos >= r->len; }

static wf_status truncated(const prep_ir *r, const char *what) {
    return wf_error(WF_ERR_FORMAT, "%s: a %s record at byte %zu is cut short", r->what, what, r->pos);
}

wf_status wf__prep_ir_bytes(prep_ir *r, const char **p, size_t n, const char *what) {
    if (r->len - r->pos < n) return truncated(r, what);
    *p = r->data + r->pos;
    r->pos += n;
    return WF_OK;
}

wf_status wf__prep_ir_u32(prep_ir *r, uint32_t *x, const char *what) {
    const char *p = NULL;
    WF_TRY(wf__prep_ir_bytes(r, &p, 4, what));
    *x = get_u32((const unsigned char *)p);
    return WF_OK;
}

wf_status wf__prep_ir_u64(prep_ir *r, uint64_t *x, const char *what) {
    const char *p = NULL;
    WF_TRY(wf__prep_ir_bytes(r, &p, 8, what));
    *x = get_u64((const unsigned char *)p);
    return WF_OK;
}

/* A language code or bucket name: used in paths, so plain characters only. */
static int name_ok(const char *s, size_t cap) {
    size_t n = strnlen(s, cap);
    if (n == 0 || n == cap) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
              ch == '_'))
            return 0;
    }
    for (size_t i = n; i < cap; i++)
        if (s[i]) return 0;
    return 1;
}

wf_status wf__prep_iw_doc(prep_iw *w, const prep_idoc *d) {
    WF_TRY(wf__prep_iw_u64(w, d->index));
    for (int st = 0; st < ST_COUNT; st++) WF_TRY(wf__prep_iw_u64(w, d->at[st]));
    uint64_t conf;
    memcpy(&conf, &d->conf, 8);
    WF_TRY(wf__prep_iw_u64(w, conf));
    char lang[16] = {0};
    snprintf(lang, sizeof lang, "%s", d->lang);
    WF_TRY(wf__prep_iw_write(w, lang, sizeof lang));
    WF_TRY(wf__prep_iw_u32(w, d->url_len));
    WF_TRY(wf__prep_iw_write(w, d->url, d->url_len));
    WF_TRY(wf__prep_iw_u32(w, d->text_len));
    return wf__prep_iw_write(w, d->text, d->text_len);
}

wf_status wf__prep_ir_doc(prep_ir *r, prep_idoc *d) {
    WF_TRY(wf__prep_ir_u64(r, &d->index, "document"));
    for (int st = 0; st < ST_COUNT; st++) WF_TRY(wf__prep_ir_u64(r, &d->at[st], "document"));
    uint64_t conf;
    WF_TRY(wf__prep_ir_u64(r, &conf, "document"));
    memcpy(&d->conf, &conf, 8);
    const char *p = NULL;
    WF_TRY(wf__prep_ir_bytes(r, &p, 16, "document"));
    memcpy(d->lang, p, 16);
    if (!name_ok(d->lang, 16))
        return wf_error(WF_ERR_FORMAT, "%s: the document at byte %zu has a malformed language code", r->what,
                        r->pos - 16);
    WF_TRY(wf__prep_ir_u32(r, &d->url_len, "document"));
    WF_TRY(wf__prep_ir_bytes(r, &d->url, d->url_len, "document"));
    WF_TRY(wf__prep_ir_u32(r, &d->text_len, "document"));
    WF_TRY(wf__prep_ir_bytes(r, &d->text, d->text_len, "document"));
    return WF_OK;
}

wf_status wf__prep_iw_piece(prep_iw *w, const prep_piece *p) {
    char lang[16] = {0}, bucket[8] = {0};
    snprintf(lang, sizeof lang, "%s", p->lang);
    snprintf(bucket, sizeof bucket, "%s", p->bucket);
    WF_TRY(wf__prep_iw_write(w, lang, sizeof lang));
    WF_TRY(wf__prep_iw_write(w, bucket, sizeof bucket));
    WF_TRY(wf__prep_iw_u64(w, p->raw));
    WF_TRY(wf__prep_iw_u64(w, p->off));
    return wf__prep_iw_u64(w, p->len);
}

wf_status wf__prep_ir_piece(prep_ir *r, prep_piece *p) {
    const char *q = NULL;
    WF_TRY(wf__prep_ir_bytes(r, &q, 16, "piece"));
    memcpy(p->lang, q, 16);
    WF_TRY(wf__prep_ir_bytes(r, &q, 8, "piece"));
    memcpy(p->bucket, q, 8);
    if (!name_ok(p->lang, 16) || !name_ok(p->bucket, 8))
        return wf_error(WF_ERR_FORMAT, "%s: the piece at byte %zu has a malformed language or bucket", r->what,
                        r->pos - 24);
    WF_TRY(wf__prep_ir_u64(r, &p->raw, "piece"));
    WF_TRY(wf__prep_ir_u64(r, &p->off, "piece"));
    return wf__prep_ir_u64(r, &p->len, "piece");
}

/* ---- the streaming reader ---- */

wf_status wf__prep_dr_open_fp(prep_dr *r, FILE *fp, const char *what, int kind, size_t chunk, int verify_first) {
    memset(r, 0, sizeof *r);
    r->fp = fp;
    r->chunk = chunk ? chunk : 1;
    size_t n = strlen(what) + 1;
    r->what = malloc(n);
    r->h = wf_hasher_create();
    if (!r->what || !r->h) {
        wf__prep_dr_close(r);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    memcpy(r->what, what, n);
    unsigned char h[HEADER_BYTES];
    size_t got = fread(h, 1, sizeof h, fp);
    if (got < HEADER_BYTES || memcmp(h, PREP_INTER_MAGIC, 8) != 0)
        return wf_error(WF_ERR_FORMAT, "%s: not a weft prep intermediate file (no header)", what);
    /* The size: the file must end right after the records. */
    long here = ftell(fp);
    if (here < 0 || fseek(fp, 0, SEEK_END) != 0)
        return wf_error(WF_ERR_IO, "%s: cannot seek: %s", what, strerror(errno));
    long end = ftell(fp);
    if (end < 0 || fseek(fp, here, SEEK_SET) != 0)
        return wf_error(WF_ERR_IO, "%s: cannot seek: %s", what, strerror(errno));
    WF_TRY(check_header(h, (uint64_t)(end - here), what, kind, &r->sum));
    r->left = r->total = (uint64_t)(end - here);
    if (verify_first || r->total == 0) {
        /* Checks the whole file before any record is used, a chunk at a time
         * (a file of no records is checked here: no read will reach its end). */
        WF_TRY(wf_buf_reserve(&r->buf, r->chunk));
        uint64_t left = r->total;
        while (left) {
            size_t want = left < r->chunk ? (size_t)left : r->chunk;
            if (fread(r->buf.data, 1, want, fp) != want)
                return wf_error(WF_ERR_IO, "%s: cannot read: %s", what, ferror(fp) ? strerror(errno) : "cut short");
            wf_hasher_update(r->h, r->buf.data, want);
            left -= want;
        }
        if (wf_hasher_digest(r->h) != r->sum)
            return wf_error(WF_ERR_FORMAT, "%s: checksum mismatch: the file is damaged", what);
        r->verified = 1;
        if (fseek(fp, here, SEEK_SET) != 0) return wf_error(WF_ERR_IO, "%s: cannot seek: %s", what, strerror(errno));
    }
    return WF_OK;
}

wf_status wf__prep_dr_open(prep_dr *r, const char *path, int kind, size_t chunk, int verify_first) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        memset(r, 0, sizeof *r);
        return wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    wf_status s = wf__prep_dr_open_fp(r, fp, path, kind, chunk, verify_first);
    if (r->fp) r->own_fp = 1;
    else fclose(fp);
    if (s != WF_OK) {
        force_hint(s);
        wf__prep_dr_close(r);
    }
    return s;
}

void wf__prep_dr_close(prep_dr *r) {
    if (r->fp && r->own_fp) fclose(r->fp);
    free(r->what);
    if (r->h) wf_hasher_destroy(r->h);
    wf_buf_free(&r->buf);
    memset(r, 0, sizeof *r);
}

int wf__prep_dr_end(const prep_dr *r) { return r->left == 0 && r->pos >= r->buf.len; }

uint64_t wf__prep_dr_offset(const prep_dr *r) { return r->total - r->left - (r->buf.len - r->pos); }

/* Makes `n` unread bytes available at buf.data + pos: keeps the unread
 * tail, reads at least a chunk more. The checksum is checked when the last
 * byte is read, before the records of that read are used. */
static wf_status dr_need(prep_dr *r, size_t n, const char *what) {
    size_t have = r->buf.len - r->pos;
    if (have >= n) return WF_OK;
    if (n - have > r->left)
        return wf_error(WF_ERR_FORMAT, "%s: a %s record at byte %llu is cut short", r->what, what,
                        (unsigned long long)(HEADER_BYTES + wf__prep_dr_offset(r)));
    if (r->pos) {
        memmove(r->buf.data, r->buf.data + r->pos, have);
        r->buf.len = have;
        r->pos = 0;
    }
    size_t want = n - have < r->chunk ? r->chunk : n - have;
    if (want > r->left) want = (size_t)r->left;
    WF_TRY(wf_buf_reserve(&r->buf, have + want));
    if (fread(r->buf.data + have, 1, want, r->fp) != want)
        return wf_error(WF_ERR_IO, "%s: cannot read: %s", r->what, ferror(r->fp) ? strerror(errno) : "cut short");
    if (!r->verified) wf_hasher_update(r->h, r->buf.data + have, want);
    r->buf.len = have + want;
    r->left -= want;
    if (!r->left && !r->verified && wf_hasher_digest(r->h) != r->sum)
        return wf_error(WF_ERR_FORMAT, "%s: checksum mismatch: the file is damaged; rerun with --force", r->what);
    return WF_OK;
}

wf_status wf__prep_dr_doc(prep_dr *r, prep_idoc *d) {
    const size_t fixed = 8 + 8 * ST_COUNT + 8 + 16;
    WF_TRY(dr_need(r, fixed + 4, "document"));
    uint32_t ul = get_u32((const unsigned char *)r->buf.data + r->pos + fixed);
    WF_TRY(dr_need(r, fixed + 4 + (size_t)ul + 4, "document"));
    uint32_t tl = get_u32((const unsigned char *)r->buf.data + r->pos + fixed + 4 + ul);
    size_t n = fixed + 4 + (size_t)ul + 4 + tl;
    WF_TRY(dr_need(r, n, "document"));
    prep_ir v = {.data = r->buf.data + r->pos, .len = n, .pos = 0, .what = r->what};
    wf_status s = wf__prep_ir_doc(&v, d);
    r->pos += n;
    return s;
}

wf_status wf__prep_dr_bytes(prep_dr *r, const char **p, size_t *got, size_t max) {
    size_t have = r->buf.len - r->pos;
    if (!have) {
        size_t want = max < r->chunk ? max : r->chunk;
        if (want > r->left) want = (size_t)r->left;
        WF_TRY(dr_need(r, want, "bytes"));
        have = r->buf.len - r->pos;
    }
    *got = have < max ? have : max;
    *p = r->buf.data + r->pos;
    r->pos += *got;
    return WF_OK;
}
