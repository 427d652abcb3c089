/* Causal grouped-query softmax attention over the fused q|k|v rows.
 *
 * Forward, per (batch, query head, position t): scores s_j = q_t.k_j/sqrt(HD)
 * for j <= t, p = softmax(s), out_t = sum_j p_j v_j. Only lse_t =
 * log(sum_j exp(s_j)) is kept. Backward recomputes p_j = exp(s_j - lse_t)
 * and uses D_t = dout_t . out_t (= sum_j p_j dP_j):
 *   dP_j = dout_t . v_j,  dS_j = p_j (dP_j - D_t),
 *   dq_t = sum_j dS_j k_j / sqrt(HD),  dk_j += dS_j q_t / sqrt(HD),
 *   dv_j += p_j dout_t.
 * Query rows go in blocks of ATT_ROWS_; a block's scores against the keys
 * up to its last row, and the products with V, dout, K and Q, are sgemm
 * calls made from inside the OpenMP region, where OpenBLAS (same libgomp
 * runtime, see the Makefile) runs them on the calling thread. The forward
 * splits work over (batch, query head); the backward over (batch, kv head),
 * so that the query heads sharing a kv head add into its dk and dv on one
 * thread, in a fixed order. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

/* Query rows per block: a block's scores are one (rows x keys) sgemm. */
#define ATT_ROWS_ 64

size_t wf_kern_attention_scratch(int T, int n_threads) {
    int rows = T < ATT_ROWS_ ? T : ATT_ROWS_;
    return 2 * (size_t)rows * (size_t)T * (size_t)n_threads;
}

/* S (rows, keys) = scale * Q[r0:r1] @ K[0:keys]^T, keys = r1: the causal
 * part of a block of query rows (entries with j > t are ignored later). */
static void att_scores(float *S, int ldS, const float *q, const float *k, int rows, int keys,
                       int HD, size_t QKV, float scale) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, HD, scale, q, (int)QKV, k,
                (int)QKV, 0.0f, S, ldS);
}

/* One query row's softmax over its scores p[0..t], in place, and zeros
 * for the masked keys p[t+1..keys-1]; returns log(sum_j exp(p_j)).
 * Cloned for AVX-512 and AVX2 (KERN_CLONES_), like the next one. */
KERN_CLONES_ static float att_softmax_row(float *restrict p, int t, int keys) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j <= t; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
        p[j] = kern_expf_(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; j++) p[j] *= inv;
    for (int j = t + 1; j < keys; j++) p[j] = 0.0f;
    return mx + logf(sum);
}

/* One query row of the backward: from its scores p and dP = ds (keys),
 * p_j = exp(p_j - L) and ds_j = p_j (ds_j - D) * scale for j <= t, zeros
 * past t. */
KERN_CLONES_ static void att_grad_row(float *restrict p, float *restrict ds, int t, int keys,
                                      float L, float D, float scale) {
#pragma omp simd
    for (int j = 0; j <= t; j++) {
        p[j] = kern_expf_(p[j] - L);
        ds[j] = p[j] * (ds[j] - D) * scale;
    }
    for (int j = t + 1; j < keys; j++) p[j] = ds[j] = 0.0f;
}

void wf_kern_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                           int NKV, int HD, float *scratch, int n_threads) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, OW = (size_t)NH * HD;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HD);
    const int n_tasks = B * NH;
