/* All-reduce bandwidth of weft's communicator over message sizes, against
 * memcpy measured in the same run, and how much of a bucketed gradient
 * all-reduce the DDP reducer hides behind computation.
 *
 *   mpirun -np 2 build/bench/allreduce_bench [--min-bytes N] [--max-bytes N]
 *                                            [--seconds S] [--grad-mb M] [--bucket-mb K]
 *                                            [--gap-ms G]
 *
 * Run it under a launcher (mpirun.openmpi, mpiexec.mpich; alone it runs on
 * the single-process backend, where an all-reduce does nothing).
 *
 * Part 1, per message size (floats, powers of 4 from min to max bytes):
 * the time of one wf_comm_all_reduce (SUM): the slowest rank's mean over a
 * short batch of iterations (about 2 ms), the best of as many batches as fit
 * in S seconds (default 0.3, at least 10); the median batch is printed too,
 * as on a shared machine the slow batches measure other people's work. From
 * the best time, as nccl-tests and the seeds' all_reduce_bench compute
 * them:
 *   algbw = bytes / time
 *   busbw = algbw * 2 (n - 1) / n
 * busbw is what each rank's link must carry in a ring all-reduce (every
 * byte is sent (n-1)/n times in the reduce-scatter and again in the
 * all-gather), so it can be compared with the link's (here: memory's)
 * bandwidth. The peer: memcpy of the same number of bytes, on every rank at
 * once (as the all-reduce runs on every rank at once), bytes / time.
 *
 * With --gap-ms G every rank computes G ms (arithmetic on registers) before
 * each timed call of part 1, and each batch is one call: on this machine an
 * all-reduce that follows a long computation, as a training step's does,
 * took twice as long as back-to-back ones (bench/README.md).
 *
 * Part 2, overlap: a gradient of M MiB (default 16) in 16 tensors, reduced
 * in buckets of K MiB (default 4) by wf_reducer, and "backward" work per
 * tensor (arithmetic on a small in-cache array, no memory traffic) sized
 * so that all of it takes about as long as the reduction. It times
 * compute alone, reduction alone (wf_reducer_finish only), the two in
 * sequence, and overlapped (each tensor's work, then wf_reducer_ready,
 * with wf_comm_progress between slices of work), and prints how much of
 * the shorter of the two the overlap hid.
 *
 * Not a test: it prints numbers and asserts nothing. Only rank 0 prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/comm.h"
#include "weft/thread.h"

#define MIN_BATCHES 10
#define MAX_BATCHES 400

static int rank_, size_;

static int fail(const char *what) {
    fprintf(stderr, "allreduce_bench (rank %d): %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The slowest rank's value. */
static double max_over_ranks(wf_comm *c, double x) {
    if (wf_comm_all_reduce_f64(c, &x, 1, WF_COMM_MAX, "bench max") != WF_OK) return -1;
    return x;
}

/* Iterations that take about `seconds` given one took t (same on all ranks). */
static int iterations(wf_comm *c, double t, double seconds) {
    double n = t > 0 ? seconds / t : 1000;
    if (n < 1) n = 1;
    if (n > 2000) n = 2000;
    int32_t k = (int32_t)n;
    if (wf_comm_all_reduce_i32(c, &k, 1, WF_COMM_MAX, "bench iters") != WF_OK) return -1;
    return k;
}

static volatile float sink_;
/* About n multiply-adds on registers: compute without memory traffic. */
static void compute(long n) {
    float a = 1.0f, b = 0.5f, d = 0.25f, e = 0.125f;
    for (long i = 0; i < n; i += 4) {
        a = a * 0.9999999f + 1e-7f;
        b = b * 0.9999999f + 1e-7f;
        d = d * 0.9999999f + 1e-7f;
        e = e * 0.9999999f + 1e-7f;
    }
    sink_ = a + b + d + e;
}

/* One timed batch of `iters` all-reduces of buf (n floats) in one mode;
 * returns the slowest rank's mean per call, or -1 on an error. */
enum { MODE_BLOCKING, MODE_NB_SUM, MODE_NB_AVG, MODE_RS_AG, MODE_MEMCPY, N_MODES };

/* ZeRO-1's pair for MODE_RS_AG: the shards of n floats and this rank's. */
typedef struct {
    wf_zero1_plan plan;
    float *shard;
} rs_ag;

