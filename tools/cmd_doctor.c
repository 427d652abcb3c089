/* `weft doctor`: a health check of the machines a job runs on, before
 * committing days of compute to them (docs/cluster.md, "weft doctor").
 * Started like training, under mpirun, mpiexec or srun (or alone), every
 * rank reports its host, weft's version, build and binary, the MPI, BLAS
 * and CUDA libraries it loaded, then takes part in an all-reduce of one
 * value and a barrier, and times a short sgemm, a memory copy and a
 * write/fsync/read of a file in the run directory (whose sharing between
 * ranks it also checks). Rank 0 gathers the reports and prints one table,
 * naming the ranks that fail a probe, run another binary or libraries than
 * rank 0, or are slow: a rate below the median over ranks divided by
 * --slow-factor. Every rank exits 1 when any rank failed (also when one is
 * slow, with --fail-slow), else 0.
 *
 * It does not: test the network's bandwidth (`weft bench allreduce` does),
 * run on GPUs (it only describes the CUDA driver and devices when
 * libcuda.so.1 is present), or survive a rank that dies: the others' next
 * collective then times out (--timeout) and the watchdog ends them,
 * naming it.
 *
 * Test hook (tests/py/test_doctor.py): WEFT_DOCTOR_SLOW=R:F makes rank R do
 * every timed probe's work F times while counting it once, a real
 * slowdown by a factor of about F. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "commands.h"
#include "weft/dist.h"
#include "weft/backend.h"
#include "weft/metrics.h"
#include "weft/weft.h"

typedef struct {
    char *run_dir;
    double slow_factor, timeout;
    int fail_slow, json;
    int64_t gemm_size, mem_mb, file_mb, threads;
} doctor_opts;

static const wf_opt doctor_opt_table[] = {
    {"run-dir", NULL, WF_OPT_STR, offsetof(doctor_opts, run_dir), ".", WF_NO_RANGE,
     "folder whose filesystem is probed (the training job's run directory; created if missing): each rank "
     "writes, fsyncs, reads back and removes doctor-rank-NNNNN.tmp in it, and the ranks check that they see "
     "the same folder"},
    {"slow-factor", NULL, WF_OPT_FLOAT, offsetof(doctor_opts, slow_factor), "2", 0, 1e6,
     "a rank is slow when its sgemm, memory or disk-write rate is below the median over ranks divided by this "
     "factor; 0: never"},
    {"fail-slow", NULL, WF_OPT_BOOL, offsetof(doctor_opts, fail_slow), "false", WF_NO_RANGE,
     "slow ranks make the exit status 1, as failing ones do"},
    {"gemm-size", NULL, WF_OPT_INT, offsetof(doctor_opts, gemm_size), "512", 16, 8192,
     "sgemm probe: square matrices of this size"},
    {"mem-mb", NULL, WF_OPT_INT, offsetof(doctor_opts, mem_mb), "64", 1, 65536,
     "memory probe: MiB copied (memcpy, one thread) per repetition"},
    {"file-mb", NULL, WF_OPT_INT, offsetof(doctor_opts, file_mb), "16", 1, 65536,
     "disk probe: MiB written, fsynced and read back per rank"},
    {"threads", NULL, WF_OPT_INT, offsetof(doctor_opts, threads), "0", 0, 4096,
     "threads of the sgemm probe; 0: WEFT_THREADS or every CPU, as weft train"},
    {"timeout", NULL, WF_OPT_FLOAT, offsetof(doctor_opts, timeout), "120", 1, 86400,
     "seconds a collective may block before the watchdog ends the rank (status 3), naming it: a rank that "
     "hangs or died"},
    {"json", NULL, WF_OPT_BOOL, offsetof(doctor_opts, json), "false", WF_NO_RANGE,
     "rank 0 prints one JSON object instead of the table"},
};

static const wf_cmd_spec doctor_spec = {
    "doctor",
    "weft doctor [--run-dir DIR] [options]   (under mpirun -np N, mpiexec, srun, or alone)",
    "Checks the machines of a job before it trains: every rank reports its host, weft's version, build and "
    "binary hash, the MPI, BLAS and CUDA libraries it loaded; joins an all-reduce of one value and a barrier; "
    "times a short sgemm, a memory copy, and a write/fsync/read of a file in the run directory, and checks that "
    "all ranks see the same run directory. Rank 0 prints one table and names the ranks that fail a probe, run "
    "another weft binary or other libraries than rank 0, or are slow (a rate below the median over ranks "
    "divided by --slow-factor). Exit status: 0 when every rank passed, 1 when any failed (or was slow, with "
    "--fail-slow); a rank that hangs ends the job after --timeout seconds (status 3).",
    doctor_opt_table,
    sizeof doctor_opt_table / sizeof *doctor_opt_table,
    0,
    0,
    0,
};

/* What one rank found: fixed-size, gathered byte for byte to every rank. */
enum { PROBE_COMM = 1, PROBE_GEMM = 2, PROBE_MEM = 4, PROBE_FILE = 8, PROBE_SHARED = 16 };
typedef struct {
    int32_t rank, local_rank, cpus, threads, failed; /* failed: PROBE_* bits */
    int32_t slow_hook;                               /* the test hook's factor on this rank, or 0 */
    uint64_t exe_hash;                               /* XXH3 of /proc/self/exe; 0: unreadable */
    double allreduce_ms, barrier_ms, gemm_gflops, mem_gbps, write_mbps, read_mbps;
    char host[64];
    char build[192];
    char mpi[256];       /* backend: library version line */
    char mpi_file[256];  /* the MPI library file loaded, or the backend's */
    char blas[160];      /* OpenBLAS's build line, core */
    char blas_file[256];
    char cuda[256];
    char error[512];     /* what failed, first failure first */
} rank_report;

