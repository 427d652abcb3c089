/* weft: the backend seam. Everything the model, the loss, gradient clipping
 * and the optimizer compute goes through one backend: a table of memory
 * calls and ops (src/kernels/backend_impl.h has the table and its ABI
 * number), opened by name.
 *
 *   cpu   today's kernels (src/kernels/kern_*.c: OpenMP and OpenBLAS), the
 *         default. Its memory is host memory.
 *   ref   the kernels' `_ref` twins as a whole backend: serial loops, sums
 *         in double. The oracle every other backend is checked against
 *         (`weft ops-check`); slow. Host memory too.
 *   cuda  the CUDA kernels of src/cuda/ and cuBLASLt, a shared object
 *         (build/libweft-cuda.so, `make cuda`) loaded by name (docs/gpu.md).
 *   cudaemu  the same kernel sources run by a CUDA emulator on the CPU
 *         (build/libweft-cudaemu.so): a test instrument.
 * (auto comes later, behind the same table.)
 *
 * Memory. A backend hands out blocks (one per arena: wf_backend_arena_mem)
 * that only its ops and its copies touch; upload and download move bytes
 * between host memory and a block. On cpu and ref a block is host memory.
 *
 * Arguments. Every tensor argument is a wf_dptr: an address in a block and
 * the dtype of its elements, so that bf16 ops come without another table.
 * fp32 (and int32 token ids) everywhere; bf16 on cuda and cudaemu for
 * matmul, attention and cast. A dtype a backend does not have is refused
 * with WF_ERR_UNSUPPORTED naming the op and the argument. Shapes
 * are checked by the caller (the model validates once per step); ops do not
 * validate them. Layouts and meanings are those of include/weft/kernels.h.
 *
 * Every op returns WF_OK or an error with a message; the cpu and ref ops
 * cannot fail once their dtypes are accepted.
 *
 * Not thread-safe: one backend is used by one thread at a time (its ops
 * may use many threads inside).
 */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "weft/arena.h"
#include "weft/status.h"

/* ------------------------------------------------------------- dtypes */

typedef enum {
    WF_DTYPE_F32 = 0,
    WF_DTYPE_BF16,
    WF_DTYPE_F16,
    WF_DTYPE_I32,
    WF_DTYPE_COUNT
} wf_dtype;

/* "f32", "bf16", "f16", "i32"; "?" for anything else. */
const char *wf_dtype_name(wf_dtype dt);
/* Bytes of one element (0 for an unknown dtype). */
size_t wf_dtype_size(wf_dtype dt);

/* A tensor argument: where its elements are (in a backend block) and their
 * dtype. */
typedef struct {
    void *p;
    wf_dtype dt;
} wf_dptr;

static inline wf_dptr wf_f32(const float *p) { return (wf_dptr){(void *)(uintptr_t)p, WF_DTYPE_F32}; }
static inline wf_dptr wf_i32(const int32_t *p) { return (wf_dptr){(void *)(uintptr_t)p, WF_DTYPE_I32}; }

/* ------------------------------------------------------------ backends */

typedef struct wf_backend wf_backend;

/* Opens backend `name` ("cpu", "ref", "cuda", "cudaemu"); WF_ERR_NOTFOUND
 * naming the known ones otherwise. cuda and cudaemu are shared objects
 * libweft-<name>.so, looked for in WEFT_BACKEND_LIB_DIR if set, else beside
 * the executable, one or two folders above it, or ../lib/weft:
 * WF_ERR_NOTFOUND naming every path tried when none loads,
 * WF_ERR_UNSUPPORTED with the backend's words when it cannot start (no
 * driver, no cuBLASLt). Close with wf_backend_close. */
wf_status wf_backend_open(wf_backend **out, const char *name);
void wf_backend_close(wf_backend *be); /* accepts NULL; not the shared cpu one */
const char *wf_backend_name(const wf_backend *be);
/* The names wf_backend_open knows, NULL-terminated. */
const char *const *wf_backend_names(void);

/* The process's cpu backend, always open (never close it): for code that
 * works on host memory (the trainer's shards, sums over host buffers). */
wf_backend *wf_backend_cpu(void);

/* ------------------------------------------------------------- devices
 * What `train.device` and the commands' `--device` choose (docs/gpu.md,
 * "Running on GPUs: options, NCCL"). */

/* The devices a run may ask for: "cpu", "cuda", "auto", and "cudaemu" (the
 * CUDA kernels under the emulator: a test instrument, docs/gpu.md "The
 * engine on cudaemu"); NULL-terminated. */
extern const char *const wf_backend_device_names[];

/* Opens the compute backend of `device`: "cpu" is wf_backend_cpu() (closing
 * it is a no-op); "cuda" is wf_backend_open("cuda"), whose error says why
 * it cannot start ("cudaemu" likewise); "auto" is cuda when it opens, else cpu, and then writes
 * into note (cap bytes; may be NULL) why cuda was not taken, for the log
 * (note is "" otherwise). Any other name: WF_ERR_CONFIG naming them. */
wf_status wf_backend_open_device(wf_backend **out, const char *device, char *note, size_t cap);

