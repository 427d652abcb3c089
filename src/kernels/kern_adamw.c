/* The AdamW update over ranges of one flat buffer (src/optim/adamw.c has
 * the formulas and why each float expression is PyTorch's), and the
 * elementwise add, axpby and cast. Elementwise, so the bits do not depend on the
 * thread count. The Makefile builds this file with -fno-math-errno:
 * sqrtf's errno (never set here, v >= 0) otherwise keeps the compiler from
 * vectorising the loop (bench/README.md, "Measurements behind choices in
 * the code"). */
#include <math.h>
#include <string.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

/* Below this many elements a loop runs on one thread (no fork-join). */
#define ADAMW_PARALLEL_MIN_ 32768

static void adamw_range(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                        size_t n, wf_adamw_coef k, int decay) {
    const float dk = decay ? k.decay : 1.0f;
#pragma omp for simd schedule(static) nowait
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * k.clip;
        float mi = m[i] * k.b1 + k.a1 * gi;
        float vi = v[i] * k.b2 + k.a2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
        p[i] = p[i] * dk + k.step * mi / denom;
    }
}

void wf_kern_adamw(float *p, const float *g, float *m, float *v, const wf_adamw_span *ranges, int n_ranges,
                   size_t total, wf_adamw_coef k) {
#pragma omp parallel if (total >= ADAMW_PARALLEL_MIN_)
    for (int i = 0; i < n_ranges; i++) {
        size_t o = ranges[i].offset;
        adamw_range(p + o, g + o, m + o, v + o, ranges[i].numel, k, ranges[i].decay);
    }
}

/* The twin: one element at a time, the moments and the step in double. */
void wf_kern_adamw_ref(float *p, const float *g, float *m, float *v, const wf_adamw_span *ranges, int n_ranges,
                       size_t total, wf_adamw_coef k) {
    for (int r = 0; r < n_ranges; r++)
        for (size_t i = ranges[r].offset; i < ranges[r].offset + ranges[r].numel; i++) {
            double gi = (double)g[i] * k.clip;
            double mi = (double)m[i] * k.b1 + (double)k.a1 * gi;
            double vi = (double)v[i] * k.b2 + (double)k.a2 * gi * gi;
            m[i] = (float)mi;
            v[i] = (float)vi;
            double dk = ranges[r].decay ? k.decay : 1.0;
            p[i] = (float)(p[i] * dk + (double)k.step * mi / (sqrt(vi) / k.bc2_sqrt + k.eps));
        }
    (void)total;
}

void wf_kern_add(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= ADAMW_PARALLEL_MIN_)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void wf_kern_add_ref(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (float)((double)a[i] + (double)b[i]);
}

/* Muon's elementwise steps (src/optim/muon.c): momentum, the Newton-Schulz
 * iteration's linear combinations, the update. With b == 0, y is only
 * written (it may hold anything, NaN included, before). */
void wf_kern_axpby(float *y, const float *x, float a, float b, size_t n) {
    if (b == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= ADAMW_PARALLEL_MIN_)
        for (size_t i = 0; i < n; i++) y[i] = a * x[i];
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= ADAMW_PARALLEL_MIN_)
    for (size_t i = 0; i < n; i++) y[i] = a * x[i] + b * y[i];
}

void wf_kern_axpby_ref(float *y, const float *x, float a, float b, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = b == 0.0f ? (float)((double)a * x[i]) : (float)((double)a * x[i] + (double)b * y[i]);
}
