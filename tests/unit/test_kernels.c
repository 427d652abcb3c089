/* Unit tests for src/kernels: every op's backward against central finite
 * differences of its forward, every optimized kernel against its `_ref`
 * twin (forward and backward, accumulating outputs included), and the
 * non-BLAS kernels giving the same bits on 1 and 2 threads.
 *
 * Finite differences. For an op y = f(x) and fixed random weights R, the
 * objective L(x) = sum_i R_i y_i (summed in double) has dL/dx = backward(R).
 * Each checked coordinate gets fd = (L(x + h) - L(x - h)) / 2h with h =
 * 1e-2 on inputs of order 1. The error of fd has two parts: truncation,
 * h^2 |L'''| / 6 ~ 1e-5 for these smooth ops, and the fp32 rounding of the
 * few outputs x_k moves, ~ sqrt(k) u |y| / h ~ 1e-5 (u = 2^-24). Measured,
 * the worst coordinate of any op is 2e-5 of the gradient's scale (max
 * |dL/dx|); FD_TOL = 2e-4 of that scale leaves 10x, and a wrong or missing
 * term of a backward shows up as >= 1e-2.
 *
 * Twins. The optimized kernels sum in fp32 (sgemm, dot products in the
 * attention) where the twins sum in double. The longest fp32 sum here has
 * K = 70 terms: typical relative error sqrt(K) u ~ 5e-7, worst case K u ~
 * 4e-6. Measured, the worst element of any op is 2.1e-7 of the output's
 * scale; REF_TOL = 2e-6 leaves 10x, far below what a wrong index or a
 * dropped term gives (>= 1e-3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kern_impl.h"
#include "weft/kernels.h"
#include "weft/rng.h"

#define FD_H 1e-2
#define FD_TOL 2e-4
#define REF_TOL 2e-6

/* ------------------------------------------------------------- helpers */

static float *randn(size_t n, uint64_t stream, float mean, float std) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) wf_test_fail(__FILE__, __LINE__, "out of memory");
    wf_rng r = wf_rng_make(1234, stream);
    for (size_t i = 0; i < n; i++) p[i] = mean + std * wf_rng_normal(&r);
    return p;
}

static float *zeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) wf_test_fail(__FILE__, __LINE__, "out of memory");
    return p;
}

static float *copy_of(const float *src, size_t n) {
    float *p = zeros(n);
    memcpy(p, src, n * sizeof *p);
    return p;
}

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Fails unless max|got - want| <= tol * max|want| (or <= tol when want is 0). */
static void check_close(const char *what, const float *got, const float *want, size_t n,
                        double tol) {
    double scale = max_abs(want, n), worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e, at = i; /* NaN-safe: NaN becomes the worst */
    }
    if (!(worst <= tol * (scale > 0 ? scale : 1.0)))
        wf_test_fail(__FILE__, __LINE__, "%s: element %zu is %.9g, expected %.9g (error %.3g, scale %.3g, tol %.1g)",
                     what, at, got[at], want[at], worst, scale, tol);
}

static void check_same_bits(const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) != 0)
        wf_test_fail(__FILE__, __LINE__, "%s: the two results differ (they must have the same bits)", what);
}

/* ------------------------------------------------ finite-difference core */

typedef struct {
    const char *name;
    float *x;    /* the input, perturbed in place */
    float *grad; /* its analytic gradient, written by bwd */
    size_t n;
} fd_input;

/* An op under test: fwd computes out from the inputs; bwd computes every
 * input's gradient for dout = r, into grads the harness zeroes first. */
typedef struct fd_op {
    const char *name;
    float *out, *r;
    size_t n_out;
    fd_input in[3];
    int n_in;
    void (*fwd)(struct fd_op *op);
    void (*bwd)(struct fd_op *op);
} fd_op;

static double fd_objective(fd_op *op) {
    op->fwd(op);
    double L = 0.0;
    for (size_t i = 0; i < op->n_out; i++) L += (double)op->r[i] * op->out[i];
    return L;
}

