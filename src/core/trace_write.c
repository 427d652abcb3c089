/* Writes one rank's capture as a Chrome trace JSON in Kineto's layout
 * (docs/formats/trace.md): distributedInfo, deviceProperties,
 * baseTimeNanoseconds, then traceEvents, one event a line.
 *
 * Every device span (compute, communication, memory, I/O) becomes two
 * events with one correlation id: a "cpu_op" on its thread and a kernel on
 * the pseudo-device stream of that thread. Kernel names carry the prefixes
 * by which HTA classifies kernels (communication: "ncclKernel_", memory:
 * "Memcpy HtoH ", I/O: "Memcpy IO "). A device span that starts inside
 * another device span of its thread is written as a cpu_op only, so that a
 * stream never runs two kernels at once. Data waits, regions and the
 * ProfilerStep#N markers are "user_annotation" events on their thread.
 * Timestamps are microseconds after baseTimeNanoseconds with three
 * decimals (nanoseconds). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/trace_impl.h"
#include "weft/fileio.h"
#include "weft/json.h"
#include "weft/weft.h"

const char *wf_trace_cat_name(wf_trace_cat cat) {
    switch (cat) {
    case WF_TRACE_COMPUTE: return "compute";
    case WF_TRACE_COMM: return "communication";
    case WF_TRACE_MEMORY: return "memory";
    case WF_TRACE_IO: return "io";
    case WF_TRACE_DATA_WAIT: return "data_wait";
    case WF_TRACE_REGION: return "region";
    default: return "unknown";
    }
}

/* Prints ns as microseconds with three decimals. */
static void put_us(FILE *out, int64_t ns) {
    if (ns < 0) {
        fputc('-', out);
        ns = -ns;
    }
    fprintf(out, "%" PRId64 ".%03d", ns / 1000, (int)(ns % 1000));
}

