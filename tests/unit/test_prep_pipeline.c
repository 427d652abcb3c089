/* Unit tests for the whole web-text pipeline (wf_prep_run): paragraph
 * dedup across inputs (the first occurrence wins), near-duplicate removal
 * (the first document of a cluster is kept), per-language outputs, output
 * that does not depend on the thread count, resume after a SIGKILL in the
 * middle of an input (shards rolled over and all) giving the same bytes as
 * a run that never stopped, refusing another run's directory, and bad
 * inputs that are counted instead of failing the run. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "harness.h"
#include "weft/json.h"
#include "prep/prep_impl.h"
#include "weft/fileio.h"
#include "weft/rng.h"

static void set_str(char **field, const char *v) {
    free(*field);
    *field = strdup(v);
}

static wf_prep_config config(const char *out) {
    wf_prep_config c;
    WF_CHECK_OK(wf_prep_config_default(&c));
    set_str(&c.output, out);
    return c;
}

/* Deterministic English prose: `lines` lines of two sentences each. */
static void prose(wf_buf *b, uint64_t seed, int lines) {
    static const char *nouns[] = {"river", "teacher", "garden", "city", "window", "letter", "market", "doctor",
                                  "village", "morning", "painter", "bridge", "forest", "kitchen", "journey",
                                  "harbour", "student", "library", "mountain", "evening", "farmer", "question"};
    static const char *verbs[] = {"watched", "found", "carried", "remembered", "opened", "followed", "described",
                                  "visited", "painted", "answered", "crossed", "counted"};
    static const char *adjs[] = {"old", "quiet", "bright", "small", "distant", "careful", "green", "cold",
                                 "famous", "narrow", "gentle", "busy"};
    uint64_t ctr = 0;
    /* The word kinds of the template below, in order. */
    static const int kinds[12] = {2, 0, 1, 2, 0, 0, 0, 2, 0, 1, 0, 0};
    const char *const *lists[3] = {nouns, verbs, adjs};
    const size_t sizes[3] = {sizeof nouns / sizeof *nouns, sizeof verbs / sizeof *verbs, sizeof adjs / sizeof *adjs};
    for (int l = 0; l < lines; l++) {
        const char *w[12];
        for (int k = 0; k < 12; k++) w[k] = lists[kinds[k]][wf_rng_at(seed, 7, ctr++) % sizes[kinds[k]]];
        char line[512];
        snprintf(line, sizeof line,
                 "The %s %s %s the %s %s near the %s, and the %s was with them. "
                 "In the %s a %s %s %s the %s.\n",
                 w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11]);
        WF_CHECK_OK(wf_buf_append(b, line, strlen(line)));
    }
}

static void jsonl_add(wf_buf *file, const char *text, size_t len) {
    WF_CHECK_OK(wf_buf_append(file, "{\"text\":", 8));
    WF_CHECK_OK(wf_buf_json_str(file, text, len));
    WF_CHECK_OK(wf_buf_append(file, "}\n", 2));
}

/* Every document written under dir: "<lang>/<file>: text" lines, sorted
 * by shard file name, in file order. */
