/* Unit tests for the web-text pipeline's stages (src/prep/): the WARC,
 * JSONL and text readers and their bad inputs, HTTP bodies, HTML to text,
 * normalization and UTF-8 repair, the dedup normalization and hash set,
 * MinHash against exact Jaccard similarity (word and character shingles,
 * multi-byte and invalid UTF-8), CLD2 language id, every
 * quality rule, the rule sets per language (prose of eight languages,
 * Chinese and Japanese, against scrambled, shuffled and keyword-stuffed
 * text) and their configuration, and JSON escaping. The whole pipeline is tested in
 * test_prep_pipeline.c and tests/py/test_prep_cli.py. */
#include <math.h>
#include <utf8proc.h>
#include <zlib.h>

#include "harness.h"
#include "prep/prep_impl.h"
#include "weft/fileio.h"

static wf_prep_config defaults(void) {
    wf_prep_config c;
    WF_CHECK_OK(wf_prep_config_default(&c));
    return c;
}

/* ---- WARC ---- */

static void warc_record(wf_buf *b, const char *type, const char *uri, const char *ctype, const char *block) {
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "WARC/1.0\r\nWARC-Type: %s\r\nWARC-Record-ID: <urn:uuid:x>\r\n%s%s%s"
                     "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                     type, uri ? "WARC-Target-URI: " : "", uri ? uri : "", uri ? "\r\n" : "", ctype,
                     strlen(block));
    WF_CHECK_OK(wf_buf_append(b, head, (size_t)n));
    WF_CHECK_OK(wf_buf_append(b, block, strlen(block)));
    WF_CHECK_OK(wf_buf_append(b, "\r\n\r\n", 4));
}

static const char *HTML_PAGE =
    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    "<html><head><title>A page</title><style>p{}</style></head><body><p>Hello <b>web</b>.</p></body></html>";

/* Reads every record of a file: "index:kind:drop:text|..." */
static void read_all(const char *path, const wf_prep_config *c, char *out, size_t cap, uint64_t *skipped,
                     int *damaged) {
    prep_reader *r;
    WF_CHECK_OK(wf__prep_reader_open(&r, path, c));
    size_t at = 0;
    out[0] = '\0';
    for (;;) {
        prep_record rec;
        int eof;
        WF_CHECK_OK(wf__prep_reader_next(r, &rec, &eof));
        if (eof) break;
        int n = snprintf(out + at, cap - at, "%llu:%d:%s:%.*s|", (unsigned long long)rec.index, rec.kind,
                         rec.drop == R_NONE ? "ok" : wf__prep_reason_name(rec.drop),
                         rec.data ? (int)(rec.len < 20 ? rec.len : 20) : 0, rec.data ? rec.data : "");
        at += (size_t)n;
        WF_CHECK_TRUE(at < cap);
    }
    if (skipped) *skipped = wf__prep_reader_skipped(r);
    if (damaged) *damaged = wf__prep_reader_damaged(r);
    wf__prep_reader_close(r);
}

WF_TEST(warc_reader_records) {
    wf_buf b = {0};
    warc_record(&b, "warcinfo", NULL, "application/warc-fields", "software: test\r\n");
    warc_record(&b, "request", "http://x/", "application/http; msgtype=request", "GET / HTTP/1.1\r\n\r\n");
    warc_record(&b, "response", "http://x/", "application/http; msgtype=response", HTML_PAGE);
    warc_record(&b, "conversion", "http://y/", "text/plain", "plain WET text");
    warc_record(&b, "metadata", "http://x/", "application/warc-fields", "outlinks: a\r\n");
    warc_record(&b, "resource", "metadata://wget/log", "text/plain", "wget log text");
    warc_record(&b, "resource", "https://z/", "text/html", "<p>resource page</p>");
    const char *p = wf_test_path("a.warc");
    wf_test_write_file(p, b.data, b.len);
    wf_prep_config c = defaults();
    char out[2048];
    uint64_t skipped;
    int damaged;
    read_all(p, &c, out, sizeof out, &skipped, &damaged);
    WF_CHECK_STREQ(out, "2:1:ok:HTTP/1.1 200 OK\r\nCon|3:0:ok:plain WET text|6:2:ok:<p>resource page</p>|");
    WF_CHECK_EQ(skipped, 4);
    WF_CHECK_EQ(damaged, 0);

    /* The same as gzip members, one per record, as Common Crawl writes. */
    const char *gz = wf_test_path("a.warc.gz");
    gzFile g = gzopen(gz, "wb");
    WF_CHECK_TRUE(g != NULL);
    gzwrite(g, b.data, (unsigned)b.len);
    gzclose(g);
    char out2[2048];
    read_all(gz, &c, out2, sizeof out2, &skipped, &damaged);
    WF_CHECK_STREQ(out2, out);
    wf_buf_free(&b);
    wf_prep_config_free(&c);
}

WF_TEST(warc_reader_bad_records) {
    wf_buf b = {0};
    warc_record(&b, "conversion", "http://a/", "text/plain", "first");
    /* A record with a bad Content-Length, then junk lines, then a good one. */
    WF_CHECK_OK(wf_buf_append(&b, "WARC/1.0\r\nWARC-Type: conversion\r\nContent-Length: 12x\r\n\r\nzzz\r\n", 62));
    WF_CHECK_OK(wf_buf_append(&b, "garbage line\nmore\n", 18));
    warc_record(&b, "conversion", "http://b/", "text/plain", "second");
    /* A record cut short by the end of the file. */
    WF_CHECK_OK(wf_buf_append(&b, "WARC/1.0\r\nWARC-Type: conversion\r\nContent-Length: 500\r\n\r\nshort", 61));
    const char *p = wf_test_path("bad.warc");
    wf_test_write_file(p, b.data, b.len);
    wf_prep_config c = defaults();
    char out[2048];
    int damaged;
    read_all(p, &c, out, sizeof out, NULL, &damaged);
    WF_CHECK_STREQ(out, "0:0:ok:first|1:0:malformed_record:|2:0:ok:second|3:0:malformed_record:|");
    WF_CHECK_EQ(damaged, 1);
    wf_buf_free(&b);
    wf_prep_config_free(&c);
}

WF_TEST(warc_reader_truncated_gzip_and_too_large) {
    wf_buf b = {0};
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 200; i++) warc_record(&b, "conversion", "http://a/", "text/plain", i == 1 ? big : "doc text");
    const char *gz = wf_test_path("t.warc.gz");
    gzFile g = gzopen(gz, "wb");
    gzwrite(g, b.data, (unsigned)b.len);
    gzclose(g);
    char *data;
    size_t len;
    WF_CHECK_OK(wf_file_read(gz, &data, &len));
    wf_test_write_file(gz, data, len / 2); /* cut the gzip stream in the middle */
    free(data);
    wf_prep_config c = defaults();
    prep_reader *r;
    WF_CHECK_OK(wf__prep_reader_open(&r, gz, &c));
    int n = 0, eof = 0;
    while (!eof) {
        prep_record rec;
        WF_CHECK_OK(wf__prep_reader_next(r, &rec, &eof));
        if (!eof) n++;
    }
    WF_CHECK_TRUE(n > 0 && n < 200);
    WF_CHECK_EQ(wf__prep_reader_damaged(r), 1);
    wf__prep_reader_close(r);

    /* A record over input.max_doc_mb is dropped without being held. */
    c.max_doc_mb = 1;
    wf_buf big2 = {0};
    char *huge = malloc((1 << 20) + 10);
    memset(huge, 'y', (1 << 20) + 9);
    huge[(1 << 20) + 9] = '\0';
    warc_record(&big2, "conversion", "http://h/", "text/plain", huge);
    warc_record(&big2, "conversion", "http://i/", "text/plain", "after");
    const char *p = wf_test_path("big.warc");
    wf_test_write_file(p, big2.data, big2.len);
    char out[512];
    read_all(p, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:too_large:|1:0:ok:after|");
    free(huge);
    wf_buf_free(&big2);
    wf_buf_free(&b);
    wf_prep_config_free(&c);
}

/* Damaged WARC files, plain and gzipped: random byte flips, cuts, repeated
 * and inserted spans, rewritten lengths. Reading them, and taking every
 * record through HTTP parsing, HTML extraction and normalization, must end
 * (no loop), return only WF_OK and never touch memory it should not (the
 * sanitizer builds run this too). */
