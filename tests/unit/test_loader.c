/* Unit tests of the data loader (src/data/loader.c).
 *
 * Every test writes its own small dataset with wf_dataset_writer and keeps
 * the token stream it wrote in memory. Expected batches are computed here
 * from that copy with a deliberately plain model of the scheme in loader.h
 * (materialise each epoch's order, cut it into global batches, drop the
 * tail, slice by rank), never through the loader or wf_dataset_read.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/loader_impl.h"
#include "harness.h"
#include "weft/loader.h"
#include "weft/rng.h"
#include "weft/shard.h"

/* ------------------------------------------------------------- fixtures */

typedef struct {
    char dir[600];
    int32_t *train; /* the train split's virtual stream, as written */
    uint64_t n_train;
    int32_t *val;
    uint64_t n_val;
} fixture;

/* Writes a dataset of documents of 1..max_doc tokens into shards of about
 * shard_tokens tokens, so samples straddle documents and shards. With
 * identity, the train token at stream position k is k mod vocab, which makes a
 * misplaced sample obvious; otherwise tokens are pseudo-random. */
static fixture make_dataset(const char *name, uint64_t n_train, uint64_t n_val, uint32_t vocab,
                            uint64_t shard_tokens, int identity) {
    fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "%s/%s", wf_test_tmpdir(), name);
    f.n_train = n_train;
    f.n_val = n_val;
    f.train = malloc(n_train * sizeof *f.train);
    f.val = malloc((n_val ? n_val : 1) * sizeof *f.val);
    WF_CHECK_TRUE(f.train && f.val);
    wf_rng r = wf_rng_make(1234, 5);
    for (uint64_t k = 0; k < n_train; k++)
        f.train[k] = identity ? (int32_t)(k % vocab) : (int32_t)wf_rng_below(&r, vocab);
    for (uint64_t k = 0; k < n_val; k++) f.val[k] = (int32_t)wf_rng_below(&r, vocab);

    wf_dataset_writer *w = NULL;
    wf_dataset_writer_opts wo = {.dir = f.dir, .vocab_size = vocab, .shard_tokens = shard_tokens,
                                 .tokenizer_path = NULL};
    WF_CHECK_OK(wf_dataset_writer_create(&w, &wo));
    for (int split = 0; split < 2; split++) {
        const int32_t *src = split ? f.val : f.train;
        uint64_t n = split ? n_val : n_train;
        for (uint64_t k = 0; k < n;) {
            uint64_t len = 1 + wf_rng_below(&r, 97);
            if (len > n - k) len = n - k;
            WF_CHECK_OK(wf_dataset_writer_add(w, split, src + k, (size_t)len));
            k += len;
        }
    }
    WF_CHECK_OK(wf_dataset_writer_finish(w));
    wf_dataset_writer_destroy(w);
    return f;
}

static void fixture_free(fixture *f) {
    free(f->train);
    free(f->val);
}

static wf_loader_opts base_opts(const fixture *f, int T, int gb) {
    wf_loader_opts o = {.dir = f->dir, .split = "train", .seed = 42, .seq_len = T,
                        .global_batch = gb, .rank = 0, .world_size = 1, .shuffle = 1,
                        .prefetch = 2, .verify = 1};
    return o;
}

static wf_loader *open_loader(const wf_loader_opts *o) {
    wf_loader *l = NULL;
    WF_CHECK_OK(wf_loader_create(&l, o));
    WF_CHECK_TRUE(l != NULL);
    return l;
}

/* --------------------------------------------- the reference, in plain C */

/* Global batch number g (counted from the start of training) under the
 * scheme of loader.h, as the list of sample indices and its cursor. */
typedef struct {
    uint64_t n_samples, per_epoch; /* N, and global batches per epoch */
    uint64_t seed;
    int shuffle, gb;
    uint64_t cached_epoch;
    uint64_t *order; /* (N) the cached epoch's order */
} ref_order;

