/* The collective watchdog and its flight recorder (contract:
 * src/comm/comm_impl.h; user's view: docs/distributed.md).
 *
 * A rank that blocks in a collective its peers never join would wait
 * forever: MPI has no timeouts. The watchdog thread sleeps on a condition
 * variable and wakes every tenth of the shorter timeout (at least every
 * second, at most 100 times a second); when the rank has been blocked in
 * one collective longer than the timeout of the step it is in (a long one
 * for the first steps, when ranks still load data and warm up, a shorter one
 * after, as TorchTitan does), it logs which collective, step and bytes it
 * waits for and the flight recorder (the last collectives, with how long
 * each took), writes the same report to report_dir if asked, and ends the
 * process with _exit(timeout_exit_code). The launcher (mpirun, mpiexec,
 * srun) then ends the other ranks. Exiting is the only way out: the main
 * thread is inside an MPI call that will not return, and MPI may not be
 * called from this thread.
 *
 * Before it exits, when the process runs a stack dumper (the trainer's,
 * weft/stackdump.h), it has every thread's stack written to the dump
 * folder (RUN_DIR/hang/), waiting for that at most WD_DUMP_WAIT_S, then
 * waits two of its periods and WD_DUMP_GRACE_S more: the peers blocked in
 * the same collective fire within about one period of this rank, and the
 * launcher may kill them the moment this rank exits, before their own
 * dumps are written (MPICH's mpiexec does). Every
 * dump, whatever took it, holds this rank's collective and flight recorder
 * (a section the watchdog registers at create).
 *
 * Everything the two threads share is under one mutex: the ring, the
 * blocked collective, the step. The main thread takes it twice per
 * collective (begin and end), which costs far less than any collective.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "weft/log.h"
#include "weft/stackdump.h"
#include "weft/thread.h"

#define WD_KIND_MAX 16
#define WD_TAG_MAX 48
#define WD_REPORT_CAP (64 * 1024)
#define WD_DUMP_WAIT_S 30.0 /* the longest the exit waits for the stack dump */
#define WD_DUMP_GRACE_S 2.0 /* then for the peers' dumps, beyond two periods */

typedef enum { REC_ISSUED = 0, REC_WAITING, REC_DONE, REC_FAILED } rec_state;

typedef struct {
    uint64_t seq; /* 0: empty */
    int64_t step;
    char kind[WD_KIND_MAX];
    char tag[WD_TAG_MAX];
    size_t bytes;
    double t_issue, t_block, t_end; /* wf_time_now(); t_block 0 if never blocked */
    rec_state state;
} rec_entry;

struct wf_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int has_thread, stop, fired;

    /* Immutable after create. */
    double timeout_first, timeout;
    char timeout_first_name[64], timeout_name[64]; /* the options to name in the report */
    int64_t first_steps;
    int exit_code, rank, world;
    char *report_path;
    wf_comm_timeout_fn on_timeout;
    void *on_timeout_ctx;
    wf__comm_abort_fn abort_fn; /* the backend's abort_async, or NULL */
    void *abort_ctx;
    double t0;
    int dump_section;  /* the stack dumps' section (wf_stackdump_add_section), 0 if none */
    double period;     /* the thread's wake-up period, s */

    /* Under mu. */
    int64_t step;
    uint64_t next_seq, completed;
    rec_entry *ring;
    int ring_size;
    uint64_t blocked_seq; /* 0: not blocked */
    double blocked_since;
    int64_t blocked_step;
    rec_entry blocked; /* copy of the blocked collective's entry */
    char *report;      /* WD_REPORT_CAP, preallocated for the failure path */
};

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

static double timeout_for(const wf_watchdog *w, int64_t step) {
    return step < w->first_steps ? w->timeout_first : w->timeout;
}

static void fmt_bytes(char *out, size_t cap, size_t b) {
    if (b >= (1u << 20))
        snprintf(out, cap, "%.1f MiB", (double)b / (1 << 20));
    else if (b >= 1024)
        snprintf(out, cap, "%.1f KiB", (double)b / 1024);
    else
        snprintf(out, cap, "%zu B", b);
}

