/* The seam: opening backends by name, and the public calls of
 * include/weft/backend.h, each of which checks its arguments' dtypes
 * against what the backend declared and makes one call through the
 * backend's table (backend_impl.h). Also the host-memory calls that the
 * cpu and ref backends share. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend_impl.h"
#include "weft/fileio.h"
#include "weft/trace.h"

static const char *const dtype_names_[WF_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32"};
static const size_t dtype_sizes_[WF_DTYPE_COUNT] = {4, 2, 2, 4};

const char *wf_dtype_name(wf_dtype dt) {
    return dt >= 0 && dt < WF_DTYPE_COUNT ? dtype_names_[dt] : "?";
}

size_t wf_dtype_size(wf_dtype dt) { return dt >= 0 && dt < WF_DTYPE_COUNT ? dtype_sizes_[dt] : 0; }

/* ------------------------------------------------------------ registry */

#define BACKENDS_MAX_ 8
static const wf_backend_ops *planted_[BACKENDS_MAX_];
static int n_planted_;
static const char *names_[BACKENDS_MAX_ + 5];

/* Every entry of the table, for the check that a backend fills them all
 * (a backend built against this ABI but leaving one NULL is refused by
 * name rather than crashing at its first call). */
#define ENTRY_(f) {#f, offsetof(wf_backend_ops, f)}
static const struct {
    const char *name;
    size_t off;
} entries_[] = {
    ENTRY_(init), ENTRY_(fini), ENTRY_(last_error), ENTRY_(alloc),
    ENTRY_(free), ENTRY_(upload), ENTRY_(download), ENTRY_(copy),
    ENTRY_(fill), ENTRY_(sync), ENTRY_(mem_info), ENTRY_(mark),
    ENTRY_(mark_seconds), ENTRY_(matmul), ENTRY_(rmsnorm_fwd), ENTRY_(rmsnorm_bwd),
    ENTRY_(rope_table), ENTRY_(rope_fwd), ENTRY_(rope_bwd), ENTRY_(attention_scratch),
    ENTRY_(attention_fwd), ENTRY_(attention_bwd), ENTRY_(swiglu_fwd), ENTRY_(swiglu_bwd),
    ENTRY_(embedding_fwd), ENTRY_(embedding_bwd), ENTRY_(crossentropy_fwd), ENTRY_(crossentropy_bwd),
    ENTRY_(sumsq), ENTRY_(first_nonfinite), ENTRY_(loss_sum), ENTRY_(add),
    ENTRY_(axpby), ENTRY_(cast), ENTRY_(adamw),
};
#undef ENTRY_

/* The first entry `ops` leaves NULL, or NULL (init and fini may be NULL:
 * a backend without a state, as the host ones). */
static const char *missing_entry_(const wf_backend_ops *ops) {
    for (size_t i = 2; i < sizeof entries_ / sizeof entries_[0]; i++) {
        void *fn;
        memcpy(&fn, (const char *)ops + entries_[i].off, sizeof fn);
        if (!fn) return entries_[i].name;
    }
    return NULL;
}

wf_status wf__backend_register(const wf_backend_ops *ops) {
    if (ops->abi != WF_BACKEND_ABI)
        return wf_error(WF_ERR_INVALID, "backend %s: built for ABI %d, this weft has ABI %d: rebuild it",
                        ops->name, ops->abi, WF_BACKEND_ABI);
    if (missing_entry_(ops))
        return wf_error(WF_ERR_INVALID, "backend %s: its table has no %s: rebuild it", ops->name, missing_entry_(ops));
    if (n_planted_ == BACKENDS_MAX_)
        return wf_error(WF_ERR_INVALID, "backend %s: no room for another backend (%d)", ops->name,
                        BACKENDS_MAX_);
    planted_[n_planted_++] = ops;
    return WF_OK;
}

const char *const *wf_backend_names(void) {
    int n = 0;
    names_[n++] = "cpu";
    names_[n++] = "ref";
    names_[n++] = "cuda";
    names_[n++] = "cudaemu";
    for (int i = 0; i < n_planted_; i++) names_[n++] = planted_[i]->name;
    names_[n] = NULL;
    return names_;
}

/* The device backends are shared objects, libweft-<name>.so (built by
 * `make cuda` and `make cudaemu`, src/cuda/), opened with dlopen like the
 * MPI backends (src/comm/comm.c): from WEFT_BACKEND_LIB_DIR if set, else
 * beside the executable or up to two folders above it, or ../lib/weft.
 * Never closed. On failure *why says what was tried. */
