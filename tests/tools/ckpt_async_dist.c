/* ckpt_async_dist: asynchronous checkpoint saves of several ranks, under a
 * launcher (mpirun, mpiexec) or alone, for tests/py/test_ckpt_async_dist.py.
 * Like weft, it links no libmpi: the MPI backend is loaded at run time.
 *
 *   ckpt_async_dist save ROOT [steps=N] [every=E] [commit=agree|drain|save] [mb=M]
 *                   [work_ms=T] [keep_last=K] [sync=0|1] [fail_rank=R fail_step=S
 *                   fail_limit=B] [kill_step=S]
 *       A step loop shaped like weft train's: each step sets the state to
 *       the step's values, ORs wf_ckpt_writer_busy into the per-step
 *       agreement word (a CKPT_BUSY bit, as the trainer's) and, with commit=agree, calls
 *       wf_ckpt_writer_commit when no rank is busy; every E-th step it saves
 *       ROOT/step-NNNNNNN and scribbles over the state at once (a save must
 *       hold the state of its moment). commit=drain first waits (polling
 *       wf_ckpt_writer_busy) until this rank's write is done, so that every
 *       save is committed by wf_ckpt_writer_commit at the next step.
 *       commit=save never calls commit: each save commits the previous one,
 *       wf_ckpt_writer_wait the last. work_ms: a sleep per step standing in
 *       for the training step's work. The
 *       state is ~M MB (default 4) plus small tensors whose row counts do
 *       not divide by the ranks, one with fewer rows than 4 ranks.
 *       fail_rank/fail_step: that rank's write of that save fails (a file
 *       size limit of B bytes, default 1024, RLIMIT_FSIZE: a real EFBIG
 *       from write(), no hook in the library; with mb=0 at 4 ranks rank 0's
 *       data file is smaller than 1024 bytes and its manifest larger, so
 *       the manifest fails; the previous save is committed first, by
 *       wf_ckpt_writer_wait); every rank prints "rank r: save error: MESSAGE" when its
 *       writer returns the error, then saves that step again (which must
 *       work). kill_step: every rank SIGKILLs itself right after that
 *       step's save returned, while the writer thread writes.
 *       Checks on the way (printed as "FAILED: ..." with exit status 1):
 *       wf_ckpt_writer_pending is the same on every rank at every step.
 *       Rank 0 ends with "saves S ok O committed C (commit A, save B, wait W)
 *       busy_steps N errors E".
 *   ckpt_async_dist verify ROOT writers=W
 *       Rank 0 prints "steps: a,b,c" (the committed checkpoints) and the
 *       leftover .tmp-* folders as "tmp: NAME"; every rank opens each
 *       checkpoint, verifies its checksums, checks its world size (W) and
 *       state, and reads its own row range (for this run's ranks) of every
 *       tensor with wf_ckpt_read_rows, comparing it bit for bit with the
 *       step's values. Prints "rank r verified N checkpoints" or FAILED.
 *   ckpt_async_dist cleanup ROOT
 *       wf_ckpt_cleanup; prints "removed N".
 *
 * The values are exact float32 made from (step, tensor, element).
 */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lib/tool_args.h"
#include "weft/ckpt.h"
#include "weft/comm.h"
#include "weft/fileio.h"

/* The agreement bit this driver uses, as the trainer defines its own. */
enum { AGREE_CKPT_BUSY = 1u << 4 };

static int rank_, size_;

