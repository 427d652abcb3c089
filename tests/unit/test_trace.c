/* Unit tests for the tracer and the trace analyzer (src/obs/trace*.c): the
 * schedule state machine against torch.profiler.schedule's answers, spans
 * off and on, thread buffers (overflow, warmup discarded, several threads,
 * threads that exit), ProfilerStep markers, the writer's JSON (read back
 * with jansson), the request file, the streaming JSON reader, and the
 * analysis of a hand-made trace whose figures are worked out by hand in the
 * comments. HTA itself checks the same figures in tests/py/test_trace_hta.py. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "harness.h"
#include "core/trace_impl.h"
#include "obs/trace_analyze_impl.h"
#include "weft/fileio.h"
#include "weft/trace.h"

/* ------------------------------------------------------------ schedule */

WF_TEST(schedule_matches_torch) {
    /* torch.profiler.schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2) */
    wf_trace_schedule s = {.skip_first = 1, .wait = 1, .warmup = 1, .active = 2, .repeat = 2};
    const wf_trace_action want[] = {WF_TRACE_NONE,   WF_TRACE_NONE,   WF_TRACE_WARMUP, WF_TRACE_RECORD,
                                    WF_TRACE_RECORD_SAVE, WF_TRACE_NONE, WF_TRACE_WARMUP, WF_TRACE_RECORD,
                                    WF_TRACE_RECORD_SAVE, WF_TRACE_NONE, WF_TRACE_NONE,   WF_TRACE_NONE};
    for (int i = 0; i < (int)(sizeof want / sizeof *want); i++) WF_CHECK_EQ(wf_trace_schedule_action(&s, i), want[i]);
    /* repeat 0 cycles forever; active 1 saves every recorded step */
    wf_trace_schedule f = {.wait = 2, .active = 1};
    for (int i = 0; i < 30; i++)
        WF_CHECK_EQ(wf_trace_schedule_action(&f, i), i % 3 == 2 ? WF_TRACE_RECORD_SAVE : WF_TRACE_NONE);
    wf_trace_schedule off = {.wait = 1, .warmup = 1};
    for (int i = 0; i < 10; i++) WF_CHECK_EQ(wf_trace_schedule_action(&off, i), WF_TRACE_NONE);
}

/* ------------------------------------------------------------ helpers */

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) wf_test_fail(__FILE__, __LINE__, "%s:%d: %s", path, e.line, e.text);
    return j;
}