static ref_order ref_make(uint64_t n_tokens, int T, int gb, uint64_t seed, int shuffle) {
    ref_order r = {.n_samples = (n_tokens - 1) / (uint64_t)T, .seed = seed, .shuffle = shuffle,
                   .gb = gb, .cached_epoch = UINT64_MAX};
    r.per_epoch = r.n_samples / (uint64_t)gb;
    r.order = malloc(r.n_samples * sizeof *r.order);
    WF_CHECK_TRUE(r.order != NULL);
    return r;
}

static const uint64_t *ref_epoch(ref_order *r, uint64_t epoch) {
    if (r->cached_epoch != epoch) {
        for (uint64_t p = 0; p < r->n_samples; p++)
            r->order[p] = r->shuffle ? wf_rng_permute(p, r->n_samples, r->seed, epoch) : p;
        r->cached_epoch = epoch;
    }
    return r->order;
}

/* Writes the expected (B, T+1) tokens of rank `rank` of W for global batch g
 * and returns its cursor. */
static wf_loader_state ref_batch(ref_order *r, const int32_t *stream, int T, uint64_t g, int rank,
                                 int W, int32_t *out) {
    wf_loader_state s = {g / r->per_epoch, (g % r->per_epoch) * (uint64_t)r->gb};
    const uint64_t *order = ref_epoch(r, s.epoch);
    int B = r->gb / W;
    for (int b = 0; b < B; b++) {
        uint64_t idx = order[s.sample + (uint64_t)(rank * B + b)];
        memcpy(out + (size_t)b * (size_t)(T + 1), stream + idx * (uint64_t)T,
               (size_t)(T + 1) * sizeof *out);
    }
    return s;
}

static void check_batch(const wf_batch *b, const int32_t *want, wf_loader_state want_state, int B,
                        int T, const char *what, uint64_t g) {
    WF_CHECK_EQ(b->batch, B);
    WF_CHECK_EQ(b->seq_len, T);
    if (b->state.epoch != want_state.epoch || b->state.sample != want_state.sample)
        wf_test_fail(__FILE__, __LINE__, "%s: batch %llu has cursor {%llu, %llu}, expected {%llu, %llu}",
                     what, (unsigned long long)g, (unsigned long long)b->state.epoch,
                     (unsigned long long)b->state.sample, (unsigned long long)want_state.epoch,
                     (unsigned long long)want_state.sample);
    for (size_t k = 0; k < (size_t)B * (size_t)(T + 1); k++)
        if (b->tokens[k] != want[k])
            wf_test_fail(__FILE__, __LINE__, "%s: batch %llu token %zu (row %zu col %zu) is %d, expected %d",
                         what, (unsigned long long)g, k, k / (size_t)(T + 1), k % (size_t)(T + 1),
                         b->tokens[k], want[k]);
}

/* Reads `n` batches from l starting at global batch g0 and checks each one
 * against the reference. */
static void expect_batches(wf_loader *l, ref_order *r, const int32_t *stream, int T, uint64_t g0,
                           uint64_t n, int rank, int W, const char *what) {
    int B = r->gb / W;
    int32_t *want = malloc((size_t)B * (size_t)(T + 1) * sizeof *want);
    WF_CHECK_TRUE(want != NULL);
    for (uint64_t g = g0; g < g0 + n; g++) {
        wf_loader_state ws = ref_batch(r, stream, T, g, rank, W, want);
        const wf_batch *b = NULL;
        WF_CHECK_OK(wf_loader_next(l, &b));
        WF_CHECK_TRUE(b != NULL);
        check_batch(b, want, ws, B, T, what, g);
        WF_CHECK_TRUE(b->wait_seconds >= 0.0);
    }
    free(want);
}

/* ----------------------------------------------------------- the tests */

