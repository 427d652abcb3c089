/* RMSNorm: out = inp * rstd * weight with rstd = 1/sqrt(mean(inp^2) + eps)
 * per row, and its backward. Rows are independent and split over threads;
 * the weight gradient, a sum over rows, is split over column blocks so that
 * each element is summed by one thread in row order (deterministic for any
 * thread count). Sums run in fp32 vector lanes: rows are at most a few
 * thousand wide, and the weight gradient's N rows are summed per lane. */
#include <math.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

void wf_kern_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *weight, int N,
                         int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict y = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = (float)(1.0 / sqrt((double)ss / C + (double)eps));
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
        rstd[n] = r;
    }
}

/* With y_i = w_i x_i r and r = (mean(x^2) + eps)^(-1/2):
 *   dx_j = r w_j dy_j - (r^3 / C) x_j sum_i(w_i dy_i x_i)
 *   dw_i = sum over rows of dy_i x_i r */
void wf_kern_rmsnorm_bwd(float *dinp, float *dweight, const float *dout, const float *inp,
                         const float *weight, const float *rstd, int N, int C) {
    int n_blocks = (C + KERN_COL_BLOCK_ - 1) / KERN_COL_BLOCK_;
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict dy = dout + (size_t)n * C;
            float *restrict dx = dinp + (size_t)n * C;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
            float r = rstd[n];
            float k = (float)((double)r * r * r * dot / C);
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
        }
#pragma omp for schedule(static)
        for (int blk = 0; blk < n_blocks; blk++) {
            int c0 = blk * KERN_COL_BLOCK_;
            int c1 = c0 + KERN_COL_BLOCK_ < C ? c0 + KERN_COL_BLOCK_ : C;
            float acc[KERN_COL_BLOCK_] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict x = inp + (size_t)n * C;
                const float *restrict dy = dout + (size_t)n * C;
                float r = rstd[n];
#pragma omp simd
                for (int c = c0; c < c1; c++) acc[c - c0] += dy[c] * x[c] * r;
            }
            for (int c = c0; c < c1; c++) dweight[c] += (float)acc[c - c0];
        }
    }
}

void wf_kern_rmsnorm_fwd_ref(float *out, float *rstd, const float *inp, const float *weight, int N,
                             int C, float eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)inp[(size_t)n * C + c] * inp[(size_t)n * C + c];
        double r = 1.0 / sqrt(ss / C + (double)eps);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (float)(inp[(size_t)n * C + c] * r * weight[c]);
        rstd[n] = (float)r;
    }
}

void wf_kern_rmsnorm_bwd_ref(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double r = rstd[n], dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)weight[c] * dy[c] * x[c];
        for (int c = 0; c < C; c++) {
            dinp[(size_t)n * C + c] += (float)(r * weight[c] * dy[c] - r * r * r / C * dot * x[c]);
        }
    }
    for (int c = 0; c < C; c++) {
        double acc = dweight[c];
        for (int n = 0; n < N; n++)
            acc += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dweight[c] = (float)acc;
    }
}