static void read_outputs(const char *dir, wf_buf *out, size_t *n_docs, size_t *n_shards) {
    out->len = 0;
    *n_docs = 0;
    *n_shards = 0;
    struct dirent **langs;
    int nl = scandir(dir, &langs, NULL, alphasort);
    WF_CHECK_TRUE(nl >= 0);
    for (int i = 0; i < nl; i++) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, langs[i]->d_name);
        if (langs[i]->d_name[0] == '.' || langs[i]->d_name[0] == '_' || !wf_path_is_dir(sub)) {
            free(langs[i]);
            continue;
        }
        struct dirent **files;
        int nf = scandir(sub, &files, NULL, alphasort);
        for (int k = 0; k < nf; k++) {
            const char *name = files[k]->d_name;
            size_t ln = strlen(name);
            if (ln > 10 && strcmp(name + ln - 10, ".jsonl.zst") == 0) {
                char path[2048];
                snprintf(path, sizeof path, "%s/%s", sub, name);
                char *data;
                size_t len;
                WF_CHECK_OK(wf_file_read(path, &data, &len));
                ZSTD_DCtx *d = ZSTD_createDCtx();
                ZSTD_inBuffer in = {data, len, 0};
                wf_buf plain = {0};
                while (in.pos < in.size) {
                    WF_CHECK_OK(wf_buf_reserve(&plain, 1 << 16));
                    ZSTD_outBuffer ob = {plain.data + plain.len, plain.cap - plain.len - 1, 0};
                    size_t r = ZSTD_decompressStream(d, &ob, &in);
                    WF_CHECK_TRUE(!ZSTD_isError(r));
                    plain.len += ob.pos;
                }
                ZSTD_freeDCtx(d);
                free(data);
                (*n_shards)++;
                size_t at = 0;
                while (at < plain.len) {
                    char *nlp = memchr(plain.data + at, '\n', plain.len - at);
                    WF_CHECK_TRUE(nlp != NULL);
                    json_error_t err;
                    json_t *j = json_loadb(plain.data + at, (size_t)(nlp - plain.data) - at, 0, &err);
                    if (!j) wf_test_fail(__FILE__, __LINE__, "%s: bad JSON line: %s", path, err.text);
                    const char *t = json_string_value(json_object_get(j, "text"));
                    const char *lang = json_string_value(json_object_get(j, "lang"));
                    WF_CHECK_TRUE(t && lang && strcmp(lang, langs[i]->d_name) == 0);
                    char head[64];
                    snprintf(head, sizeof head, "%s: ", lang);
                    WF_CHECK_OK(wf_buf_append(out, head, strlen(head)));
                    WF_CHECK_OK(wf_buf_append(out, t, strlen(t)));
                    WF_CHECK_OK(wf_buf_append(out, "\n---\n", 5));
                    (*n_docs)++;
                    json_decref(j);
                    at = (size_t)(nlp - plain.data) + 1;
                }
                wf_buf_free(&plain);
            } else {
                /* No .part file may be left behind after a finished run. */
                WF_CHECK_TRUE(strstr(name, ".part") == NULL);
            }
            free(files[k]);
        }
        free(files);
        free(langs[i]);
    }
    free(langs);
}

static json_t *stats_of(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/stats.json", dir);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    if (!j) wf_test_fail(__FILE__, __LINE__, "%s: %s", p, err.text);
    return j;
}

static long long stat_get(json_t *s, const char *stage, const char *group, const char *key) {
    json_t *st = json_object_get(json_object_get(s, "stages"), stage);
    json_t *v = group ? json_object_get(json_object_get(st, group), key) : json_object_get(st, key);
    if (json_is_object(v)) v = json_object_get(v, "docs");
    if (!json_is_integer(v)) wf_test_fail(__FILE__, __LINE__, "stats: no %s/%s/%s", stage, group ? group : "", key);
    return json_integer_value(v);
}

