/* The ops of a backend on host memory whose kernels are one wf_kern_* set:
 * included by backend_cpu.c (KERN_(op) is wf_kern_op, the kernels) and by
 * backend_ref.c (wf_kern_op_ref, their twins), each with BK_(op) naming its
 * own static functions, so that the two backends differ only where they
 * should: the matmul, and which kernel set they call. The RoPE tables, the
 * attention scratch, the first non-finite element and the loss sum have one
 * kernel, shared. BACKEND_HOST_OPS_ fills the table's fields for memory and
 * these ops; the including file adds its name, last_error and matmul. */
#include <string.h>

#include "kernels/backend_impl.h"
#include "weft/kernels.h"

#if !defined(BK_) || !defined(KERN_)
#error "define BK_(op) and KERN_(op) before including backend_host_ops.h"
#endif

#define F_(x) ((float *)(x).p)
#define CF_(x) ((const float *)(x).p)
#define I_(x) ((const int32_t *)(x).p)

static int BK_(rmsnorm_fwd)(void *state, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N, int C,
                           float eps) {
    KERN_(rmsnorm_fwd)(F_(out), F_(rstd), CF_(inp), CF_(weight), N, C, eps);
    return 0;
}

static int BK_(rmsnorm_bwd)(void *state, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp, wf_dptr weight,
                           wf_dptr rstd, int N, int C) {
    KERN_(rmsnorm_bwd)(F_(dinp), F_(dweight), CF_(dout), CF_(inp), CF_(weight), CF_(rstd), N, C);
    return 0;
}

static int BK_(rope_table)(void *state, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta) {
    wf_kern_rope_table(F_(cos_tab), F_(sin_tab), T, HD, theta);
    return 0;
}

static int BK_(rope_fwd)(void *state, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    KERN_(rope_fwd)(F_(x), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static int BK_(rope_bwd)(void *state, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                        int HD, int stride) {
    KERN_(rope_bwd)(F_(dx), CF_(cos_tab), CF_(sin_tab), B, T, n_heads, HD, stride);
    return 0;
}

static size_t BK_(attention_scratch)(void *state, int T, int n_threads) {
    return wf_kern_attention_scratch(T, n_threads);
}

static int BK_(attention_fwd)(void *state, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH, int NKV,
                             int HD, wf_dptr scratch, int n_threads) {
    KERN_(attention_fwd)(F_(out), F_(lse), CF_(qkv), B, T, NH, NKV, HD, F_(scratch), n_threads);
    return 0;
}

static int BK_(attention_bwd)(void *state, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out, wf_dptr lse,
                             int B, int T, int NH, int NKV, int HD, wf_dptr scratch, int n_threads) {
    KERN_(attention_bwd)(F_(dqkv), CF_(dout), CF_(qkv), CF_(out), CF_(lse), B, T, NH, NKV, HD, F_(scratch),
                          n_threads);
    return 0;
}

static int BK_(swiglu_fwd)(void *state, wf_dptr out, wf_dptr h13, int N, int H) {
    KERN_(swiglu_fwd)(F_(out), CF_(h13), N, H);
    return 0;
}

static int BK_(swiglu_bwd)(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    KERN_(swiglu_bwd)(F_(dh13), CF_(dout), CF_(h13), N, H);
    return 0;
}

static int BK_(embedding_fwd)(void *state, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C) {
    KERN_(embedding_fwd)(F_(out), I_(tokens), CF_(wte), N, C);
    return 0;
}

static int BK_(embedding_bwd)(void *state, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C) {
    KERN_(embedding_bwd)(F_(dwte), CF_(dout), I_(tokens), N, C);
    return 0;
}

static int BK_(crossentropy_fwd)(void *state, wf_dptr losses, wf_dptr lse, wf_dptr logits, wf_dptr targets, int N,
                                int V) {
    KERN_(crossentropy_fwd)(F_(losses), F_(lse), CF_(logits), I_(targets), N, V);
    return 0;
}

static int BK_(crossentropy_bwd)(void *state, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                                float dloss) {
    KERN_(crossentropy_bwd)(F_(logits), CF_(lse), I_(targets), N, V, dloss);
    return 0;
}

static int BK_(sumsq)(void *state, wf_dptr x, size_t n, double *out) {
    *out = KERN_(sumsq)(CF_(x), n);
    return 0;
}

static int BK_(first_nonfinite)(void *state, wf_dptr x, size_t n, size_t *index) {
    *index = wf_kern_first_nonfinite(CF_(x), n);
    return 0;
}

static int BK_(loss_sum)(void *state, wf_dptr losses, wf_dptr targets, size_t n, double *sum, size_t *n_valid) {
    wf_kern_loss_sum(CF_(losses), I_(targets), n, sum, n_valid);
    return 0;
}

static int BK_(add)(void *state, wf_dptr y, wf_dptr a, wf_dptr b, size_t n) {
    KERN_(add)(F_(y), CF_(a), CF_(b), n);
    return 0;
}

static int BK_(axpby)(void *state, wf_dptr y, wf_dptr x, float a, float b, size_t n) {
    KERN_(axpby)(F_(y), CF_(x), a, b, n);
    return 0;
}

/* f32 -> f32 is the only pair while f32 is the only dtype. */
static int BK_(cast)(void *state, wf_dptr dst, wf_dptr src, size_t n) {
    if (n && dst.p != src.p) memmove(dst.p, src.p, n * sizeof(float));
    return 0;
}

static int BK_(adamw)(void *state, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v, const wf_adamw_span *ranges,
                     int n_ranges, size_t total, wf_adamw_coef k) {
    KERN_(adamw)(F_(p), CF_(g), F_(m), F_(v), ranges, n_ranges, total, k);
    return 0;
}

#define BACKEND_HOST_OPS_                                 \
    .abi = WF_BACKEND_ABI,                                \
    .float_dtypes = 1u << WF_DTYPE_F32,                   \
    .alloc = wf__backend_host_alloc,                      \
    .free = wf__backend_host_free,                        \
    .upload = wf__backend_host_copy,                      \
    .download = wf__backend_host_copy,                    \
    .copy = wf__backend_host_copy,                        \
    .fill = wf__backend_host_fill,                        \
    .sync = wf__backend_host_sync,                        \
    .mem_info = wf__backend_host_mem_info,                \
    .mark = wf__backend_host_mark,                        \
    .mark_seconds = wf__backend_host_mark_seconds,        \
    .rmsnorm_fwd = BK_(rmsnorm_fwd),                      \
    .rmsnorm_bwd = BK_(rmsnorm_bwd),                      \
    .rope_table = BK_(rope_table),                        \
    .rope_fwd = BK_(rope_fwd),                            \
    .rope_bwd = BK_(rope_bwd),                            \
    .attention_scratch = BK_(attention_scratch),          \
    .attention_fwd = BK_(attention_fwd),                  \
    .attention_bwd = BK_(attention_bwd),                  \
    .swiglu_fwd = BK_(swiglu_fwd),                        \
    .swiglu_bwd = BK_(swiglu_bwd),                        \
    .embedding_fwd = BK_(embedding_fwd),                  \
    .embedding_bwd = BK_(embedding_bwd),                  \
    .crossentropy_fwd = BK_(crossentropy_fwd),            \
    .crossentropy_bwd = BK_(crossentropy_bwd),            \
    .sumsq = BK_(sumsq),                                  \
    .first_nonfinite = BK_(first_nonfinite),              \
    .loss_sum = BK_(loss_sum),                            \
    .add = BK_(add),                                      \
    .axpby = BK_(axpby),                                  \
    .cast = BK_(cast),                                    \
    .adamw = BK_(adamw)