/* Counts events of traceEvents with this cat and name (NULL: any). */
static int count_events(json_t *root, const char *cat, const char *name) {
    json_t *evs = json_object_get(root, "traceEvents"), *e;
    size_t i;
    int n = 0;
    json_array_foreach(evs, i, e) {
        const char *c = json_string_value(json_object_get(e, "cat"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        if ((!cat || (c && strcmp(c, cat) == 0)) && (!name || (nm && strcmp(nm, name) == 0))) n++;
    }
    return n;
}

static json_t *find_event(json_t *root, const char *cat, const char *name) {
    json_t *evs = json_object_get(root, "traceEvents"), *e;
    size_t i;
    json_array_foreach(evs, i, e) {
        const char *c = json_string_value(json_object_get(e, "cat"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (c && nm && strcmp(c, cat) == 0 && strcmp(nm, name) == 0) return e;
    }
    return NULL;
}

static void start(const char *dir, wf_trace_schedule sched, int64_t buffer) {
    wf_trace_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .schedule = sched, .buffer_events = buffer};
    WF_CHECK_OK(wf_trace_init(&cfg));
}

static void spin_us(int us) {
    uint64_t t = wf_trace_now() + (uint64_t)us * 1000;
    while (wf_trace_now() < t) {
    }
}

/* ------------------------------------------------------------ recording */

WF_TEST(spans_cost_nothing_when_off) {
    WF_CHECK_EQ(wf_trace_begin(WF_TRACE_COMPUTE, "x"), -1);
    wf_trace_end(-1);
    WF_CHECK_OK(wf_trace_step(1)); /* no tracer: no-op */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/traces", wf_test_tmpdir());
    start(dir, (wf_trace_schedule){0}, 0);
    for (int64_t s = 1; s <= 5; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        WF_CHECK_EQ(wf_trace_begin(WF_TRACE_COMPUTE, "x"), -1); /* no schedule, no request */
    }
    WF_CHECK_OK(wf_trace_shutdown());
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.captures_written, 0);
    WF_CHECK_TRUE(!wf_path_exists(dir));
}

WF_TEST(capture_writes_kineto_layout) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/traces", wf_test_tmpdir());
    start(dir, (wf_trace_schedule){0}, 0);
    WF_CHECK_OK(wf_trace_step(7));
    WF_CHECK_OK(wf_trace_capture(2, "test \"quoted\""));
    WF_CHECK_OK(wf_trace_step(8)); /* records 8 and 9 */
    wf_trace_span fwd = wf_trace_begin(WF_TRACE_REGION, "forward");
    WF_CHECK_TRUE(fwd >= 0);
    wf_trace_span mm = wf_trace_begin(WF_TRACE_COMPUTE, "matmul");
    wf_trace_span inner = wf_trace_begin(WF_TRACE_COMPUTE, "tile"); /* nested: host only */
    spin_us(20);
    wf_trace_end(inner);
    wf_trace_end(mm);
    wf_trace_end(fwd);
    wf_trace_span dw = wf_trace_begin(WF_TRACE_DATA_WAIT, "data wait");
    spin_us(5);
    wf_trace_end(dw);
    WF_CHECK_OK(wf_trace_step(9));
    wf_trace_end(wf_trace_begin_bytes(WF_TRACE_COMM, "allreduce", 1024));
    wf_trace_end(wf_trace_begin_bytes(WF_TRACE_MEMORY, "snapshot", 4096));
    wf_trace_end(wf_trace_begin(WF_TRACE_IO, "write \"ckpt\"\n"));
    wf_trace_span open = wf_trace_begin(WF_TRACE_COMPUTE, "never ended"); /* closed by the window's end */
    (void)open;
    WF_CHECK_OK(wf_trace_step(10)); /* writes steps 8-9 */
    WF_CHECK_EQ(wf_trace_begin(WF_TRACE_COMPUTE, "x"), -1);
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.captures_written, 1);
    char want[700];
    snprintf(want, sizeof want, "%s/step-000008/rank-00000.trace.json", dir);
    WF_CHECK_STREQ(st.last_path, want);
    WF_CHECK_OK(wf_trace_shutdown());

    json_t *root = load_json(want);
    json_t *di = json_object_get(root, "distributedInfo");
    WF_CHECK_EQ(json_integer_value(json_object_get(di, "rank")), 0);
    WF_CHECK_EQ(json_integer_value(json_object_get(di, "world_size")), 1);
    WF_CHECK_TRUE(json_is_array(json_object_get(root, "deviceProperties")));
    WF_CHECK_TRUE(json_integer_value(json_object_get(root, "baseTimeNanoseconds")) > 0);
    json_t *w = json_object_get(root, "weft");
    WF_CHECK_EQ(json_integer_value(json_object_get(w, "first_step")), 8);
    WF_CHECK_EQ(json_integer_value(json_object_get(w, "last_step")), 9);
    WF_CHECK_STREQ(json_string_value(json_object_get(w, "trigger")), "test \"quoted\"");
    /* HTA finds the rank with the regex "rank":\s+(\d+) */
    char *text = NULL;
    size_t len = 0;
    WF_CHECK_OK(wf_file_read(want, &text, &len));
    WF_CHECK_TRUE(strstr(text, "\"rank\": 0") != NULL);
    free(text);

    WF_CHECK_EQ(count_events(root, "user_annotation", "ProfilerStep#8"), 1);
    WF_CHECK_EQ(count_events(root, "user_annotation", "ProfilerStep#9"), 1);
    WF_CHECK_EQ(count_events(root, NULL, "ProfilerStep#7"), 0);
    WF_CHECK_EQ(count_events(root, "user_annotation", "forward"), 1);
    WF_CHECK_EQ(count_events(root, "user_annotation", "data wait"), 1);
    WF_CHECK_EQ(count_events(root, "cpu_op", "matmul"), 1);
    WF_CHECK_EQ(count_events(root, "kernel", "matmul"), 1);
    WF_CHECK_EQ(count_events(root, "cpu_op", "tile"), 1);
    WF_CHECK_EQ(count_events(root, "kernel", "tile"), 0);
    WF_CHECK_EQ(count_events(root, "kernel", "ncclKernel_allreduce"), 1);
    WF_CHECK_EQ(count_events(root, "gpu_memcpy", "Memcpy HtoH snapshot"), 1);
    WF_CHECK_EQ(count_events(root, "gpu_memcpy", "Memcpy IO write \"ckpt\"\n"), 1);
    WF_CHECK_EQ(count_events(root, "kernel", "never ended"), 1);
    WF_CHECK_EQ(json_integer_value(json_object_get(json_object_get(find_event(root, "kernel", "never ended"), "args"),
                                                   "truncated")), 1);

    /* a kernel and its cpu_op share ts, dur and a correlation id */
    json_t *k = find_event(root, "kernel", "matmul"), *c = find_event(root, "cpu_op", "matmul");
    json_t *ka = json_object_get(k, "args"), *ca = json_object_get(c, "args");
    WF_CHECK_EQ(json_integer_value(json_object_get(ka, "correlation")),
                json_integer_value(json_object_get(ca, "correlation")));
    WF_CHECK_TRUE(json_integer_value(json_object_get(ka, "correlation")) > 0);
    WF_CHECK_EQ(json_integer_value(json_object_get(ka, "stream")), 7);
    WF_CHECK_TRUE(json_real_value(json_object_get(k, "ts")) == json_real_value(json_object_get(c, "ts")));
    WF_CHECK_TRUE(json_real_value(json_object_get(k, "dur")) >= 20.0);
    WF_CHECK_STREQ(json_string_value(json_object_get(ka, "weft_cat")), "compute");
    json_t *ar = json_object_get(find_event(root, "kernel", "ncclKernel_allreduce"), "args");
    WF_CHECK_EQ(json_integer_value(json_object_get(ar, "bytes")), 1024);
    /* the matmul lies inside its step and the tile inside the matmul */
    json_t *s8 = find_event(root, "user_annotation", "ProfilerStep#8"), *tile = find_event(root, "cpu_op", "tile");
    double s8ts = json_real_value(json_object_get(s8, "ts")), s8end = s8ts + json_real_value(json_object_get(s8, "dur"));
    double mts = json_real_value(json_object_get(c, "ts")), mend = mts + json_real_value(json_object_get(c, "dur"));
    double tts = json_real_value(json_object_get(tile, "ts"));
    WF_CHECK_TRUE(s8ts <= mts && mend <= s8end);
    WF_CHECK_TRUE(mts <= tts && tts + json_real_value(json_object_get(tile, "dur")) <= mend);
    /* every X event has what Perfetto and HTA need */
    json_t *evs = json_object_get(root, "traceEvents"), *e;
    size_t i;
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        WF_CHECK_TRUE(ph != NULL);
        WF_CHECK_TRUE(json_is_integer(json_object_get(e, "pid")) && json_is_integer(json_object_get(e, "tid")));
        if (strcmp(ph, "X") == 0)
            WF_CHECK_TRUE(json_is_number(json_object_get(e, "ts")) && json_is_number(json_object_get(e, "dur")) &&
                          json_is_string(json_object_get(e, "cat")));
    }
    json_decref(root);
}

