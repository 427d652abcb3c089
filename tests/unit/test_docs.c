/* Unit tests for the document reader (src/data/docs.c): text modes, JSONL,
 * compressed inputs, and the bad inputs (malformed JSON, missing field,
 * truncated gzip/zstd, missing file). */
#include <zlib.h>
#include <zstd.h>

#include "harness.h"
#include "weft/docs.h"
#include "weft/fileio.h"

/* Reads every document of the inputs and joins them as "doc|doc|...". */
static wf_status read_all(const char *const *paths, size_t n, wf_text_doc_mode mode, const char *field,
                          char *out, size_t cap, uint64_t *count) {
    wf_docs *d;
    wf_docs_opts o = {mode, field};
    WF_TRY(wf_docs_open(&d, paths, n, &o));
    size_t at = 0;
    out[0] = '\0';
    wf_status s;
    for (;;) {
        const char *t;
        size_t len;
        s = wf_docs_next(d, &t, &len);
        if (s != WF_OK || !t) break;
        if (at + len + 2 >= cap) break;
        memcpy(out + at, t, len);
        at += len;
        out[at++] = '|';
        out[at] = '\0';
    }
    if (count) *count = wf_docs_count(d);
    if (s == WF_OK) WF_CHECK_EQ(wf_docs_progress(d), wf_docs_total(d));
    wf_docs_destroy(d);
    return s;
}

WF_TEST(docs_text_modes) {
    const char *text = "para one\nline two\n\n\n  \npara two\r\nend";
    const char *a = wf_test_path("a.txt"), *b = wf_test_path("empty.txt");
    wf_test_write_file(a, text, strlen(text));
    wf_test_write_file(b, "", 0);
    const char *paths[] = {a, b, a};
    char out[4096];
    uint64_t n;
    WF_CHECK_OK(read_all(paths, 3, WF_TEXT_DOC_FILE, NULL, out, sizeof out, &n));
    WF_CHECK_EQ(n, 2); /* the empty file is no document */
    char expect[512];
    snprintf(expect, sizeof expect, "%s|%s|", text, text);
    WF_CHECK_STREQ(out, expect);
    WF_CHECK_OK(read_all(paths, 1, WF_TEXT_DOC_LINE, NULL, out, sizeof out, &n));
    WF_CHECK_STREQ(out, "para one|line two|para two|end|");
    WF_CHECK_OK(read_all(paths, 1, WF_TEXT_DOC_PARAGRAPH, NULL, out, sizeof out, &n));
    WF_CHECK_STREQ(out, "para one\nline two|para two\nend|");
}

WF_TEST(docs_invalid_utf8_passes_through) {
    const char raw[] = "ok \xff\xfe bytes\n\xc3(";
    const char *a = wf_test_path("bin.txt");
    wf_test_write_file(a, raw, sizeof raw - 1);
    wf_docs *d;
    wf_docs_opts o = {WF_TEXT_DOC_FILE, NULL};
    WF_CHECK_OK(wf_docs_open(&d, &a, 1, &o));
    const char *t;
    size_t len;
    WF_CHECK_OK(wf_docs_next(d, &t, &len));
    WF_CHECK_EQ(len, sizeof raw - 1);
    WF_CHECK_TRUE(memcmp(t, raw, len) == 0);
    wf_docs_destroy(d);
}

WF_TEST(docs_jsonl) {
    const char *j = "{\"text\": \"first\\ndoc\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"caf\\u00e9\"}\n"
                    "{\"text\": \"\"}\n{\"body\": \"other\", \"text\": \"x\"}";
    const char *a = wf_test_path("d.jsonl");
    wf_test_write_file(a, j, strlen(j));
    char out[1024];
    uint64_t n;
    const char *paths[] = {a};
    WF_CHECK_OK(read_all(paths, 1, WF_TEXT_DOC_FILE, NULL, out, sizeof out, &n));
    WF_CHECK_STREQ(out, "first\ndoc|caf\xc3\xa9|x|");
    WF_CHECK_EQ(n, 3);
    const char *k = "{\"body\": \"b1\"}\n{\"body\": \"b2\"}\n";
    const char *b = wf_test_path("e.jsonl");
    wf_test_write_file(b, k, strlen(k));
    paths[0] = b;
    WF_CHECK_OK(read_all(paths, 1, WF_TEXT_DOC_FILE, "body", out, sizeof out, &n));
    WF_CHECK_STREQ(out, "b1|b2|");
}