#pragma omp parallel num_threads(n_threads)
    {
        float *restrict P = scratch + wf_kern_attention_scratch(T, 1) * (size_t)kern_thread_num_();
#pragma omp for schedule(static)
        for (int task = 0; task < n_tasks; task++) {
            int b = task / NH, h = task % NH, g = h / group;
            const float *qkv_b = qkv + (size_t)b * T * QKV;
            const float *q = qkv_b + (size_t)h * HD;
            const float *k = qkv_b + (size_t)(NH + g) * HD;
            const float *v = qkv_b + (size_t)(NH + NKV + g) * HD;
            for (int r0 = 0; r0 < T; r0 += ATT_ROWS_) {
                int r1 = r0 + ATT_ROWS_ < T ? r0 + ATT_ROWS_ : T, rows = r1 - r0, keys = r1;
                att_scores(P, T, q + r0 * QKV, k, rows, keys, HD, QKV, scale);
                for (int i = 0; i < rows; i++) {
                    int t = r0 + i;
                    lse[((size_t)b * NH + h) * T + t] = att_softmax_row(P + (size_t)i * T, t, keys);
                }
                /* out[r0:r1] = P @ V[0:keys] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HD, keys, 1.0f, P, T,
                            v, (int)QKV, 0.0f, out + ((size_t)b * T + r0) * OW + (size_t)h * HD,
                            (int)OW);
            }
        }
    }
}

void wf_kern_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int NH, int NKV, int HD,
                           float *scratch, int n_threads) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, OW = (size_t)NH * HD;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HD);
    const int n_tasks = B * NKV;
    const size_t half = wf_kern_attention_scratch(T, 1) / 2;
#pragma omp parallel num_threads(n_threads)
    {
        float *restrict P = scratch + 2 * half * (size_t)kern_thread_num_();
        float *restrict dS = P + half;
#pragma omp for schedule(static)
        for (int task = 0; task < n_tasks; task++) {
            int b = task / NKV, g = task % NKV;
            const float *qkv_b = qkv + (size_t)b * T * QKV;
            float *dqkv_b = dqkv + (size_t)b * T * QKV;
            const size_t k_off = (size_t)(NH + g) * HD, v_off = (size_t)(NH + NKV + g) * HD;
            const float *k = qkv_b + k_off, *v = qkv_b + v_off;
            float *dk = dqkv_b + k_off, *dv = dqkv_b + v_off;
            for (int t = 0; t < T; t++) {
                memset(dk + t * QKV, 0, (size_t)HD * sizeof(float));
                memset(dv + t * QKV, 0, (size_t)HD * sizeof(float));
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                const float *q = qkv_b + (size_t)h * HD;
                float *dq = dqkv_b + (size_t)h * HD;
                const float *dy = dout + (size_t)b * T * OW + (size_t)h * HD;
                const float *y = out + (size_t)b * T * OW + (size_t)h * HD;
                for (int r0 = 0; r0 < T; r0 += ATT_ROWS_) {
                    int r1 = r0 + ATT_ROWS_ < T ? r0 + ATT_ROWS_ : T, rows = r1 - r0, keys = r1;
                    att_scores(P, T, q + r0 * QKV, k, rows, keys, HD, QKV, scale);
                    /* dP = dout[r0:r1] @ V[0:keys]^T */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, HD, 1.0f,
                                dy + r0 * OW, (int)OW, v, (int)QKV, 0.0f, dS, T);
                    for (int i = 0; i < rows; i++) {
                        int t = r0 + i;
                        const float *restrict dy_t = dy + t * OW, *restrict y_t = y + t * OW;
                        float D = 0.0f;
#pragma omp simd reduction(+ : D)
                        for (int d = 0; d < HD; d++) D += dy_t[d] * y_t[d];
                        att_grad_row(P + (size_t)i * T, dS + (size_t)i * T, t, keys,
                                     lse[((size_t)b * NH + h) * T + t], D, scale);
                    }
                    /* dq[r0:r1] = dS @ K[0:keys]; dK[0:keys] += dS^T @ Q[r0:r1];
                     * dV[0:keys] += P^T @ dout[r0:r1] */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HD, keys, 1.0f, dS,
                                T, k, (int)QKV, 0.0f, dq + r0 * QKV, (int)QKV);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, HD, rows, 1.0f, dS, T,
                                q + r0 * QKV, (int)QKV, 1.0f, dk, (int)QKV);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, HD, rows, 1.0f, P, T,
                                dy + r0 * OW, (int)OW, 1.0f, dv, (int)QKV);
                }
            }
        }
    }
}

/* The twins: one (batch, head, position) at a time, dot products in double,
 * and D computed as sum_j p_j dP_j rather than from the saved output. */
void wf_kern_attention_fwd_ref(float *out, float *lse, const float *qkv, int B, int T, int NH,
                               int NKV, int HD, float *scratch, int n_threads) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, OW = (size_t)NH * HD;
    const double scale = 1.0 / sqrt((double)HD);
    float *s = scratch;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * QKV + (size_t)h * HD;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + g) * HD;
                    double dot = 0.0;
                    for (int d = 0; d < HD; d++) dot += (double)q[d] * k[d];
                    s[j] = (float)(dot * scale);
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                for (int d = 0; d < HD; d++) {
                    double acc = 0.0;
                    for (int j = 0; j <= t; j++) {
                        const float *v =
                            qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + g) * HD;
                        acc += exp(s[j] - mx) / sum * v[d];
                    }
                    out[((size_t)b * T + t) * OW + (size_t)h * HD + d] = (float)acc;
                }
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
        }
}

void wf_kern_attention_bwd_ref(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int NKV, int HD,
                               float *scratch, int n_threads) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, OW = (size_t)NH * HD;
    const double scale = 1.0 / sqrt((double)HD);
    float *p = scratch;
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * QKV + (size_t)h * HD;
                const float *dy = dout + ((size_t)b * T + t) * OW + (size_t)h * HD;
                const double L = lse[((size_t)b * NH + h) * T + t];
                double D = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + g) * HD;
                    const float *v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + g) * HD;
                    double dot = 0.0, dp = 0.0;
                    for (int d = 0; d < HD; d++) dot += (double)q[d] * k[d];
                    for (int d = 0; d < HD; d++) dp += (double)dy[d] * v[d];
                    p[j] = (float)exp(dot * scale - L);
                    D += p[j] * dp;
                }
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + g) * HD;
                    const float *v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + g) * HD;
                    float *dq = dqkv + ((size_t)b * T + t) * QKV + (size_t)h * HD;
                    float *dk = dqkv + ((size_t)b * T + j) * QKV + (size_t)(NH + g) * HD;
                    float *dv = dqkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + g) * HD;
                    double dp = 0.0;
                    for (int d = 0; d < HD; d++) dp += (double)dy[d] * v[d];
                    double ds = p[j] * (dp - D) * scale;
                    for (int d = 0; d < HD; d++) {
                        dq[d] = (float)(dq[d] + ds * k[d]);
                        dk[d] = (float)(dk[d] + ds * q[d]);
                        dv[d] = (float)(dv[d] + p[j] * (double)dy[d]);
                    }
                }
            }
        }
    (void)out;
    (void)n_threads;
}
