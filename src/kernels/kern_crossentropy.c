/* Softmax cross-entropy over the vocabulary, fused: the forward computes
 * each row's log-sum-exp and loss without touching the logits; the backward
 * turns the logits, in place, into dloss * (softmax - onehot). Rows are
 * split over threads, the vocabulary over vector lanes (kern_expf_, in
 * functions cloned for AVX-512 and AVX2: KERN_CLONES_). */
#include <math.h>
#include <string.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

/* Exponentials are summed in fp32 vector lanes over chunks of CE_CHUNK_
 * and the chunk sums in double: a relative error of ~1e-7 for V = 50k. */
#define CE_CHUNK_ 512

/* log(sum_v exp(z[v])) of one row z (V). */
KERN_CLONES_ static double ce_row_lse(const float *restrict z, int V) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0.0;
    for (int v0 = 0; v0 < V; v0 += CE_CHUNK_) {
        int v1 = v0 + CE_CHUNK_ < V ? v0 + CE_CHUNK_ : V;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int v = v0; v < v1; v++) s += kern_expf_(z[v] - mx);
        sum += s;
    }
    return mx + log(sum);
}

/* z (V) = dloss * exp(z - lse): the row's softmax, scaled, in place. */
KERN_CLONES_ static void ce_row_softmax(float *restrict z, int V, float lse, float dloss) {
#pragma omp simd
    for (int v = 0; v < V; v++) z[v] = dloss * kern_expf_(z[v] - lse);
}

void wf_kern_crossentropy_fwd(float *losses, float *lse, const float *logits,
                              const int32_t *targets, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        double l = ce_row_lse(z, V);
        lse[n] = (float)l;
        losses[n] = targets[n] < 0 ? 0.0f : (float)(l - z[targets[n]]);
    }
}

void wf_kern_crossentropy_bwd(float *logits, const float *lse, const int32_t *targets, int N,
                              int V, float dloss) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        int32_t tgt = targets[n];
        if (tgt < 0) {
            memset(z, 0, (size_t)V * sizeof *z);
            continue;
        }
        ce_row_softmax(z, V, lse[n], dloss);
        z[tgt] -= dloss;
    }
}

void wf_kern_crossentropy_fwd_ref(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int N, int V) {
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++)
            if (z[v] > mx) mx = z[v];
        for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
        double l = mx + log(sum);
        lse[n] = (float)l;
        losses[n] = targets[n] < 0 ? 0.0f : (float)(l - z[targets[n]]);
    }
}

void wf_kern_crossentropy_bwd_ref(float *logits, const float *lse, const int32_t *targets, int N,
                                  int V, float dloss) {
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        for (int v = 0; v < V; v++) {
            double g = targets[n] < 0 ? 0.0 : exp((double)z[v] - lse[n]) - (v == targets[n]);
            z[v] = (float)(dloss * g);
        }
    }
}