WF_TEST(loader_batches_match_dataset_tokens) {
    /* uint32 tokens (vocab > 65536), samples across documents and shards,
     * three epochs (N = 332, global batch 6: 55 batches, 2 samples dropped). */
    fixture f = make_dataset("d", 5000, 300, 70000, 700, 1);
    const int T = 15, gb = 6;
    wf_loader_opts o = base_opts(&f, T, gb);
    wf_loader *l = open_loader(&o);
    WF_CHECK_EQ(wf_loader_samples_per_epoch(l), (5000 - 1) / 15);
    WF_CHECK_EQ(wf_loader_batches_per_epoch(l), (5000 - 1) / 15 / 6);
    WF_CHECK_EQ(wf_loader_get_state(l).epoch, 0);
    WF_CHECK_EQ(wf_loader_get_state(l).sample, 0);
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    expect_batches(l, &r, f.train, T, 0, 3 * r.per_epoch + 4, 0, 1, "train W=1");
    wf_loader_destroy(l);
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_val_split_in_order_uint16) {
    /* uint16 tokens; the validation split read in order (shuffle 0). */
    fixture f = make_dataset("d", 3000, 2000, 5000, 400, 0);
    const int T = 32, gb = 4;
    wf_loader_opts o = base_opts(&f, T, gb);
    o.split = "val";
    o.shuffle = 0;
    wf_loader *l = open_loader(&o);
    ref_order r = ref_make(f.n_val, T, gb, 42, 0);
    expect_batches(l, &r, f.val, T, 0, 2 * r.per_epoch + 1, 0, 1, "val");
    wf_loader_destroy(l);

    /* Without shuffle the first batch is samples 0..3: tokens [0, 4*32+1). */
    l = open_loader(&o);
    const wf_batch *b = NULL;
    WF_CHECK_OK(wf_loader_next(l, &b));
    for (int s = 0; s < gb; s++)
        for (int t = 0; t <= T; t++) WF_CHECK_EQ(b->tokens[s * (T + 1) + t], f.val[s * T + t]);
    wf_loader_destroy(l);
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_ranks_union_is_global_batch) {
    fixture f = make_dataset("d", 6000, 100, 70000, 1000, 1);
    const int T = 16, gb = 8;
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    const uint64_t n = r.per_epoch + 5; /* into the second epoch */
    /* The W = 1 run gives the global batches. */
    int32_t *global = malloc(n * (size_t)gb * (size_t)(T + 1) * sizeof *global);
    WF_CHECK_TRUE(global != NULL);
    wf_loader_opts o = base_opts(&f, T, gb);
    wf_loader *l = open_loader(&o);
    for (uint64_t g = 0; g < n; g++) {
        const wf_batch *b = NULL;
        WF_CHECK_OK(wf_loader_next(l, &b));
        memcpy(global + g * (size_t)gb * (size_t)(T + 1), b->tokens,
               (size_t)gb * (size_t)(T + 1) * sizeof *global);
    }
    wf_loader_destroy(l);

    const int worlds[] = {2, 4};
    for (int wi = 0; wi < 2; wi++) {
        int W = worlds[wi], B = gb / W;
        wf_loader *ls[4] = {0};
        for (int rk = 0; rk < W; rk++) {
            o.rank = rk;
            o.world_size = W;
            ls[rk] = open_loader(&o);
        }
        for (uint64_t g = 0; g < n; g++) {
            for (int rk = 0; rk < W; rk++) {
                const wf_batch *b = NULL;
                WF_CHECK_OK(wf_loader_next(ls[rk], &b));
                WF_CHECK_EQ(b->batch, B);
                const int32_t *part = global + (g * (size_t)gb + (size_t)(rk * B)) * (size_t)(T + 1);
                if (memcmp(b->tokens, part, (size_t)B * (size_t)(T + 1) * sizeof *part) != 0)
                    wf_test_fail(__FILE__, __LINE__, "W=%d rank %d batch %llu differs from its part "
                                 "of the global batch", W, rk, (unsigned long long)g);
            }
        }
        for (int rk = 0; rk < W; rk++) wf_loader_destroy(ls[rk]);
    }
    free(global);
    free(r.order);
    fixture_free(&f);
}

/* The samples of `n_batches` global batches (gb = 1 so a batch is one
 * sample; sample index = first token / T with identity tokens). */
