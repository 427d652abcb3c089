/* NCCL and the few CUDA runtime calls of weft's NCCL backend, emulated
 * over MPI on host memory: build/libnccl-emu.so, a test instrument
 * (docs/gpu.md, "NCCL emulated over MPI"). The backend loads it in place
 * of libnccl.so.2 and libcudart.so.13 when WEFT_NCCL_LIB and
 * WEFT_CUDART_LIB name it, so that its code paths (bootstrap, unique id,
 * staging, grouped calls for unequal parts, events) run in CI, where there
 * is no GPU.
 *
 * Each NCCL call is carried out at once, in the order the backend issues
 * it, by the matching MPI collective on a duplicate of MPI_COMM_WORLD
 * (Open MPI's: built with mpicc.openmpi's flags). Before each, the ranks
 * compare what they issue (call, count, type, op, root): real NCCL would
 * hang or mix up buffers when they differ, the emulation fails the call
 * with ncclInvalidUsage and says what differed.
 *
 * "Device memory" is host memory: what cudaMalloc returned is device
 * memory to cudaPointerGetAttributes, anything else is unregistered host
 * memory (so the backend stages it), unless WEFT_NCCL_EMU_DEVICE_ALL=1
 * makes every pointer device memory (the backend's direct path, with the
 * trainer's host buffers). Streams and events complete at once.
 * WEFT_NCCL_EMU_DEVICES sets the device count (default 1).
 *
 * Not thread-safe beyond what the backend needs: ncclCommAbort, called by
 * the watchdog's thread, only sets a flag.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/nccl/nccl_abi.h"

#define EMU_EXPORT __attribute__((visibility("default")))
#define EMU_MAGIC "weft-nccl-emu"

struct wf_nccl_comm_s {
    MPI_Comm comm;
    int rank, size;
    int inited_mpi;   /* 1: ncclCommInitRank called MPI_Init, destroy finalizes */
    volatile int aborted;
};

static char last_err_[512];
static int in_group_;

/* Every prototype once, so that -Wmissing-prototypes holds. */
#define EMU_PROTO(name, ret, args) EMU_EXPORT ret name args;
WF_NCCL_FUNCS(EMU_PROTO)
WF_CUDART_FUNCS(EMU_PROTO)
#undef EMU_PROTO

static wf_nccl_result emu_fail(wf_nccl_result r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static wf_nccl_result emu_fail(wf_nccl_result r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err_, sizeof last_err_, fmt, ap);
    va_end(ap);
    return r;
}

