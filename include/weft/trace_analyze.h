/* weft: analysis of profiling traces (`weft trace analyze`).
 *
 * wf_trace_analyze reads a directory of per-rank traces (the Chrome trace
 * JSON that the tracer in weft/trace.h writes, or PyTorch's Kineto traces),
 * one file at a time and each file as a stream, and computes Holistic Trace
 * Analysis's figures: the temporal breakdown, idle time, communication and
 * computation overlap, and the top ops (docs/tracing.md).
 */
#ifndef WEFT_TRACE_ANALYZE_H
#define WEFT_TRACE_ANALYZE_H

#include <stdint.h>
#include <stdio.h>

#include "weft/status.h"

typedef struct {
    int top;                  /* ops listed by total time (0: 10) */
    int skip_last_step;       /* 1: drop the last ProfilerStep, as HTA does by default
                                 (include_last_profiler_step=False) */
    double kernel_wait_us;    /* idle gaps shorter than this are kernel wait (HTA's
                                 consecutive_kernel_delay, default 30) */
    int stragglers;           /* HTA's num_candidates (0: 1) */
    int hta_rounding;         /* 1: round every event to whole microseconds as HTA does by
                                 default (start up, end down); 0: exact nanoseconds, as HTA
                                 with HTA_DISABLE_NS_ROUNDING=1 */
} wf_trace_analyze_opts;

/* Durations are in microseconds, as in the traces. */
typedef struct {
    double total, idle, compute, non_compute;   /* HTA get_temporal_breakdown */
    double communication, memory_io;            /* non_compute split: comm not under compute,
                                                   then the rest (memory, I/O, other) */
    double data_wait, other_idle;               /* idle split: during a host data wait, the rest */
} wf_trace_breakdown;

typedef struct {
    int stream;
    double host_wait, kernel_wait, other;       /* HTA get_idle_time_breakdown, per stream */
} wf_trace_idle;

typedef struct {
    char *name;
    int kind;                 /* 0 computation, 1 communication, 2 memory, 3 other (HTA's names) */
    int64_t count;
    double sum, mean, min, max, std; /* std: sample standard deviation (0 for one) */
} wf_trace_opstat;

typedef struct {
    int rank, world_size;
    char *path;
    int64_t events, kernels;                    /* trace events read; kernels analysed */
    int64_t first_step, last_step, n_steps;     /* ProfilerStep numbers analysed (-1 if none) */
    double step_mean, step_max;                 /* step durations */
    wf_trace_breakdown time;
    wf_trace_idle *idle;                        /* one per stream */
    int n_idle;
    double idle_host_wait, idle_kernel_wait, idle_other; /* summed over streams */
    double comm_total, overlap;                 /* merged comm time; of it under compute */
    double overlap_pct;                         /* 100 * overlap / comm_total (-1: no comm) */
    wf_trace_opstat *ops;                       /* every kernel name, by total time */
    int n_ops;
} wf_trace_rank;

typedef struct {
    char *dir;
    wf_trace_rank *ranks;     /* by rank */
    int n_ranks;
    int *stragglers;          /* HTA get_potential_stragglers */
    int n_stragglers;
    char straggler_kernel[256]; /* the communication kernel the straggler metric used ("" if none) */
    size_t peak_rss_bytes;    /* this process's peak resident memory after the analysis */
} wf_trace_analysis;

/* Analyses the traces in `dir`: every *.json / *.json.gz file directly in it
 * is a rank's trace (as HTA reads a directory). When dir holds no trace
 * but capture directories (as RUN_DIR/traces does), analyses the newest of
 * them and says so. Files are streamed; memory grows with the number of
 * kernels of one rank (about 40 bytes each), not with the file size. */
wf_status wf_trace_analyze(const char *dir, const wf_trace_analyze_opts *opts,
                           wf_trace_analysis *out);
void wf_trace_analysis_free(wf_trace_analysis *a);

/* Prints the analysis as text tables (top: ops listed per rank), or as one
 * JSON document (docs/tracing.md lists its fields). */
void wf_trace_analysis_print(const wf_trace_analysis *a, int top, FILE *out);
wf_status wf_trace_analysis_write_json(const wf_trace_analysis *a, int top, FILE *out);

#endif
