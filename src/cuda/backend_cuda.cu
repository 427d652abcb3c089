/* The backends `cuda` and `cudaemu`: one source, compiled two ways
 * (docs/gpu.md).
 *   - nvcc, static cudart: build/libweft-cuda.so. The matmul goes through
 *     cuBLASLt, opened with dlopen by soname (required: the backend does
 *     not start without it); cuDNN and NCCL are looked for too and
 *     whichever is missing is named (both optional: nothing here uses
 *     them yet). Opening it where there is no driver fails with the
 *     driver's own words (cudaGetDeviceCount's error string).
 *   - the host C++ compiler against the emulator (emu/cuda_emu.h):
 *     build/libweft-cudaemu.so, the kernels run as fibers on the CPU and
 *     the matmul is OpenBLAS's sgemm called with the same column-major
 *     arguments cuBLASLt gets, so the row-major to column-major
 *     translation is the one the GPU runs.
 * Both export WF_BACKEND_SYMBOL and link nothing of libweft
 * (src/kernels/backend_impl.h is the ABI). The seam opens them by name.
 *
 * Streams: everything runs in order on one stream of the backend's;
 * upload and download wait for their copy (the host buffer is the
 * caller's), sync waits for the stream. Marks are events from a ring of
 * WF_MARKS (a mark stays valid for that many later marks).
 *
 * Dtypes: f32 everywhere; bf16 (in and out, fp32 math) for matmul,
 * attention and cast. float_dtypes declares both, so the other ops refuse
 * bf16 themselves, naming the op and the argument. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.cuh"
#include "kernels/backend_impl.h"

#if WF_CUDA_EMU
#include <cblas.h>
#define BACKEND_NAME_ "cudaemu"
/* The emulator runs a block at a time: fewer, fuller blocks are faster,
 * and grid-stride loops then take several turns (which tests them). */
#define GRID_CAP_ 16
#else
#include <cublasLt.h>
#define BACKEND_NAME_ "cuda"
#define GRID_CAP_ 65535
#endif

#define WF_MARKS 256
#define SMALL_FLOATS_ 4096 /* the reductions' partial results */

/* ------------------------------------------------------------- cuBLASLt */

#if !WF_CUDA_EMU
/* The cuBLASLt calls, looked up in the library opened by soname. */
struct lt_api_ {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
};
#define LT_WORKSPACE_ ((size_t)32 << 20)
static cudaDataType_t cuda_type_(wf_dtype dt) { return dt == WF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }
#endif

struct cuda_state_ {
    cudaStream_t stream;
    char err[640];
    float *small;      /* device: SMALL_FLOATS_ floats */
    float *small_host; /* its host copy */
    float *ws;         /* device workspace (workspace_) */
    size_t ws_bytes;
    cudaEvent_t marks[WF_MARKS];
    int next_mark;
    /* cudaMalloc's pointer for each block aligned up to 4096 (rare) */
    void *aligned[64], *raw[64];
#if !WF_CUDA_EMU
    lt_api_ lt;
    void *lt_lib;
    cublasLtHandle_t lt_handle;
    void *lt_workspace;
    char libs[256]; /* which optional libraries were found */
#endif
};

static char init_err_[640];

static int fail_(cuda_state_ *st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st ? st->err : init_err_, sizeof init_err_, fmt, ap);
    va_end(ap);
    return -1;
}

/* The words of a CUDA error, with the emulator's explanation under emu. */
static const char *cuda_words_(cudaError_t e) {
#if WF_CUDA_EMU
    static char buf[1200];
    snprintf(buf, sizeof buf, "%s: %s", cudaGetErrorString(e), wf_emu_last_message());
    return buf;
#else
    return cudaGetErrorString(e);
#endif
}

#define CK_(st, call, what)                                                            \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) return fail_((st), "%s: %s", (what), cuda_words_(e_));  \
    } while (0)
/* After a launch: the launch's own error (bad configuration, or under emu
 * anything the emulator found). */
#define CK_LAUNCH_(st, what) CK_(st, cudaGetLastError(), what)

/* The backend links nothing of libweft, so not wf_dtype_name. */
static const char *wf_dtype_name_(wf_dtype dt) {
    return dt == WF_DTYPE_F32 ? "f32" : dt == WF_DTYPE_BF16 ? "bf16" : dt == WF_DTYPE_F16 ? "f16" : "i32";
}

static int grid_for_(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    return (int)(g < GRID_CAP_ ? g : GRID_CAP_);
}

#define F_(x) ((float *)(x).p)
#define CF_(x) ((const float *)(x).p)
#define I_(x) ((const int32_t *)(x).p)

/* bf16 kernels exist for matmul, attention and cast; the other ops refuse
 * a bf16 argument (the seam lets it through: the table declares bf16). */
static int f32_only_(cuda_state_ *st, const char *op, const wf_dptr *args, int n) {
    for (int i = 0; i < n; i++)
        if (args[i].dt != WF_DTYPE_F32 && args[i].dt != WF_DTYPE_I32)
            return fail_(st, "%s: argument %d has dtype %s: this op is f32 only (bf16: matmul, attention, cast)", op,
                         i + 1, wf_dtype_name_(args[i].dt));
    return 0;
}
#define F32_ONLY_(st, op, ...)                                                              \
    do {                                                                                    \
        const wf_dptr a_[] = {__VA_ARGS__};                                                 \
        if (f32_only_((st), (op), a_, (int)(sizeof a_ / sizeof a_[0]))) return -1;          \
    } while (0)

/* --------------------------------------------------------- init, fini */

