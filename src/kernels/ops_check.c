/* `weft ops-check`: every op of a backend against the same op of `ref` on
 * the same random inputs (wf_backend_ops_check, include/weft/backend.h).
 *
 * A case is an op, a shape, and its arguments: arrays of floats or ids,
 * each an input, an output (given random contents first, so that an op
 * that leaves part of an output unwritten, or accumulates where it should
 * overwrite, shows), or scratch. For each backend the arrays are allocated
 * in its memory, uploaded from the same host arrays, the op runs, and the
 * outputs come back to be compared, each by its normalised error
 * sum((x - r)^2) / sum(r^2) (ggml's test-backend-ops measure). Scalar
 * results (sums, counts, indices) are compared the same way.
 *
 * Shapes are chosen to leave tails: T = 67 and 130 (attention's tiles are
 * 64 rows), n_kv_heads < n_heads, widths such as 61, 45 and 515 (past the
 * cross-entropy's chunk of 512) that are not multiples of 4 or 8.
 *
 * The thresholds, f32 (docs/model.md, "Checking a backend"): the cpu
 * kernels sum in fp32 vector lanes and use a 1.3-ulp exp where ref sums in
 * double with libm, which gives normalised errors near 1e-14; 1e-10 (a
 * relative RMS error of 1e-5) leaves room for other summation orders and
 * is far below what a wrong index, a missing term or a wrong scale gives
 * (1e-3 and up). Reductions in double (sumsq) must agree to 1e-20, and
 * counts and indices exactly.
 *
 * bf16 (for a backend that declares it: matmul, attention, cast). The
 * case's `low` arguments are bf16 on the checked backend; every backend
 * gets the same values, rounded to bf16 on the host (inputs and the
 * initial contents of outputs), and ref computes in f32 on them. So the
 * only difference allowed is the rounding of a bf16 output (8 significant
 * bits), which moves each element by at most 2^-8 of itself: a normalised
 * error of at most 2^-16 = 1.53e-5, hence the threshold 1.6e-5 (the fp32
 * math differs by 1e-13; rounding errors spread evenly give about 2e-6).
 * An element left unwritten or computed from a wrong index gives 1e-2 and
 * up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_impl.h"
#include "weft/rng.h"
#include "weft/trace.h"

#define OC_ARGS_ 8
#define OC_SCALARS_ 2
#define TOL_F32_ 1e-10
#define TOL_F64_ 1e-20
#define TOL_BF16_ 1.6e-5

typedef enum { ARG_IN, ARG_IDS, ARG_OUT, ARG_SCRATCH } arg_kind_;

typedef struct {
    const char *name;
    arg_kind_ kind;
    size_t n;      /* elements (ARG_SCRATCH: from the backend, see scratch_T) */
    float lo, hi;  /* uniform range of the initial values */
    int id_max;    /* ARG_IDS: ids in [id_neg ? -1 : 0, id_max) */
    int id_neg;
    int low;       /* has the case's dtype (bf16) on the checked backend */
} arg_;

struct case_;
typedef wf_status (*run_fn_)(wf_backend *be, const struct case_ *c, wf_dptr *a, double *scalars);

typedef struct case_ {
    const char *op;
    char shape[96];
    int n_args;
    arg_ args[OC_ARGS_];
    int n_scalars;
    const char *scalar_names[OC_SCALARS_];
    double scalar_tol[OC_SCALARS_];
    int i[8];        /* the op's sizes, by op */
    float f[2];      /* its float parameters */
    double threshold;
    wf_dtype dtype;  /* f32, or bf16: the args marked `low` are bf16 on the checked backend */
    double flops, bytes; /* per call, for --perf */
    run_fn_ run;
    /* Fixes host inputs after the random fill (consistent forward outputs
     * for a backward, a planted non-finite value), with ref's ops on host
     * memory. */
    wf_status (*prep)(wf_backend *ref, const struct case_ *c, float **host);
    wf_matmul_desc mm;
    wf_adamw_span spans[3];
} case_;

/* ------------------------------------------------------------ runners */

#define A_(k) a[k]

