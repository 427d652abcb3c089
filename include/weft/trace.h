/* weft: profiling traces, the recording half (core: every layer may record
 * spans). The analysis of written traces is in weft/trace_analyze.h.
 *
 * The tracer records spans (a category, a name, a start and an end) into
 * per-thread buffers and writes one Chrome trace JSON per rank per capture
 * window, in the layout PyTorch's Kineto writes, so that Holistic Trace
 * Analysis (HTA) and Perfetto read it (docs/formats/trace.md). Captures run
 * on a schedule (skip_first, wait, warmup, active, repeat, as
 * torch.profiler.schedule) and on demand: `weft trace request RUN_DIR
 * --steps N` drops a request file that the running job picks up at its next
 * step (wf_trace_step polls it, or the trainer calls wf_trace_request_poll).
 *
 * Cost: while no capture records, wf_trace_begin/wf_trace_end are one load
 * and one predictable branch each (inline, below). While recording, a span
 * is two clock reads and a store into the thread's preallocated buffer: no
 * lock, no allocation (a thread's buffer is allocated by its first recorded
 * span, or by wf_trace_thread_setup). bench/trace_bench.c measures both.
 *
 * The tracer is one per process (its on/off flag must be a global to be that
 * cheap); wf_trace_init/wf_trace_step/wf_trace_shutdown belong to the
 * training thread. Spans may be recorded from any thread.
 *
 * Categories and what HTA sees (docs/tracing.md has the full mapping): the
 * four device categories (compute, communication, memory, I/O) are written
 * twice, as a "cpu_op" on the recording thread and as a "kernel" on a
 * pseudo-device stream of that thread, linked by a correlation id; that
 * stream is what HTA's temporal breakdown, idle time and overlap analyse.
 * Data wait and regions are host-only events, so the device is idle during
 * a data wait.
 *
 * Written traces are read back by the analyzer (weft/trace_analyze.h).
 */
#ifndef WEFT_TRACE_H
#define WEFT_TRACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/status.h"

/* ------------------------------------------------------------------------
 * Recording spans
 * ------------------------------------------------------------------------ */

typedef enum {
    WF_TRACE_COMPUTE = 0, /* a leaf op doing arithmetic: matmul, attention, AdamW update */
    WF_TRACE_COMM,        /* a collective or transfer between ranks (all-reduce bucket) */
    WF_TRACE_MEMORY,      /* a memory copy: checkpoint snapshot, packing a bucket */
    WF_TRACE_IO,          /* file I/O: checkpoint write, fsync */
    WF_TRACE_DATA_WAIT,   /* the step waits for the data loader (host only) */
    WF_TRACE_REGION,      /* a region grouping other spans: forward, backward, layer 3 (host only) */
    WF_TRACE_N_CATS
} wf_trace_cat;

/* Short lowercase name of a category ("compute", "communication", "memory",
 * "io", "data_wait", "region"), as written in the traces' args.weft_cat. */
const char *wf_trace_cat_name(wf_trace_cat cat);

/* A recorded span, for wf_trace_end. Negative: nothing is being recorded. */
typedef int64_t wf_trace_span;

/* Non-zero while a capture records (warmup or active). Read with a relaxed
 * load by the inline functions below; written only by the tracer. */
extern atomic_int wf_trace_on_;

wf_trace_span wf_trace_begin_slow_(wf_trace_cat cat, const char *name, int64_t bytes);
void wf_trace_end_slow_(wf_trace_span span);

/* Starts a span on the calling thread. `name` is stored as a pointer, not
 * copied: it must stay valid until the capture is written (use string
 * literals or names that live as long as the process). Device-category
 * spans (compute, communication, memory, I/O) should be leaves: one that
 * starts inside another device span of the same thread is written as a
 * host event only, so that a stream never runs two kernels at once. */
static inline wf_trace_span wf_trace_begin(wf_trace_cat cat, const char *name) {
    if (__builtin_expect(!atomic_load_explicit(&wf_trace_on_, memory_order_relaxed), 1)) return -1;
    return wf_trace_begin_slow_(cat, name, -1);
}

/* As wf_trace_begin, recording the bytes moved (communication, memory, I/O):
 * written as args.bytes. */
static inline wf_trace_span wf_trace_begin_bytes(wf_trace_cat cat, const char *name,
                                                 int64_t bytes) {
    if (__builtin_expect(!atomic_load_explicit(&wf_trace_on_, memory_order_relaxed), 1)) return -1;
    return wf_trace_begin_slow_(cat, name, bytes);
}

/* Ends a span begun on the same thread. Accepts negative spans (no-op) and
 * spans of a capture that has ended since (ignored). */
static inline void wf_trace_end(wf_trace_span span) {
    if (span >= 0) wf_trace_end_slow_(span);
}

/* The tracer's clock: monotonic nanoseconds (CLOCK_MONOTONIC). */
uint64_t wf_trace_now(void);

/* Records a finished span with explicit times from wf_trace_now (t1 >= t0),
 * e.g. an operation timed elsewhere. No-op while nothing records. */
void wf_trace_record(wf_trace_cat cat, const char *name, uint64_t t0, uint64_t t1, int64_t bytes);

/* Names the calling thread in traces ("loader", "comm", "ckpt-writer") and
 * fixes the pseudo-device stream its device spans go to (stream > 0; 0:
 * the next free number from 20). Give long-lived threads the same stream on
 * every rank so that cross-rank analyses compare like with like. Allocates
 * the thread's buffer now, so that its first span does not. `name` is
 * copied. The training thread is "main", stream 7, set by wf_trace_init.
 * Fails only when out of memory. Without a prior wf_trace_init it only
 * remembers the name. */