static const char *cu_last_error(void *state) {
    cuda_state_ *st = (cuda_state_ *)state;
    return st ? st->err : init_err_;
}

#if !WF_CUDA_EMU
/* The library file to open: the environment's override (WEFT_CUBLASLT_LIB,
 * WEFT_CUDNN_LIB, WEFT_NCCL_LIB: a path, for an install outside the
 * loader's paths; the tests point them at nothing to hide a library), or
 * the soname. */
static const char *lib_file_(const char *env, const char *soname) {
    const char *e = getenv(env);
    return e && *e ? e : soname;
}

/* Opens cuBLASLt (required) and looks for cuDNN and NCCL (optional),
 * writing what it found into st->libs. */
static int open_libs_(cuda_state_ *st) {
    const char *lt_file = lib_file_("WEFT_CUBLASLT_LIB", "libcublasLt.so.13");
    st->lt_lib = dlopen(lt_file, RTLD_NOW | RTLD_LOCAL);
    if (!st->lt_lib)
        return fail_(NULL, "cuBLASLt is missing (%s), and the matmuls need it: install CUDA 13's cuBLAS or set "
                           "WEFT_CUBLASLT_LIB to its file", dlerror());
#define LT_SYM_(field, name)                                                                       \
    do {                                                                                           \
        void *s_ = dlsym(st->lt_lib, name);                                                        \
        if (!s_) return fail_(NULL, "cuBLASLt: %s has no %s", lt_file, name);                      \
        memcpy(&st->lt.field, &s_, sizeof s_);                                                     \
    } while (0)
    LT_SYM_(create, "cublasLtCreate");
    LT_SYM_(destroy, "cublasLtDestroy");
    LT_SYM_(desc_create, "cublasLtMatmulDescCreate");
    LT_SYM_(desc_destroy, "cublasLtMatmulDescDestroy");
    LT_SYM_(desc_set, "cublasLtMatmulDescSetAttribute");
    LT_SYM_(layout_create, "cublasLtMatrixLayoutCreate");
    LT_SYM_(layout_destroy, "cublasLtMatrixLayoutDestroy");
    LT_SYM_(layout_set, "cublasLtMatrixLayoutSetAttribute");
    LT_SYM_(pref_create, "cublasLtMatmulPreferenceCreate");
    LT_SYM_(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    LT_SYM_(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    LT_SYM_(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    LT_SYM_(matmul, "cublasLtMatmul");
#undef LT_SYM_
    static const char *const optional[][3] = {{"cuDNN", "WEFT_CUDNN_LIB", "libcudnn.so.9"},
                                              {"NCCL", "WEFT_NCCL_LIB", "libnccl.so.2"}};
    snprintf(st->libs, sizeof st->libs, "cuBLASLt found");
    for (auto &o : optional) {
        void *h = dlopen(lib_file_(o[1], o[2]), RTLD_NOW | RTLD_LOCAL);
        size_t len = strlen(st->libs);
        snprintf(st->libs + len, sizeof st->libs - len, ", %s %s", o[0], h ? "found" : "missing (optional)");
        if (h) dlclose(h);
    }
    return 0;
}
#endif

static void cu_fini(void *state);

/* The libraries first, then the driver: where both are missing, the
 * library is named (the driver's error names no library). */
static int cu_init(void **state) {
    *state = NULL;
    cuda_state_ *st = (cuda_state_ *)calloc(1, sizeof *st);
    if (!st) return fail_(NULL, "cannot allocate the backend's state");
    const char *libs = "";
#if !WF_CUDA_EMU
    if (open_libs_(st) != 0) {
        free(st);
        return -1;
    }
    libs = st->libs;
    if (getenv("WEFT_CUDA_VERBOSE")) fprintf(stderr, "weft: backend cuda: %s\n", libs);
#endif
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        fail_(NULL, "cudaGetDeviceCount: %s%s%s%s", e != cudaSuccess ? cuda_words_(e) : "no CUDA device",
              *libs ? " (" : "", libs, *libs ? ")" : "");
        free(st);
        return -1;
    }
    int rc = 0;
    cudaError_t c = cudaStreamCreate(&st->stream);
    if (c == cudaSuccess) c = cudaMalloc((void **)&st->small, SMALL_FLOATS_ * sizeof(float));
    for (int i = 0; i < WF_MARKS && c == cudaSuccess; i++) c = cudaEventCreate(&st->marks[i]);
    if (c != cudaSuccess) rc = fail_(NULL, "starting: %s", cuda_words_(c));
    st->small_host = (float *)malloc(SMALL_FLOATS_ * sizeof(float));
    if (!rc && !st->small_host) rc = fail_(NULL, "cannot allocate the reductions' host buffer");
#if !WF_CUDA_EMU
    if (!rc && st->lt.create(&st->lt_handle) != CUBLAS_STATUS_SUCCESS) rc = fail_(NULL, "cublasLtCreate failed");
    if (!rc && cudaMalloc(&st->lt_workspace, LT_WORKSPACE_) != cudaSuccess)
        rc = fail_(NULL, "cannot allocate cuBLASLt's workspace (%zu bytes)", LT_WORKSPACE_);
#endif
    if (rc) {
        cu_fini(st);
        return -1;
    }
    *state = st;
    return 0;
}

static void cu_fini(void *state) {
    cuda_state_ *st = (cuda_state_ *)state;
    if (!st) return;
    if (st->stream) cudaStreamSynchronize(st->stream);
    for (int i = 0; i < WF_MARKS; i++)
        if (st->marks[i]) cudaEventDestroy(st->marks[i]);
    cudaFree(st->small);
    if (st->ws) cudaFree(st->ws);
    free(st->small_host);
#if !WF_CUDA_EMU
    if (st->lt_workspace) cudaFree(st->lt_workspace);
    if (st->lt_handle) st->lt.destroy(st->lt_handle);
#endif
    if (st->stream) cudaStreamDestroy(st->stream);
    free(st);
}

/* --------------------------------------------------------------- memory */

static int cu_alloc(void *state, size_t bytes, void **out) {
    cuda_state_ *st = (cuda_state_ *)state;
    *out = NULL;
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    CK_(st, cudaMalloc(&p, n), "cudaMalloc");
    if ((uintptr_t)p % 4096) { /* the seam promises 4096: pad and remember */
        cudaFree(p);
        int slot = -1;
        for (int i = 0; i < 64 && slot < 0; i++)
            if (!st->raw[i]) slot = i;
        if (slot < 0) return fail_(st, "cudaMalloc: more than 64 blocks needed realigning");
        CK_(st, cudaMalloc(&p, n + 4095), "cudaMalloc");
        st->raw[slot] = p;
        st->aligned[slot] = (void *)(((uintptr_t)p + 4095) & ~(uintptr_t)4095);
        p = st->aligned[slot];
    }
    CK_(st, cudaMemsetAsync(p, 0, n, st->stream), "cudaMemsetAsync");
    *out = p;
    return 0;
}

static void cu_free(void *state, void *p) {
    cuda_state_ *st = (cuda_state_ *)state;
    cudaStreamSynchronize(st->stream);
    for (int i = 0; i < 64; i++)
        if (st->aligned[i] == p) {
            p = st->raw[i];
            st->raw[i] = st->aligned[i] = NULL;
            break;
        }
    if (cudaFree(p) != cudaSuccess) fail_(st, "cudaFree: %s", cuda_words_(cudaGetLastError()));
}

static int cu_upload(void *state, void *dst, const void *src, size_t bytes) {
    cuda_state_ *st = (cuda_state_ *)state;
    CK_(st, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream), "upload (cudaMemcpyAsync)");
    CK_(st, cudaStreamSynchronize(st->stream), "upload (cudaStreamSynchronize)");
    return 0;
}

static int cu_download(void *state, void *dst, const void *src, size_t bytes) {
    cuda_state_ *st = (cuda_state_ *)state;
    CK_(st, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream), "download (cudaMemcpyAsync)");
    CK_(st, cudaStreamSynchronize(st->stream), "download (cudaStreamSynchronize)");
    return 0;
}

