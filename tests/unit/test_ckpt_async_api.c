/* Unit tests of the checkpoint writer's calls for asynchronous saves of
 * several ranks (wf_ckpt_writer_busy, _pending, _commit) as one process
 * sees them: one process's asynchronous and synchronous writers are
 * unchanged by them (commit is a no-op, nothing is ever pending, busy
 * follows the writer thread). The protocol of several ranks needs several
 * processes and runs under mpirun: tests/py/test_ckpt_async_dist.py with
 * tests/tools/ckpt_async_dist.c. Runs under ThreadSanitizer too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"

static float ta_[6 * 4], tb_[5];

static void fill(float seed) {
    for (size_t i = 0; i < sizeof ta_ / sizeof *ta_; i++) ta_[i] = seed + (float)i;
    for (size_t i = 0; i < sizeof tb_ / sizeof *tb_; i++) tb_[i] = -seed - (float)i;
}

static wf_ckpt_writer *make_writer(int async) {
    wf_ckpt_tensor t[2] = {{.name = "a", .ndim = 2, .shape = {6, 4}, .data = ta_},
                           {.name = "b", .ndim = 1, .shape = {5}, .data = tb_}};
    wf_ckpt_writer_opts o = {.rank = 0, .world_size = 1, .async = async};
    wf_ckpt_writer *w = NULL;
    /* one rank: create_ranks needs no communicator and is create */
    WF_CHECK_OK(wf_ckpt_writer_create_ranks(&w, t, 2, &o, NULL));
    return w;
}

/* The checkpoint at dir holds step `step` and the values of fill(seed). */
static void check_holds(const char *dir, uint64_t step, float seed) {
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_EQ(wf_ckpt_step(c), step);
    WF_CHECK_OK(wf_ckpt_verify(c, NULL, NULL));
    float got[6 * 4];
    WF_CHECK_OK(wf_ckpt_read_rows(c, "a", 0, 6, got));
    for (int i = 0; i < 24; i++) WF_CHECK_TRUE(got[i] == seed + (float)i);
    wf_ckpt_close(c);
}

static void one_process(int async) {
    char root[4096], dir[4096];
    snprintf(root, sizeof root, "%s/ckpts-%d", wf_test_tmpdir(), async);
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w = make_writer(async);
    WF_CHECK_EQ(wf_ckpt_writer_busy(w), 0);
    WF_CHECK_EQ(wf_ckpt_writer_pending(w), 0);
    wf_ckpt_save_stats st;
    memset(&st, 0, sizeof st);
    st.step = 12345;
    WF_CHECK_OK(wf_ckpt_writer_commit(w, &st)); /* nothing pending: a no-op */
    WF_CHECK_EQ(st.step, 12345);
    for (uint64_t k = 1; k <= 3; k++) {
        fill((float)k);
        wf_ckpt_step_dir(dir, sizeof dir, root, k);
        WF_CHECK_OK(wf_ckpt_save(w, dir, k, NULL, NULL));
        fill(-1000.0f); /* the save holds the state of its call */
        WF_CHECK_EQ(wf_ckpt_writer_pending(w), 0); /* one process: the writer thread commits itself */
        /* commit neither blocks for nor disturbs the save in flight */
        WF_CHECK_OK(wf_ckpt_writer_commit(w, &st));
        WF_CHECK_EQ(st.step, 12345);
        if (!async) WF_CHECK_EQ(wf_ckpt_writer_busy(w), 0);
    }
    WF_CHECK_OK(wf_ckpt_writer_wait(w, NULL));
    WF_CHECK_EQ(wf_ckpt_writer_busy(w), 0);
    WF_CHECK_EQ(wf_ckpt_writer_pending(w), 0);
    WF_CHECK_TRUE(wf_ckpt_writer_poll(w, &st));
    WF_CHECK_EQ(st.step, 3);
    WF_CHECK_EQ(st.status, WF_OK);
    WF_CHECK_TRUE(st.commit_seconds == 0.0); /* no collective commit with one process */
    wf_ckpt_writer_destroy(w);
    for (uint64_t k = 1; k <= 3; k++) {
        wf_ckpt_step_dir(dir, sizeof dir, root, k);
        check_holds(dir, k, (float)k);
    }
}

WF_TEST(one_process_async_commit_is_a_no_op) { one_process(1); }
WF_TEST(one_process_sync_commit_is_a_no_op) { one_process(0); }

WF_TEST(several_ranks_need_their_communicator) {
    /* async or not, W > 1 without the communicator is refused */
    wf_ckpt_tensor t[1] = {{.name = "a", .ndim = 2, .shape = {6, 4}, .data = ta_}};
    wf_ckpt_writer_opts o = {.rank = 1, .world_size = 2, .async = 1};
    wf_ckpt_writer *w = NULL;
    WF_CHECK_ERR(wf_ckpt_writer_create_ranks(&w, t, 1, &o, NULL), WF_ERR_UNSUPPORTED, "communicator");
    WF_CHECK_TRUE(w == NULL);
}
