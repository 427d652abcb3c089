/* dist_check: runs weft's distributed layer under a launcher (mpirun,
 * mpiexec) or alone, for tests/py/test_dist_mpi.py. It links only libweft
 * (never libmpi): the MPI backend is loaded at run time like weft's.
 *
 *   dist_check info
 *       prints the backend, rank, size, local rank, and whether libmpi is
 *       mapped into the process.
 *   dist_check collectives
 *       checks every collective against values it can compute itself
 *       (integer-valued floats, so sums are exact) and that all ranks hold
 *       bitwise the same all-reduce result for inexact data (also the
 *       non-blocking reduce-scatter, and the reducer in ZeRO-1's mode:
 *       buckets reduce-scattered into this rank's shard); rank 0 prints
 *       "check NAME: ok" or "check NAME: FAILED on ranks ...".
 *   dist_check overlap
 *       starts a non-blocking all-reduce of 8 MiB and computes while
 *       testing it; prints whether it completed through wf_comm_test alone.
 *   dist_check ddp OUT [order=reverse|forward|random|none] [bucket_kb=N] [B=8]
 *       one DDP step on synthetic per-sample gradients (see sample_grad):
 *       each rank averages its B/size samples, marks tensors ready in the
 *       given order through the bucketed reducer (computing in between),
 *       and writes the averaged gradient to OUT.r<rank> (raw float32).
 *   dist_check zero1 OUT [mode=zero1|ddp] [steps=3] [B=8]
 *       `steps` AdamW steps on parameter-dependent synthetic gradients,
 *       with ZeRO-1 (reduce-scatter, shard update, all-gather) or plain DDP
 *       (all-reduce, full update); writes the final parameters to
 *       OUT.r<rank> and prints ZeRO-1's memory figures.
 *   dist_check agree mode=file|signal|error|save|none rank=R step=K [dir=D] [steps=N]
 *       a step loop with one all-reduce per step and per-step rank
 *       agreement; rank R sees the event at step K (creates D/STOP and sees
 *       it, raises SIGUSR1, fails its step, or creates D/SAVE); the other
 *       ranks look at the files only every size-th step. Every rank prints
 *       "rank r decision: ..." for each step where it saves or stops, also
 *       into D/decisions-r<rank>, and exits 0 (1 after an error). Rank 0
 *       creates D/RUNNING after step 1 (for a test that signals the
 *       launcher).
 *   dist_check stall rank=R step=K sleep=S first=A timeout=B first_steps=F [steps=N] [report=DIR]
 *       a step loop of collectives where rank R sleeps S seconds before
 *       step K's; the watchdog (timeouts A for steps < F, then B) ends a
 *       rank that waits too long. Prints "rank r finished" if all went
 *       through.
 *   dist_check leak
 *       drops one allocation of its own (64 bytes, made by leak_one_block
 *       between MPI_Init and MPI_Finalize) and exits 0: under the
 *       AddressSanitizer build LeakSanitizer must report exactly that leak
 *       on every rank and none of the MPI library's (tests/lsan.supp).
 *
 * The synthetic data are exact float32 values made from a splitmix64 hash
 * of (kind, step, sample, element), which the Python test recomputes.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/tool_args.h"
#include "lib/tool_hash.h"
#include "weft/comm.h"
#include "weft/log.h"
#include "weft/thread.h"

/* This driver's agreement bits, as a training loop would define its own
 * (dist.h leaves their meaning to the caller). */
enum { AGREE_STOP = 1u << 0, AGREE_SAVE = 1u << 1, AGREE_ERROR = 1u << 2, AGREE_SIGNAL = 1u << 3 };

static int rank_, size_;

static int die(const char *what) {
    fprintf(stderr, "dist_check (rank %d): %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

/* ---- synthetic data --------------------------------------------------- */

/* An exact float32 in [-1, 1) with 24 significant bits. */
static float unit(uint64_t kind, uint64_t step, uint64_t sample, uint64_t j) {
    uint64_t h = splitmix64((kind << 56) ^ (step << 48) ^ (sample << 32) ^ j);
    int64_t k = (int64_t)((h >> 40) & 0xFFFFFF) - (1 << 23);
    return (float)k * (1.0f / 8388608.0f);
}

/* The synthetic model: tensor sizes as a small Llama's (embedding, per
 * layer norms and matrices, final norm), in floats. */
static const size_t tensor_sizes[] = {
    64 * 1024, 64, 3 * 64 * 64 + 7, 64 * 64, 64, 2 * 64 * 172, 172 * 64,
    64, 3 * 64 * 64, 64 * 64, 64, 2 * 64 * 172, 172 * 64 + 3, 64};
#define N_TENSORS ((int)(sizeof tensor_sizes / sizeof *tensor_sizes))

static size_t layout(wf_comm_span *spans) {
    size_t off = 0;
    for (int i = 0; i < N_TENSORS; i++) {
        spans[i] = (wf_comm_span){off, tensor_sizes[i]};
        off += tensor_sizes[i];
    }
    return off;
}

/* Per tensor: a power-of-two scale, so magnitudes differ between tensors. */
static float tensor_scale(int t) { return ldexpf(1.0f, t % 5 - 2); }

/* Gradient of sample s for element j of tensor t (the DDP test). */
static float sample_grad(int t, uint64_t s, size_t j) {
    return tensor_scale(t) * unit(1, 0, s, j);
}

static int write_floats(const char *prefix, const float *x, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s.r%d", prefix, rank_);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n) {
        fprintf(stderr, "dist_check: cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

/* Burns about `n` multiply-adds, standing in for backward's work. */
static volatile float sink_;
static void compute(size_t n) {
    float a = 1.0f;
    for (size_t i = 0; i < n; i++) a = a * 0.999999f + 1e-7f;
    sink_ = a;
}

/* ---- info ------------------------------------------------------------- */

static int libmpi_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "libmpi")) found = 1;
    fclose(f);
    return found;
}

static int cmd_info(wf_comm *c) {
    printf("rank %d size %d local %d backend %s libmpi %s version %s\n", rank_, size_,
           wf_comm_local_rank(c), wf_comm_backend(c), libmpi_mapped() ? "yes" : "no",
           wf_comm_library_version(c));
    return 0;
}

/* ---- collectives ------------------------------------------------------ */

static int failures_;

/* Agrees on a check's outcome (bitmask of failing ranks) and reports it. */
static int report(wf_comm *c, const char *name, int ok) {
    int32_t mask = ok ? 0 : (int32_t)(1u << (rank_ < 31 ? rank_ : 31));
    if (wf_comm_all_reduce_i32(c, &mask, 1, WF_COMM_BOR, "check") != WF_OK) return die(name);
    if (rank_ == 0) {
        if (mask == 0)
            printf("check %s: ok\n", name);
        else
            printf("check %s: FAILED on ranks mask 0x%x\n", name, (unsigned)mask);
        fflush(stdout);
    }
    if (mask) failures_++;
    return 0;
}

/* Value rank r contributes at element i: small integers, exact sums. */
static float ival(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 101) - 50); }

