/* `weft trace request` and `weft trace analyze`: ask a running job for a
 * capture of its next steps, and analyse a directory of per-rank traces
 * (temporal breakdown, idle time, top ops, op durations across ranks,
 * communication/computation overlap, stragglers) as HTA does. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "weft/fileio.h"
#include "weft/trace.h"
#include "weft/trace_analyze.h"
#include "weft/weft.h"

/* ---- weft trace request ------------------------------------------------------ */

typedef struct {
    int64_t steps;
    double wait;
} request_opts;

static const wf_opt request_opt_table[] = {
    {"steps", NULL, WF_OPT_INT, offsetof(request_opts, steps), "3", 1, 1000000,
     "steps to capture, from the job's next step"},
    {"wait", NULL, WF_OPT_FLOAT, offsetof(request_opts, wait), "0", 0, 86400,
     "wait up to this many seconds for the job to claim the request (0: return at once)"},
};

static const wf_cmd_spec request_spec = {
    "trace request",
    "weft trace request RUN_DIR [--steps N] [--wait SECONDS]",
    "Asks a running `weft train` to capture its next N steps, without a restart: writes "
    "RUN_DIR/" WF_TRACE_REQUEST_FILE " atomically, which the job reads (and removes) at its next "
    "step. The traces appear in RUN_DIR/traces/step-<first step>/, one file per rank.",
    request_opt_table,
    sizeof request_opt_table / sizeof *request_opt_table,
    1,
    1,
    0,
};

static int request_main(void *opts, const wf_strs *pos) {
    const request_opts *o = opts;
    const char *run_dir = pos->items[0];
    wf_trace_request req;
    if (wf_trace_request_write(run_dir, o->steps, &req) != WF_OK) return wf_tool_fail(request_spec.name);
    printf("requested a capture of %" PRId64 " steps (request %s) in %s/%s\n", req.steps, req.id, run_dir,
           WF_TRACE_REQUEST_FILE);
    if (o->wait <= 0) return 0;
    char path[WF_PATH_MAX];
    if (wf_rundir_path(path, sizeof path, run_dir, WF_RUN_TRACE_REQUEST) != WF_OK)
        return wf_tool_fail(request_spec.name);
    double until = wf_time_now() + o->wait;
    while (wf_path_exists(path) && wf_time_now() < until) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (wf_path_exists(path)) {
        fprintf(stderr, "weft trace request: error: no job claimed the request within %.0f s: is `weft train` "
                "running with run directory %s and trace requests enabled? (the request stays pending)\n",
                o->wait, run_dir);
        return 1;
    }
    printf("claimed: traces will appear in %s/traces/step-<first step>/\n", run_dir);
    return 0;
}

int wf_cmd_trace_request(int argc, char **argv) {
    request_opts o;
    return wf_tool_run(&request_spec, &o, sizeof o, argc, argv, request_main);
}

/* ---- weft trace analyze ----------------------------------------------------- */

typedef struct {
    int json, skip_last_step, hta_rounding;
    int64_t top, stragglers;
    double kernel_wait_us;
} analyze_opts;

static const wf_opt analyze_opt_table[] = {
    {"json", NULL, WF_OPT_BOOL, offsetof(analyze_opts, json), "false", WF_NO_RANGE,
     "print one JSON document instead of tables"},
    {"top", NULL, WF_OPT_INT, offsetof(analyze_opts, top), "10", 0, 1000000,
     "ops listed per rank and across ranks (0 with --json: all)"},
    {"skip_last_step", "skip-last-step", WF_OPT_BOOL, offsetof(analyze_opts, skip_last_step), "false", WF_NO_RANGE,
     "leave out the last ProfilerStep of each rank, as HTA does by default"},
    {"hta_rounding", "hta-rounding", WF_OPT_BOOL, offsetof(analyze_opts, hta_rounding), "false", WF_NO_RANGE,
     "round events to whole microseconds as HTA does by default (start up, end down)"},
    {"kernel_wait_us", "kernel-wait-us", WF_OPT_FLOAT, offsetof(analyze_opts, kernel_wait_us), "30", 0, 1e9,
     "idle gaps between kernels shorter than this are kernel wait (HTA's consecutive_kernel_delay)"},
    {"stragglers", NULL, WF_OPT_INT, offsetof(analyze_opts, stragglers), "1", 1, 1000000,
     "straggler candidates to name (HTA's num_candidates)"},
};

static const wf_cmd_spec analyze_spec = {
    "trace analyze",
    "weft trace analyze DIR [--json] [--top N] [--skip-last-step] [--hta-rounding]",
    "Analyses the per-rank Chrome traces in DIR (a capture directory such as "
    "RUN_DIR/traces/step-000100, or RUN_DIR/traces for its newest capture), streaming each "
    "file: per rank, the temporal breakdown (compute, communication, memory and I/O, data "
    "wait, idle), idle time by cause, the top ops by time, op durations across ranks, "
    "communication/computation overlap, and stragglers, computed as Holistic Trace Analysis "
    "computes them. Reads weft's traces and PyTorch profiler (Kineto) traces.",
    analyze_opt_table,
    sizeof analyze_opt_table / sizeof *analyze_opt_table,
    1,
    1,
    0,
};

static int analyze_main(void *opts, const wf_strs *pos) {
    const analyze_opts *o = opts;
    wf_trace_analyze_opts ao = {
        .top = (int)o->top, .skip_last_step = o->skip_last_step, .kernel_wait_us = o->kernel_wait_us,
        .stragglers = (int)o->stragglers, .hta_rounding = o->hta_rounding,
    };
    wf_trace_analysis a;
    if (wf_trace_analyze(pos->items[0], &ao, &a) != WF_OK) return wf_tool_fail(analyze_spec.name);
    int rc = 0;
    if (o->json) {
        if (wf_trace_analysis_write_json(&a, (int)o->top, stdout) != WF_OK) rc = wf_tool_fail(analyze_spec.name);
    } else {
        wf_trace_analysis_print(&a, (int)o->top, stdout);
    }
    wf_trace_analysis_free(&a);
    return rc;
}

int wf_cmd_trace_analyze(int argc, char **argv) {
    analyze_opts o;
    return wf_tool_run(&analyze_spec, &o, sizeof o, argc, argv, analyze_main);
}