static const wf_backend_ops *load_ops_(const char *name, char *why, size_t cap) {
    char file[64], path[PATH_MAX + 128], exe[PATH_MAX];
    snprintf(file, sizeof file, "libweft-%s.so", name);
    const char *dirs[6];
    char dirbuf[5][PATH_MAX + 16];
    int n_dirs = 0;
    const char *env = getenv("WEFT_BACKEND_LIB_DIR");
    if (env && *env) dirs[n_dirs++] = env;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!(env && *env) && len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *const rel[] = {"", "/..", "/../..", "/../lib/weft"};
        for (int i = 0; i < 4; i++) {
            snprintf(dirbuf[i], sizeof dirbuf[i], "%s%s", exe, rel[i]);
            dirs[n_dirs++] = dirbuf[i];
        }
    }
    why[0] = '\0';
    for (int i = 0; i < n_dirs; i++) {
        if (wf_path_join(path, sizeof path, dirs[i], file, NULL) != WF_OK) {
            wf_error_clear();
            continue;
        }
        size_t w = strlen(why);
        if (access(path, F_OK) != 0) {
            snprintf(why + w, cap - w, "\n  %s: no such file", path);
            continue;
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (!h) {
            snprintf(why + w, cap - w, "\n  %s: %s", path, dlerror());
            continue;
        }
        wf_backend_ops_fn fn;
        void *sym = dlsym(h, WF_BACKEND_SYMBOL);
        if (!sym) {
            snprintf(why + w, cap - w, "\n  %s: not a weft backend (no %s)", path, WF_BACKEND_SYMBOL);
            continue;
        }
        memcpy(&fn, &sym, sizeof fn); /* object to function pointer, as POSIX allows */
        const wf_backend_ops *ops = fn();
        if (!ops || ops->abi != WF_BACKEND_ABI) {
            snprintf(why + w, cap - w, "\n  %s: built for backend ABI %d, this weft has ABI %d: rebuild it", path,
                     ops ? ops->abi : -1, WF_BACKEND_ABI);
            continue;
        }
        if (missing_entry_(ops)) {
            snprintf(why + w, cap - w, "\n  %s: its table has no %s: rebuild it", path, missing_entry_(ops));
            continue;
        }
        return ops;
    }
    if (!why[0]) snprintf(why, cap, " (no folder to look in)");
    return NULL;
}

static const wf_backend_ops *find_ops_(const char *name) {
    if (strcmp(name, "cpu") == 0) return wf__backend_cpu_ops();
    if (strcmp(name, "ref") == 0) return wf__backend_ref_ops();
    for (int i = 0; i < n_planted_; i++)
        if (strcmp(name, planted_[i]->name) == 0) return planted_[i];
    return NULL;
}

wf_status wf_backend_open(wf_backend **out, const char *name) {
    *out = NULL;
    const wf_backend_ops *ops = name ? find_ops_(name) : NULL;
    if (!ops && name && (strcmp(name, "cuda") == 0 || strcmp(name, "cudaemu") == 0)) {
        char why[2048];
        ops = load_ops_(name, why, sizeof why);
        if (!ops)
            return wf_error(WF_ERR_NOTFOUND, "backend %s: cannot load libweft-%s.so (`make %s` builds it); tried:%s",
                            name, name, name, why);
    }
    if (!ops) {
        char known[256] = "";
        for (const char *const *n = wf_backend_names(); *n; n++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", n == wf_backend_names() ? "" : ", ",
                     *n);
        return wf_error(WF_ERR_NOTFOUND, "backend '%s' is not known; use one of: %s", name ? name : "(null)",
                        known);
    }
    wf_backend *be = calloc(1, sizeof *be);
    if (!be) return wf_error(WF_ERR_NOMEM, "backend %s: cannot allocate its header", name);
    be->ops = ops;
    if (ops->init && ops->init(&be->state) != 0) {
        wf_status s = wf_error(WF_ERR_UNSUPPORTED, "backend %s: cannot start: %s", name, ops->last_error(NULL));
        free(be);
        return s;
    }
    *out = be;
    return WF_OK;
}

void wf_backend_close(wf_backend *be) {
    if (!be || be->shared) return;
    if (be->ops->fini) be->ops->fini(be->state);
    free(be);
}

wf_backend *wf_backend_cpu(void) {
    static wf_backend cpu = {NULL, NULL, 1};
    if (!cpu.ops) cpu.ops = wf__backend_cpu_ops(); /* no state: init is NULL */
    return &cpu;
}

const char *wf_backend_name(const wf_backend *be) { return be->ops->name; }

/* ------------------------------------------------------------- devices */

