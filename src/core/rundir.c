/* The names of a run directory's entries (weft/rundir.h), and their paths. */
#include "weft/rundir.h"

#include <string.h>

#include "weft/dirlock.h"
#include "weft/fileio.h"
#include "weft/trace.h"

static const char *const names_[WF_RUN_N_ENTRIES] = {
    [WF_RUN_CHECKPOINTS] = "checkpoints",
    [WF_RUN_MODEL] = "model.safetensors",
    [WF_RUN_CONFIG] = "config.toml",
    [WF_RUN_RECORD] = "run.json",
    [WF_RUN_GIT_DIFF] = "git.diff",
    [WF_RUN_METRICS] = "metrics.jsonl",
    [WF_RUN_TB] = "tb",
    [WF_RUN_RANKS] = "ranks",
    [WF_RUN_EVAL_JSONL] = "eval.jsonl",
    [WF_RUN_EVAL] = "eval",
    [WF_RUN_TRACES] = "traces",
    [WF_RUN_TRACE_REQUEST] = WF_TRACE_REQUEST_FILE,
    [WF_RUN_SAVE] = "SAVE",
    [WF_RUN_STOP] = "STOP",
    [WF_RUN_DUMP] = "DUMP",
    [WF_RUN_HANG] = "hang",
    [WF_RUN_NONFINITE] = "nonfinite",
    [WF_RUN_LOCK] = WF_DIRLOCK_FILE,
};

wf_status wf_rundir_check(const char *run_dir, const char *key) {
    size_t n = run_dir ? strlen(run_dir) : 0;
    if (n > WF_RUNDIR_MAX)
        return wf_error(WF_ERR_RANGE,
                        "%s = %s: the directory's path is %zu bytes; weft writes under one of at most %d (the "
                        "paths under it must stay within %d)",
                        key, run_dir, n, WF_RUNDIR_MAX, WF_PATH_MAX - 1);
    return WF_OK;
}

const char *wf_rundir_name(wf_run_entry e) {
    return (unsigned)e < WF_RUN_N_ENTRIES ? names_[e] : "?";
}

wf_status wf_rundir_path(char *buf, size_t size, const char *run_dir, wf_run_entry e) {
    if ((unsigned)e >= WF_RUN_N_ENTRIES)
        return wf_error(WF_ERR_INVALID, "run directory: unknown entry %d", (int)e);
    return wf_path_join(buf, size, run_dir, names_[e], NULL);
}
