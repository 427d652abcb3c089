/* Unit tests of src/comm without MPI: the single-process backend's
 * semantics, backend detection from the environment and the errors of
 * backend loading, the reducer's bucket plan and start order, the ZeRO-1
 * partition and its memory figures, the flight recorder, and the watchdog
 * (through its internal interface, with a callback instead of the exit).
 * The MPI backends are tested under mpirun by tests/py/test_dist_mpi.py. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "harness.h"
#include "weft/comm.h"

/* Two of a caller's agreement bits (dist.h leaves their meaning to it). */
enum { AGREE_STOP = 1u << 0, AGREE_SAVE = 1u << 1 };

static void clear_launcher_env(void) {
    static const char *vars[] = {"WEFT_DIST_BACKEND", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                 "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "PMIX_RANK",
                                 "WEFT_DIST_LIB_DIR"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static wf_comm *single_comm(void) {
    clear_launcher_env();
    wf_comm *c = NULL;
    wf_comm_options o = wf_comm_options_default();
    WF_CHECK_OK(wf_comm_create(&c, &o));
    return c;
}

WF_TEST(detect_backend_from_environment) {
    clear_launcher_env();
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "single");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "openmpi");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMI_RANK", "0", 1);
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "mpich");
    unsetenv("PMI_RANK");
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "mpich");
    setenv("PMIX_RANK", "1", 1);
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "openmpi");
    setenv("WEFT_DIST_BACKEND", "single", 1);
    WF_CHECK_STREQ(wf_comm_detect_backend(NULL), "single");
    wf_comm_options o = wf_comm_options_default();
    o.backend = "mpich";
    WF_CHECK_STREQ(wf_comm_detect_backend(&o), "mpich");
    o.backend = "auto";
    WF_CHECK_STREQ(wf_comm_detect_backend(&o), "single");
}

WF_TEST(single_backend_identity) {
    wf_comm *c = single_comm();
    WF_CHECK_EQ(wf_comm_rank(c), 0);
    WF_CHECK_EQ(wf_comm_size(c), 1);
    WF_CHECK_EQ(wf_comm_local_rank(c), 0);
    WF_CHECK_STREQ(wf_comm_backend(c), "single");
    float x[5] = {1.5f, -2, 3, 0.25f, 7};
    const float want[5] = {1.5f, -2, 3, 0.25f, 7};
    wf_comm_op ops[] = {WF_COMM_SUM, WF_COMM_AVG, WF_COMM_MAX, WF_COMM_MIN};
    for (int k = 0; k < 4; k++) {
        WF_CHECK_OK(wf_comm_all_reduce(c, x, 5, ops[k], "x"));
        WF_CHECK_TRUE(memcmp(x, want, sizeof x) == 0);
    }
    double d[2] = {0.1, 0.2};
    WF_CHECK_OK(wf_comm_all_reduce_f64(c, d, 2, WF_COMM_AVG, NULL));
    WF_CHECK_TRUE(d[0] == 0.1 && d[1] == 0.2);
    int32_t iv[2] = {5, -3};
    WF_CHECK_OK(wf_comm_all_reduce_i32(c, iv, 2, WF_COMM_BOR, "bits"));
    WF_CHECK_TRUE(iv[0] == 5 && iv[1] == -3);
    uint32_t flags = AGREE_SAVE | AGREE_STOP;
    WF_CHECK_OK(wf_comm_agree(c, &flags, NULL));
    WF_CHECK_EQ(flags, AGREE_SAVE | AGREE_STOP);
    char bytes[3] = {1, 2, 3};
    WF_CHECK_OK(wf_comm_broadcast(c, bytes, 3, 0, "b"));
    WF_CHECK_TRUE(bytes[2] == 3);
    WF_CHECK_OK(wf_comm_barrier(c, "b"));
    WF_CHECK_OK(wf_comm_check_replicas(c, x, sizeof x, "x")); /* 3 collectives */
    uint64_t sum = 0xabcdef, all[1] = {0};
    WF_CHECK_OK(wf_comm_all_gather_bytes(c, &sum, all, sizeof sum, "checksums"));
    WF_CHECK_TRUE(all[0] == 0xabcdef);
    WF_CHECK_ERR(wf_comm_all_gather_bytes(c, all, all, sizeof sum, "x"), WF_ERR_INVALID, "overlaps");
    /* Reduce-scatter copies this rank's part; all-gather leaves it. */
    float send[4] = {1, 2, 3, 4}, recv[4] = {0};
    size_t counts[1] = {4};
    WF_CHECK_OK(wf_comm_reduce_scatter(c, send, recv, counts, WF_COMM_AVG, "rs"));
    WF_CHECK_TRUE(memcmp(send, recv, sizeof send) == 0);
    WF_CHECK_OK(wf_comm_all_gather(c, recv, counts, "ag"));
    WF_CHECK_TRUE(memcmp(send, recv, sizeof send) == 0);
    /* The non-blocking all-gather completes at once and leaves the buffer. */
    wf_comm_request q;
    WF_CHECK_OK(wf_comm_iall_gather(c, recv, counts, "iag", &q));
    int done = 0;
    WF_CHECK_OK(wf_comm_test(c, &q, &done));
    WF_CHECK_TRUE(done && q.slot == -1);
    WF_CHECK_TRUE(memcmp(send, recv, sizeof send) == 0);
    WF_CHECK_ERR(wf_comm_iall_gather(c, recv, counts, "iag", NULL), WF_ERR_INVALID, "NULL request");
    WF_CHECK_ERR(wf_comm_iall_gather(c, NULL, counts, "iag", &q), WF_ERR_INVALID, "NULL buffer");
    WF_CHECK_EQ(wf_comm_completed(c), 16);
    wf_comm_destroy(c);
}