wf_status wf_trace_thread_setup(const char *name, int stream);

/* ------------------------------------------------------------------------
 * Schedule
 * ------------------------------------------------------------------------ */

/* torch.profiler.schedule: after skip_first steps, cycles of `wait` idle
 * steps, `warmup` steps recorded and discarded (they warm the buffers up),
 * and `active` recorded steps written as one capture; `repeat` cycles, or
 * forever when 0. active == 0 disables the schedule. */
typedef struct {
    int64_t skip_first, wait, warmup, active, repeat;
} wf_trace_schedule;

typedef enum {
    WF_TRACE_NONE = 0,     /* not recording */
    WF_TRACE_WARMUP,       /* recording, discarded when the active steps begin */
    WF_TRACE_RECORD,       /* recording */
    WF_TRACE_RECORD_SAVE   /* recording; the capture is written when this step ends */
} wf_trace_action;

/* What the schedule does at the step with this 0-based index (the number of
 * steps seen since the tracer started), exactly as torch.profiler.schedule
 * answers for the same arguments. */
wf_trace_action wf_trace_schedule_action(const wf_trace_schedule *s, int64_t index);

/* ------------------------------------------------------------------------
 * The tracer
 * ------------------------------------------------------------------------ */

typedef struct {
    const char *dir;          /* captures go to <dir>/step-<first step>/rank-<rank>.trace.json;
                                 required (the trainer passes RUN_DIR/traces) */
    const char *request_dir;  /* where `weft trace request` leaves its file (the run directory);
                                 NULL: no on-demand captures */
    int poll_requests;        /* 1: wf_trace_step polls request_dir itself. Set it on a single
                                 rank only; with several ranks, rank 0 polls
                                 (wf_trace_request_poll), broadcasts, and every rank calls
                                 wf_trace_capture, so that all ranks capture the same steps */
    int rank, world_size;     /* for distributedInfo */
    const char *backend;      /* distributedInfo.backend: "mpi", "single", ... (NULL: "single") */
    wf_trace_schedule schedule;
    int64_t buffer_events;    /* events per thread buffer (0: 65536); spans beyond are dropped
                                 and counted in the trace's weft.dropped_events */
    uint64_t base_unix_ns;    /* trace timestamps are microseconds after this Unix time (ns),
                                 written as baseTimeNanoseconds; every rank must use the same
                                 base for cross-rank analyses (0: now rounded down to a multiple
                                 of 1000 s, the same on ranks started within one such period) */
} wf_trace_config;

/* Starts the tracer; the calling thread becomes "main" (stream 7) and must
 * be the one that calls wf_trace_step. Copies what it needs from cfg. */
wf_status wf_trace_init(const wf_trace_config *cfg);

/* Call at the start of every training step, before the step's first span,
 * with the number of the step about to run. Ends the previous step's
 * ProfilerStep marker, writes a capture whose last step that was, polls for
 * a request (poll_requests), and starts or stops recording by the schedule
 * or a request. Errors (a capture that cannot be written) leave the tracer
 * usable; the trainer logs them and goes on. No-op without wf_trace_init. */
wf_status wf_trace_step(int64_t step);

/* Records the next n_steps steps (from the next wf_trace_step on) as one
 * capture, whatever the schedule says; `trigger` (e.g. "request <id>") is
 * written into the trace. If a capture is recording, this one follows it. */
wf_status wf_trace_capture(int64_t n_steps, const char *trigger);

/* Ends the current step marker and writes a capture in progress (a final
 * step, or the end of training); recording stops. */
wf_status wf_trace_flush(void);

/* Stops recording and drops the capture in progress without writing it
 * (e.g. when the step it covers failed). */
void wf_trace_discard(void);

/* Flushes, stops the tracer and frees its buffers. Safe without init. The
 * threads that record spans must have stopped recording. */
wf_status wf_trace_shutdown(void);

/* Counters since init, for tests and the bench. */
typedef struct {
    int64_t captures_written; /* trace files written */
    int64_t events_written;   /* spans written (each device span counts once) */
    int64_t dropped;          /* spans dropped because a thread buffer was full */
    int64_t requests_served;  /* on-demand requests started */
    char last_path[4096];     /* the last trace file written ("" if none) */
} wf_trace_stats;
void wf_trace_get_stats(wf_trace_stats *out);

/* ------------------------------------------------------------------------
 * On-demand requests (RUN_DIR/trace-request.json, docs/formats/trace.md)
 * ------------------------------------------------------------------------ */

#define WF_TRACE_REQUEST_FILE "trace-request.json"

typedef struct {
    int64_t steps;          /* steps to capture, >= 1 */
    char id[64];            /* identifies the request in the trace it produces */
    int64_t requested_unix_ns;
} wf_trace_request;

/* Writes RUN_DIR/trace-request.json atomically (replacing a pending one).
 * The run directory must exist. */
wf_status wf_trace_request_write(const char *run_dir, int64_t steps, wf_trace_request *out);

/* Looks for a request in run_dir: *found = 0 when there is none (one stat
 * call). When there is one, reads it, removes the file (the request is
 * claimed: call this on one rank only) and sets *found = 1. A malformed
 * file is removed too and reported as WF_ERR_FORMAT naming the file. */
wf_status wf_trace_request_poll(const char *run_dir, wf_trace_request *req, int *found);

/* wf_trace_capture of a request's steps, with "request <id>" as the
 * trigger: what every rank calls for a request one rank claimed. */
wf_status wf_trace_capture_request(const wf_trace_request *req);

#endif