static void add_error(rank_report *r, int probe, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_error(rank_report *r, int probe, const char *fmt, ...) {
    r->failed |= probe;
    size_t len = strlen(r->error);
    if (len + 4 >= sizeof r->error) return;
    if (len) len += (size_t)snprintf(r->error + len, sizeof r->error - len, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error + len, sizeof r->error - len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------- the facts */

typedef struct {
    const char *const *prefixes; /* basename prefixes, in order of preference */
    char *out;
    size_t cap;
    int rank; /* index of the prefix found; lower is better */
} lib_search;

static int find_lib_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    lib_search *s = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name) return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    for (int i = 0; s->prefixes[i] && (s->rank < 0 || i < s->rank); i++) {
        if (strncmp(base, s->prefixes[i], strlen(s->prefixes[i])) == 0) {
            char real[PATH_MAX];
            snprintf(s->out, s->cap, "%s", realpath(name, real) ? real : name);
            s->rank = i;
            break;
        }
    }
    return 0;
}

/* The file of the loaded shared object whose name starts with one of
 * `prefixes` (the earliest prefix wins), resolved; "" when none is loaded. */
static void loaded_library(const char *const *prefixes, char *out, size_t cap) {
    lib_search s = {prefixes, out, cap, -1};
    out[0] = '\0';
    dl_iterate_phdr(find_lib_cb, &s);
}

/* The CUDA driver, when libcuda.so.1 is installed: its version and every
 * device's name and memory. Only described; weft does not train on GPUs
 * yet. Function types as in the driver API (cuda.h), which is not needed
 * to build. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_int_fn)(int *);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_device_name_fn)(char *, int, int);
typedef int (*cu_device_mem_fn)(size_t *, int);

static void describe_cuda(char *out, size_t cap) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(out, cap, "none (no libcuda.so.1)");
        return;
    }
    cu_init_fn init;
    cu_int_fn version, count;
    cu_device_get_fn get;
    cu_device_name_fn name;
    cu_device_mem_fn mem;
    /* object to function pointers, as POSIX allows */
    void *sym[6] = {dlsym(h, "cuInit"), dlsym(h, "cuDriverGetVersion"), dlsym(h, "cuDeviceGetCount"),
                    dlsym(h, "cuDeviceGet"), dlsym(h, "cuDeviceGetName"), dlsym(h, "cuDeviceTotalMem_v2")};
    memcpy(&init, &sym[0], sizeof init);
    memcpy(&version, &sym[1], sizeof version);
    memcpy(&count, &sym[2], sizeof count);
    memcpy(&get, &sym[3], sizeof get);
    memcpy(&name, &sym[4], sizeof name);
    memcpy(&mem, &sym[5], sizeof mem);
    if (!init || !version || !count || !get || !name || !mem) {
        snprintf(out, cap, "libcuda.so.1 lacks the driver API's functions");
        return; /* the driver stays loaded: unloading it is not safe */
    }
    int v = 0, n = 0, rc = init(0);
    if (rc != 0) {
        snprintf(out, cap, "driver present, cuInit failed (CUresult %d: no usable device)", rc);
        return;
    }
    version(&v);
    if (count(&n) != 0) n = 0;
    size_t len = (size_t)snprintf(out, cap, "driver %d.%d, %d device%s", v / 1000, v % 1000 / 10, n,
                                  n == 1 ? "" : "s");
    for (int i = 0; i < n && len < cap; i++) {
        int dev = 0;
        char dname[128] = "?";
        size_t bytes = 0;
        if (get(&dev, i) == 0) {
            name(dname, (int)sizeof dname, dev);
            mem(&bytes, dev);
        }
        len += (size_t)snprintf(out + len, cap - len, "%s%s (%.0f GiB)", i ? ", " : ": ", dname,
                                (double)bytes / (1 << 30));
    }
}

