/* The tracer: per-thread span buffers, the capture state machine (schedule
 * and on-demand captures), ProfilerStep markers, and the request file.
 * Writing the JSON is trace_write.c's job.
 *
 * Concurrency. Recording threads never lock: a thread appends to its own
 * buffer and publishes each slot with a release store. The training thread
 * (wf_trace_step) owns the state machine; it turns recording on and off
 * through wf_trace_on_ and starts each recording segment (a capture's
 * warmup, then its active steps) by bumping `gen`, which makes every thread
 * clear its buffer at its next span. At the end of a window the training
 * thread turns recording off and snapshots the buffers of the current
 * segment under the registry lock; a thread still inside a span may append
 * one more event after the snapshot, which is then never written. The
 * registry lock is taken only when a thread registers or exits and when a
 * capture is written. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/trace_impl.h"
#include "weft/fileio.h"
#include "weft/rundir.h"
#include "weft/log.h"
#include "weft/trace.h"

atomic_int wf_trace_on_;

#define MAIN_STREAM 7
#define FIRST_AUTO_STREAM 20
#define DEFAULT_BUFFER_EVENTS 65536

typedef enum { MODE_IDLE = 0, MODE_SCHED, MODE_REQ } trace_mode;

static struct {
    pthread_mutex_t mu;           /* registry: bufs, next_stream */
    trace_tbuf *bufs;
    int next_stream;
    atomic_llong gen;             /* current recording segment */
    atomic_llong epoch;           /* tracer instance (0: not initialised) */
    pthread_key_t key;
    int key_made;

    /* configuration (copies) */
    char *dir, *request_dir, *backend;
    int poll_requests, rank, world_size;
    wf_trace_schedule sched;
    int64_t cap;
    uint64_t base_unix_ns;

    /* state machine: training thread only */
    trace_mode mode;
    wf_trace_action act;          /* this step's action */
    int64_t index;                /* steps seen, for the schedule */
    wf_trace_action prev_sched;   /* the schedule's action at index - 1 */
    int64_t req_remaining;        /* steps left in an on-demand capture */
    int64_t pending_steps;        /* a capture waiting for the current one to end */
    char pending_trigger[128];
    char trigger[128];
    int64_t first_step, last_step;
    int64_t mono_to_unix_ns;
    wf_trace_span step_span;      /* the open ProfilerStep marker, or -1 */

    wf_trace_stats stats;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .step_span = -1};

static _Thread_local trace_tbuf *tl_buf;
static _Thread_local long long tl_epoch;
static atomic_llong serials; /* thread registrations, for the exit callback */
static _Thread_local char tl_name[48];
static _Thread_local int tl_stream;

uint64_t wf_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int64_t unix_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- thread registration ----------------------------------------------- */

/* Runs when a registered thread exits, with its registration serial (not a
 * pointer: the buffer may have been freed by a shutdown since). */
static void thread_exit_cb(void *p) {
    long long serial = (long long)(intptr_t)p;
    pthread_mutex_lock(&T.mu);
    for (trace_tbuf *b = T.bufs; b; b = b->next)
        if (b->owner == serial) atomic_store(&b->detached, 1);
    pthread_mutex_unlock(&T.mu);
}

/* Registers the calling thread: reuses the buffer of an exited thread whose
 * contents no capture needs, else allocates one. NULL when out of memory. */
static trace_tbuf *register_thread(void) {
    long long epoch = atomic_load(&T.epoch);
    if (epoch == 0) return NULL;
    pthread_mutex_lock(&T.mu);
    long long cur = atomic_load(&T.gen);
    trace_tbuf *b = NULL;
    for (trace_tbuf *it = T.bufs; it; it = it->next)
        if (atomic_load(&it->detached) && atomic_load(&it->gen) != cur) {
            b = it;
            break;
        }
    if (!b) {
        b = calloc(1, sizeof *b);
        trace_ev *ev = b ? calloc((size_t)T.cap, sizeof *ev) : NULL;
        if (!ev) {
            free(b);
            pthread_mutex_unlock(&T.mu);
            return NULL;
        }
        b->ev = ev;
        b->cap = T.cap;
        atomic_init(&b->gen, -1);
        b->next = T.bufs;
        T.bufs = b;
    }
    atomic_store(&b->detached, 0);
    atomic_store(&b->gen, -1);
    b->n = 0;
    atomic_store(&b->n_pub, 0);
    atomic_store(&b->dropped, 0);
    b->owner = atomic_fetch_add(&serials, 1) + 1;
    b->tid = (long)syscall(SYS_gettid);
    b->stream = tl_stream > 0 ? tl_stream : T.next_stream++;
    if (tl_name[0])
        snprintf(b->name, sizeof b->name, "%s", tl_name);
    else
        snprintf(b->name, sizeof b->name, "thread %ld", b->tid);
    long long serial = b->owner;
    pthread_mutex_unlock(&T.mu);
    if (T.key_made) pthread_setspecific(T.key, (void *)(intptr_t)serial);
    tl_buf = b;
    tl_epoch = epoch;
    return b;
}

