/* Unit tests of token shards and datasets (src/data/shard.c, dataset.c):
 * write/read round trips for both token widths, the document index, reads
 * that span shards, and every kind of damaged or missing input, each of
 * which must fail with an error naming the file. Damaged shards are made by
 * editing bytes at the offsets given in docs/formats/token-shard.md (and,
 * where the test needs valid checksums around the damage, re-sealing them
 * as that spec says). */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "weft/fileio.h"
#include "weft/shard.h"

/* ------------------------------------------------------------- helpers */

/* A deterministic document: length 1 + (d * 7919) % max_len, tokens from an
 * LCG, ending with `eos`. */
static size_t make_doc(uint64_t d, uint32_t vocab, size_t max_len, int32_t *out) {
    size_t n = 1 + (size_t)((d * 7919) % max_len);
    uint64_t x = d * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i + 1 < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (int32_t)((x >> 33) % (vocab - 1));
    }
    out[n - 1] = (int32_t)(vocab - 1); /* the "eos" */
    return n;
}

typedef struct {
    int32_t *tok[2];      /* expected stream per split */
    uint64_t n_tok[2];
    uint64_t *doc_start[2];
    uint64_t n_doc[2];
} expected;

static void expected_free(expected *e) {
    for (int i = 0; i < 2; i++) {
        free(e->tok[i]);
        free(e->doc_start[i]);
    }
}

/* Writes n_docs documents to `dir`, every third one to val, and records
 * what the reader should see. */
static void write_dataset(const char *dir, uint32_t vocab, uint64_t shard_tokens, uint64_t n_docs,
                          size_t max_len, expected *e) {
    memset(e, 0, sizeof *e);
    for (int i = 0; i < 2; i++) {
        e->tok[i] = malloc(n_docs * max_len * sizeof(int32_t));
        e->doc_start[i] = malloc(n_docs * sizeof(uint64_t));
    }
    int32_t *doc = malloc(max_len * sizeof *doc);
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = vocab, .shard_tokens = shard_tokens,
                                .tokenizer_path = "tok.json", .tokenizer_fingerprint = 0x0123456789abcdefull,
                                .has_fingerprint = 1};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    for (uint64_t d = 0; d < n_docs; d++) {
        size_t n = make_doc(d, vocab, max_len, doc);
        int split = d % 3 == 2;
        WF_CHECK_OK(wf_dataset_writer_add(w, split, doc, n));
        e->doc_start[split][e->n_doc[split]++] = e->n_tok[split];
        memcpy(e->tok[split] + e->n_tok[split], doc, n * sizeof *doc);
        e->n_tok[split] += n;
    }
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    free(doc);
}

static void check_split(const char *dir, const char *split, const expected *e, int which) {
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, split, 1));
    WF_CHECK_EQ(d.n_tokens, e->n_tok[which]);
    WF_CHECK_EQ(d.n_docs, e->n_doc[which]);
    int32_t *got = malloc(d.n_tokens * sizeof *got);
    WF_CHECK_OK(wf_dataset_read(&d, 0, d.n_tokens, got));
    WF_CHECK_TRUE(memcmp(got, e->tok[which], d.n_tokens * sizeof *got) == 0);
    for (uint64_t k = 0; k < d.n_docs; k++) {
        uint64_t st, n;
        WF_CHECK_OK(wf_dataset_doc(&d, k, &st, &n));
        uint64_t end = k + 1 < d.n_docs ? e->doc_start[which][k + 1] : e->n_tok[which];
        WF_CHECK_EQ(st, e->doc_start[which][k]);
        WF_CHECK_EQ(n, end - st);
    }
    uint64_t st, n;
    WF_CHECK_ERR(wf_dataset_doc(&d, d.n_docs, &st, &n), WF_ERR_RANGE, "past the end");
    free(got);
    wf_dataset_close(&d);
}