WF_TEST(ops_that_do_not_apply_are_errors) {
    wf_comm *c = single_comm();
    int32_t iv[1] = {1};
    WF_CHECK_ERR(wf_comm_all_reduce_i32(c, iv, 1, WF_COMM_AVG, "steps"), WF_ERR_INVALID, "\"steps\"");
    float f[1] = {1};
    WF_CHECK_ERR(wf_comm_all_reduce(c, f, 1, WF_COMM_BOR, "x"), WF_ERR_INVALID, "bor");
    size_t counts[1] = {1};
    WF_CHECK_ERR(wf_comm_reduce_scatter(c, f, f, counts, WF_COMM_SUM, "rs"), WF_ERR_INVALID,
                 "overlaps");
    float g[1];
    WF_CHECK_ERR(wf_comm_reduce_scatter(c, f, g, counts, WF_COMM_MAX, "rs"), WF_ERR_INVALID,
                 "not sum or avg");
    WF_CHECK_ERR(wf_comm_broadcast(c, f, 4, 1, "bc"), WF_ERR_INVALID, "root 1");
    WF_CHECK_ERR(wf_comm_all_gather(c, f, NULL, "ag"), WF_ERR_INVALID, "NULL counts");
    wf_comm_destroy(c);
}

WF_TEST(nonblocking_requests) {
    wf_comm *c = single_comm();
    float a[3] = {1, 2, 3}, b[2] = {4, 5};
    wf_comm_request ra, rb;
    WF_CHECK_OK(wf_comm_iall_reduce(c, a, 3, WF_COMM_AVG, "a", &ra));
    WF_CHECK_OK(wf_comm_iall_reduce(c, b, 2, WF_COMM_SUM, "b", &rb));
    WF_CHECK_TRUE(ra.slot >= 0 && rb.slot >= 0 && ra.slot != rb.slot);
    WF_CHECK_OK(wf_comm_progress(c));
    int done = 0;
    WF_CHECK_OK(wf_comm_test(c, &ra, &done));
    WF_CHECK_EQ(done, 1);
    WF_CHECK_EQ(ra.slot, -1);
    /* A completed handle answers at once. */
    WF_CHECK_OK(wf_comm_wait(c, &ra));
    WF_CHECK_OK(wf_comm_wait(c, &rb));
    WF_CHECK_TRUE(a[2] == 3 && b[1] == 5);
    /* A stale copy of a handle whose slot was reused is refused. */
    wf_comm_request rc, stale;
    WF_CHECK_OK(wf_comm_iall_reduce(c, a, 3, WF_COMM_SUM, "c", &rc));
    stale = rc;
    WF_CHECK_OK(wf_comm_wait(c, &rc));
    WF_CHECK_OK(wf_comm_iall_reduce(c, b, 2, WF_COMM_SUM, "d", &rc));
    WF_CHECK_ERR(wf_comm_wait(c, &stale), WF_ERR_INVALID, "not an outstanding request");
    WF_CHECK_OK(wf_comm_wait(c, &rc));
    wf_comm_destroy(c);
}

