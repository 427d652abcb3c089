/* Unit tests for pipeline schedules (src/train/pipeline_sched.c): every
 * schedule that the builders make passes the check at many sizes; the
 * simulated bubble equals the textbook formula for GPipe and 1F1B, and is
 * within one stage's share of it for the interleaved schedule; the
 * activations held match the analysis (1F1B's first rank holds pp
 * micro-batches, GPipe's all of them); schedules broken on purpose (a
 * swapped pair that deadlocks, a missing send, a backward moved before its
 * forward) are refused naming the rank and action; the layer split and
 * its refusals. */
#include <math.h>

#include "harness.h"
#include "weft/pipeline.h"

static wf_pp_schedule build(wf_pp_kind kind, int pp, int virt, int micro) {
    wf_pp_schedule s;
    WF_CHECK_OK(wf_pp_schedule_build(&s, kind, pp, virt, micro));
    return s;
}

WF_TEST(pp_bubble_equals_formula_for_gpipe_and_1f1b) {
    for (int kind = WF_PP_GPIPE; kind <= WF_PP_1F1B; kind++)
        for (int pp = 1; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++) {
                wf_pp_schedule s = build((wf_pp_kind)kind, pp, 1, m);
                wf_pp_sim sim;
                int peak[8];
                WF_CHECK_OK(wf_pp_schedule_check(&s, 1.0, 2.0, &sim, peak));
                /* (m + pp - 1) slots of a forward and a backward */
                WF_CHECK_TRUE(fabs(sim.makespan - 3.0 * (m + pp - 1)) < 1e-9);
                if (fabs(sim.bubble - sim.bubble_formula) > 1e-12)
                    wf_test_fail(__FILE__, __LINE__, "%s pp %d m %d: bubble %.6f, formula %.6f",
                                 wf_pp_kind_name((wf_pp_kind)kind), pp, m, sim.bubble, sim.bubble_formula);
                for (int r = 0; r < pp; r++) {
                    int want = kind == WF_PP_GPIPE ? m : (pp - r < m ? pp - r : m);
                    if (peak[r] != want)
                        wf_test_fail(__FILE__, __LINE__, "%s pp %d m %d rank %d holds %d micro-batches, expected %d",
                                     wf_pp_kind_name((wf_pp_kind)kind), pp, m, r, peak[r], want);
                }
                wf_pp_schedule_free(&s);
            }
}

WF_TEST(pp_interleaved_checks_and_shrinks_the_bubble) {
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int v = 2; v <= 4; v++)
            for (int m = pp; m <= 4 * pp; m += pp) {
                wf_pp_schedule s = build(WF_PP_INTERLEAVED, pp, v, m);
                wf_pp_sim sim;
                WF_CHECK_OK(wf_pp_schedule_check(&s, 1.0, 1.0, &sim, NULL));
                double plain = wf_pp_bubble_formula(WF_PP_1F1B, pp, 1, m);
                /* with equal forward and backward times the interleaved
                 * schedule's bubble is the formula's (pp-1)/(v m + pp - 1) */
                if (fabs(sim.bubble - sim.bubble_formula) > 1e-9 || !(sim.bubble < plain))
                    wf_test_fail(__FILE__, __LINE__, "interleaved pp %d v %d m %d: bubble %.6f, formula %.6f, 1f1b %.6f",
                                 pp, v, m, sim.bubble, sim.bubble_formula, plain);
                wf_pp_schedule_free(&s);
            }
}

