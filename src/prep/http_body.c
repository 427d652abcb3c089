/* From a WARC response record to a UTF-8 document body: the HTTP status
 * line and headers, chunked transfer coding, gzip/deflate content coding,
 * the media type (HTML, plain text, or not a document) and the charset
 * (from the header or the page's <meta>), converted to UTF-8 with iconv.
 * Everything is bounded: a body that would grow past the document cap is
 * refused as bad_http rather than held. */
#include <ctype.h>
#include <errno.h>
#include <iconv.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "prep/prep_impl.h"

static const char *find_eol(const char *p, const char *end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl : end;
}

/* Copies a charset token (letters, digits, - _ . : ) lower-cased. */
static void copy_charset(const char *v, const char *end, char charset[32]) {
    size_t n = 0;
    while (v < end && (*v == ' ' || *v == '"' || *v == '\'')) v++;
    while (v < end && n < 31 && (isalnum((unsigned char)*v) || strchr("-_.:", *v)))
        charset[n++] = (char)tolower((unsigned char)*v++);
    charset[n] = '\0';
}

static const char *memcasemem(const char *h, size_t hn, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= hn; i++)
        if (strncasecmp(h + i, needle, n) == 0) return h + i;
    return NULL;
}

void wf__prep_html_sniff_charset(const char *html, size_t len, char charset[32]) {
    charset[0] = '\0';
    if (len > 4096) len = 4096;
    const char *p = html, *end = html + len;
    while ((p = memcasemem(p, (size_t)(end - p), "<meta")) != NULL) {
        const char *close = memchr(p, '>', (size_t)(end - p));
        if (!close) return;
        const char *cs = memcasemem(p, (size_t)(close - p), "charset=");
        if (cs) {
            copy_charset(cs + 8, close, charset);
            return;
        }
        p = close;
    }
}

/* De-chunks a chunked body into out; 0 on success. */
static int dechunk(const char *p, const char *end, size_t max, wf_buf *out) {
    for (;;) {
        const char *eol = find_eol(p, end);
        if (eol == end) return out->len ? 0 : -1; /* tolerate a missing last chunk */
        char *stop;
        unsigned long long n = strtoull(p, &stop, 16);
        if (stop == p) return -1;
        p = eol + 1;
        if (n == 0) return 0;
        if (n > (unsigned long long)(end - p)) n = (unsigned long long)(end - p); /* truncated */
        if (out->len + n > max) return -1;
        if (wf_buf_append(out, p, (size_t)n) != WF_OK) return -1;
        p += n;
        if (p < end && *p == '\r') p++;
        if (p < end && *p == '\n') p++;
        if (p >= end) return 0;
    }
}

/* Inflates p[0, n) into out (from its start) with zlib's `window_bits`
 * (15 + 32: gzip or zlib, detected; -15: raw deflate). Returns the last
 * inflate() result, or Z_MEM_ERROR when out cannot grow or passes max. A
 * truncated stream keeps what came (Z_BUF_ERROR with no input left). */
static int inflate_into(const char *p, size_t n, int window_bits, size_t max, wf_buf *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    out->len = 0;
    if (inflateInit2(&z, window_bits) != Z_OK) return Z_MEM_ERROR;
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    int ret = Z_OK;
    while (ret == Z_OK) {
        if (wf_buf_reserve(out, 1 << 16) != WF_OK || out->len > max) {
            ret = Z_MEM_ERROR;
            break;
        }
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)(out->cap - out->len - 1);
        size_t before = z.avail_out;
        ret = inflate(&z, Z_NO_FLUSH);
        out->len += before - z.avail_out;
        if (ret == Z_BUF_ERROR && z.avail_in == 0) break; /* truncated: keep what came */
    }
    inflateEnd(&z);
    return ret;
}

/* Inflates gzip or zlib/deflate data into out; 0 on success. */
static int inflate_body(const char *p, size_t n, size_t max, int raw_ok, wf_buf *out) {
    int ret = inflate_into(p, n, 15 + 32, max, out);
    /* "deflate" is sometimes raw deflate without the zlib wrapper. */
    if (ret == Z_DATA_ERROR && raw_ok) ret = inflate_into(p, n, -15, max, out);
    if (ret != Z_STREAM_END && ret != Z_BUF_ERROR && ret != Z_OK) return -1;
    if (out->data) out->data[out->len] = '\0';
    return out->len > max ? -1 : 0;
}

