/* Unit tests for the batch-size ramp (src/data/batch_ramp.c): the size of
 * every step of small ramps against a step-by-step simulation of the
 * formula start + min(n, floor(c * n / R)) * inc done in 128-bit
 * arithmetic, the tokens after any number of steps from any point of the
 * trajectory, BLOOM's ramp at its real sizes (where c * n no longer fits
 * 64 bits), and the configs that are refused, each naming its key. */
#include <stdint.h>

#include "harness.h"
#include "weft/batch_ramp.h"
#include "weft/rng.h"

__extension__ typedef unsigned __int128 u128;

/* The reference: the formula of batch_ramp.h, directly. */
static int64_t ref_seqs(const wf_batch_ramp_config *c, uint64_t done) {
    if (c->start == 0) return c->final;
    int64_t inc = c->inc ? c->inc : c->micro;
    uint64_t n = (uint64_t)((c->final - c->start) / inc);
    u128 k = (u128)done * n / (u128)(uint64_t)c->tokens;
    if (k > n) k = n;
    return c->start + (int64_t)k * inc;
}

static wf_batch_ramp make(const wf_batch_ramp_config *c) {
    wf_batch_ramp r;
    WF_CHECK_OK(wf_batch_ramp_init(&r, c));
    return r;
}

/* Walks `steps` steps, checking every function at every step. */
static void walk(const wf_batch_ramp_config *c, int steps) {
    wf_batch_ramp r = make(c);
    uint64_t done = 0;
    uint64_t *at = malloc(((size_t)steps + 1) * sizeof *at);
    WF_CHECK_TRUE(at != NULL);
    for (int s = 0; s <= steps; s++) {
        at[s] = done;
        int64_t seqs = wf_batch_ramp_seqs(&r, done);
        if (seqs != ref_seqs(c, done))
            wf_test_fail(__FILE__, __LINE__, "step %d (%llu tokens done): %lld sequences, the formula says %lld", s,
                         (unsigned long long)done, (long long)seqs, (long long)ref_seqs(c, done));
        WF_CHECK_TRUE(seqs % c->micro == 0 && seqs >= r.start && seqs <= c->final);
        WF_CHECK_EQ(wf_batch_ramp_tokens_in(&r, 0, (uint64_t)s), done);
        /* steps_at_size: that many steps keep the size, the next one differs */
        uint64_t m = wf_batch_ramp_steps_at_size(&r, done);
        if (seqs == c->final) {
            WF_CHECK_TRUE(m == UINT64_MAX);
        } else {
            WF_CHECK_TRUE(m >= 1);
            uint64_t d = done;
            for (uint64_t i = 0; i < m; i++) {
                WF_CHECK_EQ(ref_seqs(c, d), seqs);
                d += (uint64_t)seqs * (uint64_t)c->seq_len;
            }
            WF_CHECK_TRUE(ref_seqs(c, d) > seqs);
        }
        done += (uint64_t)seqs * (uint64_t)c->seq_len;
    }
    /* from any point of the trajectory to any later one */
    for (int a = 0; a <= steps; a += 3)
        for (int b = a; b <= steps; b += 5) WF_CHECK_EQ(wf_batch_ramp_tokens_in(&r, at[a], (uint64_t)(b - a)), at[b] - at[a]);
    free(at);
}

WF_TEST(no_ramp_is_the_final_batch_every_step) {
    wf_batch_ramp_config c = {.final = 32, .micro = 8, .world = 2, .seq_len = 16};
    wf_batch_ramp r = make(&c);
    WF_CHECK_TRUE(!wf_batch_ramp_active(&r));
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 0), 32);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 123456789), 32);
    WF_CHECK_EQ(wf_batch_ramp_tokens_in(&r, 77, 10), 10 * 32 * 16);
    WF_CHECK_TRUE(wf_batch_ramp_steps_at_size(&r, 0) == UINT64_MAX);
}

WF_TEST(worked_example_of_the_docs) {
    /* docs/loader.md: micro-batch 4, 8 -> 32 sequences in steps of 8 over
     * 4096 tokens of T = 32: n = 3 increases at ceil(k * 4096 / 3) tokens =
     * 1366, 2731, 4096. Steps of 8 x 32 = 256 tokens: 6 of them (1536 >=
     * 1366); then 16 x 32 = 512: 3 (3072 >= 2731); then 24 x 32 = 768: 2
     * (4608 >= 4096); then 32 for good. */
    wf_batch_ramp_config c = {.start = 8, .inc = 8, .tokens = 4096, .final = 32, .micro = 4, .world = 2, .seq_len = 32};
    wf_batch_ramp r = make(&c);
    WF_CHECK_TRUE(wf_batch_ramp_active(&r));
    WF_CHECK_EQ(r.n_inc, 3);
    const int64_t want[] = {8, 8, 8, 8, 8, 8, 16, 16, 16, 24, 24, 32, 32, 32};
    uint64_t done = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        WF_CHECK_EQ(wf_batch_ramp_seqs(&r, done), want[i]);
        done += (uint64_t)want[i] * 32;
    }
    WF_CHECK_EQ(wf_batch_ramp_steps_at_size(&r, 0), 6);
    WF_CHECK_EQ(wf_batch_ramp_tokens_in(&r, 0, 11), 4608);
    /* the last token before each threshold, and the threshold itself */
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 1365), 8);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 1366), 16);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 2730), 16);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 2731), 24);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 4095), 24);
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, 4096), 32);
}