WF_TEST(readers_survive_damaged_warcs) {
    wf_buf good = {0};
    warc_record(&good, "warcinfo", NULL, "application/warc-fields", "software: test\r\n");
    warc_record(&good, "response", "http://x/", "application/http; msgtype=response", HTML_PAGE);
    warc_record(&good, "response", "http://c/", "application/http; msgtype=response",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/html\r\n\r\n"
                "7\r\n<p>abc \r\n4\r\ndef<\r\n0\r\n\r\n");
    warc_record(&good, "conversion", "http://y/", "text/plain", "plain WET text, line one\nline two");
    warc_record(&good, "response", "http://z/", "application/http; msgtype=response",
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=iso-8859-1\r\n\r\n"
                "<html><body><ul><li>caf\xe9<li>na\xefve</ul><pre>x\n y</pre><table><tr><td>1<td>2</table>");
    wf_prep_config c = defaults();
    wf_normalize_opts no = {1, 1, 0, 0.01};
    wf_buf m = {0}, body = {0}, text = {0}, norm = {0};
    uint64_t st = 99;
#define RND() (st = st * 6364136223846793005ull + 1442695040888963407ull, (size_t)(st >> 33))
    for (int it = 0; it < 300; it++) {
        m.len = 0;
        WF_CHECK_OK(wf_buf_append(&m, good.data, good.len));
        int muts = 1 + (int)(RND() % 4);
        for (int k = 0; k < muts && m.len > 2; k++) {
            size_t at = RND() % m.len;
            switch (RND() % 5) {
            case 0: m.data[at] ^= (char)(1 + RND() % 255); break;
            case 1: m.len = at; break;
            case 2: { /* repeat a span */
                size_t n = RND() % 64 % (m.len - at);
                WF_CHECK_OK(wf_buf_append(&m, m.data + at, n));
                break;
            }
            case 3: { /* a digit of some Content-Length */
                char *cl = strstr(m.data, "Length: ");
                size_t which = RND() % 2;
                char digit = (char)('0' + RND() % 10);
                if (cl) cl[8 + which] = digit;
                break;
            }
            default: m.data[at] = "\r\n:W0 \x00<>"[RND() % 9]; break;
            }
        }
        const char *p = wf_test_path(it % 3 == 0 ? "m.warc.gz" : "m.warc");
        if (it % 3 == 0) {
            gzFile g = gzopen(p, "wb");
            gzwrite(g, m.data, (unsigned)m.len);
            gzclose(g);
            if (it % 2 == 0) { /* and cut the compressed file too */
                char *data;
                size_t len;
                WF_CHECK_OK(wf_file_read(p, &data, &len));
                wf_test_write_file(p, data, RND() % (len + 1));
                free(data);
            }
        } else {
            wf_test_write_file(p, m.data, m.len);
        }
        prep_reader *r;
        WF_CHECK_OK(wf__prep_reader_open(&r, p, &c));
        int n = 0, eof = 0;
        while (!eof) {
            prep_record rec;
            WF_CHECK_OK(wf__prep_reader_next(r, &rec, &eof));
            WF_CHECK_TRUE(++n < 1000);
            if (eof || rec.drop != R_NONE || !rec.data) continue;
            const char *t = rec.data;
            size_t tl = rec.len;
            int html = rec.kind == REC_HTML;
            char cs[32] = "";
            if (rec.kind == REC_HTTP) {
                if (wf__prep_http_parse(rec.data, rec.len, 1 << 20, &body, &html, cs) != R_NONE) continue;
                t = body.data ? body.data : "";
                tl = body.len;
            }
            if (wf__prep_to_utf8(t, tl, cs, &norm)) t = norm.data, tl = norm.len;
            if (html) {
                WF_CHECK_OK(wf_html_to_text(t, tl, &text));
                t = text.data ? text.data : "";
                tl = text.len;
            }
            int rep;
            wf_buf out = {0};
            if (wf_text_normalize(t, tl, &no, &out, &rep) == WF_NORM_OK) {
                WF_CHECK_TRUE(wf_utf8_valid(out.data, out.len));
                uint64_t lr;
                c.rules.word_rules = 1;
                wf__prep_quality(&c.rules, &out, &lr);
            }
            wf_buf_free(&out);
        }
        wf__prep_reader_close(r);
    }
#undef RND
    wf_buf_free(&m);
    wf_buf_free(&body);
    wf_buf_free(&text);
    wf_buf_free(&norm);
    wf_buf_free(&good);
    wf_prep_config_free(&c);
}