static int cu_copy(void *state, void *dst, const void *src, size_t bytes) {
    cuda_state_ *st = (cuda_state_ *)state;
    if (bytes && dst != src)
        CK_(st, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream), "copy (cudaMemcpyAsync)");
    return 0;
}

static int cu_fill(void *state, void *dst, int byte, size_t bytes) {
    cuda_state_ *st = (cuda_state_ *)state;
    CK_(st, cudaMemsetAsync(dst, byte, bytes, st->stream), "fill (cudaMemsetAsync)");
    return 0;
}

static int cu_sync(void *state) {
    cuda_state_ *st = (cuda_state_ *)state;
    CK_(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize");
    return 0;
}

static int cu_mem_info(void *state, size_t *free_bytes, size_t *total_bytes) {
    cuda_state_ *st = (cuda_state_ *)state;
    CK_(st, cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
    return 0;
}

static wf_backend_mark cu_mark(void *state) {
    cuda_state_ *st = (cuda_state_ *)state;
    cudaEvent_t e = st->marks[st->next_mark];
    st->next_mark = (st->next_mark + 1) % WF_MARKS;
    cudaEventRecord(e, st->stream);
    return wf_backend_mark{0, (void *)e};
}

static double cu_mark_seconds(void *state, wf_backend_mark a, wf_backend_mark b) {
    float ms = 0.0f;
    cudaEventSynchronize((cudaEvent_t)b.event);
    cudaEventElapsedTime(&ms, (cudaEvent_t)a.event, (cudaEvent_t)b.event);
    return (double)ms * 1e-3;
}

/* -------------------------------------------------------------- matmul
 * A row-major X (r x c, row stride ld) is the column-major X^T with the
 * same ld. So the row-major C = op(A) op(B) is the column-major
 * C^T = op(B)^T op(A)^T: the column-major product with the operands
 * swapped (B first), m and n swapped, each keeping its own transpose flag.
 * gemm_cm_ is that column-major call: cuBLASLt's under nvcc, sgemm's under
 * the emulator. */

#if WF_CUDA_EMU
/* The floats of a column-major operand (rows x cols, ld, batch stride) of
 * dtype dt, converted into a new array laid out the same way (zeros when x
 * is NULL); NULL when out of memory. */
static float *emu_widen_(const void *x, wf_dtype dt, int rows, int cols, int64_t ld, int64_t stride, int batch) {
    int64_t span = (int64_t)(batch - 1) * stride + (int64_t)(cols - 1) * ld + rows;
    float *f = (float *)calloc((size_t)span, sizeof(float));
    if (!f || !x) return f;
    for (int b = 0; b < batch; b++)
        for (int c = 0; c < cols; c++)
            for (int r = 0; r < rows; r++) {
                int64_t i = (int64_t)b * stride + (int64_t)c * ld + r;
                f[i] = dt == WF_DTYPE_BF16 ? wf_bf16_to_f32(((const wf_bf16 *)x)[i]) : ((const float *)x)[i];
            }
    return f;
}
#endif

#if WF_CUDA_EMU
/* gemm_cm_ under the emulator: sgemm on the host (inside the host fence). */
static int gemm_emu_(cuda_state_ *st, int ta, int tb, int m, int n, int k, float alpha, const void *A, wf_dtype adt,
                    int64_t lda, int64_t sa, const void *B, wf_dtype bdt, int64_t ldb, int64_t sb, float beta, void *C,
                    wf_dtype cdt, int64_t ldc, int64_t sc, int batch) {
    if (adt == WF_DTYPE_F32 && bdt == WF_DTYPE_F32 && cdt == WF_DTYPE_F32) {
        for (int i = 0; i < batch; i++)
            cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                        (const float *)A + i * sa, (int)lda, (const float *)B + i * sb, (int)ldb, beta,
                        (float *)C + i * sc, (int)ldc);
        return 0;
    }
    /* bf16 somewhere: as cuBLASLt computes it, fp32 products and sums of
     * the exact bf16 values, the output rounded once to its dtype */
    float *a = emu_widen_(A, adt, ta ? k : m, ta ? m : k, lda, sa, batch);
    float *b = emu_widen_(B, bdt, tb ? n : k, tb ? k : n, ldb, sb, batch);
    float *c = emu_widen_(beta != 0.0f ? C : NULL, cdt, m, n, ldc, sc, batch); /* beta = 0 reads no C */
    if (a && b && c)
        for (int i = 0; i < batch; i++)
            cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                        a + i * sa, (int)lda, b + i * sb, (int)ldb, beta, c + i * sc, (int)ldc);
    for (int i = 0; i < batch && a && b && c; i++)
        for (int col = 0; col < n; col++)
            for (int r = 0; r < m; r++) {
                int64_t x = (int64_t)i * sc + (int64_t)col * ldc + r;
                if (cdt == WF_DTYPE_BF16) ((wf_bf16 *)C)[x] = wf_f32_to_bf16(c[x]);
                else ((float *)C)[x] = c[x];
            }
    int ok = a && b && c;
    free(a), free(b), free(c);
    return ok ? 0 : fail_(st, "matmul: no host memory for the emulated bf16 product");
}
#endif