/* Checks up to `samples` coordinates of every input (all when fewer). */
static void fd_check(fd_op *op, int samples) {
    op->fwd(op);
    for (int k = 0; k < op->n_in; k++) memset(op->in[k].grad, 0, op->in[k].n * sizeof(float));
    op->bwd(op);
    for (int k = 0; k < op->n_in; k++) {
        fd_input *in = &op->in[k];
        double scale = max_abs(in->grad, in->n);
        if (scale == 0) scale = 1;
        size_t step = in->n > (size_t)samples ? in->n / (size_t)samples : 1;
        for (size_t i = (step > 1 ? step / 2 : 0); i < in->n; i += step) {
            float keep = in->x[i];
            in->x[i] = keep + (float)FD_H;
            double hp = (double)in->x[i] - keep;
            double lp = fd_objective(op);
            in->x[i] = keep - (float)FD_H;
            double hm = keep - (double)in->x[i];
            double lm = fd_objective(op);
            in->x[i] = keep;
            double fd = (lp - lm) / (hp + hm);
            double err = fabs(fd - in->grad[i]);
            if (!(err <= FD_TOL * scale))
                wf_test_fail(__FILE__, __LINE__,
                             "%s: d/d%s[%zu]: backward %.9g, finite difference %.9g (error %.3g > %.1g x scale %.3g)",
                             op->name, in->name, i, in->grad[i], fd, err, FD_TOL, scale);
        }
    }
    op->fwd(op); /* leave out consistent with the unperturbed inputs */
}

/* ---------------------------------------------------------------- matmul */

typedef struct {
    fd_op op;
    int N, C, OC;
} mm_ctx;

static void mm_fwd(fd_op *op) {
    mm_ctx *c = (mm_ctx *)op;
    wf_kern_matmul_fwd(op->out, op->in[0].x, op->in[1].x, c->N, c->C, c->OC, 0);
}
static void mm_bwd(fd_op *op) {
    mm_ctx *c = (mm_ctx *)op;
    wf_kern_matmul_bwd(op->in[0].grad, op->in[1].grad, op->r, op->in[0].x, op->in[1].x, c->N,
                       c->C, c->OC, 0);
}

WF_TEST(matmul_backward_matches_finite_differences) {
    int N = 5, C = 7, OC = 6;
    mm_ctx c = {.N = N, .C = C, .OC = OC};
    c.op = (fd_op){"matmul", zeros((size_t)N * OC), randn((size_t)N * OC, 1, 0, 1), (size_t)N * OC,
                   {{"inp", randn((size_t)N * C, 2, 0, 1), zeros((size_t)N * C), (size_t)N * C},
                    {"weight", randn((size_t)OC * C, 3, 0, 1), zeros((size_t)OC * C), (size_t)OC * C}},
                   2, mm_fwd, mm_bwd};
    fd_check(&c.op, 1000);
    free(c.op.out), free(c.op.r);
    for (int k = 0; k < 2; k++) free(c.op.in[k].x), free(c.op.in[k].grad);
}

WF_TEST(matmul_matches_ref_and_accumulates) {
    int N = 33, C = 70, OC = 45;
    size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
    float *inp = randn(nI, 10, 0, 1), *w = randn(nW, 11, 0, 1), *dout = randn(nO, 12, 0, 1);
    float *init_out = randn(nO, 13, 0, 1), *init_dinp = randn(nI, 14, 0, 1),
          *init_dw = randn(nW, 15, 0, 1);
    for (int acc = 0; acc <= 1; acc++) {
        float *o1 = copy_of(init_out, nO), *o2 = copy_of(init_out, nO);
        wf_kern_matmul_fwd(o1, inp, w, N, C, OC, acc);
        wf_kern_matmul_fwd_ref(o2, inp, w, N, C, OC, acc);
        check_close(acc ? "matmul_fwd accumulate" : "matmul_fwd", o1, o2, nO, REF_TOL);
        float *di1 = copy_of(init_dinp, nI), *di2 = copy_of(init_dinp, nI);
        float *dw1 = copy_of(init_dw, nW), *dw2 = copy_of(init_dw, nW);
        wf_kern_matmul_bwd(di1, dw1, dout, inp, w, N, C, OC, acc);
        wf_kern_matmul_bwd_ref(di2, dw2, dout, inp, w, N, C, OC, acc);
        check_close("matmul_bwd dinp", di1, di2, nI, REF_TOL);
        check_close("matmul_bwd dweight (+=)", dw1, dw2, nW, REF_TOL);
        /* dinp may be NULL: only dweight is touched. */
        float *dw3 = copy_of(init_dw, nW);
        wf_kern_matmul_bwd(NULL, dw3, dout, inp, w, N, C, OC, acc);
        check_close("matmul_bwd without dinp", dw3, dw2, nW, REF_TOL);
        free(o1), free(o2), free(di1), free(di2), free(dw1), free(dw2), free(dw3);
    }
    /* The accumulating forward really adds: out = init + product. */
    float *plain = zeros(nO), *accd = copy_of(init_out, nO);
    wf_kern_matmul_fwd(plain, inp, w, N, C, OC, 0);
    wf_kern_matmul_fwd(accd, inp, w, N, C, OC, 1);
    for (size_t i = 0; i < nO; i++) plain[i] += init_out[i];
    check_close("matmul_fwd accumulate = init + product", accd, plain, nO, REF_TOL);
    free(plain), free(accd);
    free(inp), free(w), free(dout), free(init_out), free(init_dinp), free(init_dw);
}