WF_TEST(dedup_first_occurrence_wins) {
    wf_buf a = {0}, b = {0}, doc = {0}, f1 = {0}, f2 = {0};
    const char *shared = "This shared paragraph appears in two different documents of the crawl, word for word.";
    /* input 1: A (one long paragraph, then the shared one), B */
    prose(&a, 1, 12);
    for (size_t i = 0; i + 1 < a.len; i++)
        if (a.data[i] == '\n') a.data[i] = ' ';
    WF_CHECK_OK(wf_buf_append(&a, shared, strlen(shared)));
    jsonl_add(&f1, a.data, a.len);
    prose(&b, 2, 12);
    jsonl_add(&f1, b.data, b.len);
    /* input 2: C (new text + the shared paragraph), D (A with one word
     * changed), E (B again: every line a duplicate) */
    prose(&doc, 3, 12);
    size_t c_len = doc.len - 1; /* what C should keep: its own lines, less the last newline */
    WF_CHECK_OK(wf_buf_append(&doc, shared, strlen(shared)));
    jsonl_add(&f2, doc.data, doc.len);
    /* D: A with one word changed, so that no paragraph of it repeats one
     * of A's exactly (the long one differs, the shared one is removed) but
     * its 5-gram Jaccard similarity to A is still above 0.95. */
    char *d = strdup(a.data);
    char *w = strstr(d + 100, " the ");
    memcpy(w, " one ", 5);
    jsonl_add(&f2, d, strlen(d));
    jsonl_add(&f2, b.data, b.len);
    const char *in1 = wf_test_path("1.jsonl"), *in2 = wf_test_path("2.jsonl");
    wf_test_write_file(in1, f1.data, f1.len);
    wf_test_write_file(in2, f2.data, f2.len);

    const char *out = wf_test_path("out");
    wf_prep_config c = config(out);
    c.quality = 0;
    c.threads = 2;
    const char *inputs[] = {in1, in2};
    WF_CHECK_OK(wf_prep_run(&c, inputs, 2));
    wf_buf got = {0};
    size_t n_docs, n_shards;
    read_outputs(out, &got, &n_docs, &n_shards);
    WF_CHECK_EQ(n_docs, 3);
    WF_CHECK_EQ(n_shards, 1);
    /* A whole, B whole, C without the shared paragraph. */
    wf_buf want = {0};
    WF_CHECK_OK(wf_buf_append(&want, "en: ", 4));
    WF_CHECK_OK(wf_buf_append(&want, a.data, a.len));
    WF_CHECK_OK(wf_buf_append(&want, "\n---\nen: ", 9));
    WF_CHECK_OK(wf_buf_append(&want, b.data, b.len - 1)); /* normalize trims the final newline */
    WF_CHECK_OK(wf_buf_append(&want, "\n---\nen: ", 9));
    WF_CHECK_OK(wf_buf_append(&want, doc.data, c_len));
    WF_CHECK_OK(wf_buf_append(&want, "\n---\n", 5));
    WF_CHECK_STREQ(got.data, want.data);

    json_t *s = stats_of(out);
    WF_CHECK_EQ(stat_get(s, "dedup", "dropped", "all_duplicate"), 1);
    /* B's 12 lines in E, the shared paragraph in C and in D */
    WF_CHECK_EQ(stat_get(s, "dedup", "counters", "units_removed"), 12 + 1 + 1);
    WF_CHECK_EQ(stat_get(s, "minhash", "dropped", "near_duplicate"), 1);
    WF_CHECK_EQ(stat_get(s, "output", NULL, "docs_in"), 3);
    WF_CHECK_EQ(stat_get(s, "read", NULL, "docs_in"), 5);
    json_decref(s);
    free(d);
    wf_buf_free(&a);
    wf_buf_free(&b);
    wf_buf_free(&doc);
    wf_buf_free(&f1);
    wf_buf_free(&f2);
    wf_buf_free(&got);
    wf_buf_free(&want);
    wf_prep_config_free(&c);
}

/* Three inputs of 150 documents each, many repeated or near-repeated,
 * some French. */
static void make_corpus(const char *paths[3]) {
    for (int f = 0; f < 3; f++) {
        wf_buf file = {0};
        for (int i = 0; i < 150; i++) {
            wf_buf doc = {0};
            uint64_t seed = (uint64_t)(f * 1000 + i);
            if (i % 7 == 3) seed = (uint64_t)i; /* the same document in every input */
            prose(&doc, seed, 6 + i % 9);
            if (i % 11 == 5) {
                const char *fr = "Le petit village se trouve au bord de la riviere, et les habitants y vivent "
                                 "tranquillement depuis des siecles avec leurs familles.\n";
                doc.len = 0;
                for (int k = 0; k < 4 + i % 3; k++) WF_CHECK_OK(wf_buf_append(&doc, fr, strlen(fr)));
                char tag[64];
                snprintf(tag, sizeof tag, "Le document numero %d de la serie %d est ici.", i, f);
                WF_CHECK_OK(wf_buf_append(&doc, tag, strlen(tag)));
            }
            jsonl_add(&file, doc.data, doc.len);
            wf_buf_free(&doc);
        }
        wf_test_write_file(paths[f], file.data, file.len);
        wf_buf_free(&file);
    }
}

