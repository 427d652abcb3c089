/* Linear layers without bias: out = inp @ weight^T and its backward, all
 * three products through cblas_sgemm (row-major, weight stored
 * (out_features, in_features)). The `_ref` twins are triple loops summing in
 * double. */
#include <cblas.h>
#include <string.h>

#include "weft/kernels.h"

void wf_kern_matmul_fwd(float *out, const float *inp, const float *weight, int N, int C, int OC,
                        int accumulate) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {
        if (!accumulate) memset(out, 0, (size_t)N * (size_t)OC * sizeof *out);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
                accumulate ? 1.0f : 0.0f, out, OC);
}

void wf_kern_matmul_bwd(float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, int N, int C, int OC, int accumulate_dinp) {
    if (N <= 0 || C <= 0) return;
    if (OC <= 0) {
        if (dinp && !accumulate_dinp) memset(dinp, 0, (size_t)N * (size_t)C * sizeof *dinp);
        return;
    }
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight,
                    C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
}

void wf_kern_matmul_fwd_ref(float *out, const float *inp, const float *weight, int N, int C,
                            int OC, int accumulate) {
    for (int n = 0; n < N; n++) {
        const float *inp_n = inp + (size_t)n * C;
        float *out_n = out + (size_t)n * OC;
        for (int o = 0; o < OC; o++) {
            const float *w_o = weight + (size_t)o * C;
            double acc = accumulate ? out_n[o] : 0.0;
            for (int c = 0; c < C; c++) acc += (double)inp_n[c] * w_o[c];
            out_n[o] = (float)acc;
        }
    }
}

void wf_kern_matmul_bwd_ref(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC, int accumulate_dinp) {
    if (dinp) {
        for (int n = 0; n < N; n++) {
            const float *dout_n = dout + (size_t)n * OC;
            for (int c = 0; c < C; c++) {
                double acc = accumulate_dinp ? dinp[(size_t)n * C + c] : 0.0;
                for (int o = 0; o < OC; o++) acc += (double)dout_n[o] * weight[(size_t)o * C + c];
                dinp[(size_t)n * C + c] = (float)acc;
            }
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double acc = dweight[(size_t)o * C + c];
            for (int n = 0; n < N; n++)
                acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            dweight[(size_t)o * C + c] = (float)acc;
        }
    }
}
