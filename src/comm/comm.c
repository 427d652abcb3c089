/* The communicator (contract: include/weft/comm.h; design:
 * docs/distributed.md): picks and loads a backend, and wraps every
 * collective with the checks, the AVG division, the flight recorder and
 * the watchdog, so that backends stay thin. Before MPI_Init it also picks
 * Open MPI's non-blocking all-reduce algorithm (openmpi_choose_ring).
 *
 * Loading. The MPI backends are shared objects opened with dlopen
 * (RTLD_GLOBAL, because Open MPI's own plugins look up libmpi's symbols
 * globally; RTLD_NODELETE, because MPI registers exit handlers that must
 * find their code). They are never closed. The single-process backend is
 * compiled in.
 *
 * A launcher's environment names the job's size; after MPI_Init the
 * communicator checks that MPI sees the same size. A mismatch means the
 * backend's MPI implementation is not the launcher's (e.g. MPICH's backend
 * under Open MPI's mpirun starts N separate worlds of one rank), which
 * would otherwise train N independent models without a word.
 *
 * Test hook: WEFT_TEST_STALL_COLLECTIVE=RANK:STEP makes rank RANK stall for
 * good inside its first blocking all-reduce of step STEP (counted from 0,
 * as wf_comm_set_step and the flight recorder count), after the recorder
 * marked it blocked: a rank hung in a collective, for the watchdog's and
 * the stack dumps' tests (tests/py/test_hang_dump.py). Read once, at
 * create.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "comm/comm_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/trace.h"

typedef struct {
    int used, done, ok;
    float *buf;
    size_t n;
    int avg;
    uint64_t seq;
    const char *wait_name; /* the trace span of its wait */
} comm_req;

struct wf_comm {
    const wf_comm_ops *be;
    void *st;
    int rank, size, local_rank;
    char backend[32];
    char version[256];
    wf_watchdog *wd;
    comm_req reqs[WF_COMM_MAX_REQUESTS];
    int max_reqs, n_out;
    int stall_rank;      /* WEFT_TEST_STALL_COLLECTIVE's, -1 if unset */
    long long stall_step;
    /* A sub-communicator (wf_comm_split): its axis name, the world's rank
     * and size for messages; it shares the world's watchdog and backend. */
    char axis[16];
    int world_rank, world_size;
    int is_split;
};

/* Records a collective in the flight recorder; a sub-communicator's kind
 * carries its axis ("all_reduce[tp]"), so that a report names the axis. */
static uint64_t wd_begin(wf_comm *c, const char *kind, const char *tag, size_t bytes, int blocking) {
    if (!c->axis[0]) return wf__comm_watchdog_begin(c->wd, kind, tag, bytes, blocking);
    char k[64];
    snprintf(k, sizeof k, "%s[%s]", kind, c->axis);
    return wf__comm_watchdog_begin(c->wd, k, tag, bytes, blocking);
}

wf_comm_options wf_comm_options_default(void) {
    return (wf_comm_options){
        .backend = NULL,
        .timeout_first_s = 600,
        .timeout_s = 300,
        .first_steps = 2,
        .recorder_size = 64,
        .timeout_exit_code = 3,
    };
}

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

const char *wf_comm_detect_backend(const wf_comm_options *o) {
    if (o && o->backend && *o->backend && strcmp(o->backend, "auto") != 0) return o->backend;
    const char *e = getenv("WEFT_DIST_BACKEND");
    if (e && *e && strcmp(e, "auto") != 0) return e;
    if (env_set("OMPI_COMM_WORLD_SIZE")) return "openmpi";
    if (env_set("PMI_RANK") || env_set("PMI_SIZE")) return "mpich";
    if (env_set("SLURM_STEP_NUM_TASKS")) return env_set("PMIX_RANK") ? "openmpi" : "mpich";
    return "single";
}

/* The job size the launcher announced, or 0 if none is known. */
static int launcher_size(const char **var) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            *var = vars[i];
            return atoi(v);
        }
    }
    *var = NULL;
    return 0;
}

/* srun gives MPI its process-management interface through a plugin (--mpi
 * or slurm.conf's MpiDefault): pmix sets PMIX_RANK (Open MPI's), pmi2 sets
 * PMI_FD (MPICH's simple PMI speaks to it), none sets neither. srun is the
 * launcher when its task count is the job's size (a launcher started inside
 * a one-task step, e.g. `srun -n 1 mpiexec.mpich -n 4`, is not srun). */
static int under_srun(void) {
    const char *var, *tasks = getenv("SLURM_STEP_NUM_TASKS");
    int n = launcher_size(&var);
    return tasks && *tasks && !env_set("OMPI_COMM_WORLD_SIZE") && atoi(tasks) == n;
}

static const char *srun_plugin(void) {
    if (env_set("PMIX_RANK")) return "pmix";
    if (env_set("PMI_FD") || env_set("PMI_RANK")) return "pmi2";
    return NULL;
}

/* Open MPI 4.1's non-blocking all-reduce (the libnbc component) picks a
 * binomial tree whenever the call is in place or the job has fewer than 4
 * ranks: every rank sends its whole buffer up the tree and the result comes
 * back down. weft's gradient buckets are all in place, and that tree is
 * much slower than the ring (algorithm 1), Open MPI's blocking
 * MPI_Allreduce or MPICH (bench/README.md, "All-reduce", has the figures).
 * So the ring is weft's default: set in the
 * environment, where Open MPI reads its MCA parameters at MPI_Init, unless
 * the user (or mpirun's --mca, which passes the same variable) already chose.
 * Returns 1 if weft set it, 0 if the user's value stays. */
