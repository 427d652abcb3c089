/* Throughput of each stage of `weft prep` on its own, one thread, on the
 * documents of real inputs: HTML to text (gumbo), normalization (utf8proc
 * NFC and line cleanup), the dedup normalization and hashing of
 * paragraphs, language id (CLD2), the quality rules (C4 + Gopher) and the
 * MinHash signature with its band keys (on words, and on characters as
 * for the languages written without spaces). Each stage is timed over the whole
 * corpus `repeat` times and the best time is kept; MB/s is measured on the
 * bytes the stage takes in (HTML for extraction, text for the rest).
 *
 *   build/bench/prep_bench [--repeat N] [--dump-text FILE] [--dump-html DIR] INPUT...
 *
 * --dump-text writes the extracted, normalized texts as JSONL and
 * --dump-html the HTML bodies as files, so that bench/prep_bench.py can
 * give the peers (trafilatura, datatrove) exactly the same documents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"
#include "weft/json.h"
#include "weft/fileio.h"
#include "weft/thread.h"

typedef struct {
    wf_buf *v;
    size_t n, cap;
    size_t bytes;
} buflist;

static void push(buflist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) exit(1);
    }
    memset(&l->v[l->n], 0, sizeof l->v[l->n]);
    if (wf_buf_append(&l->v[l->n], s, n) != WF_OK) exit(1);
    l->n++;
    l->bytes += n;
}

/* A stage that measured nothing (no repeat, or every one failed) is an
 * error, never a figure. */
static void report(const char *stage, size_t bytes, double best, size_t docs) {
    if (!(best < 1e30)) {
        fprintf(stderr, "prep_bench: %s: nothing was measured\n", stage);
        exit(1);
    }
    printf("%-22s %8.2f MB %8zu docs %9.4f s %9.1f MB/s\n", stage, bytes / 1e6, docs, best, bytes / 1e6 / best);
}