/* --------------------------------------------------------------- RMSNorm */

typedef struct {
    fd_op op;
    int N, C;
    float eps;
    float *rstd;
} rms_ctx;

static void rms_fwd(fd_op *op) {
    rms_ctx *c = (rms_ctx *)op;
    wf_kern_rmsnorm_fwd(op->out, c->rstd, op->in[0].x, op->in[1].x, c->N, c->C, c->eps);
}
static void rms_bwd(fd_op *op) {
    rms_ctx *c = (rms_ctx *)op;
    wf_kern_rmsnorm_bwd(op->in[0].grad, op->in[1].grad, op->r, op->in[0].x, op->in[1].x, c->rstd,
                        c->N, c->C);
}

WF_TEST(rmsnorm_backward_matches_finite_differences) {
    int N = 4, C = 37; /* C crosses a column block of the weight gradient */
    size_t n = (size_t)N * C;
    rms_ctx c = {.N = N, .C = C, .eps = 1e-5f, .rstd = zeros((size_t)N)};
    c.op = (fd_op){"rmsnorm", zeros(n), randn(n, 20, 0, 1), n,
                   {{"inp", randn(n, 21, 0, 1), zeros(n), n},
                    {"weight", randn((size_t)C, 22, 1, 0.3f), zeros((size_t)C), (size_t)C}},
                   2, rms_fwd, rms_bwd};
    fd_check(&c.op, 1000);
    free(c.rstd), free(c.op.out), free(c.op.r);
    for (int k = 0; k < 2; k++) free(c.op.in[k].x), free(c.op.in[k].grad);
}

WF_TEST(rmsnorm_matches_ref_and_threads) {
    int N = 17, C = 70;
    size_t n = (size_t)N * C;
    float *x = randn(n, 30, 0, 2), *w = randn((size_t)C, 31, 1, 0.3f), *dy = randn(n, 32, 0, 1);
    float *dx0 = randn(n, 33, 0, 1), *dw0 = randn((size_t)C, 34, 0, 1);
    float *y1 = zeros(n), *y2 = zeros(n), *r1 = zeros((size_t)N), *r2 = zeros((size_t)N);
    wf_kern_rmsnorm_fwd(y1, r1, x, w, N, C, 1e-5f);
    wf_kern_rmsnorm_fwd_ref(y2, r2, x, w, N, C, 1e-5f);
    check_close("rmsnorm_fwd", y1, y2, n, REF_TOL);
    check_close("rmsnorm_fwd rstd", r1, r2, (size_t)N, REF_TOL);
    float *dx1 = copy_of(dx0, n), *dx2 = copy_of(dx0, n);
    float *dw1 = copy_of(dw0, (size_t)C), *dw2 = copy_of(dw0, (size_t)C);
    wf_kern_rmsnorm_bwd(dx1, dw1, dy, x, w, r2, N, C);
    wf_kern_rmsnorm_bwd_ref(dx2, dw2, dy, x, w, r2, N, C);
    check_close("rmsnorm_bwd dinp (+=)", dx1, dx2, n, REF_TOL);
    check_close("rmsnorm_bwd dweight (+=)", dw1, dw2, (size_t)C, REF_TOL);
    /* Same bits on one thread. */
    int nt_ = wf_kern_threads();
    wf_kern_set_threads(1);
    float *y3 = zeros(n), *r3 = zeros((size_t)N), *dx3 = copy_of(dx0, n), *dw3 = copy_of(dw0, (size_t)C);
    wf_kern_rmsnorm_fwd(y3, r3, x, w, N, C, 1e-5f);
    wf_kern_rmsnorm_bwd(dx3, dw3, dy, x, w, r2, N, C);
    wf_kern_set_threads(nt_);
    check_same_bits("rmsnorm_fwd 1 thread vs default", y3, y1, n);
    check_same_bits("rmsnorm_bwd dinp 1 thread vs default", dx3, dx1, n);
    check_same_bits("rmsnorm_bwd dweight 1 thread vs default", dw3, dw1, (size_t)C);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y1), free(y2), free(r1), free(r2);
    free(dx1), free(dx2), free(dw1), free(dw2), free(y3), free(r3), free(dx3), free(dw3);
}

/* ------------------------------------------------------------------ RoPE */