static void read_order(const fixture *f, int T, uint64_t seed, uint64_t epoch, uint64_t *out,
                       uint64_t n) {
    wf_loader_opts o = base_opts(f, T, 1);
    o.seed = seed;
    wf_loader *l = open_loader(&o);
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){epoch, 0}));
    for (uint64_t p = 0; p < n; p++) {
        const wf_batch *b = NULL;
        WF_CHECK_OK(wf_loader_next(l, &b));
        WF_CHECK_EQ(b->state.epoch, epoch);
        WF_CHECK_EQ(b->tokens[0] % T, 0);
        out[p] = (uint64_t)b->tokens[0] / (uint64_t)T;
    }
    wf_loader_destroy(l);
}

WF_TEST(loader_order_fixed_by_seed_and_epoch) {
    fixture f = make_dataset("d", 4001, 50, 70000, 800, 1);
    const int T = 10;
    const uint64_t N = 400;
    uint64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    char *seen = calloc(N, 1);
    WF_CHECK_TRUE(a && b && seen);

    read_order(&f, T, 7, 0, a, N);
    /* Every sample exactly once per epoch. */
    for (uint64_t p = 0; p < N; p++) {
        WF_CHECK_TRUE(a[p] < N);
        WF_CHECK_TRUE(!seen[a[p]]);
        seen[a[p]] = 1;
    }
    /* Shuffled: not the identity. */
    uint64_t fixed = 0;
    for (uint64_t p = 0; p < N; p++) fixed += a[p] == p;
    WF_CHECK_TRUE(fixed < N / 10);

    /* Same (seed, epoch): same order. */
    read_order(&f, T, 7, 0, b, N);
    WF_CHECK_TRUE(memcmp(a, b, N * sizeof *a) == 0);
    /* Another epoch: another order, still a permutation. */
    read_order(&f, T, 7, 1, b, N);
    WF_CHECK_TRUE(memcmp(a, b, N * sizeof *a) != 0);
    memset(seen, 0, N);
    for (uint64_t p = 0; p < N; p++) {
        WF_CHECK_TRUE(b[p] < N && !seen[b[p]]);
        seen[b[p]] = 1;
    }
    /* Another seed: another order. */
    read_order(&f, T, 8, 0, b, N);
    WF_CHECK_TRUE(memcmp(a, b, N * sizeof *a) != 0);

    /* With a global batch that does not divide N, each epoch still takes
     * distinct samples and drops the remainder: 400 = 7*57 + 1. */
    wf_loader_opts o = base_opts(&f, T, 7);
    wf_loader *l = open_loader(&o);
    WF_CHECK_EQ(wf_loader_batches_per_epoch(l), 57);
    for (int e = 0; e < 2; e++) {
        memset(seen, 0, N);
        for (int g = 0; g < 57; g++) {
            const wf_batch *bt = NULL;
            WF_CHECK_OK(wf_loader_next(l, &bt));
            WF_CHECK_EQ(bt->state.epoch, e);
            WF_CHECK_EQ(bt->state.sample, g * 7);
            for (int s = 0; s < 7; s++) {
                uint64_t idx = (uint64_t)bt->tokens[s * (T + 1)] / T;
                WF_CHECK_TRUE(!seen[idx]);
                seen[idx] = 1;
            }
        }
    }
    WF_CHECK_EQ(wf_loader_get_state(l).epoch, 2);
    WF_CHECK_EQ(wf_loader_get_state(l).sample, 0);
    wf_loader_destroy(l);
    free(a);
    free(b);
    free(seen);
    fixture_free(&f);
}

/* Runs W ranks for `first` global batches, saves rank 0's state, then runs
 * W2 ranks from that state for `then` batches and checks them against the
 * reference (the uninterrupted run). */
