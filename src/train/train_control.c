/* Run control of the trainer (train_impl.h): what is decided between two
 * steps, outside the numbers of the step itself. SIGTERM and SIGUSR1, the
 * run directory's SAVE, STOP and DUMP files, ckpt.stop_at, the host-memory
 * watchdog (weft/runctl.h), and with several ranks one agreement that makes
 * every rank take the same decision at the same step, carries rank 0's
 * claim of a `weft trace request` to every rank, and tells when an
 * asynchronous save may be committed. The stack dumper (weft/stackdump.h:
 * SIGQUIT, the DUMP file, train.hang_dump_s) runs while the run does. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train_impl.h"
#include "weft/log.h"
#include "weft/stackdump.h"
#include "weft/trace.h"

/* ---- signals ---- */

/* The signal that asked the run to stop (SIGTERM, SIGUSR1), or 0. A signal
 * handler can only reach global state; this is the one global of the
 * trainer, set by the handler and read between steps (with the old
 * dispositions, and whether this run started the stack dumper, which is
 * process-wide too). */
static volatile sig_atomic_t g_stop_signal;
static struct sigaction g_old_term, g_old_usr1, g_old_xfsz;
static int g_dumper_started;

static void on_stop_signal(int sig) { g_stop_signal = sig; }

/* The stack dumper: RUN_DIR/hang/rank-NNNNN.txt on SIGQUIT, on the DUMP
 * file (wf__train_control) and after train.hang_dump_s without a step.
 * Without it the run goes on: a warning says so. */
static void start_stack_dumps(const wf_train_config *tc, int rank, int world) {
    g_dumper_started = 0;
    if (!tc->run_dir) return;
    char dir[WF_PATH_MAX];
    if (wf_rundir_path(dir, sizeof dir, tc->run_dir, WF_RUN_HANG) != WF_OK) {
        WF_WARN("stack dumps are off: %s", wf_error_msg());
        return;
    }
    wf_stackdump_options o = {.dir = dir,
                              .rank = rank,
                              .world = world,
                              .sigquit = 1,
                              .silence_s = tc->hang_dump_s,
                              .silence_key = "train.hang_dump_s"};
    if (wf_stackdump_start(&o) == WF_OK) {
        g_dumper_started = 1;
    } else {
        WF_WARN("no stack dumps in this run (SIGQUIT, DUMP, train.hang_dump_s): %s", wf_error_msg());
        wf_error_clear();
    }
}

void wf__train_signals_install(const wf_train_config *tc, int rank, int world) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes carry on; the flag is checked after the step */
    g_stop_signal = 0;
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGUSR1, &sa, &g_old_usr1);
    /* A write past the file-size limit (ulimit -f) fails with EFBIG, as a
     * full disk fails with ENOSPC: the save that hit it fails and training
     * goes on, instead of SIGXFSZ killing the process. */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &g_old_xfsz);
    start_stack_dumps(tc, rank, world);
}

void wf__train_signals_restore(void) {
    if (g_dumper_started) wf_stackdump_stop();
    g_dumper_started = 0;
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGUSR1, &g_old_usr1, NULL);
    sigaction(SIGXFSZ, &g_old_xfsz, NULL);
}

/* ---- stack dumps ---- */

static void dump_path(const trainer *t, char *path, size_t size) {
    (void)wf_rundir_path(path, size, t->tc->run_dir, WF_RUN_DUMP); /* checked at the start: fits */
}

/* RUN_DIR/DUMP: every rank's dump at the same step (the dumper logs where
 * it wrote it), then rank 0 removes the file. Training goes on. */
static void dump_on_request(const trainer *t, int64_t done) {
    char path[4200], reason[4400];
    dump_path(t, path, sizeof path);
    snprintf(reason, sizeof reason, "%s exists: every rank dumps after step %lld; training goes on", path,
             (long long)done);
    if (wf_stackdump_running() && wf_stackdump_request(reason, 60, NULL, 0) != WF_OK)
        WF_WARN("%s", wf_error_msg());
    wf_error_clear();
    if (t->job_rank == 0 && unlink(path) != 0 && errno != ENOENT) WF_WARN("%s: cannot remove it: %s", path, strerror(errno));
}