#define LIBNBC_IALLREDUCE_VAR "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
static int openmpi_choose_ring(void) {
    if (getenv(LIBNBC_IALLREDUCE_VAR)) return 0;
    return setenv(LIBNBC_IALLREDUCE_VAR, "1", 0) == 0;
}

/* Why the backend's world differs from the launcher's, and what to do. */
static void mismatch_advice(const char *version, char *out, size_t cap) {
    if (under_srun() && !srun_plugin())
        snprintf(out, cap,
                 "srun gave the ranks no MPI plugin (neither PMIX_RANK nor PMI_FD is set: "
                 "--mpi=none or slurm.conf's MpiDefault), so every rank started a world of its "
                 "own. Run Open MPI's backend with `srun --mpi=pmix` and MPICH's with `srun "
                 "--mpi=pmi2` (`srun --mpi=list` shows the plugins)");
    else if (under_srun())
        snprintf(out, cap,
                 "the backend's MPI (%s) does not speak srun's %s plugin. Run Open MPI's backend "
                 "with `srun --mpi=pmix` and MPICH's with `srun --mpi=pmi2`, or set "
                 "WEFT_DIST_BACKEND",
                 version, srun_plugin());
    else
        snprintf(out, cap,
                 "the backend's MPI (%s) is not the launcher's. Use that MPI's launcher "
                 "(mpirun.openmpi for openmpi, mpiexec.mpich for mpich) or set WEFT_DIST_BACKEND",
                 version);
}

static void append_tried(char *tried, size_t cap, const char *path, const char *why) {
    size_t len = strlen(tried);
    if (len < cap) snprintf(tried + len, cap - len, "\n  %s: %s", path, why);
}

