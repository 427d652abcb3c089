/* `weft train`: parses the training config (TOML + overrides) and runs the
 * trainer. The option table lives in the library (wf_train_spec). */
#include <stdio.h>

#include "commands.h"
#include "weft/train.h"
#include "weft/weft.h"

int wf_cmd_train(int argc, char **argv) {
    const wf_cmd_spec *spec = wf_train_spec();
    wf_train_config tc = {0};
    wf_strs pos;
    int done, rc = wf_tool_parse(spec, &tc, argc, argv, &pos, &done);
    if (!done) rc = wf_train_run(&tc) == WF_OK ? 0 : wf_tool_fail(spec->name);
    wf_opts_free(spec, &tc);
    wf_opts_free_positional(&pos);
    return rc;
}