static uint64_t exe_hash(void) {
    wf_mmap m = {0};
    if (wf_mmap_open(&m, "/proc/self/exe") != WF_OK) {
        wf_error_clear();
        return 0;
    }
    uint64_t h = wf_hash64(m.data, m.size);
    wf_mmap_close(&m);
    return h;
}

static void gather_facts(rank_report *r, wf_comm *c) {
    r->rank = wf_comm_rank(c);
    r->local_rank = wf_comm_local_rank(c);
    cpu_set_t set;
    r->cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    r->threads = wf_kern_threads();
    struct utsname u;
    snprintf(r->host, sizeof r->host, "%.63s", uname(&u) == 0 ? u.nodename : "?");
    char build[160];
    wf_build_describe(build, sizeof build);
    snprintf(r->build, sizeof r->build, "%s, %s", WF_VERSION, build);
    r->exe_hash = exe_hash();
    snprintf(r->mpi, sizeof r->mpi, "%s: %s", wf_comm_backend(c), wf_comm_library_version(c));
    static const char *const mpi_libs[] = {"libmpi.so", "libmpich.so", NULL};
    loaded_library(mpi_libs, r->mpi_file, sizeof r->mpi_file);
    if (!r->mpi_file[0]) snprintf(r->mpi_file, sizeof r->mpi_file, "%s", wf_comm_backend_path(c));
    snprintf(r->blas, sizeof r->blas, "%s, core %s", wf_kern_blas_config(), wf_kern_blas_core());
    static const char *const blas_libs[] = {"libopenblas", "libblas.so", NULL};
    loaded_library(blas_libs, r->blas_file, sizeof r->blas_file);
    describe_cuda(r->cuda, sizeof r->cuda);
}

/* ------------------------------------------------------------ the probes */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define REPS 5

/* Square sgemm through the model's kernel (cblas_sgemm), the median of
 * REPS timings, and 16 of its outputs checked against sums in double. */
static void probe_gemm(rank_report *r, int n, int slow) {
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *out = malloc(nn * sizeof *out);
    if (!a || !b || !out) {
        add_error(r, PROBE_GEMM, "sgemm: cannot allocate 3 matrices of %d x %d", n, n);
        goto done;
    }
    wf_rng g = wf_rng_make(1234, (uint64_t)r->rank);
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((double)(wf_rng_u64(&g) >> 40) / (double)(1 << 24) - 0.5);
        b[i] = (float)((double)(wf_rng_u64(&g) >> 40) / (double)(1 << 24) - 0.5);
    }
    /* out = a @ b^T on the cpu backend: the model's linear layers' sgemm */
    wf_matmul_desc d = {.m = n, .n = n, .k = n, .trans_b = 1, .a = wf_f32(a), .b = wf_f32(b), .c = wf_f32(out),
                        .lda = n, .ldb = n, .ldc = n, .alpha = 1.0f};
    wf_backend *cpu = wf_backend_cpu();
    (void)wf_backend_matmul(cpu, &d); /* warm-up: threads and pages; cpu's matmul cannot fail */
    double t[REPS];
    for (int k = 0; k < REPS; k++) {
        double t0 = wf_time_now();
        for (int s = 0; s < slow; s++) (void)wf_backend_matmul(cpu, &d);
        t[k] = wf_time_now() - t0;
    }
    double sec = median(t, REPS);
    r->gemm_gflops = sec > 0 ? 2.0 * n * (double)n * n / sec / 1e9 : 0;
    for (int k = 0; k < 16; k++) {
        int i = (int)(wf_rng_u64(&g) % (uint64_t)n), j = (int)(wf_rng_u64(&g) % (uint64_t)n);
        double ref = 0, mag = 0;
        for (int p = 0; p < n; p++) {
            ref += (double)a[(size_t)i * n + p] * b[(size_t)j * n + p];
            mag += fabs((double)a[(size_t)i * n + p] * b[(size_t)j * n + p]);
        }
        double got = out[(size_t)i * n + j];
        if (!(fabs(got - ref) <= 1e-5 * mag + 1e-6)) {
            add_error(r, PROBE_GEMM, "sgemm gives a wrong result: out[%d][%d] = %g, expected %g (BLAS %s)", i, j,
                      got, ref, r->blas_file[0] ? r->blas_file : "?");
            break;
        }
    }