WF_TEST(warmup_is_discarded_and_full_buffers_drop) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/t", wf_test_tmpdir());
    /* wait 1, warmup 1, active 2, once; buffers of 8 events */
    start(dir, (wf_trace_schedule){.wait = 1, .warmup = 1, .active = 2, .repeat = 1}, 8);
    for (int64_t s = 1; s <= 6; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        for (int i = 0; i < (s == 4 ? 20 : 2); i++)
            wf_trace_end(wf_trace_begin(WF_TRACE_COMPUTE, s == 2 ? "warm" : "op"));
    }
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.captures_written, 1);
    /* 8 slots: markers 3 and 4, two ops of step 3, four of step 4; 16 dropped */
    WF_CHECK_EQ(st.dropped, 16);
    json_t *root = load_json(st.last_path);
    WF_CHECK_EQ(count_events(root, NULL, "warm"), 0);
    WF_CHECK_EQ(count_events(root, NULL, "ProfilerStep#2"), 0);
    WF_CHECK_EQ(count_events(root, "user_annotation", "ProfilerStep#3"), 1);
    WF_CHECK_EQ(count_events(root, "user_annotation", "ProfilerStep#4"), 1);
    WF_CHECK_EQ(count_events(root, "kernel", "op"), 6);
    WF_CHECK_EQ(json_integer_value(json_object_get(json_object_get(root, "weft"), "dropped_events")), 16);
    WF_CHECK_EQ(json_integer_value(json_object_get(json_object_get(root, "weft"), "first_step")), 3);
    json_decref(root);
    WF_CHECK_OK(wf_trace_shutdown());
}

