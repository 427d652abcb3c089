/* weft: threads and time. A fork-join helper for data-parallel loops over
 * pthreads (used by the tokenizer and the shard writer), the default thread
 * count, and a monotonic clock. The model's kernels use OpenMP instead; the
 * two never run at the same time. */
#ifndef WEFT_THREAD_H
#define WEFT_THREAD_H

#include "weft/status.h"

/* Number of threads to use when a command is not told: WEFT_THREADS if set,
 * else the number of online CPUs. Always >= 1. */
int wf_default_threads(void);

/* Runs fn(ctx, tid, n_threads) for tid in [0, n_threads) on n_threads
 * threads (the caller runs tid 0) and waits for all of them. Returns the
 * first non-OK status any of them returned (its message is copied into the
 * caller's thread). */
typedef wf_status (*wf_task_fn)(void *ctx, int tid, int n_threads);
wf_status wf_parallel_run(int n_threads, wf_task_fn fn, void *ctx);

/* Seconds from an arbitrary fixed point, monotonic. */
double wf_time_now(void);

#endif