static void remove_volatile(json_t *j) {
    /* Timings differ between runs; everything else must not. */
    json_object_del(j, "wall_seconds");
    json_object_del(j, "tasks"); /* and so do the numbers of tasks compared */
    json_t *steps = json_object_get(j, "steps");
    const char *sk;
    json_t *sv;
    json_object_foreach(steps, sk, sv) json_object_del(sv, "seconds");
    json_t *stages = json_object_get(j, "stages");
    const char *k;
    json_t *v;
    json_object_foreach(stages, k, v) {
        json_object_del(v, "seconds");
        json_object_del(v, "mb_per_s");
    }
}

static void check_same_output(const char *a, const char *b) {
    wf_buf ga = {0}, gb = {0};
    size_t na, nb, sa, sb;
    read_outputs(a, &ga, &na, &sa);
    read_outputs(b, &gb, &nb, &sb);
    WF_CHECK_EQ(na, nb);
    WF_CHECK_EQ(sa, sb);
    WF_CHECK_TRUE(ga.len == gb.len && memcmp(ga.data, gb.data, ga.len) == 0);
    /* And the shard files are the same bytes. */
    struct dirent **langs;
    int nl = scandir(a, &langs, NULL, alphasort);
    for (int i = 0; i < nl; i++) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", a, langs[i]->d_name);
        if (langs[i]->d_name[0] != '.' && langs[i]->d_name[0] != '_' && wf_path_is_dir(sub)) {
            struct dirent **files;
            int nf = scandir(sub, &files, NULL, alphasort);
            for (int k = 0; k < nf; k++) {
                if (files[k]->d_name[0] != '.') {
                    char pa[2048], pb[2048];
                    snprintf(pa, sizeof pa, "%s/%s", sub, files[k]->d_name);
                    snprintf(pb, sizeof pb, "%s/%s/%s", b, langs[i]->d_name, files[k]->d_name);
                    char *da, *db;
                    size_t la, lb;
                    WF_CHECK_OK(wf_file_read(pa, &da, &la));
                    WF_CHECK_OK(wf_file_read(pb, &db, &lb));
                    if (la != lb || memcmp(da, db, la) != 0)
                        wf_test_fail(__FILE__, __LINE__, "%s and %s differ", pa, pb);
                    free(da);
                    free(db);
                }
                free(files[k]);
            }
            free(files);
        }
        free(langs[i]);
    }
    free(langs);
    json_t *ja = stats_of(a), *jb = stats_of(b);
    remove_volatile(ja);
    remove_volatile(jb);
    char *ta = json_dumps(ja, JSON_SORT_KEYS), *tb = json_dumps(jb, JSON_SORT_KEYS);
    WF_CHECK_STREQ(ta, tb);
    free(ta);
    free(tb);
    json_decref(ja);
    json_decref(jb);
    wf_buf_free(&ga);
    wf_buf_free(&gb);
}

WF_TEST(same_output_for_any_thread_count) {
    const char *paths[3] = {wf_test_path("a.jsonl"), wf_test_path("b.jsonl"), wf_test_path("c.jsonl")};
    make_corpus(paths);
    const char *o1 = wf_test_path("t1"), *o2 = wf_test_path("t2"), *o3 = wf_test_path("t3");
    wf_prep_config c = config(o1);
    c.quality = 0; /* the generated prose is too short for Gopher */
    c.shard_mb = 0.05;
    c.threads = 1;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    set_str(&c.output, o2);
    c.threads = 2;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    set_str(&c.output, o3);
    c.threads = 5;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    check_same_output(o1, o2);
    check_same_output(o1, o3);
    /* Both languages came out, duplicates went, shards rolled. */
    json_t *s = stats_of(o2);
    json_t *langs = json_object_get(s, "languages");
    WF_CHECK_TRUE(json_object_get(langs, "en") && json_object_get(langs, "fr"));
    WF_CHECK_TRUE(stat_get(s, "dedup", "dropped", "all_duplicate") > 30);
    WF_CHECK_TRUE(json_integer_value(json_object_get(json_object_get(s, "output"), "shards")) > 3);
    json_decref(s);
    wf_prep_config_free(&c);
}

static int unit_done(const char *out, const char *step, int unit) {
    char p[1024];
    snprintf(p, sizeof p, "%s/_prep/done/%s.%06d", out, step, unit);
    return wf_path_exists(p);
}