/* Opens backend shared object `path`; on failure appends why to `tried`. */
static const wf_comm_ops *open_backend(const char *path, char *tried, size_t cap) {
    if (access(path, F_OK) != 0) {
        append_tried(tried, cap, path, "no such file");
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (!h) {
        append_tried(tried, cap, path, dlerror());
        return NULL;
    }
    wf_comm_ops_fn fn;
    void *sym = dlsym(h, WF_COMM_BACKEND_SYMBOL);
    if (!sym) {
        append_tried(tried, cap, path, "not a weft backend (no " WF_COMM_BACKEND_SYMBOL ")");
        return NULL;
    }
    memcpy(&fn, &sym, sizeof fn); /* object to function pointer, as POSIX allows */
    const wf_comm_ops *be = fn();
    if (!be || be->abi != WF_COMM_ABI) {
        char why[128];
        snprintf(why, sizeof why, "built for backend ABI %d, this weft needs %d: rebuild it (make)",
                 be ? be->abi : -1, WF_COMM_ABI);
        append_tried(tried, cap, path, why);
        return NULL;
    }
    return be;
}

static const wf_comm_ops *find_backend(const char *name, char *tried, size_t cap) {
    if (strchr(name, '/')) return open_backend(name, tried, cap);
    char file[96];
    snprintf(file, sizeof file, "libweft-mpi-%s.so", name);
    char path[PATH_MAX + 128];
    const char *dir = getenv("WEFT_DIST_LIB_DIR");
    if (dir && *dir) {
        if (wf_path_join(path, sizeof path, dir, file, NULL) == WF_OK) {
            const wf_comm_ops *be = open_backend(path, tried, cap);
            if (be) return be;
        } else {
            append_tried(tried, cap, "WEFT_DIST_LIB_DIR", "the path is too long");
            wf_error_clear();
        }
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        append_tried(tried, cap, "/proc/self/exe", "cannot find the executable's folder");
        return NULL;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    static const char *rel[] = {"", "/..", "/../..", "/../lib/weft"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(path, sizeof path, "%s%s/%s", exe, rel[i], file);
        const wf_comm_ops *be = open_backend(path, tried, cap);
        if (be) return be;
    }
    return NULL;
}

wf_status wf_comm_create(wf_comm **out, const wf_comm_options *opts) {
    *out = NULL;
    wf_comm_options o = opts ? *opts : wf_comm_options_default();
    /* Options first: a bad one must not cost the process its MPI_Init. */
    if (o.recorder_size < 4 || o.recorder_size > (1 << 20))
        return wf_error(WF_ERR_CONFIG,
                        "dist: recorder_size %d is out of range: use 4 .. 1048576 entries",
                        o.recorder_size);
    if (o.timeout_exit_code < 1 || o.timeout_exit_code > 255)
        return wf_error(WF_ERR_CONFIG,
                        "dist: timeout_exit_code %d is out of range: use 1 .. 255 (0 would "
                        "report success)",
                        o.timeout_exit_code);
    const char *name = wf_comm_detect_backend(&o);
    const wf_comm_ops *be;
    if (strcmp(name, "single") == 0) {
        be = wf__comm_single_backend();
    } else {
        char tried[2048] = "";
        be = find_backend(name, tried, sizeof tried);
        if (!be) {
            const char *var;
            int n = launcher_size(&var);
            char why[160] = "";
            if (var) snprintf(why, sizeof why, " (the launcher set %s=%d)", var, n);
            if (strchr(name, '/'))
                return wf_error(WF_ERR_NOTFOUND,
                                "dist: cannot load the MPI backend%s:%s\nBuild the backends with "
                                "`make`, or set WEFT_DIST_BACKEND to single, openmpi, mpich or "
                                "the path of a libweft-mpi-*.so",
                                why, tried);
            return wf_error(WF_ERR_NOTFOUND,
                            "dist: this job needs the MPI backend \"%s\"%s but none could be "
                            "loaded; tried:%s\nBuild it with `make` (it needs mpicc.%s: run "
                            "scripts/setup.sh), point WEFT_DIST_LIB_DIR at the folder holding "
                            "libweft-mpi-%s.so, or choose another with WEFT_DIST_BACKEND "
                            "(single, openmpi, mpich or a path)",
                            name, why, tried, name, name);
        }
    }
    wf_comm *c = calloc(1, sizeof *c);
    if (!c) return wf_error(WF_ERR_NOMEM, "dist: out of memory for the communicator");
    c->be = be;
    snprintf(c->backend, sizeof c->backend, "%s", be->name);
    /* Open MPI aborts inside MPI_Init under srun without PMIx, saying it
     * was "not built with SLURM's PMI support": say the real cause first. */
    if (strcmp(be->name, "openmpi") == 0 && under_srun() && !env_set("PMIX_RANK"))
        WF_WARN("dist: the openmpi backend under srun without its PMIx plugin (PMIX_RANK is "
                "not set; srun's --mpi is %s): Open MPI's MPI_Init will likely fail. Run it "
                "with `srun --mpi=pmix`, or MPICH's backend with `srun --mpi=pmi2`",
                srun_plugin() ? srun_plugin() : "none");
    int ring = strcmp(be->name, "openmpi") == 0 ? openmpi_choose_ring() : -1;
    if (be->init(&c->st, &c->rank, &c->size, &c->local_rank, c->version, sizeof c->version) != 0) {
        wf_status s = wf_error(WF_ERR_IO, "dist: starting the %s backend: %s", be->name,
                               be->last_error(NULL));
        free(c);
        return s;
    }
    const char *var;
    int expect = launcher_size(&var);
    if (expect > 0 && expect != c->size && strcmp(be->name, "single") != 0) {
        char advice[768];
        mismatch_advice(c->version, advice, sizeof advice);
        wf_status s = wf_error(WF_ERR_CONFIG,
                               "dist: the launcher started %d ranks (%s=%d) but the %s backend "
                               "sees a world of %d: %s",
                               expect, var, expect, be->name, c->size, advice);
        be->finalize(c->st);
        free(c);
        return s;
    }
    c->max_reqs = be->max_requests < WF_COMM_MAX_REQUESTS ? be->max_requests : WF_COMM_MAX_REQUESTS;
    wf_status s = wf__comm_watchdog_create(&c->wd, &o, c->rank, c->size);
    if (s != WF_OK) {
        be->finalize(c->st);
        free(c);
        return s;
    }
    c->world_rank = c->rank;
    c->world_size = c->size;
    wf_log_set_rank(c->rank, c->size);
    const char *stall = getenv("WEFT_TEST_STALL_COLLECTIVE");
    c->stall_rank = -1;
    if (stall && sscanf(stall, "%d:%lld", &c->stall_rank, &c->stall_step) != 2) c->stall_rank = -1;
    if (ring == 1 && c->rank == 0)
        WF_INFO("dist: Open MPI's non-blocking all-reduce runs as a ring (weft set %s=1; libnbc's "
                "own choice for in-place calls, a binomial tree, moved gradients 2.5x slower: "
                "docs/distributed.md); set the variable to choose another",
                LIBNBC_IALLREDUCE_VAR);
    else if (ring == 0 && c->rank == 0)
        WF_DEBUG("dist: Open MPI's non-blocking all-reduce: %s=%s, the user's choice, kept",
                 LIBNBC_IALLREDUCE_VAR, getenv(LIBNBC_IALLREDUCE_VAR));
    *out = c;
    return WF_OK;
}

const char *wf_comm_backend_path(const wf_comm *c) {
    Dl_info info;
    if (strcmp(c->backend, "single") == 0) return "";
    /* The backend's table lives in its shared object. */
    if (dladdr((const void *)c->be, &info) && info.dli_fname) return info.dli_fname;
    return "";
}

void wf_comm_destroy(wf_comm *c) {
    if (!c) return;
    /* Leave no request behind: MPI_Finalize with pending ones is an error. */
    for (int i = 0; i < c->max_reqs; i++)
        if (c->reqs[i].used && !c->reqs[i].done) c->be->wait(c->st, i);
    if (c->is_split) {
        c->be->free_split(c->st);
        free(c);
        return;
    }
    wf__comm_watchdog_destroy(c->wd);
    c->be->finalize(c->st);
    free(c);
}

int wf_comm_rank(const wf_comm *c) { return c->rank; }
int wf_comm_size(const wf_comm *c) { return c->size; }
int wf_comm_local_rank(const wf_comm *c) { return c->local_rank; }
const char *wf_comm_backend(const wf_comm *c) { return c->backend; }
const char *wf_comm_library_version(const wf_comm *c) { return c->version; }

void wf_comm_abort(wf_comm *c, int code) {
    /* The launcher kills every process of the job on an abort; MPICH's
     * mpiexec then drops what is still in its output pipes, which can be
     * this rank's last lines: the error that says why. Give them a moment
     * (the job is ending anyway). */
    fflush(stdout);
    fflush(stderr);
    usleep(300 * 1000);
    c->be->abort(c->st, code);
    _exit(code); /* a backend's abort does not return; this keeps noreturn true */
}

void wf_comm_set_step(wf_comm *c, int64_t step) { wf__comm_watchdog_set_step(c->wd, step); }

size_t wf_comm_recorder_dump(wf_comm *c, char *out, size_t cap) {
    return wf__comm_watchdog_dump(c->wd, out, cap);
}

uint64_t wf_comm_completed(const wf_comm *c) { return wf__comm_watchdog_completed(c->wd); }

static const char *op_name(wf_comm_op op) {
    switch (op) {
    case WF_COMM_SUM: return "sum";
    case WF_COMM_AVG: return "avg";
    case WF_COMM_MAX: return "max";
    case WF_COMM_MIN: return "min";
    case WF_COMM_BOR: return "bor";
    }
    return "?";
}

/* Checks that `op` applies to `dt` and maps it to the backend's op. */
static wf_status backend_op(wf_comm_op op, wf_comm_dtype dt, const char *kind, const char *tag,
                            wf_comm_bop *out) {
    int is_float = dt == WF_DT_F32 || dt == WF_DT_F64;
    switch (op) {
    case WF_COMM_SUM: *out = WF_BOP_SUM; return WF_OK;
    case WF_COMM_AVG:
        if (is_float) {
            *out = WF_BOP_SUM;
            return WF_OK;
        }
        break;
    case WF_COMM_MAX: *out = WF_BOP_MAX; return WF_OK;
    case WF_COMM_MIN: *out = WF_BOP_MIN; return WF_OK;
    case WF_COMM_BOR:
        if (!is_float) {
            *out = WF_BOP_BOR;
            return WF_OK;
        }
        break;
    }
    return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": op %s (%d) does not apply to %s data", kind,
                    tag ? tag : "", op_name(op), (int)op, is_float ? "floating-point" : "integer");
}

static wf_status comm_fail(wf_comm *c, const char *kind, const char *tag) {
    if (c->is_split)
        return wf_error(WF_ERR_IO, "dist: %s \"%s\" at step %lld on rank %d of %d of axis %s (rank %d of %d): %s",
                        kind, tag ? tag : "", (long long)wf__comm_watchdog_step(c->wd), c->rank, c->size,
                        c->axis, c->world_rank, c->world_size, c->be->last_error(c->st));
    return wf_error(WF_ERR_IO, "dist: %s \"%s\" at step %lld on rank %d of %d: %s", kind,
                    tag ? tag : "", (long long)wf__comm_watchdog_step(c->wd), c->rank, c->size,
                    c->be->last_error(c->st));
}

static size_t dtype_size(wf_comm_dtype dt) {
    switch (dt) {
    case WF_DT_F32: return 4;
    case WF_DT_F64: return 8;
    case WF_DT_I32: return 4;
    case WF_DT_BYTE: return 1;
    }
    return 1;
}

/* AVG's division by the world size w, after the sum: the correctly
 * rounded x / w for any w. For w a power of two that is x * (1 / w) exactly
 * (both round the same real number, also below the normal range), and a
 * multiplication is cheaper than a division. Written so that the compiler
 * vectorizes it (a local restrict pointer and count, and an OpenMP simd
 * loop where the build has OpenMP): a scalar loop that reloads the
 * request's pointer and count at every element costs more than the
 * all-reduce itself (bench/README.md, "All-reduce"). */
static int power_of_two(int w) { return w > 0 && (w & (w - 1)) == 0; }

static void divide_f32(float *restrict x, size_t n, int w) {
    if (power_of_two(w)) {
        const float inv = 1.0f / (float)w;
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] *= inv;
    } else {
        const float fw = (float)w;
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] /= fw;
    }
}