wf_status wf_trace_thread_setup(const char *name, int stream) {
    snprintf(tl_name, sizeof tl_name, "%s", name ? name : "");
    tl_stream = stream > 0 ? stream : 0;
    if (atomic_load(&T.epoch) == 0) return WF_OK;
    trace_tbuf *b = tl_buf;
    if (b && tl_epoch == atomic_load(&T.epoch)) {
        pthread_mutex_lock(&T.mu);
        snprintf(b->name, sizeof b->name, "%s", tl_name);
        if (stream > 0) b->stream = stream;
        pthread_mutex_unlock(&T.mu);
        return WF_OK;
    }
    if (!register_thread())
        return wf_error(WF_ERR_NOMEM, "trace: cannot allocate a buffer of %" PRId64
                        " events for thread '%s' (lower trace.buffer_events)", T.cap, tl_name);
    return WF_OK;
}

/* ---- recording ----------------------------------------------------------- */

static inline trace_tbuf *my_buffer(void) {
    trace_tbuf *b = tl_buf;
    if (__builtin_expect(b != NULL && tl_epoch == atomic_load_explicit(&T.epoch, memory_order_relaxed), 1))
        return b;
    return register_thread();
}

static wf_trace_span record_begin(uint32_t cat, const char *name, int64_t arg, uint64_t t0,
                                  uint64_t t1) {
    trace_tbuf *b = my_buffer();
    if (!b) return -1;
    long long g = atomic_load_explicit(&T.gen, memory_order_acquire);
    if (atomic_load_explicit(&b->gen, memory_order_relaxed) != g) {
        b->n = 0;
        atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
        atomic_store_explicit(&b->n_pub, 0, memory_order_relaxed);
        atomic_store_explicit(&b->gen, g, memory_order_release);
    }
    int64_t i = b->n;
    if (i >= b->cap) {
        atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
        return -1;
    }
    trace_ev *e = &b->ev[i];
    e->name = name;
    e->arg = arg;
    e->cat = cat;
    atomic_store_explicit(&e->t1, t1, memory_order_relaxed);
    e->t0 = t0 ? t0 : wf_trace_now();
    b->n = i + 1;
    atomic_store_explicit(&b->n_pub, i + 1, memory_order_release);
    return (wf_trace_span)(((uint64_t)g & 0x7fffffffu) << 32 | (uint64_t)i);
}

wf_trace_span wf_trace_begin_slow_(wf_trace_cat cat, const char *name, int64_t bytes) {
    return record_begin((uint32_t)cat, name ? name : "?", bytes, 0, 0);
}

void wf_trace_end_slow_(wf_trace_span span) {
    uint64_t t = wf_trace_now();
    trace_tbuf *b = tl_buf;
    if (!b || tl_epoch != atomic_load_explicit(&T.epoch, memory_order_relaxed)) return;
    int64_t i = span & 0xffffffff;
    long long g = (long long)((uint64_t)span >> 32);
    if ((atomic_load_explicit(&b->gen, memory_order_relaxed) & 0x7fffffff) != g || i >= b->n) return;
    atomic_store_explicit(&b->ev[i].t1, t, memory_order_relaxed);
}

void wf_trace_record(wf_trace_cat cat, const char *name, uint64_t t0, uint64_t t1, int64_t bytes) {
    if (!atomic_load_explicit(&wf_trace_on_, memory_order_relaxed)) return;
    if (t0 == 0) t0 = 1;
    if (t1 < t0) t1 = t0;
    record_begin((uint32_t)cat, name ? name : "?", bytes, t0, t1);
}

/* ---- schedule ------------------------------------------------------------ */