static int die(const char *what) {
    fprintf(stderr, "ckpt_async_dist (rank %d): %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

/* ---- the state -------------------------------------------------------- */

#define N_TENSORS 4

typedef struct {
    wf_ckpt_tensor t[N_TENSORS];
    float *buf[N_TENSORS];
    size_t numel[N_TENSORS];
} state;

/* "big" (rows x 256, ~mb MB), "odd" (13 x 7), "few" (3), "cube" (5, 3, 2). */
static int state_init(state *s, long mb) {
    static const char *names[N_TENSORS] = {"big", "odd", "few", "cube"};
    int64_t shapes[N_TENSORS][4] = {{mb * 1024 + 3, 256}, {13, 7}, {3}, {5, 3, 2}};
    int ndims[N_TENSORS] = {2, 2, 1, 3};
    memset(s, 0, sizeof *s);
    for (int i = 0; i < N_TENSORS; i++) {
        size_t n = 1;
        for (int d = 0; d < ndims[i]; d++) n *= (size_t)shapes[i][d];
        s->numel[i] = n;
        s->buf[i] = malloc(n * sizeof(float));
        if (!s->buf[i]) return -1;
        s->t[i].name = names[i];
        s->t[i].ndim = ndims[i];
        memcpy(s->t[i].shape, shapes[i], sizeof shapes[i]);
        s->t[i].data = s->buf[i];
    }
    return 0;
}

static void state_free(state *s) {
    for (int i = 0; i < N_TENSORS; i++) free(s->buf[i]);
}

/* Element j of tensor t at `step`: an exact float32 (|k| < 2^23, times 1/4). */
static float value(uint64_t step, int t, uint64_t j) {
    uint64_t k = (step * 7919u + (uint64_t)t * 104729u + j * 31u) % 1000003u;
    return ((float)(int64_t)k - 500000.0f) * 0.25f;
}

static void state_fill(state *s, uint64_t step) {
    for (int i = 0; i < N_TENSORS; i++)
        for (size_t j = 0; j < s->numel[i]; j++) s->buf[i][j] = value(step, i, j);
}

/* ---- save ------------------------------------------------------------- */

typedef struct {
    wf_ckpt_writer *w;
    int saves, ok, committed, by_commit, by_save, by_wait, errors, failed;
    int fail_rank;
    int limited; /* RLIMIT_FSIZE lowered on this rank */
    struct rlimit old_limit;
} run;

/* Counts the saves the writer reports committed since the last call. */
static void count_commits(run *r, int *where) {
    wf_ckpt_save_stats st;
    while (wf_ckpt_writer_poll(r->w, &st))
        if (st.status == WF_OK) {
            r->committed++;
            (*where)++;
        }
}

/* A writer call returned `s`: print an error, and lift the file size limit
 * once this rank has seen the failure it caused. */
static void note(run *r, wf_status s) {
    if (s == WF_OK) return;
    printf("rank %d: save error: %s\n", rank_, wf_error_msg());
    fflush(stdout);
    r->errors++;
    if (r->limited) {
        setrlimit(RLIMIT_FSIZE, &r->old_limit);
        r->limited = 0;
    }
}

static wf_ckpt_meta *make_meta(uint64_t step) {
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    if (!m) return NULL;
    if (wf_ckpt_meta_set_u64(m, "test.step", step) != WF_OK ||
        wf_ckpt_meta_set_str(m, "config", "written by ckpt_async_dist\n") != WF_OK) {
        wf_ckpt_meta_destroy(m);
        return NULL;
    }
    return m;
}

/* Checks that wf_ckpt_writer_pending is the same on every rank. */
static int check_pending(wf_comm *c, run *r, long step) {
    int32_t v[2] = {wf_ckpt_writer_pending(r->w), -wf_ckpt_writer_pending(r->w)};
    if (wf_comm_all_reduce_i32(c, v, 2, WF_COMM_MAX, "pending") != WF_OK) return die("all-reduce");
    if (v[0] != -v[1]) {
        printf("FAILED: step %ld: pending differs between ranks\n", step);
        r->failed = 1;
    }
    return 0;
}

static int cmd_save(wf_comm *c, const char *root, int argc, char **argv) {
    long steps = (long)tool_arg_num(argc, argv, "steps", 6), every = (long)tool_arg_num(argc, argv, "every", 1);
    long mb = (long)tool_arg_num(argc, argv, "mb", 4), kill_step = (long)tool_arg_num(argc, argv, "kill_step", -1);
    long fail_step = (long)tool_arg_num(argc, argv, "fail_step", -1);
    const char *mode = tool_arg_str(argc, argv, "commit", "agree");
    int by_commit = strcmp(mode, "save") != 0, drain = strcmp(mode, "drain") == 0;
    long work_ms = (long)tool_arg_num(argc, argv, "work_ms", 0);
    run r;
    memset(&r, 0, sizeof r);
    r.fail_rank = (int)tool_arg_num(argc, argv, "fail_rank", -1);
    state s;
    if (state_init(&s, mb) != 0) return die("out of memory");
    if (rank_ == 0 && wf_mkdirs(root) != WF_OK) return die("mkdir");
    if (wf_comm_barrier(c, "root made") != WF_OK) return die("barrier");
    wf_ckpt_writer_opts o = {rank_, size_, !(long)tool_arg_num(argc, argv, "sync", 0), (int)tool_arg_num(argc, argv, "keep_last", 0),
                             0};
    if (wf_ckpt_writer_create_ranks(&r.w, s.t, N_TENSORS, &o, c) != WF_OK) return die("writer");
    /* A failing write: EFBIG from write() instead of a signal. */
    signal(SIGXFSZ, SIG_IGN);
    int busy_steps = 0;
    for (long step = 1; step <= steps; step++) {
        state_fill(&s, (uint64_t)step); /* the training step */
        wf_comm_set_step(c, step);
        if (work_ms > 0) usleep((useconds_t)work_ms * 1000);
        while (drain && wf_ckpt_writer_busy(r.w)) usleep(1000);
        uint32_t flags = wf_ckpt_writer_busy(r.w) ? AGREE_CKPT_BUSY : 0u;
        if (wf_comm_agree(c, &flags, "agree") != WF_OK) return die("agree");
        if (flags & AGREE_CKPT_BUSY) busy_steps++;
        if (by_commit && !(flags & AGREE_CKPT_BUSY)) {
            note(&r, wf_ckpt_writer_commit(r.w, NULL));
            count_commits(&r, &r.by_commit);
        }
        if (check_pending(c, &r, step)) return 1;
        if (step % every != 0) continue;
        char dir[4096];
        wf_ckpt_step_dir(dir, sizeof dir, root, (uint64_t)step);
        if (step == fail_step) {
            /* The limit is for the process: commit the previous save first
             * (every rank), so that only this save's write meets it. */
            note(&r, wf_ckpt_writer_wait(r.w, NULL));
            count_commits(&r, &r.by_wait);
        }
        if (step == fail_step && rank_ == r.fail_rank) {
            getrlimit(RLIMIT_FSIZE, &r.old_limit);
            struct rlimit low = r.old_limit;
            low.rlim_cur = (rlim_t)(long)tool_arg_num(argc, argv, "fail_limit", 1024);
            if (setrlimit(RLIMIT_FSIZE, &low) != 0) return die("setrlimit");
            r.limited = 1;
        }
        for (int attempt = 0; attempt < 2; attempt++) {
            wf_ckpt_meta *m = make_meta((uint64_t)step);
            if (!m) return die("meta");
            wf_status st = wf_ckpt_save(r.w, dir, (uint64_t)step, m, NULL);
            wf_ckpt_meta_destroy(m);
            count_commits(&r, &r.by_save);
            r.saves++;
            note(&r, st);
            if (st == WF_OK) {
                r.ok++;
                break;
            }
            /* every rank failed alike (agreed), so every rank retries */
        }
        state_fill(&s, (uint64_t)step + 100000); /* scribble: the save must not see this */
        if (step == kill_step) {
            fflush(stdout);
            raise(SIGKILL); /* while the writer thread writes */
        }
        if (check_pending(c, &r, step)) return 1;
    }
    note(&r, wf_ckpt_writer_wait(r.w, NULL));
    count_commits(&r, &r.by_wait);
    if (wf_ckpt_writer_pending(r.w)) {
        printf("FAILED: a save is still pending after wait\n");
        r.failed = 1;
    }
    if (rank_ == 0)
        printf("saves %d ok %d committed %d (commit %d, save %d, wait %d) busy_steps %d errors %d\n", r.saves, r.ok,
               r.committed, r.by_commit, r.by_save, r.by_wait, busy_steps, r.errors);
    wf_ckpt_writer_destroy(r.w);
    state_free(&s);
    return r.failed;
}

/* ---- verify ----------------------------------------------------------- */

static int cmd_verify(const char *root, int argc, char **argv) {
    int writers = (int)tool_arg_num(argc, argv, "writers", 0), failed = 0;
    uint64_t *steps;
    size_t n;
    if (wf_ckpt_list(root, &steps, &n) != WF_OK) return die("list");
    if (rank_ == 0) {
        printf("steps: ");
        for (size_t i = 0; i < n; i++) printf("%s%" PRIu64, i ? "," : "", steps[i]);
        printf("\n");
        DIR *d = opendir(root);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL)
            if (strncmp(e->d_name, ".tmp-", 5) == 0 || strncmp(e->d_name, ".trash-", 7) == 0)
                printf("tmp: %s\n", e->d_name);
        if (d) closedir(d);
    }
    state want;
    if (state_init(&want, 0) != 0) return die("out of memory");
    for (size_t i = 0; i < n && !failed; i++) {
        char dir[4096];
        wf_ckpt_step_dir(dir, sizeof dir, root, steps[i]);
        wf_ckpt *c;
        uint64_t v = 0;
        if (wf_ckpt_open(&c, dir) != WF_OK || wf_ckpt_verify(c, NULL, NULL) != WF_OK ||
            wf_ckpt_get_u64(c, "test.step", &v) != WF_OK) {
            printf("FAILED: rank %d: %s: %s\n", rank_, dir, wf_error_msg());
            failed = 1;
            break;
        }
        if (wf_ckpt_step(c) != steps[i] || v != steps[i] || wf_ckpt_world_size(c) != writers) {
            printf("FAILED: %s: step %" PRIu64 ", state test.step %" PRIu64 ", world size %d (want %d)\n", dir,
                   wf_ckpt_step(c), v, wf_ckpt_world_size(c), writers);
            failed = 1;
        }
        for (int t = 0; t < N_TENSORS && !failed; t++) {
            wf_ckpt_tensor_desc desc;
            long k = wf_ckpt_find(c, want.t[t].name);
            if (k < 0) {
                printf("FAILED: %s: no tensor %s\n", dir, want.t[t].name);
                failed = 1;
                break;
            }
            wf_ckpt_tensor_at(c, (size_t)k, &desc);
            int64_t rows = desc.shape[0], per_row = 1;
            for (int d = 1; d < desc.ndim; d++) per_row *= desc.shape[d];
            /* this rank's part for this run's number of ranks */
            int64_t b = rows * rank_ / size_, e = rows * (rank_ + 1) / size_;
            float *got = malloc((size_t)((e - b) * per_row + 1) * sizeof *got);
            if (!got) return die("out of memory");
            if (wf_ckpt_read_rows(c, desc.name, b, e, got) != WF_OK) {
                printf("FAILED: rank %d: %s: %s\n", rank_, dir, wf_error_msg());
                failed = 1;
            }
            for (int64_t j = 0; !failed && j < (e - b) * per_row; j++) {
                float x = value(steps[i], t, (uint64_t)(b * per_row + j));
                if (memcmp(&x, &got[j], sizeof x) != 0) {
                    printf("FAILED: rank %d: %s: %s element %" PRId64 ": %g, want %g\n", rank_, dir, desc.name,
                           b * per_row + j, (double)got[j], (double)x);
                    failed = 1;
                }
            }
            free(got);
        }
        wf_ckpt_close(c);
    }
    if (!failed) printf("rank %d verified %zu checkpoints\n", rank_, n);
    free(steps);
    state_free(&want);
    return failed;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ckpt_async_dist save|verify|cleanup ROOT [key=value ...]\n");
        return 2;
    }
    const char *cmd = argv[1], *root = argv[2];
    if (strcmp(cmd, "cleanup") == 0) {
        int removed = 0;
        if (wf_ckpt_cleanup(root, &removed) != WF_OK) return die("cleanup");
        printf("removed %d\n", removed);
        return 0;
    }
    wf_comm_options o = wf_comm_options_default();
    o.timeout_first_s = o.timeout_s = 60; /* a hang ends the test, with the flight recorder */
    wf_comm *c = NULL;
    if (wf_comm_create(&c, &o) != WF_OK) {
        fprintf(stderr, "ckpt_async_dist: %s\n", wf_error_msg());
        return 1;
    }
    rank_ = wf_comm_rank(c);
    size_ = wf_comm_size(c);
    int rc = 2;
    if (strcmp(cmd, "save") == 0) rc = cmd_save(c, root, argc - 3, argv + 3);
    else if (strcmp(cmd, "verify") == 0) rc = cmd_verify(root, argc - 3, argv + 3);
    else fprintf(stderr, "ckpt_async_dist: unknown command %s\n", cmd);
    fflush(stdout);
    wf_comm_destroy(c);
    return rc;
}