/* WEFT_TEST_STALL_READ=RANK:STEPS:PATH (a test hook, tests/py/test_hang_dump.py):
 * rank RANK, once STEPS steps are complete, blocks in read(2) of PATH, a
 * FIFO, until one byte is written to it: a rank stuck in a read outside
 * any collective, for the silence dump. O_RDWR: opening a FIFO so never
 * waits for a writer, and the read waits for a byte. */
__attribute__((noinline)) static void stall_in_read_for_test(const trainer *t, int64_t done) {
    const char *env = getenv("WEFT_TEST_STALL_READ");
    int rank, off = 0;
    long long steps;
    if (!env || sscanf(env, "%d:%lld:%n", &rank, &steps, &off) != 2 || !off) return;
    if (rank != t->rank || steps != done) return;
    int fd = open(env + off, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        WF_WARN("WEFT_TEST_STALL_READ: %s: %s", env + off, strerror(errno));
        return;
    }
    WF_WARN("WEFT_TEST_STALL_READ: rank %d blocks in a read of %s after step %lld (a test hook)", rank, env + off,
            steps);
    char c;
    while (read(fd, &c, 1) < 0 && errno == EINTR) {
    }
    close(fd);
}

/* ---- agreement ---- */

/* `weft trace request`: rank 0 claims the request file; every rank then
 * captures the same steps. Returns 1 when rank 0 found one. */
static int claim_trace_request(trainer *t, wf_trace_request *req) {
    memset(req, 0, sizeof *req);
    if (t->job_rank != 0 || !t->tracing || !t->tc->trace_requests) return 0;
    int found = 0;
    if (wf_trace_request_poll(t->tc->run_dir, req, &found) != WF_OK) {
        WF_WARN("trace: %s", wf_error_msg());
        wf_error_clear();
        return 0;
    }
    return found;
}

/* What one rank saw, all do, at this same step. `roll` and stop_at are the
 * same on every rank already (the loss and the gradient norm are). */
static wf_status agree(trainer *t, int64_t done, run_control *rc) {
    uint32_t flags = (rc->save_file ? WF__TRAIN_AGREE_SAVE : 0u) | (rc->stop_file ? WF__TRAIN_AGREE_STOP : 0u) |
                     (rc->dump_file ? WF__TRAIN_AGREE_DUMP : 0u) |
                     (rc->sig ? WF__TRAIN_AGREE_SIGNAL : 0u) | (rc->mem_trip ? WF__TRAIN_AGREE_MEMORY : 0u) |
                     (rc->sig == SIGUSR1 ? WF__TRAIN_AGREE_USR1 : 0u) |
                     (t->writer && wf_ckpt_writer_busy(t->writer) ? WF__TRAIN_AGREE_CKPT_BUSY : 0u);
    wf_trace_request req;
    if (claim_trace_request(t, &req)) flags |= WF__TRAIN_AGREE_TRACE;
    WF_TRY(wf_comm_agree(t->job, &flags, "agree"));
    if (flags & WF__TRAIN_AGREE_TRACE) {
        WF_TRY(wf_comm_broadcast(t->job, &req, sizeof req, 0, "trace request"));
        req.id[sizeof req.id - 1] = '\0';
        WF_TRY(wf_trace_capture_request(&req));
        if (t->job_rank == 0)
            WF_INFO("trace: request %s: every rank captures %lld steps from step %lld", req.id, (long long)req.steps,
                    (long long)done + 1);
    }
    /* An asynchronous save whose data files are all written is committed
     * now, by every rank (a no-op when none is pending). Its failure (the
     * same on every rank) is in its figures: the step's report of saves
     * warns, and training goes on. */
    if (t->writer && !(flags & WF__TRAIN_AGREE_CKPT_BUSY)) (void)wf_ckpt_writer_commit(t->writer, NULL);
    rc->save_file = (flags & WF__TRAIN_AGREE_SAVE) != 0;
    rc->stop_file = (flags & WF__TRAIN_AGREE_STOP) != 0;
    rc->dump_file = (flags & WF__TRAIN_AGREE_DUMP) != 0;
    rc->sig = (flags & WF__TRAIN_AGREE_SIGNAL) ? ((flags & WF__TRAIN_AGREE_USR1) ? SIGUSR1 : SIGTERM) : 0;
    if ((flags & WF__TRAIN_AGREE_MEMORY) && !rc->mem_trip)
        snprintf(rc->mem_msg, sizeof rc->mem_msg, "another rank's memory limit");
    rc->mem_trip = (flags & WF__TRAIN_AGREE_MEMORY) != 0;
    return WF_OK;
}