done:
    free(a);
    free(b);
    free(out);
}

/* memcpy of `mb` MiB on one thread: bytes read plus bytes written per
 * second, the median of REPS. */
static void probe_mem(rank_report *r, int64_t mb, int slow) {
    size_t bytes = (size_t)mb << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        add_error(r, PROBE_MEM, "memory: cannot allocate 2 x %" PRId64 " MiB", mb);
    } else {
        memset(src, 0x5a, bytes);
        memset(dst, 0, bytes);
        double t[REPS];
        for (int k = 0; k < REPS; k++) {
            double t0 = wf_time_now();
            for (int s = 0; s < slow; s++) {
                src[(size_t)s % bytes] = (char)k; /* not a copy of the same bytes twice */
                memcpy(dst, src, bytes);
            }
            t[k] = wf_time_now() - t0;
        }
        double sec = median(t, REPS);
        r->mem_gbps = sec > 0 ? 2.0 * (double)bytes / sec / 1e9 : 0;
        if (dst[bytes - 1] != 0x5a) add_error(r, PROBE_MEM, "memory: a copy did not arrive");
    }
    free(src);
    free(dst);
}

static unsigned char pattern_byte(int rank, size_t block, size_t i) {
    return (unsigned char)((size_t)rank * 131u + block * 7u + i * 13u + (i >> 8));
}

static int write_all(int fd, const unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* A file of `mb` MiB in the run directory: written (`slow` passes), fsynced,
 * dropped from the page cache, read back and compared, removed. */
static void probe_file(rank_report *r, const char *dir, int64_t mb, int slow) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/doctor-rank-%05d.tmp", dir, r->rank);
    const size_t block = 1 << 20;
    unsigned char *buf = malloc(block), *back = malloc(block);
    int fd = -1, created = 0;
    if (!buf || !back) {
        add_error(r, PROBE_FILE, "disk: out of memory");
        goto done;
    }
    double t0 = wf_time_now();
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        add_error(r, PROBE_FILE, "disk: cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    created = 1;
    for (int s = 0; s < slow; s++) {
        if (lseek(fd, 0, SEEK_SET) != 0) {
            add_error(r, PROBE_FILE, "disk: cannot seek in %s: %s", path, strerror(errno));
            goto done;
        }
        for (size_t b = 0; b < (size_t)mb; b++) {
            for (size_t i = 0; i < block; i++) buf[i] = pattern_byte(r->rank, b, i);
            if (write_all(fd, buf, block) != 0) {
                add_error(r, PROBE_FILE, "disk: cannot write %s: %s", path, strerror(errno));
                goto done;
            }
        }
    }
    if (fsync(fd) != 0) {
        add_error(r, PROBE_FILE, "disk: cannot fsync %s: %s", path, strerror(errno));
        goto done;
    }
    double tw = wf_time_now() - t0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the read-back then reads the disk */
    close(fd);
    fd = -1;
    r->write_mbps = tw > 0 ? (double)mb * 1.048576 / tw : 0;
    t0 = wf_time_now();
    for (int s = 0; s < slow; s++) {
        fd = open(path, O_RDONLY);
        if (fd < 0) {
            add_error(r, PROBE_FILE, "disk: cannot open %s to read it back: %s", path, strerror(errno));
            goto done;
        }
        for (size_t b = 0; b < (size_t)mb; b++) {
            size_t got = 0;
            while (got < block) {
                ssize_t n = read(fd, back + got, block - got);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    add_error(r, PROBE_FILE, "disk: %s: %s after %zu bytes", path,
                              n < 0 ? strerror(errno) : "ends early", b * block + got);
                    goto done;
                }
                got += (size_t)n;
            }
            for (size_t i = 0; i < block; i++) {
                if (back[i] != pattern_byte(r->rank, b, i)) {
                    add_error(r, PROBE_FILE, "disk: %s reads back other bytes than were written, at byte %zu",
                              path, b * block + i);
                    goto done;
                }
            }
        }
        close(fd);
        fd = -1;
    }
    double tr = wf_time_now() - t0;
    r->read_mbps = tr > 0 ? (double)mb * 1.048576 / tr : 0;
done:
    if (fd >= 0) close(fd);
    if (created && unlink(path) != 0 && !(r->failed & PROBE_FILE))
        add_error(r, PROBE_FILE, "disk: cannot remove %s: %s", path, strerror(errno));
    free(buf);
    free(back);
}

