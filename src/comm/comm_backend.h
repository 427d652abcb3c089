/* The ABI between the communicator (src/comm/comm.c) and its backends: the
 * single-process one compiled into libweft (comm_single.c) and the MPI
 * ones, shared objects built per MPI implementation from
 * src/comm/mpi/comm_mpi.c and opened with dlopen. A backend shared object
 * exports one symbol, WF_COMM_BACKEND_SYMBOL, a function returning its
 * table. It links nothing of libweft: everything crosses this table.
 *
 * Calls return 0 on success; on failure -1, with a message that says which
 * call failed and why (the MPI error string) in last_error(). The caller
 * checks sizes first (counts fit the backend's limits, roots and ops are
 * valid), so a backend only reports what MPI reports. AVG never reaches a
 * backend: the communicator sums and divides.
 *
 * Bump WF_COMM_ABI whenever this table changes: a backend built against
 * another version is refused with a message saying to rebuild it.
 */
#ifndef WEFT_COMM_BACKEND_H
#define WEFT_COMM_BACKEND_H

#include <stddef.h>

#define WF_COMM_ABI 4
#define WF_COMM_BACKEND_SYMBOL "wf_comm_backend_v1"

typedef enum { WF_DT_F32 = 0, WF_DT_F64, WF_DT_I32, WF_DT_BYTE } wf_comm_dtype;
/* Backend ops: the wf_comm_op values except WF_COMM_AVG. */
typedef enum { WF_BOP_SUM = 0, WF_BOP_MAX, WF_BOP_MIN, WF_BOP_BOR } wf_comm_bop;

/* The largest count one backend call takes (MPI counts are int). Larger
 * all-reduces and broadcasts are split by the caller; reduce-scatter and
 * all-gather are refused above it (8 GiB of floats). */
#define WF_COMM_MAX_COUNT ((size_t)0x7fffffff)

typedef struct wf_comm_ops {
    int abi;          /* WF_COMM_ABI */
    const char *name; /* "single", "openmpi", "mpich" */

    /* Initialises the library (MPI_Init_thread, MPI_THREAD_SERIALIZED);
     * fills rank, size, local rank and a one-line library version. */
    int (*init)(void **state, int *rank, int *size, int *local_rank, char *version,
                size_t version_cap);
    void (*finalize)(void *state);
    void (*abort)(void *state, int code);
    const char *(*last_error)(void *state);

    /* In place, n <= WF_COMM_MAX_COUNT elements of dtype. */
    int (*all_reduce)(void *state, void *buf, size_t n, wf_comm_dtype dt, wf_comm_bop op);
    /* Non-blocking float all-reduce into request slot `slot`
     * (0 <= slot < max_requests), completed by test or wait. */
    int (*iall_reduce)(void *state, int slot, float *buf, size_t n, wf_comm_bop op);
    int (*test)(void *state, int slot, int *done);
    int (*wait)(void *state, int slot);
    /* counts: (size) floats per rank, sum <= WF_COMM_MAX_COUNT. */
    int (*reduce_scatter)(void *state, const float *send, float *recv, const size_t *counts,
                          wf_comm_bop op);
    int (*all_gather)(void *state, float *buf, const size_t *counts);
    /* Non-blocking reduce-scatter into request slot `slot`, completed by
     * test or wait; counts as reduce_scatter's (the backend keeps its own
     * copy until the request completes). recv (counts[rank] floats) does
     * not overlap send; it may be NULL when counts[rank] is 0. */
    int (*ireduce_scatter)(void *state, int slot, const float *send, float *recv,
                           const size_t *counts, wf_comm_bop op);
    /* Every rank's `bytes` bytes of `mine`, in rank order, into out
     * (size x bytes); bytes <= WF_COMM_MAX_COUNT. */
    int (*all_gather_bytes)(void *state, const void *mine, void *out, size_t bytes);
    /* Non-blocking all-gather in place into request slot `slot`, counts as
     * all_gather's (the backend keeps its own copy of counts and
     * displacements until the request completes). (ABI 3) */
    int (*iall_gather)(void *state, int slot, float *buf, const size_t *counts);
    int (*broadcast)(void *state, void *buf, size_t bytes, int root);
    int (*barrier)(void *state);
    int max_requests;

    /* (ABI 4; NULL in a backend without them: the communicator refuses
     * sub-communicators and messages then, naming the backend.)
     * Collective over this communicator: the ranks that give the same
     * color form a new one, ordered by key (then by rank here), as
     * MPI_Comm_split. *child gets its state (every call above works on
     * it, with its own request slots), *rank and *size its place; free it
     * with free_split, before finalize. */
    int (*split)(void *state, int color, int key, void **child, int *rank, int *size);
    void (*free_split)(void *child);
    /* Point to point, non-blocking, into request slot `slot` (completed by
     * test or wait): bytes <= WF_COMM_MAX_COUNT to or from rank `peer` of
     * this communicator, matched by `msg_tag` (0 .. 32767). A send's buffer
     * must not change until it completes. */
    int (*isend)(void *state, int slot, const void *buf, size_t bytes, int peer, int msg_tag);
    int (*irecv)(void *state, int slot, void *buf, size_t bytes, int peer, int msg_tag);
} wf_comm_ops;

typedef const wf_comm_ops *(*wf_comm_ops_fn)(void);

/* The single-process backend (comm_single.c). */
const wf_comm_ops *wf__comm_single_backend(void);

#endif
