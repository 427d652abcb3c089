/* The mixture schedule (include/weft/mixture.h, docs/loader.md "Dataset
 * mixing"): weights read exactly, the documented bound over every prefix
 * and every window of consecutive slots (checked in integers, for many
 * weight vectors and source counts), the period, advance against
 * slot-by-slot, weight changes, and the checks of a state read from a
 * file. */
#include "harness.h"
#include "weft/mixture.h"
#include "weft/rng.h"

static wf_mix_weights weights_of(const char *const *text, int n) {
    wf_mix_weights w;
    WF_CHECK_OK(wf_mix_weights_parse(&w, text, n, "test"));
    return w;
}

WF_TEST(mix_weights_parse_exact) {
    const char *a[] = {"0.7", "0.3"};
    wf_mix_weights w = weights_of(a, 2);
    WF_CHECK_EQ(w.n, 2);
    WF_CHECK_EQ(w.w[0], 7);
    WF_CHECK_EQ(w.w[1], 3);
    WF_CHECK_EQ(w.period, 10);
    const char *b[] = {"2", "1", "0"};
    w = weights_of(b, 3);
    WF_CHECK_EQ(w.w[0], 2);
    WF_CHECK_EQ(w.w[1], 1);
    WF_CHECK_EQ(w.w[2], 0);
    WF_CHECK_EQ(w.period, 3);
    WF_CHECK_EQ(wf_mix_weights_active(&w), 2);
    const char *c[] = {"0.25", ".5", "0.250000"};
    w = weights_of(c, 3);
    WF_CHECK_EQ(w.w[0], 1);
    WF_CHECK_EQ(w.w[1], 2);
    WF_CHECK_EQ(w.w[2], 1);
    const char *d[] = {"0.000001", "1"};
    w = weights_of(d, 2);
    WF_CHECK_EQ(w.w[0], 1);
    WF_CHECK_EQ(w.w[1], 1000000);
    /* The same ratios compare equal whatever their spelling. */
    const char *e[] = {"14", "6"};
    wf_mix_weights w1 = weights_of(a, 2), w2 = weights_of(e, 2);
    WF_CHECK_TRUE(wf_mix_weights_equal(&w1, &w2));
    char buf[64];
    wf_mix_weights_format(&w1, buf, sizeof buf);
    WF_CHECK_TRUE(strcmp(buf, "0.7 0.3") == 0);
}

WF_TEST(mix_weights_parse_refuses) {
    wf_mix_weights w;
    const char *neg[] = {"-1", "1"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, neg, 2, "data.sources"), WF_ERR_CONFIG, "data.sources: weight 1 is '-1'");
    const char *exp[] = {"1", "1e-3"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, exp, 2, "data.sources"), WF_ERR_CONFIG, "weight 2 is '1e-3'");
    const char *digits[] = {"0.1234567"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, digits, 1, "x"), WF_ERR_CONFIG, "at most 6 digits");
    const char *big[] = {"1000000"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, big, 1, "x"), WF_ERR_CONFIG, "below 1000000");
    const char *empty[] = {"", "1"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, empty, 2, "x"), WF_ERR_CONFIG, "weight 1 is ''");
    const char *dot[] = {"."};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, dot, 1, "x"), WF_ERR_CONFIG, "weight 1 is '.'");
    const char *zeros[] = {"0", "0.0"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, zeros, 2, "x"), WF_ERR_CONFIG, "every weight is 0");
    const char *fine[] = {"0.000001", "16.777216"};
    WF_CHECK_ERR(wf_mix_weights_parse(&w, fine, 2, "x"), WF_ERR_CONFIG, "add up to more than 16777216");
    const char *many[WF_MIX_MAX_SOURCES + 1];
    for (int i = 0; i <= WF_MIX_MAX_SOURCES; i++) many[i] = "1";
    WF_CHECK_ERR(wf_mix_weights_parse(&w, many, WF_MIX_MAX_SOURCES + 1, "x"), WF_ERR_CONFIG, "a mixture has 1 to 64");
    WF_CHECK_OK(wf_mix_weights_parse(&w, many, WF_MIX_MAX_SOURCES, "x"));
}