/* Whether every rank sees rank 0's run directory: rank 0 writes a file
 * with a token, every rank reads it. Collective. Returns non-OK only when
 * a collective failed. */
static wf_status probe_shared(rank_report *r, wf_comm *c, const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/doctor-shared.tmp", dir);
    struct {
        char token[40];
        int32_t written;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (r->rank == 0) {
        snprintf(msg.token, sizeof msg.token, "%016" PRIx64 "-%d", (uint64_t)(wf_time_now() * 1e9) ^ r->exe_hash,
                 (int)getpid());
        msg.written = wf_file_write_atomic(path, msg.token, strlen(msg.token)) == WF_OK;
        if (!msg.written) {
            add_error(r, PROBE_SHARED, "disk: cannot write %s: %s", path, wf_error_msg());
            wf_error_clear();
        }
    }
    WF_TRY(wf_comm_broadcast(c, &msg, sizeof msg, 0, "doctor shared token"));
    msg.token[sizeof msg.token - 1] = '\0';
    if (msg.written && r->rank != 0) {
        char *data = NULL;
        size_t len = 0;
        if (wf_file_read(path, &data, &len) != WF_OK) {
            add_error(r, PROBE_SHARED,
                      "disk: the run directory is not shared with rank 0: rank 0 wrote doctor-shared.tmp into it, but "
                      "here %s; checkpoints need every rank to see the same run directory",
                      wf_error_msg());
            wf_error_clear();
        } else if (len != strlen(msg.token) || memcmp(data, msg.token, len) != 0) {
            add_error(r, PROBE_SHARED,
                      "disk: the run directory is not shared with rank 0: %s holds another token than rank 0 wrote "
                      "into its doctor-shared.tmp (another folder of the same name?)",
                      path);
        }
        free(data);
    }
    WF_TRY(wf_comm_barrier(c, "doctor shared read"));
    if (r->rank == 0 && msg.written) unlink(path);
    return WF_OK;
}

/* ----------------------------------------------------------- the verdict */

typedef struct {
    int failing, slow;
    char why[768]; /* the rank's problems, for the table and the JSON */
} verdict;

static void note(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(verdict *v, const char *fmt, ...) {
    size_t len = strlen(v->why);
    if (len + 4 >= sizeof v->why) return;
    if (len) len += (size_t)snprintf(v->why + len, sizeof v->why - len, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why + len, sizeof v->why - len, fmt, ap);
    va_end(ap);
}

/* The rate a probe measured (higher is faster). */
static double rate_of(const rank_report *r, int probe) {
    return probe == PROBE_GEMM ? r->gemm_gflops : probe == PROBE_MEM ? r->mem_gbps : r->write_mbps;
}

/* Each rank's failures, differences from rank 0, and slowness against the
 * median over ranks of each rate. */
static void judge(const rank_report *all, int world, double factor, verdict *v) {
    static const struct {
        const char *name, *unit;
        int probe;
    } rates[] = {
        {"sgemm", "GFLOP/s", PROBE_GEMM},
        {"memory", "GB/s", PROBE_MEM},
        {"disk write", "MB/s", PROBE_FILE},
    };
    double *vals = malloc((size_t)world * sizeof *vals);
    memset(v, 0, (size_t)world * sizeof *v);
    for (int i = 0; i < world; i++) {
        const rank_report *r = &all[i];
        if (r->failed) {
            v[i].failing = 1;
            note(&v[i], "%s", r->error);
        }
        if (i == 0) continue;
        if (r->exe_hash != all[0].exe_hash) {
            v[i].failing = 1;
            note(&v[i], "runs another weft binary than rank 0 (%s, XXH3 %016" PRIx64 "; rank 0: %s, %016" PRIx64 ")",
                 r->build, r->exe_hash, all[0].build, all[0].exe_hash);
        }
        if (strcmp(r->mpi, all[0].mpi) != 0) {
            v[i].failing = 1;
            note(&v[i], "another MPI than rank 0 (%s; rank 0: %s)", r->mpi, all[0].mpi);
        }
        if (strcmp(r->blas, all[0].blas) != 0) {
            v[i].failing = 1;
            note(&v[i], "another BLAS than rank 0 (%s; rank 0: %s)", r->blas, all[0].blas);
        }
    }
    for (size_t k = 0; vals && factor > 0 && k < sizeof rates / sizeof *rates; k++) {
        int n = 0;
        for (int i = 0; i < world; i++)
            if (!(all[i].failed & rates[k].probe)) vals[n++] = rate_of(&all[i], rates[k].probe);
        if (n < 2) continue;
        double med = median(vals, n);
        for (int i = 0; i < world; i++) {
            double x = rate_of(&all[i], rates[k].probe);
            if (all[i].failed & rates[k].probe || !(x * factor < med)) continue;
            v[i].slow = 1;
            note(&v[i], "%s %.1fx below the median (%.3g vs %.3g %s)", rates[k].name, x > 0 ? med / x : INFINITY, x,
                 med, rates[k].unit);
        }
    }
    free(vals);
}

/* The ranks (numbers) whose string at `off` differs from rank 0's (for
 * the build, also the binary's hash), as "1, 3" or "". */
static void differing(const rank_report *all, int world, size_t off, size_t len, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 1; i < world && n + 16 < cap; i++)
        if (strncmp((const char *)&all[i] + off, (const char *)&all[0] + off, len) != 0 ||
            (off == offsetof(rank_report, build) && all[i].exe_hash != all[0].exe_hash))
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", i);
}

static void print_fact(const rank_report *all, int world, const char *label, size_t off, size_t len,
                       const char *file) {
    char diff[256];
    differing(all, world, off, len, diff, sizeof diff);
    printf("  %-6s %s", label, (const char *)&all[0] + off);
    if (file && *file) printf(" (%s)", file);
    if (world > 1) printf(diff[0] ? "  [rank 0's; differs on ranks %s]" : "  [every rank]", diff);
    printf("\n");
}

static int count_hosts(const rank_report *all, int world) {
    int n = 0;
    for (int i = 0; i < world; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(all[i].host, all[j].host) == 0;
        n += !seen;
    }
    return n;
}

static void list_ranks(const verdict *v, int world, int slow, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < world && n + 16 < cap; i++)
        if (slow ? (v[i].slow && !v[i].failing) : v[i].failing)
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", i);
}