wf_nccl_result ncclGetVersion(int *version) {
    *version = 22800;
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclGetUniqueId(wf_nccl_id *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->internal, EMU_MAGIC, sizeof EMU_MAGIC);
    /* With NCCL_COMM_ID every rank makes the same id, as NCCL's do. */
    const char *addr = getenv("NCCL_COMM_ID");
    if (addr && *addr)
        snprintf(id->internal + 16, sizeof id->internal - 16, "addr %s", addr);
    else
        snprintf(id->internal + 16, sizeof id->internal - 16, "pid %ld at %p", (long)getpid(), (void *)id);
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclCommInitRank(wf_nccl_comm *out, int nranks, wf_nccl_id id, int rank) {
    *out = NULL;
    if (memcmp(id.internal, EMU_MAGIC, sizeof EMU_MAGIC) != 0)
        return emu_fail(WF_NCCL_INVALID_ARGUMENT, "the unique id was not made by ncclGetUniqueId");
    int inited = 0, provided = 0, mine = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return emu_fail(WF_NCCL_INVALID_USAGE, "MPI_Init_thread failed");
        mine = 1;
    }
    struct wf_nccl_comm_s *c = calloc(1, sizeof *c);
    if (!c) return emu_fail(3, "out of memory");
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    c->inited_mpi = mine;
    if (c->size != nranks || c->rank != rank) {
        snprintf(last_err_, sizeof last_err_, "rank %d of %d asked for, MPI's world has this process as %d of %d", rank,
                 nranks, c->rank, c->size);
        MPI_Comm_free(&c->comm);
        free(c);
        return WF_NCCL_INVALID_ARGUMENT;
    }
    /* Every rank must hold rank 0's id: the bootstrap's whole job. */
    char *all = malloc(sizeof id.internal * (size_t)c->size);
    int same = all != NULL;
    if (all && MPI_Allgather(id.internal, (int)sizeof id.internal, MPI_BYTE, all, (int)sizeof id.internal, MPI_BYTE,
                             c->comm) == MPI_SUCCESS) {
        for (int r = 1; r < c->size; r++) same &= memcmp(all, all + (size_t)r * sizeof id.internal, sizeof id.internal) == 0;
    } else {
        same = 0;
    }
    free(all);
    if (!same) {
        snprintf(last_err_, sizeof last_err_,
                 "the ranks hold different unique ids (the bootstrap did not give every rank rank 0's)");
        MPI_Comm_free(&c->comm);
        free(c);
        return WF_NCCL_INVALID_ARGUMENT;
    }
    *out = c;
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclCommDestroy(wf_nccl_comm c) {
    if (!c) return WF_NCCL_SUCCESS;
    int mine = c->inited_mpi;
    MPI_Comm_free(&c->comm);
    free(c);
    if (mine) MPI_Finalize();
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclCommAbort(wf_nccl_comm c) {
    if (c) c->aborted = 1;
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclCommGetAsyncError(wf_nccl_comm c, wf_nccl_result *err) {
    *err = WF_NCCL_SUCCESS;
    return WF_NCCL_SUCCESS;
}

const char *ncclGetErrorString(wf_nccl_result r) {
    switch (r) {
    case 0: return "no error";
    case 1: return "unhandled cuda error";
    case 2: return "unhandled system error";
    case 3: return "internal error";
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(wf_nccl_comm c) { return last_err_; }

static MPI_Datatype mpi_type(wf_nccl_dtype dt, int *ok) {
    *ok = 1;
    switch (dt) {
    case WF_NCCL_UINT8: return MPI_UINT8_T;
    case WF_NCCL_INT32: return MPI_INT32_T;
    case WF_NCCL_FLOAT32: return MPI_FLOAT;
    case WF_NCCL_FLOAT64: return MPI_DOUBLE;
    }
    *ok = 0;
    return MPI_BYTE;
}

static size_t type_size(wf_nccl_dtype dt) {
    return dt == WF_NCCL_UINT8 ? 1 : dt == WF_NCCL_FLOAT64 ? 8 : 4;
}

static MPI_Op mpi_op(wf_nccl_op op, int *ok) {
    *ok = 1;
    switch (op) {
    case WF_NCCL_SUM: return MPI_SUM;
    case WF_NCCL_MAX: return MPI_MAX;
    case WF_NCCL_MIN: return MPI_MIN;
    }
    *ok = 0;
    return MPI_SUM;
}

/* The checks every collective makes: a live communicator, a known type
 * and op, a count MPI takes, and the same call on every rank. */
static wf_nccl_result begin(wf_nccl_comm c, const char *what, size_t count, wf_nccl_dtype dt, wf_nccl_op op,
                            int root, MPI_Datatype *t, MPI_Op *o) {
    int ok1, ok2;
    if (!c) return emu_fail(WF_NCCL_INVALID_ARGUMENT, "%s: NULL communicator", what);
    if (c->aborted) return emu_fail(WF_NCCL_INVALID_USAGE, "%s on an aborted communicator", what);
    *t = mpi_type(dt, &ok1);
    *o = mpi_op(op, &ok2);
    if (!ok1) return emu_fail(WF_NCCL_INVALID_ARGUMENT, "%s: data type %d is not emulated", what, dt);
    if (!ok2) return emu_fail(WF_NCCL_INVALID_ARGUMENT, "%s: op %d is not emulated", what, op);
    if (count > INT32_MAX) return emu_fail(WF_NCCL_INVALID_ARGUMENT, "%s: count %zu is over MPI's int", what, count);
    if (root < -1 || root >= c->size) return emu_fail(WF_NCCL_INVALID_ARGUMENT, "%s: root %d is not a rank", what, root);
    /* The call's signature, compared by a max and a min over the ranks. */
    uint64_t h = 1469598103934665603ull;
    for (const char *p = what; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ count) * 1099511628211ull;
    h = (h ^ (uint64_t)(dt * 31 + op * 7 + root + 1)) * 1099511628211ull;
    long long sig[2] = {(long long)(h >> 1), -(long long)(h >> 1)}, red[2];
    if (MPI_Allreduce(sig, red, 2, MPI_LONG_LONG, MPI_MAX, c->comm) != MPI_SUCCESS)
        return emu_fail(6, "%s: the MPI all-reduce that compares the ranks' calls failed", what);
    if (red[0] != -red[1])
        return emu_fail(WF_NCCL_INVALID_USAGE,
                        "%s: the ranks issued different collectives (call, count, type, op or root differ; this "
                        "rank's count is %zu): real NCCL would hang or mix buffers",
                        what, count);
    return WF_NCCL_SUCCESS;
}

static wf_nccl_result done(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return WF_NCCL_SUCCESS;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(last_err_, sizeof last_err_, "%s: MPI says %s", what, msg);
    return 6;
}

wf_nccl_result ncclAllReduce(const void *send, void *recv, size_t count, wf_nccl_dtype dt, wf_nccl_op op,
                             wf_nccl_comm c, void *stream) {
    MPI_Datatype t;
    MPI_Op o;
    wf_nccl_result r = begin(c, "ncclAllReduce", count, dt, op, -1, &t, &o);
    if (r) return r;
    return done(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, o, c->comm), "ncclAllReduce");
}

wf_nccl_result ncclReduce(const void *send, void *recv, size_t count, wf_nccl_dtype dt, wf_nccl_op op, int root,
                          wf_nccl_comm c, void *stream) {
    MPI_Datatype t;
    MPI_Op o;
    wf_nccl_result r = begin(c, "ncclReduce", count, dt, op, root, &t, &o);
    if (r) return r;
    const void *s = c->rank == root && send == recv ? MPI_IN_PLACE : send;
    return done(MPI_Reduce(s, c->rank == root ? recv : NULL, (int)count, t, o, root, c->comm), "ncclReduce");
}

wf_nccl_result ncclReduceScatter(const void *send, void *recv, size_t recvcount, wf_nccl_dtype dt, wf_nccl_op op,
                                 wf_nccl_comm c, void *stream) {
    MPI_Datatype t;
    MPI_Op o;
    wf_nccl_result r = begin(c, "ncclReduceScatter", recvcount, dt, op, -1, &t, &o);
    if (r) return r;
    /* recv may lie inside send (NCCL's in-place form): reduce into a copy. */
    size_t bytes = recvcount * type_size(dt);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return emu_fail(2, "ncclReduceScatter: out of memory for %zu bytes", bytes);
    int rc = MPI_Reduce_scatter_block(send, tmp, (int)recvcount, t, o, c->comm);
    if (rc == MPI_SUCCESS) memcpy(recv, tmp, bytes);
    free(tmp);
    return done(rc, "ncclReduceScatter");
}

wf_nccl_result ncclBroadcast(const void *send, void *recv, size_t count, wf_nccl_dtype dt, int root, wf_nccl_comm c,
                             void *stream) {
    MPI_Datatype t;
    MPI_Op o;
    wf_nccl_result r = begin(c, "ncclBroadcast", count, dt, WF_NCCL_SUM, root, &t, &o);
    if (r) return r;
    if (c->rank == root && send != recv) memmove(recv, send, count * type_size(dt));
    return done(MPI_Bcast(recv, (int)count, t, root, c->comm), "ncclBroadcast");
}

wf_nccl_result ncclAllGather(const void *send, void *recv, size_t sendcount, wf_nccl_dtype dt, wf_nccl_comm c,
                             void *stream) {
    MPI_Datatype t;
    MPI_Op o;
    wf_nccl_result r = begin(c, "ncclAllGather", sendcount, dt, WF_NCCL_SUM, -1, &t, &o);
    if (r) return r;
    size_t bytes = sendcount * type_size(dt);
    int in_place = (const char *)send == (const char *)recv + bytes * (size_t)c->rank;
    return done(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)sendcount, t, recv, (int)sendcount, t, c->comm),
                "ncclAllGather");
}

/* A group's calls run as they are issued: every rank issues them in the
 * same order, so the MPI calls match without NCCL's fusion. */
wf_nccl_result ncclGroupStart(void) {
    in_group_++;
    return WF_NCCL_SUCCESS;
}

wf_nccl_result ncclGroupEnd(void) {
    if (in_group_ == 0) return emu_fail(WF_NCCL_INVALID_USAGE, "ncclGroupEnd without ncclGroupStart");
    in_group_--;
    return WF_NCCL_SUCCESS;
}

/* --------------------------------------------------------- CUDA runtime */

typedef struct {
    void *p;
    size_t bytes;
} emu_alloc;
static emu_alloc *allocs_;
static size_t n_allocs_, cap_allocs_;

wf_cuda_error cudaGetDeviceCount(int *count) {
    const char *v = getenv("WEFT_NCCL_EMU_DEVICES");
    *count = v && *v ? atoi(v) : 1;
    return WF_CUDA_SUCCESS;
}

wf_cuda_error cudaSetDevice(int device) {
    int n;
    cudaGetDeviceCount(&n);
    return device >= 0 && device < n ? WF_CUDA_SUCCESS : 101; /* cudaErrorInvalidDevice */
}

const char *cudaGetErrorString(wf_cuda_error e) {
    switch (e) {
    case 0: return "no error";
    case 2: return "out of memory";
    case 101: return "invalid device ordinal";
    case 600: return "device not ready";
    }
    return "unknown error";
}

wf_cuda_error cudaStreamCreateWithFlags(void **stream, unsigned flags) {
    *stream = malloc(1);
    return *stream ? WF_CUDA_SUCCESS : 2;
}

wf_cuda_error cudaStreamDestroy(void *stream) {
    free(stream);
    return WF_CUDA_SUCCESS;
}

wf_cuda_error cudaStreamQuery(void *stream) { return WF_CUDA_SUCCESS; }

wf_cuda_error cudaEventCreateWithFlags(void **event, unsigned flags) {
    *event = malloc(1);
    return *event ? WF_CUDA_SUCCESS : 2;
}

wf_cuda_error cudaEventDestroy(void *event) {
    free(event);
    return WF_CUDA_SUCCESS;
}

wf_cuda_error cudaEventRecord(void *event, void *stream) { return event ? WF_CUDA_SUCCESS : 400; }

wf_cuda_error cudaEventQuery(void *event) { return WF_CUDA_SUCCESS; }

wf_cuda_error cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    if (n_allocs_ == cap_allocs_) {
        size_t cap = cap_allocs_ ? 2 * cap_allocs_ : 16;
        emu_alloc *a = realloc(allocs_, cap * sizeof *a);
        if (!a) return 2;
        allocs_ = a;
        cap_allocs_ = cap;
    }
    /* Poisoned, as device memory holds whatever was there. */
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return 2;
    memset(*p, 0xA5, bytes);
    allocs_[n_allocs_++] = (emu_alloc){*p, bytes};
    return WF_CUDA_SUCCESS;
}

wf_cuda_error cudaFree(void *p) {
    for (size_t i = 0; i < n_allocs_; i++)
        if (allocs_[i].p == p) {
            allocs_[i] = allocs_[--n_allocs_];
            free(p);
            return WF_CUDA_SUCCESS;
        }
    return p ? 1 : WF_CUDA_SUCCESS; /* cudaErrorInvalidValue */
}

wf_cuda_error cudaMemcpy(void *dst, const void *src, size_t bytes, int kind) {
    memmove(dst, src, bytes);
    return WF_CUDA_SUCCESS;
}

wf_cuda_error cudaPointerGetAttributes(wf_cuda_ptr_attr *attr, const void *p) {
    memset(attr, 0, sizeof *attr);
    const char *all = getenv("WEFT_NCCL_EMU_DEVICE_ALL");
    int dev = all && strcmp(all, "1") == 0;
    for (size_t i = 0; i < n_allocs_ && !dev; i++) {
        const char *b = allocs_[i].p;
        dev = (const char *)p >= b && (const char *)p < b + (allocs_[i].bytes ? allocs_[i].bytes : 1);
    }
    attr->type = dev ? WF_CUDA_MEM_DEVICE : WF_CUDA_MEM_UNREGISTERED;
    attr->device_pointer = dev ? (void *)(uintptr_t)p : NULL;
    attr->host_pointer = dev ? NULL : (void *)(uintptr_t)p;
    return WF_CUDA_SUCCESS;
}