typedef struct {
    fd_op op;
    int B, T, n_heads, HD, stride;
    float *cos_tab, *sin_tab;
} rope_ctx;

static void rope_fwd(fd_op *op) {
    rope_ctx *c = (rope_ctx *)op;
    memcpy(op->out, op->in[0].x, op->n_out * sizeof(float));
    wf_kern_rope_fwd(op->out, c->cos_tab, c->sin_tab, c->B, c->T, c->n_heads, c->HD, c->stride);
}
static void rope_bwd(fd_op *op) {
    rope_ctx *c = (rope_ctx *)op;
    memcpy(op->in[0].grad, op->r, op->n_out * sizeof(float));
    wf_kern_rope_bwd(op->in[0].grad, c->cos_tab, c->sin_tab, c->B, c->T, c->n_heads, c->HD,
                     c->stride);
}

WF_TEST(rope_backward_matches_finite_differences) {
    int B = 2, T = 5, n_heads = 3, HD = 6, stride = n_heads * HD + 4;
    size_t n = (size_t)B * T * stride;
    rope_ctx c = {.B = B, .T = T, .n_heads = n_heads, .HD = HD, .stride = stride,
                  .cos_tab = zeros((size_t)T * HD / 2), .sin_tab = zeros((size_t)T * HD / 2)};
    wf_kern_rope_table(c.cos_tab, c.sin_tab, T, HD, 100.0);
    c.op = (fd_op){"rope", zeros(n), randn(n, 40, 0, 1), n, {{"x", randn(n, 41, 0, 1), zeros(n), n}},
                   1, rope_fwd, rope_bwd};
    fd_check(&c.op, 1000);
    /* Columns past the rotated heads are left alone, by both directions. */
    for (int row = 0; row < B * T; row++)
        for (int j = n_heads * HD; j < stride; j++) {
            size_t i = (size_t)row * stride + (size_t)j;
            WF_CHECK_TRUE(c.op.out[i] == c.op.in[0].x[i]);
            WF_CHECK_TRUE(c.op.in[0].grad[i] == c.op.r[i]);
        }
    free(c.cos_tab), free(c.sin_tab), free(c.op.out), free(c.op.r), free(c.op.in[0].x),
        free(c.op.in[0].grad);
}

WF_TEST(rope_table_and_pairing) {
    /* Position 0 is the identity; at position t, element i of a head pairs
     * with element i + HD/2 and turns by t * theta^(-2i/HD). */
    int T = 4, HD = 8;
    float cs[16], sn[16];
    wf_kern_rope_table(cs, sn, T, HD, 10000.0);
    for (int i = 0; i < HD / 2; i++) {
        WF_CHECK_NEAR(cs[i], 1.0, 0);
        WF_CHECK_NEAR(sn[i], 0.0, 0);
        double ang = 3 * pow(10000.0, -2.0 * i / HD);
        WF_CHECK_NEAR(cs[3 * HD / 2 + i], cos(ang), 1e-7);
        WF_CHECK_NEAR(sn[3 * HD / 2 + i], sin(ang), 1e-7);
    }
    float x[8 * 4] = {0};
    x[3 * 8 + 1] = 1.0f; /* position 3, element 1 */
    wf_kern_rope_fwd(x, cs, sn, 1, T, 1, HD, HD);
    double ang = 3 * pow(10000.0, -2.0 / HD);
    WF_CHECK_NEAR(x[3 * 8 + 1], cos(ang), 1e-7);
    WF_CHECK_NEAR(x[3 * 8 + 1 + HD / 2], sin(ang), 1e-7);
    for (int j = 0; j < HD; j++)
        if (j != 1 && j != 1 + HD / 2) WF_CHECK_NEAR(x[3 * 8 + j], 0.0, 0);
}

WF_TEST(rope_matches_ref) {
    int B = 2, T = 9, n_heads = 5, HD = 8, stride = 7 * HD;
    size_t n = (size_t)B * T * stride;
    float *cs = zeros((size_t)T * HD / 2), *sn = zeros((size_t)T * HD / 2);
    wf_kern_rope_table(cs, sn, T, HD, 10000.0);
    float *x = randn(n, 50, 0, 1), *a = copy_of(x, n), *b = copy_of(x, n);
    wf_kern_rope_fwd(a, cs, sn, B, T, n_heads, HD, stride);
    wf_kern_rope_fwd_ref(b, cs, sn, B, T, n_heads, HD, stride);
    check_close("rope_fwd", a, b, n, REF_TOL);
    wf_kern_rope_bwd(a, cs, sn, B, T, n_heads, HD, stride);
    wf_kern_rope_bwd_ref(b, cs, sn, B, T, n_heads, HD, stride);
    check_close("rope_bwd", a, b, n, REF_TOL);
    check_close("rope_bwd(rope_fwd(x)) = x", a, x, n, 1e-6);
    free(cs), free(sn), free(x), free(a), free(b);
}