static void poke(const char *path, long off, const void *bytes, size_t n) {
    FILE *fp = fopen(path, "r+b");
    if (!fp) wf_test_fail(__FILE__, __LINE__, "cannot open %s", path);
    fseek(fp, off, SEEK_SET);
    fwrite(bytes, 1, n, fp);
    fclose(fp);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes a shard's payload and header checksums per the spec, so a test
 * can make damage that only the structural checks can find. The dataset's
 * index is patched to match (it lists both checksums). */
static void reseal(const char *dir, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *data;
    size_t len;
    WF_CHECK_OK(wf_file_read(path, &data, &len));
    unsigned char *h = (unsigned char *)data;
    uint64_t old_p = le64(h + 64), old_h = le64(h + 120);
    uint64_t tokens_offset = le64(h + 40);
    put_le64(h + 64, wf_hash64(h + tokens_offset, len - tokens_offset));
    put_le64(h + 120, wf_hash64(h, 120));
    poke(path, 0, h, 128);
    /* patch dataset.json's hex strings */
    char jpath[1024], oldp[17], oldh[17], newp[17], newh[17];
    snprintf(jpath, sizeof jpath, "%s/dataset.json", dir);
    snprintf(oldp, 17, "%016llx", (unsigned long long)old_p);
    snprintf(oldh, 17, "%016llx", (unsigned long long)old_h);
    snprintf(newp, 17, "%016llx", (unsigned long long)le64(h + 64));
    snprintf(newh, 17, "%016llx", (unsigned long long)le64(h + 120));
    char *js;
    size_t jlen;
    WF_CHECK_OK(wf_file_read(jpath, &js, &jlen));
    char *a = strstr(js, oldp), *b = strstr(js, oldh);
    WF_CHECK_TRUE(a && b);
    memcpy(a, newp, 16);
    memcpy(b, newh, 16);
    wf_test_write_file(jpath, js, jlen);
    free(js);
    free(data);
}

/* ---------------------------------------------------------- round trips */

WF_TEST(roundtrip_uint16_multi_shard) {
    const char *dir = wf_test_path("ds");
    expected e;
    write_dataset(dir, 1000, 100, 200, 40, &e);
    check_split(dir, "train", &e, 0);
    check_split(dir, "val", &e, 1);

    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 0));
    WF_CHECK_TRUE(d.n_shards > 5);
    WF_CHECK_EQ(d.vocab_size, 1000);
    uint64_t docs = 0;
    for (size_t k = 0; k < d.n_shards; k++) {
        const wf_shard *s = &d.shards[k];
        WF_CHECK_EQ(s->token_bytes, 2);
        WF_CHECK_TRUE(s->n_tokens <= 100); /* no document is longer than a shard here */
        WF_CHECK_EQ((uintptr_t)s->tokens % 4096, 0); /* page-aligned for direct mmap use */
        WF_CHECK_EQ(d.shard_base[k], e.doc_start[0][docs]); /* shards start at document starts */
        WF_CHECK_EQ(wf_shard_doc_start(s, 0), 0);
        WF_CHECK_EQ(wf_shard_doc_start(s, s->n_docs), s->n_tokens);
        docs += s->n_docs;
    }
    WF_CHECK_EQ(docs, e.n_doc[0]);
    wf_dataset_close(&d);

    wf_dataset_info info;
    WF_CHECK_OK(wf_dataset_info_load(&info, dir));
    WF_CHECK_EQ(info.vocab_size, 1000);
    WF_CHECK_EQ(info.token_bytes, 2);
    WF_CHECK_STREQ(info.tokenizer, "tok.json");
    WF_CHECK_TRUE(info.has_fingerprint && info.tokenizer_fingerprint == 0x0123456789abcdefull);
    WF_CHECK_EQ(info.n_splits, 2);
    WF_CHECK_STREQ(info.splits[0].name, "train");
    WF_CHECK_STREQ(info.splits[0].shards[0].file, "train-00000.wfs");
    WF_CHECK_EQ(info.splits[1].n_tokens, e.n_tok[1]);
    wf_dataset_info_free(&info);
    expected_free(&e);
}

WF_TEST(roundtrip_uint32) {
    const char *dir = wf_test_path("ds32");
    expected e;
    write_dataset(dir, 70000, 1000, 60, 50, &e);
    check_split(dir, "train", &e, 0);
    check_split(dir, "val", &e, 1);
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 1));
    WF_CHECK_EQ(d.shards[0].token_bytes, 4);
    /* the tokens above 65535 survive: they would not in 16 bits */
    int big = 0;
    for (uint64_t i = 0; i < e.n_tok[0]; i++) big |= e.tok[0][i] > 65535;
    WF_CHECK_TRUE(big);
    wf_dataset_close(&d);
    expected_free(&e);
}

WF_TEST(dtype_boundary_65536_is_uint16) {
    const char *dir = wf_test_path("ds");
    expected e;
    write_dataset(dir, 65536, 1000, 10, 20, &e); /* ids up to 65535 fit 16 bits */
    check_split(dir, "train", &e, 0);
    wf_shard s;
    WF_CHECK_OK(wf_shard_open(&s, wf_test_path("ds/train-00000.wfs"), 1));
    WF_CHECK_EQ(s.token_bytes, 2);
    wf_shard_close(&s);
    expected_free(&e);
}