static void print_table(const rank_report *all, const verdict *v, int world, const doctor_opts *o,
                        const char *backend) {
    int hosts = count_hosts(all, world);
    printf("weft doctor: %d rank%s on %d host%s (%s), run directory %s\n", world, world == 1 ? "" : "s", hosts,
           hosts == 1 ? "" : "s", backend, o->run_dir);
    char hash[40];
    snprintf(hash, sizeof hash, "binary XXH3 %016" PRIx64, all[0].exe_hash);
    print_fact(all, world, "weft", offsetof(rank_report, build), sizeof all->build, hash);
    print_fact(all, world, "MPI", offsetof(rank_report, mpi), sizeof all->mpi, all[0].mpi_file);
    print_fact(all, world, "BLAS", offsetof(rank_report, blas), sizeof all->blas, all[0].blas_file);
    print_fact(all, world, "CUDA", offsetof(rank_report, cuda), sizeof all->cuda, NULL);
    printf("  probes: all-reduce of one value and a barrier; sgemm %" PRId64 "^3; memcpy %" PRId64
           " MiB (1 thread); file of %" PRId64 " MiB written, fsynced, read back\n\n",
           o->gemm_size, o->mem_mb, o->file_mb);
    int hw = 4;
    for (int i = 0; i < world; i++) {
        int l = (int)strlen(all[i].host);
        if (l > hw) hw = l;
    }
    printf("%5s  %-*s %5s %5s %4s %12s %11s %11s %12s %11s %10s  %s\n", "rank", hw, "host", "local", "cpus",
           "thr", "all-red. ms", "barrier ms", "sgemm GF/s", "memcpy GB/s", "write MB/s", "read MB/s", "status");
    for (int i = 0; i < world; i++) {
        const rank_report *r = &all[i];
        const char *status = v[i].failing ? "FAIL: " : v[i].slow ? "SLOW: " : "ok";
        printf("%5d  %-*s %5d %5d %4d %12.3f %11.3f %11.1f %12.2f %11.1f %10.1f  %s%s\n", r->rank, hw, r->host,
               r->local_rank, r->cpus, r->threads, r->allreduce_ms, r->barrier_ms, r->gemm_gflops, r->mem_gbps,
               r->write_mbps, r->read_mbps, status, v[i].failing || v[i].slow ? v[i].why : "");
    }
    char failing[512], slow[512];
    list_ranks(v, world, 0, failing, sizeof failing);
    list_ranks(v, world, 1, slow, sizeof slow);
    printf("\n");
    if (failing[0]) printf("weft doctor: FAILING ranks: %s\n", failing);
    if (slow[0]) printf("weft doctor: SLOW ranks (a rate below the median / %g): %s\n", o->slow_factor, slow);
    if (!failing[0] && !slow[0]) printf("weft doctor: every rank passed\n");
    fflush(stdout);
}