static int check_all_reduce(wf_comm *c, size_t n) {
    float *x = malloc(n * sizeof *x);
    if (!x) return 1;
    const wf_comm_op ops[] = {WF_COMM_SUM, WF_COMM_AVG, WF_COMM_MAX, WF_COMM_MIN};
    const char *names[] = {"sum", "avg", "max", "min"};
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) x[i] = ival(rank_, i);
        if (wf_comm_all_reduce(c, x, n, ops[k], "all_reduce check") != WF_OK) return die("all_reduce");
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++) {
            float s = 0, mx = -1e30f, mn = 1e30f;
            for (int r = 0; r < size_; r++) {
                float v = ival(r, i);
                s += v;
                mx = v > mx ? v : mx;
                mn = v < mn ? v : mn;
            }
            float want = k == 0 ? s : k == 1 ? s / (float)size_ : k == 2 ? mx : mn;
            if (x[i] != want) {
                fprintf(stderr, "rank %d: all_reduce %s n=%zu: element %zu is %g, want %g\n",
                        rank_, names[k], n, i, x[i], want);
                ok = 0;
            }
        }
        char name[64];
        snprintf(name, sizeof name, "all_reduce_%s_%zu", names[k], n);
        report(c, name, ok);
    }
    free(x);
    return 0;
}

/* Inexact data: every rank must still hold bitwise the same sum. */
static int check_same_bits(wf_comm *c, size_t n) {
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y) return 1;
    for (size_t i = 0; i < n; i++) x[i] = unit(2, 0, (uint64_t)rank_, i) * 1.1f;
    if (wf_comm_all_reduce(c, x, n, WF_COMM_SUM, "bits check") != WF_OK) return die("all_reduce");
    memcpy(y, x, n * sizeof *y);
    if (wf_comm_broadcast(c, y, n * sizeof *y, 0, "bits check") != WF_OK) return die("broadcast");
    char name[64];
    snprintf(name, sizeof name, "all_reduce_same_bits_%zu", n);
    report(c, name, memcmp(x, y, n * sizeof *x) == 0);
    free(x);
    free(y);
    return 0;
}

/* ---- non-blocking reduce-scatter --------------------------------------- */

/* The sum (or mean) over ranks of ival at global element g. */
static float ival_reduced(size_t g, int avg) {
    float s = 0;
    for (int r = 0; r < size_; r++) s += ival(r, g);
    return avg ? s / (float)size_ : s;
}

/* wf_comm_ireduce_scatter over ZeRO-1's shards (SUM and AVG in flight at
 * once, waited in reverse order), and with parts that are empty (rank 0's
 * always, every even rank's), exact. */