WF_TEST(jsonl_and_text_readers) {
    const char *j = wf_test_path("d.jsonl");
    const char *jt = "{\"text\": \"one\", \"url\": \"http://u/\"}\n\n{bad json\n{\"other\": 1}\n{\"text\": \"two\"}\n";
    wf_test_write_file(j, jt, strlen(jt));
    wf_prep_config c = defaults();
    char out[1024];
    read_all(j, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:ok:one|1:0:bad_json:|2:0:missing_field:|3:0:ok:two|");

    const char *t = wf_test_path("d.txt");
    const char *tt = "para one\nline two\n\n\n  \npara two\r\nend";
    wf_test_write_file(t, tt, strlen(tt));
    read_all(t, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:ok:para one\nline two\n\np|");
    free(c.text_mode);
    c.text_mode = strdup("paragraph");
    read_all(t, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:ok:para one\nline two\n|1:0:ok:para two\r\nend\n|");
    c.unwrap = 1;
    read_all(t, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:ok:para one line two|1:0:ok:para two end|");
    free(c.text_mode);
    c.text_mode = strdup("line");
    c.unwrap = 0;
    read_all(t, &c, out, sizeof out, NULL, NULL);
    WF_CHECK_STREQ(out, "0:0:ok:para one\n|1:0:ok:line two\n|2:0:ok:para two\r\n|3:0:ok:end\n|");
    wf_prep_config_free(&c);
}

/* ---- HTTP ---- */

WF_TEST(http_bodies) {
    wf_buf body = {0};
    int html;
    char cs[32];
    WF_CHECK_EQ(wf__prep_http_parse(HTML_PAGE, strlen(HTML_PAGE), 1 << 20, &body, &html, cs), R_NONE);
    WF_CHECK_EQ(html, 1);
    WF_CHECK_STREQ(cs, "utf-8");
    WF_CHECK_TRUE(strncmp(body.data, "<html>", 6) == 0);
    const char *r404 = "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n\r\nnope";
    WF_CHECK_EQ(wf__prep_http_parse(r404, strlen(r404), 1 << 20, &body, &html, cs), R_HTTP_STATUS);
    const char *png = "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\n\x89PNG";
    WF_CHECK_EQ(wf__prep_http_parse(png, strlen(png), 1 << 20, &body, &html, cs), R_CONTENT_TYPE);
    WF_CHECK_EQ(wf__prep_http_parse("garbage", 7, 1 << 20, &body, &html, cs), R_BAD_HTTP);
    const char *chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
                          "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    WF_CHECK_EQ(wf__prep_http_parse(chunked, strlen(chunked), 1 << 20, &body, &html, cs), R_NONE);
    WF_CHECK_EQ(html, 0);
    WF_CHECK_TRUE(body.len == 11 && memcmp(body.data, "hello world", 11) == 0);
    /* Content codings: gzip; deflate as the standard says (zlib-wrapped)
     * and as some servers send it (raw, no wrapper). */
    const char *plain = "<p>compressed page</p>";
    const struct {
        const char *coding;
        int window_bits;
    } codings[] = {{"gzip", 15 + 16}, {"deflate", 15}, {"deflate", -15}};
    wf_buf resp = {0};
    for (size_t k = 0; k < sizeof codings / sizeof *codings; k++) {
        unsigned char z[256];
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        WF_CHECK_EQ(deflateInit2(&zs, 6, Z_DEFLATED, codings[k].window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
        zs.next_in = (Bytef *)(uintptr_t)plain;
        zs.avail_in = (uInt)strlen(plain);
        zs.next_out = z;
        zs.avail_out = sizeof z;
        WF_CHECK_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
        size_t zn = sizeof z - zs.avail_out;
        deflateEnd(&zs);
        resp.len = 0;
        WF_CHECK_OK(wf_buf_printf(&resp, "HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Type: text/html\r\n\r\n",
                                  codings[k].coding));
        WF_CHECK_OK(wf_buf_append(&resp, z, zn));
        WF_CHECK_EQ(wf__prep_http_parse(resp.data, resp.len, 1 << 20, &body, &html, cs), R_NONE);
        WF_CHECK_TRUE(body.len == strlen(plain) && memcmp(body.data, plain, body.len) == 0);
    }
    /* and a body past the cap is refused */
    WF_CHECK_EQ(wf__prep_http_parse(chunked, strlen(chunked), 4, &body, &html, cs), R_BAD_HTTP);
    wf_buf_free(&resp);
    wf_buf_free(&body);
}

WF_TEST(charsets) {
    char cs[32];
    const char *page = "<html><head><meta charset=\"ISO-8859-1\"><title>x</title>";
    wf__prep_html_sniff_charset(page, strlen(page), cs);
    WF_CHECK_STREQ(cs, "iso-8859-1");
    const char *page2 = "<meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\">";
    wf__prep_html_sniff_charset(page2, strlen(page2), cs);
    WF_CHECK_STREQ(cs, "windows-1251");
    wf_buf out = {0};
    /* latin-1 "café" and windows-1252's euro sign */
    WF_CHECK_EQ(wf__prep_to_utf8("caf\xe9 \x80", 6, "iso-8859-1", &out), 1);
    WF_CHECK_STREQ(out.data, "caf\xc3\xa9 \xe2\x82\xac");
    WF_CHECK_EQ(wf__prep_to_utf8("abc", 3, "utf-8", &out), 0);
    WF_CHECK_EQ(wf__prep_to_utf8("abc", 3, "no-such-charset", &out), 0);
    wf_buf_free(&out);
}

/* ---- HTML ---- */

WF_TEST(html_to_text) {
    const char *html =
        "<!DOCTYPE html><html><head><title> The  title </title><script>var x = 1;</script>"
        "<style>body { color: red }</style></head><body>"
        "<nav><ul><li>Home</li><li>About &amp; more</li></ul></nav>"
        "<h1>Heading</h1><p>First   paragraph\nwith <a href=x>a link</a> and <em>emphasis</em>.</p>"
        "<div>Block<br>after break</div><pre>  code  line 1\n    line 2</pre>"
        "<table><tr><td>a</td><td>b</td></tr></table><noscript>no script</noscript>"
        "<p>Unclosed <b>bold<p>next</body></html>";
    wf_buf out = {0};
    WF_CHECK_OK(wf_html_to_text(html, strlen(html), &out));
    WF_CHECK_STREQ(out.data,
                   "The title\nHome\nAbout & more\nHeading\nFirst paragraph with a link and emphasis.\n"
                   "Block\nafter break\n  code  line 1\n    line 2\na b\nUnclosed bold\nnext\n");
    /* Not HTML at all, and empty input, still work. */
    WF_CHECK_OK(wf_html_to_text("just text", 9, &out));
    WF_CHECK_STREQ(out.data, "just text\n");
    WF_CHECK_OK(wf_html_to_text("", 0, &out));
    WF_CHECK_EQ(out.len, 0);
    wf_buf_free(&out);
}

/* ---- normalization ---- */

static wf_normalize_opts nopts(int form) {
    wf_normalize_opts o = {form, 1, 0, 0.1};
    return o;
}

WF_TEST(normalize_text) {
    wf_buf out = {0};
    int rep;
    wf_normalize_opts o = nopts(1);
    /* e + combining acute composes to U+00E9; CRLF; NBSP; runs of spaces;
     * trailing spaces; blank lines; a zero-width space; a control char. */
    const char *in = "\n\n  Cafe\xcc\x81 \xc2\xa0 bar  \r\nline\x01 two\xe2\x80\x8b\n\n\n\nthird\t\tline  \n\n";
    WF_CHECK_EQ(wf_text_normalize(in, strlen(in), &o, &out, &rep), WF_NORM_OK);
    WF_CHECK_STREQ(out.data, "Caf\xc3\xa9 bar\nline two\n\nthird line");
    WF_CHECK_EQ(rep, 0);
    /* NFKC folds the ligature and full-width letters; NFC keeps them. */
    const char *lig = "\xef\xac\x81 \xef\xbc\xa1";
    WF_CHECK_EQ(wf_text_normalize(lig, strlen(lig), &o, &out, &rep), WF_NORM_OK);
    WF_CHECK_STREQ(out.data, lig);
    o = nopts(2);
    WF_CHECK_EQ(wf_text_normalize(lig, strlen(lig), &o, &out, &rep), WF_NORM_OK);
    WF_CHECK_STREQ(out.data, "fi A");
    /* Invalid UTF-8: repaired, or the document dropped. */
    o = nopts(1);
    const char *bad = "ok \xff\xfe then \xc3";
    WF_CHECK_EQ(wf_text_normalize(bad, strlen(bad), &o, &out, &rep), WF_NORM_OK);
    WF_CHECK_STREQ(out.data, "ok \xef\xbf\xbd\xef\xbf\xbd then \xef\xbf\xbd");
    WF_CHECK_EQ(rep, 1);
    o.drop_invalid = 1;
    WF_CHECK_EQ(wf_text_normalize(bad, strlen(bad), &o, &out, &rep), WF_NORM_INVALID);
    /* Binary: a NUL, or too many control characters. */
    WF_CHECK_EQ(wf_text_normalize("a\0b", 3, &o, &out, &rep), WF_NORM_BINARY);
    WF_CHECK_EQ(wf_text_normalize("ab\x02\x03\x04 cdef", 10, &o, &out, &rep), WF_NORM_BINARY);
    WF_CHECK_EQ(wf_text_normalize(" \n\t \r\n", 6, &o, &out, &rep), WF_NORM_EMPTY);
    wf_buf_free(&out);
}

/* The normalizer only sends the non-ASCII runs (with the character before
 * each) through utf8proc; on random mixes of bases, combining marks (of
 * different classes, to be reordered), Hangul jamo, kana with voicing
 * marks, singletons and compatibility characters it must agree with
 * utf8proc_map on the whole text. */
WF_TEST(unicode_forms_match_utf8proc_on_whole_text) {
    static const char *pieces[] = {"a", "e", " ", "x", ".", "\xcc\x81", "\xcc\xa3", "\xcc\x88", "\xc3\xa9",
                                   "\xe1\x84\x80", "\xe1\x85\xa1", "\xe1\x86\xa8", "\xef\xac\x81",
                                   "\xe2\x84\xab", "\xe3\x81\x8b", "\xe3\x82\x99", "\xe2\x80\x80",
                                   "\xef\xbc\xa1", "\xc5\xbf", "\xe1\xba\x9b"};
    wf_buf in = {0}, out = {0};
    uint64_t state = 12345;
    for (int form = 1; form <= 2; form++) {
        wf_normalize_opts o = {form, 0, 0, 1.0};
        for (int t = 0; t < 3000; t++) {
            in.len = 0;
            int n = 1 + (int)(state % 12);
            for (int k = 0; k < n; k++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                const char *pc = pieces[(state >> 33) % (sizeof pieces / sizeof *pieces)];
                WF_CHECK_OK(wf_buf_append(&in, pc, strlen(pc)));
            }
            WF_CHECK_OK(wf_buf_append(&in, "z", 1)); /* never empty after trimming */
            int rep;
            WF_CHECK_EQ(wf_text_normalize(in.data, in.len, &o, &out, &rep), WF_NORM_OK);
            utf8proc_uint8_t *want = NULL;
            utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (form == 2 ? UTF8PROC_COMPAT : 0);
            utf8proc_ssize_t wn = utf8proc_map((const utf8proc_uint8_t *)in.data, (utf8proc_ssize_t)in.len, &want, opt);
            WF_CHECK_TRUE(wn >= 0);
            if ((size_t)wn != out.len || memcmp(want, out.data, out.len) != 0)
                wf_test_fail(__FILE__, __LINE__, "form %d of '%s': got '%.*s', utf8proc says '%s'", form, in.data,
                             (int)out.len, out.data, (const char *)want);
            free(want);
        }
    }
    wf_buf_free(&in);
    wf_buf_free(&out);
}

WF_TEST(utf8_validity) {
    WF_CHECK_TRUE(wf_utf8_valid("plain ascii text, long enough for words", 39));
    WF_CHECK_TRUE(wf_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9));
    WF_CHECK_TRUE(!wf_utf8_valid("\xc0\xaf", 2));             /* overlong '/' */
    WF_CHECK_TRUE(!wf_utf8_valid("\xe0\x80\xaf", 3));         /* overlong */
    WF_CHECK_TRUE(!wf_utf8_valid("\xed\xa0\x80", 3));         /* surrogate */
    WF_CHECK_TRUE(!wf_utf8_valid("\xf4\x90\x80\x80", 4));     /* above U+10FFFF */
    WF_CHECK_TRUE(!wf_utf8_valid("abc\xe2\x82", 5));          /* cut short */
    WF_CHECK_TRUE(!wf_utf8_valid("\x80", 1));
}

WF_TEST(dedup_normalization) {
    wf_buf out = {0};
    const char *in = "  H\xc3\xa9llo,   WORLD! It's 2024 \xe2\x80\x94 \xc2\xab" "Fa\xc3\xa7" "ade\xc2\xbb\t";
    WF_CHECK_OK(wf_dedup_normalize(in, strlen(in), &out));
    WF_CHECK_STREQ(out.data, "hello world its 0000 facade");
    WF_CHECK_OK(wf_dedup_normalize("...!!!", 6, &out));
    WF_CHECK_EQ(out.len, 0);
    /* Scripts without case pass through. */
    WF_CHECK_OK(wf_dedup_normalize("\xe6\x97\xa5\xe6\x9c\xac\xe3\x80\x82", 9, &out));
    WF_CHECK_STREQ(out.data, "\xe6\x97\xa5\xe6\x9c\xac");
    wf_buf_free(&out);
}

WF_TEST(hash_set) {
    u64set s;
    WF_CHECK_OK(wf__prep_u64set_init(&s, 1 << 20));
    for (uint64_t i = 0; i < 50000; i++) WF_CHECK_EQ(wf__prep_u64set_insert(&s, i * 7919), 1);
    for (uint64_t i = 0; i < 50000; i++) WF_CHECK_EQ(wf__prep_u64set_insert(&s, i * 7919), 0);
    WF_CHECK_TRUE(wf__prep_u64set_contains(&s, 0) && wf__prep_u64set_contains(&s, 7919 * 49999ull));
    WF_CHECK_TRUE(!wf__prep_u64set_contains(&s, 3));
    wf__prep_u64set_free(&s);
    /* At the memory cap the table refuses new keys but still knows old ones. */
    WF_CHECK_OK(wf__prep_u64set_init(&s, 64 * 1024)); /* 8192 slots */
    int refused = 0;
    for (uint64_t i = 1; i <= 10000; i++) refused += wf__prep_u64set_insert(&s, i) < 0;
    WF_CHECK_TRUE(refused > 0 && s.cap * 8 <= 64 * 1024);
    WF_CHECK_EQ(wf__prep_u64set_insert(&s, 1), 0);
    WF_CHECK_EQ(wf__prep_u64set_insert(&s, 9999999), -1);
    wf__prep_u64set_free(&s);
}

/* ---- MinHash ---- */

/* Word i of the MinHash texts: letters only, as digits normalize to 0. */
static int word(char *out, size_t cap, char first, int i) {
    return snprintf(out, cap, "%c%c%c%c", first, 'a' + i % 26, 'a' + i / 26 % 26, 'a' + i / 676 % 26);
}

/* Exact Jaccard similarity of two texts' word 5-gram sets (texts of
 * lower-case words separated by single spaces). */
static double exact_jaccard(const char *a, const char *b, int n) {
    uint64_t sa[512], sb[512];
    size_t na = 0, nb = 0;
    const char *texts[2] = {a, b};
    uint64_t *sets[2] = {sa, sb};
    size_t *ns[2] = {&na, &nb};
    for (int t = 0; t < 2; t++) {
        const char *s = texts[t];
        size_t starts[600], nw = 0, len = strlen(s);
        for (size_t i = 0; i < len; i++)
            if (i == 0 || s[i - 1] == ' ') starts[nw++] = i;
        starts[nw] = len + 1;
        for (size_t i = 0; i + (size_t)n <= nw; i++) {
            uint64_t h = wf_hash64(s + starts[i], starts[i + n] - 1 - starts[i]);
            int seen = 0;
            for (size_t k = 0; k < *ns[t]; k++) seen |= sets[t][k] == h;
            if (!seen) sets[t][(*ns[t])++] = h;
        }
    }
    size_t inter = 0;
    for (size_t i = 0; i < na; i++)
        for (size_t k = 0; k < nb; k++) inter += sa[i] == sb[k];
    return (double)inter / (double)(na + nb - inter);
}

WF_TEST(minhash_estimates_jaccard) {
    /* A text of 300 distinct words, and copies with every k-th word changed. */
    static char base[8192], other[8192];
    size_t at = 0;
    for (int i = 0; i < 300; i++) {
        if (i) base[at++] = ' ';
        at += (size_t)word(base + at, sizeof base - at, 'w', i);
    }
    enum { H = 256 };
    uint64_t s1[H], s2[H];
    WF_CHECK_TRUE(wf_minhash_signature(base, strlen(base), 5, H, 1, s1) == 296);
    WF_CHECK_TRUE(wf_minhash_signature(base, strlen(base), 5, H, 1, s2) == 296);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
    int ks[] = {60, 25, 12, 6};
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        at = 0;
        for (int i = 0; i < 300; i++) {
            if (i) other[at++] = ' ';
            at += (size_t)word(other + at, sizeof other - at, i % ks[t] == 3 ? 'z' : 'w', i);
        }
        double j = exact_jaccard(base, other, 5);
        wf_minhash_signature(other, strlen(other), 5, H, 1, s2);
        double est = wf_minhash_similarity(s1, s2, H);
        /* 256 hashes: standard error sqrt(j(1-j)/256) <= 0.031; allow 4 sigma. */
        WF_CHECK_NEAR(est, j, 0.125);
    }
    /* Case and punctuation do not matter; the seed changes the functions. */
    WF_CHECK_TRUE(wf_minhash_signature("The cat, sat!", 13, 2, H, 1, s1) == 2);
    WF_CHECK_TRUE(wf_minhash_signature("the CAT sat", 11, 2, H, 1, s2) == 2);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
    wf_minhash_signature("the CAT sat", 11, 2, H, 2, s2);
    WF_CHECK_TRUE(wf_minhash_similarity(s1, s2, H) < 0.1);
    WF_CHECK_EQ(wf_minhash_signature("!!! ...", 7, 5, H, 1, s1), 0);
    /* Band keys: equal signatures, equal keys; one changed row changes one. */
    uint64_t k1[32], k2[32];
    wf_minhash_signature(base, strlen(base), 5, H, 1, s1);
    memcpy(s2, s1, sizeof s1);
    s2[17] ^= 1;
    wf__prep_minhash_bands(s1, 32, 8, k1);
    wf__prep_minhash_bands(s2, 32, 8, k2);
    int diff = 0;
    for (int b = 0; b < 32; b++) diff += k1[b] != k2[b];
    WF_CHECK_EQ(diff, 1);
    WF_CHECK_TRUE(k1[2] != k2[2]);
}

/* ---- MinHash on characters (languages written without spaces) ---- */

/* Appends code point cp as UTF-8 (1 to 4 bytes). */
static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Code point i of the test texts, from a fixed pseudo-random sequence:
 * Greek small letters (2 bytes of UTF-8), CJK ideographs (3) and CJK
 * extension B ideographs (4), none of which the dedup normalization
 * changes (no case to fold, no marks, no decomposition). `salt` makes
 * another text. */
static uint32_t test_cp(uint32_t i, uint32_t salt) {
    uint32_t x = (i + 1) * 2654435761u ^ salt * 40503u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    switch (x % 3) {
    case 0: return 0x3B1 + x / 3 % 17;     /* alpha .. rho */
    case 1: return 0x4E00 + x / 3 % 0x4000;
    default: return 0x20000 + x / 3 % 0x1000;
    }
}

/* Exact Jaccard similarity of the sets of n consecutive code points of
 * two texts, given as code point arrays (decoded here, not by weft). */
static double exact_char_jaccard(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, size_t n) {
    static uint64_t sets[2][1024];
    size_t cnt[2] = {0, 0};
    const uint32_t *texts[2] = {a, b};
    size_t lens[2] = {na, nb};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i + n <= lens[t]; i++) {
            uint64_t h = wf_hash64(texts[t] + i, n * sizeof *a);
            int seen = 0;
            for (size_t k = 0; k < cnt[t]; k++) seen |= sets[t][k] == h;
            if (!seen) sets[t][cnt[t]++] = h;
        }
    size_t inter = 0;
    for (size_t i = 0; i < cnt[0]; i++)
        for (size_t k = 0; k < cnt[1]; k++) inter += sets[0][i] == sets[1][k];
    return (double)inter / (double)(cnt[0] + cnt[1] - inter);
}

static size_t encode_cps(const uint32_t *cps, size_t n, char *out) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) at += put_utf8(out + at, cps[i]);
    out[at] = '\0';
    return at;
}

WF_TEST(minhash_char_shingles_estimate_jaccard) {
    enum { N = 400, H = 256 };
    static uint32_t base[N], other[N];
    static char tb[N * 4 + 1], to[N * 4 + 1];
    for (uint32_t i = 0; i < N; i++) base[i] = test_cp(i, 0);
    size_t lb = encode_cps(base, N, tb);
    WF_CHECK_TRUE(lb > 2 * N && lb < 4 * N); /* a mix of 2-, 3- and 4-byte sequences */
    uint64_t s1[H], s2[H];
    /* One shingle per run of 5 code points, not per byte or per word. */
    WF_CHECK_EQ(wf_minhash_signature_chars(tb, lb, 5, H, 1, s1), N - 4);
    WF_CHECK_EQ(wf_minhash_signature_chars(tb, lb, 1, H, 1, s2), N);
    WF_CHECK_EQ(wf_minhash_signature(tb, lb, 5, H, 1, s2), 1); /* no spaces: one "word" */
    int ks[] = {60, 25, 12, 6};
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        for (uint32_t i = 0; i < N; i++) other[i] = i % (uint32_t)ks[t] == 3 ? test_cp(i, 7) : base[i];
        size_t lo = encode_cps(other, N, to);
        double j = exact_char_jaccard(base, N, other, N, 5);
        WF_CHECK_EQ(wf_minhash_signature_chars(to, lo, 5, H, 1, s2), N - 4);
        /* 256 hashes: standard error sqrt(j(1-j)/256) <= 0.031; allow 4 sigma. */
        WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), j, 0.125);
    }
    /* Spaces, line breaks and punctuation (ASCII and CJK) between any code
     * points change nothing: the shingles run across them. */
    static char spaced[N * 8];
    size_t at = 0;
    for (uint32_t i = 0; i < N; i++) {
        at += put_utf8(spaced + at, base[i]);
        const char *sep[] = {"", " ", "\xef\xbc\x8c", "\xe3\x80\x82", "\n", ", ", "\xe3\x80\x8c"};
        const char *x = sep[i % 7];
        memcpy(spaced + at, x, strlen(x));
        at += strlen(x);
    }
    WF_CHECK_EQ(wf_minhash_signature_chars(spaced, at, 5, H, 1, s2), N - 4);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
    /* Invalid UTF-8 (stray continuation bytes, a cut sequence, bytes that
     * never occur) is skipped by the normalization, not a crash: the same
     * signature as the text without it. */
    static char bad[N * 4 + 64];
    at = 0;
    for (uint32_t i = 0; i < N; i++) {
        at += put_utf8(bad + at, base[i]);
        if (i % 50 == 7) bad[at++] = (char)0x80;
        if (i % 50 == 20) bad[at++] = (char)0xFF;
        if (i % 50 == 33) bad[at++] = (char)0xE4, bad[at++] = (char)0xB8; /* 3-byte sequence cut at 2 */
    }
    bad[at++] = (char)0xF0; /* cut at the end */
    bad[at++] = (char)0x9F;
    WF_CHECK_EQ(wf_minhash_signature_chars(bad, at, 5, H, 1, s2), N - 4);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
    WF_CHECK_EQ(wf_minhash_signature_chars("\xff\xfe\x80\xc3", 4, 5, H, 1, s2), 0);
    /* Fewer code points than n: the text is one shingle; none: nothing. */
    WF_CHECK_EQ(wf_minhash_signature_chars("\xe4\xb8\xad\xe6\x96\x87", 6, 5, H, 1, s1), 1);
    WF_CHECK_EQ(wf_minhash_signature_chars("\xe4\xb8\xad \xe6\x96\x87\xe3\x80\x82", 10, 5, H, 1, s2), 1);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
    WF_CHECK_EQ(wf_minhash_signature_chars("\xe3\x80\x82\xef\xbc\x8c !? ", 10, 5, H, 1, s1), 0);
    WF_CHECK_EQ(wf_minhash_signature_chars("", 0, 5, H, 1, s1), 0);
    WF_CHECK_EQ(wf_minhash_signature_chars(tb, lb, 0, H, 1, s1), 0);
    WF_CHECK_EQ(wf_minhash_signature_chars(tb, lb, WF_MINHASH_MAX_NGRAM + 1, H, 1, s1), 0);
    WF_CHECK_EQ(wf_minhash_signature_chars(tb, lb, WF_MINHASH_MAX_NGRAM, H, 1, s1), N - WF_MINHASH_MAX_NGRAM + 1);
    /* Case and accents fold as for words: Latin inside CJK text. */
    WF_CHECK_EQ(wf_minhash_signature_chars("\xe7\x94\xa8Python\xe7\xbc\x96\xe7\xa8\x8b", 12, 3, H, 1, s1), 8 - 2);
    WF_CHECK_EQ(wf_minhash_signature_chars("\xe7\x94\xa8 PYTHON \xe7\xbc\x96\xe7\xa8\x8b", 14, 3, H, 1, s2), 8 - 2);
    WF_CHECK_NEAR(wf_minhash_similarity(s1, s2, H), 1.0, 0);
}