static json_t *int_list(const verdict *v, int world, int slow) {
    json_t *a = json_array();
    for (int i = 0; i < world; i++)
        if (slow ? (v[i].slow && !v[i].failing) : v[i].failing) json_array_append_new(a, json_integer(i));
    return a;
}

static void print_json(const rank_report *all, const verdict *v, int world, const doctor_opts *o,
                       const char *backend, int ok) {
    json_t *root = json_object();
    json_object_set_new(root, "ok", json_boolean(ok));
    json_object_set_new(root, "world_size", json_integer(world));
    json_object_set_new(root, "hosts", json_integer(count_hosts(all, world)));
    json_object_set_new(root, "backend", json_string(backend));
    json_object_set_new(root, "run_dir", json_string(o->run_dir));
    json_object_set_new(root, "slow_factor", json_real(o->slow_factor));
    json_object_set_new(root, "failing", int_list(v, world, 0));
    json_object_set_new(root, "slow", int_list(v, world, 1));
    json_t *ranks = json_array();
    for (int i = 0; i < world; i++) {
        const rank_report *r = &all[i];
        json_t *x = json_object();
        char hash[24];
        snprintf(hash, sizeof hash, "%016" PRIx64, r->exe_hash);
        json_object_set_new(x, "rank", json_integer(r->rank));
        json_object_set_new(x, "host", json_string(r->host));
        json_object_set_new(x, "local_rank", json_integer(r->local_rank));
        json_object_set_new(x, "cpus", json_integer(r->cpus));
        json_object_set_new(x, "threads", json_integer(r->threads));
        json_object_set_new(x, "weft", json_string(r->build));
        json_object_set_new(x, "binary_xxh3", json_string(hash));
        json_object_set_new(x, "mpi", json_string(r->mpi));
        json_object_set_new(x, "mpi_library", json_string(r->mpi_file));
        json_object_set_new(x, "blas", json_string(r->blas));
        json_object_set_new(x, "blas_library", json_string(r->blas_file));
        json_object_set_new(x, "cuda", json_string(r->cuda));
        json_object_set_new(x, "allreduce_ms", json_real(r->allreduce_ms));
        json_object_set_new(x, "barrier_ms", json_real(r->barrier_ms));
        json_object_set_new(x, "sgemm_gflops", json_real(r->gemm_gflops));
        json_object_set_new(x, "memcpy_gbps", json_real(r->mem_gbps));
        json_object_set_new(x, "write_mbps", json_real(r->write_mbps));
        json_object_set_new(x, "read_mbps", json_real(r->read_mbps));
        json_object_set_new(x, "status", json_string(v[i].failing ? "fail" : v[i].slow ? "slow" : "ok"));
        json_object_set_new(x, "problems", json_string(v[i].why));
        json_object_set_new(x, "slow_hook", json_integer(r->slow_hook));
        json_array_append_new(ranks, x);
    }
    json_object_set_new(root, "ranks", ranks);
    char *s = json_dumps(root, JSON_INDENT(2));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(root);
    fflush(stdout);
}

/* ------------------------------------------------------------ the command */

/* WEFT_DOCTOR_SLOW=R:F (test hook): the factor for this rank, 1 if unset or
 * another rank's. */
static wf_status slow_hook(int rank, int *factor) {
    *factor = 1;
    const char *e = getenv("WEFT_DOCTOR_SLOW");
    if (!e || !*e) return WF_OK;
    char *end;
    long r = strtol(e, &end, 10);
    long f = *end == ':' ? strtol(end + 1, &end, 10) : 0;
    if (*end || r < 0 || f < 1 || f > 100000)
        return wf_error(WF_ERR_CONFIG, "WEFT_DOCTOR_SLOW=%s: expected RANK:FACTOR, e.g. 1:20 (a test hook)", e);
    if (r == rank) *factor = (int)f;
    return WF_OK;
}