static int check_ireduce_scatter(wf_comm *c) {
    const size_t n = 10007;
    wf_zero1_plan p;
    if (wf_zero1_plan_init(&p, n, size_, 16) != WF_OK) return die("zero1 plan");
    float *full = malloc(n * sizeof *full), *part[2];
    part[0] = malloc((p.shard_size + 1) * sizeof(float));
    part[1] = malloc((p.shard_size + 1) * sizeof(float));
    if (!full || !part[0] || !part[1]) return 1;
    for (size_t i = 0; i < n; i++) full[i] = ival(rank_, i);
    wf_comm_request req[2];
    for (int k = 0; k < 2; k++)
        if (wf_comm_ireduce_scatter(c, full, part[k], p.counts, k ? WF_COMM_AVG : WF_COMM_SUM,
                                    "irs check", &req[k]) != WF_OK)
            return die("ireduce_scatter");
    for (int k = 1; k >= 0; k--) {
        if (wf_comm_wait(c, &req[k]) != WF_OK) return die("wait");
        int ok = req[k].slot == -1;
        for (size_t i = 0; i < p.counts[rank_]; i++)
            if (part[k][i] != ival_reduced(p.offsets[rank_] + i, k)) ok = 0;
        report(c, k ? "ireduce_scatter_avg" : "ireduce_scatter_sum", ok);
    }
    /* Uneven counts, the even ranks' empty (at one rank: nothing at all).
     * An empty part's buffer is NULL and must not be written. */
    size_t *counts = calloc((size_t)size_, sizeof *counts), total = 0, mine_off = 0;
    if (!counts) return 1;
    for (int r = 0; r < size_; r++) {
        counts[r] = r % 2 ? 100 * (size_t)r + 3 : 0;
        if (r < rank_) mine_off += counts[r];
        total += counts[r];
    }
    float sentinel = -7;
    float *recv = counts[rank_] ? part[0] : NULL;
    if (counts[rank_]) part[0][counts[rank_]] = sentinel;
    wf_comm_request rq;
    if (wf_comm_ireduce_scatter(c, full, recv, counts, WF_COMM_SUM, "irs uneven", &rq) != WF_OK)
        return die("ireduce_scatter");
    int done = 0;
    while (!done)
        if (wf_comm_test(c, &rq, &done) != WF_OK) return die("test");
    int ok = total <= n;
    for (size_t i = 0; i < counts[rank_]; i++)
        if (part[0][i] != ival_reduced(mine_off + i, 0)) ok = 0;
    if (counts[rank_] && part[0][counts[rank_]] != sentinel) ok = 0;
    report(c, "ireduce_scatter_uneven", ok);
    free(counts);
    free(full);
    free(part[0]);
    free(part[1]);
    wf_zero1_plan_deinit(&p);
    return 0;
}

/* The reducer in ZeRO-1's mode: buckets of tensors (some inside one rank's
 * shard, some across shards, parts of other ranks empty) reduce-scattered
 * into this rank's shard, two steps (SUM with the tensors ready in reverse
 * order, AVG in forward order); the shard holds the exact reduced
 * gradient, the gradient buffer is unchanged. */
static int check_reducer_shards(wf_comm *c) {
    static const size_t sizes[] = {5000, 16, 700, 3, 2000, 40, 1, 900, 3000};
    enum { NT = 9 };
    wf_comm_span spans[NT];
    size_t n = 0;
    for (int i = 0; i < NT; i++) {
        spans[i] = (wf_comm_span){n, sizes[i]};
        n += sizes[i];
    }
    wf_zero1_plan p;
    if (wf_zero1_plan_init(&p, n, size_, 16) != WF_OK) return die("zero1 plan");
    float *g = malloc(n * sizeof *g), *shard = malloc((p.shard_size + 1) * sizeof *shard);
    if (!g || !shard) return 1;
    wf_reducer *red;
    if (wf_reducer_create(&red, c, g, spans, NT, 400) != WF_OK) return die("reducer");
    if (wf_reducer_set_shards(red, &p, rank_, shard) != WF_OK) return die("set_shards");
    /* Which kinds of bucket this plan has: inside one shard, across two+. */
    int inside = 0, across = 0;
    for (int b = 0; b < wf_reducer_num_buckets(red); b++) {
        wf_comm_span s = wf_reducer_bucket(red, b, NULL, NULL);
        int parts = 0;
        for (int r = 0; r < size_; r++)
            if (p.offsets[r] < s.offset + s.numel && s.offset < p.offsets[r] + p.counts[r]) parts++;
        if (parts == 1) inside++;
        else across++;
    }
    if (rank_ == 0) printf("reducer shards: %d buckets, %d inside one shard, %d across shards\n",
                           wf_reducer_num_buckets(red), inside, across);
    int ok = inside > 0 && (size_ == 1 || across > 0);
    for (int step = 0; step < 2; step++) {
        wf_comm_op op = step ? WF_COMM_AVG : WF_COMM_SUM;
        if (wf_reducer_set_op(red, op) != WF_OK) return die("set_op");
        for (size_t i = 0; i < n; i++) g[i] = ival(rank_, i + (size_t)step);
        for (size_t i = 0; i < p.shard_size + 1; i++) shard[i] = -9;
        for (int k = 0; k < NT; k++) {
            if (wf_reducer_ready(red, step ? k : NT - 1 - k) != WF_OK) return die("ready");
            compute(20000);
        }
        if (wf_reducer_finish(red) != WF_OK) return die("finish");
        if (step == 0 && wf_reducer_overlapped(red) != wf_reducer_num_buckets(red)) ok = 0;
        for (size_t i = 0; i < p.counts[rank_]; i++)
            if (shard[i] != ival_reduced(p.offsets[rank_] + i + (size_t)step, step)) ok = 0;
        if (shard[p.counts[rank_]] != -9) ok = 0; /* nothing past the shard */
        for (size_t i = 0; i < n; i++)
            if (g[i] != ival(rank_, i + (size_t)step)) ok = 0;
        report(c, step ? "reducer_shards_avg" : "reducer_shards_sum", ok);
    }
    /* A plan of another buffer is refused with a message. */
    wf_zero1_plan q;
    if (wf_zero1_plan_init(&q, n + 1, size_, 16) != WF_OK) return die("zero1 plan");
    wf_status st = wf_reducer_set_shards(red, &q, rank_, shard);
    report(c, "reducer_shards_refuses_other_plan",
           st == WF_ERR_INVALID && strstr(wf_error_msg(), "the ZeRO-1 plan") != NULL);
    wf_zero1_plan_deinit(&q);
    wf_reducer_destroy(red);
    wf_zero1_plan_deinit(&p);
    free(g);
    free(shard);
    return 0;
}