static wf_status run_matmul(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    wf_matmul_desc d = c->mm;
    d.a = A_(0), d.b = A_(1), d.c = A_(2);
    return wf_backend_matmul(be, &d);
}
static wf_status run_rmsnorm_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_rmsnorm_fwd(be, A_(0), A_(1), A_(2), A_(3), c->i[0], c->i[1], c->f[0]);
}
static wf_status run_rmsnorm_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_rmsnorm_bwd(be, A_(0), A_(1), A_(2), A_(3), A_(4), A_(5), c->i[0], c->i[1]);
}
static wf_status run_rope_table(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_rope_table(be, A_(0), A_(1), c->i[1], c->i[3], c->f[0]);
}
static wf_status run_rope_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_rope_fwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4]);
}
static wf_status run_rope_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_rope_bwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4]);
}
static wf_status run_attention_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_attention_fwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4], A_(3),
                                    c->i[5]);
}
static wf_status run_attention_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_attention_bwd(be, A_(0), A_(1), A_(2), A_(3), A_(4), c->i[0], c->i[1], c->i[2], c->i[3],
                                    c->i[4], A_(5), c->i[5]);
}
static wf_status run_swiglu_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_swiglu_fwd(be, A_(0), A_(1), c->i[0], c->i[1]);
}
static wf_status run_swiglu_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_swiglu_bwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1]);
}
static wf_status run_embedding_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_embedding_fwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1]);
}
static wf_status run_embedding_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_embedding_bwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1]);
}
static wf_status run_crossentropy_fwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_crossentropy_fwd(be, A_(0), A_(1), A_(2), A_(3), c->i[0], c->i[1]);
}
static wf_status run_crossentropy_bwd(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_crossentropy_bwd(be, A_(0), A_(1), A_(2), c->i[0], c->i[1], c->f[0]);
}
static wf_status run_sumsq(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_sumsq(be, A_(0), (size_t)c->i[0], &s[0]);
}
static wf_status run_first_nonfinite(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    size_t idx = 0;
    WF_TRY(wf_backend_first_nonfinite(be, A_(0), (size_t)c->i[0], &idx));
    s[0] = (double)idx;
    return WF_OK;
}
static wf_status run_loss_sum(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    size_t n_valid = 0;
    WF_TRY(wf_backend_loss_sum(be, A_(0), A_(1), (size_t)c->i[0], &s[0], &n_valid));
    s[1] = (double)n_valid;
    return WF_OK;
}
static wf_status run_add(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_add(be, A_(0), A_(1), A_(2), (size_t)c->i[0]);
}
static wf_status run_axpby(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_axpby(be, A_(0), A_(1), c->f[0], c->f[1], (size_t)c->i[0]);
}
static wf_status run_cast(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    return wf_backend_cast(be, A_(0), A_(1), (size_t)c->i[0]);
}
static wf_status run_adamw(wf_backend *be, const case_ *c, wf_dptr *a, double *s) {
    wf_adamw_coef k = {.decay = 0.999f, .clip = 0.5f, .b1 = 0.9f, .a1 = 0.1f, .b2 = 0.95f, .a2 = 0.05f,
                       .bc2_sqrt = 0.3122499f, .eps = 1e-8f, .step = -0.0052631579f};
    return wf_backend_adamw(be, A_(0), A_(1), A_(2), A_(3), c->spans, 3, (size_t)c->i[0], k);
}

/* Consistent forward outputs for the backwards, from ref on host memory. */
static wf_status prep_attention_bwd(wf_backend *ref, const case_ *c, float **h) {
    size_t scratch = wf_backend_attention_scratch(ref, c->i[1], 1);
    float *tmp = calloc(scratch ? scratch : 1, sizeof *tmp);
    if (!tmp) return wf_error(WF_ERR_NOMEM, "ops-check: attention scratch");
    wf_status s = wf_backend_attention_fwd(ref, wf_f32(h[3]), wf_f32(h[4]), wf_f32(h[2]), c->i[0], c->i[1],
                                           c->i[2], c->i[3], c->i[4], wf_f32(tmp), 1);
    free(tmp);
    return s;
}
static wf_status prep_crossentropy_bwd(wf_backend *ref, const case_ *c, float **h) {
    float *losses = calloc((size_t)c->i[0], sizeof *losses);
    if (!losses) return wf_error(WF_ERR_NOMEM, "ops-check: losses");
    wf_status s = wf_backend_crossentropy_fwd(ref, wf_f32(losses), wf_f32(h[1]), wf_f32(h[0]),
                                              wf_i32((const int32_t *)h[2]), c->i[0], c->i[1]);
    free(losses);
    return s;
}
static wf_status prep_first_nonfinite(wf_backend *ref, const case_ *c, float **h) {
    h[0][c->i[1]] = NAN;
    h[0][c->i[1] + 3] = INFINITY;
    return WF_OK;
}

/* axpby with b = 0: y's old values are NaN and must not reach the result. */
static wf_status prep_axpby_nan(wf_backend *ref, const case_ *c, float **h) {
    (void)ref;
    for (int i = 0; i < c->i[0]; i += 7) h[0][i] = NAN;
    return WF_OK;
}

/* ------------------------------------------------------------- cases */

