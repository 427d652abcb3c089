/* Rotary position embeddings, half-split pairing (Hugging Face's
 * rotate_half): in each head, element i and element i + HD/2 are rotated by
 * t * theta^(-2i/HD). Applied in place to the q and k heads of the fused
 * projection; the backward rotates the gradient back. */
#include <math.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

void wf_kern_rope_table(float *cos_tab, float *sin_tab, int T, int HD, double theta) {
    int half = HD / 2;
    for (int i = 0; i < half; i++) {
        double freq = pow(theta, -2.0 * i / HD);
        for (int t = 0; t < T; t++) {
            double a = t * freq;
            cos_tab[(size_t)t * half + i] = (float)cos(a);
            sin_tab[(size_t)t * half + i] = (float)sin(a);
        }
    }
}

/* dir = +1 rotates by +angle (forward), -1 by -angle (backward). */
static void rope_apply(float *x, const float *cos_tab, const float *sin_tab, int B, int T,
                       int n_heads, int HD, int stride, float dir) {
    int half = HD / 2;
    int N = B * T;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int t = n % T;
        const float *restrict ct = cos_tab + (size_t)t * half;
        const float *restrict st = sin_tab + (size_t)t * half;
        for (int h = 0; h < n_heads; h++) {
            float *restrict lo = x + (size_t)n * stride + (size_t)h * HD;
            float *restrict hi = lo + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float c = ct[i], s = dir * st[i];
                float a = lo[i], b = hi[i];
                lo[i] = a * c - b * s;
                hi[i] = b * c + a * s;
            }
        }
    }
}

void wf_kern_rope_fwd(float *x, const float *cos_tab, const float *sin_tab, int B, int T,
                      int n_heads, int HD, int stride) {
    rope_apply(x, cos_tab, sin_tab, B, T, n_heads, HD, stride, 1.0f);
}

void wf_kern_rope_bwd(float *dx, const float *cos_tab, const float *sin_tab, int B, int T,
                      int n_heads, int HD, int stride) {
    rope_apply(dx, cos_tab, sin_tab, B, T, n_heads, HD, stride, -1.0f);
}

/* The twins spell the rotation out as a 2x2 matrix [c -s; s c] and its
 * transpose. */
void wf_kern_rope_fwd_ref(float *x, const float *cos_tab, const float *sin_tab, int B, int T,
                          int n_heads, int HD, int stride) {
    int half = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                float *head = x + ((size_t)b * T + t) * stride + (size_t)h * HD;
                for (int i = 0; i < half; i++) {
                    double c = cos_tab[(size_t)t * half + i], s = sin_tab[(size_t)t * half + i];
                    double x0 = head[i], x1 = head[i + half];
                    head[i] = (float)(c * x0 - s * x1);
                    head[i + half] = (float)(s * x0 + c * x1);
                }
            }
}

void wf_kern_rope_bwd_ref(float *dx, const float *cos_tab, const float *sin_tab, int B, int T,
                          int n_heads, int HD, int stride) {
    int half = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                float *head = dx + ((size_t)b * T + t) * stride + (size_t)h * HD;
                for (int i = 0; i < half; i++) {
                    double c = cos_tab[(size_t)t * half + i], s = sin_tab[(size_t)t * half + i];
                    double g0 = head[i], g1 = head[i + half];
                    head[i] = (float)(c * g0 + s * g1);
                    head[i + half] = (float)(-s * g0 + c * g1);
                }
            }
}
