/* weft: CPU kernels for the Llama model, fp32.
 *
 * Each op has a forward and a backward, and each optimized kernel has a plain
 * `_ref` twin with the same signature: serial loops, sums in double, no
 * tricks. The twins are the oracles the unit tests compare against; they are
 * not meant to be fast.
 *
 * Threading model: one OpenMP runtime for everything. Matrix multiplies go to
 * OpenBLAS sgemm (Debian's OpenMP build, libopenblas0-openmp), which opens
 * its own parallel region in the same libgomp thread pool when called from
 * serial code; every other op is an OpenMP loop. The two never run at the
 * same time, and the same worker threads serve both, so there are never more
 * busy threads than wf_kern_threads(). (Built without OpenMP, e.g. the
 * ThreadSanitizer build, the loops run on the calling thread.)
 *
 * Determinism: every output element is computed by one thread in a fixed
 * order. Reductions over rows (weight gradients of RMSNorm and the
 * embedding) are split over columns, never over rows, so results do not
 * depend on the thread count or on scheduling.
 *
 * Conventions. Tensors are dense, row-major fp32 unless said otherwise.
 * N = B*T rows (batch x time), C = model width, OC = output width of a
 * linear layer, H = feed-forward hidden width, V = vocabulary, NH = query
 * heads, NKV = key/value heads (NH % NKV == 0), HD = head width (even).
 * Linear weights are stored (out_features, in_features), as in PyTorch and
 * Hugging Face. "+=" in a shape comment means the kernel accumulates into
 * that buffer; every other output is overwritten. Kernels do not validate
 * their arguments (the model does, once per step): token ids must lie in
 * [0, V) and targets in [0, V) or be negative (ignored).
 */
#ifndef WEFT_KERNELS_H
#define WEFT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "weft/backend.h"

/* The thread count and OpenBLAS calls (wf_kern_threads, wf_kern_set_threads,
 * wf_kern_blas_*) are declared in weft/backend.h, the seam the layers above
 * the model use. Notes on them:
 *
 * OpenBLAS 0.3.21 (Debian 12) does not recognise some newer or virtualised
 * x86 CPUs and falls back to its SSE3 "Prescott" kernels, several times
 * slower than the AVX2/AVX-512 ones the CPU could run. The environment
 * variable OPENBLAS_CORETYPE (SkylakeX, Haswell), set before the program
 * starts, overrides the choice; wf_kern_blas_check says so, and `weft`
 * restarts itself once with wf_kern_blas_better_core's answer
 * (tools/cli_main.c), so users get the fast kernels without knowing this. */

/* ---------------------------------------------------------------- matmul
 * A linear layer without bias, through cblas_sgemm. */

/* out = inp @ weight^T, or out += inp @ weight^T when `accumulate` (used to
 * fuse a residual add into the projection). */
void wf_kern_matmul_fwd(float *out,          /* (N, OC) */
                        const float *inp,    /* (N, C) */
                        const float *weight, /* (OC, C) */
                        int N, int C, int OC, int accumulate);
/* dweight += dout^T @ inp; dinp = dout @ weight (or += when
 * `accumulate_dinp`); dinp may be NULL to skip it. */
void wf_kern_matmul_bwd(float *dinp,         /* (N, C), may be NULL */
                        float *dweight,      /* (OC, C) += */
                        const float *dout,   /* (N, OC) */
                        const float *inp,    /* (N, C) */
                        const float *weight, /* (OC, C) */
                        int N, int C, int OC, int accumulate_dinp);
void wf_kern_matmul_fwd_ref(float *out, const float *inp, const float *weight, int N, int C,
                            int OC, int accumulate);
void wf_kern_matmul_bwd_ref(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC, int accumulate_dinp);

/* --------------------------------------------------------------- RMSNorm
 * out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row. */

void wf_kern_rmsnorm_fwd(float *out,          /* (N, C) */
                         float *rstd,         /* (N), saved for backward */
                         const float *inp,    /* (N, C) */
                         const float *weight, /* (C) */
                         int N, int C, float eps);
/* The input gradient is ADDED to dinp (it is the residual stream's gradient
 * in the model); dweight accumulates. */
void wf_kern_rmsnorm_bwd(float *dinp,         /* (N, C) += */
                         float *dweight,      /* (C) += */
                         const float *dout,   /* (N, C) */
                         const float *inp,    /* (N, C) */
                         const float *weight, /* (C) */
                         const float *rstd,   /* (N) from the forward */
                         int N, int C);
