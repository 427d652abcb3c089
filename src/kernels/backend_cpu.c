/* Backend `cpu`: today's kernels (kern_*.c: OpenMP loops, OpenBLAS sgemm)
 * behind the table of backend_impl.h, on host memory. The seam has checked
 * every dtype (only f32, and i32 for ids), so each op is one kernel call;
 * all but the matmul are backend_host_ops.h's, over wf_kern_*. */
#include <cblas.h>

#define BK_(op) cpu_##op
#define KERN_(op) wf_kern_##op
#include "kernels/backend_host_ops.h"

static const char *cpu_last_error(void *state) { return "cpu ops do not fail"; }

static int cpu_matmul(void *state, const wf_matmul_desc *d) {
    int batch = d->batch > 0 ? d->batch : 1;
    if (d->m <= 0 || d->n <= 0) return 0;
    for (int i = 0; i < batch; i++) {
        const float *a = CF_(d->a) + i * d->stride_a, *b = CF_(d->b) + i * d->stride_b;
        float *c = F_(d->c) + i * d->stride_c;
        if (d->k <= 0) {
            if (!d->accumulate)
                for (int r = 0; r < d->m; r++) memset(c + r * d->ldc, 0, (size_t)d->n * sizeof *c);
            continue;
        }
        cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans, d->trans_b ? CblasTrans : CblasNoTrans,
                    d->m, d->n, d->k, d->alpha, a, (int)d->lda, b, (int)d->ldb, d->accumulate ? 1.0f : 0.0f, c,
                    (int)d->ldc);
    }
    return 0;
}

static const wf_backend_ops cpu_ops_ = {
    .name = "cpu",
    .last_error = cpu_last_error,
    .matmul = cpu_matmul,
    BACKEND_HOST_OPS_,
};

const wf_backend_ops *wf__backend_cpu_ops(void) { return &cpu_ops_; }
