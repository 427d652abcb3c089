/* Unit tests of the data loader's mixtures (src/data/loader.c,
 * docs/loader.md "Dataset mixing").
 *
 * Each test writes small datasets whose tokens say where they are (source
 * s, stream position p: token s * 1000 + p mod 1000... within the
 * vocabulary), keeps their streams, and computes every expected batch
 * here: the schedule's source for each slot (wf_mix_next, itself tested
 * against its bound in test_mix.c), the source's own order materialised
 * per epoch with the documented seeds, cut by rank. Also the sources'
 * one-tokenizer check (wf_mix_spec_check_tokenizer) on datasets whose
 * dataset.json records fingerprints or none. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/loader.h"
#include "weft/mixture.h"
#include "weft/rng.h"
#include "weft/shard.h"

#define MAX_SRC 3
#define VOCAB 4000
#define T 4
#define SEED 42

typedef struct {
    char dir[600];
    int32_t *stream;
    uint64_t n;
} source;

/* n_tokens train tokens (token p is base + p mod 997) and a small val split. */
static source make_source(const char *name, uint64_t n_tokens, int32_t base, uint32_t vocab) {
    source s;
    memset(&s, 0, sizeof s);
    snprintf(s.dir, sizeof s.dir, "%s/%s", wf_test_tmpdir(), name);
    s.n = n_tokens;
    s.stream = malloc(n_tokens * sizeof *s.stream);
    WF_CHECK_TRUE(s.stream != NULL);
    for (uint64_t p = 0; p < n_tokens; p++) s.stream[p] = base + (int32_t)(p % 997);
    wf_dataset_writer *w = NULL;
    wf_dataset_writer_opts wo = {.dir = s.dir, .vocab_size = vocab, .shard_tokens = 50, .tokenizer_path = NULL};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &wo));
    for (uint64_t p = 0; p < n_tokens; p += 13)
        WF_CHECK_OK(wf_dataset_writer_add(w, 0, s.stream + p, (size_t)(n_tokens - p < 13 ? n_tokens - p : 13)));
    int32_t v[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    WF_CHECK_OK(wf_dataset_writer_add(w, 1, v, 9));
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    return s;
}

typedef struct {
    source src[MAX_SRC];
    const char *dirs[MAX_SRC];
    int n;
    wf_mix_weights w;
} mixture;

/* Three sources of 41, 77 and 150 tokens (10, 19 and 37 samples of T+1 = 5):
 * small enough that their epochs wrap within a few batches. */
static void make_mixture(mixture *mp, const char *const *weights) {
    mixture m;
    memset(&m, 0, sizeof m);
    m.n = 3;
    const uint64_t sizes[3] = {41, 77, 150};
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "src%d", k);
        m.src[k] = make_source(name, sizes[k], 1000 * (k + 1), VOCAB);
        m.dirs[k] = m.src[k].dir;
    }
    WF_CHECK_OK(wf_mix_weights_parse(&m.w, weights, 3, "test"));
    *mp = m;
    for (int k = 0; k < 3; k++) mp->dirs[k] = mp->src[k].dir; /* into *mp, not the copy */
}

static void mixture_free(mixture *m) {
    for (int k = 0; k < m->n; k++) free(m->src[k].stream);
}

static wf_loader_opts mix_opts(const mixture *m, int gb, int rank, int world, int prefetch) {
    wf_loader_opts o = {.dir = NULL, .split = "train", .seed = SEED, .seq_len = T, .global_batch = gb,
                        .rank = rank, .world_size = world, .shuffle = 1, .prefetch = prefetch, .verify = 1,
                        .source_dirs = m->dirs, .n_sources = m->n, .weights = &m->w};
    return o;
}

/* The reference: walks the schedule from `st` over one global batch and
 * writes rank r's rows, sources and positions, and the counts. */