/* The sources of slots [0, len) from a fresh state. */
static void run_schedule(const wf_mix_weights *w, int *seq, size_t len) {
    wf_mix_state s;
    wf_mix_state_init(&s, w);
    for (size_t i = 0; i < len; i++) WF_CHECK_OK(wf_mix_next(&s, &seq[i]));
}

/* |count * S - m * w_k| * M <= bound * A * S, in integers (D = A / M). */
static int within(uint64_t count, uint64_t m, const wf_mix_weights *w, int k, uint64_t bound) {
    const int n = wf_mix_weights_active(w);
    const uint64_t M = n > 1 ? 2 * (uint64_t)n - 2 : 1, A = n > 1 ? M - 1 : 0;
    uint64_t a = count * w->period, b = m * w->w[k];
    return (a > b ? a - b : b - a) * M <= bound * A * w->period;
}

/* Every prefix within D, every window of consecutive slots within 2D, the
 * counts after each period exactly the weights, and the bound reached (it
 * is tight for some weights, so a looser schedule would fail). */
static void check_bound(const wf_mix_weights *w) {
    const size_t S = w->period, len = 2 * S + 3;
    int *seq = malloc(len * sizeof *seq);
    uint64_t *pre = calloc((len + 1) * (size_t)w->n, sizeof *pre); /* pre[t*n + k]: count of k in [0, t) */
    WF_CHECK_TRUE(seq && pre);
    run_schedule(w, seq, len);
    for (size_t t = 0; t < len; t++) {
        for (int k = 0; k < w->n; k++) pre[(t + 1) * (size_t)w->n + (size_t)k] = pre[t * (size_t)w->n + (size_t)k];
        WF_CHECK_TRUE(seq[t] >= 0 && seq[t] < w->n && w->w[seq[t]] > 0);
        pre[(t + 1) * (size_t)w->n + (size_t)seq[t]]++;
    }
    for (int k = 0; k < w->n; k++) {
        WF_CHECK_EQ(pre[S * (size_t)w->n + (size_t)k], w->w[k]);
        WF_CHECK_EQ(pre[2 * S * (size_t)w->n + (size_t)k], 2 * (uint64_t)w->w[k]);
    }
    for (size_t t = 0; t <= len; t++)
        for (int k = 0; k < w->n; k++)
            if (!within(pre[t * (size_t)w->n + (size_t)k], t, w, k, 1))
                wf_test_fail(__FILE__, __LINE__, "period %u: source %d has %llu of the first %zu slots (weight %u)",
                             w->period, k, (unsigned long long)pre[t * (size_t)w->n + (size_t)k], t, w->w[k]);
    for (size_t a = 0; a < len; a++)
        for (size_t b = a + 1; b <= len; b++)
            for (int k = 0; k < w->n; k++) {
                uint64_t cnt = pre[b * (size_t)w->n + (size_t)k] - pre[a * (size_t)w->n + (size_t)k];
                if (!within(cnt, b - a, w, k, 2))
                    wf_test_fail(__FILE__, __LINE__, "period %u: source %d has %llu of slots [%zu, %zu) (weight %u)",
                                 w->period, k, (unsigned long long)cnt, a, b, w->w[k]);
            }
    free(pre);
    free(seq);
}

