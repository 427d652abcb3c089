/* Reductions whose bits do not depend on the thread count: the sum of
 * squares behind every gradient norm (the optimizer's, ZeRO-1's over the
 * ranks' shards). */
#include <math.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

/* The sum is split into this many fixed blocks, added in order: the block
 * boundaries depend only on n, so the sum's rounding does too. */
#define SUMSQ_BLOCKS_ 256
/* Below this many floats one thread does all blocks. */
#define SUMSQ_PARALLEL_MIN_ 32768

double wf_kern_sumsq(const float *x, size_t n) {
    size_t per = (n + SUMSQ_BLOCKS_ - 1) / SUMSQ_BLOCKS_;
    double part[SUMSQ_BLOCKS_];
#pragma omp parallel for schedule(static) if (n >= SUMSQ_PARALLEL_MIN_)
    for (int b = 0; b < SUMSQ_BLOCKS_; b++) {
        size_t lo = (size_t)b * per, hi = lo + per;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[b] = s;
    }
    double sum = 0;
    for (int b = 0; b < SUMSQ_BLOCKS_; b++) sum += part[b];
    return sum;
}

double wf_kern_sumsq_ref(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

size_t wf_kern_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

void wf_kern_loss_sum(const float *losses, const int32_t *targets, size_t n, double *sum, size_t *n_valid) {
    double s = 0.0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (targets[i] < 0) continue;
        s += losses[i];
        k++;
    }
    *sum = s;
    *n_valid = k;
}