static void resume_case(const fixture *f, ref_order *r, int T, int W, int W2, uint64_t first,
                        uint64_t then, int prefetch) {
    char what[128];
    snprintf(what, sizeof what, "W=%d -> W=%d after %llu batches, prefetch %d", W, W2,
             (unsigned long long)first, prefetch);
    wf_loader_opts o = base_opts(f, T, r->gb);
    o.prefetch = prefetch;
    o.world_size = W;
    wf_loader *ls[4] = {0};
    for (int rk = 0; rk < W; rk++) {
        o.rank = rk;
        ls[rk] = open_loader(&o);
        expect_batches(ls[rk], r, f->train, T, 0, first, rk, W, what);
    }
    wf_loader_state s = wf_loader_get_state(ls[0]);
    for (int rk = 0; rk < W; rk++) {
        wf_loader_state sr = wf_loader_get_state(ls[rk]);
        WF_CHECK_TRUE(sr.epoch == s.epoch && sr.sample == s.sample); /* state does not depend on rank */
        wf_loader_destroy(ls[rk]);
    }
    /* The saved cursor is the next global batch's. */
    WF_CHECK_EQ(s.epoch, first / r->per_epoch);
    WF_CHECK_EQ(s.sample, (first % r->per_epoch) * (uint64_t)r->gb);

    o.world_size = W2;
    for (int rk = 0; rk < W2; rk++) {
        o.rank = rk;
        wf_loader *l = open_loader(&o);
        WF_CHECK_OK(wf_loader_set_state(l, s));
        expect_batches(l, r, f->train, T, first, then, rk, W2, what);
        wf_loader_destroy(l);
    }
}

WF_TEST(loader_resume_matches_uninterrupted_run) {
    fixture f = make_dataset("d", 4100, 100, 70000, 900, 1);
    const int T = 20, gb = 8; /* N = 204, 25 batches an epoch, 4 samples dropped */
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    WF_CHECK_EQ(r.per_epoch, 25);
    const uint64_t mid = 11, at_end = 25, before_end = 23;
    const int same[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        int W = same[i];
        resume_case(&f, &r, T, W, W, mid, 6, 2);           /* mid-epoch */
        resume_case(&f, &r, T, W, W, before_end, 6, 2);    /* resume, then cross the boundary */
        resume_case(&f, &r, T, W, W, at_end, 3, 2);        /* saved at the boundary */
    }
    /* Resharding: a W=4 run resumed by W=2 and W=1 (and back up). */
    resume_case(&f, &r, T, 4, 2, mid, 6, 2);
    resume_case(&f, &r, T, 4, 1, mid, 6, 2);
    resume_case(&f, &r, T, 4, 2, before_end, 6, 2);
    resume_case(&f, &r, T, 4, 1, before_end, 6, 2);
    resume_case(&f, &r, T, 4, 1, 2 * at_end + 3, 4, 2);    /* in the third epoch */
    resume_case(&f, &r, T, 1, 4, before_end, 6, 2);
    resume_case(&f, &r, T, 2, 4, mid, 4, 0);               /* synchronous loaders */
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_set_state_drops_prefetched_batches) {
    fixture f = make_dataset("d", 3000, 100, 70000, 500, 1);
    const int T = 12, gb = 4;
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    wf_loader_opts o = base_opts(&f, T, gb);
    o.prefetch = 3;
    wf_loader *l = open_loader(&o);
    expect_batches(l, &r, f.train, T, 0, 5, 0, 1, "before");
    /* Let the thread fill its buffers with batches 5..7, then move back. */
    while (wf_loader_ready(l) < 3) usleep(1000);
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){0, 2 * (uint64_t)gb}));
    WF_CHECK_EQ(wf_loader_get_state(l).sample, 2 * gb);
    expect_batches(l, &r, f.train, T, 2, 4, 0, 1, "after moving back");
    /* And forward into the next epoch without waiting. */
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){1, (r.per_epoch - 1) * (uint64_t)gb}));
    expect_batches(l, &r, f.train, T, 2 * r.per_epoch - 1, 3, 0, 1, "after moving forward");
    /* A cursor in the dropped tail means the start of the next epoch. */
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){0, r.n_samples - 1}));
    WF_CHECK_EQ(wf_loader_get_state(l).epoch, 1);
    WF_CHECK_EQ(wf_loader_get_state(l).sample, 0);
    expect_batches(l, &r, f.train, T, r.per_epoch, 2, 0, 1, "after the tail");
    /* A cursor past the epoch is refused. */
    WF_CHECK_ERR(wf_loader_set_state(l, (wf_loader_state){0, r.n_samples + 1}), WF_ERR_RANGE,
                 "another dataset");
    wf_loader_destroy(l);
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_prefetch_depth_does_not_change_batches) {
    fixture f = make_dataset("d", 5000, 100, 70000, 700, 0);
    const int T = 24, gb = 6, n = 40;
    const size_t per = (size_t)gb * (size_t)(T + 1);
    int32_t *first = malloc((size_t)n * per * sizeof *first);
    WF_CHECK_TRUE(first != NULL);
    const int depths[] = {0, 1, 2, 5};
    for (int d = 0; d < 4; d++) {
        wf_loader_opts o = base_opts(&f, T, gb);
        o.prefetch = depths[d];
        wf_loader *l = open_loader(&o);
        for (int g = 0; g < n; g++) {
            const wf_batch *b = NULL;
            WF_CHECK_OK(wf_loader_next(l, &b));
            WF_CHECK_TRUE(b->wait_seconds >= 0.0);
            if (d == 0)
                memcpy(first + (size_t)g * per, b->tokens, per * sizeof *first);
            else if (memcmp(first + (size_t)g * per, b->tokens, per * sizeof *first) != 0)
                wf_test_fail(__FILE__, __LINE__, "prefetch %d: batch %d differs from prefetch 0",
                             depths[d], g);
        }
        wf_loader_destroy(l);
    }
    free(first);
    fixture_free(&f);
}