/* Every rank runs this; the collectives are the same on every rank
 * whatever its probes found. A failed collective is fatal: the job ends. */
static int run_doctor(const doctor_opts *o, wf_comm *c) {
    int world = wf_comm_size(c), rank = wf_comm_rank(c);
    rank_report me;
    memset(&me, 0, sizeof me);
    int slow = 1;
    wf_status s = slow_hook(rank, &slow);
    if (s != WF_OK) return wf_tool_fail("doctor");
    me.slow_hook = slow > 1 ? slow : 0;
    wf_kern_set_threads(o->threads > 0 ? (int)o->threads : wf_default_threads());
    gather_facts(&me, c);
    if (wf_mkdirs(o->run_dir) != WF_OK) {
        add_error(&me, PROBE_FILE, "disk: %s", wf_error_msg());
        wf_error_clear();
    }

    /* one value: rank + 1 everywhere, summed */
    s = wf_comm_barrier(c, "doctor start");
    double one = rank + 1, t0 = wf_time_now();
    if (s == WF_OK) s = wf_comm_all_reduce_f64(c, &one, 1, WF_COMM_SUM, "doctor all-reduce");
    me.allreduce_ms = (wf_time_now() - t0) * 1e3;
    if (s == WF_OK && one != 0.5 * world * (world + 1.0))
        add_error(&me, PROBE_COMM, "all-reduce: the sum of rank + 1 over %d ranks came back as %g, not %g", world,
                  one, 0.5 * world * (world + 1.0));
    t0 = wf_time_now();
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor barrier");
    me.barrier_ms = (wf_time_now() - t0) * 1e3;

    /* local probes, all ranks at once (as they compute in training) */
    if (s == WF_OK) probe_gemm(&me, (int)o->gemm_size, slow);
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor after sgemm");
    if (s == WF_OK) probe_mem(&me, o->mem_mb, slow);
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor after memory");
    if (s == WF_OK && !(me.failed & PROBE_FILE)) probe_file(&me, o->run_dir, o->file_mb, slow);
    if (s == WF_OK && world > 1) s = probe_shared(&me, c, o->run_dir);

    rank_report *all = s == WF_OK ? calloc((size_t)world, sizeof *all) : NULL;
    if (s == WF_OK && !all) s = wf_error(WF_ERR_NOMEM, "out of memory for %d rank reports", world);
    if (s == WF_OK) s = wf_comm_all_gather_bytes(c, &me, all, sizeof me, "doctor reports");
    if (s != WF_OK) {
        free(all);
        wf_tool_fail("doctor");
        if (world > 1) {
            WF_ERROR("doctor: ending all %d ranks (a collective failed on rank %d)", world, rank);
            wf_comm_abort(c, 1);
        }
        return 1;
    }
    verdict *v = calloc((size_t)world, sizeof *v);
    if (!v) {
        free(all);
        wf_error(WF_ERR_NOMEM, "out of memory for %d verdicts", world);
        return wf_tool_fail("doctor");
    }
    judge(all, world, o->slow_factor, v);
    int bad = 0;
    for (int i = 0; i < world; i++) bad |= v[i].failing || (o->fail_slow && v[i].slow);
    if (rank == 0) {
        if (o->json) print_json(all, v, world, o, wf_comm_backend(c), !bad);
        else print_table(all, v, world, o, wf_comm_backend(c));
    }
    free(v);
    free(all);
    return bad ? 1 : 0;
}

static int doctor_main(void *opts, const wf_strs *pos) {
    (void)pos; /* the doctor takes none */
    const doctor_opts *o = opts;
    wf_comm_options co = wf_comm_options_default();
    co.timeout_first_s = co.timeout_s = o->timeout;
    co.timeout_first_name = co.timeout_name = "--timeout";
    wf_comm *c = NULL;
    if (wf_comm_create(&c, &co) != WF_OK) return wf_tool_fail("doctor");
    int rc = run_doctor(o, c);
    wf_comm_destroy(c);
    return rc;
}

int wf_cmd_doctor(int argc, char **argv) {
    doctor_opts o;
    return wf_tool_run(&doctor_spec, &o, sizeof o, argc, argv, doctor_main);
}