wf_trace_action wf_trace_schedule_action(const wf_trace_schedule *s, int64_t index) {
    if (!s || s->active <= 0 || s->wait < 0 || s->warmup < 0 || s->skip_first < 0) return WF_TRACE_NONE;
    if (index < s->skip_first) return WF_TRACE_NONE;
    index -= s->skip_first;
    int64_t cycle = s->wait + s->warmup + s->active;
    if (s->repeat > 0 && index / cycle >= s->repeat) return WF_TRACE_NONE;
    int64_t mod = index % cycle;
    if (mod < s->wait) return WF_TRACE_NONE;
    if (mod < s->wait + s->warmup) return WF_TRACE_WARMUP;
    return mod < cycle - 1 ? WF_TRACE_RECORD : WF_TRACE_RECORD_SAVE;
}

/* ---- init and shutdown ----------------------------------------------------- */

static void free_config(void) {
    free(T.dir);
    free(T.request_dir);
    free(T.backend);
    T.dir = T.request_dir = T.backend = NULL;
}

wf_status wf_trace_init(const wf_trace_config *cfg) {
    if (!cfg || !cfg->dir || !cfg->dir[0])
        return wf_error(WF_ERR_INVALID, "trace: no output directory (trace.dir) given");
    if (atomic_load(&T.epoch) != 0) wf_trace_shutdown();
    const wf_trace_schedule *s = &cfg->schedule;
    if (s->skip_first < 0 || s->wait < 0 || s->warmup < 0 || s->active < 0 || s->repeat < 0)
        return wf_error(WF_ERR_CONFIG, "trace: schedule values must be >= 0 (skip_first %" PRId64
                        ", wait %" PRId64 ", warmup %" PRId64 ", active %" PRId64 ", repeat %" PRId64 ")",
                        s->skip_first, s->wait, s->warmup, s->active, s->repeat);
    if (cfg->buffer_events < 0 || cfg->buffer_events > ((int64_t)1 << 31))
        return wf_error(WF_ERR_CONFIG, "trace: buffer_events %" PRId64 " is outside [0, 2^31]",
                        cfg->buffer_events);
    if (cfg->rank < 0 || cfg->world_size < 1 || cfg->rank >= cfg->world_size)
        return wf_error(WF_ERR_INVALID, "trace: rank %d of world size %d", cfg->rank, cfg->world_size);
    T.dir = strdup(cfg->dir);
    T.request_dir = cfg->request_dir ? strdup(cfg->request_dir) : NULL;
    T.backend = strdup(cfg->backend ? cfg->backend : "single");
    if (!T.dir || !T.backend || (cfg->request_dir && !T.request_dir)) {
        free_config();
        return wf_error(WF_ERR_NOMEM, "trace: out of memory");
    }
    T.poll_requests = cfg->poll_requests;
    T.rank = cfg->rank;
    T.world_size = cfg->world_size;
    T.sched = *s;
    T.cap = cfg->buffer_events ? cfg->buffer_events : DEFAULT_BUFFER_EVENTS;
    T.base_unix_ns = cfg->base_unix_ns;
    if (!T.base_unix_ns) {
        uint64_t now = (uint64_t)unix_now_ns(), period = 1000000000000ull;
        T.base_unix_ns = now / period * period;
    }
    T.next_stream = FIRST_AUTO_STREAM;
    T.mode = MODE_IDLE;
    T.act = WF_TRACE_NONE;
    T.index = 0;
    T.prev_sched = WF_TRACE_NONE;
    T.req_remaining = T.pending_steps = 0;
    T.step_span = -1;
    memset(&T.stats, 0, sizeof T.stats);
    if (!T.key_made) T.key_made = pthread_key_create(&T.key, thread_exit_cb) == 0;
    static atomic_llong epochs;
    atomic_store(&T.epoch, atomic_fetch_add(&epochs, 1) + 1);
    atomic_store(&T.gen, 0);
    atomic_store(&wf_trace_on_, 0);
    wf_status st = wf_trace_thread_setup("main", MAIN_STREAM);
    if (st != WF_OK) {
        atomic_store(&T.epoch, 0);
        free_config();
    }
    return st;
}

wf_status wf_trace_shutdown(void) {
    if (atomic_load(&T.epoch) == 0) return WF_OK;
    wf_status st = wf_trace_flush();
    atomic_store(&wf_trace_on_, 0);
    atomic_store(&T.epoch, 0);
    pthread_mutex_lock(&T.mu);
    for (trace_tbuf *b = T.bufs, *next; b; b = next) {
        next = b->next;
        free(b->ev);
        free(b);
    }
    T.bufs = NULL;
    pthread_mutex_unlock(&T.mu);
    if (T.key_made) pthread_setspecific(T.key, NULL);
    tl_buf = NULL;
    free_config();
    return st;
}