/* ------------------------------------------------------------- attention */

typedef struct {
    fd_op op;
    int B, T, NH, NKV, HD;
    float *lse, *scratch;
} att_ctx;

static void att_fwd(fd_op *op) {
    att_ctx *c = (att_ctx *)op;
    wf_kern_attention_fwd(op->out, c->lse, op->in[0].x, c->B, c->T, c->NH, c->NKV, c->HD,
                          c->scratch, wf_kern_threads());
}
static void att_bwd(fd_op *op) {
    att_ctx *c = (att_ctx *)op;
    wf_kern_attention_bwd(op->in[0].grad, op->r, op->in[0].x, op->out, c->lse, c->B, c->T, c->NH,
                          c->NKV, c->HD, c->scratch, wf_kern_threads());
}

static void attention_fd(int B, int T, int NH, int NKV, int HD, uint64_t stream) {
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD;
    att_ctx c = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HD = HD,
                 .lse = zeros((size_t)B * NH * T),
                 .scratch = zeros(wf_kern_attention_scratch(T, wf_kern_threads()))};
    c.op = (fd_op){"attention", zeros(no), randn(no, stream, 0, 1), no,
                   {{"qkv", randn(nq, stream + 1, 0, 1), zeros(nq), nq}}, 1, att_fwd, att_bwd};
    fd_check(&c.op, 400);
    free(c.lse), free(c.scratch), free(c.op.out), free(c.op.r), free(c.op.in[0].x),
        free(c.op.in[0].grad);
}

WF_TEST(attention_backward_matches_finite_differences) {
    attention_fd(2, 5, 4, 2, 4, 60); /* grouped-query: 2 query heads per kv head */
    attention_fd(1, 4, 3, 3, 2, 62); /* one kv head per query head */
    attention_fd(1, 6, 3, 1, 4, 64); /* one kv head for all */
}

WF_TEST(attention_is_causal) {
    /* Changing position t's keys and values never changes outputs before t. */
    int B = 1, T = 6, NH = 2, NKV = 1, HD = 4, QKV = (NH + 2 * NKV) * HD;
    size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * NH * HD;
    float *qkv = randn(nq, 70, 0, 1), *o1 = zeros(no), *o2 = zeros(no), *lse = zeros((size_t)NH * T);
    float *scratch = zeros(wf_kern_attention_scratch(T, wf_kern_threads()));
    wf_kern_attention_fwd(o1, lse, qkv, B, T, NH, NKV, HD, scratch, wf_kern_threads());
    for (int j = NH * HD; j < QKV; j++) qkv[4 * QKV + j] += 1.0f; /* k and v at t = 4 */
    wf_kern_attention_fwd(o2, lse, qkv, B, T, NH, NKV, HD, scratch, wf_kern_threads());
    WF_CHECK_TRUE(memcmp(o1, o2, 4 * (size_t)NH * HD * sizeof *o1) == 0);
    WF_CHECK_TRUE(memcmp(o1 + 4 * NH * HD, o2 + 4 * NH * HD, 2 * (size_t)NH * HD * sizeof *o1) != 0);
    /* Position 0 attends only to itself: its output is its value row. */
    for (int h = 0; h < NH; h++)
        for (int d = 0; d < HD; d++) WF_CHECK_NEAR(o1[h * HD + d], qkv[(NH + NKV) * HD + d], 1e-6);
    free(qkv), free(o1), free(o2), free(lse), free(scratch);
}