/* --gap-ms: every rank computes this long (register arithmetic) before
 * each timed call, as a training step's backward comes before its
 * gradient all-reduce; only the call is timed. */
static double gap_s_;

static void compute_for(double seconds) {
    double t0 = wf_time_now();
    while (wf_time_now() - t0 < seconds) compute(1 << 14);
}

static double timed_batch(wf_comm *c, int mode, float *buf, size_t n, int iters, const float *src,
                          float *dst, const rs_ag *z) {
    if (wf_comm_barrier(c, "bench") != WF_OK) return fail("barrier"), -1;
    if (gap_s_ > 0 && mode != MODE_MEMCPY) compute_for(gap_s_);
    double t0 = wf_time_now();
    for (int i = 0; i < iters; i++) {
        wf_status s = WF_OK;
        wf_comm_request req;
        switch (mode) {
        case MODE_BLOCKING: s = wf_comm_all_reduce(c, buf, n, WF_COMM_SUM, "bench"); break;
        case MODE_NB_SUM:
        case MODE_NB_AVG:
            /* What the trainer's gradient bucket does: start it, then wait. */
            s = wf_comm_iall_reduce(c, buf, n, mode == MODE_NB_SUM ? WF_COMM_SUM : WF_COMM_AVG,
                                    "bench", &req);
            if (s == WF_OK) s = wf_comm_wait(c, &req);
            break;
        case MODE_RS_AG:
            /* What a ZeRO-1 step does: the gradient's reduce-scatter, then
             * (after the shard's update) the parameters' all-gather. */
            s = wf_comm_reduce_scatter(c, buf, z->shard, z->plan.counts, WF_COMM_SUM, "bench");
            if (s == WF_OK) s = wf_comm_all_gather(c, buf, z->plan.counts, "bench");
            break;
        default:
            memcpy(dst, src, n * sizeof *dst);
            sink_ = dst[(size_t)i % n];
        }
        if (s != WF_OK) return fail("all_reduce"), -1;
    }
    return max_over_ranks(c, (wf_time_now() - t0) / iters);
}