WF_TEST(loader_held_batch_survives_prefetch) {
    /* The batch the caller holds must not be overwritten while the thread
     * fills every other buffer. */
    fixture f = make_dataset("d", 3000, 100, 70000, 500, 1);
    const int T = 12, gb = 2;
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    int32_t want[2 * 13];
    wf_loader_opts o = base_opts(&f, T, gb);
    for (int prefetch = 1; prefetch <= 3; prefetch++) {
        o.prefetch = prefetch;
        wf_loader *l = open_loader(&o);
        for (uint64_t g = 0; g < 10; g++) {
            const wf_batch *b = NULL;
            WF_CHECK_OK(wf_loader_next(l, &b));
            while (wf_loader_ready(l) < prefetch) usleep(200);
            wf_loader_state ws = ref_batch(&r, f.train, T, g, 0, 1, want);
            check_batch(b, want, ws, gb, T, "held", g);
        }
        wf_loader_destroy(l);
    }
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_destroy_while_thread_waits) {
    fixture f = make_dataset("d", 3000, 100, 70000, 500, 1);
    wf_loader_opts o = base_opts(&f, 8, 4);
    /* Blocked on a full ring, before and after the first batch. */
    wf_loader *l = open_loader(&o);
    while (wf_loader_ready(l) < 2) usleep(1000);
    wf_loader_destroy(l);
    l = open_loader(&o);
    const wf_batch *b = NULL;
    WF_CHECK_OK(wf_loader_next(l, &b));
    while (wf_loader_ready(l) < 2) usleep(1000);
    wf_loader_destroy(l);
    /* While it is probably still reading, and right after a set_state. */
    l = open_loader(&o);
    wf_loader_destroy(l);
    l = open_loader(&o);
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){3, 8}));
    wf_loader_destroy(l);
    wf_loader_destroy(NULL);
    fixture_free(&f);
}