static int cmd_collectives(wf_comm *c) {
    const size_t sizes[] = {1, 1000, 12345, (size_t)1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        if (check_all_reduce(c, sizes[k])) return 1;
        if (check_same_bits(c, sizes[k])) return 1;
    }
    /* f64 and i32. */
    double d[2] = {0.5 * rank_, 1.0};
    if (wf_comm_all_reduce_f64(c, d, 2, WF_COMM_AVG, "f64") != WF_OK) return die("f64");
    report(c, "all_reduce_f64_avg", d[0] == 0.25 * (size_ - 1) && d[1] == 1.0);
    int32_t iv[3] = {rank_, -rank_, 1 << rank_};
    if (wf_comm_all_reduce_i32(c, iv, 2, WF_COMM_MAX, "i32") != WF_OK) return die("i32");
    if (wf_comm_all_reduce_i32(c, iv + 2, 1, WF_COMM_BOR, "i32") != WF_OK) return die("i32");
    report(c, "all_reduce_i32", iv[0] == size_ - 1 && iv[1] == 0 && iv[2] == (1 << size_) - 1);
    /* Agreement: only the last rank raises SAVE, rank 0 raises STOP. */
    uint32_t flags = (rank_ == size_ - 1 ? AGREE_SAVE : 0) | (rank_ == 0 ? AGREE_STOP : 0);
    if (wf_comm_agree(c, &flags, NULL) != WF_OK) return die("agree");
    report(c, "agree", flags == (AGREE_SAVE | AGREE_STOP));
    /* Reduce-scatter and all-gather over ZeRO-1 shards of uneven size. */
    const size_t n = 10007;
    wf_zero1_plan p;
    if (wf_zero1_plan_init(&p, n, size_, 16) != WF_OK) return die("zero1 plan");
    float *full = malloc(n * sizeof *full), *part = malloc((p.shard_size + 1) * sizeof *part);
    if (!full || !part) return 1;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) full[i] = ival(rank_, i);
        wf_comm_op op = k ? WF_COMM_AVG : WF_COMM_SUM;
        if (wf_comm_reduce_scatter(c, full, part, p.counts, op, "rs check") != WF_OK)
            return die("reduce_scatter");
        int ok = 1;
        for (size_t i = 0; i < p.counts[rank_]; i++) {
            size_t g = p.offsets[rank_] + i;
            float s = 0;
            for (int r = 0; r < size_; r++) s += ival(r, g);
            if (k) s /= (float)size_;
            if (part[i] != s) ok = 0;
        }
        report(c, k ? "reduce_scatter_avg" : "reduce_scatter_sum", ok);
    }
    for (size_t i = 0; i < n; i++) full[i] = -1;
    for (size_t i = 0; i < p.counts[rank_]; i++)
        full[p.offsets[rank_] + i] = (float)(p.offsets[rank_] + i) + 0.5f;
    if (wf_comm_all_gather(c, full, p.counts, "ag check") != WF_OK) return die("all_gather");
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        if (full[i] != (float)i + 0.5f) ok = 0;
    report(c, "all_gather", ok);
    /* Non-blocking all-gathers, two in flight (FSDP's prefetch): one over
     * the shards, one with uneven counts (empty parts, as FSDP's last
     * pieces), completed by tests alone and by a wait. */
    {
        size_t *cu = calloc((size_t)size_, sizeof *cu), tu = 0;
        float *g2 = calloc(n, sizeof *g2);
        if (!cu || !g2) return die("out of memory");
        for (int r = 0; r < size_; r++) {
            cu[r] = r % 2 ? 37 * (size_t)r + 5 : 0;
            tu += cu[r];
        }
        for (size_t i = 0; i < n; i++) full[i] = -1;
        for (size_t i = 0; i < p.counts[rank_]; i++)
            full[p.offsets[rank_] + i] = (float)(p.offsets[rank_] + i) + 0.25f;
        size_t off = 0;
        for (int r = 0; r < rank_; r++) off += cu[r];
        for (size_t i = 0; i < tu; i++) g2[i] = -1;
        for (size_t i = 0; i < cu[rank_]; i++) g2[off + i] = (float)(off + i) * 2.0f;
        wf_comm_request q1, q2;
        if (wf_comm_iall_gather(c, full, p.counts, "iag shards", &q1) != WF_OK) return die("iall_gather");
        if (wf_comm_iall_gather(c, g2, cu, "iag uneven", &q2) != WF_OK) return die("iall_gather");
        int d1 = 0;
        while (!d1)
            if (wf_comm_test(c, &q1, &d1) != WF_OK) return die("test");
        if (wf_comm_wait(c, &q2) != WF_OK) return die("wait");
        int ok1 = 1, ok2 = 1;
        for (size_t i = 0; i < n; i++)
            if (full[i] != (float)i + 0.25f) ok1 = 0;
        for (size_t i = 0; i < tu; i++)
            if (g2[i] != (float)i * 2.0f) ok2 = 0;
        if (tu < n && g2[tu] != 0) ok2 = 0; /* nothing written past the parts */
        report(c, "iall_gather", ok1);
        report(c, "iall_gather_uneven", ok2);
        free(cu);
        free(g2);
    }
    wf_zero1_plan_deinit(&p);
    free(full);
    free(part);
    /* Broadcast from the last rank. */
    char msg[64] = {0};
    if (rank_ == size_ - 1) snprintf(msg, sizeof msg, "hello from rank %d", rank_);
    if (wf_comm_broadcast(c, msg, sizeof msg, size_ - 1, "bcast check") != WF_OK) return die("broadcast");
    char want[64];
    snprintf(want, sizeof want, "hello from rank %d", size_ - 1);
    report(c, "broadcast", strcmp(msg, want) == 0);
    if (wf_comm_barrier(c, "barrier check") != WF_OK) return die("barrier");
    /* Replica check: equal buffers pass; one differing rank is named. */
    float rep[100];
    for (int i = 0; i < 100; i++) rep[i] = (float)i;
    int rep_ok = wf_comm_check_replicas(c, rep, sizeof rep, "params") == WF_OK;
    if (size_ > 1) {
        if (rank_ == size_ - 1) rep[7] = -1;
        wf_status st = wf_comm_check_replicas(c, rep, sizeof rep, "params");
        char expect[96];
        snprintf(expect, sizeof expect,
                 "1 of %d ranks hold other bytes than rank 0 (the first is rank %d)", size_,
                 size_ - 1);
        rep_ok = rep_ok && st == WF_ERR_INTERNAL && strstr(wf_error_msg(), expect) != NULL;
    }
    report(c, "check_replicas", rep_ok);
    /* Byte gather: every rank's 24-byte record, in rank order. */
    char rec[24], *recs = malloc(sizeof rec * (size_t)size_);
    if (!recs) return 1;
    memset(rec, 0, sizeof rec);
    snprintf(rec, sizeof rec, "rank %05d", rank_);
    if (wf_comm_all_gather_bytes(c, rec, recs, sizeof rec, "names") != WF_OK)
        return die("all_gather_bytes");
    int gb_ok = 1;
    for (int r = 0; r < size_; r++) {
        memset(rec, 0, sizeof rec);
        snprintf(rec, sizeof rec, "rank %05d", r);
        if (memcmp(recs + sizeof rec * (size_t)r, rec, sizeof rec) != 0) gb_ok = 0;
    }
    free(recs);
    report(c, "all_gather_bytes", gb_ok);
    /* Several non-blocking all-reduces in flight at once, waited in any order. */
    enum { NB = 5 };
    float *bufs[NB];
    wf_comm_request reqs[NB];
    for (int b = 0; b < NB; b++) {
        size_t m = 1000 + 5000 * (size_t)b;
        bufs[b] = malloc(m * sizeof(float));
        if (!bufs[b]) return 1;
        for (size_t i = 0; i < m; i++) bufs[b][i] = ival(rank_, i + (size_t)b);
        if (wf_comm_iall_reduce(c, bufs[b], m, b % 2 ? WF_COMM_AVG : WF_COMM_SUM, "nb check",
                                &reqs[b]) != WF_OK)
            return die("iall_reduce");
    }
    ok = 1;
    for (int b = NB - 1; b >= 0; b--) {
        if (wf_comm_wait(c, &reqs[b]) != WF_OK) return die("wait");
        size_t m = 1000 + 5000 * (size_t)b;
        for (size_t i = 0; i < m; i++) {
            float s = 0;
            for (int r = 0; r < size_; r++) s += ival(r, i + (size_t)b);
            if (b % 2) s /= (float)size_;
            if (bufs[b][i] != s) ok = 0;
        }
        free(bufs[b]);
    }
    report(c, "iall_reduce", ok);
    if (check_ireduce_scatter(c) || check_reducer_shards(c)) return 1;
    if (rank_ == 0) printf("collectives done: %d failed\n", failures_);
    return failures_ ? 1 : 0;
}