static int append(char *out, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int append(char *out, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = *len < cap ? out + *len : NULL;
    size_t room = *len < cap ? cap - *len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
    return n;
}

/* The ring as text, oldest first; under mu. */
static size_t dump_locked(wf_watchdog *w, char *out, size_t cap, double now) {
    size_t len = 0;
    if (cap) out[0] = '\0';
    uint64_t last = w->next_seq - 1;
    uint64_t n = last < (uint64_t)w->ring_size ? last : (uint64_t)w->ring_size;
    append(out, cap, &len, "flight recorder of rank %d: last %llu of %llu collectives, oldest first\n",
           w->rank, (unsigned long long)n, (unsigned long long)last);
    for (uint64_t seq = last - n + 1; seq <= last && n; seq++) {
        const rec_entry *e = &w->ring[seq % (uint64_t)w->ring_size];
        if (e->seq != seq) continue;
        char bytes[32];
        fmt_bytes(bytes, sizeof bytes, e->bytes);
        append(out, cap, &len, "  #%llu step %lld %s \"%s\" %s issued at %.3f s: ",
               (unsigned long long)e->seq, (long long)e->step, e->kind, e->tag, bytes,
               e->t_issue - w->t0);
        switch (e->state) {
        case REC_DONE:
            append(out, cap, &len, "done in %.3f ms\n", (e->t_end - e->t_issue) * 1e3);
            break;
        case REC_FAILED:
            append(out, cap, &len, "FAILED after %.3f ms\n", (e->t_end - e->t_issue) * 1e3);
            break;
        case REC_WAITING:
            append(out, cap, &len, "WAITING for %.3f s\n", now - e->t_block);
            break;
        case REC_ISSUED:
            append(out, cap, &len, "in flight (not waited on yet)\n");
            break;
        }
    }
    if (cap) out[cap - 1] = '\0';
    return len;
}

/* Writes the report for a timeout into w->report; under mu. */
static void build_report(wf_watchdog *w, double now, double limit) {
    const rec_entry *b = &w->blocked;
    char bytes[32];
    fmt_bytes(bytes, sizeof bytes, b->bytes);
    size_t len = 0;
    int first = w->blocked_step < w->first_steps;
    append(w->report, WD_REPORT_CAP, &len,
           "collective watchdog: rank %d of %d has waited %.2f s in collective #%llu %s \"%s\" "
           "(%s) at step %lld, longer than the %g s timeout for %s; a peer rank is stalled, "
           "has died or issued different collectives. Exiting with status %d instead of "
           "hanging; the launcher ends the other ranks. Raise the timeout (%s) if ranks are "
           "just slow.\n",
           w->rank, w->world, now - w->blocked_since, (unsigned long long)b->seq, b->kind, b->tag,
           bytes, (long long)w->blocked_step, limit,
           first ? "the first steps" : "steps after the first ones", w->exit_code,
           first ? w->timeout_first_name : w->timeout_name);
    dump_locked(w, w->report + len, len < WD_REPORT_CAP ? WD_REPORT_CAP - len : 0, now);
}

static void fire(wf_watchdog *w) {
    /* Called without mu: the report no longer changes (fired is set). */
    if (w->on_timeout) {
        w->on_timeout(w->on_timeout_ctx, w->report);
        return;
    }
    if (w->report_path) {
        FILE *f = fopen(w->report_path, "w");
        if (f) {
            fputs(w->report, f);
            fclose(f);
        }
    }
    for (const char *line = w->report; *line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        WF_ERROR("%.*s", len, line);
        line += len + (nl ? 1 : 0);
    }
    /* Every thread's stack before the exit, with the report's first line
     * as the reason (the dump's own section has the recorder). */
    if (wf_stackdump_running()) {
        const char *nl = strchr(w->report, '\n');
        size_t len = nl ? (size_t)(nl - w->report) : strlen(w->report);
        char reason[1024];
        snprintf(reason, sizeof reason, "%.*s", (int)(len < sizeof reason - 1 ? len : sizeof reason - 1),
                 w->report);
        if (wf_stackdump_request(reason, WD_DUMP_WAIT_S, NULL, 0) != WF_OK)
            WF_WARN("collective watchdog: %s", wf_error_msg());
        double grace = 2 * w->period + WD_DUMP_GRACE_S;
        WF_INFO("collective watchdog: exiting in %.1f s, when the other ranks' watchdogs have written their dumps too",
                grace);
        struct timespec ts = {(time_t)grace, (long)((grace - (double)(time_t)grace) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (w->abort_fn) {
        /* A device communicator (NCCL) keeps its kernels spinning on the
         * GPU for the collective that never completes: abort it, naming
         * that collective, before the exit. */
        char msg[512] = "";
        w->abort_fn(w->abort_ctx, msg, sizeof msg);
        WF_ERROR("collective watchdog: %s (blocked in #%llu %s \"%s\")", msg[0] ? msg : "aborted the communicator",
                 (unsigned long long)w->blocked.seq, w->blocked.kind, w->blocked.tag);
    }
    fflush(stdout);
    _exit(w->exit_code);
}

void wf__comm_watchdog_set_abort(wf_watchdog *w, wf__comm_abort_fn fn, void *ctx) {
    if (!w) return;
    w->abort_fn = fn;
    w->abort_ctx = ctx;
}

/* The stack dumps' section: the step, the collective the rank is blocked
 * in, the flight recorder. On the dumper's thread. */
static void dump_section(void *ctx, wf_buf *out) {
    wf_watchdog *w = ctx;
    char *ring = malloc(WD_REPORT_CAP);
    double now = wf_time_now();
    pthread_mutex_lock(&w->mu);
    wf_buf_printf(out, "step: %lld (counted from 0, as in the recorder; set when a step starts)\n", (long long)w->step);
    if (w->blocked_seq) {
        const rec_entry *b = &w->blocked;
        char bytes[32];
        fmt_bytes(bytes, sizeof bytes, b->bytes);
        wf_buf_printf(out, "in collective: #%llu %s \"%s\" (%s) at step %lld, blocked for %.3f s\n",
                      (unsigned long long)b->seq, b->kind, b->tag, bytes, (long long)w->blocked_step,
                      now - w->blocked_since);
    } else {
        wf_buf_printf(out, "in collective: none (collectives completed: %llu)\n", (unsigned long long)w->completed);
    }
    if (ring) dump_locked(w, ring, WD_REPORT_CAP, now);
    pthread_mutex_unlock(&w->mu);
    if (ring) wf_buf_puts(out, ring);
    free(ring);
}

static void *watchdog_main(void *arg) {
    wf_watchdog *w = arg;
    double period = w->period;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        double now = wf_time_now();
        if (w->blocked_seq) {
            double limit = timeout_for(w, w->blocked_step);
            if (limit > 0 && now - w->blocked_since > limit) {
                build_report(w, now, limit);
                w->fired = 1;
                break;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + period;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    int fired = w->fired;
    pthread_mutex_unlock(&w->mu);
    if (fired) fire(w);
    return NULL;
}

wf_status wf__comm_watchdog_create(wf_watchdog **out, const wf_comm_options *o, int rank, int world) {
    *out = NULL;
    if (o->recorder_size < 4 || o->recorder_size > (1 << 20))
        return wf_error(WF_ERR_CONFIG,
                        "dist: recorder_size %d is out of range: use 4 .. 1048576 entries",
                        o->recorder_size);
    wf_watchdog *w = calloc(1, sizeof *w);
    if (!w) return wf_error(WF_ERR_NOMEM, "dist: out of memory for the watchdog");
    w->ring = calloc((size_t)o->recorder_size, sizeof *w->ring);
    w->report = calloc(WD_REPORT_CAP, 1);
    if (o->report_dir) {
        size_t len = strlen(o->report_dir) + 40;
        w->report_path = malloc(len);
        if (w->report_path) snprintf(w->report_path, len, "%s/watchdog-rank%d.txt", o->report_dir, rank);
    }
    if (!w->ring || !w->report || (o->report_dir && !w->report_path)) {
        free(w->ring);
        free(w->report);
        free(w->report_path);
        free(w);
        return wf_error(WF_ERR_NOMEM, "dist: out of memory for the flight recorder (%d entries)",
                        o->recorder_size);
    }
    w->ring_size = o->recorder_size;
    w->timeout_first = o->timeout_first_s;
    w->timeout = o->timeout_s;
    copy_str(w->timeout_first_name, sizeof w->timeout_first_name,
             o->timeout_first_name ? o->timeout_first_name : "timeout_first_s");
    copy_str(w->timeout_name, sizeof w->timeout_name, o->timeout_name ? o->timeout_name : "timeout_s");
    double shortest = 0;
    if (w->timeout_first > 0) shortest = w->timeout_first;
    if (w->timeout > 0 && (shortest <= 0 || w->timeout < shortest)) shortest = w->timeout;
    w->period = shortest / 10;
    if (w->period > 1.0) w->period = 1.0;
    if (w->period < 0.01) w->period = 0.01;
    w->first_steps = o->first_steps;
    w->exit_code = o->timeout_exit_code;
    w->on_timeout = o->on_timeout;
    w->on_timeout_ctx = o->on_timeout_ctx;
    w->rank = rank;
    w->world = world;
    w->next_seq = 1;
    w->t0 = wf_time_now();
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (w->timeout_first > 0 || w->timeout > 0) {
        if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0) {
            wf__comm_watchdog_destroy(w);
            return wf_error(WF_ERR_INTERNAL, "dist: cannot start the watchdog thread");
        }
        pthread_setname_np(w->thread, "weft-watchdog");
        w->has_thread = 1;
    }
    w->dump_section = wf_stackdump_add_section("collective", dump_section, w);
    *out = w;
    return WF_OK;
}

void wf__comm_watchdog_destroy(wf_watchdog *w) {
    if (!w) return;
    wf_stackdump_remove_section(w->dump_section); /* waits for a dump that reads it */
    if (w->has_thread) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->ring);
    free(w->report);
    free(w->report_path);
    free(w);
}

void wf__comm_watchdog_set_step(wf_watchdog *w, int64_t step) {
    pthread_mutex_lock(&w->mu);
    w->step = step;
    pthread_mutex_unlock(&w->mu);
}

int64_t wf__comm_watchdog_step(wf_watchdog *w) {
    pthread_mutex_lock(&w->mu);
    int64_t s = w->step;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Marks `e` as the collective the rank now blocks on; under mu. */
static void block_locked(wf_watchdog *w, rec_entry *e, double now) {
    e->state = REC_WAITING;
    e->t_block = now;
    w->blocked = *e;
    w->blocked_seq = e->seq;
    w->blocked_since = now;
    w->blocked_step = w->step;
}

uint64_t wf__comm_watchdog_begin(wf_watchdog *w, const char *kind, const char *tag, size_t bytes,
                           int blocking) {
    double now = wf_time_now();
    pthread_mutex_lock(&w->mu);
    uint64_t seq = w->next_seq++;
    rec_entry *e = &w->ring[seq % (uint64_t)w->ring_size];
    memset(e, 0, sizeof *e);
    e->seq = seq;
    e->step = w->step;
    copy_str(e->kind, sizeof e->kind, kind);
    copy_str(e->tag, sizeof e->tag, tag ? tag : "");
    e->bytes = bytes;
    e->t_issue = now;
    e->state = REC_ISSUED;
    if (blocking) block_locked(w, e, now);
    pthread_mutex_unlock(&w->mu);
    return seq;
}

void wf__comm_watchdog_block(wf_watchdog *w, uint64_t seq) {
    double now = wf_time_now();
    pthread_mutex_lock(&w->mu);
    rec_entry *e = &w->ring[seq % (uint64_t)w->ring_size];
    if (e->seq == seq) {
        block_locked(w, e, now);
    } else {
        /* Pushed out of the ring by newer collectives: watch a stand-in. */
        rec_entry tmp = {.seq = seq, .step = w->step, .t_issue = now};
        copy_str(tmp.kind, sizeof tmp.kind, "wait");
        copy_str(tmp.tag, sizeof tmp.tag, "(older than the recorder)");
        block_locked(w, &tmp, now);
    }
    pthread_mutex_unlock(&w->mu);
}

void wf__comm_watchdog_end(wf_watchdog *w, uint64_t seq, int ok) {
    double now = wf_time_now();
    pthread_mutex_lock(&w->mu);
    rec_entry *e = &w->ring[seq % (uint64_t)w->ring_size];
    if (e->seq == seq) {
        e->state = ok ? REC_DONE : REC_FAILED;
        e->t_end = now;
    }
    if (w->blocked_seq == seq) w->blocked_seq = 0;
    w->completed++;
    pthread_mutex_unlock(&w->mu);
}

size_t wf__comm_watchdog_dump(wf_watchdog *w, char *out, size_t cap) {
    double now = wf_time_now();
    pthread_mutex_lock(&w->mu);
    size_t n = dump_locked(w, out, cap, now);
    pthread_mutex_unlock(&w->mu);
    return n;
}

uint64_t wf__comm_watchdog_completed(wf_watchdog *w) {
    pthread_mutex_lock(&w->mu);
    uint64_t n = w->completed;
    pthread_mutex_unlock(&w->mu);
    return n;
}
