/* Internal helpers shared by the kernel files: OpenMP when the build has it
 * (the ThreadSanitizer build does not; the pragmas are then ignored and
 * these fall back to one thread). */
#ifndef WEFT_KERN_IMPL_H
#define WEFT_KERN_IMPL_H

#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define kern_thread_num_() omp_get_thread_num()
#else
#define kern_thread_num_() 0
#endif

/* Marks a function that gcc and clang compile three times, for AVX-512,
 * AVX2 and the baseline x86-64 (SSE2) the build targets; the loader picks
 * the best one the CPU has (an ifunc, resolved once). For the exp-heavy
 * vector loops (cross-entropy, softmax, SwiGLU), which run several times
 * faster with wider vectors (bench/README.md, "Measurements behind choices
 * in the code"). Only plain functions: gcc outlines an OpenMP region
 * before it makes the clones, so a parallel loop calls a cloned function
 * per row rather than being one. Results are the same on any thread count,
 * but may differ in the last bits between CPUs that pick different
 * clones (vector width changes the order of a sum). Sanitizer builds define
 * WF_NO_CLONES: the ifunc resolvers run before the sanitizer runtime is up
 * and crash ThreadSanitizer binaries at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(WF_NO_CLONES)
#define KERN_CLONES_ __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERN_CLONES_
#endif

/* Columns per task in the column-split reductions (RMSNorm weight and
 * embedding gradients): wide enough for contiguous loads, narrow enough to
 * give every thread work at C = 64. */
#define KERN_COL_BLOCK_ 32

/* exp(x) in fp32 for loops the compiler vectorizes (under `omp simd`; no
 * branches, no libm call): x = n ln2 + r with |r| <= ln2/2, exp(r) by its
 * Taylor series to degree 7 (truncation error r^8/8! < 6e-9, a tenth of an
 * fp32 ulp at 1), times 2^n made in the exponent bits. Within 1.3 ulp of
 * exp on [-87, 88] (checked by tests/unit/test_kernels.c); 0 below about
 * -87.3 (exp underflows to subnormals there) and for -inf; +inf and
 * overflow give inf, NaN gives NaN.
 *
 * n comes from the bits of x*log2(e) + 1.5*2^23 (adding that constant
 * rounds to an integer, which lands in the low mantissa bits), so no float
 * is ever converted to int and every step is plain arithmetic or integer
 * min/max, which gcc vectorizes at -O2. */
static inline float kern_expf_(float x) {
    /* x*log2(e) + 1.5*2^23 gives n only while |x*log2(e)| < 2^22: clamp
     * |x| to 128 first (below -128 the result is 0, above 128 inf either
     * way). Without it x in about [-1.7e7, -8.7e6] gave garbage: attention
     * scores that large made NaN. The clamp is integer min on the bits of
     * |x| (for non-negative floats the bits order as the values do), NaN
     * kept by a select: a float compare-and-select here (x < -128 ? -128 :
     * x) left every loop that calls this unvectorized in gcc 12 ("control
     * flow in loop"), which cost the training step 40% (bench/README.md,
     * "kern_expf_'s clamp"); tests/py/test_vectorized.py checks the loops. */
    uint32_t xa;
    memcpy(&xa, &x, sizeof xa);
    uint32_t sign = xa & 0x80000000u;
    xa &= 0x7fffffffu;
    uint32_t xc = xa < 0x43000000u ? xa : 0x43000000u; /* 0x43000000 is 128.0f */
    xa = xa > 0x7f800000u ? xa : xc;                    /* NaN stays NaN */
    xa |= sign;
    memcpy(&x, &xa, sizeof x);
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;      /* few bits: n * ln2_hi is exact */
    const float ln2_lo = 1.42860676533018724e-6f; /* ln2 - ln2_hi */
    const float magic = 12582912.0f;              /* 1.5 * 2^23, bits 0x4b400000 */
    float t = x * log2e + magic;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t ni = (int32_t)(tb - 0x4b400000u);
    int32_t keep = -(int32_t)(ni >= -126); /* all ones, or 0 to flush to zero */
    ni = ni > 127 ? 127 : ni;
    ni = ni < -126 ? -126 : ni;
    /* A flushed x becomes 0, so that r stays finite and p * 0 is 0. */
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    xb &= (uint32_t)keep;
    float xk;
    memcpy(&xk, &xb, sizeof xk);
    float n = (float)ni;
    float r = (xk - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = ((uint32_t)(ni + 127) << 23) & (uint32_t)keep;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