static int gemm_cm_(cuda_state_ *st, int ta, int tb, int m, int n, int k, float alpha, const void *A, wf_dtype adt,
                    int64_t lda, int64_t sa, const void *B, wf_dtype bdt, int64_t ldb, int64_t sb, float beta, void *C,
                    wf_dtype cdt, int64_t ldc, int64_t sc, int batch) {
#if WF_CUDA_EMU
    CK_(st, cudaStreamSynchronize(st->stream), "matmul: the work before it");
    wf_emu_fence_open(); /* sgemm reads and writes device memory from the host */
    int rc = gemm_emu_(st, ta, tb, m, n, k, alpha, A, adt, lda, sa, B, bdt, ldb, sb, beta, C, cdt, ldc, sc, batch);
    wf_emu_fence_close();
    return rc;
#else
    lt_api_ &lt = st->lt;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int rc = -1;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    size_t ws = LT_WORKSPACE_;
    int32_t bc = batch;
    if (lt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) goto done;
    lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    /* stored shapes: A is m x k (k x m when transposed), B k x n (n x k) */
    if (lt.layout_create(&la, cuda_type_(adt), ta ? k : m, ta ? m : k, lda) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&lb, cuda_type_(bdt), tb ? n : k, tb ? k : n, ldb) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&lc, cuda_type_(cdt), m, n, ldc) != CUBLAS_STATUS_SUCCESS)
        goto done;
    if (batch > 1) {
        lt.layout_set(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
        lt.layout_set(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
        lt.layout_set(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
        lt.layout_set(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa);
        lt.layout_set(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb);
        lt.layout_set(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc);
    }
    if (lt.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) goto done;
    lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (lt.heuristic(st->lt_handle, desc, la, lb, lc, lc, pref, 1, &heur, &found) != CUBLAS_STATUS_SUCCESS ||
        !found) {
        fail_(st, "matmul: cuBLASLt has no algorithm for m=%d n=%d k=%d batch=%d", m, n, k, batch);
        goto done;
    }
    if (lt.matmul(st->lt_handle, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, st->lt_workspace, ws,
                  st->stream) != CUBLAS_STATUS_SUCCESS) {
        fail_(st, "matmul: cublasLtMatmul failed (m=%d n=%d k=%d batch=%d)", m, n, k, batch);
        goto done;
    }
    rc = 0;
done:
    if (rc && !st->err[0]) fail_(st, "matmul: cuBLASLt refused the descriptors (m=%d n=%d k=%d)", m, n, k);
    if (pref) lt.pref_destroy(pref);
    if (lc) lt.layout_destroy(lc);
    if (lb) lt.layout_destroy(lb);
    if (la) lt.layout_destroy(la);
    if (desc) lt.desc_destroy(desc);
    return rc;
#endif
}

static int cu_matmul(void *state, const wf_matmul_desc *d) {
    cuda_state_ *st = (cuda_state_ *)state;
    st->err[0] = '\0';
    int batch = d->batch > 0 ? d->batch : 1;
    if (d->m == 0 || d->n == 0) return 0;
    if (d->k == 0) { /* no product: C stays (accumulate) or becomes zeros */
        if (d->accumulate) return 0;
        for (int i = 0; i < batch; i++) {
            int64_t mn = (int64_t)d->m * d->n;
            if (d->c.dt == WF_DTYPE_BF16)
                WF_LAUNCH(zero2d_k<wf_bf16>, grid_for_(mn, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream,
                          (wf_bf16 *)d->c.p + i * d->stride_c, (int64_t)d->m, d->n, d->ldc);
            else
                WF_LAUNCH(zero2d_k<float>, grid_for_(mn, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream,
                          F_(d->c) + i * d->stride_c, (int64_t)d->m, d->n, d->ldc);
            CK_LAUNCH_(st, "matmul (k = 0)");
        }
        return 0;
    }
    return gemm_cm_(st, d->trans_b, d->trans_a, d->n, d->m, d->k, d->alpha, d->b.p, d->b.dt, d->ldb, d->stride_b,
                    d->a.p, d->a.dt, d->lda, d->stride_a, d->accumulate ? 1.0f : 0.0f, d->c.p, d->c.dt, d->ldc,
                    d->stride_c, batch);
}

/* ---------------------------------------------------------------- ops */

static int cu_rmsnorm_fwd(void *state, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N, int C,
                          float eps) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "rmsnorm_fwd", out, rstd, inp, weight);
    if (N <= 0) return 0;
    WF_LAUNCH(rmsnorm_fwd_k, N, WF_ROW_THREADS, 32 * sizeof(float), st->stream, F_(out), F_(rstd), CF_(inp),
              CF_(weight), C, eps);
    CK_LAUNCH_(st, "rmsnorm_fwd");
    return 0;
}

/* Row chunks of RMSNorm's weight gradient (the partials' rows). */
#define RMS_CHUNKS_ 64

/* The backend's workspace grows to `bytes` on first need (the first step
 * of a run), then stays: nothing is allocated in later steps. */
static int workspace_(cuda_state_ *st, size_t bytes, const char *op) {
    if (bytes <= st->ws_bytes) return 0;
    CK_(st, cudaStreamSynchronize(st->stream), op);
    if (st->ws) cudaFree(st->ws);
    st->ws = NULL, st->ws_bytes = 0;
    CK_(st, cudaMalloc((void **)&st->ws, bytes), op);
    st->ws_bytes = bytes;
    return 0;
}

static int cu_rmsnorm_bwd(void *state, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp, wf_dptr weight,
                          wf_dptr rstd, int N, int C) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "rmsnorm_bwd", dinp, dweight, dout, inp, weight, rstd);
    if (N <= 0 || C <= 0) return 0;
    WF_LAUNCH(rmsnorm_bwd_dx_k, N, WF_ROW_THREADS, 32 * sizeof(float), st->stream, F_(dinp), CF_(dout), CF_(inp),
              CF_(weight), CF_(rstd), C);
    CK_LAUNCH_(st, "rmsnorm_bwd (dinp)");
    int chunks = N < RMS_CHUNKS_ ? N : RMS_CHUNKS_;
    int64_t per = ((int64_t)N + chunks - 1) / chunks;
    chunks = (int)(((int64_t)N + per - 1) / per);
    if (workspace_(st, (size_t)chunks * (size_t)C * sizeof(float), "rmsnorm_bwd")) return -1;
    unsigned cols = (unsigned)((C + WF_ROW_THREADS - 1) / WF_ROW_THREADS);
    WF_LAUNCH(rmsnorm_bwd_dw_part_k, dim3(cols, (unsigned)chunks), WF_ROW_THREADS, 0, st->stream, st->ws, CF_(dout),
              CF_(inp), CF_(rstd), (int64_t)N, C, per);
    CK_LAUNCH_(st, "rmsnorm_bwd (dweight chunks)");
    WF_LAUNCH(rmsnorm_bwd_dw_sum_k, cols, WF_ROW_THREADS, 0, st->stream, F_(dweight), (const float *)st->ws, chunks,
              C);
    CK_LAUNCH_(st, "rmsnorm_bwd (dweight)");
    return 0;
}

