/* mesh_check: the device mesh, sub-communicators and point-to-point
 * messages under a launcher, for tests/py/test_mesh_mpi.py. Links only
 * libweft (the MPI backend is loaded at run time).
 *
 *   mesh_check mesh NAME=SIZE ...      (outermost axis first: pp=2 dp=1 tp=2)
 *       builds the mesh; on each axis an all-reduce (SUM) of the world
 *       rank and an all-gather of the world ranks, checked against the
 *       ranks that share every other coordinate, computed here from the
 *       layout (row-major, last axis fastest); every rank prints
 *       "rank R coords c0,c1,.. ok" or what differed, and exits 1 on a
 *       difference. A mesh that does not fit the job prints the error.
 *   mesh_check pipeline KIND PP [micro=M] [virt=V]
 *       runs the schedule of weft/pipeline.h over real messages on a
 *       "pp" axis of the whole world: a forward adds its stage to each of
 *       8 floats and doubles them, a backward adds the stage and triples;
 *       sends are non-blocking and completed at the end, receives block.
 *       Every rank checks the values of every stage it computed against a
 *       closed form and prints "rank R pipeline ok (N actions)".
 *   mesh_check stall-recv timeout=S
 *       rank 0 of a "pp" axis receives a message that rank 1 never sends;
 *       the watchdog (timeout S) must end it naming the receive.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/tool_args.h"
#include "weft/comm.h"
#include "weft/pipeline.h"

static int rank_, size_;

static int fail(const char *what) {
    fprintf(stderr, "mesh_check rank %d: %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

static int cmd_mesh(wf_comm *world, int argc, char **argv) {
    const char *names[WF_MESH_MAX_AXES];
    int sizes[WF_MESH_MAX_AXES], n = 0;
    char store[WF_MESH_MAX_AXES][32];
    for (int i = 0; i < argc && n < WF_MESH_MAX_AXES; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= 32) continue;
        memcpy(store[n], argv[i], (size_t)(eq - argv[i]));
        store[n][eq - argv[i]] = '\0';
        names[n] = store[n];
        sizes[n] = atoi(eq + 1);
        n++;
    }
    wf_mesh *m;
    if (wf_mesh_create(world, n, names, sizes, &m) != WF_OK) {
        printf("rank %d mesh refused: %s\n", rank_, wf_error_msg());
        return 1;
    }
    int coords[WF_MESH_MAX_AXES], bad = 0;
    for (int a = 0; a < n; a++) coords[a] = wf_mesh_coord(m, names[a]);
    if (wf_mesh_rank_at(m, coords) != rank_) bad = 1;
    for (int a = 0; a < n && !bad; a++) {
        wf_comm *c = wf_mesh_comm(m, names[a]);
        if (wf_comm_size(c) != sizes[a] || wf_comm_rank(c) != coords[a] || strcmp(wf_comm_axis(c), names[a])) {
            printf("rank %d axis %s: size %d rank %d, expected %d and %d\n", rank_, names[a], wf_comm_size(c),
                   wf_comm_rank(c), sizes[a], coords[a]);
            bad = 1;
            break;
        }
        /* the group: coordinate a running over its size, the others mine */
        int want[64], sum = 0, cc[WF_MESH_MAX_AXES];
        memcpy(cc, coords, sizeof cc);
        for (int k = 0; k < sizes[a] && k < 64; k++) {
            cc[a] = k;
            want[k] = wf_mesh_rank_at(m, cc);
            sum += want[k];
        }
        int32_t got_sum = rank_;
        if (wf_comm_all_reduce_i32(c, &got_sum, 1, WF_COMM_SUM, "mesh sum") != WF_OK) return fail("all_reduce");
        int32_t mine = rank_, all[64];
        if (wf_comm_all_gather_bytes(c, &mine, all, sizeof mine, "mesh ranks") != WF_OK) return fail("all_gather");
        if (got_sum != sum) {
            printf("rank %d axis %s: sum of ranks %d, expected %d\n", rank_, names[a], got_sum, sum);
            bad = 1;
        }
        for (int k = 0; k < sizes[a] && k < 64; k++)
            if (all[k] != want[k]) {
                printf("rank %d axis %s: member %d is rank %d, expected %d\n", rank_, names[a], k, all[k], want[k]);
                bad = 1;
            }
    }
    /* one write a line: the ranks share the launcher's stdout */
    char line[128];
    int len = snprintf(line, sizeof line, "rank %d coords", rank_);
    for (int a = 0; a < n; a++) len += snprintf(line + len, sizeof line - (size_t)len, "%s%d", a ? "," : " ", coords[a]);
    printf("%s %s\n", line, bad ? "FAILED" : "ok");
    fflush(stdout);
    wf_mesh_destroy(m);
    return bad;
}

