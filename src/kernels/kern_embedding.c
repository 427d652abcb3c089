/* Token embedding: out[n] = wte[tokens[n]], and the scatter-add backward.
 * The backward is split over column blocks, each thread walking all rows in
 * order, so repeated tokens never race and the sums are deterministic. */
#include <string.h>

#include "kernels/kern_impl.h"
#include "weft/kernels.h"

void wf_kern_embedding_fwd(float *out, const int32_t *tokens, const float *wte, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof *out);
}

void wf_kern_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int C) {
    int n_blocks = (C + KERN_COL_BLOCK_ - 1) / KERN_COL_BLOCK_;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int c0 = blk * KERN_COL_BLOCK_;
        int c1 = c0 + KERN_COL_BLOCK_ < C ? c0 + KERN_COL_BLOCK_ : C;
        for (int n = 0; n < N; n++) {
            float *restrict dw = dwte + (size_t)tokens[n] * C;
            const float *restrict dy = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dw[c] += dy[c];
        }
    }
}

void wf_kern_embedding_fwd_ref(float *out, const int32_t *tokens, const float *wte, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = wte[(size_t)tokens[n] * C + c];
}

void wf_kern_embedding_bwd_ref(float *dwte, const float *dout, const int32_t *tokens, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dwte[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
}