static int is_device(uint32_t cat) {
    return cat == WF_TRACE_COMPUTE || cat == WF_TRACE_COMM || cat == WF_TRACE_MEMORY || cat == WF_TRACE_IO;
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* The kernel's name: HTA tells communication from memory from compute by
 * the name alone (hta/utils/utils.py get_kernel_type). */
static void put_kernel_name(FILE *out, uint32_t cat, const char *name) {
    if (cat == WF_TRACE_COMM && !(starts(name, "nccl") && strstr(name + 4, "Kernel")))
        fputs("ncclKernel_", out);
    else if (cat == WF_TRACE_MEMORY && !starts(name, "Memcpy") && !starts(name, "Memset") && !starts(name, "dma"))
        fputs("Memcpy HtoH ", out);
    else if (cat == WF_TRACE_IO && !starts(name, "Memcpy"))
        fputs("Memcpy IO ", out);
    wf_json_fput_body(out, name);
}

typedef struct {
    FILE *out;
    const trace_write_job *job;
    int pid;
    int first;           /* no event written yet */
} writer;

/* Opens an "X" event up to its name's text; ev_times closes the name. */
static void ev_head(writer *w, const char *cat) {
    fputs(w->first ? "\n  " : ",\n  ", w->out);
    w->first = 0;
    fprintf(w->out, "{\"ph\": \"X\", \"cat\": \"%s\", \"name\": \"", cat);
}

static void ev_times(writer *w, int pid, long tid, int64_t ts, int64_t dur) {
    fprintf(w->out, "\", \"pid\": %d, \"tid\": %ld, \"ts\": ", pid, tid);
    put_us(w->out, ts);
    fputs(", \"dur\": ", w->out);
    put_us(w->out, dur);
}

static void meta(writer *w, const char *what, int pid, long tid, const char *name) {
    fputs(w->first ? "\n  " : ",\n  ", w->out);
    w->first = 0;
    fprintf(w->out, "{\"ph\": \"M\", \"name\": \"%s\", \"pid\": %d, \"tid\": %ld, \"args\": {\"name\": \"", what,
            pid, tid);
    wf_json_fput_body(w->out, name);
    fputs("\"}}", w->out);
}

static int64_t rel_ns(const trace_write_job *job, uint64_t t) {
    return (int64_t)t + job->mono_to_unix_ns - (int64_t)job->base_unix_ns;
}

/* Writes one thread's events; returns the number of spans. */
static int64_t write_thread(writer *w, const trace_thread_snap *s, int64_t *corr) {
    const trace_write_job *job = w->job;
    FILE *out = w->out;
    uint64_t stack[64]; /* ends of the open device spans */
    int depth = 0;
    int64_t n_spans = 0;
    for (int64_t i = 0; i < s->n; i++) {
        const trace_ev *e = &s->ev[i];
        uint64_t t1 = atomic_load_explicit(&e->t1, memory_order_relaxed);
        int truncated = 0;
        if (t1 == 0 || t1 > job->end_ns) {
            if (t1 == 0) truncated = 1;
            t1 = t1 == 0 ? job->end_ns : t1;
        }
        if (t1 < e->t0) t1 = e->t0;
        int64_t ts = rel_ns(job, e->t0), dur = (int64_t)(t1 - e->t0);
        n_spans++;
        if (e->cat == TRACE_CAT_STEP) {
            ev_head(w, "user_annotation");
            fprintf(out, "ProfilerStep#%" PRId64, e->arg);
            ev_times(w, w->pid, s->tid, ts, dur);
            fprintf(out, ", \"args\": {\"weft_cat\": \"step\"%s}}", truncated ? ", \"truncated\": 1" : "");
            continue;
        }
        const char *cname = wf_trace_cat_name((wf_trace_cat)e->cat);
        if (!is_device(e->cat)) {
            ev_head(w, "user_annotation");
            wf_json_fput_body(out, e->name);
            ev_times(w, w->pid, s->tid, ts, dur);
            fprintf(out, ", \"args\": {\"weft_cat\": \"%s\"%s}}", cname, truncated ? ", \"truncated\": 1" : "");
            continue;
        }
        while (depth > 0 && stack[depth - 1] <= e->t0) depth--;
        char bytes[48] = "";
        if (e->arg >= 0) snprintf(bytes, sizeof bytes, ", \"bytes\": %" PRId64, e->arg);
        if (depth > 0) { /* inside another device span: host event only */
            ev_head(w, "cpu_op");
            wf_json_fput_body(out, e->name);
            ev_times(w, w->pid, s->tid, ts, dur);
            fprintf(out, ", \"args\": {\"weft_cat\": \"%s\", \"nested\": 1%s%s}}", cname, bytes,
                    truncated ? ", \"truncated\": 1" : "");
            continue;
        }
        if (depth < (int)(sizeof stack / sizeof *stack)) stack[depth++] = t1;
        int64_t c = ++*corr;
        ev_head(w, "cpu_op");
        wf_json_fput_body(out, e->name);
        ev_times(w, w->pid, s->tid, ts, dur);
        fprintf(out, ", \"args\": {\"correlation\": %" PRId64 ", \"weft_cat\": \"%s\"%s%s}}", c, cname, bytes,
                truncated ? ", \"truncated\": 1" : "");
        ev_head(w, e->cat == WF_TRACE_COMPUTE || e->cat == WF_TRACE_COMM ? "kernel" : "gpu_memcpy");
        put_kernel_name(out, e->cat, e->name);
        ev_times(w, 0, s->stream, ts, dur);
        fprintf(out,
                ", \"args\": {\"device\": 0, \"stream\": %d, \"correlation\": %" PRId64
                ", \"weft_cat\": \"%s\"%s%s}}",
                s->stream, c, cname, bytes, truncated ? ", \"truncated\": 1" : "");
    }
    return n_spans;
}

wf_status wf__trace_write_capture(const trace_write_job *job, int64_t *n_events) {
    wf_afile f;
    WF_TRY(wf_afile_open(&f, job->path));
    FILE *out = f.fp;
    char *iobuf = malloc(1 << 20); /* freed after the commit closes the file */
    if (iobuf) setvbuf(out, iobuf, _IOFBF, 1 << 20);
    writer w = {.out = out, .job = job, .pid = (int)getpid(), .first = 1};

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    char host[256] = "";
    gethostname(host, sizeof host - 1);

    fputs("{\n  \"schemaVersion\": 1,\n", out);
    /* HTA finds a file's rank with the regex "rank":\s+(\d+) on the first
     * line that has it: this line, with a space after the colon. */
    fputs("  \"distributedInfo\": {\"backend\": \"", out);
    wf_json_fput_body(out, job->backend);
    fprintf(out, "\", \"rank\": %d, \"world_size\": %d},\n", job->rank, job->world_size);
    fprintf(out,
            "  \"deviceProperties\": [{\"id\": 0, \"name\": \"weft CPU pseudo-device (%ld CPUs)\", "
            "\"totalGlobalMem\": %lld, \"computeMajor\": 0, \"computeMinor\": 0, \"numSms\": %ld}],\n",
            ncpu, (long long)pages * (long long)page, ncpu);
    fprintf(out, "  \"baseTimeNanoseconds\": %" PRIu64 ",\n", job->base_unix_ns);
    fputs("  \"displayTimeUnit\": \"ms\",\n", out);
    fputs("  \"weft\": {\"format\": \"weft-trace\", \"version\": 1, \"weft_version\": \"" WF_VERSION "\", ", out);
    fprintf(out, "\"first_step\": %" PRId64 ", \"last_step\": %" PRId64 ", \"trigger\": \"", job->first_step,
            job->last_step);
    wf_json_fput_body(out, job->trigger ? job->trigger : "");
    fprintf(out, "\", \"dropped_events\": %" PRId64 ", \"clock\": \"CLOCK_MONOTONIC\", \"pid\": %d, \"host\": \"",
            job->dropped, w.pid);
    wf_json_fput_body(out, host);
    fputs("\"},\n", out);
    fputs("  \"traceEvents\": [", out);

    int64_t corr = 0, n = 0;
    char label[128];
    snprintf(label, sizeof label, "weft rank %d", job->rank);
    meta(&w, "process_name", w.pid, 0, label);
    snprintf(label, sizeof label, "weft rank %d pseudo-device (CPU compute)", job->rank);
    meta(&w, "process_name", 0, 0, label);
    for (int i = 0; i < job->n_threads; i++) {
        const trace_thread_snap *s = &job->threads[i];
        meta(&w, "thread_name", w.pid, s->tid, s->thread_name);
        snprintf(label, sizeof label, "stream %d (%s)", s->stream, s->thread_name);
        meta(&w, "thread_name", 0, s->stream, label);
        n += write_thread(&w, s, &corr);
    }
    fputs("\n  ],\n  \"traceName\": \"", out);
    wf_json_fput_body(out, job->path);
    fputs("\"\n}\n", out);
    wf_status st = wf_afile_commit(&f);
    free(iobuf);
    if (st == WF_OK) *n_events += n;
    return st;
}