WF_TEST(loader_bad_inputs_are_clear_errors) {
    fixture f = make_dataset("d", 1000, 100, 70000, 500, 1);
    wf_loader *l = (wf_loader *)&f; /* must be reset to NULL on failure */
    wf_loader_opts o = base_opts(&f, 16, 4);

    char missing[700];
    snprintf(missing, sizeof missing, "%s/no-such-dataset", wf_test_tmpdir());
    o.dir = missing;
    wf_status s = wf_loader_create(&l, &o);
    WF_CHECK_TRUE(s != WF_OK);
    WF_CHECK_TRUE(l == NULL);
    WF_CHECK_TRUE(strstr(wf_error_msg(), "no-such-dataset") != NULL);
    o.dir = f.dir;

    o.world_size = 3;
    o.global_batch = 4;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "not a positive multiple of world_size 3");
    WF_CHECK_TRUE(l == NULL);
    o.world_size = 2;
    o.rank = 2;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "rank 2 is out of range");
    o.rank = -1;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "rank -1 is out of range");
    o.rank = 0;
    o.world_size = 1;
    o.seq_len = 0;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "seq_len is 0");
    o.seq_len = 16;
    o.split = "test";
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "must be \"train\" or \"val\"");
    o.split = "train";
    o.prefetch = -1;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_INVALID, "prefetch is -1");
    o.prefetch = 2;

    /* 999 / 16 = 62 samples: a global batch of 63 cannot be made. */
    o.global_batch = 63;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_RANGE, "62 samples");
    WF_CHECK_TRUE(strstr(wf_error_msg(), "fewer than global_batch 63") != NULL);
    WF_CHECK_TRUE(l == NULL);
    o.global_batch = 62;
    WF_CHECK_OK(wf_loader_create(&l, &o));
    WF_CHECK_EQ(wf_loader_batches_per_epoch(l), 1);
    wf_loader_destroy(l);
    /* A sequence longer than the split. */
    o.global_batch = 1;
    o.seq_len = 1000;
    WF_CHECK_ERR(wf_loader_create(&l, &o), WF_ERR_RANGE, "0 samples");
    fixture_free(&f);
}

WF_TEST(loader_read_error_reaches_the_caller) {
    fixture f = make_dataset("d", 3000, 100, 70000, 500, 1);
    const int T = 12, gb = 4;
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        wf_loader_opts o = base_opts(&f, T, gb);
        o.prefetch = prefetch;
        wf_loader *l = open_loader(&o);
        wf__loader_inject_error(l, (wf_loader_state){0, 5 * (uint64_t)gb});
        expect_batches(l, &r, f.train, T, 0, 5, 0, 1, "before the error");
        const wf_batch *b = (const wf_batch *)&r;
        /* Reported, with the thread's message, and again until the cursor moves. */
        WF_CHECK_ERR(wf_loader_next(l, &b), WF_ERR_IO, "injected read error at epoch 0 sample 20");
        WF_CHECK_TRUE(b == NULL);
        WF_CHECK_ERR(wf_loader_next(l, &b), WF_ERR_IO, "injected read error");
        WF_CHECK_EQ(wf_loader_get_state(l).sample, 5 * gb);
        /* Moving the cursor elsewhere recovers. */
        WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){0, 6 * (uint64_t)gb}));
        expect_batches(l, &r, f.train, T, 6, 3, 0, 1, "after the error");
        wf_loader_destroy(l);
    }
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_set_state_while_reading) {
    /* set_state races with a read in progress: a batch read for the old
     * cursor must never come out after the move. Many random jumps, each
     * made right after a next (when the thread is most likely reading). */
    fixture f = make_dataset("d", 20000, 100, 70000, 3000, 1);
    const int T = 64, gb = 8;
    ref_order r = ref_make(f.n_train, T, gb, 42, 1);
    wf_loader_opts o = base_opts(&f, T, gb);
    wf_loader *l = open_loader(&o);
    wf_rng rng = wf_rng_make(99, 0);
    uint64_t g = 0;
    for (int i = 0; i < 300; i++) {
        expect_batches(l, &r, f.train, T, g, 1 + wf_rng_below(&rng, 2), 0, 1, "jumping");
        g = wf_rng_below(&rng, 3 * r.per_epoch);
        WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){g / r.per_epoch,
                                                              (g % r.per_epoch) * (uint64_t)gb}));
    }
    wf_loader_destroy(l);
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_corrupt_shard_error_reaches_the_caller) {
    /* A real read error: a token past the vocabulary in a shard opened
     * without verify. Stream token 205 is in sample 20 only (T = 10), which
     * the in-order loader reads in batch 10 (two samples a batch). */
    fixture f = make_dataset("d", 3000, 100, 5000, 1u << 20, 0);
    char path[700];
    snprintf(path, sizeof path, "%s/train-00000.wfs", f.dir);
    FILE *fp = fopen(path, "r+b");
    WF_CHECK_TRUE(fp != NULL);
    WF_CHECK_TRUE(fseek(fp, 4096 + 2 * 205, SEEK_SET) == 0);
    const unsigned char bad[2] = {0xff, 0xff};
    WF_CHECK_EQ(fwrite(bad, 1, 2, fp), 2);
    fclose(fp);

    const int T = 10, gb = 2;
    ref_order r = ref_make(f.n_train, T, gb, 42, 0);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        wf_loader_opts o = base_opts(&f, T, gb);
        o.shuffle = 0;
        o.verify = 0;
        o.prefetch = prefetch;
        wf_loader *l = open_loader(&o);
        expect_batches(l, &r, f.train, T, 0, 10, 0, 1, "before the corrupt token");
        const wf_batch *b = NULL;
        WF_CHECK_ERR(wf_loader_next(l, &b), WF_ERR_FORMAT, "train-00000.wfs: token 205 is 65535");
        WF_CHECK_TRUE(strstr(wf_error_msg(), "reading sample 20 (epoch 0, position 20, rank 0)") != NULL);
        WF_CHECK_EQ(wf_loader_get_state(l).sample, 20);
        wf_loader_destroy(l);
        /* With verify the checksum catches it at create. */
        o.verify = 1;
        WF_CHECK_TRUE(wf_loader_create(&l, &o) != WF_OK);
        WF_CHECK_TRUE(l == NULL);
        WF_CHECK_TRUE(strstr(wf_error_msg(), "train-00000.wfs") != NULL);
    }
    free(r.order);
    fixture_free(&f);
}