static void divide_f64(double *restrict x, size_t n, int w) {
    if (power_of_two(w)) {
        const double inv = 1.0 / (double)w;
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] *= inv;
    } else {
        const double dw = (double)w;
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] /= dw;
    }
}

/* WEFT_TEST_STALL_COLLECTIVE (the top of the file): never returns. */
__attribute__((noinline)) static void stall_in_collective_for_test(wf_comm *c, const char *tag) {
    WF_WARN("WEFT_TEST_STALL_COLLECTIVE: rank %d stalls for good in all_reduce \"%s\" of step %lld (a test hook)",
            c->rank, tag ? tag : "", c->stall_step);
    for (;;) sleep(60);
}

static wf_status all_reduce_any(wf_comm *c, void *buf, size_t n, wf_comm_dtype dt, wf_comm_op op,
                                const char *tag) {
    wf_comm_bop bop;
    WF_TRY(backend_op(op, dt, "all_reduce", tag, &bop));
    if (n && !buf) return wf_error(WF_ERR_INVALID, "dist: all_reduce \"%s\": NULL buffer", tag ? tag : "");
    size_t es = dtype_size(dt);
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "all_reduce", (int64_t)(n * es));
    uint64_t seq = wd_begin(c, "all_reduce", tag, n * es, 1);
    if (c->stall_rank == c->rank && wf__comm_watchdog_step(c->wd) == c->stall_step)
        stall_in_collective_for_test(c, tag);
    int rc = 0;
    for (size_t done = 0; done < n && rc == 0;) {
        size_t k = n - done < WF_COMM_MAX_COUNT ? n - done : WF_COMM_MAX_COUNT;
        rc = c->be->all_reduce(c->st, (char *)buf + done * es, k, dt, bop);
        done += k;
    }
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    /* The division is part of the collective for its caller: inside the
     * trace span, as the caller's own timer counts it. */
    if (rc == 0 && op == WF_COMM_AVG && c->size > 1) {
        if (dt == WF_DT_F32) divide_f32(buf, n, c->size);
        else divide_f64(buf, n, c->size);
    }
    wf_trace_end(span);
    if (rc != 0) return comm_fail(c, "all_reduce", tag);
    return WF_OK;
}

wf_status wf_comm_all_reduce(wf_comm *c, float *buf, size_t n, wf_comm_op op, const char *tag) {
    return all_reduce_any(c, buf, n, WF_DT_F32, op, tag);
}

wf_status wf_comm_all_reduce_f64(wf_comm *c, double *buf, size_t n, wf_comm_op op,
                                 const char *tag) {
    return all_reduce_any(c, buf, n, WF_DT_F64, op, tag);
}

