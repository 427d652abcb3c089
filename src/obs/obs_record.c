/* The reproducibility record: run.json, written when a run starts, says
 * everything that could make two runs of the same config differ: weft's
 * version and source (git commit, dirty state, the diff itself in
 * git.diff), how it was built (compiler, flags), the libraries it runs on
 * (OpenBLAS's build and chosen kernels, PCRE2, jansson, zstd, zlib,
 * xxHash, glibc), the host, the threads, and the environment variables that
 * change numerics or speed (OMP_*, OPENBLAS_*, LD_PRELOAD, ...).
 * docs/formats/run-json.md lists every key.
 *
 * The build facts come from the Makefile (-DWF_BUILD_CC, -DWF_BUILD_CFLAGS,
 * -DWF_SOURCE_DIR on this file only). Git runs as a child process; its
 * absence, or a source tree that is not a checkout, leaves those keys null. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "weft/metrics.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <jansson.h>
#include <pcre2.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include "obs/obs_impl.h"
#include "weft/fileio.h"
#include "weft/backend.h"
#include "weft/thread.h"
#include "weft/weft.h"
#include "weft/rundir.h"

#ifndef WF_BUILD_CC
#define WF_BUILD_CC "unknown"
#endif
#ifndef WF_BUILD_CFLAGS
#define WF_BUILD_CFLAGS "unknown"
#endif

extern char **environ;

/* Runs argv (searched on PATH) with stdin and stderr on /dev/null and
 * returns its stdout (NUL-terminated, at most `max` bytes, *truncated set
 * when there was more), or NULL if it could not run or exited non-zero. */
static char *run_capture(char *const argv[], size_t max, size_t *len, int *truncated) {
    int fds[2];
    if (pipe(fds) != 0) return NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return NULL;
    }
    wf_buf b = {0};
    *truncated = 0;
    char chunk[65536];
    for (;;) {
        ssize_t got = read(fds[0], chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (b.len + (size_t)got > max) {
            *truncated = 1;
            got = (ssize_t)(max - b.len);
        }
        wf_buf_append(&b, chunk, (size_t)got);
        if (*truncated) break; /* closing the pipe ends the child with SIGPIPE */
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int ok = *truncated || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!ok || b.failed) {
        wf_buf_free(&b);
        return NULL;
    }
    if (!b.data) wf_buf_append(&b, "", 0);
    *len = b.len;
    return b.data;
}

/* The output of `git --no-optional-locks -C dir ARGS...`, trailing newline
 * removed. --no-optional-locks: `git status` must not take the index lock of
 * a checkout someone else is committing in. */
static char *git_out(const char *dir, const char *a1, const char *a2, const char *a3, size_t max, size_t *len,
                     int *truncated) {
    char *argv[] = {(char *)"git", (char *)"--no-optional-locks", (char *)"-C", (char *)dir, (char *)a1, (char *)a2, (char *)a3, NULL};
    size_t l = 0;
    int tr = 0;
    char *s = run_capture(argv, max, &l, &tr);
    if (!s) return NULL;
    if (len) *len = l;
    if (truncated) *truncated = tr;
    return s;
}

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
}

