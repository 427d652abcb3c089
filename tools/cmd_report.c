/* `weft report RUN_DIR`: one self-contained HTML page with the plots of a
 * run (loss, validation loss, learning rate, gradient norm, tokens/s, MFU,
 * memory, step-time split, spikes), made from RUN_DIR/metrics.jsonl and
 * RUN_DIR/run.json, and per-rank tables and plots from
 * RUN_DIR/ranks/rank-NNNNN/metrics.jsonl when they exist, and the
 * evaluations of RUN_DIR/eval.jsonl (weft eval --watch). The drawing is
 * wf_report_write's (src/obs). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/metrics.h"
#include "weft/report.h"
#include "weft/weft.h"

typedef struct {
    char *output;
} report_opts;

static const wf_opt report_opt_table[] = {
    {"output", NULL, WF_OPT_STR, offsetof(report_opts, output), NULL, WF_NO_RANGE,
     "HTML file to write (default: RUN_DIR/report.html)"},
};

static const wf_cmd_spec report_spec = {
    "report",
    "weft report RUN_DIR [OTHER_RUN_DIR ...] [--output FILE]",
    "Writes one self-contained HTML page (inline SVG, no scripts, no external files) with the plots of a "
    "training run: loss and validation loss with the loss spikes marked, learning rate, gradient norm, "
    "tokens/s, MFU, memory, and the step time split into data, forward+backward, optimizer and "
    "checkpoint; plus the run's reproducibility record. Reads RUN_DIR/metrics.jsonl and RUN_DIR/run.json. "
    "When metrics.all_ranks made every rank write RUN_DIR/ranks/rank-NNNNN/metrics.jsonl, adds a Ranks section: "
    "each rank's median step, data, forward+backward and communication times, peak RSS and distance from the "
    "fastest rank (the straggler flagged), and plots with a line per rank. With RUN_DIR/eval.jsonl (weft eval "
    "--watch), each dataset's evaluation loss on the loss plot and an Evaluation section (loss and bits per byte "
    "per dataset). Other run directories after RUN_DIR (up to 7) add a Comparison section: every run's training "
    "and validation loss by step on one plot each, and a table of each run's final losses and the first step at "
    "which its validation loss reached RUN_DIR's final one (an optimizer or schedule against another).",
    report_opt_table,
    sizeof report_opt_table / sizeof *report_opt_table,
    1,
    8,
    0,
};

static int report_main(void *opts, const wf_strs *pos) {
    const report_opts *o = opts;
    const char *dir = pos->items[0];
    char *def = NULL;
    const char *out = o->output;
    if (!out) {
        size_t len = strlen(dir) + 16;
        def = malloc(len);
        if (def) snprintf(def, len, "%s/report.html", dir);
        out = def;
    }
    int rc = 0;
    if (!out) {
        wf_error(WF_ERR_NOMEM, "out of memory");
        rc = wf_tool_fail(report_spec.name);
    } else if (wf_report_write_compare(dir, (const char *const *)pos->items + 1, (int)pos->n - 1, out) != WF_OK) {
        rc = wf_tool_fail(report_spec.name);
    } else {
        printf("wrote %s\n", out);
    }
    free(def);
    return rc;
}

int wf_cmd_report(int argc, char **argv) {
    report_opts o;
    return wf_tool_run(&report_spec, &o, sizeof o, argc, argv, report_main);
}