/* The device index this process should use among n_devices (> 0): its local
 * rank, from the first of LOCAL_RANK (torchrun), SLURM_LOCALID (srun),
 * OMPI_COMM_WORLD_LOCAL_RANK (Open MPI) and MPI_LOCALRANKID (MPICH) that is
 * set, modulo n_devices; 0 when none is set. With one device visible per
 * rank (CUDA_VISIBLE_DEVICES set per task) that is device 0. The cuda
 * backend and the NCCL communicator follow this rule. *from names the
 * variable used ("" if none); from may be NULL. */
int wf_backend_local_device(int n_devices, const char **from);

/* ---------------------------------------------------------------- memory */

/* A block of `bytes` (zeroed), 4096-aligned; WF_ERR_NOMEM naming the size
 * when the backend has no more. */
wf_status wf_backend_alloc(wf_backend *be, size_t bytes, void **out);
void wf_backend_free(wf_backend *be, void *p); /* accepts NULL */
/* host -> block, block -> host, block -> block. */
wf_status wf_backend_upload(wf_backend *be, void *dst, const void *src, size_t bytes);
wf_status wf_backend_download(wf_backend *be, void *dst, const void *src, size_t bytes);
wf_status wf_backend_copy(wf_backend *be, void *dst, const void *src, size_t bytes);
/* Sets `bytes` bytes at dst to `byte`. */
wf_status wf_backend_fill(wf_backend *be, void *dst, int byte, size_t bytes);
/* Waits until every call made so far has finished (no-op on cpu, ref). */
wf_status wf_backend_sync(wf_backend *be);
/* Free and total bytes of the backend's memory (the host's on cpu, ref). */
wf_status wf_backend_mem_info(wf_backend *be, size_t *free_bytes, size_t *total_bytes);
/* Chunk calls for wf_arena_create_mem: an arena whose chunks are this
 * backend's blocks. */
wf_arena_mem wf_backend_arena_mem(wf_backend *be);

/* --------------------------------------------------------------- timing
 * A mark is a point in the backend's own order of work (an event on a
 * device, the clock on the CPU); the seconds between two marks are known
 * once both have passed. */
typedef struct {
    uint64_t ns;  /* cpu, ref: wf_trace_now() when the mark was made */
    void *event;  /* a device backend's handle; NULL on cpu, ref */
} wf_backend_mark;
wf_backend_mark wf_backend_mark_now(wf_backend *be);
double wf_backend_mark_seconds(wf_backend *be, wf_backend_mark a, wf_backend_mark b);

/* ------------------------------------------------------------------- ops
 * Names and meanings as in include/weft/kernels.h. */

/* C (m x n) = alpha * op(A) (m x k) @ op(B) (k x n), or C += that when
 * `accumulate`; row-major, op(X) = X^T when trans_x. lda, ldb, ldc are the
 * row strides of A, B, C as stored; `batch` products (0 means 1), the k-th
 * at a + k * stride_a (and so for b, c), in elements. k = 0 gives zeros
 * (or leaves C when accumulating). */
typedef struct {
    int m, n, k;
    int trans_a, trans_b;
    wf_dptr a, b, c;
    int64_t lda, ldb, ldc;
    int batch;
    int64_t stride_a, stride_b, stride_c;
    float alpha;
    int accumulate;
} wf_matmul_desc;
wf_status wf_backend_matmul(wf_backend *be, const wf_matmul_desc *d);

wf_status wf_backend_rmsnorm_fwd(wf_backend *be, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight,
                                 int N, int C, float eps);
wf_status wf_backend_rmsnorm_bwd(wf_backend *be, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp,
                                 wf_dptr weight, wf_dptr rstd, int N, int C);
/* The tables (T, HD/2) for positions [0, T). */
wf_status wf_backend_rope_table(wf_backend *be, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta);
wf_status wf_backend_rope_fwd(wf_backend *be, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T,
                              int n_heads, int HD, int stride);
wf_status wf_backend_rope_bwd(wf_backend *be, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T,
                              int n_heads, int HD, int stride);
/* Elements of scratch the attention ops need for sequences of up to T on
 * n_threads threads. */
size_t wf_backend_attention_scratch(wf_backend *be, int T, int n_threads);
wf_status wf_backend_attention_fwd(wf_backend *be, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH,
                                   int NKV, int HD, wf_dptr scratch, int n_threads);
wf_status wf_backend_attention_bwd(wf_backend *be, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out,
                                   wf_dptr lse, int B, int T, int NH, int NKV, int HD, wf_dptr scratch,
                                   int n_threads);
wf_status wf_backend_swiglu_fwd(wf_backend *be, wf_dptr out, wf_dptr h13, int N, int H);
wf_status wf_backend_swiglu_bwd(wf_backend *be, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H);
wf_status wf_backend_embedding_fwd(wf_backend *be, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C);
wf_status wf_backend_embedding_bwd(wf_backend *be, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C);
wf_status wf_backend_crossentropy_fwd(wf_backend *be, wf_dptr losses, wf_dptr lse, wf_dptr logits,
                                      wf_dptr targets, int N, int V);