wf_status wf_comm_all_reduce_i32(wf_comm *c, int32_t *buf, size_t n, wf_comm_op op,
                                 const char *tag) {
    return all_reduce_any(c, buf, n, WF_DT_I32, op, tag);
}

wf_status wf_comm_agree(wf_comm *c, uint32_t *flags, const char *tag) {
    int32_t v = (int32_t)*flags;
    WF_TRY(all_reduce_any(c, &v, 1, WF_DT_I32, WF_COMM_BOR, tag ? tag : "agree"));
    *flags = (uint32_t)v;
    return WF_OK;
}

wf_status wf_comm_check_replicas(wf_comm *c, const void *buf, size_t bytes, const char *what) {
    if (bytes && !buf) return wf_error(WF_ERR_INVALID, "dist: replica check of %s: NULL buffer", what);
    uint64_t mine = wf_hash64(buf, bytes), first = mine;
    WF_TRY(wf_comm_broadcast(c, &first, sizeof first, 0, "replica check"));
    int32_t differ[1] = {mine != first}, first_rank[1] = {mine != first ? c->rank : INT32_MAX};
    WF_TRY(wf_comm_all_reduce_i32(c, differ, 1, WF_COMM_SUM, "replica check"));
    WF_TRY(wf_comm_all_reduce_i32(c, first_rank, 1, WF_COMM_MIN, "replica check"));
    if (differ[0])
        return wf_error(WF_ERR_INTERNAL,
                        "dist: %s differ between ranks: %d of %d ranks hold other bytes than rank 0 "
                        "(the first is rank %d); the replicas have diverged (an all-reduce that "
                        "did not give every rank the same bits, or a rank that skipped a step)",
                        what, differ[0], c->size, first_rank[0]);
    return WF_OK;
}

/* Sum of counts, checked against the backend's int limit. */
static wf_status check_counts(wf_comm *c, const size_t *counts, const char *kind, const char *tag,
                              size_t *total) {
    if (!counts) return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": NULL counts", kind, tag ? tag : "");
    size_t t = 0;
    for (int r = 0; r < c->size; r++) {
        t += counts[r];
        if (t > WF_COMM_MAX_COUNT)
            return wf_error(WF_ERR_RANGE,
                            "dist: %s \"%s\": %zu floats in all is more than one call moves "
                            "(%zu): split the buffer",
                            kind, tag ? tag : "", t, WF_COMM_MAX_COUNT);
    }
    *total = t;
    return WF_OK;
}

wf_status wf_comm_reduce_scatter(wf_comm *c, const float *send, float *recv, const size_t *counts,
                                 wf_comm_op op, const char *tag) {
    wf_comm_bop bop;
    size_t total;
    if (op != WF_COMM_SUM && op != WF_COMM_AVG)
        return wf_error(WF_ERR_INVALID, "dist: reduce_scatter \"%s\": op %s is not sum or avg",
                        tag ? tag : "", op_name(op));
    WF_TRY(backend_op(op, WF_DT_F32, "reduce_scatter", tag, &bop));
    WF_TRY(check_counts(c, counts, "reduce_scatter", tag, &total));
    size_t mine = counts[c->rank];
    if ((total && !send) || (mine && !recv))
        return wf_error(WF_ERR_INVALID, "dist: reduce_scatter \"%s\": NULL buffer", tag ? tag : "");
    if (mine && send && recv < send + total && send < recv + mine)
        return wf_error(WF_ERR_INVALID,
                        "dist: reduce_scatter \"%s\": the receive buffer overlaps the send buffer",
                        tag ? tag : "");
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "reduce_scatter", (int64_t)(total * sizeof(float)));
    uint64_t seq = wd_begin(c, "reduce_scatter", tag, total * sizeof(float), 1);
    int rc = c->be->reduce_scatter(c->st, send, recv, counts, bop);
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    if (rc == 0 && op == WF_COMM_AVG && c->size > 1) divide_f32(recv, mine, c->size);
    wf_trace_end(span);
    if (rc != 0) return comm_fail(c, "reduce_scatter", tag);
    return WF_OK;
}

wf_status wf_comm_all_gather(wf_comm *c, float *buf, const size_t *counts, const char *tag) {
    size_t total;
    WF_TRY(check_counts(c, counts, "all_gather", tag, &total));
    if (total && !buf) return wf_error(WF_ERR_INVALID, "dist: all_gather \"%s\": NULL buffer", tag ? tag : "");
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "all_gather", (int64_t)(total * sizeof(float)));
    uint64_t seq = wd_begin(c, "all_gather", tag, total * sizeof(float), 1);
    int rc = c->be->all_gather(c->st, buf, counts);
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    wf_trace_end(span);
    return rc == 0 ? WF_OK : comm_fail(c, "all_gather", tag);
}

wf_status wf_comm_all_gather_bytes(wf_comm *c, const void *mine, void *out, size_t bytes,
                                   const char *tag) {
    if (bytes > WF_COMM_MAX_COUNT)
        return wf_error(WF_ERR_RANGE, "dist: all_gather_bytes \"%s\": %zu bytes per rank is more "
                        "than one call moves (%zu)", tag ? tag : "", bytes, WF_COMM_MAX_COUNT);
    if (bytes && (!mine || !out))
        return wf_error(WF_ERR_INVALID, "dist: all_gather_bytes \"%s\": NULL buffer", tag ? tag : "");
    const char *m = mine, *o = out;
    if (bytes && m < o + bytes * (size_t)c->size && o < m + bytes)
        return wf_error(WF_ERR_INVALID,
                        "dist: all_gather_bytes \"%s\": the input overlaps the output", tag ? tag : "");
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "all_gather", (int64_t)(bytes * (size_t)c->size));
    uint64_t seq = wd_begin(c, "all_gather", tag, bytes * (size_t)c->size, 1);
    int rc = c->be->all_gather_bytes(c->st, mine, out, bytes);
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    wf_trace_end(span);
    return rc == 0 ? WF_OK : comm_fail(c, "all_gather_bytes", tag);
}