static const char *const op_names_[] = {
    "matmul",     "rmsnorm_fwd", "rmsnorm_bwd", "rope_table",     "rope_fwd",        "rope_bwd",
    "attention_fwd", "attention_bwd", "swiglu_fwd", "swiglu_bwd", "embedding_fwd", "embedding_bwd",
    "crossentropy_fwd", "crossentropy_bwd", "sumsq", "first_nonfinite", "loss_sum", "add", "axpby", "cast", "adamw",
    NULL};

const char *const *wf_backend_op_names(void) { return op_names_; }

static arg_ in_(const char *name, size_t n, float lo, float hi) { return (arg_){name, ARG_IN, n, lo, hi, 0, 0}; }
static arg_ out_(const char *name, size_t n) { return (arg_){name, ARG_OUT, n, -1, 1, 0, 0}; }
static arg_ ids_(const char *name, size_t n, int max, int neg) { return (arg_){name, ARG_IDS, n, 0, 0, max, neg}; }

static void add_arg(case_ *c, arg_ a) { c->args[c->n_args++] = a; }

/* c in bf16: the arguments named in `low` (space-separated) are bf16. */
static case_ bf16_(case_ c, const char *low) {
    c.dtype = WF_DTYPE_BF16;
    c.threshold = TOL_BF16_;
    size_t len = strlen(c.shape);
    snprintf(c.shape + len, sizeof c.shape - len, " bf16=%s", low);
    for (int k = 0; k < c.n_args; k++) {
        size_t n = strlen(c.args[k].name);
        for (const char *p = strstr(low, c.args[k].name); p; p = strstr(p + 1, c.args[k].name))
            if ((p == low || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) c.args[k].low = 1;
    }
    return c;
}

/* bf16 <-> f32, round to nearest even (NaN kept quiet). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static case_ base_(const char *op, run_fn_ run) {
    case_ c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.run = run;
    c.threshold = TOL_F32_;
    return c;
}

/* A matmul case: C (m, n) of a batch, with A and B stored as the
 * transposes say, row strides padded by `pad`. */
static case_ mm_case(int m, int n, int k, int ta, int tb, int batch, int pad, float alpha, int acc) {
    case_ c = base_("matmul", run_matmul);
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t ra = (size_t)(ta ? k : m), rb = (size_t)(tb ? n : k);
    int nb = batch > 0 ? batch : 1;
    c.mm = (wf_matmul_desc){.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .lda = lda, .ldb = ldb,
                            .ldc = ldc, .batch = batch, .stride_a = (int64_t)ra * lda, .stride_b = (int64_t)rb * ldb,
                            .stride_c = (int64_t)m * ldc, .alpha = alpha, .accumulate = acc};
    add_arg(&c, in_("a", (size_t)nb * ra * (size_t)lda, -1, 1));
    add_arg(&c, in_("b", (size_t)nb * rb * (size_t)ldb, -1, 1));
    add_arg(&c, out_("c", (size_t)nb * (size_t)m * (size_t)ldc));
    snprintf(c.shape, sizeof c.shape, "m=%d n=%d k=%d%s%s batch=%d pad=%d alpha=%g%s", m, n, k, ta ? " ta" : "",
             tb ? " tb" : "", nb, pad, alpha, acc ? " +=" : "");
    c.flops = 2.0 * m * n * k * nb;
    return c;
}

static case_ rmsnorm_case(int fwd, int N, int C) {
    case_ c = base_(fwd ? "rmsnorm_fwd" : "rmsnorm_bwd", fwd ? run_rmsnorm_fwd : run_rmsnorm_bwd);
    size_t nc = (size_t)N * C;
    c.i[0] = N, c.i[1] = C, c.f[0] = 1e-5f;
    if (fwd) {
        add_arg(&c, out_("out", nc));
        add_arg(&c, out_("rstd", (size_t)N));
        add_arg(&c, in_("inp", nc, -2, 2));
        add_arg(&c, in_("weight", (size_t)C, 0.5f, 1.5f));
    } else {
        add_arg(&c, out_("dinp", nc));
        add_arg(&c, out_("dweight", (size_t)C));
        add_arg(&c, in_("dout", nc, -1, 1));
        add_arg(&c, in_("inp", nc, -2, 2));
        add_arg(&c, in_("weight", (size_t)C, 0.5f, 1.5f));
        add_arg(&c, in_("rstd", (size_t)N, 0.5f, 2));
    }
    snprintf(c.shape, sizeof c.shape, "N=%d C=%d", N, C);
    c.bytes = 4.0 * (fwd ? 2 : 4) * (double)nc;
    return c;
}

/* i: B, T, n_heads (NH + NKV for rope), HD, stride, threads; NH, NKV. */
static case_ rope_case(int which, int B, int T, int NH, int NKV, int HD) {
    static const char *const names[] = {"rope_table", "rope_fwd", "rope_bwd"};
    static const run_fn_ runs[] = {run_rope_table, run_rope_fwd, run_rope_bwd};
    case_ c = base_(names[which], runs[which]);
    int stride = (NH + 2 * NKV) * HD;
    size_t tab = (size_t)T * (size_t)(HD / 2);
    c.i[0] = B, c.i[1] = T, c.i[2] = NH + NKV, c.i[3] = HD, c.i[4] = stride, c.f[0] = 10000.0f;
    if (which == 0) {
        add_arg(&c, out_("cos", tab));
        add_arg(&c, out_("sin", tab));
        snprintf(c.shape, sizeof c.shape, "T=%d HD=%d theta=1e4", T, HD);
    } else {
        add_arg(&c, out_(which == 1 ? "x" : "dx", (size_t)B * T * stride));
        add_arg(&c, in_("cos", tab, -1, 1));
        add_arg(&c, in_("sin", tab, -1, 1));
        snprintf(c.shape, sizeof c.shape, "B=%d T=%d heads=%d+%d HD=%d stride=%d", B, T, NH, NKV, HD, stride);
    }
    c.bytes = 8.0 * B * T * (NH + NKV) * HD;
    return c;
}

static case_ attention_case(int fwd, int B, int T, int NH, int NKV, int HD, int threads) {
    case_ c = base_(fwd ? "attention_fwd" : "attention_bwd", fwd ? run_attention_fwd : run_attention_bwd);
    size_t qkv = (size_t)B * T * (NH + 2 * NKV) * HD, o = (size_t)B * T * NH * HD, lse = (size_t)B * NH * T;
    c.i[0] = B, c.i[1] = T, c.i[2] = NH, c.i[3] = NKV, c.i[4] = HD, c.i[5] = threads;
    arg_ scratch = {"scratch", ARG_SCRATCH, 0, 0, 0, T, 0}; /* id_max: the T of the scratch */
    if (fwd) {
        add_arg(&c, out_("out", o));
        add_arg(&c, out_("lse", lse));
        add_arg(&c, in_("qkv", qkv, -2, 2));
    } else {
        add_arg(&c, out_("dqkv", qkv));
        add_arg(&c, in_("dout", o, -1, 1));
        add_arg(&c, in_("qkv", qkv, -2, 2));
        add_arg(&c, in_("out", o, 0, 0)); /* prep: the forward's */
        add_arg(&c, in_("lse", lse, 0, 0));
        c.prep = prep_attention_bwd;
    }
    add_arg(&c, scratch);
    snprintf(c.shape, sizeof c.shape, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    c.flops = (fwd ? 2.0 : 5.0) * 2.0 * B * NH * (double)T * (T + 1) / 2 * HD;
    return c;
}

static case_ swiglu_case(int fwd, int N, int H) {
    case_ c = base_(fwd ? "swiglu_fwd" : "swiglu_bwd", fwd ? run_swiglu_fwd : run_swiglu_bwd);
    c.i[0] = N, c.i[1] = H;
    size_t nh = (size_t)N * H;
    if (fwd) {
        add_arg(&c, out_("out", nh));
    } else {
        add_arg(&c, out_("dh13", 2 * nh));
        add_arg(&c, in_("dout", nh, -1, 1));
    }
    add_arg(&c, in_("h13", 2 * nh, -6, 6));
    snprintf(c.shape, sizeof c.shape, "N=%d H=%d", N, H);
    c.bytes = 4.0 * (fwd ? 3 : 5) * (double)nh;
    return c;
}

static case_ embedding_case(int fwd, int N, int C, int V) {
    case_ c = base_(fwd ? "embedding_fwd" : "embedding_bwd", fwd ? run_embedding_fwd : run_embedding_bwd);
    c.i[0] = N, c.i[1] = C;
    if (fwd) {
        add_arg(&c, out_("out", (size_t)N * C));
        add_arg(&c, ids_("tokens", (size_t)N, V, 0));
        add_arg(&c, in_("wte", (size_t)V * C, -1, 1));
    } else {
        add_arg(&c, out_("dwte", (size_t)V * C));
        add_arg(&c, in_("dout", (size_t)N * C, -1, 1));
        add_arg(&c, ids_("tokens", (size_t)N, V, 0));
    }
    snprintf(c.shape, sizeof c.shape, "N=%d C=%d V=%d", N, C, V);
    c.bytes = 4.0 * (fwd ? 2 : 3) * N * (double)C;
    return c;
}

static case_ crossentropy_case(int fwd, int N, int V) {
    case_ c = base_(fwd ? "crossentropy_fwd" : "crossentropy_bwd", fwd ? run_crossentropy_fwd : run_crossentropy_bwd);
    c.i[0] = N, c.i[1] = V, c.f[0] = 1.0f / (float)N;
    size_t nv = (size_t)N * V;
    if (fwd) {
        add_arg(&c, out_("losses", (size_t)N));
        add_arg(&c, out_("lse", (size_t)N));
        add_arg(&c, in_("logits", nv, -8, 8));
        add_arg(&c, ids_("targets", (size_t)N, V, 1));
    } else {
        add_arg(&c, (arg_){"logits", ARG_OUT, nv, -8, 8, 0, 0});
        add_arg(&c, in_("lse", (size_t)N, 0, 0)); /* prep: the forward's */
        add_arg(&c, ids_("targets", (size_t)N, V, 1));
        c.prep = prep_crossentropy_bwd;
    }
    snprintf(c.shape, sizeof c.shape, "N=%d V=%d", N, V);
    c.bytes = 4.0 * (fwd ? 1 : 2) * (double)nv;
    return c;
}

static case_ vector_case(const char *op, run_fn_ run, int n) {
    case_ c = base_(op, run);
    c.i[0] = n;
    snprintf(c.shape, sizeof c.shape, "n=%d", n);
    if (strcmp(op, "sumsq") == 0) {
        add_arg(&c, in_("x", (size_t)n, -2, 2));
        c.n_scalars = 1, c.scalar_names[0] = "sum", c.scalar_tol[0] = TOL_F64_;
        c.bytes = 4.0 * n;
    } else if (strcmp(op, "first_nonfinite") == 0) {
        add_arg(&c, in_("x", (size_t)n, -2, 2));
        c.i[1] = n * 3 / 4;
        c.prep = prep_first_nonfinite;
        c.n_scalars = 1, c.scalar_names[0] = "index", c.scalar_tol[0] = 0;
        c.bytes = 4.0 * n;
    } else if (strcmp(op, "loss_sum") == 0) {
        add_arg(&c, in_("losses", (size_t)n, 0, 10));
        add_arg(&c, ids_("targets", (size_t)n, 5, 1));
        c.n_scalars = 2, c.scalar_names[0] = "sum", c.scalar_names[1] = "n_valid";
        c.scalar_tol[0] = TOL_F64_, c.scalar_tol[1] = 0;
        c.bytes = 8.0 * n;
    } else if (strcmp(op, "add") == 0) {
        add_arg(&c, out_("y", (size_t)n));
        add_arg(&c, in_("a", (size_t)n, -1, 1));
        add_arg(&c, in_("b", (size_t)n, -1, 1));
        c.bytes = 12.0 * n;
    } else if (strcmp(op, "axpby") == 0) {
        /* b == 0 (y not read) is a case of its own: see make_cases */
        add_arg(&c, out_("y", (size_t)n));
        add_arg(&c, in_("x", (size_t)n, -1, 1));
        c.f[0] = -0.75f, c.f[1] = 0.95f;
        c.bytes = 12.0 * n;
    } else if (strcmp(op, "cast") == 0) {
        add_arg(&c, out_("dst", (size_t)n));
        add_arg(&c, in_("src", (size_t)n, -1, 1));
        c.bytes = 8.0 * n;
    } else { /* adamw: three spans, the middle one without decay */
        add_arg(&c, out_("p", (size_t)n));
        add_arg(&c, in_("g", (size_t)n, -1, 1));
        add_arg(&c, out_("m", (size_t)n));
        add_arg(&c, (arg_){"v", ARG_OUT, (size_t)n, 0, 0.1f, 0, 0});
        size_t a = (size_t)n / 3, b = (size_t)n / 3 + 5;
        c.spans[0] = (wf_adamw_span){0, a, 1};
        c.spans[1] = (wf_adamw_span){a, b - a, 0};
        c.spans[2] = (wf_adamw_span){b, (size_t)n - b, 1};
        c.bytes = 28.0 * n;
    }
    return c;
}

/* Every case of the check (big = 0) or the perf shapes (big = 1), into
 * out (room for 64), with the bf16 ones when `bf16`; returns how many. */
static int make_cases(case_ *out, int big, int threads, int bf16) {
    int n = 0;
    if (!big && bf16) {
        out[n++] = bf16_(mm_case(67, 37, 29, 0, 1, 0, 0, 1.0f, 0), "a b c");
        out[n++] = bf16_(mm_case(33, 45, 67, 1, 0, 0, 3, 1.0f, 1), "a b c");
        out[n++] = bf16_(mm_case(5, 7, 3, 1, 1, 3, 1, 0.5f, 0), "a b"); /* fp32 out */
        out[n++] = bf16_(attention_case(1, 2, 67, 6, 2, 10, threads), "out qkv");
        out[n++] = bf16_(attention_case(0, 1, 130, 3, 1, 6, threads), "dqkv dout qkv out");
        out[n++] = bf16_(vector_case("cast", run_cast, 1003), "dst");
        out[n++] = bf16_(vector_case("cast", run_cast, 1003), "src");
    }
    if (!big) {
        out[n++] = mm_case(67, 37, 29, 0, 1, 0, 0, 1.0f, 0);
        out[n++] = mm_case(33, 45, 67, 1, 0, 0, 3, 1.0f, 1);
        out[n++] = mm_case(5, 7, 3, 1, 1, 3, 1, 0.5f, 0);
        out[n++] = mm_case(1, 129, 65, 0, 0, 0, 0, 1.0f, 1);
        out[n++] = mm_case(9, 11, 0, 0, 1, 0, 0, 1.0f, 0);
        out[n++] = rmsnorm_case(1, 67, 61);
        out[n++] = rmsnorm_case(1, 3, 1029);
        out[n++] = rmsnorm_case(0, 67, 61);
        out[n++] = rmsnorm_case(0, 5, 1029);
        out[n++] = rope_case(0, 1, 67, 6, 2, 10);
        out[n++] = rope_case(1, 2, 67, 6, 2, 10);
        out[n++] = rope_case(2, 2, 67, 6, 2, 10);
        out[n++] = attention_case(1, 2, 67, 6, 2, 10, threads);
        out[n++] = attention_case(1, 1, 130, 3, 1, 6, threads);
        out[n++] = attention_case(0, 2, 67, 6, 2, 10, threads);
        out[n++] = attention_case(0, 1, 130, 3, 1, 6, threads);
        out[n++] = swiglu_case(1, 67, 45);
        out[n++] = swiglu_case(0, 67, 45);
        out[n++] = embedding_case(1, 67, 61, 37);
        out[n++] = embedding_case(0, 67, 61, 37);
        out[n++] = crossentropy_case(1, 67, 515);
        out[n++] = crossentropy_case(0, 67, 515);
        out[n++] = vector_case("sumsq", run_sumsq, 100003);
        out[n++] = vector_case("sumsq", run_sumsq, 13);
        out[n++] = vector_case("first_nonfinite", run_first_nonfinite, 1001);
        out[n++] = vector_case("loss_sum", run_loss_sum, 67);
        out[n++] = vector_case("add", run_add, 1003);
        out[n++] = vector_case("axpby", run_axpby, 1003);
        out[n] = vector_case("axpby", run_axpby, 100003);
        out[n].f[1] = 0.0f; /* y = a x: y's old values (some NaN) must not count */
        out[n].prep = prep_axpby_nan;
        snprintf(out[n].shape, sizeof out[n].shape, "n=100003 b=0");
        n++;
        out[n++] = vector_case("cast", run_cast, 1003);
        out[n++] = vector_case("adamw", run_adamw, 100003);
    } else {
        out[n++] = mm_case(2048, 768, 768, 0, 1, 0, 0, 1.0f, 0);
        out[n++] = mm_case(768, 768, 2048, 1, 0, 0, 0, 1.0f, 1);
        out[n++] = rmsnorm_case(1, 2048, 768);
        out[n++] = rmsnorm_case(0, 2048, 768);
        out[n++] = rope_case(0, 1, 1024, 12, 4, 64);
        out[n++] = rope_case(1, 4, 512, 12, 4, 64);
        out[n++] = rope_case(2, 4, 512, 12, 4, 64);
        out[n++] = attention_case(1, 4, 512, 12, 4, 64, threads);
        out[n++] = attention_case(0, 4, 512, 12, 4, 64, threads);
        out[n++] = swiglu_case(1, 2048, 2048);
        out[n++] = swiglu_case(0, 2048, 2048);
        out[n++] = embedding_case(1, 2048, 768, 50257);
        out[n++] = embedding_case(0, 2048, 768, 50257);
        out[n++] = crossentropy_case(1, 256, 50257);
        out[n++] = crossentropy_case(0, 256, 50257);
        out[n++] = vector_case("sumsq", run_sumsq, 1 << 24);
        out[n++] = vector_case("first_nonfinite", run_first_nonfinite, 1 << 24);
        out[n++] = vector_case("loss_sum", run_loss_sum, 1 << 16);
        out[n++] = vector_case("add", run_add, 1 << 24);
        out[n++] = vector_case("axpby", run_axpby, 1 << 24);
        out[n++] = vector_case("cast", run_cast, 1 << 24);
        out[n++] = vector_case("adamw", run_adamw, 1 << 24);
    }
    return n;
}

/* ------------------------------------------------------------ the engine */

typedef struct {
    float *host[OC_ARGS_];   /* the initial contents, shared by both runs */
    float *result[2][OC_ARGS_]; /* outputs downloaded from each backend */
    double scalars[2][OC_SCALARS_];
} case_data_;

static size_t arg_elems(wf_backend *be, const case_ *c, const arg_ *a) {
    return a->kind == ARG_SCRATCH ? wf_backend_attention_scratch(be, a->id_max, c->i[5]) : a->n;
}

static void free_data(case_data_ *d) {
    for (int k = 0; k < OC_ARGS_; k++) {
        free(d->host[k]);
        free(d->result[0][k]);
        free(d->result[1][k]);
    }
}

/* A bf16 case's low arguments hold bf16 values for every backend. */
static void round_low(const case_ *c, case_data_ *d) {
    for (int k = 0; k < c->n_args && c->dtype == WF_DTYPE_BF16; k++)
        if (c->args[k].low)
            for (size_t i = 0; i < c->args[k].n; i++) d->host[k][i] = from_bf16(to_bf16(d->host[k][i]));
}

static wf_status fill_host(const case_ *c, wf_backend *ref, uint64_t seed, case_data_ *d) {
    for (int k = 0; k < c->n_args; k++) {
        const arg_ *a = &c->args[k];
        if (a->kind == ARG_SCRATCH) continue;
        d->host[k] = malloc((a->n ? a->n : 1) * sizeof(float));
        if (!d->host[k]) return wf_error(WF_ERR_NOMEM, "ops-check: %s: %zu elements of %s", c->op, a->n, a->name);
        wf_rng r = wf_rng_make(seed, (uint64_t)k + 1);
        if (a->kind == ARG_IDS) {
            int32_t *ids = (int32_t *)(void *)d->host[k];
            for (size_t i = 0; i < a->n; i++) {
                int lo = a->id_neg ? -1 : 0;
                ids[i] = lo + (int32_t)(wf_rng_u64(&r) % (uint64_t)(a->id_max - lo));
            }
        } else {
            for (size_t i = 0; i < a->n; i++) d->host[k][i] = a->lo + (a->hi - a->lo) * wf_rng_uniform(&r);
        }
    }
    round_low(c, d);
    wf_status s = c->prep ? c->prep(ref, c, d->host) : WF_OK;
    round_low(c, d); /* the forward outputs prep made for a backward */
    return s;
}

static wf_status upload_bf16(wf_backend *be, void *dst, const float *src, size_t n) {
    uint16_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return wf_error(WF_ERR_NOMEM, "ops-check: %zu bf16 values", n);
    for (size_t i = 0; i < n; i++) tmp[i] = to_bf16(src[i]);
    wf_status s = wf_backend_upload(be, dst, tmp, n * sizeof *tmp);
    free(tmp);
    return s;
}

static wf_status download_bf16(wf_backend *be, float *dst, const void *src, size_t n) {
    uint16_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return wf_error(WF_ERR_NOMEM, "ops-check: %zu bf16 values", n);
    wf_status s = wf_backend_download(be, tmp, src, n * sizeof *tmp);
    for (size_t i = 0; i < n && s == WF_OK; i++) dst[i] = from_bf16(tmp[i]);
    free(tmp);
    return s;
}

/* Runs case c on be from the host arrays; outputs into d->result[slot].
 * With reps > 0, times the op (the best of reps calls) into *seconds. */
static wf_status run_on(wf_backend *be, const case_ *c, case_data_ *d, int slot, int reps, double *seconds) {
    void *dev[OC_ARGS_] = {0};
    wf_dptr args[OC_ARGS_];
    wf_status s = WF_OK;
    for (int k = 0; k < c->n_args && s == WF_OK; k++) {
        const arg_ *a = &c->args[k];
        int low = a->low && slot == 0 && c->dtype == WF_DTYPE_BF16;
        size_t bytes = (arg_elems(be, c, a) ? arg_elems(be, c, a) : 1) * (low ? 2 : sizeof(float));
        s = wf_backend_alloc(be, bytes, &dev[k]);
        if (s == WF_OK && low) s = upload_bf16(be, dev[k], d->host[k], a->n);
        else if (s == WF_OK && a->kind != ARG_SCRATCH) s = wf_backend_upload(be, dev[k], d->host[k], a->n * sizeof(float));
        args[k] = (wf_dptr){dev[k], a->kind == ARG_IDS ? WF_DTYPE_I32 : low ? WF_DTYPE_BF16 : WF_DTYPE_F32};
    }
    if (s == WF_OK) s = c->run(be, c, args, d->scalars[slot]);
    if (s == WF_OK) s = wf_backend_sync(be);
    for (int r = 0; r < reps && s == WF_OK; r++) {
        wf_backend_mark t0 = wf_backend_mark_now(be);
        s = c->run(be, c, args, d->scalars[slot]);
        if (s == WF_OK) s = wf_backend_sync(be);
        wf_backend_mark t1 = wf_backend_mark_now(be);
        double t = wf_backend_mark_seconds(be, t0, t1);
        if (r == 0 || t < *seconds) *seconds = t;
    }
    for (int k = 0; k < c->n_args && s == WF_OK && !reps; k++) {
        if (c->args[k].kind != ARG_OUT) continue;
        d->result[slot][k] = malloc((c->args[k].n ? c->args[k].n : 1) * sizeof(float));
        if (!d->result[slot][k]) s = wf_error(WF_ERR_NOMEM, "ops-check: %s: result %s", c->op, c->args[k].name);
        else if (args[k].dt == WF_DTYPE_BF16) s = download_bf16(be, d->result[slot][k], dev[k], c->args[k].n);
        else s = wf_backend_download(be, d->result[slot][k], dev[k], c->args[k].n * sizeof(float));
    }
    for (int k = 0; k < c->n_args; k++) wf_backend_free(be, dev[k]);
    return s;
}

/* sum((x - r)^2) / sum(r^2); 0 when both are all zero, inf when a value
 * is not finite in one but not the other. */
static double nmse(const double *x, const double *r, size_t n, int stride_x, const float *fx, const float *fr) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fx ? fx[i] : x[i * (size_t)stride_x], b = fr ? fr[i] : r[i * (size_t)stride_x];
        if (!isfinite(a) || !isfinite(b)) {
            if (isnan(a) && isnan(b)) continue;
            if (a == b) continue;
            return INFINITY;
        }
        num += (a - b) * (a - b);
        den += b * b;
    }
    if (num == 0) return 0;
    return den > 0 ? num / den : INFINITY;
}

