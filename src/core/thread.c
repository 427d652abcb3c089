/* Fork-join over pthreads. Threads are created per call: the callers run
 * coarse tasks (megabytes of text each), so creation cost is noise. */
#include "weft/thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int wf_default_threads(void) {
    const char *env = getenv("WEFT_THREADS");
    if (env) {
        int n = atoi(env);
        if (n >= 1) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

typedef struct {
    wf_task_fn fn;
    void *ctx;
    int tid, n;
    wf_status status;
    char msg[1024];
} task_slot;

static void *task_main(void *arg) {
    task_slot *t = arg;
    t->status = t->fn(t->ctx, t->tid, t->n);
    if (t->status != WF_OK) snprintf(t->msg, sizeof t->msg, "%s", wf_error_msg());
    return NULL;
}

wf_status wf_parallel_run(int n_threads, wf_task_fn fn, void *ctx) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads == 1) return fn(ctx, 0, 1);
    task_slot *slots = calloc((size_t)n_threads, sizeof *slots);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    if (!slots || !th) {
        free(slots);
        free(th);
        return wf_error(WF_ERR_NOMEM, "out of memory starting %d threads", n_threads);
    }
    int started = 1;
    for (int i = 0; i < n_threads; i++) slots[i] = (task_slot){fn, ctx, i, n_threads, WF_OK, {0}};
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&th[i], NULL, task_main, &slots[i]) != 0) {
            /* Run what could not be started on this thread instead. */
            task_main(&slots[i]);
            th[i] = 0;
            continue;
        }
        started++;
    }
    task_main(&slots[0]);
    for (int i = 1; i < n_threads; i++)
        if (th[i]) pthread_join(th[i], NULL);
    wf_status s = WF_OK;
    for (int i = 0; i < n_threads; i++) {
        if (slots[i].status != WF_OK) {
            s = wf_error(slots[i].status, "%s", slots[i].msg);
            break;
        }
    }
    (void)started;
    free(slots);
    free(th);
    return s;
}

double wf_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
