/* The probes of `weft doctor` (weft/doctor.h, docs/cluster.md "weft
 * doctor"): the facts of a rank (host, build, binary hash, the MPI, BLAS
 * and CUDA libraries loaded), the timed probes (sgemm, memcpy, a file in
 * the run directory), the shared-directory check, the run of them all
 * with the ranks' collectives, and the verdict over the gathered reports.
 * Printing is the command's (tools/cmd_doctor.c).
 *
 * Test hook (tests/py/test_doctor.py): WEFT_DOCTOR_SLOW=R:F makes rank R do
 * every timed probe's work F times while counting it once, a real
 * slowdown by a factor of about F (wf_doctor_slow_hook; the command passes
 * F as wf_doctor_options.repeat). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "weft/backend.h"
#include "weft/doctor.h"
#include "weft/fileio.h"
#include "weft/metrics.h"
#include "weft/rng.h"
#include "weft/thread.h"
#include "weft/weft.h"

/* Appends a message to the list in buf ("; " between), unless the list
 * is (nearly) full: the first problems are the ones kept. */
static void append_msg(char *buf, size_t cap, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
static void append_msg(char *buf, size_t cap, const char *fmt, va_list ap) {
    size_t len = strlen(buf);
    if (len + 4 >= cap) return;
    if (len) len += (size_t)snprintf(buf + len, cap - len, "; ");
    vsnprintf(buf + len, cap - len, fmt, ap);
}

static void add_error(wf_doctor_report *r, int probe, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_error(wf_doctor_report *r, int probe, const char *fmt, ...) {
    r->failed |= probe;
    va_list ap;
    va_start(ap, fmt);
    append_msg(r->error, sizeof r->error, fmt, ap);
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
void wf_doctor_loaded_library(const char *const *prefixes, char *out, size_t cap) {
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

void wf_doctor_describe_cuda(char *out, size_t cap) {
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

uint64_t wf_doctor_exe_hash(void) {
    wf_mmap m = {0};
    if (wf_mmap_open(&m, "/proc/self/exe") != WF_OK) {
        wf_error_clear();
        return 0;
    }
    uint64_t h = wf_hash64(m.data, m.size);
    wf_mmap_close(&m);
    return h;
}

void wf_doctor_facts(wf_doctor_report *r, wf_comm *c) {
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
    r->exe_hash = wf_doctor_exe_hash();
    snprintf(r->mpi, sizeof r->mpi, "%s: %s", wf_comm_backend(c), wf_comm_library_version(c));
    static const char *const mpi_libs[] = {"libmpi.so", "libmpich.so", NULL};
    wf_doctor_loaded_library(mpi_libs, r->mpi_file, sizeof r->mpi_file);
    if (!r->mpi_file[0]) snprintf(r->mpi_file, sizeof r->mpi_file, "%s", wf_comm_backend_path(c));
    snprintf(r->blas, sizeof r->blas, "%s, core %s", wf_kern_blas_config(), wf_kern_blas_core());
    static const char *const blas_libs[] = {"libopenblas", "libblas.so", NULL};
    wf_doctor_loaded_library(blas_libs, r->blas_file, sizeof r->blas_file);
    wf_doctor_describe_cuda(r->cuda, sizeof r->cuda);
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
void wf_doctor_probe_gemm(wf_doctor_report *r, int n, int repeat) {
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *out = malloc(nn * sizeof *out);
    if (!a || !b || !out) {
        add_error(r, WF_DOCTOR_GEMM, "sgemm: cannot allocate 3 matrices of %d x %d", n, n);
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
        for (int s = 0; s < repeat; s++) (void)wf_backend_matmul(cpu, &d);
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
            add_error(r, WF_DOCTOR_GEMM, "sgemm gives a wrong result: out[%d][%d] = %g, expected %g (BLAS %s)", i, j,
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
void wf_doctor_probe_mem(wf_doctor_report *r, int64_t mb, int repeat) {
    size_t bytes = (size_t)mb << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        add_error(r, WF_DOCTOR_MEM, "memory: cannot allocate 2 x %" PRId64 " MiB", mb);
    } else {
        memset(src, 0x5a, bytes);
        memset(dst, 0, bytes);
        double t[REPS];
        for (int k = 0; k < REPS; k++) {
            double t0 = wf_time_now();
            for (int s = 0; s < repeat; s++) {
                src[(size_t)s % bytes] = (char)k; /* not a copy of the same bytes twice */
                memcpy(dst, src, bytes);
            }
            t[k] = wf_time_now() - t0;
        }
        double sec = median(t, REPS);
        r->mem_gbps = sec > 0 ? 2.0 * (double)bytes / sec / 1e9 : 0;
        if (dst[bytes - 1] != 0x5a) add_error(r, WF_DOCTOR_MEM, "memory: a copy did not arrive");
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

/* A file of `mb` MiB in the run directory: written (`repeat` passes), fsynced,
 * dropped from the page cache, read back and compared, removed. */
void wf_doctor_probe_file(wf_doctor_report *r, const char *dir, int64_t mb, int repeat) {
    char path[WF_PATH_MAX];
    const size_t block = 1 << 20;
    unsigned char *buf = malloc(block), *back = malloc(block);
    int fd = -1, created = 0;
    if (wf_path_joinf(path, sizeof path, dir, "doctor-rank-%05d.tmp", r->rank) != WF_OK) {
        add_error(r, WF_DOCTOR_FILE, "disk: %s", wf_error_msg());
        wf_error_clear();
        goto done;
    }
    if (!buf || !back) {
        add_error(r, WF_DOCTOR_FILE, "disk: out of memory");
        goto done;
    }
    double t0 = wf_time_now();
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        add_error(r, WF_DOCTOR_FILE, "disk: cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    created = 1;
    for (int s = 0; s < repeat; s++) {
        if (lseek(fd, 0, SEEK_SET) != 0) {
            add_error(r, WF_DOCTOR_FILE, "disk: cannot seek in %s: %s", path, strerror(errno));
            goto done;
        }
        for (size_t b = 0; b < (size_t)mb; b++) {
            for (size_t i = 0; i < block; i++) buf[i] = pattern_byte(r->rank, b, i);
            if (write_all(fd, buf, block) != 0) {
                add_error(r, WF_DOCTOR_FILE, "disk: cannot write %s: %s", path, strerror(errno));
                goto done;
            }
        }
    }
    if (fsync(fd) != 0) {
        add_error(r, WF_DOCTOR_FILE, "disk: cannot fsync %s: %s", path, strerror(errno));
        goto done;
    }
    double tw = wf_time_now() - t0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the read-back then reads the disk */
    close(fd);
    fd = -1;
    r->write_mbps = tw > 0 ? (double)mb * 1.048576 / tw : 0;
    t0 = wf_time_now();
    for (int s = 0; s < repeat; s++) {
        fd = open(path, O_RDONLY);
        if (fd < 0) {
            add_error(r, WF_DOCTOR_FILE, "disk: cannot open %s to read it back: %s", path, strerror(errno));
            goto done;
        }
        for (size_t b = 0; b < (size_t)mb; b++) {
            size_t got = 0;
            while (got < block) {
                ssize_t n = read(fd, back + got, block - got);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    add_error(r, WF_DOCTOR_FILE, "disk: %s: %s after %zu bytes", path,
                              n < 0 ? strerror(errno) : "ends early", b * block + got);
                    goto done;
                }
                got += (size_t)n;
            }
            for (size_t i = 0; i < block; i++) {
                if (back[i] != pattern_byte(r->rank, b, i)) {
                    add_error(r, WF_DOCTOR_FILE, "disk: %s reads back other bytes than were written, at byte %zu",
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
    if (created && unlink(path) != 0 && !(r->failed & WF_DOCTOR_FILE))
        add_error(r, WF_DOCTOR_FILE, "disk: cannot remove %s: %s", path, strerror(errno));
    free(buf);
    free(back);
}

/* Whether every rank sees rank 0's run directory: rank 0 writes a file
 * with a token, every rank reads it. Collective. Returns non-OK only when
 * a collective failed. */
wf_status wf_doctor_probe_shared(wf_doctor_report *r, wf_comm *c, const char *dir) {
    char path[WF_PATH_MAX];
    if (wf_path_join(path, sizeof path, dir, "doctor-shared.tmp", NULL) != WF_OK) {
        add_error(r, WF_DOCTOR_SHARED, "disk: %s", wf_error_msg()); /* every rank: the same dir, the same answer */
        wf_error_clear();
        return WF_OK;
    }
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
            add_error(r, WF_DOCTOR_SHARED, "disk: cannot write %s: %s", path, wf_error_msg());
            wf_error_clear();
        }
    }
    WF_TRY(wf_comm_broadcast(c, &msg, sizeof msg, 0, "doctor shared token"));
    msg.token[sizeof msg.token - 1] = '\0';
    if (msg.written && r->rank != 0) {
        char *data = NULL;
        size_t len = 0;
        if (wf_file_read(path, &data, &len) != WF_OK) {
            add_error(r, WF_DOCTOR_SHARED,
                      "disk: the run directory is not shared with rank 0: rank 0 wrote doctor-shared.tmp into it, but "
                      "here %s; checkpoints need every rank to see the same run directory",
                      wf_error_msg());
            wf_error_clear();
        } else if (len != strlen(msg.token) || memcmp(data, msg.token, len) != 0) {
            add_error(r, WF_DOCTOR_SHARED,
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

/* ----------------------------------------------------------- the wf_doctor_verdict */

static void note(wf_doctor_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(wf_doctor_verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    append_msg(v->why, sizeof v->why, fmt, ap);
    va_end(ap);
}

/* The rate a probe measured (higher is faster). */
static double rate_of(const wf_doctor_report *r, int probe) {
    return probe == WF_DOCTOR_GEMM ? r->gemm_gflops : probe == WF_DOCTOR_MEM ? r->mem_gbps : r->write_mbps;
}

/* Each rank's failures, differences from rank 0, and slowness against the
 * median over ranks of each rate. */
static void judge(const wf_doctor_report *all, int world, double factor, wf_doctor_verdict *v) {
    static const struct {
        const char *name, *unit;
        int probe;
    } rates[] = {
        {"sgemm", "GFLOP/s", WF_DOCTOR_GEMM},
        {"memory", "GB/s", WF_DOCTOR_MEM},
        {"disk write", "MB/s", WF_DOCTOR_FILE},
    };
    double *vals = malloc((size_t)world * sizeof *vals);
    memset(v, 0, (size_t)world * sizeof *v);
    for (int i = 0; i < world; i++) {
        const wf_doctor_report *r = &all[i];
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

wf_status wf_doctor_judge(const wf_doctor_report *all, int world, double factor, wf_doctor_verdict **out) {
    *out = calloc((size_t)world, sizeof **out);
    if (!*out) return wf_error(WF_ERR_NOMEM, "out of memory for %d verdicts", world);
    judge(all, world, factor, *out);
    return WF_OK;
}

/* WEFT_DOCTOR_SLOW=R:F (test hook): the factor for this rank, 1 if unset or
 * another rank's. */
wf_status wf_doctor_slow_hook(int rank, int *factor) {
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


/* ------------------------------------------------------------- the run */

/* Every rank runs this; the collectives are the same on every rank
 * whatever its probes found. */
wf_status wf_doctor_run(wf_comm *c, const wf_doctor_options *o, wf_doctor_report **all) {
    *all = NULL;
    int world = wf_comm_size(c), rank = wf_comm_rank(c);
    wf_doctor_report me;
    memset(&me, 0, sizeof me);
    int repeat = o->repeat > 1 ? o->repeat : 1;
    me.slow_hook = repeat > 1 ? repeat : 0;
    wf_kern_set_threads(o->threads > 0 ? o->threads : wf_default_threads());
    wf_doctor_facts(&me, c);
    if (wf_mkdirs(o->run_dir) != WF_OK) {
        add_error(&me, WF_DOCTOR_FILE, "disk: %s", wf_error_msg());
        wf_error_clear();
    }

    /* one value: rank + 1 everywhere, summed */
    wf_status s = wf_comm_barrier(c, "doctor start");
    double one = rank + 1, t0 = wf_time_now();
    if (s == WF_OK) s = wf_comm_all_reduce_f64(c, &one, 1, WF_COMM_SUM, "doctor all-reduce");
    me.allreduce_ms = (wf_time_now() - t0) * 1e3;
    if (s == WF_OK && one != 0.5 * world * (world + 1.0))
        add_error(&me, WF_DOCTOR_COMM, "all-reduce: the sum of rank + 1 over %d ranks came back as %g, not %g",
                  world, one, 0.5 * world * (world + 1.0));
    t0 = wf_time_now();
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor barrier");
    me.barrier_ms = (wf_time_now() - t0) * 1e3;

    /* local probes, all ranks at once (as they compute in training) */
    if (s == WF_OK) wf_doctor_probe_gemm(&me, (int)o->gemm_size, repeat);
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor after sgemm");
    if (s == WF_OK) wf_doctor_probe_mem(&me, o->mem_mb, repeat);
    if (s == WF_OK) s = wf_comm_barrier(c, "doctor after memory");
    if (s == WF_OK && !(me.failed & WF_DOCTOR_FILE)) wf_doctor_probe_file(&me, o->run_dir, o->file_mb, repeat);
    if (s == WF_OK && world > 1) s = wf_doctor_probe_shared(&me, c, o->run_dir);

    wf_doctor_report *got = s == WF_OK ? calloc((size_t)world, sizeof *got) : NULL;
    if (s == WF_OK && !got) s = wf_error(WF_ERR_NOMEM, "out of memory for %d rank reports", world);
    if (s == WF_OK) s = wf_comm_all_gather_bytes(c, &me, got, sizeof me, "doctor reports");
    if (s != WF_OK) {
        free(got);
        return s;
    }
    *all = got;
    return WF_OK;
}