/* Runs the config in a child that the test hook kills in the middle of
 * STEP's unit; checks that it was killed. */
static void crash_in(const wf_prep_config *c, const char *const *paths, size_t n, const char *where) {
    fflush(NULL);
    pid_t pid = fork();
    WF_CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        setenv("WEFT_PREP_CRASH", where, 1);
        wf_status s = wf_prep_run(c, paths, n);
        _exit(s == WF_OK ? 0 : 3);
    }
    int status;
    WF_CHECK_TRUE(waitpid(pid, &status, 0) == pid);
    WF_CHECK_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

WF_TEST(resume_after_sigkill_gives_the_same_output) {
    const char *paths[3] = {wf_test_path("a.jsonl"), wf_test_path("b.jsonl"), wf_test_path("c.jsonl")};
    make_corpus(paths);
    const char *full = wf_test_path("full"), *crashed = wf_test_path("crashed");
    wf_prep_config c = config(full);
    c.quality = 0;
    c.shard_mb = 0.05; /* shards roll over inside each input */
    c.threads = 2;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));

    set_str(&c.output, crashed);
    for (int k = 0; k < 3; k++) {
        /* Crash in the middle of input k's extraction (after 0, 1 or 2
         * finished ones), then again after resuming, then finish. */
        char where[32];
        snprintf(where, sizeof where, "extract:%d", k);
        crash_in(&c, paths, 3, where);
        WF_CHECK_TRUE(!unit_done(crashed, "extract", k));
        WF_CHECK_TRUE(k == 0 || unit_done(crashed, "extract", k - 1));
    }
    crash_in(&c, paths, 3, "output:1");
    WF_CHECK_TRUE(unit_done(crashed, "output", 0) && !unit_done(crashed, "output", 1));
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    check_same_output(full, crashed);

    /* A finished run is left alone; another config is refused; --force redoes. */
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    check_same_output(full, crashed);
    c.mh_bands = 10;
    WF_CHECK_ERR(wf_prep_run(&c, paths, 3), WF_ERR_CONFIG, "another config");
    c.force = 1;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    c.mh_bands = 14;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    check_same_output(full, crashed);

    /* One process that says it is task 1 of 3 does every unit (the others'
     * too, since nobody claims them): the same bytes. */
    const char *t3 = wf_test_path("t3");
    set_str(&c.output, t3);
    c.force = 0;
    c.tasks = 3;
    c.task = 1;
    WF_CHECK_OK(wf_prep_run(&c, paths, 3));
    check_same_output(full, t3);
    wf_prep_config_free(&c);
}

/* Many small inputs (one document each), a unit each: a crash in the
 * middle of the filter step redoes only the unit it hit, and the output is
 * still the same bytes. */
WF_TEST(many_small_inputs_resume_to_the_same_output) {
    enum { N = 40 };
    const char *paths[N];
    static char names[N][600];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s/doc%02d.txt", wf_test_tmpdir(), i);
        wf_buf doc = {0};
        prose(&doc, (uint64_t)(i % 29), 8 + i % 5); /* some files repeat others */
        wf_test_write_file(names[i], doc.data, doc.len);
        wf_buf_free(&doc);
        paths[i] = names[i];
    }
    const char *full = wf_test_path("full"), *crashed = wf_test_path("crashed");
    wf_prep_config c = config(full);
    c.quality = 0;
    c.shard_mb = 0.005;
    c.threads = 2;
    WF_CHECK_OK(wf_prep_run(&c, paths, N));
    set_str(&c.output, crashed);
    crash_in(&c, paths, N, "filter:23");
    for (int i = 0; i < N; i++) WF_CHECK_TRUE(unit_done(crashed, "extract", i));
    WF_CHECK_TRUE(unit_done(crashed, "filter", 22) && !unit_done(crashed, "filter", 23));
    WF_CHECK_OK(wf_prep_run(&c, paths, N));
    check_same_output(full, crashed);
    json_t *s1 = stats_of(full);
    WF_CHECK_TRUE(stat_get(s1, "dedup", "counters", "units_removed") >= 11 * 8);
    json_decref(s1);
    wf_prep_config_free(&c);
}