WF_TEST(small_ramps_match_the_formula_step_by_step) {
    wf_rng g = wf_rng_make(19, 1);
    for (int trial = 0; trial < 300; trial++) {
        int64_t micro = 1 + (int64_t)wf_rng_below(&g, 6);
        int64_t inc = micro * (1 + (int64_t)wf_rng_below(&g, 3));
        int64_t n = 1 + (int64_t)wf_rng_below(&g, 12);
        int64_t start = micro * (1 + (int64_t)wf_rng_below(&g, 5));
        wf_batch_ramp_config c = {.start = start,
                                  .inc = trial % 4 == 0 ? 0 : inc, /* 0: one micro-batch */
                                  .tokens = 1 + (int64_t)wf_rng_below(&g, 20000),
                                  .final = start + n * (trial % 4 == 0 ? micro : inc),
                                  .micro = micro,
                                  .world = 1,
                                  .seq_len = 1 + (int64_t)wf_rng_below(&g, 64)};
        walk(&c, 80);
    }
}

WF_TEST(bloom_sized_ramp_matches_the_formula) {
    /* BLOOM-176B: 192 -> 2048 by 16 over 9,765,625 samples of 2048 tokens;
     * c * n passes 2^64 long before the end of a long run. */
    wf_batch_ramp_config c = {.start = 192,
                              .inc = 16,
                              .tokens = 9765625LL * 2048,
                              .final = 2048,
                              .micro = 16,
                              .world = 8,
                              .seq_len = 2048};
    wf_batch_ramp r = make(&c);
    WF_CHECK_EQ(r.n_inc, 116);
    wf_rng g = wf_rng_make(7, 2);
    for (int i = 0; i < 20000; i++) {
        uint64_t done = wf_rng_u64(&g) >> (i % 40);
        WF_CHECK_EQ(wf_batch_ramp_seqs(&r, done), ref_seqs(&c, done));
    }
    walk(&c, 3000);
    /* a long run: 2^62 tokens saturate nothing; 2^64 steps do */
    WF_CHECK_EQ(wf_batch_ramp_seqs(&r, (uint64_t)1 << 62), 2048);
    WF_CHECK_TRUE(wf_batch_ramp_tokens_in(&r, 0, UINT64_MAX / 2) == UINT64_MAX);
    /* many increases, each one step long */
    wf_batch_ramp_config d = {.start = 1, .tokens = 1000, .final = 1 + WF_BATCH_RAMP_MAX_INCREASES, .micro = 1,
                              .world = 1, .seq_len = 1};
    walk(&d, 200);
}

WF_TEST(bad_configs_name_the_key) {
    wf_batch_ramp r;
    wf_batch_ramp_config ok = {.start = 8, .inc = 8, .tokens = 4096, .final = 32, .micro = 4, .world = 2, .seq_len = 32};
    wf_batch_ramp_config c = ok;
    c.start = 6;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_start = 6 sequences is not a multiple of "
                                                            "data.batch_size = 4");
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "split over the 2 ranks; use 4 or 8");
    c = ok, c.start = 32;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_start = 32 sequences is not below the "
                                                            "final global batch of 32 sequences");
    c = ok, c.start = 40;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.global_batch_tokens / data.seq_len = 1024 / 32");
    c = ok, c.inc = 6;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_step = 6 sequences is not a multiple of "
                                                            "data.batch_size = 4");
    c = ok, c.inc = 16;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_step = 16 sequences does not divide the "
                                                            "ramp's growth from data.batch_ramp_start = 8 to the "
                                                            "final 32 sequences (24)");
    c = ok, c.tokens = 0;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_tokens = 0: give the tokens");
    c = ok, c.start = 0;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_step = 8 is set but "
                                                            "data.batch_ramp_start is 0");
    c.inc = 0;
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "data.batch_ramp_tokens = 4096 is set but "
                                                            "data.batch_ramp_start is 0");
    c = (wf_batch_ramp_config){.start = 1, .tokens = 10, .final = 2 + WF_BATCH_RAMP_MAX_INCREASES, .micro = 1,
                               .world = 1, .seq_len = 1};
    WF_CHECK_ERR(wf_batch_ramp_init(&r, &c), WF_ERR_CONFIG, "more than 1048576: use a larger step");
    /* a refused config leaves no ramp behind */
    WF_CHECK_TRUE(!wf_batch_ramp_active(&r));
}