/* ---- overlap ---------------------------------------------------------- */

static int cmd_overlap(wf_comm *c) {
    const size_t n = (size_t)2 << 20; /* 8 MiB */
    float *x = malloc(n * sizeof *x);
    if (!x) return 1;
    for (size_t i = 0; i < n; i++) x[i] = ival(rank_, i);
    wf_comm_request req;
    if (wf_comm_iall_reduce(c, x, n, WF_COMM_SUM, "overlap", &req) != WF_OK) return die("iall_reduce");
    int done = 0;
    long chunks = 0;
    double t0 = wf_time_now();
    /* Compute in small chunks, testing between them, for at most 60 s. */
    while (!done && wf_time_now() - t0 < 60) {
        compute(20000);
        chunks++;
        if (wf_comm_test(c, &req, &done) != WF_OK) return die("test");
    }
    int by_test = done;
    if (!done && wf_comm_wait(c, &req) != WF_OK) return die("wait");
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < size_; r++) s += ival(r, i);
        if (x[i] != s) ok = 0;
    }
    printf("rank %d overlap: completed_by_test %d after %ld compute chunks, result %s\n", rank_,
           by_test, chunks, ok ? "ok" : "WRONG");
    free(x);
    return ok ? 0 : 1;
}

/* ---- DDP -------------------------------------------------------------- */

/* This rank's samples of a global batch of B: [rank*B/size, (rank+1)*B/size). */
static void my_samples(int B, int *lo, int *hi) {
    *lo = rank_ * B / size_;
    *hi = (rank_ + 1) * B / size_;
}

