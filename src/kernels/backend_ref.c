/* Backend `ref`: the kernels' `_ref` twins (serial loops, sums in double)
 * as a whole backend, on host memory: the oracle `weft ops-check` holds
 * every other backend against. The matmul is a plain triple loop over the
 * descriptor, in double; the RoPE tables, the first non-finite element and
 * the loss sum have one implementation, shared with cpu. */
#define BK_(op) ref_##op
#define KERN_(op) wf_kern_##op##_ref
#include "kernels/backend_host_ops.h"

static const char *ref_last_error(void *state) { return "ref ops do not fail"; }

static int ref_matmul(void *state, const wf_matmul_desc *d) {
    int batch = d->batch > 0 ? d->batch : 1;
    for (int i = 0; i < batch; i++) {
        const float *a = CF_(d->a) + i * d->stride_a, *b = CF_(d->b) + i * d->stride_b;
        float *c = F_(d->c) + i * d->stride_c;
        for (int r = 0; r < d->m; r++)
            for (int col = 0; col < d->n; col++) {
                double acc = 0.0;
                for (int k = 0; k < d->k; k++) {
                    double x = d->trans_a ? a[(size_t)k * d->lda + r] : a[(size_t)r * d->lda + k];
                    double y = d->trans_b ? b[(size_t)col * d->ldb + k] : b[(size_t)k * d->ldb + col];
                    acc += x * y;
                }
                float *out = &c[(size_t)r * d->ldc + col];
                *out = (float)((d->accumulate ? (double)*out : 0.0) + (double)d->alpha * acc);
            }
    }
    return 0;
}

static const wf_backend_ops ref_ops_ = {
    .name = "ref",
    .last_error = ref_last_error,
    .matmul = ref_matmul,
    BACKEND_HOST_OPS_,
};

const wf_backend_ops *wf__backend_ref_ops(void) { return &ref_ops_; }