WF_TEST(attention_matches_ref_and_threads) {
    int B = 2, T = 33, NH = 6, NKV = 2, HD = 8;
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD,
           nl = (size_t)B * NH * T;
    float *qkv = randn(nq, 80, 0, 1), *dy = randn(no, 81, 0, 1);
    float *scratch = zeros(wf_kern_attention_scratch(T, 2));
    float *o1 = zeros(no), *o2 = zeros(no), *l1 = zeros(nl), *l2 = zeros(nl);
    float *d1 = randn(nq, 82, 0, 1), *d2 = randn(nq, 83, 0, 1); /* overwritten entirely */
    wf_kern_attention_fwd(o1, l1, qkv, B, T, NH, NKV, HD, scratch, 2);
    wf_kern_attention_fwd_ref(o2, l2, qkv, B, T, NH, NKV, HD, scratch, 1);
    check_close("attention_fwd", o1, o2, no, REF_TOL);
    check_close("attention_fwd lse", l1, l2, nl, REF_TOL);
    wf_kern_attention_bwd(d1, dy, qkv, o2, l2, B, T, NH, NKV, HD, scratch, 2);
    wf_kern_attention_bwd_ref(d2, dy, qkv, o2, l2, B, T, NH, NKV, HD, scratch, 1);
    check_close("attention_bwd", d1, d2, nq, REF_TOL);
    float *o3 = zeros(no), *l3 = zeros(nl), *d3 = zeros(nq);
    wf_kern_attention_fwd(o3, l3, qkv, B, T, NH, NKV, HD, scratch, 1);
    wf_kern_attention_bwd(d3, dy, qkv, o2, l2, B, T, NH, NKV, HD, scratch, 1);
    check_same_bits("attention_fwd 1 thread vs 2", o3, o1, no);
    check_same_bits("attention_bwd 1 thread vs 2", d3, d1, nq);
    free(qkv), free(dy), free(scratch), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2);
    free(o3), free(l3), free(d3);
}

/* ---------------------------------------------------------------- SwiGLU */

typedef struct {
    fd_op op;
    int N, H;
} swi_ctx;

static void swi_fwd(fd_op *op) {
    swi_ctx *c = (swi_ctx *)op;
    wf_kern_swiglu_fwd(op->out, op->in[0].x, c->N, c->H);
}
static void swi_bwd(fd_op *op) {
    swi_ctx *c = (swi_ctx *)op;
    wf_kern_swiglu_bwd(op->in[0].grad, op->r, op->in[0].x, c->N, c->H);
}

WF_TEST(swiglu_backward_matches_finite_differences) {
    int N = 3, H = 7;
    swi_ctx c = {.N = N, .H = H};
    size_t n = (size_t)N * H;
    c.op = (fd_op){"swiglu", zeros(n), randn(n, 90, 0, 1), n,
                   {{"h13", randn(2 * n, 91, 0, 2), zeros(2 * n), 2 * n}}, 1, swi_fwd, swi_bwd};
    fd_check(&c.op, 1000);
    free(c.op.out), free(c.op.r), free(c.op.in[0].x), free(c.op.in[0].grad);
}

WF_TEST(swiglu_matches_ref_and_threads) {
    int N = 17, H = 50;
    size_t n = (size_t)N * H;
    float *h13 = randn(2 * n, 100, 0, 3), *dy = randn(n, 101, 0, 1);
    h13[0] = -200.0f, h13[1] = 200.0f; /* exp overflow on one side */
    float *y1 = zeros(n), *y2 = zeros(n), *d1 = zeros(2 * n), *d2 = zeros(2 * n);
    wf_kern_swiglu_fwd(y1, h13, N, H);
    wf_kern_swiglu_fwd_ref(y2, h13, N, H);
    check_close("swiglu_fwd", y1, y2, n, REF_TOL);
    wf_kern_swiglu_bwd(d1, dy, h13, N, H);
    wf_kern_swiglu_bwd_ref(d2, dy, h13, N, H);
    check_close("swiglu_bwd", d1, d2, 2 * n, REF_TOL);
    int nt_ = wf_kern_threads();
    wf_kern_set_threads(1);
    float *y3 = zeros(n), *d3 = zeros(2 * n);
    wf_kern_swiglu_fwd(y3, h13, N, H);
    wf_kern_swiglu_bwd(d3, dy, h13, N, H);
    wf_kern_set_threads(nt_);
    check_same_bits("swiglu_fwd 1 thread vs default", y3, y1, n);
    check_same_bits("swiglu_bwd 1 thread vs default", d3, d1, 2 * n);
    free(h13), free(dy), free(y1), free(y2), free(d1), free(d2), free(y3), free(d3);
}

/* ------------------------------------------------------------- embedding */

typedef struct {
    fd_op op;
    int N, C;
    const int32_t *tokens;
} emb_ctx;

static void emb_fwd(fd_op *op) {
    emb_ctx *c = (emb_ctx *)op;
    wf_kern_embedding_fwd(op->out, c->tokens, op->in[0].x, c->N, c->C);
}
static void emb_bwd(fd_op *op) {
    emb_ctx *c = (emb_ctx *)op;
    wf_kern_embedding_bwd(op->in[0].grad, op->r, c->tokens, c->N, c->C);
}