/* The tables are made once per run: on the host in double, as the cpu
 * backend makes them, then uploaded. */
static int cu_rope_table(void *state, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "rope_table", cos_tab, sin_tab);
    int half = HD / 2;
    size_t n = (size_t)T * half;
    float *c = (float *)malloc((n ? n : 1) * sizeof(float)), *s = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!c || !s) {
        free(c), free(s);
        return fail_(st, "rope_table: no host memory for %zu floats", n);
    }
    for (int i = 0; i < half; i++) {
        double freq = pow(theta, -2.0 * i / HD);
        for (int t = 0; t < T; t++) {
            c[(size_t)t * half + i] = (float)cos(t * freq);
            s[(size_t)t * half + i] = (float)sin(t * freq);
        }
    }
    int rc = cu_upload(st, cos_tab.p, c, n * sizeof(float));
    if (!rc) rc = cu_upload(st, sin_tab.p, s, n * sizeof(float));
    free(c), free(s);
    return rc;
}

static int rope_(cuda_state_ *st, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads, int HD,
                 int stride, float dir) {
    F32_ONLY_(st, "rope", x, cos_tab, sin_tab);
    int64_t pairs = (int64_t)B * T * n_heads * (HD / 2);
    if (pairs <= 0) return 0;
    WF_LAUNCH(rope_k, grid_for_(pairs, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(x), CF_(cos_tab),
              CF_(sin_tab), (int64_t)B * T, T, n_heads, HD, stride, dir);
    CK_LAUNCH_(st, dir > 0 ? "rope_fwd" : "rope_bwd");
    return 0;
}

static int cu_rope_fwd(void *state, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads, int HD,
                       int stride) {
    return rope_((cuda_state_ *)state, x, cos_tab, sin_tab, B, T, n_heads, HD, stride, 1.0f);
}

static int cu_rope_bwd(void *state, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads, int HD,
                       int stride) {
    return rope_((cuda_state_ *)state, dx, cos_tab, sin_tab, B, T, n_heads, HD, stride, -1.0f);
}

/* The attention kernels keep their state in shared memory: none of it. */
static size_t cu_attention_scratch(void *state, int T, int n_threads) { return 0; }

/* Shared bytes of each attention kernel for head width HD. */
static size_t att_shared_(int kernel, int HD) {
    size_t rows = kernel == 0 ? 2 : kernel == 1 ? 3 : 4;
    return ((rows * WF_ATT_ROWS + 2 * WF_ATT_KEYS) * (size_t)HD + (kernel == 2 ? 2 * WF_ATT_KEYS : 0)) *
           sizeof(float);
}

#define ATT_SHARED_MAX_ ((size_t)227 * 1024)

static int cu_attention_fwd(void *state, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH, int NKV,
                            int HD, wf_dptr scratch, int n_threads) {
    cuda_state_ *st = (cuda_state_ *)state;
    size_t sh = att_shared_(0, HD);
    if (sh > ATT_SHARED_MAX_) return fail_(st, "attention_fwd: head width %d needs %zu bytes of shared memory", HD, sh);
    if (B <= 0 || T <= 0) return 0;
    if (out.dt != qkv.dt || lse.dt != WF_DTYPE_F32)
        return fail_(st, "attention_fwd: out and qkv must have one dtype (%s, %s) and lse f32 (%s)",
                     wf_dtype_name_(out.dt), wf_dtype_name_(qkv.dt), wf_dtype_name_(lse.dt));
    CK_(st, cudaFuncSetAttribute(attention_fwd_k<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh),
        "attention_fwd: cudaFuncSetAttribute");
    CK_(st, cudaFuncSetAttribute(attention_fwd_k<wf_bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh),
        "attention_fwd: cudaFuncSetAttribute");
    dim3 grid((unsigned)((T + WF_ATT_ROWS - 1) / WF_ATT_ROWS), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HD);
    if (out.dt == WF_DTYPE_BF16)
        WF_LAUNCH(attention_fwd_k<wf_bf16>, grid, WF_ATT_ROWS, sh, st->stream, (wf_bf16 *)out.p, F_(lse),
                  (const wf_bf16 *)qkv.p, T, NH, NKV, HD, scale);
    else
        WF_LAUNCH(attention_fwd_k<float>, grid, WF_ATT_ROWS, sh, st->stream, F_(out), F_(lse), CF_(qkv), T, NH, NKV,
                  HD, scale);
    CK_LAUNCH_(st, "attention_fwd");
    return 0;
}

static int cu_attention_bwd(void *state, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out, wf_dptr lse, int B,
                            int T, int NH, int NKV, int HD, wf_dptr scratch, int n_threads) {
    cuda_state_ *st = (cuda_state_ *)state;
    size_t sh1 = att_shared_(1, HD), sh2 = att_shared_(2, HD);
    if (sh2 > ATT_SHARED_MAX_)
        return fail_(st, "attention_bwd: head width %d needs %zu bytes of shared memory", HD, sh2);
    if (B <= 0 || T <= 0) return 0;
    if (dqkv.dt != qkv.dt || dout.dt != qkv.dt || out.dt != qkv.dt || lse.dt != WF_DTYPE_F32)
        return fail_(st, "attention_bwd: dqkv, dout, qkv and out must have one dtype (%s, %s, %s, %s) and lse f32 (%s)",
                     wf_dtype_name_(dqkv.dt), wf_dtype_name_(dout.dt), wf_dtype_name_(qkv.dt), wf_dtype_name_(out.dt),
                     wf_dtype_name_(lse.dt));
    CK_(st, cudaFuncSetAttribute(attention_bwd_dq_k<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh1),
        "attention_bwd: cudaFuncSetAttribute");
    CK_(st, cudaFuncSetAttribute(attention_bwd_dkv_k<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh2),
        "attention_bwd: cudaFuncSetAttribute");
    CK_(st, cudaFuncSetAttribute(attention_bwd_dq_k<wf_bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh1),
        "attention_bwd: cudaFuncSetAttribute");
    CK_(st, cudaFuncSetAttribute(attention_bwd_dkv_k<wf_bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh2),
        "attention_bwd: cudaFuncSetAttribute");
    float scale = 1.0f / sqrtf((float)HD);
    unsigned tiles = (unsigned)((T + WF_ATT_ROWS - 1) / WF_ATT_ROWS);
    dim3 gq(tiles, (unsigned)NH, (unsigned)B), gkv(tiles, (unsigned)NKV, (unsigned)B);
    if (qkv.dt == WF_DTYPE_BF16) {
        const wf_bf16 *dy = (const wf_bf16 *)dout.p, *x = (const wf_bf16 *)qkv.p, *o = (const wf_bf16 *)out.p;
        WF_LAUNCH(attention_bwd_dq_k<wf_bf16>, gq, WF_ATT_ROWS, sh1, st->stream, (wf_bf16 *)dqkv.p, dy, x, o,
                  CF_(lse), T, NH, NKV, HD, scale);
        CK_LAUNCH_(st, "attention_bwd (dq)");
        WF_LAUNCH(attention_bwd_dkv_k<wf_bf16>, gkv, WF_ATT_ROWS, sh2, st->stream, (wf_bf16 *)dqkv.p, dy, x, o,
                  CF_(lse), T, NH, NKV, HD, scale);
    } else {
        WF_LAUNCH(attention_bwd_dq_k<float>, gq, WF_ATT_ROWS, sh1, st->stream, F_(dqkv), CF_(dout), CF_(qkv),
                  CF_(out), CF_(lse), T, NH, NKV, HD, scale);
        CK_LAUNCH_(st, "attention_bwd (dq)");
        WF_LAUNCH(attention_bwd_dkv_k<float>, gkv, WF_ATT_ROWS, sh2, st->stream, F_(dqkv), CF_(dout), CF_(qkv),
                  CF_(out), CF_(lse), T, NH, NKV, HD, scale);
    }
    CK_LAUNCH_(st, "attention_bwd (dk, dv)");
    return 0;
}

static int cu_swiglu_fwd(void *state, wf_dptr out, wf_dptr h13, int N, int H) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "swiglu_fwd", out, h13);
    int64_t n = (int64_t)N * H;
    if (n <= 0) return 0;
    WF_LAUNCH(swiglu_fwd_k, grid_for_(n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(out), CF_(h13),
              (int64_t)N, H);
    CK_LAUNCH_(st, "swiglu_fwd");
    return 0;
}

