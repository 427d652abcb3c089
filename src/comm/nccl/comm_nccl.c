/* The NCCL backend of weft's communicator (table: src/comm/comm_backend.h;
 * user's view: docs/distributed.md, "NCCL", and docs/gpu.md).
 *
 * Built as build/libweft-nccl.so with the plain C compiler: it includes no
 * CUDA header and links neither NCCL nor the CUDA runtime. It opens both
 * with dlopen by soname (libnccl.so.2, libcudart.so.13), or the files that
 * WEFT_NCCL_LIB and WEFT_CUDART_LIB name (the tests point both at
 * build/libnccl-emu.so, NCCL emulated over MPI: tests/emu/nccl_emu.c), and
 * names the one that is missing. The CUDA runtime calls (device, stream,
 * events, staging copies) come from libcudart itself rather than from the
 * compute backend: a communicator exists before any model, the cuda
 * compute backend is optional (DDP of a cpu model over NCCL is legal, if
 * slow), and the comm backends link nothing of libweft.
 *
 * Bootstrap (WEFT_NCCL_BOOTSTRAP, default auto):
 *   openmpi, mpich  the MPI backend libweft-mpi-<impl>.so (from
 *                   WEFT_DIST_LIB_DIR or this file's folder) starts the
 *                   job; rank 0's ncclGetUniqueId is broadcast over MPI.
 *                   Ranks and local ranks are MPI's.
 *   env             the launcher's environment: RANK (or SLURM_PROCID,
 *                   OMPI_COMM_WORLD_RANK, PMI_RANK), WORLD_SIZE (or
 *                   SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE),
 *                   LOCAL_RANK (or SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 *                   MPI_LOCALRANKID) and NCCL_COMM_ID (host:port of rank
 *                   0's bootstrap root; MASTER_ADDR:MASTER_PORT when unset),
 *                   with which every rank's ncclGetUniqueId gives the same
 *                   id. No MPI at all.
 *   auto            the MPI implementation whose launcher variables are set
 *                   (as wf_comm_detect_backend reads them), else env when a
 *                   world size is set, else one rank.
 *
 * Device: local rank modulo the visible devices (the rule of
 * wf_backend_local_device in include/weft/backend.h: with one device per
 * rank through CUDA_VISIBLE_DEVICES that is device 0).
 *
 * Buffers. NCCL reads and writes device memory on this backend's own
 * stream (non-blocking to the legacy stream). Each call asks the runtime
 * where its buffers are (cudaPointerGetAttributes): device or managed
 * memory goes to NCCL as it is; host memory (the trainer's scalars, the
 * checkpoint checksums, every buffer of a cpu model) is staged through a
 * device scratch buffer, and its non-blocking collectives complete at
 * issue. A non-blocking collective on device memory is enqueued, an event
 * recorded behind it; test queries the event, wait polls it. Every wait
 * polls ncclCommGetAsyncError too, so a failed peer ends in an error, not
 * a hang; a peer that merely stops is the collective watchdog's case, on
 * whose timeout abort_async calls ncclCommAbort.
 *
 * Shapes NCCL lacks: reduce-scatter and all-gather with unequal counts are
 * grouped ncclReduce / ncclBroadcast calls, one per rank (equal counts use
 * ncclReduceScatter / ncclAllGather); bitwise OR (checkpoint checksums) is
 * an all-gather and the OR on the host, in rank order; a barrier is an
 * all-reduce of one int on the device, waited for.
 */
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "comm/nccl/nccl_abi.h"

#define NCCL_BACKEND_MAX_REQUESTS 256
#define NCCL_SONAME "libnccl.so.2"
#define CUDART_SONAME "libcudart.so.13"

typedef struct {
#define WF_DECLARE_FN(name, ret, args) ret(*name) args;
    WF_NCCL_FUNCS(WF_DECLARE_FN)
    WF_CUDART_FUNCS(WF_DECLARE_FN)
#undef WF_DECLARE_FN
} nccl_api;

typedef struct {
    nccl_api api;
    const wf_comm_ops *mpi; /* the bootstrap backend, NULL under env */
    void *mpi_st;
    wf_nccl_comm comm;
    void *stream;
    int rank, size, device;
    void *scratch; /* device staging memory */
    size_t scratch_cap;
    void *events[NCCL_BACKEND_MAX_REQUESTS]; /* NULL: the slot completed at issue */
    char err[1024];
} nccl_state;

