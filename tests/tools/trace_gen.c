/* Test helper for tests/py/test_trace_hta.py: records a synthetic training
 * run with the real tracer (schedule, thread buffers, writer) and writes
 * its capture, so that HTA and `weft trace analyze` can be compared on it.
 *
 *   trace_gen DIR RANK WORLD hta   6 steps of a planned step: data wait,
 *                                  forward/backward ops (one nested), three
 *                                  all-reduce buckets on a comm thread that
 *                                  overlap the backward, a final all-reduce
 *                                  on the main thread (rank 1 arrives 5 ms
 *                                  late), AdamW, a checkpoint copy and a
 *                                  write on a writer thread. Captured by the
 *                                  schedule wait 1, warmup 1, active 4.
 *   trace_gen DIR 0 1 big N        two steps of N compute spans each (for
 *                                  the memory test: about 320 bytes a span).
 *
 * Spans are recorded with explicit times planned on a grid of 20 ms steps
 * from the run's start, so that the structure of each step is the same on
 * every run and every rank; each rank's timestamps count from its own
 * start (base_unix_ns), so ranks run one after another line up as if they
 * had run together. Prints the trace file written. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/trace.h"

#define US 1000ull

static uint64_t run0;  /* tracer clock at the start of step 1's grid slot */
static int rank;

static void spin_until(uint64_t t) {
    while (wf_trace_now() < t) {
    }
}

/* ---- helper threads: record their spans of step k when told ---- */

typedef struct {
    pthread_barrier_t start, done;
    uint64_t s0; /* the step's grid start */
    int step, stop;
} plan;

static void *comm_thread(void *arg) {
    plan *p = arg;
    wf_trace_thread_setup("comm", 20);
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->stop) break;
        /* three gradient buckets, overlapping the backward */
        const uint64_t at[3][2] = {{8000, 9000}, {9500, 10500}, {11000, 11800}};
        for (int b = 0; b < 3; b++)
            wf_trace_record(WF_TRACE_COMM, "allreduce", p->s0 + at[b][0] * US, p->s0 + at[b][1] * US, 4 << 20);
        pthread_barrier_wait(&p->done);
    }
    return NULL;
}

static void *ckpt_thread(void *arg) {
    plan *p = arg;
    wf_trace_thread_setup("ckpt-writer", 40);
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->stop) break;
        if (p->step == 4) wf_trace_record(WF_TRACE_IO, "ckpt write", p->s0 + 18900 * US, p->s0 + 19700 * US, 8 << 20);
        pthread_barrier_wait(&p->done);
    }
    return NULL;
}

/* The main thread's spans of one step, from s0 (µs offsets). */
static void main_step(uint64_t s0, int step) {
#define REC(cat, name, a, b) wf_trace_record(cat, name, s0 + (uint64_t)(a) * US, s0 + (uint64_t)(b) * US, -1)
    uint64_t dw = 500 + 100 * (uint64_t)rank;
    REC(WF_TRACE_DATA_WAIT, "data wait", 2000, 2000 + dw);
    REC(WF_TRACE_REGION, "forward", 2700, 7000);
    REC(WF_TRACE_COMPUTE, "embedding", 2700, 2900);
    uint64_t t = 2910; /* a 10 µs gap: kernel wait */
    for (int l = 0; l < 3; l++) {
        REC(WF_TRACE_COMPUTE, "matmul", t, t + 600);
        REC(WF_TRACE_COMPUTE, "gemm tile", t + 100, t + 300); /* nested: host only */
        REC(WF_TRACE_COMPUTE, "attention", t + 650, t + 1000); /* a 50 µs gap */
        REC(WF_TRACE_COMPUTE, "rmsnorm", t + 1005, t + 1100);
        t += 1300;
    }
    REC(WF_TRACE_REGION, "backward", 7000, 12000);
    for (uint64_t b = 7000; b < 12000; b += 1000) {
        REC(WF_TRACE_COMPUTE, "matmul backward", b, b + 700);
        REC(WF_TRACE_COMPUTE, "attention backward", b + 720, b + 950);
    }
    /* the final bucket: every rank leaves the all-reduce together, rank 1
     * arrives 5 ms late (it straggles), the others wait inside it */
    uint64_t late = rank == 1 ? 5000 : 0;
    if (late) REC(WF_TRACE_COMPUTE, "straggler work", 12000, 12000 + late);
    REC(WF_TRACE_COMM, "allreduce", 12000 + late, 17800);
    REC(WF_TRACE_COMPUTE, "adamw", 17850, 18500);
    if (step == 4) REC(WF_TRACE_MEMORY, "ckpt snapshot", 18550, 18900);
#undef REC
}

