/* SwiGLU gate: out = silu(a) * b over the fused w1|w3 projection rows
 * [a (H) | b (H)], and its backward:
 *   silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a)))
 *   da = dout * b * silu'(a),  db = dout * silu(a).
 * Rows over threads; each row's loop is cloned for AVX-512 and AVX2
 * (KERN_CLONES_). */
#include <math.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

/* One row: o (H) = silu(a) * b. */
KERN_CLONES_ static void swiglu_row_fwd(float *restrict o, const float *restrict a,
                                        const float *restrict b, int H) {
#pragma omp simd
    for (int i = 0; i < H; i++) o[i] = a[i] / (1.0f + kern_expf_(-a[i])) * b[i];
}

/* One row: da, db (H) from dy (H) and the forward's a, b (H). */
KERN_CLONES_ static void swiglu_row_bwd(float *restrict da, float *restrict db,
                                        const float *restrict dy, const float *restrict a,
                                        const float *restrict b, int H) {
#pragma omp simd
    for (int i = 0; i < H; i++) {
        float sig = 1.0f / (1.0f + kern_expf_(-a[i]));
        float silu = a[i] * sig;
        da[i] = dy[i] * b[i] * sig * (1.0f + a[i] * (1.0f - sig));
        db[i] = dy[i] * silu;
    }
}

void wf_kern_swiglu_fwd(float *out, const float *h13, int N, int H) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *a = h13 + (size_t)n * 2 * H;
        swiglu_row_fwd(out + (size_t)n * H, a, a + H, H);
    }
}

void wf_kern_swiglu_bwd(float *dh13, const float *dout, const float *h13, int N, int H) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *a = h13 + (size_t)n * 2 * H;
        float *da = dh13 + (size_t)n * 2 * H;
        swiglu_row_bwd(da, da + H, dout + (size_t)n * H, a, a + H, H);
    }
}

/* The twins differentiate silu(a) = a / (1 + e^-a) directly, in double:
 * silu'(a) = (1 + e^-a + a e^-a) / (1 + e^-a)^2. */
void wf_kern_swiglu_fwd_ref(float *out, const float *h13, int N, int H) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < H; i++) {
            double a = h13[(size_t)n * 2 * H + i], b = h13[(size_t)n * 2 * H + H + i];
            out[(size_t)n * H + i] = (float)(a / (1.0 + exp(-a)) * b);
        }
}

void wf_kern_swiglu_bwd_ref(float *dh13, const float *dout, const float *h13, int N, int H) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < H; i++) {
            double a = h13[(size_t)n * 2 * H + i], b = h13[(size_t)n * 2 * H + H + i];
            double dy = dout[(size_t)n * H + i];
            double e = exp(-a);
            /* For a << 0, e overflows to inf; silu'(a) -> 0 there. */
            double dsilu = isinf(e) ? 0.0 : (1.0 + e + a * e) / ((1.0 + e) * (1.0 + e));
            dh13[(size_t)n * 2 * H + i] = (float)(dy * b * dsilu);
            dh13[(size_t)n * 2 * H + H + i] = (float)(dy * a / (1.0 + e));
        }
}