int main(int argc, char **argv) {
    int repeat = 3;
    const char *dump_text = NULL, *dump_html = NULL;
    int first = 1;
    while (first < argc && strncmp(argv[first], "--", 2) == 0) {
        if (strcmp(argv[first], "--repeat") == 0 && first + 1 < argc) repeat = atoi(argv[++first]);
        else if (strcmp(argv[first], "--dump-text") == 0 && first + 1 < argc) dump_text = argv[++first];
        else if (strcmp(argv[first], "--dump-html") == 0 && first + 1 < argc) dump_html = argv[++first];
        else break;
        first++;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: prep_bench [--repeat N] [--dump-text FILE] [--dump-html DIR] INPUT...\n");
        return 2;
    }
    wf_prep_config c;
    if (wf_prep_config_default(&c) != WF_OK) return 1;

    /* The documents: HTML bodies of HTTP responses, and texts. */
    buflist html = {0}, texts = {0};
    double t_read = 0;
    size_t read_bytes = 0;
    for (int i = first; i < argc; i++) {
        prep_reader *r;
        if (wf__prep_reader_open(&r, argv[i], &c) != WF_OK) {
            fprintf(stderr, "prep_bench: %s\n", wf_error_msg());
            return 1;
        }
        double t0 = wf_time_now();
        for (;;) {
            prep_record rec;
            int eof;
            if (wf__prep_reader_next(r, &rec, &eof) != WF_OK || eof) break;
            if (rec.drop != R_NONE) continue;
            read_bytes += rec.len;
            if (rec.kind == REC_HTTP) {
                wf_buf body = {0};
                int is_html;
                char cs[32];
                if (wf__prep_http_parse(rec.data, rec.len, 64 << 20, &body, &is_html, cs) == R_NONE && is_html)
                    push(&html, body.data, body.len);
                wf_buf_free(&body);
            } else if (rec.kind == REC_HTML) {
                push(&html, rec.data, rec.len);
            } else {
                push(&texts, rec.data, rec.len);
            }
        }
        t_read += wf_time_now() - t0;
        wf__prep_reader_close(r);
    }
    printf("prep_bench: %zu HTML pages (%.2f MB), %zu text records, %d repeats, 1 thread\n\n", html.n,
           html.bytes / 1e6, texts.n, repeat);
    report("read (decompress+parse)", read_bytes, t_read, html.n + texts.n);

    /* extract */
    wf_buf out = {0};
    double best = 1e30;
    for (int k = 0; k < repeat; k++) {
        double t0 = wf_time_now();
        for (size_t i = 0; i < html.n; i++)
            if (wf_html_to_text(html.v[i].data, html.v[i].len, &out) != WF_OK) {
                fprintf(stderr, "prep_bench: extract: %s\n", wf_error_msg());
                return 1;
            }
        double dt = wf_time_now() - t0;
        if (dt < best) best = dt;
    }
    if (html.n) report("extract (gumbo)", html.bytes, best, html.n);
    for (size_t i = 0; i < html.n; i++) {
        wf_html_to_text(html.v[i].data, html.v[i].len, &out);
        push(&texts, out.data, out.len);
    }

    /* normalize */
    wf_normalize_opts no = {1, 1, 0, 0.01};
    buflist norm = {0};
    best = 1e30;
    for (int k = 0; k < repeat; k++) {
        double t0 = wf_time_now();
        int rep;
        for (size_t i = 0; i < texts.n; i++) wf_text_normalize(texts.v[i].data, texts.v[i].len, &no, &out, &rep);
        double dt = wf_time_now() - t0;
        if (dt < best) best = dt;
    }
    report("normalize (NFC+lines)", texts.bytes, best, texts.n);
    for (size_t i = 0; i < texts.n; i++) {
        int rep;
        if (wf_text_normalize(texts.v[i].data, texts.v[i].len, &no, &out, &rep) == WF_NORM_OK)
            push(&norm, out.data, out.len);
    }

    /* dedup: normalize and hash each line */
    best = 1e30;
    uint64_t sink = 0;
    for (int k = 0; k < repeat; k++) {
        double t0 = wf_time_now();
        for (size_t i = 0; i < norm.n; i++) {
            const char *t = norm.v[i].data;
            size_t n = norm.v[i].len, a = 0;
            while (a < n) {
                const char *nl = memchr(t + a, '\n', n - a);
                size_t e = nl ? (size_t)(nl - t) : n;
                if (wf_dedup_normalize(t + a, e - a, &out) != WF_OK) {
                    fprintf(stderr, "prep_bench: dedup: %s\n", wf_error_msg());
                    return 1;
                }
                sink += wf_hash64(out.data, out.len);
                a = e + 1;
            }
        }
        double dt = wf_time_now() - t0;
        if (dt < best) best = dt;
    }
    report("dedup (normalize+hash)", norm.bytes, best, norm.n);

    /* langid */
    best = 1e30;
    for (int k = 0; k < repeat; k++) {
        double t0 = wf_time_now();
        for (size_t i = 0; i < norm.n; i++) {
            char code[16];
            double conf;
            int rel;
            wf_langid_detect(norm.v[i].data, norm.v[i].len, code, &conf, &rel);
            sink += (uint64_t)code[0];
        }
        double dt = wf_time_now() - t0;
        if (dt < best) best = dt;
    }
    report("langid (CLD2)", norm.bytes, best, norm.n);

    /* quality: C4 + Gopher, all rules evaluated (they stop at the first
     * failure, so pass rates matter: report how many pass), with the
     * English rule set (the documents are English) */
    prep_rule_sets rule_sets;
    if (wf__prep_rules_build(&c, &rule_sets) != WF_OK) return 1;
    const wf_prep_rules *en = &wf__prep_rules_find(&rule_sets, "en")->r;
    best = 1e30;
    size_t kept = 0;
    for (int k = 0; k < repeat; k++) {
        double t0 = wf_time_now();
        kept = 0;
        for (size_t i = 0; i < norm.n; i++) {
            out.len = 0;
            wf_buf_append(&out, norm.v[i].data, norm.v[i].len);
            uint64_t rm;
            kept += wf__prep_quality(en, &out, &rm) == R_NONE;
        }
        double dt = wf_time_now() - t0;
        if (dt < best) best = dt;
    }
    report("quality (C4+Gopher)", norm.bytes, best, norm.n);
    wf__prep_rules_free(&rule_sets);
    printf("%-22s %zu of %zu documents pass\n", "", kept, norm.n);

    /* minhash */
    int H = (int)(c.mh_bands * c.mh_rows);
    uint64_t *sig = malloc((size_t)H * sizeof *sig), keys[512];
    /* On words, then on character 5-grams as for the languages written
     * without spaces (minhash.char_languages): on CJK text a shingle every
     * 3 bytes, on English text one every byte. */
    static const struct {
        const char *name;
        size_t (*sign)(const char *, size_t, int, int, uint64_t, uint64_t *);
    } sigs[] = {{"minhash (14x8)", wf_minhash_signature}, {"minhash-chars (14x8)", wf_minhash_signature_chars}};
    for (size_t f = 0; f < sizeof sigs / sizeof sigs[0]; f++) {
        int ngram = (int)(f == 0 ? c.mh_ngram : c.mh_char_ngram);
        best = 1e30;
        for (int k = 0; k < repeat; k++) {
            double t0 = wf_time_now();
            for (size_t i = 0; i < norm.n; i++) {
                if (sigs[f].sign(norm.v[i].data, norm.v[i].len, ngram, H, 1, sig)) {
                    wf__prep_minhash_bands(sig, (int)c.mh_bands, (int)c.mh_rows, keys);
                    sink += keys[0];
                }
            }
            double dt = wf_time_now() - t0;
            if (dt < best) best = dt;
        }
        report(sigs[f].name, norm.bytes, best, norm.n);
    }

    if (dump_text) {
        FILE *f = fopen(dump_text, "wb");
        for (size_t i = 0; f && i < norm.n; i++) {
            out.len = 0;
            wf_buf_append(&out, "{\"text\":", 8);
            wf_buf_json_str(&out, norm.v[i].data, norm.v[i].len);
            wf_buf_append(&out, "}\n", 2);
            fwrite(out.data, 1, out.len, f);
        }
        if (f) fclose(f);
    }
    if (dump_html) {
        wf_mkdirs(dump_html);
        for (size_t i = 0; i < html.n; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%05zu.html", dump_html, i);
            wf_file_write_atomic(p, html.v[i].data, html.v[i].len);
        }
    }
    fprintf(stderr, "(checksum %llu)\n", (unsigned long long)(sink & 0xff));
    wf_buf_free(&out);
    free(sig);
    for (size_t i = 0; i < html.n; i++) wf_buf_free(&html.v[i]);
    for (size_t i = 0; i < texts.n; i++) wf_buf_free(&texts.v[i]);
    for (size_t i = 0; i < norm.n; i++) wf_buf_free(&norm.v[i]);
    free(html.v);
    free(texts.v);
    free(norm.v);
    wf_prep_config_free(&c);
    return 0;
}