wf_status wf_backend_crossentropy_bwd(wf_backend *be, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N,
                                      int V, float dloss);
/* *out = the sum of the squares of x's n elements, in double, over 256
 * fixed blocks added in order (the same bits on any thread count). */
wf_status wf_backend_sumsq(wf_backend *be, wf_dptr x, size_t n, double *out);
/* *index = the first i < n with x[i] not finite, or n. */
wf_status wf_backend_first_nonfinite(wf_backend *be, wf_dptr x, size_t n, size_t *index);
/* The sum in row order, in double, of losses[i] over the i < n with
 * targets[i] >= 0, and how many there are. */
wf_status wf_backend_loss_sum(wf_backend *be, wf_dptr losses, wf_dptr targets, size_t n, double *sum,
                              size_t *n_valid);
/* y[i] = a[i] + b[i] (y may be a or b). */
wf_status wf_backend_add(wf_backend *be, wf_dptr y, wf_dptr a, wf_dptr b, size_t n);
/* y[i] = a * x[i] + b * y[i] (x may be y); with b == 0, y[i] = a * x[i]
 * and y is not read. Muon's momentum, Newton-Schulz combinations and
 * update (src/optim/muon.c). */
wf_status wf_backend_axpby(wf_backend *be, wf_dptr y, wf_dptr x, float a, float b, size_t n);
/* dst[i] = src[i] converted to dst's dtype (the same dtype: a copy). */
wf_status wf_backend_cast(wf_backend *be, wf_dptr dst, wf_dptr src, size_t n);

/* AdamW over ranges of one flat buffer, as torch.optim.AdamW computes it
 * (src/optim/adamw.c): for each range r, elements [offset, offset + numel)
 * of p, g, m, v:
 *   g' = g * clip;  m = m * b1 + a1 * g';  v = v * b2 + a2 * g' * g'
 *   p = p * (decay if r.decay else 1) + step * m / (sqrt(v) / bc2_sqrt + eps)
 * Elementwise: the result does not depend on threads. */
typedef struct {
    size_t offset, numel;
    int decay;
} wf_adamw_span;
typedef struct {
    float decay, clip, b1, a1, b2, a2, bc2_sqrt, eps, step;
} wf_adamw_coef;
wf_status wf_backend_adamw(wf_backend *be, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v,
                           const wf_adamw_span *ranges, int n_ranges, size_t total, wf_adamw_coef k);

/* ------------------------------------------------------------- ops-check
 * Runs every op of `be` (or the one named `op`) on random inputs of several
 * shapes (odd sizes, T past the kernels' tiles, n_kv_heads < n_heads) and
 * the same op of `ref` on the same inputs, and compares each output by its
 * normalised error sum((x - r)^2) / sum(r^2) against a threshold per op and
 * dtype (docs/model.md, "Checking a backend"). With `perf`, also times the
 * op on a larger shape. */
typedef struct {
    char op[32];      /* "matmul", "rmsnorm_fwd", ... */
    char shape[96];   /* the case, e.g. "N=67 C=61" */
    char output[16];  /* which output: "out", "dweight", ... */
    wf_dtype dtype;
    double err;       /* normalised error */
    double threshold;
    int ok;
    double seconds;   /* perf: seconds of one call (0 without perf) */
    double rate;      /* perf: GFLOP/s or GB/s */
    const char *rate_unit; /* "GFLOP/s", "GB/s", or NULL */
} wf_ops_check_result;
/* fn is called once per result; WF_ERR_NOTFOUND for an unknown `op`
 * naming the ops. The status is WF_OK even when results fail: *n_failed
 * counts them. */
typedef void (*wf_ops_check_fn)(void *ctx, const wf_ops_check_result *r);
wf_status wf_backend_ops_check(wf_backend *be, wf_backend *ref, const char *op, int perf, uint64_t seed,
                               wf_ops_check_fn fn, void *ctx, int *n_failed);
/* The op names ops-check knows, NULL-terminated. */
const char *const *wf_backend_op_names(void);

/* ---------------------------------------------------- CPU thread control
 * (the cpu backend's: OpenMP and OpenBLAS; see include/weft/kernels.h) */

/* Threads the kernels use: the OpenMP maximum (OMP_NUM_THREADS or the core
 * count), or 1 without OpenMP. */
int wf_kern_threads(void);
/* Sets the threads of both the OpenMP loops and OpenBLAS. n >= 1. */
void wf_kern_set_threads(int n);
/* The kernel set OpenBLAS chose for this CPU ("SkylakeX", "Haswell", ...). */
const char *wf_kern_blas_core(void);
/* OpenBLAS's build line: version and options. */
const char *wf_kern_blas_config(void);
/* 1 and advice in msg when OpenBLAS chose kernels slower than the CPU
 * allows (include/weft/kernels.h has the story), else 0. */
int wf_kern_blas_check(char *msg, size_t size);
/* The OPENBLAS_CORETYPE that would give this CPU its fast kernels when
 * OpenBLAS chose SSE ones, else NULL. */
const char *wf_kern_blas_better_core(void);

#endif
