/* Backend `ref`: the kernels' `_ref` twins (serial loops, sums in double)
 * as a whole backend, on host memory: the oracle `weft ops-check` holds
 * every other backend against. The matmul is a plain triple loop over the
 * descriptor, in double; the RoPE tables, the first non-finite element and
 * the loss sum have one implementation, shared with cpu. */
#include <string.h>

#include "kernels/backend_impl.h"
#include "weft/kernels.h"

#define F_(x) ((float *)(x).p)
#define CF_(x) ((const float *)(x).p)
#define I_(x) ((const int32_t *)(x).p)

static const char *ref_last_error(void *state) { return "ref ops do not fail"; }

static int ref_matmul(void *state, const wf_matmul_desc *d) {
    int batch = d->batch > 0 ? d->batch : 1;
    for (int i = 0; i < batch; i++) {
        const float *a = CF_(d->a) + i * d->stride_a, *b = CF_(d->b) + i * d->stride_b;
        float *c = F_(d->c) + i * d->stride_c;
        for (int r = 0; r < d->m; r++)
            for (int col = 0; col < d->n; col++) {
                double acc = 0.0;
                for (int k = 0; k < d->k; k++) {
                    double x = d->trans_a ? a[(size_t)k * d->lda + r] : a[(size_t)r * d->lda + k];
                    double y = d->trans_b ? b[(size_t)col * d->ldb + k] : b[(size_t)k * d->ldb + col];
                    acc += x * y;
                }
                float *out = &c[(size_t)r * d->ldc + col];
                *out = (float)((d->accumulate ? (double)*out : 0.0) + (double)d->alpha * acc);
            }
    }
    return 0;
}

static int ref_rmsnorm_fwd(void *state, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N, int C,
                           float eps) {
    wf_kern_rmsnorm_fwd_ref(F_(out), F_(rstd), CF_(inp), CF_(weight), N, C, eps);
    return 0;
}

static int ref_rmsnorm_bwd(void *state, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp, wf_dptr weight,
                           wf_dptr rstd, int N, int C) {
    wf_kern_rmsnorm_bwd_ref(F_(dinp), F_(dweight), CF_(dout), CF_(inp), CF_(weight), CF_(rstd), N, C);
    return 0;
}

static int ref_rope_table(void *state, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta) {
    wf_kern_rope_table(F_(cos_tab), F_(sin_tab), T, HD, theta);
    return 0;
}

static int ref_rope_fwd(void *state, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    wf_kern_rope_fwd_ref(F_(x), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static int ref_rope_bwd(void *state, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    wf_kern_rope_bwd_ref(F_(dx), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static size_t ref_attention_scratch(void *state, int T, int n_threads) {
    return wf_kern_attention_scratch(T, n_threads);
}

static int ref_attention_fwd(void *state, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH, int NKV,
                             int HD, wf_dptr scratch, int n_threads) {
    wf_kern_attention_fwd_ref(F_(out), F_(lse), CF_(qkv), B, T, NH, NKV, HD, F_(scratch), n_threads);
    return 0;
}

static int ref_attention_bwd(void *state, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out, wf_dptr lse,
                             int B, int T, int NH, int NKV, int HD, wf_dptr scratch, int n_threads) {
    wf_kern_attention_bwd_ref(F_(dqkv), CF_(dout), CF_(qkv), CF_(out), CF_(lse), B, T, NH, NKV, HD, F_(scratch),
                          n_threads);
    return 0;
}

static int ref_swiglu_fwd(void *state, wf_dptr out, wf_dptr h13, int N, int H) {
    wf_kern_swiglu_fwd_ref(F_(out), CF_(h13), N, H);
    return 0;
}

static int ref_swiglu_bwd(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    wf_kern_swiglu_bwd_ref(F_(dh13), CF_(dout), CF_(h13), N, H);
    return 0;
}

static int ref_embedding_fwd(void *state, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C) {
    wf_kern_embedding_fwd_ref(F_(out), I_(tokens), CF_(wte), N, C);
    return 0;
}

static int ref_embedding_bwd(void *state, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C) {
    wf_kern_embedding_bwd_ref(F_(dwte), CF_(dout), I_(tokens), N, C);
    return 0;
}

static int ref_crossentropy_fwd(void *state, wf_dptr losses, wf_dptr lse, wf_dptr logits, wf_dptr targets, int N,
                                int V) {
    wf_kern_crossentropy_fwd_ref(F_(losses), F_(lse), CF_(logits), I_(targets), N, V);
    return 0;
}

static int ref_crossentropy_bwd(void *state, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                                float dloss) {
    wf_kern_crossentropy_bwd_ref(F_(logits), CF_(lse), I_(targets), N, V, dloss);
    return 0;
}

static int ref_sumsq(void *state, wf_dptr x, size_t n, double *out) {
    *out = wf_kern_sumsq_ref(CF_(x), n);
    return 0;
}

static int ref_first_nonfinite(void *state, wf_dptr x, size_t n, size_t *index) {
    *index = wf_kern_first_nonfinite(CF_(x), n);
    return 0;
}

static int ref_loss_sum(void *state, wf_dptr losses, wf_dptr targets, size_t n, double *sum, size_t *n_valid) {
    wf_kern_loss_sum(CF_(losses), I_(targets), n, sum, n_valid);
    return 0;
}

static int ref_add(void *state, wf_dptr y, wf_dptr a, wf_dptr b, size_t n) {
    wf_kern_add_ref(F_(y), CF_(a), CF_(b), n);
    return 0;
}

/* f32 -> f32 is the only pair while f32 is the only dtype. */
static int ref_cast(void *state, wf_dptr dst, wf_dptr src, size_t n) {
    if (n && dst.p != src.p) memmove(dst.p, src.p, n * sizeof(float));
    return 0;
}

static int ref_adamw(void *state, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v, const wf_adamw_span *ranges,
                     int n_ranges, size_t total, wf_adamw_coef k) {
    wf_kern_adamw_ref(F_(p), CF_(g), F_(m), F_(v), ranges, n_ranges, total, k);
    return 0;
}

static const wf_backend_ops ref_ops_ = {
    .abi = WF_BACKEND_ABI,
    .name = "ref",
    .float_dtypes = 1u << WF_DTYPE_F32,
    .last_error = ref_last_error,
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
    .matmul = ref_matmul,
    .rmsnorm_fwd = ref_rmsnorm_fwd,
    .rmsnorm_bwd = ref_rmsnorm_bwd,
    .rope_table = ref_rope_table,
    .rope_fwd = ref_rope_fwd,
    .rope_bwd = ref_rope_bwd,
    .attention_scratch = ref_attention_scratch,
    .attention_fwd = ref_attention_fwd,
    .attention_bwd = ref_attention_bwd,
    .swiglu_fwd = ref_swiglu_fwd,
    .swiglu_bwd = ref_swiglu_bwd,
    .embedding_fwd = ref_embedding_fwd,
    .embedding_bwd = ref_embedding_bwd,
    .crossentropy_fwd = ref_crossentropy_fwd,
    .crossentropy_bwd = ref_crossentropy_bwd,
    .sumsq = ref_sumsq,
    .first_nonfinite = ref_first_nonfinite,
    .loss_sum = ref_loss_sum,
    .add = ref_add,
    .cast = ref_cast,
    .adamw = ref_adamw,
};

const wf_backend_ops *wf__backend_ref_ops(void) { return &ref_ops_; }
