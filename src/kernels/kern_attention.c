/* Causal grouped-query softmax attention over the fused q|k|v rows.
 *
 * Forward, per (batch, query head, position t): scores s_j = q_t.k_j/sqrt(HD)
 * for j <= t, p = softmax(s), out_t = sum_j p_j v_j. Only lse_t =
 * log(sum_j exp(s_j)) is kept. Backward recomputes p_j = exp(s_j - lse_t)
 * and uses D_t = dout_t . out_t (= sum_j p_j dP_j):
 *   dP_j = dout_t . v_j,  dS_j = p_j (dP_j - D_t),
 *   dq_t = sum_j dS_j k_j / sqrt(HD),  dk_j += dS_j q_t / sqrt(HD),
 *   dv_j += p_j dout_t.
 * The forward splits work over (batch, query head); the backward over
 * (batch, kv head), so that the query heads sharing a kv head add into its
 * dk and dv on one thread, in a fixed order. */
#include <math.h>
#include <string.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

size_t wf_kern_attention_scratch(int T, int n_threads) { return (size_t)T * (size_t)n_threads; }

void wf_kern_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int NH,
                           int NKV, int HD, float *scratch, int n_threads) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, OW = (size_t)NH * HD;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HD);
    const int n_tasks = B * NH;
#pragma omp parallel num_threads(n_threads)
    {
        float *restrict s = scratch + (size_t)kern_thread_num_() * T;
#pragma omp for schedule(static)
        for (int task = 0; task < n_tasks; task++) {
            int b = task / NH, h = task % NH, g = h / group;
            const float *qkv_b = qkv + (size_t)b * T * QKV;
            for (int t = 0; t < T; t++) {
                const float *restrict q = qkv_b + t * QKV + (size_t)h * HD;
                float mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *restrict k = qkv_b + j * QKV + (size_t)(NH + g) * HD;
                    float dot = 0.0f;
                    for (int d = 0; d < HD; d++) dot += q[d] * k[d];
                    s[j] = dot * scale;
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    s[j] = expf(s[j] - mx);
                    sum += s[j];
                }
                float inv = (float)(1.0 / sum);
                float *restrict o = out + ((size_t)b * T + t) * OW + (size_t)h * HD;
                memset(o, 0, (size_t)HD * sizeof *o);
                for (int j = 0; j <= t; j++) {
                    const float *restrict v = qkv_b + j * QKV + (size_t)(NH + NKV + g) * HD;
                    float p = s[j] * inv;
                    for (int d = 0; d < HD; d++) o[d] += p * v[d];
                }
                lse[((size_t)b * NH + h) * T + t] = mx + (float)log(sum);
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
#pragma omp parallel num_threads(n_threads)
    {
        float *restrict p = scratch + (size_t)kern_thread_num_() * T;
#pragma omp for schedule(static)
        for (int task = 0; task < n_tasks; task++) {
            int b = task / NKV, g = task % NKV;
            const float *qkv_b = qkv + (size_t)b * T * QKV;
            float *dqkv_b = dqkv + (size_t)b * T * QKV;
            const size_t k_off = (size_t)(NH + g) * HD, v_off = (size_t)(NH + NKV + g) * HD;
            for (int t = 0; t < T; t++) {
                memset(dqkv_b + t * QKV + k_off, 0, (size_t)HD * sizeof(float));
                memset(dqkv_b + t * QKV + v_off, 0, (size_t)HD * sizeof(float));
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    const float *restrict q = qkv_b + t * QKV + (size_t)h * HD;
                    float *restrict dq = dqkv_b + t * QKV + (size_t)h * HD;
                    const float *restrict dy = dout + ((size_t)b * T + t) * OW + (size_t)h * HD;
                    const float *restrict y = out + ((size_t)b * T + t) * OW + (size_t)h * HD;
                    const float L = lse[((size_t)b * NH + h) * T + t];
                    float D = 0.0f;
                    for (int d = 0; d < HD; d++) D += dy[d] * y[d];
                    for (int j = 0; j <= t; j++) {
                        const float *restrict k = qkv_b + j * QKV + k_off;
                        float dot = 0.0f;
                        for (int d = 0; d < HD; d++) dot += q[d] * k[d];
                        p[j] = expf(dot * scale - L);
                    }
                    memset(dq, 0, (size_t)HD * sizeof *dq);
                    for (int j = 0; j <= t; j++) {
                        const float *restrict k = qkv_b + j * QKV + k_off;
                        const float *restrict v = qkv_b + j * QKV + v_off;
                        float *restrict dk = dqkv_b + j * QKV + k_off;
                        float *restrict dv = dqkv_b + j * QKV + v_off;
                        float dp = 0.0f;
                        for (int d = 0; d < HD; d++) dp += dy[d] * v[d];
                        float ds = p[j] * (dp - D) * scale;
                        for (int d = 0; d < HD; d++) {
                            dq[d] += ds * k[d];
                            dk[d] += ds * q[d];
                            dv[d] += p[j] * dy[d];
                        }
                    }
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