/* A paragraph of 30 "sentences" of CJK ideographs and a copy with one
 * sentence changed: near duplicates by characters, unrelated by words. */
WF_TEST(minhash_chars_find_what_words_miss) {
    enum { S = 30, L = 18, H = 112 };
    static uint32_t a[S * L], b[S * L];
    static char ta[S * (L * 4 + 3) + 1], tb[S * (L * 4 + 3) + 1];
    size_t la = 0, lb = 0;
    for (uint32_t s = 0; s < S; s++) {
        for (uint32_t i = 0; i < L; i++) {
            a[s * L + i] = 0x4E00 + test_cp(s * L + i, 3) % 0x4000;
            b[s * L + i] = s == 11 ? 0x4E00 + test_cp(s * L + i, 4) % 0x4000 : a[s * L + i];
            la += put_utf8(ta + la, a[s * L + i]);
            lb += put_utf8(tb + lb, b[s * L + i]);
        }
        la += put_utf8(ta + la, 0x3002); /* ideographic full stop */
        lb += put_utf8(tb + lb, 0x3002);
    }
    uint64_t s1[H], s2[H];
    double j = exact_char_jaccard(a, S * L, b, S * L, 5);
    WF_CHECK_TRUE(j > 0.85);
    wf_minhash_signature_chars(ta, la, 5, H, 1, s1);
    wf_minhash_signature_chars(tb, lb, 5, H, 1, s2);
    WF_CHECK_TRUE(wf_minhash_similarity(s1, s2, H) > 0.7);
    WF_CHECK_EQ(wf_minhash_signature(ta, la, 5, H, 1, s1), 1);
    WF_CHECK_EQ(wf_minhash_signature(tb, lb, 5, H, 1, s2), 1);
    WF_CHECK_TRUE(wf_minhash_similarity(s1, s2, H) < 0.1);
}