const char *const wf_backend_device_names[] = {"cpu", "cuda", "auto", "cudaemu", NULL};

wf_status wf_backend_open_device(wf_backend **out, const char *device, char *note, size_t cap) {
    *out = NULL;
    if (note && cap) note[0] = '\0';
    if (!device || strcmp(device, "cpu") == 0) {
        *out = wf_backend_cpu();
        return WF_OK;
    }
    if (strcmp(device, "cuda") == 0 || strcmp(device, "cudaemu") == 0) return wf_backend_open(out, device);
    if (strcmp(device, "auto") == 0) {
        if (wf_backend_open(out, "cuda") == WF_OK) return WF_OK;
        if (note && cap) snprintf(note, cap, "device auto: cuda did not open (%s): computing on the cpu", wf_error_msg());
        wf_error_clear();
        *out = wf_backend_cpu();
        return WF_OK;
    }
    return wf_error(WF_ERR_CONFIG, "device '%s' is not known: use cpu, cuda or auto (or cudaemu, the CUDA emulator: a test instrument)", device);
}

int wf_backend_local_device(int n_devices, const char **from) {
    static const char *const vars[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
    if (from) *from = "";
    if (n_devices < 1) return 0;
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end || r < 0) continue; /* not a local rank: the next variable */
        if (from) *from = vars[i];
        return (int)(r % n_devices);
    }
    return 0;
}

/* ------------------------------------------------------ the host calls */

int wf__backend_host_alloc(void *state, size_t bytes, void **out) {
    *out = NULL;
    size_t size = (bytes + 4095) & ~(size_t)4095;
    if (posix_memalign(out, 4096, size ? size : 4096) != 0) {
        *out = NULL;
        return -1;
    }
    memset(*out, 0, size);
    return 0;
}

void wf__backend_host_free(void *state, void *p) { free(p); }

int wf__backend_host_copy(void *state, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

int wf__backend_host_fill(void *state, void *dst, int byte, size_t bytes) {
    if (bytes) memset(dst, byte, bytes);
    return 0;
}

int wf__backend_host_sync(void *state) { return 0; }

int wf__backend_host_mem_info(void *state, size_t *free_bytes, size_t *total_bytes) {
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES);
    *free_bytes = page > 0 && avail > 0 ? (size_t)avail * (size_t)page : 0;
    *total_bytes = page > 0 && all > 0 ? (size_t)all * (size_t)page : 0;
    return 0;
}

wf_backend_mark wf__backend_host_mark(void *state) { return (wf_backend_mark){wf_trace_now(), NULL}; }

double wf__backend_host_mark_seconds(void *state, wf_backend_mark a, wf_backend_mark b) {
    return (double)(b.ns - a.ns) * 1e-9;
}

/* --------------------------------------------------------------- memory */

static wf_status failed_(const wf_backend *be, const char *call) {
    return wf_error(WF_ERR_INTERNAL, "backend %s: %s failed: %s", be->ops->name, call,
                    be->ops->last_error ? be->ops->last_error(be->state) : "(no message)");
}

#define CALL_(name, ...) (be->ops->name(be->state, __VA_ARGS__) == 0 ? WF_OK : failed_(be, #name))

wf_status wf_backend_alloc(wf_backend *be, size_t bytes, void **out) {
    if (be->ops->alloc(be->state, bytes, out) != 0)
        return wf_error(WF_ERR_NOMEM, "backend %s: cannot allocate a block of %zu bytes", be->ops->name, bytes);
    return WF_OK;
}

void wf_backend_free(wf_backend *be, void *p) {
    if (p) be->ops->free(be->state, p);
}

wf_status wf_backend_upload(wf_backend *be, void *dst, const void *src, size_t bytes) {
    return CALL_(upload, dst, src, bytes);
}

wf_status wf_backend_download(wf_backend *be, void *dst, const void *src, size_t bytes) {
    return CALL_(download, dst, src, bytes);
}

wf_status wf_backend_copy(wf_backend *be, void *dst, const void *src, size_t bytes) {
    return CALL_(copy, dst, src, bytes);
}

wf_status wf_backend_fill(wf_backend *be, void *dst, int byte, size_t bytes) {
    return CALL_(fill, dst, byte, bytes);
}

wf_status wf_backend_sync(wf_backend *be) { return be->ops->sync(be->state) == 0 ? WF_OK : failed_(be, "sync"); }

wf_status wf_backend_mem_info(wf_backend *be, size_t *free_bytes, size_t *total_bytes) {
    return CALL_(mem_info, free_bytes, total_bytes);
}