/* init fails before a state exists; its message lives here. */
static char init_err_[1024];

static int failf(nccl_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(nccl_state *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s ? s->err : init_err_, sizeof init_err_, fmt, ap);
    va_end(ap);
    return -1;
}

static int nccl_fail(nccl_state *s, const char *what, wf_nccl_result r) {
    const char *last = s->comm ? s->api.ncclGetLastError(s->comm) : "";
    return failf(s, "%s failed on rank %d: %s%s%s", what, s->rank, s->api.ncclGetErrorString(r),
                 last && *last ? ": " : "", last ? last : "");
}

static int cuda_fail(nccl_state *s, const char *what, wf_cuda_error e) {
    return failf(s, "%s failed on rank %d (device %d): %s (CUDA error %d)", what, s->rank, s->device,
                 s->api.cudaGetErrorString(e), e);
}

#define NCCL_CHECK(s, call, what)                                                                          \
    do {                                                                                                   \
        wf_nccl_result r_ = (call);                                                                        \
        if (r_ != WF_NCCL_SUCCESS) return nccl_fail((s), (what), r_);                                      \
    } while (0)
#define CUDA_CHECK(s, call, what)                                                                          \
    do {                                                                                                   \
        wf_cuda_error e_ = (call);                                                                         \
        if (e_ != WF_CUDA_SUCCESS) return cuda_fail((s), (what), e_);                                      \
    } while (0)

/* ------------------------------------------------------------- loading */

/* Opens `path` (a soname or a file); on failure writes why, and what to
 * do, into init_err_. */
static void *open_lib(const char *path, const char *what, const char *var) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        failf(NULL,
              "cannot load %s (%s): %s. Install it (NVIDIA's CUDA toolkit or its wheels) where the "
              "dynamic loader finds it (LD_LIBRARY_PATH), or name the file with %s",
              what, path, dlerror(), var);
    return h;
}

static int resolve(void *h, const char *path, const char *name, void **fn) {
    *fn = dlsym(h, name);
    if (!*fn) return failf(NULL, "%s has no %s: too old, or not the library it should be", path, name);
    return 0;
}