static void ref_batch(const mixture *m, wf_mix_state *st, int gb, int rank, int world, int32_t *rows, int *srcs,
                      uint64_t *pos, uint32_t *counts) {
    const int B = gb / world;
    memset(counts, 0, (size_t)m->n * sizeof *counts);
    for (int j = 0; j < gb; j++) {
        int k;
        WF_CHECK_OK(wf_mix_next(st, &k));
        counts[k]++;
        if (j < rank * B || j >= (rank + 1) * B) continue;
        int b = j - rank * B;
        const uint64_t p = st->taken[k] - 1, N = (m->src[k].n - 1) / T;
        const uint64_t seed_k = wf_rng_at(SEED, 0x6d6978u, (uint64_t)k);
        /* The source's epoch p / N, materialised whole, as a plain model. */
        uint64_t *order = malloc(N * sizeof *order);
        WF_CHECK_TRUE(order != NULL);
        for (uint64_t i = 0; i < N; i++) order[i] = wf_rng_permute(i, N, seed_k, p / N);
        uint64_t idx = order[p % N];
        free(order);
        memcpy(rows + (size_t)b * (T + 1), m->src[k].stream + idx * T, (T + 1) * sizeof *rows);
        srcs[b] = k;
        pos[b] = p;
    }
}

static void check_against_ref(const mixture *m, const wf_batch *b, wf_mix_state *ref, int gb, int rank, int world) {
    int32_t rows[64 * (T + 1)];
    int srcs[64];
    uint64_t pos[64];
    uint32_t counts[MAX_SRC];
    WF_CHECK_TRUE(b->mix != NULL && b->source && b->source_pos && b->counts);
    WF_CHECK_TRUE(memcmp(b->mix, ref, sizeof *ref) == 0);
    WF_CHECK_EQ(b->state.epoch, 0);
    WF_CHECK_EQ(b->state.sample, ref->slot);
    ref_batch(m, ref, gb, rank, world, rows, srcs, pos, counts);
    WF_CHECK_EQ(b->batch, gb / world);
    WF_CHECK_TRUE(memcmp(b->tokens, rows, (size_t)b->batch * (T + 1) * sizeof *rows) == 0);
    for (int i = 0; i < b->batch; i++) {
        WF_CHECK_EQ(b->source[i], srcs[i]);
        WF_CHECK_EQ(b->source_pos[i], pos[i]);
        /* The tokens say which source they came from. */
        WF_CHECK_EQ(b->tokens[(size_t)i * (T + 1)] / 1000, srcs[i] + 1);
    }
    uint32_t sum = 0;
    for (int k = 0; k < m->n; k++) {
        WF_CHECK_EQ(b->counts[k], counts[k]);
        sum += counts[k];
    }
    WF_CHECK_EQ(sum, (uint32_t)gb);
}

WF_TEST(loader_mix_batches_match_reference) {
    const char *w[] = {"0.5", "0.3", "0.2"};
    mixture m;
    make_mixture(&m, w);
    const int gb = 8;
    for (int world = 1; world <= 4; world *= 2)
        for (int prefetch = 0; prefetch <= 2; prefetch += 2)
            for (int rank = 0; rank < world; rank++) {
                wf_loader_opts o = mix_opts(&m, gb, rank, world, prefetch);
                wf_loader *l = NULL;
                WF_CHECK_OK(wf_loader_create(&l, &o));
                WF_CHECK_EQ(wf_loader_num_sources(l), 3);
                WF_CHECK_EQ(wf_loader_source_samples(l, 0), 10);
                WF_CHECK_EQ(wf_loader_source_samples(l, 2), 37);
                wf_mix_state ref;
                wf_mix_state_init(&ref, &m.w);
                /* 30 batches: 240 slots, every source through several epochs. */
                for (int g = 0; g < 30; g++) {
                    const wf_batch *b = NULL;
                    WF_CHECK_OK(wf_loader_next(l, &b));
                    check_against_ref(&m, b, &ref, gb, rank, world);
                }
                WF_CHECK_TRUE(ref.taken[0] > 2 * 10 && ref.taken[1] > 19);
                wf_mix_state got;
                WF_CHECK_OK(wf_loader_get_mix(l, &got));
                WF_CHECK_TRUE(memcmp(&got, &ref, sizeof got) == 0);
                wf_loader_destroy(l);
            }
    mixture_free(&m);
}

/* 4 ranks, then 2, then 1, each resuming from the cursor the last saved:
 * the union over ranks of every global batch is the uninterrupted run's. */
