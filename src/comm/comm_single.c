/* The single-process backend: a world of one rank. Every collective is the
 * identity (a reduction over one rank is its input; its gather is its own
 * part) except reduce-scatter (blocking or not), which copies the rank's
 * part. A split gives another world of one; there is no peer to send a
 * message to (the communicator refuses a message to oneself before it
 * gets here). No MPI, no threads; used whenever weft runs without a
 * launcher. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_backend.h"

static int single_init(void **state, int *rank, int *size, int *local_rank, char *version,
                       size_t version_cap) {
    *state = NULL;
    *rank = 0;
    *size = 1;
    *local_rank = 0;
    if (version_cap) {
        strncpy(version, "single process (no MPI)", version_cap - 1);
        version[version_cap - 1] = '\0';
    }
    return 0;
}

static void single_finalize(void *state) {}
static void single_abort(void *state, int code) { exit(code); }
static const char *single_last_error(void *state) { return ""; }

static int single_all_reduce(void *state, void *buf, size_t n, wf_comm_dtype dt, wf_comm_bop op) {
    return 0;
}

static int single_iall_reduce(void *state, int slot, float *buf, size_t n, wf_comm_bop op) {
    return 0;
}

static int single_test(void *state, int slot, int *done) {
    *done = 1;
    return 0;
}

static int single_wait(void *state, int slot) { return 0; }

static int single_reduce_scatter(void *state, const float *send, float *recv,
                                 const size_t *counts, wf_comm_bop op) {
    if (counts[0]) memcpy(recv, send, counts[0] * sizeof *recv);
    return 0;
}

/* Completes at once: the copy is the whole collective. */
static int single_ireduce_scatter(void *state, int slot, const float *send, float *recv,
                                  const size_t *counts, wf_comm_bop op) {
    return single_reduce_scatter(state, send, recv, counts, op);
}

static int single_all_gather(void *state, float *buf, const size_t *counts) { return 0; }
/* Completes at once: one rank's part is the whole buffer. */
static int single_iall_gather(void *state, int slot, float *buf, const size_t *counts) { return 0; }
static int single_all_gather_bytes(void *state, const void *mine, void *out, size_t bytes) {
    if (bytes && out != mine) memmove(out, mine, bytes);
    return 0;
}

static int single_broadcast(void *state, void *buf, size_t bytes, int root) { return 0; }
static int single_barrier(void *state) { return 0; }

static int single_split(void *state, int color, int key, void **child, int *rank, int *size) {
    *child = NULL;
    *rank = 0;
    *size = 1;
    return 0;
}
static void single_free_split(void *child) {}

const wf_comm_ops *wf__comm_single_backend(void) {
    static const wf_comm_ops b = {
        .abi = WF_COMM_ABI,
        .name = "single",
        .init = single_init,
        .finalize = single_finalize,
        .abort = single_abort,
        .last_error = single_last_error,
        .all_reduce = single_all_reduce,
        .iall_reduce = single_iall_reduce,
        .test = single_test,
        .wait = single_wait,
        .reduce_scatter = single_reduce_scatter,
        .all_gather = single_all_gather,
        .ireduce_scatter = single_ireduce_scatter,
        .all_gather_bytes = single_all_gather_bytes,
        .iall_gather = single_iall_gather,
        .broadcast = single_broadcast,
        .barrier = single_barrier,
        .max_requests = 1 << 30,
        .split = single_split,
        .free_split = single_free_split,
    };
    return &b;
}