/* git facts of `src`; writes DIR/git.diff when tracked files changed. */
static json_t *git_record(const char *src, const char *dir) {
    if (!src || !src[0]) return json_null();
    char *commit = git_out(src, "rev-parse", "HEAD", NULL, 4096, NULL, NULL);
    if (!commit) return json_null();
    chomp(commit);
    json_t *g = json_object();
    json_object_set_new(g, "source_dir", json_string(src));
    json_object_set_new(g, "commit", json_string(commit));
    free(commit);
    char *branch = git_out(src, "rev-parse", "--abbrev-ref", "HEAD", 4096, NULL, NULL);
    if (branch) chomp(branch);
    json_object_set_new(g, "branch", branch ? json_string(branch) : json_null());
    free(branch);
    char *st = git_out(src, "status", "--porcelain", "--untracked-files=no", 1 << 20, NULL, NULL);
    json_t *changes = json_array();
    if (st) {
        char *save = NULL;
        for (char *line = strtok_r(st, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            if (json_array_size(changes) < 200) json_array_append_new(changes, json_string(line));
    }
    json_object_set_new(g, "dirty", st ? json_boolean(json_array_size(changes) > 0) : json_null());
    json_object_set_new(g, "changes", changes);
    free(st);
    json_object_set_new(g, "diff_file", json_null());
    if (json_array_size(changes) > 0) {
        size_t dlen = 0;
        int truncated = 0;
        char *diff = git_out(src, "diff", "HEAD", NULL, (size_t)64 << 20, &dlen, &truncated);
        if (diff) {
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)wf_hash64(diff, dlen));
            json_object_set_new(g, "diff_xxh3", json_string(hex));
            json_object_set_new(g, "diff_bytes", json_integer((json_int_t)dlen));
            json_object_set_new(g, "diff_truncated", json_boolean(truncated));
            char *path = malloc(WF_PATH_MAX);
            if (path && wf_rundir_path(path, WF_PATH_MAX, dir, WF_RUN_GIT_DIFF) == WF_OK &&
                wf_file_write_atomic(path, diff, dlen) == WF_OK)
                json_object_set_new(g, "diff_file", json_string(wf_rundir_name(WF_RUN_GIT_DIFF)));
            else
                wf_error_clear();
            free(path);
            free(diff);
        }
    }
    return g;
}

static json_t *str_or_null(const char *s) {
    return s ? json_string(s) : json_null();
}

void wf_build_describe(char *buf, size_t size) {
#if defined(__clang__)
    const char *id = "clang";
#elif defined(__GNUC__)
    const char *id = "gcc";
#else
    const char *id = "cc";
#endif
#ifdef __VERSION__
    const char *version = __VERSION__;
#else
    const char *version = "";
#endif
    /* From the flags, those that change speed or checks: -O, -g, -march,
     * -mtune, -ffast-math, -fsanitize. */
    char flags[256] = "";
    size_t fl = 0;
    const char *p = WF_BUILD_CFLAGS;
    while (*p) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        int keep = (n >= 2 && strncmp(p, "-O", 2) == 0) || (n == 2 && strncmp(p, "-g", 2) == 0) ||
                   strncmp(p, "-march=", 7) == 0 || strncmp(p, "-mtune=", 7) == 0 ||
                   (n == 11 && strncmp(p, "-ffast-math", 11) == 0) || strncmp(p, "-fsanitize=", 11) == 0;
        if (keep && n > 0 && fl + n + 2 < sizeof flags) {
            fl += (size_t)snprintf(flags + fl, sizeof flags - fl, "%s%.*s", fl ? " " : "", (int)n, p);
        }
        p += n;
    }
#ifdef _OPENMP
    char omp[32];
    snprintf(omp, sizeof omp, "OpenMP %d", _OPENMP);
#else
    const char *omp = "no OpenMP";
#endif
    /* __VERSION__ is "12.2.0" for gcc, "Debian Clang 14.0.6" or the like for clang. */
    snprintf(buf, size, "%s%s%s, %s, %s", strstr(version, "lang") ? "" : id, strstr(version, "lang") ? "" : " ",
             version, fl ? flags : "no -O", omp);
}

static json_t *build_record(void) {
    json_t *b = json_object();
#if defined(__clang__)
    const char *id = "clang";
#elif defined(__GNUC__)
    const char *id = "gcc";
#else
    const char *id = "unknown";
#endif
#ifdef __VERSION__
    json_object_set_new(b, "compiler_version", json_string(__VERSION__));
#else
    json_object_set_new(b, "compiler_version", json_null());
#endif
    json_object_set_new(b, "compiler", json_string(id));
    json_object_set_new(b, "cc", json_string(WF_BUILD_CC));
    json_object_set_new(b, "cflags", json_string(WF_BUILD_CFLAGS));
#ifdef _OPENMP
    json_object_set_new(b, "openmp", json_integer(_OPENMP));
#else
    json_object_set_new(b, "openmp", json_null());
#endif
#ifdef NDEBUG
    json_object_set_new(b, "ndebug", json_true());
#else
    json_object_set_new(b, "ndebug", json_false());
#endif
    return b;
}