WF_TEST(pp_broken_schedules_are_named) {
    /* rank 1 (the last stage) waits for micro-batch 1's activation before
     * doing micro-batch 0's backward, which rank 0 needs to go on: swap
     * rank 0's first backward ahead of its second forward's send instead */
    wf_pp_schedule s = build(WF_PP_1F1B, 2, 1, 2);
    /* rank 0: F0.0 >A1.0 F0.1 >A1.1 <G0.0 B0.0 <G0.1 B0.1: move <G0.0 first */
    wf_pp_action *a = s.actions[0];
    WF_CHECK_TRUE(a[0].op == WF_PP_FWD && a[4].op == WF_PP_RECV_GRAD);
    wf_pp_action recv = a[4];
    memmove(&a[1], &a[0], 4 * sizeof *a);
    a[0] = recv;
    WF_CHECK_ERR(wf_pp_schedule_check(&s, 1, 1, NULL, NULL), WF_ERR_INVALID, "deadlocks: rank 0 at action 0 waits on <G0.0");
    wf_pp_schedule_free(&s);

    s = build(WF_PP_GPIPE, 3, 1, 2);
    /* drop rank 1's first send (>A2.0): the activation is received, never sent */
    a = s.actions[1];
    int i = 0;
    while (a[i].op != WF_PP_SEND_ACT) i++;
    memmove(&a[i], &a[i + 1], (size_t)(s.n_actions[1] - i - 1) * sizeof *a);
    s.n_actions[1]--;
    WF_CHECK_ERR(wf_pp_schedule_check(&s, 1, 1, NULL, NULL), WF_ERR_INVALID,
                 "activation of stage 2, micro-batch 0 is received but never sent");
    wf_pp_schedule_free(&s);

    s = build(WF_PP_GPIPE, 1, 1, 2);
    /* pp 1: F0.0 F0.1 B0.0 B0.1; move B0.1 first */
    a = s.actions[0];
    wf_pp_action b = a[3];
    memmove(&a[1], &a[0], 3 * sizeof *a);
    a[0] = b;
    WF_CHECK_ERR(wf_pp_schedule_check(&s, 1, 1, NULL, NULL), WF_ERR_INVALID, "rank 0, action 0 (B0.1): backward before its forward");
    wf_pp_schedule_free(&s);
}

WF_TEST(pp_build_refusals) {
    wf_pp_schedule s;
    WF_CHECK_ERR(wf_pp_schedule_build(&s, WF_PP_1F1B, 2, 2, 4), WF_ERR_CONFIG, "dist.pp_virtual = 2 needs");
    WF_CHECK_ERR(wf_pp_schedule_build(&s, WF_PP_INTERLEAVED, 2, 1, 4), WF_ERR_CONFIG, "2 .. 256");
    WF_CHECK_ERR(wf_pp_schedule_build(&s, WF_PP_INTERLEAVED, 4, 2, 6), WF_ERR_CONFIG,
                 "micro-batches (6) to be a multiple of dist.pp (4)");
    WF_CHECK_ERR(wf_pp_schedule_build(&s, WF_PP_GPIPE, 0, 1, 4), WF_ERR_CONFIG, "dist.pp = 0");
    wf_pp_kind k;
    WF_CHECK_OK(wf_pp_kind_parse("interleaved", &k));
    WF_CHECK_TRUE(k == WF_PP_INTERLEAVED);
    WF_CHECK_ERR(wf_pp_kind_parse("zb", &k), WF_ERR_CONFIG, "gpipe, 1f1b or interleaved");
}

WF_TEST(pp_print) {
    wf_pp_schedule s = build(WF_PP_1F1B, 2, 1, 2);
    char buf[512] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    WF_CHECK_TRUE(f != NULL);
    wf_pp_schedule_print(&s, f);
    fclose(f);
    const char *want = "schedule 1f1b: pp 2, 1 stage a rank, 2 micro-batches\n"
                       "rank 0: F0.0 >A1.0 F0.1 >A1.1 <G0.0 B0.0 <G0.1 B0.1\n"
                       "rank 1: <A1.0 F1.0 B1.0 >G0.0 <A1.1 F1.1 B1.1 >G0.1\n";
    if (strcmp(buf, want)) wf_test_fail(__FILE__, __LINE__, "printed:\n%s", buf);
    wf_pp_schedule_free(&s);
}

WF_TEST(pp_split_layers) {
    int first[9];
    WF_CHECK_OK(wf_pp_split_layers(30, 4, NULL, first));
    int want[] = {0, 8, 16, 23, 30};
    for (int i = 0; i <= 4; i++) WF_CHECK_EQ(first[i], want[i]);
    WF_CHECK_OK(wf_pp_split_layers(30, 4, "6,8,8,8", first));
    WF_CHECK_EQ(first[1], 6);
    WF_CHECK_EQ(first[4], 30);
    WF_CHECK_ERR(wf_pp_split_layers(30, 4, "8,8,7", first), WF_ERR_CONFIG, "3 counts, the pipeline has 4 stages");
    WF_CHECK_ERR(wf_pp_split_layers(30, 4, "8,8,7,6", first), WF_ERR_CONFIG, "sums to 29 layers, the model has 30");
    WF_CHECK_ERR(wf_pp_split_layers(30, 4, "8,8,0,14", first), WF_ERR_CONFIG, "stage 2's count");
    WF_CHECK_ERR(wf_pp_split_layers(30, 2, "8,8,14", first), WF_ERR_CONFIG, "more counts");
    WF_CHECK_ERR(wf_pp_split_layers(3, 4, NULL, first), WF_ERR_CONFIG, "4 stages");
}
