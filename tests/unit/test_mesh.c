/* Unit tests for sub-communicators, messages and the device mesh on the
 * single-process backend (src/comm/comm.c, src/comm/mesh.c; the MPI
 * cases are tests/py/test_mesh_mpi.py): a split is a world of one named
 * by its axis; a message to oneself or to a rank that does not exist is
 * refused naming the peer; a mesh of size-1 axes fits one process, and
 * one that needs more ranks is refused with its shape; bad axis names. */
#include "harness.h"
#include "weft/comm.h"

static wf_comm *world(void) {
    wf_comm_options o = wf_comm_options_default();
    o.backend = "single";
    o.timeout_s = o.timeout_first_s = 0;
    wf_comm *c;
    WF_CHECK_OK(wf_comm_create(&c, &o));
    return c;
}

WF_TEST(split_on_one_process) {
    wf_comm *c = world(), *k;
    WF_CHECK_OK(wf_comm_split(c, 0, 0, "tp", &k));
    WF_CHECK_EQ(wf_comm_size(k), 1);
    WF_CHECK_EQ(wf_comm_rank(k), 0);
    WF_CHECK_TRUE(strcmp(wf_comm_axis(k), "tp") == 0 && strcmp(wf_comm_axis(c), "") == 0);
    float x = 3;
    WF_CHECK_OK(wf_comm_all_reduce(k, &x, 1, WF_COMM_AVG, "t"));
    WF_CHECK_TRUE(x == 3);
    wf_comm *bad;
    WF_CHECK_ERR(wf_comm_split(c, 0, 0, "a-name-far-too-long", &bad), WF_ERR_INVALID, "1 to 15 characters");
    WF_CHECK_ERR(wf_comm_split(c, -1, 0, "dp", &bad), WF_ERR_INVALID, "color -1");
    WF_CHECK_TRUE(bad == NULL);
    wf_comm_destroy(k);
    wf_comm_destroy(c);
}

WF_TEST(messages_need_another_rank) {
    wf_comm *c = world();
    float x[2] = {0};
    WF_CHECK_ERR(wf_comm_send(c, x, sizeof x, 0, 1, "act"), WF_ERR_INVALID,
                 "send \"act\": peer 0 is not another rank of this communicator (0..0, this is 0)");
    WF_CHECK_ERR(wf_comm_recv(c, x, sizeof x, 2, 1, "grad"), WF_ERR_INVALID, "recv \"grad\": peer 2");
    wf_comm_destroy(c);
}

WF_TEST(mesh_on_one_process) {
    wf_comm *c = world();
    wf_mesh *m;
    const char *names[] = {"pp", "dp", "tp"};
    int ones[] = {1, 1, 1};
    WF_CHECK_OK(wf_mesh_create(c, 3, names, ones, &m));
    WF_CHECK_EQ(wf_mesh_size(m, "tp"), 1);
    WF_CHECK_EQ(wf_mesh_coord(m, "dp"), 0);
    WF_CHECK_TRUE(wf_mesh_comm(m, "cp") == NULL && wf_mesh_coord(m, "cp") == -1);
    WF_CHECK_TRUE(strcmp(wf_comm_axis(wf_mesh_comm(m, "pp")), "pp") == 0);
    int at[] = {0, 0, 0}, off[] = {0, 1, 0};
    WF_CHECK_EQ(wf_mesh_rank_at(m, at), 0);
    WF_CHECK_EQ(wf_mesh_rank_at(m, off), -1);
    wf_mesh_destroy(m);
    int two[] = {1, 2, 1};
    WF_CHECK_ERR(wf_mesh_create(c, 3, names, two, &m), WF_ERR_CONFIG, "the mesh pp 1 x dp 2 x tp 1 needs 2 ranks, the job has 1");
    const char *dup[] = {"dp", "dp"};
    WF_CHECK_ERR(wf_mesh_create(c, 2, dup, ones, &m), WF_ERR_INVALID, "repeated");
    WF_CHECK_ERR(wf_mesh_create(c, 0, names, ones, &m), WF_ERR_INVALID, "0 axes");
    wf_comm_destroy(c);
}
