/* Internals of the tracer (trace.c, trace_write.c) and the trace analyzer
 * (trace_json.c, trace_analyze.c, trace_report.c). Not part of the API. */
#ifndef WEFT_OBS_TRACE_IMPL_H
#define WEFT_OBS_TRACE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/trace.h"

/* Internal category of the ProfilerStep markers (arg = the step number). */
#define TRACE_CAT_STEP 15

/* One span in a thread's buffer. The owner writes every field, then
 * publishes the slot by a release store of its buffer's n_pub; t1 stays 0
 * while the span is open and is written atomically by wf_trace_end, so that
 * the writer may read a buffer its owner is still appending to. */
typedef struct {
    uint64_t t0;           /* ns, wf_trace_now */
    _Atomic uint64_t t1;   /* ns; 0 while open */
    const char *name;
    int64_t arg;           /* bytes (-1: none), or the step of a marker */
    uint32_t cat;          /* wf_trace_cat or TRACE_CAT_STEP */
} trace_ev;

/* A thread's buffer. `gen` is the recording segment its contents belong to:
 * the owner clears the buffer when it sees a newer segment. */
typedef struct trace_tbuf {
    trace_ev *ev;           /* (cap) */
    int64_t cap;
    int64_t n;              /* owner only */
    atomic_llong n_pub;     /* slots published */
    atomic_llong gen;
    atomic_llong dropped;   /* spans refused in segment `gen` */
    atomic_int detached;    /* the owner thread has exited */
    long long owner;        /* registration serial of the owner thread */
    long tid;               /* kernel thread id */
    int stream;             /* pseudo-device stream of its device spans */
    char name[48];
    struct trace_tbuf *next;
} trace_tbuf;

/* A snapshot of one buffer for the writer. */
typedef struct {
    long tid;
    int stream;
    const char *thread_name;
    trace_ev *ev;            /* copies, sorted by (t0, longest first) */
    int64_t n;
} trace_thread_snap;

typedef struct {
    const char *path;        /* the file to write (atomically) */
    int rank, world_size;
    const char *backend;
    uint64_t base_unix_ns;
    int64_t mono_to_unix_ns; /* add to a wf_trace_now value to get Unix ns */
    uint64_t end_ns;         /* wf_trace_now at the end of the window: closes open spans */
    int64_t first_step, last_step;
    const char *trigger;
    int64_t dropped;
    trace_thread_snap *threads;
    int n_threads;
} trace_write_job;

/* Writes one rank's capture (trace_write.c). Adds the number of spans
 * written to *n_events. */
wf_status trace_write_capture(const trace_write_job *job, int64_t *n_events);

/* Appends `s` to `out` as a JSON string body (no quotes), escaped. */
void trace_json_escape(FILE *out, const char *s);

/* ---- Streaming JSON reader (trace_json.c) ------------------------------ */

/* One event of traceEvents, flattened to what the analyzer reads. Strings
 * point into the reader and are valid until the next event. */
typedef struct {
    char ph;                 /* 'X', 'M', ... (0: absent) */
    const char *name;        /* "" if absent */
    const char *cat;         /* NULL if absent */
    int has_ts, has_dur;
    int64_t ts_ns, dur_ns;   /* microsecond values converted exactly to ns */
    int64_t stream;          /* args.stream; -1 if absent or not an integer */
    int64_t correlation;     /* args.correlation; -1 if absent */
    const char *weft_cat;    /* args.weft_cat; NULL if absent */
} trace_jevent;

typedef struct trace_jreader trace_jreader;

/* Opens a trace (plain JSON, or gzip-compressed). */
wf_status trace_jreader_open(const char *path, trace_jreader **out);
void trace_jreader_close(trace_jreader *r);

/* Reads up to the next event of the top-level "traceEvents" array (or of a
 * top-level array: the JSON Array Format), reading
 * the top-level keys met on the way (distributedInfo). Returns WF_OK with
 * *got = 1 and the event, or *got = 0 at the end of the document. */
wf_status trace_jreader_next(trace_jreader *r, trace_jevent *ev, int *got);

/* distributedInfo.rank / world_size if seen so far (-1 if not). */
int64_t trace_jreader_rank(const trace_jreader *r);
int64_t trace_jreader_world_size(const trace_jreader *r);
/* Whether the document had a top-level "traceEvents" array (so far). */
int trace_jreader_saw_events(const trace_jreader *r);

/* Parses a JSON number's text into ns from microseconds, exactly for up to
 * 9 decimals (rounded half away from zero beyond). Returns 0 if it is not a
 * number. Exposed for the unit tests. */
int trace_us_text_to_ns(const char *s, size_t len, int64_t *ns);

#endif