static json_t *library_record(void) {
    json_t *l = json_object();
    json_object_set_new(l, "openblas", str_or_null(openblas_get_config()));
    json_object_set_new(l, "openblas_core", json_string(wf_kern_blas_core()));
    char pv[64] = "";
    if (pcre2_config(PCRE2_CONFIG_VERSION, pv) > 0) json_object_set_new(l, "pcre2", json_string(pv));
    else json_object_set_new(l, "pcre2", json_null());
    json_object_set_new(l, "jansson", json_string(jansson_version_str()));
    json_object_set_new(l, "zstd", json_string(ZSTD_versionString()));
    json_object_set_new(l, "zlib", json_string(zlibVersion()));
    unsigned xv = XXH_versionNumber();
    char xs[32];
    snprintf(xs, sizeof xs, "%u.%u.%u", xv / 10000, xv / 100 % 100, xv % 100);
    json_object_set_new(l, "xxhash", json_string(xs));
    json_object_set_new(l, "glibc", json_string(gnu_get_libc_version()));
    return l;
}

static json_t *host_record(void) {
    json_t *h = json_object();
    struct utsname u;
    if (uname(&u) == 0) {
        json_object_set_new(h, "hostname", json_string(u.nodename));
        json_object_set_new(h, "os", json_string(u.sysname));
        json_object_set_new(h, "kernel", json_string(u.release));
        json_object_set_new(h, "kernel_build", json_string(u.version));
        json_object_set_new(h, "machine", json_string(u.machine));
    }
    char cpu[256];
    wf__obs_cpu_model(cpu, sizeof cpu);
    json_object_set_new(h, "cpu", json_string(cpu));
    json_object_set_new(h, "logical_cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    wf_host_mem hm;
    if (wf_host_mem_read(&hm) != WF_OK) wf_error_clear();
    json_object_set_new(h, "mem_total", hm.mem_total >= 0 ? json_integer(hm.mem_total) : json_null());
    json_object_set_new(h, "mem_available", hm.mem_available >= 0 ? json_integer(hm.mem_available) : json_null());
    return h;
}

/* Environment variables that change what a run computes or how fast. */
static int env_selected(const char *kv) {
    static const char *const prefixes[] = {"OMP_", "GOMP_", "KMP_", "OPENBLAS_", "GOTO_", "MKL_", "WEFT_",
                                           "NCCL_", "CUDA_VISIBLE_DEVICES=", "LD_PRELOAD=", "LD_LIBRARY_PATH=",
                                           "MALLOC_", "GLIBC_TUNABLES=", "OMPI_COMM_WORLD_SIZE=",
                                           "OMPI_COMM_WORLD_RANK=", "SLURM_JOB_ID=", "SLURM_PROCID="};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(kv, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

static json_t *env_record(void) {
    json_t *e = json_object();
    for (char **p = environ; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if (!eq || !env_selected(*p)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *p), *p);
        json_object_set_new(e, name, json_string(eq + 1));
    }
    return e;
}

wf_status wf_run_record_write(const char *dir, const wf_run_record *r) {
    json_t *root = json_object();
    if (!root) return wf_error(WF_ERR_NOMEM, "out of memory");
    json_object_set_new(root, "format", json_string("weft-run"));
    json_object_set_new(root, "version", json_integer(3));
    json_object_set_new(root, "weft_version", json_string(WF_VERSION));
    double now = wf__obs_unix_now();
    time_t secs = (time_t)now;
    struct tm tm;
    char iso[32] = "";
    if (gmtime_r(&secs, &tm)) strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(root, "started_at", json_string(iso));
    json_object_set_new(root, "unix_time", json_real(now));
    json_t *cmd = json_array();
    for (int i = 0; i < r->argc; i++) json_array_append_new(cmd, json_string(r->argv[i]));
    json_object_set_new(root, "command", cmd);
    char cwd[4096];
    json_object_set_new(root, "cwd", getcwd(cwd, sizeof cwd) ? json_string(cwd) : json_null());
    json_object_set_new(root, "pid", json_integer(getpid()));
    json_object_set_new(root, "config_toml", str_or_null(r->config_toml));
    json_object_set_new(root, "model_source", str_or_null(r->model_source && *r->model_source ? r->model_source : NULL));

    json_t *mfu = json_object();
    json_object_set_new(mfu, "formula", json_string("6*N_mm + 6*L*T*C FLOPs per token (docs/train.md, FLOPs per token)"));
    json_object_set_new(mfu, "flops_per_token", r->flops_per_token > 0 ? json_real(r->flops_per_token) : json_null());
    json_object_set_new(mfu, "n_params", r->n_params >= 0 ? json_integer(r->n_params) : json_null());
    if (r->peak) {
        char line[1400];
        wf_peak_describe(r->peak, line, sizeof line);
        json_object_set_new(mfu, "peak_tflops", json_real(r->peak->tflops));
        json_object_set_new(mfu, "peak_source", json_string(wf_peak_source_name(r->peak->source)));
        json_object_set_new(mfu, "peak_key", json_string(r->peak->key));
        json_object_set_new(mfu, "peak_cache", r->peak->cache_path[0] ? json_string(r->peak->cache_path) : json_null());
        json_object_set_new(mfu, "peak_measured_at",
                            r->peak->measured_at > 0 ? json_real(r->peak->measured_at) : json_null());
        json_object_set_new(mfu, "peak_description", json_string(line));
    } else {
        json_object_set_new(mfu, "peak_tflops", json_null());
        json_object_set_new(mfu, "peak_source", json_null());
    }
    json_object_set_new(root, "mfu", mfu);

    if (r->dist) {
        const wf_run_dist *d = r->dist;
        json_t *dj = json_object();
        json_object_set_new(dj, "world_size", json_integer(d->world_size));
        json_object_set_new(dj, "backend", str_or_null(d->backend));
        json_object_set_new(dj, "mode", str_or_null(d->mode));
        json_object_set_new(dj, "optimizer_state_bytes", json_integer(d->optim_bytes));
        json_object_set_new(dj, "optimizer_state_unsharded_bytes", json_integer(d->optim_unsharded_bytes));
        json_object_set_new(dj, "optimizer_state_saved_bytes",
                            json_integer(d->optim_unsharded_bytes > d->optim_bytes
                                             ? d->optim_unsharded_bytes - d->optim_bytes
                                             : 0));
        json_object_set_new(dj, "zero1_shard_floats", json_integer(d->zero1_shard_floats));
        json_object_set_new(root, "dist", dj);
    } else {
        json_object_set_new(root, "dist", json_null());
    }

    if (r->arena) {
        json_t *aj = json_object(), *blocks = json_object();
        for (int i = 0; i < r->arena->n && i < WF_RUN_ARENA_MAX; i++)
            json_object_set_new(blocks, r->arena->names[i], json_integer(r->arena->bytes[i]));
        json_object_set_new(aj, "blocks", blocks);
        json_object_set_new(aj, "in_use", json_integer(r->arena->in_use));
        json_object_set_new(aj, "peak", json_integer(r->arena->peak));
        json_object_set_new(aj, "reserved", json_integer(r->arena->reserved));
        json_object_set_new(root, "arena", aj);
    } else {
        json_object_set_new(root, "arena", json_null());
    }

#ifdef WF_SOURCE_DIR
    const char *src = r->source_dir ? r->source_dir : WF_SOURCE_DIR;
#else
    const char *src = r->source_dir;
#endif
    json_object_set_new(root, "git", git_record(src, dir));
    json_object_set_new(root, "build", build_record());
    json_object_set_new(root, "libraries", library_record());
    json_object_set_new(root, "host", host_record());
    json_t *th = json_object();
    json_object_set_new(th, "kernels", json_integer(wf_kern_threads()));
    json_object_set_new(th, "default", json_integer(wf_default_threads()));
    json_object_set_new(root, "threads", th);
    json_object_set_new(root, "env", env_record());

    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory writing run.json");
    char path[WF_PATH_MAX];
    wf_status s = wf_rundir_path(path, sizeof path, dir, WF_RUN_RECORD);
    if (s == WF_OK) {
        size_t tl = strlen(text);
        text[tl] = '\n'; /* json_dumps's NUL becomes the final newline */
        s = wf_file_write_atomic(path, text, tl + 1);
    }
    free(text);
    return s;
}