static int run_hta(const char *dir, int world) {
    wf_trace_config cfg = {
        .dir = dir, .rank = rank, .world_size = world, .backend = "mpi",
        .schedule = {.wait = 1, .warmup = 1, .active = 4, .repeat = 1},
    };
    cfg.base_unix_ns = 0;
    /* count timestamps from this run's start (see the top of the file) */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    cfg.base_unix_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    if (wf_trace_init(&cfg) != WF_OK) {
        fprintf(stderr, "trace_gen: %s\n", wf_error_msg());
        return 1;
    }
    plan p = {.stop = 0};
    pthread_barrier_init(&p.start, NULL, 3);
    pthread_barrier_init(&p.done, NULL, 3);
    pthread_t th[2];
    pthread_create(&th[0], NULL, comm_thread, &p);
    pthread_create(&th[1], NULL, ckpt_thread, &p);
    const uint64_t L = 20000 * US;
    run0 = wf_trace_now() + 1000 * US;
    for (int step = 1; step <= 6; step++) {
        uint64_t s0 = run0 + (uint64_t)(step - 1) * L;
        spin_until(s0);
        if (wf_trace_step(step) != WF_OK) fprintf(stderr, "trace_gen: %s\n", wf_error_msg());
        p.s0 = s0;
        p.step = step;
        pthread_barrier_wait(&p.start);
        main_step(s0, step);
        pthread_barrier_wait(&p.done);
        spin_until(s0 + L - 10 * US);
    }
    wf_status st = wf_trace_flush();
    p.stop = 1;
    pthread_barrier_wait(&p.start);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    pthread_barrier_destroy(&p.start);
    pthread_barrier_destroy(&p.done);
    wf_trace_stats stats;
    wf_trace_get_stats(&stats);
    wf_trace_shutdown();
    if (st != WF_OK || stats.captures_written != 1) {
        fprintf(stderr, "trace_gen: %s (captures %" PRId64 ")\n", wf_error_msg(), stats.captures_written);
        return 1;
    }
    printf("%s\n", stats.last_path);
    return 0;
}

static int run_big(const char *dir, int64_t n) {
    static const char *const names[] = {"matmul", "attention", "rmsnorm", "swiglu", "rope", "embedding",
                                        "softmax", "cross entropy", "adamw", "residual add", "matmul backward",
                                        "attention backward", "rmsnorm backward", "swiglu backward",
                                        "rope backward", "embedding backward"};
    wf_trace_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .schedule = {.active = 2, .repeat = 1},
                           .buffer_events = 2 * n + 16};
    if (wf_trace_init(&cfg) != WF_OK) {
        fprintf(stderr, "trace_gen: %s\n", wf_error_msg());
        return 1;
    }
    for (int step = 1; step <= 2; step++) {
        wf_trace_step(step);
        uint64_t s0 = wf_trace_now() + 10 * US, span = 50; /* ns per span slot */
        for (int64_t i = 0; i < n; i++)
            wf_trace_record(WF_TRACE_COMPUTE, names[i % 16], s0 + (uint64_t)i * span,
                            s0 + (uint64_t)i * span + 40, -1);
        spin_until(s0 + (uint64_t)n * span + 10 * US);
    }
    wf_status st = wf_trace_flush();
    wf_trace_stats stats;
    wf_trace_get_stats(&stats);
    wf_trace_shutdown();
    if (st != WF_OK || stats.dropped) {
        fprintf(stderr, "trace_gen: %s (dropped %" PRId64 ")\n", wf_error_msg(), stats.dropped);
        return 1;
    }
    printf("%s\n", stats.last_path);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: trace_gen DIR RANK WORLD hta | trace_gen DIR 0 1 big N\n");
        return 2;
    }
    rank = atoi(argv[2]);
    int world = atoi(argv[3]);
    if (strcmp(argv[4], "hta") == 0) return run_hta(argv[1], world);
    if (strcmp(argv[4], "big") == 0 && argc > 5) return run_big(argv[1], atoll(argv[5]));
    fprintf(stderr, "trace_gen: unknown mode %s\n", argv[4]);
    return 2;
}
