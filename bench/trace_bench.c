/* The tracer's cost: per span when tracing is off and on, and the overhead
 * on a synthetic training step.
 *
 *   trace_bench [--spans N] [--step-spans S] [--op-us U] [--rounds R]
 *
 * 1. Per span (a wf_trace_begin + wf_trace_end pair), N times: with no
 *    capture recording (off), and recording into the thread's buffer (on).
 *    Peers measured in the same run: the floor (the two clock reads a span
 *    needs), and a lock-based tracer (a mutex around a shared vector, what
 *    a tracer without per-thread buffers does), uncontended. Two threads
 *    recording at once show that weft's threads share nothing.
 * 2. A synthetic step of S spans around ops of U microseconds of arithmetic
 *    (default 2000 spans of 50 us: a 100 ms step, about what a small model's
 *    forward, backward and optimizer make), run R rounds of 8 steps off then
 *    8 steps recorded. Reports the median step time of each, the overhead
 *    they imply, the overhead predicted from the per-span cost, and the time
 *    to write an 8-step capture (16 000 spans) at the end of its window.
 *
 * Times are the CPU time of the measuring thread (CLOCK_THREAD_CPUTIME_ID),
 * so that other processes on a shared machine do not inflate them; the
 * capture write is wall time (it includes an fsync). The measured step
 * comparison still carries cache and frequency noise: the predicted
 * overhead (spans x cost per span / step time) is the steadier figure. Not
 * a test: it prints numbers and asserts nothing. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/trace.h"

static volatile int64_t sink;

/* CPU time of the calling thread, ns: the figures must not count the time
 * other processes of a shared machine take from this one. */
static uint64_t cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double ns_per(uint64_t t0, uint64_t t1, int64_t n) { return (double)(t1 - t0) / (double)n; }

/* ---- peers ---------------------------------------------------------------- */

typedef struct {
    uint64_t t0, t1;
    const char *name;
} locked_ev;

static struct {
    pthread_mutex_t mu;
    locked_ev *ev;
    int64_t n, cap;
} locked = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t locked_begin(const char *name) {
    uint64_t t = wf_trace_now();
    pthread_mutex_lock(&locked.mu);
    int64_t i = locked.n < locked.cap ? locked.n++ : -1;
    if (i >= 0) {
        locked.ev[i].t0 = t;
        locked.ev[i].name = name;
    }
    pthread_mutex_unlock(&locked.mu);
    return i;
}

static void locked_end(int64_t i) {
    uint64_t t = wf_trace_now();
    if (i < 0) return;
    pthread_mutex_lock(&locked.mu);
    locked.ev[i].t1 = t;
    pthread_mutex_unlock(&locked.mu);
}

typedef struct {
    int64_t n;
    int mode; /* 0 weft, 1 locked */
    double ns;
} th_arg;

static void *span_loop(void *p) {
    th_arg *a = p;
    uint64_t t0 = cpu_now();
    for (int64_t i = 0; i < a->n; i++) {
        if (a->mode == 0) {
            wf_trace_span s = wf_trace_begin(WF_TRACE_COMPUTE, "op");
            wf_trace_end(s);
        } else {
            locked_end(locked_begin("op"));
        }
    }
    a->ns = ns_per(t0, cpu_now(), a->n);
    return NULL;
}

/* Runs span_loop on `threads` threads at once; returns the mean ns/span. */
static double parallel_spans(int threads, int64_t n, int mode) {
    th_arg args[2];
    pthread_t th[2];
    for (int i = 0; i < threads; i++) {
        args[i] = (th_arg){.n = n, .mode = mode};
        pthread_create(&th[i], NULL, span_loop, &args[i]);
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum += args[i].ns;
    }
    return sum / threads;
}

/* ---- the synthetic step ------------------------------------------------------ */

static int64_t op_iters; /* iterations of `work` per op */

static void work(int64_t iters) {
    float x = 1.0f, y = 0.999f;
    for (int64_t i = 0; i < iters; i++) x = x * y + 1e-7f;
    sink += (int64_t)x;
}

static void calibrate(double op_us) {
    int64_t it = 100000;
    for (;;) {
        uint64_t t0 = cpu_now();
        work(it);
        double us = (double)(cpu_now() - t0) / 1e3;
        if (us > 2000) {
            op_iters = (int64_t)((double)it * op_us / us);
            return;
        }
        it *= 4;
    }
}

static const char *const op_names[] = {"embedding", "rmsnorm", "matmul qkv", "rope", "attention", "matmul o",
                                       "residual", "matmul up", "swiglu", "matmul down"};