static int cmd_ddp(wf_comm *c, int argc, char **argv, const char *out) {
    const char *order = tool_arg_str(argc, argv, "order", "reverse");
    size_t bucket_kb = (size_t)tool_arg_num(argc, argv, "bucket_kb", 64);
    int B = (int)tool_arg_num(argc, argv, "B", 8);
    if (B % size_) {
        fprintf(stderr, "dist_check ddp: B=%d is not a multiple of %d ranks\n", B, size_);
        return 2;
    }
    wf_comm_span spans[N_TENSORS];
    size_t n = layout(spans);
    float *grads = calloc(n, sizeof *grads);
    if (!grads) return 1;
    wf_reducer *r = NULL;
    if (wf_reducer_create(&r, c, grads, spans, N_TENSORS, bucket_kb * 1024) != WF_OK)
        return die("reducer");
    int lo, hi;
    my_samples(B, &lo, &hi);
    int n_local = hi - lo;
    /* Backward order: compute each tensor's gradient, then report it. */
    int seq[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) seq[i] = N_TENSORS - 1 - i;
    if (strcmp(order, "forward") == 0)
        for (int i = 0; i < N_TENSORS; i++) seq[i] = i;
    if (strcmp(order, "random") == 0) /* a different shuffle on every rank */
        for (int i = N_TENSORS - 1; i > 0; i--) {
            int k = (int)(splitmix64((uint64_t)rank_ * 1000 + (uint64_t)i) % (uint64_t)(i + 1));
            int tmp = seq[i];
            seq[i] = seq[k];
            seq[k] = tmp;
        }
    for (int k = 0; k < N_TENSORS; k++) {
        int t = seq[k];
        float *g = grads + spans[t].offset;
        /* The mean over this rank's samples, summed in sample order as a
         * model's backward accumulates them. */
        for (size_t j = 0; j < spans[t].numel; j++) {
            float acc = 0;
            for (int s = lo; s < hi; s++) acc += sample_grad(t, (uint64_t)s, spans[t].offset + j);
            g[j] = acc / (float)n_local;
        }
        compute(spans[t].numel * 4);
        if (strcmp(order, "none") != 0 && wf_reducer_ready(r, t) != WF_OK) return die("ready");
    }
    if (wf_reducer_finish(r) != WF_OK) return die("finish");
    printf("rank %d ddp: %d buckets, %d started during backward\n", rank_,
           wf_reducer_num_buckets(r), wf_reducer_overlapped(r));
    wf_reducer_destroy(r);
    int rc = write_floats(out, grads, n);
    free(grads);
    return rc;
}

/* ---- ZeRO-1 ----------------------------------------------------------- */

typedef struct {
    float lr, b1, b2, eps, wd, clip;
} adamw_cfg;

/* Tensor of element j (for its decay and scale). */
static int tensor_of(const wf_comm_span *spans, size_t j) {
    int t = 0;
    while (t + 1 < N_TENSORS && spans[t + 1].offset <= j) t++;
    return t;
}

/* AdamW over elements [lo, lo + n) of the parameters, with the gradient g
 * (n), the moments m, v (n) and the clip scale; decay on odd tensors. */
static void adamw_range(const adamw_cfg *o, const wf_comm_span *spans, float *params, size_t lo,
                        size_t n, const float *g, float *m, float *v, int t, float clip_scale) {
    float bc1 = 1.0f - powf(o->b1, (float)t), bc2 = 1.0f - powf(o->b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        size_t j = lo + i;
        float gi = g[i] * clip_scale;
        float *p = &params[j];
        if (tensor_of(spans, j) % 2) *p -= o->lr * o->wd * *p;
        m[i] = o->b1 * m[i] + (1 - o->b1) * gi;
        v[i] = o->b2 * v[i] + (1 - o->b2) * gi * gi;
        *p -= o->lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + o->eps);
    }
}

/* This rank's mean gradient for step t at parameters p: per sample
 * scale * (base + 0.25 u) + 0.1 p, with |base| in [0.5, 1), so that the mean
 * stays away from zero and AdamW's update is well conditioned. */
static void zero1_grads(const wf_comm_span *spans, const float *params, size_t n, int t, int B,
                        float *g) {
    int lo, hi;
    my_samples(B, &lo, &hi);
    for (size_t j = 0; j < n; j++) {
        int ti = tensor_of(spans, j);
        float u0 = unit(3, 0, 0, j);
        float base = (u0 < 0 ? -0.5f : 0.5f) + 0.5f * u0;
        float acc = 0;
        for (int s = lo; s < hi; s++)
            acc += tensor_scale(ti) * (base + 0.25f * unit(4, (uint64_t)t, (uint64_t)s, j)) +
                   0.1f * params[j];
        g[j] = acc / (float)(hi - lo);
    }
}