static int part_bandwidth(wf_comm *c, size_t min_bytes, size_t max_bytes, double seconds) {
    float *buf = malloc(max_bytes), *src = malloc(max_bytes), *dst = malloc(max_bytes);
    if (!buf || !src || !dst) return fail("out of memory");
    memset(src, 1, max_bytes);
    memset(dst, 0, max_bytes);
    /* Each rank's share of a mean, as the trainer's backward leaves it: with
     * SUM the values grow by W per call (reaching inf, which costs an
     * addition no more than a finite value); AVG keeps them. */
    const float share = 1.0f / (float)size_;
    if (rank_ == 0) {
        printf("all-reduce (float32) over %d ranks, %s backend (%s)\n", size_,
               wf_comm_backend(c), wf_comm_library_version(c));
        printf("blocking: wf_comm_all_reduce (SUM); non-blocking: wf_comm_iall_reduce + "
               "wf_comm_wait, SUM (the trainer's gradient bucket) and AVG; rs+ag: "
               "wf_comm_reduce_scatter (SUM) + wf_comm_all_gather (ZeRO-1's step)\n");
        printf("%12s %8s | %10s %10s %10s %10s | %10s %8s | %10s %10s %8s | %10s | %10s %10s\n",
               "bytes", "iters", "best us", "median us", "algbw GB/s", "busbw GB/s", "memcpy",
               "bus/mcpy", "nb sum us", "nb busbw", "nb/blk", "nb avg us", "rs+ag us", "rsag busbw");
    }
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        for (size_t i = 0; i < n; i++) buf[i] = share;
        rs_ag z = {0};
        if (wf_zero1_plan_init(&z.plan, n, size_, 16) != WF_OK) return fail("zero1 plan");
        z.shard = malloc((z.plan.counts[rank_] + 1) * sizeof *z.shard);
        if (!z.shard) return fail("out of memory");
        for (int w = 0; w < 2; w++)
            if (wf_comm_all_reduce(c, buf, n, WF_COMM_SUM, "bench warmup") != WF_OK)
                return fail("all_reduce");
        double t0 = wf_time_now();
        for (int w = 0; w < 3; w++)
            if (wf_comm_all_reduce(c, buf, n, WF_COMM_SUM, "bench probe") != WF_OK)
                return fail("all_reduce");
        /* Short batches (~2 ms), as many as fit in `seconds` (the modes
         * take turns, so each sees the same machine): the best one is the
         * machine's speed, the median what a busy machine gives. */
        double probe = max_over_ranks(c, (wf_time_now() - t0) / 3);
        int iters = gap_s_ > 0 ? 1 : iterations(c, probe, 2e-3);
        double nb = seconds / (N_MODES * (probe * iters + gap_s_) + 1e-9);
        int32_t batches = nb < MIN_BATCHES ? MIN_BATCHES : nb > MAX_BATCHES ? MAX_BATCHES : (int32_t)nb;
        if (iters < 0 || wf_comm_all_reduce_i32(c, &batches, 1, WF_COMM_MAX, "bench") != WF_OK)
            return fail("iterations");
        static double t[N_MODES][MAX_BATCHES];
        for (int b = 0; b < batches; b++)
            for (int m = 0; m < N_MODES; m++) {
                if (m == MODE_NB_AVG)
                    for (size_t i = 0; i < n; i++) buf[i] = share;
                t[m][b] = timed_batch(c, m, buf, n, iters, src, dst, &z);
                if (t[m][b] < 0) return 1;
            }
        for (int m = 0; m < N_MODES; m++) qsort(t[m], (size_t)batches, sizeof **t, cmp_double);
        double tb = t[MODE_BLOCKING][0], tmed = t[MODE_BLOCKING][batches / 2];
        double tn = t[MODE_NB_SUM][0], ta = t[MODE_NB_AVG][0], tm = t[MODE_MEMCPY][0];
        double tz = t[MODE_RS_AG][0];
        double bus = 2.0 * (size_ - 1) / size_;
        double algbw = (double)bytes / tb / 1e9, busbw = algbw * bus;
        double nbbus = (double)bytes / tn / 1e9 * bus, zbus = (double)bytes / tz / 1e9 * bus;
        double membw = (double)bytes / tm / 1e9;
        if (rank_ == 0)
            printf("%12zu %8d | %10.1f %10.1f %10.3f %10.3f | %10.3f %8.2f | %10.1f %10.3f %8.2f | "
                   "%10.1f | %10.1f %10.3f\n",
                   bytes, iters * batches, tb * 1e6, tmed * 1e6, algbw, busbw, membw, busbw / membw,
                   tn * 1e6, nbbus, tn / tb, ta * 1e6, tz * 1e6, zbus);
        free(z.shard);
        wf_zero1_plan_deinit(&z.plan);
    }
    free(buf);
    free(src);
    free(dst);
    return 0;
}

/* One "backward": per tensor, from the last, `work` multiply-adds in
 * `slices` slices; with a reducer, ready() after each tensor and progress
 * between slices. */
static int backward(wf_comm *c, wf_reducer *r, int n_tensors, long work, int slices) {
    for (int t = n_tensors - 1; t >= 0; t--) {
        for (int s = 0; s < slices; s++) {
            compute(work / slices);
            if (r && wf_comm_progress(c) != WF_OK) return fail("progress");
        }
        if (r && wf_reducer_ready(r, t) != WF_OK) return fail("ready");
    }
    return 0;
}