WF_TEST(reads_span_shard_boundaries) {
    const char *dir = wf_test_path("ds");
    expected e;
    write_dataset(dir, 500, 30, 90, 12, &e);
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 0));
    WF_CHECK_TRUE(d.n_shards >= 10);
    int32_t buf[100];
    for (uint64_t start = 0; start < d.n_tokens; start += 3) {
        for (size_t n = 0; n <= 70 && start + n <= d.n_tokens; n += 7) {
            WF_CHECK_OK(wf_dataset_read(&d, start, n, buf));
            WF_CHECK_TRUE(memcmp(buf, e.tok[0] + start, n * sizeof *buf) == 0);
        }
    }
    WF_CHECK_OK(wf_dataset_read(&d, d.n_tokens, 0, buf));
    WF_CHECK_ERR(wf_dataset_read(&d, d.n_tokens - 5, 6, buf), WF_ERR_RANGE, "past the end");
    WF_CHECK_ERR(wf_dataset_read(&d, UINT64_MAX, 2, buf), WF_ERR_RANGE, "past the end");
    wf_dataset_close(&d);
    expected_free(&e);
}

WF_TEST(long_document_gets_its_own_shard) {
    const char *dir = wf_test_path("ds");
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = 100, .shard_tokens = 10};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    int32_t doc[25];
    for (int i = 0; i < 25; i++) doc[i] = i % 100;
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, doc, 4));
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, doc, 25)); /* > shard_tokens */
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, doc, 3));
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 1));
    WF_CHECK_EQ(d.n_shards, 3);
    WF_CHECK_EQ(d.shards[0].n_tokens, 4);
    WF_CHECK_EQ(d.shards[1].n_tokens, 25);
    WF_CHECK_EQ(d.shards[2].n_tokens, 3);
    wf_dataset_close(&d);
    wf_dataset_info info;
    WF_CHECK_OK(wf_dataset_info_load(&info, dir));
    WF_CHECK_TRUE(info.tokenizer == NULL);
    WF_CHECK_TRUE(!info.has_fingerprint); /* none given: none recorded */
    wf_dataset_info_free(&info);
}

WF_TEST(bad_token_is_refused_and_writer_stays_usable) {
    const char *dir = wf_test_path("ds");
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = 100, .shard_tokens = 1000};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    int32_t bad[3] = {1, 100, 2}, neg[1] = {-1}, good[2] = {5, 99};
    WF_CHECK_ERR(wf_dataset_writer_add(w, 0, bad, 3), WF_ERR_RANGE, "outside the vocabulary");
    WF_CHECK_ERR(wf_dataset_writer_add(w, 1, neg, 1), WF_ERR_RANGE, "outside the vocabulary");
    WF_CHECK_ERR(wf_dataset_writer_add(w, 0, good, 0), WF_ERR_INVALID, "empty document");
    WF_CHECK_ERR(wf_dataset_writer_add(w, 2, good, 2), WF_ERR_INVALID, "split");
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, good, 2));
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("ds/val-00000.wfs"))); /* the refused doc left no shard */
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 1));
    WF_CHECK_EQ(d.n_tokens, 2);
    wf_dataset_close(&d);
}

WF_TEST(rewriting_replaces_the_old_dataset) {
    const char *dir = wf_test_path("ds");
    expected e;
    write_dataset(dir, 300, 20, 100, 10, &e);
    WF_CHECK_TRUE(wf_path_exists(wf_test_path("ds/train-00005.wfs")));
    expected_free(&e);
    write_dataset(dir, 300, 1000, 10, 10, &e); /* fewer shards */
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("ds/train-00005.wfs")));
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("ds/train-00001.wfs")));
    check_split(dir, "train", &e, 0);
    expected_free(&e);
}

WF_TEST(unfinished_writer_leaves_no_dataset) {
    const char *dir = wf_test_path("ds");
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = 100, .shard_tokens = 5};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    int32_t doc[4] = {1, 2, 3, 4};
    for (int i = 0; i < 6; i++) WF_CHECK_OK(wf_dataset_writer_add(w, 0, doc, 4));
    WF_CHECK_TRUE(wf_path_exists(wf_test_path("ds/train-00000.wfs"))); /* committed as it filled */
    wf_dataset_writer_destroy(w); /* no finish */
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("ds/train-00000.wfs")));
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("ds/dataset.json")));
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_NOTFOUND, "dataset.json");
}

