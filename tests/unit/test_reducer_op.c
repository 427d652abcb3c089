/* Unit tests of the reducer's op (wf_reducer_set_op) on the single-process
 * backend: which ops it takes, that it cannot change while a step's
 * buckets are in flight, and that a step with SUM leaves the one rank's
 * gradient as it is. Its effect across ranks (SUM on pre-scaled gradients
 * gives AVG's bits for W a power of two) is tests/py/test_reduce_sum.py's. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/comm.h"

static wf_comm *single_comm(void) {
    static const char *vars[] = {"WEFT_DIST_BACKEND", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                 "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    wf_comm *c = NULL;
    wf_comm_options o = wf_comm_options_default();
    WF_CHECK_OK(wf_comm_create(&c, &o));
    return c;
}

WF_TEST(reducer_op_is_avg_or_sum) {
    wf_comm *c = single_comm();
    float grads[30];
    wf_comm_span t[3] = {{0, 10}, {10, 10}, {20, 10}};
    wf_reducer *r = NULL;
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 3, 40));
    WF_CHECK_OK(wf_reducer_set_op(r, WF_COMM_SUM));
    WF_CHECK_OK(wf_reducer_set_op(r, WF_COMM_AVG));
    WF_CHECK_ERR(wf_reducer_set_op(r, WF_COMM_MAX), WF_ERR_INVALID, "neither AVG nor SUM");
    WF_CHECK_ERR(wf_reducer_set_op(r, WF_COMM_MIN), WF_ERR_INVALID, "neither AVG nor SUM");
    WF_CHECK_ERR(wf_reducer_set_op(r, WF_COMM_BOR), WF_ERR_INVALID, "neither AVG nor SUM");
    wf_reducer_destroy(r);
    wf_comm_destroy(c);
}

WF_TEST(reducer_op_fixed_while_buckets_are_in_flight) {
    wf_comm *c = single_comm();
    float grads[30] = {0};
    wf_comm_span t[3] = {{0, 10}, {10, 10}, {20, 10}};
    wf_reducer *r = NULL;
    /* 40 bytes: one bucket per tensor, bucket 0 = tensor 2. */
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 3, 40));
    WF_CHECK_EQ(wf_reducer_num_buckets(r), 3);
    /* A ready tensor whose bucket cannot start yet (bucket 1 after 0):
     * nothing is in flight, the op may still change. */
    WF_CHECK_OK(wf_reducer_ready(r, 1));
    WF_CHECK_OK(wf_reducer_set_op(r, WF_COMM_SUM));
    WF_CHECK_OK(wf_reducer_ready(r, 2)); /* starts buckets 0 and 1 */
    WF_CHECK_ERR(wf_reducer_set_op(r, WF_COMM_AVG), WF_ERR_INVALID, "wf_reducer_finish first");
    WF_CHECK_OK(wf_reducer_finish(r));
    WF_CHECK_EQ(wf_reducer_overlapped(r), 2);
    WF_CHECK_OK(wf_reducer_set_op(r, WF_COMM_AVG));
    wf_reducer_destroy(r);
    wf_comm_destroy(c);
}

WF_TEST(reducer_sum_on_one_rank_keeps_the_gradient) {
    wf_comm *c = single_comm();
    enum { N = 1000 };
    float *grads = malloc(N * sizeof *grads), *want = malloc(N * sizeof *want);
    WF_CHECK_TRUE(grads && want);
    for (int i = 0; i < N; i++) want[i] = grads[i] = 0.001f * (float)(i - 500) / 3.0f;
    wf_comm_span t[4] = {{0, 100}, {100, 400}, {500, 1}, {501, 499}};
    wf_reducer *r = NULL;
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 4, 1024));
    WF_CHECK_OK(wf_reducer_set_op(r, WF_COMM_SUM));
    for (int step = 0; step < 2; step++) {
        for (int i = 3; i >= 0; i--) WF_CHECK_OK(wf_reducer_ready(r, i));
        WF_CHECK_OK(wf_reducer_finish(r));
        WF_CHECK_TRUE(memcmp(grads, want, N * sizeof *grads) == 0);
    }
    wf_reducer_destroy(r);
    wf_comm_destroy(c);
    free(grads);
    free(want);
}