wf_status wf_comm_broadcast(wf_comm *c, void *buf, size_t bytes, int root, const char *tag) {
    if (root < 0 || root >= c->size)
        return wf_error(WF_ERR_INVALID, "dist: broadcast \"%s\": root %d is not a rank (0..%d)",
                        tag ? tag : "", root, c->size - 1);
    if (bytes && !buf) return wf_error(WF_ERR_INVALID, "dist: broadcast \"%s\": NULL buffer", tag ? tag : "");
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "broadcast", (int64_t)(bytes));
    uint64_t seq = wd_begin(c, "broadcast", tag, bytes, 1);
    int rc = 0;
    for (size_t done = 0; done < bytes && rc == 0;) {
        size_t k = bytes - done < WF_COMM_MAX_COUNT ? bytes - done : WF_COMM_MAX_COUNT;
        rc = c->be->broadcast(c->st, (char *)buf + done, k, root);
        done += k;
    }
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    wf_trace_end(span);
    return rc == 0 ? WF_OK : comm_fail(c, "broadcast", tag);
}

wf_status wf_comm_barrier(wf_comm *c, const char *tag) {
    uint64_t seq = wd_begin(c, "barrier", tag, 0, 1);
    int rc = c->be->barrier(c->st);
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    return rc == 0 ? WF_OK : comm_fail(c, "barrier", tag);
}

/* --- Non-blocking all-reduce and reduce-scatter -------------------------
 * A slot is `used` from iall_reduce (ireduce_scatter) until its owner's test or wait sees it
 * complete; it is `done` from the moment any call (the owner's, or
 * wf_comm_progress) learns from MPI that it completed: then the average is
 * taken and the recorder notes the time. */

static void req_finish(wf_comm *c, int slot, int ok) {
    comm_req *q = &c->reqs[slot];
    if (q->done) return;
    if (ok && q->avg && c->size > 1) divide_f32(q->buf, q->n, c->size);
    wf__comm_watchdog_end(c->wd, q->seq, ok);
    q->done = 1;
    q->ok = ok;
    c->n_out--;
}

/* Frees the owner's slot; returns whether the request succeeded. */
static int req_release(wf_comm *c, wf_comm_request *req) {
    comm_req *q = &c->reqs[req->slot];
    int ok = q->ok;
    q->used = 0;
    req->slot = -1;
    return ok;
}

static wf_status check_req(wf_comm *c, const wf_comm_request *req, const char *what) {
    if (!req) return wf_error(WF_ERR_INVALID, "dist: %s: NULL request", what);
    int bad = req->slot < -1 || req->slot >= c->max_reqs;
    if (!bad && req->slot >= 0)
        bad = !c->reqs[req->slot].used || c->reqs[req->slot].seq != req->seq;
    if (bad)
        return wf_error(WF_ERR_INVALID,
                        "dist: %s: request (slot %d, #%llu) is not an outstanding request of "
                        "this communicator (completed twice, or never started?)",
                        what, req->slot, (unsigned long long)req->seq);
    return WF_OK;
}

/* A free request slot, or -1. */
static int free_slot(wf_comm *c) {
    for (int i = 0; i < c->max_reqs; i++)
        if (!c->reqs[i].used) return i;
    return -1;
}

static wf_status no_slot(wf_comm *c, const char *kind, const char *tag) {
    return wf_error(WF_ERR_RANGE,
                    "dist: %s \"%s\": %d requests are outstanding, the most there may be: wait "
                    "for some first",
                    kind, tag ? tag : "", c->max_reqs);
}

wf_status wf_comm_iall_reduce(wf_comm *c, float *buf, size_t n, wf_comm_op op, const char *tag,
                              wf_comm_request *req) {
    wf_comm_bop bop;
    if (!req)
        return wf_error(WF_ERR_INVALID, "dist: iall_reduce \"%s\": NULL request", tag ? tag : "");
    req->slot = -1;
    req->seq = 0;
    WF_TRY(backend_op(op, WF_DT_F32, "iall_reduce", tag, &bop));
    if (n > WF_COMM_MAX_COUNT)
        return wf_error(WF_ERR_RANGE,
                        "dist: iall_reduce \"%s\": %zu floats is more than one call moves (%zu): "
                        "use smaller buckets",
                        tag ? tag : "", n, WF_COMM_MAX_COUNT);
    if (n && !buf)
        return wf_error(WF_ERR_INVALID, "dist: iall_reduce \"%s\": NULL buffer", tag ? tag : "");
    int slot = free_slot(c);
    if (slot < 0) return no_slot(c, "iall_reduce", tag);
    uint64_t seq = wd_begin(c, "iall_reduce", tag, n * sizeof(float), 0);
    /* Starting it can do real work (Open MPI's libnbc runs the schedule's
     * first round in the call): traced, as the tests in progress are. */
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "iall_reduce", (int64_t)(n * sizeof(float)));
    int rc = c->be->iall_reduce(c->st, slot, buf, n, bop);
    wf_trace_end(span);
    if (rc != 0) {
        wf__comm_watchdog_end(c->wd, seq, 0);
        return comm_fail(c, "iall_reduce", tag);
    }
    c->reqs[slot] = (comm_req){.used = 1, .buf = buf, .n = n, .avg = op == WF_COMM_AVG, .seq = seq,
                               .wait_name = "wait iall_reduce"};
    c->n_out++;
    req->slot = slot;
    req->seq = seq;
    return WF_OK;
}