static void *arena_alloc_(void *ctx, size_t bytes) {
    wf_backend *be = ctx;
    void *p = NULL;
    return be->ops->alloc(be->state, bytes, &p) == 0 ? p : NULL;
}

static void arena_free_(void *ctx, void *p) {
    wf_backend *be = ctx;
    be->ops->free(be->state, p);
}

static void arena_zero_(void *ctx, void *p, size_t bytes) {
    wf_backend *be = ctx;
    be->ops->fill(be->state, p, 0, bytes);
}

wf_arena_mem wf_backend_arena_mem(wf_backend *be) {
    return (wf_arena_mem){arena_alloc_, arena_free_, arena_zero_, be};
}

wf_backend_mark wf_backend_mark_now(wf_backend *be) { return be->ops->mark(be->state); }

double wf_backend_mark_seconds(wf_backend *be, wf_backend_mark a, wf_backend_mark b) {
    return be->ops->mark_seconds(be->state, a, b);
}

/* ------------------------------------------------------------------ ops
 * Each call refuses a dtype the backend did not declare, naming the op
 * and the argument, then makes one call through the table. */

static wf_status refuse_(const wf_backend *be, const char *op, const char *arg, wf_dtype dt, int index) {
    return wf_error(WF_ERR_UNSUPPORTED,
                    "backend %s: %s: argument %s has dtype %s, which %s (implemented: %s)", be->ops->name, op,
                    arg, wf_dtype_name(dt), index ? "an index argument cannot have" : "this backend does not implement",
                    index ? "i32" : "f32");
}

