/* The MPI backend of weft's communicator (table: src/comm/comm_backend.h).
 *
 * Built once per MPI implementation as a shared object with that
 * implementation's compiler wrapper (build/libweft-mpi-openmpi.so with
 * mpicc.openmpi, build/libweft-mpi-mpich.so with mpicc.mpich) and opened by
 * src/comm/comm.c with dlopen, so that the weft binary never links libmpi
 * and runs without any MPI installed. It exports one symbol,
 * wf_comm_backend_v1; everything else is static. It uses nothing from
 * libweft.
 *
 * The communicator is a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN,
 * so that a failing call is reported (with MPI_Error_string) instead of
 * aborting the job inside MPI. MPI is initialised at
 * MPI_THREAD_SERIALIZED: weft calls it from one thread at a time.
 *
 * Reduce-scatter and all-gather use the "v" forms (MPI_Reduce_scatter,
 * MPI_Ireduce_scatter, MPI_Allgatherv with MPI_IN_PLACE), so ZeRO-1's
 * shards can differ in size and no buffer needs padding. A non-blocking
 * reduce-scatter's counts live in its slot's own array until it completes.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_backend.h"

#define MPI_BACKEND_MAX_REQUESTS 256

#if defined(OPEN_MPI) && OPEN_MPI
#define MPI_BACKEND_NAME "openmpi"
#elif defined(MPICH)
#define MPI_BACKEND_NAME "mpich"
#else
#define MPI_BACKEND_NAME "mpi"
#endif

typedef struct {
    MPI_Comm comm;
    int rank, size;
    int *icounts, *idispls; /* (size) scratch for the "v" collectives */
    /* (MPI_BACKEND_MAX_REQUESTS x size) the counts of each slot's
     * non-blocking reduce-scatter: MPI reads them until it completes. */
    int *slot_counts;
    int *slot_displs; /* iall_gather's displacements, per slot */
    float empty; /* the receive buffer of an empty part */
    MPI_Request reqs[MPI_BACKEND_MAX_REQUESTS];
    char err[1024];
} mpi_state;

/* init fails before a state exists; its message lives here. */
static char init_err_[1024];

static int fail(mpi_state *s, const char *what, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", code);
    char *dst = s ? s->err : init_err_;
    snprintf(dst, sizeof init_err_, "%s failed on rank %d: %s", what, s ? s->rank : -1, msg);
    return -1;
}