void wf_trace_get_stats(wf_trace_stats *out) {
    if (out) *out = T.stats;
}

/* ---- capture windows ------------------------------------------------------- */

/* Starts a recording segment: every thread clears its buffer at its next
 * span. */
static void start_segment(void) {
    atomic_fetch_add_explicit(&T.gen, 1, memory_order_release);
    atomic_store_explicit(&wf_trace_on_, 1, memory_order_release);
}

static int ev_cmp(const void *pa, const void *pb) {
    const trace_ev *a = pa, *b = pb;
    if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
    uint64_t ea = atomic_load_explicit(&a->t1, memory_order_relaxed);
    uint64_t eb = atomic_load_explicit(&b->t1, memory_order_relaxed);
    /* the longer (enclosing) span first; an open span (0) encloses all */
    if (ea == 0) ea = UINT64_MAX;
    if (eb == 0) eb = UINT64_MAX;
    if (ea != eb) return ea > eb ? -1 : 1;
    return 0;
}

/* Stops recording and writes the current segment as a capture. */
static wf_status write_window(void) {
    atomic_store_explicit(&wf_trace_on_, 0, memory_order_release);
    uint64_t end_ns = wf_trace_now();
    long long g = atomic_load(&T.gen);
    wf_status st = WF_OK;

    pthread_mutex_lock(&T.mu);
    int n_threads = 0;
    for (trace_tbuf *b = T.bufs; b; b = b->next)
        if (atomic_load_explicit(&b->gen, memory_order_acquire) == g) n_threads++;
    trace_thread_snap *snaps = calloc((size_t)(n_threads ? n_threads : 1), sizeof *snaps);
    int64_t dropped = 0;
    int k = 0;
    for (trace_tbuf *b = T.bufs; b && snaps; b = b->next) {
        if (atomic_load_explicit(&b->gen, memory_order_acquire) != g) continue;
        int64_t n = atomic_load_explicit(&b->n_pub, memory_order_acquire);
        trace_thread_snap *s = &snaps[k++];
        s->tid = b->tid;
        s->stream = b->stream;
        s->thread_name = b->name;
        s->ev = malloc((size_t)(n ? n : 1) * sizeof *s->ev);
        if (!s->ev) {
            st = wf_error(WF_ERR_NOMEM, "trace: out of memory copying %" PRId64 " events", n);
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            s->ev[i].t0 = b->ev[i].t0;
            atomic_init(&s->ev[i].t1, atomic_load_explicit(&b->ev[i].t1, memory_order_relaxed));
            s->ev[i].name = b->ev[i].name;
            s->ev[i].arg = b->ev[i].arg;
            s->ev[i].cat = b->ev[i].cat;
        }
        s->n = n;
        dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
    }
    if (!snaps) st = wf_error(WF_ERR_NOMEM, "trace: out of memory");

    char path[4096];
    if (st == WF_OK) {
        for (int i = 0; i < k; i++) qsort(snaps[i].ev, (size_t)snaps[i].n, sizeof *snaps[i].ev, ev_cmp);
        char dir[4096];
        int nd = snprintf(dir, sizeof dir, "%s/step-%06" PRId64, T.dir, T.first_step);
        int np = snprintf(path, sizeof path, "%.4000s/rank-%05d.trace.json", dir, T.rank);
        if (nd < 0 || (size_t)nd >= sizeof dir || np < 0 || (size_t)np >= sizeof path)
            st = wf_error(WF_ERR_INVALID, "trace: directory name too long: %s", T.dir);
        else
            st = wf_mkdirs(dir);
        trace_write_job job = {
            .path = path, .rank = T.rank, .world_size = T.world_size, .backend = T.backend,
            .base_unix_ns = T.base_unix_ns, .mono_to_unix_ns = T.mono_to_unix_ns, .end_ns = end_ns,
            .first_step = T.first_step, .last_step = T.last_step, .trigger = T.trigger,
            .dropped = dropped, .threads = snaps, .n_threads = k,
        };
        int64_t n_events = 0;
        if (st == WF_OK) st = wf__trace_write_capture(&job, &n_events);
        if (st == WF_OK) {
            T.stats.captures_written++;
            T.stats.events_written += n_events;
            T.stats.dropped += dropped;
            snprintf(T.stats.last_path, sizeof T.stats.last_path, "%s", path);
            if (dropped)
                WF_WARN("trace: %" PRId64 " spans did not fit the thread buffers (raise trace.buffer_events)",
                        dropped);
            WF_INFO("trace: wrote steps %" PRId64 "-%" PRId64 " to %s", T.first_step, T.last_step, path);
        }
    }
    pthread_mutex_unlock(&T.mu);
    for (int i = 0; snaps && i < k; i++) free(snaps[i].ev);
    free(snaps);
    if (st != WF_OK) return wf_error_wrap(st, "trace: capture of steps %" PRId64 "-%" PRId64 ": ",
                                          T.first_step, T.last_step);
    return WF_OK;
}

