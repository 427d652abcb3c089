/* reduce_sum_check: the trainer's way of averaging gradients over ranks
 * (scale each rank's gradient by 1 / world size, then SUM) against the
 * library's AVG (SUM, then divide by the world size), under a launcher, for
 * tests/py/test_reduce_sum.py. Links only libweft, like weft.
 *
 *   reduce_sum_check [n=N] [bucket_kb=K]
 *
 * Every rank makes N float32 gradient values from a hash of (rank,
 * element): magnitudes over eight binades, mixed signs, so that sums round.
 * Then, through the bucketed reducer (K KiB buckets, 6 tensors):
 *   avg: the values, reduced with AVG (the reducer's default);
 *   sum: the values times (float)(1 / W) (as the trainer's backward scale),
 *        reduced with SUM (wf_reducer_set_op);
 * and the same two through ZeRO-1's reduce-scatter (AVG against SUM on the
 * pre-scaled values). Every rank can compute every rank's values, so each
 * also computes the exact mean in double. Rank 0 prints one line per pair:
 *   "<what>: differ=D ulps=M maxerr_avg=A maxerr_sum=S"
 * D: elements whose bits differ between avg and sum, M the largest
 * difference in units in the last place; A, S: the largest
 * |result - exact mean| over elements, in units of u x mean_r |g_r| (u =
 * 2^-24), whose bound the test checks. Also "replicas: ok" when every rank
 * holds the same bits of the summed gradient. Exit status 1 on an error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/tool_hash.h"
#include "weft/comm.h"

#define N_TENSORS 6

static int rank_, size_;

static int die(const char *what) {
    fprintf(stderr, "reduce_sum_check (rank %d): %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

/* Rank r's gradient element j: +-(1 + f) x 2^e, f with 23 random bits, e in
 * -10 .. -3 (full-precision values, so their sums round). */
