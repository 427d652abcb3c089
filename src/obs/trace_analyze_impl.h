/* Internals of the trace analyzer (trace_json.c, trace_analyze.c,
 * trace_report.c) shared by its files and its unit tests: the streaming
 * JSON reader. Not part of the API. */
#ifndef WEFT_OBS_TRACE_ANALYZE_IMPL_H
#define WEFT_OBS_TRACE_ANALYZE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/trace_analyze.h"

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
wf_status wf__trace_jreader_open(const char *path, trace_jreader **out);
void wf__trace_jreader_close(trace_jreader *r);

/* Reads up to the next event of the top-level "traceEvents" array (or of a
 * top-level array: the JSON Array Format), reading
 * the top-level keys met on the way (distributedInfo). Returns WF_OK with
 * *got = 1 and the event, or *got = 0 at the end of the document. */
wf_status wf__trace_jreader_next(trace_jreader *r, trace_jevent *ev, int *got);

/* distributedInfo.rank / world_size if seen so far (-1 if not). */
int64_t wf__trace_jreader_rank(const trace_jreader *r);
int64_t wf__trace_jreader_world_size(const trace_jreader *r);
/* Whether the document had a top-level "traceEvents" array (so far). */
int wf__trace_jreader_saw_events(const trace_jreader *r);

/* Parses a JSON number's text into ns from microseconds, exactly for up to
 * 9 decimals (rounded half away from zero beyond). Returns 0 if it is not a
 * number. Exposed for the unit tests. */
int wf__trace_us_text_to_ns(const char *s, size_t len, int64_t *ns);

#endif