wf_status wf_comm_ireduce_scatter(wf_comm *c, const float *send, float *recv, const size_t *counts,
                                  wf_comm_op op, const char *tag, wf_comm_request *req) {
    wf_comm_bop bop;
    size_t total;
    if (!req)
        return wf_error(WF_ERR_INVALID, "dist: ireduce_scatter \"%s\": NULL request", tag ? tag : "");
    req->slot = -1;
    req->seq = 0;
    if (op != WF_COMM_SUM && op != WF_COMM_AVG)
        return wf_error(WF_ERR_INVALID, "dist: ireduce_scatter \"%s\": op %s is not sum or avg",
                        tag ? tag : "", op_name(op));
    WF_TRY(backend_op(op, WF_DT_F32, "ireduce_scatter", tag, &bop));
    WF_TRY(check_counts(c, counts, "ireduce_scatter", tag, &total));
    size_t mine = counts[c->rank];
    if ((total && !send) || (mine && !recv))
        return wf_error(WF_ERR_INVALID, "dist: ireduce_scatter \"%s\": NULL buffer", tag ? tag : "");
    if (mine && send && recv < send + total && send < recv + mine)
        return wf_error(WF_ERR_INVALID,
                        "dist: ireduce_scatter \"%s\": the receive buffer overlaps the send buffer",
                        tag ? tag : "");
    int slot = free_slot(c);
    if (slot < 0) return no_slot(c, "ireduce_scatter", tag);
    uint64_t seq = wd_begin(c, "ireduce_scatter", tag, total * sizeof(float), 0);
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "ireduce_scatter", (int64_t)(total * sizeof(float)));
    int rc = c->be->ireduce_scatter(c->st, slot, send, recv, counts, bop);
    wf_trace_end(span);
    if (rc != 0) {
        wf__comm_watchdog_end(c->wd, seq, 0);
        return comm_fail(c, "ireduce_scatter", tag);
    }
    c->reqs[slot] = (comm_req){.used = 1, .buf = recv, .n = mine, .avg = op == WF_COMM_AVG, .seq = seq,
                               .wait_name = "wait ireduce_scatter"};
    c->n_out++;
    req->slot = slot;
    req->seq = seq;
    return WF_OK;
}

wf_status wf_comm_iall_gather(wf_comm *c, float *buf, const size_t *counts, const char *tag,
                              wf_comm_request *req) {
    size_t total;
    if (!req) return wf_error(WF_ERR_INVALID, "dist: iall_gather \"%s\": NULL request", tag ? tag : "");
    req->slot = -1;
    req->seq = 0;
    WF_TRY(check_counts(c, counts, "iall_gather", tag, &total));
    if (total && !buf) return wf_error(WF_ERR_INVALID, "dist: iall_gather \"%s\": NULL buffer", tag ? tag : "");
    int slot = free_slot(c);
    if (slot < 0) return no_slot(c, "iall_gather", tag);
    uint64_t seq = wd_begin(c, "iall_gather", tag, total * sizeof(float), 0);
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_COMM, "iall_gather", (int64_t)(total * sizeof(float)));
    int rc = c->be->iall_gather(c->st, slot, buf, counts);
    wf_trace_end(span);
    if (rc != 0) {
        wf__comm_watchdog_end(c->wd, seq, 0);
        return comm_fail(c, "iall_gather", tag);
    }
    c->reqs[slot] = (comm_req){.used = 1, .buf = buf, .n = total, .avg = 0, .seq = seq,
                               .wait_name = "wait iall_gather"};
    c->n_out++;
    req->slot = slot;
    req->seq = seq;
    return WF_OK;
}

wf_status wf_comm_test(wf_comm *c, wf_comm_request *req, int *done) {
    WF_TRY(check_req(c, req, "test"));
    *done = 1;
    if (req->slot < 0) return WF_OK;
    comm_req *q = &c->reqs[req->slot];
    if (!q->done) {
        int d = 0;
        int rc = c->be->test(c->st, req->slot, &d);
        if (rc != 0 || d) req_finish(c, req->slot, rc == 0);
        if (rc != 0) {
            req_release(c, req);
            return comm_fail(c, "test", "");
        }
        if (!d) {
            *done = 0;
            return WF_OK;
        }
    }
    return req_release(c, req) ? WF_OK : comm_fail(c, "test", "");
}

wf_status wf_comm_wait(wf_comm *c, wf_comm_request *req) {
    WF_TRY(check_req(c, req, "wait"));
    if (req->slot < 0) return WF_OK;
    comm_req *q = &c->reqs[req->slot];
    if (!q->done) {
        /* The time blocked on a non-blocking collective: the part of it the
         * computation did not hide. */
        wf_trace_span span = wf_trace_begin(WF_TRACE_COMM, q->wait_name);
        wf__comm_watchdog_block(c->wd, req->seq);
        int rc = c->be->wait(c->st, req->slot);
        req_finish(c, req->slot, rc == 0);
        wf_trace_end(span);
    }
    return req_release(c, req) ? WF_OK : comm_fail(c, "wait", "");
}

wf_status wf_comm_progress(wf_comm *c) {
    if (c->n_out == 0) return WF_OK;
    /* The time MPI spends moving the requests forward inside these tests
     * is communication done on the caller's time (during DDP's backward). */
    wf_trace_span span = wf_trace_begin(WF_TRACE_COMM, "progress");
    wf_status s = WF_OK;
    for (int i = 0; i < c->max_reqs && c->n_out > 0; i++) {
        comm_req *q = &c->reqs[i];
        if (!q->used || q->done) continue;
        int d = 0;
        int rc = c->be->test(c->st, i, &d);
        if (rc != 0 || d) req_finish(c, i, rc == 0);
        if (rc != 0) {
            s = comm_fail(c, "progress", "");
            break;
        }
    }
    wf_trace_end(span);
    return s;
}

