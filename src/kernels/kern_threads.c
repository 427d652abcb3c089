/* Thread count of the kernels: one number for the OpenMP loops and for
 * OpenBLAS, which in Debian's OpenMP build shares the same thread pool. */
#include "weft/kernels.h"

#include <cblas.h>

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
