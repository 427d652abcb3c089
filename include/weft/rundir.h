/* weft: the layout of a run directory, in one place. Every file and folder
 * that `weft train`, `weft eval --watch`, `weft trace request`, `weft
 * report` and the run-control files put in or read from RUN_DIR is named
 * here, and docs/formats/run-dir.md mirrors the table (a test compares
 * them). Paths are built with wf_rundir_path, which refuses a path longer
 * than the buffer instead of cutting it (a cut path is another path). */
#ifndef WEFT_RUNDIR_H
#define WEFT_RUNDIR_H

#include <stddef.h>

#include "weft/fileio.h"
#include "weft/status.h"

typedef enum {
    WF_RUN_CHECKPOINTS,   /* checkpoints/: step-NNNNNNN/ checkpoint folders */
    WF_RUN_MODEL,         /* model.safetensors: the final weights */
    WF_RUN_CONFIG,        /* config.toml: the effective configuration */
    WF_RUN_RECORD,        /* run.json: environment, build, arena */
    WF_RUN_GIT_DIFF,      /* git.diff: uncommitted changes of the source */
    WF_RUN_METRICS,       /* metrics.jsonl: one object a step */
    WF_RUN_TB,            /* tb/: TensorBoard events */
    WF_RUN_RANKS,         /* ranks/: rank-NNNNN/ metrics of ranks > 0 */
    WF_RUN_EVAL_JSONL,    /* eval.jsonl: `weft eval --watch` results */
    WF_RUN_EVAL,          /* eval/: `weft eval --watch`'s own state */
    WF_RUN_TRACES,        /* traces/: profiling captures */
    WF_RUN_TRACE_REQUEST, /* trace-request.json: `weft trace request` */
    WF_RUN_SAVE,          /* SAVE: save a checkpoint now (removed when done) */
    WF_RUN_STOP,          /* STOP: save and stop */
    WF_RUN_DUMP,          /* DUMP: write every rank's stacks */
    WF_RUN_HANG,          /* hang/: rank-NNNNN.txt stack dumps */
    WF_RUN_NONFINITE,     /* nonfinite/: reports of non-finite steps */
    WF_RUN_LOCK,          /* the directory lock (weft/dirlock.h) */
    WF_RUN_N_ENTRIES
} wf_run_entry;

/* The longest directory weft writes under (a run directory, `weft prep`'s
 * and `weft tokenize`'s output, an export): WF_PATH_MAX less 256 bytes for
 * what goes under it (checkpoints/step-NNNNNNN/data-..., the TensorBoard
 * event file's name, _prep/lsh/...), so that no path under it is too long. */
#define WF_RUNDIR_MAX (WF_PATH_MAX - 256)

/* WF_ERR_RANGE, naming `key` (the option that gave it) and the lengths,
 * when run_dir (or another directory weft writes under) is longer than
 * WF_RUNDIR_MAX bytes. Commands check it before anything is written, so
 * that a run never stops halfway for a path. */
wf_status wf_rundir_check(const char *run_dir, const char *key);

/* The entry's name inside the run directory ("checkpoints", "SAVE"). */
const char *wf_rundir_name(wf_run_entry e);

/* run_dir + "/" + the entry's name into buf (size bytes); WF_ERR_RANGE,
 * naming the path and the bytes it needs, when it does not fit (buf is then
 * ""). */
wf_status wf_rundir_path(char *buf, size_t size, const char *run_dir, wf_run_entry e);

#endif