static MPI_Datatype mpi_dtype(wf_comm_dtype dt) {
    switch (dt) {
    case WF_DT_F32: return MPI_FLOAT;
    case WF_DT_F64: return MPI_DOUBLE;
    case WF_DT_I32: return MPI_INT32_T;
    case WF_DT_BYTE: break;
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(wf_comm_bop op) {
    switch (op) {
    case WF_BOP_SUM: return MPI_SUM;
    case WF_BOP_MAX: return MPI_MAX;
    case WF_BOP_MIN: return MPI_MIN;
    case WF_BOP_BOR: break;
    }
    return MPI_BOR;
}

static void state_free(mpi_state *s) {
    if (!s) return;
    MPI_Comm_free(&s->comm);
    free(s->icounts);
    free(s->idispls);
    free(s->slot_counts);
    free(s->slot_displs);
    free(s);
}

/* A state around `comm` (which it owns from now on), or NULL (the
 * communicator freed) when memory runs out. */
static mpi_state *state_new(MPI_Comm comm) {
    mpi_state *s = calloc(1, sizeof *s);
    if (!s) {
        MPI_Comm_free(&comm);
        return NULL;
    }
    s->comm = comm;
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    for (int i = 0; i < MPI_BACKEND_MAX_REQUESTS; i++) s->reqs[i] = MPI_REQUEST_NULL;
    s->icounts = calloc((size_t)s->size, sizeof *s->icounts);
    s->idispls = calloc((size_t)s->size, sizeof *s->idispls);
    s->slot_counts = calloc((size_t)MPI_BACKEND_MAX_REQUESTS * (size_t)s->size, sizeof *s->slot_counts);
    s->slot_displs = calloc((size_t)MPI_BACKEND_MAX_REQUESTS * (size_t)s->size, sizeof *s->slot_displs);
    if (!s->icounts || !s->idispls || !s->slot_counts || !s->slot_displs) {
        state_free(s);
        return NULL;
    }
    return s;
}

static int mpi_init(void **state, int *rank, int *size, int *local_rank, char *version,
                    size_t version_cap) {
    *state = NULL;
    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return fail(NULL, "MPI_Init_thread", rc);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        snprintf(init_err_, sizeof init_err_,
                 "the MPI library provides thread level %d, weft needs MPI_THREAD_SERIALIZED (%d)",
                 provided, MPI_THREAD_SERIALIZED);
        return -1;
    }
    MPI_Comm world;
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (rc != MPI_SUCCESS) return fail(NULL, "MPI_Comm_dup", rc);
    mpi_state *s = state_new(world);
    if (!s) {
        snprintf(init_err_, sizeof init_err_, "out of memory for the MPI backend's state");
        return -1;
    }
    /* The rank within this node: the rank in the shared-memory split. */
    MPI_Comm node;
    *local_rank = 0;
    if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, local_rank);
        MPI_Comm_free(&node);
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    char *nl = strpbrk(lib, "\r\n,");
    if (nl) *nl = '\0';
    for (char *p = lib; *p; p++)
        if (*p == '\t') *p = ' ';
    if (version_cap) snprintf(version, version_cap, "%s", lib);
    *rank = s->rank;
    *size = s->size;
    *state = s;
    return 0;
}

static void mpi_finalize(void *state) {
    state_free(state);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

static void mpi_abort(void *state, int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; this is for a library that does */
}

static const char *mpi_last_error(void *state) {
    mpi_state *s = state;
    return s ? s->err : init_err_;
}

static int mpi_all_reduce(void *state, void *buf, size_t n, wf_comm_dtype dt, wf_comm_bop op) {
    mpi_state *s = state;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_dtype(dt), mpi_op(op), s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Allreduce", rc);
}

static int mpi_iall_reduce(void *state, int slot, float *buf, size_t n, wf_comm_bop op) {
    mpi_state *s = state;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mpi_op(op), s->comm,
                            &s->reqs[slot]);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Iallreduce", rc);
}