static int cmd_zero1(wf_comm *c, int argc, char **argv, const char *out) {
    const char *mode = tool_arg_str(argc, argv, "mode", "zero1");
    int steps = (int)tool_arg_num(argc, argv, "steps", 3);
    int B = (int)tool_arg_num(argc, argv, "B", 8);
    int zero = strcmp(mode, "zero1") == 0;
    if (B % size_) return 2;
    adamw_cfg o = {.lr = 1e-2f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f, .wd = 0.1f, .clip = 100.0f};
    wf_comm_span spans[N_TENSORS];
    size_t n = layout(spans);
    float *params = malloc(n * sizeof *params), *grads = malloc(n * sizeof *grads);
    wf_zero1_plan p;
    if (wf_zero1_plan_init(&p, n, zero ? size_ : 1, 16) != WF_OK) return die("plan");
    int me = zero ? rank_ : 0;
    size_t lo = p.offsets[me], cnt = p.counts[me];
    /* ZeRO-1 keeps the moments and the gradient of its shard only. */
    float *m = calloc(cnt + 1, sizeof *m), *v = calloc(cnt + 1, sizeof *v);
    float *gshard = zero ? malloc((cnt + 1) * sizeof *gshard) : NULL;
    if (!params || !grads || !m || !v || (zero && !gshard)) return 1;
    for (size_t j = 0; j < n; j++) params[j] = 0.5f * unit(5, 0, 0, j);
    wf_reducer *r = NULL;
    if (!zero && wf_reducer_create(&r, c, grads, spans, N_TENSORS, 256 * 1024) != WF_OK)
        return die("reducer");
    for (int t = 1; t <= steps; t++) {
        wf_comm_set_step(c, t);
        zero1_grads(spans, params, n, t, B, grads);
        double norm;
        const float *g;
        if (zero) {
            if (wf_comm_reduce_scatter(c, grads, gshard, p.counts, WF_COMM_AVG, "zero1 grads") != WF_OK)
                return die("reduce_scatter");
            if (wf_zero1_grad_norm(c, gshard, cnt, &norm) != WF_OK) return die("norm");
            g = gshard;
        } else {
            if (wf_reducer_finish(r) != WF_OK) return die("finish");
            double ss = 0;
            for (size_t j = 0; j < n; j++) ss += (double)grads[j] * grads[j];
            norm = sqrt(ss);
            g = grads;
        }
        float scale = norm > o.clip ? (float)(o.clip / norm) : 1.0f;
        adamw_range(&o, spans, params, lo, cnt, g, m, v, t, scale);
        if (zero && wf_comm_all_gather(c, params, p.counts, "zero1 params") != WF_OK)
            return die("all_gather");
        if (rank_ == 0) printf("step %d grad_norm %.9g clip_scale %.9g\n", t, norm, (double)scale);
    }
    if (zero) {
        wf_zero1_memory mem = wf_zero1_plan_memory(&p, rank_, 2);
        printf("rank %d zero1 memory: shard %zu of %zu floats, optimizer state %zu bytes "
               "unsharded, %zu with ZeRO-1 (incl. gradient shard), saved %zu bytes\n",
               rank_, cnt, n, mem.unsharded_bytes, mem.sharded_bytes, mem.saved_bytes);
    }
    wf_reducer_destroy(r);
    wf_zero1_plan_deinit(&p);
    int rc = write_floats(out, params, n);
    free(params);
    free(grads);
    free(m);
    free(v);
    free(gshard);
    return rc;
}

/* ---- rank agreement --------------------------------------------------- */

static volatile sig_atomic_t got_signal_;
static void on_signal(int sig) { got_signal_ = sig; }

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int cmd_agree(wf_comm *c, int argc, char **argv) {
    const char *mode = tool_arg_str(argc, argv, "mode", "file");
    int who = (int)tool_arg_num(argc, argv, "rank", 0);
    int when = (int)tool_arg_num(argc, argv, "step", 3);
    int steps = (int)tool_arg_num(argc, argv, "steps", 20);
    const char *dir = tool_arg_str(argc, argv, "dir", ".");
    char stop_path[1024], save_path[1024];
    snprintf(stop_path, sizeof stop_path, "%s/STOP", dir);
    snprintf(save_path, sizeof save_path, "%s/SAVE", dir);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int errored = 0;
    for (int step = 0; step < steps; step++) {
        wf_comm_set_step(c, step);
        /* The step's work; rank `who` meets the event at step `when`. */
        int step_failed = 0;
        if (rank_ == who && step == when) {
            if (strcmp(mode, "file") == 0) {
                FILE *f = fopen(stop_path, "w");
                if (f) fclose(f);
            } else if (strcmp(mode, "save") == 0) {
                FILE *f = fopen(save_path, "w");
                if (f) fclose(f);
            } else if (strcmp(mode, "signal") == 0) {
                raise(SIGUSR1);
            } else if (strcmp(mode, "error") == 0) {
                step_failed = 1;
            }
        }
        float loss = (float)step;
        if (wf_comm_all_reduce(c, &loss, 1, WF_COMM_AVG, "loss") != WF_OK) return die("loss");
        if (step == 1 && rank_ == 0) { /* tells a test that every rank is running */
            char path[1100];
            snprintf(path, sizeof path, "%s/RUNNING", dir);
            FILE *f = fopen(path, "w");
            if (f) fclose(f);
        }
        /* Each rank's own view: only the rank that met the event sees it at
         * this step (the files are checked by one rank each step, in turn,
         * as slow shared file systems make ranks see them at different
         * times). */
        uint32_t flags = 0;
        if (step % size_ == rank_ || (rank_ == who && step == when)) {
            if (file_exists(stop_path)) flags |= AGREE_STOP | AGREE_SAVE;
            if (file_exists(save_path)) flags |= AGREE_SAVE;
        }
        if (got_signal_) flags |= AGREE_SIGNAL | AGREE_SAVE | AGREE_STOP;
        if (step_failed) flags |= AGREE_ERROR | AGREE_STOP;
        if (wf_comm_agree(c, &flags, "agree") != WF_OK) return die("agree");
        char decision[160] = "";
        if (flags & AGREE_ERROR) {
            snprintf(decision, sizeof decision,
                     "stop at step %d without applying it (error on a rank)", step);
            errored = 1;
        } else if (flags & AGREE_SAVE) {
            snprintf(decision, sizeof decision, "save%s at step %d%s",
                     flags & AGREE_STOP ? " and stop" : "", step,
                     flags & AGREE_SIGNAL ? " (signal)" : "");
            if (rank_ == 0 && file_exists(save_path)) unlink(save_path);
        } else if (flags & AGREE_STOP) {
            snprintf(decision, sizeof decision, "stop at step %d", step);
        }
        if (decision[0]) {
            printf("rank %d decision: %s\n", rank_, decision);
            /* Also to a file: a launcher may drop the output of ranks it
             * ends after the first non-zero exit. */
            char path[1100];
            snprintf(path, sizeof path, "%s/decisions-r%d", dir, rank_);
            FILE *f = fopen(path, "a");
            if (f) {
                fprintf(f, "%s\n", decision);
                fclose(f);
            }
        }
        if (flags & (AGREE_ERROR | AGREE_STOP)) break;
        /* The SAVE file is consumed once every rank has acted on it. */
        if ((flags & AGREE_SAVE) && wf_comm_barrier(c, "save done") != WF_OK)
            return die("barrier");
    }
    fflush(stdout);
    return errored;
}