typedef struct {
    atomic_int go, stop;
    atomic_llong spans; /* spans ended, for the main thread to wait on */
    int id;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    char name[32];
    snprintf(name, sizeof name, "worker %d", a->id);
    wf_trace_thread_setup(name, 30 + a->id);
    while (!atomic_load(&a->go)) {
    }
    while (!atomic_load(&a->stop)) {
        wf_trace_span s = wf_trace_begin(a->id == 0 ? WF_TRACE_COMM : WF_TRACE_IO, "work");
        spin_us(2);
        wf_trace_end(s);
        atomic_fetch_add(&a->spans, 1);
    }
    return NULL;
}

WF_TEST(threads_record_while_the_main_thread_writes) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/t", wf_test_tmpdir());
    start(dir, (wf_trace_schedule){.active = 2}, 1 << 16); /* every 2 steps, forever */
    worker_arg args[2] = {{.id = 0}, {.id = 1}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &args[i]);
    for (int i = 0; i < 2; i++) atomic_store(&args[i].go, 1);
    for (int64_t s = 1; s <= 6; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        wf_trace_end(wf_trace_begin(WF_TRACE_COMPUTE, "main op"));
        /* let each worker end a few spans inside this step, however busy
         * the machine is */
        long long seen[2] = {atomic_load(&args[0].spans), atomic_load(&args[1].spans)};
        while (atomic_load(&args[0].spans) < seen[0] + 3 || atomic_load(&args[1].spans) < seen[1] + 3) {
        }
    }
    WF_CHECK_OK(wf_trace_flush());
    for (int i = 0; i < 2; i++) atomic_store(&args[i].stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.captures_written, 3); /* steps 1-2, 3-4, 5-6 */
    json_t *root = load_json(st.last_path);
    WF_CHECK_TRUE(count_events(root, "kernel", "ncclKernel_work") > 0);
    WF_CHECK_TRUE(count_events(root, "gpu_memcpy", "Memcpy IO work") > 0);
    WF_CHECK_EQ(count_events(root, "kernel", "main op"), 2);
    /* the worker threads are named and keep their streams */
    int named = 0, streams = 0;
    json_t *evs = json_object_get(root, "traceEvents"), *e;
    size_t i;
    json_array_foreach(evs, i, e) {
        const char *nm = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        if (nm && strcmp(nm, "worker 1") == 0) named++;
        json_t *a = json_object_get(e, "args");
        if (json_integer_value(json_object_get(a, "stream")) == 31) streams++;
    }
    WF_CHECK_EQ(named, 1);
    WF_CHECK_TRUE(streams > 0);
    json_decref(root);
    WF_CHECK_OK(wf_trace_shutdown());
}

static void *short_lived(void *p) {
    (void)p;
    wf_trace_end(wf_trace_begin(WF_TRACE_COMPUTE, "short"));
    return NULL;
}

WF_TEST(exited_threads_are_written_and_their_buffers_reused) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/t", wf_test_tmpdir());
    start(dir, (wf_trace_schedule){.active = 1}, 64);
    for (int64_t s = 1; s <= 4; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        for (int k = 0; k < 3; k++) { /* three threads a step, one after another */
            pthread_t t;
            pthread_create(&t, NULL, short_lived, NULL);
            pthread_join(t, NULL);
        }
    }
    WF_CHECK_OK(wf_trace_flush());
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.captures_written, 4);
    json_t *root = load_json(st.last_path);
    WF_CHECK_EQ(count_events(root, "kernel", "short"), 3);
    json_decref(root);
    WF_CHECK_OK(wf_trace_shutdown());
}