WF_TEST(loader_docs_worked_example) {
    /* The worked example of docs/loader.md, number for number. */
    fixture f = make_dataset("d", 41, 10, 70000, 16, 1);
    wf_loader_opts o = base_opts(&f, 4, 4);
    o.world_size = 2;
    static const int want[3][2][2] = {{{5, 2}, {0, 7}}, {{3, 8}, {6, 1}}, {{0, 1}, {6, 2}}};
    static const uint64_t cursor[4][2] = {{0, 0}, {0, 4}, {1, 0}, {1, 4}};
    for (int rk = 0; rk < 2; rk++) {
        o.rank = rk;
        wf_loader *l = open_loader(&o);
        WF_CHECK_EQ(wf_loader_samples_per_epoch(l), 10);
        WF_CHECK_EQ(wf_loader_batches_per_epoch(l), 2);
        for (int step = 0; step < 3; step++) {
            const wf_batch *b = NULL;
            WF_CHECK_OK(wf_loader_next(l, &b));
            WF_CHECK_EQ(b->state.epoch, cursor[step][0]);
            WF_CHECK_EQ(b->state.sample, cursor[step][1]);
            for (int s = 0; s < 2; s++)
                for (int t = 0; t < 5; t++) WF_CHECK_EQ(b->tokens[s * 5 + t], want[step][rk][s] * 4 + t);
            WF_CHECK_EQ(wf_loader_get_state(l).epoch, cursor[step + 1][0]);
            WF_CHECK_EQ(wf_loader_get_state(l).sample, cursor[step + 1][1]);
        }
        wf_loader_destroy(l);
    }
    /* Resumed on one rank from {0, 4}: samples 3 8 6 1, then cursor {1, 0}. */
    o.rank = 0;
    o.world_size = 1;
    wf_loader *l = open_loader(&o);
    WF_CHECK_OK(wf_loader_set_state(l, (wf_loader_state){0, 4}));
    const wf_batch *b = NULL;
    WF_CHECK_OK(wf_loader_next(l, &b));
    static const int resumed[4] = {3, 8, 6, 1};
    for (int s = 0; s < 4; s++) WF_CHECK_EQ(b->tokens[s * 5], resumed[s] * 4);
    WF_CHECK_EQ(wf_loader_get_state(l).epoch, 1);
    WF_CHECK_EQ(wf_loader_get_state(l).sample, 0);
    wf_loader_destroy(l);
    fixture_free(&f);
}