WF_TEST(mix_bound_every_window) {
    /* Hand-picked, then random weight vectors of 1 to 8 sources (some 0). */
    const uint64_t fixed[][4] = {{7, 3, 0, 0}, {1, 1, 0, 0}, {1, 2, 1, 0}, {5, 3, 2, 0}, {1, 1, 1, 97},
                                 {99, 1, 0, 0}, {0, 4, 0, 1}, {13, 17, 19, 23}};
    const int fixed_n[] = {2, 2, 3, 3, 4, 2, 4, 4};
    for (size_t i = 0; i < sizeof fixed_n / sizeof *fixed_n; i++) {
        wf_mix_weights w;
        WF_CHECK_OK(wf_mix_weights_from_ints(&w, fixed[i], fixed_n[i], "test"));
        check_bound(&w);
    }
    wf_rng r = wf_rng_make(15, 0);
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + (int)wf_rng_below(&r, 8);
        uint64_t v[8];
        int any = 0;
        for (int k = 0; k < n; k++) {
            uint64_t kind = wf_rng_below(&r, 4);
            v[k] = kind == 0 ? wf_rng_below(&r, 3) : kind == 1 ? 1 + wf_rng_below(&r, 10) : 1 + wf_rng_below(&r, 60);
            any |= v[k] > 0;
        }
        if (!any) v[0] = 1;
        wf_mix_weights w;
        WF_CHECK_OK(wf_mix_weights_from_ints(&w, v, n, "test"));
        if (w.period > 250) continue; /* every window is O(S^2 n) */
        check_bound(&w);
    }
}

WF_TEST(mix_bound_is_tight) {
    /* D is reached: 2, 1, 1 gives 0, 1, 0, 2, and after 3 slots source 2
     * has 0 where 3/4 is due: D = 1 - 1/4 exactly. A schedule or a D
     * that allowed more would show in mix_bound_every_window; this shows
     * the bound is not loose. */
    uint64_t v[3] = {2, 1, 1};
    wf_mix_weights w;
    WF_CHECK_OK(wf_mix_weights_from_ints(&w, v, 3, "test"));
    int seq[4];
    run_schedule(&w, seq, 4);
    WF_CHECK_TRUE(seq[0] == 0 && seq[1] == 1 && seq[2] == 0 && seq[3] == 2);
    WF_CHECK_TRUE(within(0, 3, &w, 2, 1) && !within(0, 4, &w, 2, 1));
    WF_CHECK_TRUE(wf_mix_bound(2) == 0.5 && wf_mix_bound(3) == 0.75 && wf_mix_bound(1) == 0.0);
    /* The docs' example: 0.7 / 0.3. */
    uint64_t d[2] = {7, 3};
    WF_CHECK_OK(wf_mix_weights_from_ints(&w, d, 2, "test"));
    int s10[10];
    run_schedule(&w, s10, 10);
    const int want[10] = {0, 1, 0, 0, 0, 1, 0, 0, 1, 0};
    for (int i = 0; i < 10; i++) WF_CHECK_EQ(s10[i], want[i]);
    uint64_t e[3] = {5, 3, 2};
    WF_CHECK_OK(wf_mix_weights_from_ints(&w, e, 3, "test"));
    run_schedule(&w, s10, 10);
    const int want3[10] = {0, 1, 0, 2, 0, 1, 0, 2, 0, 1};
    for (int i = 0; i < 10; i++) WF_CHECK_EQ(s10[i], want3[i]);
}

WF_TEST(mix_advance_equals_next) {
    uint64_t v[4] = {5, 0, 3, 11};
    wf_mix_weights w;
    WF_CHECK_OK(wf_mix_weights_from_ints(&w, v, 4, "test"));
    const uint64_t jumps[] = {0, 1, 7, 19, 38, 100, 1};
    wf_mix_state a, b;
    wf_mix_state_init(&a, &w);
    wf_mix_state_init(&b, &w);
    for (size_t i = 0; i < sizeof jumps / sizeof *jumps; i++) {
        WF_CHECK_OK(wf_mix_advance(&a, jumps[i]));
        for (uint64_t j = 0; j < jumps[i]; j++) {
            int k;
            WF_CHECK_OK(wf_mix_next(&b, &k));
        }
        WF_CHECK_TRUE(memcmp(&a, &b, sizeof a) == 0);
        WF_CHECK_OK(wf_mix_state_check(&a, "test"));
    }
    /* A million slots at once is whole periods plus the rest. */
    wf_mix_state_init(&a, &w);
    WF_CHECK_OK(wf_mix_advance(&a, 1000003));
    WF_CHECK_EQ(a.slot, 1000003);
    WF_CHECK_EQ(a.taken[0] + a.taken[1] + a.taken[2] + a.taken[3], 1000003);
    WF_CHECK_EQ(a.taken[1], 0);
    WF_CHECK_OK(wf_mix_state_check(&a, "test"));
}

