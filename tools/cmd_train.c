/* `weft train`: parses the training config (TOML + overrides), creates the
 * job's communicator and runs the trainer. The option table lives in the
 * library (wf_train_spec). Exit status: 0 finished (or stopped by a STOP
 * file), 1 error, 75 stopped by SIGTERM/SIGUSR1/ckpt.stop_at or the memory
 * watchdog after a save (requeue). With several ranks, a rank that fails
 * mid-run ends the whole job (MPI_Abort), since the others may be blocked
 * in a collective it will never join. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "weft/train.h"
#include "weft/weft.h"

static int train_main(void *opts, const wf_strs *pos) {
    (void)pos;
    wf_train_config *tc = opts;
    tc->argv = wf_tool_argv(&tc->argc); /* run.json records the whole command line */
    /* The communicator first: MPI_Init before any thread starts. */
    wf_comm *comm = NULL;
    if (wf_train_comm_create(tc, &comm) != WF_OK) return wf_tool_fail(wf_train_spec()->name);
    wf_train_result res;
    wf_status s = wf_train_execute(tc, comm, &res);
    /* The run is over and its handlers are gone: a SIGUSR1 now (a
     * scheduler's "time limit near", arriving while MPI finalizes) has
     * nothing left to save, and must not turn a finished run into a death
     * by signal that a job script requeues. The test hook sends one here. */
    signal(SIGUSR1, SIG_IGN);
    if (getenv("WEFT_TEST_LATE_SIGNAL")) raise(SIGUSR1);
    int rc;
    if (s != WF_OK) {
        rc = wf_tool_fail(wf_train_spec()->name);
        if (res.abort_job) {
            WF_ERROR("train: ending all %d ranks (rank %d failed; the others may be waiting for it)",
                     wf_comm_size(comm), wf_comm_rank(comm));
            wf_comm_abort(comm, 1);
        }
    } else {
        /* 75 (EX_TEMPFAIL) after a preemption: the scheduler may requeue. */
        rc = res.requeue ? WF_TRAIN_EXIT_REQUEUE : 0;
    }
    wf_comm_destroy(comm);
    return rc;
}

int wf_cmd_train(int argc, char **argv) {
    wf_train_config tc;
    return wf_tool_run(wf_train_spec(), &tc, sizeof tc, argc, argv, train_main);
}