void wf_kern_rmsnorm_fwd_ref(float *out, float *rstd, const float *inp, const float *weight, int N,
                             int C, float eps);
void wf_kern_rmsnorm_bwd_ref(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

/* ------------------------------------------------------------------ RoPE
 * Rotary position embeddings, half-split pairing as in Hugging Face's Llama
 * (rotate_half): within a head, element i pairs with i + HD/2 and both are
 * rotated by angle t * theta^(-2i/HD), t the position. (Meta's original code
 * pairs neighbours 2i, 2i+1; the two differ by a fixed permutation of the
 * rows of wq and wk, and this choice makes a Hugging Face export a plain
 * copy.) */

/* Fills the tables: cos_tab[t][i] = cos(t * theta^(-2i/HD)), same for sin,
 * computed in double. */
void wf_kern_rope_table(float *cos_tab, /* (T, HD/2) */
                        float *sin_tab, /* (T, HD/2) */
                        int T, int HD, double theta);
/* Rotates in place the first `n_heads` heads of every row of x; the rows
 * are `stride` floats apart and row n is at position n % T. In the model x
 * is the fused q|k|v projection and n_heads = NH + NKV (q and k heads). */
void wf_kern_rope_fwd(float *x,             /* (B, T, stride), n_heads*HD <= stride */
                      const float *cos_tab, /* (>= T, HD/2) */
                      const float *sin_tab, /* (>= T, HD/2) */
                      int B, int T, int n_heads, int HD, int stride);
/* The backward of a rotation is the rotation by the opposite angle; also in
 * place, on the gradient. */
void wf_kern_rope_bwd(float *dx,            /* (B, T, stride) */
                      const float *cos_tab, const float *sin_tab,
                      int B, int T, int n_heads, int HD, int stride);
void wf_kern_rope_fwd_ref(float *x, const float *cos_tab, const float *sin_tab, int B, int T,
                          int n_heads, int HD, int stride);
void wf_kern_rope_bwd_ref(float *dx, const float *cos_tab, const float *sin_tab, int B, int T,
                          int n_heads, int HD, int stride);

/* ------------------------------------------------------------- attention
 * Causal softmax attention with grouped-query heads: query head h reads
 * key/value head h / (NH/NKV); scores are scaled by 1/sqrt(HD).
 *
 * qkv holds, per row, NH query heads, then NKV key heads, then NKV value
 * heads, each HD floats: the output of the fused q|k|v projection, row
 * width QKV = (NH + 2*NKV) * HD.
 *
 * Only the log-sum-exp of each score row is kept for the backward, which
 * recomputes the probabilities: O(B*NH*T) memory instead of O(B*NH*T*T).
 * `scratch` holds wf_kern_attention_scratch(T, n_threads) floats (two
 * blocks of score rows per thread); the kernel runs on at most n_threads
 * threads. */

/* Floats of scratch the attention kernels need. */
size_t wf_kern_attention_scratch(int T, int n_threads);

void wf_kern_attention_fwd(float *out,       /* (B, T, NH*HD) */
                           float *lse,       /* (B, NH, T), saved for backward */
                           const float *qkv, /* (B, T, QKV) */
                           int B, int T, int NH, int NKV, int HD,
                           float *scratch,   /* wf_kern_attention_scratch(T, n_threads) */
                           int n_threads);
/* Writes the q, k and v gradients into dqkv (all of it is overwritten). */
void wf_kern_attention_bwd(float *dqkv,       /* (B, T, QKV) */
                           const float *dout, /* (B, T, NH*HD) */
                           const float *qkv,  /* (B, T, QKV) */
                           const float *out,  /* (B, T, NH*HD) from the forward */
                           const float *lse,  /* (B, NH, T) from the forward */
                           int B, int T, int NH, int NKV, int HD,
                           float *scratch,    /* wf_kern_attention_scratch(T, n_threads) */
                           int n_threads);
void wf_kern_attention_fwd_ref(float *out, float *lse, const float *qkv, int B, int T, int NH,
                               int NKV, int HD, float *scratch, int n_threads);
void wf_kern_attention_bwd_ref(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int NKV, int HD,
                               float *scratch, int n_threads);

/* ---------------------------------------------------------------- SwiGLU
 * out = silu(a) * b, silu(a) = a * sigmoid(a). h13 holds, per row, the H
 * gate values a (x @ w1^T) then the H up values b (x @ w3^T): the output of
 * the fused w1|w3 projection. */

void wf_kern_swiglu_fwd(float *out,       /* (N, H) */
                        const float *h13, /* (N, 2*H) */
                        int N, int H);
void wf_kern_swiglu_bwd(float *dh13,      /* (N, 2*H) */
                        const float *dout,/* (N, H) */
                        const float *h13, /* (N, 2*H) */
                        int N, int H);
void wf_kern_swiglu_fwd_ref(float *out, const float *h13, int N, int H);
void wf_kern_swiglu_bwd_ref(float *dh13, const float *dout, const float *h13, int N, int H);

/* ------------------------------------------------------------- embedding */

void wf_kern_embedding_fwd(float *out,             /* (N, C) */
                           const int32_t *tokens,  /* (N), in [0, V) */
                           const float *wte,       /* (V, C) */
                           int N, int C);
void wf_kern_embedding_bwd(float *dwte,            /* (V, C) += */
                           const float *dout,      /* (N, C) */
                           const int32_t *tokens,  /* (N) */
                           int N, int C);
void wf_kern_embedding_fwd_ref(float *out, const int32_t *tokens, const float *wte, int N, int C);
void wf_kern_embedding_bwd_ref(float *dwte, const float *dout, const int32_t *tokens, int N, int C);

/* --------------------------------------------------------- cross-entropy
 * Softmax and negative log-likelihood fused. The forward leaves the logits
 * untouched; the backward overwrites them with their gradient, so one
 * (N, V) buffer serves both (it is the largest activation). */

/* losses[n] = logsumexp(logits[n]) - logits[n][targets[n]], or 0 where
 * targets[n] < 0; lse[n] = logsumexp(logits[n]) for the backward. */
void wf_kern_crossentropy_fwd(float *losses,          /* (N) */
                              float *lse,             /* (N) */
                              const float *logits,    /* (N, V) */
                              const int32_t *targets, /* (N), < 0 means ignored */
                              int N, int V);
/* logits[n] := dloss * (softmax(logits[n]) - onehot(targets[n])), or 0 for
 * an ignored row. `dloss` is the gradient of the objective with respect to
 * each row's loss (1/n_valid for a mean). */
void wf_kern_crossentropy_bwd(float *logits,          /* (N, V) in: logits, out: dlogits */
                              const float *lse,       /* (N) from the forward */
                              const int32_t *targets, /* (N) */
                              int N, int V, float dloss);
void wf_kern_crossentropy_fwd_ref(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int N, int V);
void wf_kern_crossentropy_bwd_ref(float *logits, const float *lse, const int32_t *targets, int N,
                                  int V, float dloss);

/* Sum of the squares of x (n floats), in double, over 256 fixed blocks
 * added in order: the same bits on any thread count. The reduction behind
 * every gradient norm (wf_grad_norm, ZeRO-1's over the ranks' shards). */
double wf_kern_sumsq(const float *x, size_t n);
/* The twin: one sum in double, in index order. */
double wf_kern_sumsq_ref(const float *x, size_t n);

/* The first i < n with x[i] not finite, or n (one serial pass: it is the
 * error path's). Serves as its own twin. */
size_t wf_kern_first_nonfinite(const float *x, size_t n);

/* *sum = the sum, in row order in double, of losses[i] where targets[i] >=
 * 0; *n_valid = how many: the mean loss's numerator and denominator, the
 * same on any thread count. Serves as its own twin. */
void wf_kern_loss_sum(const float *losses, const int32_t *targets, size_t n, double *sum, size_t *n_valid);

/* ----------------------------------------------------------------- AdamW
 * The update of include/weft/backend.h's wf_backend_adamw over ranges of
 * p, g, m, v (total: the elements the ranges span, to choose threads). */
void wf_kern_adamw(float *p, const float *g, float *m, float *v, const wf_adamw_span *ranges, int n_ranges,
                   size_t total, wf_adamw_coef k);
void wf_kern_adamw_ref(float *p, const float *g, float *m, float *v, const wf_adamw_span *ranges,
                       int n_ranges, size_t total, wf_adamw_coef k);

/* y = a + b, elementwise (y may be a or b). */
void wf_kern_add(float *y, const float *a, const float *b, size_t n);
void wf_kern_add_ref(float *y, const float *a, const float *b, size_t n);

/* y = a * x + b * y, elementwise (x may be y); with b == 0, y = a * x and y
 * is not read (Muon, src/optim/muon.c). */
void wf_kern_axpby(float *y, const float *x, float a, float b, size_t n);
void wf_kern_axpby_ref(float *y, const float *x, float a, float b, size_t n);

#endif