/* The default minhash.char_languages are the languages whose built-in
 * rule sets say they are written without spaces (word rules off). */
WF_TEST(minhash_char_languages_are_the_no_space_rule_sets) {
    wf_prep_config c = defaults();
    prep_rule_sets rs;
    WF_CHECK_OK(wf__prep_rules_build(&c, &rs));
    size_t no_spaces = 0;
    for (size_t i = 0; i < rs.n; i++) {
        if (strcmp(rs.v[i].lang, "default") == 0) continue;
        int listed = 0;
        for (size_t k = 0; k < c.mh_char_languages.n; k++) listed |= strcmp(c.mh_char_languages.items[k], rs.v[i].lang) == 0;
        WF_CHECK_EQ(listed, !rs.v[i].r.word_rules);
        no_spaces += !rs.v[i].r.word_rules;
    }
    WF_CHECK_EQ(no_spaces, c.mh_char_languages.n);
    WF_CHECK_TRUE(no_spaces >= 9);
    WF_CHECK_EQ(c.mh_char_ngram, 5);
    wf__prep_rules_free(&rs);
    wf_prep_config_free(&c);
}

/* ---- language id ---- */

WF_TEST(langid_cld2) {
    struct {
        const char *text, *code;
    } cases[] = {
        {"The committee will meet again next week to discuss the budget and the plans for the new library.", "en"},
        {"Le comit\xc3\xa9 se r\xc3\xa9unira de nouveau la semaine prochaine pour discuter du budget et des projets.", "fr"},
        {"Der Ausschuss wird sich n\xc3\xa4" "chste Woche erneut treffen, um den Haushalt und die Pl\xc3\xa4ne zu besprechen.", "de"},
        {"\xe5\xa7\x94\xe5\x93\xa1\xe4\xbc\x9a\xe3\x81\xaf\xe6\x9d\xa5\xe9\x80\xb1\xe3\x80\x81\xe4\xba\x88\xe7\xae\x97\xe3\x81\xa8"
         "\xe6\x96\xb0\xe3\x81\x97\xe3\x81\x84\xe5\x9b\xb3\xe6\x9b\xb8\xe9\xa4\xa8\xe3\x81\xae\xe8\xa8\x88\xe7\x94\xbb\xe3\x81\xab"
         "\xe3\x81\xa4\xe3\x81\x84\xe3\x81\xa6\xe8\xa9\xb1\xe3\x81\x97\xe5\x90\x88\xe3\x81\x86\xe3\x81\x9f\xe3\x82\x81\xe3\x81\xab"
         "\xe5\x86\x8d\xe3\x81\xb3\xe4\xbc\x9a\xe5\x90\x88\xe3\x82\x92\xe9\x96\x8b\xe3\x81\x8d\xe3\x81\xbe\xe3\x81\x99\xe3\x80\x82", "ja"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char code[16];
        double conf;
        int rel;
        wf_langid_detect(cases[i].text, strlen(cases[i].text), code, &conf, &rel);
        WF_CHECK_STREQ(code, cases[i].code);
        WF_CHECK_TRUE(conf >= 0.8 && conf <= 1.0);
    }
    char code[16];
    double conf;
    int rel;
    wf_langid_detect("1234 5678 ++ -- 99", 18, code, &conf, &rel);
    WF_CHECK_STREQ(code, "un");
    WF_CHECK_NEAR(conf, 0.0, 0);
    wf_langid_detect("", 0, code, &conf, &rel);
    WF_CHECK_STREQ(code, "un");
}

/* The multilingual test text made by scripts/setup.sh from Debian's
 * translated manual pages: each file's language is found. */
WF_TEST(langid_debian_man_pages) {
    const char *root = getenv("WEFT_ROOT");
    struct {
        const char *file, *code;
    } cases[] = {{"de.txt", "de"}, {"es.txt", "es"}, {"fr.txt", "fr"}, {"ja.txt", "ja"},
                 {"pl.txt", "pl"}, {"ru.txt", "ru"}, {"zh_CN.txt", "zh"}, {"zh_TW.txt", "zh-Hant"}};
    char path[1024];
    snprintf(path, sizeof path, "%s/data/multilingual/de.txt", root ? root : ".");
    if (!wf_path_exists(path)) {
        wf_test_fail(__FILE__, __LINE__, "%s is missing: run scripts/setup.sh (or set WEFT_ROOT)", path);
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/data/multilingual/%s", root ? root : ".", cases[i].file);
        char *data;
        size_t len;
        WF_CHECK_OK(wf_file_read(path, &data, &len));
        /* Paragraphs of 2000 bytes from the middle of the file (man pages
         * quote commands and options in English). */
        size_t off = len / 2;
        while (off < len && ((unsigned char)data[off] & 0xC0) == 0x80) off++;
        size_t n = 2000;
        while (off + n < len && ((unsigned char)data[off + n] & 0xC0) == 0x80) n--;
        char code[16];
        double conf;
        int rel;
        wf_langid_detect(data + off, n, code, &conf, &rel);
        if (strcmp(code, cases[i].code) != 0)
            wf_test_fail(__FILE__, __LINE__, "%s: detected %s (%.2f), expected %s", cases[i].file, code, conf,
                         cases[i].code);
        free(data);
    }
}

/* ---- quality ---- */

/* Five plain sentences, 67 words: passes every rule with the defaults. */
static const char *GOOD =
    "The river runs past the old mill and into the valley below the town.\n"
    "Farmers have used its water for many years, and the mill still stands today.\n"
    "In spring the meadows along the banks are full of flowers and birds.\n"
    "Visitors often walk the path that follows the water to the lake.\n"
    "It is a quiet place with a long history, and people come back to it every year.";

static int check(const wf_prep_rules *q, const char *text, uint64_t *removed) {
    wf_buf b = {0};
    wf_buf_append(&b, text, strlen(text));
    uint64_t rm = 0;
    int r = wf__prep_quality(q, &b, &rm);
    if (removed) *removed = rm;
    wf_buf_free(&b);
    return r;
}

static char *repeat_lines(const char *line, int n) {
    size_t l = strlen(line);
    char *s = malloc((l + 1) * (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        memcpy(s + i * (l + 1), line, l);
        s[i * (l + 1) + l] = '\n';
    }
    s[(l + 1) * (size_t)n] = '\0';
    return s;
}

/* The rule sets of config c, and the settings of language `lang`'s (a
 * copy whose thresholds a test may change; its stop words belong to rs). */
static wf_prep_rules rules_of(const wf_prep_config *c, prep_rule_sets *rs, const char *lang) {
    WF_CHECK_OK(wf__prep_rules_build(c, rs));
    const prep_rule_set *set = wf__prep_rules_find(rs, lang);
    WF_CHECK_TRUE(set != NULL);
    return set->r;
}

WF_TEST(quality_rules) {
    wf_prep_config cfg = defaults();
    prep_rule_sets rs;
    wf_prep_rules c = rules_of(&cfg, &rs, "en");
    uint64_t rm;
    WF_CHECK_EQ(check(&c, GOOD, &rm), R_NONE);
    WF_CHECK_EQ(rm, 0);

    /* C4 lines: javascript, no terminal punctuation, too few words. */
    char buf[4096];
    snprintf(buf, sizeof buf, "Menu Home About\nPlease enable JavaScript to see this page.\nOk.\n%s", GOOD);
    WF_CHECK_EQ(check(&c, buf, &rm), R_NONE);
    WF_CHECK_EQ(rm, 3);
    snprintf(buf, sizeof buf, "%s\nLorem ipsum dolor sit amet.", GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_LOREM);
    snprintf(buf, sizeof buf, "%s\nint main() { return 0; }", GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_NONE);
    c.c4_curly_bracket = 1;
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_CURLY);
    c.c4_curly_bracket = 0;
    WF_CHECK_EQ(check(&c, "no punctuation here at all\nnor here either", NULL), R_Q_LINES_EMPTY);
    WF_CHECK_EQ(check(&c, "The river runs past the old mill. It is quiet.", NULL), R_Q_SENTENCES);

    /* Gopher's document rules (C4's off so that they see the text). */
    c.c4_terminal_punct = 0;
    c.c4_min_words_per_line = 0;
    c.c4_min_sentences = 0;
    WF_CHECK_EQ(check(&c, "The river runs past the old mill.", NULL), R_Q_MIN_WORDS);
    c.max_words = 20;
    WF_CHECK_EQ(check(&c, GOOD, NULL), R_Q_MAX_WORDS);
    c.max_words = 100000;
    char *longw = repeat_lines("Thequickbrownfoxjumpsoverthelazydog and the incomprehensibilities", 15);
    WF_CHECK_EQ(check(&c, longw, NULL), R_Q_WORD_LEN);
    free(longw);
    snprintf(buf, sizeof buf, "%s\n# # # # # # # # # #", GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_SYMBOLS);
    char bul[4096];
    size_t at = 0;
    for (int i = 0; i < 10; i++)
        at += (size_t)snprintf(bul + at, sizeof bul - at, "- item %d of the list with the words that are in it\n", i);
    WF_CHECK_EQ(check(&c, bul, NULL), R_Q_BULLETS);
    at = 0;
    for (int i = 0; i < 10; i++)
        at += (size_t)snprintf(bul + at, sizeof bul - at, "line %d of the text and then it trails off...\n", i);
    c.max_symbol_word_ratio = 1.0; /* the ellipses would trip the symbol rule first */
    WF_CHECK_EQ(check(&c, bul, NULL), R_Q_ELLIPSIS);
    c.max_symbol_word_ratio = 0.1;
    snprintf(buf, sizeof buf, "%s\n1234 5678 9012 3456 7890 1234 5678 9012 3456 7890 1234 5678 9012 3456 7890 1 2 3 4 5 6 7",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_ALPHA);
    const char *no_stop = "River runs past old mill into valley below town. Farmers used its water many years; mill "
                          "still stands today. Spring meadows along banks are full of flowers, birds. Visitors often "
                          "walk path following water towards lake. Quiet place, long history: people come back every "
                          "year, again, again, forever. Boats drift slowly across calm water while children play near shore.";
    WF_CHECK_EQ(check(&c, no_stop, NULL), R_Q_STOP);
    snprintf(buf, sizeof buf, "%s\nx1234567 y1234567 z1234567 a1234567 b1234567 c1234567 d1234567 e1234567 "
                              "f1234567 g1234567 h1234567 i1234567 j1234567 k1234567 l1234567 m1234567",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DIGITS);

    /* Repetition. */
    snprintf(buf, sizeof buf, "%s\nthe same line again\nthe same line again\nthe same line again\nthe same line again\n"
                              "the same line again\nthe same line again",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DUP_LINES);
    snprintf(buf, sizeof buf,
             "%s\n\nA repeated paragraph that is long enough to weigh a lot in the count of characters here.\n\n"
             "A repeated paragraph that is long enough to weigh a lot in the count of characters here.",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DUP_PARAS); /* 1 of 3 paragraphs repeats: above 0.3 */
    c.max_dup_para_frac = 1;
    snprintf(buf, sizeof buf,
             "%s\nA repeated line that is long enough to weigh a lot in the count of characters here, and more, "
             "and then some more words, yes.\nA repeated line that is long enough to weigh a lot in the count of "
             "characters here, and more, and then some more words, yes.",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DUP_LINE_CHARS); /* 1 of 7 lines, but 20%+ of the bytes */
    c.max_dup_line_frac = 1;
    c.max_dup_line_char_frac = 1;
    snprintf(buf, sizeof buf, "%s\n\nOne two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.\n\n"
                              "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.",
             GOOD);
    c.max_dup_para_frac = 1;
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DUP_PARA_CHARS);
    c.max_dup_para_char_frac = 1;
    snprintf(buf, sizeof buf, "%s very good very good very good very good very good very good very good very good "
                              "very good very good very good very good very good",
             GOOD);
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_TOP2);
    snprintf(buf, sizeof buf, "%s alpha beta gamma delta epsilon alpha beta gamma delta epsilon alpha beta gamma "
                              "delta epsilon alpha beta gamma delta epsilon",
             GOOD);
    c.max_top_ngram[0] = c.max_top_ngram[1] = c.max_top_ngram[2] = 1;
    WF_CHECK_EQ(check(&c, buf, NULL), R_Q_DUP5);
    c.max_dup_ngram[0] = 1;
    int r6 = check(&c, buf, NULL); /* a longer n-gram's rule, its threshold being lower */
    WF_CHECK_TRUE(r6 >= R_Q_DUP6 && r6 <= R_Q_DUP10);
    for (int g = 0; g < 6; g++) c.max_dup_ngram[g] = 1;
    WF_CHECK_EQ(check(&c, buf, NULL), R_NONE);
    wf__prep_rules_free(&rs);
    wf_prep_config_free(&cfg);
}