static int cu_swiglu_bwd(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "swiglu_bwd", dh13, dout, h13);
    int64_t n = (int64_t)N * H;
    if (n <= 0) return 0;
    WF_LAUNCH(swiglu_bwd_k, grid_for_(n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(dh13), CF_(dout),
              CF_(h13), (int64_t)N, H);
    CK_LAUNCH_(st, "swiglu_bwd");
    return 0;
}

static int cu_embedding_fwd(void *state, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "embedding_fwd", out, wte);
    int64_t n = (int64_t)N * C;
    if (n <= 0) return 0;
    WF_LAUNCH(embedding_fwd_k, grid_for_(n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(out), I_(tokens),
              CF_(wte), (int64_t)N, C);
    CK_LAUNCH_(st, "embedding_fwd");
    return 0;
}

static int cu_embedding_bwd(void *state, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "embedding_bwd", dwte, dout);
    if (N <= 0 || C <= 0) return 0;
    WF_LAUNCH(embedding_bwd_k, (C + WF_ROW_THREADS - 1) / WF_ROW_THREADS, WF_ROW_THREADS, 0, st->stream, F_(dwte),
              CF_(dout), I_(tokens), (int64_t)N, C);
    CK_LAUNCH_(st, "embedding_bwd");
    return 0;
}