/* ------------------------------------------------------------ requests */

WF_TEST(request_file_round_trip) {
    const char *run = wf_test_tmpdir();
    wf_trace_request r, got;
    int found = -1;
    WF_CHECK_OK(wf_trace_request_poll(run, &got, &found));
    WF_CHECK_EQ(found, 0);
    WF_CHECK_OK(wf_trace_request_write(run, 5, &r));
    WF_CHECK_OK(wf_trace_request_poll(run, &got, &found));
    WF_CHECK_EQ(found, 1);
    WF_CHECK_EQ(got.steps, 5);
    WF_CHECK_STREQ(got.id, r.id);
    WF_CHECK_OK(wf_trace_request_poll(run, &got, &found)); /* claimed: gone */
    WF_CHECK_EQ(found, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", run, WF_TRACE_REQUEST_FILE);
    wf_test_write_file(path, "{\"steps\": 3", 11);
    WF_CHECK_ERR(wf_trace_request_poll(run, &got, &found), WF_ERR_FORMAT, WF_TRACE_REQUEST_FILE);
    WF_CHECK_TRUE(!wf_path_exists(path));
    const char *bad = "{\"format\": \"weft-trace-request\", \"version\": 1, \"id\": \"x\", \"steps\": 0}";
    wf_test_write_file(path, bad, strlen(bad));
    WF_CHECK_ERR(wf_trace_request_poll(run, &got, &found), WF_ERR_FORMAT, "steps");
    WF_CHECK_ERR(wf_trace_request_write(run, 0, NULL), WF_ERR_RANGE, "--steps");
    snprintf(path, sizeof path, "%s/missing", run);
    WF_CHECK_ERR(wf_trace_request_write(path, 2, NULL), WF_ERR_NOTFOUND, "missing");
}

WF_TEST(step_polls_and_serves_a_request) {
    const char *run = wf_test_tmpdir();
    char dir[600];
    snprintf(dir, sizeof dir, "%s/traces", run);
    wf_trace_config cfg = {.dir = dir, .request_dir = run, .poll_requests = 1, .rank = 0, .world_size = 1};
    WF_CHECK_OK(wf_trace_init(&cfg));
    WF_CHECK_OK(wf_trace_step(1));
    WF_CHECK_EQ(wf_trace_begin(WF_TRACE_COMPUTE, "x"), -1);
    wf_trace_request r;
    WF_CHECK_OK(wf_trace_request_write(run, 2, &r));
    for (int64_t s = 2; s <= 5; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        wf_trace_end(wf_trace_begin(WF_TRACE_COMPUTE, "op"));
    }
    wf_trace_stats st;
    wf_trace_get_stats(&st);
    WF_CHECK_EQ(st.requests_served, 1);
    WF_CHECK_EQ(st.captures_written, 1);
    json_t *root = load_json(st.last_path);
    json_t *w = json_object_get(root, "weft");
    WF_CHECK_EQ(json_integer_value(json_object_get(w, "first_step")), 2);
    WF_CHECK_EQ(json_integer_value(json_object_get(w, "last_step")), 3);
    char trig[128];
    snprintf(trig, sizeof trig, "request %s", r.id);
    WF_CHECK_STREQ(json_string_value(json_object_get(w, "trigger")), trig);
    WF_CHECK_EQ(count_events(root, "kernel", "op"), 2);
    json_decref(root);
    WF_CHECK_OK(wf_trace_shutdown());
}

/* ------------------------------------------------------------ reading */

WF_TEST(microsecond_text_to_ns) {
    int64_t ns = 0;
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("1.5", 3, &ns));
    WF_CHECK_EQ(ns, 1500);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("1795264414281495.724", 20, &ns));
    WF_CHECK_EQ(ns, 1795264414281495724LL);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("-0.0015", 7, &ns));
    WF_CHECK_EQ(ns, -2);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("0.0014999", 9, &ns));
    WF_CHECK_EQ(ns, 1);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("2e3", 3, &ns));
    WF_CHECK_EQ(ns, 2000000);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("1.25E-1", 7, &ns));
    WF_CHECK_EQ(ns, 125);
    WF_CHECK_TRUE(wf__trace_us_text_to_ns("42", 2, &ns));
    WF_CHECK_EQ(ns, 42000);
    WF_CHECK_TRUE(!wf__trace_us_text_to_ns("abc", 3, &ns));
    WF_CHECK_TRUE(!wf__trace_us_text_to_ns("1e", 2, &ns));
    WF_CHECK_TRUE(!wf__trace_us_text_to_ns("1e30", 4, &ns));
}

