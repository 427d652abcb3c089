/* AWS Signature Version 4 for S3 requests: the canonical request, the
 * string to sign, the signing key (HMAC chain over date, region, service)
 * and the Authorization header. Payloads are always hashed (the body's
 * SHA-256 is sent as x-amz-content-sha256 and signed, so the server checks
 * the bytes it received); no chunked or unsigned payloads. Checked against
 * botocore's S3SigV4Auth on fixed requests (tests/py/test_store_sigv4.py).
 * The secret key never leaves this file except inside the derived key. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"

wf_status wf__uri_encode(wf_buf *out, const char *s, int keep_slash) {
    static const char digits[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            char ch = (char)c;
            wf_buf_append(out, &ch, 1);
        } else {
            char enc[3] = {'%', digits[c >> 4], digits[c & 15]};
            wf_buf_append(out, enc, 3);
        }
    }
    return out->failed ? wf_error(WF_ERR_NOMEM, "out of memory") : WF_OK;
}

typedef struct {
    char *name, *value;  /* encoded */
} enc_kv;

static int cmp_enc_kv(const void *a, const void *b) {
    const enc_kv *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s) {
    wf_buf b = {0};
    if (wf__uri_encode(&b, s, 0) != WF_OK) {
        wf_buf_free(&b);
        return NULL;
    }
    if (!b.data) return strdup("");
    return b.data;
}

wf_status wf__sigv4_query(wf_buf *out, const wf__kv *q, size_t n) {
    if (n == 0) return WF_OK;
    enc_kv *e = calloc(n, sizeof *e);
    wf_status s = e ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == WF_OK && i < n; i++) {
        e[i].name = encode_dup(q[i].name);
        e[i].value = encode_dup(q[i].value ? q[i].value : "");
        if (!e[i].name || !e[i].value) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK) {
        qsort(e, n, sizeof *e, cmp_enc_kv);
        for (size_t i = 0; i < n; i++) wf_buf_printf(out, "%s%s=%s", i ? "&" : "", e[i].name, e[i].value);
        if (out->failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; e && i < n; i++) free(e[i].name), free(e[i].value);
    free(e);
    return s;
}

typedef struct {
    const char *name;
    const char *value;
} hdr;

static int cmp_hdr(const void *a, const void *b) { return strcmp(((const hdr *)a)->name, ((const hdr *)b)->name); }

/* A header value as SigV4 canonicalizes it: leading and trailing spaces
 * dropped, runs of spaces inside made one. */
static void append_trimmed(wf_buf *b, const char *v) {
    while (*v == ' ' || *v == '\t') v++;
    int space = 0;
    for (; *v; v++) {
        if (*v == ' ' || *v == '\t') {
            space = 1;
            continue;
        }
        if (space) wf_buf_append(b, " ", 1);
        space = 0;
        wf_buf_append(b, v, 1);
    }
}

wf_status wf__sigv4_sign(const wf__sigv4_req *r, wf_buf *authorization, wf_buf *canonical) {
    if (strlen(r->amz_date) != 16) return wf_error(WF_ERR_INVALID, "sigv4: bad date '%s'", r->amz_date);
    size_t nh = r->n_headers + 4;
    hdr *h = calloc(nh, sizeof *h);
    if (!h) return wf_error(WF_ERR_NOMEM, "out of memory");
    size_t k = 0;
    h[k++] = (hdr){"host", r->host};
    h[k++] = (hdr){"x-amz-content-sha256", r->payload_sha256};
    h[k++] = (hdr){"x-amz-date", r->amz_date};
    if (r->session_token && *r->session_token) h[k++] = (hdr){"x-amz-security-token", r->session_token};
    for (size_t i = 0; i < r->n_headers; i++) h[k++] = (hdr){r->headers[i].name, r->headers[i].value};
    qsort(h, k, sizeof *h, cmp_hdr);

    wf_buf cr = {0}, signed_names = {0};
    wf_buf_printf(&cr, "%s\n", r->method);
    wf__uri_encode(&cr, r->path, 1);
    wf_buf_puts(&cr, "\n");
    wf__sigv4_query(&cr, r->query, r->n_query);
    wf_buf_puts(&cr, "\n");
    for (size_t i = 0; i < k; i++) {
        wf_buf_printf(&cr, "%s:", h[i].name);
        append_trimmed(&cr, h[i].value);
        wf_buf_puts(&cr, "\n");
        wf_buf_printf(&signed_names, "%s%s", i ? ";" : "", h[i].name);
    }
    wf_buf_printf(&cr, "\n%s\n%s", signed_names.data, r->payload_sha256);
    free(h);

    wf_status s = WF_OK;
    if (cr.failed || signed_names.failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK) {
        unsigned char digest[32], key[32];
        char cr_hex[65], sig_hex[65], date[9];
        memcpy(date, r->amz_date, 8);
        date[8] = 0;
        wf_sha256(cr.data, cr.len, digest);
        wf_hex(digest, 32, cr_hex);
        wf_buf sts = {0};
        wf_buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", r->amz_date, date, r->region,
                      r->service, cr_hex);
        /* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request") */
        wf_buf secret = {0};
        wf_buf_printf(&secret, "AWS4%s", r->secret_key);
        if (sts.failed || secret.failed) {
            s = wf_error(WF_ERR_NOMEM, "out of memory");
        } else {
            wf_hmac_sha256(secret.data, secret.len, date, 8, key);
            wf_hmac_sha256(key, 32, r->region, strlen(r->region), key);
            wf_hmac_sha256(key, 32, r->service, strlen(r->service), key);
            wf_hmac_sha256(key, 32, "aws4_request", 12, key);
            wf_hmac_sha256(key, 32, sts.data, sts.len, digest);
            wf_hex(digest, 32, sig_hex);
            wf_buf_printf(authorization,
                          "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, Signature=%s",
                          r->access_key, date, r->region, r->service, signed_names.data, sig_hex);
            if (authorization->failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
        }
        memset(key, 0, sizeof key);
        if (secret.data) memset(secret.data, 0, secret.len);
        wf_buf_free(&secret);
        wf_buf_free(&sts);
    }
    if (s == WF_OK && canonical) {
        wf_buf_append(canonical, cr.data, cr.len);
        if (canonical->failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    wf_buf_free(&cr);
    wf_buf_free(&signed_names);
    return s;
}