/* ----------------------------------------------------- empty datasets */

WF_TEST(empty_dataset_is_an_error) {
    const char *dir = wf_test_path("empty");
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = 100, .shard_tokens = 5};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    WF_CHECK_ERR(wf_dataset_writer_finish(w), WF_ERR_EMPTY, dir);
    wf_dataset_writer_destroy(w);
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("empty/dataset.json")));

    /* only val documents: no training split */
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    int32_t doc[2] = {1, 2};
    WF_CHECK_OK(wf_dataset_writer_add(w, 1, doc, 2));
    WF_CHECK_ERR(wf_dataset_writer_finish(w), WF_ERR_EMPTY, "none to train");
    wf_dataset_writer_destroy(w);
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("empty/val-00000.wfs")));
}

WF_TEST(empty_split_is_an_error_on_open) {
    const char *dir = wf_test_path("ds");
    wf_dataset_writer *w;
    wf_dataset_writer_opts o = {.dir = dir, .vocab_size = 100, .shard_tokens = 5};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &o));
    int32_t doc[2] = {1, 2};
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, doc, 2));
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "val", 0), WF_ERR_EMPTY, "dataset.json: split 'val' is empty");
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "test", 0), WF_ERR_NOTFOUND, "no split 'test' (it has: train, val)");
    WF_CHECK_TRUE(d.shards == NULL && d.n_shards == 0);
}

/* ------------------------------------------------------- damaged shards */

static void small_dataset(const char *dir) {
    expected e;
    write_dataset(dir, 1000, 50, 30, 20, &e);
    expected_free(&e);
}

WF_TEST(wrong_magic) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00001.wfs");
    small_dataset(dir);
    poke(shard, 0, "X", 1);
    wf_shard s;
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00001.wfs: not a weft token shard");
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "train-00001.wfs: not a weft token shard");
    /* not a shard at all */
    wf_test_write_file(wf_test_path("junk.wfs"), "hello", 5);
    WF_CHECK_ERR(wf_shard_open(&s, wf_test_path("junk.wfs"), 0), WF_ERR_FORMAT, "junk.wfs: truncated");
    wf_test_write_file(wf_test_path("zero.wfs"), "", 0);
    WF_CHECK_ERR(wf_shard_open(&s, wf_test_path("zero.wfs"), 0), WF_ERR_FORMAT, "zero.wfs: truncated");
}

WF_TEST(truncated_shard) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    struct stat st;
    WF_CHECK_TRUE(stat(shard, &st) == 0);
    WF_CHECK_TRUE(truncate(shard, st.st_size - 1) == 0);
    wf_shard s;
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: truncated");
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 1), WF_ERR_FORMAT, "train-00000.wfs: truncated");
    WF_CHECK_TRUE(truncate(shard, 100) == 0);
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: truncated");
}

WF_TEST(flipped_payload_byte_fails_checksum) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/val-00000.wfs");
    small_dataset(dir);
    unsigned char b;
    FILE *fp = fopen(shard, "rb");
    fseek(fp, 4096 + 3, SEEK_SET);
    WF_CHECK_EQ(fread(&b, 1, 1, fp), 1);
    fclose(fp);
    b ^= 0x01; /* still a valid token id: only the checksum can tell */
    poke(shard, 4096 + 3, &b, 1);
    wf_shard s;
    WF_CHECK_OK(wf_shard_open(&s, shard, 0)); /* without verify the payload is not read */
    wf_shard_close(&s);
    WF_CHECK_ERR(wf_shard_open(&s, shard, 1), WF_ERR_CHECKSUM, "val-00000.wfs: payload checksum mismatch");
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "val", 1), WF_ERR_CHECKSUM, "val-00000.wfs: payload checksum");
}

WF_TEST(flipped_header_byte_fails_header_checksum) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    unsigned char b = 0x7f;
    poke(shard, 24, &b, 1); /* n_tokens */
    wf_shard s;
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_CHECKSUM, "train-00000.wfs: header checksum mismatch");
}

WF_TEST(unsupported_version) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    unsigned char v[4] = {2, 0, 0, 0};
    poke(shard, 8, v, 4);
    reseal(dir, "train-00000.wfs");
    wf_shard s;
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_UNSUPPORTED, "train-00000.wfs: shard format version 2");
}