WF_TEST(request_pool_is_bounded) {
    wf_comm *c = single_comm();
    static wf_comm_request reqs[WF_COMM_MAX_REQUESTS + 1];
    float x = 1;
    for (int i = 0; i < WF_COMM_MAX_REQUESTS; i++)
        WF_CHECK_OK(wf_comm_iall_reduce(c, &x, 1, WF_COMM_SUM, "x", &reqs[i]));
    WF_CHECK_ERR(wf_comm_iall_reduce(c, &x, 1, WF_COMM_SUM, "one too many", &reqs[WF_COMM_MAX_REQUESTS]),
                 WF_ERR_RANGE, "outstanding");
    for (int i = 0; i < WF_COMM_MAX_REQUESTS; i++) WF_CHECK_OK(wf_comm_wait(c, &reqs[i]));
    wf_comm_destroy(c); /* must not wait on anything */
}

WF_TEST(missing_backend_names_the_places_tried) {
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    wf_comm_options o = wf_comm_options_default();
    o.backend = "/nonexistent/dir/libweft-mpi-x.so";
    wf_comm *c = NULL;
    WF_CHECK_ERR(wf_comm_create(&c, &o), WF_ERR_NOTFOUND, "/nonexistent/dir/libweft-mpi-x.so: no such file");
    WF_CHECK_TRUE(strstr(wf_error_msg(), "OMPI_COMM_WORLD_SIZE=2") != NULL);
    WF_CHECK_TRUE(c == NULL);
    /* A name is searched for in WEFT_DIST_LIB_DIR and beside the program. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", wf_test_tmpdir());
    setenv("WEFT_DIST_LIB_DIR", dir, 1);
    o.backend = "nosuch";
    WF_CHECK_ERR(wf_comm_create(&c, &o), WF_ERR_NOTFOUND, "libweft-mpi-nosuch.so: no such file");
    WF_CHECK_TRUE(strstr(wf_error_msg(), dir) != NULL);
    WF_CHECK_TRUE(strstr(wf_error_msg(), "WEFT_DIST_LIB_DIR") != NULL);
    /* A file that is not a shared object: dlopen's reason is kept. */
    char path[600];
    snprintf(path, sizeof path, "%s/libweft-mpi-bad.so", dir);
    wf_test_write_file(path, "not an ELF file", 15);
    o.backend = path;
    WF_CHECK_ERR(wf_comm_create(&c, &o), WF_ERR_NOTFOUND, "libweft-mpi-bad.so: ");
    WF_CHECK_TRUE(strstr(wf_error_msg(), "no such file") == NULL);
}

/* Spans of tensors with these sizes, laid out back to back. */
static void spans_of(const size_t *sizes, int n, wf_comm_span *out) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        out[i] = (wf_comm_span){off, sizes[i]};
        off += sizes[i];
    }
}