WF_TEST(mix_weight_change_starts_a_segment) {
    const char *a[] = {"0.7", "0.3"}, *b[] = {"0.2", "0.8"};
    wf_mix_weights w0 = weights_of(a, 2), w1 = weights_of(b, 2);
    wf_mix_state s;
    wf_mix_state_init(&s, &w0);
    WF_CHECK_OK(wf_mix_advance(&s, 13)); /* mid-period */
    uint64_t before0 = s.taken[0], before1 = s.taken[1];
    wf_mix_set_weights(&s, &w1);
    WF_CHECK_EQ(s.seg_slot, 13);
    WF_CHECK_OK(wf_mix_state_check(&s, "test"));
    /* From the change on, the new weights' schedule from its start. */
    int want[10], k;
    run_schedule(&w1, want, 10);
    for (int i = 0; i < 10; i++) {
        WF_CHECK_OK(wf_mix_next(&s, &k));
        WF_CHECK_EQ(k, want[i]);
    }
    WF_CHECK_EQ(s.taken[0] - before0, 2);
    WF_CHECK_EQ(s.taken[1] - before1, 8);
}

WF_TEST(mix_state_check_refuses) {
    const char *a[] = {"0.7", "0.3"};
    wf_mix_weights w = weights_of(a, 2);
    wf_mix_state s;
    wf_mix_state_init(&s, &w);
    WF_CHECK_OK(wf_mix_advance(&s, 25));
    WF_CHECK_OK(wf_mix_state_check(&s, "ckpt"));
    wf_mix_state bad = s;
    bad.taken[0]++;
    WF_CHECK_ERR(wf_mix_state_check(&bad, "ckpt"), WF_ERR_FORMAT, "ckpt: the mixture's counts do not add up");
    bad = s; /* 25 slots: 18 and 7 (two periods, then 4 and 1 of the next 5); 2 and 3 after 5 is 1.5 off */
    bad.taken[0] -= 2;
    bad.taken[1] += 2;
    WF_CHECK_ERR(wf_mix_state_check(&bad, "ckpt"), WF_ERR_FORMAT, "no schedule gets there");
    bad = s;
    bad.weights.w[0] = 14;
    bad.weights.w[1] = 6;
    bad.weights.period = 20;
    WF_CHECK_ERR(wf_mix_state_check(&bad, "ckpt"), WF_ERR_FORMAT, "without a common factor");
    bad = s;
    bad.seg_slot = 30;
    WF_CHECK_ERR(wf_mix_state_check(&bad, "ckpt"), WF_ERR_FORMAT, "do not add up");
    /* wf_mix_next refuses to go on from such a state, never picks blindly. */
    bad = s;
    bad.slot++;
    int k;
    WF_CHECK_ERR(wf_mix_next(&bad, &k), WF_ERR_INTERNAL, "does not add up");
}

