/* Run control of the trainer (train_impl.h): what is decided between two
 * steps, outside the numbers of the step itself. SIGTERM and SIGUSR1, the
 * run directory's SAVE and STOP files, ckpt.stop_at, the host-memory
 * watchdog (weft/runctl.h), and with several ranks one agreement that makes
 * every rank take the same decision at the same step, carries rank 0's
 * claim of a `weft trace request` to every rank, and tells when an
 * asynchronous save may be committed. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train/train_impl.h"
#include "weft/log.h"
#include "weft/trace.h"

/* ---- signals ---- */

/* The signal that asked the run to stop (SIGTERM, SIGUSR1), or 0. A signal
 * handler can only reach global state; this is the one global of the
 * trainer, set by the handler and read between steps. */
static volatile sig_atomic_t g_stop_signal;
static struct sigaction g_old_term, g_old_usr1, g_old_xfsz;

static void on_stop_signal(int sig) { g_stop_signal = sig; }

void wf__train_signals_install(void) {
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
}

void wf__train_signals_restore(void) {
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGUSR1, &g_old_usr1, NULL);
    sigaction(SIGXFSZ, &g_old_xfsz, NULL);
}

/* ---- agreement ---- */

/* `weft trace request`: rank 0 claims the request file; every rank then
 * captures the same steps. Returns 1 when rank 0 found one. */
static int claim_trace_request(trainer *t, wf_trace_request *req) {
    memset(req, 0, sizeof *req);
    if (t->rank != 0 || !t->tracing || !t->tc->trace_requests) return 0;
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
                     (rc->sig ? WF__TRAIN_AGREE_SIGNAL : 0u) | (rc->mem_trip ? WF__TRAIN_AGREE_MEMORY : 0u) |
                     (rc->sig == SIGUSR1 ? WF__TRAIN_AGREE_USR1 : 0u) |
                     (wf_ckpt_writer_busy(t->writer) ? WF__TRAIN_AGREE_CKPT_BUSY : 0u);
    wf_trace_request req;
    if (claim_trace_request(t, &req)) flags |= WF__TRAIN_AGREE_TRACE;
    WF_TRY(wf_comm_agree(t->comm, &flags, "agree"));
    if (flags & WF__TRAIN_AGREE_TRACE) {
        WF_TRY(wf_comm_broadcast(t->comm, &req, sizeof req, 0, "trace request"));
        req.id[sizeof req.id - 1] = '\0';
        WF_TRY(wf_trace_capture_request(&req));
        if (t->rank == 0)
            WF_INFO("trace: request %s: every rank captures %lld steps from step %lld", req.id, (long long)req.steps,
                    (long long)done + 1);
    }
    /* An asynchronous save whose data files are all written is committed
     * now, by every rank (a no-op when none is pending). Its failure (the
     * same on every rank) is in its figures: the step's report of saves
     * warns, and training goes on. */
    if (!(flags & WF__TRAIN_AGREE_CKPT_BUSY)) (void)wf_ckpt_writer_commit(t->writer, NULL);
    rc->save_file = (flags & WF__TRAIN_AGREE_SAVE) != 0;
    rc->stop_file = (flags & WF__TRAIN_AGREE_STOP) != 0;
    rc->sig = (flags & WF__TRAIN_AGREE_SIGNAL) ? ((flags & WF__TRAIN_AGREE_USR1) ? SIGUSR1 : SIGTERM) : 0;
    if ((flags & WF__TRAIN_AGREE_MEMORY) && !rc->mem_trip)
        snprintf(rc->mem_msg, sizeof rc->mem_msg, "another rank's memory limit");
    rc->mem_trip = (flags & WF__TRAIN_AGREE_MEMORY) != 0;
    return WF_OK;
}

wf_status wf__train_control(trainer *t, int64_t done, int roll, run_control *rc) {
    memset(rc, 0, sizeof *rc);
    /* After a step that is rolled back nothing is decided: that step's
     * state is thrown away. */
    if (!roll) {
        wf_host_mem hm;
        rc->mem_trip = wf_host_mem_read(&hm) == WF_OK &&
                       wf_mem_watchdog_check(&t->mem_limits, &hm, rc->mem_msg, sizeof rc->mem_msg);
        wf_error_clear();
        rc->save_file = access(t->save_path, F_OK) == 0;
        rc->stop_file = access(t->stop_path, F_OK) == 0;
        rc->sig = g_stop_signal;
        rc->stop_at = t->tc->ckpt_stop_at > 0 && done == t->tc->ckpt_stop_at;
    }
    if (t->world > 1) WF_TRY(agree(t, done, rc));
    return WF_OK;
}

int wf__train_stopping(const trainer *t, const run_control *rc, int64_t done) {
    return done != t->tc->steps && (rc->stop_file || rc->sig || rc->stop_at || rc->mem_trip);
}

void wf__train_stopped(const trainer *t, const run_control *rc, int64_t done, wf_train_result *res) {
    const wf_train_config *tc = t->tc;
    if (t->good_step != done && t->rank == 0) {
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
    if (t->world == 1) return s;
    /* Every rank gets here, failed or not: the ranks agree, so that a
     * config error (usually the same on all) ends every rank normally,
     * with its message, and no rank waits for one that left. Also orders
     * rank 0's tidying of the checkpoint folder before the others read
     * it. */
    wf_error_keep mine = WF_ERROR_KEEP_INIT;
    wf_error_keep_note(&mine, s);
    uint32_t flags = s != WF_OK ? WF__TRAIN_AGREE_ERROR : 0u;
    wf_status a = wf_comm_agree(t->comm, &flags, "setup");
    if (s != WF_OK) s = wf_error_keep_restore(&mine);
    else if (a != WF_OK) s = a;
    else if (flags & WF__TRAIN_AGREE_ERROR)
        s = wf_error(WF_ERR_CONFIG, "another rank failed to set up the run (its log says why)");
    *setup_failed = s != WF_OK && a == WF_OK;
    return s;
}