/* ---- quality rules per language ---- */

/* Five sentences of plain prose in each language (written for these tests,
 * the same scene as GOOD), each passing its own language's rules. */
static const struct {
    const char *lang, *text;
} PROSE[] = {
    {"de", "Der Fluss fließt an der alten Mühle vorbei und weiter in das Tal unterhalb der Stadt.\n"
           "Seit vielen Jahren nutzen die Bauern sein Wasser, und die Mühle steht noch heute.\n"
           "Im Frühling sind die Wiesen am Ufer voller Blumen und Vögel.\n"
           "Besucher gehen oft den Weg entlang, der dem Wasser bis zum See folgt.\n"
           "Es ist ein ruhiger Ort mit einer langen Geschichte, und die Menschen kommen jedes Jahr gern zurück."},
    {"fr", "La rivière passe devant le vieux moulin et descend dans la vallée sous la ville.\n"
           "Depuis de nombreuses années, les paysans utilisent son eau, et le moulin est toujours debout.\n"
           "Au printemps, les prés le long des berges sont pleins de fleurs et d'oiseaux.\n"
           "Les visiteurs suivent souvent le chemin qui longe l'eau jusqu'au lac.\n"
           "C'est un endroit calme qui a une longue histoire, et les gens y reviennent chaque année avec plaisir."},
    {"es", "El río pasa junto al viejo molino y baja hacia el valle que está debajo del pueblo.\n"
           "Desde hace muchos años los campesinos usan su agua, y el molino sigue en pie.\n"
           "En primavera los prados de la orilla se llenan de flores y de pájaros.\n"
           "Los visitantes recorren a menudo el camino que sigue el agua hasta el lago.\n"
           "Es un lugar tranquilo con una larga historia, y la gente vuelve a visitarlo cada año."},
    {"it", "Il fiume scorre accanto al vecchio mulino e scende nella valle sotto il paese.\n"
           "Da molti anni i contadini usano la sua acqua, e il mulino è ancora in piedi.\n"
           "In primavera i prati lungo le rive sono pieni di fiori e di uccelli.\n"
           "I visitatori percorrono spesso il sentiero che segue l'acqua fino al lago.\n"
           "È un luogo tranquillo con una lunga storia, e la gente ci torna volentieri ogni anno."},
    {"pt", "O rio passa ao lado do velho moinho e desce para o vale que fica abaixo da cidade.\n"
           "Há muitos anos que os agricultores usam a sua água, e o moinho continua de pé.\n"
           "Na primavera os prados ao longo das margens ficam cheios de flores e de pássaros.\n"
           "Os visitantes percorrem muitas vezes o caminho que segue a água até ao lago.\n"
           "É um lugar tranquilo com uma longa história, e as pessoas voltam a visitá-lo todos os anos."},
    {"nl", "De rivier stroomt langs de oude molen en verder het dal in onder de stad.\n"
           "Al vele jaren gebruiken de boeren het water, en de molen staat er nog steeds.\n"
           "In de lente staan de weiden langs de oevers vol bloemen en vogels.\n"
           "Bezoekers lopen vaak het pad dat het water volgt tot aan het meer.\n"
           "Het is een rustige plek met een lange geschiedenis, en de mensen komen er elk jaar graag terug."},
    {"pl", "Rzeka płynie obok starego młyna i dalej w dół doliny, która leży pod miastem.\n"
           "Od wielu lat rolnicy korzystają z jej wody, a młyn stoi do dziś.\n"
           "Wiosną łąki na brzegach są pełne kwiatów i ptaków.\n"
           "Goście często chodzą ścieżką, która prowadzi wzdłuż wody aż do jeziora.\n"
           "To spokojne miejsce o długiej historii, i ludzie chętnie wracają tu co roku."},
    {"ru", "Река течёт мимо старой мельницы и дальше вниз, в долину под городом.\n"
           "Много лет крестьяне берут из неё воду, и мельница стоит до сих пор.\n"
           "Весной луга на берегах полны цветов и птиц.\n"
           "Гости часто гуляют по тропе, которая идёт вдоль воды до самого озера.\n"
           "Это тихое место с долгой историей, и люди с радостью возвращаются сюда каждый год."},
};