WF_TEST(mix_spec_parse) {
    const char *src[] = {"web=data/web:0.7", " data/books/ : 0.3 ", "x=y=z/a:1"};
    const char *chg[] = {"100: 0.5 0.5 0", " 200 :1\t2   3"};
    wf_mix_spec m;
    WF_CHECK_OK(wf_mix_spec_parse(&m, src, 3, chg, 2, "data.sources", "data.weight_schedule"));
    WF_CHECK_EQ(m.n, 3);
    WF_CHECK_STREQ(m.names[0], "web");
    WF_CHECK_STREQ(m.dirs[0], "data/web");
    WF_CHECK_STREQ(m.names[1], "books"); /* the directory's last component */
    WF_CHECK_STREQ(m.dirs[1], "data/books/");
    WF_CHECK_STREQ(m.names[2], "x");     /* a name, then a directory with '=' in it */
    WF_CHECK_STREQ(m.dirs[2], "y=z/a");
    WF_CHECK_EQ(m.weights.w[0], 7);
    WF_CHECK_EQ(m.weights.w[1], 3);
    WF_CHECK_EQ(m.weights.w[2], 10);
    WF_CHECK_EQ(m.n_changes, 2);
    WF_CHECK_EQ(m.change_step[0], 100);
    WF_CHECK_EQ(m.change_step[1], 200);
    WF_CHECK_TRUE(wf_mix_spec_weights_at(&m, 1) == &m.weights && wf_mix_spec_weights_at(&m, 99) == &m.weights);
    WF_CHECK_TRUE(wf_mix_spec_weights_at(&m, 100) == &m.change_w[0]);
    WF_CHECK_TRUE(wf_mix_spec_weights_at(&m, 199) == &m.change_w[0]);
    WF_CHECK_TRUE(wf_mix_spec_weights_at(&m, 200) == &m.change_w[1]);
    WF_CHECK_EQ(m.change_w[0].w[2], 0);
    WF_CHECK_EQ(m.change_w[1].w[2], 3);
    wf_mix_spec_free(&m);
}

WF_TEST(mix_spec_parse_refuses) {
    wf_mix_spec m;
    struct {
        const char *src[2];
        const char *chg[2];
        size_t n_chg;
        const char *msg;
    } bad[] = {
        {{"a:1", "b"}, {NULL}, 0, "data.sources item 2 'b' has no weight"},
        {{"a:1", "b:"}, {NULL}, 0, "data.sources item 2 'b:' has no weight"},
        {{"a:1", ":1"}, {NULL}, 0, "data.sources item 2 ':1' has no directory"},
        {{"a:1", "n=:1"}, {NULL}, 0, "data.sources item 2 'n=:1' has no directory"},
        {{"a:1", "d/a b:1"}, {NULL}, 0, "the directory's name 'a b' cannot name the source"},
        {{"x/a:1", "y/a:2"}, {NULL}, 0, "data.sources items 1 and 2 are both named 'a'"},
        {{"a:1", "b:two"}, {NULL}, 0, "data.sources: weight 2 is 'two'"},
        {{"a:1", "b:1"}, {"7: 1"}, 1, "data.weight_schedule item 1 '7: 1': 1 weight for 2 sources"},
        {{"a:1", "b:1"}, {"0: 1 1"}, 1, "data.weight_schedule item 1 '0: 1 1': write it as"},
        {{"a:1", "b:1"}, {"7 1 1"}, 1, "data.weight_schedule item 1 '7 1 1': write it as"},
        {{"a:1", "b:1"}, {"7: 1 1", "7: 2 1"}, 2, "item 2 '7: 2 1': step 7 is not after the previous item's step 7"},
        {{"a:1", "b:1"}, {"7: 0 0"}, 1, "data.weight_schedule item 1 '7: 0 0': every weight is 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        wf_status s = wf_mix_spec_parse(&m, bad[i].src, 2, bad[i].chg, bad[i].n_chg, "data.sources",
                                        "data.weight_schedule");
        if (s != WF_ERR_CONFIG || !strstr(wf_error_msg(), bad[i].msg))
            wf_test_fail(__FILE__, __LINE__, "case %zu: %s: '%s' lacks '%s'", i, wf_status_str(s), wf_error_msg(),
                         bad[i].msg);
        wf_mix_spec_free(&m);
    }
    WF_CHECK_ERR(wf_mix_spec_parse(&m, NULL, 0, NULL, 0, "--sources", "--weight-schedule"), WF_ERR_CONFIG,
                 "--sources is empty");
    wf_mix_spec_free(&m);
}
