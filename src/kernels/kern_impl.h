/* Internal helpers shared by the kernel files: OpenMP when the build has it
 * (the ThreadSanitizer build does not; the pragmas are then ignored and
 * these fall back to one thread). */
#ifndef WEFT_KERN_IMPL_H
#define WEFT_KERN_IMPL_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#define kern_thread_num_() omp_get_thread_num()
#else
#define kern_thread_num_() 0
#endif

/* Columns per task in the column-split reductions (RMSNorm weight and
 * embedding gradients): wide enough for contiguous loads, narrow enough to
 * give every thread work at C = 64. */
#define KERN_COL_BLOCK_ 32

/* exp(x) in fp32 for loops the compiler vectorizes (under `omp simd`):
 * x = n ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series to degree 7
 * (truncation error r^8/8! < 6e-9, a tenth of an fp32 ulp at 1), times
 * 2^n built in the exponent bits. Accurate to about 2 ulp on [-87, 88];
 * below -87 it returns 0, above 88 exp(88). Not a libm replacement: the
 * kernels' callers pass x <= 0 (softmax) or use it where those limits do
 * not matter (the sigmoid of SwiGLU). */
static inline float kern_expf_(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;      /* few bits: n * ln2_hi is exact */
    const float ln2_lo = 1.42860676533018724e-6f; /* ln2 - ln2_hi */
    const float round_magic = 12582912.0f;        /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = (xc * log2e + round_magic) - round_magic;
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return x < -87.0f ? 0.0f : p * scale.f;
}

#endif