WF_TEST(docs_jsonl_errors_name_file_and_line) {
    const char *a = wf_test_path("bad.jsonl");
    const char *j = "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n";
    wf_test_write_file(a, j, strlen(j));
    const char *paths[] = {a};
    char out[1024];
    WF_CHECK_ERR(read_all(paths, 1, WF_TEXT_DOC_FILE, NULL, out, sizeof out, NULL), WF_ERR_FORMAT, "bad.jsonl:2: malformed JSON");
    j = "{\"text\": \"ok\"}\n{\"title\": \"x\"}\n";
    wf_test_write_file(a, j, strlen(j));
    WF_CHECK_ERR(read_all(paths, 1, WF_TEXT_DOC_FILE, NULL, out, sizeof out, NULL), WF_ERR_FORMAT, "bad.jsonl:2: no field \"text\"");
    j = "{\"text\": 5}\n";
    wf_test_write_file(a, j, strlen(j));
    WF_CHECK_ERR(read_all(paths, 1, WF_TEXT_DOC_FILE, NULL, out, sizeof out, NULL), WF_ERR_FORMAT, "bad.jsonl:1: field \"text\" is not a string");
    j = "[1, 2]\n";
    wf_test_write_file(a, j, strlen(j));
    WF_CHECK_ERR(read_all(paths, 1, WF_TEXT_DOC_FILE, NULL, out, sizeof out, NULL), WF_ERR_FORMAT, "expected a JSON object");
}

WF_TEST(docs_missing_and_directory_inputs) {
    const char *paths[] = {"/nonexistent/in.txt"};
    wf_docs *d;
    WF_CHECK_ERR(wf_docs_open(&d, paths, 1, NULL), WF_ERR_NOTFOUND, "/nonexistent/in.txt");
    paths[0] = wf_test_tmpdir();
    WF_CHECK_ERR(wf_docs_open(&d, paths, 1, NULL), WF_ERR_INVALID, "is a directory");
    WF_CHECK_ERR(wf_docs_open(&d, paths, 0, NULL), WF_ERR_EMPTY, "no input files");
}

static void write_gz(const char *path, const char *text, size_t n) {
    gzFile g = gzopen(path, "wb");
    WF_CHECK_TRUE(g != NULL);
    WF_CHECK_EQ(gzwrite(g, text, (unsigned)n), (long long)n);
    gzclose(g);
}

WF_TEST(docs_compressed_inputs) {
    /* a large text so the 1 MiB read window is crossed several times */
    size_t n = 3u << 20;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++) text[i] = (i % 61 == 60) ? '\n' : (char)('a' + i % 26);
    text[n] = '\0';
    const char *gz = wf_test_path("big.txt.gz"), *zs = wf_test_path("big.txt.zst");
    write_gz(gz, text, n);
    size_t bound = ZSTD_compressBound(n);
    char *z = malloc(bound);
    size_t zn = ZSTD_compress(z, bound, text, n, 3);
    WF_CHECK_TRUE(!ZSTD_isError(zn));
    wf_test_write_file(zs, z, zn);
    const char *paths[] = {gz, zs};
    for (int k = 0; k < 2; k++) {
        wf_docs *d;
        wf_docs_opts o = {WF_TEXT_DOC_FILE, NULL};
        WF_CHECK_OK(wf_docs_open(&d, &paths[k], 1, &o));
        const char *t;
        size_t len;
        WF_CHECK_OK(wf_docs_next(d, &t, &len));
        WF_CHECK_EQ(len, n);
        WF_CHECK_TRUE(memcmp(t, text, n) == 0);
        WF_CHECK_OK(wf_docs_next(d, &t, &len));
        WF_CHECK_TRUE(t == NULL);
        wf_docs_destroy(d);
        /* line mode over the same input: 3 MiB / 61 lines */
        o.text_mode = WF_TEXT_DOC_LINE;
        WF_CHECK_OK(wf_docs_open(&d, &paths[k], 1, &o));
        uint64_t lines = 0;
        for (;;) {
            WF_CHECK_OK(wf_docs_next(d, &t, &len));
            if (!t) break;
            lines++;
        }
        WF_CHECK_EQ(lines, (n + 60) / 61);
        wf_docs_destroy(d);
    }
    /* truncated: both must fail, naming the file */
    char *g;
    size_t gn;
    WF_CHECK_OK(wf_file_read(gz, &g, &gn));
    wf_test_write_file(gz, g, gn / 2);
    wf_test_write_file(zs, z, zn / 2);
    for (int k = 0; k < 2; k++) {
        char *out = malloc(n + 16);
        WF_CHECK_ERR(read_all(&paths[k], 1, WF_TEXT_DOC_FILE, NULL, out, n + 16, NULL), WF_ERR_FORMAT,
                     k ? "big.txt.zst" : "big.txt.gz");
        free(out);
    }
    free(g);
    free(z);
    free(text);
}