WF_TEST(reducer_plans_buckets_from_the_last_tensor) {
    wf_comm *c = single_comm();
    const size_t sizes[5] = {100, 50, 200, 10, 300};
    wf_comm_span t[5];
    spans_of(sizes, 5, t);
    float grads[660];
    wf_reducer *r = NULL;
    /* 1000 bytes = 250 floats: {4} (300), {3, 2, 1} (10+200+50), {0}. */
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 5, 1000));
    WF_CHECK_EQ(wf_reducer_num_buckets(r), 3);
    int first, last;
    wf_comm_span s = wf_reducer_bucket(r, 0, &first, &last);
    WF_CHECK_TRUE(first == 4 && last == 4 && s.offset == 360 && s.numel == 300);
    s = wf_reducer_bucket(r, 1, &first, &last);
    WF_CHECK_TRUE(first == 1 && last == 3 && s.offset == 100 && s.numel == 260);
    s = wf_reducer_bucket(r, 2, &first, &last);
    WF_CHECK_TRUE(first == 0 && last == 0 && s.offset == 0 && s.numel == 100);
    WF_CHECK_EQ(wf_reducer_bucket_of(r, 2), 1);
    WF_CHECK_EQ(wf_reducer_bucket_of(r, 5), -1);
    wf_reducer_destroy(r);
    /* bucket_bytes 0: one bucket per tensor. */
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 5, 0));
    WF_CHECK_EQ(wf_reducer_num_buckets(r), 5);
    wf_reducer_destroy(r);
    /* Huge buckets: one. */
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 5, (size_t)1 << 30));
    WF_CHECK_EQ(wf_reducer_num_buckets(r), 1);
    s = wf_reducer_bucket(r, 0, &first, &last);
    WF_CHECK_TRUE(s.offset == 0 && s.numel == 660 && first == 0 && last == 4);
    wf_reducer_destroy(r);
    wf_comm_destroy(c);
}

WF_TEST(reducer_bucket_spans_cover_gaps) {
    wf_comm *c = single_comm();
    wf_comm_span t[3] = {{0, 10}, {16, 10}, {32, 4}};
    float grads[36];
    wf_reducer *r = NULL;
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 3, 1 << 20));
    wf_comm_span s = wf_reducer_bucket(r, 0, NULL, NULL);
    WF_CHECK_TRUE(s.offset == 0 && s.numel == 36);
    wf_reducer_destroy(r);
    wf_comm_span bad[2] = {{10, 10}, {5, 2}};
    WF_CHECK_ERR(wf_reducer_create(&r, c, grads, bad, 2, 0), WF_ERR_INVALID, "tensor 1 (offset 5)");
    wf_comm_destroy(c);
}

WF_TEST(reducer_starts_buckets_in_order) {
    wf_comm *c = single_comm();
    const size_t sizes[5] = {100, 50, 200, 10, 300};
    wf_comm_span t[5];
    spans_of(sizes, 5, t);
    float grads[660];
    for (int i = 0; i < 660; i++) grads[i] = (float)i;
    wf_reducer *r = NULL;
    WF_CHECK_OK(wf_reducer_create(&r, c, grads, t, 5, 1000));
    /* Tensor 0 (the last bucket) first: nothing may start before bucket 0. */
    WF_CHECK_OK(wf_reducer_ready(r, 0));
    WF_CHECK_OK(wf_reducer_ready(r, 4)); /* bucket 0 starts */
    WF_CHECK_ERR(wf_reducer_ready(r, 4), WF_ERR_INVALID, "ready twice");
    WF_CHECK_ERR(wf_reducer_ready(r, 7), WF_ERR_INVALID, "tensor 7");
    WF_CHECK_OK(wf_reducer_finish(r));
    WF_CHECK_EQ(wf_reducer_overlapped(r), 1);
    /* The recorder shows the buckets in order 0, 1, 2. */
    char dump[4096];
    wf_comm_recorder_dump(c, dump, sizeof dump);
    const char *b0 = strstr(dump, "grad bucket 0/3"), *b1 = strstr(dump, "grad bucket 1/3"),
               *b2 = strstr(dump, "grad bucket 2/3");
    WF_CHECK_TRUE(b0 && b1 && b2 && b0 < b1 && b1 < b2);
    /* Next step: every tensor in backward order; all three overlap. */
    for (int i = 4; i >= 0; i--) WF_CHECK_OK(wf_reducer_ready(r, i));
    WF_CHECK_OK(wf_reducer_finish(r));
    WF_CHECK_EQ(wf_reducer_overlapped(r), 3);
    /* No hooks at all: finish does everything, nothing overlapped. */
    WF_CHECK_OK(wf_reducer_finish(r));
    WF_CHECK_EQ(wf_reducer_overlapped(r), 0);
    for (int i = 0; i < 660; i++) WF_CHECK_TRUE(grads[i] == (float)i);
    WF_CHECK_EQ(wf_comm_completed(c), 9);
    wf_reducer_destroy(r);
    wf_comm_destroy(c);
}