static void begin_window(int64_t step, const char *trigger) {
    T.first_step = T.last_step = step;
    snprintf(T.trigger, sizeof T.trigger, "%s", trigger);
    int64_t mono = (int64_t)wf_trace_now();
    T.mono_to_unix_ns = unix_now_ns() - mono;
    start_segment();
}

wf_status wf_trace_capture(int64_t n_steps, const char *trigger) {
    if (atomic_load(&T.epoch) == 0) return wf_error(WF_ERR_INVALID, "trace: the tracer is not running");
    if (n_steps < 1) return wf_error(WF_ERR_RANGE, "trace: a capture needs at least 1 step, not %" PRId64, n_steps);
    T.pending_steps = n_steps;
    snprintf(T.pending_trigger, sizeof T.pending_trigger, "%s", trigger ? trigger : "request");
    return WF_OK;
}

wf_status wf_trace_capture_request(const wf_trace_request *req) {
    char trig[128];
    snprintf(trig, sizeof trig, "request %.*s", (int)sizeof req->id, req->id);
    return wf_trace_capture(req->steps, trig);
}

/* Ends the ProfilerStep marker of the step that just finished. */
static void end_step_marker(void) {
    if (T.step_span >= 0) wf_trace_end_slow_(T.step_span);
    T.step_span = -1;
}

wf_status wf_trace_step(int64_t step) {
    if (atomic_load(&T.epoch) == 0) return WF_OK;
    wf_status st = WF_OK;
    end_step_marker();

    /* 1. the window that ended with the previous step */
    if ((T.mode == MODE_SCHED && T.act == WF_TRACE_RECORD_SAVE) ||
        (T.mode == MODE_REQ && T.req_remaining == 0)) {
        st = write_window();
        T.mode = MODE_IDLE;
    }

    /* 2. a request dropped by `weft trace request` */
    if (T.poll_requests && T.request_dir) {
        wf_trace_request req;
        int found = 0;
        wf_status ps = wf_trace_request_poll(T.request_dir, &req, &found);
        if (ps != WF_OK) {
            WF_WARN("%s", wf_error_msg());
        } else if (found) {
            wf_trace_capture_request(&req);
            WF_INFO("trace: request %s: capturing %" PRId64 " steps from step %" PRId64, req.id,
                    req.steps, step);
        }
    }

    /* 3. this step's action */
    wf_trace_action sa = wf_trace_schedule_action(&T.sched, T.index);
    int cycle_start = sa != WF_TRACE_NONE &&
                      (T.prev_sched == WF_TRACE_NONE || T.prev_sched == WF_TRACE_RECORD_SAVE);
    T.prev_sched = sa;
    T.index++;
    if (T.mode == MODE_IDLE) {
        if (T.pending_steps > 0) {
            T.mode = MODE_REQ;
            T.req_remaining = T.pending_steps;
            T.pending_steps = 0;
            begin_window(step, T.pending_trigger);
            T.stats.requests_served++;
        } else if (cycle_start) {
            T.mode = MODE_SCHED;
            begin_window(step, "schedule");
        }
    }
    if (T.mode == MODE_SCHED) {
        if (sa == WF_TRACE_NONE) { /* cannot happen inside a cycle; end quietly */
            atomic_store(&wf_trace_on_, 0);
            T.mode = MODE_IDLE;
        } else if (sa != WF_TRACE_WARMUP && T.act == WF_TRACE_WARMUP) {
            /* the warmup steps are discarded: a new segment for the active ones */
            T.first_step = step;
            start_segment();
        }
        T.act = T.mode == MODE_SCHED ? sa : WF_TRACE_NONE;
    } else if (T.mode == MODE_REQ) {
        T.req_remaining--;
        T.act = T.req_remaining == 0 ? WF_TRACE_RECORD_SAVE : WF_TRACE_RECORD;
    } else {
        T.act = WF_TRACE_NONE;
    }
    if (T.act != WF_TRACE_NONE) {
        T.last_step = step;
        T.step_span = record_begin(TRACE_CAT_STEP, "ProfilerStep", step, 0, 0);
    }
    return st;
}