WF_TEST(embedding_backward_matches_finite_differences) {
    static const int32_t tokens[9] = {3, 0, 3, 5, 1, 3, 0, 2, 5}; /* repeats; row 4 unused */
    int N = 9, C = 37, V = 6;
    emb_ctx c = {.N = N, .C = C, .tokens = tokens};
    size_t n = (size_t)N * C, nw = (size_t)V * C;
    c.op = (fd_op){"embedding", zeros(n), randn(n, 110, 0, 1), n,
                   {{"wte", randn(nw, 111, 0, 1), zeros(nw), nw}}, 1, emb_fwd, emb_bwd};
    fd_check(&c.op, 1000);
    for (int j = 0; j < C; j++) WF_CHECK_TRUE(c.op.in[0].grad[4 * C + j] == 0.0f);
    free(c.op.out), free(c.op.r), free(c.op.in[0].x), free(c.op.in[0].grad);
}

WF_TEST(embedding_matches_ref_and_threads) {
    int N = 40, C = 70, V = 13;
    int32_t tokens[40];
    wf_rng r = wf_rng_make(5, 5);
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
    size_t n = (size_t)N * C, nw = (size_t)V * C;
    float *wte = randn(nw, 120, 0, 1), *dy = randn(n, 121, 0, 1), *dw0 = randn(nw, 122, 0, 1);
    float *y1 = zeros(n), *y2 = zeros(n), *dw1 = copy_of(dw0, nw), *dw2 = copy_of(dw0, nw);
    wf_kern_embedding_fwd(y1, tokens, wte, N, C);
    wf_kern_embedding_fwd_ref(y2, tokens, wte, N, C);
    check_same_bits("embedding_fwd vs ref", y1, y2, n);
    wf_kern_embedding_bwd(dw1, dy, tokens, N, C);
    wf_kern_embedding_bwd_ref(dw2, dy, tokens, N, C);
    /* Both add rows in token order in fp32: the same bits. */
    check_same_bits("embedding_bwd vs ref", dw1, dw2, nw);
    int nt_ = wf_kern_threads();
    wf_kern_set_threads(1);
    float *dw3 = copy_of(dw0, nw);
    wf_kern_embedding_bwd(dw3, dy, tokens, N, C);
    wf_kern_set_threads(nt_);
    check_same_bits("embedding_bwd 1 thread vs default", dw3, dw1, nw);
    free(wte), free(dy), free(dw0), free(y1), free(y2), free(dw1), free(dw2), free(dw3);
}

/* --------------------------------------------------------- cross-entropy */

typedef struct {
    fd_op op;
    int N, V;
    const int32_t *targets;
    float *lse, *work;
} ce_ctx;

static void ce_fwd(fd_op *op) {
    ce_ctx *c = (ce_ctx *)op;
    wf_kern_crossentropy_fwd(op->out, c->lse, op->in[0].x, c->targets, c->N, c->V);
}
/* r is the same for every row (the kernel takes one dloss). */
static void ce_bwd(fd_op *op) {
    ce_ctx *c = (ce_ctx *)op;
    memcpy(op->in[0].grad, op->in[0].x, (size_t)c->N * c->V * sizeof(float));
    wf_kern_crossentropy_bwd(op->in[0].grad, c->lse, c->targets, c->N, c->V, op->r[0]);
}

WF_TEST(crossentropy_backward_matches_finite_differences) {
    static const int32_t targets[4] = {3, -1, 0, 10};
    int N = 4, V = 11;
    size_t n = (size_t)N * V;
    ce_ctx c = {.N = N, .V = V, .targets = targets, .lse = zeros((size_t)N)};
    float *r = zeros((size_t)N);
    for (int i = 0; i < N; i++) r[i] = 0.7f;
    c.op = (fd_op){"crossentropy", zeros((size_t)N), r, (size_t)N,
                   {{"logits", randn(n, 130, 0, 2), zeros(n), n}}, 1, ce_fwd, ce_bwd};
    fd_check(&c.op, 1000);
    WF_CHECK_TRUE(c.op.out[1] == 0.0f); /* ignored row: no loss, no gradient */
    for (int v = 0; v < V; v++) WF_CHECK_TRUE(c.op.in[0].grad[V + v] == 0.0f);
    free(c.lse), free(c.op.out), free(r), free(c.op.in[0].x), free(c.op.in[0].grad);
}