WF_TEST(zero1_partition) {
    wf_zero1_plan p;
    WF_CHECK_OK(wf_zero1_plan_init(&p, 1000, 3, 16));
    WF_CHECK_EQ(p.shard_size, 336);
    WF_CHECK_TRUE(p.offsets[0] == 0 && p.offsets[1] == 336 && p.offsets[2] == 672);
    WF_CHECK_TRUE(p.counts[0] == 336 && p.counts[1] == 336 && p.counts[2] == 328);
    wf_zero1_plan_deinit(&p);
    /* More ranks than aligned shards: the tail ranks get nothing. */
    WF_CHECK_OK(wf_zero1_plan_init(&p, 10, 4, 16));
    WF_CHECK_TRUE(p.counts[0] == 10 && p.counts[1] == 0 && p.counts[3] == 0);
    WF_CHECK_TRUE(p.offsets[1] == 10 && p.offsets[3] == 10);
    wf_zero1_plan_deinit(&p);
    /* Every float in exactly one shard, for many shapes. */
    for (size_t n = 0; n < 200; n += 7)
        for (int w = 1; w <= 9; w++) {
            WF_CHECK_OK(wf_zero1_plan_init(&p, n, w, 4));
            size_t next = 0;
            for (int r = 0; r < w; r++) {
                WF_CHECK_EQ(p.offsets[r], next);
                WF_CHECK_TRUE(p.counts[r] <= p.shard_size);
                next += p.counts[r];
                /* the plan is the slice function's, rank by rank (FSDP's
                 * pieces and weft plan take it from there too) */
                wf_zero1_slice sl = wf_zero1_slice_of(n, w, r, 4);
                WF_CHECK_TRUE(sl.offset == p.offsets[r] && sl.count == p.counts[r] && sl.size == p.shard_size);
                WF_CHECK_EQ(sl.size, ((n + (size_t)w - 1) / (size_t)w + 3) / 4 * 4); /* ceil(n / w) up to 4 */
            }
            WF_CHECK_EQ(next, n);
            wf_zero1_plan_deinit(&p);
        }
    WF_CHECK_ERR(wf_zero1_plan_init(&p, 10, 0, 1), WF_ERR_INVALID, "world size 0");
    wf_zero1_plan_deinit(&p); /* a zeroed plan */
}

WF_TEST(zero1_memory) {
    wf_zero1_plan p;
    WF_CHECK_OK(wf_zero1_plan_init(&p, 1000, 4, 16));
    wf_zero1_memory m = wf_zero1_plan_memory(&p, 0, 2);
    WF_CHECK_EQ(m.unsharded_bytes, 8000);
    WF_CHECK_EQ(m.sharded_bytes, 256 * 8 + 256 * 4);
    WF_CHECK_EQ(m.saved_bytes, 8000 - 3072);
    m = wf_zero1_plan_memory(&p, 3, 2); /* 232 floats */
    WF_CHECK_EQ(m.sharded_bytes, 232 * 12);
    wf_zero1_plan_deinit(&p);
    /* One rank: ZeRO-1 saves nothing. */
    WF_CHECK_OK(wf_zero1_plan_init(&p, 1000, 1, 16));
    m = wf_zero1_plan_memory(&p, 0, 2);
    WF_CHECK_EQ(m.saved_bytes, 0);
    wf_zero1_plan_deinit(&p);
}

WF_TEST(zero1_grad_norm_single) {
    wf_comm *c = single_comm();
    float g[3] = {3, 4, 12};
    double norm = 0;
    WF_CHECK_OK(wf_zero1_grad_norm(c, g, 3, &norm));
    WF_CHECK_NEAR(norm, 13.0, 1e-12);
    wf_comm_destroy(c);
}