/* ---- stall ------------------------------------------------------------ */

static int cmd_stall(wf_comm *c, int argc, char **argv) {
    int who = (int)tool_arg_num(argc, argv, "rank", 1);
    int when = (int)tool_arg_num(argc, argv, "step", 3);
    double sleep_s = tool_arg_num(argc, argv, "sleep", 30);
    int steps = (int)tool_arg_num(argc, argv, "steps", 6);
    float buf[256] = {0};
    for (int step = 0; step < steps; step++) {
        wf_comm_set_step(c, step);
        if (rank_ == who && step == when) usleep((useconds_t)(sleep_s * 1e6));
        wf_comm_request req;
        if (wf_comm_iall_reduce(c, buf, 256, WF_COMM_AVG, "grad bucket 0/1", &req) != WF_OK)
            return die("iall_reduce");
        if (wf_comm_wait(c, &req) != WF_OK) return die("wait");
        float loss = 1;
        if (wf_comm_all_reduce(c, &loss, 1, WF_COMM_AVG, "loss") != WF_OK) return die("loss");
    }
    printf("rank %d finished\n", rank_);
    return 0;
}

/* ---- leak -------------------------------------------------------------- */

/* The pointer is dropped inside a function of its own (not inlined), so
 * that no copy of it outlives the call in a live stack frame or register
 * that LeakSanitizer would count as a reference. */
static __attribute__((noinline)) void leak_one_block(void) {
    static char *volatile block;
    block = malloc(64);
    if (block) snprintf(block, 64, "dist_check leak: rank %d", rank_);
    block = NULL;
}

static int cmd_leak(wf_comm *c) {
    leak_one_block();
    printf("rank %d leaked 64 bytes\n", rank_);
    return wf_comm_barrier(c, "leak") == WF_OK ? 0 : die("barrier");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dist_check info|collectives|overlap|ddp|zero1|agree|stall|leak ...\n");
        return 2;
    }
    const char *cmd = argv[1];
    wf_comm_options o = wf_comm_options_default();
    if (strcmp(cmd, "stall") == 0) {
        o.report_dir = tool_arg_str(argc - 2, argv + 2, "report", NULL);
        o.timeout_first_s = tool_arg_num(argc - 2, argv + 2, "first", 600);
        o.timeout_s = tool_arg_num(argc - 2, argv + 2, "timeout", 300);
        o.first_steps = (int64_t)tool_arg_num(argc - 2, argv + 2, "first_steps", 2);
    }
    wf_comm *c = NULL;
    if (wf_comm_create(&c, &o) != WF_OK) {
        fprintf(stderr, "dist_check: %s\n", wf_error_msg());
        return 1;
    }
    rank_ = wf_comm_rank(c);
    size_ = wf_comm_size(c);
    int rc = 2;
    if (strcmp(cmd, "info") == 0) rc = cmd_info(c);
    else if (strcmp(cmd, "collectives") == 0) rc = cmd_collectives(c);
    else if (strcmp(cmd, "overlap") == 0) rc = cmd_overlap(c);
    else if (strcmp(cmd, "ddp") == 0 && argc >= 3) rc = cmd_ddp(c, argc - 3, argv + 3, argv[2]);
    else if (strcmp(cmd, "zero1") == 0 && argc >= 3) rc = cmd_zero1(c, argc - 3, argv + 3, argv[2]);
    else if (strcmp(cmd, "agree") == 0) rc = cmd_agree(c, argc - 2, argv + 2);
    else if (strcmp(cmd, "stall") == 0) rc = cmd_stall(c, argc - 2, argv + 2);
    else if (strcmp(cmd, "leak") == 0) rc = cmd_leak(c);
    else fprintf(stderr, "dist_check: unknown command or missing argument: %s\n", cmd);
    fflush(stdout);
    wf_comm_destroy(c);
    return rc;
}