static const char *ZH = "河水从老磨坊旁边流过，一直流进城下面的山谷。\n"
                        "多年来，农民一直用这条河的水，那座磨坊至今还在。\n"
                        "春天，河岸上的草地开满了鲜花，到处都是鸟儿。\n"
                        "游客常常沿着河边的小路一直走到湖边。\n"
                        "这是一个安静的地方，有着悠久的历史，人们每年都愿意回来。";
static const char *JA = "川は古い水車小屋のそばを流れ、町の下の谷へと続いている。\n"
                        "農家の人々は長い間その水を使ってきたが、水車小屋は今も残っている。\n"
                        "春になると、岸辺の草地は花と鳥でいっぱいになる。\n"
                        "訪れる人は、湖まで続く川沿いの小道をよく歩く。\n"
                        "ここは長い歴史を持つ静かな場所で、人々は毎年のように戻ってくる。";
/* Swedish: a language with no rule set of its own. */
static const char *SV = "Floden rinner förbi den gamla kvarnen och vidare ner i dalen nedanför staden.\n"
                        "Bönderna har använt dess vatten i många år, och kvarnen står kvar än i dag.\n"
                        "På våren är ängarna längs stränderna fulla av blommor och fåglar.\n"
                        "Besökare går ofta längs stigen som följer vattnet ända fram till sjön.\n"
                        "Det är en lugn plats med en lång historia, och folk kommer gärna tillbaka varje år.";

typedef struct {
    char *v[256];
    size_t n;
} word_list;

/* The words of text (runs of non-spaces), copied. */
static void words_of(const char *text, word_list *w) {
    w->n = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == '\n') p++;
        size_t n = strcspn(p, " \n");
        if (n && w->n < 256) w->v[w->n++] = strndup(p, n);
        p += n;
    }
}

static void words_free(word_list *w) {
    for (size_t i = 0; i < w->n; i++) free(w->v[i]);
    w->n = 0;
}

/* Words joined, `per_line` to a line; a '.' closes each line when `dot`. */
static char *join_lines(char *const *v, size_t n, size_t per_line, int dot) {
    wf_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        wf_buf_append(&b, v[i], strlen(v[i]));
        int eol = (i + 1) % per_line == 0 || i + 1 == n;
        if (eol && dot) wf_buf_append(&b, ".", 1);
        if (i + 1 < n) wf_buf_append(&b, eol ? "\n" : " ", 1);
    }
    return b.data;
}

static int is_stop(const wf_prep_rules *q, const char *word) {
    char w[128];
    size_t n = strlen(word);
    while (n && strchr(".,;:!?'\"", word[n - 1])) n--;
    size_t len = wf__prep_word_lower(word, n, w, sizeof w);
    for (size_t i = 0; len && i < q->stop_words.n; i++)
        if (strcmp(q->stop_words.items[i], w) == 0) return 1;
    return 0;
}

/* Letters moved one place on in their alphabet (a -> b, z -> a, я -> а):
 * words of the same shape that are no words of the language. */
static char *gibberish(const char *text) {
    wf_buf b = {0};
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; u[i];) {
        unsigned char c = u[i];
        if (c >= 'a' && c <= 'z') c = c == 'z' ? 'a' : c + 1;
        else if (c >= 'A' && c <= 'Z') c = c == 'Z' ? 'A' : c + 1;
        if (c < 0x80) {
            char ch = (char)c;
            wf_buf_append(&b, &ch, 1);
            i++;
            continue;
        }
        int32_t cp;
        ssize_t k = utf8proc_iterate(u + i, -1, &cp);
        WF_CHECK_TRUE(k > 0);
        if (cp >= 0x430 && cp <= 0x44F) cp = cp == 0x44F ? 0x430 : cp + 1; /* а..я */
        else if (cp >= 0x410 && cp <= 0x42F) cp = cp == 0x42F ? 0x410 : cp + 1;
        unsigned char enc[4];
        ssize_t m = utf8proc_encode_char(cp, enc);
        wf_buf_append(&b, enc, (size_t)m);
        i += (size_t)k;
    }
    return b.data;
}

WF_TEST(quality_rules_per_language) {
    wf_prep_config cfg = defaults();
    prep_rule_sets rs;
    WF_CHECK_OK(wf__prep_rules_build(&cfg, &rs));
    const wf_prep_rules *en = &wf__prep_rules_find(&rs, "en")->r;
    for (size_t l = 0; l < sizeof PROSE / sizeof *PROSE; l++) {
        const char *lang = PROSE[l].lang, *text = PROSE[l].text;
        const prep_rule_set *set = wf__prep_rules_find(&rs, lang);
        WF_CHECK_STREQ(set->name, lang);
        const wf_prep_rules *q = &set->r;
        WF_CHECK_TRUE(q->word_rules && q->stop_words.n >= 8);
        /* Real prose passes its own language's rules, and the English ones
         * (what every language got before) drop it for its stop words. */
        int rc = check(q, text, NULL);
        if (rc != R_NONE) wf_test_fail(__FILE__, __LINE__, "%s prose dropped: %s", lang, wf__prep_reason_name(rc));
        rc = check(en, text, NULL);
        if (rc != R_Q_STOP)
            wf_test_fail(__FILE__, __LINE__, "%s prose under the English rules: %s", lang, wf__prep_reason_name(rc));

        word_list w;
        words_of(text, &w);
        /* The same words with the language's stop words taken out: the stop
         * word rule (and only it: the other thresholds relaxed) drops it. */
        char *kept[256];
        size_t n_kept = 0;
        for (size_t i = 0; i < w.n; i++)
            if (!is_stop(q, w.v[i])) kept[n_kept++] = w.v[i];
        WF_CHECK_TRUE(n_kept < w.n);
        char *no_stop = join_lines(kept, n_kept, 10, 1);
        wf_prep_rules relaxed = *q;
        relaxed.min_words = 10;
        WF_CHECK_EQ(check(&relaxed, no_stop, NULL), R_Q_STOP);
        free(no_stop);

        /* Keyword stuffing: the content words (4 letters or more, no stop
         * words) again and again, in lines that look like sentences. */
        char *keys[256];
        size_t n_keys = 0;
        for (size_t i = 0; i < n_kept && n_keys < 12; i++) {
            char *k = kept[i];
            size_t kn = strlen(k);
            while (kn && strchr(".,;:!?'\"", k[kn - 1])) k[--kn] = '\0';
            size_t letters = 0;
            for (size_t b = 0; b < kn; b++) letters += ((unsigned char)k[b] & 0xC0) != 0x80;
            if (letters >= 4) keys[n_keys++] = k;
        }
        WF_CHECK_TRUE(n_keys >= 8);
        char *stuffed_words[96];
        for (size_t i = 0; i < 96; i++) stuffed_words[i] = keys[(i * 5 + i / n_keys) % n_keys];
        char *stuffed = join_lines(stuffed_words, 96, 8, 1);
        rc = check(q, stuffed, NULL);
        if (rc == R_NONE) wf_test_fail(__FILE__, __LINE__, "%s keyword stuffing kept:\n%s", lang, stuffed);
        free(stuffed);
        words_free(&w);

        /* Scrambled letters: no stop words left. */
        char *gib = gibberish(text);
        rc = check(q, gib, NULL);
        if (rc != R_Q_STOP) wf_test_fail(__FILE__, __LINE__, "%s gibberish: %s\n%s", lang, wf__prep_reason_name(rc), gib);
        free(gib);

        /* Shuffled words (a fixed shuffle), re-wrapped: lines no longer end
         * in sentences. */
        words_of(text, &w);
        uint64_t x = 12345;
        for (size_t i = w.n - 1; i > 0; i--) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t j = (size_t)(x >> 33) % (i + 1);
            char *t = w.v[i];
            w.v[i] = w.v[j];
            w.v[j] = t;
        }
        char *shuffled = join_lines(w.v, w.n, 9, 0);
        rc = check(q, shuffled, NULL);
        if (rc == R_NONE) wf_test_fail(__FILE__, __LINE__, "%s shuffled kept:\n%s", lang, shuffled);
        free(shuffled);
        words_free(&w);
    }

    /* Chinese and Japanese: no spaces between words, so the word rules are
     * skipped; the others still apply. The English rules would drop them. */
    const char *cjk[][2] = {{"zh", ZH}, {"zh-Hant", ZH}, {"ja", JA}};
    for (size_t i = 0; i < 3; i++) {
        const prep_rule_set *set = wf__prep_rules_find(&rs, cjk[i][0]);
        WF_CHECK_STREQ(set->name, "no_spaces");
        WF_CHECK_EQ(set->r.word_rules, 0);
        uint64_t rm;
        WF_CHECK_EQ(check(&set->r, cjk[i][1], &rm), R_NONE);
        WF_CHECK_EQ(rm, 0); /* lines ending in 。 are sentences */
        WF_CHECK_TRUE(check(en, cjk[i][1], NULL) != R_NONE);
        char buf[4096];
        snprintf(buf, sizeof buf, "%s\n菜单首页关于我们\n%s", cjk[i][1], "版权所有。");
        WF_CHECK_EQ(check(&set->r, buf, &rm), R_NONE); /* C4's line rule removes the menu */
        WF_CHECK_EQ(rm, 1);
        char *rep = repeat_lines("这是一个安静的地方，有着悠久的历史。", 6);
        WF_CHECK_EQ(check(&set->r, rep, NULL), R_Q_DUP_LINES);
        free(rep);
        snprintf(buf, sizeof buf, "%s\nlorem ipsum。", cjk[i][1]);
        WF_CHECK_EQ(check(&set->r, buf, NULL), R_Q_LOREM);
        WF_CHECK_EQ(check(&set->r, "一句话。两句话。", NULL), R_Q_SENTENCES);
    }
    /* Thai and Lao mark sentences with spaces: C4's punctuation rules off. */
    const prep_rule_set *th = wf__prep_rules_find(&rs, "th");
    WF_CHECK_STREQ(th->name, "th");
    WF_CHECK_TRUE(!th->r.word_rules && !th->r.c4_terminal_punct && th->r.c4_min_sentences == 0);

    /* A language with no rule set of its own (Swedish), and langid off
     * (und): the default rule set, word rules unchecked. */
    const prep_rule_set *sv = wf__prep_rules_find(&rs, "sv"), *und = wf__prep_rules_find(&rs, "und");
    WF_CHECK_STREQ(sv->name, "default");
    WF_CHECK_TRUE(und == sv && !sv->r.word_rules);
    WF_CHECK_EQ(check(&sv->r, SV, NULL), R_NONE);
    WF_CHECK_EQ(check(en, SV, NULL), R_Q_STOP);
    char *rep = repeat_lines("Det är en lugn plats med en lång historia.", 6);
    WF_CHECK_EQ(check(&sv->r, rep, NULL), R_Q_DUP_LINES); /* the other rules still apply */
    free(rep);
    wf__prep_rules_free(&rs);
    wf_prep_config_free(&cfg);
}