WF_TEST(recorder_keeps_the_last_collectives) {
    clear_launcher_env();
    wf_comm_options o = wf_comm_options_default();
    o.recorder_size = 4;
    wf_comm *c = NULL;
    WF_CHECK_OK(wf_comm_create(&c, &o));
    float x = 1;
    for (int s = 0; s < 6; s++) {
        wf_comm_set_step(c, s);
        char tag[16];
        snprintf(tag, sizeof tag, "loss %d", s);
        WF_CHECK_OK(wf_comm_all_reduce(c, &x, 1, WF_COMM_SUM, tag));
    }
    char dump[2048];
    size_t need = wf_comm_recorder_dump(c, dump, sizeof dump);
    WF_CHECK_TRUE(need == strlen(dump));
    WF_CHECK_TRUE(strstr(dump, "last 4 of 6") != NULL);
    WF_CHECK_TRUE(strstr(dump, "\"loss 1\"") == NULL);
    WF_CHECK_TRUE(strstr(dump, "#3 step 2 all_reduce \"loss 2\" 4 B") != NULL);
    WF_CHECK_TRUE(strstr(dump, "#6 step 5 all_reduce \"loss 5\"") != NULL);
    WF_CHECK_TRUE(strstr(dump, "done in") != NULL);
    /* A small buffer is cut and terminated. */
    char small[20];
    WF_CHECK_EQ(wf_comm_recorder_dump(c, small, sizeof small), need);
    WF_CHECK_EQ(strlen(small), sizeof small - 1);
    o.recorder_size = 2;
    wf_comm *bad = NULL;
    WF_CHECK_ERR(wf_comm_create(&bad, &o), WF_ERR_CONFIG, "recorder_size 2");
    o.recorder_size = 8;
    o.timeout_exit_code = 0;
    WF_CHECK_ERR(wf_comm_create(&bad, &o), WF_ERR_CONFIG, "timeout_exit_code 0");
    wf_comm_destroy(c);
}

/* --- The watchdog, through its internal interface ----------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fired;
    char report[8192];
} fire_box;

static void on_fire(void *ctx, const char *report) {
    fire_box *b = ctx;
    pthread_mutex_lock(&b->mu);
    b->fired++;
    snprintf(b->report, sizeof b->report, "%s", report);
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Waits up to `seconds` for the watchdog to fire; returns how often it did. */
static int wait_fired(fire_box *b, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&b->mu);
    while (!b->fired)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &ts) != 0) break;
    int n = b->fired;
    pthread_mutex_unlock(&b->mu);
    return n;
}

static int fired_now(fire_box *b) {
    pthread_mutex_lock(&b->mu);
    int n = b->fired;
    pthread_mutex_unlock(&b->mu);
    return n;
}

static wf_watchdog *make_watchdog(fire_box *box, double first, double later, int64_t first_steps) {
    pthread_mutex_init(&box->mu, NULL);
    pthread_cond_init(&box->cv, NULL);
    box->fired = 0;
    box->report[0] = '\0';
    wf_comm_options o = wf_comm_options_default();
    o.timeout_first_s = first;
    o.timeout_s = later;
    o.first_steps = first_steps;
    o.recorder_size = 8;
    o.on_timeout = on_fire;
    o.on_timeout_ctx = box;
    wf_watchdog *w = NULL;
    WF_CHECK_OK(wf__comm_watchdog_create(&w, &o, 1, 4));
    return w;
}

WF_TEST(watchdog_fires_on_a_blocked_collective) {
    fire_box box;
    wf_watchdog *w = make_watchdog(&box, 0.05, 0.05, 0);
    wf__comm_watchdog_set_step(w, 7);
    uint64_t a = wf__comm_watchdog_begin(w, "all_reduce", "loss", 4, 1);
    wf__comm_watchdog_end(w, a, 1);
    wf__comm_watchdog_begin(w, "all_reduce", "grad bucket 2/5", 3 << 20, 1);
    WF_CHECK_EQ(wait_fired(&box, 30), 1);
    WF_CHECK_TRUE(strstr(box.report, "rank 1 of 4") != NULL);
    WF_CHECK_TRUE(strstr(box.report, "collective #2 all_reduce \"grad bucket 2/5\" (3.0 MiB) at step 7") != NULL);
    WF_CHECK_TRUE(strstr(box.report, "timeout_s") != NULL);
    WF_CHECK_TRUE(strstr(box.report, "#1 step 7 all_reduce \"loss\" 4 B") != NULL);
    WF_CHECK_TRUE(strstr(box.report, "WAITING for") != NULL);
    wf__comm_watchdog_destroy(w);
}