static int cu_crossentropy_fwd(void *state, wf_dptr losses, wf_dptr lse, wf_dptr logits, wf_dptr targets, int N,
                               int V) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "crossentropy_fwd", losses, lse, logits);
    if (N <= 0) return 0;
    WF_LAUNCH(crossentropy_fwd_k, N, WF_REDUCE_THREADS, 32 * sizeof(float), st->stream, F_(losses), F_(lse),
              CF_(logits), I_(targets), V);
    CK_LAUNCH_(st, "crossentropy_fwd");
    return 0;
}

static int cu_crossentropy_bwd(void *state, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                               float dloss) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "crossentropy_bwd", logits, lse);
    int64_t n = (int64_t)N * V;
    if (n <= 0) return 0;
    WF_LAUNCH(crossentropy_bwd_k, grid_for_(n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(logits), CF_(lse),
              I_(targets), (int64_t)N, V, dloss);
    CK_LAUNCH_(st, "crossentropy_bwd");
    return 0;
}

/* The partials of the reductions come back to the host, which adds them
 * in order in double. */
static int small_down_(cuda_state_ *st, size_t floats) {
    return cu_download(st, st->small_host, st->small, floats * sizeof(float));
}

static int cu_sumsq(void *state, wf_dptr x, size_t n, double *out) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "sumsq", x);
    *out = 0.0;
    if (n == 0) return 0;
    int64_t per = ((int64_t)n + WF_REDUCE_BLOCKS - 1) / WF_REDUCE_BLOCKS;
    WF_LAUNCH(sumsq_k, WF_REDUCE_BLOCKS, WF_REDUCE_THREADS, 64 * sizeof(float), st->stream, st->small, CF_(x),
              (int64_t)n, per);
    CK_LAUNCH_(st, "sumsq");
    if (small_down_(st, 2 * WF_REDUCE_BLOCKS)) return -1;
    double sum = 0.0;
    for (int b = 0; b < WF_REDUCE_BLOCKS; b++)
        sum += (double)st->small_host[2 * b] + (double)st->small_host[2 * b + 1];
    *out = sum;
    return 0;
}

static int cu_first_nonfinite(void *state, wf_dptr x, size_t n, size_t *index) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "first_nonfinite", x);
    *index = n;
    if (n == 0) return 0;
    int64_t per = ((int64_t)n + WF_REDUCE_BLOCKS - 1) / WF_REDUCE_BLOCKS;
    WF_LAUNCH(first_nonfinite_k, WF_REDUCE_BLOCKS, WF_REDUCE_THREADS, 32 * sizeof(int), st->stream,
              (int *)st->small, CF_(x), (int64_t)n, per);
    CK_LAUNCH_(st, "first_nonfinite");
    if (small_down_(st, WF_REDUCE_BLOCKS)) return -1;
    const int *first = (const int *)st->small_host;
    for (int b = 0; b < WF_REDUCE_BLOCKS; b++)
        if (first[b] != INT32_MAX) {
            *index = (size_t)b * (size_t)per + (size_t)first[b];
            break;
        }
    return 0;
}