/* The config: [quality] for every language, [quality.<lang>] for one. */
static wf_status parse_prep(wf_prep_config *c, int argc, const char **argv) {
    memset(c, 0, sizeof *c);
    wf_strs pos = {0};
    int help = 0;
    char *args[16];
    WF_CHECK_TRUE(argc < 16);
    for (int i = 0; i < argc; i++) args[i] = (char *)argv[i];
    args[argc] = (char *)"input.txt";
    wf_status s = wf_opts_parse(wf_prep_spec(), c, argc + 1, args, &pos, &help);
    wf_opts_free_positional(&pos);
    if (s == WF_OK) s = wf_prep_config_validate(c);
    return s;
}

WF_TEST(quality_rules_config_per_language) {
    const char *de = PROSE[0].text;
    wf_prep_config c;
    prep_rule_sets rs;
    const char *a1[] = {"--output=o", "--quality.de.min_stop_words=30", "--quality.zh.word_rules",
                        "--quality.sv.stop_words=OCH,Är,det", "--quality.th.c4_terminal_punct=true",
                        "--quality.default.min_words=7"};
    WF_CHECK_OK(parse_prep(&c, 6, a1));
    WF_CHECK_OK(wf__prep_rules_build(&c, &rs));
    const prep_rule_set *set = wf__prep_rules_find(&rs, "de");
    WF_CHECK_EQ(set->r.min_stop_words, 30);
    WF_CHECK_EQ(check(&set->r, de, NULL), R_Q_STOP);
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "fr")->r.min_stop_words, 2); /* only German */
    set = wf__prep_rules_find(&rs, "zh");
    WF_CHECK_STREQ(set->name, "zh"); /* settings of its own: named after the language */
    WF_CHECK_EQ(set->r.word_rules, 1);
    WF_CHECK_TRUE(check(&set->r, ZH, NULL) != R_NONE); /* the word rules drop Chinese */
    WF_CHECK_STREQ(wf__prep_rules_find(&rs, "ja")->name, "no_spaces");
    set = wf__prep_rules_find(&rs, "sv");
    WF_CHECK_STREQ(set->name, "sv");
    WF_CHECK_EQ(set->r.word_rules, 1); /* a language given a table: word rules on */
    WF_CHECK_EQ(set->r.stop_words.n, 3);
    WF_CHECK_STREQ(set->r.stop_words.items[1], "är"); /* lower case */
    WF_CHECK_EQ(check(&set->r, SV, NULL), R_NONE);
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "th")->r.c4_terminal_punct, 1);
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "th")->r.c4_min_sentences, 0);
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "ko")->r.min_words, 7); /* via default */
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "en")->r.min_words, 50);
    wf__prep_rules_free(&rs);
    wf_prep_config_free(&c);

    /* [quality] applies to every language; the written config reads back. */
    const char *path = wf_test_path("p.toml");
    const char *toml = "output = \"o\"\n[quality]\nmin_words = 500\n[quality.de]\nstop_words = [\"der\", \"die\"]\n"
                       "[quality.\"zh-Hant\"]\nmin_sentences_typo = 1\n";
    wf_test_write_file(path, toml, strlen(toml));
    char arg[700];
    snprintf(arg, sizeof arg, "--config=%s", path);
    const char *a2[] = {arg};
    WF_CHECK_ERR(parse_prep(&c, 1, a2), WF_ERR_CONFIG, "unknown key 'quality.zh-Hant.min_sentences_typo'");
    wf_prep_config_free(&c);
    toml = "output = \"o\"\n[quality]\nmin_words = 500\n[quality.de]\nstop_words = [\"der\", \"die\"]\n";
    wf_test_write_file(path, toml, strlen(toml));
    WF_CHECK_OK(parse_prep(&c, 1, a2));
    WF_CHECK_OK(wf__prep_rules_build(&c, &rs));
    WF_CHECK_EQ(check(&wf__prep_rules_find(&rs, "de")->r, de, NULL), R_Q_MIN_WORDS);
    WF_CHECK_EQ(check(&wf__prep_rules_find(&rs, "ja")->r, JA, NULL), R_NONE); /* no words, no word rules */
    WF_CHECK_EQ(wf__prep_rules_find(&rs, "de")->r.stop_words.n, 2);
    wf__prep_rules_free(&rs);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    wf_opts_write_toml(wf_prep_spec(), &c, f);
    fclose(f);
    WF_CHECK_TRUE(strstr(text, "quality.de.stop_words = [\"der\", \"die\"]\n") != NULL);
    WF_CHECK_TRUE(strstr(text, "quality.min_words = 500\n") != NULL);
    free(text);
    wf_prep_config_free(&c);

    /* Mistakes are named. */
    const char *b1[] = {"--output=o", "--quality.german.min_words=3"};
    WF_CHECK_ERR(parse_prep(&c, 2, b1), WF_ERR_CONFIG, "quality.german: 'german' is not a language code");
    wf_prep_config_free(&c);
    const char *b2[] = {"--output=o", "--quality.de.min_words=20", "--quality.de.max_words=10"};
    WF_CHECK_ERR(parse_prep(&c, 3, b2), WF_ERR_CONFIG, "quality.de: min_words = 20 is above max_words = 10");
    wf_prep_config_free(&c);
    const char *b3[] = {"--output=o", "--quality.stop_words=the,of"};
    WF_CHECK_ERR(parse_prep(&c, 2, b3), WF_ERR_CONFIG, "did you mean 'quality.<lang>.stop_words'?");
    wf_prep_config_free(&c);
    const char *b4[] = {"--output=o", "--quality.fr.max_dup_5gram=2"};
    WF_CHECK_ERR(parse_prep(&c, 2, b4), WF_ERR_RANGE, "key 'quality.fr.max_dup_5gram' = 2 is out of range");
    wf_prep_config_free(&c);
    const char *b5[] = {"--output=o", "--quality.min_words=20", "--quality.max_words=10"};
    WF_CHECK_ERR(parse_prep(&c, 3, b5), WF_ERR_CONFIG, "quality: min_words = 20 is above max_words = 10");
    wf_prep_config_free(&c);
}

WF_TEST(config_defaults_and_checks) {
    wf_prep_config c = defaults();
    WF_CHECK_EQ(c.rules.min_words, 50);
    WF_CHECK_EQ(c.rules.stop_words.n, 0); /* stop words are per language */
    WF_CHECK_NEAR(c.rules.max_dup_ngram[5], 0.10, 1e-12);
    WF_CHECK_ERR(wf_prep_config_validate(&c), WF_ERR_CONFIG, "output");
    c.output = strdup("out");
    WF_CHECK_OK(wf_prep_config_validate(&c));
    free(c.dedup_unit);
    c.dedup_unit = strdup("sentence");
    WF_CHECK_ERR(wf_prep_config_validate(&c), WF_ERR_CONFIG, "dedup.unit");
    free(c.dedup_unit);
    c.dedup_unit = strdup("line");
    c.ppl_head_max = 10;
    c.ppl_middle_max = 5;
    WF_CHECK_ERR(wf_prep_config_validate(&c), WF_ERR_CONFIG, "perplexity.head_max");
    wf_prep_config_free(&c);
}
