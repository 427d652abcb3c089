/* The few XML answers of S3 that weft reads: ListObjectsV2 pages and
 * <Error> bodies (and the UploadId of a multipart initiation, through
 * wf__xml_next). Not a general XML parser: it finds elements by name in a
 * flat scan, which these answers allow (their texts hold no '<': markup in
 * a key arrives as an entity), and decodes the five named entities and
 * numeric references. A fuzz target (tests/fuzz/fuzz_s3_xml.c) feeds it
 * arbitrary bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"

static const char *find(const char *hay, size_t len, size_t from, const char *needle) {
    size_t n = strlen(needle);
    if (n > len) return NULL;
    for (size_t i = from; i + n <= len; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, n) == 0) return hay + i;
    return NULL;
}

static void put_utf8(wf_buf *b, unsigned long cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 63)),
        u[2] = (unsigned char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (unsigned char)(0xF0 | cp >> 18), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 63)),
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)), u[3] = (unsigned char)(0x80 | (cp & 63)), n = 4;
    wf_buf_append(b, u, n);
}

/* Decodes entities of s[0..n) into b; -1 on a malformed reference. */
static int decode(wf_buf *b, const char *s, size_t n) {
    static const struct { const char *name; char c; } named[] = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    wf_buf_reserve(b, n);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '&') {
            wf_buf_append(b, s + i, 1);
            continue;
        }
        size_t end = i + 1;
        while (end < n && end - i <= 10 && s[end] != ';') end++;
        if (end >= n || s[end] != ';') return -1;
        const char *e = s + i + 1;
        size_t elen = end - i - 1;
        int done = 0;
        if (elen >= 2 && e[0] == '#') {
            unsigned long cp = 0;
            int hex = e[1] == 'x' || e[1] == 'X';
            size_t j = hex ? 2 : 1;
            if (j >= elen) return -1;
            for (; j < elen; j++) {
                char c = e[j];
                int d = c >= '0' && c <= '9' ? c - '0'
                        : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0) return -1;
                cp = cp * (hex ? 16 : 10) + (unsigned long)d;
                if (cp > 0x10FFFF) return -1;
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
            put_utf8(b, cp);
            done = 1;
        }
        for (size_t k = 0; !done && k < sizeof named / sizeof *named; k++)
            if (strlen(named[k].name) == elen && memcmp(named[k].name, e, elen) == 0) {
                wf_buf_append(b, &named[k].c, 1);
                done = 1;
            }
        if (!done) return -1;
        i = end;
    }
    return 0;
}

int wf__xml_next(const char *xml, size_t len, size_t *pos, const char *tag, char **text) {
    char open[64], close[64];
    *text = NULL;
    if (strlen(tag) > 60) return -1;
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = *pos <= len ? find(xml, len, *pos, open) : NULL;
    if (!a) return 0;
    size_t start = (size_t)(a - xml) + strlen(open);
    const char *z = find(xml, len, start, close);
    if (!z) return -1;
    size_t n = (size_t)(z - xml) - start;
    if (memchr(xml + start, '<', n)) return -1;  /* nested markup: not an answer we read */
    wf_buf b = {0};
    if (decode(&b, xml + start, n) != 0 || b.failed) {
        wf_buf_free(&b);
        return -1;
    }
    if (b.len == 0) wf_buf_free(&b);  /* reserved but empty: not NUL-terminated */
    *text = b.data ? b.data : strdup("");
    if (!*text) return -1;
    *pos = (size_t)(z - xml) + strlen(close);
    return 1;
}

void wf__s3_listing_free(wf__s3_listing *l) {
    for (size_t i = 0; i < l->n; i++) free(l->objects[i].key);
    free(l->objects);
    free(l->next_token);
    memset(l, 0, sizeof *l);
}

static int parse_u64(const char *s, uint64_t *v) {
    if (!*s) return -1;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10) return -1;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    *v = x;
    return 0;
}

wf_status wf__s3_parse_list(const char *xml, size_t len, wf__s3_listing *l) {
    if (!find(xml, len, 0, "<ListBucketResult"))
        return wf_error(WF_ERR_FORMAT, "the listing answer has no <ListBucketResult>");
    size_t pos = 0;
    for (;;) {
        /* <Contents> holds nested elements, so find its bounds by hand. */
        const char *a = find(xml, len, pos, "<Contents>");
        if (!a) break;
        size_t start = (size_t)(a - xml) + 10;
        const char *z = find(xml, len, start, "</Contents>");
        if (!z) return wf_error(WF_ERR_FORMAT, "the listing answer has an unclosed <Contents>");
        size_t inner_len = (size_t)(z - xml) - start, p = 0;
        char *key = NULL, *size = NULL;
        int rk = wf__xml_next(xml + start, inner_len, &p, "Key", &key);
        p = 0;
        int rs = wf__xml_next(xml + start, inner_len, &p, "Size", &size);
        uint64_t sz = 0;
        if (rk != 1 || rs != 1 || parse_u64(size, &sz) != 0 || !*key) {
            free(key), free(size);
            return wf_error(WF_ERR_FORMAT, "the listing answer has a <Contents> without a valid Key and Size");
        }
        free(size);
        if (WF_GROW(l->objects, l->cap, l->n + 1, 64) != WF_OK) {
            free(key);
            return WF_ERR_NOMEM;
        }
        l->objects[l->n++] = (wf__s3_object){key, sz};
        pos = (size_t)(z - xml) + 11;
    }
    char *trunc = NULL, *token = NULL;
    size_t p = 0;
    if (wf__xml_next(xml, len, &p, "IsTruncated", &trunc) < 0)
        return wf_error(WF_ERR_FORMAT, "the listing answer has a malformed <IsTruncated>");
    l->truncated = trunc && strcmp(trunc, "true") == 0;
    free(trunc);
    free(l->next_token);
    l->next_token = NULL;
    if (l->truncated) {
        p = 0;
        if (wf__xml_next(xml, len, &p, "NextContinuationToken", &token) != 1 || !*token) {
            free(token);
            return wf_error(WF_ERR_FORMAT, "the listing answer is truncated but has no NextContinuationToken");
        }
        l->next_token = token;
    }
    return WF_OK;
}

static void copy_bounded(char *dst, size_t cap, const char *src) {
    if (!cap) return;
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) dst[i] = (src[i] >= 0 && src[i] < 32) ? ' ' : src[i];
    dst[n] = 0;
}

int wf__s3_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap) {
    copy_bounded(code, code_cap, "");
    copy_bounded(msg, msg_cap, "");
    if (!xml || !find(xml, len, 0, "<Error>")) return 0;
    char *c = NULL, *m = NULL;
    size_t p = 0;
    if (wf__xml_next(xml, len, &p, "Code", &c) == 1) copy_bounded(code, code_cap, c);
    p = 0;
    if (wf__xml_next(xml, len, &p, "Message", &m) == 1) copy_bounded(msg, msg_cap, m);
    free(c);
    free(m);
    return 1;
}
