/* Backend `cpu`: today's kernels (kern_*.c: OpenMP loops, OpenBLAS sgemm)
 * behind the table of backend_impl.h, on host memory. The seam has checked
 * every dtype (only f32, and i32 for ids), so each op is one kernel call. */
#include <cblas.h>
#include <string.h>

#include "kernels/backend_impl.h"
#include "weft/kernels.h"

#define F_(x) ((float *)(x).p)
#define CF_(x) ((const float *)(x).p)
#define I_(x) ((const int32_t *)(x).p)

static const char *cpu_last_error(void *state) { return "cpu ops do not fail"; }

static int cpu_matmul(void *state, const wf_matmul_desc *d) {
    int batch = d->batch > 0 ? d->batch : 1;
    if (d->m <= 0 || d->n <= 0) return 0;
    for (int i = 0; i < batch; i++) {
        const float *a = CF_(d->a) + i * d->stride_a, *b = CF_(d->b) + i * d->stride_b;
        float *c = F_(d->c) + i * d->stride_c;
        if (d->k <= 0) {
            if (!d->accumulate)
                for (int r = 0; r < d->m; r++) memset(c + r * d->ldc, 0, (size_t)d->n * sizeof *c);
            continue;
        }
        cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans, d->trans_b ? CblasTrans : CblasNoTrans,
                    d->m, d->n, d->k, d->alpha, a, (int)d->lda, b, (int)d->ldb, d->accumulate ? 1.0f : 0.0f, c,
                    (int)d->ldc);
    }
    return 0;
}

static int cpu_rmsnorm_fwd(void *state, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N, int C,
                           float eps) {
    wf_kern_rmsnorm_fwd(F_(out), F_(rstd), CF_(inp), CF_(weight), N, C, eps);
    return 0;
}

static int cpu_rmsnorm_bwd(void *state, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp, wf_dptr weight,
                           wf_dptr rstd, int N, int C) {
    wf_kern_rmsnorm_bwd(F_(dinp), F_(dweight), CF_(dout), CF_(inp), CF_(weight), CF_(rstd), N, C);
    return 0;
}

static int cpu_rope_table(void *state, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta) {
    wf_kern_rope_table(F_(cos_tab), F_(sin_tab), T, HD, theta);
    return 0;
}

static int cpu_rope_fwd(void *state, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    wf_kern_rope_fwd(F_(x), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static int cpu_rope_bwd(void *state, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    wf_kern_rope_bwd(F_(dx), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static size_t cpu_attention_scratch(void *state, int T, int n_threads) {
    return wf_kern_attention_scratch(T, n_threads);
}

static int cpu_attention_fwd(void *state, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH, int NKV,
                             int HD, wf_dptr scratch, int n_threads) {
    wf_kern_attention_fwd(F_(out), F_(lse), CF_(qkv), B, T, NH, NKV, HD, F_(scratch), n_threads);
    return 0;
}

static int cpu_attention_bwd(void *state, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out, wf_dptr lse,
                             int B, int T, int NH, int NKV, int HD, wf_dptr scratch, int n_threads) {
    wf_kern_attention_bwd(F_(dqkv), CF_(dout), CF_(qkv), CF_(out), CF_(lse), B, T, NH, NKV, HD, F_(scratch),
                          n_threads);
    return 0;
}

static int cpu_swiglu_fwd(void *state, wf_dptr out, wf_dptr h13, int N, int H) {
    wf_kern_swiglu_fwd(F_(out), CF_(h13), N, H);
    return 0;
}

static int cpu_swiglu_bwd(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    wf_kern_swiglu_bwd(F_(dh13), CF_(dout), CF_(h13), N, H);
    return 0;
}

static int cpu_embedding_fwd(void *state, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C) {
    wf_kern_embedding_fwd(F_(out), I_(tokens), CF_(wte), N, C);
    return 0;
}

static int cpu_embedding_bwd(void *state, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C) {
    wf_kern_embedding_bwd(F_(dwte), CF_(dout), I_(tokens), N, C);
    return 0;
}

static int cpu_crossentropy_fwd(void *state, wf_dptr losses, wf_dptr lse, wf_dptr logits, wf_dptr targets, int N,
                                int V) {
    wf_kern_crossentropy_fwd(F_(losses), F_(lse), CF_(logits), I_(targets), N, V);
    return 0;
}

static int cpu_crossentropy_bwd(void *state, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                                float dloss) {
    wf_kern_crossentropy_bwd(F_(logits), CF_(lse), I_(targets), N, V, dloss);
    return 0;
}

static int cpu_sumsq(void *state, wf_dptr x, size_t n, double *out) {
    *out = wf_kern_sumsq(CF_(x), n);
    return 0;
}

static int cpu_first_nonfinite(void *state, wf_dptr x, size_t n, size_t *index) {
    *index = wf_kern_first_nonfinite(CF_(x), n);
    return 0;
}

static int cpu_loss_sum(void *state, wf_dptr losses, wf_dptr targets, size_t n, double *sum, size_t *n_valid) {
    wf_kern_loss_sum(CF_(losses), I_(targets), n, sum, n_valid);
    return 0;
}

static int cpu_add(void *state, wf_dptr y, wf_dptr a, wf_dptr b, size_t n) {
    wf_kern_add(F_(y), CF_(a), CF_(b), n);
    return 0;
}

/* f32 -> f32 is the only pair while f32 is the only dtype. */
static int cpu_cast(void *state, wf_dptr dst, wf_dptr src, size_t n) {
    if (n && dst.p != src.p) memmove(dst.p, src.p, n * sizeof(float));
    return 0;
}

static int cpu_adamw(void *state, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v, const wf_adamw_span *ranges,
                     int n_ranges, size_t total, wf_adamw_coef k) {
    wf_kern_adamw(F_(p), CF_(g), F_(m), F_(v), ranges, n_ranges, total, k);
    return 0;
}

static const wf_backend_ops cpu_ops_ = {
    .abi = WF_BACKEND_ABI,
    .name = "cpu",
    .float_dtypes = 1u << WF_DTYPE_F32,
    .last_error = cpu_last_error,
    .alloc = wf__backend_host_alloc,
    .free = wf__backend_host_free,
    .upload = wf__backend_host_copy,
    .download = wf__backend_host_copy,
    .copy = wf__backend_host_copy,
    .fill = wf__backend_host_fill,
    .sync = wf__backend_host_sync,
    .mem_info = wf__backend_host_mem_info,
    .mark = wf__backend_host_mark,
    .mark_seconds = wf__backend_host_mark_seconds,
    .matmul = cpu_matmul,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_table = cpu_rope_table,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attention_scratch = cpu_attention_scratch,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .crossentropy_fwd = cpu_crossentropy_fwd,
    .crossentropy_bwd = cpu_crossentropy_bwd,
    .sumsq = cpu_sumsq,
    .first_nonfinite = cpu_first_nonfinite,
    .loss_sum = cpu_loss_sum,
    .add = cpu_add,
    .cast = cpu_cast,
    .adamw = cpu_adamw,
};

const wf_backend_ops *wf__backend_cpu_ops(void) { return &cpu_ops_; }