wf_status wf__train_control(trainer *t, int64_t done, int roll, run_control *rc) {
    memset(rc, 0, sizeof *rc);
    wf_stackdump_progress(done); /* a step completed: the silence clock restarts */
    stall_in_read_for_test(t, done);
    /* After a step that is rolled back nothing is decided: that step's
     * state is thrown away. */
    if (!roll) {
        wf_host_mem hm;
        rc->mem_trip = wf_host_mem_read(&hm) == WF_OK &&
                       wf_mem_watchdog_check(&t->mem_limits, &hm, rc->mem_msg, sizeof rc->mem_msg);
        wf_error_clear();
        rc->save_file = access(t->save_path, F_OK) == 0;
        rc->stop_file = access(t->stop_path, F_OK) == 0;
        char dump[4200];
        dump_path(t, dump, sizeof dump);
        rc->dump_file = access(dump, F_OK) == 0;
        rc->sig = g_stop_signal;
        rc->stop_at = t->tc->ckpt_stop_at > 0 && done == t->tc->ckpt_stop_at;
    }
    if (t->job_world > 1) WF_TRY(agree(t, done, rc)); /* the whole job: every tp rank too */
    if (rc->dump_file) dump_on_request(t, done);
    return WF_OK;
}

int wf__train_stopping(const trainer *t, const run_control *rc, int64_t done) {
    return done != t->tc->steps && (rc->stop_file || rc->sig || rc->stop_at || rc->mem_trip);
}

void wf__train_stopped(const trainer *t, const run_control *rc, int64_t done, wf_train_result *res) {
    const wf_train_config *tc = t->tc;
    if (t->tp.size > 1 && t->job_rank == 0)
        WF_WARN("dist.tp = %d: the state of step %lld was not saved (no checkpoints with tensor parallelism yet): "
                "a rerun starts over",
                t->tp.size, (long long)done);
    else if (t->tp.size <= 1 && t->good_step != done && t->job_rank == 0) {
        char good[4200];
        WF_WARN("the state of step %lld was not saved (%s): a rerun resumes from the last good checkpoint, %s",
                (long long)done, t->save_error, wf__train_last_good(t, good, sizeof good));
    }
    if (rc->stop_file) {
        res->stop_file = 1;
        WF_INFO("%s exists: stopped after step %lld of %lld (remove it and rerun to continue)", t->stop_path,
                (long long)done, (long long)tc->steps);
    } else if (!rc->sig && !rc->stop_at) {
        res->requeue = res->memory = 1;
        WF_WARN("memory watchdog: %s; saved and stopped after step %lld of %lld; exiting with status %d "
                "(rerun the same command to resume once memory is free, or raise the memory.* limits)",
                rc->mem_msg, (long long)done, (long long)tc->steps, WF_TRAIN_EXIT_REQUEUE);
    } else {
        res->requeue = 1;
        WF_INFO("%s: stopped after step %lld of %lld; exiting with status %d so that the job is requeued "
                "(rerun the same command to resume)",
                rc->sig == SIGTERM ? "SIGTERM" : rc->sig == SIGUSR1 ? "SIGUSR1" : "ckpt.stop_at", (long long)done,
                (long long)tc->steps, WF_TRAIN_EXIT_REQUEUE);
    }
}

wf_status wf__train_agree_setup(trainer *t, wf_status s, int *setup_failed) {
    *setup_failed = 0;
    if (t->job_world <= 1) return s;
    /* Every rank gets here, failed or not: the ranks agree, so that a
     * config error (usually the same on all) ends every rank normally,
     * with its message, and no rank waits for one that left. Also orders
     * rank 0's tidying of the checkpoint folder before the others read
     * it. */
    wf_error_keep mine = WF_ERROR_KEEP_INIT;
    wf_error_keep_note(&mine, s);
    uint32_t flags = s != WF_OK ? WF__TRAIN_AGREE_ERROR : 0u;
    wf_status a = wf_comm_agree(t->job, &flags, "setup");
    if (s != WF_OK) s = wf_error_keep_restore(&mine);
    else if (a != WF_OK) s = a;
    else if (flags & WF__TRAIN_AGREE_ERROR)
        s = wf_error(WF_ERR_CONFIG, "another rank failed to set up the run (its log says why)");
    *setup_failed = s != WF_OK && a == WF_OK;
    return s;
}