/* ---- pipeline ---- */

#define NV 8

/* The value after the forwards of stages 0..s-1 (the input of stage s),
 * of micro-batch j, element e: x_0 = j + e + 1, x_{k+1} = 2 (x_k + k). */
static double fwd_in(int s, int j, int e) {
    double x = j + e + 1;
    for (int k = 0; k < s; k++) x = 2 * (x + k);
    return x;
}

/* The gradient arriving at stage s's output (from stage s + 1): the last
 * stage's output gradient is its forward output; then
 * g_{k-1} = 3 (g_k + k) down the stages. */
static double grad_out(int s, int n_st, int j, int e) {
    double g = fwd_in(n_st, j, e);
    for (int k = n_st - 1; k > s; k--) g = 3 * (g + k);
    return g;
}

/* float arithmetic against the double closed form: equal but for
 * rounding once the values pass 2^24 */
static int near(float got, double want) { return fabs((double)got - want) <= 1e-6 * fabs(want); }

static int cmd_pipeline(wf_comm *world, int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mesh_check pipeline KIND PP [micro=M] [virt=V]\n");
        return 2;
    }
    wf_pp_kind kind;
    if (wf_pp_kind_parse(argv[0], &kind) != WF_OK) return fail("kind");
    int pp = atoi(argv[1]);
    int micro = (int)tool_arg_num(argc - 2, argv + 2, "micro", 4);
    int virt = (int)tool_arg_num(argc - 2, argv + 2, "virt", 1);
    const char *names[] = {"pp"};
    int sizes[] = {pp};
    wf_mesh *m;
    if (wf_mesh_create(world, 1, names, sizes, &m) != WF_OK) return fail("mesh");
    wf_comm *c = wf_mesh_comm(m, "pp");
    int r = wf_comm_rank(c);
    wf_pp_schedule s;
    if (wf_pp_schedule_build(&s, kind, pp, virt, micro) != WF_OK) return fail("schedule");
    if (wf_pp_schedule_check(&s, 1, 2, NULL, NULL) != WF_OK) return fail("schedule check");
    int n_st = pp * virt;
    /* per (stage, micro): the input activation and the output gradient */
    size_t units = (size_t)n_st * (size_t)micro;
    float *act = calloc(units * NV, sizeof *act), *grad = calloc(units * NV, sizeof *grad);
    float *out = calloc(units * NV, sizeof *out), *gout = calloc(units * NV, sizeof *gout);
    wf_comm_request *sends = calloc((size_t)s.n_actions[r], sizeof *sends);
    int n_sends = 0, bad = 0;
    if (!act || !grad || !out || !gout || !sends) return fail("memory");
    for (int i = 0; i < s.n_actions[r]; i++) {
        const wf_pp_action *a = &s.actions[r][i];
        size_t u = ((size_t)a->stage * (size_t)micro + (size_t)a->micro) * NV;
        char tag[64];
        snprintf(tag, sizeof tag, "stage %d micro %d", a->stage, a->micro);
        int msg = (a->stage * micro + a->micro) * 2 + (a->op == WF_PP_RECV_GRAD || a->op == WF_PP_SEND_GRAD);
        switch ((wf_pp_op)a->op) {
        case WF_PP_FWD:
            for (int e = 0; e < NV; e++) {
                float x = a->stage == 0 ? (float)(a->micro + e + 1) : act[u + e];
                if (!near(x, fwd_in(a->stage, a->micro, e))) bad = 1;
                out[u + e] = 2 * (x + (float)a->stage);
            }
            break;
        case WF_PP_BWD:
            for (int e = 0; e < NV; e++) {
                float g = a->stage == n_st - 1 ? out[u + e] : grad[u + e];
                if (!near(g, grad_out(a->stage, n_st, a->micro, e))) bad = 1;
                gout[u + e] = 3 * (g + (float)a->stage);
            }
            break;
        case WF_PP_RECV_ACT:
            if (wf_comm_recv(c, act + u, NV * sizeof *act, a->peer, msg, tag) != WF_OK) return fail("recv");
            break;
        case WF_PP_RECV_GRAD:
            if (wf_comm_recv(c, grad + u, NV * sizeof *grad, a->peer, msg, tag) != WF_OK) return fail("recv");
            break;
        case WF_PP_SEND_ACT: {
            size_t src = ((size_t)(a->stage - 1) * (size_t)micro + (size_t)a->micro) * NV;
            if (wf_comm_isend(c, out + src, NV * sizeof *out, a->peer, msg, tag, &sends[n_sends++]) != WF_OK)
                return fail("isend");
            break;
        }
        case WF_PP_SEND_GRAD: {
            /* the gradient of stage (a->stage)'s output is stage
             * (a->stage + 1)'s input gradient, gout of that stage */
            size_t src = ((size_t)(a->stage + 1) * (size_t)micro + (size_t)a->micro) * NV;
            if (wf_comm_isend(c, gout + src, NV * sizeof *gout, a->peer, msg, tag, &sends[n_sends++]) != WF_OK)
                return fail("isend");
            break;
        }
        }
    }
    for (int i = 0; i < n_sends; i++)
        if (wf_comm_wait(c, &sends[i]) != WF_OK) return fail("wait send");
    printf("rank %d pipeline %s (%d actions)\n", rank_, bad ? "FAILED" : "ok", s.n_actions[r]);
    free(act);
    free(grad);
    free(out);
    free(gout);
    free(sends);
    wf_pp_schedule_free(&s);
    wf_mesh_destroy(m);
    return bad;
}