wf_status wf_trace_flush(void) {
    if (atomic_load(&T.epoch) == 0) return WF_OK;
    end_step_marker();
    wf_status st = WF_OK;
    if (T.mode != MODE_IDLE && !(T.mode == MODE_SCHED && T.act == WF_TRACE_WARMUP))
        st = write_window();
    atomic_store(&wf_trace_on_, 0);
    T.mode = MODE_IDLE;
    T.act = WF_TRACE_NONE;
    T.req_remaining = 0;
    return st;
}

void wf_trace_discard(void) {
    if (atomic_load(&T.epoch) == 0) return;
    atomic_store(&wf_trace_on_, 0);
    T.step_span = -1;
    T.mode = MODE_IDLE;
    T.act = WF_TRACE_NONE;
    T.req_remaining = 0;
}

/* ---- requests ---------------------------------------------------------------- */

static wf_status request_path(const char *run_dir, char *out, size_t cap) {
    if (!run_dir || !run_dir[0]) return wf_error(WF_ERR_INVALID, "trace request: no run directory given");
    return wf_error_wrap(wf_rundir_path(out, cap, run_dir, WF_RUN_TRACE_REQUEST), "trace request: ");
}

wf_status wf_trace_request_write(const char *run_dir, int64_t steps, wf_trace_request *out) {
    char path[4096];
    WF_TRY(request_path(run_dir, path, sizeof path));
    if (!wf_path_is_dir(run_dir))
        return wf_error(WF_ERR_NOTFOUND, "trace request: %s is not a directory (give the run directory "
                        "of a running `weft train`)", run_dir);
    if (steps < 1 || steps > 1000000)
        return wf_error(WF_ERR_RANGE, "trace request: --steps %" PRId64 " is outside [1, 1000000]", steps);
    wf_trace_request r = {.steps = steps, .requested_unix_ns = unix_now_ns()};
    snprintf(r.id, sizeof r.id, "%" PRId64 "-%ld", r.requested_unix_ns, (long)getpid());
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"format\": \"weft-trace-request\", \"version\": 1, \"id\": \"%s\", "
                     "\"steps\": %" PRId64 ", \"requested_unix_ns\": %" PRId64 "}\n",
                     r.id, r.steps, r.requested_unix_ns);
    WF_TRY(wf_file_write_atomic(path, text, (size_t)n));
    if (out) *out = r;
    return WF_OK;
}

wf_status wf_trace_request_poll(const char *run_dir, wf_trace_request *req, int *found) {
    *found = 0;
    char path[4096];
    WF_TRY(request_path(run_dir, path, sizeof path));
    struct stat sb;
    if (stat(path, &sb) != 0) return WF_OK;
    char *text = NULL;
    size_t len = 0;
    wf_status st = wf_file_read(path, &text, &len);
    if (st != WF_OK) return st;
    unlink(path); /* claimed, well-formed or not */
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root)
        return wf_error(WF_ERR_FORMAT, "%s:%d: not JSON (%s); removed it, run `weft trace request` again",
                        path, jerr.line, jerr.text);
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *steps = json_object_get(root, "steps"), *id = json_object_get(root, "id");
    json_t *when = json_object_get(root, "requested_unix_ns");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "weft-trace-request") != 0 ||
        !json_is_integer(ver) || json_integer_value(ver) != 1 || !json_is_integer(steps) ||
        json_integer_value(steps) < 1 || !json_is_string(id)) {
        json_decref(root);
        return wf_error(WF_ERR_FORMAT, "%s: not a version 1 weft-trace-request with \"steps\" >= 1 and "
                        "an \"id\"; removed it, run `weft trace request` again", path);
    }
    memset(req, 0, sizeof *req);
    req->steps = json_integer_value(steps);
    snprintf(req->id, sizeof req->id, "%s", json_string_value(id));
    req->requested_unix_ns = json_is_integer(when) ? json_integer_value(when) : 0;
    json_decref(root);
    *found = 1;
    return WF_OK;
}