static int load_api(nccl_api *a, char *nccl_path, size_t cap) {
    const char *np = getenv("WEFT_NCCL_LIB"), *cp = getenv("WEFT_CUDART_LIB");
    if (!np || !*np) np = NCCL_SONAME;
    if (!cp || !*cp) cp = CUDART_SONAME;
    void *nh = open_lib(np, "NCCL", "WEFT_NCCL_LIB");
    if (!nh) return -1;
    void *ch = open_lib(cp, "the CUDA runtime", "WEFT_CUDART_LIB");
    if (!ch) return -1;
    void *fn;
#define WF_RESOLVE_NCCL(name, ret, args)                                                                   \
    if (resolve(nh, np, #name, &fn) != 0) return -1;                                                       \
    memcpy(&a->name, &fn, sizeof fn);
#define WF_RESOLVE_CUDART(name, ret, args)                                                                 \
    if (resolve(ch, cp, #name, &fn) != 0) return -1;                                                       \
    memcpy(&a->name, &fn, sizeof fn);
    WF_NCCL_FUNCS(WF_RESOLVE_NCCL)
    WF_CUDART_FUNCS(WF_RESOLVE_CUDART)
#undef WF_RESOLVE_NCCL
#undef WF_RESOLVE_CUDART
    /* Where the loader found it, for the run record. */
    Dl_info info;
    void *sym;
    memcpy(&sym, &a->ncclGetVersion, sizeof sym);
    snprintf(nccl_path, cap, "%s", dladdr(sym, &info) && info.dli_fname ? info.dli_fname : np);
    return 0;
}

/* ----------------------------------------------------------- bootstrap */

static const char *env_first(const char *const *names) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) return v;
    }
    return NULL;
}

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

static const char *auto_bootstrap(void) {
    if (env_set("OMPI_COMM_WORLD_SIZE")) return "openmpi";
    if (env_set("PMI_RANK") || env_set("PMI_SIZE")) return "mpich";
    if (env_set("SLURM_STEP_NUM_TASKS") && !env_set("WORLD_SIZE")) return env_set("PMIX_RANK") ? "openmpi" : "mpich";
    if (env_set("WORLD_SIZE")) return "env";
    return "single";
}

/* Opens libweft-mpi-<impl>.so beside this file (or in WEFT_DIST_LIB_DIR). */
static const wf_comm_ops *open_mpi_backend(const char *impl) {
    char file[64], path[PATH_MAX + 64], dir[PATH_MAX] = ".";
    snprintf(file, sizeof file, "libweft-mpi-%s.so", impl);
    const char *d = getenv("WEFT_DIST_LIB_DIR");
    Dl_info info;
    if (d && *d) {
        snprintf(dir, sizeof dir, "%s", d);
    } else if (dladdr((const void *)init_err_, &info) && info.dli_fname) {
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (!h) {
        failf(NULL, "cannot load the %s backend that bootstraps NCCL (%s): %s. Build it with `make`, or set "
                    "WEFT_NCCL_BOOTSTRAP=env",
              impl, path, dlerror());
        return NULL;
    }
    void *sym = dlsym(h, WF_COMM_BACKEND_SYMBOL);
    wf_comm_ops_fn fn;
    if (!sym) {
        failf(NULL, "%s is not a weft backend (no %s)", path, WF_COMM_BACKEND_SYMBOL);
        return NULL;
    }
    memcpy(&fn, &sym, sizeof fn);
    const wf_comm_ops *be = fn();
    if (!be || be->abi != WF_COMM_ABI) {
        failf(NULL, "%s was built for backend ABI %d, this one is %d: rebuild it (make)", path, be ? be->abi : -1,
              WF_COMM_ABI);
        return NULL;
    }
    return be;
}

static int env_int(const char *const *names, int dflt, const char *what, int *out) {
    const char *v = env_first(names);
    if (!v) {
        *out = dflt;
        return 0;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > INT_MAX)
        return failf(NULL, "NCCL bootstrap: %s = '%s' is not a number (from %s or its alternatives)", what, v,
                     names[0]);
    *out = (int)x;
    return 0;
}

/* Rank, size, local rank and the unique id from the environment. */
static int env_bootstrap(nccl_state *s, int *local_rank, wf_nccl_id *id) {
    static const char *const rank_vars[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
    static const char *const size_vars[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    static const char *const local_vars[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                                             "MPI_LOCALRANKID", NULL};
    if (env_int(rank_vars, 0, "the rank", &s->rank) || env_int(size_vars, 1, "the world size", &s->size) ||
        env_int(local_vars, 0, "the local rank", local_rank))
        return -1;
    if (s->size < 1 || s->rank >= s->size)
        return failf(NULL, "NCCL bootstrap: rank %d of a world of %d (RANK, WORLD_SIZE)", s->rank, s->size);
    if (s->size > 1 && !env_set("NCCL_COMM_ID")) {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!addr || !*addr || !port || !*port)
            return failf(NULL, "NCCL bootstrap from the environment: %d ranks need NCCL_COMM_ID=host:port (rank "
                               "0's address), or MASTER_ADDR and MASTER_PORT",
                         s->size);
        char idv[512];
        snprintf(idv, sizeof idv, "%s:%s", addr, port);
        setenv("NCCL_COMM_ID", idv, 1);
    }
    /* With NCCL_COMM_ID set every rank's id is the same; with one rank any
     * id will do. */
    wf_nccl_result r = s->api.ncclGetUniqueId(id);
    if (r != WF_NCCL_SUCCESS)
        return failf(NULL, "ncclGetUniqueId failed: %s", s->api.ncclGetErrorString(r));
    return 0;
}

/* ---------------------------------------------------------------- init */

static int nccl_init(void **state, int *rank, int *size, int *local_rank, char *version, size_t version_cap) {
    *state = NULL;
    nccl_state *s = calloc(1, sizeof *s);
    if (!s) return failf(NULL, "out of memory for the NCCL backend's state");
    char nccl_path[PATH_MAX];
    if (load_api(&s->api, nccl_path, sizeof nccl_path) != 0) goto fail;
    const char *boot = getenv("WEFT_NCCL_BOOTSTRAP");
    if (!boot || !*boot || strcmp(boot, "auto") == 0) boot = auto_bootstrap();
    wf_nccl_id id;
    memset(&id, 0, sizeof id);
    *local_rank = 0;
    if (strcmp(boot, "openmpi") == 0 || strcmp(boot, "mpich") == 0) {
        s->mpi = open_mpi_backend(boot);
        if (!s->mpi) goto fail;
        char mv[256];
        if (s->mpi->init(&s->mpi_st, &s->rank, &s->size, local_rank, mv, sizeof mv) != 0) {
            failf(NULL, "starting the %s backend that bootstraps NCCL: %s", boot, s->mpi->last_error(NULL));
            s->mpi = NULL;
            goto fail;
        }
        if (s->rank == 0) {
            wf_nccl_result r = s->api.ncclGetUniqueId(&id);
            if (r != WF_NCCL_SUCCESS) {
                failf(NULL, "ncclGetUniqueId failed on rank 0: %s", s->api.ncclGetErrorString(r));
                memset(&id, 0, sizeof id); /* the peers still take part in the broadcast */
            }
        }
        if (s->mpi->broadcast(s->mpi_st, &id, sizeof id, 0) != 0) {
            failf(NULL, "broadcasting NCCL's unique id over %s: %s", boot, s->mpi->last_error(s->mpi_st));
            goto fail;
        }
        static const char zero[sizeof id];
        if (memcmp(&id, zero, sizeof id) == 0) {
            if (s->rank != 0) failf(NULL, "rank 0 could not make NCCL's unique id (its log says why)");
            goto fail;
        }
    } else if (strcmp(boot, "env") == 0) {
        if (env_bootstrap(s, local_rank, &id) != 0) goto fail;
    } else if (strcmp(boot, "single") == 0) {
        s->rank = 0, s->size = 1;
        wf_nccl_result r = s->api.ncclGetUniqueId(&id);
        if (r != WF_NCCL_SUCCESS) {
            failf(NULL, "ncclGetUniqueId failed: %s", s->api.ncclGetErrorString(r));
            goto fail;
        }
    } else {
        failf(NULL, "WEFT_NCCL_BOOTSTRAP = '%s': use auto, openmpi, mpich or env", boot);
        goto fail;
    }
    int n_dev = 0;
    wf_cuda_error e = s->api.cudaGetDeviceCount(&n_dev);
    if (e != WF_CUDA_SUCCESS) {
        failf(NULL, "rank %d: cudaGetDeviceCount failed: %s (CUDA error %d); NCCL needs a GPU and its driver", s->rank,
              s->api.cudaGetErrorString(e), e);
        goto fail;
    }
    if (n_dev < 1) {
        failf(NULL, "rank %d: no CUDA device is visible (CUDA_VISIBLE_DEVICES?)", s->rank);
        goto fail;
    }
    s->device = *local_rank % n_dev;
    e = s->api.cudaSetDevice(s->device);
    if (e == WF_CUDA_SUCCESS) e = s->api.cudaStreamCreateWithFlags(&s->stream, WF_CUDA_STREAM_NON_BLOCKING);
    if (e != WF_CUDA_SUCCESS) {
        failf(NULL, "rank %d: setting up device %d: %s (CUDA error %d)", s->rank, s->device,
              s->api.cudaGetErrorString(e), e);
        goto fail;
    }
    wf_nccl_result r = s->api.ncclCommInitRank(&s->comm, s->size, id, s->rank);
    if (r != WF_NCCL_SUCCESS) {
        const char *last = s->api.ncclGetLastError(NULL);
        failf(NULL, "ncclCommInitRank (rank %d of %d, device %d) failed: %s%s%s", s->rank, s->size, s->device,
              s->api.ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
        s->comm = NULL;
        goto fail;
    }
    int v = 0;
    s->api.ncclGetVersion(&v);
    if (version_cap)
        snprintf(version, version_cap, "NCCL %d.%d.%d (%s), bootstrap %s, device %d", v / 10000, v % 10000 / 100,
                 v % 100, nccl_path, boot, s->device);
    *rank = s->rank;
    *size = s->size;
    *state = s;
    return 0;
fail:
    if (s->stream) s->api.cudaStreamDestroy(s->stream);
    if (s->mpi) s->mpi->finalize(s->mpi_st);
    free(s);
    return -1;
}

static void nccl_finalize(void *state) {
    nccl_state *s = state;
    if (!s) return;
    for (int i = 0; i < NCCL_BACKEND_MAX_REQUESTS; i++)
        if (s->events[i]) s->api.cudaEventDestroy(s->events[i]);
    if (s->comm) s->api.ncclCommDestroy(s->comm);
    if (s->scratch) s->api.cudaFree(s->scratch);
    if (s->stream) s->api.cudaStreamDestroy(s->stream);
    if (s->mpi) s->mpi->finalize(s->mpi_st);
    free(s);
}

static void nccl_abort(void *state, int code) {
    nccl_state *s = state;
    if (s && s->comm) s->api.ncclCommAbort(s->comm);
    if (s && s->mpi) s->mpi->abort(s->mpi_st, code);
    _exit(code);
}

static void nccl_abort_async(void *state, char *msg, size_t cap) {
    nccl_state *s = state;
    wf_nccl_result r = s->api.ncclCommAbort(s->comm);
    snprintf(msg, cap, "aborted the NCCL communicator of rank %d (ncclCommAbort: %s)", s->rank,
             s->api.ncclGetErrorString(r));
}

static const char *nccl_last_error(void *state) {
    nccl_state *s = state;
    return s ? s->err : init_err_;
}

/* --------------------------------------------------------------- helpers */

/* Whether NCCL can take p as it is (device or managed memory). */
static int on_device(nccl_state *s, const void *p) {
    if (!p) return 1;
    wf_cuda_ptr_attr a;
    memset(&a, 0, sizeof a);
    if (s->api.cudaPointerGetAttributes(&a, p) != WF_CUDA_SUCCESS) return 0;
    return a.type == WF_CUDA_MEM_DEVICE || a.type == WF_CUDA_MEM_MANAGED;
}

static int scratch(nccl_state *s, size_t bytes) {
    if (bytes <= s->scratch_cap) return 0;
    size_t cap = s->scratch_cap ? s->scratch_cap : 1 << 16;
    while (cap < bytes) cap *= 2;
    if (s->scratch) s->api.cudaFree(s->scratch);
    s->scratch = NULL;
    s->scratch_cap = 0;
    CUDA_CHECK(s, s->api.cudaMalloc(&s->scratch, cap), "cudaMalloc of the NCCL staging buffer");
    s->scratch_cap = cap;
    return 0;
}

/* Polls `event` (or the stream when NULL) until it completed, checking
 * NCCL's asynchronous error all along. */
static int poll_done(nccl_state *s, void *event, int *done, int block) {
    for (;;) {
        wf_cuda_error e = event ? s->api.cudaEventQuery(event) : s->api.cudaStreamQuery(s->stream);
        if (e == WF_CUDA_SUCCESS) {
            *done = 1;
            return 0;
        }
        if (e != WF_CUDA_ERROR_NOT_READY) return cuda_fail(s, event ? "cudaEventQuery" : "cudaStreamQuery", e);
        wf_nccl_result async = WF_NCCL_SUCCESS;
        NCCL_CHECK(s, s->api.ncclCommGetAsyncError(s->comm, &async), "ncclCommGetAsyncError");
        if (async != WF_NCCL_SUCCESS && async != WF_NCCL_IN_PROGRESS)
            return nccl_fail(s, "a collective on the NCCL stream", async);
        if (!block) {
            *done = 0;
            return 0;
        }
        sched_yield();
    }
}

static int sync_stream(nccl_state *s) {
    int done;
    return poll_done(s, NULL, &done, 1);
}

static wf_nccl_dtype nccl_dtype(wf_comm_dtype dt) {
    switch (dt) {
    case WF_DT_F32: return WF_NCCL_FLOAT32;
    case WF_DT_F64: return WF_NCCL_FLOAT64;
    case WF_DT_I32: return WF_NCCL_INT32;
    case WF_DT_BYTE: break;
    }
    return WF_NCCL_UINT8;
}

static size_t dt_size(wf_comm_dtype dt) {
    return dt == WF_DT_F64 ? 8 : dt == WF_DT_BYTE ? 1 : 4;
}

static wf_nccl_op nccl_op(wf_comm_bop op) {
    return op == WF_BOP_MAX ? WF_NCCL_MAX : op == WF_BOP_MIN ? WF_NCCL_MIN : WF_NCCL_SUM;
}

static int h2d(nccl_state *s, void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(s, s->api.cudaMemcpy(dst, src, bytes, WF_CUDA_MEMCPY_H2D), "cudaMemcpy to the device");
    return 0;
}

static int d2h(nccl_state *s, void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(s, s->api.cudaMemcpy(dst, src, bytes, WF_CUDA_MEMCPY_D2H), "cudaMemcpy to the host");
    return 0;
}

/* ---------------------------------------------------------- collectives */

/* Bitwise OR: every rank's bytes gathered, ORed on the host in rank order
 * (OR is bytewise, whatever the element type). */
static int all_reduce_bor(nccl_state *s, void *buf, size_t bytes) {
    size_t all = bytes * (size_t)s->size;
    int dev = on_device(s, buf);
    uint8_t *host = malloc(all + bytes + 1);
    if (!host) return failf(s, "out of memory for an OR all-reduce of %zu bytes", bytes);
    uint8_t *mine = host + all;
    int rc = 0;
    if (dev) rc = d2h(s, mine, buf, bytes);
    else memcpy(mine, buf, bytes);
    if (rc == 0) rc = scratch(s, all);
    char *d = s->scratch;
    if (rc == 0) rc = h2d(s, d + bytes * (size_t)s->rank, mine, bytes);
    if (rc == 0) {
        wf_nccl_result r = s->api.ncclAllGather(d + bytes * (size_t)s->rank, d, bytes, WF_NCCL_UINT8, s->comm, s->stream);
        rc = r == WF_NCCL_SUCCESS ? sync_stream(s) : nccl_fail(s, "ncclAllGather (an OR all-reduce)", r);
    }
    if (rc == 0) rc = d2h(s, host, d, all);
    if (rc == 0) {
        memset(mine, 0, bytes);
        for (int r = 0; r < s->size; r++)
            for (size_t i = 0; i < bytes; i++) mine[i] |= host[(size_t)r * bytes + i];
        if (dev) rc = h2d(s, buf, mine, bytes);
        else memcpy(buf, mine, bytes);
    }
    free(host);
    return rc;
}

/* Enqueues an in-place all-reduce of device memory. */
static int enqueue_all_reduce(nccl_state *s, void *buf, size_t n, wf_comm_dtype dt, wf_comm_bop op) {
    NCCL_CHECK(s, s->api.ncclAllReduce(buf, buf, n, nccl_dtype(dt), nccl_op(op), s->comm, s->stream),
               "ncclAllReduce");
    return 0;
}

static int nccl_all_reduce(void *state, void *buf, size_t n, wf_comm_dtype dt, wf_comm_bop op) {
    nccl_state *s = state;
    if (op == WF_BOP_BOR) return all_reduce_bor(s, buf, n * dt_size(dt));
    size_t bytes = n * dt_size(dt);
    if (on_device(s, buf)) {
        if (enqueue_all_reduce(s, buf, n, dt, op) != 0) return -1;
        return sync_stream(s);
    }
    if (scratch(s, bytes) || h2d(s, s->scratch, buf, bytes) || enqueue_all_reduce(s, s->scratch, n, dt, op) ||
        sync_stream(s))
        return -1;
    return d2h(s, buf, s->scratch, bytes);
}

static int equal_counts(nccl_state *s, const size_t *counts) {
    for (int r = 1; r < s->size; r++)
        if (counts[r] != counts[0]) return 0;
    return 1;
}

/* Enqueues a reduce-scatter of device memory: send (sum counts) into recv
 * (counts[rank]); recv may equal send + its offset (in place). */
static int enqueue_reduce_scatter(nccl_state *s, const float *send, float *recv, const size_t *counts,
                                  wf_comm_bop op) {
    if (equal_counts(s, counts)) {
        if (counts[0])
            NCCL_CHECK(s, s->api.ncclReduceScatter(send, recv, counts[0], WF_NCCL_FLOAT32, nccl_op(op), s->comm, s->stream),
                       "ncclReduceScatter");
        return 0;
    }
    NCCL_CHECK(s, s->api.ncclGroupStart(), "ncclGroupStart");
    size_t off = 0;
    for (int r = 0; r < s->size; r++) {
        wf_nccl_result res = WF_NCCL_SUCCESS;
        if (counts[r])
            /* recvbuff matters on the root only */
            res = s->api.ncclReduce(send + off, r == s->rank ? recv : (float *)(uintptr_t)(send + off), counts[r], WF_NCCL_FLOAT32, nccl_op(op), r,
                                    s->comm, s->stream);
        if (res != WF_NCCL_SUCCESS) {
            s->api.ncclGroupEnd();
            return nccl_fail(s, "ncclReduce (a reduce-scatter of unequal parts)", res);
        }
        off += counts[r];
    }
    NCCL_CHECK(s, s->api.ncclGroupEnd(), "ncclGroupEnd");
    return 0;
}

static size_t sum_counts(nccl_state *s, const size_t *counts, size_t *mine_off) {
    size_t t = 0;
    for (int r = 0; r < s->size; r++) {
        if (r == s->rank) *mine_off = t;
        t += counts[r];
    }
    return t;
}

static int reduce_scatter(nccl_state *s, int slot, const float *send, float *recv, const size_t *counts,
                          wf_comm_bop op) {
    size_t off = 0, total = sum_counts(s, counts, &off), mine = counts[s->rank];
    if (on_device(s, send) && on_device(s, recv)) {
        if (enqueue_reduce_scatter(s, send, recv, counts, op)) return -1;
        if (slot < 0) return sync_stream(s);
        CUDA_CHECK(s, s->api.cudaEventRecord(s->events[slot], s->stream), "cudaEventRecord");
        return 0;
    }
    /* Staged (completes now): send into scratch, reduced in place. */
    float *d = NULL;
    if (scratch(s, total * sizeof(float))) return -1;
    d = s->scratch;
    if (h2d(s, d, send, total * sizeof(float)) || enqueue_reduce_scatter(s, d, d + off, counts, op) || sync_stream(s))
        return -1;
    if (slot >= 0) s->api.cudaEventRecord(s->events[slot], s->stream);
    return d2h(s, recv, d + off, mine * sizeof(float));
}

/* Enqueues an in-place all-gather of device memory. */
static int enqueue_all_gather(nccl_state *s, float *buf, const size_t *counts) {
    size_t off = 0;
    if (equal_counts(s, counts)) {
        if (counts[0])
            NCCL_CHECK(s, s->api.ncclAllGather(buf + counts[0] * (size_t)s->rank, buf, counts[0], WF_NCCL_FLOAT32, s->comm,
                                               s->stream),
                       "ncclAllGather");
        return 0;
    }
    NCCL_CHECK(s, s->api.ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < s->size; r++) {
        wf_nccl_result res = WF_NCCL_SUCCESS;
        if (counts[r])
            res = s->api.ncclBroadcast(buf + off, buf + off, counts[r], WF_NCCL_FLOAT32, r, s->comm, s->stream);
        if (res != WF_NCCL_SUCCESS) {
            s->api.ncclGroupEnd();
            return nccl_fail(s, "ncclBroadcast (an all-gather of unequal parts)", res);
        }
        off += counts[r];
    }
    NCCL_CHECK(s, s->api.ncclGroupEnd(), "ncclGroupEnd");
    return 0;
}

static int all_gather(nccl_state *s, int slot, float *buf, const size_t *counts) {
    size_t off = 0, total = sum_counts(s, counts, &off);
    if (on_device(s, buf)) {
        if (enqueue_all_gather(s, buf, counts)) return -1;
        if (slot < 0) return sync_stream(s);
        CUDA_CHECK(s, s->api.cudaEventRecord(s->events[slot], s->stream), "cudaEventRecord");
        return 0;
    }
    size_t bytes = total * sizeof(float);
    if (scratch(s, bytes) || h2d(s, (float *)s->scratch + off, buf + off, counts[s->rank] * sizeof(float)) ||
        enqueue_all_gather(s, s->scratch, counts) || sync_stream(s))
        return -1;
    if (slot >= 0) s->api.cudaEventRecord(s->events[slot], s->stream);
    return d2h(s, buf, s->scratch, bytes);
}

static int slot_event(nccl_state *s, int slot) {
    if (!s->events[slot])
        CUDA_CHECK(s, s->api.cudaEventCreateWithFlags(&s->events[slot], WF_CUDA_EVENT_DISABLE_TIMING),
                   "cudaEventCreateWithFlags");
    return 0;
}

static int nccl_iall_reduce(void *state, int slot, float *buf, size_t n, wf_comm_bop op) {
    nccl_state *s = state;
    if (slot_event(s, slot)) return -1;
    if (on_device(s, buf)) {
        if (enqueue_all_reduce(s, buf, n, WF_DT_F32, op)) return -1;
    } else if (nccl_all_reduce(s, buf, n, WF_DT_F32, op)) {
        return -1;
    }
    CUDA_CHECK(s, s->api.cudaEventRecord(s->events[slot], s->stream), "cudaEventRecord");
    return 0;
}

static int nccl_test(void *state, int slot, int *done) {
    nccl_state *s = state;
    return poll_done(s, s->events[slot], done, 0);
}

static int nccl_wait(void *state, int slot) {
    nccl_state *s = state;
    int done;
    return poll_done(s, s->events[slot], &done, 1);
}

static int nccl_reduce_scatter(void *state, const float *send, float *recv, const size_t *counts, wf_comm_bop op) {
    return reduce_scatter(state, -1, send, recv, counts, op);
}

static int nccl_ireduce_scatter(void *state, int slot, const float *send, float *recv, const size_t *counts,
                                wf_comm_bop op) {
    nccl_state *s = state;
    if (slot_event(s, slot)) return -1;
    return reduce_scatter(s, slot, send, recv, counts, op);
}

static int nccl_all_gather(void *state, float *buf, const size_t *counts) {
    return all_gather(state, -1, buf, counts);
}

static int nccl_iall_gather(void *state, int slot, float *buf, const size_t *counts) {
    nccl_state *s = state;
    if (slot_event(s, slot)) return -1;
    return all_gather(s, slot, buf, counts);
}

static int nccl_all_gather_bytes(void *state, const void *mine, void *out, size_t bytes) {
    nccl_state *s = state;
    if (on_device(s, mine) && on_device(s, out)) {
        NCCL_CHECK(s, s->api.ncclAllGather(mine, out, bytes, WF_NCCL_UINT8, s->comm, s->stream), "ncclAllGather");
        return sync_stream(s);
    }
    size_t all = bytes * (size_t)s->size;
    char *d;
    if (scratch(s, all)) return -1;
    d = s->scratch;
    if (h2d(s, d + bytes * (size_t)s->rank, mine, bytes)) return -1;
    NCCL_CHECK(s, s->api.ncclAllGather(d + bytes * (size_t)s->rank, d, bytes, WF_NCCL_UINT8, s->comm, s->stream),
               "ncclAllGather");
    if (sync_stream(s)) return -1;
    return d2h(s, out, d, all);
}

static int nccl_broadcast(void *state, void *buf, size_t bytes, int root) {
    nccl_state *s = state;
    if (on_device(s, buf)) {
        NCCL_CHECK(s, s->api.ncclBroadcast(buf, buf, bytes, WF_NCCL_UINT8, root, s->comm, s->stream), "ncclBroadcast");
        return sync_stream(s);
    }
    if (scratch(s, bytes) || (s->rank == root && h2d(s, s->scratch, buf, bytes))) return -1;
    NCCL_CHECK(s, s->api.ncclBroadcast(s->scratch, s->scratch, bytes, WF_NCCL_UINT8, root, s->comm, s->stream),
               "ncclBroadcast");
    if (sync_stream(s)) return -1;
    return s->rank == root ? 0 : d2h(s, buf, s->scratch, bytes);
}

static int nccl_barrier(void *state) {
    nccl_state *s = state;
    if (scratch(s, sizeof(int32_t))) return -1;
    NCCL_CHECK(s, s->api.ncclAllReduce(s->scratch, s->scratch, 1, WF_NCCL_INT32, WF_NCCL_SUM, s->comm, s->stream),
               "ncclAllReduce (a barrier)");
    return sync_stream(s);
}

__attribute__((visibility("default"))) const wf_comm_ops *wf_comm_backend_v1(void);

const wf_comm_ops *wf_comm_backend_v1(void) {
    static const wf_comm_ops b = {
        .abi = WF_COMM_ABI,
        .name = "nccl",
        .init = nccl_init,
        .finalize = nccl_finalize,
        .abort = nccl_abort,
        .last_error = nccl_last_error,
        .all_reduce = nccl_all_reduce,
        .iall_reduce = nccl_iall_reduce,
        .test = nccl_test,
        .wait = nccl_wait,
        .reduce_scatter = nccl_reduce_scatter,
        .all_gather = nccl_all_gather,
        .ireduce_scatter = nccl_ireduce_scatter,
        .all_gather_bytes = nccl_all_gather_bytes,
        .iall_gather = nccl_iall_gather,
        .broadcast = nccl_broadcast,
        .barrier = nccl_barrier,
        .max_requests = NCCL_BACKEND_MAX_REQUESTS,
        .abort_async = nccl_abort_async,
    };
    return &b;
}