WF_TEST(bad_inputs_are_counted) {
    /* Binary junk, invalid UTF-8, a truncated gzip WARC, malformed JSONL,
     * an empty file: the run finishes and says what it dropped. */
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(wf_rng_at(5, 1, i) & 0xff);
    const char *bin = wf_test_path("junk.bin");
    wf_test_write_file(bin, junk, sizeof junk);
    wf_buf good = {0};
    prose(&good, 9, 8);
    wf_buf bad = {0};
    WF_CHECK_OK(wf_buf_append(&bad, good.data, good.len));
    WF_CHECK_OK(wf_buf_append(&bad, "caf\xe9 \xff\n", 7));
    const char *inv = wf_test_path("latin1.txt");
    wf_test_write_file(inv, bad.data, bad.len);
    const char *js = wf_test_path("bad.jsonl");
    const char *jt = "{\"text\": 5}\nnot json at all\n{\"text\": \"short but fine text here.\"}\n";
    wf_test_write_file(js, jt, strlen(jt));
    const char *empty = wf_test_path("empty.txt");
    wf_test_write_file(empty, "", 0);
    /* a WARC.gz cut in the middle */
    wf_buf w = {0};
    for (int i = 0; i < 50; i++) {
        wf_buf doc = {0};
        prose(&doc, 100 + (uint64_t)i, 5);
        char head[256];
        int n = snprintf(head, sizeof head, "WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: http://x/%d\r\n"
                                            "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n",
                         i, doc.len);
        WF_CHECK_OK(wf_buf_append(&w, head, (size_t)n));
        WF_CHECK_OK(wf_buf_append(&w, doc.data, doc.len));
        WF_CHECK_OK(wf_buf_append(&w, "\r\n\r\n", 4));
        wf_buf_free(&doc);
    }
    const char *gz = wf_test_path("cut.warc.wet.gz");
    gzFile g = gzopen(gz, "wb");
    gzwrite(g, w.data, (unsigned)w.len);
    gzclose(g);
    char *data;
    size_t len;
    WF_CHECK_OK(wf_file_read(gz, &data, &len));
    wf_test_write_file(gz, data, len * 2 / 3);
    free(data);

    const char *out = wf_test_path("out");
    wf_prep_config c = config(out);
    c.quality = 0;
    c.minhash = 0;
    c.dedup = 0;
    const char *inputs[] = {bin, inv, js, empty, gz};
    WF_CHECK_OK(wf_prep_run(&c, inputs, 5));
    json_t *s = stats_of(out);
    WF_CHECK_EQ(stat_get(s, "normalize", "dropped", "binary"), 1);
    WF_CHECK_EQ(stat_get(s, "normalize", "counters", "docs_utf8_repaired"), 1);
    WF_CHECK_EQ(stat_get(s, "read", "dropped", "bad_json"), 1);
    WF_CHECK_EQ(stat_get(s, "read", "dropped", "missing_field"), 1);
    WF_CHECK_EQ(stat_get(s, "read", "counters", "inputs_damaged"), 1);
    WF_CHECK_EQ(stat_get(s, "read", "counters", "inputs"), 5);
    WF_CHECK_TRUE(stat_get(s, "output", NULL, "docs_in") >= 3);
    json_decref(s);

    /* With invalid_utf8 = drop, the Latin-1 file goes instead. */
    set_str(&c.invalid_utf8, "drop");
    c.force = 1;
    WF_CHECK_OK(wf_prep_run(&c, inputs, 5));
    s = stats_of(out);
    WF_CHECK_EQ(stat_get(s, "normalize", "dropped", "invalid_utf8"), 1);
    json_decref(s);

    /* A missing input is an error that names it, before anything runs. */
    const char *missing[] = {inv, wf_test_path("nope.warc.gz")};
    WF_CHECK_ERR(wf_prep_run(&c, missing, 2), WF_ERR_NOTFOUND, "nope.warc.gz");
    wf_buf_free(&good);
    wf_buf_free(&bad);
    wf_buf_free(&w);
    wf_prep_config_free(&c);
}

/* The streaming reader of intermediate files (prep_inter.c) against the
 * whole-file one: the same documents for any read size (1 byte up), and a
 * damaged file refused, by the last read or, with verify_first, at open. */