#define F_(op, arg)                                                                           \
    do {                                                                                      \
        if ((unsigned)(arg).dt >= WF_DTYPE_COUNT || (arg).dt == WF_DTYPE_I32 ||               \
            !(be->ops->float_dtypes >> (unsigned)(arg).dt & 1u))                              \
            return refuse_(be, op, #arg, (arg).dt, 0);                                        \
    } while (0)
#define I_(op, arg)                                                                           \
    do {                                                                                      \
        if ((arg).dt != WF_DTYPE_I32) return refuse_(be, op, #arg, (arg).dt, 1);              \
    } while (0)

wf_status wf_backend_matmul(wf_backend *be, const wf_matmul_desc *d) {
    F_("matmul", d->a);
    F_("matmul", d->b);
    F_("matmul", d->c);
    return be->ops->matmul(be->state, d) == 0 ? WF_OK : failed_(be, "matmul");
}

wf_status wf_backend_rmsnorm_fwd(wf_backend *be, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N,
                                 int C, float eps) {
    F_("rmsnorm_fwd", out);
    F_("rmsnorm_fwd", rstd);
    F_("rmsnorm_fwd", inp);
    F_("rmsnorm_fwd", weight);
    return CALL_(rmsnorm_fwd, out, rstd, inp, weight, N, C, eps);
}

wf_status wf_backend_rmsnorm_bwd(wf_backend *be, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp,
                                 wf_dptr weight, wf_dptr rstd, int N, int C) {
    F_("rmsnorm_bwd", dinp);
    F_("rmsnorm_bwd", dweight);
    F_("rmsnorm_bwd", dout);
    F_("rmsnorm_bwd", inp);
    F_("rmsnorm_bwd", weight);
    F_("rmsnorm_bwd", rstd);
    return CALL_(rmsnorm_bwd, dinp, dweight, dout, inp, weight, rstd, N, C);
}

wf_status wf_backend_rope_table(wf_backend *be, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta) {
    F_("rope_table", cos_tab);
    F_("rope_table", sin_tab);
    return CALL_(rope_table, cos_tab, sin_tab, T, HD, theta);
}

wf_status wf_backend_rope_fwd(wf_backend *be, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T,
                              int n_heads, int HD, int stride) {
    F_("rope_fwd", x);
    F_("rope_fwd", cos_tab);
    F_("rope_fwd", sin_tab);
    return CALL_(rope_fwd, x, cos_tab, sin_tab, B, T, n_heads, HD, stride);
}

wf_status wf_backend_rope_bwd(wf_backend *be, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T,
                              int n_heads, int HD, int stride) {
    F_("rope_bwd", dx);
    F_("rope_bwd", cos_tab);
    F_("rope_bwd", sin_tab);
    return CALL_(rope_bwd, dx, cos_tab, sin_tab, B, T, n_heads, HD, stride);
}

size_t wf_backend_attention_scratch(wf_backend *be, int T, int n_threads) {
    return be->ops->attention_scratch(be->state, T, n_threads);
}

wf_status wf_backend_attention_fwd(wf_backend *be, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH,
                                   int NKV, int HD, wf_dptr scratch, int n_threads) {
    F_("attention_fwd", out);
    F_("attention_fwd", lse);
    F_("attention_fwd", qkv);
    F_("attention_fwd", scratch);
    return CALL_(attention_fwd, out, lse, qkv, B, T, NH, NKV, HD, scratch, n_threads);
}

wf_status wf_backend_attention_bwd(wf_backend *be, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out,
                                   wf_dptr lse, int B, int T, int NH, int NKV, int HD, wf_dptr scratch,
                                   int n_threads) {
    F_("attention_bwd", dqkv);
    F_("attention_bwd", dout);
    F_("attention_bwd", qkv);
    F_("attention_bwd", out);
    F_("attention_bwd", lse);
    F_("attention_bwd", scratch);
    return CALL_(attention_bwd, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, scratch, n_threads);
}

wf_status wf_backend_swiglu_fwd(wf_backend *be, wf_dptr out, wf_dptr h13, int N, int H) {
    F_("swiglu_fwd", out);
    F_("swiglu_fwd", h13);
    return CALL_(swiglu_fwd, out, h13, N, H);
}

wf_status wf_backend_swiglu_bwd(wf_backend *be, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    F_("swiglu_bwd", dh13);
    F_("swiglu_bwd", dout);
    F_("swiglu_bwd", h13);
    return CALL_(swiglu_bwd, dh13, dout, h13, N, H);
}

wf_status wf_backend_embedding_fwd(wf_backend *be, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C) {
    F_("embedding_fwd", out);
    I_("embedding_fwd", tokens);
    F_("embedding_fwd", wte);
    return CALL_(embedding_fwd, out, tokens, wte, N, C);
}

wf_status wf_backend_embedding_bwd(wf_backend *be, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C) {
    F_("embedding_bwd", dwte);
    F_("embedding_bwd", dout);
    I_("embedding_bwd", tokens);
    return CALL_(embedding_bwd, dwte, dout, tokens, N, C);
}

wf_status wf_backend_crossentropy_fwd(wf_backend *be, wf_dptr losses, wf_dptr lse, wf_dptr logits,
                                      wf_dptr targets, int N, int V) {
    F_("crossentropy_fwd", losses);
    F_("crossentropy_fwd", lse);
    F_("crossentropy_fwd", logits);
    I_("crossentropy_fwd", targets);
    return CALL_(crossentropy_fwd, losses, lse, logits, targets, N, V);
}

wf_status wf_backend_crossentropy_bwd(wf_backend *be, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                                      float dloss) {
    F_("crossentropy_bwd", logits);
    F_("crossentropy_bwd", lse);
    I_("crossentropy_bwd", targets);
    return CALL_(crossentropy_bwd, logits, lse, targets, N, V, dloss);
}

wf_status wf_backend_sumsq(wf_backend *be, wf_dptr x, size_t n, double *out) {
    F_("sumsq", x);
    return CALL_(sumsq, x, n, out);
}

wf_status wf_backend_first_nonfinite(wf_backend *be, wf_dptr x, size_t n, size_t *index) {
    F_("first_nonfinite", x);
    return CALL_(first_nonfinite, x, n, index);
}

wf_status wf_backend_loss_sum(wf_backend *be, wf_dptr losses, wf_dptr targets, size_t n, double *sum,
                              size_t *n_valid) {
    F_("loss_sum", losses);
    I_("loss_sum", targets);
    return CALL_(loss_sum, losses, targets, n, sum, n_valid);
}

wf_status wf_backend_add(wf_backend *be, wf_dptr y, wf_dptr a, wf_dptr b, size_t n) {
    F_("add", y);
    F_("add", a);
    F_("add", b);
    return CALL_(add, y, a, b, n);
}

wf_status wf_backend_axpby(wf_backend *be, wf_dptr y, wf_dptr x, float a, float b, size_t n) {
    F_("axpby", y);
    F_("axpby", x);
    return CALL_(axpby, y, x, a, b, n);
}

wf_status wf_backend_cast(wf_backend *be, wf_dptr dst, wf_dptr src, size_t n) {
    F_("cast", dst);
    F_("cast", src);
    return CALL_(cast, dst, src, n);
}

wf_status wf_backend_adamw(wf_backend *be, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v,
                           const wf_adamw_span *ranges, int n_ranges, size_t total, wf_adamw_coef k) {
    F_("adamw", p);
    F_("adamw", g);
    F_("adamw", m);
    F_("adamw", v);
    return CALL_(adamw, p, g, m, v, ranges, n_ranges, total, k);
}