WF_TEST(sizes_that_do_not_add_up) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    wf_shard s;
    WF_CHECK_OK(wf_shard_open(&s, shard, 1));
    uint64_t n_tokens = s.n_tokens;
    wf_shard_close(&s);
    unsigned char b[8];
    put_le64(b, n_tokens + 64); /* consistent checksums, inconsistent sections */
    poke(shard, 24, b, 8);
    reseal(dir, "train-00000.wfs");
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: sections do not add up");
    put_le64(b, UINT64_MAX / 2); /* would overflow n_tokens * token_bytes */
    poke(shard, 24, b, 8);
    reseal(dir, "train-00000.wfs");
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: sections do not add up");
}

WF_TEST(token_outside_vocabulary) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    unsigned char t[2] = {0xe8, 0x03}; /* 1000 == vocab_size */
    poke(shard, 4096 + 2 * 5, t, 2);
    reseal(dir, "train-00000.wfs");
    wf_shard s;
    WF_CHECK_ERR(wf_shard_open(&s, shard, 1), WF_ERR_FORMAT, "train-00000.wfs: token 5 is 1000, outside the vocabulary");
    /* opened without verify, the read itself refuses to pass it on */
    wf_dataset d;
    WF_CHECK_OK(wf_dataset_open(&d, dir, "train", 0));
    int32_t buf[10];
    WF_CHECK_OK(wf_dataset_read(&d, 0, 5, buf));
    WF_CHECK_ERR(wf_dataset_read(&d, 0, 10, buf), WF_ERR_FORMAT, "train-00000.wfs: token 5 is 1000");
    wf_dataset_close(&d);
}

WF_TEST(document_index_not_increasing) {
    const char *dir = wf_test_path("ds"), *shard = wf_test_path("ds/train-00000.wfs");
    small_dataset(dir);
    wf_shard s;
    WF_CHECK_OK(wf_shard_open(&s, shard, 1));
    WF_CHECK_TRUE(s.n_docs >= 2);
    long idx = (long)(s.doc_starts - s.map.data);
    uint64_t second = wf_shard_doc_start(&s, 1);
    wf_shard_close(&s);
    unsigned char b[8];
    put_le64(b, second);
    poke(shard, idx, b, 8); /* entry 0 = entry 1 */
    reseal(dir, "train-00000.wfs");
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: document index entry 0");
    put_le64(b, 0);
    poke(shard, idx, b, 8);
    poke(shard, idx + 8, b, 8); /* entry 1 = entry 0: not strictly increasing */
    reseal(dir, "train-00000.wfs");
    WF_CHECK_ERR(wf_shard_open(&s, shard, 0), WF_ERR_FORMAT, "train-00000.wfs: document index entry 1");
}

WF_TEST(shard_from_another_dataset) {
    const char *dir = wf_test_path("ds"), *other = wf_test_path("other");
    small_dataset(dir);
    expected e;
    write_dataset(other, 1000, 50, 30, 19, &e); /* other document lengths */
    expected_free(&e);
    WF_CHECK_TRUE(rename(wf_test_path("other/train-00000.wfs"), wf_test_path("ds/train-00000.wfs")) == 0);
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "train-00000.wfs: its");
}

/* ----------------------------------------------------- damaged indexes */

WF_TEST(missing_shard) {
    const char *dir = wf_test_path("ds");
    small_dataset(dir);
    WF_CHECK_TRUE(unlink(wf_test_path("ds/train-00001.wfs")) == 0);
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_NOTFOUND, "train-00001.wfs: missing (listed in");
    WF_CHECK_OK(wf_dataset_open(&d, dir, "val", 0)); /* the other split is whole */
    wf_dataset_close(&d);
}

WF_TEST(missing_dataset_json) {
    wf_dataset d;
    WF_CHECK_ERR(wf_dataset_open(&d, wf_test_path("nope"), "train", 0), WF_ERR_NOTFOUND,
                 "nope: no such dataset directory");
    const char *dir = wf_test_path("ds");
    small_dataset(dir);
    WF_CHECK_TRUE(unlink(wf_test_path("ds/dataset.json")) == 0);
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_NOTFOUND, "ds/dataset.json: missing");
}