/* The report names the option the caller says sets each phase's timeout
 * (weft doctor's --timeout is no training key); without one, the field. */
WF_TEST(watchdog_names_the_callers_option) {
    const char *names[][2] = {{"dist.timeout_first_s", "dist.timeout_s"}, {"--timeout", "--timeout"}, {NULL, NULL}};
    const char *want[][2] = {{"dist.timeout_first_s", "dist.timeout_s"}, {"--timeout", "--timeout"},
                             {"timeout_first_s", "timeout_s"}};
    for (int k = 0; k < 3; k++)
        for (int later = 0; later < 2; later++) {
            fire_box box;
            pthread_mutex_init(&box.mu, NULL);
            pthread_cond_init(&box.cv, NULL);
            box.fired = 0;
            box.report[0] = '\0';
            wf_comm_options o = wf_comm_options_default();
            o.timeout_first_s = o.timeout_s = 0.05;
            o.first_steps = 2;
            o.recorder_size = 8;
            o.timeout_first_name = names[k][0];
            o.timeout_name = names[k][1];
            o.on_timeout = on_fire;
            o.on_timeout_ctx = &box;
            wf_watchdog *w = NULL;
            WF_CHECK_OK(wf__comm_watchdog_create(&w, &o, 0, 2));
            wf__comm_watchdog_set_step(w, later ? 5 : 0);
            wf__comm_watchdog_begin(w, "barrier", "x", 0, 1);
            WF_CHECK_EQ(wait_fired(&box, 30), 1);
            char raise[128];
            snprintf(raise, sizeof raise, "Raise the timeout (%s) if", want[k][later]);
            if (!strstr(box.report, raise)) wf_test_fail(__FILE__, __LINE__, "no '%s' in: %s", raise, box.report);
            wf__comm_watchdog_destroy(w);
        }
}

WF_TEST(watchdog_ignores_collectives_not_waited_on) {
    fire_box box;
    wf_watchdog *w = make_watchdog(&box, 0.05, 0.05, 0);
    /* Issued but not waited on: the rank is computing, not stuck. */
    uint64_t s = wf__comm_watchdog_begin(w, "iall_reduce", "grad bucket 0/1", 1024, 0);
    usleep(300 * 1000);
    WF_CHECK_EQ(fired_now(&box), 0);
    wf__comm_watchdog_block(w, s);
    WF_CHECK_EQ(wait_fired(&box, 30), 1);
    WF_CHECK_TRUE(strstr(box.report, "iall_reduce \"grad bucket 0/1\"") != NULL);
    wf__comm_watchdog_destroy(w);
}

WF_TEST(watchdog_gives_the_first_steps_longer) {
    fire_box box;
    /* Steps 0 and 1: 60 s; later: 0.05 s. */
    wf_watchdog *w = make_watchdog(&box, 60, 0.05, 2);
    wf__comm_watchdog_set_step(w, 1);
    uint64_t s = wf__comm_watchdog_begin(w, "barrier", "init", 0, 1);
    usleep(300 * 1000);
    WF_CHECK_EQ(fired_now(&box), 0);
    wf__comm_watchdog_end(w, s, 1);
    wf__comm_watchdog_set_step(w, 2);
    wf__comm_watchdog_begin(w, "barrier", "later", 0, 1);
    WF_CHECK_EQ(wait_fired(&box, 30), 1);
    WF_CHECK_TRUE(strstr(box.report, "at step 2") != NULL);
    WF_CHECK_TRUE(strstr(box.report, "0.05 s timeout for steps after the first ones") != NULL);
    wf__comm_watchdog_destroy(w);
}

WF_TEST(watchdog_disabled_starts_no_thread) {
    fire_box box;
    wf_watchdog *w = make_watchdog(&box, 0, 0, 2);
    wf__comm_watchdog_begin(w, "barrier", "forever", 0, 1);
    usleep(100 * 1000);
    WF_CHECK_EQ(fired_now(&box), 0);
    WF_CHECK_EQ(wf__comm_watchdog_completed(w), 0);
    wf__comm_watchdog_destroy(w);
}