WF_TEST(streamed_docs_match_the_whole_file) {
    const char *path = wf_test_path("stream.docs");
    prep_iw w;
    WF_CHECK_OK(wf__prep_iw_open(&w, path, PI_DOCS));
    char text[3000];
    for (int i = 0; i < 40; i++) {
        size_t n = (size_t)(i * 71 % 2900);
        for (size_t k = 0; k < n; k++) text[k] = (char)('a' + (i + (int)k) % 26);
        char url[64];
        int ul = snprintf(url, sizeof url, "https://e.org/%d", i);
        prep_idoc d = {.index = (uint64_t)i * 3, .conf = i / 40.0, .url = url, .url_len = (uint32_t)ul,
                       .text = text, .text_len = (uint32_t)n};
        snprintf(d.lang, sizeof d.lang, "%s", i % 2 ? "en" : "de");
        d.at[1] = (uint64_t)i;
        WF_CHECK_OK(wf__prep_iw_doc(&w, &d));
    }
    WF_CHECK_OK(wf__prep_iw_commit(&w));
    static const size_t chunks[] = {1, 7, 100, 4096, 1 << 20};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        prep_ir ir;
        prep_dr dr;
        WF_CHECK_OK(wf__prep_ir_load(&ir, path, PI_DOCS));
        WF_CHECK_OK(wf__prep_dr_open(&dr, path, PI_DOCS, chunks[c], (int)(c % 2)));
        WF_CHECK_EQ(dr.total + 32, ir.len);
        int n = 0;
        while (!wf__prep_ir_end(&ir)) {
            prep_idoc a, b;
            WF_CHECK_TRUE(!wf__prep_dr_end(&dr));
            WF_CHECK_OK(wf__prep_ir_doc(&ir, &a));
            WF_CHECK_OK(wf__prep_dr_doc(&dr, &b));
            WF_CHECK_EQ(a.index, b.index);
            WF_CHECK_EQ(a.at[1], b.at[1]);
            WF_CHECK_STREQ(a.lang, b.lang);
            WF_CHECK_EQ(a.text_len, b.text_len);
            WF_CHECK_EQ(a.url_len, b.url_len);
            WF_CHECK_TRUE(memcmp(a.text, b.text, a.text_len) == 0 && memcmp(a.url, b.url, a.url_len) == 0);
            n++;
        }
        WF_CHECK_EQ(n, 40);
        WF_CHECK_TRUE(wf__prep_dr_end(&dr));
        WF_CHECK_EQ(wf__prep_dr_offset(&dr), dr.total);
        wf__prep_dr_close(&dr);
        wf__prep_ir_free(&ir);
    }
    /* A flipped byte in the last document's text. */
    char *data = NULL;
    size_t len = 0;
    WF_CHECK_OK(wf_file_read(path, &data, &len));
    data[len - 2] ^= 1;
    WF_CHECK_OK(wf_file_write_atomic(path, data, len));
    free(data);
    prep_dr dr;
    WF_CHECK_ERR(wf__prep_dr_open(&dr, path, PI_DOCS, 64, 1), WF_ERR_FORMAT, "checksum mismatch");
    WF_CHECK_OK(wf__prep_dr_open(&dr, path, PI_DOCS, 64, 0));
    wf_status s = WF_OK;
    int n = 0;
    while (s == WF_OK && !wf__prep_dr_end(&dr)) {
        prep_idoc d;
        s = wf__prep_dr_doc(&dr, &d);
        n += s == WF_OK;
    }
    WF_CHECK_EQ(s, WF_ERR_FORMAT);
    WF_CHECK_TRUE(strstr(wf_error_msg(), "checksum mismatch") != NULL && strstr(wf_error_msg(), path) != NULL);
    WF_CHECK_TRUE(n < 40);
    wf__prep_dr_close(&dr);
    WF_CHECK_ERR(wf__prep_dr_open(&dr, path, PI_BLOB, 64, 0), WF_ERR_FORMAT, "where blob records were expected");
    WF_CHECK_ERR(wf__prep_dr_open(&dr, wf_test_path("nothing"), PI_DOCS, 64, 0), WF_ERR_IO, "cannot open");
}