WF_TEST(loader_mix_resume_at_other_rank_counts) {
    const char *w[] = {"0.6", "0.1", "0.3"};
    mixture m;
    make_mixture(&m, w);
    const int gb = 8, worlds[3] = {4, 2, 1}, batches[3] = {5, 7, 6};
    wf_mix_state saved;
    wf_mix_state_init(&saved, &m.w);
    wf_mix_state ref = saved;
    for (int phase = 0; phase < 3; phase++) {
        const int world = worlds[phase];
        wf_loader *l[4] = {NULL, NULL, NULL, NULL};
        for (int r = 0; r < world; r++) {
            wf_loader_opts o = mix_opts(&m, gb, r, world, 2);
            WF_CHECK_OK(wf_loader_create(&l[r], &o));
            if (phase > 0) WF_CHECK_OK(wf_loader_set_mix(l[r], &saved));
        }
        for (int g = 0; g < batches[phase]; g++) {
            wf_mix_state at = ref;
            for (int r = 0; r < world; r++) {
                const wf_batch *b = NULL;
                WF_CHECK_OK(wf_loader_next(l[r], &b));
                wf_mix_state mine = at;
                check_against_ref(&m, b, &mine, gb, r, world);
                ref = mine;
            }
        }
        WF_CHECK_OK(wf_loader_get_mix(l[0], &saved));
        WF_CHECK_TRUE(memcmp(&saved, &ref, sizeof saved) == 0);
        for (int r = 0; r < world; r++) wf_loader_destroy(l[r]);
    }
    WF_CHECK_EQ(ref.slot, (uint64_t)gb * 18);
    mixture_free(&m);
}

/* New weights at a batch: the batches from there follow the new segment,
 * read ahead batches are dropped, and the old weights' batches before it
 * are unchanged. */
WF_TEST(loader_mix_weight_change_at_a_batch) {
    const char *w[] = {"0.5", "0.5", "0"}, *w2[] = {"0", "0.25", "0.75"};
    mixture m;
    make_mixture(&m, w);
    wf_mix_weights nw;
    WF_CHECK_OK(wf_mix_weights_parse(&nw, w2, 3, "test"));
    const int gb = 4;
    wf_loader_opts o = mix_opts(&m, gb, 0, 1, 2);
    wf_loader *l = NULL;
    WF_CHECK_OK(wf_loader_create(&l, &o));
    wf_mix_state ref;
    wf_mix_state_init(&ref, &m.w);
    const wf_batch *b = NULL;
    for (int g = 0; g < 3; g++) {
        WF_CHECK_OK(wf_loader_next(l, &b));
        check_against_ref(&m, b, &ref, gb, 0, 1);
        WF_CHECK_EQ(b->counts[2], 0);
    }
    while (wf_loader_ready(l) < 2) {
    } /* the thread has read ahead with the old weights */
    wf_mix_state st;
    WF_CHECK_OK(wf_loader_get_mix(l, &st));
    wf_mix_set_weights(&st, &nw);
    WF_CHECK_OK(wf_loader_set_mix(l, &st));
    wf_mix_set_weights(&ref, &nw);
    for (int g = 0; g < 4; g++) {
        WF_CHECK_OK(wf_loader_next(l, &b));
        check_against_ref(&m, b, &ref, gb, 0, 1);
        WF_CHECK_EQ(b->counts[0], 0);
        WF_CHECK_EQ(b->mix->seg_slot, 12);
    }
    wf_loader_destroy(l);
    mixture_free(&m);
}

WF_TEST(loader_mix_refuses) {
    const char *w[] = {"1", "1", "1"};
    mixture m;
    make_mixture(&m, w);
    wf_loader_opts o = mix_opts(&m, 4, 0, 1, 0);
    wf_loader *l = NULL;
    WF_CHECK_OK(wf_loader_create(&l, &o));
    WF_CHECK_ERR(wf_loader_set_state(l, (wf_loader_state){0, 4}), WF_ERR_INVALID, "use wf_loader_set_mix");
    wf_mix_state st;
    WF_CHECK_OK(wf_loader_get_mix(l, &st));
    st.slot = 5; /* counts that do not add up */
    WF_CHECK_ERR(wf_loader_set_mix(l, &st), WF_ERR_FORMAT, "loader: the mixture's counts do not add up");
    wf_mix_weights two;
    const char *w2[] = {"1", "1"};
    WF_CHECK_OK(wf_mix_weights_parse(&two, w2, 2, "test"));
    wf_mix_state_init(&st, &two);
    WF_CHECK_ERR(wf_loader_set_mix(l, &st), WF_ERR_INVALID, "a mixture state of 2 sources for a mixture of 3");
    wf_loader_destroy(l);

    /* One dataset: no mixture calls. */
    o = mix_opts(&m, 4, 0, 1, 0);
    o.n_sources = 0;
    o.source_dirs = NULL;
    o.dir = m.dirs[0];
    WF_CHECK_OK(wf_loader_create(&l, &o));
    WF_CHECK_ERR(wf_loader_get_mix(l, &st), WF_ERR_INVALID, "not a mixture");
    WF_CHECK_EQ(wf_loader_num_sources(l), 0);
    wf_loader_destroy(l);

    /* Both a directory and sources; weights for another count. */
    o = mix_opts(&m, 4, 0, 1, 0);
    o.dir = m.dirs[0];
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "both a dataset directory and a mixture");
    o = mix_opts(&m, 4, 0, 1, 0);
    o.weights = &two;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "got 3 sources, 2 weights");

    /* A source shorter than one sample; a source of another vocabulary. */
    source tiny = make_source("tiny", 4, 1000, VOCAB), other = make_source("other", 60, 1000, VOCAB + 1);
    const char *dirs[2] = {m.dirs[0], tiny.dir};
    o = mix_opts(&m, 4, 0, 1, 0);
    o.source_dirs = dirs;
    o.n_sources = 2;
    o.weights = &two;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_RANGE, "source 2 (");
    dirs[1] = other.dir;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_FORMAT, "has a vocabulary of 4001 ids");
    dirs[1] = "/nonexistent/weft-mix";
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_NOTFOUND, "loader: source 2: opening split train of /nonexistent");
    free(tiny.stream);
    free(other.stream);
    mixture_free(&m);
}