WF_TEST(crossentropy_matches_ref_and_threads) {
    int N = 9, V = 300;
    int32_t targets[9] = {0, 299, -1, 17, 150, -5, 3, 3, 298};
    size_t n = (size_t)N * V;
    float *logits = randn(n, 140, 0, 3);
    logits[5] = 80.0f; /* a large logit: the max subtraction matters */
    float *l1 = zeros((size_t)N), *l2 = zeros((size_t)N), *s1 = zeros((size_t)N), *s2 = zeros((size_t)N);
    wf_kern_crossentropy_fwd(l1, s1, logits, targets, N, V);
    wf_kern_crossentropy_fwd_ref(l2, s2, logits, targets, N, V);
    check_close("crossentropy_fwd losses", l1, l2, (size_t)N, REF_TOL);
    check_close("crossentropy_fwd lse", s1, s2, (size_t)N, REF_TOL);
    float *g1 = copy_of(logits, n), *g2 = copy_of(logits, n);
    wf_kern_crossentropy_bwd(g1, s2, targets, N, V, 0.25f);
    wf_kern_crossentropy_bwd_ref(g2, s2, targets, N, V, 0.25f);
    check_close("crossentropy_bwd", g1, g2, n, REF_TOL);
    /* Each kept row of the gradient sums to 0 (softmax sums to 1). */
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int v = 0; v < V; v++) s += g1[(size_t)i * V + v];
        WF_CHECK_NEAR(s, 0.0, 1e-6);
    }
    int nt_ = wf_kern_threads();
    wf_kern_set_threads(1);
    float *l3 = zeros((size_t)N), *s3 = zeros((size_t)N), *g3 = copy_of(logits, n);
    wf_kern_crossentropy_fwd(l3, s3, logits, targets, N, V);
    wf_kern_crossentropy_bwd(g3, s2, targets, N, V, 0.25f);
    wf_kern_set_threads(nt_);
    check_same_bits("crossentropy_fwd 1 thread vs default", l3, l1, (size_t)N);
    check_same_bits("crossentropy_bwd 1 thread vs default", g3, g1, n);
    free(logits), free(l1), free(l2), free(s1), free(s2), free(g1), free(g2), free(l3), free(s3),
        free(g3);
}

/* ------------------------------------------------------- the vector exp */

WF_TEST(vector_exp_is_within_two_ulp) {
    double worst = 0;
    float worst_x = 0;
    for (int i = 0; i <= 400000; i++) {
        float x = -87.0f + 175.0f * (float)i / 400000.0f;
        double want = exp((double)x);
        float wf = (float)want;
        double ulp = (double)nextafterf(wf, INFINITY) - wf;
        double err = fabs((double)kern_expf_(x) - want) / ulp;
        if (err > worst) worst = err, worst_x = x;
    }
    if (!(worst <= 2.0))
        wf_test_fail(__FILE__, __LINE__, "kern_expf_(%.9g) is %.2f ulp off", worst_x, worst);
    WF_CHECK_TRUE(kern_expf_(0.0f) == 1.0f);
    WF_CHECK_TRUE(kern_expf_(-88.0f) == 0.0f);
    WF_CHECK_TRUE(kern_expf_(-1e30f) == 0.0f);
    WF_CHECK_TRUE(kern_expf_(-1e3f) == 0.0f);
    /* Every magnitude, not only a few: x*log2(e) + 1.5*2^23 wraps for x
     * near -1e7 unless x is clamped first (a softmax over scores of 1e8
     * made NaN there). */
    for (double x = 90.0; x < 1e38; x *= 1.01) {
        float e = kern_expf_((float)-x);
        if (e != 0.0f) wf_test_fail(__FILE__, __LINE__, "kern_expf_(%.9g) is %g, not 0", -x, (double)e);
        if (!isinf(kern_expf_((float)x))) wf_test_fail(__FILE__, __LINE__, "kern_expf_(%.9g) is not inf", x);
    }
    WF_CHECK_TRUE(kern_expf_(-INFINITY) == 0.0f);
    WF_CHECK_TRUE(isinf(kern_expf_(100.0f)) && isinf(kern_expf_(INFINITY)));
    WF_CHECK_TRUE(isnan(kern_expf_(NAN)));
}

/* The sum of squares behind every gradient norm: the naive double sum
 * within rounding, and the same bits on one thread as on the default. */
WF_TEST(sumsq_matches_naive_and_threads) {
    size_t sizes[] = {0, 1, 255, 257, 40000, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *x = randn(n ? n : 1, 40 + (uint64_t)k, 0, 3);
        double want = 0;
        for (size_t i = 0; i < n; i++) want += (double)x[i] * (double)x[i];
        double got = wf_kern_sumsq(x, n);
        WF_CHECK_NEAR(got, want, 1e-12 * (want > 1 ? want : 1));
        int nt_ = wf_kern_threads();
        wf_kern_set_threads(1);
        double one = wf_kern_sumsq(x, n);
        wf_kern_set_threads(nt_);
        WF_CHECK_TRUE(memcmp(&one, &got, sizeof got) == 0);
        free(x);
    }
}