static int cu_loss_sum(void *state, wf_dptr losses, wf_dptr targets, size_t n, double *sum, size_t *n_valid) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "loss_sum", losses);
    *sum = 0.0, *n_valid = 0;
    if (n == 0) return 0;
    if (n > (size_t)INT32_MAX) return fail_(st, "loss_sum: %zu rows, more than 2^31 - 1", n);
    WF_LAUNCH(loss_sum_k, 1, WF_REDUCE_THREADS, 96 * sizeof(float), st->stream, st->small, (int *)(st->small + 2),
              CF_(losses), I_(targets), (int64_t)n);
    CK_LAUNCH_(st, "loss_sum");
    if (small_down_(st, 3)) return -1;
    int count;
    memcpy(&count, st->small_host + 2, sizeof count);
    *sum = (double)st->small_host[0] + (double)st->small_host[1];
    *n_valid = (size_t)count;
    return 0;
}

static int cu_add(void *state, wf_dptr y, wf_dptr a, wf_dptr b, size_t n) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "add", y, a, b);
    if (n == 0) return 0;
    WF_LAUNCH(add_k, grid_for_((int64_t)n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(y), CF_(a), CF_(b),
              (int64_t)n);
    CK_LAUNCH_(st, "add");
    return 0;
}

static int cu_axpby(void *state, wf_dptr y, wf_dptr x, float a, float b, size_t n) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "axpby", y, x);
    if (n == 0) return 0;
    WF_LAUNCH(axpby_k, grid_for_((int64_t)n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(y), CF_(x), a, b,
              (int64_t)n);
    CK_LAUNCH_(st, "axpby");
    return 0;
}

/* The same dtype is a copy; f32 to bf16 rounds to nearest even. */
static int cu_cast(void *state, wf_dptr dst, wf_dptr src, size_t n) {
    cuda_state_ *st = (cuda_state_ *)state;
    if (dst.dt == src.dt) return cu_copy(state, dst.p, src.p, n * (dst.dt == WF_DTYPE_BF16 ? 2 : 4));
    if (n == 0) return 0;
    if (dst.dt == WF_DTYPE_BF16 && src.dt == WF_DTYPE_F32)
        WF_LAUNCH(cast_f32_bf16_k, grid_for_((int64_t)n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream,
                  (wf_bf16 *)dst.p, CF_(src), (int64_t)n);
    else if (dst.dt == WF_DTYPE_F32 && src.dt == WF_DTYPE_BF16)
        WF_LAUNCH(cast_bf16_f32_k, grid_for_((int64_t)n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(dst),
                  (const wf_bf16 *)src.p, (int64_t)n);
    else
        return fail_(st, "cast: %s to %s is not implemented", wf_dtype_name_(src.dt), wf_dtype_name_(dst.dt));
    CK_LAUNCH_(st, "cast");
    return 0;
}

static int cu_adamw(void *state, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v, const wf_adamw_span *ranges,
                    int n_ranges, size_t total, wf_adamw_coef k) {
    cuda_state_ *st = (cuda_state_ *)state;
    F32_ONLY_(st, "adamw", p, g, m, v);
    for (int r = 0; r < n_ranges; r++) {
        int64_t n = (int64_t)ranges[r].numel, o = (int64_t)ranges[r].offset;
        if (n <= 0) continue;
        WF_LAUNCH(adamw_k, grid_for_(n, WF_EW_THREADS), WF_EW_THREADS, 0, st->stream, F_(p) + o, CF_(g) + o,
                  F_(m) + o, F_(v) + o, n, ranges[r].decay ? k.decay : 1.0f, k.clip, k.b1, k.a1, k.b2, k.a2,
                  k.bc2_sqrt, k.eps, k.step);
        CK_LAUNCH_(st, "adamw");
    }
    return 0;
}

/* ---------------------------------------------------------------- table */

static wf_backend_ops make_ops_(void) {
    wf_backend_ops o;
    memset(&o, 0, sizeof o);
    o.abi = WF_BACKEND_ABI;
    o.name = BACKEND_NAME_;
    o.float_dtypes = 1u << WF_DTYPE_F32 | 1u << WF_DTYPE_BF16;
    o.init = cu_init;
    o.fini = cu_fini;
    o.last_error = cu_last_error;
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.upload = cu_upload;
    o.download = cu_download;
    o.copy = cu_copy;
    o.fill = cu_fill;
    o.sync = cu_sync;
    o.mem_info = cu_mem_info;
    o.mark = cu_mark;
    o.mark_seconds = cu_mark_seconds;
    o.matmul = cu_matmul;
    o.rmsnorm_fwd = cu_rmsnorm_fwd;
    o.rmsnorm_bwd = cu_rmsnorm_bwd;
    o.rope_table = cu_rope_table;
    o.rope_fwd = cu_rope_fwd;
    o.rope_bwd = cu_rope_bwd;
    o.attention_scratch = cu_attention_scratch;
    o.attention_fwd = cu_attention_fwd;
    o.attention_bwd = cu_attention_bwd;
    o.swiglu_fwd = cu_swiglu_fwd;
    o.swiglu_bwd = cu_swiglu_bwd;
    o.embedding_fwd = cu_embedding_fwd;
    o.embedding_bwd = cu_embedding_bwd;
    o.crossentropy_fwd = cu_crossentropy_fwd;
    o.crossentropy_bwd = cu_crossentropy_bwd;
    o.sumsq = cu_sumsq;
    o.first_nonfinite = cu_first_nonfinite;
    o.loss_sum = cu_loss_sum;
    o.add = cu_add;
    o.axpby = cu_axpby;
    o.cast = cu_cast;
    o.adamw = cu_adamw;
    return o;
}

extern "C" __attribute__((visibility("default"))) const wf_backend_ops *wf_backend_ops_v1(void);
extern "C" const wf_backend_ops *wf_backend_ops_v1(void) {
    static const wf_backend_ops ops = make_ops_();
    return &ops;
}