/* A hand-made two-step trace (times in µs). Kernels, with the ts of their
 * correlated CPU event in brackets:
 *   c1 compute  mm            [10, 40]  stream 7   cpu 10
 *   c2 compute  mm            [50, 60]  stream 7   cpu 35  (launched before c1 ended)
 *   c3 comm     ncclKernel_ar [30, 80]  stream 20  cpu 30
 *   c4 memory   Memcpy HtoH x [85, 95]  stream 7   cpu 55
 *   c5 compute  mm            [130,150] stream 7   cpu 90
 *   c7 compute  mm            [160,170] stream "7" cpu 160
 *   c6 compute  late          [300,310] stream 7   cpu 300 (after the last step: never kept)
 * ProfilerStep#1 [0,100), ProfilerStep#2 [100,200); a data wait [60, 85].
 * All steps (include_last_profiler_step): c1-c5, c7 kept.
 *   span 10..170 = 160; union of kernels [10,80]+[85,95]+[130,150]+[160,170]
 *   = 110, so idle 50; compute [10,40]+[50,60]+[130,150]+[160,170] = 70;
 *   non-compute 160-70-50 = 40: communication (comm not under compute)
 *   |[10,80] u [130,150] u [160,170]| - 70 = 30, memory+io 110-100 = 10;
 *   data wait: the idle part of [60,85] is [80,85] = 5, other idle 45.
 *   Overlap: compute under [30,80] is [30,40]+[50,60] = 20 of 50: 40%.
 *   Idle on stream 7 (threshold 30): c2 gap 10, cpu 35 <= 40: kernel wait;
 *   c4 gap 25, cpu 55 <= 60: kernel wait; c5 gap 35, cpu 90 <= 95: other;
 *   c7 gap 10, cpu 160 > 150: host wait. So 35 / 35 / 10.
 *   mm: 30, 10, 20, 10: sum 70, mean 17.5, sample std sqrt(275/3).
 * Without the last step (CPU events before 100 only): c7 goes.
 *   span 140, union 100, idle 40, compute 60, non-compute 40, other idle 35. */
