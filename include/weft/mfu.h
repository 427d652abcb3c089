/* weft: model FLOPs utilisation. The training FLOPs of a model per token,
 * and the peak they are measured against: a configured number, or this
 * machine's own sgemm rate, measured once and cached per CPU, thread count
 * and BLAS core (docs/metrics.md, "MFU"). */
#ifndef WEFT_MFU_H
#define WEFT_MFU_H

#include <stddef.h>

#include "weft/model.h"
#include "weft/status.h"

/* Training FLOPs (forward + backward) per token of a model at sequence
 * length T, as docs/train.md "FLOPs per token" defines it:
 * 6 * N_mm + 6 * L * T * C, N_mm = L * (2*C*C + 2*C*KV + 3*C*H) + V*C. */
double wf_model_flops_per_token(const wf_model_config *cfg, int T);

/* The peak MFU is measured against. */
typedef enum { WF_PEAK_CONFIG, WF_PEAK_MEASURED, WF_PEAK_CACHED } wf_peak_source;
typedef struct {
    double tflops;          /* TFLOP/s */
    wf_peak_source source;
    char key[256];          /* what the cache is keyed by: CPU, threads, BLAS core */
    char cache_path[1024];  /* "" when no cache was used */
    double measured_at;     /* Unix time of the measurement, 0 for a configured peak */
} wf_peak;

/* When wf_peak_get measures instead of using the cache. */
typedef enum {
    WF_PEAK_USE_CACHE = 0,   /* the cached entry when there is one */
    WF_PEAK_REMEASURE,       /* measure again and store that (metrics.remeasure_peak) */
    WF_PEAK_RECHECK,         /* measure again, but keep the cached entry when it is higher: load
                                only lowers a measurement (the trainer's recheck after an MFU
                                above 100%) */
} wf_peak_refresh;

typedef struct {
    double configured_tflops; /* > 0: use it, measure nothing */
    const char *cache_path;   /* NULL: $XDG_CACHE_HOME/weft/peak.json or ~/.cache/weft/peak.json;
                                 "": no cache */
    double budget_s;          /* time the benchmark may take; 0: 0.3 s */
    int max_n;                /* largest square size tried; 0: 2048 */
    wf_peak_refresh refresh;  /* when the cached entry is used or replaced */
} wf_peak_options;

/* The peak: the configured one, else the cached measurement for this
 * machine's key, else a short benchmark of square cblas_sgemm on
 * wf_kern_threads() threads, whose best rate is stored in the cache (see
 * `refresh` for when an entry is replaced)
 * (atomically; a cache that cannot be written is a warning, not an error). */
wf_status wf_peak_get(wf_peak *out, const wf_peak_options *opt);
/* "config", "measured" or "cached". */
const char *wf_peak_source_name(wf_peak_source s);
/* One line for the log: "peak 1.23 TFLOP/s (measured: sgemm on 8 threads of
 * <cpu>, cached in <path>)". */
void wf_peak_describe(const wf_peak *p, char *buf, size_t size);

#endif