static int part_overlap(wf_comm *c, double grad_mb, double bucket_mb) {
    enum { NT = 16, REPS = 15 };
    size_t n = (size_t)(grad_mb * (1 << 20)) / sizeof(float);
    float *grads = calloc(n, sizeof *grads);
    if (!grads) return fail("out of memory");
    wf_comm_span spans[NT];
    for (int t = 0; t < NT; t++) spans[t] = (wf_comm_span){n / NT * (size_t)t, n / NT};
    wf_reducer *r = NULL;
    if (wf_reducer_create(&r, c, grads, spans, NT, (size_t)(bucket_mb * (1 << 20))) != WF_OK)
        return fail("reducer");
    /* Reduction alone: best of REPS. */
    if (wf_reducer_finish(r) != WF_OK) return fail("finish");
    double t_comm = 1e30, t0;
    for (int i = 0; i < REPS; i++) {
        if (wf_comm_barrier(c, "bench") != WF_OK) return fail("barrier");
        t0 = wf_time_now();
        if (wf_reducer_finish(r) != WF_OK) return fail("finish");
        double t = max_over_ranks(c, wf_time_now() - t0);
        t_comm = t < t_comm ? t : t_comm;
    }
    /* Size the work to take about t_comm (best of 3 probes). */
    long probe = 1 << 22;
    double per = 1e30;
    for (int i = 0; i < 3; i++) {
        t0 = wf_time_now();
        compute(probe);
        double t = (wf_time_now() - t0) / (double)probe;
        per = t < per ? t : per;
    }
    double w = t_comm / per / NT;
    if (wf_comm_all_reduce_f64(c, &w, 1, WF_COMM_MIN, "bench work") != WF_OK) return fail("work");
    long work = w > 1000 ? (long)w : 1000;
    const int slices = 8;
    /* Best of REPS for each way, measured in turns. */
    double t_comp = 1e30, t_seq = 1e30, t_ovl = 1e30;
    for (int i = 0; i < REPS; i++) {
        double t;
        if (wf_comm_barrier(c, "bench") != WF_OK) return fail("barrier");
        t0 = wf_time_now();
        if (backward(c, NULL, NT, work, slices)) return 1;
        t = max_over_ranks(c, wf_time_now() - t0);
        t_comp = t < t_comp ? t : t_comp;
        if (wf_comm_barrier(c, "bench") != WF_OK) return fail("barrier");
        t0 = wf_time_now();
        if (backward(c, NULL, NT, work, slices) || wf_reducer_finish(r) != WF_OK) return 1;
        t = max_over_ranks(c, wf_time_now() - t0);
        t_seq = t < t_seq ? t : t_seq;
        if (wf_comm_barrier(c, "bench") != WF_OK) return fail("barrier");
        t0 = wf_time_now();
        if (backward(c, r, NT, work, slices) || wf_reducer_finish(r) != WF_OK) return 1;
        t = max_over_ranks(c, wf_time_now() - t0);
        t_ovl = t < t_ovl ? t : t_ovl;
    }
    if (rank_ == 0) {
        double shorter = t_comp < t_comm ? t_comp : t_comm;
        printf("\noverlap: %.0f MiB of gradients in %d buckets of %.0f MiB, %d ranks\n", grad_mb,
               wf_reducer_num_buckets(r), bucket_mb, size_);
        printf("  compute alone %.2f ms, all-reduce alone %.2f ms, in sequence %.2f ms, "
               "overlapped %.2f ms\n",
               t_comp * 1e3, t_comm * 1e3, t_seq * 1e3, t_ovl * 1e3);
        printf("  hidden: %.0f%% of the shorter part (100%% = overlapped takes the longer part "
               "alone)\n",
               100.0 * (t_seq - t_ovl) / shorter);
    }
    wf_reducer_destroy(r);
    free(grads);
    return 0;
}

int main(int argc, char **argv) {
    size_t min_bytes = 4096, max_bytes = (size_t)64 << 20;
    double seconds = 0.3, grad_mb = 16, bucket_mb = 4;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--min-bytes") && v) min_bytes = strtoull(v, NULL, 10), i++;
        else if (!strcmp(argv[i], "--max-bytes") && v) max_bytes = strtoull(v, NULL, 10), i++;
        else if (!strcmp(argv[i], "--seconds") && v) seconds = atof(v), i++;
        else if (!strcmp(argv[i], "--grad-mb") && v) grad_mb = atof(v), i++;
        else if (!strcmp(argv[i], "--bucket-mb") && v) bucket_mb = atof(v), i++;
        else if (!strcmp(argv[i], "--gap-ms") && v) gap_s_ = atof(v) / 1e3, i++;
        else {
            fprintf(stderr, "usage: mpirun -np N allreduce_bench [--min-bytes N] [--max-bytes N] "
                            "[--seconds S] [--grad-mb M] [--bucket-mb K] [--gap-ms G]\n");
            return 2;
        }
    }
    if (min_bytes < 4) min_bytes = 4;
    wf_comm *c = NULL;
    if (wf_comm_create(&c, NULL) != WF_OK) return fail("communicator");
    rank_ = wf_comm_rank(c);
    size_ = wf_comm_size(c);
    int rc = part_bandwidth(c, min_bytes, max_bytes, seconds);
    if (!rc) rc = part_overlap(c, grad_mb, bucket_mb);
    wf_comm_destroy(c);
    return rc;
}