static int mpi_test(void *state, int slot, int *done) {
    mpi_state *s = state;
    int rc = MPI_Test(&s->reqs[slot], done, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Test", rc);
}

static int mpi_wait(void *state, int slot) {
    mpi_state *s = state;
    int rc = MPI_Wait(&s->reqs[slot], MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Wait", rc);
}

static int mpi_reduce_scatter(void *state, const float *send, float *recv, const size_t *counts,
                              wf_comm_bop op) {
    mpi_state *s = state;
    for (int r = 0; r < s->size; r++) s->icounts[r] = (int)counts[r];
    /* MPI wants a valid pointer even for an empty part. */
    float dummy = 0;
    int rc = MPI_Reduce_scatter(send, counts[s->rank] ? recv : &dummy, s->icounts, MPI_FLOAT,
                                mpi_op(op), s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Reduce_scatter", rc);
}

static int mpi_ireduce_scatter(void *state, int slot, const float *send, float *recv,
                               const size_t *counts, wf_comm_bop op) {
    mpi_state *s = state;
    int *ic = s->slot_counts + (size_t)slot * (size_t)s->size;
    for (int r = 0; r < s->size; r++) ic[r] = (int)counts[r];
    int rc = MPI_Ireduce_scatter(send, counts[s->rank] ? recv : &s->empty, ic, MPI_FLOAT, mpi_op(op),
                                 s->comm, &s->reqs[slot]);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Ireduce_scatter", rc);
}

static int mpi_all_gather(void *state, float *buf, const size_t *counts) {
    mpi_state *s = state;
    size_t off = 0;
    for (int r = 0; r < s->size; r++) {
        s->icounts[r] = (int)counts[r];
        s->idispls[r] = (int)off;
        off += counts[r];
    }
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, s->icounts, s->idispls,
                            MPI_FLOAT, s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Allgatherv", rc);
}

static int mpi_iall_gather(void *state, int slot, float *buf, const size_t *counts) {
    mpi_state *s = state;
    int *ic = s->slot_counts + (size_t)slot * (size_t)s->size;
    int *id = s->slot_displs + (size_t)slot * (size_t)s->size;
    size_t off = 0;
    for (int r = 0; r < s->size; r++) {
        ic[r] = (int)counts[r];
        id[r] = (int)off;
        off += counts[r];
    }
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, off ? buf : &s->empty, ic, id, MPI_FLOAT,
                             s->comm, &s->reqs[slot]);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Iallgatherv", rc);
}

static int mpi_all_gather_bytes(void *state, const void *mine, void *out, size_t bytes) {
    mpi_state *s = state;
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Allgather", rc);
}

static int mpi_broadcast(void *state, void *buf, size_t bytes, int root) {
    mpi_state *s = state;
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Bcast", rc);
}

static int mpi_barrier(void *state) {
    mpi_state *s = state;
    int rc = MPI_Barrier(s->comm);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Barrier", rc);
}

static int mpi_split(void *state, int color, int key, void **child, int *rank, int *size) {
    mpi_state *s = state;
    MPI_Comm sub;
    *child = NULL;
    int rc = MPI_Comm_split(s->comm, color, key, &sub);
    if (rc != MPI_SUCCESS) return fail(s, "MPI_Comm_split", rc);
    mpi_state *c = state_new(sub);
    if (!c) {
        snprintf(s->err, sizeof s->err, "out of memory for a sub-communicator's state on rank %d", s->rank);
        return -1;
    }
    *rank = c->rank;
    *size = c->size;
    *child = c;
    return 0;
}

static void mpi_free_split(void *child) { state_free(child); }

static int mpi_isend(void *state, int slot, const void *buf, size_t bytes, int peer, int msg_tag) {
    mpi_state *s = state;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, msg_tag, s->comm, &s->reqs[slot]);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Isend", rc);
}

static int mpi_irecv(void *state, int slot, void *buf, size_t bytes, int peer, int msg_tag) {
    mpi_state *s = state;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, msg_tag, s->comm, &s->reqs[slot]);
    return rc == MPI_SUCCESS ? 0 : fail(s, "MPI_Irecv", rc);
}

__attribute__((visibility("default"))) const wf_comm_ops *wf_comm_backend_v1(void);

const wf_comm_ops *wf_comm_backend_v1(void) {
    static const wf_comm_ops b = {
        .abi = WF_COMM_ABI,
        .name = MPI_BACKEND_NAME,
        .init = mpi_init,
        .finalize = mpi_finalize,
        .abort = mpi_abort,
        .last_error = mpi_last_error,
        .all_reduce = mpi_all_reduce,
        .iall_reduce = mpi_iall_reduce,
        .test = mpi_test,
        .wait = mpi_wait,
        .reduce_scatter = mpi_reduce_scatter,
        .all_gather = mpi_all_gather,
        .ireduce_scatter = mpi_ireduce_scatter,
        .all_gather_bytes = mpi_all_gather_bytes,
        .iall_gather = mpi_iall_gather,
        .broadcast = mpi_broadcast,
        .barrier = mpi_barrier,
        .max_requests = MPI_BACKEND_MAX_REQUESTS,
        .split = mpi_split,
        .free_split = mpi_free_split,
        .isend = mpi_isend,
        .irecv = mpi_irecv,
    };
    return &b;
}