WF_TEST(malformed_dataset_json) {
    const char *dir = wf_test_path("ds"), *json = wf_test_path("ds/dataset.json");
    small_dataset(dir);
    wf_dataset d;
    const char *bad_syntax = "{\n  \"format\": \"weft-token-dataset\",\n  oops\n}\n";
    wf_test_write_file(json, bad_syntax, strlen(bad_syntax));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json:3:");
    const char *wrong_format = "{\"format\": \"something\", \"version\": 1}";
    wf_test_write_file(json, wrong_format, strlen(wrong_format));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json: 'format'");
    const char *no_vocab = "{\"format\": \"weft-token-dataset\", \"version\": 1, \"dtype\": \"uint16\"}";
    wf_test_write_file(json, no_vocab, strlen(no_vocab));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json: dataset: 'vocab_size'");
    const char *escape = "{\"format\": \"weft-token-dataset\", \"version\": 1, \"vocab_size\": 10, "
                         "\"dtype\": \"uint16\", \"tokenizer\": null, \"splits\": {\"train\": {\"n_tokens\": 1, "
                         "\"n_docs\": 1, \"shards\": [{\"file\": \"../x.wfs\"}]}}}";
    wf_test_write_file(json, escape, strlen(escape));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json: split 'train', shard 0: 'file'");
    const char *sums = "{\"format\": \"weft-token-dataset\", \"version\": 1, \"vocab_size\": 10, "
                       "\"dtype\": \"uint16\", \"splits\": {\"train\": {\"n_tokens\": 5, \"n_docs\": 1, "
                       "\"shards\": []}}}";
    wf_test_write_file(json, sums, strlen(sums));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json: split 'train' says 5 tokens");
    const char *fp = "{\"format\": \"weft-token-dataset\", \"version\": 1, \"vocab_size\": 10, "
                     "\"dtype\": \"uint16\", \"tokenizer_fingerprint\": \"0123\", \"splits\": {}}";
    wf_test_write_file(json, fp, strlen(fp));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT,
                 "dataset.json: dataset: 'tokenizer_fingerprint' is missing or not 16 lowercase hex digits");
    const char *v2 = "{\"format\": \"weft-token-dataset\", \"version\": 2}";
    wf_test_write_file(json, v2, strlen(v2));
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_UNSUPPORTED, "dataset.json: dataset version");
    wf_test_write_file(json, "", 0);
    WF_CHECK_ERR(wf_dataset_open(&d, dir, "train", 0), WF_ERR_FORMAT, "dataset.json");
}

/* ------------------------------------------------------------- fuzzing */

/* Random single-bit flips and truncations of a valid shard, with the
 * checksums re-sealed half the time so the structural checks are reached
 * too: opening must either fail cleanly or give a shard whose every token
 * and document can be read in bounds (the sanitizer builds catch the rest). */
WF_TEST(random_damage_fails_cleanly) {
    const char *dir = wf_test_path("ds");
    small_dataset(dir);
    char *orig;
    size_t len;
    WF_CHECK_OK(wf_file_read(wf_test_path("ds/train-00000.wfs"), &orig, &len));
    unsigned char *buf = malloc(len);
    int32_t *toks = malloc(len * sizeof *toks);
    const char *victim = wf_test_path("victim.wfs");
    uint64_t x = 88172645463325252ull;
    int opened = 0, refused = 0;
    for (int it = 0; it < 400; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf, orig, len);
        size_t n = len;
        /* half of the flips land in the header, where the checks are densest */
        size_t pos = (size_t)((x >> 8) % (it % 2 ? 128 : len));
        if (it % 5 == 4) n = (size_t)((x >> 8) % len); /* truncation */
        else buf[pos] ^= (unsigned char)(1u << (x & 7));
        if (it % 4 >= 2 && n >= 128) { /* re-seal, so only the structure can tell */
            uint64_t to = le64(buf + 40);
            if (to <= n) put_le64(buf + 64, wf_hash64(buf + to, n - to));
            put_le64(buf + 120, wf_hash64(buf, 120));
        }
        wf_test_write_file(victim, buf, n);
        for (int verify = 0; verify < 2; verify++) {
            wf_shard s;
            if (wf_shard_open(&s, victim, verify) != WF_OK) {
                WF_CHECK_TRUE(strstr(wf_error_msg(), "victim.wfs") != NULL);
                refused++;
                continue;
            }
            opened++;
            wf_shard_read(&s, 0, (size_t)s.n_tokens, toks);
            for (uint64_t d = 0; d < s.n_docs; d++)
                WF_CHECK_TRUE(wf_shard_doc_start(&s, d) < wf_shard_doc_start(&s, d + 1));
            if (verify)
                for (uint64_t i = 0; i < s.n_tokens; i++) WF_CHECK_TRUE((uint32_t)toks[i] < s.vocab_size);
            wf_shard_close(&s);
        }
    }
    WF_CHECK_TRUE(opened > 0 && refused > 0);
    free(toks);
    free(buf);
    free(orig);
}
