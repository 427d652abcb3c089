/* Thread count of the kernels: one number for the OpenMP loops and for
 * OpenBLAS, which in Debian's OpenMP build shares the same thread pool.
 * And a check of the kernels OpenBLAS picked for this CPU. */
#include "weft/kernels.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kern_impl.h"

int wf_kern_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void wf_kern_set_threads(int n) {
    if (n < 1) n = 1;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

const char *wf_kern_blas_core(void) {
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

const char *wf_kern_blas_config(void) {
    const char *config = openblas_get_config();
    return config ? config : "unknown";
}

const char *wf_kern_blas_better_core(void) {
    static const char *const sse_only[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                           "Nehalem", "Atom", "Katmai", "Coppermine",
                                           "Northwood", "Banias"};
    const char *core = wf_kern_blas_core();
    int slow = 0;
    for (size_t i = 0; i < sizeof sse_only / sizeof *sse_only; i++)
        if (strcmp(core, sse_only[i]) == 0) slow = 1;
    if (!slow) return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : NULL;
#else
    return NULL;
#endif
}

int wf_kern_blas_check(char *msg, size_t size) {
    const char *better = wf_kern_blas_better_core();
    if (!better) return 0;
    snprintf(msg, size,
             "OpenBLAS chose its %s (SSE) kernels on a CPU with %s: sgemm runs several times "
             "slower than it could; start the program with OPENBLAS_CORETYPE=%s",
             wf_kern_blas_core(), strcmp(better, "SkylakeX") == 0 ? "AVX-512" : "AVX2", better);
    return 1;
}