/* A tiny dataset with (has) a tokenizer fingerprint in its dataset.json. */
static void make_fp_source(const char *name, uint32_t vocab, uint64_t fp, int has) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", wf_test_tmpdir(), name);
    wf_dataset_writer *w = NULL;
    wf_dataset_writer_opts wo = {
        .dir = dir, .vocab_size = vocab, .shard_tokens = 50, .tokenizer_fingerprint = fp, .has_fingerprint = has};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &wo));
    int32_t v[20];
    for (int i = 0; i < 20; i++) v[i] = i;
    WF_CHECK_OK(wf_dataset_writer_add(w, 0, v, 20));
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
}

/* wf_mix_spec_check_tokenizer over the spec "a=DIR_a:1,b=DIR_b:1". */
static wf_status check_pair(const char *a, const char *b, uint32_t *vocab) {
    char sa[700], sb[700];
    snprintf(sa, sizeof sa, "a=%s/%s:1", wf_test_tmpdir(), a);
    snprintf(sb, sizeof sb, "b=%s/%s:1", wf_test_tmpdir(), b);
    const char *items[2] = {sa, sb};
    wf_mix_spec spec;
    wf_status s = wf_mix_spec_parse(&spec, items, 2, NULL, 0, "src", "sched");
    if (s == WF_OK) s = wf_mix_spec_check_tokenizer(&spec, NULL, "src", NULL, vocab, NULL);
    wf_mix_spec_free(&spec);
    return s;
}

WF_TEST(mix_spec_check_tokenizer) {
    make_fp_source("fp1", 300, 0x1234, 1);
    make_fp_source("fp1b", 300, 0x1234, 1);
    make_fp_source("fp2", 300, 0x9999, 1);
    make_fp_source("nofp", 300, 0, 0);
    make_fp_source("v301", 301, 0x1234, 1);
    uint32_t vocab = 0;
    WF_CHECK_OK(check_pair("fp1", "fp1b", &vocab));
    WF_CHECK_EQ(vocab, 300);
    WF_CHECK_ERR(check_pair("fp1", "fp2", NULL), WF_ERR_CONFIG, "src: source 'b' (");
    WF_CHECK_ERR(check_pair("fp1", "fp2", NULL), WF_ERR_CONFIG, "was tokenized with another tokenizer than source 'a'");
    WF_CHECK_ERR(check_pair("fp1", "fp2", NULL), WF_ERR_CONFIG, "tokenizer fingerprints 0000000000009999 (");
    /* unknown fingerprint: its vocabulary alone (a warning) */
    WF_CHECK_OK(check_pair("nofp", "fp2", NULL));
    WF_CHECK_ERR(check_pair("fp1", "v301", NULL), WF_ERR_CONFIG, "src: source 'b' (");
    WF_CHECK_ERR(check_pair("fp1", "v301", NULL), WF_ERR_CONFIG, "has a vocabulary of 301 ids, source 'a'");
    WF_CHECK_ERR(check_pair("fp1", "missing", NULL), WF_ERR_NOTFOUND, "src: source 'b': ");
}