static int op_known(const char *op) {
    for (const char *const *n = op_names_; *n; n++)
        if (strcmp(*n, op) == 0) return 1;
    return 0;
}

wf_status wf_backend_ops_check(wf_backend *be, wf_backend *ref, const char *op, int perf, uint64_t seed,
                               wf_ops_check_fn fn, void *ctx, int *n_failed) {
    *n_failed = 0;
    if (op && !op_known(op)) {
        char known[512] = "";
        for (const char *const *n = op_names_; *n; n++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", n == op_names_ ? "" : " ", *n);
        return wf_error(WF_ERR_NOTFOUND, "ops-check: no op '%s'; the ops: %s", op, known);
    }
    int threads = wf_kern_threads();
    case_ *cases = calloc(64, sizeof *cases);
    if (!cases) return wf_error(WF_ERR_NOMEM, "ops-check: the case table");
    int n_cases = make_cases(cases, perf, threads, (int)(be->ops->float_dtypes >> WF_DTYPE_BF16 & 1u));
    wf_status s = WF_OK;
    for (int i = 0; i < n_cases && s == WF_OK; i++) {
        const case_ *c = &cases[i];
        if (op && strcmp(op, c->op) != 0) continue;
        case_data_ d;
        memset(&d, 0, sizeof d);
        s = fill_host(c, ref, seed + (uint64_t)i, &d);
        wf_ops_check_result r;
        memset(&r, 0, sizeof r);
        snprintf(r.op, sizeof r.op, "%s", c->op);
        snprintf(r.shape, sizeof r.shape, "%s", c->shape);
        r.dtype = c->dtype;
        if (s == WF_OK && perf) {
            s = run_on(be, c, &d, 0, 3, &r.seconds);
            if (s == WF_OK) {
                snprintf(r.output, sizeof r.output, "perf");
                r.ok = 1;
                r.rate = r.seconds > 0 ? (c->flops > 0 ? c->flops : c->bytes) / r.seconds / 1e9 : 0;
                r.rate_unit = c->flops > 0 ? "GFLOP/s" : "GB/s";
                fn(ctx, &r);
            }
        } else if (s == WF_OK) {
            s = run_on(be, c, &d, 0, 0, NULL);
            if (s == WF_OK) s = run_on(ref, c, &d, 1, 0, NULL);
            for (int k = 0; k < c->n_args && s == WF_OK; k++) {
                if (c->args[k].kind != ARG_OUT) continue;
                snprintf(r.output, sizeof r.output, "%s", c->args[k].name);
                r.err = nmse(NULL, NULL, c->args[k].n, 1, d.result[0][k], d.result[1][k]);
                r.threshold = c->threshold;
                r.ok = r.err <= r.threshold;
                *n_failed += !r.ok;
                fn(ctx, &r);
            }
            for (int k = 0; k < c->n_scalars && s == WF_OK; k++) {
                snprintf(r.output, sizeof r.output, "%s", c->scalar_names[k]);
                r.err = nmse(&d.scalars[0][k], &d.scalars[1][k], 1, 1, NULL, NULL);
                r.threshold = c->scalar_tol[k];
                r.ok = r.err <= r.threshold;
                *n_failed += !r.ok;
                fn(ctx, &r);
            }
        }
        free_data(&d);
    }
    free(cases);
    return s;
}
