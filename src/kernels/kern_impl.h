/* Internal helpers shared by the kernel files: OpenMP when the build has it
 * (the ThreadSanitizer build does not; the pragmas are then ignored and
 * these fall back to one thread). */
#ifndef WEFT_KERN_IMPL_H
#define WEFT_KERN_IMPL_H

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

#endif