static const char *hand_trace =
    "{\"schemaVersion\": 1, \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 3, \"world_size\": 4,"
    " \"pg_config\": [{\"a\": [1, {\"b\": null}]}]},\n"
    " \"traceEvents\": [\n"
    "  {\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"args\": {\"name\": \"x\"}},\n"
    "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#1\", \"pid\": 1, \"tid\": 1,"
    " \"ts\": 0, \"dur\": 100},\n"
    "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#2\", \"pid\": 1, \"tid\": 1,"
    " \"ts\": 100.000, \"dur\": 1.0e2},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 10, \"dur\": 1, \"args\": {\"correlation\": 1}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"mm\", \"ts\": 1e1, \"dur\": 30, \"args\": {\"stream\": 7,"
    " \"correlation\": 1, \"grid\": [1, 2, 3], \"note\": \"a \\\"quoted\\\" \\u00e9\"}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"mm\", \"ts\": 50, \"dur\": 10, \"args\": {\"stream\": 7, \"correlation\": 2}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 35, \"dur\": 1, \"args\": {\"correlation\": 2}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 30, \"dur\": 1, \"args\": {\"correlation\": 3}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclKernel_ar\", \"ts\": 30, \"dur\": 50, \"args\": {\"stream\": 20, \"correlation\": 3}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 55, \"dur\": 1, \"args\": {\"correlation\": 4}},\n"
    "  {\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoH x\", \"ts\": 85, \"dur\": 10, \"args\": {\"stream\": 7, \"correlation\": 4}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 90, \"dur\": 1, \"args\": {\"correlation\": 5}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"mm\", \"ts\": 130, \"dur\": 20, \"args\": {\"stream\": 7, \"correlation\": 5}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 160, \"dur\": 1, \"args\": {\"correlation\": 7}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"mm\", \"ts\": 160, \"dur\": 10, \"args\": {\"stream\": \"7\", \"correlation\": 7}},\n"
    "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"launch\", \"ts\": 300, \"dur\": 1, \"args\": {\"correlation\": 6}},\n"
    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"late\", \"ts\": 300, \"dur\": 10, \"args\": {\"stream\": 7, \"correlation\": 6}},\n"
    "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"wait\", \"ts\": 60, \"dur\": 25, \"args\": {\"weft_cat\": \"data_wait\"}},\n"
    "  {\"ph\": \"X\", \"cat\": \"Trace\", \"name\": \"whole\", \"ts\": 0, \"dur\": 1000, \"args\": {\"stream\": 7, \"correlation\": 99}},\n"
    "  {\"ph\": \"i\", \"cat\": \"kernel\", \"name\": \"instant\", \"ts\": 5, \"args\": {\"stream\": 7, \"correlation\": 98}}\n"
    " ],\n \"traceName\": \"hand\"}\n";

static const wf_trace_rank *analyse(const char *dir, int skip_last, wf_trace_analysis *a) {
    wf_trace_analyze_opts o = {.skip_last_step = skip_last};
    WF_CHECK_OK(wf_trace_analyze(dir, &o, a));
    WF_CHECK_EQ(a->n_ranks, 1);
    return &a->ranks[0];
}

WF_TEST(analysis_of_a_hand_made_trace) {
    const char *dir = wf_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/hand.json", dir);
    wf_test_write_file(path, hand_trace, strlen(hand_trace));
    wf_trace_analysis a;
    const wf_trace_rank *r = analyse(dir, 0, &a);
    WF_CHECK_EQ(r->rank, 3);
    WF_CHECK_EQ(r->world_size, 4);
    WF_CHECK_EQ(r->kernels, 6);
    WF_CHECK_EQ(r->n_steps, 2);
    WF_CHECK_NEAR(r->time.total, 160, 1e-9);
    WF_CHECK_NEAR(r->time.idle, 50, 1e-9);
    WF_CHECK_NEAR(r->time.compute, 70, 1e-9);
    WF_CHECK_NEAR(r->time.non_compute, 40, 1e-9);
    WF_CHECK_NEAR(r->time.communication, 30, 1e-9);
    WF_CHECK_NEAR(r->time.memory_io, 10, 1e-9);
    WF_CHECK_NEAR(r->time.data_wait, 5, 1e-9);
    WF_CHECK_NEAR(r->time.other_idle, 45, 1e-9);
    WF_CHECK_NEAR(r->overlap_pct, 40, 1e-9);
    WF_CHECK_NEAR(r->idle_kernel_wait, 35, 1e-9);
    WF_CHECK_NEAR(r->idle_other, 35, 1e-9);
    WF_CHECK_NEAR(r->idle_host_wait, 10, 1e-9);
    WF_CHECK_EQ(r->n_idle, 2);
    WF_CHECK_STREQ(r->ops[0].name, "mm");
    WF_CHECK_EQ(r->ops[0].count, 4);
    WF_CHECK_NEAR(r->ops[0].sum, 70, 1e-9);
    WF_CHECK_NEAR(r->ops[0].mean, 17.5, 1e-9);
    WF_CHECK_NEAR(r->ops[0].min, 10, 1e-9);
    WF_CHECK_NEAR(r->ops[0].max, 30, 1e-9);
    WF_CHECK_NEAR(r->ops[0].std, sqrt(275.0 / 3), 1e-9);
    WF_CHECK_EQ(r->ops[0].kind, 0);
    for (int i = 0; i < r->n_ops; i++) WF_CHECK_TRUE(strcmp(r->ops[i].name, "late") != 0);
    wf_trace_analysis_free(&a);

    r = analyse(dir, 1, &a);
    WF_CHECK_EQ(r->kernels, 5);
    WF_CHECK_EQ(r->n_steps, 1);
    WF_CHECK_NEAR(r->time.total, 140, 1e-9);
    WF_CHECK_NEAR(r->time.idle, 40, 1e-9);
    WF_CHECK_NEAR(r->time.compute, 60, 1e-9);
    WF_CHECK_NEAR(r->time.other_idle, 35, 1e-9);
    wf_trace_analysis_free(&a);

    /* the same file gzip-compressed gives the same answer */
    char gz[600];
    snprintf(gz, sizeof gz, "%s/gz", dir);
    WF_CHECK_OK(wf_mkdirs(gz));
    snprintf(path, sizeof path, "%s/gz/hand.json.gz", dir);
    gzFile f = gzopen(path, "wb");
    WF_CHECK_TRUE(f != NULL);
    gzwrite(f, hand_trace, (unsigned)strlen(hand_trace));
    gzclose(f);
    r = analyse(gz, 0, &a);
    WF_CHECK_NEAR(r->time.compute, 70, 1e-9);
    WF_CHECK_NEAR(r->time.data_wait, 5, 1e-9);
    wf_trace_analysis_free(&a);
}

