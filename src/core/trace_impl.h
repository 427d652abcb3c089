/* Internals of the span recorder (trace.c, trace_write.c), shared by its
 * two files and its unit tests. trace.c records and decides what to write;
 * trace_write.c only turns a snapshot into a file: it calls nothing in
 * trace.c. Not part of the API. */
#ifndef WEFT_CORE_TRACE_IMPL_H
#define WEFT_CORE_TRACE_IMPL_H

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
wf_status wf__trace_write_capture(const trace_write_job *job, int64_t *n_events);

#endif