static int cmd_stall_recv(wf_comm *world) {
    const char *names[] = {"pp"};
    int sizes[] = {size_};
    wf_mesh *m;
    if (wf_mesh_create(world, 1, names, sizes, &m) != WF_OK) return fail("mesh");
    wf_comm *c = wf_mesh_comm(m, "pp");
    wf_comm_set_step(world, 5);
    float x[4];
    if (rank_ == 0) {
        if (wf_comm_recv(c, x, sizeof x, 1, 7, "act stage 1 micro 3") != WF_OK) return fail("recv");
        printf("rank 0 received\n");
    } else {
        sleep(30);
    }
    wf_mesh_destroy(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mesh_check mesh|pipeline|stall-recv ...\n");
        return 2;
    }
    wf_comm_options o = wf_comm_options_default();
    if (strcmp(argv[1], "stall-recv") == 0) {
        o.timeout_first_s = o.timeout_s = tool_arg_num(argc - 2, argv + 2, "timeout", 2);
    }
    wf_comm *c;
    if (wf_comm_create(&c, &o) != WF_OK) {
        fprintf(stderr, "mesh_check: %s\n", wf_error_msg());
        return 1;
    }
    rank_ = wf_comm_rank(c);
    size_ = wf_comm_size(c);
    int rc = 2;
    if (strcmp(argv[1], "mesh") == 0) rc = cmd_mesh(c, argc - 2, argv + 2);
    else if (strcmp(argv[1], "pipeline") == 0) rc = cmd_pipeline(c, argc - 2, argv + 2);
    else if (strcmp(argv[1], "stall-recv") == 0) rc = cmd_stall_recv(c);
    else fprintf(stderr, "mesh_check: unknown command %s\n", argv[1]);
    fflush(stdout);
    wf_comm_destroy(c);
    return rc;
}