static float grad_value(int r, size_t j) {
    uint64_t h = splitmix64(((uint64_t)r << 40) ^ (uint64_t)j);
    float m = 1.0f + (float)(h & 0x7fffff) / 8388608.0f;
    int e = -10 + (int)((h >> 23) & 7);
    return ((h >> 26) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

static int get_opt(int argc, char **argv, const char *key, long def) {
    size_t k = strlen(key);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=') return atoi(argv[i] + k + 1);
    return (int)def;
}

/* Units in the last place between two floats of one sign. */
static int32_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    return ia > ib ? ia - ib : ib - ia;
}

/* Compares avg and sum (n floats from element `base` on) with the exact
 * mean; prints the line on rank 0 after taking the worst over ranks.
 * `shards`: each rank holds other elements (count them over ranks), else
 * every rank holds the same ones. */
static int compare(wf_comm *c, const char *what, const float *avg, const float *sum, size_t base,
                   size_t n, int shards) {
    const double u = ldexp(1.0, -24);
    int32_t differ = 0, max_ulps = 0;
    double err[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        double exact = 0, mag = 0;
        for (int r = 0; r < size_; r++) {
            double g = grad_value(r, base + i);
            exact += g;
            mag += fabs(g);
        }
        exact /= size_;
        mag /= size_;
        differ += memcmp(&avg[i], &sum[i], sizeof(float)) != 0;
        if ((avg[i] < 0) == (sum[i] < 0) && ulps(avg[i], sum[i]) > max_ulps)
            max_ulps = ulps(avg[i], sum[i]);
        else if ((avg[i] < 0) != (sum[i] < 0))
            max_ulps = INT32_MAX;
        double ea = fabs(avg[i] - exact) / (u * mag), es = fabs(sum[i] - exact) / (u * mag);
        err[0] = ea > err[0] ? ea : err[0];
        err[1] = es > err[1] ? es : err[1];
    }
    if (wf_comm_all_reduce_i32(c, &differ, 1, shards ? WF_COMM_SUM : WF_COMM_MAX, "differ") != WF_OK ||
        wf_comm_all_reduce_i32(c, &max_ulps, 1, WF_COMM_MAX, "ulps") != WF_OK ||
        wf_comm_all_reduce_f64(c, err, 2, WF_COMM_MAX, "err") != WF_OK)
        return die("compare");
    if (rank_ == 0)
        printf("%s: differ=%d ulps=%d maxerr_avg=%.3f maxerr_sum=%.3f\n", what, differ, max_ulps,
               err[0], err[1]);
    return 0;
}

int main(int argc, char **argv) {
    size_t n = (size_t)get_opt(argc, argv, "n", 100003);
    size_t bucket = (size_t)get_opt(argc, argv, "bucket_kb", 64) * 1024;
    wf_comm *c = NULL;
    if (wf_comm_create(&c, NULL) != WF_OK) return die("communicator");
    rank_ = wf_comm_rank(c);
    size_ = wf_comm_size(c);
    float *avg = malloc(n * sizeof *avg), *sum = malloc(n * sizeof *sum);
    wf_comm_span spans[N_TENSORS];
    for (int t = 0; t < N_TENSORS; t++) {
        size_t lo = n * (size_t)t / N_TENSORS, hi = n * (size_t)(t + 1) / N_TENSORS;
        spans[t] = (wf_comm_span){lo, hi - lo};
    }
    wf_reducer *ra = NULL, *rs = NULL;
    int rc = 1;
    if (!avg || !sum) {
        fprintf(stderr, "reduce_sum_check: out of memory\n");
        goto done;
    }
    const float scale = 1.0f / (float)size_; /* as the trainer's backward scale */
    for (size_t j = 0; j < n; j++) {
        avg[j] = grad_value(rank_, j);
        sum[j] = avg[j] * scale;
    }
    if (wf_reducer_create(&ra, c, avg, spans, N_TENSORS, bucket) != WF_OK ||
        wf_reducer_create(&rs, c, sum, spans, N_TENSORS, bucket) != WF_OK ||
        wf_reducer_set_op(rs, WF_COMM_SUM) != WF_OK) {
        rc = die("reducer");
        goto done;
    }
    for (int t = N_TENSORS - 1; t >= 0; t--)
        if (wf_reducer_ready(ra, t) != WF_OK || wf_reducer_ready(rs, t) != WF_OK) {
            rc = die("ready");
            goto done;
        }
    if (wf_reducer_finish(ra) != WF_OK || wf_reducer_finish(rs) != WF_OK) {
        rc = die("finish");
        goto done;
    }
    if (compare(c, "ddp", avg, sum, 0, n, 0)) goto done;
    if (wf_comm_check_replicas(c, sum, n * sizeof *sum, "the summed gradient") != WF_OK) {
        rc = die("replicas");
        goto done;
    }
    if (rank_ == 0) printf("replicas: ok\n");

    /* ZeRO-1: each rank's shard of the reduce-scatter. */
    wf_zero1_plan p = {0};
    if (wf_zero1_plan_init(&p, n, size_, 16) != WF_OK) {
        rc = die("plan");
        goto done;
    }
    size_t mine = p.counts[rank_], off = p.offsets[rank_];
    float *ga = malloc((mine ? mine : 1) * sizeof *ga), *gs = malloc((mine ? mine : 1) * sizeof *gs);
    if (ga && gs) {
        for (size_t j = 0; j < n; j++) {
            avg[j] = grad_value(rank_, j);
            sum[j] = avg[j] * scale;
        }
        if (wf_comm_reduce_scatter(c, avg, ga, p.counts, WF_COMM_AVG, "rs avg") != WF_OK ||
            wf_comm_reduce_scatter(c, sum, gs, p.counts, WF_COMM_SUM, "rs sum") != WF_OK)
            rc = die("reduce_scatter");
        else
            rc = compare(c, "zero1", ga, gs, off, mine, 1);
    } else {
        fprintf(stderr, "reduce_sum_check: out of memory\n");
    }
    free(ga);
    free(gs);
    wf_zero1_plan_deinit(&p);
done:
    wf_reducer_destroy(ra);
    wf_reducer_destroy(rs);
    free(avg);
    free(sum);
    wf_comm_destroy(c);
    return rc;
}