static double run_step(int64_t step, int spans) {
    uint64_t t0 = cpu_now();
    wf_trace_step(step);
    wf_trace_span outer = wf_trace_begin(WF_TRACE_REGION, "forward");
    for (int i = 0; i < spans - 1; i++) {
        wf_trace_span s = wf_trace_begin(WF_TRACE_COMPUTE, op_names[i % 10]);
        work(op_iters);
        wf_trace_end(s);
    }
    wf_trace_end(outer);
    return (double)(cpu_now() - t0) / 1e6; /* ms of CPU time */
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int64_t n = 10000000;
    int step_spans = 2000, rounds = 3;
    double op_us = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--spans") == 0) n = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--step-spans") == 0) step_spans = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--op-us") == 0) op_us = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: trace_bench [--spans N] [--step-spans S] [--op-us U] [--rounds R]\n");
            return 2;
        }
    }
    char dir[] = "/tmp/weft-trace-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    /* 1. per span: recording in chunks of at most 1M spans, each chunk a
     * capture that is discarded (nothing is written) */
    uint64_t t0 = cpu_now();
    for (int64_t i = 0; i < n; i++) sink += (int64_t)wf_trace_now();
    double clock_ns = ns_per(t0, cpu_now(), n);

    double off_ns = parallel_spans(1, n * 5, 0); /* not started: off */
    const int64_t chunk = 1000000;
    wf_trace_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .buffer_events = chunk + 64};
    if (wf_trace_init(&cfg) != WF_OK) {
        fprintf(stderr, "trace_bench: %s\n", wf_error_msg());
        return 1;
    }
    wf_trace_step(0);
    double idle_ns = parallel_spans(1, n * 5, 0); /* started, nothing recording */
    double on_ns = 0, on2_ns = 0;
    int64_t chunks = (n + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; c++) {
        wf_trace_capture(1, "bench");
        wf_trace_step(1 + c);
        on_ns += parallel_spans(1, chunk, 0) / (double)chunks;
        wf_trace_discard();
        wf_trace_capture(1, "bench");
        wf_trace_step(1 + c);
        on2_ns += parallel_spans(2, chunk / 2, 0) / (double)chunks;
        wf_trace_discard();
    }
    wf_trace_shutdown();

    locked.cap = n + 64;
    locked.ev = malloc((size_t)locked.cap * sizeof *locked.ev);
    if (!locked.ev) return 1;
    double lock_ns = parallel_spans(1, n, 1);
    free(locked.ev);

    printf("per span (begin + end), %" PRId64 " spans:\n", n);
    printf("  weft, tracer not started           %8.2f ns\n", off_ns);
    printf("  weft, started, not recording       %8.2f ns\n", idle_ns);
    printf("  weft, recording, 1 thread          %8.2f ns\n", on_ns);
    printf("  weft, recording, 2 threads         %8.2f ns   (per thread)\n", on2_ns);
    printf("  floor: two clock reads             %8.2f ns\n", 2 * clock_ns);
    printf("  peer: mutex + shared vector        %8.2f ns   (uncontended)\n", lock_ns);

    /* 2. the synthetic step */
    calibrate(op_us);
    cfg.buffer_events = 0;
    wf_trace_init(&cfg);
    const int k = 8;
    double *off = malloc(sizeof(double) * (size_t)(rounds * k)), *on = malloc(sizeof(double) * (size_t)(rounds * k));
    double write_ms = 0, write_cpu_ms = 0;
    int64_t step = 1;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < k; i++) off[r * k + i] = run_step(step++, step_spans);
        wf_trace_capture(k, "bench");
        for (int i = 0; i < k; i++) on[r * k + i] = run_step(step++, step_spans);
        /* the next step writes the capture: time it alone (wall time: it
         * includes the fsync) */
        uint64_t w0 = wf_trace_now(), c0 = cpu_now();
        wf_trace_step(step++);
        write_ms += (double)(wf_trace_now() - w0) / 1e6;
        write_cpu_ms += (double)(cpu_now() - c0) / 1e6;
    }
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    wf_trace_shutdown();
    double m_off = median(off, rounds * k), m_on = median(on, rounds * k);
    double predicted = 100.0 * step_spans * (on_ns - off_ns) / (m_off * 1e6);
    printf("\nsynthetic step: %d spans around %.0f us ops, %d rounds of %d steps off then %d recorded:\n", step_spans,
           op_us, rounds, k, k);
    printf("  median step, tracing off           %8.2f ms\n", m_off);
    printf("  median step, recording             %8.2f ms\n", m_on);
    printf("  measured overhead                  %+8.3f %%   (noise on a shared machine is larger)\n",
           100.0 * (m_on - m_off) / m_off);
    printf("  predicted overhead (spans x cost)  %8.3f %%\n", predicted);
    printf("  overhead when off (not recording)  %8.4f %%\n", 100.0 * step_spans * idle_ns / (m_off * 1e6));
    printf("  writing an %d-step capture         %8.2f ms   (CPU %.2f ms; %" PRId64 " spans, once per capture)\n", k,
           write_ms / rounds, write_cpu_ms / rounds,
           st.events_written / (st.captures_written ? st.captures_written : 1));
    free(off);
    free(on);
    /* remove the captures */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "trace_bench: could not remove %s\n", dir);
    return 0;
}
