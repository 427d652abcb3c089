/* `weft train`: parses the training config (TOML + overrides) and runs the
 * trainer. The option table lives in the library (wf_train_spec). Exit
 * status: 0 finished (or stopped by a STOP file), 1 error, 75 stopped by
 * SIGTERM/SIGUSR1/ckpt.stop_at or the memory watchdog after a save
 * (requeue). */
#include <stdio.h>

#include "commands.h"
#include "weft/train.h"
#include "weft/weft.h"

int wf_cmd_train(int argc, char **argv) {
    const wf_cmd_spec *spec = wf_train_spec();
    wf_train_config tc = {0};
    wf_strs pos;
    int done, rc = wf_tool_parse(spec, &tc, argc, argv, &pos, &done);
    if (!done) {
        /* 75 (EX_TEMPFAIL) after a preemption: the scheduler may requeue. */
        /* run.json records the whole command line: main() passed
         * argv + 2, after "weft train", of its own array. */
        tc.argc = argc + 2;
        tc.argv = argv - 2;
        wf_train_result res;
        if (wf_train_execute(&tc, &res) != WF_OK) rc = wf_tool_fail(spec->name);
        else rc = res.requeue ? WF_TRAIN_EXIT_REQUEUE : 0;
    }
    wf_opts_free(spec, &tc);
    wf_opts_free_positional(&pos);
    return rc;
}