/* --- Sub-communicators and messages (ABI 4) ----------------------------- */

static wf_status unsupported(wf_comm *c, const char *what) {
    return wf_error(WF_ERR_UNSUPPORTED, "dist: the %s backend has no %s (rebuild it with `make`, or use an MPI backend)",
                    c->backend, what);
}

wf_status wf_comm_split(wf_comm *c, int color, int key, const char *axis, wf_comm **out) {
    *out = NULL;
    if (color < 0) return wf_error(WF_ERR_INVALID, "dist: split into axis %s: color %d < 0", axis ? axis : "", color);
    if (!axis || !*axis || strlen(axis) >= sizeof c->axis)
        return wf_error(WF_ERR_INVALID, "dist: split: the axis needs a name of 1 to %zu characters",
                        sizeof c->axis - 1);
    if (!c->be->split || !c->be->free_split) return unsupported(c, "sub-communicators");
    wf_comm *k = calloc(1, sizeof *k);
    if (!k) return wf_error(WF_ERR_NOMEM, "dist: out of memory for the %s communicator", axis);
    uint64_t seq = wd_begin(c, "split", axis, 0, 1);
    int rc = c->be->split(c->st, color, key, &k->st, &k->rank, &k->size);
    wf__comm_watchdog_end(c->wd, seq, rc == 0);
    if (rc != 0) {
        free(k);
        return comm_fail(c, "split", axis);
    }
    k->be = c->be;
    k->local_rank = c->local_rank;
    memcpy(k->backend, c->backend, sizeof k->backend);
    memcpy(k->version, c->version, sizeof k->version);
    k->wd = c->wd;
    k->max_reqs = c->max_reqs;
    k->stall_rank = -1;
    snprintf(k->axis, sizeof k->axis, "%s", axis);
    k->world_rank = c->world_rank;
    k->world_size = c->world_size;
    k->is_split = 1;
    *out = k;
    return WF_OK;
}

const char *wf_comm_axis(const wf_comm *c) { return c->axis; }

/* Starts a send or a receive of `bytes` bytes with rank `peer`. */
static wf_status p2p_start(wf_comm *c, int is_send, void *buf, size_t bytes, int peer, int msg_tag,
                           const char *tag, wf_comm_request *req) {
    const char *kind = is_send ? "send" : "recv";
    if (!req) return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": NULL request", kind, tag ? tag : "");
    req->slot = -1;
    req->seq = 0;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": peer %d is not another rank of this communicator (0..%d, this is %d)",
                        kind, tag ? tag : "", peer, c->size - 1, c->rank);
    if (msg_tag < 0 || msg_tag > WF_COMM_MAX_MSG_TAG)
        return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": message tag %d is outside 0..%d", kind, tag ? tag : "",
                        msg_tag, WF_COMM_MAX_MSG_TAG);
    if (bytes > WF_COMM_MAX_COUNT)
        return wf_error(WF_ERR_RANGE, "dist: %s \"%s\": %zu bytes is more than one message moves (%zu)", kind,
                        tag ? tag : "", bytes, WF_COMM_MAX_COUNT);
    if (bytes && !buf) return wf_error(WF_ERR_INVALID, "dist: %s \"%s\": NULL buffer", kind, tag ? tag : "");
    if (!c->be->isend || !c->be->irecv) return unsupported(c, "point-to-point messages");
    int slot = free_slot(c);
    if (slot < 0) return no_slot(c, kind, tag);
    char k[32];
    snprintf(k, sizeof k, "%s %s %d", kind, is_send ? "to" : "from", peer);
    uint64_t seq = wd_begin(c, k, tag, bytes, 0);
    int rc = is_send ? c->be->isend(c->st, slot, buf, bytes, peer, msg_tag)
                     : c->be->irecv(c->st, slot, buf, bytes, peer, msg_tag);
    if (rc != 0) {
        wf__comm_watchdog_end(c->wd, seq, 0);
        return comm_fail(c, kind, tag);
    }
    c->reqs[slot] = (comm_req){.used = 1, .buf = NULL, .n = 0, .avg = 0, .seq = seq,
                               .wait_name = is_send ? "wait send" : "wait recv"};
    c->n_out++;
    req->slot = slot;
    req->seq = seq;
    return WF_OK;
}

wf_status wf_comm_isend(wf_comm *c, const void *buf, size_t bytes, int peer, int msg_tag, const char *tag,
                        wf_comm_request *req) {
    return p2p_start(c, 1, (void *)(uintptr_t)buf, bytes, peer, msg_tag, tag, req);
}

wf_status wf_comm_irecv(wf_comm *c, void *buf, size_t bytes, int peer, int msg_tag, const char *tag,
                        wf_comm_request *req) {
    return p2p_start(c, 0, buf, bytes, peer, msg_tag, tag, req);
}

wf_status wf_comm_send(wf_comm *c, const void *buf, size_t bytes, int peer, int msg_tag, const char *tag) {
    wf_comm_request r;
    WF_TRY(wf_comm_isend(c, buf, bytes, peer, msg_tag, tag, &r));
    return wf_comm_wait(c, &r);
}

wf_status wf_comm_recv(wf_comm *c, void *buf, size_t bytes, int peer, int msg_tag, const char *tag) {
    wf_comm_request r;
    WF_TRY(wf_comm_irecv(c, buf, bytes, peer, msg_tag, tag, &r));
    return wf_comm_wait(c, &r);
}