int wf__prep_http_parse(const char *data, size_t len, size_t max_body, wf_buf *body, int *is_html,
                    char charset[32]) {
    const char *p = data, *end = data + len;
    body->len = 0;
    *is_html = 0;
    charset[0] = '\0';
    /* Status line: HTTP/1.x NNN reason */
    const char *eol = find_eol(p, end);
    if (eol - p < 12 || strncmp(p, "HTTP/", 5) != 0) return R_BAD_HTTP;
    const char *sp = memchr(p, ' ', (size_t)(eol - p));
    if (!sp || eol - sp < 4 || !isdigit((unsigned char)sp[1]) || !isdigit((unsigned char)sp[2]) ||
        !isdigit((unsigned char)sp[3]))
        return R_BAD_HTTP;
    int status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
    int chunked = 0, coding = 0; /* 1 gzip, 2 deflate */
    int type = -1;               /* -1 none given, 0 other, 1 html, 2 text */
    p = eol < end ? eol + 1 : end;
    for (;;) {
        if (p >= end) return R_BAD_HTTP; /* no blank line after the headers */
        eol = find_eol(p, end);
        const char *le = eol;
        if (le > p && le[-1] == '\r') le--;
        if (le == p) {
            p = eol < end ? eol + 1 : end;
            break;
        }
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            size_t nl = (size_t)(colon - p);
            const char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t')) v++;
            size_t vl = (size_t)(le - v);
            if (nl == 12 && strncasecmp(p, "Content-Type", 12) == 0) {
                if (vl >= 9 && strncasecmp(v, "text/html", 9) == 0) type = 1;
                else if (vl >= 21 && strncasecmp(v, "application/xhtml+xml", 21) == 0) type = 1;
                else if (vl >= 10 && strncasecmp(v, "text/plain", 10) == 0) type = 2;
                else type = 0;
                const char *cs = memcasemem(v, vl, "charset=");
                if (cs) copy_charset(cs + 8, le, charset);
            } else if (nl == 17 && strncasecmp(p, "Transfer-Encoding", 17) == 0) {
                if (memcasemem(v, vl, "chunked")) chunked = 1;
            } else if (nl == 16 && strncasecmp(p, "Content-Encoding", 16) == 0) {
                if (memcasemem(v, vl, "gzip")) coding = 1;
                else if (memcasemem(v, vl, "deflate")) coding = 2;
                else if (vl && strncasecmp(v, "identity", vl < 8 ? vl : 8) != 0) coding = 3;
            }
        }
        p = eol < end ? eol + 1 : end;
    }
    if (status != 200) return R_HTTP_STATUS;
    if (type == 0) return R_CONTENT_TYPE;
    if (coding == 3) return R_CONTENT_TYPE; /* br, zstd, ...: not decoded */
    wf_buf raw = {0};
    const char *b = p;
    size_t bn = (size_t)(end - p);
    if (chunked) {
        if (dechunk(p, end, max_body, &raw) != 0) {
            wf_buf_free(&raw);
            return R_BAD_HTTP;
        }
        b = raw.data ? raw.data : "";
        bn = raw.len;
    }
    int rc = R_NONE;
    if (coding) {
        if (inflate_body(b, bn, max_body, coding == 2, body) != 0) rc = R_BAD_HTTP;
    } else if (bn > max_body) {
        rc = R_BAD_HTTP;
    } else if (wf_buf_append(body, b, bn) != WF_OK) {
        rc = R_BAD_HTTP;
    }
    wf_buf_free(&raw);
    if (rc != R_NONE) return rc;
    /* No Content-Type: sniff for markup. */
    if (type == -1) {
        size_t k = 0;
        while (k < body->len && k < 512 && isspace((unsigned char)body->data[k])) k++;
        type = (k < body->len && body->data[k] == '<') ? 1 : 2;
    }
    *is_html = type == 1;
    return R_NONE;
}

static int is_utf8_name(const char *cs) {
    return !cs[0] || strcmp(cs, "utf-8") == 0 || strcmp(cs, "utf8") == 0 || strcmp(cs, "us-ascii") == 0 ||
           strcmp(cs, "ascii") == 0;
}

int wf__prep_to_utf8(const char *s, size_t len, const char *charset, wf_buf *out) {
    if (is_utf8_name(charset)) return 0;
    /* Browsers read latin-1 as windows-1252; so do we. */
    const char *from = charset;
    if (strcmp(charset, "iso-8859-1") == 0 || strcmp(charset, "latin1") == 0 || strcmp(charset, "latin-1") == 0)
        from = "windows-1252";
    iconv_t cd = iconv_open("UTF-8", from);
    if (cd == (iconv_t)-1) return 0;
    out->len = 0;
    char *in = (char *)(uintptr_t)s;
    size_t in_left = len;
    int ok = 1;
    while (in_left > 0) {
        if (wf_buf_reserve(out, in_left * 2 + 16) != WF_OK) {
            ok = 0;
            break;
        }
        char *o = out->data + out->len;
        size_t o_left = out->cap - out->len - 1;
        size_t r = iconv(cd, &in, &in_left, &o, &o_left);
        out->len = (size_t)(o - out->data);
        if (r == (size_t)-1) {
            if (errno == E2BIG) continue;
            /* Invalid or incomplete sequence: U+FFFD for one byte, go on. */
            if (wf_buf_append(out, "\xef\xbf\xbd", 3) != WF_OK) {
                ok = 0;
                break;
            }
            in++;
            in_left--;
        }
    }
    iconv_close(cd);
    if (out->data) out->data[out->len] = '\0';
    return ok;
}