WF_TEST(analysis_reports_broken_files) {
    const char *dir = wf_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/cut.json", dir);
    wf_test_write_file(path, hand_trace, strlen(hand_trace) / 2);
    wf_trace_analysis a;
    WF_CHECK_ERR(wf_trace_analyze(dir, NULL, &a), WF_ERR_FORMAT, "cut.json:");
    snprintf(path, sizeof path, "%s/cut.json", dir);
    const char *two = "{\"distributedInfo\": {\"rank\": 0}, \"traceEvents\": []}";
    wf_test_write_file(path, two, strlen(two));
    snprintf(path, sizeof path, "%s/other.json", dir);
    wf_test_write_file(path, two, strlen(two));
    WF_CHECK_ERR(wf_trace_analyze(dir, NULL, &a), WF_ERR_FORMAT, "both rank 0");
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    WF_CHECK_OK(wf_mkdirs(empty));
    WF_CHECK_ERR(wf_trace_analyze(empty, NULL, &a), WF_ERR_NOTFOUND, "no trace files");
}

WF_TEST(analysis_reads_what_the_tracer_wrote) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/traces", wf_test_tmpdir());
    start(dir, (wf_trace_schedule){.active = 3, .repeat = 1}, 0);
    for (int64_t s = 1; s <= 4; s++) {
        WF_CHECK_OK(wf_trace_step(s));
        uint64_t t = wf_trace_now() + 1000;
        wf_trace_record(WF_TRACE_DATA_WAIT, "data wait", t, t + 100000, -1);
        wf_trace_record(WF_TRACE_COMPUTE, "op a", t + 100000, t + 300000, -1);
        wf_trace_record(WF_TRACE_COMPUTE, "op b", t + 300000, t + 400000, -1);
        wf_trace_record(WF_TRACE_COMM, "allreduce", t + 400000, t + 500000, -1);
        spin_us(520);
    }
    WF_CHECK_OK(wf_trace_shutdown());
    wf_trace_analysis a;
    const wf_trace_rank *r = analyse(dir, 0, &a); /* the newest capture under traces/ */
    WF_CHECK_EQ(r->n_steps, 3);
    WF_CHECK_EQ(r->kernels, 9);
    WF_CHECK_NEAR(r->time.compute, 3 * 300.0, 1e-6);
    WF_CHECK_NEAR(r->time.communication, 3 * 100.0, 1e-6);
    WF_CHECK_NEAR(r->time.data_wait, 2 * 100.0, 1e-6); /* the first one precedes the first kernel */
    WF_CHECK_NEAR(r->ops[0].sum, 3 * 200.0, 1e-6);
    WF_CHECK_STREQ(r->ops[0].name, "op a");
    wf_trace_analysis_free(&a);
}
